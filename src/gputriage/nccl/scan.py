"""Large plain NCCL job logs read by worker processes, a few lines in a hundred parsed.

``gputriage nccl`` streams a job log through the NCCL log reader
(:mod:`gputriage.parsers.nccl_log`) and the nccl-tests tap of
:mod:`gputriage.nccl.inputs`; both look at a few lines in a hundred. For a
large plain file, forked worker processes (one per CPU, Linux; else this process) read
it in ``REGION``-sized pieces, count the newlines and find the candidate lines of each
piece in one pass (Hyperscan, when its wheel is installed; else ``bytes.find`` and
regexes), and send back only those lines with their offsets. A line whose
only markers are words of every program's log (`` WARN ``, ``] INFO ``) is one only in a
shape the builder reads (:mod:`gputriage.parsers.nccl_log`). The main
process feeds them, in file order, to the same
:class:`~gputriage.parsers.nccl_build.Builder` and tap rules, stitching the lines cut
between pieces, and reads from the file the lines after a framework error (which the
builder wants whatever they hold). So each parser sees what the line-by-line reading
gives it: the lines holding a marker, those that follow a framework error, and the
nccl-tests lines, chosen by the same tests, in the same 1 MiB blocks where the tap
decides per block. Two differences: a line over ``LONG_LINE`` is never an nccl-tests
line here (the streamed tap may keep a piece of one; the nccl-tests parser skips such
lines anyway); and table rows are searched only where a table may be (``ROWS_BACK``): a
size row with no nccl-tests header, footer, command or failure line in its region or
the 64 KiB before it is not read (a table cut from all of these).
"""

from __future__ import annotations

import functools
import mmap
import os
import re
import select
import signal
import sys
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import cast

from gputriage.nccl.tap import MARKERS as TAP_MARKERS
from gputriage.nccl.tap import ROW_DIGITS as _ROW_DIGITS
from gputriage.parsers.nccl_build import Builder
from gputriage.parsers.nccl_log import (
    LONG_LINE,
    MARKERS,
    STRONG,
    WEAK_SHAPES,
    candidate_starts,
    line_starts,
    long_lines,
    with_weak_lines,
)
from gputriage.parsers.nccl_model import NcclLog
from gputriage.text.hslines import group_ends
from gputriage.text.newlines import newlines

__all__ = ["MIN_SIZE", "REGION", "Answer", "Found", "LargeTap", "Region", "find_lines", "in_child",
           "read_large", "usable"]

REGION = 8 << 20  # bytes per worker task
MIN_SIZE = 1 << 20  # plain files this big are read by workers
# (from a MiB on, a job log is read sooner so: the look for host outputs in its first MiB,
# tens of ms, runs in a process of its own, and the imports that judging needs run
# while the workers read; measured in benchmarks/nccl_scan.py --sizes)
TAP_BLOCK = 1 << 20  # the nccl-tests tap decides per block of this size (nccl_input.BLOCK)
_ROWISH = re.compile(rb"\n[ \t]*(?:#|[0-9]+[ \t]+[0-9]+[ \t]+[A-Za-z])")  # nccl_input._ROWISH
_ROW_HEAD = re.compile(_ROW_DIGITS)  # a row at the start of a buffer
_ROW_RE = re.compile(rb"\n" + _ROW_DIGITS)
_TAIL_KEEP = max(len(m) for m in MARKERS) - 1  # bytes kept of a long line to find markers

Progress = Callable[[str, int, int | None], None]


@dataclass
class Found:
    """The candidate lines of a run of whole lines, by file offset."""

    log: list[tuple[int, int, bytes | None]] = field(default_factory=list)
    # (start, end, line or None when longer than LONG_LINE): lines holding a marker
    tests: list[tuple[int, int, str, bool]] = field(default_factory=list)
    # (start, end, line, found by the row pattern): nccl-tests lines (tests_line)


