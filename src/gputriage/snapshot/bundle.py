"""Snapshots: a directory (or .tar.gz of one) with ``manifest.json`` and the
captured sources under ``sources/``.

Everything after collection reads a :class:`Snapshot`. Pasted outputs and
nvidia-bug-report logs are turned into the same object (see ``ingest``), so
parsers and rules never know where their text came from.

A snapshot may come from a stranger's ticket, so loading one is bounded. The
manifest is the ``manifest.json`` at the root (in a tarball: at its root or in
its single top folder); its shape is checked once (:func:`check_manifest`): a
record with a wrong-typed field, or a ``file`` that is not a plain relative
path, is a problem line and its source counts as missing. In a directory only
regular files inside the snapshot are opened (a FIFO, device, socket or a link
pointing outside is a problem line, never opened). The budgets (module
constants, gathered in :data:`BUDGETS`, which tests replace):

======================  =======  ==========================================================
name                    value    when it is spent
======================  =======  ==========================================================
``MANIFEST_CAP_BYTES``  16 MiB   a larger manifest.json: InputError
``MAX_SOURCES``         4,096    more entries in the manifest: InputError
``safejson.MAX_DEPTH``  64       a manifest nested deeper: InputError; a JSON source
                                 (tree, devnodes, NVML): a problem line, source unparsed
``READ_CAP_BYTES``      256 MiB  one source: only its last 256 MiB are kept (problem line)
``READ_TOTAL_BYTES``    1 GiB    bytes read for the sources of one snapshot plus, in a
                                 compressed tarball, the bytes decompressed to reach
                                 them; the sources left are not read (one problem line
                                 names them, they count as missing)
``TAR_MAX_MEMBERS``     4,096    a tarball with more members (a real one has ~60):
                                 InputError, met while walking, nothing more is read
``TAR_TOTAL_BYTES``     2 GiB    member sizes the tar headers declare, summed: InputError
                                 at the header that crosses it, before its data is walked
``TAR_HEADER_BYTES``    1 MiB    one long-name or pax header record: InputError
``TAR_SKIP_BYTES``      256 MiB  a member whose kept tail starts further in (larger than
                                 512 MiB): not read, a problem line
``LOAD_TIMEOUT_S``      60 s     loading takes longer: InputError
======================  =======  ==========================================================

Memory: the manifest, and per source at most its kept tail (all together at most
``READ_TOTAL_BYTES``). A tarball is read in two passes (:mod:`gputriage.snapshot.tar`):
headers first (compressed, that decompresses it once, at most ``TAR_TOTAL_BYTES``),
then the named members in archive order.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputriage.errors import InputError, unreadable
from gputriage.io import safejson
from gputriage.io.inputs import file_kind, human
from gputriage.snapshot.budget import (
    MANIFEST,
    READ_CAP_BYTES,
    SNAPSHOT_SCHEMA,
    SPENT,
    Budget,
    Got,
    LoadBudgets,
)

__all__ = ["BUDGETS", "MANIFEST", "READ_CAP_BYTES", "SNAPSHOT_SCHEMA", "Captured", "LoadBudgets",
           "Snapshot", "decode"]

BUDGETS = LoadBudgets()  # read at each load: tests set a smaller one here



@dataclass
class Captured:
    """One source's captured text plus its manifest record."""

    name: str
    text: str | None
    record: dict = field(default_factory=dict)
    origin: str = ""
    #: payload -> the line as pasted, for lines whose framing (a quote, a container's
    #: log prefix, a JSON record...) was taken off before parsing: evidence quotes these
    framed: dict[str, str] = field(default_factory=dict, kw_only=True)

    def json(self) -> Any:
        """The JSON document of a tree/devnodes/nvml source (InputError if broken or
        nested deeper than :data:`gputriage.io.safejson.MAX_DEPTH`)."""
        if self.text is None:
            return None
        try:
            return safejson.loads(self.text)
        except ValueError as exc:
            raise InputError(f"{self.origin or self.name}: not valid JSON "
                             f"({str(exc)[:120]})") from None


