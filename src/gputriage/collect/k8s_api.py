"""Read a live cluster through the official ``kubernetes`` client, read-only.

One paginated, cluster-wide list per kind (``limit`` / ``continue``; never one request
per node): nodes, pods, events, DaemonSets, Deployments, StatefulSets, ResourceQuotas,
PriorityClasses, PodDisruptionBudgets, HPAs (autoscaling/v2), the ConfigMaps of the
namespaces the NVIDIA DaemonSets run in (time-slicing and MIG configs), and, only when
discovery says their API group is served, the GPU operator's ClusterPolicy, Kueue,
Volcano and JobSet objects. Only list calls: nothing is ever written.

Each page is read raw (``_preload_content=False``) and decoded with ``json.loads``; the
client's models would take minutes on 50,000 pods. Items are slimmed
(:func:`gputriage.collect.k8s_slim.slim`) and turned into the :class:`Cluster` page by
page. A kind the credentials may not list (403) or the server does not serve (404) is
recorded in ``errors`` and the rest is judged; no answer at all (connection refused,
TLS, the time budget spent) raises :class:`ClusterUnavailable`, which the command
reports in one line with exit status 3.

What a server can make it hold is bounded (:mod:`gputriage.io.netbounds`): one deadline
for the whole read, which shuts the connection down when spent (a server sending a
header line every few seconds never trips a per-read timeout); a page of at most
``PAGE_MAX_BYTES``, decoded only when its cost bound is within ``PAGE_DECODE_BUDGET``
(a page over either is asked again with a quarter of the ``limit``, down to one
object, then the kind is reported not read); an error answer read to
``ERROR_MAX_BYTES`` and its message cut to ``MESSAGE_MAX_CHARS``.
"""

from __future__ import annotations

import gc
import io
import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from gputriage.collect.k8s_slim import slim
from gputriage.io.netbounds import Deadline, TooLarge, loads_within, read_capped
from gputriage.parsers.k8s_model import Cluster
from gputriage.text.fields import strict_int

__all__ = ["CORE_KINDS", "OPTIONAL_KINDS", "ClusterRead", "ClusterUnavailable", "ReadOptions",
           "read_cluster"]

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_PAGE_SIZE = 500  # kubectl's chunk size
REQUEST_TIMEOUT_S = 30.0  # one read at most, within the total
_CONNECT_TIMEOUT_S = 10.0
# A page of 500 pods is 2-8 MB as the API server sends it; a page over these bounds is
# asked again with fewer objects.
PAGE_MAX_BYTES = 16 * 2**20
PAGE_DECODE_BUDGET = 128 * 2**20
ERROR_MAX_BYTES = 64 * 1024  # of an error answer (a Status object is a few hundred bytes)
MESSAGE_MAX_CHARS = 300  # of an API server's message, as printed
_SMALLER_PAGE = 4  # a page too large is asked again with limit // this


class ClusterUnavailable(Exception):
    """The cluster could not be read at all (no configuration, no answer, the time
    budget spent): one line for the user, exit status 3."""


# kind -> (apiVersion, plural): cluster-wide lists
CORE_KINDS: dict[str, tuple[str, str]] = {
    "Namespace": ("v1", "namespaces"),
    "Node": ("v1", "nodes"),
    "Pod": ("v1", "pods"),
    "Event": ("v1", "events"),
    "DaemonSet": ("apps/v1", "daemonsets"),
    "Deployment": ("apps/v1", "deployments"),
    "StatefulSet": ("apps/v1", "statefulsets"),
    "Job": ("batch/v1", "jobs"),
    "ResourceQuota": ("v1", "resourcequotas"),
    "PriorityClass": ("scheduling.k8s.io/v1", "priorityclasses"),
    "PodDisruptionBudget": ("policy/v1", "poddisruptionbudgets"),
    "HorizontalPodAutoscaler": ("autoscaling/v2", "horizontalpodautoscalers"),
}

