"""DCGM as the field pastes it (issue 31): dcgmi diag's refusals (a test not installed,
MIG enabled), its old deployment tables (a failure cascade, a pass), pieces of its 4.x
JSON; nv-hostengine's profiling contention and NvSwitch libraries; dcgm-exporter's logs
(slog, bare messages, NVML missing in its container, profiling skipped or fatal, a
healthy start) and its series listed without values.

Each class is tested on small inputs of its own, in other framings and versions than
the corpus sample it came from. ``RULE_CASES`` and ``SOURCE_SAMPLES`` are collected by
the conformance and source tests.
"""

from __future__ import annotations

import json

import pytest
from golden import run_analyze
from hostkit import run

from gputriage.engine.analysis import analyze
from gputriage.facts.fabric import FabricNeed
from gputriage.ingest import load_input, load_text
from gputriage.ingest.detect import detect
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.dcgm_exporter import parse_exporter_log, parse_metrics
from gputriage.parsers.dcgmi_diag import parse_dcgmi_diag
from gputriage.parsers.nv_hostengine import parse_hostengine_log
from gputriage.rules.dcgm_host import nvswitch_libraries
from gputriage.views.oneline import verdict_line


def _row(name: str, value: str) -> str:
    return f"| {name:<25} | {value:<45}  |"


RULE = "+---------------------------+------------------------------------------------+"
DEPLOY = "|-----  Deployment  --------+------------------------------------------------|"
HW = "+-----  Hardware  ----------+------------------------------------------------+"


def _old_table(*rows: str, footer: bool = True) -> str:
    """A DCGM 1.x/2.x table: no Metadata section, "Blacklist" and "Page Retirement"."""
    return "\n".join(["Successfully ran diagnostic for group.", RULE,
                      _row("Diagnostic", "Result"), RULE.replace("-", "="), *rows,
                      *([RULE] if footer else [])]) + "\n"


OLD_CHECKS = ("Blacklist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks",
              "Persistence Mode", "Environment Variables", "Page Retirement",
              "Graphics Processes", "Inforom")


def _deployment(failed_from: str | None) -> list[str]:
    start = OLD_CHECKS.index(failed_from) if failed_from else len(OLD_CHECKS)
    return [DEPLOY, *(_row(c, "Fail" if i >= start else "Pass")
                      for i, c in enumerate(OLD_CHECKS))]


CASCADE = _old_table(*_deployment("Persistence Mode"), HW)
PASS_OLD = _old_table(*_deployment(None))
# a level-2 run whose memory test could not create a CUDA context on GPU 2 (error 46)
BUSY = _old_table(*_deployment(None), HW, _row("Memory", "Fail - GPU: 2"),
                  _row("Warning", "GPU 2 Unable to create a CUDA context: 'all"),
                  _row("", "CUDA-capable devices are busy or unavailable'"),
                  _row("", "Check DCGM and system logs for errors."))
MIG = "GPU 1's MIG configuration is incompatible with the diagnostic because it prevents " \
      "access to the entire GPU.\n"
MISSING_TEST = 'Error: requested test "memory bandwidth" was not found among possible test ' \
               "choices.\n"
HOSTENGINE_PROFILING = (
    "2024-03-02 10:00:01.001 ERROR [10:12] [[Profiling]] [PerfWorks] Got status 1 from "
    "NVPW_DCGM_PeriodicSampler_BeginSession() on deviceIndex 3 [/builds/dcgm/modules/"
    "profiling/DcgmLopGpu.cpp:351] [DcgmLopGpu::BeginSession]\n"
    "2024-03-02 10:00:01.001 ERROR [10:12] [[Profiling]] EnableMetrics returned -37 The "
    "third-party Profiling module returned an unrecoverable error [/builds/dcgm/modules/"
    "profiling/DcgmModuleProfiling.cpp:2591] [DcgmModuleProfiling::ReconfigureLopGpu]\n")
