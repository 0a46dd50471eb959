"""Resets end the current-ness of a GPU's earlier kernel events (issue 12): a GPU reset
(nvidia-smi -r output, the driver's Xid 154 back to None), a driver load, a reboot;
what nvidia-smi says still needs a reset, or cannot reach, stays current. And one job
crash-looping under new pids is the job's fault, not the GPU's."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputriage.engine.analysis import analyze
from gputriage.facts.resets import Reset, Resets, pending_resets, resets_in_reset_log
from gputriage.ingest import load_input
from gputriage.model import Action, Blame, Finding, Result, Severity, Status
from gputriage.parsers.gpu_reset import parse_gpu_reset
from gputriage.rules.kernel_common import ended_by
from gputriage.scenarios import build_scenario, get_scenario, write_host
from gputriage.snapshot.bundle import Snapshot
from gputriage.status import exit_status

A, B = "0000:9a:00.0", "0000:ab:00.0"
XID48 = ("NVRM: Xid (PCI:0000:9a:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable "
         "double bit error (DBE) has been detected on GPU in the framebuffer at physAddr "
         "0x3c1f0a5e0 partition 5, subpartition 1.")
XID119_B = ("NVRM: Xid (PCI:0000:ab:00): 119, pid=90112, name=nvidia-smi, Timeout after 6s of "
            "waiting for RPC response from GPU5 GSP! Expected function 76 (GSP_RM_CONTROL) "
            "(0x20800a4c 0x4).")
# the driver's recovery action, set after the error and cleared by the reset (the wording
# of NVIDIA's Xid 154 lines, as in the corpus's NVSentinel and Talos samples)
TO_RESET = ("NVRM: Xid (PCI:0000:9a:00): 154, GPU recovery action changed from 0x0 (None) to "
            "0x1 (GPU Reset Required)")
CLEARED = ("NVRM: Xid (PCI:0000:9a:00): 154, GPU recovery action changed from 0x1 (GPU Reset "
           "Required) to 0x0 (None)")
# the module's banner, as the corpus's logs print it
BANNER = ("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  "
          "(dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025")
# nvidia-smi -r as NVSentinel#1690 shows it
SMI_RESET = "$ nvidia-smi -r -i 0\nGPU 00000000:9A:00.0 was successfully reset.\nexit=0\n"


def log(*entries: tuple[float, str]) -> str:
    return "".join(f"[{t:12.6f}] {msg}\n" for t, msg in entries)


def run(tmp_path: Path, text: str) -> Result:
    path = tmp_path / "input.txt"
    path.write_text(text)
    return analyze(load_input(str(path)))


def of(result: Result, fid: str, status: Status | None = None) -> list[Finding]:
    return [f for f in result.findings if f.id == fid and (status is None or f.status is status)]


# --- the kernel log's own reset evidence ----------------------------------------------------

def test_a_cleared_recovery_action_ends_the_gpus_earlier_xids(tmp_path):
    result = run(tmp_path, log((1000.0, XID48), (1000.1, TO_RESET), (2800.0, CLEARED)))
    (f,) = of(result, "xid.48")
    assert f.status is Status.PAST and not f.current
    assert (f.severity, f.action) == (Severity.INFO, Action.NONE)
    assert f.title.startswith("before reset: Xid 48")
    assert f.status_note and f.status_note.startswith("ended by gpu-reset at ")
    assert "(kernel_log line 3)" in f.status_note
    assert any(CLEARED in ln for e in f.evidence for ln in e.lines)
    assert exit_status(result) <= 1 and not result.worst.rank > Severity.WARNING.rank


def test_a_new_xid_after_the_reset_is_current_again(tmp_path):
    result = run(tmp_path, log((1000.0, XID48), (1000.1, TO_RESET), (2800.0, CLEARED),
                               (5400.0, XID48)))
    (old,) = of(result, "xid.48", Status.PAST)
    (new,) = of(result, "xid.48", Status.CURRENT)
    assert old.occurrences and old.occurrences.count == 1
    assert new.severity is Severity.CRITICAL and new.blame is Blame.NODE
    assert exit_status(result) == 2


def test_a_reset_of_one_gpu_leaves_the_others_current(tmp_path):
    result = run(tmp_path, log((1000.0, XID48), (1001.0, XID119_B), (2800.0, CLEARED)))
    assert of(result, "xid.48", Status.PAST)
    (f,) = of(result, "xid.119")
    assert f.current and f.scope.pci_bus_id == B


def test_a_driver_load_ends_every_gpus_earlier_events(tmp_path):
    result = run(tmp_path, log((6.06, BANNER), (1000.0, XID48), (1001.0, XID119_B),
                               (3600.0, BANNER)))
    for fid in ("xid.48", "xid.119"):
        (f,) = of(result, fid)
        assert f.status is Status.PAST and f.status_note, fid
        assert f.status_note.startswith("ended by driver-load at ")
    assert exit_status(result) == 0


def test_what_the_load_itself_logged_stays_current(corpus):
    """The banner comes after the probe: a GPU that fell off the bus during that probe
    is the load's own failure, not something it ended."""
    result = analyze(load_input(str(corpus.sample("nvsentinel155-fallen-off-bus").path)))
    (f,) = of(result, "xid.79")
    assert f.current and f.severity is Severity.CRITICAL