# what ``read`` and ``errors`` call it -> (kind, API group, plural): read only when
# discovery lists the group
OPTIONAL_KINDS: dict[str, tuple[str, str, str]] = {
    "ClusterPolicy": ("ClusterPolicy", "nvidia.com", "clusterpolicies"),
    "ClusterQueue": ("ClusterQueue", "kueue.x-k8s.io", "clusterqueues"),
    "LocalQueue": ("LocalQueue", "kueue.x-k8s.io", "localqueues"),
    "Workload": ("Workload", "kueue.x-k8s.io", "workloads"),
    "PodGroup": ("PodGroup", "scheduling.volcano.sh", "podgroups"),
    "Job.batch.volcano.sh": ("Job", "batch.volcano.sh", "jobs"),
    "JobSet": ("JobSet", "jobset.x-k8s.io", "jobsets"),
}

# DaemonSets whose namespace's ConfigMaps are read (plugin and operator configs)
_GPU_DAEMONSET_WORDS = ("nvidia", "device-plugin", "gpu-operator", "gpu-feature-discovery")


@dataclass
class ReadOptions:
    kubeconfig: str | None = None
    context: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    page_size: int = DEFAULT_PAGE_SIZE
    keep_items: bool = False  # keep the slimmed items (for --save)


@dataclass
class ClusterRead:
    """What was read: the cluster, how many objects of each kind, what could not be
    read (kind -> why), and the slimmed items when asked to keep them."""

    cluster: Cluster
    server: str
    context: str | None
    read: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    items: list[dict[str, Any]] | None = None
    seconds: float = 0.0

    def document(self) -> dict[str, Any]:
        """The ``k8s_objects`` document: a List with ``errors`` and where it was read."""
        return {"apiVersion": "v1", "kind": "List", "items": self.items or [],
                "errors": dict(self.errors),
                "cluster": {"server": self.server, "context": self.context,
                            "read": dict(self.read)}}


def has_kubeconfig() -> bool:
    paths = os.environ.get("KUBECONFIG", "")
    if paths:
        return any(os.path.exists(p) for p in paths.split(os.pathsep) if p)
    return os.path.exists(os.path.expanduser("~/.kube/config"))


def api_client(opts: ReadOptions) -> tuple[Any, str, str | None]:
    """An API client of the kubeconfig (or the in-cluster service account), its server
    and context name."""
    from kubernetes import client, config  # lazily: ~0.5 s

    cfg = client.Configuration()
    try:
        if opts.kubeconfig or opts.context or has_kubeconfig():
            config.load_kube_config(config_file=opts.kubeconfig, context=opts.context,
                                    client_configuration=cfg, persist_config=False)
            name = opts.context
            if name is None:
                _, active = config.list_kube_config_contexts(config_file=opts.kubeconfig)
                name = (active or {}).get("name")
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
            name = "in-cluster"
        else:
            raise ClusterUnavailable("no kubeconfig (--kubeconfig, $KUBECONFIG, "
                                     "~/.kube/config) and not running in a cluster")
    except ClusterUnavailable:
        raise
    except Exception as exc:  # ConfigException, a broken file, an auth plugin
        where = f"{opts.kubeconfig}: " if opts.kubeconfig else ""
        # the client indexes what it loaded as a mapping: text that is not one fails inside
        why = ("not a kubeconfig (a YAML mapping with clusters, users and contexts)"
               if isinstance(exc, (TypeError, AttributeError, KeyError)) else _one_line(exc))
        raise ClusterUnavailable(f"cannot load the cluster configuration: {where}"
                                 f"{why}") from None
    cfg.retries = 1  # a refused connection fails now, not after three tries
    return client.ApiClient(cfg), str(cfg.host), name


def _one_line(exc: BaseException) -> str:
    return cut_message(str(exc)) or type(exc).__name__


def cut_message(text: str) -> str:
    """``text`` on one line, at most ``MESSAGE_MAX_CHARS`` characters (``...`` marks a
    cut): an API server's message is printed, whatever its size."""
    line = " ".join(text[:MESSAGE_MAX_CHARS * 4].split())
    return line if len(line) <= MESSAGE_MAX_CHARS else \
        line[:MESSAGE_MAX_CHARS - 3].rstrip() + "..."


# the message of a Status object cut short (its JSON does not parse then)
_MESSAGE = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)')


def _status_message(body: Any) -> str:
    """The message of the Status object an API error carries (the body otherwise), cut
    to ``MESSAGE_MAX_CHARS``."""
    if isinstance(body, (bytes, bytearray)):
        body = bytes(body[:ERROR_MAX_BYTES]).decode("utf-8", "replace")
    if not isinstance(body, str):
        return ""
    body = body[:ERROR_MAX_BYTES]
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("message"), str):
        return cut_message(str(doc["message"]))
    found = _MESSAGE.search(body)
    return cut_message(found.group(1) if found else body)


