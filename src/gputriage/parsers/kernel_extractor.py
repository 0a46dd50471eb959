"""The streaming extractor: log lines in, events out, in log order.

Each line is first offered to the events still open (see
:mod:`gputriage.parsers.kernel_follow`), then to the message being assembled over
several lines, then to the rows of :data:`gputriage.parsers.kernel_table.EVENTS`.
It holds at most one multi-line message and a few open events, and keeps nothing
but the events found.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator

from gputriage.parsers.kernel_follow import Message, OpenEvent, Verdict, starts_message
from gputriage.parsers.kernel_model import DriverEvent, LogLine
from gputriage.parsers.kernel_patterns import split_prefix
from gputriage.parsers.kernel_table import match_line

__all__ = ["MAX_LINE", "EventExtractor", "iter_driver_events", "split_escaped"]

MAX_LINE = 8192  # longer lines are cut before matching
MAX_CONTINUATION = 8


def split_escaped(line: str) -> list[tuple[str, bool]]:
    """A line cut to MAX_LINE and split at rsyslog ``#012`` escapes; the flag
    marks split-off pieces."""
    line = line.rstrip("\r\n")[:MAX_LINE]
    if "#012" not in line:
        return [(line, False)]
    return [(piece, i > 0) for i, piece in enumerate(line.split("#012"))]


_FRACTION = re.compile(r"[.,][0-9]{1,9}")


def _close(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether two lines' printed stamps belong to one message: the same, or the same
    second (the driver prints a message's lines microseconds apart: dmesg's uptimes and
    ISO fractions differ, the whole second does not)."""
    if a == b:
        return True
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x == y:
            continue
        try:
            if abs(float(x) - float(y)) >= 1.0:
                return False
        except ValueError:
            if _FRACTION.sub("", x) != _FRACTION.sub("", y):
                return False
    return True


class _Pending:
    """A multi-line message being assembled from its continuation lines."""

    def __init__(self, message: Message, line: LogLine) -> None:
        self.message = message
        self.head = line
        self.lines = [line.text]
        self.stamps = line.stamps
        self.texts = [line.msg]
        self.last_lineno = line.lineno

    def accepts(self, line: LogLine) -> bool:
        msg = line.msg
        if len(self.lines) >= MAX_CONTINUATION or not msg.startswith("NVRM:"):
            return False
        if starts_message(msg) or not self.message.continues(msg):
            return False
        if (line.lineno is not None and self.last_lineno is not None
                and line.lineno - self.last_lineno > 1):
            return False
        return not line.stamps or _close(line.stamps, self.stamps)

    def add(self, line: LogLine) -> None:
        self.lines.append(line.text)
        self.texts.append(line.msg)
        self.last_lineno = line.lineno

    @property
    def complete(self) -> bool:
        return self.message.complete(self.texts)

    def event(self) -> DriverEvent | None:
        return self.message.event(self.head, self.lines, self.texts)


class EventExtractor:
    """Turns a stream of :class:`LogLine` into events, in log order.

    ``feed`` returns the events that are final; ``finish`` returns the rest.
    """

    def __init__(self) -> None:
        self._pending: _Pending | None = None
        self._open: list[OpenEvent] = []
        self._queue: deque[DriverEvent] = deque()
        self._seq = 0

    def feed(self, line: LogLine) -> list[DriverEvent]:
        """Consume one line; return the events that no later line can change."""
        self._seq += 1
        if line.lineno is None:
            line.lineno = self._seq
        if not self._continue_open(line):
            self._feed_pending(line)
        return self._release()

    @property
    def idle(self) -> bool:
        """No message being assembled, no event open, none held back: a line that is
        a whole event of its own can bypass the extractor without changing anything."""
        return self._pending is None and not self._open and not self._queue

    def note_line(self, lines: int = 1) -> None:
        """A line (``lines`` lines) handled outside the extractor (see ``idle``) still
        counts."""
        self._seq += lines

    def finish(self) -> list[DriverEvent]:
        """Flush the multi-line message and the open events at the end of input."""
        self._flush_pending()
        self._open.clear()
        return self._release()

    # -- internals ----------------------------------------------------------------------
    def _push(self, ev: DriverEvent | None) -> None:
        if ev is not None:
            self._queue.append(ev)

    def _release(self) -> list[DriverEvent]:
        if not self._queue:
            return []
        if not self._open:  # (nothing holds an event back)
            out = list(self._queue)
            self._queue.clear()
            return out
        held = {id(o.event) for o in self._open}
        out = []
        while self._queue and id(self._queue[0]) not in held:
            out.append(self._queue.popleft())
        return out

    def _continue_open(self, line: LogLine) -> bool:
        """Offer a line to the open events; True when one took it (a passive one,
        a call trace, sees the line even then)."""
        if not self._open:
            return False
        lineno = line.lineno or 0
        self._open = [o for o in self._open if lineno <= o.until]
        taken = False
        for o in list(self._open):
            if taken and not o.follow.passive:
                continue
            verdict = o.follow.offer(o, line)
            if verdict is Verdict.CLOSE:
                self._open.remove(o)
            elif verdict is Verdict.TAKE:
                taken = True
        return taken

    def _flush_pending(self) -> None:
        if self._pending is not None:
            self._push(self._pending.event())
            self._pending = None

    def _feed_pending(self, line: LogLine) -> None:
        if self._pending is not None:
            if self._pending.accepts(line):
                self._pending.add(line)
                if self._pending.complete:
                    self._flush_pending()
                return
            self._flush_pending()
        if line.msg:
            self._match(line)

    def _match(self, line: LogLine) -> None:
        """Match a line against the table: start a message or push its events."""
        found = match_line(line)
        if found is None:
            return
        pattern, events = found
        if pattern.joins is not None:
            self._pending = _Pending(pattern.joins, line)
            if self._pending.complete:
                self._flush_pending()
            return
        for ev in events:
            self._push(ev)
            follow = pattern.follow
            opened = follow.open(ev, line) if follow is not None else None
            if opened is not None:
                if follow is not None and follow.exclusive:
                    self._open = [o for o in self._open if o.follow is not follow]
                self._open.append(opened)


def iter_driver_events(lines: Iterable[str]) -> Iterator[DriverEvent]:
    """Stream driver events from an iterable of log lines (e.g. an open file).

    Events carry the printed timestamp and the line number; absolute times and
    boots need :func:`gputriage.logscan.scan_text` / ``scan_paths``."""
    ex = EventExtractor()
    for lineno, raw in enumerate(lines, 1):
        for piece, escaped in split_escaped(raw):
            stamps, msg, _ = split_prefix(piece)
            yield from ex.feed(LogLine(piece, msg, () if escaped else stamps, lineno,
                                       escaped=escaped))
    yield from ex.finish()
