"""The window of kernel-log events to judge: one boot or all, since a time."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import click

from gputriage.text.fields import strict_float, strict_int

if TYPE_CHECKING:
    from gputriage.logscan.events import DriverEvent

__all__ = ["LogWindow", "NoSuchBoot", "WindowReport", "parse_boot", "parse_since"]


class NoSuchBoot(click.UsageError):
    """``--boot N`` names a boot the log does not hold: a usage error (exit 64), raised
    when the log's boots are known (once it is scanned)."""


@dataclass(frozen=True)
class LogWindow:
    """Which kernel-log events to judge: one boot (0 current, -1 the one before...)
    or all (``boot=None``), and only those at or after ``since`` when given.
    Events without a known time are kept (their age cannot be told). A folded storm
    (one event standing for many occurrences) is judged by its latest occurrence: one
    that straddles ``since`` is kept whole, its earlier occurrences with it."""

    boot: int | None = None
    since: datetime | None = None
    since_text: str | None = field(default=None, compare=False)  # as the user wrote it

    @classmethod
    def of(cls, since: str | None, boot: str | None) -> LogWindow:
        """The window ``--since`` / ``--boot`` (or a tool's arguments) give; ValueError
        when either is malformed."""
        return cls(boot=parse_boot(boot) if boot is not None else None,
                   since=parse_since(since) if since is not None else None, since_text=since)

    def admits(self, ev: DriverEvent) -> bool:
        """Whether ``ev`` falls inside the window."""
        if self.boot is not None and ev.boot != self.boot:
            return False
        when = getattr(ev.latest, "time", None)
        if self.since is not None and when is not None:
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            return when >= self.since
        return True

    def check_boot(self, boots: Sequence[Any]) -> None:
        """:class:`NoSuchBoot` when ``--boot`` names a boot not among ``boots`` (the
        scan's, each with an ``index``); boot 0, the current one, always exists."""
        have = [b.index for b in boots]
        if self.boot is None or self.boot == 0 or self.boot in have:
            return
        n = len(have)
        listed = ", ".join(str(i) for i in have) or "0"
        raise NoSuchBoot(f"--boot {self.boot}: no such boot; the log has {max(n, 1)} "
                         f"boot{'s' if n > 1 else ''} ({listed})")

    def report(self, events: Sequence[DriverEvent], log_ends: datetime | None,
               collected: datetime | None = None) -> WindowReport | None:
        """What the window let in and left out of ``events`` (None without a window
        option). ``log_ends``: the latest time of its records; ``collected``: when the
        log was collected or last written (it then covers the window up to it; without
        it, the window counts as read)."""
        if self.boot is None and self.since is None:
            return None
        inside = [ev for ev in events if self.admits(ev)]
        early = [ev for ev in events if (self.boot is None or ev.boot == self.boot)
                 and self.since is not None and _before(ev.latest, self.since)]
        times = [t for ev in early if (t := _aware(getattr(ev.latest, "time", None)))]
        last = max(times, default=None)
        # the log's last NVIDIA record only bounds its end from below: without a
        # collection or write time, a log read from a pipe may go on quietly past --since
        known = [t for t in (_aware(log_ends), _aware(collected)) if t is not None]
        read = self.since is None or collected is None or max(known) >= self.since
        return WindowReport(self.since, self.since_text, self.boot,
                            sum(ev.count for ev in inside), sum(ev.count for ev in early),
                            last, _aware(log_ends), read)

    def excluded(self, events: Sequence[DriverEvent]) -> list[str]:
        """One line per window option that left kernel-log events out, with how many
        (occurrences: a folded storm counts each)."""
        out: list[str] = []
        if self.boot is not None:
            other = sum(ev.count for ev in events if ev.boot != self.boot)
            if other:
                out.append(f"--boot {self.boot}: {other:,} kernel-log "
                           f"event{'s' if other != 1 else ''} of other boots not judged")
        if self.since is not None:
            early = sum(ev.count for ev in events if (self.boot is None or ev.boot == self.boot)
                        and _before(ev.latest, self.since))
            if early:
                label = self.since_text or self.since.isoformat()
                out.append(f"--since {label}: {early:,} kernel-log "
                           f"event{'s' if early != 1 else ''} before {_stamp(self.since)} "
                           "not judged")
        return out


