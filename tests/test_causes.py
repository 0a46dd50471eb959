"""One cause, one finding (issue 12): consequences folded into their cause, per-GPU
repeats merged, the cause first in the report."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gputriage.cli import Environment, main
from gputriage.engine import causes
from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.model import (
    Action,
    Blame,
    Evidence,
    Finding,
    Occurrences,
    Scope,
    Severity,
    Status,
    finding_order,
)
from gputriage.rules import all_rules
from gputriage.scenarios import build_scenario, list_scenarios
from gputriage.snapshot.bundle import Snapshot

HOST_SCENARIOS = [s.name for s in list_scenarios() if not s.name.startswith("fleet-")]
FABRIC_BUSES = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]


@pytest.fixture(scope="module")
def scenario_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("scenarios")


def scenario(name: str, root: Path):
    """The analysis of scenario ``name``, built once per module."""
    path = root / name
    if not path.exists():
        build_scenario(name, path, created="2024-05-14T09:30:00+00:00")
    return analyze(Snapshot.load(path))


def gpu(bus: str, index: int | None = None) -> Scope:
    return Scope("gpu", gpu_index=index, pci_bus_id=bus)


NODE = Scope()


def make(fid: str, scope: Scope = NODE, severity: Severity = Severity.CRITICAL,
         title: str = "", action: Action = Action.DRAIN_AND_REPAIR,
         evidence: tuple[Evidence, ...] = (), occurrences: Occurrences | None = None,
         status: Status = Status.CURRENT) -> Finding:
    return Finding(fid, severity, title or f"{fid} on {scope.label()}", "why", action,
                   Blame.NODE, scope, evidence, occurrences=occurrences, status=status)


# --- the declared table ---------------------------------------------------------------------

def test_relations_name_findings_the_rules_produce() -> None:
    produced = {fid for r in all_rules() for fid in r.produces}
    for rel in causes.RELATIONS:
        assert rel.cause in produced and rel.consequence in produced, rel
        assert rel.match in (causes.SAME_GPU, causes.ANYWHERE) and rel.why, rel
    pairs = [(r.cause, r.consequence) for r in causes.RELATIONS]
    assert len(pairs) == len(set(pairs))


def test_relations_have_no_cycle() -> None:
    edges: dict[str, set[str]] = {}
    for rel in causes.RELATIONS:
        edges.setdefault(rel.cause, set()).add(rel.consequence)

    def reaches(start: str, goal: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n}))
                   for n in edges.get(start, ()))

    assert not [c for c in edges if reaches(c, c)]


# --- folding, on findings made here ---------------------------------------------------------

def test_consequence_folds_only_on_the_same_gpu() -> None:
    a, b = gpu("0000:9a:00.0"), gpu("0000:ab:00.0")
    out = causes.fold([make("gpu.missing", a), make("xid.79", a), make("gpu.missing", b)])
    assert [(f.id, f.scope) for f in out] == [("xid.79", a), ("gpu.missing", b)]
    assert [c.id for c in out[0].consequences] == ["gpu.missing"]


def test_chain_goes_to_the_root_cause_and_the_table_order_decides() -> None:
    a = gpu("0000:9a:00.0")
    out = causes.fold([make("nvidia-smi.gpu-lost", a), make("gpu.missing", a),
                       make("xid.79", a)])
    assert [f.id for f in out] == ["xid.79"]
    assert sorted(c.id for c in out[0].consequences) == ["gpu.missing", "nvidia-smi.gpu-lost"]
    alone = causes.fold([make("nvidia-smi.gpu-lost", a), make("gpu.missing", a)])
    assert [(f.id, [c.id for c in f.consequences]) for f in alone] == [
        ("gpu.missing", ["nvidia-smi.gpu-lost"])]


def test_history_does_not_explain_a_current_failure() -> None:
    a = gpu("0000:9a:00.0")
    out = causes.fold([make("xid.79", a, status=Status.PAST), make("gpu.missing", a)])
    assert [f.id for f in out] == ["xid.79", "gpu.missing"]


def test_a_cause_logged_after_its_consequence_does_not_explain_it() -> None:
    a = gpu("0000:ab:00.0")
    early = Occurrences(1, "2024-05-14T04:00:00+00:00", "2024-05-14T04:00:00+00:00")
    late = Occurrences(1, "2024-05-14T05:00:00+00:00", "2024-05-14T05:00:00+00:00")
    before = causes.fold([make("xid.48", a, occurrences=late),
                          make("xid.63", a, occurrences=early)])
    assert [f.id for f in before] == ["xid.48", "xid.63"]
    after = causes.fold([make("xid.48", a, occurrences=early),
                         make("xid.63", a, occurrences=late)])
    assert [f.id for f in after] == ["xid.48"]


def test_cause_takes_the_worst_severity_and_its_action() -> None:
    cons = make("nccl.busbw-low", severity=Severity.CRITICAL, action=Action.FIX_CONFIG)
    cause = make("nccl.socket-transport", severity=Severity.INFO, action=Action.NONE)
    out = causes.fold([cons, cause])
    assert len(out) == 1
    assert (out[0].severity, out[0].action) == (Severity.CRITICAL, Action.FIX_CONFIG)


def test_only_a_critical_pcie_error_explains_a_fallen_gpu() -> None:
    a = gpu("0000:02:00.0")
    corrected = make("kernel.pcie-aer", a, Severity.INFO, action=Action.NONE)
    assert len(causes.fold([corrected, make("xid.79", a)])) == 2
    fatal = make("kernel.pcie-aer", a)
    assert [f.id for f in causes.fold([fatal, make("xid.79", a)])] == ["kernel.pcie-aer"]


# --- per-GPU repeats ------------------------------------------------------------------------

def test_repeats_merge_with_a_title_naming_the_gpus() -> None:
    found = [make("fabric.state-not-completed", gpu(bus, i), action=Action.FIX_CONFIG,
                  title=f"GPU {i} (NVIDIA H100 80GB HBM3): NVLink fabric state In Progress "
                        "(status N/A)",
                  evidence=(Evidence("nvidia_smi_q", ("State : In Progress",)),
                            Evidence("nvidia_smi_q", (f"GPU {bus}",))))
             for i, bus in reversed(list(enumerate(FABRIC_BUSES)))]
    (one,) = causes.fold(found)
    assert one.title == "NVLink fabric state In Progress (status N/A) on 8 GPUs (0-7)"
    assert one.scope.gpu_index == 0 and [s.gpu_index for s in one.also] == list(range(1, 8))
    shared = [e for e in one.evidence if e.lines == ("State : In Progress",)]
    assert len(shared) == 1 and shared[0].note == "GPUs 0-7"
    assert len(one.evidence) == 9 and one.evidence[1].note == "GPU 0"


def test_repeats_merge_counts_and_times() -> None:
    def xid(bus: str, n: int, first: str, last: str) -> Finding:
        return make("xid.119", gpu(bus), title=f"Xid 119 on GPU {bus}: GSP firmware RPC "
                    f"timeout ({n} event{'s' if n > 1 else ''})",
                    occurrences=Occurrences(n, first, last))

    (one,) = causes.fold([xid("0001:96:00.0", 3, "2024-05-14T02:00:00", "2024-05-14T09:00:00"),
                          xid("0001:6c:00.0", 1, "2024-05-14T01:00:00", "2024-05-14T01:00:00")])
    assert one.title == ("Xid 119 on 2 GPUs (0001:6c:00.0, 0001:96:00.0): GSP firmware RPC "
                         "timeout (4 events)")
    assert one.occurrences == Occurrences(4, "2024-05-14T01:00:00", "2024-05-14T09:00:00")


def test_repeats_differing_in_detail_keep_each_detail() -> None:
    found = [make("xid.45", gpu(bus), title=f"Xid 45 on GPU {bus}: follow-on of Xid {code} "
                  "(1 event)", occurrences=Occurrences(1))
             for bus, code in (("0000:97:00.0", 145), ("0000:dc:00.0", 149))]
    (one,) = causes.fold(found)
    assert one.title == ("Xid 45 on 2 GPUs (0000:97:00.0, 0000:dc:00.0): follow-on of Xid "
                         "145 / 149 (2 events)")


def test_different_severity_action_or_status_do_not_merge() -> None:
    a, b = gpu("0000:18:00.0", 0), gpu("0000:2a:00.0", 1)
    assert len(causes.fold([make("xid.31", a), make("xid.31", b, Severity.WARNING,
                                                     action=Action.PLAN_REPAIR)])) == 2
    assert len(causes.fold([make("xid.31", a), make("xid.31", b, status=Status.PAST)])) == 2
    assert len(causes.fold([make("kernel.link-down", Scope("nic", name="eth0")),
                            make("kernel.link-down", Scope("nic", name="ib1"))])) == 2


def test_fold_is_deterministic_and_fast() -> None:
    import time

    many = [make(f"xid.{code}", gpu(f"0000:{bus:02x}:00.0", bus % 8),
                 occurrences=Occurrences(1, f"2024-05-14T00:{bus % 60:02d}:00"))
            for code in range(40) for bus in range(250)]
    many += [make("gpu.missing", gpu(f"0000:{bus:02x}:00.0")) for bus in range(250)]
    start = time.perf_counter()
    out = causes.fold(many)
    assert time.perf_counter() - start < 5
    assert out == causes.fold(list(many))
    assert len(out) == 41
    # indexes shared by several bus ids name no GPU: the bus ids do, the first eight
    assert out[0].title.startswith("xid.0 on 250 GPUs (0000:00:00.0, 0000:08:00.0, ")
    assert out[0].title.endswith(" and 242 more)")


# --- the scenarios --------------------------------------------------------------------------

def test_fabric_manager_down_is_one_critical(scenario_dir) -> None:
    result = scenario("fabric-manager-down", scenario_dir)
    critical = [f for f in result.findings if f.current and f.severity is Severity.CRITICAL]
    assert [f.id for f in critical] == ["fabric.manager-inactive"]
    # the eight GPUs' states are one merged consequence (scope GPU 0, also GPUs 1-7)
    (states,) = critical[0].consequences
    assert states.id == "fabric.state-not-completed" and len(states.also) == 7
    assert sorted(s.pci_bus_id for s in states.scopes) == FABRIC_BUSES
    assert states.title.endswith("on 8 GPUs (0-7)") and states.evidence
    assert [g.severity for g in result.gpus] == [Severity.CRITICAL] * 8


def test_gpu_fallen_off_bus_is_one_critical(scenario_dir) -> None:
    result = scenario("gpu-fallen-off-bus", scenario_dir)
    critical = [f for f in result.findings if f.current and f.severity is Severity.CRITICAL]
    assert [f.id for f in critical] == ["xid.79"]
    assert sorted(c.id for c in critical[0].consequences) == ["gpu.missing",
                                                              "nvidia-smi.gpu-lost"]
    assert all(c.evidence for c in critical[0].consequences)
    rows = {g.pci_bus_id: g.severity for g in result.gpus}
    assert rows.pop("0000:9a:00.0") is Severity.CRITICAL
    assert set(rows.values()) == {Severity.OK}


def test_json_carries_the_consequences(scenario_dir) -> None:
    scenario("gpu-fallen-off-bus", scenario_dir)
    out = io.StringIO()
    main(["analyze", "--json", str(scenario_dir / "gpu-fallen-off-bus")],
         Environment(stdout=out, stderr=io.StringIO()))
    doc = json.loads(out.getvalue())
    (xid,) = [f for f in doc["findings"] if f["id"] == "xid.79"]
    assert sorted(c["id"] for c in xid["consequences"]) == ["gpu.missing",
                                                           "nvidia-smi.gpu-lost"]
    assert all(c["evidence"] for c in xid["consequences"])
    assert not {"gpu.missing", "nvidia-smi.gpu-lost"} & {f["id"] for f in doc["findings"]}


@pytest.mark.parametrize("name", HOST_SCENARIOS)
def test_no_two_current_findings_share_an_id(name: str, scenario_dir) -> None:
    result = scenario(name, scenario_dir)
    ids = [f.id for f in result.findings if f.current]
    assert len(ids) == len(set(ids)), sorted(ids)


# --- the corpus ------------------------------------------------------------------------------

def test_cause_opens_the_report_on_a_real_log(corpus) -> None:
    """The Xid 79 sorted after the GSP findings by id; by severity then time it leads."""
    result = analyze(load_input(str(corpus.sample(
        "nolebase-h100-syslog-nvswitch-probe-fallen-off-bus").path)))
    first = result.sorted_findings()[0]
    assert first.id == "xid.79" and first.scope.pci_bus_id == "0000:5d:00.0"
    (gsp,) = [f for f in result.findings if f.id == "driver.gsp-firmware-missing"]
    assert {s.pci_bus_id for s in gsp.scopes} == {"0000:18:00.0", "0000:2a:00.0"}


def test_surprise_down_then_xid79_is_one_finding(corpus) -> None:
    result = analyze(load_input(str(corpus.sample("gpuburn1-tesla-aer").path)))
    critical = [f for f in result.findings if f.severity is Severity.CRITICAL]
    assert [f.id for f in critical] == ["kernel.pcie-aer"]
    assert [c.id for c in critical[0].consequences] == ["xid.79"]


def test_folded_companions_on_real_logs(corpus) -> None:
    xid48 = analyze(load_input(str(corpus.sample("rtxpro6000-blackwell-xid48").path)))
    (dbe,) = [f for f in xid48.findings if f.id == "xid.48"]
    assert "xid.171" in {c.id for c in dbe.consequences}
    rebar = analyze(load_input(str(corpus.sample("ogkm862-rtx5090-no-devices").path)))
    (init,) = [f for f in rebar.findings if f.id == "driver.gpu-init-failed"]
    assert [c.id for c in init.consequences] == ["nvidia-smi.no-devices"]


def test_uptime_seconds_order_numerically() -> None:
    late = make("xid.79", gpu("0000:01:00.0"), occurrences=Occurrences(1, "1000.25"))
    early = make("xid.13", gpu("0000:02:00.0"), occurrences=Occurrences(1, "999.5"))
    assert sorted([late, early], key=finding_order) == [early, late]
