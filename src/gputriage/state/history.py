"""History of checks: one compact entry per ``check`` in an SQLite database.

Each entry keeps the time, host name, boot id, verdict, a *facts digest* (a
flat dict of stable facts such as kernel, driver versions and GPU identities),
its sha256 and the findings (id, severity, title, scope label). Before a new
entry is written, its digest is compared with the host's last healthy entry
(verdict ``ok``), which gives the "changed since the last healthy check" line.

The database lives in the standard state directory (see
:func:`default_state_dir`), created 0o700 with the file 0o600. Writing refuses a
symbolic link, a non-directory / non-regular file and a place other users can
write. Writes are one transaction in WAL mode with a 2 s busy timeout; the
tables are created under the write lock, and readers see a database whose
tables are not yet committed as empty, so parallel first checks never race.
A corrupt file is moved aside (``history.sqlite.corrupt-<UTC time>``, the
newest :data:`KEEP_CORRUPT` kept) by the next write, never by a read. Reading
never writes: a read-only open, or an immutable one where WAL's ``-shm`` file
cannot be created. Every problem is raised as :class:`HistoryError` so that the
caller can report it in one line and carry on: history never blocks or fails a
check.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sqlite3
import stat
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gputriage.io import safejson
from gputriage.model import HealthyChange, Result, Severity

DB_NAME = "history.sqlite"
SCHEMA_VERSION = 2  # 2: the acks table
BUSY_TIMEOUT_S = 2.0
ROOT_STATE_DIR = Path("/var/lib/gputriage")
STATE_DIR_ENV = "GPUTRIAGE_STATE_DIR"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    time TEXT NOT NULL,
    host TEXT,
    boot_id TEXT,
    verdict TEXT NOT NULL,
    digest TEXT NOT NULL,
    digest_sha256 TEXT NOT NULL,
    findings TEXT NOT NULL,
    critical INTEGER NOT NULL,
    warning INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS checks_ts ON checks (ts);
CREATE INDEX IF NOT EXISTS checks_host_verdict ON checks (host, verdict, id);
CREATE TABLE IF NOT EXISTS acks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    time TEXT NOT NULL,
    host TEXT,
    finding TEXT,
    gpu TEXT,
    who TEXT NOT NULL,
    until TEXT,
    reason TEXT NOT NULL,
    cleared TEXT
);
"""
_CORRUPT_MARK = ".corrupt-"
KEEP_CORRUPT = 3  # corrupt copies kept beside the database
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
_CORRUPT_TEXT = ("file is not a database", "database disk image is malformed",
                 "malformed database schema")
_NO_SHM_CODES = (8, 14)  # SQLITE_READONLY (_DIRECTORY, _CANTINIT...), SQLITE_CANTOPEN
_NO_SHM_TEXT = ("attempt to write a readonly database", "unable to open database file")
_COLUMNS = ("id, ts, time, host, boot_id, verdict, digest, digest_sha256, findings, "
            "critical, warning")


class HistoryError(Exception):
    """The history database could not be read or written (one-line message)."""


class NoHistory(HistoryError):
    """There is no database (yet)."""


class UnsafeHistory(HistoryError):
    """The place is refused: a symbolic link, not a directory / regular file, or
    another user could have planted or could change it."""


class CorruptHistory(HistoryError):
    """The file is not (any more) a valid SQLite database."""

    def __init__(self, message: str, identity: tuple[int, int] | None = None) -> None:
        super().__init__(message)
        self.identity = identity  # (dev, inode) of the file found corrupt


@dataclass(frozen=True)
class Retention:
    """What to keep: an entry is deleted only when it is older than ``max_age_days``
    AND not among the last ``keep_last`` entries. The host's last healthy entry is
    always kept, so that a long run of bad checks still compares with it.
    ``keep_last`` 0 or ``max_age_days`` 0 drops that guarantee."""

    keep_last: int = 500
    max_age_days: float = 90.0


