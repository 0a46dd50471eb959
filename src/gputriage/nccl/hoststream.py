"""The host outputs of an input ``gputriage nccl`` reads once (stdin, a pipe, a FIFO),
loaded as ``analyze`` loads such a stream.

The NCCL log reader consumes the stream's blocks; :class:`HostStream` passes them on and
keeps what the host loader needs (once it is known that the stream holds host outputs:
that answer may still be worked out in another process while the first blocks pass,
which are held meanwhile): while the stream is small (under
:data:`gputriage.ingest.streamed.STREAM_MIN_BYTES`), its blocks, loaded as one text at the
end; once it is large, nothing: its blocks are handed, as they come, to the large-text
reader of ``analyze`` (:class:`gputriage.ingest.streamed.LargeLogs`: a feeder and the
kernel-log scan, on threads), which reads it whole in memory bounded by what it holds,
its head and tail judged by the paste detector. A stream whose head is not text that
may be streamed (binary data, a tarball, a bug report) keeps its last
:data:`gputriage.ingest.CAP_BYTES`, as before.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from gputriage.nccl.scan import Answer
    from gputriage.snapshot.bundle import Snapshot

__all__ = ["HostStream"]

_IN_FLIGHT = 4  # blocks handed to the feeder and not yet read by it
_WAIT_S = 0.1  # a full hand-over looks this often whether the feeder has stopped
_HEAD = 1 << 20  # of the held blocks, what the kind of the stream is judged on


class HostStream:
    """Passes a stream's blocks on (:meth:`keep`) and loads its host outputs
    (:meth:`load`): see the module docstring. ``answer``: whether the stream holds host
    outputs, where that is still being worked out (None: it does)."""

    def __init__(self, name: str, answer: Answer | None = None) -> None:
        from gputriage.ingest import CAP_BYTES
        from gputriage.ingest.streamed import STREAM_MIN_BYTES

        self.name = name
        self.answer = answer
        self.wanted: bool | None = None if answer is not None else True  # (None: not known)
        self.cap, self.large_at = CAP_BYTES, STREAM_MIN_BYTES
        self.kept: deque[bytes] = deque()  # while small, or when it cannot be streamed
        self.size = 0
        self.cut = False
        self.streamed = False  # whether the blocks go to the large-text reader
        self.unstreamable = False  # its head said it cannot be (the tail is kept)
        self._handed: queue.Queue[bytes | None] = queue.Queue(maxsize=_IN_FLIGHT)
        self._feeder: Any = None
        self._reader: threading.Thread | None = None
        self._result: Snapshot | None = None
        self._error: BaseException | None = None

    # --- passing the blocks on --------------------------------------------------------
    def keep(self, blocks: Iterable[bytes]) -> Iterator[bytes]:
        try:
            for block in blocks:
                if self.streamed:
                    self._hand(block)
                elif self.wanted is not False:
                    self._hold(block)
                yield block
        finally:
            if self.streamed:
                self._hand(None)

    def has_host(self) -> bool:
        """Whether the stream holds host outputs (waited for where still worked out)."""
        if self.wanted is None:
            self._decide(wait=True)
        return bool(self.wanted)

    def _decide(self, wait: bool) -> None:
        """Take the answer when it is there (with ``wait``, wait for it): a stream without
        host outputs is held no longer."""
        assert self.answer is not None
        if wait or self.answer.ready():
            self.wanted = self.answer()
            if not self.wanted:
                self.kept.clear()
                self.size = 0

    def _hold(self, block: bytes) -> None:
        self.kept.append(block)
        self.size += len(block)
        if self.wanted is None:  # (held while not known; known once it would be streamed)
            self._decide(wait=not self.unstreamable and self.size >= self.large_at)
            if not self.wanted:
                return
        if not self.unstreamable:  # (all of it held until it is known to be large)
            if self.size >= self.large_at:
                self._start()
            return
        while self.size - len(self.kept[0]) >= self.cap:
            self.size -= len(self.kept.popleft())
            self.cut = True

    def _start(self) -> None:
        """The stream is large: hand what was held, and the rest as it comes, to the
        large-text reader, started on a thread (unless its head forbids it)."""
        from gputriage.ingest.streamed import LargeLogs, kind_of

        head = b""
        for block in self.kept:  # (kind_of judges the first 128 KiB)
            head += block
            if len(head) >= _HEAD:
                break
        kind = kind_of(self.name, head)
        if kind is None:
            self.unstreamable = True
            return
        large = LargeLogs()
        problems: list[str] = []
        large.feed(self.name, kind, self._handed_blocks, problems)
        self._feeder = large.feeders[-1]
        self._reader = threading.Thread(target=self._read, args=(large,),
                                        name=f"host outputs of {self.name}", daemon=True)
        self._reader.start()
        self.streamed = True
        held, self.kept = self.kept, deque()
        for block in held:
            self._hand(block)

    def _handed_blocks(self) -> Iterator[bytes]:
        while (block := self._handed.get()) is not None:
            yield block

    def _hand(self, block: bytes | None) -> None:
        """Hand ``block`` (None: the end) to the feeder, waiting while it is behind; once
        it has stopped (the scan ended or failed), the rest is let go."""
        while not self._feeder.done.is_set():
            try:
                self._handed.put(block, timeout=_WAIT_S)
                return
            except queue.Full:
                continue

    def _read(self, large: Any) -> None:
        try:
            self._result = large.snapshot(None)
        except BaseException as exc:  # handed to load()
            self._error = exc

    # --- loading --------------------------------------------------------------------
    def load(self) -> Snapshot:
        """The host outputs as a snapshot (InputError when it holds none)."""
        if self.streamed:
            assert self._reader is not None
            self._reader.join()
            if self._error is not None:
                raise self._error
            assert self._result is not None
            return self._result
        from gputriage.ingest import load_text
        from gputriage.snapshot.bundle import decode

        data = b"".join(self.kept)
        self.kept.clear()
        cut = self.cut or len(data) > self.cap
        text = decode(data[-self.cap:].replace(b"\0", b""))
        if cut and "\n" in text:
            text = text[text.index("\n") + 1:]  # the first line was cut in the middle
        return load_text(text, self.name, truncated=cut)