@dataclass
class Region:
    """What a worker read of one region: its size, newline count, first and last
    partial lines (the whole region in ``head`` when it holds no newline) and the
    candidate lines between."""

    size: int
    newlines: int = 0
    head: bytes = b""
    tail: bytes = b""
    found: Found | None = None


# --- finding candidate lines ------------------------------------------------------------

Finder = Callable[[bytearray | bytes, int, int, bool], tuple[list[int], list[int]]]
# (buf, lo, hi, rows): the candidate lines of buf[lo:hi], table rows searched in it
# whatever it holds when ``rows`` (else only if it holds an nccl-tests marker)

# The row pattern would be tried at every line that starts with a digit (a timestamp):
# it runs only over a piece that may hold a table, one with an nccl-tests marker in it
# or in the ROWS_BACK bytes before it (a table's header, footer or command line is
# never far from its rows), and over the line cut between two regions.
ROWS_BACK = 64 << 10


@functools.lru_cache(maxsize=1)
def _hyperscan() -> Finder | None:
    """One Hyperscan pass for every marker, and one for the row pattern where a table may
    be; None without the wheel."""
    ends_in = group_ends([*(re.escape(m) for m in STRONG), *TAP_MARKERS, *WEAK_SHAPES],
                         [0] * len(STRONG) + [1] * len(TAP_MARKERS) + [2] * len(WEAK_SHAPES))
    rows_in = group_ends([_ROW_RE.pattern], [0])  # ("\n..." runs twice as fast as "^...")
    if ends_in is None or rows_in is None:
        return None

    def find(buf: bytearray | bytes, lo: int, hi: int,
             rows: bool) -> tuple[list[int], list[int]]:
        strong, tests, shaped = ends_in(buf, lo, hi)
        if tests or rows:
            at = lo - 1 if lo and buf[lo - 1] == 10 else lo  # the newline a row needs
            tests += rows_in(buf, at, hi)[0]
            if at == lo and _ROW_HEAD.match(buf, lo, hi):
                tests.append(lo + 1)
        log = line_starts(buf, lo, hi, strong)
        if shaped:
            log = with_weak_lines(buf, hi, log, line_starts(buf, lo, hi, shaped))
        return log, line_starts(buf, lo, hi, tests)

    return find


def _marker_lines(buf: bytearray | bytes, lo: int, hi: int,
                  needles: Iterable[bytes]) -> set[int]:
    """Starts of the lines of ``buf[lo:hi]`` holding one of ``needles``."""
    out: set[int] = set()
    for needle in needles:
        pos = lo
        while pos < hi:
            at = buf.find(needle, pos, hi)
            if at < 0:
                break
            out.add(buf.rfind(b"\n", lo, at) + 1 or lo)
            end = buf.find(b"\n", at, hi)
            pos = hi if end < 0 else end + 1
    return out


def _plain_find(buf: bytearray | bytes, lo: int, hi: int,
                rows: bool) -> tuple[list[int], list[int]]:
    """The pure-Python finder: the streamed reader's candidate lines, then the nccl-tests
    lines (rows by regex)."""
    return candidate_starts(buf, lo, hi), _tests_find(buf, lo, hi, rows)


def _every_marker(buf: bytearray | bytes, lo: int, hi: int,
                  rows: bool) -> tuple[list[int], list[int]]:
    """Every line holding a marker, weak ones included (a region with a NUL in it)."""
    return sorted(_marker_lines(buf, lo, hi, MARKERS)), _tests_find(buf, lo, hi, rows)


def _tests_find(buf: bytearray | bytes, lo: int, hi: int, rows: bool) -> list[int]:
    """The candidate nccl-tests lines: tap markers, then rows by regex where a table may
    be (``ROWS_BACK``)."""
    tests = _marker_lines(buf, lo, hi, TAP_MARKERS)
    if not (tests or rows):
        return []
    at = lo - 1 if lo and buf[lo - 1] == 10 else lo
    if at == lo and _ROW_HEAD.match(buf, lo, hi):
        tests.add(lo)
    tests.update(m.start() + 1 for m in _ROW_RE.finditer(buf, at, hi))
    return sorted(tests)


