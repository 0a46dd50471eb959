"""Tests for gputriage.logscan: formats, boots, times, every event kind, inputs."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import random
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gputriage.logscan as logscan
from gputriage.errors import InputError
from gputriage.io.forkpool import ForkWorkers, WorkerDied
from gputriage.logscan import LogScan, ScanConfig, blocks, scan_paths, scan_text
from gputriage.logscan.blocks import process_pool
from gputriage.logscan.events import scan_driver_events
from gputriage.logscan.search import ANCHORS, anchor_hits, anchors_for, probes

FIX = Path(__file__).resolve().parent / "fixtures" / "logs"
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def kinds(scan: LogScan) -> list[str]:
    return [e.kind for e in scan.events]


def only(scan: LogScan, kind: str):
    return [e for e in scan.events if e.kind == kind]


def xids(scan: LogScan) -> list[str]:
    return [e.details["code"] for e in only(scan, "xid")]


# --- every event kind, boots and times (journalctl -k -o short-iso with boot markers) ----

@pytest.fixture(scope="module")
def all_kinds() -> LogScan:
    return scan_paths([str(FIX / "all-kinds-short-iso.log")])


def test_all_kinds_formats_boots(all_kinds):
    assert all_kinds.formats == ["journalctl-short-iso"]
    assert [(b.index, b.boot_id) for b in all_kinds.boots] == [
        (-1, "1a2b3c4d5e6f47a8b9c0d1e2f3a4b5c6"), (0, "9f8e7d6c5b4a49382716a5b4c3d2e1f0")]
    assert all_kinds.boots[0].first == datetime(2024, 8, 30, 10, 0, tzinfo=timezone.utc)
    assert all_kinds.boots[1].last == datetime(2024, 8, 30, 12, 11, tzinfo=timezone.utc)
    assert all_kinds.lines == 35 and all_kinds.skipped == 0 and all_kinds.problems == []
    first = all_kinds.events[0]
    assert (first.kind, first.boot, first.lineno) == ("xid", -1, 4)
    assert first.time == datetime(2024, 8, 30, 10, 0, 5, tzinfo=timezone.utc)
    assert first.origin.endswith("all-kinds-short-iso.log")
    assert all(e.boot == 0 for e in all_kinds.events[2:])


def test_all_kinds_list(all_kinds):
    assert kinds(all_kinds) == [
        "xid", "fallen-off-bus", "sxid", "sxid", "gsp-rpc-timeout", "gsp-error",
        "gpu-reset-required", "peermem-invalid-context", "nvlink-error", "pcie-aer", "pcie-aer",
        "mlx5-link", "pcie-bandwidth-limited", "segfault", "hung-task", "soft-lockup", "xid"]


def test_sxid_with_continuations(all_kinds):
    fatal, nonfatal = only(all_kinds, "sxid")
    assert fatal.bus_id == "0000:c2:00.0" and fatal.line.count("\n") == 2
    assert {k: fatal.details[k] for k in ("code", "severity", "link", "switch", "engine_instance",
                                          "severity_level")} == {
        "code": "20034", "severity": "Fatal", "link": "28", "switch": "nvidia-nvswitch3",
        "engine_instance": "28", "severity_level": "1"}
    assert fatal.details["message"] == "Fatal, Link 28 LTSSM Fault Up"
    assert nonfatal.details["severity"] == "Non-fatal" and nonfatal.details["link"] == "47"


def test_gsp_reset_peermem_nvlink(all_kinds):
    (rpc,) = only(all_kinds, "gsp-rpc-timeout")
    assert rpc.details["timeout_s"] == "45" and rpc.details["gpu"] == "0"
    assert rpc.details["rpc_function"] == "GSP_RM_CONTROL"
    (gsp,) = only(all_kinds, "gsp-error")
    assert gsp.details["function"] == "kgspHealthCheck_TU102"
    assert only(all_kinds, "gpu-reset-required")[0].lineno == 14
    assert only(all_kinds, "peermem-invalid-context")
    (nvl,) = only(all_kinds, "nvlink-error")
    assert nvl.bus_id == "0000:3b:00.0" and nvl.details["link"] == "5"


def test_pcie_and_mlx5(all_kinds):
    received, bus_error = only(all_kinds, "pcie-aer")
    assert received.bus_id == "0000:18:00.0" and received.details["severity"] == "Corrected"
    assert received.details["reported_by"] == "0000:17:01.0"
    assert bus_error.bus_id == "0000:18:00.0"
    assert bus_error.details == {"severity": "Uncorrected (Fatal)", "type": "Transaction Layer",
                                 "agent": "Requester ID", "vendor_device": "10de:2330",
                                 "status": "00004000"}  # the status line joins its report
    (link,) = only(all_kinds, "mlx5-link")
    assert (link.bus_id, link.details) == ("0000:19:00.0", {"state": "down",
                                                            "interface": "ibp25s0"})
    (bw,) = only(all_kinds, "pcie-bandwidth-limited")
    assert bw.bus_id == "0000:19:00.0" and bw.details["limit"] == "8.0 GT/s PCIe x8"
    assert bw.details["limiting_link"] == "0000:16:02.0"


def test_segfault_hung_lockup_recovery(all_kinds):
    (seg,) = only(all_kinds, "segfault")  # the bash segfault is not GPU-related
    assert seg.details["library"] == "libcuda.so.550.54.15" and seg.details["process"] == "python"
    (hung,) = only(all_kinds, "hung-task")  # os_acquire_mutex is 7 lines below, no anchor
    assert hung.details == {"process": "python", "pid": "1234", "seconds": "120",
                            "in_nvidia": "yes"}
    (lock,) = only(all_kinds, "soft-lockup")  # "Modules linked in: nvidia" is not a frame
    assert lock.details["in_nvidia"] == "no" and lock.details["process"] == "kworker/12:1"
    x154 = all_kinds.events[-1]
    assert x154.details["recovery_action"] == "GPU Reset Required"
    assert x154.details["recovery_action_code"] == "0x1"


def test_soft_lockup_in_nvidia():
    text = ("[  500.1] watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [nvidia-smi:4242]\n"
            "[  500.1] RIP: 0010:_nv012454rm+0x437/0x4b0 [nvidia]\n")
    (ev,) = scan_text(text).events
    assert ev.kind == "soft-lockup" and ev.details["in_nvidia"] == "yes"
    assert ev.details["process"] == "nvidia-smi" and ev.uptime_s == 500.1


# --- formats -----------------------------------------------------------------------------

XID = "NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU."


@pytest.mark.parametrize(("line", "fmt", "time", "uptime"), [
    (f"[ 1234.567890] {XID}", "dmesg-raw", None, 1234.56789),
    (f"[Fri Aug 30 11:11:22 2024] {XID}", "dmesg-ctime",
     datetime(2024, 8, 30, 11, 11, 22, tzinfo=timezone.utc), None),
    (f"2024-08-30T11:11:22,123456+00:00 {XID}", "dmesg-iso",
     datetime(2024, 8, 30, 11, 11, 22, 123456, tzinfo=timezone.utc), None),
    (f"Aug 30 11:11:22 gpu-7 kernel: {XID}", "journalctl-short",
     datetime(2026, 8, 30, 11, 11, 22, tzinfo=timezone.utc), None),
    (f"2024-08-30T13:11:22+0200 gpu-7 kernel: {XID}", "journalctl-short-iso",
     datetime(2024, 8, 30, 11, 11, 22, tzinfo=timezone.utc), None),
    (f"Aug 30 11:11:22.123456 gpu-7 kernel: {XID}", "journalctl-short-precise",
     datetime(2026, 8, 30, 11, 11, 22, 123456, tzinfo=timezone.utc), None),
    (f"Aug 30 11:11:22 gpu-7 kernel: [ 1234.567890] {XID}", "syslog",
     datetime(2026, 8, 30, 11, 11, 22, tzinfo=timezone.utc), 1234.56789),
    (f"10.0.0.9: kern: warning: [2024-08-30T11:11:22.599488292Z]: {XID}", "talos",
     datetime(2024, 8, 30, 11, 11, 22, 599488, tzinfo=timezone.utc), None),
    (f"6,1234,5678901,-;{XID}", "kmsg", None, 5.678901),
    (f"<4>[ 1234.567890] {XID}", "dmesg-raw", None, 1234.56789),
    (XID, "plain", None, None),
])
def test_formats(line, fmt, time, uptime):
    scan = scan_text(line + "\n", now=NOW)
    (ev,) = scan.events
    assert scan.formats == [fmt]
    assert (ev.kind, ev.bus_id, ev.details["code"]) == ("xid", "0000:18:00.0", "48")
    assert ev.time == time and ev.uptime_s == uptime and ev.boot == 0 and ev.lineno == 1


def test_syslog_year_rolls_back_when_in_future():
    (ev,) = scan_text(f"Dec 31 23:59:59 gpu-7 kernel: {XID}\n",
                      now=datetime(2027, 1, 1, 0, 5, tzinfo=timezone.utc)).events
    assert ev.time == datetime(2026, 12, 31, 23, 59, 59, tzinfo=timezone.utc)


def test_syslog_file_name_and_rsyslog_012(tmp_path):
    p = tmp_path / "kern.log"
    p.write_text("Jun 30 11:07:05 gpu-0 kernel: NVRM: API mismatch: the client has the version 535.54.03, but#012NVRM: this kernel module has the version 530.30.02.  Please#012NVRM: make sure that this kernel module and all NVIDIA driver#012NVRM: components have the same version.\n")
    scan = scan_paths([str(p)], now=NOW)
    assert scan.formats == ["syslog"]
    (ev,) = scan.events
    assert ev.kind == "api-mismatch" and ev.details["kernel_version"] == "530.30.02"
    assert ev.time == datetime(2026, 6, 30, 11, 7, 5, tzinfo=timezone.utc)


def test_journal_json_boot_ids_and_byte_messages():
    scan = scan_paths([str(FIX / "journal-two-boots.json")])
    assert scan.formats == ["journal-json"]
    assert [b.boot_id for b in scan.boots] == ["a" * 32, "b" * 32]
    assert kinds(scan) == ["xid", "fallen-off-bus", "xid", "mlx5-link"]
    assert [e.boot for e in scan.events] == [-1, -1, 0, 0]
    x119 = scan.events[2]  # MESSAGE printed as a byte array (not valid UTF-8)
    assert x119.details["code"] == "119" and x119.details["process"] == "nvidia-smi"
    assert x119.time == datetime.fromtimestamp(1724990200, tz=timezone.utc)
    assert x119.uptime_s == 50.0 and x119.lineno == 3


def test_kmsg_records_sequence_reset_and_device():
    scan = scan_paths([str(FIX / "kmsg-records.txt")])
    assert scan.formats == ["kmsg"] and len(scan.boots) == 2
    assert kinds(scan) == ["xid", "mlx5-link", "rm-init-adapter-failed"]
    assert [e.boot for e in scan.events] == [-1, -1, 0]
    rm = scan.events[2]
    assert rm.bus_id == "0000:3b:00.0"  # from the DEVICE=+pci: record line
    assert rm.uptime_s == 1.0 and rm.time is None and rm.timestamp == "1.000000"


def test_dmesg_boots_from_banner_and_uptime_reset():
    scan = scan_paths([str(FIX / "dmesg-two-boots.txt")])
    assert [b.index for b in scan.boots] == [-2, -1, 0]
    assert [(e.details["code"], e.boot) for e in scan.events] == [
        ("48", -2), ("63", -1), ("94", -1), ("31", 0)]
    assert all(e.time is None for e in scan.events)
    assert [b.first for b in scan.boots] == [None, None, None]


def test_reboot_marker_and_banner_do_not_double_count():
    text = ("-- Reboot --\n"
            f"2024-01-01T00:00:00+0000 h kernel: {XID}\n"
            "-- Reboot --\n"
            "2024-01-02T00:00:00+0000 h kernel: Linux version 6.8.0\n"
            f"2024-01-02T00:00:01+0000 h kernel: {XID}\n")
    scan = scan_text(text)
    assert [b.index for b in scan.boots] == [-1, 0]
    assert [e.boot for e in scan.events] == [-1, 0]


# --- inputs: compressed, rotated, stdin, bad data ------------------------------------------

def _rotated_set(tmp_path: Path) -> list[str]:
    old = ("Aug 29 10:00:00 h kernel: [    0.000000] Linux version 6.8.0\n"
           f"Aug 29 10:00:01 h kernel: [    1.000000] {XID}\n")
    mid = f"Aug 29 11:00:00 h kernel: [ 3600.000000] {XID.replace(': 48,', ': 63,')}\n"
    new = ("Aug 30 09:00:00 h kernel: [    0.000000] Linux version 6.8.0\n"
           f"Aug 30 09:00:05 h kernel: [    5.000000] {XID.replace(': 48,', ': 79,')}\n")
    (tmp_path / "kern.log.2.gz").write_bytes(gzip.compress(old.encode()))
    (tmp_path / "kern.log.1").write_text(mid)
    (tmp_path / "kern.log").write_text(new)
    return [str(tmp_path / n) for n in ("kern.log", "kern.log.1", "kern.log.2.gz")]


def test_rotated_set_is_one_timeline(tmp_path):
    scan = scan_paths(_rotated_set(tmp_path), now=NOW)
    assert xids(scan) == ["48", "63", "79"]
    assert [e.boot for e in only(scan, "xid")] == [-1, -1, 0]
    assert len(scan.boots) == 2 and scan.lines == 5 and scan.problems == []
    assert [Path(e.origin).name for e in only(scan, "xid")] == ["kern.log.2.gz", "kern.log.1",
                                                                "kern.log"]


def test_rotated_set_without_times_uses_rotation_numbers(tmp_path):
    (tmp_path / "dmesg.1").write_text(f"[    0.000000] Linux version 6.8.0\n[  100.0] {XID}\n")
    (tmp_path / "dmesg").write_text(f"[  200.0] {XID.replace(': 48,', ': 63,')}\n")
    scan = scan_paths([str(tmp_path / "dmesg"), str(tmp_path / "dmesg.1")])
    assert xids(scan) == ["48", "63"] and [e.boot for e in scan.events] == [0, 0]
    assert [e.lineno for e in scan.events] == [2, 1]


@pytest.mark.parametrize("compress", [gzip.compress, lzma.compress, bz2.compress])
def test_compressed(tmp_path, compress):
    data = (FIX / "all-kinds-short-iso.log").read_bytes()
    p = tmp_path / "kern.log.3.x"
    p.write_bytes(compress(data))
    scan = scan_paths([str(p)])
    assert len(scan.events) == 17 and scan.bytes == len(data) and scan.problems == []


def test_concatenated_gzip_members(tmp_path):
    p = tmp_path / "k.gz"
    p.write_bytes(gzip.compress(f"[ 1.0] {XID}\n".encode()) * 3)
    assert len(scan_paths([str(p)]).events) == 3


def test_truncated_and_corrupt_gzip(tmp_path):
    lines = "".join(f"[ {i}.0] usb 1-1: new device number {i}\n" for i in range(20000))
    blob = gzip.compress((f"[ 0.5] {XID}\n" + lines).encode())
    p = tmp_path / "kern.log.2.gz"
    p.write_bytes(blob[: len(blob) // 2])
    scan = scan_paths([str(p)])
    assert xids(scan) == ["48"]
    assert len(scan.problems) == 1 and "truncated gzip" in scan.problems[0]
    assert "kern.log.2.gz" in scan.problems[0]
    p.write_bytes(blob[:100] + b"\x00garbage" * 50 + blob[500:])
    scan = scan_paths([str(p)])
    assert scan.problems and "gzip" in scan.problems[0]


def test_stdin(monkeypatch):
    data = gzip.compress(f"[ 1.0] {XID}\n".encode())
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    scan = scan_paths(["-"])
    assert xids(scan) == ["48"] and scan.events[0].origin == "<stdin>"


def test_unreadable_inputs(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        scan_paths([str(tmp_path / "absent.log")])
    ok = tmp_path / "ok.log"
    ok.write_text(f"[ 1.0] {XID}\n")
    scan = scan_paths([str(tmp_path / "absent.log"), str(ok)])
    assert xids(scan) == ["48"] and "absent.log: no such file" in scan.problems[0]
    with pytest.raises(InputError, match="a directory, not a log file"):
        scan_paths([str(tmp_path)])


def test_binary_invalid_utf8_and_huge_lines(tmp_path):
    rng = random.Random(3)
    junk = bytes(rng.randrange(256) for _ in range(200_000))
    bad = b"[ 2.0] NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=\xff\xfe, Graphics Exception\n"
    huge = b"[ 3.0] " + XID.encode() + b" " + b"x" * (1 << 20) + b"\n"
    text = b"".join(b"[ 1.%04d] usb 1-1: new device number %d\n" % (i, i) for i in range(2000))
    p = tmp_path / "bad.log"  # junk after the first 64 KiB: a first block of it is refused
    p.write_bytes(text + junk + b"\n" + bad + huge + b"\x00" * 1000 + b"NVRM: " + b"\n")
    scan = scan_paths([str(p)])
    assert {"13", "48"} <= set(xids(scan))
    assert scan.skipped >= 2  # the undecodable line and the cut 1 MB line
    assert scan.bytes == p.stat().st_size


def test_line_without_newline_over_long_line_limit():
    text = f"[ 1.0] {XID}\n" + "y" * 10_000 + f" NVRM: x\n[ 2.0] {XID}"
    scan = scan_text(text, config=ScanConfig(block=1024, long_line=4096))
    assert xids(scan) == ["48", "48"] and scan.lines == 3
    assert [e.lineno for e in only(scan, "xid")] == [1, 3]


def _signature(scan: LogScan) -> list[tuple]:
    return [(e.kind, e.lineno, e.boot, e.line, sorted(e.details.items())) for e in scan.events]


@pytest.mark.parametrize("engine", ["auto", "python"])
@pytest.mark.parametrize("workers", [1, 3])
def test_small_blocks_threads_and_fallback_agree(tmp_path, engine, workers):
    files = [FIX / "all-kinds-short-iso.log", FIX / "dmesg-two-boots.txt",
             FIX / "kmsg-records.txt"]
    expected = [_signature(scan_paths([str(f)])) for f in files]
    config = ScanConfig(block=97, workers=workers, engine=engine)
    for f, exp in zip(files, expected, strict=True):
        assert _signature(scan_paths([str(f)], config=config)) == exp, f.name
        assert _signature(scan_text(f.read_text(), config=config)) == exp, f.name



def _allow_fork(monkeypatch) -> None:
    """Workers are forked only while the process runs no other thread; a thread an
    earlier test left behind must not turn these tests into sequential reads."""
    import threading

    monkeypatch.setattr(threading, "active_count", lambda: 1)


def _full(scan: LogScan) -> tuple:
    return (_signature(scan), scan.lines, scan.skipped, scan.bytes, scan.formats,
            [(b.index, b.boot_id, b.first, b.last) for b in scan.boots])


def _awkward_log(tmp_path: Path) -> Path:
    """Fixtures glued with long lines, NUL runs, CRLF and no final newline."""
    parts = [(FIX / n).read_bytes() for n in ("all-kinds-short-iso.log", "dmesg-two-boots.txt",
                                             "kmsg-records.txt")]
    body = b"".join([
        parts[0], b"y" * 5000 + b" NVRM: cut\n", b"\x00" * 300 + b"NVRM: " + b"\x00" * 5 + b"\n",
        b"a\x00b\x00" * 100 + b"nvidia\n", parts[1].replace(b"\n", b"\r\n"), b"z" * 9000,
        b"\n", parts[2], b"PCIe link up\nError received\n-- Logs begin --\n", parts[0],
        f"[ 9.0] {XID}".encode()])
    p = tmp_path / "awkward.log"
    p.write_bytes(body)
    return p


def test_a_worker_task_is_an_eighth_of_the_file_unless_told():
    """Large plain files are read by workers in tasks of an eighth of the file (whole
    MiB), from two reads up to 256 MiB, past that a multiple of eight tasks: fewer,
    larger tasks each keep and send less of a storm. The size follows the file alone
    (not the workers), so a file is read the same on every machine (line numbers past a
    long gap depend on where tasks start). A task is searched a piece (two reads) at a
    time."""
    config = ScanConfig()
    assert config.task_for(1 << 30) == 128 << 20
    # past 2 GiB, a multiple of eight tasks of 256 MiB at most (1, 2, 4 or 8 workers
    # share them evenly)
    assert config.task_for(2 << 30) == 256 << 20
    assert config.task_for(3 << 30) == 192 << 20
    assert config.task_for(5 << 30) == 213 << 20 and (5 << 30) // (213 << 20) == 24
    assert config.task_for((2 << 30) + 1) == 128 << 20
    assert config.task_for(256 << 20) == 32 << 20
    assert config.task_for((200 << 20) + 12345) == 25 << 20
    assert config.task_for(100 << 20) == 16 << 20 == config.task_bytes
    assert config.task_for(0) == 16 << 20
    assert ScanConfig(block=4096).task_for(1 << 30) == 128 << 20
    assert ScanConfig(block=4096).task_for(1 << 20) == 8192
    assert ScanConfig(block=4096, task=1000).task_for(1 << 30) == 1000
    assert config.piece_bytes == 16 << 20
    assert ScanConfig(block=4096).piece_bytes == 8192
    assert ScanConfig(block=4096, piece=1000).piece_bytes == 1000


# the smallest block: the most region edges, and seconds of worker processes
@pytest.mark.parametrize("block", [pytest.param(257, marks=pytest.mark.slow), 4096, 1 << 20])
def test_worker_processes_agree_with_the_sequential_reader(monkeypatch, tmp_path, block):
    """Large plain files are searched block by block in worker processes: same events,
    line numbers, boots and counts as one sequential pass, wherever blocks end."""
    files = [_awkward_log(tmp_path), FIX / "all-kinds-short-iso.log",
             FIX / "journal-two-boots.json"]
    # (lines are not cut at ``long_line`` here: a worker reads each line whole)
    one = ScanConfig(block=block, workers=1)
    expected = [_full(scan_paths([str(f)], now=NOW, config=one)) for f in files]
    _allow_fork(monkeypatch)
    forked = replace(one, workers=2, process_min=0, task=block)
    for f, exp in zip(files, expected, strict=True):
        assert _full(scan_paths([str(f)], now=NOW, config=forked)) == exp, f.name
    both = [str(files[1]), str(files[0])]
    exp_both = _full(scan_paths(both, now=NOW, config=replace(forked, process_min=1 << 40)))
    assert _full(scan_paths(both, now=NOW, config=forked)) == exp_both


@pytest.mark.parametrize("block", [4096, 1 << 16])
def test_a_task_searched_piece_by_piece_agrees_with_the_sequential_reader(
        monkeypatch, tmp_path, block):
    """A worker task larger than a piece is searched and parsed a piece at a time (its
    pages given back after each): the same events, line numbers, boots and counts as one
    sequential pass, wherever pieces and tasks end."""
    files = [_awkward_log(tmp_path), FIX / "all-kinds-short-iso.log",
             FIX / "journal-two-boots.json"]
    one = ScanConfig(block=block, workers=1)
    _allow_fork(monkeypatch)
    for task, piece in ((4 * block, block), (3 * block, 2 * block), (8 * block, 1000)):
        forked = replace(one, workers=2, process_min=0, task=task, piece=piece)
        for f in files:
            exp = _full(scan_paths([str(f)], now=NOW, config=one))
            assert _full(scan_paths([str(f)], now=NOW, config=forked)) == exp, (f.name, task)


@pytest.mark.parametrize("faults", [60, 100])
def test_a_key_spread_over_tasks_keeps_what_a_sequential_read_keeps(
        monkeypatch, tmp_path, faults):
    """One program restarted ``faults`` times, each faulting once (a pid each), a dozen to
    a task: whatever the tasks, the same events are kept one by one and the same
    processes named in what folds as in one sequential read (not "at least" some of
    them because a task folded what the file as a whole keeps)."""
    lines = []
    for i in range(faults):
        lines.append(f"[{100 + i}.000000] NVRM: Xid (PCI:0000:18:00): 31, pid={2000 + i}, "
                     "name=python3, Ch 0000003b, intr 00000000. MMU Fault: ENGINE GRAPHICS "
                     "GPCCLIENT_T1_0 faulted @ 0x7f1c_00000000. Fault is of type FAULT_PDE "
                     "ACCESS_TYPE_VIRT_READ\n")
        lines.extend(f"[{100 + i}.5] mlx5_core 0000:{i % 9}a:00.0: routine {j}\n"
                     for j in range(20))
    path = tmp_path / "kern.log"
    path.write_text("".join(lines))
    one = ScanConfig(block=4096, workers=1)
    _allow_fork(monkeypatch)

    def kept(scan: LogScan) -> tuple:
        folded = [(e.count, sorted(e.repeats.processes), e.repeats.other_processes)
                  for e in scan.events if e.repeats is not None]
        return _full(scan)[0], folded

    exp = kept(scan_paths([str(path)], now=NOW, config=one))
    assert len(exp[0]) == min(faults, 64) + (faults > 64)  # (64 kept, then one folded)
    assert [(n, len(named), other) for n, named, other in exp[1]] == (
        [(36, 36, 0)] if faults > 64 else [])
    forked = replace(one, workers=2, process_min=0, task=3 * 4096, piece=5000)
    assert path.stat().st_size > 4 * forked.task_bytes  # (some 11 faults a task)
    assert kept(scan_paths([str(path)], now=NOW, config=forked)) == exp


def test_a_task_given_back_piece_by_piece_reads_the_file_again(tmp_path):
    """The pages of a piece already parsed are given back (a private mapping's, whose
    bytes the search may have changed: read from the file again if touched)."""
    import mmap

    path = tmp_path / "f.log"
    path.write_bytes(b"x" * (3 * mmap.PAGESIZE))
    with path.open("rb") as fh:
        buf = mmap.mmap(fh.fileno(), 0, flags=mmap.MAP_PRIVATE,
                        prot=mmap.PROT_READ | mmap.PROT_WRITE)
    try:
        buf[0:1] = buf[mmap.PAGESIZE:mmap.PAGESIZE + 1] = b"\x00"
        blocks._give_back(buf, mmap.PAGESIZE + 10)  # (the first page only: whole pages)
        assert buf[0:1] == b"x" and buf[mmap.PAGESIZE:mmap.PAGESIZE + 1] == b"\x00"
        blocks._give_back(buf, -5)
        blocks._give_back(bytearray(10), 5)  # (a read buffer: nothing to give back)
    finally:
        buf.close()


def _events(scan: LogScan) -> list[tuple]:
    return [(e.kind, e.boot, e.line, sorted(e.details.items())) for e in scan.events]


@pytest.mark.parametrize("gap", [2048, 8192])
def test_workers_skip_counting_long_gaps_without_changing_events(monkeypatch, tmp_path, gap):
    """Worker blocks count newlines only across gaps up to ``gap_exact``: the events
    (and their grouping of continuation and trace lines) are those of the exact
    sequential pass, positions still rise line by line, and the line total is reported
    unknown."""
    filler = b"".join(b"usb 1-%d: new high-speed USB device number %d using xhci_hcd\n"
                      % (i % 9, i) for i in range(3000))  # about 180 KiB, no anchor
    parts = [(FIX / n).read_bytes() for n in ("all-kinds-short-iso.log", "dmesg-two-boots.txt")]
    path = tmp_path / "gappy.log"
    path.write_bytes(filler + parts[0] + filler + filler + parts[1] + filler)
    one = ScanConfig(workers=1)
    exact = scan_paths([str(path)], now=NOW, config=one)
    code_exact, out_exact, _ = _logs_cli(monkeypatch, one, str(path))
    _allow_fork(monkeypatch)
    forked = ScanConfig(gap_exact=gap, workers=2, process_min=0, block=1 << 16, task=1 << 16)
    assert isinstance(process_pool(2), ForkWorkers)
    fast = scan_paths([str(path)], now=NOW, config=forked)
    assert _events(fast) == _events(exact) and len(exact.events) >= 10
    assert exact.lines == path.read_bytes().count(b"\n") and fast.lines is None
    assert [(b.index, b.boot_id) for b in fast.boots] == [(b.index, b.boot_id)
                                                          for b in exact.boots]
    positions = [e.lineno for e in fast.events]
    assert positions == sorted(positions)
    code, out, _ = _logs_cli(monkeypatch, forked, str(path))
    assert "lines not counted" in out and "lines not counted" not in out_exact
    assert code == code_exact


def _logs_cli(monkeypatch, config: ScanConfig, *argv: str) -> tuple[int, str, str]:
    """``gputriage logs`` with its scan run under ``config``."""
    from gputriage.cli import Environment, main

    monkeypatch.setattr(logscan, "scan_paths", partial(scan_paths, config=config))
    out, err = io.StringIO(), io.StringIO()
    code = main(["logs", *argv], Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def test_probes_stand_for_exactly_their_anchors():
    """Each anchor is found through a probe inside it, and a probe hit without one of
    its anchors is no candidate."""
    found = probes(anchors_for(b"{"))
    for a in anchors_for(b"{"):
        assert any(p.needle in a and (not p.anchors or a in p.anchors) for p in found), a
    near = b"PCIe link up\nError received\n-- Logs begin --\nsegfault in x\nok\n"
    assert anchor_hits(bytearray(near), 0, len(near), ANCHORS, ScanConfig()) == {}
    hit = b"x\nINFO: task a:1 blocked for more than 2 seconds.\n-- Reboot --\n"
    assert anchor_hits(bytearray(hit), 0, len(hit), ANCHORS, ScanConfig()) == {
        2: 1, hit.index(b"-- Reboot"): 0}


def test_empty_inputs(tmp_path):
    empty = scan_text("")
    assert (empty.events, empty.boots, empty.lines, empty.bytes) == ([], [], 0, 0)
    p = tmp_path / "e.log"
    p.write_bytes(b"")
    assert scan_paths([str(p)]).lines == 0
    quiet = scan_text("usb 1-1: hello\next4: fine\n")
    assert quiet.events == [] and quiet.lines == 2 and len(quiet.boots) == 1


def test_scan_driver_events_is_scan_text():
    text = (FIX / "all-kinds-short-iso.log").read_text()
    assert _signature(LogScan(events=scan_driver_events(text))) == _signature(scan_text(text))


def test_anchors_cover_every_trigger():
    """Each event kind's trigger words include at least one anchor literal."""
    samples = [XID, "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 47",
               "pcieport 0000:00:01.1: AER: Corrected error received: 0000:18:00.0",
               "pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected, type=Physical Layer",
               "mlx5_core 0000:19:00.0 ibp25s0: Link up",
               "x 0000:19:00.0: 8.000 Gb/s available PCIe bandwidth, limited by 2.5 GT/s PCIe x4 link at 0000:00:1c.0 (capable of 63.008 Gb/s with 8.0 GT/s PCIe x8 link)",
               "a.out[1]: segfault at 0 ip 0000000000401000 sp 00007ffc00000000 error 4 in libnccl.so.2[7f00+100]",
               "INFO: task python:1 blocked for more than 120 seconds.",
               "watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [python:1]",
               "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service"]
    for s in samples:
        assert any(a.decode() in s for a in ANCHORS), s
        assert scan_text(s + "\n").events, s


