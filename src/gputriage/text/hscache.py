"""Compiled Hyperscan databases kept between runs.

Compiling a database costs more than scanning a large log with it does for some of
ours: the storm path's (its screen expression) takes 30-40 ms in each worker process,
the NCCL scan's 30-50 ms before its workers start. A database is the same for the same
patterns and library, so :func:`compiled` keeps its serialized form (``hs_serialize``,
tens of KiB) in the cache folder, after what it was compiled from (patterns, flags,
binding version, machine), and the next run that compiles the same loads it in well
under a millisecond.

Whatever goes wrong with the cache (no folder, no room, a file cut short or written by
another library version, a database this CPU cannot run) only costs a compile. A file
is loaded only where it is a regular file this user wrote (no link followed), for
exactly the same patterns, that Hyperscan accepts and scans with; it is written whole
or not at all, into a folder of this user's that no other can write to.

The folder: ``$GPUTRIAGE_CACHE_DIR`` (set empty: no cache); else /var/cache/gputriage
as root; else ``$XDG_CACHE_HOME/gputriage`` (an absolute one) or ~/.cache/gputriage.
It keeps :data:`KEEP` databases at most."""

from __future__ import annotations

import contextlib
import os
import stat
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CACHE_DIR_ENV", "KEEP", "ROOT_CACHE_DIR", "cache_dir", "compiled"]

CACHE_DIR_ENV = "GPUTRIAGE_CACHE_DIR"
ROOT_CACHE_DIR = Path("/var/cache/gputriage")
KEEP = 32  # databases in the folder at most (the least recently written go first)
_SUFFIX = ".hsdb"
_MAGIC = b"gputriage hyperscan database 1\n"
_MAX_FILE = 64 << 20  # bytes of a database's file at most (ours are well under 1 MiB)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def cache_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """The folder of the compiled databases (see the module docstring); None: none."""
    env = os.environ if environ is None else environ
    if CACHE_DIR_ENV in env:
        return Path(env[CACHE_DIR_ENV]) if env[CACHE_DIR_ENV] else None
    if _euid() == 0:
        return ROOT_CACHE_DIR
    xdg = env.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "gputriage"
    try:
        return Path.home() / ".cache" / "gputriage"
    except (RuntimeError, KeyError, OSError):  # no home to be found
        return None


def compiled(hs: Any, expressions: Sequence[bytes], ids: Sequence[int],
             flags: Sequence[int], mode: int | None = None) -> Any:
    """A Hyperscan database of ``expressions`` (with their ``ids`` and ``flags``; block
    mode unless ``mode``), with a scratch space: loaded from the cache where a run
    compiled it before, else compiled here (and kept). Raises what compiling raises."""
    mode = hs.HS_MODE_BLOCK if mode is None else mode
    folder = cache_dir()
    path = None
    source = _source(hs, expressions, ids, flags, mode)
    if folder is not None:
        path = folder / "hyperscan" / _name(source)
        db = _load(hs, path, source, mode)
        if db is not None:
            return db
    db = hs.Database(mode=mode)
    db.compile(expressions=list(expressions), ids=list(ids), elements=len(expressions),
               flags=list(flags))
    if path is not None:
        _store(hs, db, path, source)
    return db


def _machine() -> str:
    return os.uname().machine if hasattr(os, "uname") else ""


def _source(hs: Any, expressions: Sequence[bytes], ids: Sequence[int],
            flags: Sequence[int], mode: int) -> bytes:
    """What a database is compiled from and by (kept in its file: a file is loaded only
    for exactly the same)."""
    version = getattr(hs, "__version__", "")
    return repr((str(version), _machine(), mode, list(ids), list(flags),
                 list(expressions))).encode()


def _name(source: bytes) -> str:
    """The file name of the database compiled from ``source``."""
    return f"{zlib.crc32(source):08x}-{zlib.adler32(source):08x}-{len(source):x}{_SUFFIX}"


def _load(hs: Any, path: Path, source: bytes, mode: int) -> Any:
    """The database compiled from ``source`` kept at ``path``, with a scratch space;
    None where there is none this run can use: a file this user wrote for exactly
    ``source`` (a link, a FIFO, a device or a file another user could have planted is
    never read) that Hyperscan accepts and this CPU runs."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != _euid() or st.st_nlink != 1
                    or st.st_size > _MAX_FILE):
                return None
            data = fh.read(_MAX_FILE + 1)
        head = _head(source)
        if not data.startswith(head):
            return None  # (another database whose file name is the same)
        db = hs.loadb(data[len(head):], mode)
        db.scratch = hs.Scratch(db)
        db.scan(b"\n", match_event_handler=None)  # (a database this CPU cannot run)
        return db
    except Exception:  # one Hyperscan refuses: compile it again
        return None


def _store(hs: Any, db: Any, path: Path, source: bytes) -> None:
    """Keep ``db`` at ``path`` (written whole or not at all, in a folder of this user's
    that no other can write to), the folder kept small."""
    import tempfile  # (only where a database is written)

    try:
        data = hs.dumpb(db)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path.parent)
        if (not stat.S_ISDIR(st.st_mode) or st.st_uid != _euid()
                or st.st_mode & 0o022):
            return
        fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(_head(source) + data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _prune(path.parent)
    except Exception:  # no room, no permission: the next run compiles it again
        return


def _head(source: bytes) -> bytes:
    """What a database's file holds before the database: what it was compiled from."""
    return _MAGIC + len(source).to_bytes(4, "little") + source


def _euid() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else 0


def _prune(folder: Path) -> None:
    """Remove the databases past the :data:`KEEP` most recently written."""
    kept = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith(_SUFFIX):
                try:
                    kept.append((entry.stat().st_mtime_ns, entry.path))
                except OSError:
                    continue
    for _mtime, old in sorted(kept, reverse=True)[KEEP:]:
        try:
            os.unlink(old)
        except OSError:
            continue