def _finder(engine: str | None = None) -> Finder:
    """``engine``: "hyperscan", "plain" or None (the best there is)."""
    if engine != "plain":
        found = _hyperscan()
        if found is not None:
            return found
        if engine == "hyperscan":
            raise RuntimeError("hyperscan is not installed")
    return _plain_find


def find_lines(buf: bytearray | bytes, lo: int, hi: int, base: int = 0,
               engine: str | None = None, rows: bool = True) -> Found:
    """The candidate lines of ``buf[lo:hi]``, whole lines (``lo`` starts one, ``hi`` ends
    one or the input), their offsets counted from ``base`` at ``buf[0]``: those the
    streamed reader hands to the builder (a line whose only markers are weak ones only in
    one of their shapes, see :mod:`gputriage.parsers.nccl_log`; a region with a NUL,
    which may hide a shape, is searched for every marker) and the nccl-tests lines
    (table rows only when ``rows`` or where it holds an nccl-tests marker)."""
    from gputriage.parsers.nccl_tests import tests_line

    out = Found()
    if hi <= lo:
        return out
    if buf.find(b"\0", lo, hi) >= 0:
        log, tests = _every_marker(buf, lo, hi, rows)
    else:
        log, tests = _finder(engine)(buf, lo, hi, rows)
        if hi - lo > LONG_LINE:
            longs = long_lines(buf, lo, hi)
            if longs:
                log = sorted({*log, *longs})
    for start in log:
        end = buf.find(b"\n", start, hi)
        end = hi if end < 0 else end
        raw = bytes(buf[start:end]) if end - start <= LONG_LINE else None
        out.log.append((base + start, base + end, raw))
    for start in tests:
        end = buf.find(b"\n", start, hi)
        end = hi if end < 0 else end
        if end - start > LONG_LINE:
            continue
        raw = bytes(buf[start:end])
        if b"NCCL INFO" in raw or b"NCCL WARN" in raw:
            continue
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if tests_line(line):
            out.tests.append((base + start, base + end, line,
                              _ROWISH.match(b"\n" + raw) is not None))
    return out


# --- workers ------------------------------------------------------------------------------

_BUF: list[bytearray] = []


def _region(fd: int, index: int, size: int, engine: str | None) -> Region:
    """Read region ``index`` of the open file ``fd`` and search it (in a worker): mapped
    where the file allows it (no copy: its pages are read where they lie), else read
    into a buffer kept from region to region."""
    start = index * size
    mapped = _mapped(fd, start, size)
    if mapped is None:
        if not _BUF or len(_BUF[0]) != size:
            _BUF[:] = [bytearray(size)]
        return _search_region(_BUF[0], os.preadv(fd, [_BUF[0]], start), fd, start, engine)
    try:
        return _search_region(mapped, len(mapped), fd, start, engine)
    finally:
        mapped.close()


def _mapped(fd: int, start: int, size: int) -> mmap.mmap | None:
    """``size`` bytes of the file at ``start`` (fewer at its end) mapped; None where
    there are none, ``start`` is not on a mapping boundary (a test's odd region size) or
    the file cannot be mapped."""
    if start % mmap.ALLOCATIONGRANULARITY:
        return None
    try:
        length = min(size, os.fstat(fd).st_size - start)
        return mmap.mmap(fd, length, prot=mmap.PROT_READ, offset=start) if length > 0 else None
    except (OSError, ValueError, AttributeError):  # a file system without mmap, say
        return None