@dataclass(frozen=True)
class WindowReport:
    """What a log window judged: the occurrences inside it, those before ``since``
    (history: the last of them at ``last_before``), when the log ends, and whether the
    log reaches into the window at all (``read``: False when its last record, and its
    collection, are older than ``since``: nothing in the window could be read)."""

    since: datetime | None
    since_text: str | None
    boot: int | None
    in_window: int
    before: int
    last_before: datetime | None
    log_ends: datetime | None
    read: bool

    @property
    def emptied(self) -> bool:
        """Whether ``--since`` left out every event (there were some before it)."""
        return self.since is not None and self.before > 0 and self.in_window == 0

    def line(self) -> str | None:
        """One line for the top of a report when the window holds no event the log
        has, or could not be read; None otherwise."""
        if self.since is None or (self.read and not self.emptied):
            return None
        said = [f"--since {self.since_text or self.since.isoformat()}:"]
        if self.before:
            last = f" (the last at {_stamp(self.last_before)})" if self.last_before else ""
            said.append(f" {self.before:,} kernel-log event{'s' if self.before != 1 else ''}"
                        f" before {_stamp(self.since)}{last}, "
                        f"{'none' if not self.in_window else f'{self.in_window:,}'} after it")
        if not self.read:
            last = f" (its last NVIDIA record at {_stamp(self.log_ends)})" \
                if self.log_ends is not None and not self.before else ""
            said.append(f"{';' if self.before else ''} the log ends before the window{last}:"
                        " nothing in the window was read")
        return "".join(said)

    def to_json(self) -> dict[str, Any]:
        """The ``log_window`` object of the JSON documents."""
        return {"since": self.since.isoformat() if self.since else None, "boot": self.boot,
                "events_in_window": self.in_window, "events_before": self.before,
                "last_before": self.last_before.isoformat() if self.last_before else None,
                "log_ends": self.log_ends.isoformat() if self.log_ends else None,
                "window_read": self.read}


def _aware(when: datetime | None) -> datetime | None:
    if when is not None and when.tzinfo is None:
        return when.replace(tzinfo=timezone.utc)
    return when


def _before(ev: DriverEvent, since: datetime) -> bool:
    when = getattr(ev, "time", None)
    if when is None:
        return False
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return bool(when < since)


def _stamp(when: datetime) -> str:
    """A time for a one-line note: UTC, to the minute (the second when it has one)."""
    utc = when.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ" if utc.second else "%Y-%m-%dT%H:%MZ")


_RELATIVE = re.compile(r"^\s*([0-9]{1,9}(?:\.[0-9]{1,6})?)\s*(s|sec|m|min|h|hr|d|day|w|week)s?"
                       r"(?:\s+ago)?\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400,
          "day": 86400, "w": 604800, "week": 604800}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``--since``: an ISO time (``2024-05-14T09:00``, UTC when no offset) or a
    relative age (``90s``, ``30m``, ``2h``, ``1d``, ``2h ago``). ValueError otherwise."""
    m = _RELATIVE.match(text)
    if m:
        now = now or datetime.now(timezone.utc)
        age = strict_float(m.group(1))
        try:
            return now - timedelta(seconds=(age or 0.0) * _UNITS[m.group(2).lower()])
        except OverflowError:  # 999999999w: before year 1
            raise ValueError(f"not a time: {text!r} (an age of at most a few centuries)"
                             ) from None
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"not a time: {text!r} (use ISO 8601 or an age like 2h, 30m, 1d)"
                         ) from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def parse_boot(text: str) -> int | None:
    """``--boot``: ``all`` (None), ``0`` (the current boot), ``-1`` (the one before)..."""
    if text.strip().lower() == "all":
        return None
    value = strict_int(text.strip())
    if value is None:
        raise ValueError(f"not a boot: {text!r} (use 0, -1, -2... or all)")
    if value > 0:
        raise ValueError(f"boot {value}: boots count back from 0 (current), -1, -2...")
    return value