@dataclass(frozen=True)
class Entry:
    """One recorded check."""

    id: int
    time: str  # ISO 8601, UTC, second precision
    host: str | None
    boot_id: str | None
    verdict: str
    digest: dict[str, Any] = field(default_factory=dict)
    digest_sha256: str = ""
    findings: tuple[dict[str, str], ...] = ()
    critical: int = 0
    warning: int = 0

    def to_json(self) -> dict[str, Any]:
        """The entry as a JSON-ready dict."""
        return {"id": self.id, "time": self.time, "host": self.host,
                "boot_id": self.boot_id, "verdict": self.verdict,
                "critical": self.critical, "warning": self.warning,
                "digest_sha256": self.digest_sha256, "digest": dict(self.digest),
                "findings": [dict(f) for f in self.findings]}


# --- where ----------------------------------------------------------------------------

def default_state_dir(environ: Mapping[str, str] | None = None,
                      euid: int | None = None) -> Path:
    """The standard state directory: ``$GPUTRIAGE_STATE_DIR`` when set; else
    /var/lib/gputriage as root; else ``$XDG_STATE_HOME/gputriage`` (an absolute
    XDG_STATE_HOME only, per the XDG spec), default ~/.local/state/gputriage."""
    env = os.environ if environ is None else environ
    if env.get(STATE_DIR_ENV):
        return Path(env[STATE_DIR_ENV])
    if euid is None:
        geteuid = getattr(os, "geteuid", None)
        euid = geteuid() if geteuid is not None else -1
    if euid == 0:
        return ROOT_STATE_DIR
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "gputriage"
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".local" / "state" / "gputriage"


# --- the digest -----------------------------------------------------------------------

def facts_digest(result: Result) -> dict[str, Any]:
    """Stable facts of ``result`` as a flat dict, with the key names of
    ``gputriage diff`` (so entries diff against snapshots), plus GPU counts and
    each GPU's serial and visibility."""
    from gputriage.results.diff import host_digest

    host = result.host
    out: dict[str, Any] = dict(host_digest(host, result.gpus))
    for key, value in (("os", host.os), ("gpus.on_pci", host.gpus_on_pci),
                       ("gpus.visible", host.gpus_visible)):
        if value is not None and value != "":
            out[key] = value
    for gpu in result.gpus:
        bus = gpu.pci_bus_id
        if not bus:
            continue
        if gpu.serial:
            out[f"gpu[{bus}].serial"] = gpu.serial
        if gpu.vbios:
            out[f"gpu[{bus}].vbios"] = gpu.vbios
        out[f"gpu[{bus}].visible"] = gpu.visible
    return dict(sorted(out.items()))