def _search_region(buf: bytearray | mmap.mmap, n: int, fd: int, start: int,
                   engine: str | None) -> Region:
    """What a worker sends back of the ``n`` bytes of ``buf`` read at ``start``."""
    first = buf.find(b"\n", 0, n)
    if first < 0:
        return Region(n, head=bytes(buf[:n]))
    last = buf.rfind(b"\n", 0, n)
    found = None
    if first < last:
        found = find_lines(buf, first + 1, last + 1, start, engine,  # type: ignore[arg-type]
                           _marked_before(fd, start + first + 1))
    return Region(n, newlines(buf, 0, n), bytes(buf[:first + 1]), bytes(buf[last + 1:n]), found)


def _marked_before(fd: int, pos: int) -> bool:
    """Whether the ROWS_BACK bytes before ``pos`` hold an nccl-tests marker."""
    back = os.pread(fd, min(pos, ROWS_BACK), max(0, pos - ROWS_BACK)) if pos else b""
    return any(m in back for m in TAP_MARKERS)


def usable(size: int) -> bool:
    """Whether a plain file of ``size`` bytes is read here rather than streamed."""
    return size >= MIN_SIZE and hasattr(os, "preadv")


def _can_fork() -> bool:
    """Whether worker processes may be forked (Linux, and no thread running: forking a
    process that runs threads is not safe)."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork")
            and threading.active_count() == 1)


class Answer:
    """A yes or no worked out in a forked process (:func:`in_child`), or here when none
    was started."""

    def __init__(self, fn: Callable[[], bool], pid: int | None = None,
                 fd: int | None = None) -> None:
        self.fn, self.pid, self.fd = fn, pid, fd
        self.value: bool | None = None

    def ready(self) -> bool:
        """Whether the answer can be had now without waiting (one worked out here can)."""
        if self.value is not None or self.fd is None:
            return True
        return bool(select.select([self.fd], [], [], 0)[0])

    def __call__(self) -> bool:
        """The answer, waited for (``fn`` run here when the process gave none)."""
        if self.value is None:
            got = b""
            if self.fd is not None:
                fd, self.fd = self.fd, None
                try:
                    got = os.read(fd, 1)
                finally:
                    os.close(fd)
                    os.waitpid(cast(int, self.pid), 0)
            self.value = got == b"1" if got else self.fn()
        return self.value


def in_child(fn: Callable[[], bool]) -> Answer:
    """Start ``fn`` in a forked process, for the caller to go on meanwhile; the answer
    returned waits for it when called (and runs ``fn`` here when the process gave none
    or forking is not safe)."""
    if not _can_fork():
        return Answer(fn)
    try:
        r, w = os.pipe()
        pid = os.fork()
    except OSError:
        return Answer(fn)
    if pid == 0:  # the child
        code = 1
        try:
            os.close(r)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.write(w, b"1" if fn() else b"0")
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return Answer(fn, pid, r)


def _regions(fd: int, size: int, region: int, workers: int,
             engine: str | None) -> Generator[Region, None, None]:
    """Every region of the file in order (the last one short), from ``workers`` forked
    processes (1: read here)."""
    task = functools.partial(_region, fd, size=region, engine=engine)
    count = size // region + 1
    if workers < 2:
        for i in range(count):
            r = task(i)
            yield r
            if r.size < region:
                return
        while True:  # the file grew while it was read
            count += 1
            r = task(count - 1)
            yield r
            if r.size < region:
                return
    from gputriage.io.forkpool import ForkWorkers

    results = ForkWorkers(workers).run(task, count)
    try:
        for r in results:
            yield r
            if r.size < region:
                return
    finally:
        results.close()
    yield from _regions_after(fd, count * region, region, engine)


def _regions_after(fd: int, start: int, region: int, engine: str | None) -> Iterator[Region]:
    """The regions of a file that grew while it was read, from ``start`` (read here)."""
    i = start // region
    while True:
        r = _region(fd, i, region, engine)
        yield r
        if r.size < region:
            return
        i += 1


def _guarded(regions: Generator[Region, None, None], name: str,
             problems: list[str]) -> Iterator[Region]:
    """``regions`` until one cannot be read (a problem noted)."""
    from gputriage.io.forkpool import WorkerDied

    try:
        yield from regions
    except OSError as exc:
        problems.append(f"{name}: cannot read ({exc.strerror or exc})")
    except WorkerDied as exc:
        problems.append(f"{name}: cannot read ({exc}); kept what was read")
    finally:
        regions.close()


# --- the main process ---------------------------------------------------------------------

class _Carry:
    """The line cut between regions: where it starts, its length, its bytes up to a
    bound and, past the bound, whether a marker was in what was let go."""

    def __init__(self, start: int = 0) -> None:
        self.start = start
        self.length = 0
        self.data = b""
        self.long = False
        self.hit = False

    def add(self, piece: bytes) -> None:
        self.length += len(piece)
        data = self.data + piece
        if not self.long and len(data) > LONG_LINE + 1:
            self.long = True
        if self.long:
            self.hit = self.hit or any(m in data for m in MARKERS)
            data = data[-_TAIL_KEEP:]
        self.data = data

    def line(self, head: bytes, engine: str | None) -> Found:
        """The candidates of the finished line ``carry + head`` (``head`` ends with its
        newline, or is the end of the input)."""
        nl = 1 if head.endswith(b"\n") else 0
        if not self.long:
            data = self.data + head
            return find_lines(data, 0, len(data) - nl, self.start, engine)
        self.add(head[:len(head) - nl])
        end = self.start + self.length
        return Found(log=[(self.start, end, None)] if self.hit else [])


class LargeTap:
    """The nccl-tests tap of :class:`gputriage.nccl.inputs._TestsTap` over the
    workers' candidates: the same lines kept, in the same order, up to the same cap."""

    def __init__(self, fd: int, cap: int) -> None:
        self.fd = fd
        self.cap = cap
        self.lines: list[tuple[int, str]] = []
        self.size = 0
        self.flip_block: int | None = None  # the tap block where rows by type begin
        self.flip_start = 0  # ... the start of the last line, when that is where

    def add(self, found: Found, final: bool = False) -> None:
        for start, end, line, rowish in found.tests:
            if self.flip_block is None and not rowish:
                self.flip_block = -1 if final else end // TAP_BLOCK
                self.flip_start = start
            if self.size <= self.cap:
                self.lines.append((start, line))
                self.size += len(line) + 1

    def kept(self, eof: int) -> tuple[list[str], bool]:
        """The kept lines and whether the cap cut them."""
        lines = dict(self.lines)
        if self.flip_block is not None:
            for start, line in self._type_rows(eof):
                lines.setdefault(start, line)
        out: list[str] = []
        size = 0
        for start in sorted(lines):
            size += len(lines[start]) + 1
            if size > self.cap:
                return out, True
            out.append(lines[start])
        return out, False

    def _type_rows(self, eof: int) -> Iterator[tuple[int, str]]:
        """Table rows found by their data type, from the first line of the block where a
        prefixed nccl-tests line was first seen (the tap's ``shipped``) to the end."""
        from gputriage.nccl.tap import TYPES as _TYPES
        from gputriage.nccl.tap import lines_with as _lines_with
        from gputriage.parsers.nccl_tests import tests_line

        pos = self.flip_start if self.flip_block == -1 else _line_start(
            self.fd, (self.flip_block or 0) * TAP_BLOCK)
        while pos < eof:
            data = os.pread(self.fd, TAP_BLOCK, pos)
            if not data:
                return
            last = len(data) if len(data) < TAP_BLOCK else data.rfind(b"\n") + 1
            if not last:  # a line over a block long: never a tap line here
                pos = _line_end(self.fd, pos) + 1
                continue
            rows: dict[int, bytes] = {}
            _lines_with(b"\n" + data[:last], 0, last + 1, _TYPES, rows)
            for start, raw in sorted(rows.items()):
                line = raw.decode("utf-8", errors="replace").rstrip("\r")
                if len(raw) <= LONG_LINE and tests_line(line):
                    yield pos + start - 1, line
            pos += last


