"""Each collected command in a cell of its own, so that nothing it starts outlives it.

A command runs in its own process group, and the group is killed when the command
ends; but a child that calls ``setsid`` (a daemon, a wrapper's background job) leaves
the group. Where the host allows it, the command also runs in a cgroup v2 leaf of its
own, created under gputriage's own cgroup: killing the leaf (``cgroup.kill``, or each
of its processes while it is frozen) reaches every descendant, whatever session it
made. The child is born in the leaf (gputriage's process steps into the leaf for the
``fork`` and back out, under a lock), so there is no moment when a fast child could
fork outside it.

Where no cgroup can be made (cgroup v1 only, a read-only cgroupfs in a container, a user
without a delegated subtree), each child carries a token in its environment
(:data:`TOKEN_VAR`) and the processes still carrying it after the group kill are found
in ``/proc`` and killed. Both ways, what left the group is reported (a stray), and so is
what survived SIGKILL (a process in uninterruptible sleep: a wedged driver).

Cells still open when gputriage exits (a watch stopped while ``nvidia-smi`` hangs) are
killed then; a leaf that could not be removed (its process is stuck in the kernel) is
removed by a later run once it is empty.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Cell", "LEAF_PREFIX", "TOKEN_VAR", "cgroup_base", "open_cell"]

TOKEN_VAR = "GPUTRIAGE_RUN"  # in each child's environment: who started it
LEAF_PREFIX = "gputriage-run-"  # the cgroup leaves' names: <prefix><pid>-<n>
KILL_ROUNDS = 20  # a frozen leaf is emptied in a few rounds; a stuck process never is
_ROUND_S = 0.05
_CGROUP_FS = "/sys/fs/cgroup"

_spawn_lock = threading.Lock()  # gputriage is in a leaf only while this is held
_open_cells: set[Cell] = set()
_cells_lock = threading.Lock()
_counter = itertools.count(1)
_base_cache: list[Path | None] = []  # [] until probed, then [base or None]
_kept_leaves: set[Path] = set()  # leaves that were not empty when their command ended
_exiting = threading.Event()


@dataclass(frozen=True)
class Stray:
    """A process of a command that was still there when the command ended."""

    pid: int
    name: str
    outside_group: bool  # it had left the command's process group (setsid, setpgid)
    survived: bool = False  # still alive after SIGKILL and the grace

    def describe(self) -> str:
        how = "in a session of its own" if self.outside_group else "in its group"
        fate = "still running after SIGKILL (uninterruptible?)" if self.survived else "killed"
        return f"pid {self.pid} ({self.name}) {how}: {fate}"


@dataclass(eq=False)
class Cell:
    """Where one command runs; :meth:`finish` kills what is left and says what it was."""

    leaf: Path | None  # the cgroup leaf, or None: a process group and a token only
    token: str
    proc: subprocess.Popen | None = None
    strays: list[Stray] = field(default_factory=list)
    _outside: dict[int, str] | None = None
    _closed: bool = False

    @property
    def how(self) -> str:
        return "cgroup" if self.leaf is not None else "process group"

    def popen(self, argv: list[str], env: dict[str, str], **kwargs) -> subprocess.Popen:
        """Start ``argv`` in this cell (its own session, the token in its environment)."""
        env = {**env, TOKEN_VAR: self.token}
        if _exiting.is_set():  # gputriage is exiting: its exit hook has killed every cell
            raise OSError("not started: gputriage is exiting")
        if self.leaf is None:
            self.proc = subprocess.Popen(argv, env=env, start_new_session=True, **kwargs)
        else:
            self.proc = _spawn_in(self.leaf, argv, env, kwargs)
        return self.proc

    def kill(self) -> None:
        """SIGKILL the command's process group and every other process of the cell
        (noting, the first time, which ones had left the group)."""
        pids = self._members()
        if self._outside is None:
            group = self.proc.pid if self.proc is not None else None
            self._outside = {pid: _name(pid) for pid in pids
                             if _pgid(pid) not in (group, None)}
        if self.proc is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        leaf = self.leaf
        if leaf is not None and os.getpid() in _read_pids(leaf / "cgroup.procs"):
            leaf = None  # never kill gputriage itself (it could not step back out)
        elif leaf is not None and _write(leaf / "cgroup.kill", "1"):
            return
        if leaf is not None:  # before Linux 5.14: freeze, so none can fork, then kill
            _write(leaf / "cgroup.freeze", "1")
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def finish(self, grace_s: float) -> list[Stray]:
        """Kill what is left of the cell, wait up to ``grace_s`` for it to go, remove the
        leaf; the strays met (also kept in :attr:`strays`)."""
        if self._closed:
            return self.strays
        self._closed = True
        try:
            if self._outside is None:
                self.kill()
            left = self._wait_empty(grace_s)
            outside = self._outside or {}
            self.strays = [Stray(pid, name, True, survived=pid in left)
                           for pid, name in outside.items()]
            self.strays += [Stray(pid, _name(pid), False, True) for pid in sorted(left)
                            if pid not in outside]
            if self.leaf is not None:
                try:
                    self.leaf.rmdir()
                except OSError:  # a stuck process is in it: at exit, or a later run
                    _kept_leaves.add(self.leaf)
        finally:
            with _cells_lock:
                _open_cells.discard(self)
        return self.strays

    # -- the members, by cgroup or by token -------------------------------------------
    def _members(self) -> set[int]:
        """The live processes of the cell, the leader aside (the caller reaps it)."""
        if self.leaf is not None:
            pids = _read_pids(self.leaf / "cgroup.procs")
        else:
            pids = set(_carrying(self.token, self.proc.pid if self.proc else None))
        pids.discard(os.getpid())
        if self.proc is not None:
            pids.discard(self.proc.pid)
        return {pid for pid in pids if _alive(pid)}

    def _wait_empty(self, grace_s: float) -> set[int]:
        """The members left after ``grace_s`` of killing whatever is still there."""
        until = time.monotonic() + grace_s
        for _ in range(KILL_ROUNDS):
            left = self._members()
            if not left or time.monotonic() >= until:
                return left
            self.kill()
            time.sleep(min(_ROUND_S, max(0.0, until - time.monotonic())))
        return self._members()


def open_cell() -> Cell:
    """A new cell: a cgroup leaf where one can be made, else a process group."""
    token = f"{os.getpid()}-{next(_counter)}"
    base = cgroup_base()
    leaf = None
    if base is not None:
        candidate = base / f"{LEAF_PREFIX}{token}"
        try:
            candidate.mkdir()
            leaf = candidate
        except OSError:
            leaf = None
    cell = Cell(leaf, token)
    with _cells_lock:
        _open_cells.add(cell)
    return cell


def cgroup_base() -> Path | None:
    """The cgroup v2 directory gputriage runs in, when it may make leaves there (probed
    once: made and removed a test leaf); None otherwise."""
    if not _base_cache:
        with _spawn_lock:  # the probe steps in and out of a leaf: never beside a spawn
            if not _base_cache:
                _base_cache.append(_probe_base())
    return _base_cache[0]


def _probe_base() -> Path | None:
    if os.environ.get("GPUTRIAGE_CONFINE") == "group":  # opt out (and tests)
        return None
    base = _own_cgroup_dir()
    if base is None:
        return None
    _remove_stale_leaves(base)
    probe = base / f"{LEAF_PREFIX}{os.getpid()}-probe"
    try:
        probe.mkdir()
    except FileExistsError:
        pass
    except OSError:
        return None
    try:  # a leaf we cannot move into is of no use (a delegated tree's rules)
        if not _move_self(probe):
            return None
        _move_self(base)
        return base
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def _own_cgroup_dir() -> Path | None:
    """Where this process's cgroup v2 directory is mounted, from /proc/self/cgroup
    (``0::/path``) and /proc/self/mountinfo (a ``cgroup2`` mount: /sys/fs/cgroup, or
    /sys/fs/cgroup/unified on a hybrid host)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    own = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
    if own is None or own.endswith(" (deleted)"):
        return None
    for mount in mounts:
        fields = mount.split(" - ", 1)
        left = fields[0].split()
        if len(fields) != 2 or not fields[1].startswith("cgroup2 ") or len(left) < 5:
            continue
        root, point = left[3], left[4]
        rel = os.path.relpath(own, root) if own.startswith(root) else None
        if rel is None or rel.startswith(".."):
            continue
        path = Path(point) / rel if rel != "." else Path(point)
        if (path / "cgroup.procs").is_file():
            return path
    return None


