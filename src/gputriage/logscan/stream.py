"""Compressed input streams, decompressed the same way wherever gputriage streams a
file (``gputriage logs``, ``gputriage nccl``): gzip, xz and bzip2 are recognised by
their magic bytes and decompressed piece by piece; concatenated members are read on
and NUL padding between them skipped; data after the last member that does not start
another member is ignored with a problem noted; a truncated or corrupt stream ends
with what came out of it and a problem noted. The caller supplies the read function
(and with it what a read error means)."""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from gputriage.io.inputs import human

__all__ = ["compression", "decompressed"]

READ = 1 << 20  # compressed bytes read at a time
_MAGIC_LEN = 6  # bytes that tell whether another member starts


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
    except (zlib.error, lzma.LZMAError, EOFError, ValueError) as exc:
        problems.append(f"{name}: corrupt {kind} data ({exc}); read the {human(total)} "
                        "that could be decompressed")
