"""The watch's HTTP endpoints, on ``--listen ADDR:PORT``.

``/metrics``  the Prometheus metrics (text format, or OpenMetrics when asked for)
``/healthz``  200 ``ok`` while checks complete in time; 503 and the reason otherwise
``/result``   the last successful check's result, as ``check --json`` prints it
              (``gputriage/result/v1``); 503 before the first

Only GET (and HEAD) are answered; a request never reaches the check, it reads what the
last cycle left. A connection idle for ``HANDLER_TIMEOUT_S`` is closed (its thread
ends); a client gone mid-answer is no error; any other error is one line in the log.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputriage.watch.loop import WatchState

__all__ = ["HANDLER_TIMEOUT_S", "ListenError", "WatchServer", "parse_listen"]

HANDLER_TIMEOUT_S = 30.0  # a connection silent this long is closed


class ListenError(Exception):
    """A --listen address that cannot be used (malformed, unknown, in use)."""


def parse_listen(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` → (host, port): ``:PORT`` is every address, ``[::1]:PORT`` an IPv6
    address; port 0 asks the system for a free one."""
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ListenError(f"{text!r}: expected [IPv6]:PORT")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ListenError(f"{text!r}: expected ADDR:PORT or :PORT")
        if ":" in host:
            raise ListenError(f"{text!r}: write an IPv6 address in brackets, [ADDR]:PORT")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ListenError(f"{text!r}: the port must be a number from 0 to 65535")
    return host, int(port_text)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    watch_state: Any = None
    registry: Any = None
    result_cache: list = []  # set per server
    log: Any = None  # the watch's log

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Not socketserver's traceback on stderr: a client that went away (or timed
        out) is nothing, anything else one log line."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)) or self.log is None:
            return
        self.log.error("HTTP request failed", client=str(client_address[0]),
                       error=f"{type(exc).__name__}: {exc}")

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6 and self.server_address[0] == "::":
            with contextlib.suppress(OSError):  # ":PORT": IPv4 too, where allowed
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def _bind(host: str, port: int) -> _Server:
    """The server bound to (host, port): the first address the name resolves to."""
    candidates: list[tuple[Any, str]]
    if host == "":
        candidates = [(socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        except (socket.gaierror, UnicodeError) as exc:
            raise ListenError(f"{host!r}: not an address here ({exc})") from None
        candidates = [(family, str(addr[0])) for family, _, _, _, addr in infos
                      if family in (socket.AF_INET, socket.AF_INET6)]
    problem: OSError | None = None
    for family, addr in candidates:
        server_class = type("_BoundServer", (_Server,), {"address_family": family})
        try:
            return server_class((addr, port), _Handler)
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
    """The HTTP server in a daemon thread of its own."""

    def __init__(self, listen: str, state: WatchState, registry: Any, *,
                 log: Any = None) -> None:
        host, port = parse_listen(listen)
        self.httpd = _bind(host, port)
        self.httpd.watch_state = state
        self.httpd.registry = registry
        self.httpd.result_cache = []
        if log is None:
            from gputriage.watch.logs import WatchLog

            log = WatchLog(sys.stderr)
        self.httpd.log = log
        self.thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        """Where it listens, as ADDR:PORT (the real port when 0 was asked)."""
        host, port = self.httpd.server_address[:2]
        return _show(str(host), int(port))

    def start(self) -> None:
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.2}, daemon=True,
                                       name="gputriage-http")
        self.thread.start()

    def stop(self) -> None:
        if self.thread is not None:
            self.httpd.shutdown()
            self.thread.join(timeout=5)
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "gputriage-watch"
    protocol_version = "HTTP/1.1"
    timeout = HANDLER_TIMEOUT_S  # each read and write of the connection

    def do_GET(self) -> None:  # noqa: N802 - the http.server interface
        self._answer(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(head=True)

    def _answer(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            from prometheus_client.exposition import choose_encoder

            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._send(200, content_type, encoder(self.server.registry), head)
        elif path == "/healthz":
            why = self.server.watch_state.health()
            self._send(200 if why is None else 503, "text/plain; charset=utf-8",
                       f"{why or 'ok'}\n".encode(), head)
        elif path == "/result":
            body = result_json(self.server.watch_state, self.server.result_cache)
            if body is None:
                self._send(503, "text/plain; charset=utf-8", b"no check has completed yet\n",
                           head)
            else:
                self._send(200, "application/json", body, head)
        else:
            self._send(404, "text/plain; charset=utf-8",
                       b"not found: try /metrics, /healthz or /result\n", head)

    def _send(self, code: int, content_type: str, body: bytes, head: bool) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # a scrape every few seconds is not worth a log line


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
    from gputriage.views.jsonview import dumps

    body = (dumps(good.result, generated=good.started) + "\n").encode()
    cache[:] = [good, body]
    return body