def _remove_stale_leaves(base: Path) -> None:
    """Leaves of gputriage runs that have ended (named by their pid), once empty: rmdir
    fails while a process is still in one."""
    with contextlib.suppress(OSError):
        for leaf in base.iterdir():
            owner = leaf.name[len(LEAF_PREFIX):].partition("-")[0]
            if (leaf.name.startswith(LEAF_PREFIX) and owner.isdigit()
                    and not Path(f"/proc/{owner}").exists()):
                with contextlib.suppress(OSError):
                    leaf.rmdir()


def _spawn_in(leaf: Path, argv: list[str], env: dict[str, str],
              kwargs: dict) -> subprocess.Popen:
    """Popen with the child born in ``leaf``: this process steps into the leaf for the
    fork and back out (a process's children start in its cgroup)."""
    home = leaf.parent
    with _spawn_lock:
        if not _move_self(leaf):
            return subprocess.Popen(argv, env=env, start_new_session=True, **kwargs)
        try:
            return subprocess.Popen(argv, env=env, start_new_session=True, **kwargs)
        finally:
            _move_self(home)


def _move_self(cgroup: Path) -> bool:
    return _write(cgroup / "cgroup.procs", str(os.getpid()))


def _write(path: Path, text: str) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        os.write(fd, text.encode())
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _read_pids(path: Path) -> set[int]:
    try:
        return {int(x) for x in path.read_text().split() if x.isdigit()}
    except OSError:
        return set()


