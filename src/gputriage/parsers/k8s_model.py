"""What gputriage knows of a Kubernetes cluster, whatever it was read from.

One :class:`Cluster` holds the objects that matter to GPU triage: nodes, pods, events,
DaemonSets, and every other object as a :class:`KObject` (the raw mapping, for the lint
rules and the policies: ResourceQuota, PriorityClass, PodDisruptionBudget, HPA, Kueue,
Volcano, JobSet, ConfigMaps, workloads). The same model is filled from the API's JSON
(the live client, ``kubectl get -o json|yaml``, manifests), from ``kubectl describe``
text and from ``kubectl get`` tables; a paste fills only what it shows, so every field
that a form may lack is optional (``None``: not shown, distinct from empty).

Each object keeps ``lines``: the text it was read from (a paste's lines), or a short
rendering of the fields that matter (API objects), so that findings quote evidence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from gputriage.text.fields import as_float, strict_float, strict_int

__all__ = ["GPU", "UNNAMED", "Cluster", "KContainer", "KDaemonSet", "KEvent", "KNode", "KObject",
           "KPod", "QUANTITY_MAX", "Taint", "Toleration", "gpu_resources", "quantity", "ref"]

T = TypeVar("T")
GPU = "nvidia.com/gpu"
UNNAMED = "?"  # the name of a node read from an excerpt or a fragment that does not name it
_GPU_RESOURCE = re.compile(r"^nvidia\.com/(?:gpu(?:\.shared)?|mig-[0-9]+g\.[0-9]+gb(?:\.shared)?)$")
# Kubernetes' quantity grammar (kubernetes.io, API reference "Quantity"): a signed decimal
# number of ASCII digits, then a binary-SI suffix, a decimal-SI suffix or an exponent; no
# quantity is more than 2^63-1 in magnitude.
_QUANTITY = re.compile(r"(?P<num>[+-]?(?:[0-9]{1,40}(?:\.[0-9]{0,40})?|\.[0-9]{1,40}))"
                       r"(?:(?P<unit>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)|[eE](?P<exp>[+-]?[0-9]{1,4}))?")
_UNITS = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
          "Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40, "Pi": 2.0 ** 50,
          "Ei": 2.0 ** 60}
QUANTITY_MAX = 2 ** 63 - 1


def quantity(raw: Any) -> float | None:
    """A Kubernetes quantity (``8``, ``500m``, ``16Gi``, ``1e3``, or a JSON number) as a
    number; None when it is not one (``1e400``, ``²``, ``nan``) or is beyond the 2^63-1
    that Kubernetes allows."""
    if isinstance(raw, str):
        if len(raw) <= 18 and raw.isascii() and raw.isdigit():  # a count: the usual form
            return float(raw)
        m = _QUANTITY.fullmatch(raw.strip())
        if m is None:
            return None
        text = m.group("num") + (f"e{m.group('exp')}" if m.group("exp") else "")
        mantissa = strict_float(text)  # "1e400" is inf: refused here
        value = None if mantissa is None else mantissa * _UNITS[m.group("unit") or ""]
    else:
        value = as_float(raw)
    return value if value is not None and abs(value) <= QUANTITY_MAX else None


def gpu_resources(resources: Mapping[str, Any]) -> dict[str, float]:
    """The NVIDIA GPU resources of a capacity, allocatable, request or limit map
    (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, ``nvidia.com/mig-1g.10gb``...)."""
    found = {}
    for name, raw in resources.items():
        if name.startswith("nvidia.com/") and _GPU_RESOURCE.match(name):
            value = quantity(raw)
            if value is not None:
                found[name] = value
    return found


def ref(kind: str, name: str, namespace: str | None = None) -> str:
    """``kind/namespace/name`` (``kind/name`` for a cluster-scoped object)."""
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str | None
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else \
            f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class Toleration:
    key: str | None  # None with operator Exists: tolerates every taint
    operator: str = "Equal"  # Equal | Exists
    value: str | None = None
    effect: str | None = None  # None: every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key is None:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or (self.value or "") == (taint.value or "")


@dataclass
class KObject:
    """Any object: its kind, name, namespace and raw mapping (empty when the object
    was read from text that gives no mapping)."""

    kind: str
    name: str
    namespace: str | None = None
    api_version: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    origin: str | None = None  # where it was read: a file and document number, a paste
    lines: list[str] = field(default_factory=list)

    @property
    def ref(self) -> str:
        return ref(self.kind, self.name, self.namespace)

    @property
    def labels(self) -> dict[str, str]:
        meta = self.raw.get("metadata")
        labels = meta.get("labels") if isinstance(meta, dict) else None
        return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


@dataclass(slots=True)
class KNode:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] | None = None  # None: not shown
    capacity: dict[str, str] | None = None  # None: not shown
    allocatable: dict[str, str] | None = None
    allocated: dict[str, tuple[str, str]] | None = None  # resource -> (requests, limits)
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    # type -> (status, reason, message)
    unschedulable: bool | None = None
    ready: bool | None = None
    kubelet_version: str | None = None
    runtime_version: str | None = None  # containerd://1.7.2
    os_image: str | None = None
    kernel: str | None = None
    lines: list[str] = field(default_factory=list)

    def gpus(self, which: str = "allocatable") -> dict[str, float] | None:
        """The GPU resources of ``capacity`` or ``allocatable``; None when not shown, or
        when a GPU resource there is not a quantity (the count is unknown)."""
        table = self.capacity if which == "capacity" else self.allocatable
        if table is None or any(_GPU_RESOURCE.match(name) and quantity(value) is None
                                for name, value in table.items()):
            return None
        return gpu_resources(table)

    def unreadable_fields(self) -> list[str]:
        """The GPU resources of capacity and allocatable whose value is not a quantity."""
        return [f"{which} {name}: not a number: {str(value)[:40]!r}"
                for which, table in (("capacity", self.capacity),
                                     ("allocatable", self.allocatable))
                for name, value in (table or {}).items()
                if _GPU_RESOURCE.match(name) and quantity(value) is None]

    @property
    def gpu_label_count(self) -> int | None:
        """GFD's ``nvidia.com/gpu.count`` label."""
        return strict_int(self.labels.get("nvidia.com/gpu.count"), lo=0, hi=QUANTITY_MAX)


