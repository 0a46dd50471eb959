"""The storm path's pass over one span: every line that holds an Xid lead, read where it
lies in the buffer, merged in order with the span's candidate lines.

Where Hyperscan searches a span that storm lines crowd
(:func:`gputriage.logscan.search.search_span` with ``storm``), the lines that hold
``NVRM: Xid (PCI:`` are left out of the candidates (but those a screen, a call-trace
anchor or a continuation line after them makes candidates), and :class:`SpanPass` finds
them with a ``finditer`` that also reads the usual shape (bus, code, pid, process,
message), a piece of the span (``PIECE``) at a time. A line of that shape whose key has
a folded event is folded right there, by a loop that does per line only what differs
from line to line: its prefix (each piece's at once where they differ on every line,
:meth:`gputriage.logscan.storm.StormLines.heads_of`), key and process are looked up per
distinct value, and it adds its count, its process, its fault pattern while those are
worked out and its GPU's Xid state. Its line number and text are worked out only for the
last line of each key, when the pass hands over to the per-line parse.

Every other line goes to :meth:`gputriage.logscan.storm.StormLines.feed` in its turn,
numbered as :func:`gputriage.logscan.search._wanted_lines` would have numbered it:

- the candidate lines;
- lines of another shape, or screened by the search;
- lines followed by continuation lines (taken with them);
- the first occurrences of a key, kept one by one (but in a worker's block after the
  first, where a plain code's are kept as their bytes, the folder and boot updated here:
  the process that joins the blocks builds their events only where the whole file keeps
  them one by one, see ``Folder.defer``);
- lines that start a boot;
- lines that come while the extractor is busy.

So the events are those of the per-line parse by construction
(``tests/test_logscan_storm.py`` compares them on storms of every format, in blocks read
here and in worker processes).
"""

from __future__ import annotations

import mmap
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from itertools import pairwise, repeat
from operator import add
from typing import TYPE_CHECKING, Any

from gputriage.logscan.storm import CACHE, LazyXid, Source, StormLines
from gputriage.parsers.kernel_extractor import MAX_LINE
from gputriage.parsers.kernel_fold import Deferred, XidState, code_number, follows_code
from gputriage.parsers.kernel_repeats import (
    APP_FAULTS,
    PATTERN_TRIES,
    PROCESSES,
    count_pattern,
)
from gputriage.text.newlines import newlines

if TYPE_CHECKING:
    from gputriage.logscan.span import Span

__all__ = ["SpanPass"]

# the first lead of each line of a span (a match runs to the line's end, and on over the
# newline and blank that start a continuation line where one follows), with (where the
# line has the usual shape) what the storm path reads of it: its key (bus and code as
# printed) and its pid and process as printed (each looked up as it is, worked out once
# per distinct value); the rest of the line; and that newline and blank, or b"" (in the
# span: what ``buf[e + 1] in _BLANK`` tests, ``e`` the line's end)
# (possessive: no part of a match ever gives back what it took, which spares the regex
# engine the bookkeeping of backtracking, about 40 % of its matching work per line)
_FIND = re.compile(rb"NVRM: Xid \(PCI:(?:([^)\n]{0,40}+\): ?+[0-9]{1,5}+), "
                   rb"(pid='?+[^,'\n]{0,32}+'?+, ?+name=[^,\n]{0,64}+), ?+)?(.*+)(\n[ \t]|)")
_KEY = re.compile(rb"(.*)\): ?([0-9]+)", re.S)  # a key: (bus, code)
_WHO = re.compile(rb"pid=('?[^,']*'?), ?name=(.*)", re.S)  # a pid and process: (pid, name)
_RESET = (b" 154", b":154")  # how a key of an Xid 154 ends
# (bus and code, pid and name as printed -> what the storm path reads of them: the same in
# every input, kept across the spans and blocks a process reads)
_KEYS: dict[bytes, tuple[bytes, bytes]] = {}
_WHOS: dict[bytes, tuple[str, str]] = {}
_MAX_CONT = 8  # continuation lines taken after a line (``search.MAX_CONT``)
# bytes of a span whose leads are matched, then folded, at a time: the bytes, the matches
# and what is read of them are still in the CPU's cache when the loop reads them (on the
# benchmarks' 1 GB Xid storm, 8 % less CPU than the whole 16 MiB span at once; 256 KiB to
# 2 MiB measure alike)
PIECE = 1 << 20
_BLANK = (32, 9)  # the first byte of a continuation line
Line = tuple[int, bytes | bytearray, bool]
_START, _END, _GROUPS = re.Match.start, re.Match.end, re.Match.groups


