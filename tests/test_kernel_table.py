"""The kernel-log event table: every row's sample line is decided by that row and
scanned into its kind; the scanner's anchors are the rows' literals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.logscan import scan_text
from gputriage.logscan.lines import BOOT_ANCHORS
from gputriage.logscan.search import ANCHORS
from gputriage.parsers import kernel_table
from gputriage.parsers.kernel_model import LogLine
from gputriage.parsers.kernel_patterns import split_prefix
from gputriage.parsers.kernel_table import CONTEXT_ANCHORS, EVENTS, EventPattern, match_line
from gputriage.vocabulary import EventKind


def _first_line(sample: str) -> LogLine:
    text = sample.splitlines()[0]
    stamps, msg, _ = split_prefix(text)
    return LogLine(text, msg, stamps, 1)


@pytest.mark.parametrize("row", EVENTS, ids=lambda p: f"{p.kind}:{p.sample[:40]}")
def test_each_sample_is_decided_by_its_row_and_scanned_into_its_kind(row: EventPattern):
    found = match_line(_first_line(row.sample))
    assert found is not None and found[0] is row, found and found[0].sample
    events = scan_text(row.sample + "\n").events
    if row.joins is None and not found[1]:  # a row that claims a line and proves nothing
        assert events == []
        return
    assert events and events[0].kind == row.kind
    assert isinstance(events[0].kind, EventKind)
    assert any(a in row.sample for a in row.anchors), "the scanner would not see it"


def test_every_kind_has_a_row():
    assert {p.kind for p in EVENTS} == set(EventKind)


def test_the_scanner_anchors_are_the_rows_literals():
    literals = {a for p in EVENTS for a in p.anchors} | set(BOOT_ANCHORS)
    assert {a.decode() for a in ANCHORS} == literals and len(ANCHORS) == len(literals)
    assert set(CONTEXT_ANCHORS) == {"PCIe Bus Error", "blocked for more than", "soft lockup"}


def test_kinds_read_as_their_names():
    """Rules compare ``ev.kind == "xid"``, views format and JSON writes the kind: an
    EventKind reads as its plain name everywhere."""
    kind = EventKind.FALLEN_OFF_BUS
    assert kind == "fallen-off-bus" and f"{kind}" == str(kind) == "fallen-off-bus"
    assert "fallen-off-bus" in {kind} and {"fallen-off-bus": 1}[kind] == 1


@pytest.mark.parametrize("line, version, is_open", [
    ("[ 1843.439669] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  "
     "Release Build  (dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025",
     "570.158.01", "yes"),
    ("Jan  3 07:39:45 ubuntu kernel: [17257.418954] NVRM: loading NVIDIA UNIX x86_64 Kernel "
     "Module  525.125.06  Tue May 30 05:11:37 UTC 2023", "525.125.06", "no"),
])
def test_a_driver_load_banner_gives_the_version(line: str, version: str, is_open: str):
    """Both banners of the module (proprietary, open), as real logs print them."""
    (ev,) = scan_text(line + "\n").events
    assert ev.kind == EventKind.DRIVER_LOAD and ev.bus_id is None
    assert ev.details == {"driver_version": version, "open": is_open}


def _candidates_reference(msg: str) -> list[int]:
    """The rows whose literal test ``msg`` passes: every literal looked for, no cache."""
    kt = kernel_table
    low = msg.lower()
    return sorted({i for n, rows in kt._BY_NEEDLE if n in msg for i in rows}
                  | {i for n, rows in kt._BY_LOWER if n in low for i in rows})


def _candidate_messages(corpus) -> list[str]:
    samples = corpus.category("2") + corpus.category("4")
    lines = [ln for s in samples for ln in s.text().splitlines()]
    lines += [ln for p in EVENTS for ln in p.sample.splitlines()]
    return [split_prefix(ln)[1] for ln in lines]


def test_candidate_rows_are_the_literals_found_also_from_the_kept_ones(corpus):
    """The rows a message's literals pick, kept per message with its digits read as 0,
    are those every literal looked for finds: the first time and from what was kept."""
    kt = kernel_table
    msgs = _candidate_messages(corpus)
    assert len(msgs) > 500
    kt._FOUND.clear()
    for _ in range(2):  # (the second pass reads what the first one kept)
        for msg in msgs:
            assert list(kt._candidates(msg)) == _candidates_reference(msg), msg
    # the same messages with other numbers: kept under one key, each read right
    for msg in ["mlx5_core 0000:53:00.0: Link down", "mlx4_core 0000:53:00.0: Link down",
                "NVRM: _kgspLogXid119: x", "NVRM: _kgspLogXid118: x", "EXT4-fs error",
                "EXT5-fs error", "Kflcncoredump \u212a", "GSP rpc 1"]:
        assert list(kt._candidates(msg)) == _candidates_reference(msg), msg


_LITERAL_PIECES = st.sampled_from(
    [n for n, _ in kernel_table._BY_NEEDLE]
    + ["mlx4_core", "mlx0_core", "EXT0-fs", "Xid118", "RPC", "GSP", "NVLink", "0", "5", "9",
       " ", ":", "\u212a", "\u0130", "x"])


@given(st.lists(_LITERAL_PIECES, max_size=6).map("".join))
@settings(deadline=None)
def test_candidate_rows_on_generated_messages(msg):
    kt = kernel_table
    assert list(kt._candidates(msg)) == _candidates_reference(msg)
    assert list(kt._candidates(msg)) == _candidates_reference(msg)  # (now kept)
