"""Reading :mod:`gputriage.logscan` inputs: plain files and streams (stdin, pipes, FIFOs,
opened by :func:`gputriage.io.inputs.open_input`) read into reused buffers, gzip / xz /
bzip2 decompressed (:mod:`gputriage.io.decompress`) up to the stream budget, all cut into
line-aligned spans."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from gputriage.io.decompress import compression, decompressed
from gputriage.io.inputs import limit
from gputriage.logscan.config import ScanConfig

__all__ = ["InputSpans", "ReadBuffers", "file_chunks"]

Chunk = bytes | bytearray


class InputSpans:
    """One input's bytes as a stream of line-aligned spans (buffer, lo, hi), and what
    was read of it."""

    def __init__(self, name: str, problems: list[str], config: ScanConfig) -> None:
        self.name = name
        self.problems = problems
        self.config = config
        self.nbytes = 0
        self.last_byte: Chunk = b"\n"
        self.report: Callable[[int], None] | None = None  # told ``nbytes`` as it grows

    def spans(self, chunks: Iterator[Chunk]) -> Iterator[tuple[Chunk, int, int]]:
        tail: Chunk = b""
        for chunk in chunks:
            if not chunk:
                continue
            self.nbytes += len(chunk)
            self.last_byte = chunk[-1:]
            first = chunk.find(b"\n")
            if first < 0:
                tail += chunk
                if len(tail) >= self.config.long_line:
                    yield tail, 0, len(tail)
                    tail = b""
                continue
            start = 0
            if tail:
                head = tail + chunk[:first + 1]
                yield head, 0, len(head)
                start = first + 1
            last = chunk.rfind(b"\n") + 1
            yield from self._blocks(chunk, start, last)
            tail = chunk[last:]
        if tail:
            yield tail, 0, len(tail)

    def _blocks(self, chunk: Chunk, start: int, last: int) -> Iterator[tuple[Chunk, int, int]]:
        """``chunk[start:last]`` (whole lines) cut into spans of about a block each."""
        block = self.config.block
        while start < last:
            stop = last if last - start <= block else chunk.find(b"\n", start + block) + 1
            stop = stop if stop > 0 else last
            yield chunk, start, stop
            start = stop


class ReadBuffers:
    """Reusable read buffers: a fresh 8 MiB object per read costs page faults (and an
    allocation) that reusing one avoids. A buffer is reused only when nothing but the
    pool refers to it any more (CPython reference counts); else a new one is made."""

    def __init__(self, size: int, keep: int) -> None:
        self.size = size
        self.keep = keep  # buffers the pool holds at most
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
        if len(ring) < self.keep:
            ring.append(buf)
        else:
            ring[self.next % len(ring)] = buf
            self.next += 1
        return buf

    def read(self, fh: BinaryIO) -> bytearray:
        """One ``fh.read(size)``'s bytes, read into a reused buffer."""
        buf = self.get()
        n = fh.readinto(buf) or 0  # type: ignore[attr-defined]
        if n < len(buf):
            return bytearray(memoryview(buf)[:n])
        return buf


def _reader(fh: BinaryIO, name: str, problems: list[str]) -> Callable[[int], bytes]:
    """``fh.read`` where a read error ends the input with a problem noted."""

    def read(size: int) -> bytes:
        try:
            return fh.read(size)
        except OSError as exc:
            problems.append(f"{name}: read error ({exc.strerror or exc}); kept what was read")
            return b""

    return read


def _joined(pieces: Iterable[bytes], size: int) -> Iterator[bytes]:
    """``pieces`` gathered into chunks of at least ``size`` bytes (the last one less)."""
    pending: list[bytes] = []
    held = 0
    for piece in pieces:
        pending.append(piece)
        held += len(piece)
        if held >= size:
            yield b"".join(pending)
            pending, held = [], 0
    if pending:
        yield b"".join(pending)


def file_chunks(fh: BinaryIO, name: str, problems: list[str], config: ScanConfig,
                workers: int) -> Iterator[Chunk]:
    """The (decompressed) bytes of an open input in chunks of about a block."""
    bufs = ReadBuffers(config.block, 2 * workers + 4)
    head = bufs.read(fh)
    kind = compression(head)
    if kind is not None:
        pieces = decompressed(kind, bytes(head), _reader(fh, name, problems), name, problems,
                              config.block)
        yield from limit(_joined(pieces, config.block), name, problems)
        return
    chunk = head
    while chunk:
        yield chunk
        del chunk  # let the pool see the buffer free again once its spans are done
        try:
            chunk = bufs.read(fh)
        except OSError as exc:
            problems.append(f"{name}: read error ({exc.strerror or exc}); kept what was read")
            return
