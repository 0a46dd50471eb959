"""Large plain files searched block by block in forked worker processes.

Counting newlines (for line numbers) holds the GIL, so threads cannot share that work;
and workers count only the short gaps between wanted lines (``ScanConfig.gap_exact``).
Each worker process reads and searches whole blocks (the same block-aligned reads as
the sequential reader, so long lines are cut at the same places) and sends back only
candidate lines, counts and the block's first and last partial lines; the main process
stitches those and parses, in file order.
"""

from __future__ import annotations

import functools
import mmap
import os
import sys
import threading
from dataclasses import dataclass
from typing import BinaryIO

from gputriage.logscan.config import ScanConfig
from gputriage.logscan.forkpool import ForkWorkers
from gputriage.logscan.lines import LineSource
from gputriage.logscan.reader import InputSpans
from gputriage.logscan.search import LineFeeder, Span, search_span

__all__ = ["Block", "block_task", "process_pool", "run_blocks"]


@dataclass
class Block:
    """What a worker found in one block-aligned read of a file."""

    size: int
    raw: bytes | None = None  # the whole block when it holds no newline
    head: bytes = b""  # up to and with the first newline
    tail: bytes = b""  # after the last newline
    inner: Span | None = None  # the lines between


_BLOCK_BUF: list[bytearray] = []


def block_task(path: str, index: int, *, anchors: tuple[bytes, ...],
               config: ScanConfig) -> Block:
    """Read block ``index`` of ``path`` and search it (runs in a worker process)."""
    block = config.block
    with open(path, "rb", buffering=0) as fh:
        mapped = _map_block(fh, index * block, block)
        if mapped is not None:
            mm, lo, n = mapped
            try:
                return _search_block(mm, lo, lo + n, anchors, config)  # type: ignore[arg-type]
            finally:
                mm.close()
        if not _BLOCK_BUF or len(_BLOCK_BUF[0]) != block:
            _BLOCK_BUF[:] = [bytearray(block)]
        buf = _BLOCK_BUF[0]
        fh.seek(index * block)
        n = fh.readinto(buf) or 0
    return _search_block(buf, 0, n, anchors, config)


def _map_block(fh: BinaryIO, start: int, block: int) -> tuple[mmap.mmap, int, int] | None:
    """A private, writable mapping of ``block`` bytes at ``start`` (from the page cache,
    without the copy a read makes; the search writes its NULs into private pages):
    ``(mmap, offset of start in it, length)``, or None where mapping is not possible."""
    try:
        size = os.fstat(fh.fileno()).st_size
        n = min(block, size - start)
        if n <= 0:
            return None
        base = start - start % mmap.ALLOCATIONGRANULARITY
        mm = mmap.mmap(fh.fileno(), start - base + n, flags=mmap.MAP_PRIVATE,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=base)
    except (OSError, ValueError, AttributeError):
        return None
    return mm, start - base, n


def _search_block(buf: bytearray, lo: int, hi: int, anchors: tuple[bytes, ...],
                  config: ScanConfig) -> Block:
    """Search the block ``buf[lo:hi]`` (a read buffer or a mapping)."""
    first = buf.find(b"\n", lo, hi)
    if first < 0:
        return Block(hi - lo, raw=bytes(buf[lo:hi]))
    last = buf.rfind(b"\n", lo, hi) + 1
    inner = (search_span(buf, first + 1, last, anchors, config, exact=False)
             if first + 1 < last else None)
    return Block(hi - lo, head=bytes(buf[lo:first + 1]), tail=bytes(buf[last:hi]),
                 inner=inner)


def process_pool(workers: int) -> ForkWorkers | None:
    """Forked worker processes, or None where that is not safe or useful (forking a
    process that runs threads is not)."""
    if (workers < 2 or not sys.platform.startswith("linux")
            or threading.active_count() > 1 or not hasattr(os, "fork")):
        return None
    return ForkWorkers(workers)


class _Stitcher:
    """Joins the blocks' partial first and last lines and feeds them in file order."""

    def __init__(self, out: LineFeeder, inp: InputSpans, anchors: tuple[bytes, ...]) -> None:
        self.out = out
        self.inp = inp
        self.anchors = anchors
        self.tail = b""

    def _own(self, data: bytes) -> None:
        self.out.feed(search_span(data, 0, len(data), self.anchors, self.inp.config))

    def add(self, r: Block) -> None:
        if r.size:
            self.inp.nbytes += r.size
            self.inp.last_byte = (r.raw or r.tail or r.head)[-1:]
            if self.inp.report is not None:
                self.inp.report(self.inp.nbytes)
        if r.raw is not None:
            self.tail += r.raw
            if len(self.tail) >= self.inp.config.long_line:
                self._own(self.tail)
                self.tail = b""
            return
        self._own(self.tail + r.head)
        if r.inner is not None:
            self.out.feed(r.inner)
        self.tail = r.tail

    def finish(self) -> None:
        if self.tail:
            self._own(self.tail)


def run_blocks(src: LineSource, inp: InputSpans, path: str, size: int, procs: ForkWorkers,
               anchors: tuple[bytes, ...]) -> int | None:
    """Like :func:`gputriage.logscan.search.run_input` for a plain file whose blocks
    workers search; the line count is None when long gaps were not counted."""
    out = LineFeeder(src)
    block = inp.config.block
    stitch = _Stitcher(out, inp, anchors)
    blocks = procs.run(functools.partial(block_task, path, anchors=anchors, config=inp.config),
                       size // block + 1)
    try:
        while True:
            try:
                r = next(blocks, None)
            except OSError as exc:
                inp.problems.append(f"{inp.name}: read error ({exc.strerror or exc}); "
                                    "kept what was read")
                break
            if r is None:
                break
            stitch.add(r)
            if r.size < block:
                break
    finally:
        blocks.close()
    stitch.finish()
    return out.total(inp)
