"""The timeline of ``gputriage logs`` as bursts: runs of one code on one device counted by
weight (a folded storm counts all it stands for), at most HEAD + TAIL per lane in the
terminal and in JSON with what was left out, ``--full`` listing every event the scan kept,
and a generated Xid storm whose report stays under 1 MB of JSON and 200 terminal lines."""

from __future__ import annotations

import io
import json
import random
from datetime import datetime, timedelta, timezone

import pytest
from rich.console import Console

from gputriage.model import HostSummary, Result
from gputriage.parsers.kernel_model import DriverEvent, Repeats
from gputriage.views.timeline import (
    HEAD,
    TAIL,
    build_timeline,
    logs_document,
    render_logs,
    totals,
)

T0 = datetime(2024, 5, 14, 8, 0, tzinfo=timezone.utc)
BUS = "0000:18:00.0"
STORM_LINES = 200_000
STORM_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")


def ev(code: int, second: float, *, count: int = 1, latest: float | None = None,
       bus: str = BUS, boot: int = 0) -> DriverEvent:
    """An Xid at T0 + ``second``; with ``count`` > 1 a folded one whose latest
    occurrence is at T0 + ``latest``."""
    def one(at: float) -> DriverEvent:
        return DriverEvent("xid", f"NVRM: Xid (PCI:{bus[:-2]}): {code}, pid=7, name=python3, "
                                  f"x {at}", bus, None, {"code": str(code)},
                           T0 + timedelta(seconds=at), boot=boot)
    out = one(second)
    if count > 1:
        out.count = count
        out.repeats = Repeats(last=one(second if latest is None else latest))
    return out


class Scan:
    """The counters of a scan, as :func:`render_logs` reads them."""

    def __init__(self, events: list[DriverEvent]) -> None:
        self.events = events
        self.lines, self.skipped, self.bytes = 100, 0, 10_000
        self.formats, self.problems, self.boots = ["dmesg-raw"], [], []


def piped(scan, lanes, result=None, *, full: bool = False, verbose: bool = False) -> str:
    buf = io.StringIO()
    render_logs(scan, lanes, result or Result(host=HostSummary(verdict="warning")),
                Console(file=buf, width=80, color_system=None), full=full, verbose=verbose)
    return buf.getvalue()


def test_single_events_keep_their_own_row():
    events = [ev(13 if i % 2 else 31, i) for i in range(5)]
    lanes = build_timeline(events)
    assert [(r.code, r.count) for r in lanes[0].rows] == [(31, 1), (13, 1)] * 2 + [(31, 1)]
    text = piped(Scan(events), lanes)
    assert " x1" not in text and " .. " not in text and "more burst" not in text
    assert text.count("Xid 13") == 2 and text.count("Xid 31") == 3
    assert "5 events on 1 GPU(s)/device(s)" in text and "kept" not in text


def test_a_run_counts_folded_events_by_weight_and_ends_at_the_latest_occurrence():
    events = [ev(13, 0), ev(13, 5, count=500, latest=900), ev(13, 10), ev(31, 11)]
    lanes = build_timeline(events)
    first, second = lanes[0].rows
    assert (first.code, first.count, second.count) == (13, 502, 1)
    # the folded event's latest occurrence is later than the single event after it
    assert first.first == T0.isoformat()
    assert first.last == (T0 + timedelta(seconds=900)).isoformat()
    assert lanes[0].weight == 503
    text = piped(Scan(events), lanes)
    assert "x502" in text and "503 events (4 kept, storms folded)" in text


def test_a_run_never_spans_boots():
    lanes = build_timeline([ev(79, 0, boot=-1), ev(79, 1)])
    assert [(r.boot, r.count) for r in lanes[0].rows] == [(-1, 1), (0, 1)]


def _long_lane() -> list[DriverEvent]:
    """30 bursts alternating Xid 13 and 31, the k-th of k + 1 events (one folded)."""
    events, at = [], 0.0
    for k in range(30):
        code = 13 if k % 2 == 0 else 31
        events.append(ev(code, at, count=k + 1, latest=at + k) if k else ev(code, at))
        at += k + 1
    return events


