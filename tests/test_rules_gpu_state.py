"""GPU state as tools saw it: ERR! fields, reset attempts, deviceQuery; and the
row-remapper and retirement limits of the memory rules. Parsers and rules, on
hand-written fixtures."""

from __future__ import annotations

import pytest
from hostkit import ids, run

from gputriage.errors import ParseError
from gputriage.ingest.detect import detect
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.device_query import parse_device_query
from gputriage.parsers.gpu_reset import parse_gpu_reset

ERR_TABLE = """\
+-------------------------------+----------------------+----------------------+
|   2  ERR!                On   | 00000000:61:00.0 Off |                 ERR! |
|ERR!  ERR! ERR!    ERR! / ERR! |  2302MiB / 24576MiB |    ERR!      Default |
+-------------------------------+----------------------+----------------------+
"""
FAN_ERR = """\
+-------------------------------+----------------------+----------------------+
|   0  Quadro RTX 6000     Off  | 00000000:3B:00.0 Off |                  Off |
|ERR!   52C    P2    71W / 260W |   1024MiB / 24576MiB |     12%      Default |
+-------------------------------+----------------------+----------------------+
"""
BLOCKED = """\
$ sudo fuser -v /dev/nvidia0
                     USER        PID ACCESS COMMAND
/dev/nvidia0:        root       20211 F.... nv-hostengine
                     alice      31337 F...m python3
$ sudo nvidia-smi -i 0 -r
Unable to reset this GPU because it's being used by some other process (e.g. CUDA application, \
graphics application like X server, monitoring application like other instance of nvidia-smi). \
Please first kill all processes using the device and retry the command or reboot the system to \
make the GPU reset operation take effect.
"""
DONE = """\
$ sudo nvidia-smi --gpu-reset -i 0
GPU 00000000:3B:00.0 was successfully reset.
All done.
"""
FAILED = """\
$ sudo nvidia-smi -r
The following GPUs could not be reset:
  GPU 00000000:3B:00.0: Unknown Error
"""
DQ_PASS = """\
./deviceQuery Starting...

 CUDA Device Query (Runtime API) version (CUDART static linking)

Detected 2 CUDA Capable device(s)

Device 0: "NVIDIA H100 80GB HBM3"
  CUDA Driver Version / Runtime Version          12.2 / 12.1
  CUDA Capability Major/Minor version number:    9.0
Device 1: "NVIDIA H100 80GB HBM3"
  CUDA Driver Version / Runtime Version          12.2 / 12.1
  CUDA Capability Major/Minor version number:    9.0
deviceQuery, CUDA Driver = CUDART, CUDA Driver Version = 12.2, CUDA Runtime Version = 12.1, \
NumDevs = 2
Result = PASS
"""
DQ_35 = """\
./deviceQuery Starting...

 CUDA Device Query (Runtime API) version (CUDART static linking)

cudaGetDeviceCount returned 35
-> CUDA driver version is insufficient for CUDA runtime version
Result = FAIL
"""
DQ_802 = DQ_35.replace("35", "802").replace(
    "CUDA driver version is insufficient for CUDA runtime version", "system not yet initialized")
REMAP_WORN = """\
GPU 00000000:46:00.0
    Product Name                          : NVIDIA A100 80GB PCIe
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 3
        Pending                           : No
        Remapping Failure Occurred        : No
        Bank Remap Availability Histogram
            Max                           : 636 bank(s)
            High                          : 1 bank(s)
            Partial                       : 0 bank(s)
            Low                           : 2 bank(s)
            None                          : 1 bank(s)
"""
RETIRED_FULL = """\
GPU 00000000:04:00.0
    Product Name                          : Tesla V100-SXM2-32GB
    Retired Pages
        Single Bit ECC                    : 40
        Double Bit ECC                    : 24
        Pending Page Blacklist            : Yes
"""
CSV_IDLE = ("index, pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, "
            "pcie.link.width.max\n0, 1, 4, 16, 16\n")

