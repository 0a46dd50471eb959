"""A Kubernetes API server that replays recorded objects, on loopback, for tests.

It answers what a real apiserver answers to a read-only client: ``/version``, the
discovery documents (``/api``, ``/api/v1``, ``/apis``, ``/apis/GROUP/VERSION``), and the
lists of every kind it holds, cluster-wide (``/api/v1/pods``) and per namespace
(``/api/v1/namespaces/NS/configmaps``), with ``limit`` / ``continue`` pagination
(``metadata.continue`` and ``remainingItemCount`` as the apiserver sets them) and items
without ``kind`` / ``apiVersion`` (the apiserver leaves them out of lists). Paths named
in ``forbidden`` answer 403 with the apiserver's Status object; unknown paths 404.
Anything else (a write) answers 405: the clients under test must never write -- except,
with ``writable=True``, a PATCH of a Node (``/api/v1/nodes/NAME``, a merge patch as
the apiserver applies ``kubectl cordon``'s: null deletes), which later reads see; and
``GET /api/v1/nodes/NAME`` answers the one Node.

The server runs in a daemon thread on a random port of 127.0.0.1 and stops when the
``with`` block ends, or by itself after ``lifetime_s``; ``delay_s`` slows every answer.
``requests`` records every path asked, so tests can check pagination and that nothing
was asked per node.

Run as a program (the benchmark does) it serves a JSON file of objects until killed:
``python tests/k8s_replay.py OBJECTS.json PORT_FILE``.
"""

from __future__ import annotations

import base64
import json
import socket
import sys
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).parent / "fixtures" / "k8s"
RESOURCE_VERSION = 424242
SERVICE_ACCOUNT = "system:serviceaccount:monitoring:gputriage"

# kind -> (group, version, plural, namespaced); what the server can list
KINDS: dict[str, tuple[str, str, str, bool]] = {
    "Node": ("", "v1", "nodes", False),
    "Pod": ("", "v1", "pods", True),
    "Event": ("", "v1", "events", True),
    "ConfigMap": ("", "v1", "configmaps", True),
    "ResourceQuota": ("", "v1", "resourcequotas", True),
    "Namespace": ("", "v1", "namespaces", False),
    "DaemonSet": ("apps", "v1", "daemonsets", True),
    "Deployment": ("apps", "v1", "deployments", True),
    "StatefulSet": ("apps", "v1", "statefulsets", True),
    "Job": ("batch", "v1", "jobs", True),
    "PriorityClass": ("scheduling.k8s.io", "v1", "priorityclasses", False),
    "PodDisruptionBudget": ("policy", "v1", "poddisruptionbudgets", True),
    "HorizontalPodAutoscaler": ("autoscaling", "v2", "horizontalpodautoscalers", True),
    "ClusterPolicy": ("nvidia.com", "v1", "clusterpolicies", False),
    "ClusterQueue": ("kueue.x-k8s.io", "v1beta1", "clusterqueues", False),
    "LocalQueue": ("kueue.x-k8s.io", "v1beta1", "localqueues", True),
    "Workload": ("kueue.x-k8s.io", "v1beta1", "workloads", True),
    "PodGroup": ("scheduling.volcano.sh", "v1beta1", "podgroups", True),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets", True),
}
# groups every apiserver serves, whether or not the fixtures hold their objects
_BUILTIN_GROUPS = {"", "apps", "batch", "scheduling.k8s.io", "policy", "autoscaling"}


def _gv(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def _kind_of(item: dict[str, Any], list_kind: str | None) -> str | None:
    kind = item.get("kind")
    if isinstance(kind, str):
        return kind
    return list_kind[:-4] if list_kind and list_kind.endswith("List") else None


def load_objects(docs: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
    """Objects by kind from documents (objects, or Lists as ``kubectl get --raw`` gives
    them, their items without ``kind``)."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        items = doc.get("items") if "items" in doc else [doc]
        list_kind = doc.get("kind") if "items" in doc else None
        for item in items or []:
            kind = _kind_of(item, list_kind)
            if kind is not None:
                by_kind.setdefault(kind, []).append(item)
    return by_kind


def fixture_objects(pattern: str = "C-*.json") -> dict[str, list[dict[str, Any]]]:
    """The recorded objects of ``tests/fixtures/k8s`` whose names match ``pattern``."""
    return load_objects(json.loads(p.read_text()) for p in sorted(FIXTURES.glob(pattern)))


def forbidden_status(plural: str, group: str = "", namespace: str | None = None,
                     user: str = SERVICE_ACCOUNT) -> dict[str, Any]:
    """The apiserver's 403 answer to a list the RBAC does not allow."""
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f'{plural} is forbidden: User "{user}" cannot list resource '
                       f'"{plural}" in API group "{group}" {scope}',
            "reason": "Forbidden", "details": {"kind": plural}, "code": 403}


_NOT_FOUND = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": "the server could not find the requested resource",
              "reason": "NotFound", "details": {}, "code": 404}


