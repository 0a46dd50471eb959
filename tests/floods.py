"""Floods against a real ``gputriage watch --listen`` process, on 127.0.0.1 only, for the
exporter's tests (tests/security/test_exporter.py) and benchmarks/exporter_floods.py.

Each flood is bounded in connections and in time, and says what it held; the process
under test is measured from /proc (peak and current RSS, threads) and through its own
``/metrics`` (how many checks completed, how long a scrape took).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRAPE = b"GET /metrics HTTP/1.1\r\nHost: gputriage\r\nConnection: close\r\n\r\n"


def raise_fd_limit(wanted: int) -> bool:
    """Raise this process's open-file limit to ``wanted`` (within the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return True
    if hard != resource.RLIM_INFINITY and hard < wanted:
        return False
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return True


class WatchProcess:
    """``gputriage watch --snapshot SNAP --listen 127.0.0.1:0`` in a child process, its
    source tree ``src`` (this checkout's by default: another one measures another
    version)."""

    def __init__(self, snapshot: Path, interval_s: float = 1.0, src: Path | None = None,
                 wait_s: float = 60.0) -> None:
        env = {**os.environ, "PYTHONPATH": str(src or REPO / "src")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gputriage", "watch", "--snapshot", str(snapshot),
             "--interval", str(interval_s), "--listen", "127.0.0.1:0", "--no-history",
             "--log-format", "json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue[dict] = queue.Queue()
        threading.Thread(target=self._read_log, daemon=True).start()
        self.host, self.port = "127.0.0.1", 0
        end = time.monotonic() + wait_s
        while self.port == 0 or self.checks_done() < 1:
            line = self.lines.get(timeout=max(0.1, end - time.monotonic()))
            if line.get("msg") == "watching":
                self.port = int(str(line["fields"]["listen"]).rsplit(":", 1)[1])

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with contextlib.suppress(ValueError):
                self.lines.put(json.loads(line))

    def status(self) -> dict[str, int]:
        """VmRSS and VmHWM (KiB) and Threads of the process now."""
        out = {}
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM", "Threads"):
                    out[key] = int(value.split()[0])
        return out

    def scrape(self, timeout_s: float = 30.0) -> tuple[bytes, float]:
        """``GET /metrics`` on a new connection: the answer and how long it took
        (connect included); b"" when not answered in time."""
        return scrape(self.host, self.port, timeout_s)

    def checks_done(self) -> int:
        """Checks that completed, as the process's /metrics counts them."""
        answer, _ = self.scrape()
        for line in answer.decode(errors="replace").splitlines():
            if line.startswith('gputriage_checks_total{outcome="ok"}'):
                return int(float(line.split()[-1]))
        return 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)


def scrape(host: str, port: int, timeout_s: float = 30.0) -> tuple[bytes, float]:
    start = time.monotonic()
    answer = b""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.sendall(SCRAPE)
            while chunk := conn.recv(65536):
                answer += chunk
                if time.monotonic() - start > timeout_s:
                    return b"", time.monotonic() - start
    except OSError:
        return b"", time.monotonic() - start
    return answer, time.monotonic() - start


def _connect_all(host: str, port: int, count: int, within_s: float = 60.0,
                 wave: int = 8) -> list[socket.socket]:
    """``count`` connections (non-blocking), made ``wave`` at a time so that a server
    with a short accept queue is not refused more than a real client would be; those
    established within ``within_s``."""
    done: list[socket.socket] = []
    end = time.monotonic() + within_s
    while len(done) < count and time.monotonic() < end:
        pending = []
        for _ in range(min(wave, count - len(done))):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.connect_ex((host, port))
            pending.append(sock)
        while pending and time.monotonic() < end:
            for sock in _writable(pending, 0.2):
                pending.remove(sock)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    done.append(sock)
                else:
                    sock.close()
        for sock in pending:
            sock.close()
    return done


def _writable(socks: list[socket.socket], timeout_s: float) -> list[socket.socket]:
    """The sockets of ``socks`` that can be written to (poll: no limit on descriptors)."""
    poller = select.poll()
    by_fd = {s.fileno(): s for s in socks}
    for fd in by_fd:
        poller.register(fd, select.POLLOUT)
    return [by_fd[fd] for fd, _ in poller.poll(timeout_s * 1000)]


@contextlib.contextmanager
def idle_connections(host: str, port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections that send nothing, held open for the block."""
    socks = _connect_all(host, port, count)
    try:
        yield socks
    finally:
        for sock in socks:
            sock.close()


@contextlib.contextmanager
def big_headers(host: str, port: int, count: int, header_bytes: int,
                within_s: float = 30.0) -> Iterator[int]:
    """``count`` connections, each sending one request head of ``header_bytes`` of header
    lines (60 KiB each, under http.server's line limit) without its closing blank line,
    then held open for the block; yields the bytes the server took before the block."""
    socks = _connect_all(host, port, count)
    line = memoryview(b"X-Pad: " + b"a" * (60 * 1024) + b"\r\n")
    left = {s: header_bytes for s in socks}
    offset = dict.fromkeys(socks, 0)  # where in the line each connection is
    sent = 0
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.send(b"GET /metrics HTTP/1.1\r\nHost: gputriage\r\n")
    end = time.monotonic() + within_s
    try:
        while left and time.monotonic() < end:
            for sock in _writable(list(left), 0.5):
                try:
                    n = sock.send(line[offset[sock]:])
                except BlockingIOError:
                    continue
                except OSError:  # the server refused the head and closed
                    del left[sock]
                    continue
                sent += n
                offset[sock] = (offset[sock] + n) % len(line)
                left[sock] -= n
                if left[sock] <= 0 and offset[sock] == 0:
                    del left[sock]
        yield sent
    finally:
        for sock in socks:
            sock.close()


@contextlib.contextmanager
def slowloris(host: str, port: int, count: int, every_s: float = 1.0) -> Iterator[dict]:
    """``count`` connections that each send a request head one header byte every
    ``every_s`` (reconnecting when cut), for the block; yields counters: ``open``,
    ``cut`` (connections the server closed)."""
    stats = {"open": 0, "cut": 0}
    stop = threading.Event()

    def run() -> None:
        socks = _connect_all(host, port, count)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.send(b"GET /metrics HTTP/1.1\r\nHost: gputriage\r\nX-Slow: ")
        stats["open"] = len(socks)
        while not stop.wait(every_s):
            for i, sock in enumerate(socks):
                try:
                    sock.send(b"a")
                except OSError:
                    stats["cut"] += 1
                    sock.close()
                    with contextlib.suppress(OSError):
                        socks[i] = socket.create_connection((host, port), timeout=1)
                        socks[i].setblocking(False)
                        socks[i].send(b"GET /metrics HTTP/1.1\r\nHost: gputriage\r\nX-Slow: ")
        for sock in socks:
            sock.close()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        yield stats
    finally:
        stop.set()
        worker.join(60)
