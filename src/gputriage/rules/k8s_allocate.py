"""The kubelet's refusal of a pod's devices at admission (``UnexpectedAdmissionError``:
``Allocate failed due to ...``), judged by what it names.

The scheduler placed the pod on a node that, by its count, had free GPUs; the kubelet's
device manager then could not hand them over:

* the device plugin's ``GetPreferredAllocation`` / ``Allocate`` call failed inside NVML:
  ``GPU is lost`` (or the link information of every GPU, which the plugin's aligned
  allocation reads, could not be built) is a GPU that fell off the bus, and until the
  node is drained every GPU pod sent there is refused, the healthy GPUs' too;
* ``requested number of devices unavailable ... Available: 0``: the devices were taken
  between scheduling and admission, by a pod bound with ``nodeName`` (DaemonSets, the GPU
  operator's plugin validator) or one the kubelet admitted after a restart: a race of the
  cluster's set-up, not a fault of the GPUs;
* ``no healthy devices present``: the plugin marked the GPUs unhealthy (its log says why);
* ``maximum request size for shared resources``: the pod asks for several replicas of a
  time-shared GPU, which the plugin refuses.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from gputriage.model import Action, Blame, Finding, Scope, Severity, evidence, gpu_scope
from gputriage.parsers.k8s_model import Cluster, KEvent
from gputriage.rules.base import finding, rule
from gputriage.rules.k8s_common import object_scope

SOURCE = "cluster"
_ALLOCATE = re.compile(r"Allocate failed due to", re.IGNORECASE)
_UNAVAILABLE = re.compile(r"requested number of devices unavailable for (?P<res>\S+?)\.?\s+"
                          r"Requested: (?P<req>[0-9]+), Available: (?P<avail>[0-9]+)",
                          re.IGNORECASE)
_UNHEALTHY = re.compile(r"no healthy devices present|cannot allocate unhealthy devices "
                        r"(?P<res>\S+?)(?:,|$)|unable to allocate devices: \S{1,128} is "
                        r"unhealthy", re.IGNORECASE)
_SHARED = re.compile(r"maximum request size for shared resources is (?P<max>[0-9]+)", re.I)
_PLUGIN_RPC = re.compile(r"device plugin (?P<call>\w+) rpc failed|rpc error", re.IGNORECASE)
# NVML's own words at the end of the plugin's error chain
_NVML_REASON = re.compile(r"(?P<reason>GPU is lost|GPU requires reset|Unknown Error|Driver Not "
                          r"Loaded|Driver/library version mismatch|Insufficient Permissions|"
                          r"Not Supported|Timeout)", re.IGNORECASE)
_LINKS = re.compile(r"unable to get device link information|error getting NVLink for devices",
                    re.IGNORECASE)
_DEVICE = re.compile(r"nvml\.Device (?P<index>[0-9]{1,3})|"
                     r"for devices \((?P<pair>[0-9]{1,3}, ?[0-9]{1,3})\)")


@dataclass(frozen=True)
class _Refusal:
    """One kind of refusal: the events that say it and what it names."""

    kind: str  # gpu-lost | nvml | unavailable | unhealthy | shared | other
    events: list[KEvent]
    detail: str | None = None  # NVML's reason, the resource, the numbers

    @property
    def lines(self) -> list[str]:
        return list(dict.fromkeys(ln for e in self.events for ln in e.lines))

    @property
    def pods(self) -> list[str]:
        return list(dict.fromkeys(e.about for e in self.events if e.about
                                  and e.name not in ("...", "?")))


def _kind(message: str) -> tuple[str, str | None]:
    """What a refusal's message names: its kind and detail."""
    if m := _UNAVAILABLE.search(message):
        return "unavailable", f"{m['res']}: requested {m['req']}, available {m['avail']}"
    if m := _SHARED.search(message):
        return "shared", m["max"]
    if _UNHEALTHY.search(message):
        return "unhealthy", None
    reason = _NVML_REASON.search(message)
    if reason and reason["reason"].lower() == "gpu is lost":
        return "gpu-lost", reason["reason"]
    if _LINKS.search(message) and reason is None:
        return "gpu-lost", None  # the reason cut off: the links of a lost GPU, most often
    if reason or _PLUGIN_RPC.search(message):
        return "nvml", reason["reason"] if reason else None
    return "other", message.split("Allocate failed due to", 1)[-1].strip()[:120] or None


def refusals(cluster: Cluster) -> list[_Refusal]:
    """The kubelet's device refusals among the cluster's events, one per kind."""
    by_kind: dict[str, list[KEvent]] = {}
    details: dict[str, str | None] = {}
    for e in cluster.events:
        if e.reason != "UnexpectedAdmissionError" and not _ALLOCATE.search(e.message):
            continue
        kind, detail = _kind(e.message)
        by_kind.setdefault(kind, []).append(e)
        details.setdefault(kind, detail)
    return [_Refusal(k, events, details[k]) for k, events in by_kind.items()]


