"""Kernel-log judgement: Xid / SXid / other events -> findings, with context,
counts, time scoping, the scenarios and the real captures of corpus category 4."""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta, timezone

import pytest
from golden import flat
from hostkit import HEALTHY, snap
from hypothesis import given
from hypothesis import strategies as st
from kernel_kit import T0, A, B, judge, one, other, sxid, xid

from gputriage.engine.analysis import analyze
from gputriage.facts.window import LogWindow, parse_boot, parse_since
from gputriage.ingest import load_input
from gputriage.logscan.events import DriverEvent
from gputriage.model import Action, Blame, Severity
from gputriage.rules.kernel_common import EVIDENCE_HEAD, EVIDENCE_TAIL
from gputriage.scenarios import build_scenario, get_scenario
from gputriage.snapshot.bundle import Snapshot

# --- grouping, counts, evidence, scope -----------------------------------------------------

def test_one_finding_per_gpu_and_code_with_count_and_times():
    events = [xid(31, A, pid="7", name="python3", t=i) for i in range(3)] + [
        xid(31, B, pid="8", name="python3", t=9)]
    findings = judge(events, {A: (0, "GPU-aaa"), B: (4, "GPU-bbb")})
    assert len(findings) == 2
    f = one(findings, "xid.31", A)
    assert f.occurrences.count == 3 and f.occurrences.current_boot
    assert f.occurrences.first == T0.isoformat()
    assert f.occurrences.last == (T0 + timedelta(seconds=2)).isoformat()
    assert "3 events" in f.title and "GPU 0 (0000:18:00.0)" in f.title
    assert f.scope.gpu_index == 0 and f.scope.uuid == "GPU-aaa"
    assert one(findings, "xid.31", B).scope.gpu_index == 4


def test_evidence_keeps_first_and_last_lines_and_notes_the_count():
    events = [xid(31, A, pid="7", name="python3", t=i, message=f"fault {i}") for i in range(25)]
    f = one(judge(events), "xid.31")
    lines = f.evidence[0].lines
    assert len(lines) == EVIDENCE_HEAD + EVIDENCE_TAIL + 1
    assert lines[0].endswith("fault 0") and lines[-1].endswith("fault 24")
    assert "16 more occurrences" in lines[EVIDENCE_HEAD]
    assert f.evidence[0].note == "25 occurrences"


def test_driver_rule_kinds_are_left_to_the_driver_rules():
    events = [other("rm-init-adapter-failed", "NVRM: GPU 0000:0a:00.0: RmInitAdapter failed!",
                    "0000:0a:00.0"),
              other("api-mismatch", "NVRM: API mismatch: ...")]
    assert judge(events) == []


# --- Xid context --------------------------------------------------------------------------

def test_xid45_alone_follows_the_catalog():
    f = one(judge([xid(45, pid="9", name="python")]), "xid.45")
    assert f.blame is Blame.JOB and f.severity is Severity.INFO


def test_xid45_right_after_another_xid_is_a_follow_on():
    events = [xid(13, pid="9", name="python", t=0), xid(45, pid="9", name="python", t=2)]
    findings = judge(events)
    f45 = one(findings, "xid.45")
    assert f45.severity is Severity.INFO and f45.action is Action.NONE
    assert "follow-on of Xid 13" in f45.title
    assert "Xid 45" in one(findings, "xid.13").explanation


def test_xid45_long_after_another_xid_stands_alone():
    events = [xid(13, pid="9", name="python", t=0), xid(45, pid="9", name="python", t=600)]
    assert "follow-on of Xid" not in one(judge(events), "xid.45").title


def test_xid45_caused_by_an_xid_the_log_lacks_takes_the_cause_s_verdict():
    events = [xid(45, pid="9", name="python3", caused_by="149", t=i) for i in range(2)]
    f = one(judge(events), "xid.45")
    assert "follow-on of Xid 149" in f.title
    assert f.severity is Severity.CRITICAL and f.blame is Blame.NODE
    assert "does not show" in f.explanation


@pytest.mark.parametrize("code", [13, 31, 43])
def test_app_faults_in_one_job_blame_the_job(code):
    f = one(judge([xid(code, pid="41", name="train", t=i) for i in range(4)]), f"xid.{code}")
    assert f.blame is Blame.JOB and f.action is Action.RESTART_JOB
    assert f.severity.rank <= Severity.WARNING.rank


