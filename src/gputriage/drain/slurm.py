"""The fleet as Slurm sees it, and draining through it: ``sinfo`` for the GPU nodes and
those out of service (with the reason and its time, set by slurmctld), ``scontrol`` to
drain and to give a drain back. Every command runs without a shell, under a timeout."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from datetime import datetime

from gputriage.drain.policy import Fleet, OutNode, is_ours

__all__ = ["Runner", "SlurmError", "SlurmFleet"]

Runner = Callable[[Sequence[str], float], tuple[int, str, str]]
OUT_STATES = ("drain", "drng", "drained", "draining", "down", "fail", "failing", "maint")


class SlurmError(Exception):
    """sinfo or scontrol could not be run or failed (one line)."""


def run_command(argv: Sequence[str], timeout_s: float) -> tuple[int, str, str]:
    """Run ``argv`` (no shell) under ``timeout_s``: (exit status, stdout, stderr)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, errors="replace",
                              timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: timed out after {timeout_s:g} s"
    except OSError as exc:
        return 126, "", f"{argv[0]}: {exc.strerror or exc}"
    return proc.returncode, proc.stdout, proc.stderr


def parse_time(text: str) -> datetime | None:
    """sinfo's ``%H`` (``2026-12-06T16:00:00``, the controller's local time)."""
    text = text.strip()
    if not text or text.lower() in ("unknown", "none", "n/a"):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


class SlurmFleet:
    """The GPU nodes of a Slurm cluster (or of ``partition``)."""

    def __init__(self, runner: Runner = run_command, timeout_s: float = 20.0,
                 partition: str | None = None) -> None:
        self.runner = runner
        self.timeout_s = timeout_s
        self.partition = partition

    def _run(self, *argv: str) -> str:
        rc, out, err = self.runner(argv, self.timeout_s)
        if rc != 0:
            why = (err.strip().splitlines() or [f"exit {rc}"])[-1]
            raise SlurmError(f"{' '.join(argv[:3])}: {why}")
        return out

    def _where(self) -> list[str]:
        return ["-p", self.partition] if self.partition else []

    def read(self) -> Fleet:
        """The GPU nodes (those with a ``gpu`` GRES; every node when none has one) and,
        of them, those out of service, with their reason and its time."""
        nodes: dict[str, tuple[str, str]] = {}  # name -> (gres, state)
        for line in self._run("sinfo", "-h", "-N", *self._where(),
                              "-o", "%N|%G|%t").splitlines():
            name, _, rest = line.strip().partition("|")
            gres, _, state = rest.partition("|")
            if name:
                nodes[name] = (gres, state.strip().lower())
        gpu = {n for n, (gres, _) in nodes.items() if "gpu" in gres.lower()}
        counted = gpu or set(nodes)
        out: dict[str, OutNode] = {}
        for line in self._run("sinfo", "-h", "-R", "-N", *self._where(),
                              "-o", "%N|%H|%E").splitlines():
            name, _, rest = line.strip().partition("|")
            when, _, reason = rest.partition("|")
            if name in counted and name not in out:
                out[name] = OutNode(name, parse_time(when), is_ours(reason), reason.strip())
        for name in sorted(counted - set(out)):
            state = nodes[name][1].rstrip("*~#!%$@^-")
            if state in OUT_STATES:
                out[name] = OutNode(name, None, False, state)
        return Fleet(len(counted), tuple(sorted(out.values(), key=lambda n: n.name)))

    def drain(self, node: str, reason: str) -> None:
        self._run("scontrol", "update", f"nodename={node}", "state=drain",
                  f"reason={reason}")

    def give_back(self, node: str) -> None:
        """Undo a drain of ours (the node returns to service as it was)."""
        self._run("scontrol", "update", f"nodename={node}", "state=resume")
