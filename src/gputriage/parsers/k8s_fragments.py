"""What :func:`gputriage.parsers.k8s_objects.parse_k8s_objects` makes of a paste that is
not one clean JSON or YAML text: several objects pasted one after the other, pieces of
objects (fragments) and objects cut short.

A paste is split into blocks (a JSON value each; a YAML block ends where its indentation
falls below its first line's, or where a second ``apiVersion:``/``kind:`` starts at the
left margin). A block that gives an object with a kind is read as the API gives it. A
block without a kind is a fragment, and its kind is told by its keys (``spec:`` and
``status:`` around it are opened first):

* a **Node** (named ``?``) when it has a node's conditions (with ``lastHeartbeatTime``,
  or of a node's types: Ready, MemoryPressure...), ``capacity`` / ``allocatable`` /
  ``nodeInfo``, or GFD labels (``nvidia.com/gpu.*`` keys, bare or under ``labels:``); a
  flat mapping of labels alone keeps them all and takes the node's name from
  ``kubernetes.io/hostname``; one of resources alone (cpu, memory, pods) is its capacity;
* a **PodGroup** (Volcano, scheduling.k8s.io) when it has ``minMember``, or a status of
  ``running`` / ``phase`` with gang conditions (``transitionID``, ``NotEnoughResources``,
  type ``Unschedulable``): its mapping under ``status`` (or ``spec``);
* a Volcano **Job** (``batch.volcano.sh/v1alpha1``) when its spec has ``minAvailable``
  with ``queue``, ``tasks``, ``policies`` or ``schedulerName``;
* a **Pod** when it has ``containers``;
* otherwise a :class:`KObject` of kind ``Fragment`` with the raw mapping.

Every object from a fragment is named ``?`` and keeps its pasted lines as evidence; a
node read from a fragment shows no taints and no schedulability (``None``), since the
fragment does not say.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable
from typing import Any

from gputriage.parsers.k8s_model import Cluster, KObject
from gputriage.text.fields import split_lines

__all__ = ["FRAGMENT_KEYS", "fragment_cluster", "is_bare_node_map", "is_fragment",
           "split_blocks"]

# keys that make an indented YAML block a piece of a Kubernetes object (two are needed)
FRAGMENT_KEYS = frozenset({
    "lastTransitionTime", "lastHeartbeatTime", "lastProbeTime", "transitionID",
    "minAvailable", "minMember", "minResources", "queue", "schedulerName",
    "priorityClassName", "nodeSelector", "tolerations", "allocatable", "capacity",
    "nodeInfo", "kubeletVersion", "containerRuntimeVersion", "taints", "nvidia.com/gpu",
    "nvidia.com/gpu.count", "nvidia.com/gpu.product", "nvidia.com/gpu.present",
    "nvidia.com/cuda.driver-version.full", "nvidia.com/mig.strategy", "restartPolicy",
    "imagePullPolicy", "containerStatuses", "nodeName", "serviceAccountName", "maxRetry",
    "running", "tasks", "policies", "podIP", "hostIP", "ownerReferences"})

_NODE_CONDITIONS = {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure",
                    "NetworkUnavailable"}
_MARGIN_START = re.compile(r"^(apiVersion|kind):")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def split_blocks(text: str) -> list[list[str]]:
    """The blocks of a paste: JSON values, and YAML blocks cut where the indentation
    falls below the block's first line or a second object starts at the margin."""
    blocks: list[list[str]] = []
    lines = split_lines(text)
    i = 0
    while i < len(lines):
        if not lines[i].strip() or lines[i].strip() in ("---", "..."):
            i += 1
            continue
        if lines[i].lstrip().startswith(("{", "[")):
            rest = "\n".join(lines[i:])
            try:
                _, n = json.JSONDecoder().raw_decode(rest.lstrip())
                used = rest[:len(rest) - len(rest.lstrip()) + n].count("\n") + 1
                blocks.append(lines[i:i + used])
                i += used
                continue
            except (ValueError, RecursionError):
                pass
        base, seen, block = _indent(lines[i]), set(), [lines[i]]
        m = _MARGIN_START.match(lines[i])
        if m:
            seen.add(m.group(1))
        j = i + 1
        while j < len(lines):
            ln = lines[j]
            if ln.strip() in ("---", "..."):
                break
            if ln.strip():
                if _indent(ln) < base:
                    break
                m = _MARGIN_START.match(ln)
                if m and m.group(1) in seen:
                    break
                if m:
                    seen.add(m.group(1))
            block.append(ln)
            j += 1
        blocks.append(block)
        i = j
    return blocks


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _conditions(body: dict[str, Any]) -> list[dict[str, Any]]:
    raw = body.get("conditions")
    return [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []


def _is_node(body: dict[str, Any], labels: dict[str, Any]) -> bool:
    if {"capacity", "allocatable", "nodeInfo"} & set(body):
        return True
    if any(str(k).startswith(("nvidia.com/gpu", "nvidia.com/cuda", "nvidia.com/mig"))
           for k in labels):
        return True
    conds = _conditions(body)
    return any("lastHeartbeatTime" in c or c.get("type") in _NODE_CONDITIONS for c in conds)


_RESOURCE_KEYS = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


def _scalars(body: dict[str, Any]) -> bool:
    return bool(body) and all(isinstance(v, (str, int, float)) for v in body.values())


def _is_resources(body: dict[str, Any]) -> bool:
    """A node's capacity or allocatable alone (``jq .status.capacity``)."""
    return _scalars(body) and len(set(body) & _RESOURCE_KEYS) >= 2


_GFD_NFD = ("nvidia.com/", "feature.node.kubernetes.io/")  # the GPU labels' prefixes


def _is_label_map(body: dict[str, Any]) -> bool:
    """A node's labels alone (``jq .metadata.labels``): every key a label, one of GFD or
    NFD among them."""
    keys = [str(k) for k in body]
    return _scalars(body) and all("/" in k or k.startswith("kubernetes.io") for k in keys) \
        and any(k.startswith(_GFD_NFD) for k in keys)


def is_bare_node_map(value: Any) -> bool:
    """A flat JSON mapping of a node's resources (cpu, memory, pods) or of labels with a
    GFD or NFD one among them (``kubectl get node -o json | jq .status.capacity``,
    ``.metadata.labels``), without a kind: the paste detector claims it, and it is read
    as a Node."""
    return isinstance(value, dict) and (_is_resources(value) or (
        _scalars(value) and any(str(k).startswith(_GFD_NFD) for k in value)))


def _is_podgroup(body: dict[str, Any]) -> bool:
    if "minMember" in body:
        return True
    conds = _conditions(body)
    gang = any("transitionID" in c or c.get("reason") == "NotEnoughResources"
               or c.get("type") == "Unschedulable" for c in conds)
    return gang and ("running" in body or "phase" in body or "minAvailable" in body)


def _kind_of(value: Any) -> tuple[str, dict[str, Any]]:
    """The kind of a fragment and the object made of it."""
    if isinstance(value, list):
        value = {"conditions": value} if any(isinstance(c, dict) and "type" in c
                                             for c in value) else {"items": value}
    body = _d(value)
    section = "status"
    for key in ("status", "spec"):
        if set(body) == {key} or (key in body and isinstance(body[key], dict)
                                  and not {"kind", "apiVersion"} & set(body)):
            section, body = key, {**_d(body[key]), **{k: v for k, v in body.items() if k != key}}
            break
    meta = _d(body.get("metadata"))
    if _is_resources(body):
        return "Node", {"kind": "Node", "metadata": {"name": "?"}, "status": {"capacity": body}}
    flat = _is_label_map(body)
    labels = _d(body.get("labels")) or _d(meta.get("labels")) or (
        {str(k): str(v) for k, v in body.items()} if flat else
        {k: v for k, v in body.items() if isinstance(k, str) and k.startswith("nvidia.com/")})
    host = labels.get("kubernetes.io/hostname")
    named = {"name": str(host) if host else "?", **({"labels": labels} if labels else {})}
    if flat:
        return "Node", {"kind": "Node", "metadata": named, "status": {}}
    if _is_node(body, labels):
        return "Node", {"kind": "Node", "metadata": named, "status": body}
    if _is_podgroup(body):
        return "PodGroup", {"kind": "PodGroup", "metadata": named, section: body}
    if "minAvailable" in body and {"queue", "tasks", "policies", "schedulerName"} & set(body):
        return "Job", {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                       "metadata": named, "spec": body}
    if "containers" in body:
        return "Pod", {"kind": "Pod", "metadata": named, "spec": body}
    return "Fragment", {"kind": "Fragment", "metadata": named, section: body}


def _keys(value: Any, depth: int = 0) -> set[str]:
    if depth > 6:
        return set()
    if isinstance(value, list):
        return set().union(*(_keys(v, depth + 1) for v in value[:50]))
    if isinstance(value, dict):
        return {str(k) for k in value} | set().union(
            *(_keys(v, depth + 1) for v in list(value.values())[:200]))
    return set()


def is_fragment(value: Any) -> bool:
    """Whether a mapping or list without a kind is a piece of a Kubernetes object: one of
    :data:`FRAGMENT_KEYS`, a condition list, a ``containers`` list, GFD labels."""
    keys = _keys(value)
    return bool(keys & FRAGMENT_KEYS or "containers" in keys
                or ({"type", "status"} <= keys and "conditions" in keys)
                or any(k.startswith("nvidia.com/") for k in keys))


def fragment_cluster(value: Any, lines: list[str], origin: str,
                     cluster_from_api: Callable[..., Cluster]) -> Cluster:
    """The object a fragment stands for (see the module's docstring), made into a
    cluster by ``cluster_from_api`` (:func:`gputriage.parsers.k8s_objects.cluster_from_api`,
    which calls this module)."""
    kind, obj = _kind_of(value)
    text = [ln.rstrip() for ln in split_lines(textwrap.dedent("\n".join(lines))) if ln.strip()]
    if kind == "Fragment":
        return Cluster(objects=[KObject(kind, "?", raw=obj, origin=origin, lines=text)],
                       origin="paste")
    cluster = cluster_from_api([obj], origin=origin)
    for node in cluster.nodes.values():
        node.taints = None if "taints" not in obj["status"] else node.taints
        node.unschedulable = None
        node.lines = text
    for pod in cluster.pods:
        pod.lines = text
    for o in cluster.objects:
        o.lines = text
    return cluster