NSCQ = ("2025-01-23 22:23:53.672 ERROR [46345:46345] [[NvSwitch]] Could not load NSCQ. "
        "dlwrap_attach ret: Can not access a needed shared library (-79): If this system has "
        "NvSwitches, please ensure that the package libnvidia-nscq is installed "
        "[/builds/dcgm/modules/nvswitch/DcgmNscqManager.cpp:500] [AttachToNscq]\n")
EXPORTER_NVML_SLOG = (
    'time=2025-06-01T10:00:00.000Z level=INFO msg="Starting dcgm-exporter" Version=4.2.3\n'
    'time=2025-06-01T10:00:00.100Z level=INFO msg="DCGM successfully initialized!"\n'
    'time=2025-06-01T10:00:00.100Z level=ERROR msg="Cannot init NVML library; err: '
    'ERROR_LIBRARY_NOT_FOUND"\n')
EXPORTER_RUNNING = (
    'time="2024-05-01T08:00:00Z" level=info msg="Starting dcgm-exporter"\n'
    'time="2024-05-01T08:00:00Z" level=info msg="DCGM successfully initialized!"\n'
    'time="2024-05-01T08:00:01Z" level=info msg="Not collecting NvSwitch metrics: no '
    'switches to monitor"\n'
    'time="2024-05-01T08:00:01Z" level=info msg="Starting webserver"\n')
SERIES = ('DCGM_FI_DEV_GPU_UTIL{DCGM_FI_DRIVER_VERSION="550.54.15", Hostname="gpu-7", '
          'UUID="GPU-1b2c", device="nvidia0", gpu="0", modelName="NVIDIA L40S"}\n')

SOURCE_SAMPLES = {
    "dcgmi_diag": ("corpus:dcgm215-diag-v4-json-diagnostic", "corpus:dcgm70-diag-i0-refused",
                   "corpus:dcgm67-diag-requested-test", "corpus:deepops-prolog-dcgm-diag-r1-fail"),
    "nv_hostengine_log": ("corpus:dcgm62-dmon-prof-fields", "corpus:dcgm210-hostengine-debug"),
    "dcgm_exporter_log": ("corpus:dcgmexp612-484-cannot-init-nvml",
                          "corpus:dradriver166-dcgm-exporter", "corpus:dcgmexp395-m60",
                          "corpus:dcgmexp125-gke-t4", "corpus:do-dcgm-exporter-systemd"),
    "dcgm_exporter_metrics": ("corpus:dcgmexp277-gpu-util-quadro-rtx6000",),
}
RULE_CASES = {
    "dcgm.diag-setup": [({"dcgmi_diag": CASCADE}, "dcgm.deployment-cascade"),
                        ({"dcgmi_diag": MIG}, "dcgm.diag-mig-blocked"),
                        ({"dcgmi_diag": PASS_OLD}, "dcgm.diag-passed"),
                        ({"dcgmi_diag": BUSY}, "dcgm.gpu-busy")],
    "dcgm.diag-tool": [({"dcgmi_diag": MISSING_TEST}, "dcgm.install-problem")],
    "dcgm.profiling": [({"nv_hostengine_log": HOSTENGINE_PROFILING}, "dcgm.profiling-busy")],
    "dcgm.nvswitch-libraries": [({"nv_hostengine_log": NSCQ}, "dcgm.nvswitch-libs-missing")],
    "dcgm.exporter-log": [({"dcgm_exporter_log": EXPORTER_NVML_SLOG},
                           "dcgm.exporter-nvml-missing"),
                          ({"dcgm_exporter_log": EXPORTER_RUNNING}, "dcgm.exporter-running")],
}


def _paste(text: str):
    return dict(detect(text))


def _ids(result) -> dict[str, object]:
    return {x.id: x for f in result.findings for x in (f, *f.consequences)}


# --- dcgmi diag: refusals -----------------------------------------------------------------

@pytest.mark.parametrize("text", [
    MIG, "Error: " + MIG, "% dcgmi diag -i 0 -r 1\n" + MIG,
    "[pod/dcgm-diag-x/diag] " + MIG,
    "Cannot run diagnostic: CUDA does not support enumerating GPUs with MIG mode enabled\n"])
