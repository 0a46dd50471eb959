"""gputriage.io.netbounds: the JSON cost bound holds for the shapes that cost the most per
byte, the byte cap stops a read, and the deadline cuts a read that each socket timeout
would let go on."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import tracemalloc

import pytest

from gputriage.io.netbounds import Deadline, TooLarge, json_cost, loads_within, read_capped

N = 20_000
SHAPES = {
    "empty dicts": b"[" + b",".join([b"{}"] * N) + b"]",
    "empty lists": b"[" + b",".join([b"[]"] * N) + b"]",
    "nested lists": b"[" + b",".join([b"[[[]]]"] * N) + b"]",
    "nested dicts": b"[" + b",".join([b'{"a":{"b":{}}}'] * N) + b"]",
    "unique keys": b"{" + b",".join(b'"k%d":0' % i for i in range(N)) + b"}",
    "unique strings": b"[" + b",".join(b'"%d"' % i for i in range(N)) + b"]",
    "floats": b"[" + b",".join([b"1.5"] * N) + b"]",
    "big ints": b"[" + b",".join([b"123456789012345678901234567890"] * N) + b"]",
    "astral text": b'["' + b"a" * (4 * N) + "\U0001f600".encode() + b'"]',
    "escaped astral": b'["' + b"\\ud83d\\ude00" * N + b'"]',
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_cost_bound_holds(name: str) -> None:
    data = SHAPES[name]
    tracemalloc.start()
    try:
        doc = json.loads(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert doc
    assert peak <= json_cost(data), f"{name}: {peak} > {json_cost(data)}"


def test_a_document_over_its_budget_is_not_decoded() -> None:
    data = SHAPES["empty lists"]
    with pytest.raises(TooLarge, match="decoded"):
        loads_within(data, len(data) * 10)
    assert loads_within(b'{"a": [1, 2]}', 2**20) == {"a": [1, 2]}
    with pytest.raises(ValueError, match="nested"):
        loads_within(b"[" * 100 + b"]" * 100, 2**20)


def test_the_byte_cap() -> None:
    chunks = iter([b"a" * 1000] * 10)
    with pytest.raises(TooLarge, match="more than"):
        read_capped(lambda n: next(chunks, b"")[:n], 5000)
    with pytest.raises(TooLarge, match="announced"):
        read_capped(lambda n: pytest.fail("read"), 5000, length=5001)
    chunks = iter([b"a" * 1000] * 3)
    assert len(read_capped(lambda n: next(chunks, b"")[:n], 5000)) == 3000


def test_the_deadline_cuts_a_read_that_each_timeout_lets_go_on() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = server.accept()
        with conn:
            while not stop.wait(0.05):
                try:
                    conn.send(b"x")
                except OSError:
                    return

    threading.Thread(target=trickle, daemon=True).start()
    try:
        with socket.create_connection(server.getsockname(), timeout=5) as sock, \
                Deadline(0.5) as deadline:
            deadline.hold(sock)
            start = time.monotonic()
            # each read is quick: only the deadline ends this, with the end of the stream
            # or, when the peer's next byte meets the cut connection, a reset
            with contextlib.suppress(ConnectionResetError):
                while sock.recv(1):
                    assert time.monotonic() - start < 5
            assert deadline.cut and 0.4 < time.monotonic() - start < 2
    finally:
        stop.set()
        server.close()
