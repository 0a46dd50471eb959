"""A table of one Xid's counts per node: recognised only under a line naming the Xid,
and judged by whether the Xid is the job's or the node's (corpus: category 10's
NVL72 rack of Xid 45 totals, in tests/test_corpus_golden_jobs.py)."""

from __future__ import annotations

import pytest
from hostkit import ids, run

from gputriage.errors import ParseError
from gputriage.ingest.detect import detect
from gputriage.parsers.xid_counts import parse_xid_counts

JOB_SIDE = """Xid 43 totals per node over the last day:
gpu-a01  812    gpu-a02  790
gpu-a03  845    gpu-a04  801  <--
gpu-a05  770    gpu-a06  833
"""
OUTLIER = """| node | Xid 79 count |
|---|---|
| dgx-b07 | 41 |
| dgx-b01 | 0 |
| dgx-b02 | 1 |
| dgx-b03 | 0 |
| dgx-b04 | 2 |
| dgx-b05 | 0 |
"""
SPREAD = """XID 48 (double-bit ECC) per host this week
node-11: 3
node-12: 4
node-13: 2
node-14: 3
"""

SOURCE_SAMPLES = {"xid_counts": ("corpus:xid45-counts-rack-nvl72",)}
RULE_CASES = {
    "xid-counts.table": [({"xid_counts": JOB_SIDE}, "xid-counts.job-signature"),
                         ({"xid_counts": OUTLIER}, "xid-counts.node-outlier"),
                         ({"xid_counts": SPREAD}, "xid-counts.spread")],
}


def _one(text: str):
    [f] = [f for f in run(xid_counts=text).findings if f.id.startswith("xid-counts.")]
    return f


def test_a_job_side_xid_never_singles_out_the_marked_node() -> None:
    f = _one(JOB_SIDE)
    assert (f.severity.value, f.blame.value, f.action.value) == ("info", "job", "none")
    assert f.title == ("Xid 43 counts follow the job, not a node (6 nodes, 770 to 845 each, "
                       "median 806)")
    assert "gpu-a04 (marked) has 801: 4th of 6." in f.explanation
    assert "Do not drain" in f.explanation


def test_a_node_side_xid_on_one_node_names_it_without_draining() -> None:
    f = _one(OUTLIER)
    assert (f.severity.value, f.blame.value, f.action.value) == ("warning", "node",
                                                                 "plan-repair")
    assert f.title.startswith("Xid 79 concentrated on dgx-b07 (41) (6 nodes")
    assert f.evidence[0].lines[0] == "| node | Xid 79 count |"


def test_a_node_side_xid_on_every_node_is_a_shared_cause() -> None:
    f = _one(SPREAD)
    assert (f.severity.value, f.blame.value) == ("info", "unknown")
    assert "4 nodes, 2 to 4 each" in f.title


def test_the_parser_keeps_each_table_with_its_xid() -> None:
    counts = parse_xid_counts(JOB_SIDE + "\n" + SPREAD)
    assert [t.xid for t in counts.tables] == [43, 48]
    assert counts.tables[0].counts[:2] == (("gpu-a01", 812), ("gpu-a02", 790))
    assert counts.tables[0].marked == ("gpu-a04",)
    assert dict(counts.tables[1].counts)["node-12"] == 4
    with pytest.raises(ParseError):
        parse_xid_counts("Xid 45\nnode-1 4\nnode-2 5\n")  # two nodes are no fleet


@pytest.mark.parametrize("text", [
    # no Xid named above: host names and numbers are not Xid counts
    "Pods per node:\nnode-1 4\nnode-2 5\nnode-3 6\nnode-4 7\n",
    # two Xids named: which one the numbers count is not said
    "Xid 45 and Xid 79 per node:\nnode-1 4\nnode-2 5\nnode-3 6\nnode-4 7\n",
])
def test_a_table_without_one_named_xid_is_not_taken(text: str) -> None:
    assert "xid_counts" not in dict(detect(text))


def test_a_kernel_xid_line_stays_the_kernel_logs() -> None:
    text = ("[ 12.5] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"
            "node-1 4\nnode-2 5\nnode-3 6\nnode-4 7\n")
    found = dict(detect(text))
    assert "kernel_log" in found and "xid_counts" not in found
    assert "xid.79" in ids(run(kernel_log=text.splitlines()[0]))


@pytest.mark.parametrize("line", [
    " ".join(["r06-01  10700"] * 14) + ".",  # pairs and then not: was exponential
    "a1" * 30_000,  # one long token with digits: was quadratic
    "| " + "a1" * 30_000 + " | 5 |",
])
def test_a_line_that_almost_is_a_row_is_rejected_without_hanging(line: str) -> None:
    """Every paste goes through this detector: a pathological line must not hang it (the
    alarm is a hang guard, far above the milliseconds it takes)."""
    import signal

    from gputriage.parsers.xid_counts import claim_xid_counts
    from gputriage.text.paste import PasteDoc

    def hung(*_: object) -> None:
        raise AssertionError("the Xid-count detector hung")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        doc = PasteDoc("Xid 45 totals:\n" + line)
        claim_xid_counts(doc)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert "xid_counts" not in doc.owner