RULE_CASES = {
    "gpu.error-state": [({"nvidia_smi": ERR_TABLE}, "gpu.error-state")],
    "gpu.reset": [({"gpu_reset": BLOCKED}, "gpu.reset-blocked"),
                  ({"gpu_reset": DONE}, "gpu.reset-done"),
                  ({"gpu_reset": FAILED}, "gpu.reset-failed")],
    "cuda.device-query": [({"device_query": DQ_802}, "cuda.device-query-failed"),
                          ({"device_query": DQ_PASS}, "cuda.device-query-ok")],
    "memory.row-remapping": [({"nvidia_smi_q": REMAP_WORN}, "memory.remap-exhausting")],
    "memory.page-retirement": [({"nvidia_smi_q": RETIRED_FULL}, "memory.retired-pages-limit")],
}


def _one(result, fid):
    (f,) = [f for f in result.findings if f.id == fid]
    return f


# --- ERR! ---------------------------------------------------------------------------------

def test_whole_gpu_in_error_is_critical_and_named():
    f = _one(run(nvidia_smi=ERR_TABLE), "gpu.error-state")
    assert f.severity is Severity.CRITICAL and f.action is Action.REBOOT_NODE
    assert f.scope.pci_bus_id == "0000:61:00.0"
    assert "name" in f.title and "temperature" in f.title


def test_one_unreadable_sensor_is_a_warning():
    f = _one(run(nvidia_smi=FAN_ERR), "gpu.error-state")
    assert f.severity is Severity.WARNING and "fan" in f.title


def test_err_gpu_with_its_xid_in_the_kernel_log():
    log = "[ 812.120001] NVRM: Xid (PCI:0000:61:00): 119, pid=1234, name=python, Timeout " \
          "after 6s of waiting for RPC response from GPU2 GSP! Expected function 76.\n"
    f = _one(run(nvidia_smi=ERR_TABLE, kernel_log=log), "gpu.error-state")
    assert "Xid 119" in f.explanation
    assert "kernel_log" in {e.source for e in f.evidence}


# --- GPU reset ----------------------------------------------------------------------------

def test_reset_parser_holders_and_outcomes():
    log = parse_gpu_reset(BLOCKED)
    assert [(a.bus_id, a.outcome) for a in log.attempts] == [(None, "in-use")]
    assert [(h.name, h.pid, h.device) for h in log.holders] == [
        ("nv-hostengine", 20211, "/dev/nvidia0"), ("python3", 31337, "/dev/nvidia0")]
    assert parse_gpu_reset(FAILED).attempts[0].reason == "Unknown Error"
    with pytest.raises(ParseError):
        parse_gpu_reset("hello\n")


def test_reset_detection_keeps_the_session_commands():
    pieces = dict(detect(BLOCKED))
    assert list(pieces) == ["gpu_reset"]
    assert "fuser -v /dev/nvidia0" in pieces["gpu_reset"]
    assert "nvidia-smi -i 0 -r" in pieces["gpu_reset"]


def test_blocked_by_a_job_blames_the_job():
    f = _one(run(gpu_reset=BLOCKED), "gpu.reset-blocked")
    assert f.severity is Severity.WARNING and f.action is Action.FIX_CONFIG
    assert f.blame is Blame.JOB and "python3" in f.title


def test_refused_then_done_is_one_info_finding_naming_what_helped():
    text = ("The following GPUs could not be reset:\n  GPU 00000000:3B:00.0: In use by another "
            "client\n$ sudo systemctl stop nvidia-persistenced\n" + DONE)
    result = run(gpu_reset=text)
    assert "gpu.reset-blocked" not in ids(result)
    f = _one(result, "gpu.reset-done")
    assert f.severity is Severity.INFO and f.scope.pci_bus_id == "0000:3b:00.0"
    assert "1 refused" in f.title and "systemctl stop nvidia-persistenced" in f.explanation
    assert "history" in f.explanation


# --- deviceQuery --------------------------------------------------------------------------