class _ApiError(Exception):
    """A non-2xx answer: its status and body."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


class _PageTooLarge(Exception):
    """A page over PAGE_MAX_BYTES, or its JSON over PAGE_DECODE_BUDGET."""


def _get(api: Any, path: str, query: list[tuple[str, Any]],
         timeout: tuple[float, float]) -> bytearray:
    """GET ``path`` through the client's REST layer, its auth applied, the body raw and
    at most PAGE_MAX_BYTES (TooLarge beyond)."""
    from kubernetes.client.exceptions import ApiException

    headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
    try:
        if hasattr(api, "param_serialize"):  # the client's newer generator (v37 on)
            request = api.param_serialize("GET", path, query_params=query,
                                          header_params=headers,
                                          auth_settings=["BearerToken"])
            resp = api.call_api(*request, _request_timeout=timeout)
        else:
            resp = api.call_api(path, "GET", query_params=query, header_params=headers,
                                auth_settings=["BearerToken"], _preload_content=False,
                                _return_http_data_only=True, _request_timeout=timeout)
    except ApiException as exc:  # the older client raises non-2xx answers itself (its
        # body cut by _cut_error_answers)
        raise _ApiError(exc.status or 0, exc.body) from None
    raw = getattr(resp, "response", resp)  # urllib3's response, its body not yet read
    status = int(getattr(raw, "status", 200))
    length = strict_int(str(raw.headers.get("Content-Length", "")), signed=False)
    whole = False
    try:
        if not 200 <= status <= 299:
            raise _ApiError(status, _read_head(raw, ERROR_MAX_BYTES))
        body = read_capped(lambda n: raw.read(n, decode_content=False), PAGE_MAX_BYTES,
                           length)
        whole = True
        return body
    finally:
        if whole:
            raw.release_conn()
        else:  # what was left unread must not go back to the pool
            raw.close()


def _read_head(raw: Any, cap: int) -> bytes:
    """The first ``cap`` bytes of a body (the rest is left unread)."""
    head = b""
    while len(head) < cap and (chunk := raw.read(cap - len(head), decode_content=False)):
        head += chunk
    return head


class _ErrorAnswer:
    """A non-2xx answer with only the first ``ERROR_MAX_BYTES`` of its body read and its
    connection closed, in place of urllib3's answer: the clients before v37 build their
    ApiException from the whole body (``data``), whatever its size."""

    def __init__(self, raw: Any) -> None:
        self.status, self.reason, self.headers = raw.status, raw.reason, raw.headers
        try:
            self.data = _read_head(raw, ERROR_MAX_BYTES)
        finally:
            raw.close()  # the rest is never read
        self._unread = io.BytesIO(self.data)

    def getheaders(self) -> Any:
        return self.headers

    def read(self, amt: int | None = None, decode_content: bool | None = None) -> bytes:
        return self._unread.read(-1 if amt is None else amt)

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        pass


def _cut_error_answers(api: Any) -> None:
    """Every non-2xx answer the client's connection pool returns is an
    :class:`_ErrorAnswer`, before the client (of either generation) reads its body."""
    manager: Any = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    request = getattr(manager, "request", None)
    if request is None:
        return

    def cut(*args: Any, **kwargs: Any) -> Any:
        answer = request(*args, **kwargs)
        return answer if 200 <= getattr(answer, "status", 200) <= 299 else _ErrorAnswer(answer)

    manager.request = cut


def _hold_connections(api: Any, deadline: Deadline) -> None:
    """Every connection the client opens is held by ``deadline`` (cut when it is spent):
    its pool manager's connection classes are extended to hand over their sockets as
    soon as they are connected, before TLS."""
    manager: Any = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    classes = getattr(manager, "pool_classes_by_scheme", None)
    if not isinstance(classes, dict):
        return
    held = {}
    for scheme, pool_class in classes.items():
        base = pool_class.ConnectionCls

        def new_conn(self: Any, base: Any = base) -> Any:
            sock = base._new_conn(self)
            deadline.hold(sock)
            return sock

        connection = type(base.__name__, (base,), {"_new_conn": new_conn})
        held[scheme] = type(pool_class.__name__, (pool_class,), {"ConnectionCls": connection})
    manager.pool_classes_by_scheme = held


class _Reader:
    """Paginated lists under one deadline."""

    def __init__(self, api: Any, opts: ReadOptions, result: ClusterRead,
                 deadline: Deadline) -> None:
        self.api = api
        self.opts = opts
        self.deadline = deadline
        self.result = result

    def _timeout(self, what: str) -> tuple[float, float]:
        left = self.deadline.left()
        if left <= 0:
            raise self._timed_out(what)
        return (min(_CONNECT_TIMEOUT_S, left), min(REQUEST_TIMEOUT_S, left))

    def _timed_out(self, what: str) -> ClusterUnavailable:
        return ClusterUnavailable(f"{self.result.server}: timed out after "
                                  f"{self.opts.timeout_s:g} s (reading {what}; --timeout "
                                  "allows more)")

    def call(self, what: str, path: str, query: list[tuple[str, Any]]) -> Any:
        """One request's JSON; an API error raises _ApiError, a page too large
        _PageTooLarge, no answer at all ends the read (ClusterUnavailable)."""
        import urllib3

        try:
            data = _get(self.api, path, query, self._timeout(what))
            if self.deadline.cut:  # a head or body cut short can read as a whole one
                raise TimeoutError
        except _ApiError as exc:
            if self.deadline.cut:
                raise self._timed_out(what) from None
            if exc.status == 401:
                raise ClusterUnavailable(f"{self.result.server}: unauthorized "
                                         f"({_status_message(exc.body) or 'credentials'}"
                                         ")") from None
            if not exc.status:
                raise ClusterUnavailable(f"cannot reach {self.result.server}: "
                                         f"{_status_message(exc.body)}") from None
            raise
        except TooLarge as exc:
            raise _PageTooLarge(str(exc)) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if self.deadline.expired or "timed out" in str(exc).lower():
                raise self._timed_out(what) from None
            raise ClusterUnavailable(f"cannot reach {self.result.server}: {_why(exc)}"
                                     ) from None
        try:
            return loads_within(data, PAGE_DECODE_BUDGET)
        except TooLarge as exc:
            raise _PageTooLarge(str(exc)) from None
        except ValueError as exc:
            raise ClusterUnavailable(f"{self.result.server}: {what}: the answer is not JSON "
                                     f"({_one_line(exc)})") from None

    def list_kind(self, kind: str, api_version: str, path: str, label: str = "") -> None:
        """Every page of one list into the result; an API error is recorded (under
        ``label``, default the kind), as is a page too large even of one object."""
        label = label or kind
        token: str | None = None
        count = 0
        limit = self.opts.page_size
        while True:
            query: list[tuple[str, Any]] = [("limit", limit)]
            if token:
                query.append(("continue", token))
            try:
                page = self.call(kind, path, query)
            except _ApiError as exc:
                self.result.errors[label] = _api_error(exc)
                break
            except _PageTooLarge as exc:
                if limit > 1:  # the same page again, with fewer objects
                    limit = max(1, limit // _SMALLER_PAGE)
                    continue
                self.result.errors[label] = (f"not read past {count} objects: one object "
                                             f"is too large ({exc})")
                break
            if self.result.items is None and kind in _TYPED_ONLY:
                items = [_kinded(o, kind, api_version) for o in _items(page)]
            else:
                items = [slim(kind, o, api_version) for o in _items(page)]
            self._add(items)
            count += len(items)
            meta = page.get("metadata") if isinstance(page, dict) else None
            token = meta.get("continue") if isinstance(meta, dict) else None
            if not token or not isinstance(token, str):
                break
        if count or label not in self.result.errors:
            self.result.read[label] = self.result.read.get(label, 0) + count

    def _add(self, items: list[dict[str, Any]]) -> None:
        from gputriage.parsers.k8s_objects import cluster_from_api

        if not items:
            return
        self.result.cluster.merge(cluster_from_api(items, origin="api", keep_raw=False))
        if self.result.items is not None:
            self.result.items.extend(items)


# kinds of which the cluster keeps the typed form only (cluster_from_api, keep_raw=False):
# unless the items are saved, slimming them first would be work for nothing
_TYPED_ONLY = frozenset({"Node", "Pod", "Event"})


def _kinded(obj: dict[str, Any], kind: str, api_version: str) -> dict[str, Any]:
    """A list's item with its kind and apiVersion (a list's items carry neither)."""
    obj["kind"] = kind
    obj.setdefault("apiVersion", api_version)
    return obj


def _path(api_version: str, plural: str, namespace: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


def _items(page: Any) -> list[dict[str, Any]]:
    items = page.get("items") if isinstance(page, dict) else None
    return [o for o in items if isinstance(o, dict)] if isinstance(items, list) else []


def _api_error(exc: _ApiError) -> str:
    word = {403: "forbidden", 404: "not found", 410: "expired"}.get(exc.status,
                                                                    f"error {exc.status}")
    message = _status_message(exc.body)
    return f"{word}: {message}" if message else word


def _why(exc: BaseException) -> str:
    """The innermost reason of a transport error (urllib3 wraps it twice)."""
    reason = getattr(exc, "reason", None)
    while isinstance(reason, BaseException) and getattr(reason, "reason", None) is not None:
        reason = getattr(reason, "reason", None)
    text = _one_line(reason if isinstance(reason, BaseException) else exc)
    if "Connection refused" in text or "ConnectionRefused" in text:
        return "connection refused"
    return text


def _served_groups(reader: _Reader) -> dict[str, str]:
    """API group -> its preferred version, from discovery (empty when forbidden)."""
    try:
        doc = reader.call("discovery", "/apis", [])
    except _ApiError as exc:
        reader.result.errors["discovery"] = _api_error(exc)
        return {}
    except _PageTooLarge as exc:
        reader.result.errors["discovery"] = f"not read: {exc}"
        return {}
    served = {}
    groups = doc.get("groups") if isinstance(doc, dict) else None
    for group in groups if isinstance(groups, list) else []:
        if isinstance(group, dict) and isinstance(group.get("name"), str):
            preferred = (group.get("preferredVersion") or {}).get("version")
            versions = [v.get("version") for v in group.get("versions") or []
                        if isinstance(v, dict)]
            version = preferred or (versions[0] if versions else None)
            if isinstance(version, str):
                served[group["name"]] = version
    return served


def _gpu_namespaces(cluster: Cluster) -> list[str]:
    """Namespaces of the NVIDIA DaemonSets (device plugin, operator operands)."""
    found = set()
    for ds in cluster.daemonsets:
        text = " ".join([ds.name, *ds.images]).lower()
        if ds.namespace and any(w in text for w in _GPU_DAEMONSET_WORDS):
            found.add(ds.namespace)
    return sorted(found)


def read_cluster(opts: ReadOptions | None = None) -> ClusterRead:
    """Read the cluster of the kubeconfig (or the in-cluster service account)."""
    opts = opts or ReadOptions()
    started = time.monotonic()
    api, server, context = api_client(opts)
    result = ClusterRead(Cluster(origin="api"), server, context,
                         items=[] if opts.keep_items else None)
    deadline = Deadline(opts.timeout_s)
    _hold_connections(api, deadline)
    _cut_error_answers(api)
    reader = _Reader(api, opts, result, deadline)
    # the objects read are kept to the end: the cyclic GC walking them again and again
    # while 50,000 pods are decoded would triple the time
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        _read_all(reader, result)
    finally:
        if gc_was_on:
            gc.enable()
        close = getattr(api, "close", None)
        if close is not None:
            close()
    result.cluster.errors.update(result.errors)
    result.seconds = time.monotonic() - started
    return result


def _read_all(reader: _Reader, result: ClusterRead) -> None:
    with reader.deadline:
        for kind, (api_version, plural) in CORE_KINDS.items():
            reader.list_kind(kind, api_version, _path(api_version, plural))
        for namespace in _gpu_namespaces(result.cluster):
            reader.list_kind("ConfigMap", "v1", _path("v1", "configmaps", namespace))
        served = _served_groups(reader)
        for label, (kind, group, plural) in OPTIONAL_KINDS.items():
            if group in served:
                version = f"{group}/{served[group]}"
                reader.list_kind(kind, version, _path(version, plural), label)
                if result.errors.get(label, "").startswith("not found"):
                    del result.errors[label]  # the group is served, this kind is not
