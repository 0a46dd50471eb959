"""Acknowledgements in the history store: record, withdraw and load them (the
store is :mod:`gputriage.state.history`'s database; what they cover is
:mod:`gputriage.engine.acks`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path

from gputriage.engine.acks import Ack, utc
from gputriage.state.history import clear_ack, insert_ack, read_acks

__all__ = ["clear", "load", "record"]


def record(state_dir: Path | str, ack: Ack) -> Ack:
    """Store ``ack`` in the history database; it, with its id."""
    values = (ack.when.timestamp(), ack.when.isoformat(), ack.host, ack.finding, ack.gpu,
              ack.who, ack.until.isoformat() if ack.until else None, ack.reason)
    return replace(ack, id=insert_ack(state_dir, values))


def clear(state_dir: Path | str, ack_id: int, now: datetime) -> bool:
    """Withdraw acknowledgement ``ack_id``; whether one was open."""
    return clear_ack(state_dir, ack_id, utc(now).isoformat())


def load(state_dir: Path | str, host: str | None = None, *,
         notes: list[str] | None = None) -> list[Ack]:
    """Every acknowledgement stored (of ``host`` and host-less ones when given),
    oldest first."""
    out = []
    for (id_, _ts, when, ack_host, finding, gpu, who, until, reason,
         cleared) in read_acks(state_dir, notes=notes):
        if host is not None and ack_host not in (None, host):
            continue
        try:
            out.append(Ack(id_, utc(datetime.fromisoformat(when)), who, reason, finding,
                           gpu, ack_host,
                           utc(datetime.fromisoformat(until)) if until else None, cleared))
        except (TypeError, ValueError):
            continue  # a row this gputriage cannot read is not applied
    return out
