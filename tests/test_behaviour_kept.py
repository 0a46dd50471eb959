"""Behaviour is kept (issue 11): what gputriage says of every scenario and corpus sample
equals the summary recorded in tests/fixtures/behaviour_baseline.json (tools/behaviour.py),
except for the differences ALLOWED lists with their reason. The summary is what an expert
reads (issue 30): the verdict, and each finding's id, severity, blame, action, scope,
status and consequences; the rules that could not judge an input that was there. Titles,
evidence and rules skipped for absent inputs are left out, so that rewording a finding or
adding a rule that fires on nothing changes no record (tests/test_golden_reports.py adds
such a rule)."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
from hostkit import snap

from gputriage.engine.analysis import analyze_facts
from gputriage.facts.store import Facts

TOOL = Path(__file__).resolve().parent.parent / "tools" / "behaviour.py"

# {input key: {summary field: why it may differ from the baseline}}
ALLOWED: dict[str, dict[str, str]] = {}


@cache
def behaviour() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gputriage_behaviour", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _baseline(kind: str) -> dict[str, dict]:
    doc = json.loads(behaviour().BASELINE.read_text(encoding="utf-8"))
    return {key: value for key, value in doc.items() if key.startswith(f"{kind}:")}


def _check(before: dict[str, dict], now: dict[str, dict]) -> None:
    assert before, "the baseline holds no input of this kind"
    diff = behaviour().differences(before, now, ALLOWED)
    assert not diff, "behaviour changed:\n" + "\n".join(diff)
    stale = [f"{key}: {field}" for key, fields in ALLOWED.items() if key in before
             for field in fields if before[key].get(field) == now.get(key, {}).get(field)]
    assert not stale, f"ALLOWED differences that no longer differ: {stale}"


def test_scenarios_behave_as_recorded(tmp_path):
    _check(_baseline("scenario"), behaviour().measure(behaviour().scenario_inputs(tmp_path)))


def test_corpus_behaves_as_recorded(corpus):
    _check(_baseline("corpus"), behaviour().measure(behaviour().corpus_inputs(corpus.root)))


# --- the shape of the record -------------------------------------------------------------
DOC = {
    "exit_status": 2, "verdict": "critical",
    "verdicts": {"node": "critical", "job": "ok", "at_fault": "node", "job_faults_fail": False},
    "host": {"hostname": "n1", "rules_run": 40, "kernel": "6.8.0"},
    "gpus": [{"index": 0, "pci_bus_id": "0000:3b:00.0", "serial": "1", "severity": "critical"}],
    "findings": [
        {"id": "xid.79", "severity": "critical", "blame": "node", "action": "drain-and-repair",
         "title": "GPU 0 has fallen off the bus", "explanation": "...", "status": "current",
         "scope": {"kind": "gpu", "gpu_index": 0, "pci_bus_id": "0000:3b:00.0"},
         "also": [{"kind": "gpu", "gpu_index": 1, "pci_bus_id": "0000:5e:00.0"}],
         "evidence": [{"source": "kernel_log", "lines": ["NVRM: Xid (PCI:0000:3b:00): 79"]}],
         "consequences": [{"id": "gpu.missing", "severity": "critical", "title": "lost"}]},
        {"id": "ib.port-down", "severity": "warning", "blame": "node", "action": "plan-repair",
         "title": "mlx5_1 port 1 is down", "status": "past",
         "scope": {"kind": "port", "name": "mlx5_1/1"}, "evidence": []},
    ],
    "skipped": [{"rule": "dcgm.version", "reason": "needs dcgm_version: not in the input"}],
    "unreadable": [],
}


def _reworded(doc: dict) -> dict:
    """``doc`` as a later release may say it: other words, evidence, counts, host facts."""
    doc = copy.deepcopy(doc)
    for f in doc["findings"]:
        f["title"] = f["title"].upper()
        f["explanation"] = "said otherwise"
        f["evidence"] = [{"source": "kernel_log", "lines": ["another line"]}]
    doc["host"]["rules_run"] += 1
    doc["host"]["kernel"] = "6.9.0"
    doc["gpus"][0]["serial"] = "2"
    doc["skipped"].append({"rule": "toy.silent", "reason": "needs job_log: not in the input"})
    return doc


def test_the_record_holds_what_an_expert_reads() -> None:
    tool = behaviour()
    record = tool.summary(DOC)
    assert record == {
        "exit_status": 2, "verdict": "critical", "verdicts": DOC["verdicts"],
        "findings": [
            {"id": "xid.79", "severity": "critical", "blame": "node",
             "action": "drain-and-repair", "scope": ["gpu 0000:3b:00.0", "gpu 0000:5e:00.0"],
             "consequences": ["gpu.missing"]},
            {"id": "ib.port-down", "severity": "warning", "blame": "node",
             "action": "plan-repair", "scope": ["port mlx5_1/1"], "status": "past"}]}
    assert tool.summary(_reworded(DOC)) == record


@pytest.mark.parametrize(("field", "value"), [
    ("severity", "warning"), ("blame", "job"), ("action", "restart-job"), ("status", "past"),
    ("scope", {"kind": "gpu", "gpu_index": 2, "pci_bus_id": "0000:86:00.0"}),
    ("consequences", [{"id": "nvlink.links-down"}])])
def test_the_record_changes_with_what_an_expert_reads(field, value) -> None:
    doc = copy.deepcopy(DOC)
    doc["findings"][0][field] = value
    tool = behaviour()
    assert tool.summary(doc) != tool.summary(DOC)
    assert [line.split(": ", 2)[1] for line in tool.differences(
        {"k": tool.summary(DOC)}, {"k": tool.summary(doc)})] == ["finding gone", "finding new"]


def test_the_record_is_json_with_one_line_per_finding() -> None:
    tool = behaviour()
    record = {"scenario:b": tool.summary(DOC), "corpus:a": tool.summary({**DOC, "findings": []})}
    text = tool.dumps(record)
    assert json.loads(text) == record
    lines = text.splitlines()
    assert lines.index(' "corpus:a": {') < lines.index(' "scenario:b": {')
    for f in record["scenario:b"]["findings"]:
        assert f"   {json.dumps(f)}" in {line.rstrip(",") for line in lines}


def _judged(**sources) -> list[str]:
    facts = Facts(snap(**sources))
    return behaviour().could_not_judge(facts, analyze_facts(facts))


def test_rules_that_could_not_judge_a_source_that_was_there_are_recorded() -> None:
    """The topology rules read ``nvidia-smi topo -m``: when it failed or is garbage they
    could not judge it; when the input has none (or the host lacks the command), they lacked
    an input, which a record leaves out."""
    failed = _judged(failed={"nvidia_smi_topo": "failed"})
    assert "topology.p2p" in failed
    assert _judged(nvidia_smi_topo="garbage\n") == failed
    assert "topology.p2p" not in _judged(failed={"nvidia_smi_topo": "absent"})
    assert "topology.p2p" not in _judged()
    # a rule that also lacks an absent input (the NUMA balancing switch) is not recorded
    assert "topology.numa-balancing" not in failed


@pytest.mark.parametrize("first", [(), ("topology",)], ids=["built-inside", "cached"])
def test_facts_remember_the_sources_they_read(first) -> None:
    """``gpu_nic_map`` reads ``nvidia-smi topo -m`` through the ``topology`` fact, built
    while it is built or earlier."""
    facts = Facts(snap(nvidia_smi_topo="garbage\n"))
    for name in first:
        facts.has(name)
    assert not facts.has("gpu_nic_map")
    assert facts.sources_read("topology") == {"nvidia_smi_topo"}
    assert "nvidia_smi_topo" in facts.sources_read("gpu_nic_map")
    assert facts.sources_read("numa_balancing") == frozenset()  # never asked for
