"""gputriage triage: the on-call's one screen, in order, and its JSON."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from fakehost import FakeHost

from gputriage.cli import EXIT_INPUT, Environment, main
from gputriage.ingest import load_inputs
from gputriage.model import (
    NODE,
    Action,
    Blame,
    Finding,
    HostSummary,
    Result,
    Scope,
    Severity,
    Status,
)
from gputriage.results.triage import ACTION_ORDER, build_triage, next_actions, triage_snapshot
from gputriage.scenarios import build_scenario


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("triage-scenarios")
    return {n: str(build_scenario(n, root / f"{n}.tar.gz"))
            for n in ("healthy-8xh100", "gpu-fallen-off-bus", "xid31-one-job")}


def _run(argv: list[str], host=None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err, host=host))
    return code, out.getvalue(), err.getvalue()


def _f(fid: str, action: Action, severity: Severity = Severity.CRITICAL,
       scope: Scope = NODE, blame: Blame = Blame.NODE) -> Finding:
    return Finding(fid, severity, fid, "why", action, blame, scope)


GPU3 = Scope("gpu", 3, None, "0000:5d:00.0")
GPU4 = Scope("gpu", 4, None, "0000:9a:00.0")


def test_actions_are_deduplicated_worst_and_most_drastic_first():
    found = [_f("xid.31", Action.RESTART_JOB, Severity.WARNING, GPU3, Blame.JOB),
             _f("cfg", Action.FIX_CONFIG, Severity.WARNING),
             _f("xid.79", Action.DRAIN_AND_REPAIR, scope=GPU4),
             _f("gpu.missing", Action.DRAIN_AND_REPAIR, scope=GPU4),
             _f("pcie", Action.DRAIN_AND_REPAIR, scope=GPU3),
             _f("mismatch", Action.REBOOT_NODE),
             _f("xid.119", Action.RESET_GPU, scope=GPU3),
             _f("pcie.width", Action.PLAN_REPAIR, Severity.WARNING, GPU3),
             _f("ctk", Action.FIX_SOFTWARE, Severity.WARNING),
             _f("fine", Action.NONE, Severity.WARNING),
             _f("uvm", Action.FIX_CONFIG)]
    actions = next_actions(found)
    assert [a.action for a in actions] == [Action.DRAIN_AND_REPAIR, Action.REBOOT_NODE,
                                           Action.RESET_GPU, Action.FIX_CONFIG,
                                           Action.PLAN_REPAIR, Action.FIX_SOFTWARE,
                                           Action.RESTART_JOB]
    assert set(ACTION_ORDER) == set(Action)
    drain = actions[0]  # findings without a step: one entry per action
    assert drain.targets == ("GPU 4 0000:9a:00.0", "GPU 3 0000:5d:00.0")
    assert drain.findings == ("xid.79", "gpu.missing", "pcie")
    config = actions[3]  # a warning and a critical of one action: listed as the critical
    assert config.findings == ("cfg", "uvm") and config.severity is Severity.CRITICAL


def test_one_entry_per_distinct_step_closing_its_consequences():
    lost = replace(_f("xid.79", Action.DRAIN_AND_REPAIR, scope=GPU4), step="Power-cycle.",
                   consequences=(_f("gpu.missing", Action.DRAIN_AND_REPAIR, scope=GPU4),))
    same = replace(_f("nvidia-smi.gpu-lost", Action.DRAIN_AND_REPAIR, scope=GPU4),
                   step="Power-cycle.")
    other = replace(_f("xid.64", Action.DRAIN_AND_REPAIR, scope=GPU3), step="RMA it.")
    past = replace(_f("xid.48", Action.RESET_GPU, scope=GPU3), step="Reset it.",
                   status=Status.PAST)
    actions = next_actions([lost, same, other, past])
    assert [a.step for a in actions] == ["Power-cycle.", "RMA it."]
    assert actions[0].findings == ("xid.79", "nvidia-smi.gpu-lost")
    assert actions[0].closes == ("xid.79", "nvidia-smi.gpu-lost", "gpu.missing")
    assert actions[0].says == "Power-cycle." and actions[1].targets == ("GPU 3 0000:5d:00.0",)


def test_only_warning_or_worse_reach_the_screen():
    result = Result(findings=[_f("ok", Action.NONE, Severity.OK),
                              _f("note", Action.FIX_CONFIG, Severity.INFO),
                              _f("warn", Action.RESTART_JOB, Severity.WARNING, blame=Blame.JOB),
                              _f("crit", Action.REBOOT_NODE)],
                    host=HostSummary(verdict="critical"))
    t = build_triage(result)
    assert [f.id for f in t.findings] == ["crit", "warn"]
    assert [a.action for a in t.actions] == [Action.REBOOT_NODE, Action.RESTART_JOB]
    assert t.exit_status == 2 and t.verdict == "critical"


def test_screen_order_with_a_baseline(built):
    code, out, err = _run(["triage", built["gpu-fallen-off-bus"],
                           "--baseline", built["healthy-8xh100"]])
    assert code == 2, err
    one, two, three = (out.index(h) for h in ("1. What changed", "2. Findings",
                                               "3. Next actions"))
    assert one < two < three
    changed = out[one:two]
    assert "GPU removed" in changed and "0000:9a:00.0" in changed
    assert "new findings:" in changed and "xid.79" in changed
    findings = out[two:three]
    assert "CRITICAL" in findings and "NODE" in findings
    actions = " ".join(out[three:].split())
    assert "1. Drain " in actions and "[drain-and-repair]" in actions
    assert "gputriage ack xid.79 --gpu 0000:9a:00.0" in actions and "closes xid.79" in actions
    assert "cordon, drain and send for hardware repair" not in actions


def test_job_blame_and_restart_action(built):
    code, out, _ = _run(["triage", built["xid31-one-job"]])
    assert code in (1, 2)
    assert "JOB" in out and "[restart-job]" in out and "Restart the job" in out
    assert "no baseline" in out


def test_json_for_tickets(built):
    code, out, _ = _run(["triage", "--json", built["gpu-fallen-off-bus"],
                         "--baseline", built["healthy-8xh100"]])
    doc = json.loads(out)
    assert code == doc["exit_status"] == 2
    assert doc["schema"] == "gputriage/triage/v1" and doc["verdict"] == "critical"
    assert doc["changed"]["schema"] == "gputriage/diff/v1"
    assert doc["changed"]["gpus"][0]["change"] == "removed"
    first = doc["actions"][0]
    assert first["action"] == "drain-and-repair" and first["severity"] == "critical"
    assert first["targets"] == ["GPU 0000:9a:00.0"]
    assert first["text"] and "0000:9a:00.0" in first["step"]
    assert set(first["findings"]) <= set(first["closes"]) and "xid.79" in first["closes"]
    assert {f["severity"] for f in doc["findings"]} <= {"critical", "warning"}


def test_healthy_triage_needs_nothing(built):
    t = triage_snapshot(load_inputs([built["healthy-8xh100"]]), baseline=built["healthy-8xh100"])
    assert t.exit_status == 0 and not t.findings and not t.actions
    assert t.diff is not None and not t.diff.changes and not t.diff.new


def test_bad_baseline_is_an_input_error(built, tmp_path):
    code, _, err = _run(["triage", built["healthy-8xh100"],
                         "--baseline", str(tmp_path / "gone")])
    assert code == EXIT_INPUT and err.count("\n") == 1


def test_no_path_collects_this_host(tmp_path):
    host = FakeHost(tmp_path / "root")
    host.write("/proc/modules", "ext4 1 0 - Live 0x0\n")
    host.write("/sys/bus/pci/devices/0000:00:03.0/vendor", "0x1af4\n")
    host.write("/sys/bus/pci/devices/0000:00:03.0/class", "0x020000\n")
    code, out, _ = _run(["triage", "--json"], host=host)
    assert code == 0
    assert json.loads(out)["actions"] == []
