"""Rules on what kept DCGM's diagnostic from judging the GPUs, and on a run that passed:
persistence mode off (DCGM then skips its tests), a deployment check failed (or a run
of them, each echoing the first), CUDA not initialised on every GPU (the NVLink
fabric), MIG enabled (NVVS refuses to run), every test skipped or the output cut short
(no verdict), every test passed. The hardware verdicts are :mod:`gputriage.rules.dcgm_diag`'s.
"""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.model import NODE, Action, Blame, Finding, Severity, evidence, gpu_scope
from gputriage.parsers.dcgmi_diag_model import DiagMessage, DiagReport, DiagTest
from gputriage.rules.base import finding, rule
from gputriage.rules.dcgm_diag import (
    DOC,
    HW_DEPLOYMENT,
    MIG_BLOCKED,
    NO_RESULT,
    cascade,
    diag_evidence,
    diag_kind,
    gpu_list,
    is_deployment,
)

DOC_MIG = "https://github.com/NVIDIA/DCGM/issues/70"


@rule("dcgm.diag-setup",
      produces=("dcgm.persistence-off", "dcgm.deployment-failed", "dcgm.deployment-cascade",
                "dcgm.cuda-not-ready", "dcgm.gpu-busy", MIG_BLOCKED, NO_RESULT,
                "dcgm.diag-passed"))
def diag_setup(dcgmi_diag: DiagReport) -> Iterator[Finding]:
    """What kept the diagnostic from judging the GPUs: persistence mode off (DCGM then
    skips its tests), another deployment check failed (or a run of them, each echoing
    the first), CUDA not initialised on every GPU (the NVLink fabric), MIG enabled (NVVS
    refuses to run), or every test skipped; and a run whose every test passed."""
    report = dcgmi_diag
    tests = report.tests
    if mig := [m for m in report.errors if diag_kind(m) == "mig"]:
        yield _mig_blocked(mig, report)
    run = cascade(tests)
    persistence = [(t, m) for t in tests if t.status == "fail" and t not in run[1:]
                   for m in t.messages if diag_kind(m) == "persistence"]
    skipped = [t for t in tests if t.status == "skip" and not is_deployment(t)]
    if run:
        yield _cascade(run, skipped)
    elif persistence:
        yield _persistence(persistence, skipped, len(report.device_ids))
    yield from _deployment_failed([t for t in tests if t not in run])
    not_ready = [(t, m) for t in tests for m in t.messages if diag_kind(m) == "cuda-not-ready"]
    if not_ready:
        yield _not_ready(not_ready, report)
    if busy := [(t, m) for t in tests for m in t.messages if diag_kind(m) == "busy"]:
        yield _busy(busy)
    judged = [t for t in tests if not is_deployment(t)]
    stopped = any(t.status == "fail" and is_deployment(t) for t in tests)  # DCGM then skips
    if judged and not persistence and not stopped and all(t.status == "skip" for t in judged):
        yield _no_result(judged, report)
    elif _cut_short(report):
        yield _cut(report)
    elif _passed(report):
        yield _pass(report)


def _cascade(run: list[DiagTest], skipped: list[DiagTest]) -> Finding:
    first, rest = run[0], run[1:]
    said = [m.text for m in first.messages if m.kind != "info"][:1]
    why = f" DCGM says: {said[0]}." if said else ""
    hardware = [t.name for t in rest if t.key in HW_DEPLOYMENT]
    hw = (f" {' and '.join(hardware)} failing with no message of their own is part of "
          "that echo, not a finding on the GPUs' memory or InfoROM." if hardware else "")
    skip = (f" The {len(skipped)} test(s) skipped after it are its consequence too."
            if skipped else "")
    fix = ("enable persistence mode (systemctl enable --now nvidia-persistenced, or "
           "nvidia-smi -pm 1) and check that nvidia-smi answers" if first.key ==
           "persistence mode" else f"fix what {first.name} checks")
    return finding(
        "dcgm.deployment-cascade", Severity.WARNING,
        f"DCGM diag: deployment checks failed from {first.name} on "
        f"({', '.join(t.name for t in rest)} after it)",
        f"DCGM checks the node's software before it tests the GPUs. {first.name} failed "
        f"first and every check after it failed as well, none with a message of its own: "
        f"DCGM's deployment checks report a failure on the checks after the first one, so "
        f"the first is the cause.{why}{hw}{skip} The node's software, not its hardware: "
        f"{fix}, rerun dcgmi diag -r 1 and return the node once it passes; only a check "
        "that still fails on its own then (Page Retirement, Inforom) speaks of a GPU.",
        Action.FIX_CONFIG, Blame.CONFIG, evidence=diag_evidence(run), references=(DOC,))


