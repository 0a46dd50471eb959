"""A training job's log as it is pasted: step lines whose time, rank and loss vary, with
an NCCL line now and then (what the paste detectors' gates must stay closed on)."""

from __future__ import annotations

STEP = ("2025-03-02 10:{m:02d}:{s:02d},{ms:03d} [rank{r}] INFO train.py:412 step {n} loss "
        "0.{n:04d} lr 3.0e-04 tokens/s 61234.{r} mem 71.{r}G grad_norm 0.{m}\n")
# an NCCL line of rank ``r`` (a template without ``{r}`` stays as it is)
NCCL_CHANNEL = "gpu-node-018:43782:43782 [{r}] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"


def training_log(lines: int, nccl: str | None = None, every: int = 97, at: int = 5,
                 seed: int = 0) -> str:
    """``lines`` lines of a training log: a step line each, but ``nccl`` (formatted with
    the line's rank) where the line's index is ``at`` modulo ``every``; ``seed`` shifts
    the minutes and step numbers."""
    out = []
    for i in range(lines):
        r = i % 16
        if nccl is not None and i % every == at:
            out.append(nccl.format(r=r))
        else:
            out.append(STEP.format(m=(i * 7 + seed) % 60, s=i % 60, ms=i % 1000, r=r,
                                   n=i + seed))
    return "".join(out)
