"""Each finding's concrete next step: the versions, GPUs and commands of the evidence
(issue 12 item 7), over every scenario and every finding a rule or the Xid catalogs
can give."""

from __future__ import annotations

import io
import re
from dataclasses import replace

import pytest
from analysed import Analysed

from gputriage import next_steps
from gputriage.cli import Environment, main
from gputriage.facts.store import Facts
from gputriage.knowledge import nccl_warnings
from gputriage.knowledge.xid import all_sxids, all_xids
from gputriage.model import (
    DRAINING_ACTIONS,
    NODE,
    Action,
    Blame,
    DriverVersions,
    Finding,
    HostIdentity,
    Result,
    Scope,
    Severity,
    Status,
)
from gputriage.rules import all_rules
from gputriage.scenarios import list_scenarios

SCENARIOS = [s.name for s in list_scenarios() if not s.name.startswith("fleet-")]
GPU4 = Scope("gpu", None, None, "0000:9a:00.0")
COMMANDS = {"systemctl", "nvidia-smi", "modprobe", "echo", "apt-get", "dnf", "sysctl",
            "kubectl", "scontrol", "gputriage", "lspci", "ibstat"}


def _result(analysed: Analysed, name: str) -> Result:
    return analysed.result(name)


def _one(result: Result, fid: str) -> Finding:
    found = [f for f in result.findings if f.id == fid]
    assert found, f"{fid} not among {[f.id for f in result.findings]}"
    return found[0]


def _acting(result: Result) -> list[Finding]:
    return [f for f in result.findings if f.current and f.action is not Action.NONE]


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_current_finding_that_acts_has_its_step(analysed, name):
    result = _result(analysed, name)
    for f in result.findings:
        if f.current and f.severity.rank >= Severity.WARNING.rank:
            assert f.action is not Action.NONE or f.severity is Severity.WARNING, f.id
        if f.current and f.action is not Action.NONE:
            assert f.step and len(f.step) > 40, f"{name}: {f.id} has no step"
        for c in f.consequences:
            assert c.step is None, f"{name}: consequence {c.id} of {f.id} has a step"
    if result.worst.rank >= Severity.WARNING.rank:
        assert _acting(result), f"{name}: nothing to do"


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_findings_have_a_repair_of_their_own(analysed, name):
    """Not only the action's frame: every finding id the scenarios show has its own
    repair, a job's restart included."""
    snapshot, result = analysed.scenario(name)
    host = next_steps.Host.of(Facts(snapshot))
    for f in _acting(result):
        assert next_steps.repair(f, host), f"{name}: {f.id} ({f.action.value})"


@pytest.mark.parametrize("name", SCENARIOS)
def test_draining_steps_drain_ack_and_resume(analysed, name):
    result = _result(analysed, name)
    host = result.host.hostname
    for f in _acting(result):
        if f.action in (Action.DRAIN_AND_REPAIR, Action.RESET_GPU):
            assert f"scontrol update nodename={host} state=drain" in f.step
            assert f"gputriage ack {f.id}" in f.step
            assert f"nodename={host} state=resume" in f.step
            assert f"kubectl uncordon {host}" in f.step


def test_fabric_manager_down_installs_the_drivers_version(analysed):
    result = _result(analysed, "fabric-manager-down")
    version = result.host.driver.kernel_module
    assert version and re.fullmatch(r"\d+\.\d+\.\d+", version)
    f = _one(result, "fabric.manager-inactive")
    assert f"nvidia-fabricmanager {version}" in f.step
    assert f"nvidia-fabricmanager-{version.split('.')[0]}={version}-1" in f.step
    assert "systemctl enable --now nvidia-fabricmanager" in f.step
    assert "550.90.07" in f.step  # the fabric manager's own version, from its journal
    assert "fabric.state-not-completed" not in {x.id for x in result.findings if x.step}


