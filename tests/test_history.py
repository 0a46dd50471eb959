"""History of checks: recording, listing, retention, the changed-since-healthy
line, and every way the database can fail without failing the check."""

from __future__ import annotations

import io
import json
import os
import sqlite3
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from fakehost import FakeHost
from hypothesis import given
from hypothesis import strategies as st

from gputriage.cli import EXIT_INPUT, Environment, main
from gputriage.model import (
    NODE,
    Action,
    Blame,
    DriverVersions,
    Finding,
    GpuRow,
    HealthyChange,
    HostSummary,
    Result,
    Severity,
)
from gputriage.state import history
from gputriage.state.history import (
    Retention,
    changes,
    db_path,
    default_state_dir,
    digest_sha256,
    facts_digest,
    last_healthy,
    list_entries,
    record,
    record_check,
)

T0 = datetime(2026, 12, 1, 3, 0, tzinfo=timezone.utc)
OLD = "535.161.07"
NEW = "550.54.15"


def _action(severity: Severity) -> Action:
    return {Severity.CRITICAL: Action.DRAIN_AND_REPAIR,
            Severity.WARNING: Action.PLAN_REPAIR}.get(severity, Action.NONE)


def _result(module: str = OLD, *, host: str = "gpu-node-01", severity: Severity | None = None,
            uuid: str = "GPU-aaaa-1111") -> Result:
    findings = []
    if severity is not None:
        findings.append(Finding(id="test.finding", severity=severity, title="a test finding",
                                explanation="", action=_action(severity), blame=Blame.NODE,
                                scope=NODE))
    worst = max((f.severity for f in findings), key=lambda s: s.rank, default=Severity.OK)
    return Result(findings=findings,
                  host=HostSummary(hostname=host, kernel="5.15.0-105-generic", boot_id="b00t-1",
                                   driver=DriverVersions(module, module, "12.4"),
                                   gpus_on_pci=1, gpus_visible=1, rules_run=5,
                                   verdict=worst.value if worst.rank >= Severity.WARNING.rank
                                   else "ok"),
                  gpus=[GpuRow(0, "0000:18:00.0", "NVIDIA H100", uuid, persistence_mode=True)])


def _run(argv: list[str], host: FakeHost | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err, host=host))
    return code, out.getvalue(), err.getvalue()


def _fake_host(root: Path, module: str) -> FakeHost:
    """A host without GPUs (verdict ok) whose kernel module version is ``module``."""
    host = FakeHost(root)
    host.write("/proc/modules", "ext4 1 0 - Live 0x0\n")
    host.write("/sys/bus/pci/devices/0000:00:03.0/vendor", "0x1af4\n")
    host.write("/sys/bus/pci/devices/0000:00:03.0/class", "0x020000\n")
    host.write("/proc/sys/kernel/random/boot_id", "6d1c0e8e-2f3a-4b8c-9d7e-1a2b3c4d5e6f\n")
    host.write("/proc/driver/nvidia/version",
               f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {module}  Mon May  9 "
               "22:27:13 UTC 2022\nGCC version:  gcc version 11.2.0\n")
    return host


@pytest.fixture(autouse=True)
def _no_default_state(monkeypatch, tmp_path):
    """Checks in this module never touch the machine's real state directory."""
    monkeypatch.setenv("GPUTRIAGE_STATE_DIR", str(tmp_path / "default-state"))


# --- digest ---------------------------------------------------------------------------

def test_digest_is_flat_and_stable():
    digest = facts_digest(_result())
    assert digest["kernel"] == "5.15.0-105-generic"
    assert digest["driver.module"] == OLD
    assert digest["cuda"] == "12.4"
    assert digest["gpus.visible"] == 1
    assert digest["gpu[0000:18:00.0].uuid"] == "GPU-aaaa-1111"
    assert digest["gpu[0000:18:00.0].persistence"] == "on"
    assert "boot_id" not in digest and "verdict" not in digest
    assert digest_sha256(digest) == digest_sha256(facts_digest(_result()))
    assert digest_sha256(digest) != digest_sha256(facts_digest(_result(NEW)))


