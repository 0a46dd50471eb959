"""Storms folded while scanning (parsers/kernel_fold.py): what is kept, what is counted,
Xid 45 attribution, and the same folded result from one sequential pass and from worker
processes reading blocks (wherever the blocks end)."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from gputriage.logscan import ScanConfig, blocks, scan_paths, scan_text
from gputriage.parsers import kernel_fold
from gputriage.parsers.kernel_fold import KEEP, LOOKBACK, Folder
from gputriage.parsers.kernel_model import DriverEvent
from gputriage.parsers.kernel_repeats import PROCESSES

NOW = datetime(2024, 6, 1, tzinfo=timezone.utc)
BUSES = ("0000:1b:00.0", "0000:3b:00.0", "0000:9a:00.0", "0000:db:00.0")


def _xid(code: int, at: float, bus: str = "0000:1b:00.0", pid: int = 100,
         name: str = "python3", extra: str = "Ch 0000003b") -> str:
    return (f"[{at:12.6f}] NVRM: Xid (PCI:{bus[5:12]}): {code}, pid={pid}, name={name}, "
            f"{extra}")


def _event(code: int, at: float, bus: str = "0000:1b:00.0", pid: str = "1",
           caused_by: str | None = None) -> DriverEvent:
    details = {"code": str(code), "pid": pid, "process": "p", "message": "m"}
    if caused_by:
        details["caused_by"] = caused_by
    return DriverEvent("xid", f"Xid {code}", bus, None, details, uptime_s=at)


def test_first_events_kept_then_folded_with_count_and_latest():
    fold = Folder()
    for i in range(KEEP + 500):
        fold.add(_event(13, float(i), pid=str(1000 + i % 3)))
    assert len(fold.events) == KEEP + 1
    assert all(ev.count == 1 and ev.repeats is None for ev in fold.events[:KEEP])
    folded = fold.events[-1]
    assert folded.count == 500 and folded.latest.uptime_s == KEEP + 499
    assert folded.repeats is not None and set(folded.repeats.processes) == {
        "1000", "1001", "1002"}
    assert kernel_fold.weight(fold.events) == KEEP + 500


def test_processes_bounded_then_counted():
    fold = Folder()
    for i in range(KEEP + PROCESSES + 40):
        fold.add(_event(31, float(i), pid=str(5000 + i)))
    reps = fold.events[-1].repeats
    assert reps is not None
    assert len(reps.processes) == PROCESSES and reps.other_processes == 40


def test_keys_keep_devices_codes_boots_and_resets_apart():
    fold = Folder()
    for i in range(3 * KEEP):
        for bus in BUSES[:2]:
            fold.add(_event(13, float(i), bus))
            fold.add(_event(43, float(i), bus))
    assert len(fold.events) == 4 * (KEEP + 1)
    load = DriverEvent("driver-load", "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
                       uptime_s=999.0)
    fold.add(load)
    fold.add(_event(13, 1000.0, BUSES[0]))
    assert fold.events[-1].count == 1 and fold.events[-2] is load  # a new epoch
    other_boot = _event(13, 1.0, BUSES[0])
    other_boot.boot = 1
    fold.add(other_boot)
    assert fold.events[-1] is other_boot


def test_xid45_follows_the_gpu_latest_other_xid_within_30s_and_lookback():
    fold = Folder()
    fold.add(_event(13, 10.0))
    near = _event(45, 20.0)
    fold.add(near)
    other_gpu = _event(45, 21.0, BUSES[1])
    fold.add(other_gpu)
    late = _event(45, 50.0)
    fold.add(late)
    named = _event(45, 60.0, caused_by="31")
    fold.add(named)
    assert near.follows == (13,) and other_gpu.follows == () and late.follows == ()
    assert named.follows == (31,)
    fold = Folder()
    fold.add(_event(13, 0.0))
    for i in range(LOOKBACK + 10):
        fold.add(_event(45, 1.0 + i * 0.01))
    xid45 = [ev for ev in fold.events if ev.details["code"] == "45"]
    folded = xid45[-1].repeats
    assert all(ev.follows == (13,) for ev in xid45[:KEEP])
    assert folded is not None
    assert folded.causes.get(13, 0) == LOOKBACK - KEEP and folded.uncaused == 10


def _storm(seed: int = 11, lines: int = 12_000) -> str:
    """An Xid storm among ordinary lines: 13/31/43/45/119 on four GPUs, many pids, a
    driver load in the middle, a reboot near the end, a hung task with its trace."""
    rng = random.Random(seed)
    out, at = [], 100.0
    for i in range(lines):
        at += 0.01
        if i == lines // 2:
            out.append(f"[{at:12.6f}] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  "
                       "550.54.15  Tue Mar  5 22:23:56 UTC 2024")
        if i == lines * 9 // 10:
            at = 5.0
            out.append(f"[{at:12.6f}] Linux version 5.15.0-105-generic (buildd@lcy02)")
        if i == lines // 3:
            out.append(f"[{at:12.6f}] INFO: task python3:4242 blocked for more than 120 "
                       "seconds.")
            out += [f"[{at:12.6f}]  nv_wait_for_completion+0x12/0x30 [nvidia]"] * 3
        if i % 4:
            out.append(f"[{at:12.6f}] usb 1-1: new high-speed USB device number {i} using "
                       "xhci_hcd")
            continue
        bus = rng.choice(BUSES)
        code = rng.choice((13, 31, 43, 45, 45, 119))
        out.append(_xid(code, at, bus, rng.randrange(2000, 2100),
                        extra=f"Ch 0000003b, faulted @ 0x7f1c_{rng.randrange(1 << 32):08x}"))
    return "\n".join(out) + "\n"


def _summary(events: list[DriverEvent]) -> list[tuple]:
    out = []
    for ev in events:
        reps = ev.repeats
        out.append((str(ev.kind), ev.bus_id, ev.details.get("code"), ev.boot, ev.lineno,
                    ev.line, ev.count, ev.latest.lineno, ev.follows,
                    None if reps is None else (sorted(reps.processes.items()),
                                               reps.other_processes, reps.causes,
                                               reps.uncaused)))
    return out


def _by_key(events: list[DriverEvent]) -> dict[tuple, tuple]:
    out: dict[tuple, list] = {}
    for ev in events:
        key = (str(ev.kind), ev.bus_id, ev.details.get("code"), ev.boot)
        row = out.setdefault(key, [0, ev.lineno, ev.line, 0, {}, 0])
        row[0] += ev.count
        row[3] = max(row[3], ev.latest.lineno or 0)
        if ev.repeats is not None:
            for c, n in ev.repeats.causes.items():
                row[4][c] = row[4].get(c, 0) + n
            row[5] += ev.repeats.uncaused
        elif ev.follows is not None:
            for c in ev.follows:
                row[4][c] = row[4].get(c, 0) + 1
            row[5] += not ev.follows
    return {k: tuple(v[:4]) + (sorted(v[4].items()), v[5]) for k, v in out.items()}


def test_storm_folded_bounded_by_what_is_distinct():
    text = _storm()
    scan = scan_text(text, now=NOW)
    keys = {(ev.boot, str(ev.kind), ev.bus_id, ev.details.get("code")) for ev in scan.events}
    epochs = 2  # the driver load starts a second epoch of the first boot
    assert len(scan.events) <= len(keys) * epochs * (KEEP + 1) + 5
    assert kernel_fold.weight(ev for ev in scan.events if ev.kind == "xid") == text.count(
        "NVRM: Xid")


# the smallest block: the most region edges, and seconds of worker processes
@pytest.mark.parametrize("block", [pytest.param(4096, marks=pytest.mark.slow), 50_000, 1 << 20,
                                   8 << 20])
def test_workers_fold_as_one_sequential_pass(monkeypatch, tmp_path, block):
    """Blocks parsed and folded in worker processes, joined in order: the same events,
    counts, latest occurrences, processes and Xid 45 causes as one pass."""
    import threading

    path = tmp_path / "storm.log"
    path.write_text(_storm(seed=block))
    one = ScanConfig(block=block, workers=1)
    expected = scan_paths([str(path)], now=NOW, config=one)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    forked = scan_paths([str(path)], now=NOW,
                        config=replace(one, workers=2, process_min=0, task=block))
    # every block keeps the first KEEP of a key one by one: the very same events
    assert _summary(forked.events) == _summary(expected.events)
    # blocks after the first told to keep fewer (blocks.BLOCK_KEEP): per key, the same
    # occurrences, first and latest, and Xid 45 causes
    monkeypatch.setattr(blocks, "BLOCK_KEEP", 8)
    forked = scan_paths([str(path)], now=NOW,
                        config=replace(one, workers=2, process_min=0, task=block))
    assert _by_key(forked.events) == _by_key(expected.events)
    assert [(b.index, b.first, b.last) for b in forked.boots] == [
        (b.index, b.first, b.last) for b in expected.boots]
    assert len(expected.boots) == 2


def test_rotated_inputs_settle_the_xid45_that_open_the_next(tmp_path):
    old, new = tmp_path / "kern.log.1", tmp_path / "kern.log"
    old.write_text(_xid(13, 10.0) + "\n")
    new.write_text("".join(_xid(45, 12.0 + i) + "\n" for i in range(3)))
    scan = scan_paths([str(new), str(old)], now=NOW)
    xid45 = [ev for ev in scan.events if ev.details.get("code") == "45"]
    assert [ev.follows for ev in xid45] == [(13,)] * 3
