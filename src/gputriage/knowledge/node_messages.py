"""The catalog of messages the node's own tools print whose cause NVIDIA documents
(``node_messages.csv``): nvidia-smi's infoROM warning, the kernel module's missing GSP
firmware. Each row's id is the finding id the rule reading the message gives, with the
row's meaning, cause, blame, action, severity, next step and source; ``gputriage explain``
prints the same row, so a message pasted alone and the same message in a node's output
are judged alike. Loaded once."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from gputriage.knowledge import csv_rows
from gputriage.vocabulary import Action, Blame, Severity

__all__ = ["NodeMessage", "match", "messages", "row"]


@dataclass(frozen=True)
class NodeMessage:
    """One row: a message of the node's tools and this project's judgement of it."""

    id: str
    title: str
    pattern: re.Pattern[str]
    meaning: str
    cause: str
    blame: Blame
    action: Action
    severity: Severity
    next: str
    source: str


@functools.cache
def messages() -> tuple[NodeMessage, ...]:
    """Every row, in file order."""
    return tuple(NodeMessage(r["id"], r["title"], re.compile(r["pattern"], re.IGNORECASE),
                             r["meaning"], r["cause"], Blame(r["blame"]), Action(r["action"]),
                             Severity(r["severity"]), r["next"], r["source"])
                 for r in csv_rows("node_messages.csv"))


def row(fid: str) -> NodeMessage:
    """The row of finding id ``fid`` (a KeyError names a rule asking for a row that the
    table lacks)."""
    found = next((m for m in messages() if m.id == fid), None)
    if found is None:
        raise KeyError(f"node_messages.csv has no row {fid!r}")
    return found


def match(line: str) -> NodeMessage | None:
    """The first row whose pattern the line matches, else None."""
    return next((m for m in messages() if m.pattern.search(line[:2000])), None)
