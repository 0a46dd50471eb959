"""nvidia-bug-report.log splitting (synthetic report in tests/fixtures/ingest)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.ingest import load_input, load_text
from gputriage.ingest.bugreport import is_bug_report, sections, split_bug_report

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ingest" / "nvidia-bug-report.log"
SEP = "_" * 44


def report() -> str:
    return FIXTURE.read_text(encoding="utf-8")


def test_is_bug_report() -> None:
    assert is_bug_report(report())
    assert not is_bug_report("[  1.0] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off.\n")
    assert not is_bug_report("")


def test_split_maps_sections_to_sources() -> None:
    parts = split_bug_report(report())
    for name in ("proc_driver_nvidia_version", "proc_modules", "nvidia_smi_q", "kernel_log",
                 "lspci_nvidia", "proc_cmdline", "proc_meminfo", "uname",
                 "proc_driver_nvidia_gpus"):
        assert name in parts, name
    assert parts["proc_driver_nvidia_version"].startswith("NVRM version: NVIDIA UNIX")
    assert "*** ls:" not in parts["proc_modules"]
    assert parts["proc_modules"].startswith("nvidia_uvm ")
    # --query --unit is a second command in the same section: not part of -q
    assert "Attached GPUs" in parts["nvidia_smi_q"]
    assert "Attached Units" not in parts["nvidia_smi_q"]
    # the dmesg section (current boot) wins over the grep of older boots
    assert "79, pid=" in parts["kernel_log"] and "Xid (PCI:0000:18:00): 13" not in parts[
        "kernel_log"]
    assert "0000:2a:00.0 3D controller" in parts["lspci_nvidia"]
    assert "10b5" not in parts["lspci_nvidia"]
    assert parts["uname"].startswith("Linux gpu-node-07 5.15.0-131-generic")
    gpus = json.loads(parts["proc_driver_nvidia_gpus"])
    assert sorted(gpus["files"]) == ["0000:18:00.0/information", "0000:2a:00.0/information"]


def test_kernel_log_falls_back_to_scan_of_current_boot() -> None:
    chunks = report().split(SEP)
    text = SEP.join(c for c in chunks if not c.lstrip().startswith("dmesg:"))
    kern = split_bug_report(text)["kernel_log"]
    assert "Xid (PCI:0000:2a:00): 79" in kern
    assert "Xid (PCI:0000:18:00): 13" not in kern  # journalctl -b -1 is a previous boot
    assert "nvidia-persistenced" in kern  # the system log keeps the daemons' records too


def test_sections_keep_headers_and_drop_ls_lines() -> None:
    secs = sections(report())
    heads = [s.header for s in secs]
    assert "/proc/modules" in heads and "dmesg:" in heads
    assert "/usr/bin/nvidia-smi --query --unit" in heads
    absent = [s for s in secs if s.error]
    assert [(s.header, s.error) for s in absent] == [("/var/log/nvidia-installer.log", "absent")]


def test_missing_file_section_becomes_a_failed_record() -> None:
    text = (f"{SEP}\n\nStart of NVIDIA bug report log file.\n\n{SEP}\n\n"
            "*** /proc/driver/nvidia/version does not exist\n\n"
            f"{SEP}\n\n*** /proc/modules is not readable\n\n{SEP}\n\nEnd of NVIDIA bug report "
            "log file.\n")
    snap = load_text(text, "r.log")
    assert snap.get("proc_driver_nvidia_version") is None
    assert snap.record("proc_driver_nvidia_version")["error"] == "absent"
    assert snap.record("proc_modules")["error"] == "permission"
    assert "absent" in snap.missing_reason("proc_driver_nvidia_version")
    assert any("no section" in p for p in snap.problems)


def test_load_gzipped_report_origins(tmp_path: Path) -> None:
    path = tmp_path / "nvidia-bug-report.log.gz"
    path.write_bytes(gzip.compress(report().encode()))
    snap = load_input(str(path))
    cap = snap.get("proc_modules")
    assert cap is not None and cap.origin == f"{path}#/proc/modules"
    assert cap.record["kind"] == "bug-report"
    assert snap.get("kernel_log").origin == f"{path}#dmesg:"
    assert snap.problems == []


def test_report_without_prologue_is_still_recognised() -> None:
    body = report().split("End of NVIDIA")[0]
    tail = body[body.index("*** /proc/cmdline") - 50:]
    assert is_bug_report(tail)
    assert "proc_modules" in split_bug_report(tail)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_split_never_raises(text: str) -> None:
    assert isinstance(split_bug_report(text), dict)
    is_bug_report(text)


_LINES = [SEP, "", "*** /proc/modules", "*** ls: x", "dmesg:", "/usr/bin/nvidia-smi --query",
          "*** /x does not exist", "  journalctl -b -0:", "NVRM: Xid (PCI:0000:01:00): 79, x",
          "nvidia 1 2 - Live 0x0", "uname: Linux h", "*** ",
          "*** /proc/driver/nvidia/gpus/0000:01:00.0/information",
          "Scanning kernel log files for NVIDIA kernel messages:"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_LINES), st.text(max_size=20)), max_size=30))
def test_split_structured_fuzz(lines: list[str]) -> None:
    parts = split_bug_report("\n".join(lines))
    assert all(isinstance(v, str) for v in parts.values())