def test_app_faults_across_processes_suspect_the_gpu():
    two = [xid(31, pid="41", name="train"), xid(31, pid="52", name="eval", t=60)]
    f = one(judge(two), "xid.31")
    # a warning drains nothing: the reset and diagnostics are planned
    assert f.blame is Blame.NODE and f.action is Action.PLAN_REPAIR
    assert f.severity is Severity.WARNING
    three = two + [xid(13, pid="63", name="bench", t=120)]
    findings = judge(three)
    for fid in ("xid.31", "xid.13"):
        f = one(findings, fid)
        # NVIDIA's catalog: RESTART_APP; a diagnostic of the GPU, never a drain on Xids alone
        assert f.severity is Severity.WARNING and f.action is Action.PLAN_REPAIR
        assert f.blame is Blame.NODE
        assert "3 different processes" in f.explanation and "dcgmi diag" in f.explanation


MMU = ("Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{} faulted @ "
       "0x7f{}_1c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ")


def test_one_program_restarting_under_new_pids_is_one_job_crash_looping():
    events = [xid(31, pid=str(4100 + 17 * i), name="python3", t=300 * i,
                  message=MMU.format(i % 4, 30 + i)) for i in range(7)]
    events += [xid(43, pid=str(4100 + 17 * i), name="python3", t=300 * i + 1,
                   message=f"Ch 000000{10 + i}") for i in range(0, 7, 2)]
    findings = judge(events)
    for fid in ("xid.31", "xid.43"):
        f = one(findings, fid)
        assert f.blame is Blame.JOB and f.action is Action.RESTART_JOB
        assert f.severity.rank <= Severity.WARNING.rank
        assert "7 restarts of one program 'python3' (pids 4100, 4117," in f.explanation


def test_one_program_name_with_differing_faults_is_still_one_job():
    """Issue 12: one program restarted under new pids is one job even when its faults
    differ from run to run; only different programs point at the GPU."""
    kinds = ["FAULT_PDE ACCESS_TYPE_VIRT_READ", "FAULT_PTE ACCESS_TYPE_VIRT_WRITE",
             "FAULT_PRIV ACCESS_TYPE_VIRT_ATOMIC"]
    events = [xid(31, pid=str(50 + i), name="python3", t=60 * i,
                  message=f"MMU Fault: ENGINE CE{i} faulted. Fault is of type {k}")
              for i, k in enumerate(kinds)]
    f = one(judge(events), "xid.31")
    assert f.blame is Blame.JOB and f.severity.rank <= Severity.WARNING.rank
    assert "one job (python3) crash-looping: 3 restarts" in f.title
    assert "fault again on this GPU" in f.explanation


def test_different_programs_on_one_gpu_suspect_it_even_when_one_restarts():
    events = [xid(31, pid=str(70 + i), name="python3", t=i, message=MMU.format(0, 1))
              for i in range(4)]
    events += [xid(13, pid="90", name="cuda_bench", t=50), xid(31, pid="91", name="dcgmi", t=90)]
    findings = judge(events)
    f = one(findings, "xid.31")
    assert f.severity is Severity.WARNING and f.action is Action.PLAN_REPAIR
    assert f.blame is Blame.NODE
    assert "of 3 programs (cuda_bench, dcgmi, python3)" in f.explanation


def test_unknown_names_keep_the_pid_judgement():
    events = [xid(31, pid=str(10 + i), name="<unknown>", t=i, message=MMU.format(0, 1))
              for i in range(3)]
    f = one(judge(events), "xid.31")
    assert f.severity is Severity.WARNING and f.blame is Blame.NODE


def test_a_crash_looping_job_read_from_a_log_is_no_node_fault(tmp_path):
    lines = [f"[{1000 + 90 * i}.000000] NVRM: Xid (PCI:0000:3b:00): 31, pid={2200 + i}, "
             f"name=python3, {MMU.format(i, 40 + i)}" for i in range(5)]
    path = tmp_path / "dmesg.txt"
    path.write_text("\n".join(lines) + "\n")
    f = one(analyze(load_input(str(path))).findings, "xid.31")
    assert f.blame is Blame.JOB and f.action is not Action.DRAIN_AND_REPAIR
    assert f.severity.rank <= Severity.WARNING.rank
    assert "5 restarts of one program 'python3' (pids 2200, 2201" in f.explanation


