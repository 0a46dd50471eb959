"""Anchor search for :mod:`gputriage.logscan`: candidate lines found through Hyperscan
(:mod:`~gputriage.logscan.hsearch`, where its wheel is installed) or ``bytes.find``
(``ScanConfig.engine``), their context lines, and the threads that search the spans of
one input in parallel.

The anchors are the literals of the rows of
:data:`gputriage.parsers.kernel_table.EVENTS` and of the lines that start a boot: a
line holding none of them proves no event. Nor does a line whose anchors are all
routine ones (:data:`ROUTINE`: ``mlx5_core``) and that holds none of the
literals their rows require: it is dropped before it is decoded."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gputriage.logscan import hsearch
from gputriage.logscan import lines as line_sources
from gputriage.logscan.config import ScanConfig
from gputriage.logscan.lines import BOOT_ANCHORS, LineSource
from gputriage.logscan.reader import InputSpans
from gputriage.logscan.span import Line, Span
from gputriage.logscan.storm import LEAD as STORM_LEAD
from gputriage.logscan.storm import NAME_FIELD, NAMED
from gputriage.logscan.storm import SCREEN_EXPRESSION as STORM_SCREEN
from gputriage.logscan.storm import SCREEN_LITERALS as STORM_SCREENED_AFTER
from gputriage.parsers.kernel_extractor import MAX_LINE
from gputriage.parsers.kernel_follow import TRACE_WINDOW
from gputriage.parsers.kernel_table import ANCHORS as EVENT_ANCHORS
from gputriage.parsers.kernel_table import CONTEXT_ANCHORS, EVENTS
from gputriage.text.newlines import newlines

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["ANCHORS", "ENGINES", "HEAD_LINES", "ROUTINE", "STORM_NAMED", "LineFeeder", "Probe",
           "Span", "anchor_hits", "anchors_for", "engine_for", "prepare", "probes",
           "run_input", "search_span"]

MAX_CONT = 8  # whitespace-led continuation lines taken after a candidate
ANCHORS: tuple[bytes, ...] = tuple(a.encode() for a in (*EVENT_ANCHORS, *BOOT_ANCHORS))
# anchors whose following lines are all taken (call traces; an AER report's error bits)
_TRACE_ANCHORS = frozenset(a.encode() for a in CONTEXT_ANCHORS)
_JSON_ANCHOR = b'"MESSAGE":['  # journal JSON prints non-UTF-8 messages as byte arrays


def anchors_for(head: bytes | bytearray) -> tuple[bytes, ...]:
    """The anchors of an input that starts with ``head`` (journal JSON adds one)."""
    return ANCHORS + ((_JSON_ANCHOR,) if head.lstrip()[:1] == b"{" else ())


def _routine() -> dict[bytes, tuple[bytes, ...]]:
    """Each anchor all of whose rows say what else a line must hold (``requires``) ->
    those literals, lower case (a line is tested lower-cased: a superset of what the
    rows' case-sensitive needles and case-blind expressions accept)."""
    out: dict[bytes, tuple[bytes, ...]] = {}
    for a in dict.fromkeys(a for p in EVENTS for a in p.anchors):
        rows = [p for p in EVENTS if a in p.anchors]
        if all(p.requires for p in rows):
            need = tuple(dict.fromkeys(r.lower().encode() for p in rows for r in p.requires))
            if not any(r in a.lower().encode() for r in need):  # else every line holds one
                out[a.encode()] = need
    return out


ROUTINE: dict[bytes, tuple[bytes, ...]] = _routine()


# --- finding candidate lines -------------------------------------------------------------

# Where Hyperscan is not installed, each anchor is searched through a "probe": a
# substring of it, one probe standing for several anchors where they share one (one
# pass of ``bytes.find`` for them all); a line a probe finds is a candidate only when it
# holds one of that probe's anchors, so the candidate lines are exactly the lines
# holding an anchor.
_PROBE_OF: dict[bytes, bytes] = {
    b"error received": b"rror received", b"PCIe Bus Error": b"PCIe ",
    b"PCIe bandwidth": b"PCIe ", b"segfault at ": b"gfault at ", b"-- Boot ": b"-- ",
    b"-- Reboot --": b"-- ",
    b"nv_peer_mem": b"_peer_mem", b"Hardware Error": b"dware ",
    b"hardware memory error": b"dware ", b"Memory failure": b"ry failure",
    b"Lost carrier": b" carrier", b"Gained carrier": b" carrier",
    b"error, dev ": b"rror, dev ", b"nvme nvme": b"me nvme", b"EXT4-fs error": b"XT4-fs error",
}


@dataclass(frozen=True)
class Probe:
    """One literal searched for, the anchors it stands for, and its context mode."""

    needle: bytes
    anchors: tuple[bytes, ...]  # () when the needle is itself the only anchor
    requires: tuple[bytes, ...] = ()  # a routine probe's line must hold one (lower-cased)

    @property
    def mode(self) -> int:
        return 1 if any(a in _TRACE_ANCHORS for a in self.anchors or (self.needle,)) else 0

    @functools.cached_property
    def required(self) -> Callable[[bytes | bytearray], re.Match[bytes] | None]:
        """Finds one of ``requires`` in a lower-cased line."""
        return re.compile(b"|".join(re.escape(r) for r in self.requires)).search


def _requires(group: Sequence[bytes], routine: dict[bytes, tuple[bytes, ...]]
              ) -> tuple[bytes, ...]:
    """What a line found through anchors ``group`` must hold (() when any will do)."""
    if not all(a in routine for a in group):
        return ()
    return tuple(dict.fromkeys(r for a in group for r in routine[a]))


def probes(anchors: Sequence[bytes], routine: dict[bytes, tuple[bytes, ...]] | None = None
           ) -> tuple[Probe, ...]:
    """The probes that find every line holding one of ``anchors`` (with ``routine``:
    except the routine lines of :data:`ROUTINE`'s anchors)."""
    routine = routine or {}
    return _probes(tuple(anchors), tuple(routine.items()))


@functools.lru_cache(maxsize=8)
def _probes(anchors: tuple[bytes, ...], routine_items: tuple[tuple[bytes, tuple[bytes, ...]], ...]
            ) -> tuple[Probe, ...]:
    """:func:`probes`, made once per set of anchors (a block's margins ask each time)."""
    routine = dict(routine_items)
    groups: dict[bytes, list[bytes]] = {}
    for a in anchors:
        groups.setdefault(_PROBE_OF.get(a, a), []).append(a)
    out: list[Probe] = []
    for needle, group in groups.items():
        exact = group == [needle]
        modes = {a in _TRACE_ANCHORS for a in group}
        if len(modes) > 1:  # a probe must not mix context modes: search these one by one
            out.extend(Probe(a, (), _requires([a], routine)) for a in group)
        else:
            out.append(Probe(needle, () if exact else tuple(group), _requires(group, routine)))
    return tuple(out)


# --- engines -------------------------------------------------------------------------------

ENGINES = ("hyperscan", "python")


def engine_for(config: ScanConfig) -> str:
    """The engine that searches under ``config``: Hyperscan where its wheel is installed
    (and ``config`` does not ask for ``bytes.find``), else ``bytes.find`` ("python")."""
    return "hyperscan" if config.hyperscan() else "python"


def _matcher(anchors: Sequence[bytes], config: ScanConfig, storm: bool = False
             ) -> hsearch.Matcher:
    """The database of ``anchors`` (compiled in about 4 ms); ``storm``: the one that
    leaves the storm path's lines out and screens them (only spans that Xid lines crowd
    use it)."""
    return _matcher_of(tuple(anchors), config.reject, storm)


def _named() -> tuple[tuple[bytes, tuple[bytes, ...]], ...]:
    """Each anchor a storm's process names hold (:data:`gputriage.logscan.storm.NAMED`)
    -> the needles of its rows that do not hold it: where Xid lines crowd a span, the
    anchor finds no line where it follows an Xid line's ``, name=`` (the storm pass reads
    those lines), and these needles find the line instead wherever it holds the anchor
    (a row reads no line without one of its needles). An anchor one of whose rows has
    no needle is found as any other."""
    out = []
    for anchor in NAMED:
        rows = [p for p in EVENTS if anchor.decode() in p.anchors]
        if rows and all(p.needles and not p.lower for p in rows):
            keep = {n.encode() for p in rows for n in p.needles if anchor.decode() not in n}
            out.append((anchor, tuple(sorted(n for n in keep  # (those another one is in: not)
                                             if not any(k != n and k in n for k in keep)))))
    return tuple(out)


STORM_NAMED = _named()


@functools.lru_cache(maxsize=8)
def _matcher_of(anchors: tuple[bytes, ...], reject: bool, storm: bool) -> hsearch.Matcher:
    routine = ROUTINE if reject else {}
    modes = tuple(Probe(a, ()).mode for a in anchors)
    return hsearch.matcher(anchors, modes,
                           tuple((a, routine[a]) for a in anchors if a in routine),
                           STORM_SCREEN if storm else None, STORM_LEAD if storm else None,
                           STORM_SCREENED_AFTER if storm else (),
                           STORM_NAMED if storm else (), NAME_FIELD if storm else b"")


def prepare(anchors: Sequence[bytes], config: ScanConfig) -> None:
    """Compile now what the search will need (before worker processes are forked: each
    would compile it again). The storm path's database is compiled where a span first
    needs it: most logs never do."""
    if engine_for(config) == "hyperscan":
        _matcher(anchors, config)


def anchor_hits(buf: bytes | bytearray, lo: int, hi: int, anchors: Sequence[bytes],
                config: ScanConfig, screened: set[int] | None = None,
                storm: bool = False) -> dict[int, int]:
    """Start offsets of the lines in ``buf[lo:hi]`` holding an anchor -> context mode
    (0: continuation lines, 1: a call trace follows); with ``config.reject``, less the
    routine lines (see :data:`ROUTINE`). Every engine finds the same lines. With
    ``storm``, Hyperscan also adds to ``screened`` the starts of the Xid lines the storm
    path must leave to the per-line parse (:data:`gputriage.logscan.storm.SCREEN_LITERALS`
    and ``SCREEN_EXPRESSION``), and leaves out the lines that
    hold the storm path's lead (:data:`gputriage.logscan.storm.LEAD`) unless the screen,
    an anchor of context mode 1 or a continuation line after them makes them candidates:
    the storm path finds those, and folds them or hands them over as it would as
    candidates (``nvidia-smi``, say, is a process name Xid storms repeat)."""
    starts: dict[int, int] = {}
    if hi <= lo or not anchors:
        return starts
    if engine_for(config) == "hyperscan":
        hsearch.hyperscan_hits(buf, lo, hi, _matcher(anchors, config, storm), starts,
                               screened)
        return starts
    for p in probes(anchors, ROUTINE if config.reject else {}):
        _find_hits(buf, lo, hi, p, starts)
    return starts


def _add_hit(buf: bytes | bytearray, lo: int, hi: int, pos: int, p: Probe,
             starts: dict[int, int]) -> int:
    """Record the line holding ``pos`` when it holds one of ``p``'s anchors; returns the
    offset after that line."""
    s = buf.rfind(b"\n", lo, pos) + 1 or lo
    if s < lo:
        s = lo
    e = buf.find(b"\n", pos, hi)
    e = hi if e < 0 else e
    held = not p.anchors or any(buf.find(a, s, e) >= 0 for a in p.anchors)
    if held and p.requires and s not in starts:
        held = p.required(buf[s:e].lower()) is not None
    if held and starts.get(s, -1) < p.mode:
        starts[s] = p.mode
    return e + 1


def _find_hits(buf: bytes | bytearray, lo: int, hi: int, p: Probe,
               starts: dict[int, int]) -> None:
    """The lines of ``buf[lo:hi]`` that probe ``p`` finds (``bytes.find``) into
    ``starts``."""
    find, needle = buf.find, p.needle
    off = lo
    while off < hi:
        pos = find(needle, off, hi)
        if pos < 0:
            break
        off = _add_hit(buf, lo, hi, pos, p, starts)


HEAD_LINES = max(TRACE_WINDOW, MAX_CONT)  # a block's lines kept for a previous block's context


def _line_end(buf: bytes | bytearray, s: int, hi: int) -> int:
    e = buf.find(b"\n", s, hi)
    return hi if e < 0 else e


# Line positions without counting every newline (worker blocks): a gap between wanted
# lines up to ``ScanConfig.gap_exact`` long is counted, a longer one advances the
# position by its size in bytes, an upper bound of its lines. Positions then stay exact
# between nearby lines (all that continuation lines and trace windows need; a gap holds
# the line before it, so lines longer than this lose their adjacency), and counting,
# which takes about 40 % of a block's search time, is skipped where it tells nothing.

def _gap(buf: bytes | bytearray, a: int, b: int, exact: bool, gap_exact: int) -> int:
    if exact or b - a <= gap_exact:
        return newlines(buf, a, b)
    return b - a


def search_span(buf: bytes | bytearray, lo: int, hi: int, anchors: Sequence[bytes],
                config: ScanConfig, carry: tuple[int, int] = (0, 0),
                exact: bool = True, storm: bool = True) -> Span:
    """Candidate lines of ``buf[lo:hi]``, their context lines, and line positions
    (line numbers when ``exact``, see ``ScanConfig.gap_exact`` otherwise). With
    ``storm`` where Hyperscan searches, the lines that hold the storm path's lead are
    left to the storm path as :func:`anchor_hits` says
    (:class:`gputriage.logscan.stormspan.SpanPass`), which reads them from the buffer
    the span keeps (``Span.storm``)."""
    hyper = engine_for(config) == "hyperscan"
    # (where a LineSource has the path, and where it pays: a span its lines crowd)
    storm = storm and hyper and line_sources.USABLE and _crowded(buf, lo, hi)
    screened: set[int] | None = set() if storm else None
    starts = anchor_hits(buf, lo, hi, anchors, config, screened, storm)
    want: dict[int, int] = dict.fromkeys(starts, 0)
    need = (0, 0)
    if carry[0]:
        left = _context(buf, lo, hi, carry[1], carry[0], want, include_first=True)
        need = (left, carry[1]) if left else need
    find = buf.find
    for s, mode in starts.items():
        if not mode:  # the usual case: the next line, in the span, is no continuation
            e = find(b"\n", s, hi)
            if 0 <= e < hi - 1 and buf[e + 1] not in (32, 9):
                continue  # (what _context would find: nothing to add, nothing owed)
        left = _context(buf, s, hi, mode, TRACE_WINDOW if mode else MAX_CONT, want)
        if left:
            need = max(need, (left, mode))
    head, pos, head_starts = _head(buf, lo, hi)
    if storm:
        return Span([], 0, True, need, head, pos >= hi, (buf, lo, hi),
                    (exact, config.gap_exact), sorted(want), head_starts,
                    frozenset(screened or ()))
    out, n, approx = _wanted_lines(buf, lo, hi, sorted(want), exact, config.gap_exact)
    return Span(out, n, not approx, need, head, pos >= hi)


_SAMPLES = 4  # pieces of a span in which the storm path's lines are counted
_SAMPLE = 64 << 10  # bytes of each
_CROWDED = 8  # lines of the storm path in the samples from which it pays


def _crowded(buf: bytes | bytearray, lo: int, hi: int) -> bool:
    """Whether the storm path's lines crowd ``buf[lo:hi]`` (counted in a few samples
    spread over it): where they are few, listing them with the other candidate lines
    costs less than the storm path's own pass over the span."""
    step = max(_SAMPLE, (hi - lo) // _SAMPLES)
    found = 0
    for at in range(lo, hi, step):
        found += buf[at:min(at + _SAMPLE, hi)].count(STORM_LEAD)
        if found >= _CROWDED:
            return True
    return False


def _wanted_lines(buf: bytes | bytearray, lo: int, hi: int, wanted: list[int], exact: bool,
                  gap_exact: int) -> tuple[list[Line], int, bool]:
    """The lines starting at ``wanted`` with their positions, the span's newlines, and
    whether a position is only an upper bound."""
    out: list[Line] = []
    n = 0
    prev = lo
    approx = False
    find = buf.find
    for s in wanted:  # (_gap and _line_end, inline: this runs once per candidate line)
        e = find(b"\n", s, hi)
        if e < 0:
            e = hi
        if exact or s - prev <= gap_exact:
            n += newlines(buf, prev, s)
        else:
            approx = True
            n += s - prev
        prev = s
        out.append((n, buf[s:min(e, s + MAX_LINE)], e - s > MAX_LINE))
    approx = approx or (not exact and hi - prev > gap_exact)
    n += _gap(buf, prev, hi, exact, gap_exact)
    return out, n, approx


def _head(buf: bytes | bytearray, lo: int, hi: int) -> tuple[list[Line], int, list[int]]:
    """The span's first lines (for a previous span's context), where they end, and
    where each starts."""
    head: list[Line] = []
    starts: list[int] = []
    pos = lo
    while pos < hi and len(head) < HEAD_LINES:
        e = _line_end(buf, pos, hi)
        head.append((len(head), buf[pos:min(e, pos + MAX_LINE)], e - pos > MAX_LINE))
        starts.append(pos)
        pos = e + 1
    return head, pos, starts


def _context(buf: bytes | bytearray, s: int, hi: int, mode: int, limit: int,
             want: dict[int, int], include_first: bool = False) -> int:
    """Add up to ``limit`` lines after the line at ``s`` (mode 0: only lines that
    start with a blank, mode 1: any); returns how many are still wanted at ``hi``."""
    pos = s if include_first else _line_end(buf, s, hi) + 1
    taken = 0
    while taken < limit:
        if pos >= hi:
            return limit - taken
        if mode == 0 and buf[pos:pos + 1] not in (b" ", b"\t"):
            return 0
        want[pos] = 0
        taken += 1
        pos = _line_end(buf, pos, hi) + 1
    return 0


# --- driving -------------------------------------------------------------------------------

class LineFeeder:
    """Feeds the candidate lines of consecutive blocks to a source, in order, with line
    numbers and the context lines that run on into the next block."""

    def __init__(self, src: LineSource) -> None:
        self.src = src
        self.base = 0
        self.carry = (0, 0)
        self.exact = True  # ``base`` is the number of lines, not an upper bound

    def feed(self, span: Span) -> None:
        if self.carry[0]:
            span.take_carried(self.carry)
        self.src.feed_span(span, self.base + 1)
        self.base += span.newlines
        self.exact = self.exact and span.exact
        self.carry = span.carry

    def total(self, inp: InputSpans) -> int | None:
        """Lines of the input (None when only positions were kept)."""
        if not self.exact:
            return None
        return self.base + (1 if inp.nbytes and inp.last_byte != b"\n" else 0)


def run_input(src: LineSource, inp: InputSpans, chunks: Iterator[bytes | bytearray],
              pool: ThreadPoolExecutor | None, anchors: Sequence[bytes],
              workers: int) -> int | None:
    """Search all spans of one input (in parallel when a pool is given); returns lines."""
    out = LineFeeder(src)
    inflight: list[Future[Span]] = []
    config = inp.config
    for buf, lo, hi in inp.spans(chunks):
        if pool is None:
            out.feed(search_span(buf, lo, hi, anchors, config))
            continue
        inflight.append(pool.submit(search_span, buf, lo, hi, anchors, config))
        del buf  # the read-buffer pool reuses a buffer once no span refers to it
        if len(inflight) >= workers + 2:
            out.feed(inflight.pop(0).result())
    for fut in inflight:
        out.feed(fut.result())
    return out.total(inp)