def _scope(r: _Refusal) -> Scope:
    m = next((m for e in r.events if (m := _DEVICE.search(e.message))), None)
    if m is not None and m["index"]:
        return gpu_scope(None, int(m["index"]))
    pods = r.pods
    return object_scope("Pod", pods[0]) if pods else Scope()


@rule("k8s.allocate", produces=("k8s.allocate-gpu-lost", "k8s.allocate-nvml-failed",
                                "k8s.allocate-devices-unavailable",
                                "k8s.allocate-unhealthy-devices", "k8s.allocate-shared-limit",
                                "k8s.allocate-failed"))
def allocate(cluster: Cluster) -> Iterator[Finding]:
    """The kubelet refused a pod's GPUs at admission: a GPU lost under the device plugin
    (the node's hardware), NVML failing in it, devices taken before the pod (a race of the
    cluster's set-up), devices the plugin marked unhealthy, or a request the sharing
    configuration refuses."""
    for r in refusals(cluster):
        yield _judge(r)


def _judge(r: _Refusal) -> Finding:
    ev = [evidence(SOURCE, r.lines, limit=12)]
    scope = _scope(r)
    if r.kind == "gpu-lost":
        said = ("NVML says a GPU is lost" if r.detail else
                "the plugin could not build the NVLink/PCIe link information of the node's "
                "GPUs, which fails when one of them is lost (the reason is cut off here)")
        return finding(
            "k8s.allocate-gpu-lost", Severity.CRITICAL,
            "the kubelet refuses GPU pods: a GPU of the node is lost under the device plugin",
            f"The device plugin's allocation failed because {said}: a GPU fell off the bus or "
            "stopped answering (Xid 79 in the node's kernel log; nvidia-smi shows it lost or "
            "ERR!). The plugin's aligned allocation reads every GPU's links, so every GPU pod "
            "sent to the node is refused (UnexpectedAdmissionError), the healthy GPUs' too. "
            "Drain the node, power-cycle it, and reseat or RMA the GPU if it comes back lost; "
            "confirm first with nvidia-smi and dmesg | grep -i xid on the node.",
            Action.DRAIN_AND_REPAIR, Blame.NODE, scope, ev)
    if r.kind == "nvml":
        why = f" ({r.detail})" if r.detail else ""
        return finding(
            "k8s.allocate-nvml-failed", Severity.WARNING,
            f"the kubelet refuses GPU pods: NVML fails in the device plugin's allocation{why}",
            "The device plugin could not answer the kubelet's allocation call because NVML "
            "failed on the node. Run nvidia-smi and gputriage check on the node: a GPU lost "
            "or in ERR! is hardware (drain it); NVML errors with healthy GPUs (a driver "
            "changed under the plugin) clear when the plugin's pod is restarted.",
            Action.FIX_CONFIG, Blame.UNKNOWN, scope, ev)
    if r.kind == "unavailable":
        return finding(
            "k8s.allocate-devices-unavailable", Severity.WARNING,
            f"the kubelet found the GPUs taken when it admitted the pod ({r.detail})",
            "The scheduler placed the pod on a node whose GPUs were then no longer free: "
            "another pod took them first. Pods bound with nodeName skip the scheduler and "
            "race with it: DaemonSets and the GPU operator's nvidia-device-plugin-validator "
            "(whose test pod needs a free GPU: with GPUs all in use set the validator's "
            "plugin env WITH_WORKLOAD=false in the ClusterPolicy), or pods admitted by a "
            "restarted kubelet. The GPUs are fine: delete the refused pod so that it is "
            "scheduled again, and keep GPU pods behind the scheduler.",
            Action.FIX_CONFIG, Blame.CONFIG, scope, ev)
    if r.kind == "unhealthy":
        return finding(
            "k8s.allocate-unhealthy-devices", Severity.WARNING,
            "the kubelet refuses GPU pods: the device plugin marked the GPUs unhealthy",
            "The plugin reported the GPUs the pod was given as unhealthy after the scheduler "
            "placed it. Its log says why (XidCriticalError, an NVML error): an Xid of the "
            "GPU is the node's, NVML errors after a driver change clear when the plugin's pod "
            "is restarted. Read the plugin's log and run gputriage check on the node.",
            Action.FIX_CONFIG, Blame.UNKNOWN, scope, ev)
    if r.kind == "shared":
        return finding(
            "k8s.allocate-shared-limit", Severity.WARNING,
            f"the pod asks for more than {r.detail} replica(s) of a shared GPU",
            "The device plugin time-shares these GPUs with failRequestsGreaterThanOne, so "
            f"a request above {r.detail} is refused at admission. Ask for 1 of the shared "
            "resource, or for a resource that is not shared. The node is fine.",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, scope, ev)
    return finding(
        "k8s.allocate-failed", Severity.WARNING,
        f"the kubelet refused the pod's devices at admission ({r.detail or 'no reason'})",
        "The kubelet's device manager could not give the pod the devices the scheduler "
        "counted for it. Read the device plugin's log on the node for the same time.",
        Action.FIX_CONFIG, Blame.UNKNOWN, scope, ev)