def test_a_long_lane_shows_its_first_and_last_bursts_and_what_it_leaves_out():
    events = _long_lane()
    lanes = build_timeline(events)
    assert len(lanes[0].rows) == 30
    head, cut, tail = lanes[0].shown()
    assert (len(head), len(cut), len(tail)) == (HEAD, 30 - HEAD - TAIL, TAIL)
    left = sum(range(HEAD + 1, 30 - TAIL + 1))
    by13 = sum(k + 1 for k in range(HEAD, 30 - TAIL) if k % 2 == 0)
    text = piped(Scan(events), lanes)
    assert left - by13 > by13  # the most frequent code first
    assert (f"\u2026 {len(cut)} more bursts ({left} events: Xid 31 x{left - by13}, "
            f"Xid 13 x{by13}; --full lists every event kept)") in text
    assert text.count("Xid 13") + text.count("Xid 31") == HEAD + TAIL + 2  # + the note
    assert "x30" in text and "x7" not in text.split("more bursts")[0]
    lane = lanes[0].to_json()
    assert len(lane["events"]) == HEAD + TAIL and lane["left_out_after"] == HEAD
    assert [r["count"] for r in lane["events"]] == [*range(1, HEAD + 1), *range(27, 31)]
    assert lane["totals"] == {"events": sum(range(1, 31)), "bursts": 30,
                              "bursts_left_out": len(cut), "events_left_out": left}
    assert totals(lanes) == {**lane["totals"], "full": False}


def test_verbose_keeps_the_bound_and_quotes_each_burst_line():
    events = _long_lane()
    text = piped(Scan(events), build_timeline(events), verbose=True)
    assert "more bursts" in text
    assert text.count("NVRM: Xid") == HEAD + TAIL


def test_full_lists_every_kept_event_folded_ones_once():
    events = _long_lane()
    lanes = build_timeline(events, full=True)
    assert len(lanes[0].rows) == len(events) == 30  # one row per event, none merged
    assert lanes[0].shown(full=True) == (lanes[0].rows, [], [])
    text = piped(Scan(events), lanes, full=True)
    assert "more burst" not in text and text.count("Xid 13") == 15
    assert f"{(T0 + timedelta(seconds=1)).isoformat()} .. " in text  # first .. latest
    doc = logs_document(Scan(events), lanes, Result(host=HostSummary(verdict="warning")),
                        full=True)
    assert len(doc["timeline"][0]["events"]) == 30
    assert doc["timeline"][0]["left_out_after"] is None
    assert doc["totals"] == {"events": sum(range(1, 31)), "bursts": 30, "bursts_left_out": 0,
                             "events_left_out": 0, "full": True}
    # consecutive identical events stay apart under --full
    assert len(build_timeline([ev(31, 0), ev(31, 1)], full=True)[0].rows) == 2


def test_lanes_are_bounded_one_by_one():
    events = [e for bus in ("0000:18:00.0", "0000:2a:00.0")
              for e in (ev(13, k, bus=bus) if k % 2 else ev(31, k, bus=bus) for k in range(40))]
    lanes = build_timeline(events)
    doc = logs_document(Scan(events), lanes, Result(host=HostSummary(verdict="warning")))
    assert [len(lane["events"]) for lane in doc["timeline"]] == [HEAD + TAIL] * 2
    assert doc["totals"]["bursts"] == 80 and doc["totals"]["bursts_left_out"] == 60
    assert doc["scan"]["events"] == 80 and doc["scan"]["kept"] == 80


# --- a storm through the scanner and the views ------------------------------------------

