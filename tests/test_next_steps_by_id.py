"""Next steps keyed by finding id (issue 30; issue 32's "a next step per finding id"):
every id a rule can produce has a step of its own, written once (or is an id that only
reports); no finding of the scenarios, the corpus or the catalogs gets a bare frame; and
no step contradicts its finding (a job's fault never drains the node, a hardware fault
is never the application's, a configuration never asks for an RMA, a step names the
host whenever an input does)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from analysed import Analysed

from gputriage import next_steps
from gputriage.engine.analysis import analyze
from gputriage.errors import InputError, ParseError
from gputriage.facts.store import Facts
from gputriage.ingest import load_input
from gputriage.knowledge import nccl_warnings
from gputriage.knowledge.job_messages import catalog
from gputriage.knowledge.xid import all_sxids, all_xids
from gputriage.model import (
    DRAINING_ACTIONS,
    NODE,
    Action,
    Blame,
    DriverVersions,
    Finding,
    Result,
    Scope,
    Severity,
)
from gputriage.next_steps.catalogs import message_id
from gputriage.next_steps.repairs import BY_ID
from gputriage.rules import all_rules
from gputriage.scenarios import list_scenarios
from gputriage.snapshot.bundle import Snapshot

PRODUCIBLE = frozenset(fid for r in all_rules() for fid in r.produces)
SCENARIOS = [s.name for s in list_scenarios() if not s.name.startswith("fleet-")]
CATEGORIES = [str(n) for n in range(1, 12)]  # the corpus's folders 1-nvidia-smi-q ... 11-cuda
GPU = Scope("gpu", 3, None, "0000:5d:00.0")
HOST = next_steps.Host(name="gpu-n1", os="Ubuntu 22.04.4 LTS", kernel="5.15.0-105-generic",
                       driver=DriverVersions("550.54.15", "550.54.15"))
WHERE = ("add a repair keyed by the id to a table in src/gputriage/next_steps/ (repairs.py's "
         "BY_ID joins them; a catalog's id takes its row's step), or add the id to "
         "next_steps/informational.py's REPORT_ONLY if it never asks for an action")

# what a step must not say, by what its finding says
_DRAINS = re.compile(r"state=drain|kubectl cordon|\bRMA\b|power-cycle|^Drain\b|^With .{1,80} "
                     r"drained\b")
_FRAME_DRAINS = re.compile(r"^Drain\b|^With .{1,80} drained\b")
_APPLICATIONS = re.compile(r"fault\S* is the application's|is its program's fault|"
                           r"^Restart the job: ", re.IGNORECASE)
_HARDWARE = re.compile(r"\bRMA\b|open a hardware case|\breseat\b", re.IGNORECASE)
_COMMANDS = {"nvidia-smi", "nvidia-ctk", "kubectl", "systemctl", "modprobe", "dcgmi", "ibstat",
             "lspci", "scontrol", "echo", "apt-get", "dnf", "sysctl", "gputriage", "dmesg"}
_NODE_FINE = re.compile(r"the node (?:is fine|needs nothing|is not at fault)", re.IGNORECASE)


def contradictions(f: Finding, step: str, named: bool) -> list[str]:
    """Why ``step`` cannot be the step of ``f`` (empty when it fits)."""
    found = []
    if f.blame.side == "job" and _DRAINS.search(step):
        found.append("the job's fault, yet the step drains, reboots or repairs the node")
    if f.blame is Blame.UNKNOWN and _FRAME_DRAINS.search(step):
        found.append("whose fault is not known, yet the step drains first")
    if f.action not in DRAINING_ACTIONS and _FRAME_DRAINS.search(step):
        found.append(f"{f.action.value} does not take the node out, yet the step drains it")
    if f.blame in (Blame.NODE, Blame.CONFIG) and _APPLICATIONS.search(step):
        found.append("the node's fault, yet the step calls it the application's")
    if f.action in (Action.FIX_CONFIG, Action.FIX_SOFTWARE) and _HARDWARE.search(step):
        found.append(f"{f.action.value}, yet the step repairs hardware")
    if _NODE_FINE.search(f.explanation) and _DRAINS.search(step):
        found.append("the explanation clears the node, yet the step drains it")
    if step.split(" ", 1)[0].lower() in _COMMANDS:
        found.append("a command where the sentence should start")
    if named and "<node>" in step:
        found.append("an input names the host, yet the step says <node>")
    if not step.endswith(".") or re.search(r"\bNone\b|\{[a-z_][\w.()]*\}|\bthe the\b", step):
        found.append("a sentence gone wrong (None, a {placeholder}, doubled words, no full "
                     "stop)")
    return found


def _problems(findings: list[Finding], host: next_steps.Host, named: bool,
              where: str) -> list[str]:
    problems = []
    for f in findings:
        if f.id in next_steps.REPORT_ONLY and f.action is not Action.NONE:
            problems.append(f"{where}: {f.id} reports only (REPORT_ONLY), yet asks for "
                            f"{f.action.value}")
        if not f.current or f.action is Action.NONE:
            continue
        if next_steps.repair(f, host) is None:
            problems.append(f"{where}: {f.id} ({f.action.value}) gets only its action's frame: "
                            f"{WHERE}")
        step = f.step or ""
        problems += [f"{where}: {f.id}: {why}: {step[:160]}"
                     for why in contradictions(f, step, named)]
    return problems


def test_every_producible_id_has_a_step_by_id():
    missing = sorted(fid for fid in PRODUCIBLE
                     if next_steps.repair_of(fid) is None and fid not in next_steps.REPORT_ONLY)
    assert not missing, f"finding ids without a next step: {', '.join(missing)}: {WHERE}"


def test_report_only_ids_are_producible_and_have_no_step():
    assert next_steps.REPORT_ONLY <= PRODUCIBLE, sorted(next_steps.REPORT_ONLY - PRODUCIBLE)
    both = sorted(fid for fid in next_steps.REPORT_ONLY if next_steps.repair_of(fid))
    assert not both, f"ids that report only, yet have a step: {both}"


def test_every_written_step_answers_an_id_a_rule_produces():
    """A row for an id no rule gives is dead text (a renamed id leaves one behind)."""
    assert not sorted(set(BY_ID) - PRODUCIBLE)


def test_a_new_rule_id_without_a_step_is_named_with_where_to_add_it(monkeypatch):
    from gputriage.rules import base

    ghost = base.Rule("toy.rule", lambda: iter(()), (), (), ("toy.new-finding",))
    monkeypatch.setattr(base, "REGISTRY", [*base.REGISTRY, ghost])
    ids = {fid for r in base.REGISTRY for fid in r.produces}
    missing = [fid for fid in ids if next_steps.repair_of(fid) is None
               and fid not in next_steps.REPORT_ONLY]
    assert missing == ["toy.new-finding"]


def _check_input(snapshot: Snapshot, result: Result, where: str) -> list[str]:
    host = next_steps.Host.of(Facts(snapshot))
    return _problems(result.findings, host, result.host.hostname is not None, where)


def _check_sample(analysed: Analysed, path: Path) -> list[str]:
    try:
        snapshot, result = analysed.sample(path)
    except (InputError, ParseError):
        return []
    return _check_input(snapshot, result, path.name)


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_step_is_its_findings_own(analysed, name):
    assert not _check_input(*analysed.scenario(name), name)


@pytest.mark.parametrize("category", CATEGORIES)
def test_every_corpus_step_is_its_findings_own(corpus, analysed, category):
    problems = [p for s in corpus.category(category) for p in _check_sample(analysed, s.path)]
    assert not problems, "\n".join(problems)


def _catalog_findings() -> list[Finding]:
    """A finding for each verdict a catalog row gives (and, for a row that drains, the
    warning a capped or unconfirmed copy of it gets: DCGM's last Xid)."""
    out = []

    def add(fid: str, severity: Severity, action: Action, blame: Blame, title: str,
            why: str, scope: Scope = GPU) -> None:
        if action is Action.NONE:
            return
        out.append(Finding(fid, severity, title, why, action, blame, scope))
        if action in DRAINING_ACTIONS:
            out.append(Finding(fid, Severity.WARNING, title, why, Action.PLAN_REPAIR, blame,
                               scope))

    for x in all_xids():
        for fid in (f"xid.{x.code}", f"dcgm.xid.{x.code}"):
            add(fid, x.severity, x.action, x.blame, f"Xid {x.code} on GPU: {x.meaning}",
                x.explanation)
    for s in all_sxids():
        add(f"sxid.{s.code}", s.severity, s.action, s.blame, f"SXid {s.code}: {s.meaning}",
            s.explanation, Scope("device", pci_bus_id="0000:05:00.0", name="nvidia-nvswitch0"))
    for msg in catalog():
        fid = msg.id if msg.family != "nvml" else "container.nvml-" + msg.id.split(".", 1)[1]
        if fid in PRODUCIBLE:
            add(fid, msg.severity, msg.action, msg.blame, msg.meaning, msg.cause, NODE)
    for w in nccl_warnings.warnings():
        add(w.id, w.severity, w.action, w.blame, w.title, w.meaning, NODE)
    return out


def test_every_catalog_verdict_gets_its_own_step_that_fits_it():
    findings = [next_steps.fill([f], None)[0] for f in _catalog_findings()]
    assert len(findings) > 500
    host_of = {True: HOST, False: next_steps.Host()}
    problems = []
    for named in (True, False):
        host = host_of[named]
        for f in _catalog_findings():
            step = next_steps.step_for(f, host) or ""
            f = Finding(f.id, f.severity, f.title, f.explanation, f.action, f.blame, f.scope,
                        step=step)
            problems += _problems([f], host, named, "catalog")
    assert not problems, "\n".join(sorted(set(problems))[:40])


def test_message_ids_follow_the_container_rule():
    assert message_id("container.nvml-unknown-error") == "nvml.unknown-error"
    assert message_id("cuda.401") == "cuda.401"


@pytest.mark.parametrize("action,blame,step", [
    (Action.RESTART_JOB, Blame.JOB, "Drain n1 (scontrol update nodename=n1 state=drain), then."),
    (Action.DRAIN_AND_REPAIR, Blame.NODE, "Restart the job: Xid 13 is its program's fault."),
    (Action.FIX_CONFIG, Blame.CONFIG, "Enable the port, or RMA the card."),
    (Action.FIX_SOFTWARE, Blame.CONFIG, "Drain n1 (scontrol ...), then reinstall."),
    (Action.REBOOT_NODE, Blame.UNKNOWN, "Drain n1 (scontrol ...), then reboot it."),
    (Action.FIX_CONFIG, Blame.CONFIG, "Fix the configuration of <node>."),
])
def test_the_contradiction_checks_can_fail(action, blame, step):
    f = Finding("x.y", Severity.CRITICAL, "t", "e", action, blame, NODE)
    assert contradictions(f, step, named=True)


# issue 32's examples of steps their own finding contradicted, on the real captures
@pytest.mark.parametrize("sample,fid,says,never", [
    ("nccl1405-ib-plugin-warn-status12", "nccl.ib-completion-error", "rank or node died first",
     "application's"),
    ("fasterwhisper1259-k8s-cuda-driver-insufficient", "cuda.driver-unseen", "--gpus",
     "upgrade the driver"),
    ("nvpeermem56-gdr-disabled", "nccl.gdr-disabled", "GDRDMA", "Unset"),
    ("nccl2345-after-net-disable-intra", "nccl.gdr-disabled", "NCCL_CROSS_NIC=0",
     "Unset NCCL_CROSS_NIC"),  # the explanation's advice, not the job's fault
    ("ikllama485-rtx6000ada-xid31-fault-pde-then-segfault", "kernel.segfault-in-gpu-library",
     "libcuda", "application's"),
    ("gpud-pr46-xid13-illegal-instr-param-then-xid109", "xid.109", "comes back",
     "application's"),
    ("nccl2241-b200-xid145-xid137", "xid.137", "NVLink errors", "compute-sanitizer"),
    ("bazzite2668-api-mismatch", "driver.version-mismatch", "570.153.02", "<node> ("),
])
def test_a_step_says_what_its_finding_says(corpus, sample, fid, says, never):
    result = analyze(load_input(str(corpus.sample(sample).path)))
    steps = [f.step or "" for f in result.findings if f.id == fid]
    assert steps, [f.id for f in result.findings]
    assert all(says in s and never not in s for s in steps), steps