def test_unknown_pids_count_as_one_job():
    events = [xid(13, pid="'<unknown>'"), xid(13, pid="'<unknown>'", t=1)]
    assert one(judge(events), "xid.13").blame is Blame.JOB


def test_row_remap_flow():
    pending = judge([xid(48), xid(63, t=0.1)])
    f48 = one(pending, "xid.48")
    assert (f48.severity, f48.action, f48.blame) == (Severity.CRITICAL, Action.RESET_GPU,
                                                     Blame.NODE)
    assert "remap" in f48.explanation
    assert one(pending, "xid.63").action is Action.PLAN_REPAIR  # reset when idle
    failed = judge([xid(48), xid(64, t=0.1)])
    assert one(failed, "xid.48").action is Action.DRAIN_AND_REPAIR
    assert one(failed, "xid.64").action is Action.DRAIN_AND_REPAIR


def test_contained_vs_uncontained_memory_errors():
    f94 = one(judge([xid(94, pid="5", name="job")]), "xid.94")
    assert f94.action is Action.RESTART_JOB and f94.severity is Severity.WARNING
    f95 = one(judge([xid(95)]), "xid.95")
    assert (f95.severity, f95.action, f95.blame) == (Severity.CRITICAL, Action.RESET_GPU,
                                                     Blame.NODE)


def test_xid79_drains_and_a_bare_fallen_off_bus_counts_as_xid79():
    f = one(judge([xid(79, B, message="GPU has fallen off the bus.")]), "xid.79")
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.DRAIN_AND_REPAIR,
                                               Blame.NODE)
    bare = other("fallen-off-bus", "NVRM: The NVIDIA GPU 0000:9a:00.0 ... fallen off the bus", B)
    f = one(judge([bare]), "xid.79")
    assert f.scope.pci_bus_id == B and f.occurrences.count == 1
    both = judge([xid(79, B, message="GPU has fallen off the bus."), bare])
    assert one(both, "xid.79").occurrences.count == 1


def test_gsp_timeouts_reset_then_repair_when_repeating():
    once = one(judge([xid(119, pid="1", name="nvidia-smi")]), "xid.119")
    assert (once.severity, once.action) == (Severity.CRITICAL, Action.RESET_GPU)
    many = one(judge([xid(119, pid=str(i), name="x", t=i * 300) for i in range(3)]), "xid.119")
    assert many.action is Action.DRAIN_AND_REPAIR and "repeating" in many.title
    f120 = one(judge([xid(120)]), "xid.120")
    assert f120.action is Action.RESET_GPU and f120.severity is Severity.CRITICAL


def test_gsp_banner_events_fold_into_the_xid119_finding():
    banner = other("gsp-rpc-timeout", "NVRM: _kgspLogXid119: GSP Timeout", A)
    findings = judge([banner, xid(119)])
    assert [f.id for f in findings] == ["xid.119"]
    alone = one(judge([banner]), "kernel.gsp-rpc-timeout")
    assert alone.action is Action.RESET_GPU


@pytest.mark.parametrize(("target", "action", "severity"), [
    ("0x4 (Drain and Reset)", Action.RESET_GPU, Severity.CRITICAL),
    ("0x1 (GPU Reset Required)", Action.RESET_GPU, Severity.CRITICAL),
    ("0x2 (Node Reboot Required)", Action.REBOOT_NODE, Severity.CRITICAL),
    ("0x0 (None)", Action.NONE, Severity.INFO),
])
def test_xid154_does_what_its_text_says(target, action, severity):
    msg = f"GPU recovery action changed from 0x0 (None) to {target}"
    f = one(judge([xid(154, message=msg, recovery_action=target)]), "xid.154")
    assert f.action is action and f.severity is severity
    assert target.split("(")[1].rstrip(")") in f.title


def test_xid154_last_change_wins():
    events = [xid(154, message="GPU recovery action changed from 0x0 (None) to 0x1 "
                  "(GPU Reset Required)"),
              xid(154, t=5, message="GPU recovery action changed from 0x1 (GPU Reset "
                  "Required) to 0x0 (None)")]
    f = one(judge(events), "xid.154")
    assert f.action is Action.NONE and f.occurrences.count == 2


def test_unknown_xid_code_is_a_warning_not_a_crash():
    f = one(judge([xid(9999)]), "xid.9999")
    assert f.severity is Severity.WARNING and "not in the catalog" in f.title


