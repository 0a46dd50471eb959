"""Printed kernel-log timestamps and the input formats they tell: shared by
:mod:`gputriage.logscan.lines` and the Xid fast path (:mod:`.fastline`)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

__all__ = ["SYSLOG_NAMES", "format_of", "stamp_time", "usec"]

_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug",
                                       "Sep", "Oct", "Nov", "Dec"), 1)}
_ISO = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:[.,]"
                  r"([0-9]{1,9}))?"
                  r"(Z|[+-][0-9]{2}:?[0-9]{2})?$")
_CTIME = re.compile(r"^[A-Z][a-z]{2} ([A-Z][a-z]{2}) +([0-9]{1,2}) ([0-9]{2}):([0-9]{2}):"
                    r"([0-9]{2}) ([0-9]{4})$")
_SYSLOG_TS = re.compile(r"^([A-Z][a-z]{2}) +([0-9]{1,2}) ([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\."
                        r"([0-9]{1,9}))?$")
_UPTIME = re.compile(r"^\s*([0-9]{1,12}\.[0-9]{1,9})$")
SYSLOG_NAMES = ("syslog", "kern.log", "messages")


def usec(frac: str | None) -> int:
    return int((frac or "0")[:6].ljust(6, "0"))


def stamp_time(stamp: str, now: datetime) -> tuple[datetime | None, float | None]:
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
            return datetime(y, mo, d, h, mi, s, usec(m.group(7)), tzinfo=tz), None
        m = _CTIME.match(stamp)
        if m and m.group(1) in _MONTHS:
            return datetime(int(m.group(6)), _MONTHS[m.group(1)], int(m.group(2)),
                            int(m.group(3)), int(m.group(4)), int(m.group(5)),
                            tzinfo=timezone.utc), None
        m = _SYSLOG_TS.match(stamp)
        if m and m.group(1) in _MONTHS:
            args = (_MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)),
                    int(m.group(5)), usec(m.group(6)))
            t = datetime(now.year, *args, tzinfo=timezone.utc)
            if t > now + timedelta(days=2):
                t = datetime(now.year - 1, *args, tzinfo=timezone.utc)
            return t, None
    except (ValueError, OverflowError):
        return None, None
    return None, None


def format_of(tags: tuple[str, ...], stamps: tuple[str, ...], syslog_name: bool) -> str:
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
