"""A fast path for the line an Xid storm repeats: one ``NVRM: Xid (PCI:...): CODE, ...``
line under the prefixes that dominate real logs, turned in a few microseconds into what
:class:`gputriage.logscan.lines.LineSource` and
:class:`gputriage.parsers.kernel_extractor.EventExtractor` would make of it.

:meth:`FastXid.parse` recognises dmesg (raw and ``-T``), ``dmesg --time-format iso``,
journalctl short / short-iso / short-precise and syslog (``Mon dd hh:mm:ss[.us] host
kernel: [uptime]``) prefixes, and lines with no prefix, with one compiled pattern that
holds only shapes :func:`gputriage.parsers.kernel_patterns.split_prefix` reads the same
way. The message goes to the table's Xid row (its pattern and builder), or to
:func:`gputriage.parsers.kernel_table.match_line` when it holds a literal of an earlier
row: the row that decides, the bus id and the details are the slow path's by
construction; storm messages repeat, so the answer is kept in a bounded cache. Times
come from :func:`gputriage.logscan.stamps.stamp_time` on whole seconds (cached), the
fraction added. Anything else (other prefixes, colour or ``#012`` escapes, JSON and /dev/kmsg
records, cut, long or undecodable lines, messages another row decides) gives None: the
caller takes the slow path.

The result equals the slow path's for a line fed to an extractor with nothing under way
(``EventExtractor.idle``); the caller keeps that state and the boots
(``LineSource._note``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import product
from pathlib import Path

from gputriage.logscan.stamps import SYSLOG_NAMES, format_of, stamp_time, usec
from gputriage.parsers.kernel_builders import xid_event
from gputriage.parsers.kernel_extractor import MAX_LINE
from gputriage.parsers.kernel_model import DriverEvent, LogLine
from gputriage.parsers.kernel_patterns import XID, xid_details
from gputriage.parsers.kernel_table import EVENTS, EventPattern, match_line
from gputriage.text.fields import normalize_bus_id
from gputriage.vocabulary import EventKind

__all__ = ["FastLine", "FastXid"]

_XID_AT = next(i for i, p in enumerate(EVENTS) if p.kind is EventKind.XID)
_XID_ROW: EventPattern = EVENTS[_XID_AT]
# the literals of the rows before it: a message holding none of them is the Xid row's
# to decide (match_line tries only the rows whose literal test a message passes)
EARLIER = tuple(n for p in EVENTS[:_XID_AT] for n in p.needles)
EARLIER_LOWER = tuple(n for p in EVENTS[:_XID_AT] for n in p.lower)
DIRECT = _XID_ROW.build is xid_event and _XID_ROW.regex is XID  # the row as _xid_body knows it
PASSES = any(n in "NVRM: Xid" for n in _XID_ROW.needles)  # its literal test: always passed
_LOWER = bool(EARLIER_LOWER or (_XID_ROW.lower and not PASSES))  # a test of msg.lower()

# Each alternative is a shape split_prefix reads as these tags, with these stamps (digits
# are ASCII, spacing as its patterns allow); the message must follow at once.
_D = "[0-9]"
_UP = rf"{_D}{{1,12}}\.{_D}{{1,9}}"
_FAST = re.compile(
    rf"(?:(?:\[ {{0,12}}(?P<up>{_UP})\]"  # dmesg
    rf"|\[(?P<ct>[A-Z][a-z]{{2}} [A-Z][a-z]{{2}} [ 0-9]?{_D} {_D}{_D}:{_D}{_D}:{_D}{_D}"
    rf" {_D}{{4}})\]"  # dmesg -T
    rf"|(?P<ts>(?P<head>(?:[A-Z][a-z]{{2}} [ 0-9]?{_D}|{_D}{{4}}-{_D}{_D}-{_D}{_D}[T ])"
    rf" ?{_D}{_D}:{_D}{_D}:{_D}{_D})(?:(?P<sep>[.,])(?P<frac>{_D}{{1,9}}))?"
    rf"(?P<zone>Z|[+-]{_D}{_D}:?{_D}{_D})?) {{1,4}}"  # syslog, journalctl, dmesg iso
    rf"(?:(?P<host>[^\s#\x1b]{{1,255}}) kernel: ?)?(?:\[ {{0,12}}(?P<up2>{_UP})\])?"
    r") *)?(?=NVRM: Xid)")

_CACHE = 4096  # stamps and messages kept (then the cache starts again)
_CACHED_MSG = 1024  # longer messages are not kept
Body = tuple[str | None, dict[str, str], bool]
Stamp = tuple[datetime | None, float | None]
Head = tuple[tuple[str, ...], str, datetime | None, float | None]  # stamps, format, time, up

_MISS: Body = (None, {}, False)  # a message the fast path leaves to the slow one


def _xid_body(msg: str) -> Body:
    """What the table makes of a message when its Xid row decides it: the bus id, the
    details, and whether it also fell off the bus; _MISS when another row decides."""
    low = msg.lower() if _LOWER else ""
    if _holds(msg, EARLIER) or _holds(low, EARLIER_LOWER):
        decided = match_line(LogLine(msg, msg))  # an earlier row may decide: ask the table
        return _body_of(decided[1] if decided is not None and decided[0] is _XID_ROW else [])
    row = _XID_ROW
    if not (PASSES or _holds(msg, row.needles) or _holds(low, row.lower)):
        return _MISS
    m = row.regex.search(msg) if row.regex is not None else None
    if row.regex is not None and m is None:
        return _MISS
    if DIRECT and m is not None:  # what xid_event builds, without the events around it
        return (normalize_bus_id(m.group("bus")), xid_details(m.group("code"), m.group("rest")),
                "fallen off the bus" in msg)
    found = row.build(LogLine(msg, msg), msg, m) if row.build is not None else None
    return _body_of([] if found is None else found if isinstance(found, list) else [found])


def _holds(text: str, literals: tuple[str, ...]) -> bool:
    return any(n in text for n in literals) if literals else False


def _body_of(evs: list[DriverEvent]) -> Body:
    fallen = len(evs) == 2 and evs[1].kind is EventKind.FALLEN_OFF_BUS
    if evs and evs[0].kind is EventKind.XID and evs[0].details and (len(evs) == 1 or fallen):
        return evs[0].bus_id, evs[0].details, fallen
    return _MISS


@dataclass(slots=True)
class FastLine:
    """One Xid line as the slow path reads it: the line, its message and stamps, the
    format LineSource records, its times, and the Xid's bus id and details."""

    text: str  # the line (the event's evidence)
    msg: str  # the message, prefixes stripped
    stamps: tuple[str, ...]  # printed timestamps, outermost first
    format: str  # the input format LineSource records for it
    time: datetime | None
    uptime_s: float | None
    bus_id: str | None
    details: dict[str, str]  # the line's own copy
    fallen: bool  # also a fallen-off-bus event (Xid 79)

    def events(self, lineno: int | None = None, origin: str | None = None,
               boot: int = 0) -> list[DriverEvent]:
        """The event(s) the slow path builds: the Xid, then the fallen-off-bus one."""
        ts = self.stamps[0] if self.stamps else None
        out = [DriverEvent(EventKind.XID, self.text, self.bus_id, ts, self.details, self.time,
                           self.uptime_s, boot, lineno, origin)]
        if self.fallen:
            out.append(DriverEvent(EventKind.FALLEN_OFF_BUS, self.text, self.bus_id, ts, {},
                                   self.time, self.uptime_s, boot, lineno, origin))
        return out


