"""DCGM's diagnostic: the ``dcgmi diag`` parser (table and -j JSON, DCGM 3.x and 4.x),
the nvvs.log parser, their detectors, and the rules on what the tests say
(``rules/dcgm_diag.py``).

``RULE_CASES`` and ``SOURCE_SAMPLES`` are collected by the conformance and source tests.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from golden import flat, run_analyze
from hostkit import run

from gputriage.engine.analysis import analyze
from gputriage.errors import ParseError
from gputriage.facts.pcie import PcieLink
from gputriage.ingest import load_input
from gputriage.ingest.detect import detect
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.dcgmi_diag import parse_dcgmi_diag
from gputriage.parsers.nvvs_log import parse_nvvs_log
from gputriage.rules.dcgm_diag import diag_hardware, message_kind
from gputriage.text.prompts import source_for_command

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"
JSON_4X = (FIXTURES / "a-diag-r3-4x-memory-fail.json").read_text()
TEXT_4X = (FIXTURES / "a-diag-r2-4x-text-pcie-fail-gpu1.txt").read_text()


def _row(name: str, value: str) -> str:
    return f"| {name:<25} | {value:<45}  |"


def _table(*rows: str) -> str:
    rule = "+---------------------------+------------------------------------------------+"
    return "\n".join(["Successfully ran diagnostic for group.", rule,
                      _row("Diagnostic", "Result"), rule.replace("-", "="), *rows, rule]) + "\n"


DEPLOY = "|-----  Deployment  --------+------------------------------------------------|"
HW = "+-----  Hardware  ----------+------------------------------------------------+"
STRESS = "+-----  Stress  ------------+------------------------------------------------+"
MEMORY_THERMAL = _table(
    HW, _row("GPU Memory", "Pass - GPUs: 1"), _row("", "Fail - GPU: 0"),
    _row("Warning", "GPU 0 Thermal violations totaling 13.3 second"),
    _row("", "s started at 9.7 seconds into the test for GP"), _row("", "U 0"))
POWER_MARGINAL = _table(
    STRESS, _row("Targeted Power", "Pass - GPUs: 0"), _row("", "Fail - GPU: 1"),
    _row("Warning", "GPU 1 Max power of 290.5 did not reach desire"),
    _row("", "d power minimum target_power_min_ratio of 291"), _row("", ".0 for GPU 1"))
PERSISTENCE = _table(
    DEPLOY, _row("Denylist", "Pass"), _row("Persistence Mode", "Fail"),
    _row("Error", "Persistence mode for GPU 0 is currently disab"), _row("", "led."),
    HW, _row("GPU Memory", "Skip - All"))
DEPLOYMENT = _table(DEPLOY, _row("Environment Variables", "Fail"),
                    _row("Error", "CUDA_VISIBLE_DEVICES is set"))
NOT_READY = _table(
    HW, _row("GPU Memory", "Fail - All"),
    _row("Warning", "GPU 0 Error using CUDA API cuInit Unable to in"),
    _row("", "itialize CUDA library: 'system not yet initia"), _row("", "lized'"),
    _row("Warning", "GPU 1 Error using CUDA API cuInit Unable to in"),
    _row("", "itialize CUDA library: 'system not yet initia"), _row("", "lized'"))
ALL_SKIP = _table(HW, _row("GPU Memory", "Skip - All"), STRESS,
                  _row("Targeted Stress", "Skip - All"))
INSTALL = ("Error: Unable to complete diagnostic for group 0. Return: (-30) : DCGM GPU "
           "Diagnostic returned an error\n")
NVVS_AFFINITY = """\
2025-09-03 17:23:01.310 DEBUG [12696:12696] [[pcie]] External command stdout: \
numa_sched_setaffinity_v2_int() failed: Invalid argument
{
        "GPUs" : []
2025-09-03 17:23:02.849 WARN  [12696:12696] Test pcie: There was an internal error during \
the test: 'Output of child process (12918) couldn't be parsed: '* Line 1, Column 1
  Syntax error: value, object or array expected.
'' Check DCGM and system logs for errors. [/builds/dcgm/dcgm/nvvs/src/PluginTest.cpp:179] \
[PluginTest::AddError]
"""

SOURCE_SAMPLES = {
    "dcgmi_diag": ("corpus:dcgm253-diag-r2-8x-b200", "corpus:diag-r1-persistence-mode-fail",
                   "corpus:diag-r3-json-all-skip-t400", "corpus:dcgm254-v100-580",
                   "fixture:dcgm/a-diag-r3-4x-memory-fail.json",
                   "fixture:dcgm/a-diag-r2-4x-text-pcie-fail-gpu1.txt"),
    "nvvs_log": ("corpus:nvvs-log-missing-diag-skus", "corpus:diag-r2-pcie-numa-affinity"),
}
RULE_CASES = {
    "dcgm.diag-hardware": [({"dcgmi_diag": MEMORY_THERMAL}, "dcgm.test-failed"),
                           ({"dcgmi_diag": JSON_4X}, "dcgm.test-failed"),
                           ({"dcgmi_diag": TEXT_4X}, "dcgm.pcie-failed"),
                           ({"dcgmi_diag": POWER_MARGINAL}, "dcgm.power-marginal"),
                           ({"dcgmi_diag": MEMORY_THERMAL, "dcgmi_version":
                             "dcgmi  version: 3.3.9\n"}, "dcgm.known-false-alarm")],
    "dcgm.diag-setup": [({"dcgmi_diag": PERSISTENCE}, "dcgm.persistence-off"),
                        ({"dcgmi_diag": DEPLOYMENT}, "dcgm.deployment-failed"),
                        ({"dcgmi_diag": NOT_READY}, "dcgm.cuda-not-ready"),
                        ({"dcgmi_diag": ALL_SKIP}, "dcgm.no-result")],
    "dcgm.diag-tool": [({"dcgmi_diag": INSTALL}, "dcgm.install-problem"),
                       ({"nvvs_log": NVVS_AFFINITY}, "dcgm.internal-error")],
}


def _piece(corpus, part: str) -> str:
    return dict(detect(corpus.sample(part).text()))["dcgmi_diag"]


def _diag(corpus, part: str):
    return parse_dcgmi_diag(_piece(corpus, part))


# --- the parser, on every diag capture of the corpus --------------------------------------

def test_dcgm4_table_with_an_internal_error(corpus) -> None:
    r = _diag(corpus, "dcgm253-diag-r2-8x-b200")
    assert (r.version, r.driver, len(r.device_ids), r.complete) == ("4.4.1", "570.172.08", 8,
                                                                    True)
    assert [(t.category, t.name, t.status) for t in r.tests] == [
        ("Deployment", "software", "pass"), ("Hardware", "memory", "pass"),
        ("Integration", "pcie", "fail")]
    pcie = r.test("pcie")
    assert pcie is not None and pcie.gpus == dict.fromkeys(range(8), "pass")
    (msg,) = pcie.messages
    assert msg.kind == "warning" and "couldn't be parsed: '* Line 1, Column 1" in msg.text
    assert "Reset GPU. Restart DCGM. Rerun diagnostics." in msg.text  # cuts joined back
    assert message_kind(msg.text) == "unparsable"


def test_dcgm3_tables(corpus) -> None:
    r1 = _diag(corpus, "diag-r1-persistence-mode-fail-8x-h200")
    assert (r1.version, r1.level, len(r1.tests), len(r1.device_ids)) == ("3.1.8", 1, 9, 8)
    pm = r1.test("persistence mode")
    assert pm is not None and pm.status == "fail"
    assert pm.messages[0].gpus == (0, 1, 2, 3) and pm.messages[0].kind == "error"
    assert "currently disabled. The DCGM diagnostic requires peristence mode" in \
        pm.messages[0].text
    power = _diag(corpus, "diag-r3-targeted-power-fail-marginal").test("targeted power")
    assert power is not None and power.gpus == {0: "pass", 2: "pass", 3: "pass", 1: "fail"}
    assert [(m.kind, m.gpus) for m in power.messages] == [
        ("warning", (1,)), ("info", (0,)), ("info", (2,)), ("info", (3,))]
    assert "power minimum target_power_min_ratio of 224.2 for GPU 1" in power.messages[0].text
    memtest = _diag(corpus, "gpu-memtest-page-dcgmi-diag-r4")
    assert [t.status for t in memtest.tests].count("skip") == 6
    assert memtest.test("memtest").all_gpus == "pass"
    nr = _diag(corpus, "nccltests264-dcgmi-diag-r3")
    mem = nr.test("gpu memory")
    assert mem is not None and mem.all_gpus == "fail" and len(mem.messages) == 8
    assert [m.gpus for m in mem.messages] == [(g,) for g in range(8)]
    assert all(message_kind(m.text) == "cuda-not-ready" for m in mem.messages)


def test_excerpts_without_the_box(corpus) -> None:
    thermal = _diag(corpus, "diag-r2-gpu-memory-fail-thermal-violation")
    (mem,) = thermal.tests
    assert mem.gpus == {0: "fail", **dict.fromkeys(range(1, 8), "pass")}
    assert mem.messages[0].text.endswith("fans, and any other components.")
    for part in ("diag-r2-pass-after-injected", "diag-r2-pass-p4de"):
        r = _diag(corpus, part)
        assert r.tests and {t.status for t in r.tests} == {"pass"}, part


def test_cut_short_json(corpus) -> None:
    r = _diag(corpus, "diag-r3-json-all-skip-t400")
    assert not r.complete
    assert [(t.category, t.name, t.gpus) for t in r.tests] == [
        ("Integration", "PCIe", {0: "skip"}), ("Hardware", "GPU Memory", {0: "skip"}),
        ("Hardware", "Diagnostic", {0: "skip"}), ("Hardware", "EUD Test", {0: "skip"}),
        ("Stress", "Targeted Stress", {0: "skip"})]


def test_dcgm4_json() -> None:
    r = parse_dcgmi_diag(JSON_4X)
    assert (r.complete, r.version, r.driver) == (True, "4.2.3", "570.124.06")
    assert [(t.name, t.status) for t in r.tests] == [
        ("software", "pass"), ("memory", "fail"), ("diagnostic", "pass"), ("pcie", "pass"),
        ("targeted_power", "pass")]
    mem = r.test("memory")
    assert mem is not None and mem.gpus == {0: "pass", 1: "fail"}
    assert [(m.code, m.category, m.gpus) for m in mem.messages] == [(52, 10, (1,)),
                                                                  (41, 9, (1,))]
    # the same document in one line, and a runtime error instead of results
    assert parse_dcgmi_diag(json.dumps(json.loads(JSON_4X))).test("memory") is not None
    err = parse_dcgmi_diag(json.dumps({"DCGM Diagnostic": {
        "runtime_error": "Error: Unable to complete diagnostic for group 0. Return: (-30) : "
                         "DCGM GPU Diagnostic returned an error", "version": "4.2.3"}}))
    assert err.return_code == -30 and not err.tests


def test_dcgmi_errors(corpus) -> None:
    r = _diag(corpus, "dcgm254-v100-580")
    assert r.return_code == -30 and r.level == 3 and len(r.errors) == 2
    assert "plugins/cuda12/" in r.errors[1].text


@pytest.mark.parametrize("text", [
    "", "hello\n", "| a | b |\n", "{}", '{"DCGM Diagnostic": ', '{"DCGM GPU Diagnostic": []}',
    "+-----  Hardware  ---+\n"])
def test_not_a_diag_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_dcgmi_diag(text)


@pytest.mark.parametrize("cut", [40, 200, 700, 1500])
def test_truncated_inputs_read_or_refuse(cut: int, corpus) -> None:
    for text in (JSON_4X, TEXT_4X, corpus.sample("nccltests264-dcgmi-diag-r3").text()):
        with contextlib.suppress(ParseError):
            parse_dcgmi_diag(text[:cut])
    passed = dict(detect(corpus.sample("diag-r2-pass-p4de").text()))["dcgmi_diag"]
    with contextlib.suppress(ParseError):
        report = parse_dcgmi_diag(passed[:cut])
        assert report.tests and not report.complete
        result = run(dcgmi_diag=passed[:cut])  # a pass-only table cut short: not OK
        assert result.host.verdict == "unknown"
        (f,) = result.findings
        assert f.id == "dcgm.no-result" and "cut short after" in f.title


def test_whole_pass_only_outputs_are_ok(corpus) -> None:
    for part in ("diag-r2-pass-p4de", "diag-r2-pass-after-injected"):
        assert run(dcgmi_diag=_piece(corpus, part)).host.verdict == "ok", part
    assert run(dcgmi_diag=_table(HW, _row("memory", "Pass"), _row("", "GPU0: Pass"))
               ).host.verdict == "ok"


# --- DCGM 4.x: per-entity words, other entities, the software test ------------------------

def _4x(*rows: str) -> str:
    return _table("|-----  Metadata  ----------+------------------------------------------------|",
                  _row("DCGM Version", "4.2.3"), _row("GPU Device IDs Detected", "2330, 2330"),
                  *rows)


WARN_4X = _4x(HW, _row("memory", "Warn"), _row("", "GPU0: Fail"),
              _row("Warning: GPU0", "Thermal violations totaling 2.1 seconds start"),
              _row("", "ed at 9.7 seconds into the test for GPU 0 Ver"),
              _row("", "ify that the cooling on this machine is funct"), _row("", "ional."),
              _row("", "GPU1: Pass"))
CPU_EUD = _4x(DEPLOY, _row("software", "Pass"), _row("", "GPU0: Pass"), _row("", "GPU1: Pass"),
              HW, _row("cpu_eud", "Fail"), _row("", "CPU0: Fail"),
              _row("Warning: CPU0", "CPU EUD test failed: memory subtest error"),
              _row("", "CPU1: Pass"))
SOFTWARE_HW = _4x(DEPLOY, _row("software", "Fail"), _row("", "GPU0: Pass"), _row("", "GPU1: Fail"),
                  _row("Warning: GPU1", "GPU 1 had uncorrectable memory errors and row"),
                  _row("", " remapping failed."),
                  HW, _row("memory", "Skip"), _row("", "GPU0: Skip"), _row("", "GPU1: Skip"))


def test_a_warned_test_is_a_warning_whatever_each_gpu_says() -> None:
    """DCGM 4.x prints the warned GPU's own result as Fail under a test that warned."""
    (f,) = run(dcgmi_diag=WARN_4X).findings
    assert (f.id, f.severity, f.action) == ("dcgm.test-failed", Severity.WARNING,
                                            Action.PLAN_REPAIR)
    assert f.scope.gpu_index == 0 and "warned" in f.title
    json_warn = json.loads(JSON_4X)
    memory = json_warn["DCGM Diagnostic"]["test_categories"][1]["tests"][0]
    memory["test_summary"]["status"] = "Warn"
    (j,) = run(dcgmi_diag=json.dumps(json_warn, indent=3)).findings
    assert (j.severity, j.scope.gpu_index) == (Severity.WARNING, 1)


def test_a_cpu_failure_is_the_nodes_never_the_gpus() -> None:
    r = parse_dcgmi_diag(CPU_EUD)
    eud = r.test("cpu eud")
    assert eud is not None and eud.gpus == {} and eud.entities == {"CPU0": "fail",
                                                                   "CPU1": "pass"}
    assert eud.messages[0].entities == ("CPU0",) and eud.messages[0].gpus == ()
    (f,) = run(dcgmi_diag=CPU_EUD).findings
    assert f.id == "dcgm.test-failed" and f.scope.kind == "node" and not f.also
    assert "CPU0" in f.title and "GPU" not in f.title.replace("not a GPU", "")


@pytest.mark.parametrize("entity", ["Switch1", "LINK3", "CPU_CORE12", "ConnectX0", "vGPU2",
                                    "CPU0", "NvSwitch4"])
def test_every_entity_dcgm_names_is_kept(entity: str) -> None:
    table = _4x(HW, _row("nvbandwidth", "Fail"), _row("", f"{entity}: Fail"),
                _row(f"Warning: {entity}", "Detected a fault"), _row("", "GPU0: Pass"))
    test = parse_dcgmi_diag(table).test("nvbandwidth")
    assert test is not None and test.entities == {entity: "fail"} and test.gpus == {0: "pass"}
    assert test.messages[0].entities == (entity,)
    (f,) = run(dcgmi_diag=table).findings
    assert f.scope.kind == "node" and entity in f.title
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{
        "name": "nvbandwidth", "results": [
            {"entity_group": entity.rstrip("0123456789"), "entity_id": 1, "status": "Fail",
             "warnings": [{"error_id": 95, "warning": "Detected a fault"}]},
            {"entity_group": "GPU", "entity_id": 0, "status": "Pass"}],
        "test_summary": {"status": "Fail"}}]}]}}
    for text in (json.dumps(doc, indent=3), json.dumps(doc, indent=3)[:-40]):  # whole, cut
        jt = parse_dcgmi_diag(text).test("nvbandwidth")
        assert jt is not None and jt.gpus == {0: "pass"}, text
        assert list(jt.entities) == [entity.rstrip("0123456789") + "1"]


