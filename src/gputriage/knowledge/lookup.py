"""One look-up over every catalog of messages, for ``gputriage explain``: the job's
messages (:mod:`~gputriage.knowledge.job_messages`: CUDA, NVML, the container stack,
the frameworks), NCCL's WARNs (:mod:`~gputriage.knowledge.nccl_warnings`) and the node's
own tools (:mod:`~gputriage.knowledge.node_messages`). The rules that read a message in
``analyze`` take their judgement from the same row, so a message explained alone and the
same message analysed in a paste give the same blame, severity and action."""

from __future__ import annotations

from gputriage.knowledge import nccl_warnings, node_messages
from gputriage.knowledge.job_messages import Hit, Message
from gputriage.knowledge.job_messages import find_hits as job_hits

__all__ = ["NCCL_FAMILY", "NODE_FAMILY", "find_hits"]

NCCL_FAMILY = "nccl"
NODE_FAMILY = "node"


def _as_message(row: nccl_warnings.NcclWarning | node_messages.NodeMessage,
                family: str) -> Message:
    return Message(row.id, family, row.meaning, row.cause, row.blame, row.action,
                   row.severity, row.next, patterns=(row.pattern,), title=row.title,
                   source=row.source)


def find_hits(text: str) -> list[Hit]:
    """The messages a short text names, each once, in line order: those of the job's
    catalog first (a CUDA error's number or name alone among them), then each line's
    NCCL WARN or node message of the other catalogs."""
    found = job_hits(text)
    seen = {h.message.id for h in found}
    for i, line in enumerate(text.splitlines()):
        for row, family in ((nccl_warnings.match(line), NCCL_FAMILY),
                            (node_messages.match(line), NODE_FAMILY)):
            if row is not None and row.id not in seen:
                seen.add(row.id)
                found.append(Hit(_as_message(row, family), line, i))
    return sorted(found, key=lambda h: h.lineno)
