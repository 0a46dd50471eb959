"""GPU pods that do not start: why the scheduler left each Pending pod out (its
FailedScheduling message read per reason, against the nodes' allocatable and allocated
GPUs). What holds a pod before the scheduler (quota, Kueue, gangs) is rules/k8s_admission.py.

Capacity and the job's own settings (selector, affinity, tolerations, the resource name it
asks for) are the job's side (job-config); a node that should advertise GPUs and does not is
the node's (rules/k8s_nodes.py: the pending pod folds under it). Autoscaler events and a
later Scheduled event make a pending transient: said so, no action.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from gputriage.model import Action, Blame, Evidence, Finding, Scope, Severity, evidence
from gputriage.parsers.k8s_model import GPU, Cluster, KEvent, KNode, KPod
from gputriage.rules.base import finding, rule
from gputriage.rules.k8s_common import group_pods, object_scope
from gputriage.rules.k8s_nodes import meant_for_gpus, node_gpus_free
from gputriage.rules.k8s_sched import (
    AFFINITY,
    SELECTOR,
    TAINT,
    UNSCHEDULABLE,
    SchedMessage,
    parse_failed_scheduling,
)

SOURCE = "cluster"
_AUTOSCALER = ("TriggeredScaleUp", "NotTriggerScaleUp", "ScaleUp", "FailedScaleUp")
_NODE_STATE_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
_CONTROL_PLANE = ("node-role.kubernetes.io/",)


@dataclass
class _Subject:
    pod: KPod | None
    name: str | None  # namespace/name when known
    events: list[KEvent] = field(default_factory=list)


def _pending(pod: KPod) -> bool:
    return (pod.phase == "Pending" or pod.status == "Pending") and not pod.node or \
        pod.conditions.get("PodScheduled", ("",))[0] == "False"


def _subjects(cluster: Cluster) -> list[_Subject]:
    """Each pod the scheduler left out (Pending now, or a FailedScheduling event about
    it), with the events about it; events that name no pod go to the only pod of the
    paste, or stand for an unnamed one."""
    pods = {(p.namespace, p.name): p for p in cluster.pods}
    subjects: dict[tuple[str | None, str], _Subject] = {}

    def key_of(namespace: str | None, name: str) -> tuple[str | None, str]:
        if (namespace, name) in pods or namespace is not None:
            return namespace, name
        return next((k for k in pods if k[1] == name), (namespace, name))

    def add(key: tuple[str | None, str]) -> None:
        if key not in subjects:
            ns, name = key
            subjects[key] = _Subject(pods.get(key), f"{ns}/{name}" if ns else name)

    for pod in cluster.pods:
        if _pending(pod):
            add((pod.namespace, pod.name))
    pod_events = [e for e in cluster.events if e.kind == "Pod" and e.name]
    for e in pod_events:
        if e.reason == "FailedScheduling":
            add(key_of(e.namespace, e.name or ""))
    for e in pod_events:
        sub = subjects.get(key_of(e.namespace, e.name or ""))
        if sub is not None:
            sub.events.append(e)
    loose = [e for e in cluster.events if e.kind is None]
    if any(e.reason == "FailedScheduling" or parse_failed_scheduling(e.message)
           for e in loose):
        if len(subjects) == 1:
            next(iter(subjects.values())).events.extend(loose)
        elif not subjects:
            subjects[(None, "?")] = _Subject(None, None, loose)
    return list(subjects.values())


def _scope(sub: _Subject) -> Scope:
    if sub.pod is not None:
        return object_scope("Pod", sub.pod.name, sub.pod.namespace)
    if not sub.name:  # events alone: a pod they do not name
        return Scope("pod")
    ns, _, name = sub.name.rpartition("/")
    return object_scope("Pod", name, ns or None)


def _who(sub: _Subject) -> str:
    return f"pod {sub.name}" if sub.name else "the pod"


def _asks(sub: _Subject) -> dict[str, float]:
    return sub.pod.gpu_requests() if sub.pod is not None else {}


@dataclass
class _Pool:
    """What every pending pod is judged against, worked out once per cluster: the GPU
    nodes, those offering GPUs, those offering none, and the GPUs pods hold per node."""

    cluster: Cluster
    gpu_nodes: list[KNode]
    offering: list[KNode]
    silent: list[KNode]
    held: dict[str, float]
    offering_names: set[str]

    @classmethod
    def of(cls, cluster: Cluster) -> _Pool:
        gpu_nodes = [n for n in cluster.nodes.values() if meant_for_gpus(n)
                     or (n.gpus("allocatable") or {})]
        offering = [n for n in gpu_nodes if (n.gpus("allocatable") or {}).get(GPU, 0) > 0]
        silent = [n for n in gpu_nodes if not sum((n.gpus("allocatable") or {}).values())
                  and (n.allocatable is not None or n.capacity is not None)]
        held: dict[str, float] = {}
        for p in cluster.pods:
            if p.node and p.phase in ("Running", "Pending"):
                asked = p.gpu_requests().get(GPU, 0.0)
                if asked:
                    held[p.node] = held.get(p.node, 0.0) + asked
        offered: set[str] = set()
        for n in cluster.nodes.values():
            offered |= {k for k, v in (n.gpus("allocatable") or {}).items() if v > 0}
        return cls(cluster, gpu_nodes, offering, silent, held, offered)

    def free(self, node: KNode) -> float | None:
        """The node's free whole GPUs: allocatable less what describe's Allocated
        resources or the running pods on it hold."""
        free = node_gpus_free(node)
        if free is not None:
            return free
        alloc = (node.gpus("allocatable") or {}).get(GPU)
        if alloc is None or not self.cluster.pods:
            return None
        return alloc - self.held.get(node.name, 0.0)


@rule("k8s.pending", produces=(
    "k8s.pending-insufficient-gpu", "k8s.pending-fragmented", "k8s.pending-untolerated-taint",
    "k8s.pending-selector-mismatch", "k8s.pending-affinity",
    "k8s.pending-unschedulable-node"))
def pending(cluster: Cluster) -> Iterator[Finding]:
    """Each Pending GPU pod and why: its FailedScheduling message per reason (GPUs
    exhausted, fragmented across nodes, an untolerated taint, a selector or affinity no
    GPU node matches, cordoned nodes), what would fit, and whether it was transient."""
    yield from group_pods(_each_pending(cluster), _title_who)


def _title_who(f: Finding) -> str:
    """How a finding's title names its pod (see :func:`_who`)."""
    return f"pod {f.scope.name}" if f.scope.name else "the pod"