def digest_sha256(digest: Mapping[str, Any]) -> str:
    """The sha256 (hex) of ``digest`` in canonical JSON form."""
    text = json.dumps(dict(digest), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs from ``old`` to ``new``, one ``key: old -> new`` string per key
    (``(none)`` for a missing side), in key order."""
    lines = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before != after:
            lines.append(f"{key}: {_show(before)} -> {_show(after)}")
    return lines


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


# --- the database ---------------------------------------------------------------------

def db_path(state_dir: Path | str) -> Path:
    """The database file inside ``state_dir``."""
    return Path(state_dir) / DB_NAME


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    return code & 0xFF if isinstance(code, int) else None


def _is_corrupt(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    return _code(exc) in _CORRUPT_CODES or any(t in str(exc) for t in _CORRUPT_TEXT)


def _needs_write_access(exc: sqlite3.Error) -> bool:
    """Whether a read-only open failed only because WAL mode could not create
    its ``-shm`` file (read-only directory or media, another user's files)."""
    return _code(exc) in _NO_SHM_CODES or any(t in str(exc) for t in _NO_SHM_TEXT)


def _fail(path: Path, exc: BaseException,
          identity: tuple[int, int] | None = None) -> HistoryError:
    if _is_corrupt(exc):
        return CorruptHistory(f"{path}: {_why(exc)} (corrupt history)", identity)
    return HistoryError(f"{path}: {_why(exc)}")


def _uri(path: Path, query: str) -> str:
    """An SQLite URI for ``path`` (any characters) with ``query``."""
    return f"file://{quote(os.fsencode(os.path.abspath(path)))}?{query}"


# --- a safe place to write ------------------------------------------------------------

def _prepare(state_dir: Path) -> tuple[int, int]:
    """Make sure ``state_dir`` and its database are safe to write as this user,
    creating them (0o700, 0o600) when missing; returns the file's (dev, inode).
    Refuses a symbolic link, a non-directory, a place other users can write."""
    try:
        if not os.path.lexists(state_dir):
            state_dir.parent.mkdir(parents=True, exist_ok=True)
            with suppress(FileExistsError):
                os.mkdir(state_dir, 0o700)
        _check_owner(state_dir, os.lstat(state_dir), directory=True)
        path = db_path(state_dir)
        for suffix in ("-wal", "-shm", "-journal"):
            with suppress(FileNotFoundError):
                _check_owner(Path(f"{path}{suffix}"), os.lstat(f"{path}{suffix}"))
        return _open_db_file(path)
    except HistoryError:
        raise
    except OSError as exc:
        raise HistoryError(f"{exc.filename or state_dir}: {_why(exc)}") from None


def _check_owner(path: Path, st: os.stat_result, *, directory: bool = False) -> None:
    """Refuse what another user could have planted or could still change."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeHistory(f"{path}: is a symbolic link; refusing to write through it")
    if directory != stat.S_ISDIR(st.st_mode) or not (directory or stat.S_ISREG(st.st_mode)):
        raise UnsafeHistory(f"{path}: not a {'directory' if directory else 'regular file'}")
    euid = os.geteuid()
    if st.st_uid not in (0, euid):
        raise UnsafeHistory(f"{path}: owned by uid {st.st_uid}, not by this user; refusing")
    if directory and st.st_mode & (0o022 if euid == 0 else 0o002):
        raise UnsafeHistory(f"{path}: writable by other users; refusing")
    if not directory and st.st_nlink > 1:
        raise UnsafeHistory(f"{path}: has other hard links; refusing")


def _open_db_file(path: Path) -> tuple[int, int]:
    """Create the database file (0o600) when missing, never through a symbolic
    link, and check what is there; its (dev, inode)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeHistory(f"{path}: is a symbolic link; refusing to write through it") \
                from None
        raise
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    _check_owner(path, st)
    return st.st_dev, st.st_ino


# --- connections ----------------------------------------------------------------------

@contextmanager
def _writer(state_dir: Path | str,
            busy_timeout_s: float = BUSY_TIMEOUT_S) -> Iterator[sqlite3.Connection]:
    """A read-write connection to the database (made safe, and created when
    missing), closed on exit; every sqlite / OS error in the block surfaces as
    :class:`HistoryError` (:class:`CorruptHistory` for a corrupt file).

    It is opened and closed under a shared lock on the directory, which moving a
    corrupt file aside takes exclusively: closing the last connection deletes the
    ``-wal`` *by name*, which must never be a newer database's."""
    path = db_path(state_dir)
    identity: tuple[int, int] | None = None
    try:
        _prepare(Path(state_dir))  # the directory exists and is safe to lock
        with _dir_lock(Path(state_dir), busy_timeout_s, shared=True):
            identity = _prepare(Path(state_dir))  # the file, as it is under the lock
            conn = _open(path, "mode=rw", busy_timeout_s)
            try:
                _ensure_schema(conn, path, busy_timeout_s)
                yield conn
            finally:
                if conn.in_transaction:
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                conn.close()
    except HistoryError:
        raise
    except (sqlite3.Error, OSError, ValueError) as exc:
        raise _fail(path, exc, identity) from exc


def _open(path: Path, query: str, busy_timeout_s: float) -> sqlite3.Connection:
    """An open connection (autocommit; ``query`` as in an SQLite URI) whose schema
    version this gputriage understands."""
    conn = sqlite3.connect(_uri(path, query), uri=True, timeout=busy_timeout_s,
                           isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        _schema_version(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def _schema_version(conn: sqlite3.Connection, path: Path) -> int:
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise HistoryError(f"{path}: written by a newer gputriage "
                           f"(schema {version} > {SCHEMA_VERSION})")
    return version


def _ensure_schema(conn: sqlite3.Connection, path: Path, busy_timeout_s: float) -> None:
    """Create the tables once, race-free: the version is checked again under the
    write lock, so of several processes starting at once exactly one creates them.
    WAL first: no rollback ``-journal`` file is ever made."""
    _use_wal(conn, busy_timeout_s)
    if _schema_version(conn, path) < SCHEMA_VERSION:
        conn.execute("BEGIN IMMEDIATE")
        if _schema_version(conn, path) < SCHEMA_VERSION:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")


def _use_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Switch to WAL mode. SQLite answers "locked" at once, without its busy
    handler, while another connection holds a lock: retry until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        try:
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            busy = _code(exc) == 5 or "locked" in str(exc)  # SQLITE_BUSY
            if not busy or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def _select(conn: sqlite3.Connection, sql: str, params: tuple = ()) -> list[tuple]:
    """The rows of ``sql``, in one read snapshot; none while its table is not yet
    committed (another process creating the database at this very moment, or a
    database of an older schema: no row can exist then), so a reader never sees
    "no such table"."""
    table = "acks" if " FROM acks" in sql else "checks"
    conn.execute("BEGIN")
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                    (table,)).fetchone() is None:
        rows: list[tuple] = []
    else:
        rows = conn.execute(sql, params).fetchall()
    conn.execute("COMMIT")
    return rows


def _read_only(path: Path, sql: str, params: tuple, notes: list[str] | None) -> list[tuple]:
    """The rows of ``sql`` without writing anything: a read-only open, or, when that
    needs a ``-shm`` file that cannot be created, an immutable one (noted)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise NoHistory(f"no history in {path.parent}") from None
    except OSError as exc:
        raise HistoryError(f"{path}: {_why(exc)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise HistoryError(f"{path}: not a regular file")
    try:
        return _read_with(path, "mode=ro", sql, params)
    except sqlite3.Error as exc:
        if _is_corrupt(exc) or not _needs_write_access(exc):
            raise _fail(path, exc) from exc
    try:
        rows = _read_with(path, "immutable=1", sql, params)
    except sqlite3.Error as exc:
        raise _fail(path, exc) from exc
    if notes is not None:
        notes.append(f"{path}: cannot be opened for shared reading here (read-only place); "
                     "read as an immutable file, so the latest checks may be missing")
    return rows


def _read_with(path: Path, query: str, sql: str, params: tuple) -> list[tuple]:
    conn = _open(path, query, BUSY_TIMEOUT_S)
    try:
        return _select(conn, sql, params)
    finally:
        conn.close()


# --- reading --------------------------------------------------------------------------

def _entry(row: tuple) -> Entry:
    (id_, _ts, when, host, boot_id, verdict, digest, sha, findings, crit, warn) = row
    try:
        digest_d = safejson.loads(digest)
        found = safejson.loads(findings)
    except (TypeError, ValueError):
        digest_d, found = {}, []
    return Entry(id=id_, time=when, host=host, boot_id=boot_id, verdict=verdict,
                 digest=digest_d if isinstance(digest_d, dict) else {},
                 digest_sha256=sha,
                 findings=tuple(f for f in found if isinstance(f, dict))
                 if isinstance(found, list) else (),
                 critical=crit, warning=warn)


def last_healthy(state_dir: Path | str, host: str | None) -> Entry | None:
    """The most recent entry of ``host`` whose verdict was ok, or None (also
    when there is no database yet). Never writes."""
    sql = (f"SELECT {_COLUMNS} FROM checks WHERE verdict = 'ok' AND host IS ? "
           "ORDER BY id DESC LIMIT 1")
    try:
        rows = _read_only(db_path(state_dir), sql, (host,), None)
    except NoHistory:
        return None
    return _entry(rows[0]) if rows else None


def list_entries(state_dir: Path | str, limit: int | None = None, *,
                 notes: list[str] | None = None) -> list[Entry]:
    """The entries, oldest first; only the newest ``limit`` when given. Never
    writes: a database in a read-only place is read as an immutable file, which
    adds a line to ``notes``. :class:`NoHistory` when there is no database."""
    sql = f"SELECT {_COLUMNS} FROM checks ORDER BY id DESC"
    if limit is not None:
        rows = _read_only(db_path(state_dir), sql + " LIMIT ?", (limit,), notes)
    else:
        rows = _read_only(db_path(state_dir), sql, (), notes)
    return [_entry(r) for r in reversed(rows)]


# --- recording ------------------------------------------------------------------------

def _verdict(result: Result) -> str:
    from gputriage.status import verdict

    return verdict(result)


def _finding_rows(result: Result) -> list[dict[str, str]]:
    """The findings of an entry; those not current (acknowledged, ended by a reset)
    say so."""
    rows = []
    for f in result.sorted_findings():
        row = {"id": f.id, "severity": f.severity.value, "title": f.title,
               "scope": f.scope.label()}
        if not f.current:
            row["status"] = f.status.value
        rows.append(row)
    return rows


def record(state_dir: Path | str, result: Result, when: datetime,
           retention: Retention | None = None, *,
           busy_timeout_s: float = BUSY_TIMEOUT_S,
           notices: list[str] | None = None) -> Entry:
    """Append an entry for ``result`` at ``when`` and apply ``retention``, in one
    transaction. A corrupt database is moved aside first (see :func:`_move_aside`;
    one line in ``notices``). Raises :class:`HistoryError` when it cannot."""
    retention = retention or Retention()
    when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    when = when.astimezone(timezone.utc).replace(microsecond=0)
    name = result.host.hostname
    boot_id = result.host.boot_id
    digest = facts_digest(result)
    sha = digest_sha256(digest)
    rows = _finding_rows(result)
    crit = sum(1 for f in result.findings if f.current and f.severity is Severity.CRITICAL)
    warn = sum(1 for f in result.findings if f.current and f.severity is Severity.WARNING)
    verdict = _verdict(result)
    values = (when.timestamp(), when.isoformat(), name and str(name),
              boot_id and str(boot_id), verdict,
              json.dumps(digest, sort_keys=True, default=str), sha,
              json.dumps(rows), crit, warn)
    try:
        new_id = _insert(state_dir, values, retention, busy_timeout_s)
    except CorruptHistory as exc:
        aside = _move_aside(Path(state_dir), exc.identity, busy_timeout_s)
        if aside is not None and notices is not None:
            notices.append(f"{exc}: moved it to {aside} and started a new history")
        new_id = _insert(state_dir, values, retention, busy_timeout_s)
    return Entry(id=new_id, time=when.isoformat(), host=values[2], boot_id=values[3],
                 verdict=verdict, digest=digest, digest_sha256=sha, findings=tuple(rows),
                 critical=crit, warning=warn)


def _insert(state_dir: Path | str, values: tuple, retention: Retention,
            busy_timeout_s: float) -> int:
    """Insert one row and prune, in one transaction; the new row's id."""
    with _writer(state_dir, busy_timeout_s) as conn:
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute(
            "INSERT INTO checks (ts, time, host, boot_id, verdict, digest, "
            "digest_sha256, findings, critical, warning) VALUES (?,?,?,?,?,?,?,?,?,?)",
            values)
        new_id = int(cur.lastrowid or 0)
        _prune(conn, retention, float(values[0]))
        conn.execute("COMMIT")
    return new_id


def _prune(conn: sqlite3.Connection, retention: Retention, now_ts: float) -> None:
    """Delete what ``retention`` lets go (inside the caller's transaction)."""
    keep_last = max(0, int(retention.keep_last))
    cutoff = now_ts - max(0.0, float(retention.max_age_days)) * 86400.0
    conn.execute(
        "DELETE FROM checks WHERE ts < ? "
        "AND id NOT IN (SELECT id FROM checks ORDER BY id DESC LIMIT ?) "
        "AND id NOT IN (SELECT MAX(id) FROM checks WHERE verdict = 'ok' GROUP BY host)",
        (cutoff, keep_last))


# --- acknowledgements -----------------------------------------------------------------

ACK_COLUMNS = "id, ts, time, host, finding, gpu, who, until, reason, cleared"


def insert_ack(state_dir: Path | str, values: tuple, *,
               busy_timeout_s: float = BUSY_TIMEOUT_S) -> int:
    """Record one acknowledgement (``ts, time, host, finding, gpu, who, until,
    reason``); its id. Raises :class:`HistoryError` when it cannot."""
    with _writer(state_dir, busy_timeout_s) as conn:
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute("INSERT INTO acks (ts, time, host, finding, gpu, who, until, "
                           "reason) VALUES (?,?,?,?,?,?,?,?)", values)
        conn.execute("COMMIT")
    return int(cur.lastrowid or 0)


def clear_ack(state_dir: Path | str, ack_id: int, when: str, *,
              busy_timeout_s: float = BUSY_TIMEOUT_S) -> bool:
    """Mark acknowledgement ``ack_id`` cleared at ``when`` (kept, for the record);
    whether there was such an open one."""
    with _writer(state_dir, busy_timeout_s) as conn:
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute("UPDATE acks SET cleared = ? WHERE id = ? AND cleared IS NULL",
                           (when, ack_id))
        conn.execute("COMMIT")
    return cur.rowcount > 0


def read_acks(state_dir: Path | str, *, notes: list[str] | None = None) -> list[tuple]:
    """Every acknowledgement row, oldest first (none without a database). Never
    writes."""
    try:
        return _read_only(db_path(state_dir),
                          f"SELECT {ACK_COLUMNS} FROM acks ORDER BY id", (), notes)
    except NoHistory:
        return []


# --- a corrupt database ---------------------------------------------------------------

def _move_aside(state_dir: Path, identity: tuple[int, int] | None,
                busy_timeout_s: float) -> Path | None:
    """Rename the corrupt database (and its -wal/-shm) to
    ``history.sqlite.corrupt-<UTC time>``, never over an existing file, keeping
    the newest :data:`KEEP_CORRUPT` such copies. Under a lock on the directory,
    and only when the file is still the one found corrupt (``identity``): when
    another process already replaced it, None."""
    path = db_path(state_dir)
    try:
        with _dir_lock(state_dir, busy_timeout_s):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                return None
            if identity is None or (st.st_dev, st.st_ino) != identity:
                return None
            aside = _aside_path(path)
            # the -wal first: a stale one must never be replayed into a new database
            for suffix in ("-wal", "-shm", ""):
                with suppress(FileNotFoundError):
                    os.rename(f"{path}{suffix}", f"{aside}{suffix}")
            _drop_old_copies(path)
    except OSError as exc:
        raise HistoryError(f"{path}: corrupt, and could not move it aside: {_why(exc)}") \
            from None
    return aside


@contextmanager
def _dir_lock(state_dir: Path, timeout_s: float, *, shared: bool = False) -> Iterator[None]:
    """A lock (flock) on ``state_dir``, waited for at most ``timeout_s``; none where
    the file system has no such locks."""
    import fcntl

    fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + timeout_s
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise HistoryError(f"{state_dir}: locked by another gputriage "
                                       f"for more than {timeout_s:g} s") from None
                time.sleep(0.02)
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                break  # no locks here: the (dev, inode) check still guards a move
        yield
    finally:
        os.close(fd)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _aside_path(path: Path) -> Path:
    stamp = _utcnow().strftime("%Y%m%dT%H%M%SZ")
    base = f"{path}{_CORRUPT_MARK}{stamp}"
    candidate, n = base, 0
    while any(os.path.lexists(candidate + s) for s in ("", "-wal", "-shm")):
        n += 1
        candidate = f"{base}.{n}"
    return Path(candidate)


def _drop_old_copies(path: Path, keep: int = KEEP_CORRUPT) -> None:
    """Delete all but the newest ``keep`` corrupt copies (each with its -wal/-shm)."""
    prefix = path.name + _CORRUPT_MARK
    copies: dict[str, list[str]] = {}
    for name in os.listdir(path.parent):
        if name.startswith(prefix):
            base = name.removesuffix("-wal").removesuffix("-shm")
            copies.setdefault(base, []).append(name)

    def age(base: str) -> tuple[str, int]:
        stamp, _, n = base[len(prefix):].partition(".")
        return stamp, int(n) if n.isascii() and n.isdigit() and len(n) < 19 else 0

    for base in sorted(copies, key=age)[:max(0, len(copies) - keep)]:
        for name in copies[base]:
            with suppress(FileNotFoundError):
                os.unlink(path.parent / name)


# --- what check does ------------------------------------------------------------------

def record_check(state_dir: Path | str, result: Result, when: datetime,
                 retention: Retention | None = None, *,
                 busy_timeout_s: float = BUSY_TIMEOUT_S,
                 notices: list[str] | None = None) -> list[str]:
    """What ``check`` does: compare ``result`` with the host's last healthy entry,
    put the differences in ``result.host.changed_since_healthy`` (only when something
    changed), then record it.

    Returns why it was not recorded (at most one line; empty when it was).
    ``notices`` gets what the user should know although it was recorded (a
    corrupt database moved aside, a failed comparison). No exception escapes."""
    notes = notices if notices is not None else []
    try:
        _prepare(Path(state_dir))
    except UnsafeHistory as exc:
        return [str(exc)]  # and do not even read what may have been planted there
    except HistoryError:
        pass  # recording fails the same way and says why; the comparison may still work
    try:
        compared = _compare(state_dir, result)
        record(state_dir, result, when, retention, busy_timeout_s=busy_timeout_s,
               notices=notes)
    except HistoryError as exc:
        return [str(exc)]
    except Exception as exc:  # history must never fail the check
        return [f"{type(exc).__name__}: {_why(exc)}"]
    notes.extend(compared)
    return []


def _compare(state_dir: Path | str, result: Result) -> list[str]:
    """Put what changed since the last healthy check in ``result``; the problem
    met, if any (a corrupt database is left to :func:`record`)."""
    try:
        before = last_healthy(state_dir, result.host.hostname)
    except CorruptHistory:
        return []  # recording moves it aside, and says so
    except HistoryError as exc:
        return [f"not compared with the last healthy check: {exc}"]
    if before is not None:
        changed = changes(before.digest, facts_digest(result))
        if changed:
            result.host = replace(result.host, changed_since_healthy=HealthyChange(
                before.time, tuple(changed)))
    return []


# --- listing --------------------------------------------------------------------------

def history_rows(entries: list[Entry], previous: Entry | None = None) -> list[dict[str, Any]]:
    """Listing rows for ``entries`` (oldest first): the entry's JSON plus
    ``changed`` — its digest differs from the entry before it (``previous`` is
    the one before the first; no marker for the very first entry)."""
    rows = []
    prev = previous
    for e in entries:
        row = e.to_json()
        row["changed"] = prev is not None and prev.digest_sha256 != e.digest_sha256
        rows.append(row)
        prev = e
    return rows