def _carrying(token: str, after: int | None) -> Iterable[int]:
    """The processes whose environment holds ``TOKEN_VAR=token`` (those this user may
    read: all of them as root). Only pids handed out since ``after`` (the leader's) can
    be its descendants: the kernel allocates them in order (``ns_last_pid``), wrapping at
    ``pid_max``, so a busy node's thousands of other processes are not opened."""
    needle = f"\0{TOKEN_VAR}={token}\0".encode()
    for pid in _pids_since(after):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read(1 << 20)
        except OSError:
            continue
        if needle in b"\0" + env:
            yield pid


_PROBE_RANGE = 512  # fewer new pids than this: open them by number, no listing of /proc


def _pids_since(after: int | None) -> Iterable[int]:
    try:
        last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    except (OSError, ValueError):
        last = None
    if after is not None and last is not None and 0 <= last - after <= _PROBE_RANGE:
        return range(after + 1, last + 1)

    def new(pid: int) -> bool:
        if after is None or last is None:
            return True
        return after < pid <= last if last >= after else (pid > after or pid <= last)

    try:
        return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit() and new(int(e.name))]
    except OSError:
        return []


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: [state, ppid, pgrp, ...]."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()


def _alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _pgid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[2]) if fields is not None and len(fields) > 2 else None


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()[:32] or "?"
    except OSError:
        return "?"


@atexit.register
def _kill_open_cells() -> None:
    """At exit (a watch stopped while a command hangs): nothing gputriage started stays."""
    _exiting.set()
    if _spawn_lock.acquire(timeout=1.0):  # a spawn under way ends first
        _spawn_lock.release()
    with _cells_lock:
        cells = list(_open_cells)
    for cell in cells:
        with contextlib.suppress(Exception):
            cell.finish(grace_s=0.5)
    for leaf in list(_kept_leaves):
        with contextlib.suppress(OSError):
            leaf.rmdir()