def _storm_text(lines: int, seed: int = 15) -> str:
    """An Xid storm as dmesg prints it: 13/31/43/119 over 8 GPUs from many processes,
    some channels' Xid 45 following."""
    rng = random.Random(seed)
    pids = [(rng.randint(1000, 4_000_000), rng.choice(("python3", "torchrun", "vllm")))
            for _ in range(300)]
    owed: list[tuple[str, int, str]] = []
    out = []
    for i in range(lines):
        if owed and rng.random() < 0.5:
            bus, pid, name = owed.pop(0)
            code, msg = 45, f"Ch {rng.randint(0, 255):08x}"
        else:
            code = rng.choice((13, 31, 43, 119))
            bus, (pid, name) = rng.choice(STORM_BUSES), rng.choice(pids)
            msg = {13: f"Graphics SM Warp Exception on (GPC {rng.randint(0, 7)}, TPC 1, SM 0)",
                   31: f"Ch 0000003b, intr 00000000. MMU Fault: faulted @ 0x7f1c_"
                       f"{rng.getrandbits(32):08x}",
                   43: f"Ch {rng.randint(0, 255):08x}",
                   119: "Timeout after 6s of waiting for RPC response from GPU0 GSP!"}[code]
            if code != 119 and rng.random() < 0.3 and len(owed) < 64:
                owed.append((bus, pid, name))
        out.append(f"[{1000 + i / 100:12.6f}] NVRM: Xid (PCI:0000:{bus}:00): {code}, "
                   f"pid={pid}, name={name}, {msg}\n")
    return "".join(out)


@pytest.fixture(scope="module")
def storm():
    """The storm scanned (storms folded by the scan itself) and judged as ``logs`` does."""
    from gputriage.engine.analysis import analyze_facts
    from gputriage.facts.store import Facts
    from gputriage.logscan import scan_text
    from gputriage.rules import LOG_AREAS, rules_of
    from gputriage.snapshot.bundle import Snapshot

    scan = scan_text(_storm_text(STORM_LINES), "storm.log")
    facts = Facts(Snapshot({}, None, "logs"))
    facts.prefill("log_scan", scan)
    return scan, analyze_facts(facts, rules_of(LOG_AREAS)), facts.get("log_events")


@pytest.mark.slow  # a 200,000-line Xid storm
def test_a_storm_gives_bounded_json(storm):
    scan, result, events = storm
    lanes = build_timeline(events)
    doc = logs_document(scan, lanes, result)
    size = len(json.dumps(doc))
    assert size < 1_000_000, size
    assert doc["scan"]["events"] == doc["totals"]["events"] == STORM_LINES
    assert doc["scan"]["kept"] < STORM_LINES // 20  # folded by the scan
    assert len(doc["timeline"]) == len(STORM_BUSES)
    assert all(len(lane["events"]) <= HEAD + TAIL for lane in doc["timeline"])
    assert doc["totals"]["bursts_left_out"] > 0
    left = doc["totals"]["events_left_out"]
    shown = sum(r["count"] for lane in doc["timeline"] for r in lane["events"])
    assert shown + left == STORM_LINES
    assert {f["id"] for f in doc["findings"]} >= {"xid.13", "xid.31", "xid.43", "xid.119"}


@pytest.mark.slow  # the 200,000-line storm
def test_a_storm_gives_a_short_terminal_report(storm):
    scan, result, events = storm
    text = piped(scan, build_timeline(events), result)
    lines = text.splitlines()
    assert len(lines) < 200, len(lines)
    assert f"{STORM_LINES} events ({len(scan.events)} kept, storms folded)" in lines[0]
    assert text.count("more bursts (") == len(STORM_BUSES)
    assert "more evidence blocks; -v shows all" in text
    assert all(line == line.rstrip() for line in lines)


@pytest.mark.slow  # the 200,000-line storm
def test_a_storm_under_full_lists_what_the_scan_kept(storm):
    scan, result, events = storm
    doc = logs_document(scan, build_timeline(events, full=True), result, full=True)
    assert sum(len(lane["events"]) for lane in doc["timeline"]) == len(events)
    assert doc["totals"]["events"] == STORM_LINES and doc["totals"]["bursts_left_out"] == 0


def test_xid79_storm_is_one_burst_per_gpu():
    """An Xid 79 line is two events (the Xid, the GPU fallen off the bus); a storm of
    them on two GPUs, folded by the scan, reads as one burst per GPU with every line."""
    from gputriage.logscan import scan_text

    text = "".join(
        f"[{100 + i * 0.01:12.6f}] NVRM: Xid (PCI:0000:{('1b', '3b')[i % 2]}:00): 79, "
        "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n" for i in range(600))
    lanes = build_timeline(scan_text(text).events)
    assert [(len(lane.rows), lane.rows[0].code, lane.rows[0].count) for lane in lanes] == [
        (1, 79, 300), (1, 79, 300)]
