"""The drain budget on a real Slurm of 8 GPU nodes on this one machine: one slurmctld,
eight ``slurmd -N gpuN`` with their own ports, spool directories and logs (as Slurm's
own test setups emulate a cluster), started by the test. deploy/slurm/healthcheck.sh
runs for every node at once, as HealthCheckProgram does, and drains through the real
``gputriage drain-guard``, which counts on the real controller (sinfo, scontrol):

* a bad rule firing on every node drains exactly the budget, the others name the breaker;
* a real GPU fault (the result of a real check of a scenario host) on 2 nodes drains both;
* the kill switch, and observe-only (the first-install default), drain none;
* two drains resumed within the hour still count: a third node is refused (``rate``);
* every check released at once by a barrier: the nodes past the budget give their
  drain back, and say so.

Needs root and Debian's slurm-wlm and munge (.ci/run installs them); skipped otherwise."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import slurm_kit

REPO = Path(__file__).resolve().parent.parent
HEALTHCHECK = REPO / "deploy" / "slurm" / "healthcheck.sh"
NODES = [f"gpu{i}" for i in range(1, 9)]
UP_TIMEOUT = 40.0

pytestmark = pytest.mark.slow  # ten daemons and eight health checks at once


class Fleet(slurm_kit.LocalSlurm):
    """Eight GPU nodes of one slurmctld, each its own slurmd, in ``root``; each node's
    check reports what ``inputs/<node>.json`` says."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, NODES, "gputriage-fleet", UP_TIMEOUT)
        self.inputs = root / "inputs"  # <node>.json: what each node's check finds

    def start(self) -> None:
        self.inputs.mkdir()
        super().start()
        # the node's check: what inputs/<node>.json says, exit 2 when it has a critical
        check = self.root / "gputriage"
        check.write_text(
            "#!/bin/sh\n"
            f'if [ "$1" = drain-guard ]; then exec {sys.executable} -m gputriage "$@"; fi\n'
            # the barrier: every node's check waits until all have started (at most 30 s)
            'if [ -n "${GT_BARRIER:-}" ]; then : > "$GT_BARRIER/$SLURMD_NODENAME"; i=0\n'
            '  while [ "$(ls "$GT_BARRIER" | wc -l)" -lt "$GT_BARRIER_N" ] '
            '&& [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; fi\n'
            f'f="{self.inputs}/$SLURMD_NODENAME.json"\n'
            'if [ -s "$f" ]; then cat "$f"; exit 2; fi\n'
            'echo \'{"findings": []}\'; exit 0\n', encoding="utf-8")
        check.chmod(0o755)

    # --- driving it -------------------------------------------------------------

    def reset(self) -> None:
        """Every node back in service, no input left."""
        for node in NODES:
            self.update(node, "resume")
            self.run("scontrol", "update", f"nodename={node}", "comment=")
            (self.inputs / f"{node}.json").unlink(missing_ok=True)
        self.wait(lambda: set(self.states().values()) == {"idle"}, "resume did not take")

    def comments(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-O", "NodeList:|,Comment:", timeout=10).stdout
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)

    def healthcheck_env(self, **settings: str) -> dict[str, str]:
        """The environment of deploy/slurm's scripts on a node, run with this node's
        check (no settings file) and ``settings``."""
        return {**self.env, "GPUTRIAGE": str(self.root / "gputriage"),
                "GPUTRIAGE_HEALTHCHECK_CONF": str(self.root / "absent.conf"),
                "GPUTRIAGE_RESULT_DIR": str(self.results),
                "GPUTRIAGE_KILL_SWITCH": str(self.root / "observe-only"), **settings}

    def check_all(self, **settings: str) -> dict[str, subprocess.CompletedProcess]:
        """healthcheck.sh on every node at once (HealthCheckInterval fires together)."""
        env = self.healthcheck_env(**settings)
        procs = {n: subprocess.Popen(["bash", str(HEALTHCHECK)],
                                     env={**env, "SLURMD_NODENAME": n},
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True) for n in NODES}
        done = {}
        for node, proc in procs.items():
            out, err = proc.communicate(timeout=120)
            done[node] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        return done


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    yield from slurm_kit.started(Fleet, "gt-fleet-")