class FastXid:
    """Parses the dominant shapes of Xid lines; None for anything it is not sure of.

    ``name`` (the input's name: a syslog file is told by it) and ``now`` (the reference
    of syslog stamps' year; None: they have no absolute time) mean what they mean to
    LineSource."""

    def __init__(self, name: str, now: datetime | None) -> None:
        self.now = now
        self.syslog_name = any(k in Path(name).name for k in SYSLOG_NAMES)
        # a later syslog stamp is last year's
        self._limit = now + timedelta(days=2) if now is not None else None
        self._stamps: dict[str, Stamp] = {}
        self._bodies: dict[str, Body] = {}
        self._heads: dict[str, Head] = {}  # a line's prefix -> what it tells
        # the format of a syslog-led line: (host, uptime, ISO stamp, "." in it) -> name
        self._formats = {(host, up, iso, dot): format_of(
            ("syslog",) + ("host",) * host + ("bracket",) * up,
            (("2000-01-01T00:00:00" if iso else "Jan  1 00:00:00") + ".0" * dot,),
            self.syslog_name) for host, up, iso, dot in product((False, True), repeat=4)}

    def parse(self, raw: bytes | bytearray, cut: bool = False) -> FastLine | None:
        """One candidate line (without its newline); None: take the slow path."""
        if cut:
            return None
        found = self.prefix(raw)
        if found is None:
            return None
        head, text, at = found
        msg = text[at:].rstrip()
        bus, details, fallen = self._bodies.get(msg) or self._body(msg)
        if not details:
            return None
        stamps, fmt, t, up = head
        return FastLine(text, msg, stamps, fmt, t, up, bus, details.copy(), fallen)

    def prefix(self, raw: bytes | bytearray) -> tuple[Head, str, int] | None:
        """What :meth:`parse` reads in a line's prefix, the line as text and where its
        message starts; None where it takes the slow path for the line's length, bytes or
        prefix (its message is not read)."""
        if len(raw) > MAX_LINE or b"NVRM: Xid" not in raw:
            return None
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            return None
        at = text.find("NVRM: Xid")
        head = self._heads.get(text[:at])  # a prefix read before (a log repeats its second)
        if head is None:
            m = _FAST.match(text)
            if m is None:
                return None
            head = self._head(m, text[:at] if m.end() == at else None)
            at = m.end()
        return head, text, at

    def _head(self, m: re.Match[str], prefix: str | None) -> Head:
        """What the prefix ``_FAST`` matched tells: stamps, format, time, uptime; kept per
        ``prefix`` (None: not kept) when it holds neither an uptime nor a fraction of a
        second (those differ on every line)."""
        up, ct, ts, head, sep, frac, zone, host, up2 = m.groups()
        if up is not None:
            return (up,), "dmesg-raw", None, float(up)
        if ct is not None:
            out: Head = (ct,), "dmesg-ctime", (self._stamps.get(ct) or self._stamp(ct))[0], None
        elif ts is None:
            out = (), "plain", None, None
        else:
            if frac is None:
                t = (self._stamps.get(ts) or self._stamp(ts))[0]
            else:
                t = self._fraction(ts, head, sep, frac, zone)
            fmt = self._formats[host is not None, up2 is not None, head[0] in "0123456789",
                                sep == "."]
            if up2 is not None:
                return (ts, up2), fmt, t, float(up2)
            out = (ts,), fmt, t, None
            if frac is not None:
                return out
        if prefix is not None:
            if len(self._heads) >= _CACHE:
                self._heads.clear()
            self._heads[prefix] = out
        return out

    # -- internals ----------------------------------------------------------------------
    def _body(self, msg: str) -> Body:
        """What the table makes of a message: the Xid row's bus id, details and whether
        it also fell off the bus; _MISS when another row decides or it builds otherwise."""
        body = _MISS
        if "\x1b" not in msg and "#012" not in msg:  # (the prefix holds neither)
            body = _xid_body(msg)
        if len(msg) <= _CACHED_MSG:
            if len(self._bodies) >= _CACHE:
                self._bodies.clear()
            self._bodies[msg] = body
        return body

    def _stamp(self, stamp: str) -> Stamp:
        known = self._stamps.get(stamp)
        if known is None:
            if len(self._stamps) >= _CACHE:
                self._stamps.clear()
            known = self._stamps[stamp] = stamp_time(stamp, self.now)
        return known

    def _fraction(self, ts: str, head: str, sep: str, frac: str,
                  zone: str | None) -> datetime | None:
        """The time of a syslog / ISO stamp with a fraction: its whole second (cached),
        plus the fraction."""
        iso = head[0] in "0123456789"
        if not iso and (sep != "." or zone is not None):
            return stamp_time(ts, self.now)[0]  # not a time to stamp_time either
        key = head if zone is None else head + zone
        base = (self._stamps.get(key) or self._stamp(key))[0]
        if base is None:
            return None
        t = base + timedelta(0, 0, int(frac) if len(frac) == 6 else usec(frac))
        if not iso and self._limit is not None and t > self._limit:  # crossed the year's edge
            return stamp_time(ts, self.now)[0]
        return t
