"""A hostile HTTP server on 127.0.0.1 for the client tests (``npd --from`` against a
watch, ``k8s status`` against an API server: tests/test_watch_npd.py,
tests/security/test_clients.py) and benchmarks/client_bounds.py: it reads a request head
and answers whatever it is told to, garbage, too much, or a byte at a time."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

Answer = Callable[[socket.socket, threading.Event], None]
Routed = Callable[[str], Answer]


class Hostile:
    """A TCP server on 127.0.0.1 that reads a request head and answers with
    ``answer(conn, stopped)``, one thread per connection (a test server)."""

    def __init__(self, answer: Answer | Routed, routed: bool = False) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.stopped = threading.Event()
        self.answer = answer
        self.routed = routed  # answer(path) gives the answer for the path asked
        self.asked: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the client gave up
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            path = head.split(b" ", 2)[1].decode(errors="replace") if b" " in head else ""
            self.asked.append(path)
            answer = self.answer(path.split("?")[0]) if self.routed else self.answer
            answer(conn, self.stopped)  # type: ignore[call-arg]

    def stop(self) -> None:
        self.stopped.set()
        self.sock.close()


@pytest.fixture
def serve_hostile() -> Iterator[Callable[..., Hostile]]:
    """``serve_hostile(answer, routed=False)`` starts a server, stopped after the test."""
    started: list[Hostile] = []

    def start(answer: Answer | Routed, routed: bool = False) -> Hostile:
        started.append(Hostile(answer, routed))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def streamed(total: int, unit: bytes, head: bytes, length: bool = True,
             tail: bytes = b"", status: str = "200 OK") -> Answer:
    """An HTTP answer whose body is ``head``, ``unit`` repeated, ``tail``: ``total`` bytes
    (about), sent as fast as the client takes it (Content-Length announced or not)."""
    repeats = max(0, total - len(head) - len(tail)) // len(unit)
    size = len(head) + repeats * len(unit) + len(tail)

    def answer(conn: socket.socket, stopped: threading.Event) -> None:
        fields = f"Content-Length: {size}\r\n" if length else "Connection: close\r\n"
        conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n".encode()
                     + fields.encode() + b"\r\n" + head)
        per_block = max(1, 65536 // len(unit))
        left = repeats
        while left and not stopped.is_set():
            n = min(per_block, left)
            conn.sendall(unit * n)
            left -= n
        conn.sendall(tail)
    return answer


def trickled(head: bytes, every_s: float, line: bytes) -> Answer:
    """``head`` at once, then ``line`` every ``every_s`` seconds, for ever."""
    def answer(conn: socket.socket, stopped: threading.Event) -> None:
        conn.sendall(head)
        while not stopped.wait(every_s):
            conn.sendall(line)
    return answer
