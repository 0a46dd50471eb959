"""The catalog of messages the node's own tools print whose cause NVIDIA documents
(``node_messages.csv``): nvidia-smi's infoROM warning, the kernel module's missing GSP
firmware. Each row's id is the finding id the rule reading the message gives, with the
row's meaning, cause, blame, action, severity, next step and source; ``gputriage explain``
prints the same row, so a message pasted alone and the same message in a node's output
are judged alike. Loaded once."""

from __future__ import annotations

import functools

from gputriage.knowledge.message_rows import MessageRow, read_catalog

__all__ = ["NodeMessage", "match", "messages", "row"]


NodeMessage = MessageRow  # a row of node_messages.csv


@functools.cache
def messages() -> tuple[MessageRow, ...]:
    """Every row, in file order."""
    return read_catalog("node_messages.csv")


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
