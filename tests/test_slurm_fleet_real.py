"""The drain budget on a real Slurm of 8 GPU nodes on this one machine: one slurmctld,
eight ``slurmd -N gpuN`` with their own ports, spool directories and logs (as Slurm's
own test setups emulate a cluster), started by the test. deploy/slurm/healthcheck.sh
runs for every node at once, as HealthCheckProgram does, and drains through the real
``gputriage drain-guard``, which counts on the real controller (sinfo, scontrol):

* a bad rule firing on every node drains exactly the budget, the others name the breaker;
* a real GPU fault (the result of a real check of a scenario host) on 2 nodes drains both;
* the kill switch, and observe-only (the first-install default), drain none.

Needs root and Debian's slurm-wlm and munge (.ci/run installs them); skipped otherwise."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HEALTHCHECK = REPO / "deploy" / "slurm" / "healthcheck.sh"
BIN = Path(sys.executable).parent
NODES = [f"gpu{i}" for i in range(1, 9)]
UP_TIMEOUT = 40.0

pytestmark = pytest.mark.slow  # ten daemons and eight health checks at once


def _path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _missing() -> str | None:
    gone = [t for t in ("munged", "slurmctld", "slurmd", "sinfo", "scontrol")
            if not shutil.which(t, path=_path())]
    if gone:
        return f"not installed: {', '.join(gone)} (apt-get install slurm-wlm munge)"
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "a Slurm with SlurmUser=root needs root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Fleet:
    """Eight GPU nodes of one slurmctld, each its own slurmd, in ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = socket.gethostname().split(".")[0]
        self.procs: list[subprocess.Popen] = []
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("SLURM", "GPUTRIAGE"))}
        self.env.update(PATH=_path(), SLURM_CONF=str(root / "slurm.conf"))
        self.inputs = root / "inputs"  # <node>.json: what each node's check finds

    def start(self) -> None:
        root = self.root
        for sub in ("munge", "state", "spool", "log", "inputs", "results"):
            (root / sub).mkdir()
        for d in (root, root / "munge"):
            d.chmod(0o755)  # munged wants every directory above its socket searchable
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        sock = root / "munge" / "munge.sock"
        self._spawn("munged", "-F", "--force", f"--key-file={key}", f"--socket={sock}",
                    f"--pid-file={root / 'munge' / 'munged.pid'}",
                    f"--seed-file={root / 'munge' / 'seed'}",
                    f"--log-file={root / 'log' / 'munged.log'}")
        self._wait(sock.exists, 10, "munged did not create its socket")
        (root / "slurm.conf").write_text(self._conf(sock), encoding="utf-8")
        self._spawn("slurmctld", "-D", "-i")
        for node in NODES:
            self._spawn("slurmd", "-D", "-N", node)
        try:
            self._wait(lambda: self.states() == dict.fromkeys(NODES, "idle"), UP_TIMEOUT,
                       "the nodes never came idle")
        except TimeoutError as exc:
            self.stop()
            pytest.skip(f"8-node Slurm did not come up: {exc}")
        # the node's check: what inputs/<node>.json says, exit 2 when it has a critical
        check = root / "gputriage"
        check.write_text(
            "#!/bin/sh\n"
            f'if [ "$1" = drain-guard ]; then exec {sys.executable} -m gputriage "$@"; fi\n'
            f'f="{self.inputs}/$SLURMD_NODENAME.json"\n'
            'if [ -s "$f" ]; then cat "$f"; exit 2; fi\n'
            'echo \'{"findings": []}\'; exit 0\n', encoding="utf-8")
        check.chmod(0o755)

    def _conf(self, sock: Path) -> str:
        r = self.root
        lines = [
            "ClusterName=gputriage-fleet",
            f"SlurmctldHost={self.host}(127.0.0.1)", f"SlurmctldPort={_free_port()}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={sock}",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool' / '%n'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/linear", "MpiDefault=none", "ReturnToService=2",
            "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
            "SlurmctldTimeout=10", "SlurmdTimeout=30"]
        lines += [f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 "
                  f"Port={_free_port()} CPUs=1 State=UNKNOWN" for n in NODES]
        lines.append(f"PartitionName=gpu Nodes=gpu[1-{len(NODES)}] Default=YES "
                     "MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def _spawn(self, tool: str, *args: str) -> None:
        out = (self.root / "log" / f"{tool}-{len(self.procs)}.out").open("wb")
        self.procs.append(subprocess.Popen([shutil.which(tool, path=_path()) or tool, *args],
                                           env=self.env, stdout=out, stderr=out,
                                           stdin=subprocess.DEVNULL,
                                           start_new_session=True))
        out.close()

    def _wait(self, done, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if done():
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.2)
        tail = (self.root / "log" / "slurmctld.log")
        raise TimeoutError(f"{what}: {self.states()}; " + (
            " | ".join(tail.read_text(errors="replace").splitlines()[-3:])
            if tail.exists() else "no slurmctld log"))

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs.clear()

    # --- driving it -------------------------------------------------------------

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N|%t", timeout=10).stdout
        return dict(line.split("|", 1) for line in out.split() if "|" in line)

    def reasons(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-R", "-N", "-o", "%N|%E", timeout=10).stdout
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)

    def reset(self) -> None:
        """Every node back in service, no input left."""
        for node in NODES:
            self.run("scontrol", "update", f"nodename={node}", "state=resume")
            (self.inputs / f"{node}.json").unlink(missing_ok=True)
        self._wait(lambda: set(self.states().values()) == {"idle"}, UP_TIMEOUT,
                   "resume did not take")

    def check_all(self, **settings: str) -> dict[str, subprocess.CompletedProcess]:
        """healthcheck.sh on every node at once (HealthCheckInterval fires together)."""
        env = {**self.env, "GPUTRIAGE": str(self.root / "gputriage"),
               "GPUTRIAGE_HEALTHCHECK_CONF": str(self.root / "absent.conf"),
               "GPUTRIAGE_RESULT_DIR": str(self.root / "results"),
               "GPUTRIAGE_KILL_SWITCH": str(self.root / "observe-only"), **settings}
        procs = {n: subprocess.Popen(["bash", str(HEALTHCHECK)],
                                     env={**env, "SLURMD_NODENAME": n},
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True) for n in NODES}
        done = {}
        for node, proc in procs.items():
            out, err = proc.communicate(timeout=120)
            done[node] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        return done

    def drained(self) -> dict[str, str]:
        states, reasons = self.states(), self.reasons()
        return {n: reasons.get(n, "") for n, s in states.items() if s.startswith("drain")}


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    why = _missing()
    if why:
        pytest.skip(f"real Slurm fleet test skipped: {why}")
    root = Path(tempfile.mkdtemp(prefix="gt-fleet-"))  # short: a Unix socket path
    f = Fleet(root)
    try:
        f.start()
        yield f
    finally:
        f.stop()
        shutil.rmtree(root, ignore_errors=True)


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
        fleet.run("scontrol", "update", f"nodename={node}", "state=drain",
                  f"reason={reason}")
    env = {**fleet.env, "GPUTRIAGE": str(fleet.root / "gputriage"),
           "GPUTRIAGE_HEALTHCHECK_CONF": str(fleet.root / "absent.conf"),
           "GPUTRIAGE_RESULT_DIR": str(fleet.root / "results"), "GPUTRIAGE_DRAIN": "enforce",
           "GPUTRIAGE_KILL_SWITCH": str(fleet.root / "observe-only")}
    runs = {n: subprocess.run(["bash", str(HEALTHCHECK.parent / "resume.sh"), "--job-fault"],
                              env={**env, "SLURMD_NODENAME": n}, capture_output=True,
                              text=True, timeout=120, check=False) for n in ("gpu7", "gpu8")}
    assert runs["gpu7"].returncode == 0, runs["gpu7"].stderr
    assert "resumed gpu7: drained for 'Kill task failed'" in runs["gpu7"].stderr
    assert runs["gpu8"].returncode == 1 and "not-a-job" in runs["gpu8"].stderr
    fleet._wait(lambda: fleet.states().get("gpu7") == "idle", UP_TIMEOUT, "not resumed")
    assert fleet.drained() == {"gpu8": "replacing a PSU"}
