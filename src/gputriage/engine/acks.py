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

from gputriage.facts.window import parse_since
from gputriage.model import Finding, Status
from gputriage.text.fields import normalize_bus_id

__all__ = ["DEFAULT_DAYS", "Ack", "apply", "parse_until", "utc"]

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
        return self.until is None or now is None or utc(now) < self.until

    def names(self, f: Finding) -> bool:
        """Whether it names ``f``: the id matches and, for a GPU, that GPU is one of
        ``f``'s (a finding on several GPUs needs each acknowledged: :func:`apply`)."""
        if self.finding and not fnmatch.fnmatchcase(f.id, self.finding):
            return False
        return not self.gpu or self.gpu in _buses(f)

    def to_json(self) -> dict:
        return {"id": self.id, "time": self.when.isoformat(), "who": self.who,
                "reason": self.reason, "finding": self.finding, "gpu": self.gpu,
                "host": self.host, "until": self.until.isoformat() if self.until else None,
                "cleared": self.cleared}

    def describe(self) -> str:
        """``acknowledged by ana at …, until …: reseated GPU 4``."""
        until = f", until {self.until.isoformat()}" if self.until else ""
        return f"acknowledged by {self.who} at {self.when.isoformat()}{until}: {self.reason}"


def utc(when: datetime) -> datetime:
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
    return utc(when) > ack.when


def _buses(f: Finding) -> set[str | None]:
    return {normalize_bus_id(s.pci_bus_id) for s in f.scopes}


def _covering(f: Finding, live: list[Ack]) -> Ack | None:
    """The acknowledgement that covers ``f`` (the latest, when several together cover
    each of its GPUs); None when some GPU of it is not acknowledged."""
    naming = [a for a in live if a.names(f)]
    if not naming:
        return None
    if any(a.gpu is None for a in naming):
        return max((a for a in naming if a.gpu is None), key=lambda a: a.when)
    if _buses(f) <= {a.gpu for a in naming}:
        return max(naming, key=lambda a: a.when)
    return None


def apply(findings: Iterable[Finding], acks: Iterable[Ack],
          now: datetime | None) -> list[Finding]:
    """The findings with those the acknowledgements in force cover marked
    acknowledged (current ones only; a new event after it keeps a finding current,
    with a note)."""
    live = [a for a in acks if a.in_force(now)]
    out = []
    for f in findings:
        match = _covering(f, live) if f.current else None
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
