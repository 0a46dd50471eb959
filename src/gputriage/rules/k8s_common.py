"""What the Kubernetes rules share: the scope of a finding about a cluster object."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from gputriage.model import Action, Blame, Evidence, Finding, Scope, Severity

__all__ = ["SHOWN", "group_pods", "object_scope"]


def object_scope(kind: str, name: str, namespace: str | None = None) -> Scope:
    """The scope of a finding about one object: its kind in lower case (``node``
    becomes ``k8s-node``, not to be read as this host) and ``namespace/name``."""
    lowered = "k8s-node" if kind == "Node" else kind.lower()
    return Scope(lowered, name=f"{namespace}/{name}" if namespace else name)


SHOWN = 20  # pods a grouped finding names (its ``also``); the rest are counted


def group_pods(findings: Iterable[Finding], who: Callable[[Finding], str]) -> list[Finding]:
    """Findings about pods that say the same (id, severity, action, blame and
    explanation: one cause) become one: its scope the first pod, ``also`` the next
    ones, the title counting them. ``who(f)`` is how ``f``'s title names its pod."""
    groups: dict[tuple[str, Severity, Action, Blame, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.id, f.severity, f.action, f.blame, f.explanation), []).append(f)
    out = []
    for members in groups.values():
        first = members[0]
        if len(members) == 1:
            out.append(first)
            continue
        name = who(first)
        rest = first.title[len(name):] if first.title.startswith(name) else f": {first.title}"
        title = f"{len(members)} pods{rest}".replace(" is Pending", " are Pending", 1)
        lines: list[str] = []
        for f in members[:SHOWN]:
            for e in f.evidence:
                lines.extend(ln for ln in e.lines if ln not in lines)
        more = len(members) - SHOWN
        out.append(replace(
            first, title=title, also=tuple(f.scope for f in members[1:SHOWN]),
            evidence=(Evidence(first.evidence[0].source if first.evidence else "cluster",
                               tuple(lines[:3 * SHOWN]),
                               f"and {more} more pods" if more > 0 else None),)))
    return out
