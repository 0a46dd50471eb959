"""End to end: scenarios, real captures and the CLI, from input to verdict."""

from __future__ import annotations

import io
import json

import pytest
from fakehost import FakeHost
from golden import flat

from gputriage.cli import EXIT_INPUT, EXIT_USAGE, Environment, main
from gputriage.engine.analysis import analyze
from gputriage.errors import InputError
from gputriage.ingest import load_input, load_inputs
from gputriage.model import Severity
from gputriage.scenarios import build_scenario, list_scenarios
from gputriage.snapshot.bundle import Snapshot

SCENARIOS = [s.name for s in list_scenarios()]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("scenarios")
    return {name: build_scenario(name, root / f"{name}.tar.gz") for name in SCENARIOS}


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_yields_its_diagnosis(name, analysed):
    scenario = next(s for s in list_scenarios() if s.name == name)
    result = analysed.result(name)
    found = {f.id for f in flat(result.findings)}  # a folded consequence is still found
    assert set(scenario.expected) <= found, found
    serious = {f.id for f in flat(result.findings) if f.severity.rank >= Severity.WARNING.rank}
    assert serious <= set(scenario.expected) | {"nvidia-smi.gpu-lost"}, serious
    if not scenario.expected:
        assert result.host.verdict == "ok"
    assert not result.unreadable, result.unreadable


def test_driver_mismatch_scenario_shows_both_versions(analysed):
    result = analysed.result("driver-mismatch")
    f = next(f for f in result.findings if f.id == "driver.version-mismatch")
    assert "535.161.07" in f.title and "550.54.15" in f.title
    assert {"proc_driver_nvidia_version", "nvidia_libs", "kernel_log", "nvml"} <= {
        e.source for e in f.evidence}


def test_fallen_off_bus_scenario_names_the_gpu(analysed):
    result = analysed.result("gpu-fallen-off-bus")
    missing = [f for f in flat(result.findings) if f.id == "gpu.missing"]
    assert [f.scope.pci_bus_id for f in missing] == ["0000:9a:00.0"]
    assert result.host.gpus_on_pci == 8 and result.host.gpus_visible == 7


# --- real captures ------------------------------------------------------------------

# Samples whose expected diagnosis falls under the driver stack and inventory.
EXPECTED = {
    "gpud-sxid-readme-unable-to-determine-device-handle": ("nvidia-smi.gpu-lost", "0000:91:00.0"),
    "nvdocker1553-nvidia-smi-a-i0-unable": ("nvidia-smi.gpu-lost", "0000:09:00.0"),
    "syno22-tesla-p4-unable-to-determine": ("nvidia-smi.gpu-lost", "0000:07:00.0"),
    "xxd3vin19-unable-to-determine-device-handle": ("nvidia-smi.gpu-lost", "0000:0b:00.0"),
    "ogkm862-rtx5090-no-devices-were-found": ("nvidia-smi.no-devices", None),
    "nvctk1227-container-failed-to-initialize-nvml": ("nvidia-smi.nvml-init-failed", None),
    "xe9780-b300-only-7-of-8-gpus": ("gpu.count-unexpected", None),
    "aws-p5-rhel9-8x-h100-570.133.20-persistence-off": ("persistence.off", None),
    "ollama11932-persistenced-failed": ("driver.module-load-failed", None),
    "dalle104-api-mismatch": ("driver.version-mismatch", None),
    "stackhpc287-api-mismatch": ("driver.version-mismatch", None),
    "nvidiaall394-api-mismatch": ("driver.version-mismatch", None),
    "bazzite2668-api-mismatch": ("driver.gsp-firmware-missing", None),
    "mattshma133-no-nvidia-adapter-probed": ("driver.no-adapter-probed", None),
    "ogkm789-rtx3090-rminitadapter": ("driver.gpu-init-failed", "0000:98:00.0"),
}
# Healthy captures: the driver-stack rules must stay quiet on them.
HEALTHY = ("modal-gpu-glossary-8x-h100", "thamada-8x-h100-sxm-565", "thamada-4x-a100",
           "thamada-1x-h200-550", "nolebase-4x-rtx3090", "thamada-8x-h100-sxm-nvidia-smi-a",
           "thamada-l40s", "thamada-1x-h200-passthrough", "azurehpc-nvsmi-q-page-retirement",
           "aws-p5-h100-fabric-state-completed")
# Outputs of tools gputriage does not read yet: they must fail with a clear message.
NOT_YET_READ: tuple[str, ...] = ()


