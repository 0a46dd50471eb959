"""The opening lines of the terminal report: what an on-call reads first.

Line one is the verdict (the exit status's word) and the one thing to know: which side
is at fault (the node or the job), the worst current finding with its scope, and its
action; its concrete next step follows. The lines under them say what the other side
did, when a job's faults were capped in the exit status, and what was not read.
Printed by :func:`gputriage.views.terminal.render_terminal`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from gputriage.model import Blame, Finding, Result, Scope, Severity
from gputriage.views.status import (
    job_faults_capped,
    judged_job,
    leading_side,
    side_verdict,
    verdict,
)

if TYPE_CHECKING:  # pragma: no cover
    from gputriage.views.terminal import Out, Segment

# Who is at fault, in the words of the opening line.
SIDE_WORDS = {
    Blame.NODE: "node fault",
    Blame.CONFIG: "node configuration",
    Blame.JOB: "job fault",
    Blame.JOB_CONFIG: "job settings",
    Blame.UNKNOWN: "fault (node or job: unknown)",
}

CAPPED = "job faults exit 1 at most (--job-faults-fail to fail on them)"
COMPACT_FROM = 4  # scopes from which a per-GPU repeat is written "on 8 GPUs: 0-7"
SETTINGS_SHOWN = 4

_SETTING = re.compile(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)=([^\s,;()]+)")
_SET_BY_ENV = re.compile(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+) set by environment to ([^\s,;]+?)\.?$")


def worst_current(result: Result, side: str | None = None) -> Finding | None:
    """The first current finding of ``side`` (any side when None) in report order."""
    for f in result.sorted_findings():
        if f.current and (side is None or f.blame.side == side):
            return f
    return None


def index_ranges(indices: Iterable[int]) -> str:
    """``0-3, 5, 7-8`` from GPU indices."""
    spans: list[list[int]] = []
    for i in sorted(set(indices)):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def compact_scopes(scopes: tuple[Scope, ...]) -> str | None:
    """``on 8 GPUs: 0-7`` for a repeat over GPUs of known index; None otherwise."""
    indices = [s.gpu_index for s in scopes if s.kind == "gpu" and s.gpu_index is not None]
    if len(scopes) < COMPACT_FROM or len(indices) != len(scopes):
        return None
    return f"on {len(scopes)} GPUs: {index_ranges(i for i in indices if i is not None)}"


def also_text(f: Finding, *, full: bool = False) -> str | None:
    """Where else a per-GPU repeat happened: ``also on GPU 1 0000:2a:00.0, ...``, or
    compact ``on 8 GPUs: 0-7`` (unless ``full``); None without repeats."""
    if not f.also:
        return None
    compact = None if full else compact_scopes(f.scopes)
    return compact or "also on " + ", ".join(s.label() for s in f.also)


def _named_in(title: str, scope: Scope) -> bool:
    """Whether the title already says which scope it is about."""
    text = title.lower()
    if scope.kind == "node":
        return True
    bus = (scope.pci_bus_id or "").lower()
    if bus and (bus in text or bus.split(":", 1)[-1] in text):
        return True
    if scope.name and scope.name.lower().removesuffix(".service") in text:
        return True
    return (scope.kind == "gpu" and scope.gpu_index is not None
            and re.search(rf"\bgpu {scope.gpu_index}\b", text) is not None)


def fault_segments(f: Finding) -> list[Segment]:
    """``GPU 4 0000:9a:00.0: <title> (on 8 GPUs: 0-7) -> <action>`` (the step, often a
    few sentences, goes on a line of its own)."""
    segs: list[Segment] = []
    where = compact_scopes(f.scopes) if f.also else None
    if where is None and not _named_in(f.title, f.scope):
        segs.append((f"{f.scope.label()}: ", "cyan"))
    segs.append((f.title, "bold"))
    if where:
        segs.append((f" ({where})", "cyan"))
    elif f.also:
        segs.append((f" (also on {', '.join(s.label() for s in f.also)})", "cyan"))
    if f.consequences:
        n = len(f.consequences)
        segs.append((f" (explains {n} other finding{'s' if n != 1 else ''})", "dim"))
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


def _quiet_text(result: Result) -> str:
    """The opening text when nothing current is at fault."""
    past = sum(1 for f in result.findings if not f.current)
    tail = f" ({past} acknowledged or in history, below)" if past else ""
    return f"no current fault: nothing to do{tail}"


def print_opening(out: Out, result: Result) -> None:
    """The verdict line, the next step, the other side's line, the capped-job note and
    what was not read (each line only when it has something to say)."""
    from gputriage.views.styles import STYLES

    word = verdict(result)
    label: Segment = (f"{word.upper():<8}", STYLES.get(word, ""))
    lead = leading_side(result)
    f = worst_current(result, lead)
    fault = f is not None and f.severity.rank >= Severity.WARNING.rank
    if word == "unknown":
        out.labelled(label, ("could not tell: no rule could decide; see skipped rules and "
                             "unreadable inputs below", STYLES["unknown"]))
    elif f is not None and fault:
        out.labelled(label, (f"{SIDE_WORDS[f.blame]}: ", "bold"), *fault_segments(f))
        if f.step:
            out.labelled(("", ""), ("next: ", "bold"), (f.step, "bold"))
    else:
        out.labelled(label, (_quiet_text(result), ""))
    side = _side_line(result, lead, fault)
    if side:
        out.labelled(("", ""), *side)
    if job_faults_capped(result):
        out.labelled(("", ""), (CAPPED, "dim"))
    for item in result.not_read:
        out.labelled(("", ""), ("not read: ", "bold yellow"), (str(item), "yellow"))
