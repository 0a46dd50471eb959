"""A bounded HTTP/1.1 server for a few GET endpoints: one thread, one selector.

It is made to listen on a host network, where whoever reaches the port is a client:

- **One thread** serves every connection (non-blocking sockets under ``selectors``):
  thousands of idle connections cost no thread, and the rest of the process (the check
  loop) never waits on a client.
- **At most** ``max_connections`` **open.** At the cap, a new connection is admitted by
  dropping one that is not being answered: first one lingering after its answer, then
  the oldest waiting for its request among the peer address that holds the most
  connections (a flood from one address evicts its own), then the oldest anywhere. A
  scraper sends its request at once and is answered within milliseconds, so it is
  served while a flood holds every other slot.
- **Fixed memory per connection:** the request head is read into a buffer of at most
  ``max_head_bytes`` (a longer request line: 414; a longer head or more than
  ``max_headers`` lines: 431), no request body is taken (413), and a connection is not
  read while its answer is written (a pipelined request waits in the kernel).
- **Bounded time:** the head must be complete ``request_timeout_s`` after its request
  began (a slowloris trickling a byte a second is cut: 408), a kept-alive connection
  waits ``idle_timeout_s`` for its next request, an answer must be taken within
  ``write_timeout_s``.
- **Only GET and HEAD** (405 otherwise); the handler answers the paths it serves. An
  error answer closes the connection, after reading for at most ``linger_s`` what the
  client still sends (closing with unread data would reset the connection and could
  destroy the answer before the client reads it).
"""

from __future__ import annotations

import contextlib
import errno
import re
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

from gputriage.text.fields import strict_int

__all__ = ["Answer", "BoundedHTTPServer", "Limits", "Request", "parse_head"]


@dataclass(frozen=True)
class Limits:
    """What one server holds at most, and for how long."""

    max_connections: int = 128
    max_line_bytes: int = 4096  # the request line (414 beyond)
    max_head_bytes: int = 16384  # request line and header lines together (431 beyond)
    max_headers: int = 64  # header lines (431 beyond)
    request_timeout_s: float = 10.0  # from the accept (or a kept-alive request's first
    # byte) to the blank line that ends the head
    idle_timeout_s: float = 30.0  # a kept-alive connection waiting for its next request
    write_timeout_s: float = 10.0  # from an answer's first byte to its last
    linger_s: float = 1.0  # reading what a client still sends before closing
    # connections the kernel queues before they are accepted: a short queue overflows in
    # a burst of connects, and each SYN it drops waits a second for its retry
    backlog: int = 1024


@dataclass(frozen=True)
class Request:
    """A request head that passed every check."""

    method: str  # GET or HEAD
    path: str  # the target's path, without its query
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    keep_alive: bool = True  # HTTP/1.1 without "Connection: close"


@dataclass(frozen=True)
class Answer:
    """What the handler answers: a status, its body and the body's type."""

    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Answer]

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(rb"HTTP/([0-9])\.([0-9])")
_TARGET = re.compile(rb"[\x21-\x7e]+")
_ABSOLUTE = re.compile(rb"https?://[^/?#]*", re.IGNORECASE)
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_ACCEPT_BATCH = 64  # connections accepted per wake-up, so that reads are not starved
_LINGER_BYTES = 65536  # the most read (and dropped) while lingering
_RECV_BYTES = 65536
_RETRY_ACCEPT_S = 0.1  # out of file descriptors: accepting pauses this long
_CAP_LOG_EVERY_S = 60.0
_NOT_ENOUGH = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def _error(status: int, why: str) -> Answer:
    return Answer(status, "text/plain; charset=utf-8", f"{why}\n".encode())


