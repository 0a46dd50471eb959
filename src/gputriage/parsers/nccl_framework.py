"""The NCCL errors of the framework around a job: PyTorch's ProcessGroupNCCL (watchdog
timeouts, ``NCCL error in:``, ``DistBackendError: ncclSystemError``) and CUDA errors.

Such an error may wrap over a few lines (a glog header, then the message); the
:class:`~gputriage.parsers.nccl_build.Builder` gathers them and calls
:func:`framework_error` on the lines. Every pattern has bounded repeats.
"""

from __future__ import annotations

import re

from gputriage.parsers.nccl_model import NcclWarn

__all__ = ["FW_HEAD", "framework_error", "framework_key", "framework_kind", "is_framework_line",
           "nccl_detail"]

MAX_KEEP = 2000  # characters of the lines kept as evidence

FW_HEAD = re.compile(r"\[(?P<lvl>[EFWI])(?P<md>[0-9]{3,4})?\s{0,4}"
                     r"(?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2}[0-9.]{0,12})?\s{0,4}ProcessGroupNCCL\.cpp:[0-9]{1,6}\]")
_FW_RANK = re.compile(r"\[rank([0-9]{1,7})\]|\bRank\s{1,4}([0-9]{1,7})\]")
_FW_CUDA = re.compile(r"CUDA error:\s{0,4}([^\n.]{1,300})")
_FW_NCCL = re.compile(r"NCCL error(?: in:)?\s{0,4}.{0,400}|DistBackendError: NCCL.{0,400}"
                      r"|NCCL Error [0-9]{1,2}: .{0,400}"  # PyTorch before 1.10
                      r"|NCCL communicator was aborted.{0,300}|Error: nccl\w{2,30}Error\b.{0,300}"
                      r"|Last NCCL warning\(error\).{0,400}")
_FW_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout|Timeout at NCCL work"
                         r"|WorkNCCL\(SeqNum=.{0,300}ran for")
_FW_TAGS = re.compile(r"^.{0,200}?ProcessGroupNCCL\.cpp:[0-9]{1,6}\]\s{0,4}|"
                      r"^\[rank[0-9]{1,7}\]:\s{0,4}"
                      r"|\[PG [^\]]{0,120}\]\s{0,4}|\[Rank [0-9]{1,7}\]\s{0,4}")
_NUMS = {"seq_num": re.compile(r"SeqNum=([0-9]{1,18})"),
         "timeout_ms": re.compile(r"Timeout\(ms\)=([0-9]{1,18})"),
         "elapsed_ms": re.compile(r"ran for ([0-9]{1,18}) milliseconds")}
_OPTYPE = re.compile(r"OpType=(\w{1,40})")


def framework_kind(text: str) -> str | None:
    """"timeout" | "cuda" | "nccl" for a framework error text, None for anything else."""
    if _FW_TIMEOUT.search(text):
        return "timeout"
    if _FW_CUDA.search(text):
        return "cuda"
    if _FW_NCCL.search(text):
        return "nccl"
    return None


# PyTorch 2.4+ puts "[rankN]: " before each line of the exception
_NCCL_DETAIL = re.compile(r"^\s{0,8}(?:\[rank[0-9]{1,7}\]:\s{0,4})?(?:nccl[A-Z]\w{2,40}: |"
                          r"Last error:)")


def nccl_detail(line: str, previous: str) -> bool:
    """Whether ``line`` goes on a framework's NCCL error: PyTorch prints the NCCL result
    (``ncclUnhandledCudaError: Call to CUDA function failed.``), then ``Last error:`` and
    NCCL's own last message on the next line."""
    return bool(_NCCL_DETAIL.match(line)) or previous.strip().endswith("Last error:")


def framework_error(lines: list[str]) -> NcclWarn | None:
    """One framework error from its lines (a glog header may wrap onto the next lines)."""
    text = " ".join(ln.strip() for ln in lines)
    kind = framework_kind(text)
    if kind is None:
        return None
    head = FW_HEAD.search(text)
    rm = _FW_RANK.search(text)
    nums = {k: int(m.group(1)) if (m := rx.search(text)) else None for k, rx in _NUMS.items()}
    om = _OPTYPE.search(text)
    message = _FW_TAGS.sub("", text).strip()
    if kind == "cuda" and (cm := _FW_CUDA.search(text)):
        message = message if len(message) < 300 else f"CUDA error: {cm.group(1)}"
    time = None
    if head is not None and head.group("time"):
        md = head.group("md") or ""
        time = (f"{md[:-2].zfill(2)}-{md[-2:]} " if md else "") + head.group("time")
    return NcclWarn(message[:1000], "\n".join(lines)[:MAX_KEEP], kind,
                    rank=int(next(x for x in rm.groups() if x)) if rm else None, time=time,
                    op_type=om.group(1) if om else None, seq_num=nums["seq_num"],
                    timeout_ms=nums["timeout_ms"], elapsed_ms=nums["elapsed_ms"])


def framework_key(w: NcclWarn) -> tuple[str, int | None, int | None, str]:
    """What makes two framework errors the same (the log and the exception repeat them)."""
    core = w.message
    if w.kind == "cuda" and (m := _FW_CUDA.search(w.message)):
        core = m.group(1).strip()
    elif w.kind == "timeout" and w.seq_num is not None:
        core = ""
    return w.kind, w.rank, w.seq_num, core[:200]


_IS_FRAMEWORK = re.compile(r"ProcessGroupNCCL\.cpp:[0-9]{1,6}\]|"
                           r"Watchdog caught collective operation"
                           r" timeout|NCCL error in:|DistBackendError: NCCL|WorkNCCL\(SeqNum="
                           r"|NCCL Error [0-9]{1,2}: "
                           r"|NCCL communicator was aborted|Error: nccl\w{2,30}Error\b"
                           r"|Last NCCL warning\(error\)")  # XLA's: NCCL's last WARN


def is_framework_line(line: str) -> bool:
    """A line that starts or states a framework's NCCL error."""
    return _IS_FRAMEWORK.search(line) is not None
