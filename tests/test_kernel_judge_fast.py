"""The shortcuts the kernel-log judgement and the logs timeline take on thousands of kept
events (one pass for the Xid list, the last occurrences picked without sorting a group,
fault patterns worked out once per message and only for a crash loop, rows whose times
are read when shown) give what the plain computation gives, on random groups with ties,
folded storms, several inputs and boots."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from gputriage.logscan.events import DriverEvent
from gputriage.parsers.kernel_fold import seconds
from gputriage.parsers.kernel_model import Repeats
from gputriage.parsers.kernel_repeats import fault_pattern, process_key
from gputriage.rules import kernel_common
from gputriage.rules.kernel_common import EVIDENCE_TAIL, _tail, log_order, xid_events
from gputriage.rules.kernel_xid import _app_faults
from gputriage.text.fields import strict_int
from gputriage.views.timeline import build_timeline
from gputriage.vocabulary import EventKind

T0 = datetime(2024, 5, 14, 8, 0, 0, tzinfo=timezone.utc)
BUSES = ("0000:18:00.0", "0000:9a:00.0", None)
CODES = ("13", "31", "43", "45", "79", "119", "x1", "")
MESSAGES = ("Ch 00000010, MMU Fault @ 0x7f00_1000", "Ch 00000011, MMU Fault @ 0x7f00_2000",
            "Graphics Exception: ESR 0x504648=0x1", None)


def _event(rng: random.Random, lineno: int) -> DriverEvent:
    kind = rng.choice(("xid", "xid", "xid", "fallen-off-bus", "sxid", "mlx5-link"))
    details = {"code": rng.choice(CODES)} if kind in ("xid", "sxid") else {}
    message = rng.choice(MESSAGES)
    if message is not None:
        details["message"] = message
    if rng.random() < 0.7:
        details["pid"] = str(rng.choice((100, 101, 102, 103)))
        details["process"] = rng.choice(("python3", "trainer", "<unknown>"))
    timed = rng.random() < 0.8
    at = rng.choice((0.0, 1.0, 2.5, 7.0))  # ties on purpose
    return DriverEvent(rng.choice((kind, EventKind(kind))), f"line {lineno}\nmore",
                       rng.choice(BUSES), f"{100 + at:.6f}", details,
                       time=T0 + timedelta(seconds=at) if timed else None,
                       uptime_s=100 + at if rng.random() < 0.7 else None,
                       boot=rng.choice((0, 0, -1)), lineno=rng.choice((lineno, 5, None)),
                       origin=rng.choice(("kern.log.1", "kern.log", None)))


def _events(seed: int, n: int = 30) -> list[DriverEvent]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ev = _event(rng, i + 10)
        if rng.random() < 0.3:  # a folded storm: its latest occurrence later in the log
            last = _event(rng, i + 10 + rng.randrange(0, 40))
            ev.count = rng.choice((2, 3, 64))
            procs = {"200": "python3", "201": "python3"} if rng.random() < 0.5 else {}
            ev.repeats = Repeats(last, processes=procs, other_processes=rng.choice((0, 3)),
                                 patterns={k: {f"13:{k}"} for k in procs})
        out.append(ev)
    return out


# --- the plain computations (as the code read before the shortcuts) -------------------------

def _plain_xid_events(events):
    events = list(events)
    lost = kernel_common.lost_gpu_xid()
    code = kernel_common.xid_code
    has_lost = {(ev.bus_id, ev.boot) for ev in events if ev.kind == "xid" and code(ev) == lost}
    out = []
    for ev in events:
        c = code(ev) if ev.kind == "xid" else None
        if c is not None:
            out.append((c, ev))
        elif lost is not None and ev.kind == "fallen-off-bus" and (
                ev.bus_id, ev.boot) not in has_lost:
            out.append((lost, ev))
    return out


def _plain_key(events):
    origins: dict = {}
    for ev in (*events, *(e.latest for e in events)):
        origins.setdefault(ev.origin, len(origins))
    return lambda ev: (ev.boot, origins.get(ev.origin, len(origins)),
                       ev.lineno if ev.lineno is not None else -1, seconds(ev) or 0.0)


def _plain_tail(events, head):
    key = _plain_key(events)
    spans = [(key(ev), key(ev.latest)) for ev in events if ev.count > 2]
    seen = {id(ev) for ev in head}
    known = sorted([*events, *(ev.latest for ev in events if ev.latest is not ev)], key=key)
    out = []
    for ev in reversed(known):
        if len(out) == EVIDENCE_TAIL or id(ev) in seen:
            break
        if out and any(a <= key(ev) < b for a, b in spans):
            break
        out.append(ev)
    return out[::-1]


def _plain_shared_pattern(items) -> bool:
    patterns: dict[str, set[str]] = {}
    for code, ev in items:
        key, _ = process_key(ev)
        if key:
            patterns.setdefault(key, set()).add(fault_pattern(code, ev))
        if ev.repeats is not None:
            for key in ev.repeats.processes:
                patterns.setdefault(key, set()).update(ev.repeats.patterns.get(key, ()))
    return bool(set.intersection(*patterns.values())) if patterns else False


def _when(ev):
    return ev.time.isoformat() if ev.time is not None else ev.timestamp


def _plain_rows(events):
    """(bus, kind, code, boot, first, last, count, line) of each burst, lane by lane."""
    lanes: dict = {}
    before: dict = {}
    for ev in events:
        rows = lanes.setdefault(ev.bus_id, [])
        prev, before[ev.bus_id] = before.get(ev.bus_id), ev
        code = (strict_int(ev.details.get("code", ""), signed=False)
                if ev.kind in ("xid", "sxid") else None)
        if (prev is not None and ev.kind == "fallen-off-bus" and prev.kind == "xid"
                and strict_int(prev.details.get("code", ""), signed=False) == 79
                and (prev.lineno, prev.origin, prev.count) == (ev.lineno, ev.origin, ev.count)):
            continue
        if rows and rows[-1][:3] == [ev.kind, code, ev.boot]:
            row = rows[-1]
            row[6] += ev.count
            at = seconds(ev.latest)
            if at is None or row[7] is None or at >= row[7]:
                row[5], row[7] = _when(ev.latest), at
            continue
        rows.append([ev.kind, code, ev.boot, _when(ev), ev.line.splitlines()[0] if ev.line
                     else "", _when(ev.latest), ev.count, seconds(ev.latest)])
    return {bus: [(r[0], r[1], r[2], r[3], r[5], r[6], r[4]) for r in rows]
            for bus, rows in lanes.items()}


# --- the shortcuts against them -------------------------------------------------------------

@pytest.mark.parametrize("seed", range(60))
def test_xid_events_in_one_pass_as_plain(seed):
    events = _events(seed)
    assert [(c, id(ev)) for c, ev in xid_events(events)] == [
        (c, id(ev)) for c, ev in _plain_xid_events(events)]


@pytest.mark.parametrize("seed", range(60))
def test_log_order_and_tail_as_sorting_the_group(seed):
    events = _events(seed, n=random.Random(seed).randrange(1, 25))
    key, plain = log_order(events), _plain_key(events)
    for ev in (*events, *(e.latest for e in events)):
        assert key(ev) == plain(ev)
    for head_n in (0, 1, 7):
        head = events[:head_n]
        assert [id(ev) for ev in _tail(events, head)] == [
            id(ev) for ev in _plain_tail(events, head)]


def test_tail_of_occurrences_that_tie_keeps_the_later_listed():
    """Occurrences of one line, time and input (an Xid 79 line's two events) end the tail
    in the order a stable sort reversed puts them."""
    a = DriverEvent("xid", "a", None, None, {"code": "79"}, time=T0, lineno=3, origin="x")
    b = DriverEvent("fallen-off-bus", "b", None, None, {}, time=T0, lineno=3, origin="x")
    c = DriverEvent("xid", "c", None, None, {"code": "79"}, time=T0, lineno=3, origin="x")
    assert _tail([a, b, c], []) == _plain_tail([a, b, c], []) == [b, c]


@pytest.mark.parametrize("seed", range(40))
def test_shared_fault_pattern_as_per_event(seed):
    items = [(c, ev) for c, ev in _plain_xid_events(_events(seed, n=40)) if c in (13, 31, 43)]
    assert _app_faults(items).shared_pattern() == _plain_shared_pattern(items)


@pytest.mark.parametrize("seed", range(40))
def test_shared_fault_pattern_of_one_program_as_per_event(seed):
    """Processes of one program faulting with messages that differ in numbers only (one
    pattern), now and then another message or a storm's kept pattern."""
    rng = random.Random(seed)
    shared = fault_pattern(31, DriverEvent("xid", "", None, None, {"message": MESSAGES[0]}))
    items = []
    for i in range(rng.randrange(1, 12)):
        message = rng.choice(MESSAGES[:2] * 8 + MESSAGES[2:])
        details = {"code": "31", "pid": str(rng.choice((7, 8, 9))), "process": "trainer"}
        if message is not None:
            details["message"] = message
        ev = DriverEvent("xid", f"line {i}", BUSES[0], None, details, time=T0, lineno=i)
        if rng.random() < 0.3:
            ev.count = 5
            ev.repeats = Repeats(ev, processes={"10": "trainer"},
                                 patterns={"10": {rng.choice((shared, "31:other"))}})
        items.append((31, ev))
    assert _app_faults(items).shared_pattern() == _plain_shared_pattern(items)


@pytest.mark.parametrize("seed", range(40))
def test_timeline_rows_as_computed_eagerly(seed):
    events = _events(seed, n=60)
    lanes = build_timeline(events)
    got = {lane.pci_bus_id: [(r.kind, r.code, r.boot, r.first, r.last, r.count, r.line)
                             for r in lane.rows] for lane in lanes}
    assert got == _plain_rows(events)