def test_fabric_manager_step_follows_the_facts_not_a_literal():
    f = Finding("fabric.manager-inactive", Severity.CRITICAL, "t", "e", Action.FIX_SOFTWARE,
                Blame.NODE, Scope("unit", name="nvidia-fabricmanager"))
    rhel = next_steps.Host(name="n1", os="Rocky Linux 9.3 (Blue Onyx)",
                           driver=DriverVersions("535.183.01", "535.183.01"))
    step = next_steps.step_for(f, rhel)
    assert "nvidia-fabricmanager 535.183.01" in step
    assert "dnf install nvidia-fabric-manager-535.183.01-1" in step
    assert "550" not in step


def test_gpu_fallen_off_bus_names_the_gpu_and_the_ack(analysed):
    result = _result(analysed, "gpu-fallen-off-bus")
    steps = [f.step for f in _acting(result)]
    assert steps and all(s for s in steps)
    for step in steps:
        assert "0000:9a:00.0" in step and "gputriage ack" in step
        assert "--gpu 0000:9a:00.0" in step
        assert "GPU 4 (0000:9a:00.0)" in step  # its place in PCI order: the lost index
        assert "power-cycle" in step and "RMA" in step


def test_driver_mismatch_names_both_versions(analysed):
    result = _result(analysed, "driver-mismatch")
    driver = result.host.driver
    assert driver.kernel_module and driver.userspace and driver.kernel_module != driver.userspace
    step = _one(result, "driver.version-mismatch").step
    assert driver.kernel_module in step and driver.userspace in step
    assert step.index(driver.userspace) < step.index(driver.kernel_module)  # reboot first
    assert "reboot" in step


def test_other_scenarios_carry_their_evidence(analysed):
    hp = _one(_result(analysed, "hugepages-not-reserved"), "hugepages.not-reserved").step
    assert "echo 32768 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages" in hp
    uvm = _one(_result(analysed, "uvm-not-loaded"), "module.nvidia-uvm-missing").step
    assert "modprobe nvidia-uvm" in uvm and "/etc/modules-load.d/" in uvm
    ib = _one(_result(analysed, "ib-port-polling"), "ib.port-not-active").step
    assert "mlx5_3 port 1" in ib and "ibstat mlx5_3 1" in ib
    nccl = _result(analysed, "nccl-socket-fallback")
    socket = _one(nccl, "nccl.socket-transport")
    assert "NCCL_IB_DISABLE=1" in socket.step and "scontrol" not in socket.step
    remap = _result(analysed, "remap-failure")
    for f in _acting(remap):  # the Xid 64 and the failed remap: one cause, one step
        assert "RMA" in f.step and "0000:ba:00.0" in f.step and "serial" in f.step


def test_history_and_acknowledged_findings_take_no_step():
    live = Finding("xid.79", Severity.CRITICAL, "t", "e", Action.DRAIN_AND_REPAIR,
                   Blame.NODE, GPU4)
    past = replace(live, status=Status.PAST, status_note="GPU reset")
    acked = replace(live, status=Status.ACKNOWLEDGED)
    none = Finding("topology.map", Severity.INFO, "t", "e", Action.NONE, Blame.UNKNOWN)
    out = next_steps.fill([live, past, acked, none], None)
    assert [bool(f.step) for f in out] == [True, False, False, False]
    assert "<node>" in out[0].step  # no facts: the host is a placeholder, never a crash


class _Broken:
    """Facts whose every read fails."""

    def maybe(self, name, default=None):
        raise RuntimeError(f"cannot build {name}")


def test_unreadable_facts_never_break_the_check():
    f = Finding("fabric.manager-inactive", Severity.CRITICAL, "t", "e", Action.FIX_SOFTWARE,
                Blame.NODE, Scope("unit", name="nvidia-fabricmanager"))
    out = next_steps.fill([f], _Broken())
    assert out[0].step and "nvidia-fabricmanager" in out[0].step


def _consistent(fid: str, action: Action, scope: Scope = NODE) -> Finding:
    blame = Blame.NODE
    return Finding(fid, Severity.CRITICAL, f"{fid} title", "why", action, blame, scope)


