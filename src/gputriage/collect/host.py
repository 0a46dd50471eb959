"""The live host behind one injectable interface: a root directory, a command
runner with hard timeouts, and a clock. Tests swap in a fake.

Commands never run through a shell, always with ``LC_ALL=C``, in their own
process group and, where the host allows it, their own cgroup (``confine.py``).
The run ends when the leader exits (plus a short grace for the pipe to drain)
or at the timeout; then the whole group and cgroup are killed, so a child left
in the background (even one that made a session of its own) can neither hold
the run open nor outlive it; one that left the group is reported. A process
stuck in the kernel (a wedged driver leaves nvidia-smi in uninterruptible
sleep) ignores SIGKILL: we stop waiting for it after a short grace and report
the timeout, we never hang with it.

The tool runs as root from whatever directory the admin is in, so children
never inherit the caller's directory or environment: they run in ``/`` with an
allowlisted environment (see ``child_env``), and the NVML probe runs as a file
under ``python -I`` so that nothing in the current directory or in ``PYTHON*``
variables can be imported in its place.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Protocol

from gputriage.collect.confine import Cell, cgroup_base, open_cell

KILL_GRACE_S = 2.0  # how long a SIGKILLed group may take before it is abandoned
DRAIN_GRACE_S = 0.3  # after the leader exits, how long its last output may take to arrive
CHILD_CWD = "/"
# Searched first, so system tools resolve from root-owned directories.
SAFE_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
KEPT_VARS = ("TZ",)  # timestamps in journalctl/dmesg output follow the admin's zone
_CHUNK = 64 * 1024
_POLL_S = 0.05  # how often the leader is checked while its output is quiet
_PROBE = Path(__file__).resolve().with_name("nvml_probe.py")


def _absolute_entries(value: str | None) -> list[str]:
    """The absolute entries of a colon list; empty and relative ones mean the cwd."""
    return [e for e in (value or "").split(":") if e.startswith("/")]


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a child: an allowlist, never the caller's as is.

    PATH is the standard system directories, then the absolute entries of the
    caller's PATH (to find tools installed elsewhere, e.g. under /opt).
    LD_LIBRARY_PATH keeps its absolute entries, as NVML and nvidia-smi may need
    it to find the driver library on hosts without an ld.so.cache entry.
    Everything else (PYTHON*, LD_PRELOAD, IFS, ...) is dropped.
    """
    base = os.environ if base is None else base
    env = {"PATH": ":".join(_unique([*SAFE_PATH, *_absolute_entries(base.get("PATH"))]))}
    libs = _unique(_absolute_entries(base.get("LD_LIBRARY_PATH")))
    if libs:
        env["LD_LIBRARY_PATH"] = ":".join(libs)
    env.update({k: base[k] for k in KEPT_VARS if k in base})
    env.update(LC_ALL="C", LANG="C")
    return env


@dataclass
class CommandOutcome:
    """What running one argv produced."""

    argv: list[str]
    output: bytes = b""
    rc: int | None = None
    duration_s: float = 0.0
    truncated: bool = False
    timed_out: bool = False
    not_found: bool = False
    error: str | None = None  # OS error text when it could not start
    # processes of the command still there when it ended: left its group, or unkillable
    strays: list[str] = field(default_factory=list)
    confined: str = ""  # "cgroup" or "process group" (collect/confine.py)


class Host(Protocol):
    """What collection needs from a machine."""

    root: Path

    def run(self, argv: list[str], timeout_s: float, cap_bytes: int) -> CommandOutcome: ...

    def now(self) -> datetime: ...

    def nvml_argv(self) -> list[str]: ...


class _TailBuffer:
    """Keeps the last ``cap`` bytes written to it (the tail of a log matters)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.cap:
            del self.data[: len(self.data) - self.cap]
            self.truncated = True


def _open_pidfd(pid: int) -> int | None:
    """A descriptor that turns readable when ``pid`` exits (Linux 5.3+), else None."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return opener(pid)
    except OSError:
        return None


