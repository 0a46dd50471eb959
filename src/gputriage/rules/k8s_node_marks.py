"""A node a GPU health checker took out of service, read from its taints, labels and
annotations (``kubectl get node -o yaml|json``, ``kubectl describe node``, ``kubectl get
nodes --show-labels``): NVSentinel's fault-quarantine (its ``quarantineHealthEvent``
annotation, its ``<prefix>cordon-by`` / ``cordon-reason`` labels, the taints its rulesets
apply), or another checker's GPU-health taint. The checker and its reason are said, and
the blame is what the reason says: the DCGM error code or the Xid of the event
(knowledge/dcgm_errors.csv, knowledge/xid.csv); unknown, at warning and never a drain,
when the node carries no reason. A node whose GPU condition is also shown is judged once,
by the condition (rules/k8s_node_health.py); this rule then stays silent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gputriage.model import Action, Blame, Finding, Severity, evidence
from gputriage.parsers.health_marks import HealthMark, marks_in
from gputriage.parsers.k8s_model import Cluster, KNode, Taint
from gputriage.rules.base import finding, rule
from gputriage.rules.dcgm_marks import judge_mark
from gputriage.rules.k8s_nodes import SOURCE, named, scope_of

__all__ = ["Quarantine", "gpu_condition_shown", "quarantine_of"]

DOC_NVSENTINEL = "https://github.com/NVIDIA/NVSentinel/blob/main/docs/INTEGRATIONS.md"
_EVENT_KEY = re.compile(r"(?:^|/)quarantineHealthEvent$")
_STATE_KEY = re.compile(r"(?:^|/)(?:quarantineHealthEvent(?:AppliedTaints|IsCordoned)|"
                        r"quarantinedNodeUncordonedManually|nvsentinel-state)$")
_CORDON_BY = re.compile(r"(?:^|/)cordon-by$")
_CORDON_REASON = re.compile(r"(?:^|/)cordon-reason$")
# the GPU pool's own taint (nvidia.com/gpu=present:NoSchedule) keeps non-GPU pods off: not a mark
_POOL_TAINT = re.compile(r"^(?:nvidia\.com/gpu|sku|gpu|dedicated|accelerator|"
                         r"kubernetes\.azure\.com/scalesetpriority|cloud\.google\.com/gke-.*)$")
# taints a health checker sets: NVSentinel's documented examples (nvidia.com/gpu-xid-error,
# gpu-nvlink-error, syslog-xid-error, gpu-error, AggregatedNodeHealth, gpu.health/*), and
# any GPU health key of another checker (xid, nvlink, dcgm, ecc, a "health"/"unhealthy" key)
_HEALTH_TAINT = re.compile(r"AggregatedNodeHealth|GPUHealth|(?:gpu|nvlink|nvswitch)\.health/|"
                           r"nvidia\.com/(?:gpu|syslog)-[a-z-]{0,30}error|xid|nvlink|dcgm|"
                           r"\becc\b|(?:gpu|accelerat)[a-z.-]{0,20}(?:unhealthy|health|fault|"
                           r"error|failed)", re.IGNORECASE)


@dataclass
class Quarantine:
    """What a node's taints, labels and annotations say a checker did to it."""

    checker: str | None = None
    reason: str | None = None  # the cordon-reason label (NVSentinel's ruleset name)
    taints: list[Taint] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    event_text: str | None = None  # the annotation when it is not JSON
    cleared: bool = False  # quarantineHealthEvent is there but empty
    lines: list[str] = field(default_factory=list)


def _events(raw: Any, out: list[dict[str, Any]], depth: int = 0) -> None:
    """Every health event (a mapping with a checkName or an errorCode) in the annotation's
    JSON, however it nests them (a list, a map keyed by check)."""
    if depth > 6 or len(out) >= 32:
        return
    if isinstance(raw, dict):
        if any(k in raw for k in ("checkName", "errorCode", "CheckName", "ErrorCode")):
            out.append(raw)
            return
        for v in list(raw.values())[:64]:
            _events(v, out, depth + 1)
    elif isinstance(raw, list):
        for v in raw[:64]:
            _events(v, out, depth + 1)


def quarantine_of(node: KNode) -> Quarantine | None:
    """The checker's quarantine of ``node``; None when nothing on it says a checker
    marked it."""
    q = Quarantine()
    for key, value in node.annotations.items():
        if _EVENT_KEY.search(key):
            q.checker = "NVSentinel"
            q.lines.append(f"{key}: {value}"[:400])
            text = value.strip()
            try:
                raw = json.loads(text[:200_000]) if text else None
            except ValueError:
                raw = None
            if raw is None and text and text not in ("[]", "{}", "null"):
                q.event_text = text[:4000]
            _events(raw, q.events)
            q.cleared = not q.events and q.event_text is None
        elif _STATE_KEY.search(key):
            q.lines.append(f"{key}: {value}"[:200])
    for key, value in node.labels.items():
        if _CORDON_BY.search(key) and value:
            q.checker = q.checker or value
            q.lines.append(f"{key}={value}")
        elif _CORDON_REASON.search(key) and value:
            q.reason = value
            q.lines.append(f"{key}={value}")
    q.taints = [t for t in node.taints or () if _HEALTH_TAINT.search(t.key)
                and not _POOL_TAINT.match(t.key)]
    q.lines.extend(f"taint {t}" for t in q.taints)
    if q.checker is None and not q.taints:
        return None
    if q.checker is None:
        q.checker = "a GPU health checker"
    return q