@pytest.fixture(scope="module")
def gpu_fault(fleet: Fleet) -> dict:
    """The JSON result of a real check of a host whose GPU fell off the bus."""
    snap = fleet.root / "snap"
    built = subprocess.run([sys.executable, "-m", "gputriage", "scenario", "build",
                            "gpu-fallen-off-bus", "-o", str(snap)],
                           capture_output=True, text=True, timeout=120, check=False)
    assert built.returncode == 0, built.stderr
    checked = subprocess.run([sys.executable, "-m", "gputriage", "check", "--json",
                              "--snapshot", str(snap), "--state-dir",
                              str(fleet.root / "state-check")],
                             capture_output=True, text=True, timeout=120, check=False)
    assert checked.returncode == 2, checked.stderr
    return json.loads(checked.stdout)


BAD_RULE = {"findings": [{"id": "rule.misfiring", "severity": "critical",
                          "status": "current", "blame": "node", "title": "a bad rule",
                          "scope": {"kind": "node"}}]}


def _inputs(fleet: Fleet, nodes: list[str], doc: dict) -> None:
    for node in nodes:
        (fleet.inputs / f"{node}.json").write_text(json.dumps(doc), encoding="utf-8")


def test_a_bad_rule_on_every_node_drains_only_the_budget(fleet: Fleet) -> None:
    fleet.reset()
    _inputs(fleet, NODES, BAD_RULE)
    runs = fleet.check_all(GPUTRIAGE_DRAIN="enforce")
    drained = fleet.drained()
    assert len(drained) == 2, (drained, {n: r.stderr for n, r in runs.items()})
    assert all(r.startswith("gputriage CRITICAL: rule.misfiring") for r in drained.values())
    for node, run in runs.items():
        assert run.returncode == 0, run.stderr
        if node not in drained:  # logged with the breaker; the result still critical
            assert ("breaker fleet-fraction" in run.stderr
                    or "breaker rate" in run.stderr), run.stderr
            saved = json.loads((fleet.root / "results" / f"{node}.json").read_text())
            assert saved["findings"][0]["severity"] == "critical"
    # the next round (every node still failing): nothing more
    fleet.check_all(GPUTRIAGE_DRAIN="enforce")
    assert fleet.drained() == drained


def test_a_real_gpu_fault_on_two_nodes_drains_both(fleet: Fleet, gpu_fault: dict) -> None:
    fleet.reset()
    _inputs(fleet, ["gpu3", "gpu6"], gpu_fault)
    runs = fleet.check_all(GPUTRIAGE_DRAIN="enforce")
    drained = fleet.drained()
    assert sorted(drained) == ["gpu3", "gpu6"], {n: r.stderr for n, r in runs.items()}
    assert all("xid.79" in reason for reason in drained.values())


@pytest.mark.parametrize("how", ["kill-switch", "observe-only"])
def test_kill_switch_and_observe_only_drain_none(fleet: Fleet, gpu_fault: dict,
                                                 how: str) -> None:
    fleet.reset()
    _inputs(fleet, NODES, gpu_fault)
    kill = fleet.root / "observe-only"
    settings = {}
    if how == "kill-switch":
        kill.write_text("INC-1234\n", encoding="utf-8")
        settings["GPUTRIAGE_DRAIN"] = "enforce"
    try:
        runs = fleet.check_all(**settings)
    finally:
        with contextlib.suppress(FileNotFoundError):
            kill.unlink()
    assert fleet.drained() == {}
    assert all(f"breaker {how}" in r.stderr for r in runs.values())


