"""Kubernetes objects as the API gives them: ``kubectl get -o json|yaml``, manifests
(multi-document YAML, ``helm template``, kustomize output), and the lists the live client
reads (:mod:`gputriage.collect.k8s_api`), all into one :class:`Cluster`.

A ``List`` (``kind: List``, ``NodeList``, ``PodList``...) is opened into its items. Nodes,
pods, events and DaemonSets become typed objects; every object (those too) is also kept
as a :class:`KObject` with its mapping, for the rules that read manifests. The live
client's lists may carry ``errors`` (``{"kind": "why"}``) for kinds it could not read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from gputriage.parsers.k8s_model import (
    Cluster,
    KContainer,
    KDaemonSet,
    KEvent,
    KNode,
    KObject,
    KPod,
    Taint,
    Toleration,
)
from gputriage.text.fields import ParseError, as_int, split_lines

__all__ = ["cluster_from_api", "load_documents", "parse_k8s_objects"]

_MAX_DOCUMENTS = 200_000


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _s(value: Any) -> str | None:
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def _strs(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _d(value).items() if v is not None}


def load_documents(text: str) -> list[Any]:
    """The documents of a JSON or (multi-document) YAML text; ParseError when it is
    neither."""
    body = text.strip()
    if not body:
        return []
    if body[0] in "[{":
        try:
            return [json.loads(body)]
        except (ValueError, RecursionError):
            pass  # YAML's flow style, or JSON cut short: YAML says which
    import yaml  # type: ignore[import-untyped]

    try:
        docs = []
        for doc in yaml.safe_load_all(body):
            if doc is not None:
                docs.append(doc)
            if len(docs) > _MAX_DOCUMENTS:
                raise ParseError(f"more than {_MAX_DOCUMENTS} YAML documents")
        return docs
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ParseError(f"not valid JSON or YAML{where}: "
                         f"{getattr(exc, 'problem', None) or exc}") from None


def _items(docs: Iterable[Any], origin: str | None) -> Iterator[tuple[dict[str, Any], str]]:
    """Every object of ``docs``, Lists opened, each with where it came from."""
    for n, doc in enumerate(docs, 1):
        where = f"{origin or 'document'} #{n}" if origin else f"document #{n}"
        if isinstance(doc, list):
            yield from _items(doc, where)
            continue
        if not isinstance(doc, dict):
            continue
        kind = doc.get("kind")
        if isinstance(kind, str) and (kind == "List" or kind.endswith("List")) \
                and "items" in doc:
            for item in _l(doc.get("items")):
                if isinstance(item, dict):
                    if "kind" not in item and kind != "List":
                        item = {**item, "kind": kind[:-4]}
                    yield item, where
        elif isinstance(kind, str) and "metadata" in doc:
            yield doc, where


def cluster_from_api(docs: Iterable[Any], origin: str = "api", keep_raw: bool = True,
                     errors: Mapping[str, str] | None = None) -> Cluster:
    """A cluster of API objects (``docs``: objects, Lists, or lists of them).

    ``keep_raw=False`` keeps no mapping for pods, nodes and events (the live client's
    large lists: the rules read their typed form only)."""
    cluster = Cluster(origin=origin, errors=dict(errors or {}))
    for obj, where in _items(docs, None if origin == "api" else origin):
        kind = str(obj.get("kind"))
        meta = _d(obj.get("metadata"))
        name, namespace = _s(meta.get("name")) or "", _s(meta.get("namespace"))
        if kind == "Node":
            node = _node(obj)
            cluster.nodes[node.name] = node
        elif kind == "Pod":
            cluster.pods.append(_pod(obj))
        elif kind == "Event":
            cluster.events.append(_event(obj))
        elif kind == "DaemonSet":
            cluster.daemonsets.append(_daemonset(obj))
        big = kind in ("Node", "Pod", "Event")
        cluster.objects.append(KObject(kind, name, namespace, _s(obj.get("apiVersion")),
                                       obj if keep_raw or not big else {}, where))
    return cluster


def parse_k8s_objects(text: str) -> Cluster:
    """Objects of ``kubectl get -o json|yaml`` or of manifests, and the fragments of them
    people paste (see :mod:`gputriage.parsers.k8s_fragments`); a text without any object
    raises ParseError."""
    try:
        docs = load_documents(text)
    except ParseError as exc:
        return _tolerant(text, exc)
    first = docs[0] if len(docs) == 1 and isinstance(docs[0], dict) else {}
    errors = _strs(first.get("errors")) if first.get("kind") == "List" else {}
    cluster = cluster_from_api(docs, origin="paste", errors=errors)
    if not cluster and not errors:
        return _tolerant(text, ParseError("no Kubernetes object (apiVersion, kind, metadata) "
                                          "in the text"))
    return cluster


def _tolerant(text: str, error: ParseError) -> Cluster:
    """Block by block: objects pasted one after another, fragments, and what can be
    read of a text cut short (``error`` when nothing can)."""
    import textwrap

    from gputriage.parsers.k8s_fragments import fragment_cluster, is_fragment, split_blocks

    cluster = Cluster(origin="paste")
    for n, block in enumerate(split_blocks(text), 1):
        docs = _cut_short(split_lines(textwrap.dedent("\n".join(block))))
        if docs is None:
            continue
        part = cluster_from_api(docs, origin=f"paste #{n}")
        if not part and len(docs) == 1 and is_fragment(docs[0]):
            part = fragment_cluster(docs[0], block, f"paste #{n}", cluster_from_api)
        cluster.merge(part)
    if not cluster:
        raise error
    return cluster


def _cut_short(lines: list[str], tries: int = 8) -> list[Any] | None:
    """The documents of a block, or of its head when its last lines were cut (a paste
    that ends in the middle of an object); None when neither parses."""
    for n in range(min(tries, len(lines))):
        try:
            return load_documents("\n".join(lines[:len(lines) - n]))
        except ParseError:
            continue
    return None


# --- typed forms ---------------------------------------------------------------------
def _taints(raw: Any) -> list[Taint]:
    return [Taint(str(t.get("key", "")), _s(t.get("value")), str(t.get("effect", "")))
            for t in _l(raw) if isinstance(t, dict)]


def _tolerations(raw: Any) -> list[Toleration]:
    return [Toleration(_s(t.get("key")) or None, str(t.get("operator") or "Equal"),
                       _s(t.get("value")), _s(t.get("effect")) or None)
            for t in _l(raw) if isinstance(t, dict)]


def _conditions(raw: Any) -> dict[str, tuple[str, str, str]]:
    return {str(c.get("type")): (str(c.get("status", "")), str(c.get("reason") or ""),
                                 str(c.get("message") or ""))
            for c in _l(raw) if isinstance(c, dict) and c.get("type")}


def _node(obj: dict[str, Any]) -> KNode:
    meta, spec, status = (_d(obj.get(k)) for k in ("metadata", "spec", "status"))
    info = _d(status.get("nodeInfo"))
    conditions = _conditions(status.get("conditions"))
    ready = conditions.get("Ready")
    node = KNode(
        name=_s(meta.get("name")) or "", labels=_strs(meta.get("labels")),
        annotations=_strs(meta.get("annotations")), taints=_taints(spec.get("taints")),
        capacity=_strs(status.get("capacity")) if "capacity" in status else None,
        allocatable=_strs(status.get("allocatable")) if "allocatable" in status else None,
        conditions=conditions, unschedulable=bool(spec.get("unschedulable")),
        ready=None if ready is None else ready[0] == "True",
        kubelet_version=_s(info.get("kubeletVersion")),
        runtime_version=_s(info.get("containerRuntimeVersion")),
        os_image=_s(info.get("osImage")), kernel=_s(info.get("kernelVersion")))
    node.lines = _node_lines(node)
    return node


def _node_lines(node: KNode) -> list[str]:
    lines = [f"node/{node.name}"]
    for which in ("capacity", "allocatable"):
        gpus = node.gpus(which)
        if gpus is not None:
            shown = ", ".join(f"{k}={v:g}" for k, v in sorted(gpus.items())) or "no GPU resource"
            lines.append(f"  {which}: {shown}")
    gfd = {k: v for k, v in node.labels.items()
           if k in ("nvidia.com/gpu.count", "nvidia.com/gpu.product",
                    "nvidia.com/cuda.driver-version.full", "nvidia.com/mig.strategy")}
    if gfd:
        lines.append("  labels: " + ", ".join(f"{k}={v}" for k, v in sorted(gfd.items())))
    if node.taints:
        lines.append("  taints: " + ", ".join(str(t) for t in node.taints))
    if node.unschedulable:
        lines.append("  unschedulable: true")
    return lines


def _container(raw: dict[str, Any], init: bool, statuses: dict[str, dict[str, Any]]) -> KContainer:
    res = _d(raw.get("resources"))
    env = {str(e.get("name")): str(e.get("value")) for e in _l(raw.get("env"))
           if isinstance(e, dict) and e.get("name") and isinstance(e.get("value"), str)}
    c = KContainer(name=_s(raw.get("name")) or "", image=_s(raw.get("image")), init=init,
                   requests=_strs(res.get("requests")), limits=_strs(res.get("limits")),
                   env=env)
    st = statuses.get(c.name)
    if st is not None:
        c.ready, c.restarts = st.get("ready") is True, as_int(st.get("restartCount"))
        state = _d(st.get("state"))
        for key in ("waiting", "terminated", "running"):
            if key in state:
                detail = _d(state[key])
                c.state, c.reason = key, _s(detail.get("reason"))
                c.message, c.exit_code = _s(detail.get("message")), as_int(detail.get("exitCode"))
                break
    return c


def _owner(meta: dict[str, Any]) -> str | None:
    for o in _l(meta.get("ownerReferences")):
        if isinstance(o, dict) and o.get("controller"):
            return f"{o.get('kind')}/{o.get('name')}"
    return None


def _pod(obj: dict[str, Any]) -> KPod:
    meta, spec, status = (_d(obj.get(k)) for k in ("metadata", "spec", "status"))
    statuses = {str(s.get("name")): s for key in ("containerStatuses", "initContainerStatuses")
                for s in _l(status.get(key)) if isinstance(s, dict)}
    containers = [_container(c, True, statuses) for c in _l(spec.get("initContainers"))
                  if isinstance(c, dict)]
    containers += [_container(c, False, statuses) for c in _l(spec.get("containers"))
                   if isinstance(c, dict)]
    restarts = [c.restarts for c in containers if c.restarts is not None]
    pod = KPod(
        name=_s(meta.get("name")) or "", namespace=_s(meta.get("namespace")),
        phase=_s(status.get("phase")), node=_s(spec.get("nodeName")), containers=containers,
        tolerations=_tolerations(spec.get("tolerations")),
        node_selector=_strs(spec.get("nodeSelector")),
        affinity=_d(spec.get("affinity")) or None,
        priority_class=_s(spec.get("priorityClassName")), priority=as_int(spec.get("priority")),
        scheduler=_s(spec.get("schedulerName")), runtime_class=_s(spec.get("runtimeClassName")),
        owner=_owner(meta), labels=_strs(meta.get("labels")),
        annotations=_strs(meta.get("annotations")),
        conditions=_conditions(status.get("conditions")),
        restarts=sum(restarts) if restarts else None)
    pod.status = _pod_status(pod, status)
    gpus = pod.gpu_requests()
    pod.lines = [f"pod/{pod.namespace}/{pod.name}: {pod.status or pod.phase or '?'}"
                 + (f" on {pod.node}" if pod.node else "")
                 + ("".join(f", {k}: {v:g}" for k, v in sorted(gpus.items())))]
    return pod


def _pod_status(pod: KPod, status: dict[str, Any]) -> str | None:
    """What ``kubectl get pods`` prints in STATUS, near enough: a waiting or failed init
    container first, then a waiting app container's reason, then the phase."""
    inits = [c for c in pod.containers if c.init]
    for i, c in enumerate(inits):
        if c.state == "terminated" and c.exit_code == 0:
            continue
        if c.reason and c.state in ("waiting", "terminated"):
            return f"Init:{c.reason}"
        if c.state is not None:
            return f"Init:{i}/{len(inits)}"
    for c in pod.containers:
        if not c.init and c.state == "waiting" and c.reason:
            return c.reason
    return _s(status.get("reason")) or pod.phase


