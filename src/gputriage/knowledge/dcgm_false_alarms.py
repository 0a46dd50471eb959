"""DCGM's own false alarms fixed in a later release (``dcgm_false_alarms.csv``): which
failures of which DCGM versions say nothing of the GPUs. Loaded once."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from gputriage.knowledge import csv_rows
from gputriage.knowledge.cuda_compat import version_key

__all__ = ["FalseAlarm", "false_alarms", "matching"]


@dataclass(frozen=True)
class FalseAlarm:
    """One DCGM bug that reported a failure on healthy GPUs, and the release fixing it."""

    id: str
    input: str  # diag | health | profiling
    test: re.Pattern[str] | None
    pattern: re.Pattern[str]
    level: int | None
    affected_from: str | None
    affected_until: str  # the first release without the bug as far as the source says
    fixed_in: str
    what: str
    source: str

    @property
    def releases(self) -> str:
        """The releases with the bug, in words: "3.0 up to 4.0", "before 3.1.6"."""
        return (f"{self.affected_from} up to {self.affected_until}" if self.affected_from
                else f"before {self.affected_until}")

    def affects(self, version: str | None) -> bool | None:
        """Whether that DCGM version has the bug; None when the version is not known."""
        key = version_key(version)
        if not key:
            return None
        start = version_key(self.affected_from)
        return (not start or key >= start) and key < version_key(self.affected_until)

    def explains(self, test: str, texts: Iterable[str], level: int | None) -> bool:
        """Whether a failure of that test, with those messages, at that level, is this
        bug's shape: every message matches (a failure without messages never does)."""
        said = [t for t in texts if t.strip()]
        return (bool(said) and all(self.pattern.search(" ".join(t.split())) for t in said)
                and (self.test is None or bool(self.test.search(test)))
                and (self.level is None or level is None or level == self.level))


@functools.cache
def false_alarms() -> tuple[FalseAlarm, ...]:
    """Every row, in file order."""
    return tuple(FalseAlarm(
        r["id"], r["input"],
        re.compile(r["test"], re.IGNORECASE) if r["test"].strip() else None,
        re.compile(r["pattern"], re.IGNORECASE),
        int(r["level"]) if r["level"].strip().isdigit() else None,
        r["affected_from"].strip() or None,
        r["affected_until"].strip() or r["fixed_in"].strip(), r["fixed_in"].strip(),
        r["what"], r["source"])
        for r in csv_rows("dcgm_false_alarms.csv"))


def matching(input_kind: str, test: str, texts: Iterable[str],
             level: int | None = None) -> FalseAlarm | None:
    """The known DCGM bug a failure of that shape may be, if any."""
    said = list(texts)
    return next((a for a in false_alarms()
                 if a.input == input_kind and a.explains(test, said, level)), None)
