"""A node a GPU health checker marked (issue 31 part E): NVSentinel's conditions and
events, the EKS node monitoring agent's AcceleratedHardwareReady, pasted alone or inside
kubectl describe / get -o yaml, judged by the DCGM error code they carry
(knowledge/dcgm_errors.csv). ``RULE_CASES`` and ``SOURCE_SAMPLES`` are collected by the
conformance and source tests."""

from __future__ import annotations

import pytest
from hostkit import run

from gputriage.engine.analysis import analyze
from gputriage.errors import ParseError
from gputriage.ingest import load_text
from gputriage.ingest.detect import detect
from gputriage.knowledge.dcgm_errors import by_number, errors, lookup
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.health_marks import parse_health_marks
from gputriage.rules.dcgm_marks import judge_mark

IMEX = ("ErrorCode:DCGM_FR_IMEX_UNHEALTHY GPU:2 PCI:0000:1b:00.0 IMEX daemon status is -3 "
        "(not READY) Check IMEX installation. Recommended Action=CONTACT_SUPPORT;\n")
EVENT_XID79 = ("checkName: GpuXidError\nerrorCode: DCGM_FR_GPU_FALLEN_OFF_BUS\nisFatal: true\n"
               "recommendedAction: RESTART_VM\nmessage: \"GPU has fallen off the bus (XID 79). "
               "Node requires reboot.\"\n")
_ROW = "  {:<22}  {:<6}  {:<32}  {:<32}  {:<26}  {}"
_TS = ("Tue, 17 Feb 2026 05:23:32 -0800", "Wed, 11 Feb 2026 16:22:57 -0800")
DESCRIBE = "\n".join([
    "Name:               gpu-node-7",
    "Roles:              <none>",
    "Labels:             nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3",
    "Conditions:",
    _ROW.format("Type", "Status", "LastHeartbeatTime", "LastTransitionTime", "Reason",
                "Message"),
    _ROW.format("----", "------", "-----------------", "------------------", "------",
                "-------"),
    _ROW.format("GpuNvlinkWatch", "True", *_TS, "GpuNvlinkWatchIsNotHealthy",
                "ErrorCode:DCGM_FR_IMEX_UNHEALTHY GPU:0 PCI:0000:18:00.0 IMEX daemon status "
                "is -3 (not READY) Recommended Action=CONTACT_SUPPORT;"),
    _ROW.format("Ready", "True", *_TS, "KubeletReady", "kubelet is posting ready status"),
    ""])
EKS_YAML = """\
status:
  conditions:
  - lastHeartbeatTime: "2026-02-27T10:00:00Z"
    lastTransitionTime: "2026-02-27T09:58:00Z"
    message: DCGM detected issues in health check system with error code 122
    reason: DCGMHealthCode122
    status: "False"
    type: AcceleratedHardwareReady
  - lastHeartbeatTime: "2026-02-27T10:00:00Z"
    lastTransitionTime: "2026-02-27T09:58:00Z"
    message: kubelet is posting ready status
    reason: KubeletReady
    status: "True"
    type: Ready
"""

SOURCE_SAMPLES = {
    "health_checker_marks": ("fixture:marks/nvsentinel1471-imex-p5-condition-message.txt",
                             "fixture:marks/eksnma63-acceleratedhardwareready-code122.txt",
                             "fixture:marks/ctrmap2555-eks-agent-dcgm-unreachable.txt"),
}
RULE_CASES = {
    "dcgm.checker-mark": [({"health_checker_marks": IMEX}, "dcgm.checker-mark"),
                          ({"health_checker_marks": EVENT_XID79}, "dcgm.checker-mark")],
}


def _fixture(name: str) -> str:
    from pathlib import Path
    return (Path(__file__).parent / "fixtures" / "marks" / name).read_text()


def _only(text: str):
    result = analyze(load_text(text, "paste"))
    judged = [f for f in result.findings if f.severity is not Severity.OK]
    assert len(judged) == 1, [f.id for f in judged]
    return judged[0]


def test_every_row_has_a_source_and_a_consistent_judgement() -> None:
    for row in errors():
        assert row.source.strip() and row.meaning.strip(), row.code
        assert lookup(row.code) is row
    assert by_number(122) is lookup("DCGM_FR_IMEX_UNHEALTHY")


@pytest.mark.parametrize("name", ["nvsentinel1471-imex-p5-condition-message.txt",
                                  "eksnma63-acceleratedhardwareready-code122.txt"])
def test_imex_on_a_node_without_multi_node_nvlink_is_a_false_alarm(name: str) -> None:
    f = _only(_fixture(name))
    assert (f.id, f.severity, f.blame, f.action) == (
        "dcgm.checker-mark", Severity.INFO, Blame.CONFIG, Action.NONE)
    assert "IMEX" in f.title and "false alarm" in f.title


@pytest.mark.parametrize("gpu, expected", [
    ("NVIDIA GB200", Severity.WARNING), ("NVIDIA GB300", Severity.WARNING),
    ("NVIDIA H100 80GB HBM3", Severity.INFO), ("NVIDIA B200", Severity.INFO)])