def test_device_query_parser():
    dq = parse_device_query(DQ_PASS)
    assert dq.result == "PASS" and dq.detected == 2 and not dq.failed
    assert [(d.name, d.driver_version, d.runtime_version, d.capability) for d in dq.devices] \
        == [("NVIDIA H100 80GB HBM3", "12.2", "12.1", "9.0")] * 2
    fail = parse_device_query(DQ_35)
    assert (fail.error_code, fail.result, fail.failed) == (35, "FAIL", True)
    assert fail.error_text == "CUDA driver version is insufficient for CUDA runtime version"
    with pytest.raises(ParseError):
        parse_device_query("nothing here\n")


def test_device_query_detected_with_prose_around():
    text = "I ran the sample:\n" + DQ_35 + "\nwhat now?\n"
    assert dict(detect(text))["device_query"].strip().endswith("Result = FAIL")


def test_device_query_35_is_the_driver_too_old():
    f = _one(run(device_query=DQ_35), "cuda.device-query-failed")
    assert f.severity is Severity.WARNING and f.action is Action.FIX_SOFTWARE
    assert "35" in f.title and "cudaErrorInsufficientDriver" in f.title


def test_device_query_802_is_critical_on_the_node():
    f = _one(run(device_query=DQ_802), "cuda.device-query-failed")
    assert f.severity is Severity.CRITICAL and f.blame is Blame.CONFIG


@pytest.mark.parametrize("code, text, blame, action", [
    (35, "CUDA driver version is insufficient for CUDA runtime version", Blame.CONFIG,
     Action.FIX_SOFTWARE),
    (209, "no kernel image is available for execution on the device", Blame.CONFIG,
     Action.FIX_SOFTWARE),
    (803, "system has unsupported display driver / cuda driver combination", Blame.CONFIG,
     Action.FIX_SOFTWARE),  # issue 31: the driver reinstalled whole, no hardware drain
    (999, "unknown error", Blame.UNKNOWN, Action.NONE),
])
def test_device_query_judges_with_the_cuda_table_on_the_node(code, text, blame, action):
    """deviceQuery is the node's own probe: what the table blames on a job's build is the
    node's software here."""
    dq = DQ_35.replace("35", str(code)).replace(
        "CUDA driver version is insufficient for CUDA runtime version", text)
    f = _one(run(device_query=dq), "cuda.device-query-failed")
    assert f.blame is blame and f.action is action
    assert f"returned {code}" in f.title and f.explanation.startswith("CUDA cannot be used")


# --- memory limits ------------------------------------------------------------------------

def test_remapper_banks_low_or_none_are_a_repair_case():
    f = _one(run(nvidia_smi_q=REMAP_WORN), "memory.remap-exhausting")
    assert f.severity is Severity.CRITICAL and f.action is Action.DRAIN_AND_REPAIR
    assert "Low" in f.title and "None" in f.title


def test_few_remaps_with_healthy_histogram_stay_quiet():
    healthy = REMAP_WORN.replace(": 2 bank(s)", ": 0 bank(s)").replace(": 1 bank(s)\n", "")
    assert not {"memory.remap-exhausting", "memory.remap-failed"} & ids(run(nvidia_smi_q=healthy))


def test_retirement_table_full_is_critical_not_a_reset():
    result = run(nvidia_smi_q=RETIRED_FULL)
    f = _one(result, "memory.retired-pages-limit")
    assert f.severity is Severity.CRITICAL and f.action is Action.DRAIN_AND_REPAIR
    assert "full" in f.title and "cannot be applied" in f.explanation
    assert "memory.retired-pages-pending" not in ids(result)


# --- PCIe from a CSV query ------------------------------------------------------------------

def test_idle_gen1_from_a_csv_query_is_power_saving():
    result = run(nvidia_smi_csv=CSV_IDLE)
    (f,) = [f for f in result.findings if f.id.startswith("pcie.")]
    assert f.id == "pcie.speed-degraded" and f.severity is Severity.INFO


def test_busy_gen1_from_a_csv_query_is_flagged():
    busy = ("index, utilization.gpu [%], pcie.link.gen.current, pcie.link.gen.max\n"
            "0, 98 %, 1, 4\n")
    f = _one(run(nvidia_smi_csv=busy), "pcie.speed-degraded")
    assert f.severity is Severity.WARNING
