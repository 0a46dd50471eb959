"""The rule registry and small helpers for writing findings.

A rule is a pure function that yields findings. Its parameters are the facts it
reads, by name: a parameter without a default is required, one with a default
(``None``) is optional; ``any_of`` names optional facts of which at least one must
be present. The engine supplies them, and skips the rule with the reason when a
required fact is missing. A rule never sees the snapshot or the fact store.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gputriage.model import (
    DRAINING_ACTIONS,
    NODE,
    Action,
    Blame,
    Evidence,
    Finding,
    Occurrences,
    Scope,
    Severity,
)

RuleFunc = Callable[..., Iterable[Finding]]

# What a critical finding of the node's software or configuration says about draining:
# the node cannot run GPU jobs, but nothing in it needs a hardware repair.
SOFTWARE_DRAIN = ("Drain the node (if at all) only to keep jobs off it until the software "
                  "is fixed: no hardware needs repair.")


@dataclass(frozen=True)
class Rule:
    id: str
    func: RuleFunc
    requires: tuple[str, ...]  # facts that must all be present
    any_of: tuple[str, ...]  # facts of which one must be present
    produces: tuple[str, ...]
    optional: tuple[str, ...] = ()  # facts passed as None (or the default) when missing
    defaults: tuple[tuple[str, Any], ...] = ()

    @property
    def doc(self) -> str:
        return (self.func.__doc__ or "").strip()

    @property
    def reads(self) -> tuple[str, ...]:
        """Every fact the rule may read."""
        return self.requires + tuple(n for n in self.optional if n not in self.requires)


REGISTRY: list[Rule] = []


def rule(rule_id: str, *, any_of: Sequence[str] = (),
         produces: Sequence[str] = ()) -> Callable[[RuleFunc], RuleFunc]:
    """Register a rule function under ``rule_id``; its parameters name the facts it
    reads (see the module docstring)."""

    def register(func: RuleFunc) -> RuleFunc:
        if any(r.id == rule_id for r in REGISTRY):
            raise ValueError(f"duplicate rule id {rule_id}")
        params = list(inspect.signature(func).parameters.values())
        needed = tuple(p.name for p in params if p.default is inspect.Parameter.empty)
        optional = tuple(p.name for p in params if p.default is not inspect.Parameter.empty)
        unknown = [n for n in any_of if n not in optional]
        if unknown:
            raise ValueError(f"rule {rule_id}: any_of {unknown} are not optional parameters")
        REGISTRY.append(Rule(rule_id, func, needed, tuple(any_of), tuple(produces),
                             optional, tuple((p.name, p.default) for p in params
                                             if p.name in optional)))
        return func

    return register


def finding(fid: str, severity: Severity, title: str, explanation: str, action: Action,
            blame: Blame, scope: Scope = NODE, evidence: Iterable[Evidence] = (),
            references: Iterable[str] = (), occurrences: Occurrences | None = None,
            fix: str | None = None) -> Finding:
    return Finding(fid, severity, title, explanation, action, blame, scope,
                   merge_evidence(evidence), tuple(references), occurrences, fix=fix)


def action_for(severity: Severity, action: Action,
               instead: Action = Action.PLAN_REPAIR) -> Action:
    """``action`` as far as ``severity`` allows it: an action that takes the node or
    a GPU out of service is for a critical finding only, so a warning asks for
    ``instead`` (the repair planned for the next window) and information for none."""
    if action not in DRAINING_ACTIONS or severity is Severity.CRITICAL:
        return action
    return instead if severity is Severity.WARNING else Action.NONE


def merge_evidence(items: Iterable[Evidence]) -> tuple[Evidence, ...]:
    """One block per source (in first-seen order), each line once."""
    merged: dict[str, tuple[list[str], list[str]]] = {}
    for e in items:
        if not (e.lines or e.note):
            continue
        lines, notes = merged.setdefault(e.source, ([], []))
        lines.extend(ln for ln in e.lines if ln not in lines)
        if e.note and e.note not in notes:
            notes.append(e.note)
    return tuple(Evidence(src, tuple(lines), "; ".join(notes) or None)
                 for src, (lines, notes) in merged.items())


def versions_agree(a: str, b: str) -> bool:
    """Two driver versions agree when one is a component-wise prefix of the other
    ("550.54" and "550.54.15" agree, "550.54.14" and "550.54.15" do not)."""
    pa, pb = a.strip().split("."), b.strip().split(".")
    n = min(len(pa), len(pb))
    return pa[:n] == pb[:n]
