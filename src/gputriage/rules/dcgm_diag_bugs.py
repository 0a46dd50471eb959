"""DCGM's own false alarms in ``dcgmi diag`` (``knowledge/dcgm_false_alarms.csv``): a
failure of the shape of a bug DCGM fixed later (inactive NVLinks before 3.1.6, thermal
failures of 3.x, NVBandwidth at level 4 before 4.5.1) is DCGM's on a release the bug is
in, never a GPU fault; where the release is not shown, the test's verdict stands with a
note saying which releases report it falsely."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable

from gputriage.facts.dcgm import DcgmVersion
from gputriage.knowledge.dcgm_false_alarms import FalseAlarm, matching
from gputriage.model import NODE, Action, Blame, Finding, Severity, evidence, index_ranges
from gputriage.parsers.dcgmi_diag_model import DiagMessage, DiagReport, DiagTest
from gputriage.rules.base import finding

__all__ = ["KNOWN_FALSE_ALARM", "Failed", "dcgm_release", "false_alarm_finding",
           "split_false_alarms", "with_notes"]

KNOWN_FALSE_ALARM = "dcgm.known-false-alarm"
DOC = "https://docs.nvidia.com/datacenter/dcgm/latest/release-notes/changelog.html"

Failed = list[tuple[DiagTest, list[DiagMessage]]]


def dcgm_release(report: DiagReport, shown: DcgmVersion | None) -> DcgmVersion | None:
    """DCGM's release as the input shows it: the diag's own header first, else
    ``dcgmi --version`` or nv-hostengine's banner."""
    if report.version:
        return DcgmVersion(report.version, "dcgmi_diag", "")
    return shown


def split_false_alarms(failed: Failed, report: DiagReport, version: str | None,
                       bugs: dict[FalseAlarm, list[tuple[Hashable, DiagTest]]],
                       target: Hashable) -> tuple[Failed, list[FalseAlarm]]:
    """The failures left once those of a known DCGM bug on this release are moved to
    ``bugs``; and the bugs that may explain a kept failure where the release is unknown."""
    kept: Failed = []
    notes: list[FalseAlarm] = []
    for t, msgs in failed:
        alarm = matching("diag", t.key, [m.text for m in msgs], report.level)
        affected = alarm.affects(version) if alarm else False
        if alarm is not None and affected:
            bugs.setdefault(alarm, []).append((target, t))
            continue
        if alarm is not None and affected is None and alarm not in notes:
            notes.append(alarm)
        kept.append((t, msgs))
    return kept, notes


def note(alarms: Iterable[FalseAlarm]) -> str:
    return "".join(f" DCGM {a.releases} reports this falsely ({a.what.rstrip('.')}): check "
                   "dcgmi --version before repairing the GPU." for a in alarms)


def with_notes(f: Finding, alarms: list[FalseAlarm]) -> Finding:
    """The finding, its explanation saying which DCGM releases report it falsely."""
    if not alarms:
        return f
    return dataclasses.replace(f, explanation=f.explanation + note(alarms),
                               references=(*f.references, *(a.source for a in alarms)))


def false_alarm_finding(alarm: FalseAlarm, hits: list[tuple[Hashable, DiagTest]],
                        release: DcgmVersion) -> Finding:
    """One finding for every failure one DCGM bug made on this release."""
    tests = list(dict.fromkeys(t for _, t in hits))
    names = ", ".join(dict.fromkeys(t.name for t in tests))
    gpus = sorted({g for g, _ in hits if isinstance(g, int)})
    who = (("GPU " if len(gpus) == 1 else "GPUs ") + index_ranges(gpus)) if gpus else "the node"
    ev = [evidence("dcgmi_diag", [ln for t in tests for ln in t.lines], limit=24)]
    if release.source != "dcgmi_diag" and release.line:
        ev.append(evidence(release.source, [release.line]))
    version = release.version
    return finding(
        KNOWN_FALSE_ALARM, Severity.WARNING,
        f"DCGM diag: {names} failed on {who} by a DCGM {version} bug, fixed in DCGM "
        f"{alarm.fixed_in}",
        f"DCGM {version}'s {names} test failed on {who} in the way a known DCGM bug does "
        f"(DCGM {alarm.releases}): {alarm.what} The failure is DCGM's, not the "
        f"GPUs'; nothing here says they are faulty. Upgrade DCGM to {alarm.fixed_in} or "
        "later and rerun the diagnostic: a failure that stays is then the hardware's.",
        Action.FIX_SOFTWARE, Blame.CONFIG, NODE, ev, references=(alarm.source, DOC))