def _mig_blocked(errors: list[DiagMessage], report: DiagReport) -> Finding:
    gpus = sorted({g for m in errors for g in m.gpus})
    on = f" ({gpu_list(gpus)} in MIG mode)" if gpus else ""
    return finding(
        MIG_BLOCKED, Severity.INFO,
        f"DCGM diag did not run: MIG is enabled{on}",
        "NVVS refuses to run while a GPU it would test (or, with several GPUs, any of them) "
        "has MIG mode enabled: MIG keeps the diagnostic from the whole GPU. Nothing was "
        "tested, so this says nothing of the GPUs' health, good or bad; it is not a fault. "
        "To test them, run the diagnostic when MIG can be disabled (nvidia-smi -mig 0 once "
        "the GPU is idle, then re-create the MIG layout) or on a node without MIG; a "
        "health check that runs dcgmi diag on MIG nodes should skip them.",
        Action.FIX_CONFIG, Blame.CONFIG,
        evidence=[evidence("dcgmi_diag", [ln for m in errors for ln in m.lines])],
        references=(DOC, DOC_MIG))


def _passed(report: DiagReport) -> bool:
    return bool(report.tests) and not report.errors and all(
        t.status in ("pass", "skip") for t in report.tests) and any(
        t.status == "pass" for t in report.tests)


def _tested_gpus(report: DiagReport) -> str:
    gpus = {g for t in report.tests for g, st in t.gpus.items() if st == "pass"}
    if gpus:
        return f" on {gpu_list(gpus)}"
    n = len(report.device_ids)
    return f" on {'its GPU' if n == 1 else f'all {n} GPUs'}" if n else ""


def _pass(report: DiagReport) -> Finding:
    passed = [t for t in report.tests if t.status == "pass"]
    skipped = [t.name for t in report.tests if t.status == "skip"]
    level = f" (level {report.level})" if report.level else ""
    skip = (f" Skipped, saying nothing either way: {', '.join(skipped)} (a test this GPU, "
            "this level or this installation does not run, such as EUD without its "
            "package)." if skipped else "")
    return finding(
        "dcgm.diag-passed", Severity.OK,
        f"DCGM diag{level}: {len(passed)} test(s) passed{_tested_gpus(report)}",
        f"Every test DCGM ran passed: {', '.join(t.name for t in passed)}.{skip}",
        Action.NONE, Blame.UNKNOWN, evidence=diag_evidence(passed[:1]), references=(DOC,))


def _cut_short(report: DiagReport) -> bool:
    """Output that ends before the table's last line (or the JSON's), with nothing
    failed or warned in what is there: the tests after it are unknown."""
    return bool(report.tests) and not report.complete and not report.errors and not any(
        t.status in ("fail", "warn") for t in report.tests)


def _deployment_failed(tests: list[DiagTest]) -> Iterator[Finding]:
    """Deployment checks failed for another reason than persistence mode (or than the
    GPU's memory or InfoROM, which diag_hardware judges)."""
    for t in tests:
        said = [m for m in t.messages if diag_kind(m) != "hardware"]
        if (t.status == "fail" and is_deployment(t) and t.key not in HW_DEPLOYMENT
                and not any(diag_kind(m) == "persistence" for m in t.messages)
                and (said or not t.messages)):
            yield finding(
                "dcgm.deployment-failed", Severity.WARNING,
                f"DCGM diag: deployment check {t.name} failed",
                f"DCGM checks the node's software before it tests the GPUs; {t.name} failed"
                + (f": {said[0].text}" if said else "")
                + ". Fix it (a denylisted driver, CUDA_VISIBLE_DEVICES or another variable "
                "set, a graphics process on the GPU, libraries not found) and rerun.",
                Action.FIX_CONFIG, Blame.CONFIG, evidence=diag_evidence([t]), references=(DOC,))


def _persistence(hits: list[tuple[DiagTest, DiagMessage]], skipped: list[DiagTest],
                 tested: int) -> Finding:
    gpus = sorted({g for _, m in hits for g in m.gpus})
    on = gpu_list(gpus) if gpus else "the GPUs"
    if gpus and tested > len(gpus):
        on += f" (of the {tested} tested; DCGM's message is cut short)"
    skip = (f" The {len(skipped)} test(s) it then skipped ({', '.join(t.name for t in skipped)})"
            " are its consequence, not results." if skipped else "")
    return finding(
        "dcgm.persistence-off", Severity.WARNING,
        f"DCGM diag refused to test: persistence mode off on {on}",
        "DCGM's diagnostic needs persistence mode and stops at its deployment checks "
        f"without it: a configuration problem, not a hardware fault.{skip} Enable "
        "persistence (systemctl enable --now nvidia-persistenced, or nvidia-smi -pm 1) and "
        "rerun the diagnostic.", Action.FIX_CONFIG, Blame.CONFIG,
        evidence=diag_evidence(dict.fromkeys(t for t, _ in hits)), references=(DOC,))