def _each_pending(cluster: Cluster) -> Iterator[Finding]:
    pool: _Pool | None = None
    for sub in _subjects(cluster):
        failed = [e for e in sub.events if e.reason == "FailedScheduling"
                  or (e.kind is None and parse_failed_scheduling(e.message))]
        asks = _asks(sub)
        if not failed and not asks:
            continue
        pool = pool or _Pool.of(cluster)
        yield _judge(pool, sub, failed, asks)


def _ev(sub: _Subject, events: list[KEvent]) -> list[Evidence]:
    out = []
    if sub.pod is not None and sub.pod.lines:
        out.append(evidence(SOURCE, [ln for ln in sub.pod.lines if ln.strip()][:1]
                            + [ln for ln in sub.pod.lines if "nvidia.com/" in ln][:4], limit=6))
    lines = [e.line or f"{e.reason} {e.message}" for e in events]
    if lines:
        out.append(evidence(SOURCE, lines, limit=10))
    return out


def _judge(pool: _Pool, sub: _Subject, failed: list[KEvent],
           asks: dict[str, float]) -> Finding:
    last = failed[-1] if failed else None
    msg = parse_failed_scheduling(last.message) if last else None
    shown = [e for e in sub.events if e in failed or e.reason in (*_AUTOSCALER, "Scheduled")]
    ev = _ev(sub, shown or failed)
    scheduled = [e for e in sub.events if e.reason == "Scheduled"
                 and (not failed or sub.events.index(e) > sub.events.index(failed[-1]))]
    scaler = [e for e in sub.events if e.reason in _AUTOSCALER]
    if scheduled:
        return _transient(sub, msg, scheduled[-1], scaler, ev)
    if msg is None:
        return _no_message(sub, asks, ev)
    return _why(pool, sub, msg, asks, ev)


