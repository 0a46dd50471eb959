"""How a report names the GPUs of a finding repeated on several: ``on 8 GPUs: 0-7``,
``also on GPU 1 0000:2a:00.0``."""

from __future__ import annotations

from gputriage.model import Finding, Scope, index_ranges

__all__ = ["COMPACT_FROM", "also_text", "compact_scopes"]

COMPACT_FROM = 4  # scopes from which a per-GPU repeat is written "on 8 GPUs: 0-7"


def compact_scopes(scopes: tuple[Scope, ...]) -> str | None:
    """``on 8 GPUs: 0-7`` for a repeat over GPUs of known index; None otherwise."""
    indices = [s.gpu_index for s in scopes if s.kind == "gpu" and s.gpu_index is not None]
    if len(scopes) < COMPACT_FROM or len(indices) != len(scopes):
        return None
    return f"on {len(scopes)} GPUs: {index_ranges(i for i in indices if i is not None)}"


def also_text(f: Finding, *, full: bool = False) -> str | None:
    """Where else a per-GPU repeat happened: ``also on GPU 1 0000:2a:00.0, ...``, or
    compact ``on 8 GPUs: 0-7`` (unless ``full``); None without repeats."""
    if not f.also:
        return None
    compact = None if full else compact_scopes(f.scopes)
    return compact or "also on " + ", ".join(s.label() for s in f.also)
