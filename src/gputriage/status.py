"""Exit status of a triage run, in the Nagios convention.

0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (could not tell), so Slurm prolog /
epilog scripts, NHC, cron and Kubernetes probes can act on it. Usage errors
and unreadable input use the BSD ``sysexits`` codes so they never read as a
health verdict.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

from gputriage.vocabulary import Severity

if TYPE_CHECKING:
    from gputriage.model import Finding, Result


class ExitStatus(IntEnum):
    """Process exit codes of the ``gputriage`` commands."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3
    USAGE = 64  # EX_USAGE: bad command line
    INPUT_ERROR = 66  # EX_NOINPUT: an input could not be read at all
    INTERNAL = 70  # EX_SOFTWARE: a bug in gputriage (never for any input)


_BY_SEVERITY = {
    Severity.OK: ExitStatus.OK,
    Severity.INFO: ExitStatus.OK,
    Severity.WARNING: ExitStatus.WARNING,
    Severity.CRITICAL: ExitStatus.CRITICAL,
}


def counted_severity(result: Result, finding: Finding) -> Severity:
    """The severity ``finding`` counts with, the one every view shows on its line, in
    the host line's counts and in the headline: its own, except that a finding blamed
    on the job or its settings counts as a WARNING at most (unless
    ``result.job_faults_fail``), as it does for the exit status: a job's fault never
    reads CRITICAL where it cannot drain the node."""
    if (finding.blame.side == "job" and not result.job_faults_fail
            and finding.severity.rank > Severity.WARNING.rank):
        return Severity.WARNING
    return finding.severity


def severity_counts(result: Result) -> dict[Severity, int]:
    """How many current findings count at each severity (:func:`counted_severity`),
    worst first; severities without a finding left out."""
    counts: dict[Severity, int] = {}
    for sev in (Severity.CRITICAL, Severity.WARNING, Severity.INFO, Severity.OK):
        n = sum(1 for f in result.findings if f.current and counted_severity(result, f) is sev)
        if n:
            counts[sev] = n
    return counts


def exit_status(result: Result) -> ExitStatus:
    """The exit status of ``result``: UNKNOWN when the engine could not tell
    (``host.verdict == "unknown"``); else the worst current finding of the node, with
    the job's own faults (blamed on the job or its settings) counting as a WARNING at
    most, unless ``result.job_faults_fail``: a job's fault never drains a node."""
    if result.host.verdict == "unknown":
        return ExitStatus.UNKNOWN
    node = result.worst_of("node")
    job = result.worst_of("job")
    if not result.job_faults_fail and job.rank > Severity.WARNING.rank:
        job = Severity.WARNING
    return _BY_SEVERITY[node if node.rank >= job.rank else job]


def verdict(result: Result) -> str:
    """The overall verdict word (``ok`` / ``warning`` / ``critical`` /
    ``unknown``), always consistent with :func:`exit_status`."""
    return {
        ExitStatus.OK: "ok",
        ExitStatus.WARNING: "warning",
        ExitStatus.CRITICAL: "critical",
    }.get(exit_status(result), "unknown")


def side_verdict(result: Result, side: str) -> str:
    """The verdict of one side (``node`` or ``job``) on its own, uncapped."""
    if side == "node" and result.host.verdict == "unknown":
        return "unknown"
    worst = result.worst_of(side)
    return worst.value if worst.rank >= Severity.WARNING.rank else "ok"


def at_fault(result: Result) -> str:
    """Which side is at fault, in words: ``node``, ``job``, ``node and job`` or
    ``neither``."""
    node = result.worst_of("node").rank >= Severity.WARNING.rank
    job = result.worst_of("job").rank >= Severity.WARNING.rank
    return {(True, True): "node and job", (True, False): "node",
            (False, True): "job"}.get((node, job), "neither")


# The job's own outputs: a result that read one of them judged a job.
JOB_SOURCES = ("nccl_log", "nccl_tests", "device_query", "job_log")


def job_faults_capped(result: Result) -> bool:
    """Whether the job's faults were worse than the exit status lets them count
    (a critical of the job's, without ``--job-faults-fail``)."""
    return (not result.job_faults_fail
            and result.worst_of("job").rank > Severity.WARNING.rank)


def leading_side(result: Result) -> str:
    """The side (``node`` or ``job``) whose findings set the exit status; the node on
    a tie, and when neither has a fault."""
    node = result.worst_of("node")
    job = result.worst_of("job")
    if job_faults_capped(result):
        job = Severity.WARNING
    return "job" if job.rank > node.rank else "node"


def judged_job(result: Result) -> bool:
    """Whether the result judged a job: one of its outputs was read, or a finding
    blames the job or its settings."""
    for item in result.inputs:
        if isinstance(item, dict) and set(item.get("sources") or ()) & set(JOB_SOURCES):
            return True
    return any(f.blame.side == "job" for f in result.findings)
