"""Forked worker processes for the scans of large files, without an executor: the
kernel logs' (:mod:`gputriage.logscan.blocks`) and the NCCL job logs'
(:mod:`gputriage.nccl.scan`). It imports neither, so the NCCL scan forks its workers
without importing the kernel-log scanner.

The tasks are handed out as they are wanted: the caller writes task numbers into one
pipe that every worker reads (a read of one number from a pipe is atomic), and a worker
takes the next number as soon as it is free. So a worker that shares its core with the
caller or a busy neighbour, or draws the costly tasks, does fewer of them, and the
others never wait for it. Each worker writes each pickled result, with its task number,
to its own pipe; the caller reads whichever pipe is ready and gives the results back in
task order. It hands out numbers at most ``AHEAD`` per worker past the result it is
waiting for, and none while the results it holds exceed a pipe per worker: what is
read ahead stays bounded. A full pipe makes a worker wait (backpressure), and no thread,
queue or semaphore is involved: starting costs one ``fork`` per worker and no import of
:mod:`multiprocessing`. A worker that dies (a signal, a file cut short under a mapping)
loses its task: the results before it come back, then :class:`WorkerDied` is raised.
The result of a task is the same whichever worker computes it.
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

_TASK = struct.Struct("<I")  # a task number, as handed out
_HEADER = struct.Struct("<IQ")  # a result's task number and pickled size
PIPE_SIZE = 1 << 20  # a worker's pipe (Linux; 64 KiB by default): results it may send ahead
AHEAD = 16  # task numbers handed out per worker past the result the caller waits for
_BATCH = 1024  # task numbers written at once (4 KiB: a pipe write that size is atomic)


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


def _read_exact(fd: int, n: int) -> bytes | None:
    """``n`` bytes from ``fd``; None when the pipe ends first."""
    parts = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _serve(task: Callable[[int], Any], tasks: int, fd: int) -> None:
    """A worker's life: take task numbers from ``tasks`` until none is left, compute
    each and send its result (or its exception) to ``fd``."""
    while True:
        taken = os.read(tasks, _TASK.size)
        if len(taken) < _TASK.size:  # the caller handed out the last one (or went away)
            return
        (i,) = _TASK.unpack(taken)
        try:
            result: Any = task(i)
        except Exception as exc:  # sent back and raised by the caller
            result = exc
        try:
            payload = pickle.dumps(result, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # whatever fails to pickle
            payload = pickle.dumps(_Failed(f"{type(exc).__name__}: {exc}"))
        _write_all(fd, _HEADER.pack(i, len(payload)) + payload)


def _widen(fd: int) -> None:
    """Let the pipe at ``fd`` hold ``PIPE_SIZE`` bytes where the system allows it, so that
    a worker goes on while the caller is busy with something else (its imports, say)
    instead of waiting for it to read one result."""
    with contextlib.suppress(ImportError, OSError, AttributeError):  # not Linux; too big
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)


class _Handout:
    """The task numbers handed out to the workers' shared pipe, in order."""

    def __init__(self, fd: int, count: int) -> None:
        self.fd: int | None = fd
        self.count = count
        self.issued = 0

    def upto(self, end: int) -> None:
        """Hand out the numbers below ``end`` (the pipe closed after the last one: the
        workers then end once it is empty)."""
        end = min(end, self.count)
        while self.fd is not None and self.issued < end:
            stop = min(end, self.issued + _BATCH)
            _write_all(self.fd, b"".join(map(_TASK.pack, range(self.issued, stop))))
            self.issued = stop
            if stop == self.count:
                self.stop()

    def stop(self) -> None:
        """Hand out no more: the workers end once they took what is in the pipe."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class ForkWorkers:
    """``n`` forked workers for one run of tasks (Linux / POSIX ``fork`` only)."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)

    def run(self, task: Callable[[int], Any], count: int) -> Generator[Any, None, None]:
        """``task(i)`` for ``i`` in ``range(count)``, in order; an exception a task
        raised is raised here, in its place."""
        if count <= 0:
            return
        n = min(self.workers, count)
        pids: list[int] = []
        fds: list[int] = []
        tasks_r, tasks_w = os.pipe()
        handout = _Handout(tasks_w, count)
        try:
            for _ in range(n):
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
                        os.close(tasks_w)  # (else the pipe of task numbers never ends)
                        signal.signal(signal.SIGINT, signal.SIG_DFL)
                        settle_worker()  # (fewer collections)
                        _serve(task, tasks_r, w)
                        code = 0
                    finally:
                        os._exit(code)
                os.close(w)
                pids.append(pid)
                fds.append(r)
            os.close(tasks_r)
            tasks_r = -1
            yield from _in_order(fds, handout, n)
        finally:
            handout.stop()
            if tasks_r >= 0:
                os.close(tasks_r)
            for fd in fds:
                os.close(fd)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)


def _in_order(fds: list[int], handout: _Handout, workers: int) -> Generator[Any, None, None]:
    """The results the workers send on ``fds``, in task order, as task numbers are
    handed out ahead of them (see the module docstring)."""
    import select

    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    open_fds = set(fds)
    held: dict[int, bytes] = {}  # task number -> its result's pickle
    held_bytes = 0
    ahead, bound = AHEAD * workers, PIPE_SIZE * workers
    for i in range(handout.count):
        # (the one waited for is always handed out; more while what is held is small)
        handout.upto(i + 1 if held_bytes > bound else i + ahead)
        while i not in held:
            if not open_fds:
                raise WorkerDied("a worker process ended early")
            for fd, _event in poller.poll():
                got = _message(fd)
                if got is None:  # the worker ended: it died if task numbers are left
                    poller.unregister(fd)
                    open_fds.discard(fd)
                    handout.stop()  # (the others end once they took what was handed out)
                    continue
                held[got[0]] = got[1]
                held_bytes += len(got[1])
        payload = held.pop(i)
        held_bytes -= len(payload)
        result = pickle.loads(payload)
        if isinstance(result, _Failed):
            raise WorkerDied(result.text)
        if isinstance(result, BaseException):
            raise result
        yield result


def _message(fd: int) -> tuple[int, bytes] | None:
    """A result's task number and pickle from a worker's pipe; None at its end."""
    head = _read_exact(fd, _HEADER.size)
    if head is None:
        return None
    i, size = _HEADER.unpack(head)
    payload = _read_exact(fd, size)
    return None if payload is None else (i, payload)
