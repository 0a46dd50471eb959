"""The opening lines of the terminal report: what an on-call reads first.

Line one is the one-line verdict an on-call pastes into a ticket, the very line ``-q``
prints (:func:`gputriage.views.oneline.verdict_line`): the exit status's word, the host,
the worst cause with its scope, the action in words and how many causes and
consequences there are. The lines under it give the cause's concrete next step, what the
other side (the node or the job) did, whether a job's faults were capped in the exit
status, and what was not read. Printed by
:func:`gputriage.views.terminal.render_terminal`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gputriage.model import Blame, Finding, Result, Severity
from gputriage.status import (
    job_faults_capped,
    judged_job,
    leading_side,
    side_verdict,
    verdict,
)
from gputriage.text.words import counted
from gputriage.views.scopes import also_text, compact_scopes, names_scope

if TYPE_CHECKING:  # pragma: no cover
    from gputriage.views.out import Out, Segment

# Who is at fault, in the words of the opening line.
SIDE_WORDS = {
    Blame.NODE: "node fault",
    Blame.CONFIG: "node configuration",
    Blame.JOB: "job fault",
    Blame.JOB_CONFIG: "job settings",
    Blame.UNKNOWN: "fault (node or job: unknown)",
}

CAPPED = "job faults exit 1 at most (--job-faults-fail to fail on them)"
SETTINGS_SHOWN = 4

_SETTING = re.compile(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)=([^\s,;()]+)")
_SET_BY_ENV = re.compile(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+) set by environment to ([^\s,;]+?)\.?$")


def worst_current(result: Result, side: str | None = None) -> Finding | None:
    """The first current finding of ``side`` (any side when None) in report order."""
    for f in result.sorted_findings():
        if f.current and (side is None or f.blame.side == side):
            return f
    return None


def fault_segments(f: Finding) -> list[Segment]:
    """``GPU 4 0000:9a:00.0: <title> (on 8 GPUs: 0-7) -> <action>`` (the step, often a
    few sentences, goes on a line of its own)."""
    segs: list[Segment] = []
    where = compact_scopes(f.scopes) if f.also else None
    if where is None and not names_scope(f.title, f.scope):
        segs.append((f"{f.scope.label()}: ", "cyan"))
    segs.append((f.title, "bold"))
    if where:
        segs.append((f" ({where})", "cyan"))
    elif (also := also_text(f, full=True)) is not None:
        segs.append((f" ({also})", "cyan"))
    if f.consequences:
        segs.append((f" (explains {counted(len(f.consequences), 'other finding')})", "dim"))
    segs += [(" -> ", "dim"), (f.action.value, "bold")]
    return segs


def job_settings(result: Result) -> list[str]:
    """The job's settings its current findings name (``NCCL_IB_DISABLE=1``), in order."""
    found: list[str] = []
    names: set[str] = set()
    for f in result.sorted_findings():
        if not f.current or f.blame.side != "job":
            continue
        pairs = _SETTING.findall(f.title)
        pairs += [m.groups() for e in f.evidence for line in e.lines
                  if (m := _SET_BY_ENV.search(str(line)))]
        for name, value in pairs:
            if name not in names:
                names.add(name)
                found.append(f"{name}={value}")
    return found[:SETTINGS_SHOWN]


def _side_line(result: Result, lead: str, lead_fault: bool) -> list[Segment] | None:
    """What the other side did: its worst fault, or that it is not at fault."""
    from gputriage.views.styles import STYLES

    other = "job" if lead == "node" else "node"
    if side_verdict(result, other) in ("warning", "critical"):
        f = worst_current(result, other)
        if f is not None:
            sev = f.severity.value
            return [(f"{other}: ", "bold"), (f"{sev.upper()} ", STYLES[sev]),
                    *fault_segments(f)]
    if lead == "job" and lead_fault:
        settings = job_settings(result)
        if settings:
            return [("the node is not at fault: the job's settings are ", "bold"),
                    (f"({', '.join(settings)})", "bold yellow")]
        jobs = [f for f in result.findings if f.current and f.blame.side == "job"]
        who = ("the job's settings are" if any(f.blame is Blame.JOB_CONFIG for f in jobs)
               else "the job is")
        return [(f"the node is not at fault: {who}", "bold")]
    if judged_job(result):
        return [("the job is not at fault", "bold")]
    return None


def print_opening(out: Out, result: Result) -> None:
    """The verdict line, the next step, the other side's line, the capped-job note and
    what was not read (each line only when it has something to say)."""
    from gputriage.views.oneline import verdict_line, window_unread
    from gputriage.views.styles import LABEL_WIDTH, STYLES

    word = verdict(result)
    first = out.text((verdict_line(result, unicode=out.unicode), ""))
    first.stylize(STYLES.get(word, ""), 0, len(word))
    out.hang(out.text(), LABEL_WIDTH, first)
    lead = leading_side(result)
    f = worst_current(result, lead)
    fault = f is not None and f.severity.rank >= Severity.WARNING.rank
    if word == "unknown" and window_unread(result) is None:
        out.labelled(("", ""), ("see skipped rules and unreadable inputs below",
                                STYLES["unknown"]))
    elif f is not None and fault and f.step:
        out.labelled(("", ""), ("next: ", "bold"), (f.step, "bold"))
    side = _side_line(result, lead, fault)
    if side:
        out.labelled(("", ""), *side)
    if job_faults_capped(result):
        out.labelled(("", ""), (CAPPED, "dim"))
    for item in result.not_read:
        out.labelled(("", ""), ("not read: ", "bold yellow"), (str(item), "yellow"))