# Event logs captured from the host: two inputs of one host hold overlapping stretches
# of them (the same boot read twice), so they add up line by line. Every source read
# from pastes only (kind "input": a job's output, an NCCL log) is a log as well.
_EVENT_LOGS = frozenset({"kernel_log", "fabricmanager_journal", "persistenced_journal"})


def _is_log(name: str, mine: Captured, theirs: Captured) -> bool:
    """Whether two captures of source ``name`` add up rather than replace."""
    from gputriage import sources

    if name in _EVENT_LOGS:
        return True
    try:
        src = sources.get(name)
    except KeyError:
        return False
    return src.kind == "input" and src.suffix != ".json"


def _append_log(mine: Captured, theirs: Captured) -> None:
    """``mine`` followed by the lines of ``theirs`` it does not hold yet."""
    held = set(mine.text.splitlines()) if mine.text is not None else set()
    new = [ln for ln in (theirs.text or "").splitlines() if ln not in held]
    if not new:
        return
    mine.text = (mine.text or "").rstrip("\n") + "\n" + "\n".join(new) + "\n"
    mine.origin = f"{mine.origin}, {theirs.origin}"
    for payload, line in theirs.framed.items():
        mine.framed.setdefault(payload, line)


def _is_newer(theirs: dict | None, mine: dict | None) -> bool:
    """Whether the input of manifest ``theirs`` was taken after (or with) ``mine``'s;
    True when either time is unknown (the later given is taken as the newer)."""
    a, b = (theirs or {}).get("created"), (mine or {}).get("created")
    if not isinstance(a, str) or not isinstance(b, str):
        return True
    from datetime import datetime

    try:
        return datetime.fromisoformat(a) >= datetime.fromisoformat(b)
    except (TypeError, ValueError):
        return True


def decode(data: bytes | bytearray) -> str:
    """Bytes from a host are not always UTF-8: never fail on them."""
    return data.decode("utf-8", errors="replace")