def test_mig_refusal_says_nothing_of_the_gpus(text: str) -> None:
    assert "dcgmi_diag" in _paste(text)
    result = run(dcgmi_diag=_paste(text)["dcgmi_diag"])
    (f,) = result.findings
    assert (f.id, f.severity, f.blame) == ("dcgm.diag-mig-blocked", Severity.INFO, Blame.CONFIG)
    assert result.host.verdict == "unknown"  # nothing was tested: exit 3, never a drain
    assert "nvidia-smi -mig 0" in (f.step or "")
    assert "could not tell: DCGM diag did not run: MIG" in verdict_line(result)


@pytest.mark.parametrize("text", [
    MISSING_TEST, MISSING_TEST.replace("Error:", "Warning:"),
    ' ./dcgmi diag -r "pcie" -g 2\nError: requested test "pcie" was not found among '
    "possible test choices.\n"])
def test_a_test_dcgm_does_not_have_is_its_installation(text: str) -> None:
    report = parse_dcgmi_diag(_paste(text)["dcgmi_diag"])
    assert not report.tests and len(report.errors) == 1
    (f,) = run(dcgmi_diag=_paste(text)["dcgmi_diag"]).findings
    assert (f.id, f.severity, f.action) == ("dcgm.install-problem", Severity.WARNING,
                                            Action.FIX_SOFTWARE)
    assert "not among its plugins" in f.title and "source" in f.explanation


# --- old deployment tables ----------------------------------------------------------------

@pytest.mark.parametrize("first", ["Persistence Mode", "Environment Variables",
                                   "NVML Library"])
def test_a_run_of_failed_checks_is_one_software_cause(first: str) -> None:
    result = run(dcgmi_diag=_old_table(*_deployment(first), HW))
    (f,) = result.findings
    assert (f.id, f.severity, f.blame) == ("dcgm.deployment-cascade", Severity.WARNING,
                                           Blame.CONFIG)
    assert f"from {first} on" in f.title
    assert "dcgm.test-failed" not in _ids(result)  # Page Retirement, Inforom: echoes


def test_a_later_check_with_a_hardware_message_is_the_gpus() -> None:
    rows = _deployment("Persistence Mode")
    at = rows.index(_row("Page Retirement", "Fail")) + 1
    rows[at:at] = [_row("Error", "GPU 0 had uncorrectable memory errors and row"),
                   _row("", " remapping failed.")]
    found = _ids(run(dcgmi_diag=_old_table(*rows, HW)))
    assert "dcgm.deployment-cascade" not in found
    assert found["dcgm.test-failed"].severity is Severity.CRITICAL


def test_a_single_failed_check_is_not_a_cascade() -> None:
    rows = [DEPLOY, *(_row(c, "Fail" if c == "Inforom" else "Pass") for c in OLD_CHECKS)]
    found = _ids(run(dcgmi_diag=_old_table(*rows)))
    assert "dcgm.deployment-cascade" not in found and "dcgm.test-failed" in found


def test_an_old_pass_table_is_ok_and_a_cut_one_says_what_passed() -> None:
    whole = run(dcgmi_diag=PASS_OLD)
    (f,) = whole.findings
    assert (f.id, whole.host.verdict) == ("dcgm.diag-passed", "ok")
    assert "Blacklist" in f.explanation
    cut = run(dcgmi_diag=_old_table(*_deployment(None)[:-1], footer=False))
    (c,) = cut.findings
    assert c.id == "dcgm.no-result" and "cut short after Graphics Processes" in c.title
    assert "8 test(s) it shows passed" in c.explanation and "Blacklist" in c.explanation


def test_a_pass_with_eud_skipped_is_ok(corpus) -> None:
    result = analyze(load_input(str(corpus.sample("diag-r3-v-pass-v100-pcie-16gb").path)))
    (f,) = result.findings
    assert (f.id, result.host.verdict) == ("dcgm.diag-passed", "ok")
    assert "EUD Test" in f.explanation and "level 3" in f.title


# --- pieces of the 4.x JSON ----------------------------------------------------------------

