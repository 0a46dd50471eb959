"""Rules on a table of one Xid's counts per node: whether the counts single out a node.

A count of a job-side Xid (45, 43, 31, 13: the driver reporting or cleaning up after an
application) follows the job: every node running it logs it, so its volume on one node
is no reason to drain that node. A node-side Xid (79, 48, 94, 95...) concentrated on a
few nodes points at them; spread over all of them, at something they share.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from gputriage.knowledge.xid import xid_info
from gputriage.model import Action, Blame, Finding, Severity, evidence
from gputriage.parsers.xid_counts import XidCounts, XidCountTable
from gputriage.rules.base import finding, rule

OUTLIER_TIMES = 3  # a node with this many times the median count (and 10 more) stands out
OUTLIER_MIN = 10
_JOB_SIDE = (Blame.JOB, Blame.JOB_CONFIG)


def _rank(table: XidCountTable, node: str) -> int:
    """1 for the node with the most, by count."""
    mine = dict(table.counts)[node]
    return 1 + sum(1 for _, c in table.counts if c > mine)


def _spread(table: XidCountTable) -> str:
    values = [c for _, c in table.counts]
    return (f"{len(values)} nodes, {min(values):,} to {max(values):,} each, median "
            f"{statistics.median(values):,.0f}")


def _marked(table: XidCountTable) -> str:
    """What the table's marked nodes are among the others."""
    if not table.marked:
        return ""
    n = len(table.counts)
    counts = dict(table.counts)
    return " " + " ".join(f"{node} (marked) has {counts[node]:,}: {_ordinal(_rank(table, node))} "
                          f"of {n}." for node in table.marked)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _outliers(table: XidCountTable) -> list[tuple[str, int]]:
    median = statistics.median(c for _, c in table.counts)
    bar = max(OUTLIER_TIMES * median, median + OUTLIER_MIN)
    return [(node, c) for node, c in table.counts if c >= bar]


@rule("xid-counts.table", produces=("xid-counts.job-signature", "xid-counts.node-outlier",
                                    "xid-counts.spread"))
def xid_count_table(xid_counts: XidCounts) -> Iterator[Finding]:
    """Per-node counts of one Xid: a job-side Xid's volume is the job's signature and
    singles out no node (never a drain); a node-side Xid on a few nodes far above the
    rest names them (a warning: a count is not the node's own log); spread over all,
    a shared cause."""
    for table in xid_counts.tables:
        yield _judge(table)


def _judge(table: XidCountTable) -> Finding:
    info = xid_info(table.xid)
    code = table.xid
    what = f"Xid {code} ({info.meaning})" if info else f"Xid {code}"
    ev = [evidence("xid_counts", list(table.lines), limit=40)]
    if info is None or info.blame in _JOB_SIDE:
        why = info.explanation if info else "This Xid is not in gputriage's table."
        return finding(
            "xid-counts.job-signature", Severity.INFO,
            f"Xid {code} counts follow the job, not a node ({_spread(table)})",
            f"{what} is reported for what an application did or how it ended: every node "
            f"running the job logs it, so its volume does not single out a node.{_marked(table)} "
            "Do not drain a node on these counts; judge it by its own hardware signals (ECC "
            "and row remapping, Xid 48/63/64/79/94/95, NVLink errors) and look at the job "
            f"for the Xid itself. {why}",
            Action.NONE, Blame.JOB if info else Blame.UNKNOWN, evidence=ev)
    high = _outliers(table)
    if high and len(high) <= len(table.counts) // 3:
        names = ", ".join(f"{node} ({c:,})" for node, c in high)
        return finding(
            "xid-counts.node-outlier", Severity.WARNING,
            f"Xid {code} concentrated on {names} ({_spread(table)})",
            f"{what} is a node-side event, and these nodes log far more of it than the "
            f"others.{_marked(table)} Check them first: their own kernel log and nvidia-smi "
            "(a count does not say when: the node's current state decides a drain).",
            Action.PLAN_REPAIR, Blame.NODE, evidence=ev)
    return finding(
        "xid-counts.spread", Severity.INFO,
        f"Xid {code} spread over every node of the table ({_spread(table)})",
        f"{what} is a node-side event, yet no node stands out: a cause the nodes share (the "
        f"driver or firmware release, the fabric, the job's use of them) is likelier than "
        f"one broken node.{_marked(table)}",
        Action.NONE, Blame.UNKNOWN, evidence=ev)