# --- corpus ------------------------------------------------------------------------------

def test_corpus_category_4_all_scan(corpus):
    """Every kernel log scans; each problem capture gives events (a healthy one, such as
    container veth churn, may hold nothing the scanner looks for)."""
    for s in corpus.category("4"):
        scan = scan_paths([str(s.path)])
        assert scan.events or s.expected.startswith("Healthy"), s.name
        assert scan.lines >= 1 and not scan.problems, s.name


def test_corpus_categories_2_and_8_scan(corpus):
    for s in corpus.category("2") + corpus.category("8"):
        scan = scan_text(s.text(), s.name)
        assert isinstance(scan.events, list) and scan.lines >= 1, s.name
    ogkm = scan_text(corpus.sample("ogkm862").text())
    assert [e.details.get("code") for e in only(ogkm, "rm-init-adapter-failed")] == [
        "0x22:0x56:884"]
    ollama = scan_text(corpus.sample("ollama11932").text())
    assert {e.details["module"] for e in only(ollama, "module-load-failed")} == {
        "nvidia-drm", "nvidia-uvm"}


def _scan(corpus, name: str) -> LogScan:
    return scan_paths([str(corpus.sample(name).path)])


def test_corpus_gpud_xid119(corpus):
    scan = _scan(corpus, "gpud-xid119")
    x119 = [e for e in only(scan, "xid") if e.details["code"] == "119"]
    assert len(x119) == 5 and {e.bus_id for e in x119} == {"0000:9b:00.0"}
    assert x119[0].details["process"] == "nvidia-smi"
    assert x119[0].time == datetime(2025, 2, 23, 16, 24, 18, tzinfo=timezone.utc)
    dump, rate = only(scan, "gsp-rpc-timeout")  # "GPU4 RPC history", "Rate limiting ..."
    assert dump.details == {"gpu": "4", "dump": "yes"}
    assert rate.bus_id == "0000:9b:00.0" and rate.details["rate_limited"] == "yes"
    assert scan.formats == ["dmesg-ctime"]