def test_imex_is_configuration_on_an_nvl_rack_and_never_the_gpu(gpu: str,
                                                                expected: Severity) -> None:
    v = judge_mark("DCGM_FR_IMEX_UNHEALTHY", None, [], None, [gpu])
    assert (v.severity, v.blame) == (expected, Blame.CONFIG)
    assert v.action in (Action.NONE, Action.FIX_CONFIG)


def test_an_xid_mark_is_blamed_by_its_xid() -> None:
    f = _only(_fixture("nvsentinel911-gpumemwatch-xid31-wrapped.txt"))
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.JOB, Action.RESTART_JOB)
    assert "Xid 31" in f.title
    hw = judge_mark("DCGM_FR_XID_ERROR", None, [48], None, [])
    assert hw.blame is Blame.NODE and hw.severity is Severity.CRITICAL
    unsaid = judge_mark("DCGM_FR_XID_ERROR", None, [], None, [])
    assert (unsaid.blame, unsaid.severity) == (Blame.UNKNOWN, Severity.WARNING)


def test_an_nvsentinel_event_of_a_gpu_off_the_bus_is_the_nodes() -> None:
    (mark,) = parse_health_marks(EVENT_XID79)
    assert (mark.checker, mark.check, mark.recommended) == ("NVSentinel", "GpuXidError",
                                                            "RESTART_VM")
    result = run(health_checker_marks=EVENT_XID79)
    (f,) = result.findings
    assert (f.severity, f.blame, f.action) == (Severity.CRITICAL, Blame.NODE,
                                               Action.REBOOT_NODE)


def test_dcgm_unreachable_is_the_monitoring_not_the_gpus() -> None:
    f = _only(_fixture("ctrmap2555-eks-agent-dcgm-unreachable.txt"))
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)


def test_an_unknown_code_is_an_unknown_blame_that_never_drains() -> None:
    v = judge_mark("DCGM_FR_SOMETHING_NEW", None, [], "CONTACT_SUPPORT", [])
    assert (v.blame, v.severity) == (Blame.UNKNOWN, Severity.WARNING)
    assert "CONTACT_SUPPORT" in v.why


def test_marks_in_describe_node_are_judged_once_by_the_condition_rule() -> None:
    assert "health_checker_marks" not in dict(detect(DESCRIBE))
    f = _only(DESCRIBE)
    assert (f.id, f.severity, f.blame) == ("k8s.node-condition", Severity.INFO, Blame.CONFIG)
    assert "gpu-node-7" in f.title and "IMEX" in f.title


def test_a_ready_condition_that_is_false_is_the_mark() -> None:
    f = _only(EKS_YAML)
    assert (f.id, f.severity, f.blame) == ("k8s.node-condition", Severity.INFO, Blame.CONFIG)


def test_text_without_a_code_is_refused() -> None:
    with pytest.raises(ParseError):
        parse_health_marks("GpuNvlinkWatch True\nall links up\n")
    assert "health_checker_marks" not in dict(detect("the GPU is healthy\n"))


# --- dcgmi health -c -j, and IMEX in dcgmi health -------------------------------------

def test_health_json_is_read_like_the_tree() -> None:
    f = _only(_fixture("../dcgm/health-c-j-memory-failure-written.json"))
    assert (f.id, f.severity, f.blame, f.scope.gpu_index) == (
        "dcgm.health-memory", Severity.CRITICAL, Blame.NODE, 1)


def test_imex_in_dcgmi_health_is_not_an_nvlink_fault() -> None:
    f = _only(_fixture("../dcgm/health-c-j-imex-warning-written.json"))
    assert (f.id, f.severity, f.blame) == ("dcgm.health-imex", Severity.INFO, Blame.CONFIG)
    tree = ("+---------------------------+------------------------------------------------+\n"
            "| Health Monitor Report                                                      |\n"
            "+===========================+================================================+\n"
            "| Overall Health            | Warning                                        |\n"
            "| GPU                       |                                                |\n"
            "| -> 3                      | Warning                                        |\n"
            "|    -> Errors              |                                                |\n"
            "|       -> NVLINK system    | Warning                                        |\n"
            "|                           | IMEX daemon status is -3 (not READY)           |\n"
            "+---------------------------+------------------------------------------------+\n")
    f = _only(tree)
    assert (f.id, f.severity, f.blame) == ("dcgm.health-imex", Severity.INFO, Blame.CONFIG)


def test_profiling_refused_by_the_exporter_is_configuration() -> None:
    log = ('time="2020-10-27T00:53:32Z" level=info msg="DCGM successfully initialized!"\n'
           'time="2020-10-27T00:53:32Z" level=fatal msg="Error watching fields: Profiling is '
           'not supported for this group of GPUs or GPU"\n')
    f = _only(log)
    assert (f.id, f.severity, f.blame) == ("dcgm.exporter-profiling-unsupported",
                                           Severity.WARNING, Blame.CONFIG)
