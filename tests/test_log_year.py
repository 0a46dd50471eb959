"""Syslog stamps print no year: it comes from the input's own time references (its dated
stamps, a snapshot's collection time, a log file's modification time), never from the
day gputriage runs; without any reference the stamp has no absolute time."""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone

from hostkit import snap

from gputriage.engine.analysis import analyze
from gputriage.logscan import scan_paths, scan_text
from gputriage.logscan.stamps import year_reference

LOST = "Dec  6 19:25:33 at7tj000004 systemd-networkd[2385]: ib1: Lost carrier\n"
XID = ("Dec 31 23:59:59 gpu-7 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', "
       "name=<unknown>, An uncorrectable double bit error (DBE) has been detected\n")


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


def test_without_a_reference_a_syslog_stamp_has_no_year():
    (ev,) = scan_text(LOST).events
    assert ev.time is None and ev.timestamp == "Dec  6 19:25:33"
    result = analyze(snap(live=False, kernel_log=LOST))
    (f,) = [f for f in result.findings if f.id == "kernel.link-down"]
    assert "Dec  6 19:25:33" in f.title and not re.search(r"\d{4}-\d\d-\d\d", f.title)


def test_the_inputs_own_dated_stamps_give_the_year():
    iso = "2024-01-01T00:05:00+0000 gpu-7 kernel: eth0: renamed from veth1\n"
    (ev,) = scan_text(XID + iso).events  # the reference is after the line: last year's
    assert ev.time == _utc(2023, 12, 31, 23, 59, 59)
    dmesg_t = ("[Sat Mar  1 10:00:01 2025] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  "
               "550.54.15\n")
    assert scan_text(LOST + dmesg_t).events[0].time == _utc(2024, 12, 6, 19, 25, 33)


def test_dates_inside_messages_are_not_references():
    text = LOST + "Dec  6 19:25:34 h app[1]: certificate valid until 2031-01-01 00:00:00\n"
    assert year_reference(text.encode()) is None
    assert year_reference(b"-- Logs begin at Mon 2023-12-04 09:00:01 UTC, end at Tue "
                          b"2023-12-05 10:00:00 UTC. --\n") == _utc(2023, 12, 5, 10, 0, 0)


def test_a_snapshots_collection_time_dates_its_syslog():
    s = snap(kernel_log=LOST)
    s.manifest["created"] = "2025-03-01T12:00:00+00:00"
    (f,) = [f for f in analyze(s).findings if f.id == "kernel.link-down"]
    assert f.occurrences.first == "2024-12-06T19:25:33+00:00"


def test_a_log_files_modification_time_dates_it(tmp_path):
    path = tmp_path / "syslog"
    path.write_text(LOST)
    when = _utc(2023, 6, 1).timestamp()
    os.utime(path, (when, when))
    (ev,) = scan_paths([str(path)]).events
    assert ev.time == _utc(2022, 12, 6, 19, 25, 33)


def test_an_explicit_reference_still_applies_when_the_input_has_none():
    (ev,) = scan_text(XID, now=_utc(2027, 1, 1, 0, 5)).events
    assert ev.time == _utc(2026, 12, 31, 23, 59, 59)
