"""The watch's HTTP endpoints, on ``--listen ADDR:PORT``.

``/metrics``  the Prometheus metrics (text format, or OpenMetrics when asked for)
``/healthz``  200 ``ok`` while checks complete in time; 503 and the reason otherwise
``/result``   the last successful check's result, as ``check --json`` prints it
              (``gputriage/result/v1``); 503 before the first

Only GET (and HEAD) are answered, by the bounded server of :mod:`gputriage.watch.httpd`
(one thread, at most ``LIMITS.max_connections`` connections, bounded heads and
timeouts: docs/security.md). A request never reaches the check: it reads what the last
cycle left, and the metrics text is made again when a check changed the state (else at
most once a second), so a flood of scrapes costs the check nothing.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from gputriage.text.fields import strict_int
from gputriage.watch.httpd import Answer, BoundedHTTPServer, Limits, Request

if TYPE_CHECKING:
    from gputriage.watch.loop import WatchState

__all__ = ["LIMITS", "ListenError", "WatchServer", "parse_listen", "result_json"]

LIMITS = Limits()  # the exporter's bounds (docs/security.md states them)
METRICS_REUSE_S = 1.0  # the longest a metrics text is served again for an unchanged state
_TEXT = "text/plain; charset=utf-8"


class ListenError(Exception):
    """A --listen address that cannot be used (malformed, unknown, in use)."""


def parse_listen(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` → (host, port): ``:PORT`` is every address, ``[::1]:PORT`` an IPv6
    address; port 0 asks the system for a free one. The port is ASCII digits only."""
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not host or not rest.startswith(":"):
            raise ListenError(f"{text!r}: expected [IPv6]:PORT")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ListenError(f"{text!r}: expected ADDR:PORT or :PORT")
        if ":" in host:
            raise ListenError(f"{text!r}: write an IPv6 address in brackets, [ADDR]:PORT")
    port = strict_int(port_text, signed=False)
    if port is None or not 0 <= port <= 65535:
        raise ListenError(f"{text!r}: the port must be a number from 0 to 65535")
    return host, port


def _listener(family: Any, addr: str, port: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and addr == "::":
            with contextlib.suppress(OSError):  # ":PORT": IPv4 too, where allowed
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((addr, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _bind(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port): the first address the name resolves to."""
    candidates: list[tuple[Any, str]]
    if host == "":
        candidates = [(socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        except (OSError, UnicodeError, ValueError) as exc:
            raise ListenError(f"{host!r}: not an address here ({exc})") from None
        candidates = [(family, str(addr[0])) for family, _, _, _, addr in infos
                      if family in (socket.AF_INET, socket.AF_INET6)]
    problem: OSError | None = None
    for family, addr in candidates:
        try:
            return _listener(family, addr, port)
        except OSError as exc:
            problem = exc
            if host != "" or exc.errno not in _NO_FAMILY:
                break  # in use, not ours: trying another family would not help
    why = problem.strerror if problem is not None and problem.strerror else str(problem)
    raise ListenError(f"cannot listen on {_show(host, port)}: {why}")


_NO_FAMILY = (97, 99, 22)  # EAFNOSUPPORT, EADDRNOTAVAIL, EINVAL: no IPv6 here


def _show(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class WatchServer:
    """The endpoints, served by a bounded server in a daemon thread of its own."""

    def __init__(self, listen: str, state: WatchState, registry: Any, *,
                 log: Any = None, limits: Limits | None = None) -> None:
        host, port = parse_listen(listen)
        listener = _bind(host, port)
        bound_host, bound_port = listener.getsockname()[:2]
        self.address = _show(str(bound_host), int(bound_port))  # the real port, for 0
        self.state = state
        self.registry = registry
        self.result_cache: list = []
        self._metrics_cache: dict[str, tuple[tuple, float, bytes]] = {}
        if log is None:
            from gputriage.watch.logs import WatchLog

            log = WatchLog(sys.stderr)
        try:
            self.server = BoundedHTTPServer(listener, self.answer, limits or LIMITS, log,
                                            "gputriage-watch")
        except BaseException:
            listener.close()
            raise
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.server.serve, daemon=True,
                                       name="gputriage-http")
        self.thread.start()

    def stop(self) -> None:
        self.server.stop()
        if self.thread is not None:
            self.thread.join(timeout=5)
        else:
            self.server.serve()  # never started: returns at once, having closed all

    def answer(self, request: Request) -> Answer:
        """The answer to a GET or HEAD of ``request.path``."""
        if request.path == "/metrics":
            content_type, body = self._metrics(request.headers.get("accept", ""))
            return Answer(200, content_type, body)
        if request.path == "/healthz":
            why = self.state.health()
            return Answer(200 if why is None else 503, _TEXT, f"{why or 'ok'}\n".encode())
        if request.path == "/result":
            result = result_json(self.state, self.result_cache)
            if result is None:
                return Answer(503, _TEXT, b"no check has completed yet\n")
            return Answer(200, "application/json", result)
        return Answer(404, _TEXT, b"not found: try /metrics, /healthz or /result\n")

    def _metrics(self, accept: str) -> tuple[str, bytes]:
        """The metrics text for the scraper's Accept, made again when the state changed
        or ``METRICS_REUSE_S`` passed."""
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept)
        state = self.state
        with state.lock:
            key = (state.last, state.last_good, tuple(state.counts.values()),
                   state.last_success_time)
        now = time.monotonic()
        cached = self._metrics_cache.get(content_type)
        if cached is not None and now - cached[1] < METRICS_REUSE_S and \
                cached[0][0] is key[0] and cached[0][1] is key[1] and cached[0][2:] == key[2:]:
            return content_type, cached[2]
        body = encoder(self.registry)
        self._metrics_cache[content_type] = (key, now, body)
        return content_type, body


def result_json(state: WatchState, cache: list) -> bytes | None:
    """The last successful result as ``check --json`` prints it, made once per cycle
    (``cache``: [outcome, its JSON], the last one only)."""
    with state.lock:
        good = state.last_good
    if good is None or good.result is None:
        return None
    cached = cache[:]
    if cached and cached[0] is good:
        return cached[1]
    from gputriage.results.document import dumps

    body = (dumps(good.result, generated=good.started) + "\n").encode()
    cache[:] = [good, body]
    return body
