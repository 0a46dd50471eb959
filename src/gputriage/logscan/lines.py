"""Candidate lines of :mod:`gputriage.logscan` turned into events: line formats,
timestamps, /dev/kmsg and journal JSON records, and boots."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from gputriage.parsers.base import normalize_bus_id
from gputriage.parsers.kernel_extractor import MAX_LINE, EventExtractor, split_escaped
from gputriage.parsers.kernel_model import DriverEvent, LogLine
from gputriage.parsers.kernel_patterns import split_prefix, strip_ansi

__all__ = ["BOOT_ANCHORS", "BootSegment", "LineSource"]

# literals of the lines that start a boot (journalctl markers, the kernel's banner)
BOOT_ANCHORS = ("-- Boot ", "-- Reboot --", "Linux version ")

# --- lines: formats, times -----------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug",
                                       "Sep", "Oct", "Nov", "Dec"), 1)}
_ISO = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
                  r"(Z|[+-]\d\d:?\d\d)?$")
_CTIME = re.compile(r"^[A-Z][a-z]{2} ([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})$")
_SYSLOG_TS = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?$")
_UPTIME = re.compile(r"^\s*(\d{1,12}\.\d{1,9})$")
_KMSG = re.compile(r"^(?P<pri>\d{1,4}),(?P<seq>\d{1,20}),(?P<usec>\d{1,20}),[^;]{0,32};")
_KMSG_DICT = re.compile(r"^ [A-Z_]{1,32}=")
_BOOT_MARK = re.compile(r"^-- (?:Boot (?P<id>[0-9a-fA-F\-]{8,40}) --|Reboot --)\s*$")
_SYSLOG_NAMES = ("syslog", "kern.log", "messages")


def _usec(frac: str | None) -> int:
    return int((frac or "0")[:6].ljust(6, "0"))


def _stamp_time(stamp: str, now: datetime) -> tuple[datetime | None, float | None]:
    """(absolute time, uptime seconds) of one printed timestamp."""
    try:
        m = _UPTIME.match(stamp)
        if m:
            return None, float(m.group(1))
        m = _ISO.match(stamp)
        if m:
            tz = timezone.utc
            off = m.group(8)
            if off and off != "Z":
                sign = -1 if off[0] == "-" else 1
                hh, mm = int(off[1:3]), int(off[-2:])
                tz = timezone(sign * timedelta(hours=hh, minutes=mm))
            y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
            return datetime(y, mo, d, h, mi, s, _usec(m.group(7)), tzinfo=tz), None
        m = _CTIME.match(stamp)
        if m and m.group(1) in _MONTHS:
            return datetime(int(m.group(6)), _MONTHS[m.group(1)], int(m.group(2)),
                            int(m.group(3)), int(m.group(4)), int(m.group(5)),
                            tzinfo=timezone.utc), None
        m = _SYSLOG_TS.match(stamp)
        if m and m.group(1) in _MONTHS:
            args = (_MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)),
                    int(m.group(5)), _usec(m.group(6)))
            t = datetime(now.year, *args, tzinfo=timezone.utc)
            if t > now + timedelta(days=2):
                t = datetime(now.year - 1, *args, tzinfo=timezone.utc)
            return t, None
    except (ValueError, OverflowError):
        return None, None
    return None, None


def _format_of(tags: tuple[str, ...], stamps: tuple[str, ...], syslog_name: bool) -> str:
    if "talos" in tags:
        return "talos"
    if "syslog" in tags:
        first = stamps[0] if stamps else ""
        if first[:4].isdigit():
            if "host" not in tags and "kernel" not in tags:
                return "dmesg-iso"
            return "journalctl-short-iso"
        if syslog_name or "bracket" in tags:
            return "syslog"
        return "journalctl-short-precise" if "." in first else "journalctl-short"
    if "bracket" in tags:
        return "dmesg-raw" if stamps and _UPTIME.match(stamps[-1]) else "dmesg-ctime"
    return "plain"


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


class LineSource:
    """Turns one input's candidate lines into events, boots and formats."""

    def __init__(self, name: str, now: datetime) -> None:
        self.name = name
        self.now = now
        self.syslog_name = any(k in Path(name).name for k in _SYSLOG_NAMES)
        self.ex = EventExtractor()
        self.events: list[DriverEvent] = []
        self.segs: list[BootSegment] = [BootSegment()]
        self.formats: dict[str, None] = {}
        self.skipped = 0
        self.held: LogLine | None = None
        self.stamps: dict[str, tuple[datetime | None, float | None]] = {}  # parsed stamps

    # -- boots --------------------------------------------------------------------------
    def _new_boot(self, boot_id: str | None = None) -> None:
        cur = self.segs[-1]
        if not cur.seen:
            cur.marked = True
            cur.boot_id = boot_id or cur.boot_id
            return
        self.segs.append(BootSegment(boot_id=boot_id, marked=True))

    def _note(self, line: LogLine, seq: int | None, boot_id: str | None) -> None:
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
    def line(self, lineno: int, raw: bytes | bytearray, cut: bool) -> None:
        """Process one candidate or context line."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", errors="replace")
            self.skipped += 1
        if cut:
            self.skipped += 1
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
        m = _KMSG.match(text)
        if m:
            self._kmsg_line(lineno, text, m)
            return
        mark = _BOOT_MARK.match(stripped)
        if mark:
            self._new_boot(mark.group("id"))
            return
        for piece, escaped in split_escaped(text):
            stamps, msg, tags = split_prefix(piece)
            if escaped:
                stamps = ()
            elif stamps:
                self.formats.setdefault(_format_of(tags, stamps, self.syslog_name))
            elif piece[:1] not in (" ", "\t") and msg:
                self.formats.setdefault("plain")
            t = up = None
            for st in stamps:
                known = self.stamps.get(st)
                if known is None:
                    if len(self.stamps) >= 4096:
                        self.stamps.clear()
                    known = self.stamps[st] = _stamp_time(st, self.now)
                a, b = known
                t = t or a
                up = up if up is not None else b
            ll = LogLine(piece, msg, stamps, lineno, t, up, origin=self.name, escaped=escaped)
            self._note(ll, None, None)
            self._feed(ll)

    def _feed(self, ll: LogLine) -> None:
        self.events.extend(self.ex.feed(ll))

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
        with contextlib.suppress(KeyError, TypeError, ValueError, OverflowError, OSError):
            t = datetime.fromtimestamp(int(obj["__REALTIME_TIMESTAMP"]) / 1e6, tz=timezone.utc)
        with contextlib.suppress(KeyError, TypeError, ValueError, OverflowError):
            up = int(obj["__MONOTONIC_TIMESTAMP"]) / 1e6
        boot_id = obj.get("_BOOT_ID") if isinstance(obj.get("_BOOT_ID"), str) else None
        ident = str(obj.get("SYSLOG_IDENTIFIER") or obj.get("_TRANSPORT") or "kernel")
        stamp = t.isoformat() if t else ""
        host = str(obj.get("_HOSTNAME") or "-")
        for piece in msg[:MAX_LINE].splitlines() or [""]:
            ll = LogLine(f"{stamp} {host} {ident}: {piece}".strip(), piece.strip(),
                         (stamp,) if stamp else (), lineno, t, up, origin=self.name)
            self._note(ll, None, boot_id)
            self._feed(ll)
        return True

    def finish(self) -> None:
        if self.held is not None:
            self._feed(self.held)
            self.held = None
        self.events.extend(self.ex.finish())
