"""The watch's log: one line per cycle and per problem, on stderr.

``text`` lines read ``2026-12-01T03:00:00Z info check 12: critical ... key=value``;
``json`` lines are objects ``{"ts", "level", "msg", "fields"}``, one per line, for a log
shipper. Lines are written as they come (nothing is buffered or kept), from any thread.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from typing import IO, Any

from gputriage.text.safe import printable

__all__ = ["LOG_FORMATS", "WatchLog"]

LOG_FORMATS = ("text", "json")


class WatchLog:
    """Structured lines on ``stream`` in ``fmt`` (``text`` or ``json``)."""

    def __init__(self, stream: IO[str], fmt: str = "text") -> None:
        if fmt not in LOG_FORMATS:
            raise ValueError(f"log format {fmt!r}: expected one of {', '.join(LOG_FORMATS)}")
        self.stream = stream
        self.fmt = fmt
        self._lock = threading.Lock()

    def info(self, msg: str, **fields: Any) -> None:
        self.log("info", msg, **fields)

    def warning(self, msg: str, **fields: Any) -> None:
        self.log("warning", msg, **fields)

    def error(self, msg: str, **fields: Any) -> None:
        self.log("error", msg, **fields)

    def log(self, level: str, msg: str, **fields: Any) -> None:
        """One line; a stream that cannot be written to loses the line, never the watch."""
        ts = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace(
            "+00:00", "Z")
        if self.fmt == "json":
            line = json.dumps({"ts": ts, "level": level, "msg": msg, "fields": fields},
                              ensure_ascii=False, default=str)
        else:
            pairs = "".join(f" {key}={_value(value)}" for key, value in fields.items())
            line = f"{ts} {level} {printable(msg)}{pairs}"
        with self._lock:
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass


def _value(value: Any) -> str:
    """A field's value in a text line: quoted when it has spaces (or is empty)."""
    text = printable(str(value))
    return json.dumps(text, ensure_ascii=False) if not text or " " in text or '"' in text \
        else text