# --- earlier boots ------------------------------------------------------------------------

def test_earlier_boot_events_are_history():
    findings = judge([xid(79, B, boot=-1, message="GPU has fallen off the bus."),
                      xid(31, A, pid="5", name="x", boot=0)])
    old = one(findings, "xid.79")
    assert old.severity is Severity.INFO and old.action is Action.NONE
    assert old.title.startswith("earlier boot: ")
    assert old.occurrences.current_boot is False
    assert one(findings, "xid.31").occurrences.current_boot is True


BOOTS_LOG = """-- Boot 1b0e8c2f3a4d4e5f8a9b0c1d2e3f4a5b --
2024-05-13T22:10:01+0000 gpu-node-017 kernel: Linux version 5.15.0-105-generic
2024-05-13T23:41:17+0000 gpu-node-017 kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
-- Boot 7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f --
2024-05-14T06:02:11+0000 gpu-node-017 kernel: Linux version 5.15.0-105-generic
2024-05-14T06:02:40+0000 gpu-node-017 kernel: nvidia-uvm: Loaded the UVM driver, major device number 508.
"""  # noqa: E501


def test_earlier_boot_xid79_does_not_make_the_verdict_critical():
    result = analyze(snap(**{**HEALTHY, "kernel_log": BOOTS_LOG}))
    f = next(f for f in result.findings if f.id == "xid.79")
    assert f.severity is Severity.INFO and f.title.startswith("earlier boot: ")
    assert "gpu.missing" not in {x.id for x in result.findings}
    assert result.host.verdict == "ok"


def test_boot_window_selects_one_boot():
    log = BOOTS_LOG + ("2024-05-14T07:00:00+0000 gpu-node-017 kernel: NVRM: Xid "
                       "(PCI:0000:18:00): 31, pid=77, name=python, MMU Fault\n")
    result = analyze(snap(live=False, kernel_log=log), LogWindow(boot=0))
    assert {f.id for f in result.findings if f.id.startswith("xid.")} == {"xid.31"}
    result = analyze(snap(live=False, kernel_log=log), LogWindow(boot=-1))
    assert {f.id for f in result.findings if f.id.startswith("xid.")} == {"xid.79"}


def test_since_window_drops_older_events():
    log = BOOTS_LOG + ("2024-05-14T07:00:00+0000 gpu-node-017 kernel: NVRM: Xid "
                       "(PCI:0000:18:00): 31, pid=77, name=python, MMU Fault\n")
    result = analyze(snap(live=False, kernel_log=log),
                     LogWindow(since=datetime(2024, 5, 14, 6, 30, tzinfo=timezone.utc)))
    assert {f.id for f in result.findings if f.id.startswith("xid.")} == {"xid.31"}


def test_window_admits():
    ev = xid(31, boot=-1, t=10)
    assert LogWindow().admits(ev)
    assert not LogWindow(boot=0).admits(ev)
    assert LogWindow(boot=-1, since=T0).admits(ev)
    assert not LogWindow(since=T0 + timedelta(hours=1)).admits(ev)
    undated = DriverEvent("xid", "x", A, None, {"code": "31"})
    assert LogWindow(since=T0).admits(undated)


def test_parse_since_and_boot():
    now = datetime(2024, 5, 14, 12, 0, tzinfo=timezone.utc)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("30 min ago", now) == now - timedelta(minutes=30)
    assert parse_since("1d", now) == now - timedelta(days=1)
    assert parse_since("2024-05-14T09:00:00Z") == datetime(2024, 5, 14, 9, tzinfo=timezone.utc)
    assert parse_since("2024-05-14 09:00").tzinfo is not None
    assert parse_boot("all") is None and parse_boot("0") == 0 and parse_boot("-2") == -2
    for bad in ("yesterday-ish", "2x", ""):
        with pytest.raises(ValueError):
            parse_since(bad)
    for bad in ("1", "last", ""):
        with pytest.raises(ValueError):
            parse_boot(bad)


@given(st.text(max_size=40))
def test_parse_since_gives_a_time_or_value_error(text):
    with contextlib.suppress(ValueError):
        assert parse_since(text).tzinfo is not None


# --- SXid and the other event kinds -------------------------------------------------------