def _test_piece(statuses: dict[int, str], indent: int = 8, comma: bool = True) -> str:
    test = {"name": "memory", "results": [
        {"entity_group": "GPU", "entity_group_id": 1, "entity_id": g, "status": s}
        for g, s in statuses.items()], "test_summary": {"status": "Fail" if "Fail" in
                                                         statuses.values() else "Pass"}}
    text = json.dumps(test, indent=indent)
    return text + ("," if comma else "") + "\n"


@pytest.mark.parametrize("indent", [3, 8])
def test_a_piece_of_the_json_is_read(indent: int) -> None:
    piece = _test_piece(dict.fromkeys(range(4), "Pass"), indent)
    report = parse_dcgmi_diag(_paste(piece)["dcgmi_diag"])
    (t,) = report.tests
    assert t.gpus == dict.fromkeys(range(4), "pass") and not report.complete
    (f,) = run(dcgmi_diag=piece).findings
    assert f.id == "dcgm.no-result" and "passed on GPUs 0-3" in f.explanation


def test_a_failed_gpu_in_a_piece_of_the_json_is_its_fault() -> None:
    piece = _test_piece({0: "Pass", 1: "Fail"}, comma=False)
    (f,) = run(dcgmi_diag=_paste(piece)["dcgmi_diag"]).findings
    assert (f.id, f.severity, f.scope.gpu_index) == ("dcgm.test-failed", Severity.CRITICAL, 1)


def test_other_json_is_not_a_diag() -> None:
    assert "dcgmi_diag" not in _paste('{\n  "name": "my-service",\n  "results": []\n}\n')


# --- nv-hostengine ----------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    HOSTENGINE_PROFILING,
    "dcgmi dmon -e 1001\nError setting watches. Result: The third-party Profiling module "
    "returned an unrecoverable error\n",
    'time="2023-08-01T02:47:46Z" level=fatal msg="Failed to watch metrics: Error watching '
    'fields: The third-party Profiling module returned an unrecoverable error"\n'])
def test_profiling_contention_is_software(text: str) -> None:
    result = analyze(load_text(text, "paste"))
    found = _ids(result)
    f = found["dcgm.profiling-busy"]
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.CONFIG,
                                               Action.FIX_CONFIG)
    assert "dcgm.exporter-profiling-unsupported" not in found
    assert "localhost:5555" in (f.step or "")


def test_hostengine_module_lines_are_not_nvvs() -> None:
    pasted = _paste(HOSTENGINE_PROFILING + NSCQ)
    assert list(pasted) == ["nv_hostengine_log"]
    log = parse_hostengine_log(pasted["nv_hostengine_log"])
    assert {e.event for e in log.entries} == {"profiling-busy", "nvswitch-libs-missing"}


def test_nscq_missing_matters_only_with_nvswitches() -> None:
    log = parse_hostengine_log(NSCQ)
    (info,) = nvswitch_libraries(log, None)
    assert (info.severity, info.action) == (Severity.INFO, Action.NONE)
    here = FabricNeed(True, "here", "4 NVSwitches on the PCI bus")
    (warn,) = nvswitch_libraries(log, here)
    assert (warn.severity, warn.action) == (Severity.WARNING, Action.FIX_SOFTWARE)
    assert warn.blame is Blame.CONFIG


# --- dcgm-exporter's log ------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    EXPORTER_NVML_SLOG,
    "".join("[pod/nvidia-dcgm-exporter-x/exporter] " + ln
            for ln in EXPORTER_NVML_SLOG.splitlines(True)),
    "Not collecting GPU metrics; Error getting devices count: Cannot perform the requested "
    "operation because NVML doesn't exist on this system.\n",
    "Failed to initialize NVML\nError starting nv-hostengine: DCGM initialization error\n",
    'time="2021-11-23T00:15:20Z" level=fatal msg="Error starting nv-hostengine: DCGM '
    'initialization error"\n'])
def test_no_nvml_in_the_exporters_container_is_its_pod(text: str) -> None:
    assert "dcgm_exporter_log" in _paste(text)
    result = analyze(load_text(text, "paste"))
    found = _ids(result)
    f = found["dcgm.exporter-nvml-missing"]
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)
    assert "runtimeClassName" in f.explanation
    assert not {"nvidia-smi.nvml-init-failed", "driver.not-loaded"} & set(found)


