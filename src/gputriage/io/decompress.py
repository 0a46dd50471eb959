"""Compressed inputs, the one place they are recognised and decompressed: every reader
of gputriage (``analyze``, ``logs``, ``nccl``, snapshot tarballs) goes through here.

gzip, xz and bzip2 are recognised by their magic bytes (:func:`compression`). A stream
(:func:`data_of`, :func:`decompressed`) is decompressed piece by piece; concatenated
members are read on and NUL padding between them skipped; data after the last member
that does not start another member is ignored with a problem noted; a truncated or
corrupt stream ends with what came out of it and a problem noted. The caller supplies
the read function (and with it what a read error means). A seekable file that a reader
walks back and forth (a tarball) is opened by :func:`seekable`; the first bytes of a
compressed head are had from :func:`peek`."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from gputriage.io.inputs import human

__all__ = ["BROKEN", "compression", "data_of", "decompressed", "peek", "seekable"]

READ = 1 << 20  # compressed bytes read at a time
_MAGIC_LEN = 6  # bytes that tell whether another member starts
# what a broken compressed stream raises, whichever its kind
BROKEN = (zlib.error, lzma.LZMAError, EOFError, ValueError)


def compression(head: bytes | bytearray) -> str | None:
    """``gzip`` / ``xz`` / ``bzip2`` when ``head`` starts a stream of that kind."""
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if head[:3] == b"BZh" and head[3:4].isdigit():
        return "bzip2"
    return None


def _decompressor(kind: str) -> Any:
    if kind == "gzip":
        return zlib.decompressobj(wbits=31)
    if kind == "xz":
        return lzma.LZMADecompressor()
    return bz2.BZ2Decompressor()


def _after_member(rest: bytes, read: Callable[[int], bytes]) -> bytes:
    """What follows a member's end, NUL padding skipped, with enough bytes to tell
    whether another member starts (empty at the end of the input)."""
    rest = rest.lstrip(b"\0")
    while len(rest) < _MAGIC_LEN:
        more = read(READ)
        if not more:
            break
        rest = (rest + more).lstrip(b"\0")
    return rest


def decompressed(kind: str, first: bytes, read: Callable[[int], bytes], name: str,
                 problems: list[str], step: int) -> Iterator[bytes]:
    """The decompressed data of a ``kind`` stream whose first bytes are ``first`` and
    whose rest ``read(n)`` returns (b"" at the end), in pieces of at most ``step``
    bytes; what went wrong is appended to ``problems``."""
    dec, data, total = _decompressor(kind), first, 0
    try:
        while True:
            if dec.eof:  # a member ended: another may follow
                data = _after_member(dec.unused_data + data, read)
                if not data:
                    return
                if compression(data) != kind:
                    problems.append(f"{name}: data after the end of the {kind} stream ignored")
                    return
                dec = _decompressor(kind)
            if kind == "gzip" or dec.needs_input:
                if not data:
                    data = read(READ)
                    if not data:
                        problems.append(f"{name}: truncated {kind} data; read the "
                                        f"{human(total)} that could be decompressed")
                        return
                out = dec.decompress(data, step)
                data = dec.unconsumed_tail if kind == "gzip" else b""
            else:
                out = dec.decompress(b"", step)
            if out:
                total += len(out)
                yield out
    except BROKEN as exc:
        problems.append(f"{name}: corrupt {kind} data ({exc}); read the {human(total)} "
                        "that could be decompressed")


def data_of(first: bytes, read: Callable[[int], bytes], name: str, problems: list[str],
            step: int) -> Iterator[bytes]:
    """The data of an input whose first bytes are ``first`` and whose rest ``read(n)``
    returns: decompressed (pieces of at most ``step`` bytes) when ``first`` starts a
    gzip, xz or bzip2 stream, else as read (``step`` bytes a read)."""
    kind = compression(first)
    if kind is not None:
        yield from decompressed(kind, first, read, name, problems, step)
        return
    while first:
        yield first
        first = read(step)


def first_pieces(blocks: Iterable[bytes], size: int) -> tuple[list[bytes], int]:
    """The pieces of ``blocks`` read until they hold ``size`` bytes (all of them when they
    hold fewer), and how many bytes they hold; an iterator goes on after them."""
    pieces: list[bytes] = []
    got = 0
    for piece in blocks:
        pieces.append(piece)
        got += len(piece)
        if got >= size:
            break
    return pieces, got


def peek(head: bytes, size: int) -> bytes:
    """The first ``size`` bytes of data that ``head`` (an input's first bytes) holds:
    decompressed as far as ``head`` goes when compressed; never raises."""
    pieces, _ = first_pieces(data_of(head, lambda _n: b"", "<head>", [], size), size)
    return b"".join(pieces)[:size]


_SEEKABLE: dict[str, Callable[[IO[bytes]], Any]] = {
    "gzip": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
    "bzip2": bz2.BZ2File, "xz": lzma.LZMAFile}


def seekable(raw: IO[bytes]) -> tuple[IO[bytes], bool]:
    """A file that reads ``raw`` (a regular file at offset 0) decompressed when it is
    compressed, seekable (a backward seek restarts the decompression), and whether it
    is."""
    kind = compression(raw.read(8))
    raw.seek(0)
    if kind is None:
        return raw, False
    opened: IO[bytes] = _SEEKABLE[kind](raw)
    return opened, True