class _Kind:
    """One kind's items, encoded once (a 50,000-pod list is served many times)."""

    def __init__(self, kind: str, items: list[dict[str, Any]]) -> None:
        group, version, plural, namespaced = KINDS[kind]
        self.kind, self.group, self.version, self.plural = kind, group, version, plural
        self.namespaced = namespaced
        bare = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        self.items = bare
        self.namespaces = [(o.get("metadata") or {}).get("namespace") for o in bare]
        self.encoded = [json.dumps(o, separators=(",", ":")).encode() for o in bare]

    def index(self, name: str) -> int | None:
        return next((i for i, o in enumerate(self.items)
                     if (o.get("metadata") or {}).get("name") == name), None)

    def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """Merge ``body`` into the named item (null deletes); the item, or None."""
        i = self.index(name)
        if i is None:
            return None
        _merge(self.items[i], body)
        self.encoded[i] = json.dumps(self.items[i], separators=(",", ":")).encode()
        return self.items[i]

    def page(self, namespace: str | None, limit: int, token: str | None) -> bytes:
        rows = self.encoded if namespace is None else \
            [e for e, ns in zip(self.encoded, self.namespaces, strict=True) if ns == namespace]
        start = _decode_token(token) if token else 0
        end = len(rows) if limit <= 0 else min(len(rows), start + limit)
        meta: dict[str, Any] = {"resourceVersion": str(RESOURCE_VERSION)}
        if end < len(rows):
            meta["continue"] = _encode_token(end)
            meta["remainingItemCount"] = len(rows) - end
        head = {"kind": f"{self.kind}List", "apiVersion": _gv(self.group, self.version),
                "metadata": meta}
        return (json.dumps(head, separators=(",", ":"))[:-1].encode() + b',"items":['
                + b",".join(rows[start:end]) + b"]}")


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def _encode_token(offset: int) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": RESOURCE_VERSION, "start": str(offset)})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_token(token: str) -> int:
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    return int(json.loads(raw)["start"])