@pytest.mark.parametrize("part", sorted(EXPECTED))
def test_corpus_sample_gets_its_diagnosis(corpus, analysed, part):
    fid, bus = EXPECTED[part]
    _, result = analysed.sample(corpus.sample(part).path)
    hits = [f for f in flat(result.findings) if f.id == fid]
    assert hits, [f.id for f in result.findings]
    if bus:
        assert bus in {s.pci_bus_id for f in hits for s in f.scopes}


@pytest.mark.parametrize("part", HEALTHY)
def test_healthy_corpus_sample_raises_no_alarm(corpus, analysed, part):
    _, result = analysed.sample(corpus.sample(part).path)
    serious = [f.id for f in result.findings if f.severity.rank >= Severity.WARNING.rank]
    assert not serious


def test_every_sample_of_categories_1_2_8_reads_and_analyses(corpus, analysed):
    samples = corpus.category("1") + corpus.category("2") + corpus.category("8")
    assert len(samples) >= 35
    for sample in samples:
        try:
            _, result = analysed.sample(sample.path)
        except InputError as exc:
            assert any(p in sample.name for p in NOT_YET_READ), f"{sample.name}: {exc}"
            assert "expected" in str(exc)
            continue
        assert not result.unreadable, (sample.name, result.unreadable)
        assert result.host.rules_run + len(result.skipped) > 0


def test_pasted_inputs_combine_into_one_host(corpus, tmp_path):
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  510.73.05  Mon May  9 "
                       "22:27:13 UTC 2022\nGCC version:  gcc version 11.2.0\n")
    snap = load_inputs([str(version), str(corpus.sample("dalle104").path)])
    result = analyze(snap)
    f = next(f for f in result.findings if f.id == "driver.version-mismatch")
    assert {"proc_driver_nvidia_version", "kernel_log"} <= {e.source for e in f.evidence}


def test_a_pasted_file_is_read_exactly(tmp_path):
    body = "".join(f"    <line n='{i}'>{'x' * 50}</line>\n" for i in range(600))
    text = f'<?xml version="1.0" ?>\n<nvidia_smi_log>\n{body}</nvidia_smi_log>\n'
    path = tmp_path / "big.xml"
    path.write_text(text)
    assert load_input(str(path)).text("nvidia_smi_q_xml") == text


# --- the command line ---------------------------------------------------------------

def _run(argv, host=None):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err, host=host))
    return code, out.getvalue(), err.getvalue()


def test_cli_analyze_json_and_exit_status(built):
    code, out, _ = _run(["analyze", "--json", str(built["driver-mismatch"])])
    assert code == 2
    doc = json.loads(out)
    assert doc["schema"] == "gputriage/result/v1"
    assert doc["findings"][0]["id"] == "driver.version-mismatch"
    assert doc["findings"][0]["action"] == "fix-software"
    assert doc["host"]["verdict"] == "critical"


def test_cli_terminal_report(built):
    code, out, _ = _run(["analyze", str(built["uvm-not-loaded"])])
    assert code == 2
    assert "nvidia_uvm is not loaded" in out and "fix-config" in out


def test_cli_check_on_a_host_without_gpus(tmp_path):
    host = FakeHost(tmp_path / "root")
    host.write("/proc/modules", "ext4 1 0 - Live 0x0\n")
    host.write("/sys/bus/pci/devices/0000:00:03.0/vendor", "0x1af4\n")
    host.write("/sys/bus/pci/devices/0000:00:03.0/class", "0x020000\n")
    code, out, _ = _run(["check", "--json"], host=host)
    assert code == 0
    doc = json.loads(out)
    assert [f["id"] for f in doc["findings"]] == ["host.not-gpu-host"]
    assert doc["manifest"]["schema"] == "gputriage/snapshot/v1"


def test_cli_collect_then_analyze(tmp_path):
    host = FakeHost(tmp_path / "root", commands={("nvidia-smi",): (
        255, "Unable to determine the device handle for GPU0000:9A:00.0: Unknown Error\n")})
    out_path = tmp_path / "snap.tar.gz"
    code, _, err = _run(["collect", "-o", str(out_path)], host=host)
    assert code == 0 and "snapshot written" in err
    code, out, _ = _run(["analyze", "--json", str(out_path)])
    assert code == 2
    assert "nvidia-smi.gpu-lost" in {f["id"] for f in json.loads(out)["findings"]}


def test_cli_scenarios(tmp_path):
    code, out, _ = _run(["scenario", "list"])
    assert code == 0 and all(name in out for name in SCENARIOS)
    code, _, err = _run(["scenario", "build", "no-such", "-o", str(tmp_path / "x")])
    assert code == EXIT_USAGE and "healthy-8xh100" in err


