"""Reading :mod:`gputriage.logscan` inputs: plain files and streams (stdin, pipes, FIFOs,
opened by :func:`gputriage.inputs.open_input`) read into reused buffers, gzip / xz /
bzip2 decompressed up to the stream budget, all cut into line-aligned spans."""

from __future__ import annotations

import bz2
import lzma
import sys
import zlib
from collections.abc import Iterator

from gputriage import logscan as _pkg
from gputriage.inputs import limit

# The tunables (``BLOCK``, ``LONG_LINE``, ``_workers``, the libc functions) are read
# through the package at call time, so that setting them on ``gputriage.logscan``
# (the tests do) takes effect here as it did when this was one module.

# --- reading -----------------------------------------------------------------------------

class _Input:
    """One input's bytes as a stream of line-aligned spans (buffer, lo, hi)."""

    def __init__(self, name: str, problems: list[str]) -> None:
        self.name = name
        self.problems = problems
        self.nbytes = 0
        self.last_byte: bytes | bytearray = b"\n"

    def spans(self, chunks: Iterator[bytes | bytearray]
              ) -> Iterator[tuple[bytes | bytearray, int, int]]:
        tail: bytes | bytearray = b""
        for chunk in chunks:
            if not chunk:
                continue
            self.nbytes += len(chunk)
            self.last_byte = chunk[-1:]
            first = chunk.find(b"\n")
            if first < 0:
                tail += chunk
                if len(tail) >= _pkg.LONG_LINE:
                    yield tail, 0, len(tail)
                    tail = b""
                continue
            start = 0
            if tail:
                head = tail + chunk[:first + 1]
                yield head, 0, len(head)
                start = first + 1
            last = chunk.rfind(b"\n") + 1
            while start < last:  # cut big chunks (one text) into blocks
                stop = (last if last - start <= _pkg.BLOCK
                        else chunk.find(b"\n", start + _pkg.BLOCK) + 1)
                stop = stop if stop > 0 else last
                yield chunk, start, stop
                start = stop
            tail = chunk[last:]
        if tail:
            yield tail, 0, len(tail)


class _Buffers:
    """Reusable read buffers: a fresh 8 MiB object per read costs page faults (and an
    allocation) that reusing one avoids. A buffer is reused only when nothing but the
    pool refers to it any more (CPython reference counts); else a new one is made."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.ring: list[bytearray] = []
        self.next = 0

    def get(self) -> bytearray:
        ring = self.ring
        counted = hasattr(sys, "getrefcount")
        for i in range(len(ring)):
            j = (self.next + i) % len(ring)
            if counted and sys.getrefcount(ring[j]) <= 2 and len(ring[j]) == self.size:
                self.next = j + 1
                return ring[j]
        buf = bytearray(self.size)
        if len(ring) < 2 * _pkg._workers() + 4:
            ring.append(buf)
        else:
            ring[self.next % len(ring)] = buf
            self.next += 1
        return buf


def _read_block(fh, bufs: _Buffers) -> bytearray:  # noqa: ANN001
    """One ``fh.read(BLOCK)``'s bytes, read into a reused buffer."""
    buf = bufs.get()
    n = fh.readinto(buf) or 0
    if n < len(buf):
        return bytearray(memoryview(buf)[:n])
    return buf


def _file_chunks(fh, name: str, problems: list[str]) -> Iterator[bytes | bytearray]:  # noqa: ANN001
    bufs = _Buffers(_pkg.BLOCK)
    head = _read_block(fh, bufs)
    kind = _compression(head)
    if kind is None:
        chunk = head
        while chunk:
            yield chunk
            del chunk  # let the pool see the buffer free again once its spans are done
            try:
                chunk = _read_block(fh, bufs)
            except OSError as exc:
                problems.append(f"{name}: read error ({exc.strerror or exc}); kept what was read")
                return
        return
    yield from limit(_decompressed(kind, bytes(head), fh, name, problems), name, problems)


def _compression(head: bytes | bytearray) -> str | None:
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if head[:3] == b"BZh" and head[3:4].isdigit():
        return "bzip2"
    return None


def _decompressor(kind: str):  # noqa: ANN202
    if kind == "gzip":
        return zlib.decompressobj(wbits=31)
    if kind == "xz":
        return lzma.LZMADecompressor()
    return bz2.BZ2Decompressor()


def _decompressed(kind: str, head: bytes, fh, name: str,  # noqa: ANN001
                  problems: list[str]) -> Iterator[bytes]:
    """Decompressed blocks; a truncated or corrupt stream ends with a problem noted."""
    d = _decompressor(kind)
    data = head
    total = 0
    pending: list[bytes] = []
    size = 0
    try:
        while True:
            if d.eof:  # a member ended: another may follow (concatenated gzip / xz)
                data = (d.unused_data + data).lstrip(b"\x00") or fh.read(1 << 20)
                if not data:
                    break
                d = _decompressor(kind)
            if kind != "gzip" and not d.needs_input:
                out = d.decompress(b"", _pkg.BLOCK)
            else:
                if not data:
                    data = fh.read(1 << 20)
                    if not data:
                        break
                out = d.decompress(data, _pkg.BLOCK)
                data = d.unconsumed_tail if kind == "gzip" else b""
            if out:
                pending.append(out)
                size += len(out)
                total += len(out)
                if size >= _pkg.BLOCK:
                    yield b"".join(pending)
                    pending, size = [], 0
        if not d.eof:
            problems.append(f"{name}: truncated {kind} data; read the first "
                            f"{total / (1 << 20):.1f} MiB")
    except (zlib.error, lzma.LZMAError, OSError, EOFError, ValueError) as exc:
        problems.append(f"{name}: corrupt {kind} data ({exc}); read the first "
                        f"{total / (1 << 20):.1f} MiB")
    if pending:
        yield b"".join(pending)