def test_hardware_found_by_the_software_test_is_the_gpus() -> None:
    """DCGM 4.x's deployment test reports a failed row remap: the GPU's memory, not the
    node's configuration, and the tests it then skipped are no 'no result'."""
    (f,) = run(dcgmi_diag=SOFTWARE_HW).findings
    assert (f.id, f.severity, f.scope.gpu_index) == ("dcgm.test-failed", Severity.CRITICAL, 1)
    assert "row remapping failed" in f.explanation
    assert {f.id for f in run(dcgmi_diag=DEPLOYMENT).findings} == {"dcgm.deployment-failed"}
    for message in ("A corrupt InfoROM has been detected in GPU 1.",
                    "A pending retired page has been detected in GPU 1."):
        assert message_kind(message) == "hardware", message
    assert message_kind("anything", 80) == "hardware"


def test_a_cut_short_json_gives_the_summary_to_the_test_not_a_gpu() -> None:
    def result(gpu: int, status: str) -> dict:
        return {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu, "status": status}

    memory = {"name": "memory", "results": [result(0, "Fail"), result(1, "Pass")],
              "test_summary": {"status": "Fail"}}
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        memory, {"name": "diagnostic", "results": [result(0, "Pass")]}]}]}}
    whole = json.dumps(doc, indent=4)
    cut = whole[:whole.index('"name": "diagnostic"') + 10]  # the paste stops there
    mem = parse_dcgmi_diag(cut).test("memory")
    assert mem is not None and mem.gpus == {0: "fail", 1: "pass"} and mem.status == "fail"
    found = [f for f in run(dcgmi_diag=cut).findings if f.id == "dcgm.test-failed"]
    assert [(f.scope.gpu_index, f.also) for f in found] == [(0, ())]  # GPU 1 passed