def _not_ready(hits: list[tuple[DiagTest, DiagMessage]], report: DiagReport) -> Finding:
    gpus = sorted({g for _, m in hits for g in m.gpus})
    tests = list(dict.fromkeys(t for t, _ in hits))
    first = hits[0][1]
    lines = [ln for t in tests for ln in t.lines[:2]] + first.lines
    return finding(
        "dcgm.cuda-not-ready", Severity.CRITICAL,
        f"DCGM diag: CUDA not initialised on {gpu_list(gpus) if gpus else 'the GPUs'} "
        "(system not yet initialized: the NVLink fabric)",
        f"{', '.join(t.name for t in tests)} failed because cuInit returned 'system not yet "
        "initialized' (CUDA error 802) on every GPU it tried: not a GPU fault. On an "
        "NVSwitch system (HGX, DGX) CUDA waits for the fabric manager to configure the "
        "fabric: start and enable nvidia-fabricmanager (the driver's version), wait for the "
        "GPUs' fabric state to read Completed, and rerun the diagnostic.",
        Action.FIX_CONFIG, Blame.NODE, evidence=[evidence("dcgmi_diag", lines)],
        references=(DOC,))


def _busy(hits: list[tuple[DiagTest, DiagMessage]]) -> Finding:
    gpus = sorted({g for _, m in hits for g in m.gpus})
    on = gpu_list(gpus) if gpus else "the GPUs"
    tests = ", ".join(dict.fromkeys(t.name for t, _ in hits))
    return finding(
        "dcgm.gpu-busy", Severity.WARNING,
        f"DCGM diag could not start its tests on {on}: the GPU was busy or unavailable",
        f"{tests} could not create a CUDA context on {on} (CUDA error 46, 'busy or "
        "unavailable'): the GPU's compute mode admits no more processes (Exclusive_Process "
        "while another process holds it, or Prohibited), or a leftover process fills it. "
        "The test did not run, so its Fail says nothing of the hardware. Find what holds "
        "it (nvidia-smi --query-compute-apps=pid,process_name --format=csv) and its "
        "compute mode (nvidia-smi -q -d COMPUTE), run the diagnostic on an idle GPU (or "
        "with the compute mode set to Default, nvidia-smi -c 0, for the run), and judge "
        "the hardware by that run.", Action.FIX_CONFIG, Blame.CONFIG,
        gpu_scope(None, gpus[0]) if len(gpus) == 1 else NODE,
        evidence=diag_evidence(dict.fromkeys(t for t, _ in hits)), references=(DOC,))


def _no_result(judged: list[DiagTest], report: DiagReport) -> Finding:
    reasons = [m.text for t in judged for m in t.messages][:2]
    why = (f" DCGM says: {' / '.join(reasons)}." if reasons else
           " DCGM skips a test when the GPU is not supported at that level (non-datacenter "
           "GPUs run level 1 only), when its diag configuration is missing "
           "(datacenter-gpu-manager-config's diag-skus.yaml) or its packages disagree: "
           "nvvs.log (/var/log/nvidia-dcgm/nvvs.log) says which.")
    return finding(
        NO_RESULT, Severity.INFO,
        f"DCGM diag gave no result: all {len(judged)} test(s) skipped",
        "Every test skipped: the diagnostic says nothing of the GPUs, neither pass nor "
        f"fail.{why} Fix what made it skip and rerun before trusting the node to it.",
        Action.NONE, Blame.UNKNOWN, evidence=diag_evidence(judged), references=(DOC,))


def _cut(report: DiagReport) -> Finding:
    last = report.tests[-1]
    passed = [t.name for t in report.tests if t.status == "pass"]
    shown = (f"the {len(passed)} test(s) it shows passed{_tested_gpus(report)} "
             f"({', '.join(passed)})" if passed else "what it shows was skipped")
    return finding(
        NO_RESULT, Severity.INFO, f"dcgmi diag output cut short after {last.name}",
        f"The diagnostic's output ends after {len(report.tests)} test(s), before the end of "
        f"its table (or of its JSON): {shown}, with no failure among them, but the tests "
        f"after {last.name} are not in it, so it cannot vouch for the rest of the run. "
        "Paste or collect the whole output (dcgmi diag -r LEVEL -j).",
        Action.NONE, Blame.UNKNOWN, evidence=diag_evidence([last]), references=(DOC,))
