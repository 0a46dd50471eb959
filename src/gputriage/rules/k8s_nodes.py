"""GPU nodes as the cluster sees them: what each advertises (``nvidia.com/gpu`` capacity
and allocatable) against what it has (GFD's ``gpu.count``, its pool's peers, the node's
own PCI bus when a snapshot of it is given too), driver drift across the pool, GPU node
conditions, and MIG resource names.

A node that should have GPUs and advertises none is the device plugin's side (config: the
plugin not running there, or unable to reach NVML), never kubectl and rarely the GPUs;
allocatable below capacity is devices the plugin marked unhealthy.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from gputriage.model import Action, Blame, Evidence, Finding, Scope, Severity, evidence
from gputriage.parsers.k8s_model import GPU, Cluster, KDaemonSet, KNode, quantity
from gputriage.rules.base import action_for, finding, rule
from gputriage.rules.k8s_common import object_scope

if TYPE_CHECKING:
    from gputriage.parsers.pci import PciFunction

LEGACY = "alpha.kubernetes.io/nvidia-gpu"
SOURCE = "cluster"
# labels that say a node is meant to have GPUs (a cloud's accelerator label, a GPU pool)
_GPU_LABELS = ("nvidia.com/gpu.present", "nvidia.com/gpu.count", "nvidia.com/gpu.product",
               "cloud.google.com/gke-accelerator", "k8s.amazonaws.com/accelerator",
               "kubernetes.azure.com/accelerator", "openshift.com/gpu-accelerator",
               "feature.node.kubernetes.io/pci-10de.present", "accelerator", "gpu")
_POOL_LABELS = ("cloud.google.com/gke-nodepool", "agentpool", "kubernetes.azure.com/agentpool",
                "eks.amazonaws.com/nodegroup", "node.kubernetes.io/instance-type",
                "beta.kubernetes.io/instance-type")
_GPU_WORD = re.compile(r"gpu|nvidia|a100|h100|h200|b200|l40|t4|v100|geforce|rtx", re.I)
_PLUGIN = re.compile(r"device-plugin|nvidia-gpu-device-plugin|hami-device", re.I)
# a node's finding, if any, and the group it joins: fine ("ok"), or at 0 beside peers ("zero")
_Verdict = tuple[Finding | None, Literal["ok", "zero"] | None]


def scope_of(node: KNode) -> Scope:
    return object_scope("Node", node.name)


def named(node: KNode) -> str:
    """``node NAME``, or ``the node`` when the paste does not name it."""
    return f"node {node.name}" if node.name and node.name != "?" else "the node"


def lines_of(node: KNode) -> list[str]:
    return node.lines or [f"node/{node.name}"]


def meant_for_gpus(node: KNode) -> str | None:
    """Why ``node`` should have GPUs (a label, a GPU resource in capacity); None when
    nothing it shows says so."""
    cap = node.capacity or {}
    if any(k == LEGACY for k in cap):
        return f"its capacity lists {LEGACY}"
    if GPU in cap:
        return f"its capacity lists {GPU}"
    for key in _GPU_LABELS:
        value = node.labels.get(key)
        if value is not None and value.lower() not in ("false", "no", "off", "none", "0"):
            return f"label {key}={value}"
    for key in _POOL_LABELS:
        value = node.labels.get(key, "")
        if _GPU_WORD.search(value):
            return f"label {key}={value} (a GPU pool)"
    return None


def _whole(table: dict[str, float] | None) -> float | None:
    return None if table is None else table.get(GPU)


def _plugin_state(cluster: Cluster, node: KNode) -> tuple[str, list[Evidence]]:
    """What the paste shows of the device plugin for ``node``, or which outputs would
    tell when it shows nothing."""
    said: list[str] = []
    ev: list[Evidence] = []
    pods = [p for p in cluster.pods if _PLUGIN.search(p.name)
            and (p.node in (None, node.name))]
    for p in pods[:2]:
        said.append(f"the plugin pod {p.namespace}/{p.name} is {p.status or p.phase or '?'}")
        ev.append(evidence(SOURCE, p.lines, limit=6))
    for ds in (d for d in cluster.daemonsets if _PLUGIN.search(d.name)):
        problem = _daemonset_problem(ds, node)
        if problem is not None:
            said.append(problem)
        ev.append(evidence(SOURCE, ds.lines, limit=4))
    if said:
        return "; ".join(said) + ".", ev
    return _no_plugin_hint(node), ev


def _daemonset_problem(ds: KDaemonSet, node: KNode) -> str | None:
    """Why the plugin's DaemonSet ``ds`` has no ready pod for ``node``; None when the paste
    shows no reason."""
    blocked = [t for t in node.taints or () if t.effect in ("NoSchedule", "NoExecute")
               and ds.tolerations is not None
               and not any(tol.tolerates(t) for tol in ds.tolerations)]
    if blocked:
        return (f"the DaemonSet {ds.namespace}/{ds.name} does not tolerate the "
                f"node's taint {blocked[0]}, so its pod never runs there")
    if ds.ready is not None and ds.desired is not None and ds.ready < ds.desired:
        return (f"the DaemonSet {ds.namespace}/{ds.name} has {ds.ready} of "
                f"{ds.desired} pods ready")
    return None


def _no_plugin_hint(node: KNode) -> str:
    """Which outputs would tell about the device plugin of ``node`` when the paste shows
    none of it, with the runtime's and the cloud's usual cause."""
    hint = ("The paste shows no device plugin pod: kubectl get pods -A -o wide | grep "
            f"device-plugin (is one running on {named(node).removeprefix('node ')}?), "
            "kubectl logs of that pod (NVML errors, 'Registered device plugin' or not) and "
            "kubectl describe of the plugin's DaemonSet (tolerations, node selector) would "
            "tell which.")
    runtime = node.runtime_version or ""
    if runtime.startswith("docker://"):
        hint += (" With Docker the plugin finds NVML only when Docker's default runtime is "
                 "nvidia (\"default-runtime\": \"nvidia\" in /etc/docker/daemon.json).")
    if any(k.startswith("cloud.google.com/") for k in node.labels) or \
            "attachable-volumes-gce-pd" in (node.capacity or {}):
        hint += (" On GKE the driver comes from the nvidia-driver-installer DaemonSet (or "
                 "GKE's managed driver installation): without it the node has no driver "
                 "and advertises no GPU.")
    return hint


def _not_advertised(cluster: Cluster, node: KNode, why: str | None, severity: Severity,
                    peers: str = "") -> Finding:
    state, ev = _plugin_state(cluster, node)
    legacy = LEGACY in (node.capacity or {}) or LEGACY in (node.allocatable or {})
    if legacy:
        title = (f"{named(node)} advertises the legacy {LEGACY} and no {GPU}: the NVIDIA "
                 "device plugin does not run there")
        explanation = (f"{LEGACY} is the kubelet's old accelerator feature, not the device "
                       f"plugin: pods asking for {GPU} find no node. The plugin's DaemonSet "
                       "has no pod on this node, typically because the node is tainted "
                       f"{GPU}:NoSchedule and the DaemonSet lacks the toleration (key "
                       f"{GPU}, operator Exists, effect NoSchedule): add it to the "
                       f"DaemonSet. {state}")
    elif why is None:  # a lone node pasted: asked about, nothing it shows says GPU
        title = (f"{named(node)} advertises no {GPU}: if it has GPUs, the device plugin "
                 "does not offer them")
        explanation = (f"Its capacity and allocatable hold no {GPU} (nor any NVIDIA "
                       "resource), and nothing the paste shows says whether it has GPUs. If "
                       "it has, the device plugin is not advertising them (not running there, "
                       "or unable to reach NVML through the container runtime): not kubectl, "
                       f"rarely the hardware; nvidia-smi on the node tells. {state}")
    else:
        title = f"{named(node)} should have GPUs but advertises no {GPU}{peers}"
        explanation = (f"The node is meant for GPUs ({why}) but its capacity and allocatable "
                       f"hold no {GPU}: the device plugin is not advertising them there (not "
                       "running, or unable to reach NVML through the container runtime), "
                       f"not kubectl and rarely the hardware. {state}")
    return finding("k8s.gpus-not-advertised", severity, title, explanation,
                   action_for(severity, Action.FIX_CONFIG), Blame.CONFIG, scope_of(node),
                   [evidence(SOURCE, lines_of(node), limit=12), *ev])


def _physical(node: KNode, host_name: str | None,
              pci_gpus: list[PciFunction] | None) -> int | None:
    """The GPUs on the node's PCI bus, when this snapshot is of that node."""
    if pci_gpus and host_name and host_name.split(".")[0] == node.name.split(".")[0]:
        return len(pci_gpus)
    return None


