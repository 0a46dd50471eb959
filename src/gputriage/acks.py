"""Operators' acknowledgements: ``gputriage ack`` records one in the history store
(who, when, why, until when); the next check reports what it covers as
acknowledged, not current, so a repaired and resumed node is not drained again.

An acknowledgement names a finding id (a glob such as ``xid.*`` works), a GPU
(its PCI bus id), or both. It covers a finding while it has not expired and, for an
event-based finding (kernel-log events), only while no event came after it: a new
Xid after the repair is a new failure.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from gputriage.logwindow import parse_since
from gputriage.model import Finding, Status
from gputriage.parsers.base import normalize_bus_id

__all__ = ["DEFAULT_DAYS", "Ack", "apply", "clear", "load", "parse_until", "record"]

DEFAULT_DAYS = 30  # an acknowledgement without --until expires after this


@dataclass(frozen=True)
class Ack:
    """One acknowledgement."""

    id: int | None
    when: datetime  # when it was given (UTC)
    who: str
    reason: str
    finding: str | None = None  # a finding id or glob; None: every finding of the GPU
    gpu: str | None = None  # the GPU's PCI bus id, normalised
    host: str | None = None
    until: datetime | None = None  # None: never expires
    cleared: str | None = None  # when it was withdrawn (``ack --clear``)

    def in_force(self, now: datetime | None) -> bool:
        """Not withdrawn and not expired at ``now`` (unknown ``now``: not expired)."""
        if self.cleared:
            return False
        return self.until is None or now is None or _utc(now) < self.until

    def names(self, f: Finding) -> bool:
        """Whether it names ``f``: the id matches and, for a GPU, every GPU of ``f``
        is this one."""
        if self.finding and not fnmatch.fnmatchcase(f.id, self.finding):
            return False
        if self.gpu:
            buses = {normalize_bus_id(s.pci_bus_id) for s in f.scopes}
            return buses == {self.gpu}
        return True

    def to_json(self) -> dict:
        return {"id": self.id, "time": self.when.isoformat(), "who": self.who,
                "reason": self.reason, "finding": self.finding, "gpu": self.gpu,
                "host": self.host, "until": self.until.isoformat() if self.until else None,
                "cleared": self.cleared}

    def describe(self) -> str:
        """``acknowledged by ana at …, until …: reseated GPU 4``."""
        until = f", until {self.until.isoformat()}" if self.until else ""
        return f"acknowledged by {self.who} at {self.when.isoformat()}{until}: {self.reason}"


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when


def _event_after(f: Finding, ack: Ack) -> bool:
    """Whether ``f`` has an event later than the acknowledgement (unknown: no)."""
    last = f.occurrences.last if f.occurrences else None
    if not last:
        return False
    try:
        when = datetime.fromisoformat(last.replace("Z", "+00:00"))
    except ValueError:
        return False
    return _utc(when) > ack.when


def apply(findings: Iterable[Finding], acks: Iterable[Ack],
          now: datetime | None) -> list[Finding]:
    """The findings with those an acknowledgement in force covers marked
    acknowledged (current ones only; a new event after it keeps a finding current,
    with a note)."""
    live = [a for a in acks if a.in_force(now)]
    out = []
    for f in findings:
        match = next((a for a in live if f.current and a.names(f)), None)
        if match is None:
            out.append(f)
        elif _event_after(f, match):
            out.append(replace(f, status_note=f"new events since it was {match.describe()}"))
        else:
            out.append(replace(f, status=Status.ACKNOWLEDGED, status_note=match.describe()))
    return out


def parse_until(text: str | None, now: datetime) -> datetime | None:
    """``--until``: ``never``, an ISO 8601 time, or a duration from now (``12h``,
    ``7d``); the default is :data:`DEFAULT_DAYS` days. ValueError otherwise."""
    if text is None:
        return now + timedelta(days=DEFAULT_DAYS)
    if text.strip().lower() == "never":
        return None
    back = parse_since(text, now)  # an age "7d" reads as now - 7d: mirror it forward
    if back < now and not any(c in text for c in "-:T"):
        return now + (now - back)
    if back <= now:
        raise ValueError(f"--until {text}: that time has passed")
    return back


def record(state_dir: Path | str, ack: Ack) -> Ack:
    """Store ``ack`` in the history database; it, with its id."""
    from gputriage.history import insert_ack

    values = (ack.when.timestamp(), ack.when.isoformat(), ack.host, ack.finding, ack.gpu,
              ack.who, ack.until.isoformat() if ack.until else None, ack.reason)
    return replace(ack, id=insert_ack(state_dir, values))


def clear(state_dir: Path | str, ack_id: int, now: datetime) -> bool:
    """Withdraw acknowledgement ``ack_id``; whether one was open."""
    from gputriage.history import clear_ack

    return clear_ack(state_dir, ack_id, _utc(now).isoformat())


def load(state_dir: Path | str, host: str | None = None, *,
         notes: list[str] | None = None) -> list[Ack]:
    """Every acknowledgement stored (of ``host`` and host-less ones when given),
    oldest first."""
    from gputriage.history import read_acks

    out = []
    for (id_, _ts, when, ack_host, finding, gpu, who, until, reason,
         cleared) in read_acks(state_dir, notes=notes):
        if host is not None and ack_host not in (None, host):
            continue
        try:
            out.append(Ack(id_, _utc(datetime.fromisoformat(when)), who, reason, finding,
                           gpu, ack_host,
                           _utc(datetime.fromisoformat(until)) if until else None, cleared))
        except (TypeError, ValueError):
            continue  # a row this gputriage cannot read is not applied
    return out