@pytest.mark.parametrize("indent", [3, None])
def test_json_evidence_quotes_the_paste(indent: int | None) -> None:
    text = JSON_4X if indent == 3 else json.dumps(json.loads(JSON_4X))
    lines = {ln.strip() for ln in text.splitlines()}
    (f,) = [f for f in run(dcgmi_diag=text).findings if f.id == "dcgm.test-failed"]
    quoted = [ln for e in f.evidence for ln in e.lines]
    assert quoted and all(ln in lines or (indent is None and ln in text) for ln in quoted), \
        quoted
    assert any("Found 3 faulty memory elements on GPU 1" in ln for ln in quoted)
    for t in parse_dcgmi_diag(text).tests:
        for ln in t.lines + [x for m in t.messages for x in m.lines]:
            assert ln in lines or (indent is None and ln in text), ln


BIG = "9" * 5000


@pytest.mark.parametrize("text", [
    _table(HW, _row("GPU Memory", f"Fail - GPU: {BIG}")),
    _table(HW, _row("memory", "Fail"), _row("", f"GPU{BIG}: Fail")),
    f"Error: Unable to complete diagnostic for group 0. Return: ({BIG}) : DCGM error\n",
    '{"DCGM Diagnostic": {"test_categories": [{"category": "H", "tests": [{"name": "memory", '
    f'"results": [{{"gpu_id": "{BIG}", "status": "Fail"}}]}}]}}]}}}}',
    '{"DCGM Diagnostic": {"test_categories": [{"category": "H", "tests": [{"name": "memory", '
    f'"results": [{{"entity_id": {BIG}, "status": "Fail"}}]',
    '{"DCGM Diagnostic": {"test_categories": [{"category": "H", "tests": [{"name": "memory", '
    '"results": [{"gpu_id": "\u00b2", "status": "Fail"}]}]}]}}',
    '{"DCGM Diagnostic": {"test_categories": [{"category": "H", "tests": [{"name": "memory", '
    '"results": [{"gpu_id": "²", "status": "Fail"}]',
    '{"DCGM Diagnostic": {"test_categories": [{"category": "H", "tests": [{"name": "memory", '
    '"results": [{"gpu_ids": "' + BIG + '", "status": "Fail"}]}]}]}}'])
