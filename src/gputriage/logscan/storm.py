"""The line an Xid storm repeats, counted into its folded event without being parsed.

Once a plain Xid's key (boot, reset epoch, bus, code) has a folded event
(:mod:`gputriage.parsers.kernel_fold`: its first ``KEEP`` occurrences were kept one by
one), every further occurrence only adds to that event: its count, its process (and
fault pattern while those are still being worked out), its Xid 45 cause and its last
occurrence. :meth:`StormLines.feed` does exactly that for a line of the usual shape
``NVRM: Xid (PCI:BUS): CODE, pid=PID, name=NAME, MESSAGE`` with one literal-led match,
in one loop over a span's candidate lines: the line's prefix (its format, time and
uptime) is looked up per distinct prefix, its key's bus, code and folded events and its
process per distinct value: no decoding of the prefix, no table lookup, no event built,
no call per line but the fold's. A prefix that differs on every line in its kernel
uptime (dmesg's, kern.log's) or its stamp's microseconds (rsyslog's high-precision
stamps) is read from what the rest of it told, once (:meth:`StormLines.head_of`), and a
run of them at once, in C (:meth:`StormLines.heads_of`). The last occurrence is parsed
by the Xid fast path (:class:`gputriage.logscan.fastline.FastXid`) only if it stays the
last one.

A line is taken only where the fast path would read it the same way and fold it: it
holds none of the literals that give an Xid message more details than code, pid,
process, message and channel (a link, a recovery action, an NVLink5 unit, a named
cause), nor those of a table row that decides before the Xid row, nor escapes, control
or non-ASCII bytes; its prefix is one the fast path reads; it starts no new boot; it
comes with nothing under way in the extractor. Any other line (and any line whose key
has no folded event yet) takes the full path, ``LineSource.line``, in its turn, so the
events are those of the per-line parse by construction
(``tests/test_logscan_storm.py`` compares both on storms of every format).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from itertools import repeat
from operator import add, getitem, itemgetter, truediv
from typing import Any, Protocol, cast

from gputriage.logscan.fastline import DIRECT, EARLIER, EARLIER_LOWER, PASSES, FastXid
from gputriage.parsers.kernel_extractor import MAX_LINE
from gputriage.parsers.kernel_fold import Folder
from gputriage.parsers.kernel_model import DriverEvent
from gputriage.parsers.kernel_repeats import line_process
from gputriage.text.fields import normalize_bus_id

__all__ = ["LEAD", "NAMED", "NAME_FIELD", "SCREEN_EXPRESSION", "SCREEN_LITERALS", "USABLE",
           "LazyXid", "Source", "StormLines"]

_LEAD = LEAD = b"NVRM: Xid (PCI:"
_STORM = re.compile(rb"NVRM: Xid \(PCI:([^)\n]{0,40})\): ?([0-9]{1,5}), "
                    rb"pid=('?[^,'\n]{0,32}'?), ?name=([^,\n]{0,64}), ?")

# what sends a line to the full path: literals that add details or let another row
# decide (those tested case-blind, on the lower-cased line), escapes; non-ASCII bytes too
# (lower-casing could make a literal of them)
INLINE = b"ink"  # ("NVLink", "link")
_SCREEN = (INLINE, b"recovery action", b"caused by", b"fallen off the bus", b"#012", b"\x1b",
           *(n.encode() for n in EARLIER))
_SCREEN_LOWER = (b"fatal", *(n.lower().encode() for n in EARLIER_LOWER))
# the same test where Hyperscan searches a span the storm crowds: these literals (case
# ignored where True), where the lead comes before them on their line
# (:class:`gputriage.logscan.hsearch.Matcher`), and an expression of the lead, then
# ``INLINE``, a non-ASCII byte or a literal of one byte ("link" is a word of many other
# kernel lines: searched alone, it would call back on every "Link is Up"; a literal of
# one byte, the escape, costs the search of a span a fifth more, found alone, and next
# to nothing in the expression's class). One expression of the lead, then any of them,
# costs the search about a third more.
_BYTES = tuple(lit for lit in _SCREEN if len(lit) == 1)
SCREEN_LITERALS = (*((lit, False) for lit in _SCREEN if lit != INLINE and lit not in _BYTES),
                   *((lit, True) for lit in _SCREEN_LOWER))
SCREEN_EXPRESSION = (rb"NVRM: Xid \(PCI:[^\n]*(?:" + re.escape(INLINE) + rb"|["
                     + b"".join(rb"\x%02x" % lit[0] for lit in _BYTES) + rb"\x80-\xff])")
USABLE = DIRECT and PASSES  # the Xid row as this module knows it (else: never taken)
# where an Xid line names its process, and the anchors a storm's process names hold
# (nvidia-smi, nvidia-persistenced: one Xid line in nine of the benchmarks' storm): where
# Xid lines crowd a span, such an anchor finds no line where it follows the field (the
# storm pass reads the Xid lines; see ``search.anchor_hits``)
NAME_FIELD = b", name="
NAMED = (b"nvidia",)
_UPTIME = rb"[0-9]{1,12}\.[0-9]{1,9}"
_DMESG = re.compile(rb"\[ {0,12}(" + _UPTIME + rb")\] *")  # dmesg raw: one per line
_DMESG_ALL = re.compile(rb"(?:\[ {0,12}" + _UPTIME + rb"\] *\n)*+")  # such prefixes, each
# ended by a newline; and what follows the last "[" of prefixes that end with one
_UPTIMES = re.compile(rb"(?: {0,12}" + _UPTIME + rb"\] *\n)*+")
_STEM, _SEP, _TAIL = itemgetter(0), itemgetter(1), itemgetter(2)
_FMT, _TIME, _SECONDS = itemgetter(0), itemgetter(1), itemgetter(2)
_DMESG_RAW = "dmesg-raw"  # their format
# an ISO stamp to the microsecond: (its text up to them, the microseconds); prefixes led
# by one, each ended by a newline; where its microseconds lie, and what comes before and
# after them
_ISO_SECOND = rb"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}"
_MICROS = re.compile(rb"(" + _ISO_SECOND + rb"[.,])([0-9]{6})(?![0-9])")
_MICRO_HEADS = re.compile(rb"(?:" + _ISO_SECOND + rb"[.,][0-9]{6}(?![0-9])[^\n]*\n)*+")
_TO_MICROS, _MICROS_AT, _PAST_MICROS = slice(0, 20), slice(20, 26), slice(26, None)
_BASE, _BASE_US = itemgetter(1), itemgetter(2)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
CACHE = 4096  # prefixes and keys kept (then the cache starts again)
_PLAIN: dict[tuple[Any, ...], tuple[str | None, str]] = {}  # (bus, code) -> as read
_PROCS: dict[tuple[Any, ...], tuple[str, str]] = {}  # (pid, name) -> line_process

# what a prefix tells the storm path: (format, time, uptime, seconds); None: not a fast one
Head = tuple[str, datetime | None, float | None, float | None]


class LazyXid:
    """A folded line kept as its bytes until it is needed (as the last occurrence)."""

    __slots__ = ("fast", "raw")

    def __init__(self, raw: bytes | bytearray, fast: FastXid) -> None:
        self.raw = bytes(raw)
        self.fast = fast

    def events(self, lineno: int | None = None, origin: str | None = None,
               boot: int = 0) -> list[DriverEvent]:
        line = self.fast.parse(self.raw)
        assert line is not None  # it was taken only where the fast path reads it
        return line.events(lineno, origin, boot)


class Source(Protocol):
    """What the storm path updates of a :class:`gputriage.logscan.lines.LineSource`."""

    segs: list[Any]  # its BootSegments
    fold: Folder
    held: Any  # a /dev/kmsg record waiting for its dictionary lines
    bounds: tuple[int, int] | None  # a worker's own lines
    formats: dict[str, None]
    ex: Any  # its EventExtractor (``note_line``)
    screen: set[int] | None
    name: str  # the input's
    defer: bool  # first occurrences kept as their bytes (see ``Folder.defer``)

    def line(self, lineno: int, raw: bytes | bytearray, cut: bool) -> None: ...


class StormLines:
    """Folds the repeated plain Xid lines of one input (see the module docstring)."""

    def __init__(self, fast: FastXid) -> None:
        self.fast = fast
        self.heads: dict[bytes, Head] = {}  # (what a prefix tells depends on the input)
        # a prefix's stem before the kernel's uptime ("Aug 30 03:53:21 host kernel: ", in
        # front of "[ 1234.567890] ") -> its format, time and seconds
        self.stems: dict[bytes, tuple[str, datetime | None, float | None]] = {}
        # a prefix whose ISO stamp has microseconds ("2024-08-30T03:53:21.123456+00:00
        # host kernel: ", rsyslog's high-precision format), less its microseconds -> its
        # format, the time of its second and that second's microseconds since the epoch
        # (None where its time has no zone)
        self.fractions: dict[bytes, tuple[str, datetime, int | None]] = {}
        # what a bus and code, a pid and name as printed are: the same in every input,
        # kept across the inputs and blocks a process reads
        self.plain = _PLAIN
        self.procs = _PROCS

    def feed(self, src: Source, lines: list[tuple[int, bytes | bytearray, bool]],
             base: int) -> None:
        """Process a span's candidate lines in order (numbered from ``base``): each one
        of the usual shape whose key has a folded event (see the module docstring) is
        folded into it here, in one loop that looks up each distinct prefix, key and
        process once; any other line goes through ``src.line`` (the per-line parse)."""
        line = src.line
        ex = src.ex
        fold = src.fold
        heads, plain, procs = self.heads, self.plain, self.procs
        formats = src.formats
        lazy, fast = LazyXid, self.fast
        fold_plain = fold.fold_plain
        match = _STORM.match
        screen = src.screen
        bounds = src.bounds
        low, high = bounds if bounds is not None else (-1, 1 << 62)
        # (bus, code) as printed -> (folded events, bus, code) in ``boot`` and ``epochs``
        hots: dict[tuple[bytes, bytes], tuple[Any, str | None, str]] = {}
        boot = epochs = -1
        for n, raw, cut in lines:
            lineno = base + n
            if cut or src.held is not None or not ex.idle or not low <= lineno <= high:
                line(lineno, raw, cut)
                continue
            at = raw.find(_LEAD)
            m = match(raw, at) if at >= 0 and len(raw) <= MAX_LINE else None
            if (m is None or not raw.isascii() or (lineno in screen if screen is not None
                                                   else _screened(None, lineno, raw, at))):
                line(lineno, raw, cut)
                continue
            head_bytes = bytes(raw[:at])  # (a read buffer's lines are bytearrays)
            head = heads.get(head_bytes) or self.head_of(head_bytes, raw)
            if head is None:
                line(lineno, raw, cut)
                continue
            segs = src.segs
            cur = segs[-1]
            up = head[2]
            if up is not None and cur.last_up is not None and up < cur.last_up - 1.0:
                line(lineno, raw, cut)  # a new boot: the full bookkeeping
                continue
            if len(segs) - 1 != boot or fold.epochs != epochs:
                hots.clear()
                boot, epochs = len(segs) - 1, fold.epochs
            bus_raw, code_raw, pid_raw, name_raw = m.groups()
            key = (bus_raw, code_raw)
            h = hots.get(key)
            if h is None:
                bus, code = plain.get(key) or self.plain_of(bus_raw, code_raw)
                hot = None if code == "154" else fold.hot(boot, bus, code)
                if hot is None:
                    line(lineno, raw, cut)
                    continue
                h = hots[key] = (hot, bus, code)
            proc = procs.get((pid_raw, name_raw)) or self.process_of(pid_raw, name_raw)
            fmt, time, _up, seconds = head
            if fmt not in formats:
                formats[fmt] = None
            cur.saw(time, up)
            ex.note_line()
            fold_plain(h[0], h[1], h[2], proc, raw[m.end():], seconds, lazy(raw, fast),
                       lineno, boot)

    def head_of(self, head: bytes, raw: bytes | bytearray) -> Head | None:
        """What the fast path reads in a line's prefix (cached per prefix; where the
        kernel's uptime ends it, per stem before the uptime: kern.log's lines differ in
        it alone from second to second)."""
        d = _DMESG.fullmatch(head)
        if d is not None:  # the fast path's first shape; the uptime differs on every line
            up = float(d.group(1))
            return _DMESG_RAW, None, up, up
        cut = head.rfind(b"[")
        d = _DMESG.fullmatch(head, cut) if cut > 0 else None
        if d is not None and (stem := self.stems.get(head[:cut])) is not None:
            # (the fast path reads the stem alike whatever uptime follows it)
            up = float(d.group(1))
            return stem[0], stem[1], up, up if stem[2] is None else stem[2]
        f = _MICROS.match(head) if d is None else None
        if f is not None and (known := self.fractions.get(_less_micros(head))) is not None:
            # (likewise whatever microseconds its stamp has)
            micros = int(f[2])
            at = known[1] + timedelta(0, 0, micros)
            return known[0], at, None, (at.timestamp() if known[2] is None
                                        else (known[2] + micros) / 1_000_000)
        found = self.fast.prefix(raw)
        if found is None or found[2] != len(head):
            return None  # (not one the fast path reads, or its message starts elsewhere)
        stamps, fmt, t, uptime = found[0]
        out: Head = (fmt, t, uptime, t.timestamp() if t is not None else uptime)
        if f is not None:
            self._learn_fraction(head, f, out, stamps)
        elif uptime is None:  # a prefix with an uptime is seldom seen twice
            if len(self.heads) >= CACHE:
                self.heads.clear()
            self.heads[head] = out
        elif d is not None and len(stamps) == 2 and stamps[1] == d.group(1).decode():
            if len(self.stems) >= CACHE:
                self.stems.clear()
            self.stems[head[:cut]] = (fmt, t, out[3] if t is not None else None)
        return out

    def _learn_fraction(self, head: bytes, f: re.Match[bytes], out: Head,
                        stamps: tuple[str, ...]) -> None:
        """Keep what ``head``, whose stamp has microseconds (``f``), tells less them, where
        the fast path read them as such (its stamp alone, a time, no uptime): its format,
        its time less them and, where that time has a zone, its microseconds since the
        epoch (its seconds, as ``datetime.timestamp`` gives them: the integer divided by
        a million, correctly rounded)."""
        fmt, t, uptime, _ = out
        before, micros = f[1].decode(), int(f[2])
        if len(stamps) != 1 or t is None or uptime is not None or \
                not stamps[0].startswith(before + f[2].decode()):
            return
        if len(self.fractions) >= CACHE:
            self.fractions.clear()
        base = t - timedelta(0, 0, micros)
        self.fractions[_less_micros(head)] = (
            fmt, base, (base - _EPOCH) // _MICROSECOND if base.utcoffset() is not None else None)

    def heads_of(self, heads: list[bytes]) -> list[Head] | None:
        """What :meth:`head_of` reads in each of ``heads``, the prefixes of a run of Xid
        lines, in their order, all read at once, in C, where each differs from the others
        in the kernel's uptime or its stamp's microseconds alone (so that none is read
        from the cache): raw dmesg prefixes, prefixes whose stems before the uptime were
        read, or prefixes whose ISO stamps have microseconds and whose rest was read (each
        new stem read here, by head_of, once); None for any other run (read line by
        line)."""
        if not heads:
            return None
        if heads[0][:1] == b"[":
            return _dmesg_heads(heads)
        if _MICROS.match(heads[0]) is not None:
            return self._micro_heads(heads)
        if heads[0].rfind(b"[") > 0:
            return self._uptime_heads(heads)
        return None

    def _uptime_heads(self, heads: list[bytes]) -> list[Head] | None:
        """:meth:`heads_of` where the first prefix has a "[" after its start: each prefix
        read from its stem before the kernel's uptime (:meth:`head_of`'s stems) and its
        own uptime, where all end with one; else None."""
        parts = list(map(bytes.rpartition, heads, repeat(b"[")))
        stems, tails = list(map(_STEM, parts)), list(map(_TAIL, parts))
        joined = b"\n".join(tails) + b"\n"
        if b"" in stems or not all(map(_SEP, parts)) or joined.count(b"\n") != len(heads) \
                or _UPTIMES.fullmatch(joined) is None:
            return None
        known = self.stems
        if not self._learned(known, stems, heads):
            return None
        infos = list(map(known.__getitem__, stems))
        seconds = list(map(_SECONDS, infos))
        ups = list(map(float, map(bytes.strip, tails, repeat(b" ]"))))
        if None in seconds:  # (no time: the seconds are the uptime's)
            if seconds.count(None) != len(seconds):
                return None
            seconds = ups
        return list(zip(map(_FMT, infos), map(_TIME, infos), ups, seconds, strict=True))

    def _micro_heads(self, heads: list[bytes]) -> list[Head] | None:
        """:meth:`heads_of` where the first prefix's ISO stamp has microseconds: each
        prefix read from what the rest of it told (:meth:`head_of`'s fractions) and its
        own microseconds, where all have them; else None."""
        joined = b"\n".join(heads) + b"\n"
        if joined.count(b"\n") != len(heads) or _MICRO_HEADS.fullmatch(joined) is None:
            return None
        # (_less_micros of each, in C)
        stems = list(map(add, map(getitem, heads, repeat(_TO_MICROS)),
                         map(getitem, heads, repeat(_PAST_MICROS))))
        known = self.fractions
        if not self._learned(known, stems, heads):
            return None
        infos = list(map(known.__getitem__, stems))
        micros = list(map(int, cast(list[bytes], map(getitem, heads, repeat(_MICROS_AT)))))
        times = list(map(add, map(_BASE, infos), map(timedelta, repeat(0), repeat(0), micros)))
        bases = list(map(_BASE_US, infos))
        seconds: Any = (map(datetime.timestamp, times) if None in bases else
                        map(truediv, map(add, bases, micros), repeat(1_000_000)))
        return list(zip(map(_FMT, infos), times, repeat(None), seconds))

    def _learned(self, known: dict[bytes, Any], stems: list[bytes], heads: list[bytes]) -> bool:
        """Whether each of ``stems`` is in ``known`` once :meth:`head_of` read the first
        of ``heads`` with it that is not (an ASCII one only, as the storm pass reads
        them)."""
        for stem, head in dict(zip(stems, heads, strict=True)).items():
            if stem not in known and (not stem.isascii() or
                                      self.head_of(head, head + LEAD) is None or
                                      stem not in known):
                return False
        return True

    def plain_of(self, bus: bytes, code: bytes) -> tuple[str | None, str]:
        """A line's bus id and code (cached per distinct pair)."""
        if len(self.plain) >= CACHE:
            self.plain.clear()
        found = self.plain[bus, code] = (normalize_bus_id(bus.decode("ascii")), code.decode())
        return found

    def process_of(self, pid: bytes, name: bytes) -> tuple[str, str]:
        """A line's process key and name (:func:`line_process`; cached per pair)."""
        if len(self.procs) >= CACHE:
            self.procs.clear()
        proc = self.procs[pid, name] = line_process(pid.decode("ascii").strip("'"),
                                                    name.decode("ascii"))
        return proc



def _less_micros(head: bytes) -> bytes:
    """A prefix led by an ISO stamp with microseconds (``_MICROS``), less them."""
    return head[_TO_MICROS] + head[_PAST_MICROS]


def _dmesg_heads(heads: list[bytes]) -> list[Head] | None:
    """:meth:`StormLines.heads_of` where the first prefix is a raw dmesg one: each one's
    uptime read, where all are (9 % less CPU time in the tasks of the benchmarks' 1 GB
    dmesg storm than one call of head_of per line); else None."""
    joined = b"\n".join(heads) + b"\n"  # (one match of them all: no call per prefix)
    if joined.count(b"\n") != len(heads) or _DMESG_ALL.fullmatch(joined) is None:
        return None
    # (each one's uptime is what is left once its brackets and blanks are stripped)
    ups = list(map(float, map(bytes.strip, heads, repeat(b"[] "))))
    return list(zip(repeat(_DMESG_RAW), repeat(None), ups, ups))


def _screened(screen: set[int] | None, lineno: int, raw: bytes | bytearray, at: int) -> bool:
    """Whether the line ``lineno`` (its Xid at ``at``) holds what sends it to the full
    path: in ``screen``, the lines the search found to (None: tested here)."""
    if screen is not None:
        return lineno in screen
    for literal in _SCREEN:
        if raw.find(literal, at) >= 0:
            return True
    low = raw[at:].lower()
    return any(literal in low for literal in _SCREEN_LOWER)