@rule("k8s.gpu-nodes", produces=("k8s.gpus-not-advertised", "k8s.gpus-short",
                                  "k8s.gpus-advertised"))
def gpu_nodes(cluster: Cluster, host_name: str | None = None,
              pci_gpus: list[PciFunction] | None = None) -> Iterator[Finding]:
    """Per node: nvidia.com/gpu capacity and allocatable against GFD's gpu.count, the
    pool's peers and the node's own PCI bus; a GPU node that advertises none, one whose
    allocatable is short (devices marked unhealthy), and the nodes that are fine."""
    shown = [n for n in cluster.nodes.values() if n.allocatable is not None
             or n.capacity is not None]
    peers_with = [n for n in shown if (_whole(n.gpus("allocatable")) or 0) > 0]
    ok: list[KNode] = []
    at_zero: list[KNode] = []  # listed at 0 beside peers that advertise GPUs
    lone_paste = _lone_paste(cluster)
    for node in cluster.nodes.values():
        found, group = _judge_node(cluster, node, _physical(node, host_name, pci_gpus),
                                   bool(peers_with), lone_paste)
        if found is not None:
            yield found
        if group == "ok":
            ok.append(node)
        elif group == "zero":
            at_zero.append(node)
    if at_zero:
        yield _pool_at_zero(cluster, at_zero, peers_with, shown)
    if ok:
        yield _advertised(ok)