def test_numbers_out_of_range_are_not_results(text: str) -> None:
    """Huge numbers and Unicode digits ('²'.isdigit() is true): no result, no crash."""
    try:
        report = parse_dcgmi_diag(text)
    except ParseError:
        return
    assert all(g < 100_000 for t in report.tests for g in t.gpus)
    run(dcgmi_diag=text)


def test_a_byte_order_mark_before_the_json() -> None:
    found = dict(detect("\ufeff" + JSON_4X))
    assert parse_dcgmi_diag(found["dcgmi_diag"]).test("memory") is not None


LONG = 60_000


@pytest.mark.parametrize("line", [
    "+--- a" + " " * LONG, "|--- a" + " " * LONG + "-",
    "| memory | Fail - GPU: 1" + " " * LONG + "x",
    "| memory | Fail" + " " * LONG + "x", "Error: a" + " " * LONG + "b",
    "Error: x Return: (-30) : a" + " " * LONG + "b", "| Warning: GPU" + " " * LONG + "x |",
    "dcgmi diag -r" + " " * LONG + "x", "| | GPU0:" + " " * LONG + "x",
    '{"DCGM Diagnostic": {"name": "a", "status":' + " " * LONG + "x",
    '"status"' + " " * LONG + ":", "+" + "-" * LONG + "+ x"])
