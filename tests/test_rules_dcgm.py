"""DCGM's host and exporter rules (rules/dcgm_host.py, rules/dcgm_exporter.py), their
collection (dcgmi present, absent, hung) and how their findings fold into the node's."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakehost import FakeHost
from hostkit import nvml_doc, run
from smi_kit import ecc, healthy_gpu, hot_gpu, nvlink_errors, smi_q, xml_host

from gputriage.collect import CollectOptions, collect
from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.model import Action, Blame, Severity
from gputriage.snapshot.bundle import Snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"
METRICS = (FIXTURES / "b-metrics-8x-h100-faults.txt").read_text()
HEALTH = (FIXTURES / "b-health-c-failures.txt").read_text().split("\n", 1)[1]
NVLINK_ERRORS = (FIXTURES / "b-nvlink-e-g0-recovery.txt").read_text().split("\n", 1)[1]
DISCOVERY_2 = """2 GPUs found.
+--------+----------------------------------------------------------------------+
| GPU ID | Device Information                                                   |
+--------+----------------------------------------------------------------------+
| 0      | Name: NVIDIA H100 80GB HBM3                                          |
|        | PCI Bus ID: 00000000:18:00.0                                         |
|        | Device UUID: GPU-0a                                                  |
+--------+----------------------------------------------------------------------+
| 1      | Name: NVIDIA H100 80GB HBM3                                          |
|        | PCI Bus ID: 00000000:2A:00.0                                         |
|        | Device UUID: GPU-1a                                                  |
+--------+----------------------------------------------------------------------+
0 NvSwitches found.
"""
UNREACHABLE = ("Error: unable to establish a connection to the specified host: localhost\n"
               "Error: Unable to connect to host engine. Host engine connection "
               "invalid/disconnected.\n")
EXPORTER_STALE = ('time="2021-05-12T17:31:12Z" level=error msg="Failed to collect metrics with '
                  'error: Error getting the latest value for fields: Host engine connection '
                  'invalid/disconnected"\n')
PARTIAL_LINKS = """+----------------------+
|  NvLink Link Status  |
+----------------------+
GPUs:
    gpuId 0:
        U U U U U U U U U U U U U U U U U U
    gpuId 1:
        U U U D U U U U U U U U U U U U U U