class Snapshot:
    """The captured sources of one host, from wherever they came."""

    def __init__(self, captures: dict[str, Captured] | None = None,
                 manifest: dict | None = None, origin: str = "",
                 problems: list[str] | None = None) -> None:
        self.captures: dict[str, Captured] = dict(captures or {})
        self.manifest = manifest
        self.origin = origin
        self.problems: list[str] = list(problems or [])

    # -- access ----------------------------------------------------------------
    def get(self, name: str) -> Captured | None:
        """The capture of a source when it holds text (possibly empty)."""
        cap = self.captures.get(name)
        if cap is None or cap.text is None:
            return None
        return cap

    def text(self, name: str) -> str | None:
        cap = self.get(name)
        return cap.text if cap else None

    def record(self, name: str) -> dict | None:
        cap = self.captures.get(name)
        return cap.record if cap else None

    def missing_reason(self, name: str) -> str:
        """Why a source has no text: for skipped rules and the report."""
        cap = self.captures.get(name)
        if cap is None:
            return f"{name}: not in the input"
        rec = cap.record
        kind = rec.get("error") or "no output"
        detail = rec.get("error_detail")
        return f"{name}: {kind}" + (f" ({detail})" if detail else "")

    def names(self) -> list[str]:
        return sorted(self.captures)

    def merge(self, other: Snapshot) -> None:
        """Combine another input of the same host, source by source: a source only one
        input has is taken; text beats a failed record; an event log (the kernel log, a
        unit's journal, a pasted job output) adds the other's lines it does not hold
        yet, in input order; any other source is a state read at one time (an NVML or
        tree JSON document, nvidia-smi, /proc), and the newer input's reading wins
        (the later manifest ``created``; among inputs without one, the later given):
        two documents are never concatenated."""
        newer = _is_newer(other.manifest, self.manifest)
        for name, cap in other.captures.items():
            mine = self.captures.get(name)
            if mine is None or (mine.text is None and cap.text is not None):
                self.captures[name] = cap
            elif cap.text is None or mine.text is None or cap.text == mine.text:
                continue
            elif _is_log(name, mine, cap):
                _append_log(mine, cap)
            elif newer:
                self.captures[name] = cap
        if self.manifest is None or (newer and other.manifest is not None):
            self.manifest = other.manifest
        self.problems.extend(other.problems)
        self.origin = f"{self.origin}, {other.origin}" if self.origin else other.origin

    def host_name(self) -> str | None:
        """The host an input names: its manifest's, else its hostname source's first
        line; None when it names none (a paste of one command's output)."""
        named = (self.manifest or {}).get("host")
        if not named:
            text = self.text("hostname") or ""
            named = text.strip().splitlines()[0].strip() if text.strip() else None
        return str(named) if named else None

    # -- loading ---------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike,
             other: Callable[[Any, Budget], Snapshot] | None = None) -> Snapshot:
        """A snapshot directory or tarball, under :data:`BUDGETS`; InputError if not one.
        ``other`` reads a directory or tarball without a manifest (a sosreport: see
        :mod:`gputriage.ingest.sos`) from the opened reader, under the same budget."""
        from gputriage.snapshot.tar import TarReader, looks_like_tar

        origin = str(path)
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise unreadable(origin, exc) from None
        budget = Budget(origin, BUDGETS)
        if stat.S_ISDIR(mode):
            return cls._from_files(_DirReader(Path(path), budget), budget, other)
        if not stat.S_ISREG(mode) or not looks_like_tar(origin):
            what = "" if stat.S_ISREG(mode) else f"{file_kind(mode)}, "
            raise InputError(f"{origin}: {what}not a snapshot directory or tarball")
        with TarReader(origin, budget) as reader:
            return cls._from_files(reader, budget, other)

    @classmethod
    def _from_files(cls, reader: Any, budget: Budget,
                    other: Callable[[Any, Budget], Snapshot] | None = None) -> Snapshot:
        origin = budget.origin
        raw = reader.manifest()
        if raw is None and other is not None:
            return other(reader, budget)
        if raw is None:
            raise InputError(f"{origin}: no {MANIFEST}: not a gputriage snapshot "
                             "(a half-written one, or another archive)")
        manifest, problems = check_manifest(raw, origin, budget.limits)
        records: dict[str, dict] = manifest["sources"]
        got = reader.read(sorted({r["file"] for r in records.values() if r.get("file")}))
        texts: dict[str, str] = {}  # by file: decoded once, its bytes dropped at once
        captures: dict[str, Captured] = {}
        spent: list[str] = []
        for name, rec in records.items():
            fname = rec.get("file")
            text = None
            if fname in texts:
                text = texts[fname]
            elif fname:
                item = got.pop(fname)
                if item.data is None:
                    rec = _unread(rec, item, fname, origin, spent, problems)
                else:
                    text = texts[fname] = decode(item.data)
                    if item.size > len(item.data):
                        problems.append(f"{origin}: {fname}: {human(item.size)}, only the "
                                        f"last {human(len(item.data))} read")
            captures[name] = Captured(name, text, rec, f"{origin}:{fname or name}")
            problems += _stray_lines(origin, name, rec.get("strays"))
        if spent:
            shown = ", ".join(spent[:10]) + (f" and {len(spent) - 10} more" if spent[10:] else "")
            problems.append(f"{origin}: {len(spent)} source(s) not read, the "
                            f"{human(budget.limits.read_total)} read budget was spent: {shown}")
        manifest["sources"] = {name: cap.record for name, cap in captures.items()}
        return cls(captures, manifest, origin, problems)


MAX_STRAY_LINES = 5  # per source