def _start_of(pair: tuple[bytes, int]) -> int:
    return pair[1]


class SpanPass:
    """One span's lines, candidates and storm lines, in order (see the module
    docstring): numbered from ``base``, exactly when ``exact``, else counting the bytes of
    gaps over ``gap_exact`` (the span's ``newlines`` and ``exact`` are set here)."""

    def __init__(self, storm: StormLines, src: Source, span: Span, base: int, exact: bool,
                 gap_exact: int) -> None:
        assert span.storm is not None
        self.storm, self.src, self.span, self.base = storm, src, span, base
        self.exact, self.gap_exact = exact, gap_exact
        self.buf, self.lo, self.hi = buf, lo, hi = span.storm
        self.starts, self.screened_at = span.starts, span.screened_at
        # bus and code as printed -> (folded event, its repeats, bus, code, an application
        # fault, the code's number, a code whose Xid state is set inline, the key of its
        # GPU's Xid state, an Xid 45)
        self.hots: dict[bytes, tuple[Any, ...]] = {}
        # key -> its latest line's start (the last occurrence of the repeats ``hots`` keeps
        # for it: read when the pass hands over, before ``hots`` can change)
        self.lastpos: dict[bytes, int] = {}
        self.i = 0  # the next candidate line
        self.next_at = self.starts[0] if self.starts else hi + 1
        # numbering: line starts (ascending) with the newlines before each, from which
        # the newlines before a later line up to the next one are counted
        self.marks, self.marked = [lo], [0]
        self.prev = lo  # the last line listed
        self.approx = False
        self.boot = self.epochs = -1
        self.cur: Any = None  # the boot segment
        self.busy = True  # the extractor is not idle: lines go to the per-line parse
        self.folded = 0  # lines folded since the last hand-over

    # -- numbering ----------------------------------------------------------------------
    def number(self, at: int) -> int:
        """The newlines before the line that starts at ``at``."""
        marks, marked = self.marks, self.marked
        k = bisect_right(marks, at) - 1
        pos, n = marks[k], marked[k]
        if at != pos:
            n += newlines(self.buf, pos, at)
            if k == len(marks) - 1:
                marks.append(at)
                marked.append(n)
        return n

    def jump(self, at: int) -> None:
        """A line at ``at`` after a gap that is not counted: the last line's number plus
        the gap's bytes."""
        n = self.number(self.prev) + at - self.prev
        self.marks.append(at)
        self.marked.append(n)
        self.approx = True

    def listed(self, at: int) -> int:
        """The number of the next line listed, at ``at``."""
        if not self.exact and at - self.prev > self.gap_exact:
            self.jump(at)
        self.prev = at
        return self.number(at)

    def line_at(self, at: int, n: int) -> Line:
        """The line at ``at`` as the search lists it (numbered ``n``)."""
        buf, hi = self.buf, self.hi
        e = buf.find(b"\n", at, hi)
        e = hi if e < 0 else e
        return (n, buf[at:min(e, at + MAX_LINE)], e - at > MAX_LINE)

    # -- hand-overs to the per-line parse ---------------------------------------------
    def hand_over(self, items: list[Line], screened: set[int] | None = None) -> None:
        """Settle what the pass deferred, then let the per-line parse take ``items``."""
        if self.lastpos:
            self._last_occurrences()
        if self.folded:
            self.src.fold.last_boot = self.boot
            self.src.ex.note_line(self.folded)
            self.folded = 0
        if items:
            self.src.screen = screened
            self.storm.feed(self.src, items, self.base)

    def _last_occurrences(self) -> None:
        """Make each key's latest line its folded event's last occurrence (read from the
        buffer, parsed only if it stays the last)."""
        buf, hi, find, hots = self.buf, self.hi, self.buf.find, self.hots
        for key, at in sorted(self.lastpos.items(), key=_start_of):  # (counted onwards)
            reps = hots[key][1]
            e = find(b"\n", at, hi)
            raw = bytes(buf[at:hi if e < 0 else e])
            reps.pending = (LazyXid(raw, self.storm.fast), self.base + self.number(at),
                            self.boot, 0)
        self.lastpos.clear()

    def settle(self) -> None:
        """Take in what the per-line parse may have changed: boot, epochs, extractor."""
        src = self.src
        segs = src.segs
        if len(segs) - 1 != self.boot or src.fold.epochs != self.epochs:
            if self.lastpos:  # (what ``hots`` kept of them is void from here)
                self._last_occurrences()
            self.hots.clear()
            self.boot, self.epochs = len(segs) - 1, src.fold.epochs
        self.cur = segs[-1]
        self.busy = src.held is not None or not src.ex.idle

    def candidates(self, upto: int) -> None:
        """Hand over the candidate lines that start before ``upto``."""
        starts, i = self.starts, self.i
        j = bisect_left(starts, upto, i)
        if j > i:
            self.hand_over([])
            items, screened = [], set()
            for at in starts[i:j]:
                item = self.line_at(at, self.listed(at))
                items.append(item)
                if at in self.screened_at:
                    screened.add(self.base + item[0])
            self.hand_over(items, screened)
            self.i = i = j
            self.settle()
        self.next_at = starts[i] if i < len(starts) else self.hi + 1

    def meet(self, at: int, plain: bool) -> bool | None:
        """A storm line at ``at`` at or after the next candidate: the candidates before it
        handed over; True when it is a candidate too (found by another anchor or inside
        a context window) that the pass may still fold (``plain``: of the usual shape),
        None when it was handed over as one."""
        self.candidates(at)
        if at != self.next_at:
            return False
        self.i += 1
        self.next_at = self.starts[self.i] if self.i < len(self.starts) else self.hi + 1
        if plain and not self.busy and at not in self.screened_at:
            return True
        self.hand_over([])
        n = self.listed(at)
        self.hand_over([self.line_at(at, n)],
                       {self.base + n} if at in self.screened_at else set())
        self.settle()
        return None

    def alone(self, at: int, settled: bool = True) -> None:
        """Hand over the storm line at ``at`` and the continuation lines after it (up to
        the next candidate). ``settled`` False: what the pass deferred stays deferred (the
        line's key has no folded event yet: its parse changes none, nor boot or epoch)."""
        if settled:
            self.hand_over([])
        buf, hi = self.buf, self.hi
        items = [self.line_at(at, self.number(at))]
        pos = at
        while True:
            e = buf.find(b"\n", pos, hi)
            pos = hi + 1 if e < 0 else e + 1
            if pos >= hi:
                left = _MAX_CONT + 1 - len(items)
                if left:  # wanted from the next span
                    self.span.carry = max(self.span.carry, (left, 0))
                break
            if len(items) > _MAX_CONT or pos >= self.next_at or buf[pos] not in _BLANK:
                break
            items.append(self.line_at(pos, self.listed(pos)))
        if settled or len(items) > 1:
            self.src.screen = set()
            self.storm.feed(self.src, items, self.base)
        else:  # a line whose key has no folded event: what the storm path does with it
            n, raw, cut = items[0]
            self.src.line(self.base + n, raw, cut)
        self.settle()

    # -- the pass -----------------------------------------------------------------------
    def run(self) -> None:
        """Fold the span's storm lines, handing every other line over in its turn. Piece
        by piece (:meth:`_pieces`), each lead's match, line start and prefix are worked
        out for all of them at once (by ``map``, in C); the loop then does per line only
        what differs from line to line (``Folder.fold_plain``'s work, inline, its last
        line deferred)."""
        buf, lo, hi = self.buf, self.lo, self.hi
        starts_line = lo > 0 and buf[lo - 1] == 10  # (then rfind from the newline before)
        self.settle()
        for a, b in self._pieces():
            found = list(_FIND.finditer(buf, a, b))
            leads = list(map(_START, found))
            # each lead's line start: after the newline before it, or the span's start
            if starts_line:
                line_starts = list(map(add, map(buf.rfind, repeat(b"\n"), repeat(lo - 1), leads),
                                       repeat(1)))
            else:
                line_starts = list(map(max, map(add, map(buf.rfind, repeat(b"\n"), repeat(lo),
                                                         leads), repeat(1)), repeat(lo)))
            heads: Any = map(buf.__getitem__, map(slice, line_starts, leads))
            if not isinstance(buf, (bytes, mmap.mmap)):  # (a read buffer's slices: bytearrays)
                heads = map(bytes, heads)
            heads = list(heads)
            read = self.storm.heads_of(heads)
            self._fold_all(zip(line_starts, map(_END, found), map(_GROUPS, found), heads,
                               [None] * len(heads) if read is None else read, strict=True))
        self.candidates(hi + 1)
        self.hand_over([])
        if not self.exact and hi - self.prev > self.gap_exact:
            self.jump(hi)
        self.span.newlines = self.number(hi)
        self.span.exact = not self.approx

    def _pieces(self) -> list[tuple[int, int]]:
        """The span cut into runs of whole lines of about :data:`PIECE` bytes: (start,
        end) of each, in order. A cut comes before a line that starts with neither a
        space nor a tab, so each lead's match, which reads the first byte of the line
        after its own, reads what it would over the whole span."""
        buf, lo, hi, find = self.buf, self.lo, self.hi, self.buf.find
        cuts = [lo]
        at = lo + PIECE
        while at < hi:
            e = find(b"\n", at, hi)
            while 0 <= e < hi - 1 and buf[e + 1] in _BLANK:
                e = find(b"\n", e + 1, hi)
            if e < 0 or e >= hi - 1:
                break
            cuts.append(e + 1)
            at = e + 1 + PIECE
        cuts.append(hi)
        return list(pairwise(cuts))

    def _fold_all(self, rows: Iterable[tuple[int, int, tuple[Any, ...], bytes, Any]]) -> None:
        """The loop of :meth:`run` over (line start, match end, match groups, line prefix,
        what the prefix tells where all of the piece's were read at once, else None:
        :meth:`~gputriage.logscan.storm.StormLines.heads_of`) of each lead in order."""
        buf = self.buf
        exact, gap_exact = self.exact, self.gap_exact
        storm = self.storm
        known, head_of = storm.heads, storm.head_of
        whos = _WHOS
        src = self.src
        formats, fold, lastpos = src.formats, src.fold, self.lastpos
        attribute = fold.attribute
        states = fold.states
        hots = self.hots
        busy, cur, boot = self.busy, self.cur, self.boot
        shown: Any = None  # the prefix whose time ``cur`` saw last
        stale = False  # a line was handed over: boot, epochs, extractor, segment may differ
        # ``self.prev`` and lines folded since ``self.folded`` was last added to, kept
        # here between the calls that read them (``meet``, ``jump``, ``alone``); the
        # next candidate's start, as ``meet`` leaves it
        prev, folded, next_at = self.prev, 0, self.next_at
        for ls, e, groups, hb, head in rows:
            if stale:
                hots, busy, cur, boot, shown = self.hots, self.busy, self.cur, self.boot, None
                prev, stale = self.prev, False
            key, who, rest, cont = groups
            listed: bool | None = False
            if ls >= next_at:
                self.prev, self.folded, folded = prev, self.folded + folded, 0
                listed = self.meet(ls, key is not None)
                hots, busy, cur, boot, shown = self.hots, self.busy, self.cur, self.boot, None
                prev, next_at = self.prev, self.next_at
                if listed is None:
                    continue
                if cont:  # (a candidate followed by continuation lines)
                    e -= 2
                    cont = b""
            if not exact and ls - prev > gap_exact:
                self.prev = prev
                self.jump(ls)
            prev = ls
            if busy or key is None or e - ls > MAX_LINE or cont:
                self.prev, self.folded, folded = prev, self.folded + folded, 0
                self.alone(ls)
                stale = True
                continue
            head = head or known.get(hb) or (head_of(hb, buf[ls:e]) if hb.isascii() else None)
            if head is None:
                self.prev, self.folded, folded = prev, self.folded + folded, 0
                self.alone(ls)
                stale = True
                continue
            if head is not shown:
                fmt, time, up, _seconds = head
                if fmt not in formats:
                    formats[fmt] = None
                if up is not None and cur.last_up is not None and up < cur.last_up - 1.0:
                    self.prev, self.folded, folded = prev, self.folded + folded, 0
                    self.alone(ls)  # a new boot: the full bookkeeping
                    stale = True
                    continue
                # (``BootSegment.saw`` here for every way the line may go: the per-line
                # parse of one handed over sees the same prefix again, which changes none)
                shown = head
                cur.saw(time, up)
            h = hots.get(key)
            if h is None:
                h = self._hot(key)
                if h is None:  # its first occurrences: kept one by one
                    if self._defer(ls, e, key, who, rest, head):
                        folded += 1
                        continue
                    self.prev, self.folded, folded = prev, self.folded + folded, 0
                    self.alone(ls, key.endswith(_RESET))  # (parsed, its event built)
                    stale = True
                    continue
            ev, reps, bus, code, app, number, plainly, gpu, caused = h
            if attribute:
                if plainly:  # (``Folder.attribute_line`` for the usual codes, inline)
                    st = states.get(gpu)
                    if st is None:
                        states[gpu] = XidState(number, head[3], 0)
                    else:
                        st.code, st.at, st.since = number, head[3], 0
                else:  # (an Xid 45 after another Xid of its GPU inline, see _attribute)
                    _attribute(fold, reps, ev, bus, head[3], code, boot,
                               states.get(gpu) if caused else None)
            ev.count += 1
            lastpos[key] = ls
            folded += 1
            pk, pname = whos.get(who) or _who(storm, who)
            if not pk:
                continue
            named = reps.processes  # (``count_process``, inline: a storm of many
            have = named.get(pk)  # processes names its first ones only)
            if not have:
                if have is None:
                    if len(named) >= PROCESSES:
                        reps.other_processes += 1
                        continue
                    named[pk] = pname
                elif pname:
                    named[pk] = pname
            if app and reps.tries.get(pk, 0) < PATTERN_TRIES:
                count_pattern(reps, pk, code, rest)
        self.prev, self.folded = prev, self.folded + folded

    def _defer(self, ls: int, e: int, key: bytes, who: bytes, rest: bytes,
               head: tuple[Any, ...]) -> bool:
        """In a block that defers (``LineSource.defer``), keep the line at ``ls`` (its
        match ending at ``e``, its line's end) as its bytes, where its key has no folded
        event yet and its code is a plain one (not 79 or 154): what the per-line
        parse does to the folder is done here, but its event (see ``Folder.defer``; the
        boot segment saw its prefix already). False: the caller parses it."""
        raw_key = _KEYS.get(key) if self.src.defer else None
        if raw_key is None:
            return False  # (_hot read every key first)
        storm = self.storm
        bus, code = storm.plain.get(raw_key) or storm.plain_of(*raw_key)
        number = code_number(code)
        if number is None or code in ("79", "154"):
            return False
        raw = bytes(self.buf[ls:e])
        item = Deferred(raw, self.base + self.number(ls), self.boot, bus, code,
                        _WHOS.get(who) or _who(storm, who), len(raw) - len(rest),
                        self.src.name, 0)
        return self.src.fold.defer(item, number, head[3])

    def _hot(self, key: bytes) -> tuple[Any, ...] | None:
        """What the pass keeps of a key whose folded event exists (None: none yet)."""
        storm = self.storm
        raw = _KEYS.get(key)
        if raw is None:
            if len(_KEYS) >= CACHE:
                _KEYS.clear()
            m = _KEY.fullmatch(key)
            assert m is not None  # (what _FIND read)
            raw = _KEYS[key] = (m[1], m[2])
        bus, code = storm.plain.get(raw) or storm.plain_of(*raw)
        hot = None if code == "154" else self.src.fold.hot(self.boot, bus, code)
        if hot is None:
            return None
        number = code_number(code)
        plainly = number is not None and code not in ("45", "79")
        h = self.hots[key] = (hot[0], hot[0].repeats, bus, code, code in APP_FAULTS, number,
                              plainly, (self.boot, bus), code == "45")
        return h


def _attribute(fold: Any, reps: Any, ev: Any, bus: str | None, at: float | None, code: str,
               boot: int, st: XidState | None) -> None:
    """``Folder.attribute_line`` for a line of a code other than the usual ones (those
    are done inline), no cause named (none is, on this path). For an Xid 45 whose GPU
    had another Xid before it (``st``, its state: no lead to note), what it does is done
    here, without the method's other cases: the cause it follows counted, or none."""
    if st is None or st.code is None:
        fold.attribute_line(reps, ev, bus, at, None, code, boot)
        return
    found = follows_code(st, at)
    if found is None:
        reps.uncaused += 1
    else:
        reps.causes[found] = reps.causes.get(found, 0) + 1
    st.since += 1


def _who(storm: StormLines, who: bytes) -> tuple[str, str]:
    """A line's process key and name from its ``pid=..., name=...`` as printed."""
    if len(_WHOS) >= CACHE:
        _WHOS.clear()
    m = _WHO.fullmatch(who)
    assert m is not None  # (what _FIND read)
    found = _WHOS[who] = storm.procs.get((m[1], m[2])) or storm.process_of(m[1], m[2])
    return found
