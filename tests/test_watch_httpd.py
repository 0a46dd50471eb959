"""The watch's bounded HTTP server (``gputriage.watch.httpd``) as a client sees it, on
127.0.0.1 with short limits: what it answers to heads HTTP forbids or it does not take
(400, 405, 413, 414, 431, 505), keep-alive and pipelining, the deadlines (a slowloris,
an idle connection, a client that never reads its answer) and the connection cap (who
is dropped to admit a new connection). The floods of issue 29 against a real
``gputriage watch`` are in tests/security/test_exporter.py."""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.watch.httpd import Answer, BoundedHTTPServer, Limits, Request, parse_head
from gputriage.watch.logs import WatchLog

WAIT_S = 10.0  # the longest a client waits here (each wait ends far sooner)
BIG = b"x" * (32 * 2**20)  # an answer larger than loopback's socket buffers together


def _handler(request: Request) -> Answer:
    if request.path == "/big":
        return Answer(200, "application/octet-stream", BIG)
    if request.path in ("/metrics", "/"):
        return Answer(200, "text/plain", f"{request.method} {request.path}\n".encode())
    return Answer(404, "text/plain", b"not found\n")


class Served:
    def __init__(self, limits: Limits) -> None:
        self.log = io.StringIO()
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        self.port = listener.getsockname()[1]
        self.server = BoundedHTTPServer(listener, _handler, limits, WatchLog(self.log))
        self.thread = threading.Thread(target=self.server.serve, daemon=True)
        self.thread.start()

    def connect(self, source: str = "127.0.0.1") -> Client:
        return Client(self.port, source)

    def open_count(self) -> int:
        return len(self.server.conns)

    def answering(self) -> int:
        """Connections whose answer is being written."""
        return sum(c.state == "writing" for c in list(self.server.conns.values()))

    def stop(self) -> None:
        self.server.stop()
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive()


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[Served] = []

    def start(**limits: Any) -> Served:
        started.append(Served(Limits(**limits)))
        return started[-1]

    yield start
    for served in started:
        served.stop()