def _transient(sub: _Subject, msg: SchedMessage | None, scheduled: KEvent,
               scaler: list[KEvent], ev: list[Evidence]) -> Finding:
    words = []
    if msg is not None and msg.gpu_short():
        words.append(f"{msg.gpu_short()} of {msg.total} nodes had no free {GPU}")
    if scaler:
        words.append("the cluster autoscaler " + "; then ".join(
            f"{e.reason}: {e.message}" for e in scaler))
    return finding(
        "k8s.pending-insufficient-gpu", Severity.INFO,
        f"{_who(sub)} waited for a GPU, then was scheduled: a transient shortage",
        f"{'; '.join(words) or 'No node had room'} until a node came (Scheduled: "
        f"{scheduled.message}). Every GPU was allocated, not broken: a pool at its maximum "
        "size (a spot pool after an eviction) waits for the autoscaler. Only an "
        f"'Insufficient {GPU}' that persists while nodes show idle GPUs would point at a "
        "device plugin that does not advertise them.",
        Action.NONE, Blame.JOB_CONFIG, _scope(sub), ev)


def _no_message(sub: _Subject, asks: dict[str, float], ev: list[Evidence]) -> Finding:
    asked = ", ".join(f"{v:g} {k}" for k, v in sorted(asks.items()))
    return finding(
        "k8s.pending-insufficient-gpu", Severity.WARNING,
        f"{_who(sub)} asks for {asked} and is not scheduled (the paste shows no "
        "FailedScheduling event)",
        "The pod's events say why (kubectl describe pod, Events). With a GPU request the "
        f"usual answer is 'Insufficient {GPU}': no node has that many allocatable GPUs "
        "free, either because they are all in use or because the device plugin does not "
        "advertise them. kubectl describe node (Capacity, Allocatable, Allocated resources) "
        "and the device plugin pod's log tell which.",
        Action.FIX_CONFIG, Blame.UNKNOWN, _scope(sub), ev)


def _why(pool: _Pool, sub: _Subject, msg: SchedMessage, asks: dict[str, float],
         ev: list[Evidence]) -> Finding:
    gpu_nodes, offering, silent = pool.gpu_nodes, pool.offering, pool.silent
    short = msg.gpu_short()
    counts = ", ".join(f"{r.count} {r.text}" for r in msg.reasons)
    head = f"{msg.available}/{msg.total} nodes fit ({counts})"
    taints = [r for r in msg.reasons if r.kind == TAINT
              and not (r.detail or "").startswith(_NODE_STATE_TAINTS)]
    if short and silent:
        names = ", ".join(n.name for n in silent[:4])
        return finding(
            "k8s.pending-insufficient-gpu", Severity.WARNING,
            f"{_who(sub)} is Pending: {short} node(s) short of {GPU}; {names} "
            f"offer{'' if len(silent) > 1 else 's'} none of {'their' if len(silent) > 1 else 'its'}"
            " GPUs",
            f"{head}. The GPUs exist but are not offered: the node's device plugin is the "
            "cause (see that node's finding); the pod schedules once it advertises them.",
            Action.FIX_CONFIG, Blame.CONFIG, _scope(sub), ev)
    # the nodes a selector, an affinity or a taint leaves out are the GPU nodes when a
    # GPU node offers GPUs, or (nodes not shown) when no node is counted twice
    known = any(n.allocatable is not None for n in gpu_nodes)
    excluded = offering if known else (msg.disjoint() or not short)
    # a taint the pod does not tolerate first: a selector that leaves out the CPU nodes
    # is right, the taint keeps it off the GPU nodes (a control plane's taint is the
    # exception: it keeps pods off nodes they were never meant for)
    pool_taints = [r for r in taints if not (r.detail or "").startswith(_CONTROL_PLANE)]
    if pool_taints and excluded:
        return _taint(sub, pool_taints[0].detail, pool_taints[0].count, head, ev)
    for kind, fid in ((SELECTOR, "k8s.pending-selector-mismatch"),
                      (AFFINITY, "k8s.pending-affinity")):
        n = msg.count(kind)
        if n and excluded:
            return _excluded(sub, fid, kind, n, msg, head, offering, ev)
    if taints and excluded:
        return _taint(sub, taints[0].detail, taints[0].count, head, ev)
    mismatch = _name_mismatch(pool.offering_names, msg)
    if mismatch is not None:
        return finding(
            "k8s.pending-insufficient-gpu", Severity.WARNING,
            f"{_who(sub)} is Pending: it asks for {mismatch[0]}, which no node advertises "
            f"(they offer {mismatch[1]})", f"{head}. {_NAMES}",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, _scope(sub), ev)
    if short:
        return _short(pool, sub, msg, asks, head, offering, ev)
    if msg.count(UNSCHEDULABLE):
        return _cordoned(sub, msg, head, ev)
    return finding(
        "k8s.pending-insufficient-gpu", Severity.WARNING,
        f"{_who(sub)} is Pending: {head}",
        "No node fits the pod for the reasons the scheduler lists; none of them is a GPU "
        "fault.", Action.FIX_CONFIG, Blame.JOB_CONFIG, _scope(sub), ev)


