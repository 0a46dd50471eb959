"""gputriage as a client of a hostile server (issue 29): ``npd --from`` against a
"watch" and ``k8s status`` against an "API server" that answer too much, JSON that
costs too much to decode, or a byte at a time. Each runs the real command in a child
process on 127.0.0.1 and bounds its peak memory (its own rusage) and its time."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
NPD_MEMORY_LIMIT_MIB = 256  # deploy/node-problem-detector/node-problem-detector.yaml

Answer = Callable[[socket.socket, threading.Event], None]


class Hostile:
    """A TCP server on 127.0.0.1 that reads a request head and answers with
    ``answer(conn, stopped)``, one thread per connection (a test server)."""

    def __init__(self, answer: Answer) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.stopped = threading.Event()
        self.answer = answer
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
            self.answer(conn, self.stopped)

    def stop(self) -> None:
        self.stopped.set()
        self.sock.close()


@pytest.fixture
def hostile() -> Iterator[Callable[[Answer], Hostile]]:
    started: list[Hostile] = []

    def start(answer: Answer) -> Hostile:
        started.append(Hostile(answer))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def streamed(total: int, unit: bytes, head: bytes, length: bool = True) -> Answer:
    """An HTTP 200 answer whose body is ``head`` then ``unit`` repeated to ``total``
    bytes, sent as fast as the client takes it (Content-Length announced or not)."""
    def answer(conn: socket.socket, stopped: threading.Event) -> None:
        fields = f"Content-Length: {total}\r\n" if length else "Connection: close\r\n"
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     + fields.encode() + b"\r\n" + head)
        block = unit * (65536 // len(unit))
        sent = len(head)
        while sent < total and not stopped.is_set():
            conn.sendall(block)
            sent += len(block)
    return answer


def run_measured(argv: list[str], timeout_s: float = 60.0
                 ) -> tuple[int, str, str, float, float]:
    """``gputriage ARGV`` in a child: exit status, stdout, stderr, peak RSS (MiB, the
    child's own rusage) and wall seconds; killed past ``timeout_s``."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "gputriage", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    streams: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda n=n, f=f: streams.__setitem__(n, f.read()))
               for n, f in (("out", proc.stdout), ("err", proc.stderr))]
    for reader in readers:
        reader.start()
    killer = threading.Timer(timeout_s, proc.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join()
    return (proc.returncode, streams["out"].decode(), streams["err"].decode(),
            usage.ru_maxrss / 1024, time.monotonic() - start)


# --- npd --from ------------------------------------------------------------------------

RESULT_HEAD = b'{"schema":"gputriage/result/v1","findings":['


@pytest.mark.parametrize("length", [True, False], ids=["announced", "unannounced"])
def test_npd_reads_no_more_than_a_result_can_be(hostile: Any, length: bool) -> None:
    # the issue: a 57 MiB body took 1.5 GB (the plugin's limit is 256 MiB)
    server = hostile(streamed(57 * 2**20, b"[],", RESULT_HEAD, length))
    code, out, err, peak, took = run_measured(["npd", "--from", server.url])
    assert peak < NPD_MEMORY_LIMIT_MIB / 2 and took < 30, (peak, took)
    assert code == 2 and out.startswith("UNKNOWN: watch: ") and "too much" in out, out
    assert err == ""


def test_npd_refuses_a_result_too_costly_to_decode(hostile: Any) -> None:
    from gputriage.watch.npd import RESULT_MAX_BYTES

    # under the byte cap, but 2 bytes a list: ~100 MiB as objects
    server = hostile(streamed(RESULT_MAX_BYTES - 16, b"[],", RESULT_HEAD))
    code, out, _, peak, _ = run_measured(["npd", "--from", server.url,
                                          "--max-length", "200"])
    assert peak < NPD_MEMORY_LIMIT_MIB / 2, peak
    assert code == 2 and "too costly to decode" in out and "MiB decoded" in out, out
