"""Which of the watch's checks go into the history (the SQLite store ``check`` records
in): a check whose verdict or findings differ from the last recorded one, and otherwise
one every ``every_s`` (default an hour), so weeks of a check a minute leave a few
thousand entries, not tens of thousands, and every change is there.

"Findings" here is each finding's id, severity, status (current, acknowledged, history)
and scopes: a new finding, one gone, one acknowledged or one on another GPU is a change;
a count of occurrences growing is not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from gputriage.watch.logs import WatchLog

__all__ = ["HISTORY_EVERY_S", "HistoryRecorder", "record_history", "signature"]

HISTORY_EVERY_S = 3600.0


def signature(result: Any) -> tuple:
    """What a change of is worth recording: the verdict and the findings, by identity."""
    from gputriage.status import verdict

    # as text: a GPU index is None on one scope and a number on another (no order)
    findings = sorted(
        repr((f.id, f.severity.value, f.status.value,
              tuple((s.kind, s.gpu_index, s.pci_bus_id, s.uuid, s.name) for s in f.scopes)))
        for f in result.findings)
    return verdict(result), tuple(findings)


def record_history(state_dir: str | Path | None, result: Any, when: datetime,
                   retention: Any = None,
                   notice: Callable[[str], object] | None = None) -> list[str]:
    """Record ``result`` in the history (``history.record_check``), as ``check`` and
    ``watch`` do; each notice (recorded, but worth a line) told to ``notice``. The
    problems, when it was not recorded: never raised, the history never fails a check."""
    from gputriage.state.history import Retention, default_state_dir, record_check

    notices: list[str] = []
    try:
        problems = list(record_check(state_dir or default_state_dir(), result, when,
                                     retention or Retention(), notices=notices))
    except Exception as exc:  # history never fails the check
        problems = [f"{type(exc).__name__}: {exc}"]
    for text in notices:
        if notice is not None:
            notice(text)
    return problems


class HistoryRecorder:
    """Called with each result; records it (``history.record_check``) when it is due."""

    def __init__(self, state_dir: str | Path | None, log: WatchLog, *,
                 every_s: float = HISTORY_EVERY_S, retention: Any = None,
                 now: Callable[[], datetime] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.state_dir = state_dir
        self.log = log
        self.every_s = every_s
        self.retention = retention
        self.now = now
        self.clock = clock
        self.last_key: tuple | None = None
        self.last_time = 0.0
        self.recorded = 0  # entries written (for the tests and the soak)
        self._problem = ""

    def due(self, result: Any) -> bool:
        return (self.last_key is None or signature(result) != self.last_key
                or self.clock() - self.last_time >= self.every_s)

    def __call__(self, result: Any) -> bool:
        """Record ``result`` when due; True when it was recorded. Problems are logged
        (each once while it lasts), never raised: the history never fails a check."""
        if not self.due(result):
            return False
        from datetime import timezone

        when = self.now() if self.now is not None else datetime.now(timezone.utc)
        problems = record_history(self.state_dir, result, when, self.retention,
                                  notice=lambda text: self.log.info(f"history: {text}"))
        if problems:
            problem = "; ".join(problems)
            if problem != self._problem:
                self.log.warning("history not recorded", problem=problem)
            self._problem = problem
            return False  # tried again next cycle
        if self._problem:
            self.log.info("history recorded again")
        self._problem = ""
        self.last_key = signature(result)
        self.last_time = self.clock()
        self.recorded += 1
        return True
