"""GPU nodes' state beyond their count: driver drift across the pool (GFD's driver
label), GPU conditions on a node (the device plugin's XidCriticalError, a node problem
detector's) blamed by the Xid they name, and MIG resource names against the strategy.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

from gputriage.knowledge.xid import xid_info
from gputriage.model import Action, Blame, Finding, Severity, evidence
from gputriage.parsers.health_marks import HealthMark, marks_in
from gputriage.parsers.k8s_model import GPU, Cluster, KNode
from gputriage.rules.base import action_for, finding, merge_evidence, rule
from gputriage.rules.dcgm_marks import judge_mark
from gputriage.rules.k8s_node_marks import quarantine_of
from gputriage.rules.k8s_nodes import SOURCE, lines_of, named, scope_of
from gputriage.text.fields import strict_int

_XID_REASON = re.compile(r"\"?([0-9]{1,3})\"?\s*:\s*true|\bxid[ _-]?([0-9]{1,3})\b", re.I)


@rule("k8s.driver-drift", produces=("k8s.driver-drift",))
def driver_drift(cluster: Cluster) -> Iterator[Finding]:
    """GFD's cuda.driver-version.full differs across the GPU nodes: some nodes run
    another driver (a half-done upgrade, or a pool built from two images)."""
    by_version: dict[str, list[KNode]] = {}
    for node in cluster.gpu_nodes():
        v = node.labels.get("nvidia.com/cuda.driver-version.full")
        if v:
            by_version.setdefault(v, []).append(node)
    if len(by_version) < 2:
        return
    ranked = sorted(by_version.items(), key=lambda kv: -len(kv[1]))
    most = ranked[0][0]
    others = "; ".join(f"{v} on {', '.join(n.name for n in ns[:4])}"
                       f"{' and more' if len(ns) > 4 else ''}" for v, ns in ranked[1:])
    lines = [f"node/{n.name}: nvidia.com/cuda.driver-version.full={v}"
             for v, ns in ranked for n in ns[:4]]
    odd = ranked[1][1][0]
    yield finding(
        "k8s.driver-drift", Severity.WARNING,
        f"GPU nodes run {len(by_version)} driver versions: {most} on "
        f"{len(ranked[0][1])}, {others}",
        "GPU Feature Discovery labels each node with the driver it found. Nodes of one pool "
        "on different drivers give jobs different CUDA support and NCCL behaviour; a node "
        "left on the old driver after an upgrade is the usual case. Finish the upgrade (or "
        "pin the pool's driver) so that every node runs one version.",
        Action.PLAN_REPAIR, Blame.CONFIG, scope_of(odd), [evidence(SOURCE, lines)])


def _xids(reason: str, message: str) -> list[int]:
    codes = {strict_int(m.group(1) or m.group(2), signed=False)
             for m in _XID_REASON.finditer(f"{reason} {message}")}
    return sorted(c for c in codes if c is not None)


# conditions whose True is the healthy state (the EKS agent's AcceleratedHardwareReady)
_READY_KIND = re.compile(r"Ready$")


@rule("k8s.node-condition", produces=("k8s.node-condition",))
def node_condition(cluster: Cluster, health_checker_marks: list[HealthMark] | None = None
                   ) -> Iterator[Finding]:
    """A GPU problem condition on a node (the device plugin's XidCriticalError, a node
    problem detector's or NVSentinel's GPU condition, the EKS agent's
    AcceleratedHardwareReady=False) blamed by what it names: the DCGM error code of its
    message (knowledge/dcgm_errors.csv), else the Xid (31 is the application's, 79 or 48
    the GPU's). A condition whose message was pasted apart from it (a wrapped line read
    as a checker's mark) is judged there, once."""
    for node in cluster.nodes.values():
        for ctype, (status, reason, message) in node.conditions.items():
            if not re.search(r"xid|gpu|nvidia|accelerat", ctype, re.I):
                continue
            if status != ("False" if _READY_KIND.search(ctype) else "True"):
                continue
            marks = marks_in([f"{ctype} {reason} {message}"])
            if marks:
                found = _marked(node, ctype, reason, marks[0], cluster)
            elif health_checker_marks and not _xids(reason, message):
                continue  # its message is the pasted mark: dcgm.checker-mark judges it
            else:
                found = _condition(node, ctype, reason, message)
            yield _with_quarantine(found, node)


def _with_quarantine(found: Finding, node: KNode) -> Finding:
    """The condition's finding with the checker's cordon and taints as its evidence: one
    cause, one finding (rules/k8s_node_marks.py stays silent on such a node)."""
    q = quarantine_of(node)
    if q is None or not q.lines:
        return found
    return dataclasses.replace(found, evidence=merge_evidence(
        (*found.evidence, evidence(SOURCE, q.lines, limit=6))))


def _marked(node: KNode, ctype: str, reason: str, mark: HealthMark,
            cluster: Cluster) -> Finding:
    names = [n.labels.get("nvidia.com/gpu.product", "") for n in cluster.nodes.values()]
    v = judge_mark(mark.code, mark.number, mark.xids, mark.recommended,
                   [n for n in names if n])
    lines = [ln for ln in lines_of(node) if ctype in ln] or \
        [f"{ctype} {reason} {mark.text}".strip()]
    gpu = f" on GPU {mark.gpu}" if mark.gpu is not None else ""
    return finding(
        "k8s.node-condition", v.severity,
        f"{named(node)} reports {ctype} ({reason or mark.code}): {v.what}{gpu}"[:200],
        f"{v.why} The condition was set by the node's GPU health checker; it stays until the "
        "checker clears it.", v.action, v.blame, scope_of(node),
        [evidence(SOURCE, lines, limit=6)])


def _condition(node: KNode, ctype: str, reason: str, message: str) -> Finding:
    codes = _xids(reason, message)
    infos = [i for i in (xid_info(c) for c in codes) if i is not None]
    lines = [ln for ln in lines_of(node) if ctype in ln] or \
        [f"{ctype} True {reason} {message}".strip()]
    ev = [evidence(SOURCE, lines, limit=6)]
    what = f"{ctype} ({reason})" if reason else ctype
    if not infos:
        return finding("k8s.node-condition", Severity.WARNING,
                       f"{named(node)} reports {what}",
                       "A GPU condition with no Xid it names: read the node problem "
                       "detector's or the device plugin's log on the node, and run "
                       "`gputriage check` there.", Action.PLAN_REPAIR, Blame.UNKNOWN,
                       scope_of(node), ev)
    worst = max(infos, key=lambda i: i.severity.rank)
    xids = ", ".join(f"Xid {i.code} ({i.meaning})" for i in infos)
    if worst.blame.side == "job":
        return finding(
            "k8s.node-condition", Severity.WARNING,
            f"{named(node)} reports {what}: {xids}, the application's fault",
            f"{xids} is raised by the application's own error (an illegal address, a bad "
            "kernel), not a GPU fault: fix or restart the job that caused it. The condition "
            "stays True after that job is gone (the plugin sets it once and does not clear "
            "it), so clear it once the job is fixed (restart the device plugin's pod or "
            "the node's GPU monitoring agent) rather than repairing the node.",
            Action.RESTART_JOB, Blame.JOB, scope_of(node), ev)
    action = worst.action
    severity = worst.severity
    return finding(
        "k8s.node-condition", severity, f"{named(node)} reports {what}: {xids}",
        f"{worst.explanation} Cordon the node (kubectl cordon {node.name}) so that no new "
        "GPU pod lands there, then run `gputriage check` on it.",
        action_for(severity, action), worst.blame, scope_of(node), ev)


@rule("k8s.mig-resources", produces=("k8s.mig-resources",))
def mig_resources(cluster: Cluster) -> Iterator[Finding]:
    """MIG strategy against the resources: mixed advertises slices as nvidia.com/mig-*
    and only whole GPUs as nvidia.com/gpu; GFD's label names that differ from the
    resource names are cosmetic."""
    for node in cluster.nodes.values():
        alloc = node.gpus("allocatable") or node.gpus("capacity") or {}
        slices = {k: v for k, v in alloc.items() if k.startswith("nvidia.com/mig-")}
        labelled = {m.group(1) for k in node.labels
                    if (m := re.match(r"nvidia\.com/mig-([0-9]+g\.[0-9]+gb)\.count$", k))}
        strategy = node.labels.get("nvidia.com/mig.strategy")
        if labelled and slices:
            named = {k.removeprefix("nvidia.com/mig-") for k in slices}
            if labelled - named:
                yield _label_names(node, sorted(labelled - named), sorted(named))
                continue
        if slices and alloc.get(GPU, 0) > 0:
            yield _mixed(node, alloc, slices, strategy)


def _label_names(node: KNode, labels: list[str], resources: list[str]) -> Finding:
    return finding(
        "k8s.mig-resources", Severity.INFO,
        f"{named(node)}: GFD labels MIG profile {', '.join(labels)}, the resource is "
        f"{', '.join('nvidia.com/mig-' + r for r in resources)}",
        "The device plugin's resource names (capacity, allocatable) are what pods request, "
        "and they are right; GPU Feature Discovery derived its label prefix from the "
        "profile's exact memory and rounded it differently. A cosmetic label bug fixed in "
        "later GFD releases: nothing to do on the node (select on the resource, not on the "
        "label).", Action.NONE, Blame.UNKNOWN, scope_of(node),
        [evidence(SOURCE, lines_of(node), limit=14)])


def _mixed(node: KNode, alloc: dict[str, float], slices: dict[str, float],
           strategy: str | None) -> Finding:
    listed = ", ".join(f"{k}: {v:g}" for k, v in sorted(slices.items()))
    return finding(
        "k8s.mig-resources", Severity.INFO,
        f"{named(node)} advertises {alloc[GPU]:g} whole GPUs as {GPU} beside MIG slices "
        f"({listed})",
        f"With the mixed MIG strategy{' (this node: ' + strategy + ')' if strategy else ''} "
        f"the device plugin advertises each MIG profile as nvidia.com/mig-<profile> and only "
        f"the GPUs with MIG disabled as {GPU}. A pod that asks for {GPU} gets a whole "
        "non-MIG GPU, never a slice: request the nvidia.com/mig-* name for a slice, or use "
        "the single strategy (slices advertised as nvidia.com/gpu), or disable MIG on the "
        "GPUs meant as whole GPUs. Configuration semantics, not a fault of the node.",
        Action.NONE, Blame.JOB_CONFIG, scope_of(node),
        [evidence(SOURCE, lines_of(node), limit=14)])
