"""The line an Xid storm repeats, counted into its folded event without being parsed.

Once a plain Xid's key (boot, reset epoch, bus, code) has a folded event
(:mod:`gputriage.parsers.kernel_fold`: its first ``KEEP`` occurrences were kept one by
one), every further occurrence only adds to that event: its count, its process (and
fault pattern while those are still being worked out), its Xid 45 cause and its last
occurrence. :class:`StormLines` does exactly that for a line of the usual shape
``NVRM: Xid (PCI:BUS): CODE, pid=PID, name=NAME, MESSAGE`` with one literal-led match,
the line's prefix (its stamps, time and format) looked up per distinct prefix, and the
key's bus and process per distinct key: no decoding of the prefix, no table lookup,
no event built. The last occurrence is parsed by the Xid fast path
(:class:`gputriage.logscan.fastline.FastXid`) only if it stays the last one.

A line is taken only where the fast path would read it the same way and fold it: it
holds none of the literals that give an Xid message more details than code, pid,
process, message and channel (a link, a recovery action, an NVLink5 unit, a named
cause), nor those of a table row that decides before the Xid row, nor escapes, control
or non-ASCII bytes; its prefix is one the fast path reads; it starts no new boot. Any
other line (and any line whose key has no folded event yet) returns False: the caller
takes the full path, so the events are those of the per-line parse by construction
(``tests/test_logscan_storm.py`` compares both on storms of every format).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Protocol

from gputriage.logscan.fastline import _DIRECT, _EARLIER, _EARLIER_LOWER, _PASSES, FastLine, FastXid
from gputriage.parsers.kernel_extractor import MAX_LINE
from gputriage.parsers.kernel_fold import Folder
from gputriage.parsers.kernel_model import DriverEvent
from gputriage.text.fields import normalize_bus_id

__all__ = ["SCREEN_EXPRESSION", "USABLE", "LazyXid", "Source", "StormLines"]

_LEAD = b"NVRM: Xid (PCI:"
_STORM = re.compile(rb"NVRM: Xid \(PCI:([^)\n]{0,40})\): ?([0-9]{1,5}), "
                    rb"pid=('?[^,'\n]{0,32}'?), ?name=([^,\n]{0,64}), ?")
# what sends a line to the full path: literals that add details or let another row
# decide (those tested case-blind, on the lower-cased line), escapes; non-ASCII bytes too
# (lower-casing could make a literal of them)
_SCREEN = (b"ink", b"recovery action", b"caused by", b"fallen off the bus", b"#012", b"\x1b",
           *(n.encode() for n in _EARLIER))
_SCREEN_LOWER = (b"fatal", *(n.lower().encode() for n in _EARLIER_LOWER))
# the same test as a Hyperscan expression: the search notes the lines it finds
SCREEN_EXPRESSION = (rb"NVRM: Xid \(PCI:[^\n]*(?:" + b"|".join(
    [b"".join(b"\\x%02x" % c for c in lit) for lit in _SCREEN]
    + [b"(?i:" + b"".join(b"\\x%02x" % c for c in lit) + b")" for lit in _SCREEN_LOWER]
    + [rb"[\x80-\xff]"]) + b")")
USABLE = _DIRECT and _PASSES  # the Xid row as this module knows it (else: never taken)
_DMESG = re.compile(rb"\[ {0,12}([0-9]{1,12}\.[0-9]{1,9})\] *")  # dmesg raw: one per line
_CACHE = 4096  # prefixes and keys kept (then the cache starts again)

# what a prefix tells: (format, stamps, time, uptime, seconds); None: not a fast one
Head = tuple[str, tuple[str, ...], datetime | None, float | None, float | None]


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
    formats: dict[str, None]
    ex: Any  # its EventExtractor (``note_line``)
    screen: set[int] | None


class StormLines:
    """Folds the repeated plain Xid lines of one input (see the module docstring)."""

    def __init__(self, fast: FastXid) -> None:
        self.fast = fast
        self.heads: dict[bytes, Head] = {}
        self.buses: dict[bytes, str | None] = {}
        self.procs: dict[tuple[bytes, bytes], tuple[str, str]] = {}

    def take(self, src: Source, lineno: int, raw: bytes | bytearray) -> bool:
        """Fold ``raw`` (a candidate line of ``src``, nothing under way there) into its
        folded event; False when the line is not one to fold this way."""
        at = raw.find(_LEAD)
        if at < 0 or len(raw) > MAX_LINE:
            return False
        m = _STORM.match(raw, at)
        if m is None or not raw.isascii():
            return False
        screen = src.screen
        if screen is None:  # not screened by the search: test the message here
            for literal in _SCREEN:
                if raw.find(literal, at) >= 0:
                    return False
            low = raw[at:].lower()
            for literal in _SCREEN_LOWER:
                if literal in low:
                    return False
        elif lineno in screen:
            return False
        head_bytes = bytes(raw[:at])
        head = self.heads.get(head_bytes) or self._head(head_bytes, raw)  # (None: not kept)
        if head is None:
            return False
        fmt, _stamps, time, up, seconds = head
        cur = src.segs[-1]
        if up is not None and cur.last_up is not None and up < cur.last_up - 1.0:
            return False  # a new boot: the full bookkeeping
        bus_raw, code_raw, pid_raw, name_raw = m.groups()
        if code_raw == b"154":
            return False
        bus = self.buses[bus_raw] if bus_raw in self.buses else self._bus(bus_raw)
        proc = self.procs.get((pid_raw, name_raw))
        if proc is None:
            proc = self._proc(pid_raw, name_raw)
        pid, name = proc
        code = code_raw.decode()
        boot = len(src.segs) - 1
        fold = src.fold
        hot = fold.hot(boot, bus, code)
        if hot is None:
            return False
        if fmt not in src.formats:
            src.formats[fmt] = None
        cur.seen = True
        if time is not None:
            cur.first = cur.first or time
            cur.last = time
        if up is not None:
            if cur.first_up is None:
                cur.first_up = up
            cur.last_up = up
        src.ex.note_line()
        msg = raw[m.end():].decode("ascii").strip()
        fold.fold_line(hot, bus, code, {"code": code, "pid": pid, "process": name,
                                        "message": msg}, seconds, LazyXid(raw, self.fast),
                       lineno, boot)
        return True

    def _head(self, head: bytes, raw: bytes | bytearray) -> Head | None:
        """What the fast path reads in a line's prefix (cached per prefix)."""
        d = _DMESG.fullmatch(head)
        if d is not None:  # the fast path's first shape; the uptime differs on every line
            stamp = d.group(1).decode()
            up = float(stamp)
            return "dmesg-raw", (stamp,), None, up, up
        line: FastLine | None = self.fast.parse(raw)
        if line is None or line.text[:len(head)] != head.decode("ascii") or \
                line.msg != line.text[len(head):].rstrip():
            return None  # (not cached: the message may be what the fast path refused)
        t = line.time
        seconds = t.timestamp() if t is not None else line.uptime_s
        out: Head = (line.format, line.stamps, t, line.uptime_s, seconds)
        if line.uptime_s is None:  # a prefix with an uptime is seldom seen twice
            if len(self.heads) >= _CACHE:
                self.heads.clear()
            self.heads[head] = out
        return out

    def _bus(self, raw: bytes) -> str | None:
        if len(self.buses) >= _CACHE:
            self.buses.clear()
        bus = self.buses[raw] = normalize_bus_id(raw.decode("ascii"))
        return bus

    def _proc(self, pid: bytes, name: bytes) -> tuple[str, str]:
        if len(self.procs) >= _CACHE:
            self.procs.clear()
        proc = self.procs[pid, name] = (pid.decode("ascii").strip("'"), name.decode("ascii"))
        return proc
