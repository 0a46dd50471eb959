"""Severity, action and blame agree on every finding (issue 12).

A draining action (drain-and-repair, reboot-node, reset-gpu) comes only with a
critical finding on the node's side: what drains (exit status 2) and what the report
says to do never disagree, and the job's own faults and settings never drain the node.
Checked on every Xid and SXid catalog row as the kernel rules judge it, on every rule
case of the tests, on every scenario and on every corpus sample.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from declared import rule_case_list
from hostkit import run
from kernel_kit import A, judge, other, sxid, xid
from nccl_kit import job_log

from gputriage.cli import Environment, main
from gputriage.engine.analysis import analyze
from gputriage.errors import InputError, ParseError
from gputriage.ingest import load_input
from gputriage.knowledge import xid as catalog
from gputriage.model import DRAINING_ACTIONS, Blame, Finding, Severity, inconsistency
from gputriage.scenarios import build_scenario, list_scenarios
from gputriage.snapshot.bundle import Snapshot

FATAL_WORD = re.compile(r"(?<!non-)(?<!non)\bfatal\b", re.IGNORECASE)


def every(findings: Iterable[Finding]) -> Iterator[Finding]:
    """Each finding and, depth first, the consequences folded into it."""
    for f in findings:
        yield f
        yield from every(f.consequences)


def problems(findings: Iterable[Finding]) -> list[str]:
    """What is wrong with the verdicts of ``findings``: empty when they all agree."""
    out = []
    for f in every(findings):
        why = inconsistency(f.severity, f.action, f.blame)
        if why:
            out.append(f"{f.id}: {why}")
        if f.blame.side == "job" and f.action in DRAINING_ACTIONS:
            out.append(f"{f.id}: the job's side ({f.blame.value}) with {f.action.value}")
    return out


# --- the catalogs, as the kernel rules judge their rows ---------------------------------------

XIDS = [x.code for x in catalog.all_xids()]
SXIDS = [x.code for x in catalog.all_sxids()]
CASES = rule_case_list()  # every RULE_CASES entry of tests/test_rules*.py


def test_every_catalog_row_is_consistent() -> None:
    rows = [("xid", x.code, x.severity, x.action, x.blame) for x in catalog.all_xids()]
    rows += [("sxid", x.code, x.severity, x.action, x.blame) for x in catalog.all_sxids()]
    bad = [(t, c, inconsistency(s, a, b)) for t, c, s, a, b in rows if inconsistency(s, a, b)]
    assert not bad
    assert len(rows) > 500  # both catalogs were read


def _xid_cases(code: int) -> dict[str, list]:
    """One event, a repeat on one GPU, the same from several programs, on two GPUs."""
    return {
        "single": [xid(code)],
        "repeated": [xid(code, t=float(i)) for i in range(4)],
        "programs": [xid(code, pid=str(40 + i), name=f"prog{i}", t=60.0 * i)
                     for i in range(3)],
        "two-programs": [xid(code, pid="41", name="a"), xid(code, pid="52", name="b", t=60)],
        "crash-loop": [xid(code, pid=str(40 + i), name="train", t=60.0 * i)
                       for i in range(4)],
        "after-48": [xid(48), xid(code, t=0.5)],
        "earlier-boot": [xid(code, boot=1)],
    }


@pytest.mark.parametrize("code", XIDS)
def test_every_xid_row_gives_a_consistent_finding(code: int) -> None:
    for case, events in _xid_cases(code).items():
        found = judge(events, {A: (0, None)})  # a Finding raises when inconsistent
        assert any(f.id == f"xid.{code}" for f in found), case
        assert not problems(found), (case, problems(found))


def _sxid_events(code: int, printed: str | None, n: int) -> list:
    if printed is not None:
        return [sxid(code, printed, t=float(i)) for i in range(n)]
    line = f"nvidia-nvswitch3: SXid (PCI:0000:07:00.0): {code}, Link 28 error"
    return [other("sxid", line, "0000:07:00.0", t=float(i), code=str(code),
                  switch="nvidia-nvswitch3", link="28") for i in range(n)]


@pytest.mark.parametrize("code", SXIDS)
def test_every_sxid_row_gives_a_consistent_finding(code: int) -> None:
    info = catalog.sxid_info(code)
    assert info is not None
    for printed in ("Fatal", "Non-fatal", None):
        for n in (1, 3):
            [f] = judge(_sxid_events(code, printed, n))
            assert f.id == f"sxid.{code}" and not problems([f]), (printed, n, problems([f]))
            if not info.fatal:
                # the catalog calls it non-fatal: never judged or worded as fatal, whatever
                # the line prints
                assert f.severity is not Severity.CRITICAL, (printed, n)
                assert f.action not in DRAINING_ACTIONS
                assert not FATAL_WORD.search(f.title) and "A fatal" not in f.explanation
            elif info.category == "always-fatal" or printed != "Non-fatal":
                assert f.severity is Severity.CRITICAL, (printed, n)


def test_a_nonfatal_sxid_logged_as_fatal_stays_nonfatal() -> None:
    """22013 (MINION non-fatal) is non-fatal in both of NVIDIA's tables: a line that
    says "Fatal" does not make it critical."""
    [f] = judge([sxid(22013, "Fatal")])
    assert f.severity is Severity.INFO and f.action.value == "none"
    repeated = judge([sxid(22013, "Fatal", t=float(i)) for i in range(3)])
    assert [f.severity for f in repeated] == [Severity.WARNING]


def test_sources_that_disagree_follow_the_line_the_driver_printed() -> None:
    """12028: the Fabric Manager guide lists it as non-fatal, NVSentinel resets the fabric
    for it. Logged "Non-fatal", the fabric still runs: a warning that plans the reset;
    logged "Fatal", critical."""
    [f] = judge([sxid(12028, "Non-fatal")])
    assert (f.severity, f.action.value) == (Severity.WARNING, "plan-repair")
    assert "non-fatal" in f.explanation and "RESET_FABRIC" in f.explanation
    [f] = judge([sxid(12028, "Fatal")])
    assert (f.severity, f.action.value) == (Severity.CRITICAL, "reboot-node")


def test_fabric_manager_nonfatal_sxid_sample_is_a_warning(corpus) -> None:
    """A real fabric manager log: 'detected NVSwitch non-fatal error 12028'."""
    result = analyze(load_input(str(corpus.sample("nvswitch-nonfatal-12028").path)))
    [f] = [f for f in result.findings if f.id == "fabric.manager-errors"]
    assert f.severity is Severity.WARNING and "non-fatal error" in f.title
    assert not FATAL_WORD.search(f.title)
    assert not problems(result.findings)


def test_a_fabric_manager_fatal_line_for_a_nonfatal_code_is_not_critical(tmp_path) -> None:
    log = tmp_path / "fabricmanager.log"
    log.write_text("[Feb 27 2025 15:10:02] [ERROR] [tid 12727] detected NVSwitch fatal error "
                   "22013 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 "
                   "port 61\n")
    [f] = [f for f in analyze(load_input(str(log))).findings
           if f.id == "fabric.manager-errors"]
    assert f.severity is Severity.WARNING and "non-fatal error" in f.title


# --- every rule case, scenario and corpus sample ------------------------------------------

@pytest.mark.parametrize(("rule_id", "sources", "expected"), CASES,
                         ids=[f"{r}->{e}" for r, _, e in CASES])
def test_every_rule_case_is_consistent(rule_id, sources, expected) -> None:
    assert not problems(run(**sources).findings)


@pytest.mark.parametrize("name", [s.name for s in list_scenarios()])
def test_every_scenario_is_consistent(name: str, analysed) -> None:
    result = analysed.result(name)
    assert not problems(result.findings)


@pytest.mark.parametrize("category", [str(n) for n in range(1, 12)])
def test_every_corpus_sample_is_consistent(corpus, analysed, category: str) -> None:
    bad = {}
    for sample in corpus.category(category):
        try:
            _, result = analysed.sample(sample.path)
        except (InputError, ParseError):
            continue  # refused input: no findings to judge
        if found := problems(result.findings):
            bad[sample.name] = found
    assert not bad


# --- the job's own settings are the job's side --------------------------------------------

def cli(*argv: str) -> int:
    return main(list(argv), Environment(stdout=io.StringIO(), stderr=io.StringIO()))


@pytest.fixture(scope="module")
def ib_disabled(tmp_path_factory) -> dict[str, str]:
    """A two-node job log with NCCL_IB_DISABLE=1 in its environment, and a healthy host
    snapshot with active HCAs."""
    root = tmp_path_factory.mktemp("ib-disabled")
    log = root / "job.log"
    log.write_text(job_log(env=("NCCL_IB_DISABLE=1",)))
    return {"log": str(log), "host": str(build_scenario("healthy-8xh100", root / "host"))}


def _socket(findings: list[Finding]) -> Finding:
    return next(f for f in findings if f.id == "nccl.socket-transport")


def test_ib_disabled_by_the_job_is_the_jobs_fault_alone(ib_disabled) -> None:
    f = _socket(analyze(load_input(ib_disabled["log"])).findings)
    assert f.blame is Blame.JOB_CONFIG and f.blame.side == "job"
    assert f.action not in DRAINING_ACTIONS
    assert cli("analyze", ib_disabled["log"]) == 1


def test_ib_disabled_by_the_job_does_not_fail_a_healthy_node(ib_disabled) -> None:
    """The issue's case: critical (this host's HCAs go unused on a two-node job), blamed
    on the job's settings, so the node's check exits 1, not 2 (nothing drains); 2 only
    when --job-faults-fail asks for it."""
    host, log = ib_disabled["host"], ib_disabled["log"]
    result = analyze(Snapshot.load(Path(host)))
    assert result.worst_of("node").rank <= Severity.WARNING.rank  # a healthy host
    for argv in (("analyze", host, log), ("check", "--snapshot", host, log)):
        assert cli(*argv) == 1, argv
        assert cli(argv[0], "--job-faults-fail", *argv[1:]) == 2, argv


def test_ib_disabled_with_the_host_is_critical_on_the_jobs_side(ib_disabled) -> None:
    out = io.StringIO()
    code = main(["analyze", "--json", ib_disabled["host"], ib_disabled["log"]],
                Environment(stdout=out, stderr=io.StringIO()))
    doc = json.loads(out.getvalue())
    [f] = [f for f in doc["findings"] if f["id"] == "nccl.socket-transport"]
    assert (f["severity"], f["blame"], f["action"]) == ("critical", "job-config", "fix-config")
    assert doc["verdicts"]["at_fault"] == "job" and doc["exit_status"] == code == 1


def test_ib_disabled_in_a_real_log_is_the_jobs_side(corpus) -> None:
    path = str(corpus.sample("nccltests188-ib-disable-env").path)
    f = _socket(analyze(load_input(path)).findings)
    assert "NCCL_IB_DISABLE=1" in f.title and f.blame is Blame.JOB_CONFIG
    assert cli("analyze", path) == 1


def test_the_xid_view_has_words_for_every_action_and_blame() -> None:
    from gputriage.model import Action
    from gputriage.views.xidview import ACTION_WORDS, BLAME_WORDS

    assert {a.value for a in Action} <= set(ACTION_WORDS)
    assert {b.value for b in Blame} <= set(BLAME_WORDS)
