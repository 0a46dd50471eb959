"""``NCCL_DEBUG=INFO`` logs: one file per rank or every rank interleaved in one.

:func:`parse_nccl_log` reads a text, :func:`read_nccl_log` streams the byte
blocks of a big file. Both only look at lines that carry ``NCCL``, ``CUDA error``,
``Error: nccl`` or another marker (found with ``bytes.find``), and of the lines whose only
markers are words of every program's log (`` WARN ``, ``] INFO ``), only at those in a
shape the builder reads, so a 1 GB training log with a few NCCL lines costs about as much
as reading it. This module holds that
byte-level scan (one Hyperscan pass per block where its wheel is installed, to the same
effect: :func:`block_candidates`); each line it picks goes to the
:class:`~gputriage.parsers.nccl_build.Builder`, which applies it to the data
model of :mod:`gputriage.parsers.nccl_model` (the line grammar lives in
:mod:`gputriage.parsers.nccl_lines`). Framework errors (PyTorch's
ProcessGroupNCCL watchdog, CUDA errors; :mod:`gputriage.parsers.nccl_framework`),
possibly wrapped over a few lines, go to ``NcclLog.framework_errors``. Junk gives an
empty log, never an error.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable

from gputriage.parsers.nccl_build import Builder
from gputriage.parsers.nccl_lines import is_nccl_line
from gputriage.parsers.nccl_model import NcclLog
from gputriage.text.newlines import newlines

__all__ = ["FINDER_MIN", "LONG_LINE", "MARKERS", "SHAPES_RE", "STRONG", "WEAK", "WEAK_SHAPES",
           "block_candidates", "candidate_starts", "is_nccl_line", "line_starts",
           "long_lines", "parse_nccl_log", "read_nccl_log", "with_weak_lines"]

# scan caps (what is kept per process is capped in nccl_build: CAPS, MAX_STORED, ...)
LONG_LINE = 64 * 1024  # longer lines are skipped and counted in ``NcclLog.skipped``
# the third: "DistBackendError: ncclSystemError"; then an old NCCL's "file.h:311 WARN" and
# "host:pid:tid [0] INFO", and a NET/IB completion error quoted on its own
MARKERS = (b"NCCL", b"CUDA error", b"Error: nccl", b" WARN ", b"] INFO ", b"Got completion")

# The markers in two kinds. A line holding a strong one is always read. The weak ones are
# words of every program's log ("[rank3] INFO train.py", "... WARN ..."): a line whose
# only markers are weak ones is read only when it has a shape the builder can use without
# the word NCCL (an old NCCL's INFO or WARN record: "host:pid:tid [0] INFO ...",
# "misc/ibvwrap.cc:252 WARN ...", a watchdog timeout), or a NUL (dropped before decoding,
# it may hide a shape); the builder lets every other such line go. The shapes are
# bytes-level supersets: ``_WS`` holds every byte of the whitespace a decoded line may
# have there.
WEAK = (b" WARN ", b"] INFO ")
STRONG = tuple(m for m in MARKERS if m not in WEAK)  # a marker added later is a strong one
_WS = rb"[\t\x0b\x0c\r\x1c-\x20\x80-\xff]{1,24}"  # 1 to 8 spaces (\s), of 3 bytes at most
WEAK_SHAPES = (rb":[0-9]{1,10}" + _WS + rb"\[-?[0-9]{1,5}\]" + _WS + rb"INFO",  # _OLD_INFO
               # _OLD_WARN: a source file's "dir/" or ".ext", then its line number
               rb"[./][\w./+\x80-\xff-]*:[0-9]{1,7}" + _WS + rb"WARN",
               rb"Watchdog caught collective operation timeout")  # nccl_framework._FW_TIMEOUT
# the same for Python's regex engine, led by a literal: the old records' shapes from the
# colon before the tid or the line number on (one regex), the timeout by bytes.find
SHAPES_RE = re.compile(rb":[0-9]{1,10}" + _WS + rb"(?:\[-?[0-9]{1,5}\]" + _WS + rb"INFO|WARN)")
WATCHDOG = WEAK_SHAPES[2]


def parse_nccl_log(text: str) -> NcclLog:
    """Every NCCL record of a text, by process; an empty log when there is none."""
    b = Builder(NcclLog())
    _scan([text.encode("utf-8", "surrogatepass")], b)
    return b.log


def read_nccl_log(chunks: Iterable[bytes], origin: str, log: NcclLog | None = None) -> NcclLog:
    """Stream one file's byte blocks into ``log`` (a new one by default) and return it."""
    log = log if log is not None else NcclLog()
    log.origins.append(origin)
    _scan(chunks, Builder(log))
    return log