def test_earlier_boots_are_past_with_their_boot_named(tmp_path):
    text = ("-- Boot 1111 --\n" + log((1000.0, XID48)) + "-- Boot 2222 --\n"
            + log((6.06, BANNER)))
    (f,) = of(run(tmp_path, text), "xid.48")
    assert f.status is Status.PAST and f.status_note == "earlier boot -1"


# --- nvidia-smi -r and nvidia-smi -q ------------------------------------------------------------

def test_nvidia_smi_reset_pasted_with_the_log_ends_that_gpus_events(tmp_path):
    result = run(tmp_path, log((1000.0, XID48), (1001.0, XID119_B)) + "\n" + SMI_RESET)
    (f,) = of(result, "xid.48")
    assert f.status is Status.PAST and f.status_note
    assert "(gpu_reset)" in f.status_note and "taken as after the log" in f.status_note
    assert of(result, "xid.119", Status.CURRENT)
    assert of(result, "gpu.reset-done")


def test_only_a_successful_reset_counts():
    log_ = parse_gpu_reset("The following GPUs could not be reset:\n"
                           "  GPU 00000000:9A:00.0: In use by another client\n")
    assert resets_in_reset_log(log_) == []
    (r,) = resets_in_reset_log(parse_gpu_reset(SMI_RESET))
    assert (r.bus_id, r.kind, r.time, r.source) == (A, "gpu-reset", None, "gpu_reset")


def test_a_gpu_nvidia_smi_says_needs_a_reset_stays_current(tmp_path):
    host = get_scenario("xid48-reset").host()
    host.gpus[5].reset_required = True
    result = analyze(Snapshot.load(write_host(host, tmp_path / "snap")))
    (f,) = of(result, "xid.48")
    assert f.current and f.severity is Severity.CRITICAL


def test_a_gpu_still_lost_after_a_reload_stays_missing(tmp_path):
    host = get_scenario("gpu-fallen-off-bus").host()
    t = 40_917.552 + 900.0
    host.kernel_events.append((t, BANNER))
    result = analyze(Snapshot.load(write_host(host, tmp_path / "snap")))
    missing = [f for f in result.findings if f.id == "gpu.missing"
               or any(c.id == "gpu.missing" for c in f.consequences)]
    assert missing and all(f.current for f in missing)
    assert result.worst is Severity.CRITICAL
    xid79 = of(result, "xid.79") + [c for f in result.findings for c in f.consequences
                                    if c.id == "xid.79"]
    assert xid79 and all(f.current for f in xid79)  # nvidia-smi cannot reach it


class _Gpu:
    def __init__(self, bus: str, raw: dict[str, str]) -> None:
        self.pci_bus_id, self.raw = bus, raw


class _Report:
    def __init__(self, *gpus: _Gpu) -> None:
        self.gpus, self.errors = list(gpus), []


