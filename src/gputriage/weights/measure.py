"""``--measure PATH``: this host's sequential read bandwidth from where the weights lie.

A bounded read: at most ``limit`` bytes of one file (a directory: its largest weights
file), in 8 MiB requests, with ``O_DIRECT`` and a page-aligned buffer so that the page
cache neither helps nor is filled; where the file system refuses ``O_DIRECT`` (tmpfs,
some FUSE and network mounts) the read goes through the cache and the result says so
(a cached file then reads at memory speed). The file is opened read-only: nothing is
ever written.
"""

from __future__ import annotations

import mmap
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from gputriage.errors import InputError
from gputriage.io.inputs import file_kind

__all__ = ["MIN_ADOPT_BYTES", "MIN_LIMIT", "Measured", "measure_read", "not_usable",
           "pick_file"]

CHUNK = 8 * 1024 * 1024
ALIGN = 4096
MIN_LIMIT = ALIGN  # below one O_DIRECT page nothing would be read
MIN_ADOPT_BYTES = 64 * 1024 * 1024  # fewer bytes time the first requests, not the device
MAX_ENTRIES = 10_000  # a directory walk stops after this many entries


@dataclass(frozen=True)
class Measured:
    """What one bounded read found."""

    path: str
    bytes_read: int
    seconds: float
    direct: bool  # O_DIRECT: the page cache was bypassed
    note: str = ""

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_read / self.seconds if self.seconds > 0 else 0.0


def not_usable(m: Measured) -> str | None:
    """Why a read cannot stand for a tier's bandwidth (too few bytes, no time); None
    when it can."""
    if m.bytes_read < MIN_ADOPT_BYTES:
        return (f"only {m.bytes_read:,} bytes read, under the 64 MiB a bandwidth "
                "needs")
    if m.seconds <= 0:
        return "no time measured"
    return None


def _size(entry: os.DirEntry[str], dirs: list[str]) -> int | None:
    """A regular file's size; a directory goes onto ``dirs``; else None."""
    try:
        if entry.is_dir(follow_symlinks=False):
            dirs.append(entry.path)
        elif entry.is_file(follow_symlinks=False):
            return entry.stat(follow_symlinks=False).st_size
    except OSError:  # gone while walked
        pass
    return None


def _largest(root: str) -> str | None:
    """The largest regular file under ``root`` among the first :data:`MAX_ENTRIES`
    entries met (each directory read entry by entry; symbolic links not followed)."""
    best: tuple[int, str] | None = None
    seen, stack = 0, [root]
    while stack and seen < MAX_ENTRIES:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MAX_ENTRIES:
                        break
                    size = _size(entry, stack)
                    if size is not None and (best is None or size > best[0]):
                        best = (size, entry.path)
        except OSError:  # unreadable, or gone while walked
            continue
    return best[1] if best else None


def pick_file(path: str) -> str:
    """The file to read: ``path`` itself, or a directory's largest regular file (of the
    first 10,000 entries)."""
    p = Path(path)
    if p.is_file():
        return str(p)
    if p.is_dir():
        found = _largest(path)
        if found is not None:
            return found
        raise InputError(f"{path}: no file to read in this directory")
    raise InputError(f"{path}: no such file or directory")


def _open(path: str) -> tuple[int, bool, str]:
    """The file opened for the measure (O_DIRECT when allowed); InputError unless what
    was opened is a regular file (a FIFO put there meanwhile is never waited on)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    direct = getattr(os, "O_DIRECT", 0)
    opened: tuple[int, bool, str] | None = None
    if direct:
        try:
            opened = os.open(path, flags | direct), True, ""
        except OSError as exc:
            note = f"O_DIRECT refused ({exc.strerror}): read through the page cache"
    else:
        note = "no O_DIRECT on this system: read through the page cache"
    try:
        opened = opened or (os.open(path, flags), False, note)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    mode = os.fstat(opened[0]).st_mode
    if not stat.S_ISREG(mode):
        os.close(opened[0])
        raise InputError(f"{path}: {file_kind(mode)}, not a regular file")
    os.set_blocking(opened[0], True)
    return opened


def measure_read(path: str, limit: int, chunk: int = CHUNK) -> Measured:
    """Read at most ``limit`` bytes of ``path`` from its start, sequentially; the time
    and the bytes it took. With ``O_DIRECT`` the last request is rounded down to the
    alignment, so the count stays at or under ``limit``."""
    if limit <= 0:
        raise ValueError("the byte limit must be positive")
    fd, direct, note = _open(path)
    buffer = mmap.mmap(-1, max(ALIGN, min(chunk, limit) + ALIGN))  # page-aligned
    view = memoryview(buffer)
    done = 0
    start = time.perf_counter()
    try:
        while done < limit:
            want = min(chunk, limit - done)
            if direct:
                want -= want % ALIGN
                if want == 0:
                    break
            try:
                got = os.readv(fd, [view[:want]])
            except OSError as exc:
                if direct and done == 0:  # some file systems accept the flag, not the read
                    os.close(fd)
                    fd, direct = os.open(path, os.O_RDONLY), False
                    note = f"O_DIRECT reads failed ({exc.strerror}): read through the cache"
                    continue
                raise InputError(f"{path}: read failed ({exc.strerror or exc})") from None
            if got <= 0:
                break
            done += got
    finally:
        elapsed = time.perf_counter() - start
        os.close(fd)
        view.release()
        buffer.close()
    if done < limit and not note:
        note = "the whole file read (smaller than the limit)"
    return Measured(path, done, elapsed, direct, note)
