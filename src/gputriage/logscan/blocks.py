"""Large plain files read, searched, parsed and folded block by block in forked workers.

A block owns the lines that start in it. Its worker maps the block with a margin on
each side (:data:`MARGIN`): the lines of the margin before it are read through the
extractor only to learn what a message or call trace open at the block's start is (their
events belong to the block before), and the lines of the margin after it complete the
events its own last lines open. Each worker parses its own candidate lines into events,
folds them (:mod:`gputriage.parsers.kernel_fold`) and sends back only the folded events,
its boot segments and counts: what crosses the pipe is bounded by what is distinct in the
block, not by its lines. The main process joins the blocks in file order: line numbers,
boots, folds and the Xid 45s that open a block. A block (a worker task:
``ScanConfig.task_for`` the file's size) is searched and parsed a piece at a time
(``ScanConfig.piece_bytes``), each piece's pages given back once parsed, so that a
worker's memory follows the piece, not the task.

Line numbers count only the short gaps between wanted lines exactly
(``ScanConfig.gap_exact``); a longer gap counts its bytes, an upper bound of its lines.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import BinaryIO

from gputriage.io.forkpool import ForkWorkers
from gputriage.logscan.config import ScanConfig
from gputriage.logscan.lines import BootSegment, LineSource
from gputriage.logscan.reader import InputSpans
from gputriage.logscan.search import prepare, search_span
from gputriage.logscan.storm import LazyXid
from gputriage.logscan.timeline import fold_in, join_boots
from gputriage.parsers.kernel_fold import Folder, FollowChain
from gputriage.parsers.kernel_model import DriverEvent

__all__ = ["MARGIN", "BlockResult", "block_task", "process_pool", "run_blocks"]

MARGIN = 64 << 10  # bytes read before and after a block for the messages that cross it
# events of one key a block after the first keeps one by one (None: as the first,
# ``kernel_fold.KEEP``). Fewer would cost less in a storm (measured on the 1 GB storm of
# benchmarks/log_scan.py, scan_paths with 8 against 64, best of 4 alternating: workers'
# CPU 3.85 against 4.30 s, wall 2.00 against 2.27 s), but a key of fewer than KEEP
# occurrences in the file that has more than this in one block would then fold in the
# main process where a sequential read keeps it whole: its processes past
# ``kernel_repeats.PROCESSES`` only counted ("at least 81 restarts", not 104). With
# KEEP, the events are a sequential read's whatever the blocks; what that cost is mostly
# gone since such a block keeps a plain code's first occurrences as their bytes
# (``Folder.defer``): their events are built here only where the file keeps them.
BLOCK_KEEP: int | None = None


@dataclass
class BlockResult:
    """What a worker made of one block: its folded events and boots, and counts."""

    size: int  # bytes of the block
    last_byte: bytes
    lines: int  # newlines the block owns (an upper bound when not ``exact``)
    exact: bool
    fold: Folder
    segs: list[BootSegment] = field(default_factory=list)
    formats: dict[str, None] = field(default_factory=dict)
    skipped: int = 0


def _map(fh: BinaryIO, start: int, length: int) -> tuple[mmap.mmap | bytearray, int, int]:
    """``length`` bytes of the file at ``start``: a private writable mapping (the search
    writes its NULs into private pages) or, where mapping fails, a read buffer:
    ``(buffer, offset of start in it, bytes there)``."""
    size = os.fstat(fh.fileno()).st_size
    n = max(0, min(length, size - start))
    if n:
        base = start - start % mmap.ALLOCATIONGRANULARITY
        try:
            mm = mmap.mmap(fh.fileno(), start - base + n, flags=mmap.MAP_PRIVATE,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=base)
            return mm, start - base, n
        except (OSError, ValueError, AttributeError):
            pass
    buf = bytearray(n)
    got = os.preadv(fh.fileno(), [buf], start) if n else 0
    return buf, 0, got


def _owned_start(buf: mmap.mmap | bytearray, at: int, lo: int) -> int:
    """The offset of the first line starting at or after ``at`` (``lo``: where the
    mapping begins; a line starts at ``at`` when the byte before it is a newline)."""
    if at <= lo:
        return lo
    nl = buf.find(b"\n", at - 1)
    return len(buf) if nl < 0 else nl + 1


def block_task(path: str, index: int, *, anchors: tuple[bytes, ...], config: ScanConfig,
               name: str, now: datetime | None) -> BlockResult:
    """Read, search, parse and fold block ``index`` of ``path`` (in a worker process)."""
    block = config.task_bytes
    start = index * block
    before = min(MARGIN, start)
    with open(path, "rb", buffering=0) as fh:
        buf, off, n = _map(fh, start - before, before + block + MARGIN)
    try:
        return _block(buf, off, n, before, block, anchors, config, name, now,
                      None if index == 0 else BLOCK_KEEP, defer=index > 0)
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def _block(buf: mmap.mmap | bytearray, off: int, n: int, before: int, block: int,
           anchors: tuple[bytes, ...], config: ScanConfig, name: str, now: datetime | None,
           keep: int | None, defer: bool = False) -> BlockResult:
    lo, end = off, off + n
    start = off + before
    own_bytes = max(0, min(block, end - start))
    stop = start + own_bytes
    first = _owned_start(buf, start, lo) if before else start
    last = min(_owned_start(buf, stop, lo), end) if stop < end else end
    first = min(first, last)
    warm_lo = _owned_start(buf, lo, lo) if before else first
    warm_lo = min(warm_lo, first)
    src = LineSource(name, now)
    src.fold.keep = src.fold.keep if keep is None else keep
    src.defer = defer
    warm = search_span(buf, warm_lo, first, anchors, config,  # type: ignore[arg-type]
                       storm=False)
    open_end = last == end and last > first and buf[last - 1:last] != b"\n"
    src.bounds = (1, 1 << 62)  # (the block's own lines: all of them, piece by piece)
    src.feed_span(warm, 1 - warm.newlines)
    lines, exact, carry = 0, True, warm.carry
    pos, piece = first, config.piece_bytes
    while True:  # the block's own lines, a piece at a time (then its pages given back)
        cut = last if last - pos <= piece + piece // 2 else min(
            _owned_start(buf, pos + piece, lo), last)
        own = search_span(buf, pos, cut, anchors, config, carry=carry,  # type: ignore[arg-type]
                          exact=False)
        # the storm path numbers the lines of ``own`` and may raise what it carries
        src.feed_span(own, lines + 1)
        lines, exact, carry = lines + own.newlines, exact and own.exact, own.carry
        if cut >= last:
            break
        _give_back(buf, cut - MARGIN)
        pos = cut
    src.bounds = (1, lines + open_end)
    after = search_span(buf, last, _line_aligned(buf, last, end), anchors,  # type: ignore[arg-type]
                        config, carry=carry, storm=False)
    src.feed_span(after, lines + 1)
    src.finish()
    tail = buf[stop - 1:stop] if own_bytes else b""
    return BlockResult(own_bytes, bytes(tail), lines, exact, src.fold, src.segs,
                       src.formats, src.skipped)


def _give_back(buf: mmap.mmap | bytearray, upto: int) -> None:
    """Let go of the pages of ``buf`` before ``upto`` (a mapping's: read again from the
    file where touched again), so that a task's memory follows
    ``ScanConfig.piece_bytes``, not its size."""
    if not isinstance(buf, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return
    upto -= upto % mmap.PAGESIZE
    if upto > 0:
        with contextlib.suppress(OSError, ValueError):  # (then they stay: only memory)
            buf.madvise(mmap.MADV_DONTNEED, 0, upto)


def _line_aligned(buf: mmap.mmap | bytearray, lo: int, end: int) -> int:
    """The end of the last whole line in ``buf[lo:end]`` (``end`` when none ends there)."""
    nl = buf.rfind(b"\n", lo, end)
    return end if nl < 0 else nl + 1


def process_pool(workers: int) -> ForkWorkers | None:
    """Forked worker processes, or None where that is not safe or useful (forking a
    process that runs threads is not)."""
    if (workers < 2 or not sys.platform.startswith("linux")
            or threading.active_count() > 1 or not hasattr(os, "fork")):
        return None
    return ForkWorkers(workers)


def _shift(ev: DriverEvent, by: int) -> None:
    """Renumber an event's lines (and its latest occurrence's) by ``by``."""
    if ev.lineno is not None:
        ev.lineno += by
    last = ev.repeats.last if ev.repeats is not None else None
    if last is not None and last is not ev and last.lineno is not None:
        last.lineno += by


def run_blocks(src: LineSource, inp: InputSpans, path: str, size: int, procs: ForkWorkers,
               anchors: tuple[bytes, ...], meanwhile: Callable[[], None] | None = None
               ) -> int | None:
    """Like :func:`gputriage.logscan.search.run_input` for a plain file whose blocks the
    workers read: ``src`` receives the joined events, boots, formats and counts. The
    line count is None when long gaps were not counted. ``meanwhile`` is called once the
    workers run (after the first block came back): what this process can do while they
    search (its own imports, say)."""
    block = inp.config.task_for(size)
    config = replace(inp.config, task=block)
    task = functools.partial(block_task, path, anchors=anchors, config=config,
                             name=src.name, now=src.now)
    prepare(anchors, config)
    src.fold = Folder(attribute=False)
    src.fold.rebuild = functools.partial(LazyXid, fast=src.fast)  # (blocks' kept bytes)
    chain = src.fold.chain = FollowChain()
    segs: list[BootSegment] = []
    base, exact = 0, True
    results = procs.run(task, size // block + 1)
    try:
        while True:
            try:
                r = next(results, None)
            except OSError as exc:
                inp.problems.append(f"{inp.name}: read error ({exc.strerror or exc}); "
                                    "kept what was read")
                break
            if r is None:
                break
            if meanwhile is not None:
                meanwhile()
                meanwhile = None
            for ev in r.fold.events:
                _shift(ev, base)
            for item in r.fold.deferred:
                item.lineno += base
            mapping, continued = join_boots(r.segs, segs)
            fold_in(src.fold, chain, r.fold, mapping, continued, len(segs))
            base += r.lines
            exact = exact and r.exact
            src.formats.update(r.formats)
            src.skipped += r.skipped
            if r.size:
                inp.nbytes += r.size
                inp.last_byte = r.last_byte
                if inp.report is not None:
                    inp.report(inp.nbytes)
            if r.size < block:
                break
    finally:
        results.close()
    src.segs = segs or [BootSegment()]
    if not exact:
        return None
    return base + (1 if inp.nbytes and inp.last_byte != b"\n" else 0)