@pytest.mark.parametrize(("argv", "code"), [
    (["frobnicate"], EXIT_USAGE),
    (["analyze"], EXIT_USAGE),
    (["check", "--timeout", "soon"], EXIT_USAGE),
    (["analyze", "/nonexistent/gputriage-input"], EXIT_INPUT),
])
def test_cli_usage_and_input_errors(argv, code):
    got, out, err = _run(argv)
    assert got == code
    assert err.startswith("gputriage: ") and "Traceback" not in err


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02\xff" * 4096,
                                     b"<?xml version='1.0'?><nvidia_smi_log><gpu",
                                     b"hello, this is not a GPU output\n"])
def test_cli_bad_files_are_one_line_errors_or_partial_analyses(tmp_path, content):
    path = tmp_path / "input"
    path.write_bytes(content)
    code, out, err = _run(["analyze", str(path)])
    assert "Traceback" not in out + err
    if code == EXIT_INPUT:
        assert err.count("\n") == 1
    else:
        assert code in (0, 1, 2, 3)


def test_cli_unparseable_only_input_is_unknown_not_ok(tmp_path):
    path = tmp_path / "cut.xml"
    path.write_text("<?xml version='1.0'?><nvidia_smi_log><gpu id='00000000:18:00.0'><prod")
    code, out, _ = _run(["analyze", "--json", str(path)])
    assert code == 3
    doc = json.loads(out)
    assert doc["host"]["verdict"] == "unknown" and doc["unreadable"]


