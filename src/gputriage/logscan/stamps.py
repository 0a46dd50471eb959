"""Printed kernel-log timestamps and the input formats they tell: shared by
:mod:`gputriage.logscan.lines` and the Xid fast path (:mod:`.fastline`)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

__all__ = ["SYSLOG_NAMES", "format_of", "stamp_time", "usec", "year_reference"]

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


_ZONES: dict[str | None, timezone] = {None: timezone.utc, "Z": timezone.utc}  # offset -> zone


def _zone(off: str) -> timezone:
    """The zone of an ISO stamp's offset ("+0530", "-05:00"), kept for the next stamp."""
    sign = -1 if off[0] == "-" else 1
    zone = timezone(sign * timedelta(hours=int(off[1:3]), minutes=int(off[-2:])))
    if len(_ZONES) < 256:
        _ZONES[off] = zone
    return zone


def stamp_time(stamp: str, now: datetime | None) -> tuple[datetime | None, float | None]:
    """(absolute time, uptime seconds) of one printed timestamp. A syslog stamp has no
    year: it takes ``now``'s (the input's own reference time), the previous one when that
    would lie after it; without a reference it has no absolute time."""
    try:
        m = _UPTIME.match(stamp)
        if m:
            return None, float(m.group(1))
        m = _ISO.match(stamp)
        if m:
            y, mo, d, h, mi, s, frac, off = m.groups()
            tz = _ZONES.get(off) or _zone(off)
            return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s),
                            usec(frac), tzinfo=tz), None
        m = _CTIME.match(stamp)
        if m and m.group(1) in _MONTHS:
            return datetime(int(m.group(6)), _MONTHS[m.group(1)], int(m.group(2)),
                            int(m.group(3)), int(m.group(4)), int(m.group(5)),
                            tzinfo=timezone.utc), None
        m = _SYSLOG_TS.match(stamp)
        if m and m.group(1) in _MONTHS and now is not None:
            args = (_MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)),
                    int(m.group(5)), usec(m.group(6)))
            t = datetime(now.year, *args, tzinfo=timezone.utc)
            if t > now + timedelta(days=2):
                t = datetime(now.year - 1, *args, tzinfo=timezone.utc)
            return t, None
    except (ValueError, OverflowError):
        return None, None
    return None, None


# The input's own dated stamps, the reference of its year-less syslog stamps: ISO stamps
# that lead a line (journalctl -o short-iso, dmesg --time-format iso, rsyslog's high-
# precision format), dmesg -T's "[Sat Mar  1 10:00:01 2026]", journalctl's "-- Logs begin at
# Mon 2023-12-04 09:00:01 UTC" and a JSON journal's __REALTIME_TIMESTAMP. Dates inside
# messages (a certificate's expiry, a build date) are not stamps and are not taken.
_REF_LINE = re.compile(rb"(?m)^(?:<[0-9]{1,3}>|\[)?[ \t]{0,4}((?:19|20)[0-9][0-9])-([0-9][0-9])-"
                       rb"([0-9][0-9])[T ]([0-9][0-9]):([0-9][0-9]):([0-9][0-9])|"
                       rb"^\[\w{3} (\w{3}) +([0-9]{1,2}) ([0-9][0-9]):([0-9][0-9]):([0-9][0-9]) "
                       rb"((?:19|20)[0-9][0-9])\]")
# (journalctl's header and footer: literal-led, so searched apart from the line stamps)
_REF_JOURNAL = tuple(re.compile(lead + rb" at \w{3} ((?:19|20)[0-9][0-9])-([0-9][0-9])-"
                                rb"([0-9][0-9]) ([0-9][0-9]):([0-9][0-9]):([0-9][0-9])")
                     for lead in (rb"Logs begin", rb", end"))
_REF_JSON = re.compile(rb'"__REALTIME_TIMESTAMP"\s{0,4}:\s{0,4}"?([0-9]{16})')
REFERENCE_BYTES = 256 << 10  # of an input's head and of its tail searched for its dates


def _dated(groups: tuple[bytes, ...]) -> datetime | None:
    g = [x.decode() for x in groups if x]  # (the groups of the branch that matched)
    try:
        if g[0].isdigit():
            y, mo, d, h, mi, s = (int(x) for x in g)
        elif g[0] in _MONTHS:
            y, mo = int(g[5]), _MONTHS[g[0]]
            d, h, mi, s = (int(x) for x in g[1:5])
        else:
            return None
        return datetime(y, mo, d, h, mi, s, tzinfo=timezone.utc)
    except ValueError:
        return None


def year_reference(*parts: bytes | bytearray) -> datetime | None:
    """The latest dated stamp in ``parts`` (an input's head and tail): what its
    year-less syslog stamps are dated against; None when it prints none."""
    found: list[datetime] = []
    for part in parts:
        data = bytes(part[:REFERENCE_BYTES]) if len(part) <= 2 * REFERENCE_BYTES else (
            bytes(part[:REFERENCE_BYTES]) + b"\n" + bytes(part[-REFERENCE_BYTES:]))
        # each distinct stamp once: a log prints the same second on many lines
        stamps = dict.fromkeys(_REF_LINE.findall(data))
        for journal in _REF_JOURNAL:
            stamps.update(dict.fromkeys(journal.findall(data)))
        found += [t for g in stamps if (t := _dated(g)) is not None]
        for m in _REF_JSON.finditer(data):
            try:
                found.append(datetime.fromtimestamp(int(m.group(1)) / 1e6, timezone.utc))
            except (ValueError, OverflowError, OSError):
                continue
    return max(found) if found else None


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