def test_a_node_a_job_drained_is_checked_and_resumed(fleet: Fleet) -> None:
    fleet.reset()
    for node, reason in (("gpu7", "Kill task failed"), ("gpu8", "replacing a PSU")):
        fleet.update(node, "drain", reason)
    env = fleet.healthcheck_env(GPUTRIAGE_DRAIN="enforce")
    runs = {n: subprocess.run(["bash", str(HEALTHCHECK.parent / "resume.sh"), "--job-fault"],
                              env={**env, "SLURMD_NODENAME": n}, capture_output=True,
                              text=True, timeout=120, check=False) for n in ("gpu7", "gpu8")}
    assert runs["gpu7"].returncode == 0, runs["gpu7"].stderr
    assert "resumed gpu7: drained for 'Kill task failed'" in runs["gpu7"].stderr
    assert runs["gpu8"].returncode == 1 and "not-a-job" in runs["gpu8"].stderr
    fleet.wait(lambda: fleet.states().get("gpu7") == "idle", "not resumed")
    assert fleet.drained() == {"gpu8": "replacing a PSU"}


def test_drains_resumed_within_the_hour_still_count(fleet: Fleet, gpu_fault: dict) -> None:
    fleet.reset()
    fleet.run("scontrol", "update", "nodename=gpu3", "comment=PSU swapped, INC-7")
    _inputs(fleet, ["gpu3", "gpu6"], gpu_fault)
    fleet.check_all(GPUTRIAGE_DRAIN="enforce")
    assert sorted(fleet.drained()) == ["gpu3", "gpu6"]
    for node in ("gpu3", "gpu6"):  # repaired and resumed; still failing later on
        fleet.update(node, "resume")
    fleet.wait(lambda: set(fleet.states().values()) == {"idle"}, "resume did not take")
    comments = fleet.comments()
    assert comments["gpu3"].startswith("PSU swapped, INC-7 gputriage-drains=")
    assert comments["gpu6"].startswith("gputriage-drains=")
    _inputs(fleet, ["gpu1"], gpu_fault)
    runs = fleet.check_all(GPUTRIAGE_DRAIN="enforce")
    assert fleet.drained() == {}
    assert "breaker rate" in runs["gpu1"].stderr, runs["gpu1"].stderr


def test_every_check_at_once_gives_back_past_the_budget(fleet: Fleet) -> None:
    fleet.reset()
    ctld_log = fleet.log / "slurmctld.log"
    start = ctld_log.stat().st_size
    barrier = fleet.root / "barrier"
    shutil.rmtree(barrier, ignore_errors=True)
    barrier.mkdir()
    # and every drain held up to 3 s for the others, as when the controller is busy:
    # the nodes that read the fleet meanwhile all saw it empty and drain together
    shim = fleet.root / "shim"
    shim.mkdir(exist_ok=True)
    held = fleet.root / "held"
    shutil.rmtree(held, ignore_errors=True)
    held.mkdir()
    real = shutil.which("scontrol", path=slurm_kit.search_path())
    (shim / "scontrol").write_text(
        "#!/bin/sh\n"
        'case "$*" in *state=drain*) : > "$GT_HELD/$$"; i=0\n'
        '  while [ "$(ls "$GT_HELD" | wc -l)" -lt 8 ] && [ $i -lt 60 ]; do sleep 0.05; '
        "i=$((i+1)); done ;; esac\n"
        f'exec {real} "$@"\n', encoding="utf-8")
    (shim / "scontrol").chmod(0o755)
    _inputs(fleet, NODES, BAD_RULE)
    runs = fleet.check_all(GPUTRIAGE_DRAIN="enforce", GT_BARRIER=str(barrier),
                           GT_BARRIER_N=str(len(NODES)), GT_HELD=str(held),
                           PATH=f"{shim}:{fleet.env['PATH']}")
    drained = fleet.drained()
    assert len(drained) <= 2, drained
    # every node the controller drained and that is back in service said it gave it back
    log = ctld_log.read_text(encoding="utf-8", errors="replace")[start:]
    were = set(re.findall(r"node (gpu\d+) reason set to: gputriage", log))
    givers = were - set(drained)
    assert givers, f"no race: only {sorted(were)} drained ({log[-400:]})"
    for node in givers:
        assert "drain given back" in runs[node].stderr, (node, runs[node].stderr)
    assert fleet.comments()[sorted(givers)[0]] in ("", "(null)")