class Client:
    """A connection from ``source`` and a buffered reader of its answers (pipelined
    answers are not lost between two reads)."""

    def __init__(self, port: int, source: str = "127.0.0.1") -> None:
        self.sock = socket.socket()
        self.sock.settimeout(WAIT_S)
        self.sock.bind((source, 0))
        self.sock.connect(("127.0.0.1", port))
        self.reader = self.sock.makefile("rb")

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.send(data)

    def answer(self, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
        """The next answer: status, headers, body (none for a HEAD)."""
        status_line = self.reader.readline()
        if not status_line:
            raise EOFError("closed before an answer")
        headers = {}
        while (line := self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.lower()] = value.strip()
        length = 0 if head_only else int(headers.get("content-length", "0"))
        return int(status_line.split()[1]), headers, self.reader.read(length)

    def closed(self) -> bool:
        """Whether the server closed the connection (EOF or a reset after any answer)."""
        try:
            while self.reader.read(65536):
                pass
        except ConnectionResetError:
            pass
        return True


def _wait_until(predicate: Any, within: float = WAIT_S) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


GET = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
LIMITS = Limits()


# --- heads -------------------------------------------------------------------------------

@pytest.mark.parametrize(("head", "status"), [
    (b"GET /metrics HTTP/1.1\r\nHost: x", None),
    (b"GET /metrics HTTP/1.0", None),  # HTTP/1.0 needs no Host
    (b"GET http://node:9479/metrics?x=1 HTTP/1.1\nHost: x", None),  # absolute form, LF only
    (b"GET /metrics HTTP/1.1", 400),  # no Host
    (b"GET  /metrics HTTP/1.1\r\nHost: x", 400),
    (b"GET /metrics\r\nHost: x", 400),  # HTTP/0.9
    (b"GET /m\xc3\xa9trics HTTP/1.1\r\nHost: x", 400),
    (b"GET metrics HTTP/1.1\r\nHost: x", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\n folded", 400),
    (b"GET /metrics HTTP/1.1\r\nHost : x", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\rInjected: y", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: \xb2", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"9" * 5000, 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0", None),
    (b"GET /metrics HTTP/2.0\r\nHost: x", 505),
    (b"POST /metrics HTTP/1.1\r\nHost: x", 405),
    (b"OPTIONS * HTTP/1.1\r\nHost: x", 405),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5", 413),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked", 413),
    (b"GET /" + b"a" * LIMITS.max_line_bytes + b" HTTP/1.1\r\nHost: x", 414),
    (b"GET / HTTP/1.1\r\nHost: x" + b"\r\nX: y" * LIMITS.max_headers, 431),
])
def test_heads(head: bytes, status: int | None) -> None:
    parsed = parse_head(head, LIMITS)
    if status is None:
        assert isinstance(parsed, Request) and parsed.path == "/metrics"
        assert parsed.keep_alive == (b"HTTP/1.1" in head)
    else:
        assert isinstance(parsed, Answer) and parsed.status == status


_PIECES = st.sampled_from([b"GET", b"HEAD", b" ", b"/metrics", b"HTTP/1.1", b"HTTP/9.9",
                           b"\r\n", b"\n", b"\r", b":", b"Host", b"Content-Length",
                           b"Transfer-Encoding", b"Connection", b"close", b"\t", b"\x00",
                           b"\xb2", b"9" * 30, b"?", b"#", b"http://h", b"*", b","])


@settings(max_examples=500)
@given(st.one_of(st.binary(max_size=600), st.lists(_PIECES, max_size=60).map(b"".join)))
def test_any_head_gets_an_answer_never_an_exception(head: bytes) -> None:
    parsed = parse_head(head, LIMITS)
    assert isinstance(parsed, (Request, Answer))
    if isinstance(parsed, Answer):
        assert 400 <= parsed.status < 600


@pytest.mark.slow  # waits out request deadlines
def test_garbage_costs_only_its_connection(serve: Any) -> None:
    served = serve(request_timeout_s=0.5)  # junk that never ends a head: 408
    for junk in (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" * 50,  # a TLS hello
                 b"\r\n" * 5000, b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"9" * 5000
                 + b"\r\n\r\n", bytes(range(256)) * 10):
        with served.connect() as sock:
            _send_quietly(sock.sock, junk)
            with contextlib.suppress(OSError, EOFError):
                assert sock.answer()[0] >= 400
    with served.connect() as sock:
        sock.send(GET)
        assert sock.answer()[0] == 200
    assert "HTTP connection failed" not in served.log.getvalue()


def test_only_get_and_head_are_answered_and_an_error_closes(serve: Any) -> None:
    served = serve()
    with served.connect() as sock:
        sock.send(b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, _ = sock.answer()
        assert (status, headers["allow"], headers["connection"]) == (405, "GET, HEAD", "close")
        assert sock.closed()
    with served.connect() as sock:
        sock.send(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n" + GET)  # pipelined
        status, headers, body = sock.answer(head_only=True)  # the length, no body
        assert (status, headers["content-length"], body) == (200, "14", b"")
        assert sock.answer()[2] == b"GET /metrics\n"
        sock.send(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")  # kept alive
        assert sock.answer()[0] == 404


@pytest.mark.parametrize(("head", "status"), [
    (b"GET /" + b"a" * 100_000, 414),  # no end of line in sight
    (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"a" * 5_000_000, 431),
    (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 100_000, 431),
])
def test_an_endless_head_is_answered_at_its_limit(serve: Any, head: bytes,
                                                  status: int) -> None:
    served = serve(linger_s=2.0)
    with served.connect() as sock:
        sender = threading.Thread(target=_send_quietly, args=(sock.sock, head), daemon=True)
        sender.start()
        assert sock.answer()[0] == status  # read while the client still sends
        assert sock.closed()
        sender.join(WAIT_S)
    assert _wait_until(lambda: served.open_count() == 0)


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the server closed: the rest is not its to hold
        sock.sendall(data)


@pytest.mark.parametrize("end", [b"\r\n\r\n", b"\n\n", b"\r\n\n", b"\n\r\n"])
def test_a_head_trickled_a_byte_per_read_is_answered(serve: Any, end: bytes) -> None:
    served = serve()  # each byte is looked at once: the blank line comes split over reads
    with served.connect() as sock:
        sock.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in b"\r\nGET /metrics HTTP/1.1\r\nHost: x" + end:
            sock.send(bytes([byte]))
            time.sleep(0.002)
        status, _, body = sock.answer()
        assert (status, body) == (200, b"GET /metrics\n")


# --- deadlines ---------------------------------------------------------------------------

def test_a_slowloris_is_cut_at_the_request_deadline(serve: Any) -> None:
    served = serve(request_timeout_s=0.6)
    with served.connect() as sock:
        start = time.monotonic()
        try:
            for byte in GET[:-2]:  # a byte every 0.1 s: each read is quick, the whole not
                sock.sock.send(bytes([byte]))
                time.sleep(0.1)
        except OSError:
            pass
        status, _, body = sock.answer()
        assert status == 408 and b"0.6 s" in body
        assert time.monotonic() - start < 2.0


def test_an_idle_kept_alive_connection_is_closed(serve: Any) -> None:
    served = serve(idle_timeout_s=0.3, request_timeout_s=5)
    with served.connect() as sock:
        sock.send(GET)
        assert sock.answer()[0] == 200
        start = time.monotonic()
        assert sock.closed() and time.monotonic() - start < 2.0


def test_an_answer_not_taken_is_dropped_at_the_write_deadline(serve: Any) -> None:
    served = serve(write_timeout_s=0.3)
    with served.connect() as sock:
        sock.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.send(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _wait_until(lambda: served.answering() == 1, 3.0)  # accepted, answering
        assert _wait_until(lambda: served.open_count() == 0, 3.0)  # never read: dropped


# --- the cap -----------------------------------------------------------------------------

def test_at_the_cap_the_busiest_address_loses_its_oldest(serve: Any) -> None:
    served = serve(max_connections=4)
    scraper = served.connect("127.0.0.2")  # kept alive between two scrapes
    scraper.send(GET)
    assert scraper.answer()[0] == 200
    flood = [served.connect("127.0.0.1") for _ in range(3)]
    for sock in flood:
        sock.send(b"GET /metrics HTTP/1.1\r\n")  # unfinished
    assert _wait_until(lambda: served.open_count() == 4)
    newest = served.connect("127.0.0.1")
    newest.send(GET)
    assert newest.answer()[0] == 200
    assert flood[0].closed()  # the flood's oldest made room, not the older scraper
    scraper.send(GET)
    assert scraper.answer()[0] == 200
    for sock in [scraper, newest, *flood]:
        sock.close()


def test_a_scrape_is_answered_while_a_flood_holds_every_slot(serve: Any) -> None:
    served = serve(max_connections=16, request_timeout_s=30)
    flood = []
    try:
        for _ in range(200):  # more than the cap, each holding a started request
            sock = served.connect()
            sock.send(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            flood.append(sock)
        for _ in range(5):
            start = time.monotonic()
            with served.connect() as sock:
                sock.send(GET)
                assert sock.answer()[0] == 200
            assert time.monotonic() - start < 1.0
        assert served.open_count() <= 16
        assert "HTTP connections at the cap" in served.log.getvalue()
    finally:
        for sock in flood:
            sock.close()