def _lone_paste(cluster: Cluster) -> bool:
    """A node or two pasted with no GPU node beside them: asked about, so meant for GPUs."""
    return len(cluster.nodes) <= 3 and cluster.origin == "paste" and \
        not any(meant_for_gpus(n) for n in cluster.nodes.values())


def _judge_node(cluster: Cluster, node: KNode, physical: int | None, peers_with: bool,
                lone_paste: bool) -> _Verdict:
    """One node's finding, if any, and the group it joins ("ok", "zero" or None)."""
    cap, alloc = node.gpus("capacity"), node.gpus("allocatable")
    if cap is None and alloc is None:
        if _hami_waiting(node):
            return _hami(node), None
        return None, "ok" if node.gpu_label_count else None
    total = sum((cap or {}).values()) or sum((alloc or {}).values())
    if total == 0:
        return _judge_zero(cluster, node, physical, peers_with, lone_paste)
    short = _short(node, cap, alloc, physical)
    if short is not None:
        return short, None
    return None, "ok" if (alloc or {}) else None


def _judge_zero(cluster: Cluster, node: KNode, physical: int | None, peers_with: bool,
                lone_paste: bool) -> _Verdict:
    """A node whose capacity and allocatable list no GPU: its finding, or the pool's
    nodes at zero it joins ("zero")."""
    why = meant_for_gpus(node)
    if why or physical:
        return _not_advertised(cluster, node, why or f"{physical} GPUs on its PCI bus",
                               Severity.CRITICAL), None
    if GPU in (node.allocatable or node.capacity or {}) and peers_with:
        return None, "zero"
    if not peers_with and lone_paste:
        return _not_advertised(cluster, node, None, Severity.WARNING), None
    return None, None


def _pool_at_zero(cluster: Cluster, zero: list[KNode], peers: list[KNode],
                  shown: list[KNode]) -> Finding:
    """One finding for the nodes of a list that advertise 0 GPUs where their peers
    advertise some: one cause (their plugin or runtime), however many nodes."""
    names = ", ".join(n.name for n in zero[:8]) + (" ..." if len(zero) > 8 else "")
    state, ev = _plugin_state(cluster, zero[0])
    peer = max((_whole(n.gpus("allocatable")) or 0) for n in peers)
    return finding(
        "k8s.gpus-not-advertised", Severity.CRITICAL,
        f"{len(zero)} of {len(shown)} nodes advertise no GPU where their peers advertise "
        f"{peer:g}: {names}",
        f"The nodes of one pool should advertise the same GPUs; {len(peers)} do, "
        f"{len(zero)} show {GPU} 0. Not kubectl and rarely the hardware: on those nodes the "
        "device plugin is not registering GPUs (its pod not running there, or the node's "
        "container runtime not set to nvidia so that the plugin finds no NVML). Compare the "
        "runtime configuration and the plugin pods of a failing node with a working one. "
        f"{state}", Action.FIX_CONFIG, Blame.CONFIG, scope_of(zero[0]),
        [evidence(SOURCE, [ln for n in shown for ln in lines_of(n)[:3]], limit=24), *ev])


