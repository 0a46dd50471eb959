"""A node a GPU health checker cordoned or tainted (issue 31 part G): NVSentinel's
quarantineHealthEvent annotation, its cordon-by / cordon-reason labels and the taints its
rulesets apply, read from get -o yaml, describe and --show-labels; blamed by the event's
DCGM code or Xid, unknown (warning, never a drain) when the node does not say why."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_text
from gputriage.model import Action, Blame, Finding, Severity
from gputriage.parsers.k8s_model import KNode, Taint
from gputriage.rules.k8s_node_marks import quarantine_of

_DIR = Path(__file__).parent / "fixtures" / "marks"


def _judged(text: str) -> list[Finding]:
    result = analyze(load_text(text, "paste"))
    return [f for f in result.findings if f.severity not in (Severity.OK, Severity.INFO)]


def _xid79() -> str:
    return (_DIR / "nvsentinel-quarantine-xid79-node.yaml").read_text()


RULE_CASES = {
    "k8s.node-health-mark": [({"k8s_objects": (_DIR / "nvsentinel-quarantine-xid79-node.yaml")
                               .read_text()}, "k8s.node-health-mark")],
}


def test_a_quarantine_for_xid_79_is_the_nodes_and_names_the_checker() -> None:
    (f,) = _judged(_xid79())
    assert (f.id, f.severity, f.blame) == ("k8s.node-health-mark", Severity.CRITICAL,
                                           Blame.NODE)
    assert "NVSentinel" in f.title and "Xid 79" in f.title and "gpu-xid-error" in f.title


@pytest.mark.parametrize("code, message", [
    ('"DCGM_FR_XID_ERROR"', "MMU Fault (XID 31)"), ('"31"', "Xid 31 on GPU 0")])
def test_a_quarantine_for_an_application_xid_is_the_jobs_and_never_drains(
        code: str, message: str) -> None:
    text = _xid79().replace('"79"', code).replace(
        "GPU has fallen off the bus (XID 79). Node requires reboot.", message)
    (f,) = _judged(text)
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.JOB, Action.RESTART_JOB)


@pytest.mark.parametrize("name", ["nvsentinel-cordon-no-event-describe.txt",
                                  "nvsentinel-cordon-show-labels.txt"])
def test_a_cordon_with_no_reason_is_unknown_at_warning(name: str) -> None:
    (f,) = _judged((_DIR / name).read_text())
    assert (f.id, f.severity, f.blame, f.action) == (
        "k8s.node-health-mark", Severity.WARNING, Blame.UNKNOWN, Action.PLAN_REPAIR)
    assert "NVSentinel" in f.title and "GPU-fatal-error-ruleset" in f.title


def test_a_stale_quarantine_taint_is_configuration() -> None:
    (f,) = _judged((_DIR / "nvsentinel753-stale-taint-node.yaml").read_text())
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)


def test_the_gpu_pools_own_taint_and_a_plain_cordon_are_not_marks() -> None:
    pool = KNode("n", taints=[Taint("nvidia.com/gpu", "present", "NoSchedule"),
                              Taint("node.kubernetes.io/unschedulable", None, "NoSchedule")],
                 unschedulable=True)
    assert quarantine_of(pool) is None
    other = KNode("n", taints=[Taint("gpu.health/memory-error", "true", "NoSchedule")])
    q = quarantine_of(other)
    assert q is not None and q.checker == "a GPU health checker"


def test_a_condition_and_its_quarantine_are_one_finding() -> None:
    text = _xid79().replace("spec:\n", """status:
  conditions:
  - type: SysLogsXIDError
    status: "True"
    reason: SysLogsXIDErrorIsNotHealthy
    message: "ErrorCode:79 PCI:0000:1b:00.0 GPU has fallen off the bus (XID 79)"
spec:
""", 1)
    found = _judged(text)
    assert [f.id for f in found] == ["k8s.node-condition"], [f.title for f in found]
    assert any("cordon-by" in line for ev in found[0].evidence for line in ev.lines)