def test_corpus_nvsentinel_strings(corpus):
    scan = _scan(corpus, "nvsentinel-csv")
    assert Counter(xids(scan)) == Counter({"149": 1, "13": 2, "74": 1, "32": 1, "69": 1,
                                           "154": 2})
    x154 = [e for e in only(scan, "xid") if e.details["code"] == "154"]
    assert [e.details["recovery_action"] for e in x154] == ["GPU Reset Required", "None"]
    assert x154[0].bus_id == "0008:01:00.0"
    x149 = only(scan, "xid")[0]
    assert (x149.details["link"], x149.details["subcode"], x149.details["severity"]) == (
        "9", "37", "Fatal")
    x74 = [e for e in only(scan, "xid") if e.details["code"] == "74"][0]
    assert x74.details["link"] == "14" and x74.bus_id == "0003:00:00.0"


def test_corpus_gpud_pr1174_nvlink5(corpus):
    scan = _scan(corpus, "gpud-pr1174")
    assert [(e.details["code"], e.details["link"], e.bus_id) for e in scan.events] == [
        ("149", "-1", "0019:01:00.0"), ("149", "0", "0000:00:00.0"), ("145", "13", "0018:01:00.0")]
    assert scan.events[1].details["subcode"] == "37"
    assert scan.events[2].details["severity"] == "Nonfatal"


