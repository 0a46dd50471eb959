"""What gputriage keeps of a live cluster's objects: :func:`slim` drops what no parser or
rule reads (``managedFields``, node images, most annotations, status noise), so that a
50,000-pod list fits in a few hundred MB and the snapshot ``k8s status --save`` writes
stays small.

Lists from the API carry no ``kind`` / ``apiVersion`` on their items; :func:`slim` puts
them back, as ``kubectl get -o json`` does.
"""

from __future__ import annotations

from typing import Any

__all__ = ["slim"]

# an annotation longer than this is dropped (last-applied-configuration, HAMi's device
# registers...); the ones rules read (nvidia.com/..., upgrade state) are short
_ANNOTATION_MAX = 512
_DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
_CONFIG_VALUE_MAX = 65_536  # a ConfigMap value longer than this is not a plugin config


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _pick(src: Any, *keys: str) -> dict[str, Any]:
    """The keys of ``src`` that are present."""
    d = _d(src)
    return {k: d[k] for k in keys if k in d}


def _annotations(raw: Any) -> dict[str, Any]:
    return {k: v for k, v in _d(raw).items() if k not in _DROPPED_ANNOTATIONS
            and isinstance(v, str) and len(v) <= _ANNOTATION_MAX}


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = _pick(obj.get("metadata"), "name", "namespace", "labels", "creationTimestamp",
                 "deletionTimestamp", "uid")
    annotations = _annotations(_d(obj.get("metadata")).get("annotations"))
    if annotations:
        meta["annotations"] = annotations
    owners = [_pick(o, "kind", "name", "controller")
              for o in _l(_d(obj.get("metadata")).get("ownerReferences")) if isinstance(o, dict)]
    if owners:
        meta["ownerReferences"] = owners
    return meta


def _container(raw: Any) -> dict[str, Any]:
    c = _pick(raw, "name", "image", "imagePullPolicy", "resources", "command", "args",
              "readinessProbe", "startupProbe", "livenessProbe", "volumeMounts")
    env = [e for e in _l(_d(raw).get("env"))
           if isinstance(e, dict) and isinstance(e.get("value"), str)]
    if env:
        c["env"] = [{"name": e.get("name"), "value": e["value"]} for e in env]
    return c


def _pod_spec(raw: Any) -> dict[str, Any]:
    spec = _pick(raw, "nodeName", "tolerations", "nodeSelector", "affinity",
                 "priorityClassName", "priority", "schedulerName", "runtimeClassName",
                 "preemptionPolicy", "hostNetwork", "terminationGracePeriodSeconds")
    for key in ("containers", "initContainers"):
        if key in _d(raw):
            spec[key] = [_container(c) for c in _l(raw[key]) if isinstance(c, dict)]
    volumes = [v for v in _l(_d(raw).get("volumes")) if isinstance(v, dict)
               and ("emptyDir" in v or "hostPath" in v or "persistentVolumeClaim" in v)]
    if volumes:
        spec["volumes"] = volumes
    return spec


def _state(raw: Any) -> dict[str, Any]:
    """A container state without its timestamps and ids."""
    return {k: _pick(v, "reason", "message", "exitCode") for k, v in _d(raw).items()}


def _container_status(raw: Any) -> dict[str, Any]:
    st = _pick(raw, "name", "ready", "restartCount", "started")
    if "state" in _d(raw):
        st["state"] = _state(raw["state"])
    if "lastState" in _d(raw) and _d(raw).get("lastState"):
        st["lastState"] = _state(raw["lastState"])
    return st


def _conditions(raw: Any) -> list[dict[str, Any]]:
    return [_pick(c, "type", "status", "reason", "message", "lastTransitionTime")
            for c in _l(raw) if isinstance(c, dict)]


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    status = _d(obj.get("status"))
    st = _pick(status, "phase", "reason", "message", "nominatedNodeName")
    if "conditions" in status:
        st["conditions"] = _conditions(status["conditions"])
    for key in ("containerStatuses", "initContainerStatuses"):
        if key in status:
            st[key] = [_container_status(s) for s in _l(status[key]) if isinstance(s, dict)]
    return {"metadata": _meta(obj), "spec": _pod_spec(obj.get("spec")), "status": st}


def _node(obj: dict[str, Any]) -> dict[str, Any]:
    status = _d(obj.get("status"))
    st = _pick(status, "capacity", "allocatable")
    if "conditions" in status:
        st["conditions"] = _conditions(status["conditions"])
    info = _pick(status.get("nodeInfo"), "kubeletVersion", "containerRuntimeVersion",
                 "osImage", "kernelVersion")
    if info:
        st["nodeInfo"] = info
    return {"metadata": _meta(obj),
            "spec": _pick(obj.get("spec"), "taints", "unschedulable", "providerID"),
            "status": st}


def _event(obj: dict[str, Any]) -> dict[str, Any]:
    ev = _pick(obj, "reason", "message", "note", "type", "count", "lastTimestamp",
               "firstTimestamp", "eventTime", "reportingController", "reportingComponent")
    ev["metadata"] = _pick(obj.get("metadata"), "name", "namespace", "creationTimestamp")
    for key in ("involvedObject", "regarding"):
        if key in obj:
            ev[key] = _pick(obj[key], "kind", "name", "namespace")
    if "source" in obj:
        ev["source"] = _pick(obj["source"], "component", "host")
    if "series" in obj:
        ev["series"] = _pick(obj["series"], "count", "lastObservedTime")
    return ev


def _workload(obj: dict[str, Any]) -> dict[str, Any]:
    """DaemonSets, Deployments, StatefulSets: their pod template slimmed, spec and
    status otherwise whole (small)."""
    spec = dict(_d(obj.get("spec")))
    template = _d(spec.get("template"))
    if template:
        spec["template"] = {"metadata": _pick(template.get("metadata"), "labels",
                                              "annotations"),
                            "spec": _pod_spec(template.get("spec"))}
    return {"metadata": _meta(obj), "spec": spec,
            "status": {k: v for k, v in _d(obj.get("status")).items() if k != "conditions"}
            | ({"conditions": _conditions(_d(obj.get("status")).get("conditions"))}
               if "conditions" in _d(obj.get("status")) else {})}


def _config_map(obj: dict[str, Any]) -> dict[str, Any]:
    data = {k: v for k, v in _d(obj.get("data")).items()
            if isinstance(v, str) and len(v) <= _CONFIG_VALUE_MAX}
    return {"metadata": _meta(obj), "data": data}


def _other(obj: dict[str, Any]) -> dict[str, Any]:
    """Policies and queue objects: small, kept whole but for the bookkeeping."""
    kept = {k: v for k, v in obj.items() if k not in ("metadata", "kind", "apiVersion")}
    return {"metadata": _meta(obj), **kept}


_BY_KIND = {"Pod": _pod, "Node": _node, "Event": _event, "DaemonSet": _workload,
            "Deployment": _workload, "StatefulSet": _workload, "ConfigMap": _config_map}


def slim(kind: str, obj: dict[str, Any], api_version: str | None = None) -> dict[str, Any]:
    """``obj`` (an item of a list of ``kind``) with only what gputriage reads, its
    ``kind`` and ``apiVersion`` set."""
    kept = _BY_KIND.get(kind, _other)(obj)
    return {"apiVersion": obj.get("apiVersion") or api_version, "kind": kind, **kept}