def test_sxid_fatal_is_critical_nonfatal_warns_when_repeated():
    fatal = one(judge([sxid(20034, "Fatal")]), "sxid.20034")
    assert fatal.severity is Severity.CRITICAL
    assert fatal.scope.pci_bus_id == "0000:07:00.0" and "nvidia-nvswitch3" in fatal.title
    single = one(judge([sxid(10001, "Non-fatal")]), "sxid.10001")
    assert single.severity is Severity.INFO
    repeated = one(judge([sxid(10001, "Non-fatal", t=i) for i in range(2)]), "sxid.10001")
    assert repeated.severity is Severity.WARNING


@pytest.mark.parametrize(("event", "fid", "severity", "action", "blame"), [
    (other("hung-task", "INFO: task python:4411 blocked for more than 120 seconds. "
           "os_acquire_mutex+0x1f [nvidia]"), "kernel.hung-task-in-nvidia", Severity.CRITICAL,
     Action.REBOOT_NODE, Blame.NODE),
    (other("soft-lockup", "watchdog: BUG: soft lockup - CPU#12 stuck for 22s! "
           "[nvidia-smi:9001] RIP: _nv012345rm+0x1c/0x30 [nvidia]"),
     "kernel.soft-lockup-in-nvidia", Severity.CRITICAL, Action.REBOOT_NODE, Blame.NODE),
    (other("segfault", "python[881]: segfault at 0 ip 00007f sp 00007f error 4 in "
           "libcuda.so.550.54.15[7f00+e97000]", process="python"),
     "kernel.segfault-in-gpu-library", Severity.WARNING, Action.RESTART_JOB, Blame.JOB),
    (other("gpu-reset-required", "NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset "
           "required [NV_ERR_RESET_REQUIRED]", A), "kernel.gpu-reset-required",
     Severity.CRITICAL, Action.RESET_GPU, Blame.NODE),
    (other("pcie-aer", "pcieport 0000:17:01.0: AER: Uncorrected (Fatal) error received: "
           "0000:18:00.0", A, severity="Uncorrected (Fatal)"), "kernel.pcie-aer",
     Severity.CRITICAL, Action.DRAIN_AND_REPAIR, Blame.NODE),
    (other("mlx5-link", "mlx5_core 0000:29:00.0: Port module event: module 0, Cable unplugged;"
           " link down", "0000:29:00.0", state="down"), "kernel.link-down",
     Severity.CRITICAL, Action.DRAIN_AND_REPAIR, Blame.NODE),
    (other("pcie-bandwidth-limited", "mlx5_core 0000:29:00.0: 126.024 Gb/s available PCIe "
           "bandwidth, limited by 8.0 GT/s PCIe x16 link at 0000:28:01.0 (capable of 252.048 "
           "Gb/s with 16.0 GT/s PCIe x16 link)", "0000:29:00.0"),
     "kernel.pcie-bandwidth-limited", Severity.WARNING, Action.PLAN_REPAIR, Blame.NODE),
    (other("nvlink-error", "NVRM: nvlink: link 3 error", A), "kernel.nvlink-error",
     Severity.WARNING, Action.PLAN_REPAIR, Blame.NODE),
])
def test_other_event_kinds(event, fid, severity, action, blame):
    f = one(judge([event], {A: (0, None)}), fid)
    assert (f.severity, f.action, f.blame) == (severity, action, blame)


def test_events_that_do_not_concern_gpus_are_quiet():
    quiet = [other("segfault", "bash[12]: segfault at 0 ip 0 sp 0 error 4 in libc.so.6[7f+1]"),
             other("hung-task", "INFO: task jbd2/sda1-8:311 blocked for more than 120 seconds."),
             other("mlx5-link", "mlx5_core 0000:29:00.0: link down", "0000:29:00.0",
                   state="down"),
             other("mlx5-link", "mlx5_core 0000:29:00.0: link up", "0000:29:00.0", t=3,
                   state="up")]
    assert judge(quiet) == []


def test_peermem_invalid_context_is_info_even_in_a_burst():
    """NVIDIA's GPUDirect maintainers call the message harmless (a mitigation prints it,
    R560 drivers no longer do): a burst is a process's teardown, never a warning."""
    line = ("nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, "
            "skipping further processing")
    few = one(judge([other("peermem-invalid-context", line)]), "kernel.peermem-invalid-context")
    assert few.severity is Severity.INFO and few.action is Action.NONE
    burst = one(judge([other("peermem-invalid-context", line, t=i) for i in range(30)]),
                "kernel.peermem-invalid-context")
    assert burst.severity is Severity.INFO and burst.action is Action.NONE