def _line_start(fd: int, pos: int) -> int:
    """The start of the first line whose newline is at or after ``pos``."""
    while pos > 0:
        lo = max(0, pos - (64 << 10))
        cut = os.pread(fd, pos - lo, lo).rfind(b"\n")
        if cut >= 0:
            return lo + cut + 1
        pos = lo
    return 0


def _line_end(fd: int, pos: int) -> int:
    """The offset of the first newline at or after ``pos`` (the end of the file if none)."""
    while True:
        data = os.pread(fd, 64 << 10, pos)
        if not data:
            return pos
        i = data.find(b"\n")
        if i >= 0:
            return pos + i
        pos += len(data)


class _Feeder:
    """Feeds candidate lines to a builder in file order; while the builder gathers a
    framework error, the next lines are read from the file, whatever they hold."""

    def __init__(self, fd: int, b: Builder) -> None:
        self.fd = fd
        self.b = b
        self.done = 0  # offset up to which lines were fed

    def feed(self, items: Iterable[tuple[int, int, bytes | None]]) -> None:
        for start, end, raw in items:
            if start < self.done:
                continue  # fed already, after a framework error
            self._one(raw)
            self.done = end + 1
            while self.b.want and self._next():
                pass

    def _one(self, raw: bytes | None) -> None:
        if raw is None:
            self.b.log.skipped += 1
            return
        self.b.feed_raw(raw)  # (as nccl_log._line)

    def _next(self) -> bool:
        """Feed the line at ``done``; False at the end of the file."""
        pos = self.done
        end = _line_end(self.fd, pos)
        if end == pos and not os.pread(self.fd, 1, pos):
            return False
        self._one(os.pread(self.fd, end - pos, pos) if end - pos <= LONG_LINE else None)
        self.done = end + 1
        return True