@dataclass(slots=True)
class KContainer:
    name: str
    image: str | None = None
    init: bool = False
    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    ready: bool | None = None
    restarts: int | None = None
    state: str | None = None  # running | waiting | terminated
    reason: str | None = None  # CrashLoopBackOff, Error, ContainerCreating...
    message: str | None = None
    exit_code: int | None = None


@dataclass(slots=True)
class KPod:
    name: str
    namespace: str | None = None
    phase: str | None = None  # Pending | Running | Succeeded | Failed | Unknown
    status: str | None = None  # what kubectl prints: Init:CrashLoopBackOff, Running...
    node: str | None = None
    containers: list[KContainer] = field(default_factory=list)
    tolerations: list[Toleration] | None = None
    node_selector: dict[str, str] | None = None
    affinity: dict[str, Any] | None = None
    priority_class: str | None = None
    priority: int | None = None
    scheduler: str | None = None
    runtime_class: str | None = None
    owner: str | None = None  # kind/name of the controller
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    restarts: int | None = None
    lines: list[str] = field(default_factory=list)
    ready: str | None = None  # kubectl get's READY column: "0/2" (containers ready / all)

    @property
    def ref(self) -> str:
        return ref("Pod", self.name, self.namespace)

    @property
    def unready(self) -> bool:
        """Whether kubectl's READY column counts fewer ready containers than the pod has."""
        done, _, of = (self.ready or "").partition("/")
        ready, containers = strict_int(done, signed=False), strict_int(of, signed=False)
        return ready is not None and containers is not None and ready < containers

    def gpu_requests(self) -> dict[str, float]:
        """GPU resources the pod asks for: the sum over its app containers (limits
        stand for requests, as the API defaults them), the largest init container's
        when that is more."""
        total: dict[str, float] = {}
        init: dict[str, float] = {}
        for c in self.containers:
            asked = gpu_resources({**c.limits, **c.requests})
            for name, value in asked.items():
                if c.init:
                    init[name] = max(init.get(name, 0.0), value)
                else:
                    total[name] = total.get(name, 0.0) + value
        return {n: max(total.get(n, 0.0), init.get(n, 0.0)) for n in {*total, *init}}