def test_gsp_error_beside_a_reset_required_or_init_failure_is_not_repeated():
    gsp = other("gsp-error", "NVRM: rpcRmApiAlloc_GSP: GspRmAlloc failed: status=0x00000062")
    reset = other("gpu-reset-required", "NVRM: Assertion failed: Reset required "
                  "[NV_ERR_RESET_REQUIRED]")
    assert [f.id for f in judge([gsp, reset])] == ["kernel.gpu-reset-required"]
    assert [f.id for f in judge([gsp])] == ["kernel.gsp-error"]


def test_corrected_aer_is_info_until_it_streams():
    aer = [other("pcie-aer", "pcieport 0000:17:01.0: AER: Corrected error received: "
                 "0000:18:00.0", A, t=i, severity="Corrected") for i in range(2)]
    assert one(judge(aer, {A: (0, None)}), "kernel.pcie-aer").severity is Severity.INFO
    aer = aer * 6
    assert one(judge(aer, {A: (0, None)}), "kernel.pcie-aer").severity is Severity.WARNING


# --- scenarios ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scenario_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("xid-scenarios")
    names = ("xid79-gpu-lost", "xid31-one-job", "xid48-row-remap", "xid119-repeated")
    return {n: analyze(Snapshot.load(build_scenario(n, root / n))) for n in names}


@pytest.mark.parametrize("name", ["xid79-gpu-lost", "xid31-one-job", "xid48-row-remap",
                                  "xid119-repeated"])
def test_xid_scenarios_yield_their_findings(name, scenario_results):
    result = scenario_results[name]
    found = {f.id for f in flat(result.findings)}  # a folded consequence is still found
    assert set(get_scenario(name).expected) <= found, found
    assert not result.unreadable


def test_xid79_scenario_agrees_with_the_inventory(scenario_results):
    result = scenario_results["xid79-gpu-lost"]
    f = next(f for f in result.findings if f.id == "xid.79")
    assert f.scope.pci_bus_id == "0000:9a:00.0" and f.scope.gpu_index is None
    assert f.action is Action.DRAIN_AND_REPAIR
    missing = next(f for f in flat(result.findings) if f.id == "gpu.missing")
    assert missing.scope.pci_bus_id == f.scope.pci_bus_id


def test_xid31_scenario_blames_the_job_only(scenario_results):
    result = scenario_results["xid31-one-job"]
    f = next(f for f in result.findings if f.id == "xid.31")
    assert (f.blame, f.action) == (Blame.JOB, Action.RESTART_JOB)
    assert f.scope.gpu_index == 2 and f.occurrences.count == 3
    node = [x.id for x in result.findings if x.blame is Blame.NODE
            and x.severity.rank >= Severity.WARNING.rank]
    assert not node


def test_xid48_scenario_resets_to_apply_the_remap(scenario_results):
    result = scenario_results["xid48-row-remap"]
    f = next(f for f in result.findings if f.id == "xid.48")
    assert (f.severity, f.action, f.scope.gpu_index) == (Severity.CRITICAL, Action.RESET_GPU, 5)


def test_xid119_scenario_escalates(scenario_results):
    result = scenario_results["xid119-repeated"]
    f = next(f for f in result.findings if f.id == "xid.119")
    assert f.action is Action.DRAIN_AND_REPAIR and f.occurrences.count == 4
    assert f.scope.gpu_index == 3


# --- real captures (corpus category 4) ----------------------------------------------------