def test_long_lines_are_read_in_linear_time(line: str) -> None:
    import time

    start = time.perf_counter()
    detect(line + "\n")
    with contextlib.suppress(ParseError):
        parse_dcgmi_diag(line + "\n")
    assert time.perf_counter() - start < 1.0


def test_nvvs_log(corpus) -> None:
    log = parse_nvvs_log(corpus.sample("nvvs-log-missing-diag-skus").text())
    assert len(log.entries) == 5 and {e.level for e in log.entries} == {"ERROR"}
    assert [message_kind(e.text) for e in log.entries] == [
        "config", "config", None, "plugins", "plugins"]
    slurm = parse_nvvs_log(NVVS_AFFINITY)
    assert [e.plugin for e in slurm.entries] == ["pcie", None]
    assert message_kind(slurm.entries[0].text) == "affinity"
    assert "Syntax error" in slurm.entries[1].text
    with pytest.raises(ParseError):  # nv-hostengine's log has the format, not NVVS's lines
        parse_nvvs_log("2021-11-23 00:15:20.507 ERROR [76:76] Cannot initialize the "
                       "hostengine [/w/dcgmlib/src/DcgmApi.cpp:6824] [dcgmStartEmbedded_v2]\n")


def test_detection_splits_the_diag_from_its_log(corpus) -> None:
    found = dict(detect(corpus.sample("diag-r2-pcie-numa-affinity-slurm").text()))
    assert set(found) == {"dcgmi_diag", "nvvs_log"}
    assert found["dcgmi_diag"].startswith("+-----  Integration")
    assert "maxBidirBw" in found["nvvs_log"] and "sbatch" not in found["nvvs_log"]
    assert source_for_command("dcgmi diag -r 3 -j") == "dcgmi_diag"
    assert source_for_command("tail -n 50 /var/log/nvidia-dcgm/nvvs.log") == "nvvs_log"
    prompt = dict(detect("$ dcgmi diag -r 2 -p pcie.gpu_nvlinks_expected_up=12\n"
                         + MEMORY_THERMAL))["dcgmi_diag"]
    assert parse_dcgmi_diag(prompt).level == 2


