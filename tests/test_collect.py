"""Collection: every outcome is data, every command bounded, snapshots round-trip."""

from __future__ import annotations

import json
import sys
import threading
import time
from unittest import mock

import pytest
from fakehost import FakeHost, gpu_host

from gputriage.collect import CollectOptions, collect, readers
from gputriage.collect.host import run_bounded
from gputriage.engine.analysis import analyze
from gputriage.snapshot.bundle import Snapshot

PYTHON = sys.executable


def _host(tmp_path, **kw) -> FakeHost:
    host = gpu_host(tmp_path / "root", **kw)
    host.write("/proc/sys/kernel/random/boot_id", "0f0e0d0c-aaaa-bbbb-cccc-000000000001\n")
    host.write("/sys/bus/pci/devices/0000:00:1f.0/vendor", "0x8086\n")
    host.write("/sys/bus/pci/devices/0000:00:1f.0/class", "0x060100\n")
    return host


def test_collect_records_every_source_with_its_outcome(tmp_path):
    host = _host(tmp_path, commands={("uname", "-a"): (0, "Linux gpu-node-001 5.15.0 x86_64\n"),
                                     ("nvidia-smi",): (9, "NVIDIA-SMI has failed because it "
                                                       "couldn't communicate with the NVIDIA "
                                                       "driver.\n")})
    out = collect(host, tmp_path / "snap")
    snap = Snapshot.load(out)
    manifest = snap.manifest
    assert manifest["complete"] is True
    assert manifest["host"] == "gpu-node-001"
    assert manifest["boot_id"].startswith("0f0e0d0c")
    rec = manifest["sources"]
    assert rec["proc_modules"]["error"] is None and rec["proc_modules"]["bytes"] > 0
    assert rec["proc_driver_nvidia_version"]["error"] == "absent"
    assert rec["ibstat"]["error"] == "not-applicable"  # no HCA on this host
    assert rec["nvidia_smi"]["error"] == "failed" and rec["nvidia_smi"]["rc"] == 9
    assert "couldn't communicate" in snap.text("nvidia_smi")  # the error text is data
    assert rec["uname"]["target"] == ["uname", "-a"]
    assert "nvidia_smi_q" not in rec  # input-only source, never collected
    tree = json.loads(snap.text("pci_devices"))
    assert "0000:18:00.0/vendor" in tree["files"]
    assert not any(k.startswith("0000:00:1f.0") for k in tree["files"])  # not GPU or NIC


def test_kernel_log_falls_back_to_dmesg_without_a_journal(tmp_path):
    host = _host(tmp_path, commands={
        ("journalctl", "-k", "-b", "-o", "short-iso", "--no-pager"):
            (0, "No journal files were found.\n-- No entries --\n"),
        ("dmesg", "--time-format", "iso"): (0, "2026-12-01T02:00:00,000000+00:00 NVRM: x\n")})
    snap = Snapshot.load(collect(host, tmp_path / "snap"))
    assert snap.record("kernel_log")["target"][0] == "dmesg"
    assert "NVRM" in snap.text("kernel_log")


def test_permission_denied_is_recorded(tmp_path):
    host = _host(tmp_path)
    real = readers.read_capped

    def deny(path, cap):
        if path.name == "modules":
            raise PermissionError(13, "Permission denied")
        return real(path, cap)

    with mock.patch.object(readers, "read_capped", deny):
        snap = Snapshot.load(collect(host, tmp_path / "snap"))
    assert snap.record("proc_modules")["error"] == "permission"
    assert "permission" in snap.missing_reason("proc_modules")


@pytest.mark.slow  # waits out a command's timeout
def test_a_hung_command_is_abandoned_and_becomes_a_finding(tmp_path):
    host = _host(tmp_path, commands={("nvidia-smi", "-q", "-x"): (0, "")},
                 hang={("nvidia-smi", "-q", "-x"): 30.0})
    out = collect(host, tmp_path / "snap", CollectOptions(deadline_s=1.0))
    snap = Snapshot.load(out)
    rec = snap.record("nvidia_smi_q_xml")
    assert rec["error"] == "timeout"
    assert "deadline" in rec["error_detail"]
    ids = {f.id for f in analyze(snap).findings}
    assert "driver.wedged" in ids


HUNG = [("nvidia-smi", "-q", "-x"), ("nvidia-smi",), ("nvidia-smi", "topo", "-m"),
        ("nvidia-smi", "nvlink", "-s")]  # the first four command sources, all stuck