# sample -> (finding id, PCI address or None, action or None, blame or None)
EXPECTED = {
    "dxvk1799-rtx2080-xid31": ("xid.31", "0000:c1:00.0", Action.RESTART_JOB, Blame.JOB),
    "ogkm1030-rtx5070ti-xid31": ("xid.31", "0000:01:00.0", Action.RESTART_JOB, Blame.JOB),
    "trtllm15610-b200-xid13": ("xid.13", "0000:70:00.0", Action.RESTART_JOB, Blame.JOB),
    "rviz-p620-xid13": ("xid.13", "0000:01:00.0", Action.RESTART_JOB, Blame.JOB),
    "gpud-pr46-xid13": ("xid.13", "0000:cb:00.0", Action.RESTART_JOB, Blame.JOB),
    "bumblebee677-legacy": ("xid.31", "0000:01:00.0", None, Blame.JOB),
    "gb10-or-grace-000f-xid119": ("xid.119", "000f:01:00.0", Action.RESET_GPU, Blame.NODE),
    "gpud-xid119-gsp-rpc-timeout": ("xid.119", "0000:9b:00.0", Action.DRAIN_AND_REPAIR,
                                    Blame.NODE),
    "vllm40652-8xa100-xid119": ("xid.119", "0001:96:00.0", Action.RESET_GPU, Blame.NODE),
    "gpud-pr1174-gb200": ("xid.149", "0019:01:00.0", None, Blame.NODE),
    "nccl2241-b200-xid145": ("xid.145", None, None, Blame.NODE),
    "gpuop1146-xid48": ("xid.48", "0000:07:00.0", Action.DRAIN_AND_REPAIR, Blame.NODE),
    "nolebase-h100-xid79": ("xid.79", "0000:5d:00.0", Action.DRAIN_AND_REPAIR, Blame.NODE),
    "nolebase-h100-syslog": ("xid.79", "0000:5d:00.0", Action.DRAIN_AND_REPAIR, Blame.NODE),
    "nvsentinel155-fallen-off-bus": ("xid.79", "0000:b3:00.0", Action.DRAIN_AND_REPAIR,
                                     Blame.NODE),
    "ogkm1150-xid45": ("xid.45", "0000:dc:00.0", Action.RESET_GPU, Blame.NODE),
    "rtxpro6000-blackwell-xid48": ("xid.48", "0000:55:00.0", Action.RESET_GPU, Blame.NODE),
    "training-chronicles-aws-xid63": ("xid.63", "0000:10:1c.0", Action.PLAN_REPAIR, Blame.NODE),
    "vllm40652-talos": ("xid.74", "0000:48:00.0", None, Blame.NODE),
    "nvsentinel-csv-test-strings": ("xid.74", "0003:00:00.0", None, Blame.NODE),
    "sichek51-gsp-reset-required": ("kernel.gpu-reset-required", None, Action.RESET_GPU,
                                    Blame.NODE),
}
# sample -> (finding id, PCI address, action) for secondary conclusions of the same logs
ALSO = {
    "rtxpro6000-blackwell-xid48": [("xid.63", "0000:55:00.0", Action.PLAN_REPAIR),
                             ("xid.154", "0000:55:00.0", Action.RESET_GPU)],
    "vllm40652-talos": [("xid.154", "0000:48:00.0", Action.RESET_GPU)],
    "nvsentinel-csv-test-strings": [("xid.154", "0008:01:00.0", Action.NONE)],
    "gpuop1146-xid48": [("xid.64", "0000:07:00.0", Action.DRAIN_AND_REPAIR)],
    "rviz-p620-xid13": [("xid.43", "0000:01:00.0", Action.RESTART_JOB)],
}


@pytest.mark.parametrize("part", sorted(EXPECTED))
def test_corpus_kernel_log_gets_its_diagnosis(corpus, part):
    fid, bus, action, blame = EXPECTED[part]
    result = analyze(load_input(str(corpus.sample(part).path)))
    hits = [f for f in flat(result.findings) if f.id == fid and (
        bus is None or bus in {s.pci_bus_id for s in f.scopes})]
    assert hits, [(f.id, f.scope.pci_bus_id, f.action.value) for f in result.findings]
    f = hits[0]
    assert f.occurrences is not None and f.occurrences.current_boot
    if action is not None:
        assert f.action is action, (f.title, f.explanation)
    if blame is not None:
        assert f.blame is blame
    for extra_id, extra_bus, extra_action in ALSO.get(part, ()):
        extra = [x for x in flat(result.findings) if x.id == extra_id
                 and extra_bus in {s.pci_bus_id for s in x.scopes}]
        assert extra and extra[0].action is extra_action, [x.title for x in extra]


def test_every_category_4_sample_is_judged_without_error(corpus):
    samples = corpus.category("4")
    assert len(samples) >= 25
    for sample in samples:
        result = analyze(load_input(str(sample.path)))
        assert not result.unreadable, (sample.name, result.unreadable)
        for f in result.findings:
            if f.occurrences is not None:
                assert f.occurrences.count >= 1 and f.evidence, (sample.name, f.id)
