"""Forked worker processes for the scans of large files, without an executor: the
kernel logs' (:mod:`gputriage.logscan.blocks`) and the NCCL job logs'
(:mod:`gputriage.nccl.scan`). It imports neither, so the NCCL scan forks its workers
without importing the kernel-log scanner.

Worker ``k`` of ``n`` computes the tasks ``k, k + n, k + 2n ...`` in turn and writes
each pickled result to its own pipe; the caller reads the pipes round robin, so the
results come back in task order. A full pipe makes a worker wait (backpressure), and
no thread, queue or semaphore is involved: starting costs one ``fork`` per worker and
no import of :mod:`multiprocessing`. A worker that dies (a signal, a file cut short
under a mapping) ends its pipe early, which raises :class:`WorkerDied`.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
from collections.abc import Callable, Generator
from typing import Any

from gputriage.io.collector import settle_worker

__all__ = ["ForkWorkers", "WorkerDied"]

_HEADER = struct.Struct("<Q")
PIPE_SIZE = 1 << 20  # a worker's pipe (Linux; 64 KiB by default): results it may send ahead


class WorkerDied(Exception):
    """A worker process ended before it had sent every result."""


class _Failed:
    """An exception a task raised that cannot be pickled, as text."""

    def __init__(self, text: str) -> None:
        self.text = text


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int) -> bytes:
    parts = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise WorkerDied("a worker process ended early")
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _serve(task: Callable[[int], Any], first: int, count: int, step: int, fd: int) -> None:
    """A worker's life: compute its tasks and send each result (or its exception)."""
    for i in range(first, count, step):
        try:
            result: Any = task(i)
        except Exception as exc:  # sent back and raised by the caller
            result = exc
        try:
            payload = pickle.dumps(result, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # whatever fails to pickle
            payload = pickle.dumps(_Failed(f"{type(exc).__name__}: {exc}"))
        _write_all(fd, _HEADER.pack(len(payload)) + payload)


def _widen(fd: int) -> None:
    """Let the pipe at ``fd`` hold ``PIPE_SIZE`` bytes where the system allows it, so that
    a worker goes on while the caller is busy with something else (its imports, say)
    instead of waiting for it to read one result."""
    with contextlib.suppress(ImportError, OSError, AttributeError):  # not Linux; too big
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)


class ForkWorkers:
    """``n`` forked workers for one run of tasks (Linux / POSIX ``fork`` only)."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)

    def run(self, task: Callable[[int], Any], count: int) -> Generator[Any, None, None]:
        """``task(i)`` for ``i`` in ``range(count)``, in order; an exception a task
        raised is raised here, in its place."""
        n = min(self.workers, max(count, 1))
        pids: list[int] = []
        fds: list[int] = []
        try:
            for k in range(n):
                try:
                    r, w = os.pipe()
                    _widen(w)
                    pid = os.fork()
                except OSError as exc:  # no processes or descriptors left: not a read error
                    raise WorkerDied(f"cannot start a worker process ({exc})") from None
                if pid == 0:  # the worker
                    code = 1
                    try:
                        os.close(r)
                        signal.signal(signal.SIGINT, signal.SIG_DFL)
                        settle_worker()  # (fewer collections)
                        _serve(task, k, count, n, w)
                        code = 0
                    finally:
                        os._exit(code)
                os.close(w)
                pids.append(pid)
                fds.append(r)
            for i in range(count):
                fd = fds[i % n]
                (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
                result = pickle.loads(_read_exact(fd, size))
                if isinstance(result, _Failed):
                    raise WorkerDied(result.text)
                if isinstance(result, BaseException):
                    raise result
                yield result
        finally:
            for fd in fds:
                os.close(fd)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