# --- the rules ----------------------------------------------------------------------------

def _findings(corpus, part: str):
    return flat(analyze(load_input(str(corpus.sample(part).path))).findings)


def test_thermal_warning_is_evidence_of_the_failed_gpu(corpus) -> None:
    (f,) = _findings(corpus, "diag-r2-gpu-memory-fail-thermal-violation")
    assert (f.id, f.severity, f.action, f.blame) == (
        "dcgm.test-failed", Severity.CRITICAL, Action.DRAIN_AND_REPAIR, Blame.NODE)
    assert f.scope.gpu_index == 0 and "cooling" in f.explanation


def test_cuinit_on_every_gpu_is_one_fabric_finding(corpus) -> None:
    (f,) = _findings(corpus, "nccltests264-dcgmi-diag-r3")
    assert f.id == "dcgm.cuda-not-ready" and f.severity is Severity.CRITICAL
    assert f.action is Action.FIX_CONFIG and "fabricmanager" in f.explanation


def test_slurm_affinity_is_the_jobs_launch(corpus) -> None:
    (f,) = _findings(corpus, "diag-r2-pcie-numa-affinity-slurm")
    assert (f.id, f.blame, f.severity) == ("dcgm.internal-error", Blame.JOB_CONFIG,
                                           Severity.WARNING)
    assert "--exclusive" in f.explanation and {e.source for e in f.evidence} == {
        "dcgmi_diag", "nvvs_log"}