def test_every_rule_finding_and_action_gets_a_step():
    host = next_steps.Host(name="n1", os="Ubuntu 22.04.4 LTS", kernel="5.15.0-105-generic",
                           driver=DriverVersions("550.54.15", "550.54.15"))
    ids = {fid for r in all_rules() for fid in r.produces}
    ids |= {f"xid.{x.code}" for x in all_xids()} | {f"sxid.{x.code}" for x in all_sxids()}
    assert len(ids) > 200
    for fid in sorted(ids):
        for action in next_steps.FRAMES:
            for scope in (NODE, GPU4, Scope("port", name="mlx5_0/1", pci_bus_id="0000:0c:00.0")):
                step = next_steps.step_for(_consistent(fid, action, scope), host)
                assert step and step[0].isupper() and step.endswith("."), (fid, action)
                assert step.split()[0].lower() not in COMMANDS, (fid, action)  # a sentence
                if action in DRAINING_ACTIONS:
                    assert "n1" in step and "gputriage ack" in step or "reboot" in step


def test_catalog_verdicts_get_their_codes_step():
    host = next_steps.Host(name="n1")
    for x in all_xids():
        if x.action is Action.NONE:
            continue
        sev = Severity.CRITICAL if x.action in DRAINING_ACTIONS else x.severity
        blame = Blame.NODE if x.action in DRAINING_ACTIONS else x.blame
        f = Finding(f"xid.{x.code}", sev if sev is not Severity.OK else Severity.INFO, "t",
                    "e", x.action, blame, GPU4)
        assert "0000:9a:00.0" in next_steps.step_for(f, host), x.code


def test_every_known_nccl_warning_gets_its_rows_step(monkeypatch):
    """The known-WARN catalog's next step reaches each of its ids, a row added to the
    table included: not a hand-kept list of ids."""
    rows = nccl_warnings.warnings()
    added = replace(rows[0], id="nccl.added-row", next="Do what the added row says.")
    monkeypatch.setattr(nccl_warnings, "warnings", lambda: (*rows, added))
    host = next_steps.Host(name="n1")
    for w in nccl_warnings.warnings():
        f = Finding(w.id, w.severity, "t", "e", w.action, w.blame, NODE)
        assert next_steps.repair(f, host) == w.next, w.id


def test_per_gpu_repeat_names_every_gpu():
    host = next_steps.Host(name="n1")
    gpus = tuple(Scope("gpu", i, None, f"0000:{i + 16:02x}:00.0") for i in range(2))
    f = replace(_consistent("xid.48", Action.RESET_GPU, gpus[0]), also=gpus[1:])
    step = next_steps.step_for(f, host)
    assert "0000:10:00.0" in step and "0000:11:00.0" in step
    assert "--gpu" not in step  # one ack of the finding covers both GPUs


def test_triage_prints_steps_not_vocabulary_labels(analysed):
    out, err = io.StringIO(), io.StringIO()
    code = main(["triage", str(analysed.scenario_dir("fabric-manager-down"))],
                Environment(stdout=out, stderr=err))
    text = out.getvalue()
    assert code == 2, err.getvalue()
    actions = " ".join(text[text.index("3. Next actions"):].split())
    result = _result(analysed, "fabric-manager-down")
    version = result.host.driver.kernel_module
    assert f"Install nvidia-fabricmanager {version}" in actions
    assert "systemctl enable --now nvidia-fabricmanager" in actions
    assert "fabric.manager-inactive" in actions
    for label in ("upgrade or fix the software", "fix-software:", "fix the configuration"):
        assert label not in actions


def test_identity_from_host_identity():
    class Facts:
        def maybe(self, name, default=None):
            return {"host_identity": HostIdentity(hostname="gpu-9", os="Ubuntu 24.04 LTS",
                                                  driver=DriverVersions("570.86.15"))
                    }.get(name, default)

    host = next_steps.Host.of(Facts())
    assert host.name == "gpu-9" and host.version == "570.86.15"


def test_a_finding_id_has_its_next_step_written_once():
    from gputriage.next_steps.repairs import joined

    def step(f, h):
        return "x"

    assert joined({"a.b": step}, {"a.c": step}) == {"a.b": step, "a.c": step}
    with pytest.raises(ValueError, match="written twice for a.b"):
        joined({"a.b": step}, {"a.b": step})
