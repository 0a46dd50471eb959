"""The Kubernetes cordon recipe (deploy/kubernetes/cordon.yaml's command) against a
replayed API of 64 GPU Nodes, through the official client: a bad rule firing on every
node cordons at most the budget and names the breaker; a real fault on 2 nodes cordons
both; the kill switch and observe-only cordon none."""

from __future__ import annotations

import io
import json
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_replay import ReplayServer

from gputriage.cli import main
from gputriage.commands.common import Environment

pytest.importorskip("kubernetes")

REPO = Path(__file__).resolve().parent.parent
SIZE = 64
XID79 = {"id": "xid.79", "severity": "critical", "status": "current", "blame": "node",
         "scope": {"kind": "gpu", "pci_bus_id": "0000:9a:00.0"}}


def _node(i: int, gpu: bool = True) -> dict[str, Any]:
    name = f"gpu-{i:03d}" if gpu else f"cpu-{i:03d}"
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                         "annotations": {}},
            "spec": {},
            "status": {"capacity": {"cpu": "192", "nvidia.com/gpu": "8" if gpu else "0"}}}


def _results(tmp_path: Path, failing: dict[str, dict[str, Any]]) -> Path:
    out = tmp_path / "results"
    out.mkdir()
    for i in range(SIZE):
        name = f"gpu-{i:03d}"
        finding = failing.get(name)
        (out / f"{name}.rc").write_text("2\n" if finding else "0\n", encoding="utf-8")
        (out / f"{name}.json").write_text(json.dumps(
            {"findings": [finding] if finding else [], "exit_status": 2 if finding else 0}),
            encoding="utf-8")
    return out


def _command() -> list[str]:
    docs = list(yaml.safe_load_all((REPO / "deploy/kubernetes/cordon.yaml").read_text()))
    (job,) = [d for d in docs if d and d["kind"] == "CronJob"]
    (container,) = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    return container["command"]