def _alive(host: FakeHost) -> list[str]:
    """The collection threads of ``host`` still running."""
    return sorted(t.name for t in threading.enumerate()
                  if getattr(t, "host", None) is host and t.is_alive())


def test_a_read_that_never_returns_is_not_started_again(tmp_path):
    """A read stuck in the kernel cannot be killed: the next collection (a watch's next
    cycle) starts no other thread for it, records it as still hung, and keeps its
    deadline; the half-second of grace is paid once, not once per hung source."""
    host = _host(tmp_path, commands=dict.fromkeys(HUNG, (0, "")),
                 hang=dict.fromkeys(HUNG, 8.0))
    opts = CollectOptions(deadline_s=0.3)
    start = time.monotonic()
    first = Snapshot.load(collect(host, tmp_path / "one", opts))
    assert time.monotonic() - start < 0.3 + 1.2  # not 0.3 + 4 x 0.5
    assert first.record("nvidia_smi_q_xml")["error_detail"] == "global deadline reached"
    hung = ["collect-nvidia_smi", "collect-nvidia_smi_nvlink_status",
            "collect-nvidia_smi_q_xml", "collect-nvidia_smi_topo"]
    assert _alive(host) == hung
    start = time.monotonic()
    second = Snapshot.load(collect(host, tmp_path / "two", opts))
    assert time.monotonic() - start < 0.3 + 1.2
    for argv in HUNG:
        assert host.calls.count(list(argv)) == 1  # each started once, in all
    rec = second.record("nvidia_smi_q_xml")
    assert rec["error"] == "timeout"
    assert rec["error_detail"].startswith("still hung since ")
    assert "an earlier collection's read has not returned" in rec["error_detail"]
    assert _alive(host) == hung  # no new thread
    assert "driver.wedged" in {f.id for f in analyze(second).findings}
    assert second.record("uname")["error"] == "absent"  # the others collected as ever


def test_run_bounded_kills_at_timeout():
    outcome = run_bounded([PYTHON, "-c", "import time; print('started', flush=True); "
                           "time.sleep(60)"], timeout_s=0.5, cap_bytes=1024)
    assert outcome.timed_out and outcome.rc is None
    assert outcome.duration_s < 10
    assert b"started" in outcome.output


def test_run_bounded_keeps_the_tail_of_long_output():
    outcome = run_bounded([PYTHON, "-c", "print('x' * 200000); print('THE END')"],
                          timeout_s=20, cap_bytes=1000)
    assert outcome.truncated and outcome.rc == 0
    assert outcome.output.rstrip().endswith(b"THE END")
    assert len(outcome.output) <= 1000


def test_run_bounded_reports_a_missing_program():
    outcome = run_bounded(["gputriage-no-such-program"], timeout_s=1, cap_bytes=100)
    assert outcome.not_found


def test_run_bounded_never_uses_a_shell_and_sets_c_locale():
    outcome = run_bounded([PYTHON, "-c", "import os; print(os.environ['LC_ALL'])"],
                          timeout_s=20, cap_bytes=100)
    assert outcome.output.strip() == b"C"


def test_tarball_snapshot_round_trips(tmp_path):
    host = _host(tmp_path)
    out = collect(host, tmp_path / "snap.tar.gz")
    assert out.name == "snap.tar.gz"
    snap = Snapshot.load(out)
    assert snap.text("proc_modules").startswith("nvidia ")


def test_tools_for_absent_hardware_are_not_applicable(tmp_path):
    host = FakeHost(tmp_path / "root")
    host.write("/sys/bus/pci/devices/0000:00:03.0/vendor", "0x1af4\n")
    host.write("/sys/bus/pci/devices/0000:00:03.0/class", "0x020000\n")
    rec = Snapshot.load(collect(host, tmp_path / "snap")).manifest["sources"]
    assert rec["nvidia_smi_q_xml"]["error"] == "not-applicable"
    assert rec["ibstat"]["error"] == "not-applicable"
    assert rec["numactl"]["error"] == "absent"  # not tied to GPU or HCA hardware


def test_tools_for_present_hardware_stay_absent(tmp_path):
    host = _host(tmp_path)  # has an NVIDIA GPU on PCI
    rec = Snapshot.load(collect(host, tmp_path / "snap")).manifest["sources"]
    assert rec["nvidia_smi_q_xml"]["error"] == "absent"