def test_corpus_nccl2241(corpus):
    scan = _scan(corpus, "nccl2241")
    assert [(e.details["code"], e.details["link"], e.bus_id) for e in scan.events] == [
        ("145", "11", None), ("137", "11", None)]


def test_corpus_ogkm1150_caused_by(corpus):
    scan = _scan(corpus, "ogkm1150")
    assert xids(scan) == ["45"] * 7
    assert [e.details["caused_by"] for e in scan.events] == [
        "149", "145", "145", "145", "149", "145", "145"]
    assert scan.events[0].details["channel"] == "00000001"


def test_corpus_dxvk_two_xid31(corpus):
    scan = _scan(corpus, "dxvk1799")
    assert xids(scan) == ["31", "31"]
    assert [e.details["channel"] for e in scan.events] == ["0000003b", "0000003e"]
    assert {e.details["pid"] for e in scan.events} == {"12890"}


def test_corpus_rtxpro6000(corpus):
    scan = _scan(corpus, "rtxpro6000-blackwell-xid48")
    assert xids(scan) == ["48", "171", "48", "63", "154"]
    assert scan.events[-1].details["recovery_action"] == "Drain and Reset"
    assert {e.bus_id for e in scan.events} == {"0000:55:00.0"}


def test_corpus_bumblebee_legacy(corpus):
    scan = _scan(corpus, "bumblebee677")
    assert xids(scan) == ["32", "32", "31"]
    assert [e.details["channel"] for e in scan.events] == ["00000000", "00000000", "00000003"]
    assert "pid" not in scan.events[0].details