def gpu_condition_shown(node: KNode) -> bool:
    """Whether ``node`` shows a GPU problem condition (k8s.node-condition judges it)."""
    return any(re.search(r"xid|gpu|nvidia|accelerat", ctype, re.I)
               and status == ("False" if ctype.endswith("Ready") else "True")
               for ctype, (status, _, _) in node.conditions.items())


def _mark_of(event: dict[str, Any]) -> HealthMark | None:
    """The event as a checker's mark (its DCGM error code and the Xid it names)."""
    lines = [f"{k}: {json.dumps(v) if not isinstance(v, str) else v}"[:300]
             for k, v in event.items() if k in ("checkName", "errorCode", "message",
                                                "recommendedAction", "isFatal",
                                                "entitiesImpacted", "CheckName", "ErrorCode",
                                                "Message")]
    marks = marks_in(lines)
    if marks:
        return marks[0]
    xids = sorted({int(m.group(1)) for m in re.finditer(r"\bXID[ _-]?([0-9]{1,3})\b",
                                                        " ".join(lines), re.IGNORECASE)})
    if xids:
        return HealthMark("DCGM_FR_XID_ERROR", None, "NVSentinel", None, xids=xids,
                          lines=lines)
    return None


@rule("k8s.node-health-mark", produces=("k8s.node-health-mark",))
def node_health_mark(cluster: Cluster) -> Iterator[Finding]:
    """A node a health checker cordoned or tainted, with the checker's reason when the
    node carries it (NVSentinel's quarantineHealthEvent), blamed as that reason says."""
    names = [n.labels.get("nvidia.com/gpu.product", "") for n in cluster.nodes.values()]
    gpu_names = [n for n in names if n]
    for node in cluster.nodes.values():
        q = quarantine_of(node)
        if q is None or gpu_condition_shown(node):
            continue
        yield from _judged(node, q, gpu_names)


def _judged(node: KNode, q: Quarantine, gpu_names: list[str]) -> Iterator[Finding]:
    ev = [evidence(SOURCE, q.lines, limit=8)]
    how = "tainted" if q.taints else "cordoned"
    how = f"{how} ({', '.join(str(t) for t in q.taints[:3])})" if q.taints else how
    if q.cleared and not q.events:
        if q.taints:
            yield finding(
                "k8s.node-health-mark", Severity.WARNING,
                f"{named(node)} keeps {q.checker}'s quarantine taint with no health event "
                "left", f"{q.checker}'s quarantineHealthEvent is empty (the event was cleared "
                "or the node was uncordoned by hand), yet its taint stays: pods that do not "
                "tolerate it never land on the node. Stale quarantine state, not a GPU fault: "
                "remove the taint once the node is checked.", Action.FIX_CONFIG, Blame.CONFIG,
                scope_of(node), ev, (DOC_NVSENTINEL,))
        return
    marks = [m for m in (_mark_of(e) for e in q.events) if m is not None]
    if not marks and q.event_text:
        marks = marks_in([q.event_text])
    reason = f" (ruleset {q.reason})" if q.reason else ""
    if not marks:
        yield finding(
            "k8s.node-health-mark", Severity.WARNING,
            f"{named(node)} was {how} by {q.checker}{reason}: the node does not say why",
            f"{q.checker} took the node out of service, but the taints and labels pasted "
            "name no DCGM error code or Xid, so whose fault it is cannot be told from them. "
            "Read the node's GPU conditions and events (kubectl describe node) or the "
            "checker's health event, and run gputriage check on the node before it is "
            "repaired or put back.", Action.PLAN_REPAIR, Blame.UNKNOWN, scope_of(node), ev,
            (DOC_NVSENTINEL,) if q.checker == "NVSentinel" else ())
        return
    seen: set[tuple[str, int | None]] = set()
    for mark in marks:
        if (mark.code, mark.gpu) in seen:
            continue
        seen.add((mark.code, mark.gpu))
        v = judge_mark(mark.code, mark.number, mark.xids, mark.recommended, gpu_names)
        gpu = f" on GPU {mark.gpu}" if mark.gpu is not None else ""
        check = f" {mark.check}" if mark.check else ""
        yield finding(
            "k8s.node-health-mark", v.severity,
            f"{named(node)} was {how} by {q.checker}{check}: {v.what}{gpu}"[:200],
            f"{v.why} {q.checker} quarantined the node for this event; its cordon and taint "
            "stay until the event clears or someone uncordons the node.", v.action, v.blame,
            scope_of(node), ev + [evidence(SOURCE, mark.lines, limit=6)],
            (DOC_NVSENTINEL,) if q.checker == "NVSentinel" else ())