@dataclass(slots=True)
class KEvent:
    reason: str
    message: str
    type: str | None = None  # Normal | Warning
    kind: str | None = None  # of the object it is about
    name: str | None = None
    namespace: str | None = None
    count: int | None = None
    source: str | None = None  # default-scheduler, kubelet, cluster-autoscaler...
    age: str | None = None  # as printed (kubectl describe: "3m (x5 over 10m)")
    time: str | None = None  # lastTimestamp / eventTime when given
    line: str = ""
    continued: list[str] = field(default_factory=list)  # lines a wrapped message went on to

    @property
    def lines(self) -> list[str]:
        """The lines the event was read from (its own and those its message wrapped to)."""
        return [ln for ln in (self.line, *self.continued) if ln] or [self.message]

    @property
    def about(self) -> str | None:
        return ref(self.kind, self.name, self.namespace) if self.kind and self.name else None


@dataclass
class KDaemonSet:
    name: str
    namespace: str | None = None
    desired: int | None = None
    current: int | None = None
    ready: int | None = None
    available: int | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    images: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def ref(self) -> str:
        return ref("DaemonSet", self.name, self.namespace)


@dataclass
class Cluster:
    """Nodes by name, pods, events, DaemonSets, every object, and what could not be read
    (``errors``: kind -> why, e.g. ``forbidden`` from a live cluster's RBAC)."""

    nodes: dict[str, KNode] = field(default_factory=dict)
    pods: list[KPod] = field(default_factory=list)
    events: list[KEvent] = field(default_factory=list)
    daemonsets: list[KDaemonSet] = field(default_factory=list)
    objects: list[KObject] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    origin: str = "paste"  # paste | api | manifest
    _derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def derived(self, key: str, build: Callable[[Cluster], T]) -> T:
        """A view of the cluster that several rules read (built once per analysis: a
        large cluster's pods are walked once, not once per rule)."""
        if key not in self._derived:
            self._derived[key] = build(self)
        return cast(T, self._derived[key])

    def of_kind(self, *kinds: str) -> list[KObject]:
        """The objects of some kinds (as the API names them: ``ResourceQuota``...)."""
        return [o for o in self.objects if o.kind in kinds]

    def events_about(self, kind: str, name: str, namespace: str | None = None) -> list[KEvent]:
        return [e for e in self.events if e.kind == kind and e.name == name
                and (namespace is None or e.namespace in (None, namespace))]

    def unreadable_fields(self) -> list[str]:
        """What the objects hold that is not readable (a node's GPU count that is not a
        number), one line each, for the report's "could not read"."""
        return [f"node {node.name}: {what}" for node in self.nodes.values()
                for what in node.unreadable_fields()]

    def gpu_nodes(self) -> Iterator[KNode]:
        """Nodes that have, or should have, GPUs: a GPU resource in capacity, a GFD or
        operator label, or NFD's NVIDIA PCI label."""
        for node in self.nodes.values():
            if node.gpus("capacity") or any(k.startswith(("nvidia.com/gpu", "nvidia.com/cuda"))
                                            for k in node.labels) \
                    or node.labels.get("feature.node.kubernetes.io/pci-10de.present") == "true":
                yield node

    def merge(self, other: Cluster) -> None:
        """Add ``other``'s objects; a node seen twice keeps the fields each form gave."""
        for name, node in other.nodes.items():
            mine = self.nodes.get(name)
            self.nodes[name] = node if mine is None else _merge_node(mine, node)
        named = [n for n in self.nodes if n != UNNAMED]
        if UNNAMED in self.nodes and len(named) == 1:  # an excerpt of the one node named
            unnamed = self.nodes.pop(UNNAMED)
            self.nodes[named[0]] = _merge_node(self.nodes[named[0]], unnamed)
        self.pods.extend(other.pods)
        self.events.extend(other.events)
        self.daemonsets.extend(other.daemonsets)
        self.objects.extend(other.objects)
        self.errors.update(other.errors)
        self._derived.clear()

    def __bool__(self) -> bool:
        return bool(self.nodes or self.pods or self.events or self.daemonsets or self.objects)


def _merge_node(a: KNode, b: KNode) -> KNode:
    for name in ("taints", "capacity", "allocatable", "allocated", "unschedulable", "ready",
                 "kubelet_version", "runtime_version", "os_image", "kernel"):
        if getattr(a, name) is None:
            setattr(a, name, getattr(b, name))
    a.labels = {**b.labels, **a.labels}
    a.annotations = {**b.annotations, **a.annotations}
    a.conditions = {**b.conditions, **a.conditions}
    a.lines += [ln for ln in b.lines if ln not in a.lines]
    return a