@pytest.mark.parametrize("raw, due", [
    ({"GPU Reset Status/Reset Required": "No",
      "GPU Reset Status/Drain and Reset Recommended": "No", "GPU Recovery Action": "None"},
     False),
    ({"GPU Reset Status/Reset Required": "Yes"}, True),
    ({"gpu_reset_status/drain_and_reset_recommended": "Yes"}, True),
    ({"GPU Recovery Action": "Drain and Reset"}, True),
])
def test_reset_status_fields(raw: dict[str, str], due: bool):
    assert bool(pending_resets([("nvidia_smi_q", _Report(_Gpu(A, raw)))])) is due


def test_a_pending_gpu_is_never_ended():
    from gputriage.logscan.events import DriverEvent

    ev = DriverEvent("xid", XID48, A, None, {"code": "48"}, uptime_s=1000.0, lineno=1)
    reset = Reset(A, "gpu-reset", "2800.0", "kernel_log", CLEARED, 0, 3, None, 2800.0)
    assert ended_by(ev, Resets([reset])) is reset
    assert ended_by(ev, Resets([reset], {A: "Reset Required: Yes"})) is None


# --- the scenario -------------------------------------------------------------------------------

def test_xid48_reset_scenario_is_resolved(tmp_path):
    result = analyze(Snapshot.load(build_scenario("xid48-reset", tmp_path / "snap")))
    (f,) = of(result, "xid.48")
    assert f.status is Status.PAST and f.scope.gpu_index == 5
    assert f.status_note and f.status_note.startswith("ended by driver-load")
    assert exit_status(result) == 0
    assert not [x.id for x in result.findings if x.current
                and x.severity.rank >= Severity.WARNING.rank]


# --- one job crash-looping ----------------------------------------------------------------------

XID13 = ("NVRM: Xid (PCI:0000:9a:00): 13, pid={pid}, name=train.py, Graphics SM Warp Exception "
         "on (GPC {gpc}, TPC 1, SM 0): {what}")


def test_seven_restarts_of_one_job_are_the_jobs_fault(tmp_path):
    what = ("Out Of Range Address", "Misaligned Address", "Illegal Instruction Parameter")
    lines = [(1000.0 + 120 * i, XID13.format(pid=31000 + 211 * i, gpc=i % 8, what=what[i % 3]))
             for i in range(7)]
    result = run(tmp_path, log(*lines))
    (f,) = of(result, "xid.13")
    assert f.blame.side == "job" and f.action in (Action.RESTART_JOB, Action.FIX_SOFTWARE)
    assert f.severity is not Severity.CRITICAL and f.action is not Action.DRAIN_AND_REPAIR
    assert "one job (train.py) crash-looping: 7 restarts" in f.title
    assert "suspect the GPU" not in f.explanation
    assert exit_status(result) <= 1


def test_different_programs_on_one_gpu_still_point_at_it(tmp_path):
    lines = [(1000.0 + i, XID13.format(pid=500 + i, gpc=0, what="Out Of Range Address")
              .replace("train.py", name)) for i, name in enumerate(("a.out", "bench", "dcgmi"))]
    (f,) = of(run(tmp_path, log(*lines)), "xid.13")
    assert f.blame is Blame.NODE and "crash-looping" not in f.title


@pytest.mark.parametrize(("line", "outcome"), [
    ("Unable to enable MIG Mode for GPU 00000000:07:00.0: In use by another client",
     "mig-refused"),
    ("Warning: MIG mode is in pending enable state for GPU 00000000:07:00.0:In use by "
     "another client", "mig-pending"),
])
def test_a_mig_mode_change_a_client_blocks_is_the_clients(line, outcome, tmp_path):
    """nvidia-smi -mig 1 refused (or left pending) because a client holds the GPU: the
    clients are to stop, not the GPU to repair."""
    assert parse_gpu_reset(line + "\n").attempts[0].outcome == outcome
    paste = tmp_path / "mig.txt"
    paste.write_text(line + "\n")
    (f,) = [f for f in analyze(load_input(str(paste))).findings if f.current]
    assert f.id == "gpu.reset-blocked" and f.action is Action.FIX_CONFIG
    assert ("refused" in f.title) is (outcome == "mig-refused")