# --- streaming -----------------------------------------------------------------------

def _scan(chunks: Iterable[bytes], b: Builder) -> None:
    log = b.log
    tail = b""
    skipping = False  # inside a line already longer than LONG_LINE
    skip_hit = False  # ... which holds an NCCL marker
    for chunk in chunks:
        if not chunk:
            continue
        if not isinstance(chunk, bytes):
            chunk = bytes(chunk)
        last = chunk.rfind(b"\n")
        if last < 0:
            if skipping:
                skip_hit = skip_hit or _has_marker(chunk)
                continue
            tail += chunk
            if len(tail) > LONG_LINE:
                skipping, skip_hit, tail = True, _has_marker(tail), b""
            continue
        first = chunk.find(b"\n")
        start = first + 1
        if skipping:
            skipping = False
            log.lines_read += 1
            if skip_hit or _has_marker(chunk[:first]):
                log.skipped += 1
        elif tail:
            head = tail + chunk[:start]
            _block(b, head, 0, len(head))
        else:
            start = 0
        _block(b, chunk, start, last + 1)
        tail = chunk[last + 1:]
    if skipping:
        log.lines_read += 1
        log.skipped += int(skip_hit)
    elif tail:
        log.lines_read += 1
        _block(b, tail, 0, len(tail))
    b.finish()


def _has_marker(data: bytes) -> bool:
    return any(m in data for m in MARKERS)


def _block(b: Builder, buf: bytes, lo: int, hi: int) -> None:
    """Feed the lines of ``buf[lo:hi]`` that matter (``hi`` is after a newline or the end)."""
    b.log.lines_read += newlines(buf, lo, hi)
    starts = block_candidates(buf, lo, hi)
    i = 0
    pos = lo
    while pos < hi:
        if b.want:  # a framework error is being gathered: every line counts
            start = pos
        else:
            while i < len(starts) and starts[i] < pos:
                i += 1
            if i == len(starts):
                return
            start = starts[i]
        end = buf.find(b"\n", start, hi)
        end = hi if end < 0 else end
        _line(b, buf, start, end)
        pos = end + 1


LONG_WINDOW = 32 << 10  # a line over LONG_LINE holds a whole window of this size
FINDER_MIN = 64 << 10  # a shorter piece is searched by bytes.find (no database to load)


def block_candidates(buf: bytes | bytearray, lo: int, hi: int) -> list[int]:
    """:func:`candidate_starts`' lines, found by one Hyperscan pass where its wheel is
    installed and the piece is at least :data:`FINDER_MIN` long. The shapes Hyperscan
    looks for (:data:`WEAK_SHAPES`) are not those of :data:`SHAPES_RE`, but both hold
    every line the builder reads without a strong marker."""
    find = _finder() if hi - lo >= FINDER_MIN else None
    if find is None:
        return candidate_starts(buf, lo, hi)
    starts = find(buf, lo, hi)
    more: set[int] = set()
    _lines_with_nul(buf, lo, hi, more)
    if hi - lo > LONG_LINE:
        more.update(long_lines(buf, lo, hi))
    return sorted({*starts, *more}) if more else starts


@functools.lru_cache(maxsize=1)
def _finder() -> Callable[[bytes | bytearray, int, int], list[int]] | None:
    """The starts of the lines of ``buf[lo:hi]`` holding a strong marker, or a weak one
    in one of its shapes, by one Hyperscan pass; None without the wheel (or where it
    cannot compile)."""
    from gputriage.text.hslines import group_ends

    ends_in = group_ends([*(re.escape(m) for m in STRONG), *WEAK_SHAPES],
                         [0] * len(STRONG) + [1] * len(WEAK_SHAPES))
    if ends_in is None:
        return None

    def find(buf: bytes | bytearray, lo: int, hi: int) -> list[int]:
        strong, shaped = ends_in(buf, lo, hi)
        starts = line_starts(buf, lo, hi, strong)
        if shaped:
            starts = with_weak_lines(buf, hi, starts, line_starts(buf, lo, hi, shaped))
        return starts

    return find