NvSwitches:
    physicalId 0:
        """ + " ".join("U" * 64) + "\n"

SOURCE_SAMPLES = {
    "dcgmi_discovery": ("corpus:discovery-l-8x-h800-healthy",
                        "corpus:xe9780-b300-dcgm-service-inactive"),
    "dcgmi_health": ("corpus:dcgm313-health-c-healthy-gb200",
                     "fixture:dcgm/b-health-c-failures.txt",
                     "fixture:dcgm/b-health-c-old-layout.txt",
                     "fixture:dcgm/b-health-c-healthy.txt"),
    "dcgmi_nvlink": ("corpus:dcgm198-dcgmi-nvlink-link-status",
                     "fixture:dcgm/b-nvlink-e-g0-recovery.txt"),
    "dcgm_exporter_metrics": ("corpus:exporter-metrics-a30-mig-1g6gb",
                              "corpus:exporter-metrics-vgpu-grid-a100",
                              "fixture:dcgm/b-metrics-8x-h100-faults.txt"),
    "dcgm_exporter_log": ("corpus:dcgm-exporter-cannot-connect-hostengine",
                          "corpus:dcgm-exporter-dcp-module-not-loaded",
                          "corpus:dcgm-exporter-metrics-csv-wrong-fields",
                          "corpus:dcgm-exporter-stale-metrics",
                          "corpus:old-dcgm-exporter-fails-tesla-k80"),
    "nv_hostengine_log": ("corpus:nv-hostengine-debug-log-cannot-init-nvml",
                          "corpus:nv-hostengine-nvml-fail-gpu-err-state",
                          "corpus:xe9780-b300-dcgm-service-inactive"),
}

RULE_CASES = {
    "dcgm.discovery": [({"dcgmi_discovery": DISCOVERY_2}, "dcgm.gpus-seen"),
                       ({"dcgmi_discovery": DISCOVERY_2,
                         "nvml": nvml_doc(["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"])},
                        "dcgm.gpus-unseen")],
    "dcgm.version": [({"dcgmi_version": "dcgmi  version: 3.3.9\n",
                       "dcgmi_discovery": "1 GPU found.\n| 0 | Name: NVIDIA B200 |\n"},
                      "dcgm.too-old")],
    "dcgm.health": [({"dcgmi_health": HEALTH}, "dcgm.health-memory"),
                    ({"dcgmi_health": HEALTH}, "dcgm.health-pcie"),
                    ({"dcgmi_health": (FIXTURES / "b-health-c-healthy.txt").read_text()},
                     "dcgm.health-ok")],
    "dcgm.nvlink": [({"dcgmi_nvlink": PARTIAL_LINKS}, "dcgm.nvlink-down"),
                    ({"dcgmi_nvlink": NVLINK_ERRORS}, "dcgm.nvlink-errors")],
    "dcgm.hostengine": [({"dcgmi_discovery": UNREACHABLE}, "dcgm.hostengine-unreachable")],
    "dcgm.exporter-fields": [({"dcgm_exporter_metrics": METRICS}, "dcgm.xid.79"),
                             ({"dcgm_exporter_metrics": METRICS}, "dcgm.remap-failed")],
    "dcgm.exporter-log": [({"dcgm_exporter_log": EXPORTER_STALE}, "dcgm.exporter-stale")],
}


def _by_id(result) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in result.findings:
        for x in (f, *f.consequences):
            out.setdefault(x.id, []).append(x)
    return out


def test_eight_gpu_metrics_one_finding_per_cause_on_its_gpu() -> None:
    found = _by_id(run(dcgm_exporter_metrics=METRICS))
    [xid] = found["dcgm.xid.79"]  # the last Xid alone, no time, no kernel line: not a drain
    assert xid.severity is Severity.WARNING and xid.action is Action.PLAN_REPAIR
    assert xid.scope.gpu_index == 3 and xid.scope.pci_bus_id == "0000:5d:00.0"
    assert "not a count" in xid.explanation
    [dbe] = found["dcgm.ecc-uncorrectable"]
    assert dbe.severity is Severity.CRITICAL and dbe.scope.gpu_index == 1
    [remap] = found["dcgm.remap-failed"]
    assert remap.scope.gpu_index == 2 and remap.action is Action.DRAIN_AND_REPAIR
    [nvl] = found["dcgm.nvlink-counters"]
    assert nvl.severity is Severity.WARNING and nvl.scope.gpu_index == 5
    assert "dcgm.metrics-healthy" not in found and "dcgm.clock-events" not in found
    assert any('err_code="79"' in ln for e in xid.evidence for ln in e.lines)


def test_xid_zero_and_a_job_xid() -> None:
    healthy = METRICS.replace('err_code="79",err_msg="GPU has fallen off the bus"} 79',
                              'err_code="0",err_msg="No Error"} 0')
    healthy = healthy.replace("} 4210", "} 0").replace(
        'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="1"', 'X{gpu="1"').replace(
        'DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu="2"', 'X{gpu="2"')
    assert [f.id for f in run(dcgm_exporter_metrics=healthy).findings] == ["dcgm.metrics-healthy"]
    job = healthy.replace('err_code="0",err_msg="No Error"} 0', 'err_code="13",err_msg="x"} 13', 1)
    [f] = run(dcgm_exporter_metrics=job).findings
    assert f.id == "dcgm.xid.13" and f.blame is Blame.JOB and f.severity is Severity.WARNING


def test_clock_event_bits() -> None:
    text = METRICS.replace('DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="4"', "T4", 1)
    text = text.replace(next(ln for ln in text.splitlines() if ln.startswith("T4")),
                        next(ln for ln in METRICS.splitlines()
                             if ln.startswith('DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="4"'))
                        .rsplit(" ", 1)[0] + " 64")
    [f] = _by_id(run(dcgm_exporter_metrics=text))["dcgm.clock-events"]
    assert f.severity is Severity.CRITICAL and "hardware thermal slowdown" in f.title


def _health(gpu: int, system: str, health: str, message: str) -> str:
    rule = "+" + "-" * 27 + "+" + "-" * 58 + "+"
    return "\n".join([rule, f"| {'Health Monitor Report':<84} |", rule.replace("-", "="),
                      f"| {'Overall Health':<25} | {health:<56} |", f"| {'GPU':<25} | {'':<56} |",
                      f"| {'-> ' + str(gpu):<25} | {health:<56} |",
                      f"| {'   -> Errors':<25} | {'':<56} |",
                      f"| {'      -> ' + system + ' system':<25} | {health:<56} |",
                      f"| {'':<25} | {message:<56} |", rule]) + "\n"


def _metric(name: str, value: str, gpu: int = 0, bus: str = "00000000:18:00.0") -> str:
    return (f'{name}{{gpu="{gpu}",UUID="GPU-{gpu:08x}-0000",pci_bus_id="{bus}",'
            f'modelName="NVIDIA H100 80GB HBM3"}} {value}\n')


XID79 = ("[  100.1] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off "
         "the bus.\n")


def _pairs() -> list[tuple[str, dict, str, str]]:
    """(what, the sources, nvidia-smi's or the kernel's finding, DCGM's): one cause each."""
    dbe = xml_host(healthy_gpu(ecc_errors=ecc(vol_unc=2, agg_unc=2)))
    gpus = nvml_doc(["0000:18:00.0", "0000:2a:00.0"])
    return [
        ("dbe+health", {**dbe, "dcgmi_health": _health(0, "Memory", "Failure", "A volatile "
                                                        "double-bit ECC error on GPU 0")},
         "memory.uncorrectable", "dcgm.health-memory"),
        ("dbe+exporter", {**dbe, "dcgm_exporter_metrics": _metric(
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "2")}, "memory.uncorrectable",
         "dcgm.ecc-uncorrectable"),
        ("xid79", {"kernel_log": XID79, "dcgm_exporter_metrics": _metric(
            "DCGM_FI_DEV_XID_ERRORS", "79")}, "xid.79", "dcgm.xid.79"),
        ("clocks", {**xml_host(hot_gpu(60, "hw_thermal_slowdown")),
                    "dcgm_exporter_metrics": _metric("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "64")},
         "clocks.hw-thermal-slowdown", "dcgm.clock-events"),
        ("nvlink", {"nvidia_smi_nvlink_errors": nvlink_errors({(0, 1): {"Recovery Errors": 1}}),
                    "nvml": gpus, "dcgmi_nvlink": NVLINK_ERRORS}, "nvlink.errors",
         "dcgm.nvlink-errors"),
        ("nvlink-health", {"nvidia_smi_nvlink_errors": nvlink_errors(
            {(0, 1): {"Recovery Errors": 1}}), "nvml": gpus, "dcgmi_health": _health(
            0, "NVLINK", "Warning", "Detected 1 Recovery NvLink errors on GPU 0")},
         "nvlink.errors", "dcgm.health-nvlink"),
        ("replays", {"nvidia_smi_q": smi_q([{"bus": "0000:18:00.0", "replays": 48213}]),
                     "dcgmi_health": _health(0, "PCIe", "Warning", "Detected more than 8 PCIe "
                                             "replays per minute for GPU 0 : 13")},
         "pcie.replays", "dcgm.health-pcie"),
    ]


@pytest.mark.parametrize("case", range(7))
def test_nvidia_smi_or_kernel_and_dcgm_on_one_fault_are_one_finding(case: int) -> None:
    """The same fault read by nvidia-smi (or the kernel log) and by DCGM: one cause, the
    DCGM reading under it."""
    what, sources, cause, consequence = _pairs()[case]
    result = run(**sources)
    tops = [f.id for f in result.findings if f.severity.rank > Severity.OK.rank]
    assert tops == [cause], (what, [(f.id, [c.id for c in f.consequences])
                                    for f in result.findings])
    assert [c.id for c in result.findings[0].consequences] == [consequence], what


def test_an_exporters_last_xid_drains_only_with_the_kernels() -> None:
    alone = run(dcgm_exporter_metrics=_metric("DCGM_FI_DEV_XID_ERRORS", "79"))
    [f] = alone.findings
    assert (f.id, f.severity, f.action) == ("dcgm.xid.79", Severity.WARNING, Action.PLAN_REPAIR)
    other = run(dcgm_exporter_metrics=_metric("DCGM_FI_DEV_XID_ERRORS", "79"),
                kernel_log=XID79.replace("): 79,", "): 13,").replace(
                    "GPU has fallen off the bus", "Graphics Exception"))  # not the same Xid
    assert "dcgm.xid.79" in [f.id for f in other.findings]
    both = run(dcgm_exporter_metrics=_metric("DCGM_FI_DEV_XID_ERRORS", "79"), kernel_log=XID79)
    [top] = both.findings
    assert top.id == "xid.79" and top.severity is Severity.CRITICAL


def test_health_failure_is_critical_warning_plans() -> None:
    found = _by_id(run(dcgmi_health=HEALTH))
    [mem] = found["dcgm.health-memory"]
    assert mem.severity is Severity.CRITICAL and mem.action is Action.RESET_GPU
    assert mem.scope.gpu_index == 2
    [pcie] = found["dcgm.health-pcie"]
    assert pcie.severity is Severity.WARNING and pcie.action is Action.PLAN_REPAIR


def test_health_watches_off_is_what_could_not_be_told() -> None:
    [f] = run(dcgmi_health="Error: Health watches not enabled. Please enable watches. \n").findings
    assert f.id == "dcgm.health-unchecked" and f.severity is Severity.INFO


def test_partial_links_on_an_nvswitch_system_drain() -> None:
    [f] = run(dcgmi_nvlink=PARTIAL_LINKS).findings
    assert f.id == "dcgm.nvlink-down" and f.severity is Severity.CRITICAL


def test_links_down_without_the_switch_section_is_a_warning(corpus) -> None:
    """A paste cut before 'NvSwitches:' says nothing of switches: a warning, never a
    reset, unless the GPUs' model (dcgmi discovery) or the switches' links say so."""
    whole = corpus.sample("dcgm198-dcgmi-nvlink-link-status").text()
    half = "\n".join(whole.splitlines()[:7]) + "\n"
    [f] = run(dcgmi_nvlink=half).findings
    assert (f.id, f.severity, f.action) == ("dcgm.nvlink-down", Severity.WARNING,
                                            Action.PLAN_REPAIR)
    [bridge] = run(dcgmi_nvlink=whole).findings
    assert bridge.severity is Severity.WARNING and "bridge" in bridge.title
    board = [f for f in run(dcgmi_nvlink=half, dcgmi_discovery=DISCOVERY_2).findings
             if f.id == "dcgm.nvlink-down"]
    assert [f.severity for f in board] == [Severity.CRITICAL]
    partial = PARTIAL_LINKS.split("NvSwitches:")[0]
    [cut] = run(dcgmi_nvlink=partial).findings
    assert cut.severity is Severity.WARNING


def test_nvlink_counters_take_nvidia_smis_thresholds() -> None:
    """A CRC or replay counter warns at 100 (rules/fabric.py), not their sum."""
    text = (_metric("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "60")
            + _metric("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "60"))
    [f] = run(dcgm_exporter_metrics=text).findings
    assert (f.id, f.severity) == ("dcgm.nvlink-counters", Severity.INFO)
    loud = run(dcgm_exporter_metrics=text.replace("} 60", "} 100", 1)).findings
    assert [x.severity for x in loud] == [Severity.WARNING]
    dcgmi = NVLINK_ERRORS.replace("Recovery Error => 1 ", "Recovery Error => 0 ").replace(
        "CRC FLIT Error => 37", "CRC FLIT Error => 60").replace(
        "Replay Error => 5 ", "Replay Error => 60")
    [e] = [x for x in run(dcgmi_nvlink=dcgmi).findings if x.id == "dcgm.nvlink-errors"]
    assert e.severity is Severity.INFO and "120 NVLink error(s)" in e.title


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-64", "-1", "1e300", "79.5"])
def test_metric_values_that_are_no_reading_are_skipped(value: str) -> None:
    text = (_metric("DCGM_FI_DEV_XID_ERRORS", value)
            + _metric("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", value)
            + _metric("DCGM_FI_DEV_GPU_TEMP", "40"))
    [f] = run(dcgm_exporter_metrics=text).findings  # the rule runs: never dropped
    assert f.id == "dcgm.metrics-healthy"


def test_unreachable_hostengine_never_drains_and_blames_config() -> None:
    [f] = run(dcgmi_discovery=UNREACHABLE, dcgmi_health=UNREACHABLE).findings
    assert f.id == "dcgm.hostengine-unreachable" and f.blame is Blame.CONFIG
    assert f.severity is Severity.WARNING and "not implicated" in f.explanation


# --- collection -------------------------------------------------------------------------------
def _host(tmp_path, **kw) -> FakeHost:
    host = FakeHost(tmp_path / "root", **kw)
    host.write("/proc/sys/kernel/hostname", "gpu-node-017\n")
    host.write("/sys/bus/pci/devices/0000:18:00.0/vendor", "0x10de\n")
    host.write("/sys/bus/pci/devices/0000:18:00.0/class", "0x030200\n")
    return host


def test_collect_runs_dcgmi_when_installed(tmp_path) -> None:
    host = _host(tmp_path, commands={("dcgmi", "discovery", "-l"): (0, DISCOVERY_2),
                                     ("dcgmi", "health", "-c"): (0, HEALTH),
                                     ("dcgmi", "--version"): (0, "dcgmi  version: 3.3.9\n")})
    snap = Snapshot.load(collect(host, tmp_path / "snap"))
    assert snap.record("dcgmi_discovery")["error"] is None
    assert not any("diag" in argv for argv in host.calls)  # never dcgmi diag
    ids = {f.id for f in analyze(snap).findings}
    assert {"dcgm.health-memory", "dcgm.gpus-seen"} <= ids


def test_collect_without_dcgm_says_nothing_of_it(tmp_path) -> None:
    snap = Snapshot.load(collect(_host(tmp_path), tmp_path / "snap"))
    assert snap.record("dcgmi_discovery")["error"] == "absent"
    assert not [f for f in analyze(snap).findings if f.id.startswith("dcgm.")]


@pytest.mark.slow  # waits out dcgmi's timeout
def test_a_hung_dcgmi_is_the_host_engine_not_the_driver(tmp_path) -> None:
    argv = ("dcgmi", "discovery", "-l")
    host = _host(tmp_path, commands={argv: (0, "")}, hang={argv: 30.0})
    snap = Snapshot.load(collect(host, tmp_path / "snap", CollectOptions(deadline_s=1.0)))
    assert snap.record("dcgmi_discovery")["error"] == "timeout"
    found = _by_id(analyze(snap))
    [f] = found["dcgm.hostengine-unreachable"]
    assert f.blame is Blame.CONFIG and f.severity is Severity.WARNING
    assert "driver.wedged" not in found


def test_paste_of_dcgmi_commands(corpus) -> None:
    result = analyze(load_input(str(corpus.sample("xe9780-b300-dcgm-service-inactive").path)))
    too_old = next(f for f in result.findings if f.id == "dcgm.too-old")
    assert "3.3.9" in too_old.title and "Blackwell" in too_old.title
    assert any("0 NvSwitches found." in e.lines for e in too_old.evidence)
