"""The Slurm recipes on a real Slurm: a one-node cluster (munged, slurmctld, slurmd)
started in a temporary directory, whose Prolog and Epilog are deploy/slurm's, running the
real ``gputriage check --snapshot`` on scenario hosts. A job's fault does not drain; a GPU
fault drains with a reason naming the finding and its GPU; repair -> ack -> resume stays
resumed at the next prolog; a new event after the acknowledgement drains again.

Needs root and Debian's slurm-wlm and munge (.ci/run installs them); skipped otherwise,
with the reason (and the daemons' log tail when the cluster does not come up)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import slurm_kit

REPO = Path(__file__).resolve().parent.parent
SLURM = REPO / "deploy" / "slurm"
BIN = Path(sys.executable).parent  # the venv's gputriage sits next to its python
UP_TIMEOUT = 30.0
BUS = "0000:9a:00.0"  # GPU 4 of gpu-fallen-off-bus

pytestmark = pytest.mark.slow  # three daemons and real jobs: the second stage of .ci/run


class Cluster(slurm_kit.LocalSlurm):
    """A one-node Slurm in ``root``; the node is this host's short name, and its Prolog
    and Epilog are deploy/slurm's."""

    def __init__(self, root: Path) -> None:
        self.node = slurm_kit.short_hostname()
        super().__init__(root, [self.node], "gputriage-test", UP_TIMEOUT, extra_conf=[
            # Alloc: the prolog runs when the job is allocated, before its first step.
            f"Prolog={root / 'prolog.sh'}", f"Epilog={root / 'epilog.sh'}",
            "PrologFlags=Alloc", "PrologEpilogTimeout=60"])
        self.conf = root / "healthcheck.conf"  # the health check's settings
        self.env.update(GPUTRIAGE_HEALTHCHECK_CONF=str(self.conf))

    # --- setup ------------------------------------------------------------------

    def start(self) -> None:
        for name, mode in (("prolog", "prolog.sh"), ("epilog", "epilog.sh")):
            # Prolog= takes no arguments and slurmd gives it a bare environment: a
            # wrapper names the settings file (a real node uses
            # /etc/default/gputriage-healthcheck) and runs deploy/slurm's script.
            wrapper = self.root / f"{name}.sh"
            # SLURM_CONF: drain-guard's sinfo must find this test's slurm.conf (a real
            # node's is at the default path).
            wrapper.write_text(f"#!/bin/sh\nGPUTRIAGE_HEALTHCHECK_CONF={self.conf}\n"
                               f"SLURM_CONF={self.slurm_conf}\n"
                               # the gputriage under test, when not the venv's install
                               f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}\n"
                               "export GPUTRIAGE_HEALTHCHECK_CONF SLURM_CONF PYTHONPATH\n"
                               f"exec {SLURM / mode}\n",
                               encoding="utf-8")
            wrapper.chmod(0o755)
        super().start()

    # --- driving it -------------------------------------------------------------

    def state(self) -> str:
        """sinfo's compact state of the node: idle, drain, alloc, idle*..."""
        return self.states().get(self.node, "")

    def show(self) -> dict[str, str]:
        """``scontrol show node`` as key=value pairs (Reason keeps its spaces)."""
        out = self.run("scontrol", "show", "node", self.node, timeout=10).stdout
        fields: dict[str, str] = {}
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("Reason="):
                fields["Reason"] = line.removeprefix("Reason=")
                continue
            for item in line.split():
                key, _, value = item.partition("=")
                fields[key] = value
        return fields

    def settle(self) -> str:
        """Wait until no job is left on the node (the epilog done): its state."""
        end = time.monotonic() + UP_TIMEOUT
        while time.monotonic() < end:
            state = self.state()
            queue = self.run("squeue", "-h", "-o", "%i", timeout=10).stdout.strip()
            if state in ("idle", "drain") and not queue:
                return state
            time.sleep(0.2)
        raise AssertionError(f"node never settled: {self.state()}; "
                             f"{slurm_kit.tail(self.slurmd_log(self.node))}")

    def srun_true(self) -> subprocess.CompletedProcess:
        proc = self.run("srun", "-N1", "-t", "1", "true")
        self.run("scancel", "--full", "--user=root", timeout=10)
        return proc

    def use(self, snapshot: Path, state: Path, *job_outputs: Path) -> None:
        """Point the health check at a scenario host (and a job's outputs)."""
        args = " ".join([f"--snapshot {snapshot} --state-dir {state}",
                         *(str(p) for p in job_outputs)])
        self.conf.write_text(f"GPUTRIAGE={BIN / 'gputriage'}\nGPUTRIAGE_ARGS=\"{args}\"\n"
                             f"GPUTRIAGE_TIMEOUT=60\nGPUTRIAGE_RESULT_DIR={self.results}\n"
                             # the drain envelope enforced (observe-only by default)
                             f"GPUTRIAGE_DRAIN=enforce\n"
                             f"GPUTRIAGE_KILL_SWITCH={self.root / 'observe-only'}\n",
                             encoding="utf-8")

    def result(self) -> dict:
        return json.loads((self.results / f"{self.node}.json").read_text(encoding="utf-8"))

    def resume_sh(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("bash", str(SLURM / "resume.sh"), *args)

    def reset(self) -> None:
        """Back to an idle node before a test: resume it when drained."""
        if self.settle() != "idle":
            self.update(self.node, "resume")
            self.wait(lambda: self.state() == "idle", "resume did not take")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not (BIN / "gputriage").exists():
        pytest.skip(f"real Slurm test skipped: no gputriage next to {sys.executable}")
    yield from slurm_kit.started(Cluster, "gt-slurm-", "srun", "squeue")


def _scenario(name: str, where: Path) -> Path:
    out = where / name
    proc = subprocess.run([str(BIN / "gputriage"), "scenario", "build", name, "-o", str(out)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return out


def _drained_for(cluster: Cluster, *words: str) -> str:
    fields = cluster.show()
    assert "DRAIN" in fields.get("State", ""), fields
    reason = fields.get("Reason", "")
    for word in words:
        assert word in reason, reason
    return reason


def test_healthy_node_runs_jobs(cluster: Cluster, tmp_path: Path) -> None:
    cluster.reset()
    cluster.use(_scenario("healthy-8xh100", tmp_path), tmp_path / "state")
    proc = cluster.srun_true()
    assert proc.returncode == 0, proc.stderr
    assert cluster.settle() == "idle"  # prolog and epilog both passed
    assert cluster.result()["exit_status"] == 0


def test_a_jobs_fault_does_not_drain(cluster: Cluster, tmp_path: Path) -> None:
    cluster.reset()
    job_log = _scenario("nccl-socket-fallback", tmp_path) / "sources" / "nccl_log.txt"
    cluster.use(_scenario("healthy-8xh100", tmp_path), tmp_path / "state", job_log)
    proc = cluster.srun_true()
    assert proc.returncode == 0, proc.stderr
    assert cluster.settle() == "idle"
    result = cluster.result()  # NCCL_IB_DISABLE=1: the job's fault, exit 1 at most
    assert result["exit_status"] == 1
    assert result["verdicts"]["at_fault"] == "job"
    assert result["verdicts"]["node"] == "ok"
    assert any(f["blame"] in ("job", "job-config") and f["severity"] != "ok"
               for f in result["findings"])


def test_gpu_fault_drains_then_ack_resume_then_new_event_drains(cluster: Cluster,
                                                                 tmp_path: Path) -> None:
    cluster.reset()
    lost = _scenario("gpu-fallen-off-bus", tmp_path)
    state = tmp_path / "state"
    cluster.use(lost, state)

    # (c) the prolog fails: the job does not run, the node is drained with our reason.
    proc = cluster.srun_true()
    assert proc.returncode != 0
    assert cluster.settle() == "drain"
    first = _drained_for(cluster, "gputriage CRITICAL", "xid.79", f"GPU {BUS}")
    assert "Prolog error" not in first  # Slurm's own drain keeps the reason set first

    # (d) repair -> ack -> resume: resume.sh acknowledges every current critical with
    # its GPU, checks again and resumes; the next prolog passes and the node stays up.
    proc = cluster.resume_sh("--reason", "reseated GPU 4, INC-4821")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "resumed" in proc.stdout
    cluster.wait(lambda: cluster.state() == "idle", "resume did not take")
    proc = cluster.srun_true()
    assert proc.returncode == 0, proc.stderr
    assert cluster.settle() == "idle"
    findings = {f["id"]: f for f in cluster.result()["findings"]}
    assert findings["xid.79"]["status"] == "acknowledged"
    assert "INC-4821" in findings["xid.79"]["status_note"]
    assert not [f for f in findings.values()
                if f["severity"] == "critical" and f["status"] == "current"]

    # (e) the GPU falls off the bus again, after the acknowledgement: drained again,
    # and resume.sh refuses (a new event outlives any acknowledgement given before it).
    again = tmp_path / "again"
    shutil.copytree(lost, again)
    when = (datetime.now(timezone.utc) + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S")
    with (again / "sources" / "kernel_log.txt").open("a", encoding="utf-8") as fh:
        fh.write(f"{when}+0000 gpu-node-017 kernel: NVRM: Xid (PCI:0000:9a:00): 79, "
                 "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")
    cluster.use(again, state)
    proc = cluster.srun_true()
    assert proc.returncode != 0
    assert cluster.settle() == "drain"
    _drained_for(cluster, "xid.79", f"GPU {BUS}")
    proc = cluster.resume_sh("--reason", "reset once more")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "refused" in proc.stderr and "xid.79" in proc.stderr
    assert cluster.settle() == "drain"