class _Server(ThreadingHTTPServer):
    """The replay's HTTP server, quiet about a client that hung up before its answer (a
    timeout the client under test was given): that is the test's point, not an error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class ReplayServer:
    """Serve ``objects`` (kind -> items) on 127.0.0.1; ``forbidden``: plurals (``pods``)
    or paths (``/api/v1/pods``) that answer 403; ``groups``: extra API groups discovery
    lists even without objects."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]],
                 forbidden: Iterable[str] = (), groups: Iterable[str] = (),
                 lifetime_s: float = 300.0, port: int = 0, delay_s: float = 0.0,
                 writable: bool = False) -> None:
        self.kinds = {k: _Kind(k, v) for k, v in objects.items() if k in KINDS}
        self.writable = writable
        self.lock = threading.Lock()
        self.forbidden = set(forbidden)
        served = _BUILTIN_GROUPS | {k.group for k in self.kinds.values()} | set(groups)
        self.groups = {g: v for g, v, _, _ in KINDS.values() if g in served}
        self.requests: list[str] = []
        self.lifetime_s = lifetime_s
        self.delay_s = delay_s  # each answer waits this long (a slow apiserver)
        self.httpd = _Server(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        # stop() waits for the serving loop's next look at its flag: 0.05 s, not the
        # default 0.5 s of every server a test stops
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.timer = threading.Timer(lifetime_s, self.stop)
        self.timer.daemon = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> ReplayServer:
        self.thread.start()
        self.timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.timer.cancel()
        if self.thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()

    def kubeconfig(self, path: Path, context: str = "replay") -> Path:
        """A kubeconfig (JSON is YAML) pointing at this server, with a bearer token."""
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": context,
               "clusters": [{"name": "replay", "cluster": {"server": self.url}}],
               "users": [{"name": "reader", "user": {"token": "replay-token"}}],
               "contexts": [{"name": context,
                             "context": {"cluster": "replay", "user": "reader"}}]}
        path.write_text(json.dumps(doc))
        return path

    # --- answers ---------------------------------------------------------------
    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, bytes]:
        path = path.rstrip("/") or "/"
        if path == "/version":
            return 200, _json({"major": "1", "minor": "30", "gitVersion": "v1.30.4",
                               "platform": "linux/amd64"})
        if path == "/api":
            return 200, _json({"kind": "APIVersions", "versions": ["v1"],
                               "serverAddressByClientCIDRs": [
                                   {"clientCIDR": "0.0.0.0/0",
                                    "serverAddress": "10.0.0.1:6443"}]})
        if path == "/apis":
            return 200, _json(self._group_list())
        if path == "/api/v1":
            return 200, _json(self._resource_list("", "v1"))
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4 and "Node" in self.kinds:
            nodes = self.kinds["Node"]
            with self.lock:
                i = nodes.index(parts[3])
                return (404, _json(_NOT_FOUND)) if i is None else (200, nodes.encoded[i])
        if parts[0] == "apis" and len(parts) == 3 and self.groups.get(parts[1]) == parts[2]:
            return 200, _json(self._resource_list(parts[1], parts[2]))
        return self._list(path, parts, query)

    def _list(self, path: str, parts: list[str], query: dict[str, list[str]]
              ) -> tuple[int, bytes]:
        if parts[0] == "api":
            group, rest = "", parts[1:]
        elif parts[0] == "apis" and len(parts) > 1:
            group, rest = parts[1], parts[2:]
        else:
            return 404, _json(_NOT_FOUND)
        version, rest = (rest[0], rest[1:]) if rest else ("", [])
        namespace = None
        if len(rest) == 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if len(rest) != 1:
            return 404, _json(_NOT_FOUND)
        plural = rest[0]
        kind = next((k for k, (g, v, p, _) in KINDS.items()
                     if (g, v, p) == (group, version, plural)), None)
        if kind is None or group not in self.groups:
            return 404, _json(_NOT_FOUND)
        if plural in self.forbidden or path in self.forbidden:
            return 403, _json(forbidden_status(plural, group, namespace))
        held = self.kinds.get(kind) or _Kind(kind, [])
        limit = int((query.get("limit") or ["0"])[0] or 0)
        token = (query.get("continue") or [None])[0]
        return 200, held.page(namespace, limit, token)

    def _group_list(self) -> dict[str, Any]:
        groups = []
        for name, version in sorted(self.groups.items()):
            if not name:
                continue
            gv = {"groupVersion": f"{name}/{version}", "version": version}
            groups.append({"name": name, "versions": [gv], "preferredVersion": gv})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources = [{"name": plural, "singularName": kind.lower(), "namespaced": namespaced,
                      "kind": kind, "verbs": ["get", "list", "watch"]}
                     for kind, (g, v, plural, namespaced) in KINDS.items()
                     if (g, v) == (group, version)]
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": _gv(group, version), "resources": resources}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()  # Go's net/http, the apiserver's, sends without delay
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_GET(self) -> None:  # http.server's name
                url = urlsplit(self.path)
                server.requests.append(self.path)
                if server.delay_s:
                    time.sleep(server.delay_s)
                status, body = server.answer(url.path, parse_qs(url.query))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _refuse(self) -> None:
                server.requests.append(f"{self.command} {self.path}")
                body = _json({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "message": "the replay server is read-only",
                              "reason": "MethodNotAllowed", "code": 405})
                self.send_response(405)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_PUT = do_DELETE = _refuse

            def do_PATCH(self) -> None:  # http.server's name
                parts = urlsplit(self.path).path.strip("/").split("/")
                if not (server.writable and parts[:3] == ["api", "v1", "nodes"]
                        and len(parts) == 4 and "Node" in server.kinds):
                    return self._refuse()
                server.requests.append(f"PATCH {self.path}")
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size) or b"{}")
                with server.lock:
                    node = server.kinds["Node"].patch(parts[3], body)
                status, answer = (200, _json(node)) if node is not None \
                    else (404, _json(_NOT_FOUND))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                return None

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def _json(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def main(argv: list[str]) -> int:
    """Serve the objects of a JSON file until killed; the port goes to PORT_FILE."""
    objects_file, port_file = argv
    doc = json.loads(Path(objects_file).read_text())
    server = ReplayServer(load_objects(doc if isinstance(doc, list) else [doc]),
                          lifetime_s=3600)
    with server:
        Path(port_file).write_text(server.url)
        server.thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