def test_install_problem_explains_the_skips() -> None:
    result = run(dcgmi_diag=ALL_SKIP, nvvs_log=(
        "2023-12-07 17:09:52.612 ERROR [73032:73032] Could not read package diag config. "
        "[/w/nvvs/src/ConfigFileParser_v2.cpp:218] [ConfigFileParser_v2]\n"))
    (f,) = result.findings
    assert f.id == "dcgm.install-problem" and [c.id for c in f.consequences] == [
        "dcgm.no-result"]


def test_failed_pcie_test_names_the_narrow_link() -> None:
    link = PcieLink("0000:3b:00.0", "gpu", index=1, cur_width=8, max_width=16,
                    evidence={"lspci_nvidia": ["LnkSta: Speed 16GT/s, Width x8 (downgraded)"]})
    (f,) = diag_hardware(parse_dcgmi_diag(TEXT_4X), [link])
    assert f.id == "dcgm.pcie-failed" and "x8 of x16" in f.title
    assert f.scope.pci_bus_id == "0000:3b:00.0"
    assert {e.source for e in f.evidence} == {"dcgmi_diag", "lspci_nvidia"}
    (alone,) = diag_hardware(parse_dcgmi_diag(TEXT_4X), None)
    assert "x8" not in alone.title


@pytest.mark.parametrize(("part", "code"), [
    ("dcgm253-diag-r2-8x-b200", 1), ("dcgm254-v100-580", 1),
    ("diag-r1-persistence-mode-fail", 1), ("diag-r2-gpu-memory-fail-thermal", 2),
    ("diag-r2-pass-after-injected", 0), ("diag-r2-pass-p4de", 0),
    ("diag-r2-pcie-numa-affinity", 1), ("diag-r3-json-all-skip-t400", 3),
    ("diag-r3-targeted-power-fail-marginal", 1), ("gpu-memtest-page-dcgmi-diag-r4", 1),
    ("nccltests264-dcgmi-diag-r3", 2), ("nvvs-log-missing-diag-skus", 1)])
def test_analyze_exit_status(corpus, part: str, code: int) -> None:
    status, out, err = run_analyze(corpus.sample(part).path)
    assert (status, err) == (code, "")
    assert json.loads(out)["findings"] or code == 0