def _round(server: ReplayServer, tmp_path: Path, results: Path,
           monkeypatch: pytest.MonkeyPatch, **env: str) -> tuple[int, list[str]]:
    """One run of the CronJob's command, with its results volume at ``results``."""
    argv = _command()
    assert argv[:2] == ["gputriage", "drain-guard"]
    args = [str(results) if a == "/results" else a for a in argv[1:]]
    monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig")))
    monkeypatch.setenv("GPUTRIAGE_DRAIN_SETTLE", "0")
    monkeypatch.setenv("GPUTRIAGE_KILL_SWITCH", str(tmp_path / "observe-only"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out, err = io.StringIO(), io.StringIO()
    code = main(args, Environment(stdout=out, stderr=err))
    assert not err.getvalue().strip(), err.getvalue()
    return code, out.getvalue().splitlines()


def _cordoned(server: ReplayServer) -> dict[str, str]:
    return {n["metadata"]["name"]: n["metadata"]["annotations"].get("gputriage/cordoned", "")
            for n in server.kinds["Node"].items if n["spec"].get("unschedulable")}


@pytest.fixture
def server() -> Any:
    nodes = [_node(i) for i in range(SIZE)] + [_node(i, gpu=False) for i in range(4)]
    with ReplayServer({"Node": nodes}, writable=True) as srv:
        yield srv


def test_a_bad_rule_on_every_node_cordons_only_the_budget(server: ReplayServer,
                                                          tmp_path: Path,
                                                          monkeypatch) -> None:
    bad = dict(XID79, id="rule.bad")
    results = _results(tmp_path, {f"gpu-{i:03d}": bad for i in range(SIZE)})
    code, lines = _round(server, tmp_path, results, monkeypatch, GPUTRIAGE_DRAIN="enforce")
    assert code == 0
    cordoned = _cordoned(server)
    assert sorted(cordoned) == ["gpu-000", "gpu-001"]  # max(2, 2 % of 64) per hour
    assert all(note.split(" ", 1)[1] == "gputriage CRITICAL: rule.bad (blame node)"
               for note in cordoned.values())
    refused = [line for line in lines if line.startswith("not drained")]
    assert len(refused) == SIZE - 2
    assert all("breaker rate: 2 GPU nodes taken out for gputriage in the last hour "
               "(limit 2 = max(2, 2 % of 64))" in line for line in refused)
    # the next round, with the same results: still the budget, nothing more
    code, lines = _round(server, tmp_path, results, monkeypatch, GPUTRIAGE_DRAIN="enforce")
    assert sorted(_cordoned(server)) == ["gpu-000", "gpu-001"]
    patches = [r for r in server.requests if r.startswith("PATCH")]
    assert len(patches) == 2


def test_a_real_fault_on_two_nodes_cordons_both(server: ReplayServer, tmp_path: Path,
                                                monkeypatch) -> None:
    failing = {"gpu-017": XID79, "gpu-042": XID79,
               # a job's fault exits 1 at most; here a result says 2 with a job's blame
               "gpu-050": dict(XID79, id="nccl.ib-disabled", blame="job-config")}
    results = _results(tmp_path, failing)
    code, lines = _round(server, tmp_path, results, monkeypatch, GPUTRIAGE_DRAIN="enforce")
    assert sorted(_cordoned(server)) == ["gpu-017", "gpu-042"]
    assert any("gpu-050" in line and "breaker allow-list" in line for line in lines)
    stamp = _cordoned(server)["gpu-017"].split(" ", 1)[0]
    when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert abs(datetime.now(timezone.utc) - when) < timedelta(minutes=1)


def test_the_budget_counts_what_is_already_cordoned(server: ReplayServer, tmp_path: Path,
                                                    monkeypatch) -> None:
    old = (datetime.now(timezone.utc) - timedelta(hours=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for i in range(6):  # 6 of 64 out for gputriage since hours: the 10 % limit (6)
        server.kinds["Node"].patch(f"gpu-{i:03d}", {"spec": {"unschedulable": True},
                                   "metadata": {"annotations": {
                                       "gputriage/cordoned": f"{old} gputriage CRITICAL"}}})
    results = _results(tmp_path, {"gpu-020": XID79})
    for i in range(6):  # not checked since: they stay cordoned
        os.unlink(results / f"gpu-{i:03d}.rc")
    code, lines = _round(server, tmp_path, results, monkeypatch, GPUTRIAGE_DRAIN="enforce")
    assert "gpu-020" not in _cordoned(server)
    *kept, line = lines  # no check since their cordon: they stay
    assert len(kept) == 6 and all("breaker no-check" in k for k in kept)
    assert "breaker fleet-fraction: 6 of 64 GPU nodes already out" in line


@pytest.mark.parametrize("how", ["kill-switch", "observe-only"])
def test_kill_switch_and_observe_only_cordon_none(server: ReplayServer, tmp_path: Path,
                                                  monkeypatch, how: str) -> None:
    results = _results(tmp_path, {"gpu-017": XID79, "gpu-042": XID79})
    if how == "kill-switch":
        (tmp_path / "observe-only").write_text("INC-1234\n", encoding="utf-8")
        env = {"GPUTRIAGE_DRAIN": "enforce"}
    else:
        env = {"GPUTRIAGE_DRAIN": "observe"}  # cordon.yaml's first-install setting
    code, lines = _round(server, tmp_path, results, monkeypatch, **env)
    assert code == 0 and _cordoned(server) == {}
    assert len(lines) == 3 and all(f"breaker {how}" in line for line in lines)
    assert not [r for r in server.requests if r.startswith("PATCH")]


def _rc(results: Path, node: str, rc: int, when: datetime) -> None:
    (results / f"{node}.rc").write_text(f"{rc}\n", encoding="utf-8")
    os.utime(results / f"{node}.rc", (when.timestamp(), when.timestamp()))


def _cordon(server: ReplayServer, node: str, when: datetime, note: str) -> None:
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    server.kinds["Node"].patch(node, {"spec": {"unschedulable": True}, "metadata": {
        "annotations": {"gputriage/cordoned": f"{stamp} {note}",
                        "gputriage/drained-at": stamp}}})


@pytest.mark.parametrize("how", ["enforce", "observe", "kill-switch"])
def test_the_cordon_job_uncordons_what_a_clean_check_or_the_job_explains(
        server: ReplayServer, tmp_path: Path, monkeypatch, how: str) -> None:
    now = datetime.now(timezone.utc).replace(microsecond=0)
    cordoned = now - timedelta(minutes=20)
    for node in ("gpu-001", "gpu-002", "gpu-003", "gpu-004"):
        _cordon(server, node, cordoned, "gputriage CRITICAL: xid.79 (blame node)")
    _cordon(server, "gpu-005", cordoned, "gputriage CRITICAL: nccl.ib-disabled "
            "(blame job-config)")
    server.kinds["Node"].patch("gpu-006", {"spec": {"unschedulable": True}})  # a person's
    results = _results(tmp_path, {})
    _rc(results, "gpu-001", 0, now - timedelta(minutes=5))  # acknowledged and clean since
    _rc(results, "gpu-002", 1, now - timedelta(minutes=5))  # a warning left: clean enough
    _rc(results, "gpu-003", 0, cordoned - timedelta(minutes=1))  # clean before the cordon
    _rc(results, "gpu-004", 2, now - timedelta(minutes=5))  # still broken
    os.unlink(results / "gpu-005.rc")  # the job's: no check needed
    env = {"GPUTRIAGE_DRAIN": "observe" if how == "observe" else "enforce"}
    if how == "kill-switch":
        (tmp_path / "observe-only").write_text("INC-1234\n", encoding="utf-8")
    code, lines = _round(server, tmp_path, results, monkeypatch, **env)
    assert code == 0
    left = sorted(_cordoned(server))
    if how != "enforce":
        assert left == ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-005", "gpu-006"]
        breaker = "observe-only" if how == "observe" else how
        assert lines[0] == f"not uncordoning: breaker {breaker}: " + (
            f"{tmp_path / 'observe-only'} exists: observe-only" if how == "kill-switch"
            else "drains are not enforced")
        assert "gpu-004" in lines[1] and len(lines) == 2  # still failing, not cordoned again
        assert not [r for r in server.requests if r.startswith("PATCH")]
        return
    assert left == ["gpu-003", "gpu-004", "gpu-006"]
    said = {line.split(":", 1)[0]: line for line in lines}
    assert "exited 0" in said["uncordoned gpu-001"]
    assert "job's fault" in said["uncordoned gpu-005"]
    assert "before the cordon" in said["not uncordoned gpu-003"]
    assert "breaker check: its latest check exited 2" in said["not uncordoned gpu-004"]
    assert not any("gpu-006" in line for line in lines)  # a person's cordon: untouched
    nodes = {n["metadata"]["name"]: n for n in server.kinds["Node"].items}
    assert nodes["gpu-006"]["spec"]["unschedulable"]
    # the ledger stays: the uncordoned node's cordon still counts for the rate
    assert nodes["gpu-001"]["metadata"]["annotations"]["gputriage/drained-at"] == \
        cordoned.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_flapping_fleet_cannot_cordon_and_uncordon_past_the_rate(
        server: ReplayServer, tmp_path: Path, monkeypatch) -> None:
    """Every node's check fails, then is clean, then fails again: the rate (2 per hour)
    counts the cordons since uncordoned, so the second wave cordons none."""
    bad = dict(XID79, id="rule.flaky")
    failing = _results(tmp_path, {f"gpu-{i:03d}": bad for i in range(SIZE)})
    enforce = {"GPUTRIAGE_DRAIN": "enforce"}
    _round(server, tmp_path, failing, monkeypatch, **enforce)
    first = sorted(_cordoned(server))
    assert first == ["gpu-000", "gpu-001"]
    for i in range(SIZE):  # clean again
        (failing / f"gpu-{i:03d}.rc").write_text("0\n", encoding="utf-8")
        os.utime(failing / f"gpu-{i:03d}.rc", (time.time() + 5, time.time() + 5))
    code, lines = _round(server, tmp_path, failing, monkeypatch, **enforce)
    assert _cordoned(server) == {} and len([x for x in lines if x.startswith("uncordoned")]) == 2
    for i in range(SIZE):  # and failing again
        (failing / f"gpu-{i:03d}.rc").write_text("2\n", encoding="utf-8")
    code, lines = _round(server, tmp_path, failing, monkeypatch, **enforce)
    assert _cordoned(server) == {}
    assert all("breaker rate: 2 GPU nodes taken out for gputriage in the last hour"
               in line for line in lines)
    # an overflowing cordon given back leaves no mark in the ledger
    nodes = {n["metadata"]["name"]: n for n in server.kinds["Node"].items}
    assert [n for n, node in nodes.items()
            if "gputriage/drained-at" in node["metadata"]["annotations"]] == first