def parse_head(head: bytes, limits: Limits) -> Request | Answer:
    """A request head (without its blank line) → the request, or the error answer it
    deserves (400, 405, 413, 414, 431, 505)."""
    lines = [ln[:-1] if ln.endswith(b"\r") else ln for ln in head.split(b"\n")]
    line, fields = lines[0], lines[1:]
    if len(line) > limits.max_line_bytes:
        return _error(414, f"request line longer than {limits.max_line_bytes} bytes")
    if len(head) > limits.max_head_bytes or len(fields) > limits.max_headers:
        return _error(431, f"request head over {limits.max_head_bytes} bytes or "
                           f"{limits.max_headers} header lines")
    parts = line.split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or \
            not _TARGET.fullmatch(parts[1]) or not (version := _VERSION.fullmatch(parts[2])):
        return _error(400, "malformed request line")
    if version.group(1) != b"1":
        return _error(505, "HTTP/1.1 only")
    method = parts[0].decode()
    if method not in ("GET", "HEAD"):
        return Answer(405, "text/plain; charset=utf-8", b"only GET and HEAD\n",
                      (("Allow", "GET, HEAD"),))
    path = _path(parts[1])
    if path is None:
        return _error(400, "the target is not a path")
    headers: dict[str, str] = {}
    for ln in fields:
        name, colon, value = ln.partition(b":")
        if not colon or not _TOKEN.fullmatch(name) or b"\r" in value or b"\0" in value:
            return _error(400, "malformed header line")  # also a folded line
        key = name.decode().lower()
        text = value.strip(b" \t").decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    if version.group(2) != b"0" and "host" not in headers:
        return _error(400, "an HTTP/1.1 request needs a Host header")
    length_text = headers.get("content-length")
    length = None if length_text is None else strict_int(length_text, signed=False)
    if length_text is not None and length is None:
        return _error(400, "malformed Content-Length")
    if "transfer-encoding" in headers or length:
        return _error(413, "a request body is not accepted")
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    # HTTP/1.1 keeps the connection unless told "close"; HTTP/1.0 closes it
    return Request(method, path, headers, version.group(2) != b"0" and "close" not in tokens)


def _path(target: bytes) -> str | None:
    """The path of an origin-form (``/metrics?x``) or absolute-form target."""
    if not target.startswith(b"/"):
        absolute = _ABSOLUTE.match(target)
        if absolute is None:
            return None
        target = target[absolute.end():] or b"/"
        if not target.startswith(b"/"):
            target = b"/" + target
    return target.split(b"?", 1)[0].split(b"#", 1)[0].decode()


_READING, _WRITING, _LINGERING = "reading", "writing", "lingering"


class _Conn:
    """One connection: what it has sent of its request, what is left of its answer."""

    __slots__ = ("buf", "close_after", "deadline", "fd", "lingered", "out", "peer",
                 "scanned", "since", "sock", "started", "state")

    def __init__(self, sock: socket.socket, peer: str, now: float, limits: Limits) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.buf = bytearray()
        self.scanned = 0  # how much of buf holds no end of a head (each byte looked at once)
        self.state = _READING
        self.since = now  # when it began waiting for its current request
        self.started = True  # the request's clock runs (from the accept, for the first)
        self.deadline = now + limits.request_timeout_s
        self.out: list[memoryview] = []
        self.close_after = False
        self.lingered = 0


