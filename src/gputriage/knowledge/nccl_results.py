"""NCCL's result codes (``ncclResult_t``) as a job's output prints them -- the name
(``ncclSystemError``), the number (``NCCL Error 2``) or NCCL's own string (``unhandled
system error``) -- and what each says about whose fault a failed NCCL call is.

Facts from NCCL's user guide, API types: ncclResult_t (docs.nvidia.com/deeplearning/nccl/
user-guide/docs/api/types.html): 1 a call to a CUDA function failed; 2 a call to the
system failed; 3 an internal check failed (a bug in NCCL or memory corruption); 4 an
argument has an invalid value; 5 the call is incorrect, usually a programming error;
6 a network error or a remote process exiting prematurely; NCCL prints the detailed cause
when NCCL_DEBUG is set to WARN. Blame, action and advice are this project's judgement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gputriage.vocabulary import Action, Blame

__all__ = ["NcclResult", "result_of", "results"]


@dataclass(frozen=True)
class NcclResult:
    code: int
    name: str  # ncclSystemError
    text: str  # what ncclGetErrorString prints: "unhandled system error"
    blame: Blame
    action: Action
    why: str  # what it says and where to look


_ROWS = (
    NcclResult(1, "ncclUnhandledCudaError", "unhandled cuda error", Blame.UNKNOWN,
               Action.RESTART_JOB, "A CUDA call inside NCCL failed: look for Xids on the "
               "GPUs and for the CUDA error NCCL_DEBUG=WARN names."),
    NcclResult(2, "ncclSystemError", "unhandled system error", Blame.CONFIG, Action.FIX_CONFIG,
               "NCCL got an error from the operating system or the network stack: a socket "
               "to a peer, /dev/shm size in containers, memlock limits, or the IB/RoCE "
               "setup (run with NCCL_DEBUG=INFO)."),
    NcclResult(3, "ncclInternalError", "internal error", Blame.UNKNOWN, Action.RESTART_JOB,
               "An internal check of NCCL failed; NCCL reports several setup failures (its "
               "bootstrap network, the environment) this way, so it is rarely an NCCL bug "
               "and never a GPU fault on its own."),
    NcclResult(4, "ncclInvalidArgument", "invalid argument", Blame.JOB, Action.RESTART_JOB,
               "The program passed NCCL an invalid value (a pointer, a device, a count)."),
    NcclResult(5, "ncclInvalidUsage", "invalid usage", Blame.JOB_CONFIG, Action.FIX_CONFIG,
               "NCCL rejected how it was called or configured (environment variables, "
               "device selection, ranks per GPU)."),
    NcclResult(6, "ncclRemoteError", "remote process exited or there was a network error",
               Blame.UNKNOWN, Action.RESTART_JOB,
               "A peer process died or the network between the ranks failed; look at the "
               "other ranks' output and the HCA ports."),
)
_BY_NAME = {r.name.lower(): r for r in _ROWS}
_BY_TEXT = {r.text: r for r in _ROWS}
_BY_CODE = {r.code: r for r in _ROWS}
_NUMBERED = re.compile(r"NCCL Error ([0-9]{1,2}):", re.IGNORECASE)
_NAMED = re.compile(r"\b(nccl[A-Z]\w{4,30}(?:Error|Argument|Usage))\b")


def results() -> tuple[NcclResult, ...]:
    return _ROWS


def result_of(text: str) -> NcclResult | None:
    """The NCCL result a message names, by its name, number or string (the first)."""
    if (m := _NAMED.search(text)) and (row := _BY_NAME.get(m.group(1).lower())) is not None:
        return row
    if (m := _NUMBERED.search(text)) and (row := _BY_CODE.get(int(m.group(1)))):
        return row
    low = text.lower()
    return next((r for t, r in _BY_TEXT.items() if t in low), None)