def test_digest_reads_serial_and_vbios_when_present():
    res = _result()
    res.gpus[0] = replace(res.gpus[0], serial="1650123456789", vbios="96.00.74.00.01")
    digest = facts_digest(res)
    assert digest["gpu[0000:18:00.0].serial"] == "1650123456789"
    assert digest["gpu[0000:18:00.0].vbios"] == "96.00.74.00.01"


def test_changes_lists_each_key():
    got = changes({"kernel": "5.15", "gone": "x", "gpu[a].persistence": True},
                  {"kernel": "6.2", "new": 3, "gpu[a].persistence": False})
    assert got == ["gone: x -> (none)", "gpu[a].persistence: on -> off", "kernel: 5.15 -> 6.2",
                   "new: (none) -> 3"]


@given(st.dictionaries(st.text(max_size=8), st.one_of(st.text(max_size=8), st.integers(),
                                                       st.booleans())))
def test_changes_of_a_digest_with_itself_is_empty(digest):
    assert changes(digest, dict(digest)) == []
    assert len(changes({}, digest)) == len(digest)


# --- record and list ------------------------------------------------------------------

def test_record_and_list(tmp_path):
    state = tmp_path / "state"
    first = record(state, _result(), T0)
    second = record(state, _result(severity=Severity.CRITICAL), T0 + timedelta(hours=1))
    assert db_path(state).is_file()
    entries = list_entries(state)
    assert [e.id for e in entries] == [first.id, second.id]
    assert entries[0].verdict == "ok" and entries[1].verdict == "critical"
    assert entries[1].critical == 1 and entries[1].warning == 0
    assert entries[1].findings[0] == {"id": "test.finding", "severity": "critical",
                                      "title": "a test finding", "scope": "node"}
    assert entries[0].time == "2026-12-01T03:00:00+00:00"
    assert entries[0].boot_id == "b00t-1" and entries[0].host == "gpu-node-01"
    assert entries[0].digest == facts_digest(_result())
    assert entries[0].digest_sha256 == digest_sha256(entries[0].digest)
    assert [e.id for e in list_entries(state, 1)] == [second.id]
    assert last_healthy(state, "gpu-node-01").id == first.id
    assert last_healthy(state, "other-node") is None
    with sqlite3.connect(db_path(state)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_cli_history_lists_entries(tmp_path):
    state = tmp_path / "state"
    record(state, _result(), T0)
    record(state, _result(), T0 + timedelta(minutes=5))
    record(state, _result(NEW, severity=Severity.WARNING), T0 + timedelta(minutes=10))
    code, out, _ = _run(["history", "--state-dir", str(state)])
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("TIME") and len(lines) == 4
    assert "gpu-node-01" in lines[1] and "b00t-1" in lines[1] and "OK" in lines[1]
    assert not lines[1].endswith("changed") and not lines[2].endswith("changed")
    assert lines[3].endswith("changed") and "WARNING" in lines[3]
    code, out, _ = _run(["history", "--state-dir", str(state), "--json", "-n", "1"])
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "gputriage/history/v1"
    [row] = doc["entries"]
    assert row["verdict"] == "warning" and row["warning"] == 1 and row["changed"] is True
    assert row["digest"]["driver.module"] == NEW


def test_cli_history_without_database(tmp_path):
    code, out, err = _run(["history", "--state-dir", str(tmp_path / "none")])
    assert code == 0 and "no checks recorded" in out and not err
    assert not (tmp_path / "none").exists()


def test_cli_history_on_a_corrupt_database(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    db_path(state).write_bytes(b"this is not a database at all\n" * 100)
    code, _, err = _run(["history", "--state-dir", str(state)])
    assert code == EXIT_INPUT and err.startswith("gputriage: ") and "Traceback" not in err


# --- retention ------------------------------------------------------------------------

def test_retention_keeps_the_last_n_and_the_young(tmp_path):
    state = tmp_path / "state"
    # 10 checks one day apart, all critical except the first: days -9 ... 0
    for day in range(10):
        sev = None if day == 0 else Severity.CRITICAL
        record(state, _result(severity=sev), T0 + timedelta(days=day),
               Retention(keep_last=3, max_age_days=4.5))
    times = [e.time[:10] for e in list_entries(state)]
    # kept: the last healthy (day 0), the young ones (days 5-9); the last 3 are young
    assert times == ["2026-12-01", "2026-12-06", "2026-12-07", "2026-12-08", "2026-12-09",
                     "2026-12-10"]
    record(state, _result(), T0 + timedelta(days=100), Retention(keep_last=2, max_age_days=90))
    # the healthy day-100 entry is now the last healthy one: day 0 may go
    assert [e.time[:10] for e in list_entries(state)] == ["2026-12-10", "2027-03-11"]


def test_default_retention_is_500_and_90_days():
    assert Retention() == Retention(keep_last=500, max_age_days=90.0)


# --- check records, and compares with the last healthy check ---------------------------

def test_check_reports_what_changed_since_the_last_healthy_check(tmp_path):
    state = str(tmp_path / "state")
    code, out, err = _run(["check", "--state-dir", state], host=_fake_host(tmp_path / "a", OLD))
    assert code == 0 and not err, err
    assert "changed since" not in out
    code, out, err = _run(["check", "--state-dir", state], host=_fake_host(tmp_path / "b", NEW))
    assert code == 0 and not err, err
    first = out.splitlines()[1]  # under the verdict line
    assert first.startswith("changed since the last healthy check (2026-12-01T03:00:00+00:00)")
    assert f"driver.module: {OLD} -> {NEW}" in " ".join(out.split())
    code, out, _ = _run(["check", "--json", "--state-dir", state],
                        host=_fake_host(tmp_path / "c", NEW))
    assert "changed_since_healthy" not in json.loads(out)["host"]  # same as the last healthy
    entries = list_entries(state)
    assert len(entries) == 3
    assert entries[0].digest["driver.module"] == OLD
    assert entries[0].boot_id == "6d1c0e8e-2f3a-4b8c-9d7e-1a2b3c4d5e6f"


def test_comparison_skips_unhealthy_entries(tmp_path):
    state = tmp_path / "state"
    assert record_check(state, _result(), T0) == []
    broken = _result(NEW, severity=Severity.CRITICAL)
    assert record_check(state, broken, T0 + timedelta(hours=1)) == []
    assert broken.host.changed_since_healthy is not None
    assert broken.host.changed_since_healthy.changes == (
        f"driver.module: {OLD} -> {NEW}", f"driver.userspace: {OLD} -> {NEW}")
    again = _result(NEW, uuid="GPU-bbbb-2222")
    record_check(state, again, T0 + timedelta(hours=2))
    changed = again.host.changed_since_healthy
    assert changed is not None and changed.when == "2026-12-01T03:00:00+00:00"
    assert "gpu[0000:18:00.0].uuid: GPU-aaaa-1111 -> GPU-bbbb-2222" in changed.changes
    other = _result(NEW, host="gpu-node-02")
    record_check(state, other, T0 + timedelta(hours=3))
    assert other.host.changed_since_healthy is None  # other hosts do not count


def test_no_history_records_nothing(tmp_path):
    state = tmp_path / "state"
    code, _, err = _run(["check", "--no-history", "--state-dir", str(state)],
                        host=_fake_host(tmp_path / "a", OLD))
    assert code == 0 and not err
    assert not state.exists()


# --- failures never fail the check ----------------------------------------------------

def _check_survives(tmp_path: Path, state: Path) -> str:
    code, out, err = _run(["check", "--state-dir", str(state)],
                          host=_fake_host(tmp_path / "root", OLD))
    assert code == 0, err
    assert "OK" in out
    lines = err.splitlines()
    assert lines and all(ln.startswith("gputriage: history not recorded: ") for ln in lines)
    assert "Traceback" not in err
    return err


def test_corrupt_database_is_moved_aside_and_the_check_recorded(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    garbage = os.urandom(64) + b"garbage" * 1000
    db_path(state).write_bytes(garbage)
    code, _, err = _run(["check", "--state-dir", str(state)],
                        host=_fake_host(tmp_path / "root", OLD))
    assert code == 0 and "Traceback" not in err
    [line] = err.splitlines()
    assert line.startswith(f"gputriage: history: {db_path(state)}: ")
    [aside] = state.glob("history.sqlite.corrupt-*")
    assert f"moved it to {aside}" in line
    assert aside.read_bytes() == garbage
    assert len(list_entries(state)) == 1


@pytest.mark.slow  # waits out the 2 s lock timeout
def test_locked_database_does_not_fail_the_check(tmp_path):
    state = tmp_path / "state"
    record(state, _result(), T0)
    holder = sqlite3.connect(db_path(state), isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("INSERT INTO checks (ts, time, verdict, digest, digest_sha256, "
                       "findings, critical, warning) VALUES (0, 'x', 'ok', '{}', '', '[]', 0, 0)")
        err = _check_survives(tmp_path, state)
        assert "locked" in err
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert len(list_entries(state)) == 1


def test_unwritable_directory_does_not_fail_the_check(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    _check_survives(tmp_path, blocker / "state")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through file modes")
def test_read_only_directory_does_not_fail_the_check(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        _check_survives(tmp_path, parent / "state")
    finally:
        parent.chmod(0o700)


def test_record_check_never_raises(tmp_path, monkeypatch):
    def boom(*_a, **_k):
        raise RuntimeError("unexpected")

    monkeypatch.setattr(history, "record", boom)
    problems = record_check(tmp_path / "state", _result(), T0)
    assert problems == ["RuntimeError: unexpected"]


# --- where the database lives ---------------------------------------------------------

def test_default_state_dir_for_users_and_root(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUTRIAGE_STATE_DIR", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "xdg" / "gputriage"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/is/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_state_dir() == tmp_path / "home" / ".local" / "state" / "gputriage"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_state_dir() == tmp_path / "home" / ".local" / "state" / "gputriage"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_state_dir() == Path("/var/lib/gputriage")
    monkeypatch.setenv("GPUTRIAGE_STATE_DIR", str(tmp_path / "chosen"))
    assert default_state_dir() == tmp_path / "chosen"


def test_check_uses_the_default_state_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUTRIAGE_STATE_DIR", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    code, _, err = _run(["check"], host=_fake_host(tmp_path / "a", OLD))
    assert code == 0 and not err
    assert db_path(tmp_path / "xdg" / "gputriage").is_file()


# --- the terminal line ----------------------------------------------------------------

def test_terminal_opens_with_the_changed_line():
    from rich.console import Console

    from gputriage.views.terminal import render_terminal

    res = _result()
    res.host = replace(res.host, changed_since_healthy=HealthyChange(
        "2026-12-01T03:00:00+00:00", ("kernel: 5.15 -> 6.2",)))
    buf = io.StringIO()
    render_terminal(res, Console(file=buf, width=200, highlight=False))
    assert buf.getvalue().splitlines()[1] == (  # under the verdict line
        "changed since the last healthy check (2026-12-01T03:00:00+00:00): kernel: 5.15 -> 6.2")
    res.host = replace(res.host, changed_since_healthy=HealthyChange("x", ()))
    buf = io.StringIO()
    render_terminal(res, Console(file=buf, width=200, highlight=False))
    assert "changed since" not in buf.getvalue()
