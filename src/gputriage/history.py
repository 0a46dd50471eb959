"""History of checks: one compact entry per ``check`` in an SQLite database.

Each entry keeps the time, host name, boot id, verdict, a *facts digest* (a
flat dict of stable facts such as kernel, driver versions and GPU identities),
its sha256 and the findings (id, severity, title, scope label). Before a new
entry is written, its digest is compared with the host's last healthy entry
(verdict ``ok``), which gives the "changed since the last healthy check" line.

The database lives in the standard state directory (see
:func:`default_state_dir`). Writes are one transaction in WAL mode with a 2 s
busy timeout. Every problem (corrupt file, locked database, unwritable
directory) is raised as :class:`HistoryError` so that the caller can report it
in one line and carry on: history never blocks or fails a check.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gputriage.model import Result, Severity

DB_NAME = "history.sqlite"
SCHEMA_VERSION = 1
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
"""
_COLUMNS = ("id, ts, time, host, boot_id, verdict, digest, digest_sha256, findings, "
            "critical, warning")


class HistoryError(Exception):
    """The history database could not be read or written (one-line message)."""


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
    from gputriage.diff import host_digest

    out = host_digest(result.host, result.gpus)
    host = result.host if isinstance(result.host, dict) else {}
    for key, value in (("os", host.get("os")), ("gpus.on_pci", host.get("gpus_on_pci")),
                       ("gpus.visible", host.get("gpus_visible"))):
        if value is not None and value != "":
            out[key] = value
    for gpu in result.gpus:
        bus = gpu.get("pci_bus_id") if isinstance(gpu, dict) else None
        if not bus:
            continue
        if gpu.get("serial"):
            out[f"gpu[{bus}].serial"] = str(gpu["serial"])
        vbios = gpu.get("vbios") or gpu.get("vbios_version")
        if vbios:
            out[f"gpu[{bus}].vbios"] = str(vbios)
        if isinstance(gpu.get("visible"), bool):
            out[f"gpu[{bus}].visible"] = gpu["visible"]
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
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


@contextmanager
def _connect(state_dir: Path | str, *, create: bool,
             busy_timeout_s: float = BUSY_TIMEOUT_S) -> Iterator[sqlite3.Connection]:
    """A connection to the database (created when ``create``), closed on exit;
    every sqlite / OS error surfaces as :class:`HistoryError`."""
    path = db_path(state_dir)
    conn: sqlite3.Connection | None = None
    try:
        if create:
            Path(state_dir).mkdir(parents=True, exist_ok=True)
        elif not path.is_file():
            raise HistoryError(f"no history in {state_dir}")
        conn = sqlite3.connect(str(path), timeout=busy_timeout_s, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise HistoryError(f"{path}: written by a newer gputriage "
                               f"(schema {version} > {SCHEMA_VERSION})")
        if create:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            if version < SCHEMA_VERSION:
                conn.execute("BEGIN IMMEDIATE")
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
        yield conn
    except HistoryError:
        raise
    except (sqlite3.Error, OSError, ValueError) as exc:
        raise HistoryError(f"{path}: {_why(exc)}") from exc
    finally:
        if conn is not None:
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            conn.close()


def _entry(row: tuple) -> Entry:
    (id_, _ts, time, host, boot_id, verdict, digest, sha, findings, crit, warn) = row
    try:
        digest_d = json.loads(digest)
        found = json.loads(findings)
    except (TypeError, ValueError):
        digest_d, found = {}, []
    return Entry(id=id_, time=time, host=host, boot_id=boot_id, verdict=verdict,
                 digest=digest_d if isinstance(digest_d, dict) else {},
                 digest_sha256=sha,
                 findings=tuple(f for f in found if isinstance(f, dict))
                 if isinstance(found, list) else (),
                 critical=crit, warning=warn)


def last_healthy(state_dir: Path | str, host: str | None) -> Entry | None:
    """The most recent entry of ``host`` whose verdict was ok, or None (also
    when there is no database yet)."""
    if not db_path(state_dir).is_file():
        return None
    with _connect(state_dir, create=False) as conn:
        try:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM checks WHERE verdict = 'ok' AND host IS ? "
                "ORDER BY id DESC LIMIT 1", (host,)).fetchone()
        except sqlite3.Error as exc:
            raise HistoryError(f"{db_path(state_dir)}: {_why(exc)}") from exc
    return _entry(row) if row else None


def list_entries(state_dir: Path | str, limit: int | None = None) -> list[Entry]:
    """The entries, oldest first; only the newest ``limit`` when given."""
    with _connect(state_dir, create=False) as conn:
        try:
            sql = f"SELECT {_COLUMNS} FROM checks ORDER BY id DESC"
            rows = (conn.execute(sql + " LIMIT ?", (limit,)) if limit is not None
                    else conn.execute(sql)).fetchall()
        except sqlite3.Error as exc:
            raise HistoryError(f"{db_path(state_dir)}: {_why(exc)}") from exc
    return [_entry(r) for r in reversed(rows)]


