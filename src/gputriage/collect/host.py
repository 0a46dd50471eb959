"""The live host behind one injectable interface: a root directory, a command
runner with hard timeouts, and a clock. Tests swap in a fake.

Commands never run through a shell, always with ``LC_ALL=C``, in their own
process group so that a timeout kills the whole group. A process stuck in
the kernel (a wedged driver leaves nvidia-smi in uninterruptible sleep)
ignores SIGKILL: we stop waiting for it after a short grace and report the
timeout, we never hang with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

KILL_GRACE_S = 2.0
_CHUNK = 64 * 1024


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


def _drain(stream, buf: _TailBuffer) -> None:
    try:
        while chunk := stream.read(_CHUNK):
            buf.feed(chunk)
    except (OSError, ValueError):
        pass


def run_bounded(argv: list[str], timeout_s: float, cap_bytes: int,
                env: dict[str, str] | None = None) -> CommandOutcome:
    """Run argv with a hard timeout and an output cap that keeps the tail."""
    start = time.monotonic()
    run_env = {**os.environ, **(env or {}), "LC_ALL": "C", "LANG": "C"}
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=run_env,
                                start_new_session=True)
    except FileNotFoundError:
        return CommandOutcome(argv, not_found=True, error="command not found")
    except OSError as exc:
        return CommandOutcome(argv, error=exc.strerror or str(exc))
    buf = _TailBuffer(cap_bytes)
    reader = threading.Thread(target=_drain, args=(proc.stdout, buf), daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=max(timeout_s, 0.001))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        # unkillable (D state): abandon it rather than hang
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=KILL_GRACE_S)
    reader.join(timeout=KILL_GRACE_S if timed_out else timeout_s + KILL_GRACE_S)
    return CommandOutcome(
        argv, output=bytes(buf.data), rc=None if timed_out else proc.returncode,
        duration_s=time.monotonic() - start, truncated=buf.truncated, timed_out=timed_out,
    )


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(OSError):
            proc.kill()


class LiveHost:
    """This machine."""

    def __init__(self, root: str | os.PathLike = "/") -> None:
        self.root = Path(root)

    def run(self, argv: list[str], timeout_s: float, cap_bytes: int) -> CommandOutcome:
        return run_bounded(argv, timeout_s, cap_bytes)

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def nvml_argv(self) -> list[str]:
        return [sys.executable, "-m", "gputriage.collect.nvml_probe"]