def test_corpus_talos_gsp_trace(corpus):
    scan = _scan(corpus, "ogkm446-talos")
    (dump,) = scan.events
    assert dump.kind == "gsp-error" and dump.details["lines"] == "9"
    assert dump.line.count("\n") == 8 and scan.formats == ["talos"]
    assert dump.time == datetime(2026, 4, 22, 21, 27, 51, 291660, tzinfo=timezone.utc)


def test_corpus_sichek51_reset_required(corpus):
    scan = _scan(corpus, "sichek51")
    assert kinds(scan) == ["gsp-error", "gpu-reset-required"]


def test_corpus_gb10_119_then_120(corpus):
    scan = _scan(corpus, "gb10")
    assert xids(scan) == ["119", "120"]
    assert {e.bus_id for e in scan.events} == {"000f:01:00.0"}
    assert scan.events[1].details["process"] == "python"


def test_corpus_talos_xid_excerpt(corpus):
    scan = _scan(corpus, "vllm40652-talos")
    assert xids(scan) == ["45", "45", "74", "154"]
    assert scan.events[0].details["caused_by"] == "45"
    assert scan.events[2].details["link"] == "8"


# --- properties --------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_property_arbitrary_bytes(tmp_path_factory, data):
    text = data.decode("utf-8", errors="replace")
    assert isinstance(scan_text(text), LogScan)
    p = tmp_path_factory.mktemp("b") / "x.log"
    p.write_bytes(data)
    try:
        scan = scan_paths([str(p)])
    except InputError as exc:  # bytes that look binary are refused, and said so
        assert "binary data" in str(exc)
        return
    assert scan.bytes == len(data) or scan.problems  # bytes that look compressed


