"""Candidate lines of :mod:`gputriage.logscan` turned into events: line formats,
timestamps, /dev/kmsg and journal JSON records, and boots."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gputriage.logscan.fastline import FastLine, FastXid
from gputriage.logscan.stamps import SYSLOG_NAMES, format_of, stamp_time
from gputriage.logscan.storm import USABLE, StormLines
from gputriage.logscan.stormspan import SpanPass
from gputriage.parsers.kernel_extractor import MAX_LINE, EventExtractor, split_escaped
from gputriage.parsers.kernel_fold import Folder
from gputriage.parsers.kernel_model import DriverEvent, LogLine
from gputriage.parsers.kernel_patterns import split_prefix, strip_ansi
from gputriage.text.fields import as_int, normalize_bus_id, split_lines

if TYPE_CHECKING:
    from gputriage.logscan.span import Span

__all__ = ["BOOT_ANCHORS", "BootSegment", "LineSource"]

# literals of the lines that start a boot (journalctl markers, the kernel's banner)
BOOT_ANCHORS = ("-- Boot ", "-- Reboot --", "Linux version ")
_T = TypeVar("_T")

# --- lines: formats, times -----------------------------------------------------------------

_KMSG = re.compile(r"^(?P<pri>[0-9]{1,4}),(?P<seq>[0-9]{1,20}),(?P<usec>[0-9]{1,20}),[^;]{0,32};")
_KMSG_DICT = re.compile(r"^ [A-Z_]{1,32}=")
_BOOT_MARK = re.compile(r"^-- (?:Boot (?P<id>[0-9a-fA-F\-]{8,40}) --|Reboot --)\s*$")


# What a printed stamp, and an Xid line's prefix and message, read as depends only on the
# input's year reference ``now`` (its zone too) and whether its name is a syslog file's
# (FastXid's only use of it): those caches are kept across the LineSources of one process
# (a worker reads many blocks of one input) instead of starting empty for each
_Reference = tuple[datetime | None, Any]
_STAMPS: dict[_Reference, dict[str, tuple[datetime | None, float | None]]] = {}
_FAST_XIDS: dict[tuple[bool, datetime | None, Any], FastXid] = {}
_KEPT_REFERENCES = 8


def _zone_of(now: datetime | None) -> Any:
    """(Equal aware times in unequal zones have unequal years and wall clocks.)"""
    return None if now is None else now.tzinfo


def _kept(cache: dict[Any, _T], key: Any, make: Callable[[], _T]) -> _T:
    found = cache.get(key)
    if found is None:
        if len(cache) >= _KEPT_REFERENCES:
            cache.clear()
        found = cache[key] = make()
    return found


@dataclass
class BootSegment:
    """One boot as seen within one input."""

    boot_id: str | None = None
    marked: bool = False  # started by a marker, banner, id change or reset
    first: datetime | None = None
    last: datetime | None = None
    first_up: float | None = None
    last_up: float | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    seen: bool = False

    def saw(self, time: datetime | None, up: float | None) -> None:
        """A line of this boot at ``time`` (and uptime ``up``): its first and last."""
        self.seen = True
        if time is not None:
            if self.first is None:
                self.first = time
            self.last = time
        if up is not None:
            if self.first_up is None:
                self.first_up = up
            self.last_up = up


class LineSource:
    """Turns one input's candidate lines into events, boots and formats."""

    def __init__(self, name: str, now: datetime | None) -> None:
        self.name = name
        self.now = now
        self.syslog_name = any(k in Path(name).name for k in SYSLOG_NAMES)
        self.ex = EventExtractor()
        self.fold = Folder()  # the events, storms folded
        self.segs: list[BootSegment] = [BootSegment()]
        self.formats: dict[str, None] = {}
        self.skipped = 0
        self.held: LogLine | None = None
        self.stamps = _kept(_STAMPS, (now, _zone_of(now)), dict)  # parsed stamps
        # a worker's block: only lines numbered inside these bounds are its own (the
        # others, read before and after it, only complete the extractor's state)
        self.bounds: tuple[int, int] | None = None
        self.outside = False
        # the Xid line a storm repeats, in microseconds
        self.fast = _kept(_FAST_XIDS, (self.syslog_name, now, _zone_of(now)),
                          lambda: FastXid(name, now))
        # ... and once its key is folded, counted in without being parsed
        self.storm = StormLines(self.fast) if USABLE else None
        # the lines the search found the storm path must leave to the per-line parse
        # (None: not screened by the search, see ``StormLines.feed``)
        self.screen: set[int] | None = None
        # a worker's block after the first: the storm pass keeps the first occurrences of
        # a plain Xid's key as their bytes (``Folder.defer``), their events built only
        # where the whole file keeps them one by one
        self.defer = False

    # -- boots --------------------------------------------------------------------------
    def _new_boot(self, boot_id: str | None = None) -> None:
        if self.outside:
            return
        cur = self.segs[-1]
        if not cur.seen:
            cur.marked = True
            cur.boot_id = boot_id or cur.boot_id
            return
        self.segs.append(BootSegment(boot_id=boot_id, marked=True))

    def _note(self, line: LogLine, seq: int | None, boot_id: str | None) -> None:
        if self.outside:
            line.boot = len(self.segs) - 1
            return
        cur = self.segs[-1]
        if boot_id and cur.boot_id and boot_id != cur.boot_id:
            self._new_boot(boot_id)
        elif ((seq is not None and cur.last_seq is not None and seq < cur.last_seq)
              or (line.uptime_s is not None and cur.last_up is not None
                  and line.uptime_s < cur.last_up - 1.0)
              or line.msg.startswith("Linux version ")):
            self._new_boot()
        cur = self.segs[-1]
        if boot_id and not cur.boot_id:
            cur.boot_id = boot_id
        cur.seen = True
        if line.time is not None:
            cur.first = cur.first or line.time
            cur.last = line.time
        if line.uptime_s is not None:
            cur.first_up = cur.first_up if cur.first_up is not None else line.uptime_s
            cur.last_up = line.uptime_s
        if seq is not None:
            cur.first_seq = cur.first_seq if cur.first_seq is not None else seq
            cur.last_seq = seq
        line.boot = len(self.segs) - 1

    # -- lines --------------------------------------------------------------------------
    def feed(self, lines: list[tuple[int, bytes | bytearray, bool]], base: int,
             screen: set[int] | None) -> None:
        """Process a span's candidate and context lines (numbered from ``base``; the
        lines the search screened: ``screen``, see :meth:`StormLines.feed`)."""
        self.screen = screen
        if self.storm is not None:
            self.storm.feed(self, lines, base)
            return
        line = self.line
        for n, raw, cut in lines:
            line(base + n, raw, cut)

    def feed_span(self, span: Span, base: int) -> None:
        """:meth:`feed` for the lines of a searched span (the storm path's lines too, where
        the search left them to it: ``Span.storm``), numbered from ``base``."""
        if span.storm is not None and self.storm is not None:
            try:
                SpanPass(self.storm, self, span, base, *span.numbering).run()
            finally:
                span.storm = None  # let go of the buffer
            return
        self.feed(span.lines, base, None)  # (the storm path screens each line itself)

    def line(self, lineno: int, raw: bytes | bytearray, cut: bool) -> None:
        """Process one candidate or context line (the per-line parse)."""
        bounds = self.bounds
        self.outside = bounds is not None and not bounds[0] <= lineno <= bounds[1]
        if self.held is None and self.ex.idle:
            fast = self.fast.parse(raw, cut)
            if fast is not None:
                self._fast(fast, lineno)
                return
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", errors="replace")
            self.skipped += not self.outside
        if cut:
            self.skipped += not self.outside
        text = text.rstrip("\r")
        if "\x1b" in text:  # colour escapes (dmesg --color, journalctl in a terminal)
            text = strip_ansi(text)
        if self.held is not None:
            if _KMSG_DICT.match(text):
                if text.startswith(" DEVICE=+pci:"):
                    self.held.bus_hint = normalize_bus_id(text[13:].strip())
                return
            held, self.held = self.held, None
            self._feed(held)
        stripped = text.lstrip()
        if stripped.startswith("{") and self._json_line(lineno, stripped):
            return
        m = _KMSG.match(text) if "," in text[1:5] else None  # ("PRI," leads a record)
        if m:
            self._kmsg_line(lineno, text, m)
            return
        mark = _BOOT_MARK.match(stripped) if stripped[:3] == "-- " else None
        if mark:
            self._new_boot(mark.group("id"))
            return
        for piece, escaped in split_escaped(text):
            stamps, msg, tags = split_prefix(piece)
            if escaped:
                stamps = ()
            elif stamps:
                self.formats.setdefault(format_of(tags, stamps, self.syslog_name))
            elif piece[:1] not in (" ", "\t") and msg:
                self.formats.setdefault("plain")
            t = up = None
            for st in stamps:
                known = self.stamps.get(st)
                if known is None:
                    if len(self.stamps) >= 4096:
                        self.stamps.clear()
                    known = self.stamps[st] = stamp_time(st, self.now)
                a, b = known
                t = t or a
                up = up if up is not None else b
            ll = LogLine(piece, msg, stamps, lineno, t, up, origin=self.name, escaped=escaped)
            self._note(ll, None, None)
            self._feed(ll)

    def _fast(self, fast: FastLine, lineno: int) -> None:
        """A line the Xid fast path read: its boot noted, then folded (or its events
        built and kept, when its key has no folded event yet)."""
        if fast.format not in self.formats:
            self.formats[fast.format] = None
        cur = self.segs[-1]
        up = fast.uptime_s
        if (not self.outside and up is not None and cur.last_up is not None
                and up < cur.last_up - 1.0):
            ll = LogLine(fast.text, fast.msg, fast.stamps, lineno, fast.time, up,
                         origin=self.name)
            self._note(ll, None, None)  # a new boot: the full bookkeeping
        elif not self.outside:
            cur.saw(fast.time, up)
        self.ex.note_line()
        boot = len(self.segs) - 1
        bounds = self.bounds
        if bounds is not None and not bounds[0] <= lineno <= bounds[1]:
            return
        if not self.fold.repeat(fast, lineno, boot):
            for ev in fast.events(lineno, self.name, boot):
                self.fold.add(ev)

    def _feed(self, ll: LogLine) -> None:
        for ev in self.ex.feed(ll):
            self._keep(ev)

    def _kmsg_line(self, lineno: int, text: str, m: re.Match[str]) -> None:
        self.formats.setdefault("kmsg")
        up = int(m.group("usec")) / 1e6
        msg = text[m.end():][:MAX_LINE]
        ll = LogLine(text, msg.strip(), (f"{up:.6f}",), lineno, None, up, origin=self.name)
        self._note(ll, int(m.group("seq")), None)
        self.held = ll

    def _json_line(self, lineno: int, text: str) -> bool:
        """A journal JSON record; False when the line is not one."""
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            return False
        if not isinstance(obj, dict) or "MESSAGE" not in obj:
            return False
        self.formats.setdefault("journal-json")
        msg = obj.get("MESSAGE")
        if isinstance(msg, list):
            try:
                msg = bytes(msg).decode("utf-8", errors="replace")
            except (TypeError, ValueError):
                return True
        if not isinstance(msg, str):
            return True
        t = up = None
        realtime = as_int(obj.get("__REALTIME_TIMESTAMP"), lo=0)
        monotonic = as_int(obj.get("__MONOTONIC_TIMESTAMP"), lo=0)
        with contextlib.suppress(ValueError, OverflowError, OSError):  # beyond any date
            t = None if realtime is None else datetime.fromtimestamp(realtime / 1e6,
                                                                     tz=timezone.utc)
        up = None if monotonic is None else monotonic / 1e6
        boot_id = obj.get("_BOOT_ID") if isinstance(obj.get("_BOOT_ID"), str) else None
        ident = str(obj.get("SYSLOG_IDENTIFIER") or obj.get("_TRANSPORT") or "kernel")
        stamp = t.isoformat() if t else ""
        host = str(obj.get("_HOSTNAME") or "-")
        for piece in split_lines(msg[:MAX_LINE]) or [""]:
            ll = LogLine(f"{stamp} {host} {ident}: {piece}".strip(), piece.strip(),
                         (stamp,) if stamp else (), lineno, t, up, origin=self.name)
            self._note(ll, None, boot_id)
            self._feed(ll)
        return True

    def finish(self) -> None:
        if self.held is not None:
            self._feed(self.held)
            self.held = None
        for ev in self.ex.finish():
            self._keep(ev)
        self.fold.finish()

    def _keep(self, ev: DriverEvent) -> None:
        """Fold an event in, unless a worker's block does not own its first line."""
        bounds = self.bounds
        if bounds is not None and ev.lineno is not None and not (
                bounds[0] <= ev.lineno <= bounds[1]):
            return
        self.fold.add(ev)

    @property
    def events(self) -> list[DriverEvent]:
        """The events found, in log order of first occurrence (storms folded)."""
        return self.fold.events
