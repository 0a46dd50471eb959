"""Sentences of the weights report that both views print (terminal and HTML), from
the ``gputriage/weights/v1`` document, so that the two say the same."""

from __future__ import annotations

from typing import Any

from gputriage.text.units import format_bytes
from gputriage.weights import plan

__all__ = ["fit_verdict", "measured", "rate"]


def rate(bps: float) -> str:
    """``1.20 GB/s``."""
    return f"{format_bytes(bps)}/s"


def fit_verdict(fit: dict[str, Any], heads: int | None) -> tuple[str, bool]:
    """What one row of ``fit`` says, and whether it is bad news (no degree holds the
    model, or the degree spans nodes)."""
    if fit["tp"] is None:
        tried = plan.degrees(heads)
        if tried[-1] < plan.TP_DEGREES[-1]:
            above = plan.TP_DEGREES[plan.TP_DEGREES.index(tried[-1]) + 1]
            return (f"does not fit at TP {tried[-1]} (TP {above} and above do not divide "
                    f"its {heads} attention heads)", True)
        return f"does not fit at TP {plan.TP_DEGREES[-1]}", True
    text = f"TP {fit['tp']}: {format_bytes(fit['per_gpu_bytes'])} per GPU"
    if fit["nodes"] > 1:
        return text + f"; does not fit one node ({fit['nodes']} nodes of {fit['node_gpus']})", \
            True
    return text, False


def measured(m: dict[str, Any]) -> str:
    """The ``measure`` section in one sentence (its note says when it was not used)."""
    mode = "O_DIRECT" if m["direct"] else "through the page cache"
    return (f"Measured: {format_bytes(m['bytes_read'])} of {m['path']} in "
            f"{m['seconds']:.2f} s = {m['bytes_per_s'] / 1e6:,.0f} MB/s ({mode})"
            + (f"; {m['note']}" if m["note"] else ""))