def test_cli_help_is_fast_to_import():
    import subprocess
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parent.parent / "src"
    code = ("import sys; import gputriage.cli; "
            "heavy = [m for m in ('rich', 'pynvml', 'xml.etree.ElementTree',"
            " 'gputriage.engine.analysis')"
            " if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(src)}, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_results_carry_what_fleet_and_history_compare(built):
    from gputriage.results.document import to_json

    doc = to_json(analyze(Snapshot.load(built["healthy-8xh100"])))
    assert doc["host"]["container_toolkit"] and doc["host"]["boot_time"]
    gpu = doc["gpus"][0]
    assert gpu["vbios"] and gpu["serial"] and gpu["firmware"]


NCCL_WARN = ("gpu-a:4100:4190 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
             "from peer 10.0.0.2<53249> with error 12, opcode 0, len 0, vendor err 129 (Recv)\n"
             "gpu-a:4100:4100 [1] NCCL INFO NCCL version 2.21.5+cuda12.4\n")


def test_cli_check_judges_a_jobs_nccl_log_with_the_host(tmp_path, monkeypatch):
    """``check JOB_OUTPUT``: the job's NCCL log beside this host's facts; such a check is
    not recorded in the history."""
    state = tmp_path / "state"
    monkeypatch.setenv("GPUTRIAGE_STATE_DIR", str(state))
    host = FakeHost(tmp_path / "root")
    host.write("/proc/modules", "ext4 1 0 - Live 0x0\n")
    host.write("/sys/bus/pci/devices/0000:00:03.0/vendor", "0x1af4\n")
    host.write("/sys/bus/pci/devices/0000:00:03.0/class", "0x020000\n")
    job = tmp_path / "job.log"
    job.write_text(NCCL_WARN)
    code, out, _ = _run(["check", "--json", str(job)], host=host)
    doc = json.loads(out)
    ids = {f["id"] for f in doc["findings"]}
    # one peer lost: no one to blame yet, so a warning (an unknown blame never exits 2)
    assert {"host.not-gpu-host", "nccl.ib-completion-error"} <= ids and code == 1
    assert {i["origin"] for i in doc["inputs"]} >= {str(job)}
    assert not state.exists() or not any(state.iterdir())
    code, _, err = _run(["check", str(tmp_path / "missing.log")], host=FakeHost(tmp_path / "r2"))
    assert code == EXIT_INPUT and "missing.log: no such file or directory" in err


# --- host identity: one fact for check, diff and fleet --------------------------------

def test_host_identity_is_one_fact_for_check_diff_and_fleet(built):
    from dataclasses import fields

    from gputriage.engine.analysis import analyze_facts
    from gputriage.facts.store import Facts
    from gputriage.fleet.report import snapshot_extras
    from gputriage.model import HostIdentity
    from gputriage.results.diff import facts_digest

    facts = Facts(Snapshot.load(built["healthy-8xh100"]))
    identity = facts.get("host_identity")
    assert identity.kernel and identity.boot_time and identity.container_toolkit
    assert identity.driver.kernel_module and identity.driver.cuda
    host = analyze_facts(facts).host
    assert all(getattr(host, f.name) == getattr(identity, f.name) for f in fields(HostIdentity))
    digest = facts_digest(facts)
    assert (digest["kernel"], digest["driver.module"], digest["container.toolkit"]) == (
        identity.kernel, identity.driver.kernel_module, identity.container_toolkit)
    extra = snapshot_extras(facts)
    assert (extra["container_toolkit"], extra["boot_time"]) == (
        identity.container_toolkit, identity.boot_time)


@pytest.mark.parametrize(("text", "version"), [
    ("NVIDIA Container Toolkit CLI version 1.15.0\ncommit: 7f3ec8a\n", "1.15.0"),
    ("nvidia-ctk version v1.14.6-rc.1", "1.14.6-rc.1"),
    ("command not found", None),
    (None, None),
])
def test_container_toolkit_version(text, version):
    from gputriage.facts.identity import toolkit_version

    assert toolkit_version(text) == version


# The job's side (issue 16): each scenario against the healthy node, through `diff`.
JOB_SCENARIOS = {
    "cuda-driver-too-old": ("cuda.driver-too-old", "job-config", 1,
                            ("driver module 550.54.15 -> 535.161.07", "CUDA 12.4 -> 12.2")),
    "stale-cdi-after-upgrade": ("container.cdi-stale-spec", "config", 2,
                                ("cdi[etc/cdi/nvidia.yaml].driver 550.54.15 -> 535.161.07",)),
    "container-nvml-unknown-error": ("container.nvml-unknown-error", "config", 1, ()),
}


@pytest.mark.parametrize("name", sorted(JOB_SCENARIOS))
def test_job_scenario_against_healthy(name, built):
    fid, blame, status, changes = JOB_SCENARIOS[name]
    code, out, _ = _run(["diff", "--json", str(built["healthy-8xh100"]), str(built[name])])
    doc = json.loads(out)
    assert [f["id"] for f in doc["findings"]["new"]] == [fid], doc["findings"]
    assert doc["findings"]["new"][0]["blame"] == blame
    text = _run(["diff", str(built["healthy-8xh100"]), str(built[name])])[1]
    assert all(c in text for c in changes), text
    assert _run(["analyze", str(built[name])])[0] == status


# Q1 (issue 17): pods get no GPU after a driver update; one report in the order of repair.
def test_k8s_driver_update_scenario_reports_in_the_order_of_repair(built):
    result = analyze(Snapshot.load(built["k8s-gpus-gone-after-driver-update"]))
    top = [f.id for f in result.findings if f.severity is Severity.CRITICAL]
    assert top[:2] == ["container.cdi-stale-spec", "k8s.plugin-stale-nvml"], top
    plugin = next(f for f in result.findings if f.id == "k8s.plugin-stale-nvml")
    under = [c.id for c in flat(plugin.consequences)]
    # the two trainers wait for one cause: one finding naming both
    assert under.count("k8s.pending-insufficient-gpu") == 1 and "k8s.gpus-short" in under
    pending = next(c for c in flat(plugin.consequences)
                   if c.id == "k8s.pending-insufficient-gpu")
    assert pending.title.startswith("2 pods ") and len(pending.scopes) == 2, pending.title
    short = next(c for c in flat(plugin.consequences) if c.id == "k8s.gpus-short")
    assert "0 of its 8" in short.title and short.scope.name == "gpu-node-017"
    assert {e.source for e in plugin.evidence} == {"device_plugin_log"}
    code, out, _ = _run(["analyze", "--json", str(built["k8s-gpus-gone-after-driver-update"])])
    assert code == 2 and json.loads(out)["findings"][0]["id"] == "container.cdi-stale-spec"


def test_k8s_driver_update_scenario_api_objects_are_what_the_snapshot_holds():
    from gputriage.parsers.k8s_objects import cluster_from_api
    from gputriage.scenarios.k8s_driver import api_objects

    docs = api_objects()
    assert {d["kind"] for d in docs} == {"Node", "Pod", "Event", "DaemonSet"}
    cluster = cluster_from_api(docs)
    node = cluster.nodes["gpu-node-017"]
    assert node.gpus("capacity") == {"nvidia.com/gpu": 8} and node.gpus("allocatable") == {
        "nvidia.com/gpu": 0}
    assert [p.name for p in cluster.pods if p.phase == "Pending"] == ["trainer-0", "trainer-1"]
