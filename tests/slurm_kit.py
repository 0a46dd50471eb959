"""A real Slurm of N nodes on this one machine, for the tests that drive one: munged with
its own key and socket, one slurmctld, and one ``slurmd -N <node>`` a node, each with its
own port, spool directory and log (as Slurm's own test setups emulate a cluster), all in a
temporary directory and on free ports. Needs root and Debian's slurm-wlm and munge
(.ci/run installs them); ``started`` skips the test, saying why, otherwise, and when the
cluster does not come up (with the daemons' log tails)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sinfo", "scontrol", "scancel")  # what the kit itself runs


def search_path() -> str:
    """PATH with the sbin directories where Debian puts the daemons."""
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def missing(*clients: str) -> str | None:
    """Why a local Slurm cannot run here (``clients``: the other tools a test runs)."""
    gone = [t for t in (*DAEMONS, *CLIENTS, *clients) if not shutil.which(t, path=search_path())]
    if gone:
        return f"not installed: {', '.join(gone)} (apt-get install slurm-wlm munge)"
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "a Slurm with SlurmUser=root needs root"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 4) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return f"{path.name}: (none)"
    return f"{path.name}: " + " | ".join(text[-lines:])


class LocalSlurm:
    """``nodes`` of one slurmctld in ``root``, every one a slurmd on this host.

    ``extra_conf``: slurm.conf lines a test adds (Prolog=, ...); ``up_timeout``: how long
    the nodes may take to come idle (and the default of ``wait``)."""

    def __init__(self, root: Path, nodes: Sequence[str], cluster_name: str,
                 up_timeout: float, extra_conf: Sequence[str] = ()) -> None:
        self.root = root
        self.nodes = list(nodes)
        self.cluster_name = cluster_name
        self.up_timeout = up_timeout
        self.extra_conf = list(extra_conf)
        self.host = short_hostname()
        self.log = root / "log"
        self.results = root / "results"  # GPUTRIAGE_RESULT_DIR of the health checks
        self.slurm_conf = root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.daemon_logs: dict[str, Path] = {}  # spawned name -> the log it writes
        self.up = False
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("SLURM", "GPUTRIAGE"))}
        self.env.update(PATH=search_path(), SLURM_CONF=str(self.slurm_conf))

    @property
    def label(self) -> str:
        return "one-node Slurm" if len(self.nodes) == 1 else f"{len(self.nodes)}-node Slurm"

    # --- setup and teardown ---------------------------------------------------

    def start(self) -> None:
        """Start the daemons and wait for every node idle; skip the test if they don't."""
        root = self.root
        for sub in ("munge", "state", "spool", "log", "results"):
            (root / sub).mkdir()
        # munged wants every directory above its socket searchable by all.
        for d in (root, root / "munge"):
            d.chmod(0o755)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        sock = root / "munge" / "munge.sock"
        self._spawn("munged", self.log / "munged.log", "-F", "--force", f"--key-file={key}",
                    f"--socket={sock}", f"--pid-file={root / 'munge' / 'munged.pid'}",
                    f"--seed-file={root / 'munge' / 'seed'}",
                    f"--log-file={self.log / 'munged.log'}")
        self.wait(sock.exists, "munged did not create its socket", timeout=10)
        self.slurm_conf.write_text(self._conf(sock), encoding="utf-8")
        self._spawn("slurmctld", self.log / "slurmctld.log", "-D", "-i")
        for node in self.nodes:
            self._spawn("slurmd", self.slurmd_log(node), "-D", "-N", node)
        try:
            self.wait(lambda: self.states() == dict.fromkeys(self.nodes, "idle"),
                      "the nodes never came idle")
        except TimeoutError as exc:
            self.stop()
            pytest.skip(f"{self.label} did not come up: {exc}")
        self.up = True

    def _conf(self, sock: Path) -> str:
        r = self.root
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={self.host}(127.0.0.1)", f"SlurmctldPort={free_port()}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={sock}",
            # %n: the node's name, for each slurmd its own spool, pid file and log
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool' / '%n'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.log / 'slurmctld.log'}",
            f"SlurmdLogFile={self.log / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/linear", "MpiDefault=none", "ReturnToService=2",
            "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
            "SlurmctldTimeout=10", "SlurmdTimeout=30", *self.extra_conf]
        lines += [f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 "
                  f"Port={free_port()} CPUs=1 State=UNKNOWN" for n in self.nodes]
        lines.append(f"PartitionName=gpu Nodes={','.join(self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def slurmd_log(self, node: str) -> Path:
        return self.log / f"slurmd-{node}.log"

    def _spawn(self, tool: str, log: Path, *args: str) -> None:
        """Start ``tool``; ``log`` is the log it writes (its stdout and stderr go to a
        ``.out`` beside it, read when it wrote no log)."""
        self.daemon_logs[log.stem] = log
        out = log.with_suffix(".out").open("wb")
        self.procs.append(subprocess.Popen(
            [shutil.which(tool, path=search_path()) or tool, *args], env=self.env,
            stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True))
        out.close()

    def wait(self, done: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        """Until ``done()``, at most ``timeout`` (``up_timeout`` by default) and while
        every daemon lives; else TimeoutError with the states and the daemons' log tails."""
        end = time.monotonic() + (self.up_timeout if timeout is None else timeout)
        while time.monotonic() < end:
            if done():
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.2)
        states: object = "(no states)"
        with contextlib.suppress(subprocess.TimeoutExpired):
            states = self.states()
        raise TimeoutError(f"{what}: {states}; " + "; ".join(
            tail(log if log.exists() else log.with_suffix(".out"))
            for log in self.daemon_logs.values()))

    def stop(self) -> None:
        if self.up:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.run("scancel", "--full", "--user=root", timeout=5)
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
        self.up = False

    # --- driving it -------------------------------------------------------------

    def run(self, *argv: str, timeout: float = 60,
            **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env={**self.env, **env}, capture_output=True,
                              text=True, timeout=timeout, check=False)

    def states(self) -> dict[str, str]:
        """sinfo's compact state of each node: idle, drain, alloc, idle*..."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N|%t", timeout=10).stdout
        return dict(line.split("|", 1) for line in out.split() if "|" in line)

    def reasons(self) -> dict[str, str]:
        """The reason of each node that has one (drained, down)."""
        out = self.run("sinfo", "-h", "-R", "-N", "-o", "%N|%E", timeout=10).stdout
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)

    def drained(self) -> dict[str, str]:
        """The drained nodes and their reasons."""
        states, reasons = self.states(), self.reasons()
        return {n: reasons.get(n, "") for n, s in states.items() if s.startswith("drain")}

    def update(self, node: str, state: str, reason: str | None = None) -> None:
        """``scontrol update`` a node's state (resume, drain with a reason)."""
        self.run("scontrol", "update", f"nodename={node}", f"state={state}",
                 *([f"reason={reason}"] if reason is not None else []))


Cluster = TypeVar("Cluster", bound=LocalSlurm)


def started(make: Callable[[Path], Cluster], prefix: str,
            *clients: str) -> Iterator[Cluster]:
    """A module fixture's body: ``make(root)`` started in a fresh directory, yielded,
    then stopped and removed; the test skipped, saying why, where Slurm cannot run."""
    why = missing(*clients)
    if why:
        pytest.skip(f"real Slurm test skipped: {why}")
    # Not under pytest's tmp dir: munged refuses a socket below a private directory,
    # and a Unix socket path must stay short.
    root = Path(tempfile.mkdtemp(prefix=prefix))
    cluster = make(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