def _stray_lines(origin: str, name: str, strays: Any) -> list[str]:
    """A problem line per process a collected command left behind (collect/confine.py):
    one that left its process group (killed), or one that survived SIGKILL."""
    if not isinstance(strays, list):
        return []
    said = [s[:200] for s in strays if isinstance(s, str)]
    lines = [f"{origin}: {name}: left a process behind, {s}" for s in said[:MAX_STRAY_LINES]]
    if len(said) > MAX_STRAY_LINES:
        lines.append(f"{origin}: {name}: {len(said) - MAX_STRAY_LINES} more processes left")
    return lines


def _unread(rec: dict, item: Got, fname: str, origin: str, spent: list[str],
            problems: list[str]) -> dict:
    """The record of a source whose file was not read, and the problem line it adds."""
    if item.reason == SPENT:
        spent.append(fname)
        detail = SPENT
    elif item.reason:
        problems.append(f"{origin}: {fname}: {item.reason}: not read")
        detail = item.reason
    else:
        problems.append(f"{origin}: {fname} listed in the manifest but missing")
        detail = "file missing from snapshot"
    return {**rec, "error": rec.get("error") or "absent", "error_detail": detail}


# -- the manifest's shape --------------------------------------------------------------
_MANIFEST_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "host": ((str,), "a string"), "boot_id": ((str,), "a string"),
    "created": ((str,), "a string"), "tool_version": ((str,), "a string"),
    "complete": ((bool,), "true or false"),
}
# The record fields the analysis reads; None is always allowed.
_RECORD_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "kind": ((str,), "a string"), "target": ((str, list), "a string or a list of strings"),
    "rc": ((int,), "an integer"), "duration_s": ((int, float), "a number"),
    "bytes": ((int,), "an integer"), "truncated": ((bool,), "true or false"),
    "error": ((str,), "a string"), "error_detail": ((str,), "a string"),
    "file": ((str,), "a path in the snapshot"),
    "strays": ((list,), "a list"),
}