def line_starts(buf: bytes | bytearray, lo: int, hi: int, ends: list[int]) -> list[int]:
    """The starts of the lines of ``buf[lo:hi]`` holding the matches that end at ``ends``
    (no match holds a newline), each once, in order."""
    out: list[int] = []
    line_end = -1
    for pos in sorted(ends):
        if pos <= line_end:
            continue
        out.append(buf.rfind(b"\n", lo, pos) + 1 or lo)
        line_end = buf.find(b"\n", pos, hi)
        if line_end < 0:
            break
    return out


def with_weak_lines(buf: bytes | bytearray, hi: int, starts: list[int],
                    shaped: Iterable[int]) -> list[int]:
    """``starts`` and those of the lines starting at ``shaped`` (in a weak marker's shape)
    that hold a weak marker, in order."""
    out = set(starts)
    for start in shaped:
        if start not in out:
            end = buf.find(b"\n", start, hi)
            line = buf[start:hi if end < 0 else end]
            if any(line.find(m) >= 0 for m in WEAK):
                out.add(start)
    return sorted(out)


def candidate_starts(buf: bytes | bytearray, lo: int, hi: int) -> list[int]:
    """The starts, in order, of the lines of ``buf[lo:hi]`` (whole lines) that the builder
    may use outside a framework error: those holding a strong marker, those holding a
    weak one in one of its shapes or with a NUL (which may hide a shape), and those over
    LONG_LINE holding a marker (counted as skipped). Searched block-wide: a line of
    another program's log costs no Python."""
    found: set[int] = set()
    _lines_holding(buf, lo, hi, STRONG, found)
    line_end = -1
    for m in SHAPES_RE.finditer(buf, lo, hi):
        if m.start() > line_end:  # a line is looked at once, however many shapes it holds
            line_end = _add_if_marked(buf, lo, hi, m.start(), WEAK, found)
    pos = buf.find(WATCHDOG, lo, hi)
    while pos >= 0:
        pos = buf.find(WATCHDOG, _add_if_marked(buf, lo, hi, pos, WEAK, found), hi)
    _lines_with_nul(buf, lo, hi, found)
    found.update(long_lines(buf, lo, hi))
    return sorted(found)


def _lines_with_nul(buf: bytes | bytearray, lo: int, hi: int, found: set[int]) -> None:
    """Add the lines holding a NUL (dropped before decoding, it may hide a shape) and a
    marker, whatever marker it is."""
    pos = buf.find(b"\0", lo, hi)
    while pos >= 0:
        pos = _add_if_marked(buf, lo, hi, pos, MARKERS, found)
        pos = buf.find(b"\0", pos, hi) if pos < hi else -1


def long_lines(buf: bytes | bytearray, lo: int, hi: int) -> set[int]:
    """The starts of the lines of ``buf[lo:hi]`` (whole lines) over LONG_LINE that hold a
    marker, whatever marker it is (the reader counts them as skipped): a line that long
    holds a whole window without a newline, so it costs one find per window."""
    found: set[int] = set()
    pos = lo
    while pos + LONG_WINDOW <= hi:
        if buf.find(b"\n", pos, pos + LONG_WINDOW) >= 0:
            pos += LONG_WINDOW
        else:
            pos = _add_if_marked(buf, lo, hi, pos, MARKERS, found, LONG_LINE) + 1
    return found


def _lines_holding(buf: bytes | bytearray, lo: int, hi: int, needles: Iterable[bytes],
                   found: set[int]) -> None:
    """Add the starts of the lines of ``buf[lo:hi]`` holding one of ``needles``."""
    for needle in needles:
        pos = buf.find(needle, lo, hi)
        while pos >= 0:
            found.add(buf.rfind(b"\n", lo, pos) + 1 or lo)
            end = buf.find(b"\n", pos, hi)
            pos = buf.find(needle, end, hi) if end >= 0 else -1


def _add_if_marked(buf: bytes | bytearray, lo: int, hi: int, at: int,
                   markers: Iterable[bytes], found: set[int], longer_than: int = -1) -> int:
    """Add the start of the line holding ``at`` when it holds one of ``markers`` (and is
    over ``longer_than`` bytes); the end of that line."""
    start = buf.rfind(b"\n", lo, at) + 1 or lo
    end = buf.find(b"\n", at, hi)
    end = hi if end < 0 else end
    if start not in found and end - start > longer_than and any(
            buf.find(m, start, end) >= 0 for m in markers):
        found.add(start)
    return end


def _line(b: Builder, buf: bytes, lo: int, hi: int) -> None:
    if hi - lo > LONG_LINE:
        b.log.skipped += 1
        return
    b.feed_raw(bytes(buf[lo:hi]))  # (NUL runs: what a crash leaves in a log file, dropped)
