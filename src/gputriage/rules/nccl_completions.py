"""IB completion errors in an NCCL log, each judged against the earlier ones of its
process (a flush after a real error is secondary): what the NCCL error rules and the
advice about the IB path share."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputriage.parsers.nccl_model import NcclLog, NcclProcess, NcclWarn

FLUSH = 5  # IBV_WC_WR_FLUSH_ERR: the queue pair already failed

_STATUS = re.compile(r"(?:status=|with error )([0-9]{1,3})")
_PEER = re.compile(r"from peer (\S+?)(?:<[0-9]+>)?(?:,|\s|$)")


@dataclass(frozen=True)
class Completion:
    """One IB completion error of one process, judged against the ones before it."""

    proc: NcclProcess
    warn: NcclWarn
    status: int | None
    peer: str | None  # remote address without the port
    secondary: bool  # a flush after an earlier error of the same process
    root: int | None = None  # for a secondary one: the status of that earlier error


def completions(log: NcclLog) -> list[Completion]:
    """Every IB completion error, in log order per process."""
    out = []
    for p in log.processes:
        first: int | None = None  # the process's first non-flush status
        for w in p.warns:
            if w.kind != "ib-completion" and "Got completion" not in w.message:
                continue
            status = w.ib_status
            if status is None and (m := _STATUS.search(w.message)):
                status = int(m.group(1))
            peer = w.peer or ((m := _PEER.search(w.message)) and m.group(1)) or None
            peer = re.sub(r"<[0-9]+>$", "", peer) if peer else None
            secondary = status == FLUSH and first is not None
            out.append(Completion(p, w, status, peer, secondary, first if secondary else None))
            if first is None and status is not None and status != FLUSH:
                first = status
    return out
