"""What one check cannot see and the history can: signals that flap, and a GPU that
fails again after its repair.

* **Latching** (:func:`latched`): a family of findings of ``knowledge/flapping.csv``
  (IB port flaps, NVLink errors, corrected-error bursts, thermal slowdowns) is judged
  over a window: a *strike* is a check in which the family appears after a check
  without it. ``strikes`` within ``window_h`` latch the node: a critical finding
  ``flapping.<family>`` that stays, signal or not, until ``gputriage ack
  flapping.<family>``; the count starts again after the acknowledgement. A one-off
  never latches and leaves the window by itself.
* **This node again** (:func:`again`): a current critical finding whose next step is a
  GPU reset or a reboot, on a GPU (or for a finding) acknowledged as repaired within
  :data:`AGAIN_WINDOW`, is escalated to a hardware repair, saying how many times and
  when.

Both are pure over the history's entries and acknowledgements; :func:`apply_history`
reads them and amends a result before it is recorded."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from gputriage.engine.acks import Ack, utc
from gputriage.knowledge import csv_rows
from gputriage.model import Evidence, Finding, Occurrences, Result, Scope
from gputriage.text.fields import normalize_bus_id
from gputriage.vocabulary import Action, Blame, Severity

__all__ = ["AGAIN_WINDOW", "FlapFamily", "again", "apply_history", "families", "latched"]

# NVSentinel's MultipleRemediations: 5 remediations of a node within 7 days call for
# support; one failure again within the same 7 days after a repair is already one too many
# for a reset to be the answer.
AGAIN_WINDOW = timedelta(days=7)
_RESETS = (Action.RESET_GPU, Action.REBOOT_NODE)
_STRIKING = ("warning", "critical")


@dataclass(frozen=True)
class FlapFamily:
    family: str
    findings: tuple[str, ...]
    strikes: int
    window: timedelta
    what: str
    source: str

    def names(self, finding_id: str) -> bool:
        return any(fnmatch.fnmatchcase(finding_id, p) for p in self.findings)

    @property
    def id(self) -> str:
        return f"flapping.{self.family}"


def families() -> list[FlapFamily]:
    """The table of ``knowledge/flapping.csv``."""
    return [FlapFamily(r["family"], tuple(r["findings"].split()), int(r["strikes"]),
                       timedelta(hours=float(r["window_h"])), r["what"], r["source"])
            for r in csv_rows("flapping.csv")]


@dataclass(frozen=True)
class Check:
    """One check of the host, as the history keeps it: its time and findings."""

    when: datetime
    findings: tuple[dict[str, Any], ...]


def _present(check: Check, family: FlapFamily) -> list[str]:
    return sorted({str(f.get("id")) for f in check.findings
                   if f.get("status", "current") == "current"
                   and f.get("severity") in _STRIKING and family.names(str(f.get("id")))})


def _acked_at(acks: Iterable[Ack], finding_id: str) -> datetime | None:
    """The last acknowledgement naming ``finding_id`` (withdrawn ones do not count)."""
    times = [a.when for a in acks if not a.cleared and a.finding
             and fnmatch.fnmatchcase(finding_id, a.finding)]
    return max(times) if times else None


def latched(checks: Sequence[Check], acks: Iterable[Ack],
            table: Iterable[FlapFamily]) -> list[Finding]:
    """The latched families, as findings (``checks`` oldest first, the current one
    last)."""
    acks = list(acks)
    out = []
    for family in table:
        since = _acked_at(acks, family.id)
        strikes: list[tuple[datetime, list[str]]] = []
        before = False
        for check in checks:
            ids = _present(check, family)
            if ids and not before and (since is None or check.when > since):
                strikes.append((check.when, ids))
            before = bool(ids)
        window = _first_full_window(strikes, family)
        if window is not None:
            out.append(_finding(family, strikes, window))
    return out


def _first_full_window(strikes: list[tuple[datetime, list[str]]],
                       family: FlapFamily) -> int | None:
    """The index of the first strike that starts ``strikes`` strikes within the window."""
    n = max(1, family.strikes)
    for i in range(len(strikes) - n + 1):
        if strikes[i + n - 1][0] - strikes[i][0] <= family.window:
            return i
    return None


def _finding(family: FlapFamily, strikes: list[tuple[datetime, list[str]]],
             start: int) -> Finding:
    shown = strikes[start:]
    hours = family.window.total_seconds() / 3600
    lines = tuple(f"{when.isoformat()}: {', '.join(ids)} appeared" for when, ids in shown)
    return Finding(
        id=family.id, severity=Severity.CRITICAL,
        title=f"{family.what[0].upper()}{family.what[1:]}: {len(shown)} times, "
              f"latched until acknowledged",
        explanation=(f"{len(shown)} checks since {shown[0][0].isoformat()} saw it appear "
                     f"again after it had gone ({family.strikes} within {hours:g} h latch "
                     "the node): a pattern, not a one-off. It stays critical while the "
                     "signal comes and goes, until acknowledged after the repair "
                     f"(gputriage ack {family.id} --reason ...). Threshold: "
                     f"{family.source}."),
        action=Action.DRAIN_AND_REPAIR, blame=Blame.NODE,
        scope=Scope(),
        evidence=(Evidence("history", lines[-20:]),),
        occurrences=Occurrences(len(shown), shown[0][0].isoformat(), shown[-1][0].isoformat()),
        step=(f"Drain the node and repair what flaps ({family.what}): reseat or replace "
              f"the cable, transceiver or part; then gputriage ack {family.id} "
              "--reason \"...\" and resume."))


def _buses(f: Finding) -> set[str]:
    return {b for b in (normalize_bus_id(s.pci_bus_id) for s in f.scopes) if b}


def again(findings: Iterable[Finding], acks: Iterable[Ack], now: datetime,
          window: timedelta = AGAIN_WINDOW) -> list[Finding]:
    """The findings, those failing again after a repair escalated to a hardware repair."""
    recent = [a for a in acks if not a.cleared and timedelta(0) <= utc(now) - a.when <= window]
    out = []
    for f in findings:
        if not (f.current and f.severity is Severity.CRITICAL and f.action in _RESETS
                and f.blame is Blame.NODE):
            out.append(f)
            continue
        buses = _buses(f)
        repairs = sorted((a for a in recent
                          if (a.finding is None or fnmatch.fnmatchcase(f.id, a.finding))
                          and (a.gpu is None or a.gpu in buses)
                          and (a.finding is not None or a.gpu is not None)),
                         key=lambda a: a.when)
        if not repairs:
            out.append(f)
            continue
        times = ", ".join(a.when.isoformat() for a in repairs)
        days = window.total_seconds() / 86400
        said = (f"It failed again after {len(repairs)} repair(s) or reset(s) acknowledged "
                f"in the last {days:g} days ({times}): a {f.action.value} does not hold; "
                "repair the hardware.")
        out.append(replace(
            f, action=Action.DRAIN_AND_REPAIR,
            title=f"{f.title} (again: {len(repairs)}x in {days:g} days)",
            explanation=f"{f.explanation} {said}",
            evidence=(*f.evidence, Evidence("history", tuple(
                f"{a.when.isoformat()}: {a.describe()}" for a in repairs))),
            step=("Drain the node and send the GPU for hardware repair (RMA, with the "
                  f"history of its {len(repairs)} earlier repair(s)); a reset was tried.")))
    return out


def _checks_of(entries: Iterable[Any], host: str | None) -> list[Check]:
    out = []
    for e in entries:
        if e.host != host:
            continue
        try:
            when = utc(datetime.fromisoformat(e.time))
        except (TypeError, ValueError):
            continue
        out.append(Check(when, tuple(e.findings)))
    return out


def apply_history(result: Result, state_dir: Path | str, now: datetime,
                  acks: Sequence[Ack] | None = None) -> list[str]:
    """Amend ``result`` (before it is recorded) with what its host's history says:
    latched families added, failures again escalated. A history that cannot be read
    amends nothing (recording the check says why, in one line); the problems returned
    are any other; the history never fails a check."""
    from gputriage.state import ackstore
    from gputriage.state.history import HistoryError, NoHistory, list_entries

    now = utc(now).astimezone(timezone.utc)
    host = result.host.hostname
    try:
        acks = list(acks) if acks is not None else ackstore.load(state_dir, host)
        try:
            entries = list_entries(state_dir)
        except NoHistory:
            entries = []
    except HistoryError:
        return []  # recording the check meets the same problem and says it, once
    current = Check(now, tuple(
        {"id": f.id, "severity": f.severity.value,
         **({} if f.current else {"status": f.status.value})} for f in result.findings))
    checks = [*_checks_of(entries, host), current]
    found = latched(checks, acks, families())
    findings = again(result.findings, acks, now)
    have = {f.id for f in findings}
    findings.extend(f for f in found if f.id not in have)
    result.findings = findings
    if any(f.current and f.severity is Severity.CRITICAL for f in found) \
            and result.host.verdict in ("ok", "warning"):
        result.host = replace(result.host, verdict="critical")
    return []
