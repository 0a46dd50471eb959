"""Causes in the order an on-call acts (issue 32): the most drastic and the most certain
first in every report, consequences folded under their cause (Xid 154 under the Xid
that required it; every GPU gone is one power-cycle, not one step per finding)."""

from __future__ import annotations

from gputriage.engine import causes
from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input, load_text
from gputriage.model import Action, Blame, Finding, Severity, finding_order
from gputriage.results.triage import build_triage
from gputriage.vocabulary import ACTION_ORDER
from gputriage.vocabulary import Action as VocabularyAction


def _finding(id_: str, action: Action, blame: Blame = Blame.NODE,
             severity: Severity = Severity.CRITICAL) -> Finding:
    return Finding(id_, severity, id_, "", action, blame)


def test_the_most_drastic_action_comes_first_whatever_the_name():
    found = [_finding("a.fix", Action.FIX_SOFTWARE, Blame.CONFIG),
             _finding("b.reset", Action.RESET_GPU),
             _finding("c.drain", Action.DRAIN_AND_REPAIR)]
    assert [f.id for f in sorted(found, key=finding_order)] == ["c.drain", "b.reset", "a.fix"]


def test_an_unknown_blame_comes_after_a_known_one_of_the_same_action():
    found = [_finding("a.unknown", Action.FIX_CONFIG, Blame.UNKNOWN, Severity.WARNING),
             _finding("b.config", Action.FIX_CONFIG, Blame.CONFIG, Severity.WARNING)]
    assert [f.id for f in sorted(found, key=finding_order)] == ["b.config", "a.unknown"]


def test_severity_still_comes_before_the_action():
    found = [_finding("a.warn", Action.PLAN_REPAIR, severity=Severity.WARNING),
             _finding("b.crit", Action.FIX_SOFTWARE, Blame.CONFIG)]
    assert [f.id for f in sorted(found, key=finding_order)] == ["b.crit", "a.warn"]


def test_every_action_has_a_place():
    assert set(ACTION_ORDER) == set(VocabularyAction)


def test_urgency_orders_cluster_settings_of_one_action():
    pdb = _finding("k8s.lint-no-pdb", Action.FIX_CONFIG, Blame.JOB_CONFIG, Severity.WARNING)
    preempts = _finding("k8s.lint-preempts-production", Action.FIX_CONFIG, Blame.CONFIG,
                        Severity.WARNING)
    herd = _finding("k8s.lint-weights-herd", Action.FIX_CONFIG, Blame.JOB_CONFIG,
                    Severity.WARNING)
    ordered = sorted(causes.fold([pdb, herd, preempts]), key=finding_order)
    assert [f.id for f in ordered] == ["k8s.lint-preempts-production",
                                       "k8s.lint-weights-herd", "k8s.lint-no-pdb"]


_XID79_THEN_154 = (
    "Mar 03 10:00:01 gpu-b12 kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', "
    "name=<unknown>, GPU has fallen off the bus.\n"
    "Mar 03 10:00:01 gpu-b12 kernel: NVRM: GPU 0000:9a:00.0: GPU has fallen off the bus.\n"
    "Mar 03 10:00:02 gpu-b12 kernel: NVRM: Xid (PCI:0000:9a:00): 154, GPU recovery action "
    "changed from 0x0 (None) to 0x2 (Node Reboot Required)\n")


def test_xid_154_after_the_xid_79_that_required_it_is_its_consequence():
    result = analyze(load_text(_XID79_THEN_154, "journal.txt"))
    top = [f.id for f in result.findings if f.current]
    assert "xid.154" not in top
    xid79 = next(f for f in result.findings if f.id == "xid.79")
    assert "xid.154" in [c.id for c in xid79.consequences]
    drains = [a for a in build_triage(result).actions
              if a.action in (Action.DRAIN_AND_REPAIR, Action.REBOOT_NODE, Action.RESET_GPU)]
    assert len(drains) == 1 and "xid.154" in drains[0].closes


def test_xid_154_on_another_gpu_is_not_folded():
    other = _XID79_THEN_154.replace("Xid (PCI:0000:9a:00): 154", "Xid (PCI:0000:ab:00): 154")
    result = analyze(load_text(other, "journal.txt"))
    assert "xid.154" in [f.id for f in result.findings if f.current]


def test_gpus_gone_after_xid_79_is_one_drain_step(tmp_path):
    from gputriage.scenarios import build_scenario

    out = tmp_path / "gpus-gone"
    build_scenario("gpus-gone", str(out))
    triage = build_triage(analyze(load_input(str(out))))
    node_actions = [a for a in triage.actions if a.action in (
        Action.DRAIN_AND_REPAIR, Action.REBOOT_NODE, Action.RESET_GPU, Action.FIX_SOFTWARE)]
    assert len(node_actions) == 1
    assert node_actions[0].findings == ("host.gpus-gone",)
    assert {"xid.79", "nvidia-smi.cannot-communicate"} <= set(node_actions[0].closes)