_NAMES = ("The resource name is the device plugin's: with the mixed MIG strategy slices are "
          "nvidia.com/mig-<profile> and only whole GPUs are nvidia.com/gpu; with the single "
          "strategy slices are nvidia.com/gpu; shared GPUs (time-slicing, MPS) are "
          "nvidia.com/gpu.shared when renamed. Ask for the name the nodes advertise "
          "(kubectl describe node, Allocatable), or change the plugin's strategy.")


def _name_mismatch(offered: set[str], msg: SchedMessage) -> tuple[str, str] | None:
    """(asked, offered) when the pod is short of an NVIDIA resource no node advertises
    while nodes advertise other NVIDIA resources (``offered``)."""
    for res in msg.short_of():
        if res.startswith("nvidia.com/") and offered and res not in offered:
            return res, ", ".join(sorted(offered))
    return None


def _excluded(sub: _Subject, fid: str, kind: str, n: int, msg: SchedMessage, head: str,
              offering: list[KNode], ev: list[Evidence]) -> Finding:
    what = "its node selector or node affinity" if kind == SELECTOR else \
        "its pod affinity (it must run beside another pod)"
    gpus = ""
    if offering:
        gpus = " " + ", ".join(f"{node.name} offers "
                               f"{(node.gpus('allocatable') or {}).get(GPU, 0):g} GPUs"
                               for node in offering[:3]) + ";"
    rest = (f"; {msg.gpu_short()} of {msg.total} nodes have no free {GPU}"
            if msg.gpu_short() else "")
    fix = ("set the selector to a label the GPU nodes carry (kubectl get nodes --show-labels; "
           "GFD's nvidia.com/gpu.product) or label the GPU node" if kind == SELECTOR else
           "pin the pod it follows to the GPU node, or drop or relax the affinity")
    return finding(
        fid, Severity.WARNING,
        f"{_who(sub)} is Pending: {what} leaves out {n} node(s){rest}",
        f"{head}.{gpus} The GPU node that could take the pod is excluded by {what}, so "
        f"the scheduler sees only nodes without free GPUs: {fix}. The nodes are healthy.",
        Action.FIX_CONFIG, Blame.JOB_CONFIG, _scope(sub), ev)


def toleration_for(taint: str | None) -> str:
    """The toleration that lets a pod onto nodes of ``taint`` as the scheduler prints it
    (``nvidia.com/gpu: present``, ``key=value:NoSchedule``, a bare key), in YAML flow form;
    Exists (any value) when the value is not known."""
    text = (taint or "").strip()
    effect = None
    if ":" in text and text.rsplit(":", 1)[1].strip() in _EFFECTS:
        text, effect = (part.strip() for part in text.rsplit(":", 1))
    key, sep, value = (text.partition("=") if "=" in text else text.partition(":"))
    key, value = key.strip() or "nvidia.com/gpu", value.strip()
    parts = [f"key: {key}"]
    parts += [f"operator: Equal, value: {value}"] if sep and value else ["operator: Exists"]
    parts.append(f"effect: {effect or 'NoSchedule'}")
    return "{" + ", ".join(parts) + "}"