def _what(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


def _typed(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is no rc, no byte count
    return isinstance(value, types)


def safe_path(name: str) -> str | None:
    """``name`` as a normalized relative path inside the snapshot; None when it is
    absolute, empty or leaves the snapshot (``..``)."""
    if not name or "\0" in name or name.startswith("/"):
        return None
    norm = posixpath.normpath(name)
    if norm in (".", "..") or norm.startswith("../"):
        return None
    return norm


def check_record(rec: dict) -> tuple[dict, str]:
    """A source record with its ``file`` normalized, and what is wrong with it (empty
    when nothing is); a record with a fault is replaced by a "malformed" one."""
    fault = ""
    for key, (types, expected) in _RECORD_FIELDS.items():
        value = rec.get(key)
        if value is not None and not _typed(value, types):
            fault = f"{key!r} is {_what(value)}, expected {expected}"
            break
    target = rec.get("target")
    if not fault and isinstance(target, list) and not all(isinstance(t, str) for t in target):
        fault = "'target' is a list holding other things than strings"
    fname = rec.get("file")
    if not fault and isinstance(fname, str) and fname:
        norm = safe_path(fname)
        if norm is None:
            fault = f"'file' {fname[:80]!r} is not a path inside the snapshot"
        elif norm != fname:
            rec = {**rec, "file": norm}
    if fault:
        kind = rec.get("kind") if isinstance(rec.get("kind"), str) else None
        return {"kind": kind, "error": "malformed",
                "error_detail": f"manifest record: {fault}"}, fault
    return rec, ""


def check_manifest(raw: bytes | bytearray, origin: str,
                   limits: LoadBudgets) -> tuple[dict, list[str]]:
    """The manifest with its shape checked, and the problems met: InputError when it is
    not one; a wrong-typed field is a problem line and is dropped."""
    try:
        doc = safejson.loads(decode(raw))
    except ValueError as exc:
        raise InputError(f"{origin}: {MANIFEST} is corrupt ({str(exc)[:120]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("sources"), dict):
        raise InputError(f"{origin}: {MANIFEST} has no 'sources' table")
    schema = doc.get("schema")
    if not isinstance(schema, str) or not schema.startswith("gputriage/snapshot/"):
        raise InputError(f"{origin}: unknown snapshot schema {str(schema)[:80]!r}")
    if len(doc["sources"]) > limits.sources:
        raise InputError(f"{origin}: more than {limits.sources} sources in {MANIFEST}: "
                         "not a gputriage snapshot")
    problems: list[str] = []
    manifest = dict(doc)
    for key, (types, expected) in _MANIFEST_FIELDS.items():
        value = doc.get(key)
        if value is not None and not _typed(value, types):
            problems.append(f"{origin}: {MANIFEST}: {key!r} is {_what(value)}, expected "
                            f"{expected}: ignored")
            manifest[key] = None
    if manifest.get("complete") is False:
        problems.append(f"{origin}: the snapshot was not finished (collection interrupted)")
    records: dict[str, dict] = {}
    for name, rec in doc["sources"].items():
        if not isinstance(rec, dict):
            problems.append(f"{origin}: manifest entry {name[:80]!r} is malformed")
            continue
        records[name], fault = check_record(rec)
        if fault:
            problems.append(f"{origin}: manifest entry {name[:80]!r}: {fault}; counted "
                            "as missing")
    manifest["sources"] = records
    return manifest, problems


# -- reading a directory ---------------------------------------------------------------
def read_tail(fd: int, size: int, keep: int) -> bytes:
    """The last ``keep`` bytes of an open file of ``size`` bytes (fewer if it shrank)."""
    buf = bytearray()
    pos = size - keep
    while len(buf) < keep:
        piece = os.pread(fd, min(keep - len(buf), 1 << 24), pos + len(buf))
        if not piece:
            break
        buf += piece
    return bytes(buf)


class _DirReader:
    """Reads the regular files of a snapshot directory, never anything else."""

    def __init__(self, root: Path, budget: Budget) -> None:
        self.root = os.path.realpath(root)
        self.budget = budget

    def manifest(self) -> bytes | bytearray | None:
        cap = self.budget.limits.manifest_bytes
        got = self._read(MANIFEST, cap)
        if got.data is None and got.reason:
            raise InputError(f"{self.budget.origin}: {MANIFEST} is {got.reason}")
        if got.size > cap:
            raise InputError(f"{self.budget.origin}: {MANIFEST} is larger than {human(cap)}: "
                             "not a gputriage snapshot")
        return got.data

    def read(self, names: Iterable[str]) -> dict[str, Got]:
        out = {}
        for name in names:
            self.budget.check_time()
            out[name] = self._read(name, self.budget.limits.read_cap, spend=True)
        return out

    def _read(self, name: str, cap: int, spend: bool = False) -> Got:
        opened = self._open(name)
        if isinstance(opened, Got):
            return opened
        fd, size = opened
        try:
            keep = min(size, cap)
            if spend and keep > self.budget.left:
                return Got(None, size, SPENT)
            data = read_tail(fd, size, keep)
        except OSError as exc:
            return Got(None, size, f"unreadable ({exc.strerror or exc})")
        finally:
            os.close(fd)
        if spend:
            self.budget.left -= len(data)
        return Got(data, size)

    def _open(self, name: str) -> tuple[int, int] | Got:
        """The open descriptor and size of a regular file inside the snapshot, or why
        not: a FIFO, device or socket is never opened, a link may not leave the root."""
        real = os.path.realpath(os.path.join(self.root, name))
        if os.path.commonpath([real, self.root]) != self.root:
            return Got(None, reason="a link pointing outside the snapshot")
        try:
            st = os.lstat(real)
            if not stat.S_ISREG(st.st_mode):
                return Got(None, reason=f"{file_kind(st.st_mode)}, not a regular file")
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return Got(None)
        except OSError as exc:
            return Got(None, reason=f"unreadable ({exc.strerror or exc})")
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            return Got(None, reason="replaced while it was opened")
        return fd, now.st_size