def _verdict(result: Result) -> str:
    from gputriage.views.status import verdict

    return verdict(result)


def _finding_rows(result: Result) -> list[dict[str, str]]:
    return [{"id": f.id, "severity": f.severity.value, "title": f.title,
             "scope": f.scope.label()} for f in result.sorted_findings()]


def record(state_dir: Path | str, result: Result, when: datetime,
           retention: Retention | None = None, *,
           busy_timeout_s: float = BUSY_TIMEOUT_S) -> Entry:
    """Append an entry for ``result`` at ``when`` and apply ``retention``, in one
    transaction. Raises :class:`HistoryError` when it cannot."""
    retention = retention or Retention()
    when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    when = when.astimezone(timezone.utc).replace(microsecond=0)
    host = result.host if isinstance(result.host, dict) else {}
    name = host.get("hostname")
    boot_id = host.get("boot_id")
    digest = facts_digest(result)
    sha = digest_sha256(digest)
    rows = _finding_rows(result)
    crit = sum(1 for f in result.findings if f.severity is Severity.CRITICAL)
    warn = sum(1 for f in result.findings if f.severity is Severity.WARNING)
    verdict = _verdict(result)
    values = (when.timestamp(), when.isoformat(), name and str(name),
              boot_id and str(boot_id), verdict,
              json.dumps(digest, sort_keys=True, default=str), sha,
              json.dumps(rows), crit, warn)
    with _connect(state_dir, create=True, busy_timeout_s=busy_timeout_s) as conn:
        try:
            conn.execute("BEGIN IMMEDIATE")
            cur = conn.execute(
                "INSERT INTO checks (ts, time, host, boot_id, verdict, digest, "
                "digest_sha256, findings, critical, warning) VALUES (?,?,?,?,?,?,?,?,?,?)",
                values)
            new_id = int(cur.lastrowid or 0)
            _prune(conn, retention, when.timestamp())
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise HistoryError(f"{db_path(state_dir)}: {_why(exc)}") from exc
    return Entry(id=new_id, time=when.isoformat(), host=values[2], boot_id=values[3],
                 verdict=verdict, digest=digest, digest_sha256=sha, findings=tuple(rows),
                 critical=crit, warning=warn)


def _prune(conn: sqlite3.Connection, retention: Retention, now_ts: float) -> None:
    """Delete what ``retention`` lets go (inside the caller's transaction)."""
    keep_last = max(0, int(retention.keep_last))
    cutoff = now_ts - max(0.0, float(retention.max_age_days)) * 86400.0
    conn.execute(
        "DELETE FROM checks WHERE ts < ? "
        "AND id NOT IN (SELECT id FROM checks ORDER BY id DESC LIMIT ?) "
        "AND id NOT IN (SELECT MAX(id) FROM checks WHERE verdict = 'ok' GROUP BY host)",
        (cutoff, keep_last))


def record_check(state_dir: Path | str, result: Result, when: datetime,
                 retention: Retention | None = None, *,
                 busy_timeout_s: float = BUSY_TIMEOUT_S) -> list[str]:
    """What ``check`` does: compare ``result`` with the host's last healthy entry,
    put the differences in ``result.host["changed_since_healthy"]`` (``{"when":
    ISO, "changes": [...]}``, only when something changed), then record it.

    Returns the problems met (one line each; empty when all went well). The
    comparison is kept even when recording fails, and no exception escapes."""
    problems: list[str] = []
    host = result.host if isinstance(result.host, dict) else None
    try:
        before = last_healthy(state_dir, host.get("hostname") if host else None)
        if before is not None and host is not None:
            changed = changes(before.digest, facts_digest(result))
            if changed:
                host["changed_since_healthy"] = {"when": before.time, "changes": changed}
    except HistoryError as exc:
        problems.append(str(exc))
    try:
        record(state_dir, result, when, retention, busy_timeout_s=busy_timeout_s)
    except HistoryError as exc:
        if str(exc) not in problems:
            problems.append(str(exc))
    except Exception as exc:  # noqa: BLE001 - history must never fail the check
        problems.append(f"{type(exc).__name__}: {_why(exc)}")
    return problems


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


def format_rows(rows: list[dict[str, Any]]) -> list[str]:
    """Plain text lines of a listing: time, host, boot id, verdict, counts,
    short digest, and ``changed`` when the digest moved."""
    lines = [f"{'TIME':<25} {'HOST':<20} {'BOOT':<8} {'VERDICT':<8} {'CRIT':>4} "
             f"{'WARN':>4} DIGEST"]
    for r in rows:
        boot = (r.get("boot_id") or "-")[:8]
        line = (f"{r['time']:<25} {str(r.get('host') or '-'):<20} {boot:<8} "
                f"{r['verdict'].upper():<8} {r['critical']:>4} {r['warning']:>4} "
                f"{r['digest_sha256'][:12]:<12}")
        if r.get("changed"):
            line += " changed"
        lines.append(line.rstrip())
    return lines