class _Pipe:
    """Non-blocking reads of a child's output into a tail buffer. Waits also
    wake up when the leader exits, where the kernel can tell (a pidfd)."""

    def __init__(self, stream: IO[bytes], cap: int, pid: int) -> None:
        self.stream = stream
        self.fd = stream.fileno()
        os.set_blocking(self.fd, False)
        self.buf = _TailBuffer(cap)
        self.eof = False
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.fd, selectors.EVENT_READ)
        self._pidfd = _open_pidfd(pid)
        if self._pidfd is not None:
            self._sel.register(self._pidfd, selectors.EVENT_READ)

    def read_for(self, wait_s: float) -> None:
        """Wait at most ``wait_s`` for output (read one chunk) or the leader's exit."""
        wait_s = max(wait_s, 0.0)
        if not self._sel.get_map():
            time.sleep(wait_s)
            return
        for key, _ in self._sel.select(wait_s):
            if key.fd == self.fd:
                self._read()
            else:  # the leader exited: stays readable, so stop watching it
                self._sel.unregister(key.fd)

    def drain(self, until: float) -> None:
        """Read until EOF or until the monotonic time ``until``."""
        while not self.eof and (left := until - time.monotonic()) > 0:
            self.read_for(left)

    def close(self) -> None:
        self._sel.close()
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
        with contextlib.suppress(OSError):
            self.stream.close()

    def _read(self) -> None:
        try:
            chunk = os.read(self.fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self.buf.feed(chunk)
        else:
            self.eof = True
            self._sel.unregister(self.fd)


def _leader_exited(proc: subprocess.Popen) -> bool:
    """Whether the leader has exited, without reaping it: while it is a zombie
    its pid cannot be reused, so killing its process group stays safe."""
    if proc.returncode is not None:
        return True
    waitid = getattr(os, "waitid", None)
    if waitid is None:
        return proc.poll() is not None
    try:
        return waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored)
        return proc.poll() is not None


def _watch(proc: subprocess.Popen, pipe: _Pipe, until: float) -> bool:
    """Read output until the leader exits (True) or ``until`` passes (False)."""
    while not _leader_exited(proc):
        left = until - time.monotonic()
        if left <= 0:
            return False
        pipe.read_for(min(left, _POLL_S))
    return True


def _start(cell: Cell, argv: list[str], env: dict[str, str]) -> subprocess.Popen | CommandOutcome:
    try:
        return cell.popen(argv, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL, cwd=CHILD_CWD)
    except FileNotFoundError:
        return CommandOutcome(argv, not_found=True, error="command not found")
    except OSError as exc:
        return CommandOutcome(argv, error=exc.strerror or str(exc))


def run_bounded(argv: list[str], timeout_s: float, cap_bytes: int,
                env: dict[str, str] | None = None) -> CommandOutcome:
    """Run argv with a hard timeout and an output cap that keeps the tail.

    ``env`` adds to ``child_env()``; the locale stays C whatever it says.
    """
    start = time.monotonic()
    cell = open_cell()
    proc = _start(cell, argv, {**child_env(), **(env or {}), "LC_ALL": "C", "LANG": "C"})
    if isinstance(proc, CommandOutcome):
        cell.finish(grace_s=0.0)
        return proc
    assert proc.stdout is not None
    pipe = _Pipe(proc.stdout, cap_bytes, proc.pid)
    killed = False
    try:
        exited = _watch(proc, pipe, start + max(timeout_s, 0.001))
        if exited:  # what it wrote just before exiting; a background child may hold the pipe
            pipe.drain(time.monotonic() + DRAIN_GRACE_S)
        cell.kill()  # a timed-out leader, and whatever it left behind
        killed = True
        reaped = exited or _watch(proc, pipe, time.monotonic() + KILL_GRACE_S)
        pipe.drain(time.monotonic() + DRAIN_GRACE_S)
    finally:
        if not killed:  # interrupted (Ctrl-C): still leave nothing behind
            cell.kill()
        pipe.close()
    if reaped:  # a zombie by now: this wait returns at once
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=KILL_GRACE_S)
    # else unkillable (D state): abandoned rather than waited for
    strays = cell.finish(grace_s=KILL_GRACE_S if reaped else DRAIN_GRACE_S)
    return CommandOutcome(
        argv, output=bytes(pipe.buf.data), rc=proc.returncode if exited else None,
        duration_s=time.monotonic() - start, truncated=pipe.buf.truncated,
        timed_out=not exited, strays=[s.describe() for s in strays], confined=cell.how,
    )


class LiveHost:
    """This machine."""

    def __init__(self, root: str | os.PathLike = "/") -> None:
        self.root = Path(root)

    def run(self, argv: list[str], timeout_s: float, cap_bytes: int) -> CommandOutcome:
        return run_bounded(argv, timeout_s, cap_bytes)

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    @property
    def confinement(self) -> str:
        """How each command is held: in a cgroup leaf of its own, or its process group
        only (then a child that makes a session of its own is found by its token)."""
        return "cgroup" if cgroup_base() is not None else "process group"

    def nvml_argv(self) -> list[str]:
        """The probe as a file under isolated mode: neither the cwd nor PYTHON*
        variables nor the user's site-packages reach its sys.path, so only the
        interpreter's own site-packages (where nvidia-ml-py lives) is searched.
        A file rather than ``-m`` works however gputriage itself was made
        importable (regular or editable install, PYTHONPATH, a source tree)."""
        if _PROBE.is_file():
            return [sys.executable, "-I", str(_PROBE)]
        return [sys.executable, "-I", "-m", "gputriage.collect.nvml_probe"]