_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _taint(sub: _Subject, taint: str | None, n: int, head: str,
           ev: list[Evidence]) -> Finding:
    return finding(
        "k8s.pending-untolerated-taint", Severity.WARNING,
        f"{_who(sub)} is Pending: {n} node(s) have the taint {{{taint or '?'}}} it does "
        "not tolerate",
        f"{head}. GPU pools are tainted so that only GPU pods land there; the pod needs "
        f"the toleration {toleration_for(taint)} in its template, or the "
        "ExtendedResourceToleration admission plugin to add it (it tolerates the taints "
        "named after the extended resources a pod asks for, such as nvidia.com/gpu).",
        Action.FIX_CONFIG, Blame.JOB_CONFIG, _scope(sub), ev)


def _cordoned(sub: _Subject, msg: SchedMessage, head: str, ev: list[Evidence]) -> Finding:
    return finding(
        "k8s.pending-unschedulable-node", Severity.WARNING,
        f"{_who(sub)} is Pending: {msg.count(UNSCHEDULABLE)} node(s) are cordoned",
        f"{head}. A cordoned node takes no new pod: uncordon it (kubectl uncordon) once "
        "the reason it was cordoned is gone.",
        Action.FIX_CONFIG, Blame.CONFIG, _scope(sub), ev)


def _short(pool: _Pool, sub: _Subject, msg: SchedMessage, asks: dict[str, float],
           head: str, offering: list[KNode], ev: list[Evidence]) -> Finding:
    want = asks.get(GPU)
    frees = {n.name: f for n in offering if (f := pool.free(n)) is not None}
    cordon = (f"; {msg.count(UNSCHEDULABLE)} node(s) are cordoned"
              if msg.count(UNSCHEDULABLE) else "")
    if want and frees and sum(frees.values()) >= want > max(frees.values()):
        fits = ", ".join(f"{name} has {f:g}" for name, f in sorted(frees.items())
                         if f > 0)
        return finding(
            "k8s.pending-fragmented", Severity.WARNING,
            f"{_who(sub)} asks {want:g} GPUs on one node; {sum(frees.values()):g} are free, "
            "spread over nodes",
            f"{head}. Free GPUs per node: {fits}; the pod asks {want:g} on one node. Split "
            "the job into pods that fit, or pack GPU jobs (bin-packing scoring, a "
            "descheduler) so that whole nodes stay free.",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, _scope(sub), ev)
    if frees:
        fits = ", ".join(f"{name} {f:g}" for name, f in sorted(frees.items()))
        return finding(
            "k8s.pending-insufficient-gpu", Severity.WARNING,
            f"{_who(sub)} is Pending: every GPU of the pool is in use"
            f"{f' (it asks {want:g})' if want else ''}",
            f"{head}{cordon}. Free GPUs per node: {fits}. The GPUs are allocated, not "
            "broken: wait, free some (lower-priority jobs), or add nodes.",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, _scope(sub), ev)
    asked = f" (it asks {want:g})" if want else ""
    return finding(
        "k8s.pending-insufficient-gpu", Severity.WARNING,
        f"{_who(sub)} is Pending: no node has a free {GPU}{asked}{cordon}",
        f"{head}{cordon}. Either every GPU is allocated, or a GPU node does not advertise "
        "its GPUs (device plugin not registered, kubelet lost its endpoint). kubectl "
        "describe node (Allocatable against Allocated resources) and the device plugin "
        f"pod's log tell which; an 'Insufficient {GPU}' that persists while GPUs sit idle "
        "is the plugin.",
        Action.FIX_CONFIG, Blame.UNKNOWN, _scope(sub), ev)