def test_a_bare_nvml_error_alone_is_not_the_exporters() -> None:
    assert "dcgm_exporter_log" not in _paste("Failed to initialize NVML: Unknown Error\n")


@pytest.mark.parametrize(("lines", "severity"), [
    (["Not collecting DCP metrics: This request is serviced by a module of DCGM that is "
      "not currently loaded",
      "Skipping line 19 ('DCGM_FI_PROF_GR_ENGINE_ACTIVE'): metric not enabled"],
     Severity.INFO),
    (['time="2020-12-15T11:28:40Z" level=info msg="Not collecting DCP metrics: module of '
      'DCGM that is not currently loaded"'], Severity.INFO),
    (['time="2020-12-15T11:28:40Z" level=fatal msg="Error watching fields: This request is '
      'serviced by a module of DCGM that is not currently loaded"'], Severity.WARNING)])
def test_profiling_skipped_is_expected_but_a_crash_is_not(lines: list[str],
                                                          severity: Severity) -> None:
    result = run(dcgm_exporter_log="\n".join(lines) + "\n")
    (f,) = result.findings
    assert (f.id, f.severity) == ("dcgm.exporter-profiling-unsupported", severity)
    if severity is Severity.WARNING:
        assert "Upgrade dcgm-exporter" in f.explanation


def test_a_healthy_start_under_systemd_is_ok(corpus) -> None:
    log = parse_exporter_log(_paste(corpus.sample("do-dcgm-exporter-systemd").text())
                             ["dcgm_exporter_log"])
    assert any(e.message.startswith("Not collecting CPU metrics") for e in log.entries)
    (f,) = run(dcgm_exporter_log=EXPORTER_RUNNING).findings
    assert (f.id, f.severity) == ("dcgm.exporter-running", Severity.OK)


# --- series without values ----------------------------------------------------------------------

def test_series_without_values_name_their_gpus() -> None:
    metrics = parse_metrics(SERIES)
    (g,) = metrics.gpus
    assert (g.gpu, g.model, g.pod, metrics.series) == ("0", "NVIDIA L40S", None, 1)
    assert metrics.unreadable == 0  # a series is whole, not a sample cut short
    (f,) = run(dcgm_exporter_metrics=SERIES).findings
    assert f.id == "dcgm.metrics-healthy" and "an idle GPU has none" in f.explanation
    assert "damaged" not in f.explanation
    busy = SERIES.replace('modelName="NVIDIA L40S"', 'modelName="NVIDIA L40S", '
                          'namespace="ml", pod="train-0", container="main"')
    (b,) = run(dcgm_exporter_metrics=busy).findings
    assert "an idle GPU has none" not in b.explanation


def test_analyze_exit_status_of_the_new_samples(corpus) -> None:
    for part, code in (("dcgm70-diag-i0-refused", 3), ("dcgm67-diag-requested-test", 1),
                       ("deepops-prolog-dcgm-diag-r1-fail", 1), ("dcgmexp395-m60", 0),
                       ("dcgmexp277-gpu-util", 0), ("dcgm62-dmon-prof-fields", 1)):
        status, _, err = run_analyze(corpus.sample(part).path)
        assert (status, err) == (code, ""), part



def test_a_test_that_found_the_gpu_busy_judges_no_hardware():
    """CUDA error 46 ('busy or unavailable': a compute mode that admits no more
    processes) kept the memory test from starting on GPU 2: not a memory fault, no
    drain."""
    result = analyze(load_text(BUSY, "paste"))
    [busy] = [f for f in result.findings if f.id == "dcgm.gpu-busy"]
    assert (busy.severity, busy.blame, busy.scope.gpu_index) == (Severity.WARNING,
                                                                Blame.CONFIG, 2)
    assert not [f for f in result.findings if f.id == "dcgm.test-failed"]
    assert all(f.severity is not Severity.CRITICAL for f in result.findings)
