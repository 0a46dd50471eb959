"""Bounds on what gputriage reads from a server (a watch's ``/result`` for ``npd
--from``, the Kubernetes API server for ``k8s status``): one deadline for a whole
exchange, a cap on the bytes of a body, a budget for decoding it as JSON.

- A socket timeout bounds one read: a server that sends a byte every few seconds never
  trips it. :class:`Deadline` shuts down the sockets of an exchange when its time is up
  (and every ``CUT_EVERY_S`` after, for a socket opened meanwhile), so that a read
  blocked on them returns at once. It holds a duplicate of each socket's descriptor:
  the cut reaches the connection even while TLS wraps it, and never another file.
- :func:`read_capped` reads a body in chunks and stops past its cap; an announced
  Content-Length over the cap is refused before a byte of the body is read.
- JSON costs more as Python objects than as text: about 25 times for ``[{},{},...]``
  (a dict and a pointer for 3 bytes), 35 for ``[[[]]],...``. :func:`json_cost` bounds
  that cost from the text alone, counting its structural characters and bytes at C
  speed, and :func:`loads_within` refuses undecoded a text whose bound exceeds its
  budget. Real documents cost 3 to 5 times their size; the bound says 13 to 16.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from gputriage.io import safejson

__all__ = ["CUT_EVERY_S", "Deadline", "TooLarge", "json_cost", "loads_within", "read_capped"]

CUT_EVERY_S = 0.2
CHUNK_BYTES = 256 * 1024
# The most one JSON value costs beyond its text, in bytes (measured on CPython 3.10-3.13:
# under 80 for an empty dict or list with its pointer, a one-key dict, a new key string).
_PER_VALUE = 100
# the text decoded to one str (4 bytes a character when one is astral), and a string
# value as long as the text, as wide
_PER_BYTE = 8
_FIXED = 16384  # the decoder's own


class TooLarge(ValueError):
    """A body over its byte cap, or a document over its decoding budget."""


def json_cost(data: bytes | bytearray) -> int:
    """An upper bound of the memory ``json.loads(data)`` takes, in bytes."""
    values = sum(data.count(c) for c in (b"[", b"{", b",", b":"))
    return _PER_VALUE * values + _PER_BYTE * len(data) + _FIXED


def loads_within(data: bytes | bytearray, budget: int) -> Any:
    """``safejson.loads(data)``; TooLarge when its cost bound exceeds ``budget`` bytes
    (nothing is decoded then), ValueError when it is not JSON."""
    cost = json_cost(data)
    if cost > budget:
        raise TooLarge(f"{len(data) / 2**20:.1f} MiB of JSON would take up to "
                       f"{cost / 2**20:.0f} MiB decoded (the budget is "
                       f"{budget / 2**20:.0f} MiB)")
    return safejson.loads(data)


def read_capped(read: Callable[[int], bytes], cap: int, length: int | None = None
                ) -> bytearray:
    """What ``read(n)`` returns until it returns nothing, at most ``cap`` bytes;
    TooLarge past that, or at once when the announced ``length`` is over it."""
    if length is not None and length > cap:
        raise TooLarge(f"announced {length / 2**20:.1f} MiB, more than "
                       f"{cap / 2**20:g} MiB")
    body = bytearray()
    while chunk := read(min(CHUNK_BYTES, cap + 1 - len(body))):
        body += chunk
        if len(body) > cap:
            raise TooLarge(f"more than {cap / 2**20:g} MiB")
    return body


class Deadline:
    """``with Deadline(seconds) as deadline:`` an exchange; ``deadline.hold(sock)`` each
    socket it opens. Past the deadline those sockets are shut down (reads and writes on
    them fail at once) and :attr:`expired` is true."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self._held: list[socket.socket] = []  # duplicates, closed at the end
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self.cut = False

    @property
    def expired(self) -> bool:
        return self.cut or time.monotonic() >= self.end

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def hold(self, sock: socket.socket) -> None:
        """Cut ``sock``'s connection at the deadline (at once when it has passed)."""
        try:
            dup = sock.dup()
        except OSError:
            return
        with self._lock:
            if self._done.is_set():
                dup.close()
                return
            self._held.append(dup)
        if self.expired:
            self._cut()

    def __enter__(self) -> Deadline:
        self._thread = threading.Thread(target=self._watch, daemon=True,
                                        name="gputriage-deadline")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            held, self._held = self._held, []
        for dup in held:
            dup.close()

    def _watch(self) -> None:
        if self._done.wait(self.left()):
            return
        while True:
            self._cut()
            if self._done.wait(CUT_EVERY_S):
                return

    def _cut(self) -> None:
        with self._lock:
            self.cut = True
            for dup in self._held:
                with contextlib.suppress(OSError):
                    dup.shutdown(socket.SHUT_RDWR)