def read_large(fd: int, size: int, name: str, log: NcclLog, tap: LargeTap,
               problems: list[str], progress: Progress | None = None,
               workers: int | None = None, region: int = REGION,
               engine: str | None = None,
               meanwhile: Callable[[], object] | None = None) -> int:
    """Read the plain file open at ``fd`` (``size`` bytes when opened) into ``log`` and
    ``tap`` as :func:`gputriage.parsers.nccl_log.read_nccl_log` and the tests tap read
    its blocks; returns the bytes read. A read error (or a worker that died) ends the
    reading with a problem noted: what was read is kept. ``meanwhile`` is called once,
    when the first region is back (the workers go on reading): what this process can
    do in the meantime (its own imports, say)."""
    from gputriage.nccl.tap import TYPES  # noqa: F401 - imported before forking
    from gputriage.parsers.nccl_tests import tests_line  # noqa: F401

    _finder(engine)  # compiled before forking
    log.origins.append(name)
    b = Builder(log)
    feeder = _Feeder(fd, b)
    carry = _Carry()
    if workers is None:
        workers = min(8, os.cpu_count() or 1) if _can_fork() else 1
    done = 0
    for r in _guarded(_regions(fd, size, region, workers, engine), name, problems):
        if meanwhile is not None:
            meanwhile()
            meanwhile = None
        done += r.size
        if progress is not None:
            progress(name, done, size)
        if not r.newlines:  # the cut line goes on
            carry.add(r.head)
            continue
        log.lines_read += r.newlines
        for found in (carry.line(r.head, engine), r.found):
            if found is not None:
                feeder.feed(found.log)
                tap.add(found)
        carry = _Carry(done - len(r.tail))
        carry.add(r.tail)
    if carry.length:
        log.lines_read += 1
        found = carry.line(b"", engine)
        feeder.feed(found.log)
        tap.add(found, final=True)
    b.finish()
    return done