class BoundedHTTPServer:
    """Serves ``handler`` on ``listener`` (a bound socket) until :meth:`stop`;
    :meth:`serve` is the loop, run in a thread of its own. The handler runs in that
    thread: it must answer from what it has, at once."""

    def __init__(self, listener: socket.socket, handler: Handler, limits: Limits,
                 log: Any = None, name: str = "gputriage") -> None:
        self.listener = listener
        self.handler = handler
        self.limits = limits
        self.log = log
        self.name = name
        self.conns: dict[int, _Conn] = {}
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = False
        self._accept_paused_until = 0.0
        self._dropped = 0  # connections dropped at the cap since the last log line
        self._cap_logged = -_CAP_LOG_EVERY_S
        listener.listen(limits.backlog)
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ, "accept")
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")

    # -- the loop ---------------------------------------------------------------------------

    def serve(self) -> None:
        """Serve until :meth:`stop`; then close every connection and the listener."""
        try:
            while not self._stopping:
                now = time.monotonic()
                self._expire(now)
                self._resume_accept(now)
                for key, mask in self.selector.select(self._wait(now)):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    else:
                        self._event(key.data, mask)
        finally:
            for conn in list(self.conns.values()):
                self._close(conn)
            self.selector.close()
            self.listener.close()
            self._wake_r.close()
            self._wake_w.close()

    def stop(self) -> None:
        """End :meth:`serve` (from another thread)."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _wait(self, now: float) -> float:
        due = [c.deadline for c in self.conns.values()]
        if self._accept_paused_until:
            due.append(self._accept_paused_until)
        return max(0.0, min(1.0, min(due, default=now + 1.0) - now))

    def _expire(self, now: float) -> None:
        for conn in [c for c in self.conns.values() if c.deadline <= now]:
            if conn.state == _READING and conn.buf:
                # best effort, never waited on: a slowloris is told why it is cut
                late = _error(408, f"request not complete in {self.limits.request_timeout_s:g} s")
                with contextlib.suppress(OSError):
                    conn.sock.send(b"".join(self._render(late, False, True)))
            self._close(conn)

    def _event(self, conn: _Conn, mask: int) -> None:
        try:
            if conn.state == _READING and mask & selectors.EVENT_READ:
                self._read(conn)
            elif conn.state == _LINGERING:
                self._linger(conn)
            if conn.state == _WRITING:
                self._pump(conn)
        except OSError:  # reset, broken pipe: the client went away
            self._close(conn)
        except Exception as exc:  # a bug costs its connection, not the server
            if self.log is not None:
                self.log.error("HTTP connection failed", client=conn.peer,
                               error=f"{type(exc).__name__}: {exc}")
            self._close(conn)

    # -- connections ------------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno in _NOT_ENOUGH:  # out of descriptors: pause, do not spin
                    self.selector.unregister(self.listener)
                    self._accept_paused_until = time.monotonic() + _RETRY_ACCEPT_S
                    self._warn("HTTP accept paused", error=f"{type(exc).__name__}: {exc}")
                return
            self._admit(sock, str(addr[0]) if isinstance(addr, tuple) else "")

    def _resume_accept(self, now: float) -> None:
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self.selector.register(self.listener, selectors.EVENT_READ, "accept")

    def _admit(self, sock: socket.socket, peer: str) -> None:
        now = time.monotonic()
        if len(self.conns) >= self.limits.max_connections:
            self._close(self._victim())
            self._dropped += 1
            if now - self._cap_logged >= _CAP_LOG_EVERY_S:
                self._warn("HTTP connections at the cap: dropping unanswered ones",
                           cap=self.limits.max_connections, dropped=self._dropped)
                self._cap_logged, self._dropped = now, 0
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(sock, peer, now, self.limits)
        self.conns[conn.fd] = conn
        self.selector.register(sock, selectors.EVENT_READ, conn)

    def _victim(self) -> _Conn:
        """The connection dropped for a new one (see the module's docstring)."""
        conns = list(self.conns.values())
        lingering = [c for c in conns if c.state == _LINGERING]
        if lingering:
            return min(lingering, key=lambda c: c.since)
        waiting = [c for c in conns if c.state == _READING]
        if not waiting:
            return min(conns, key=lambda c: c.since)
        held: dict[str, int] = {}
        for c in conns:
            held[c.peer] = held.get(c.peer, 0) + 1
        return max(waiting, key=lambda c: (held[c.peer], -c.since))

    def _close(self, conn: _Conn) -> None:
        if self.conns.pop(conn.fd, None) is None:
            return
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.selector.unregister(conn.sock)
        conn.sock.close()
        conn.state = "closed"
        conn.buf = bytearray()
        conn.out = []

    # -- reading a request ------------------------------------------------------------------

    def _read(self, conn: _Conn) -> None:
        room = self.limits.max_head_bytes + 1 - len(conn.buf)
        try:
            data = conn.sock.recv(max(1, min(room, _RECV_BYTES)))
        except BlockingIOError:
            return
        if not data:
            self._close(conn)
            return
        if not conn.started:  # a kept-alive connection's next request begins
            conn.started = True
            conn.deadline = time.monotonic() + self.limits.request_timeout_s
        conn.buf += data
        self._parse(conn)

    def _parse(self, conn: _Conn) -> None:
        """Answer the request in the buffer once its head is complete (or too long)."""
        limits = self.limits
        if conn.buf[:1] in (b"\r", b"\n"):  # empty lines before a request are ignored
            del conn.buf[:len(conn.buf) - len(conn.buf.lstrip(b"\r\n"))]
            conn.scanned = 0
        # from just before what the last look ended at: a head trickled a byte per read
        # is scanned once, not once per byte
        end = _HEAD_END.search(conn.buf, max(0, conn.scanned - 3))
        if end is None:
            conn.scanned = len(conn.buf)
            if conn.buf.find(b"\n") < 0 and len(conn.buf) > limits.max_line_bytes:
                self._answer(conn, _error(414, "request line longer than "
                                               f"{limits.max_line_bytes} bytes"), False, True)
            elif len(conn.buf) > limits.max_head_bytes:
                self._answer(conn, _error(431, "request head over "
                                               f"{limits.max_head_bytes} bytes"), False, True)
            return
        head = bytes(conn.buf[:end.start()])
        del conn.buf[:end.end()]
        conn.scanned = 0
        parsed = parse_head(head, limits)
        if isinstance(parsed, Answer):
            self._answer(conn, parsed, False, True)
            return
        try:
            answer = self.handler(parsed)
        except Exception as exc:  # a bug answers 500, the server goes on
            if self.log is not None:
                self.log.error("HTTP request failed", client=conn.peer,
                               error=f"{type(exc).__name__}: {exc}")
            self._answer(conn, _error(500, "internal error"), False, True)
            return
        self._answer(conn, answer, parsed.method == "HEAD", not parsed.keep_alive)

    # -- answering --------------------------------------------------------------------------

    def _render(self, answer: Answer, head_only: bool, close: bool) -> list[memoryview]:
        lines = [f"HTTP/1.1 {answer.status} {HTTPStatus(answer.status).phrase}",
                 f"Server: {self.name}", f"Date: {formatdate(usegmt=True)}",
                 f"Content-Type: {answer.content_type}",
                 f"Content-Length: {len(answer.body)}", "Cache-Control: no-store",
                 *(f"{k}: {v}" for k, v in answer.headers)]
        if close:
            lines.append("Connection: close")
        out = [memoryview(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))]
        if not head_only and answer.body:
            out.append(memoryview(answer.body))
        return out

    def _answer(self, conn: _Conn, answer: Answer, head_only: bool, close: bool) -> None:
        """Queue the answer; :meth:`_pump` writes it."""
        conn.out = self._render(answer, head_only, close)
        conn.close_after = close
        conn.state = _WRITING
        conn.deadline = time.monotonic() + self.limits.write_timeout_s
        self.selector.modify(conn.sock, selectors.EVENT_WRITE, conn)

    def _pump(self, conn: _Conn) -> None:
        """Write what the socket takes; an answer written, take the next pipelined
        request already in the buffer (a loop, not a recursion)."""
        while conn.state == _WRITING:
            while conn.out:
                try:
                    sent = conn.sock.send(conn.out[0])
                except BlockingIOError:
                    return
                if sent < len(conn.out[0]):
                    conn.out[0] = conn.out[0][sent:]
                    return
                conn.out.pop(0)
            self._answered(conn)
            if conn.state == _READING and conn.buf:
                self._parse(conn)

    def _answered(self, conn: _Conn) -> None:
        now = time.monotonic()
        if conn.close_after:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_WR)
            conn.state = _LINGERING
            conn.deadline = now + self.limits.linger_s
            conn.buf = bytearray()
        else:
            conn.state = _READING
            conn.since = now
            conn.started = bool(conn.buf)  # a pipelined request already began
            conn.deadline = now + (self.limits.request_timeout_s if conn.started
                                   else self.limits.idle_timeout_s)
        self.selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def _linger(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(_RECV_BYTES)
        except BlockingIOError:
            return
        conn.lingered += len(data)
        if not data or conn.lingered > _LINGER_BYTES:
            self._close(conn)

    def _warn(self, msg: str, **fields: Any) -> None:
        if self.log is not None:
            self.log.warning(msg, **fields)