def _event(obj: dict[str, Any]) -> KEvent:
    meta = _d(obj.get("metadata"))
    regarding = _d(obj.get("involvedObject") or obj.get("regarding"))
    source = _d(obj.get("source"))
    series = _d(obj.get("series"))
    count = as_int(obj.get("count")) or as_int(series.get("count"))
    event = KEvent(
        reason=_s(obj.get("reason")) or "", message=_s(obj.get("message") or obj.get("note"))
        or "", type=_s(obj.get("type")), kind=_s(regarding.get("kind")),
        name=_s(regarding.get("name")),
        namespace=_s(regarding.get("namespace")) or _s(meta.get("namespace")), count=count,
        source=_s(source.get("component")) or _s(obj.get("reportingController"))
        or _s(obj.get("reportingComponent")),
        time=_s(obj.get("lastTimestamp") or obj.get("eventTime")
                or obj.get("firstTimestamp")))
    about = event.about or "?"
    event.line = (f"{event.time or ''} {event.type or ''} {event.reason} {about}: "
                  f"{event.message}").strip()
    return event


def _daemonset(obj: dict[str, Any]) -> KDaemonSet:
    meta, spec, status = (_d(obj.get(k)) for k in ("metadata", "spec", "status"))
    pod_spec = _d(_d(spec.get("template")).get("spec"))
    ds = KDaemonSet(
        name=_s(meta.get("name")) or "", namespace=_s(meta.get("namespace")),
        desired=as_int(status.get("desiredNumberScheduled")),
        current=as_int(status.get("currentNumberScheduled")),
        ready=as_int(status.get("numberReady")), available=as_int(status.get("numberAvailable")),
        node_selector=_strs(pod_spec.get("nodeSelector")),
        tolerations=_tolerations(pod_spec.get("tolerations")),
        images=[str(c.get("image")) for c in _l(pod_spec.get("containers"))
                if isinstance(c, dict) and c.get("image")])
    ds.lines = [f"daemonset/{ds.namespace}/{ds.name}: desired {ds.desired} ready {ds.ready} "
                f"available {ds.available}"]
    return ds


