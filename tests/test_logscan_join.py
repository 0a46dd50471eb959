"""What the main process does with the blocks of a large file: each worker's result
crosses a pipe as a pickle and is joined to the blocks before it. A result must come
out of its pickle with all its state, the joins must give what one pass gives, and the
shortcuts of the join (a folded event merged into another, one input taken as it was
folded) must give what the long way gives."""

from __future__ import annotations

import os
import pickle
import random
import threading
from dataclasses import astuple, replace
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gputriage.logscan as logscan
from gputriage.io.forkpool import ForkWorkers
from gputriage.logscan import ScanConfig, blocks, scan_paths, timeline
from gputriage.logscan.blocks import block_task
from gputriage.logscan.search import anchors_for
from gputriage.parsers import kernel_fold
from gputriage.parsers.kernel_model import DriverEvent, Repeats
from gputriage.parsers.kernel_repeats import (
    APP_FAULTS,
    PATTERN_TRIES,
    PATTERNS,
    PROCESSES,
    count_into,
    fault_pattern,
    merge_folded,
    process_key,
)

NOW = datetime(2024, 9, 1, tzinfo=timezone.utc)
BLOCK = 8192
CODES = (13, 31, 31, 43, 45, 45, 79, 119)


def _storm(seed: int, n: int = 1500) -> str:
    """dmesg lines: an Xid storm on four GPUs from more processes than a folded event
    names, with driver loads, GPU resets (Xid 154 back to None), reboots (a banner, an
    uptime that goes back) and noise between them."""
    rng = random.Random(seed)
    procs = [(rng.randint(100, 99999), rng.choice(("python3", "torchrun", "<unknown>")))
             for _ in range(PROCESSES + 20)]
    up, out = 5.0, []
    for i in range(n):
        up += rng.choice((0.0, 0.001, 0.4, 40.0))
        bus = rng.choice(("1b", "3b", "9a", "db"))
        r = rng.random()
        if i in (n // 3, 2 * n // 3):
            up = 2.0
            if i == n // 3:
                out.append(f"[{up:12.6f}] Linux version 6.5.0-44-generic (buildd@lcy02)")
            continue
        if r < 0.01:
            msg = ("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03  "
                   "Thu Oct 19 18:56:32 UTC 2023")
        elif r < 0.02:
            msg = (f"NVRM: Xid (PCI:0000:{bus}:00): 154, GPU recovery action changed from "
                   "0x1 (GPU Reset Required) to 0x0 (None)")
        elif r < 0.2:
            msg = "usb 1-4: new high-speed USB device number 3 using xhci_hcd"
        else:
            pid, name = rng.choice(procs)
            code = rng.choice(CODES)
            msg = (f"NVRM: Xid (PCI:0000:{bus}:00): {code}, pid={pid}, name={name}, "
                   f"Ch 000000{rng.randint(0, 255):02x} @ 0x{rng.getrandbits(40):x}")
        out.append(f"[{up:12.6f}] {msg}")
    return "\n".join(out) + "\n"


def dump(ev: DriverEvent) -> tuple:
    """Everything an event says, its folded occurrences included."""
    reps = ev.repeats
    folded = None if reps is None else (
        "itself" if reps.last is ev else dump(reps.last), list(reps.processes.items()),
        reps.other_processes, sorted((k, sorted(v)) for k, v in reps.patterns.items()),
        sorted(reps.tries.items()), sorted(reps.causes.items()), reps.uncaused)
    return (ev.kind, ev.line, ev.bus_id, ev.timestamp, sorted(ev.details.items()), ev.time,
            ev.uptime_s, ev.boot, ev.lineno, ev.origin, ev.count, ev.follows, folded)


def _scan_dump(scan: Any) -> tuple:
    return ([dump(e) for e in scan.events], scan.boots, scan.lines, scan.skipped,
            scan.formats, scan.bytes)


@pytest.fixture(autouse=True)
def _keep_few(monkeypatch):
    """Keys folded after a few occurrences (not 64): short logs storm."""
    monkeypatch.setattr(kernel_fold, "KEEP", 3)
    monkeypatch.setattr(blocks, "BLOCK_KEEP", 2)


@pytest.fixture
def storm_file(tmp_path):
    path = tmp_path / "kern.log"
    path.write_text(_storm(1))
    return path


def _block_results(path: os.PathLike[str]) -> list[blocks.BlockResult]:
    config = replace(ScanConfig(), block=BLOCK)
    with open(path, "rb") as fh:
        anchors = anchors_for(fh.read(4096))
    count = os.path.getsize(path) // BLOCK + 1
    return [block_task(str(path), i, anchors=anchors, config=config, name="kern.log",
                       now=NOW) for i in range(count)]


def _state(r: blocks.BlockResult) -> dict[str, Any]:
    """A block's result as plain values: its folder's state included, and which of its
    events each folded key, hot key and lead refers to (an event, not a copy)."""
    fold = dict(vars(r.fold))
    events = fold.pop("events")
    where = {id(e): i for i, e in enumerate(events)}
    kept = {id(d): i for i, d in enumerate(fold["deferred"])}

    def ref(ev: DriverEvent | kernel_fold.Deferred | None) -> Any:
        if isinstance(ev, kernel_fold.Deferred):  # (a lead kept as its bytes)
            return ("kept", kept.get(id(ev)), astuple(ev))
        return None if ev is None else (where.get(id(ev)), dump(ev))

    fold["_folded"] = {k: ref(v) for k, v in fold["_folded"].items()}
    fold["_hot"] = {k: (n, ref(a), ref(b)) for k, (n, a, b) in fold["_hot"].items()}
    fold["leads"] = {bus: [(ref(x.event), x.at, x.named, x.index) for x in leads]
                     for bus, leads in fold["leads"].items()}
    return {**{k: v for k, v in vars(r).items() if k != "fold"}, "fold": fold,
            "events": [dump(e) for e in events]}


def test_a_block_result_comes_out_of_its_pickle_whole(storm_file):
    """Every block of a storm with resets, driver loads and reboots: events, folded
    occurrences, boot segments, Xid states and the leads the next join settles."""
    plain = _block_results(storm_file)
    sent = [pickle.loads(pickle.dumps(r, pickle.HIGHEST_PROTOCOL))
            for r in _block_results(storm_file)]
    assert len(plain) > 5
    assert any(r.fold.leads for r in plain[1:])  # Xid 45s the join must settle
    assert any(len(r.segs) > 1 for r in plain)  # a reboot inside a block
    assert any(e.repeats is not None for r in plain for e in r.fold.events)
    for a, b in zip(plain, sent, strict=True):
        assert _state(a) == _state(b)


class _InProcess:
    """Worker "processes" that run each task here, its result pickled or not."""

    def __init__(self, pickled: bool) -> None:
        self.pickled = pickled

    def run(self, task: Any, count: int) -> Any:
        for i in range(count):
            r = task(i)
            yield pickle.loads(pickle.dumps(r, pickle.HIGHEST_PROTOCOL)) if self.pickled else r


@pytest.mark.parametrize("seed", (1, 2))
def test_blocks_joined_after_their_pickles_as_without(monkeypatch, tmp_path, seed):
    """The same scan from blocks whose results were never pickled, from pickled ones,
    and from forked workers (results through their pipes)."""
    path = tmp_path / "kern.log"
    path.write_text(_storm(seed))
    config = replace(ScanConfig(), workers=2, process_min=0, block=BLOCK, task=BLOCK)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    got = []
    for pool in (_InProcess(False), _InProcess(True), ForkWorkers(2)):
        with monkeypatch.context() as m:
            m.setattr(logscan, "process_pool", lambda n, p=pool: p)
            got.append(_scan_dump(scan_paths([str(path)], now=NOW, config=config)))
    assert got[0] == got[1] == got[2]
    assert sum(1 for e in got[0][0] if e[-1] is not None) > 10  # folded events


def _both_ways(monkeypatch, run: Any) -> tuple[tuple, tuple]:
    with monkeypatch.context() as m:
        m.setattr(timeline, "_as_is", lambda part, mapping: False)
        slow = _scan_dump(run())
    return _scan_dump(run()), slow


@pytest.mark.parametrize("block", (BLOCK, 1 << 22))
def test_one_input_taken_as_folded_as_folded_again(monkeypatch, tmp_path, block):
    """A single input's events are not folded a second time: the same timeline as when
    they are (a file in worker blocks, a file read here; storms, resets, reboots)."""
    path = tmp_path / "kern.log"
    path.write_text(_storm(3))
    config = replace(ScanConfig(), workers=2, process_min=0, block=block, task=block)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    fast, slow = _both_ways(monkeypatch, lambda: scan_paths([str(path)], now=NOW,
                                                            config=config))
    assert fast == slow and len(fast[1]) == 3


def test_corpus_kernel_logs_taken_as_folded(monkeypatch, corpus):
    for sample in corpus.category("4"):
        fast, slow = _both_ways(monkeypatch, lambda s=sample: scan_paths([str(s.path)]))
        assert fast == slow, sample.path.name


def test_one_input_whose_boots_are_renumbered_is_folded_again(monkeypatch):
    """A boot segment that saw nothing (no line, id or marker) joins the boot before:
    its events are folded again with that boot's (here a storm's two halves become one
    folded event), not taken as they were."""
    from gputriage.logscan.lines import BootSegment, LineSource
    from gputriage.logscan.timeline import InputResult, merge

    def result() -> InputResult:
        src = LineSource("kern.log", None)
        src.segs = [BootSegment(seen=True), BootSegment()]
        for i in range(8):
            src.fold.add(DriverEvent("xid", f"Xid 13 #{i}", "0000:1b:00.0", details={
                "code": "13", "pid": "7", "process": "p", "message": "m"},
                uptime_s=float(i), boot=i // 4))
        return InputResult("kern.log", 0, src, 8, 100, [])

    taken = merge([result()])
    with monkeypatch.context() as m:
        m.setattr(timeline, "_as_is", lambda part, mapping: False)
        folded = merge([result()])
    assert [dump(e) for e in taken.events] == [dump(e) for e in folded.events]
    assert len(taken.boots) == 1 and [e.count for e in taken.events] == [1, 1, 1, 5]


def _reference_merge(into: DriverEvent, ev: DriverEvent) -> None:
    """``merge_folded`` of two folded events written the plain way (one process at a time)."""
    reps, other = into.repeats, ev.repeats
    assert reps is not None and other is not None
    into.count += ev.count
    reps.last = ev.latest
    for key, name in other.processes.items():
        if key in reps.processes or len(reps.processes) < PROCESSES:
            reps.processes[key] = name or reps.processes.get(key, "")
            pats = reps.patterns.setdefault(key, set())
            for p in other.patterns.get(key, ()):
                if len(pats) < PATTERNS:
                    pats.add(p)
        else:
            reps.other_processes += 1
    reps.other_processes += other.other_processes
    for c, n in other.causes.items():
        reps.causes[c] = reps.causes.get(c, 0) + n
    reps.uncaused += other.uncaused


_KEYS = st.integers(0, PROCESSES + 12).map(str)
# processes named: none, a few, all but a few, as many as a folded event names
_PROCESSES = st.tuples(
    st.sampled_from((PROCESSES, PROCESSES - 3, 5, 0, PROCESSES)),
    st.permutations(range(PROCESSES + 12)),
    st.lists(st.sampled_from(("", "python3", "torchrun")), min_size=PROCESSES,
             max_size=PROCESSES)).map(
    lambda t: {str(key): name for key, name in zip(t[1][:t[0]], t[2], strict=False)})
_FOLDED = st.fixed_dictionaries({
    "processes": _PROCESSES,
    "patterns": st.dictionaries(_KEYS, st.sets(st.sampled_from("abcdef"), max_size=5)),
    "other": st.integers(0, 3), "causes": st.dictionaries(st.sampled_from((13, 31)),
                                                          st.integers(1, 3)),
    "uncaused": st.integers(0, 2), "count": st.integers(2, 9)})


def _folded(spec: dict[str, Any]) -> DriverEvent:
    ev = DriverEvent("xid", "Xid 31", "0000:1b:00.0", details={"code": "31"},
                     count=spec["count"])
    ev.repeats = Repeats(ev, dict(spec["processes"]), spec["other"],
                         {k: set(v) for k, v in spec["patterns"].items()}, {},
                         dict(spec["causes"]), spec["uncaused"])
    return ev


@settings(max_examples=150, deadline=None)
@given(_FOLDED, _FOLDED)
def test_merging_a_folded_event_as_one_process_at_a_time(a, b):
    """A folded event merged into another (a block's into the blocks' before): named
    processes, those counted beyond the bound, patterns and causes as the plain way,
    whether the processes it joins are all named already or not."""
    fast, slow = _folded(a), _folded(a)
    merge_folded(fast, _folded(b))
    _reference_merge(slow, _folded(b))
    assert dump(fast)[10:] == dump(slow)[10:]
    assert list(fast.repeats.patterns) == list(slow.repeats.patterns)  # type: ignore[union-attr]


def _reference_count_into(reps: Repeats, ev: DriverEvent) -> None:
    """``count_into`` written the plain way."""
    if ev.kind not in ("xid", "segfault"):
        return
    key, name = process_key(ev)
    if key:
        if key in reps.processes or len(reps.processes) < PROCESSES:
            if name or key not in reps.processes:
                reps.processes[key] = name
            code = ev.details.get("code", "")
            if code in APP_FAULTS:
                pats = reps.patterns.setdefault(key, set())
                tries = reps.tries.get(key, 0)
                if len(pats) < PATTERNS and tries < PATTERN_TRIES:
                    reps.tries[key] = tries + 1
                    pats.add(fault_pattern(code, ev))
        else:
            reps.other_processes += 1
    if ev.details.get("code") == "45":
        if ev.follows:
            for c in ev.follows:
                reps.causes[c] = reps.causes.get(c, 0) + 1
        else:
            reps.uncaused += 1


_OCCURRENCE = st.fixed_dictionaries({
    "kind": st.sampled_from(("xid", "xid", "segfault", "gsp-timeout")),
    "code": st.sampled_from(("13", "31", "43", "45", "79", None)),
    "pid": st.sampled_from(("7", "'8'", "", "x", None, "70", "71")),
    "process": st.sampled_from(("python3", "<unknown>", " ", "", None)),
    "message": st.sampled_from(("Ch 0000003b @ 0x1f", "Ch 00000010 @ 0x2e", "")),
    "follows": st.sampled_from((None, (), (13,), (13, 31)))})


def _occurrence(spec: dict[str, Any]) -> DriverEvent:
    details = {k: spec[k] for k in ("code", "pid", "process", "message") if spec[k] is not None}
    return DriverEvent(spec["kind"], "line", "0000:1b:00.0", details=details,
                       follows=spec["follows"])


@given(_FOLDED, st.lists(_OCCURRENCE, max_size=30))
def test_counting_one_occurrence_into_a_folded_event_as_the_plain_way(a, occurrences):
    """Single occurrences merged into a folded event (a block's first ones into the
    blocks' before): processes, bound, fault patterns and tries, Xid 45 causes."""
    fast, slow = _folded(a), _folded(a)
    for spec in occurrences:
        count_into(fast.repeats, _occurrence(spec))  # type: ignore[arg-type]
        _reference_count_into(slow.repeats, _occurrence(spec))  # type: ignore[arg-type]
    assert dump(fast) == dump(slow)
    assert list(fast.repeats.patterns) == list(slow.repeats.patterns)  # type: ignore[union-attr]
