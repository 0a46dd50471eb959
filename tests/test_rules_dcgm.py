"""DCGM's host and exporter rules (rules/dcgm_host.py, rules/dcgm_exporter.py), their
collection (dcgmi present, absent, hung) and how their findings fold into the node's."""

from __future__ import annotations

from pathlib import Path

from fakehost import FakeHost
from hostkit import nvml_doc, run

from gputriage.collect import CollectOptions, collect
from gputriage.engine import analyze
from gputriage.ingest import load_input
from gputriage.model import Action, Blame, Severity
from gputriage.snapshot import Snapshot

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
    "dcgmi_health": ("fixture:dcgm/b-health-c-failures.txt",
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
    "dcgm.exporter-fields": [({"dcgm_exporter_metrics": METRICS}, "dcgm.xid"),
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
    [xid] = found["dcgm.xid"]
    assert xid.severity is Severity.CRITICAL and xid.action is Action.DRAIN_AND_REPAIR
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
    assert f.id == "dcgm.xid" and f.blame is Blame.JOB and f.severity is Severity.WARNING


def test_clock_event_bits() -> None:
    text = METRICS.replace('DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="4"', "T4", 1)
    text = text.replace(next(ln for ln in text.splitlines() if ln.startswith("T4")),
                        next(ln for ln in METRICS.splitlines()
                             if ln.startswith('DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="4"'))
                        .rsplit(" ", 1)[0] + " 64")
    [f] = _by_id(run(dcgm_exporter_metrics=text))["dcgm.clock-events"]
    assert f.severity is Severity.CRITICAL and "hardware thermal slowdown" in f.title


def test_nvidia_smi_and_dcgm_on_one_dbe_are_one_finding() -> None:
    """The same uncorrectable error read by nvidia-smi and by DCGM: one cause."""
    from gputriage.causes import RELATIONS

    assert any(r.cause == "memory.uncorrectable" and r.consequence == "dcgm.ecc-uncorrectable"
               for r in RELATIONS)


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
