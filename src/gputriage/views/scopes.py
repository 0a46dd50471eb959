"""How a report names the GPUs of a finding repeated on several: ``on 8 GPUs: 0-7``,
``also on GPU 1 0000:2a:00.0``."""

from __future__ import annotations

import re

from gputriage.model import Finding, Scope, index_ranges

__all__ = ["COMPACT_FROM", "also_text", "compact_scopes", "names_scope", "scope_word"]

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
    if not f.also or all(names_scope(f.title, s) for s in f.also):  # said in the title
        return None
    compact = None if full else compact_scopes(f.scopes)
    return compact or "also on " + ", ".join(s.label() for s in f.also)


def names_scope(title: str, scope: Scope) -> bool:
    """Whether ``title`` already says which scope it is about, so that a view writing
    ``<scope>: <title>`` would say it twice (``GPU: GPU: row remapper ...``): the node;
    a title naming the GPU's bus id, its index or a unit's name; a title that opens with
    the scope's own words (``GPU ...``, ``a GPU the paste does not name ...``); a GPU
    known by neither index nor bus id, whose label (``GPU``) would add nothing."""
    text = title.lower()
    if scope.kind == "node":
        return True
    label = scope.label().lower()
    if text.startswith((label, "a " + label)) or (
            not scope.name and text.startswith(f"the {scope.kind} ")):  # a pod not named
        return True
    bus = (scope.pci_bus_id or "").lower()
    if bus and (bus in text or bus.split(":", 1)[-1] in text):
        return True
    if scope.name and scope.name.lower().removesuffix(".service") in text:
        return True
    if scope.kind == "gpu" and scope.gpu_index is None and not bus:
        return True
    return (scope.kind == "gpu" and scope.gpu_index is not None
            and re.search(rf"\bgpu {scope.gpu_index}\b", text) is not None)


def scope_word(f: Finding) -> str:
    """What a finding is about, in its brackets: its GPU, unit or port; ``job`` for a
    fault of the job or its settings about no part of the node (not ``node``, which
    would read as the node's fault)."""
    if f.scope.kind == "node" and f.blame.side == "job":
        return "job"
    return f.scope.label()