_fragments = st.sampled_from([
    "NVRM: ", "Xid (PCI:0000:01:00): ", "79, ", "154, GPU recovery action changed from 0x0 (",
    "SXid (PCI:0000:c2:00.0): 20034, ", "Fatal, Link 28", "Severity 1 Engine instance 2",
    "nvidia-nvswitch3: ", "-- Boot abcdef0123456789 --", "-- Reboot --", "Linux version ",
    "[ 1.5] ", "[    0.000000] ", "6,12,345,-;", " DEVICE=+pci:0000:01:00.0", "{", '"MESSAGE":[',
    "}", "2024-01-01T00:00:00+0000 h kernel: ", "Jan  1 00:00:00 h kernel: ", "#012",
    "INFO: task a:1 blocked for more than 1 seconds.", "soft lockup - CPU#1 stuck for 2s! [a:1]",
    " nv_x+0x1", "kflcnCoreDumpNondestructive_IMPL: TRACE", "segfault at ", " in libcuda.so[",
    "PCIe Bus Error: severity=", "error received: ", "mlx5_core ", "\n", "\n ", "\x00", "\ud800",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(_fragments | st.text(max_size=5), max_size=60))
def test_property_structured_noise(parts):
    scan = scan_text("".join(parts))
    assert isinstance(scan, LogScan)
    assert all(e.boot <= 0 for e in scan.events)


def test_benchmark_generator_is_importable(tmp_path):
    """The benchmark's generator writes the mix it promises (kept tiny here)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        import log_scan
    finally:
        sys.path.pop(0)
    log = tmp_path / "k.log"
    log_scan.generate(log, 300_000)
    scan = scan_paths([str(log)])
    assert scan.lines == log.read_bytes().count(b"\n") and scan.formats == [
        "journalctl-short-iso"]
    assert os.path.getsize(log) >= 300_000


@pytest.mark.parametrize("profile", ["storm", "busy-hca"])
def test_benchmark_profiles_write_their_mix(tmp_path, profile):
    """storm: 1 line in 10 an Xid of the storm codes (45 following some); busy-hca: 1
    line in 6 a routine mlx5_core message, none of which reaches the parser."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        import log_scan
    finally:
        sys.path.pop(0)
    log = tmp_path / "k.log"
    size, special = log_scan.generate(log, 400_000, profile=profile, fmt="dmesg")
    data = log.read_bytes()
    lines = data.count(b"\n")
    assert size == len(data) and lines > 3000
    scan = scan_paths([str(log)])
    assert scan.formats == ["dmesg-raw"] and scan.lines == lines
    codes = Counter(e.details.get("code") for e in scan.events if e.kind == "xid")
    if profile == "storm":
        assert 0.08 < special / lines < 0.12
        assert set(codes) == {"13", "31", "43", "45", "119"}
        assert sum(getattr(e, "count", 1) for e in scan.events if e.kind == "xid") >= special
    else:
        assert 0.14 < special / lines < 0.19 and sum(codes.values()) < 20
        buf = bytearray(data)
        kept = anchor_hits(buf, 0, len(buf), ANCHORS, ScanConfig())
        assert len(kept) < special / 20
        assert len(anchor_hits(buf, 0, len(buf), ANCHORS, ScanConfig(reject=False))) >= special


def test_fork_workers_return_results_in_order_and_raise_in_place():
    pool = ForkWorkers(3)
    assert list(pool.run(lambda i: i * i, 10)) == [i * i for i in range(10)]
    assert list(pool.run(lambda i: i, 0)) == []

    def task(i: int) -> int:
        if i == 4:
            raise OSError(5, "Input/output error")
        return i

    got = []
    with pytest.raises(OSError, match="Input/output"):
        for r in pool.run(task, 8):
            got.append(r)
    assert got == [0, 1, 2, 3]


def test_a_worker_that_dies_is_reported_not_waited_for():
    def task(i: int) -> int:
        if i == 3:
            os._exit(9)  # killed mid-run (a signal, a file cut short under a mapping)
        return i

    got = []
    with pytest.raises(WorkerDied):
        for r in ForkWorkers(2).run(task, 6):
            got.append(r)
    assert got == [0, 1, 2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are Linux's")
def test_fork_workers_go_on_while_the_caller_is_busy(tmp_path):
    """Results bigger than a default pipe (64 KiB) do not hold a worker back while the
    caller does something else (imports, after the first result): it computes its
    tasks ahead, up to its pipe's size."""
    done = tmp_path / "done"

    def task(i: int) -> bytes:
        with done.open("a") as fh:
            fh.write(f"{i}\n")
        return b"x" * (200 << 10)

    results = ForkWorkers(1).run(task, 4)
    assert len(next(results)) == 200 << 10
    deadline = time.monotonic() + 10
    while len(done.read_text().split()) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done.read_text().split() == ["0", "1", "2", "3"]  # none waits for a read
    assert [len(r) for r in results] == [200 << 10] * 3


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked workers: Linux")
def test_fork_workers_hand_a_task_to_whichever_worker_is_free(tmp_path):
    """A worker held up by a costly task does no other while its peer is free: task 0
    waits for tasks 1-5 to be done, which it would wait for in vain (until its deadline)
    if they were dealt out in turn (2 and 4 behind it)."""
    done = tmp_path / "done"
    done.touch()

    def task(i: int) -> int:
        if i == 0:
            deadline = time.monotonic() + 20
            while len(done.read_text().split()) < 5 and time.monotonic() < deadline:
                time.sleep(0.01)
        with done.open("a") as fh:
            fh.write(f"{i}\n")
        return os.getpid()

    started = time.monotonic()
    pids = list(ForkWorkers(2).run(task, 6))
    assert time.monotonic() - started < 15
    assert done.read_text().split()[-1] == "0"
    assert len(set(pids[1:])) == 1 and pids[0] not in pids[1:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked workers: Linux")
def test_fork_workers_run_a_bounded_number_of_tasks_ahead_of_the_caller(tmp_path):
    """A caller that stops reading holds the workers back once ``AHEAD`` tasks per
    worker are done past the result it took: what is read ahead stays bounded."""
    from gputriage.io import forkpool

    done = tmp_path / "done"
    done.touch()

    def task(i: int) -> int:
        with done.open("a") as fh:
            fh.write(f"{i}\n")
        return i

    results = ForkWorkers(2).run(task, 500)
    assert next(results) == 0
    deadline = time.monotonic() + 10
    while len(done.read_text().split()) < 2 * forkpool.AHEAD and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    assert sorted(map(int, done.read_text().split())) == list(range(2 * forkpool.AHEAD))
    assert list(results) == list(range(1, 500))


SMALL_FORKED = ScanConfig(workers=2, process_min=0, block=4096, task=4096)  # 4 KiB blocks


def _small_blocks_in_workers(monkeypatch, tmp_path) -> tuple[Path, list[tuple]]:
    """A log and its events read here; forking allowed (for :data:`SMALL_FORKED`)."""
    path = tmp_path / "k.log"
    path.write_bytes((FIX / "all-kinds-short-iso.log").read_bytes() * 40)
    expected = _events(scan_paths([str(path)], now=NOW))
    _allow_fork(monkeypatch)
    return path, expected


def test_a_file_cut_short_under_the_workers_falls_back_to_reading_it_here(monkeypatch,
                                                                          tmp_path):
    """A worker that dies on a block (SIGBUS when a mapped file shrinks) is not fatal:
    the file is read again in this process."""
    path, expected = _small_blocks_in_workers(monkeypatch, tmp_path)
    real = blocks.block_task

    def dying(path: str, index: int, **kw):
        if index == 2:
            os._exit(7)
        return real(path, index, **kw)

    monkeypatch.setattr(blocks, "block_task", dying)
    assert _events(scan_paths([str(path)], now=NOW, config=SMALL_FORKED)) == expected


def test_a_fork_that_fails_is_a_dead_worker_not_a_read_error(monkeypatch, tmp_path):
    """No process can be started (EAGAIN): the file is read here, whole, and no
    'read error' is reported."""
    path, expected = _small_blocks_in_workers(monkeypatch, tmp_path)

    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    scan = scan_paths([str(path)], now=NOW, config=SMALL_FORKED)
    assert _events(scan) == expected and not any("read error" in p for p in scan.problems)


def test_meanwhile_runs_once_while_workers_search(monkeypatch, tmp_path):
    """``scan_paths(meanwhile=...)`` lets the caller work while forked workers search a
    large file (called once, after the first block came back); a file read in this
    process never calls it."""
    import threading

    log = tmp_path / "kern.log"
    line = "[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    log.write_text("[ 1.0] usb 1-4: new high-speed USB device\n" * 2000 + line)
    calls: list[int] = []
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    workers = replace(ScanConfig(), workers=2, process_min=0, block=8192, task=8192)
    scan = scan_paths([str(log)], config=workers, meanwhile=lambda: calls.append(1))
    assert calls == [1] and [e.kind for e in scan.events][:1] == ["xid"]
    calls.clear()
    scan_paths([str(log)], meanwhile=lambda: calls.append(1))
    assert calls == []