def _hami_waiting(node: KNode) -> str | None:
    shake = node.annotations.get("hami.io/node-handshake", "")
    return shake if shake.startswith("Requesting") else None


def _hami(node: KNode) -> Finding:
    shake = _hami_waiting(node) or ""
    since = shake.partition("_")[2] or "?"
    lines = [ln for ln in lines_of(node) if "hami.io/" in ln] or \
        [f"hami.io/node-handshake: {shake}"]
    return finding(
        "k8s.gpus-not-advertised", Severity.WARNING,
        f"{named(node)}: HAMi's scheduler has been waiting for its device plugin since {since}",
        "HAMi's scheduler writes 'Requesting_<time>' into hami.io/node-handshake and the "
        "HAMi device plugin on the node answers with 'Reported_<time>'; still Requesting, "
        "the plugin there is not answering (not running, or failing), so the node's GPUs "
        "(listed in hami.io/node-nvidia-register) are not offered and nvidia.com/gpu stays "
        "0. kubectl logs of the hami-device-plugin pod on the node, and its describe, tell "
        "why; the paste does not show capacity or allocatable.", Action.FIX_CONFIG,
        Blame.CONFIG, scope_of(node), [evidence(SOURCE, lines, limit=8)])


def _short(node: KNode, cap: dict[str, float] | None, alloc: dict[str, float] | None,
           physical: int | None) -> Finding | None:
    c, a = _whole(cap), _whole(alloc)
    label = node.gpu_label_count
    plain = node.labels.get("nvidia.com/mig.strategy") in (None, "none", "single") and \
        node.labels.get("nvidia.com/gpu.replicas", "1") == "1"
    have, against = None, ""
    if c is not None and a is not None and a < c:
        have, against = c, f"capacity {c:g}"
    elif a is not None and label is not None and plain and a < label:
        have, against = label, f"GFD's nvidia.com/gpu.count {label}"
    elif a is not None and physical is not None and plain and a < physical:
        have, against = physical, f"{physical} GPUs on the node's PCI bus"
    if have is None or a is None:
        return None
    severity = Severity.CRITICAL if a == 0 else Severity.WARNING
    title = (f"{named(node)} offers {a:g} of its {have:g} GPUs: {have - a:g} "
             f"{'is' if have - a == 1 else 'are'} not allocatable")
    explanation = (f"Allocatable {GPU} is {a:g} against {against}: the device plugin marked "
                   f"{'every' if a == 0 else 'some'} device unhealthy (an Xid it counts as "
                   "critical, or NVML errors after a driver change), and the kubelet stops "
                   "offering it; capacity keeps counting it. The plugin's log names the Xid "
                   "and the GPU (XidCriticalError ... marking device as unhealthy). An "
                   "unhealthy device is not re-checked by older plugins: once the cause is "
                   "fixed, restart the plugin's pod on the node.")
    return finding("k8s.gpus-short", severity, title, explanation,
                   Action.FIX_CONFIG, Blame.CONFIG, scope_of(node),
                   [evidence(SOURCE, lines_of(node), limit=12)])


def _advertised(nodes: list[KNode]) -> Finding:
    parts = []
    for n in nodes[:6]:
        alloc = n.gpus("allocatable") or {}
        what = ", ".join(f"{k} {v:g}" for k, v in sorted(alloc.items())) or \
            f"GFD gpu.count {n.gpu_label_count} (capacity not shown)"
        parts.append(f"{n.name}: {what}")
    more = f" and {len(nodes) - 6} more" if len(nodes) > 6 else ""
    title = (f"{len(nodes)} GPU nodes advertise what they have" if len(nodes) > 1 else
             f"{named(nodes[0])} advertises what it has")
    lines = [ln for n in nodes[:6] for ln in lines_of(n)[:6]]
    return finding("k8s.gpus-advertised", Severity.OK, title,
                   "; ".join(parts) + more + ".", Action.NONE, Blame.UNKNOWN,
                   scope_of(nodes[0]), [evidence(SOURCE, lines, limit=24)])


def node_gpus_free(node: KNode) -> float | None:
    """Allocatable nvidia.com/gpu less what running pods hold (describe's Allocated
    resources); None when either is not shown."""
    a = _whole(node.gpus("allocatable"))
    if a is None or node.allocated is None:
        return None
    used = quantity(node.allocated.get(GPU, ("0", "0"))[0])
    return None if used is None else a - used
