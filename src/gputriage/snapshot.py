"""Snapshots: a directory (or .tar.gz of one) with ``manifest.json`` and the
captured sources under ``sources/``.

Everything after collection reads a :class:`Snapshot`. Pasted outputs and
nvidia-bug-report logs are turned into the same object (see ``ingest``), so
parsers and rules never know where their text came from.
"""

from __future__ import annotations

import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputriage.errors import InputError

SNAPSHOT_SCHEMA = "gputriage/snapshot/v1"
MANIFEST = "manifest.json"
# A single source is never read past this many bytes (the tail is kept).
READ_CAP_BYTES = 256 * 1024 * 1024
_TAR_TOTAL_CAP = 2 * 1024 * 1024 * 1024


@dataclass
class Captured:
    """One source's captured text plus its manifest record."""

    name: str
    text: str | None
    record: dict = field(default_factory=dict)
    origin: str = ""

    def json(self) -> Any:
        """The JSON document of a tree/devnodes/nvml source (InputError if broken)."""
        if self.text is None:
            return None
        try:
            return json.loads(self.text)
        except ValueError as exc:
            raise InputError(f"{self.origin or self.name}: not valid JSON ({exc})") from None


def decode(data: bytes) -> str:
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
        """Combine another input of the same host; text beats a failed record."""
        for name, cap in other.captures.items():
            mine = self.captures.get(name)
            if mine is None or (mine.text is None and cap.text is not None):
                self.captures[name] = cap
            elif cap.text is not None and mine.text is not None and cap.text != mine.text:
                # two inputs of one kind (e.g. two kernel logs): keep both, in order
                mine.text = mine.text.rstrip("\n") + "\n" + cap.text
                mine.origin = f"{mine.origin}, {cap.origin}"
        if self.manifest is None:
            self.manifest = other.manifest
        self.problems.extend(other.problems)
        self.origin = f"{self.origin}, {other.origin}" if self.origin else other.origin

    # -- loading ---------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike) -> Snapshot:
        p = Path(path)
        if p.is_dir():
            return cls._from_files(_DirReader(p), str(p))
        if _looks_like_tar(p):
            reader = _TarReader(p)
            try:
                return cls._from_files(reader, str(p))
            finally:
                reader.tar.close()
        raise InputError(f"{p}: not a snapshot directory or tarball")

    @classmethod
    def _from_files(cls, reader: _Reader, origin: str) -> Snapshot:
        raw = reader.read(MANIFEST)
        if raw is None:
            raise InputError(f"{origin}: no {MANIFEST}: not a gputriage snapshot "
                             "(a half-written one, or another archive)")
        try:
            manifest = json.loads(decode(raw))
        except ValueError as exc:
            raise InputError(f"{origin}: {MANIFEST} is corrupt ({exc})") from None
        if not isinstance(manifest, dict) or not isinstance(manifest.get("sources"), dict):
            raise InputError(f"{origin}: {MANIFEST} has no 'sources' table")
        schema = manifest.get("schema", "")
        if not str(schema).startswith("gputriage/snapshot/"):
            raise InputError(f"{origin}: unknown snapshot schema {schema!r}")
        problems: list[str] = []
        if manifest.get("complete") is False:
            problems.append(f"{origin}: the snapshot was not finished (collection interrupted)")
        captures: dict[str, Captured] = {}
        for name, rec in manifest["sources"].items():
            if not isinstance(rec, dict):
                problems.append(f"{origin}: manifest entry {name!r} is malformed")
                continue
            text = None
            fname = rec.get("file")
            if fname:
                data = reader.read(fname)
                if data is None:
                    problems.append(f"{origin}: {fname} listed in the manifest but missing")
                    rec = {**rec, "error": rec.get("error") or "absent",
                           "error_detail": "file missing from snapshot"}
                else:
                    text = decode(data)
            captures[name] = Captured(name, text, rec, f"{origin}:{fname or name}")
        return cls(captures, manifest, origin, problems)


def _looks_like_tar(path: Path) -> bool:
    """gzip magic, or a ustar header: cheap, and never scans a huge file."""
    try:
        with path.open("rb") as fh:
            head = fh.read(512)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return head[:2] == b"\x1f\x8b" or head[257:262] == b"ustar"


class _Reader:
    def read(self, name: str) -> bytes | None:  # pragma: no cover - interface
        raise NotImplementedError


class _DirReader(_Reader):
    def __init__(self, root: Path) -> None:
        self.root = root

    def read(self, name: str) -> bytes | None:
        p = (self.root / name)
        try:
            if not p.resolve().is_relative_to(self.root.resolve()):
                return None
            with p.open("rb") as fh:
                size = p.stat().st_size
                if size > READ_CAP_BYTES:
                    fh.seek(size - READ_CAP_BYTES)
                return fh.read(READ_CAP_BYTES)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from None


class _TarReader(_Reader):
    """Reads members of a snapshot tarball, whatever its top folder is called."""

    def __init__(self, path: Path) -> None:
        try:
            self.tar = tarfile.open(path, "r:*")  # noqa: SIM115 - closed by Snapshot.load
            members = self.tar.getmembers()
        except (tarfile.TarError, OSError, EOFError) as exc:
            detail = " ".join(str(exc).split())  # tarfile lists every method it tried
            raise InputError(f"{path}: corrupt or truncated tarball ({detail[:200]})") from None
        self.path = path
        self.members: dict[str, tarfile.TarInfo] = {}
        prefix = ""
        for m in members:
            if m.isfile() and m.name.rstrip("/").endswith(MANIFEST):
                prefix = m.name[: -len(MANIFEST)]
                break
        total = 0
        for m in members:
            if m.isfile() and m.name.startswith(prefix):
                total += m.size
                self.members[m.name[len(prefix):]] = m
        if total > _TAR_TOTAL_CAP:
            raise InputError(f"{path}: snapshot tarball unpacks to {total} bytes, too large")

    def read(self, name: str) -> bytes | None:
        m = self.members.get(name)
        if m is None:
            return None
        try:
            fh = self.tar.extractfile(m)
            if fh is None:
                return None
            if m.size > READ_CAP_BYTES:
                fh.seek(m.size - READ_CAP_BYTES)
            return fh.read(READ_CAP_BYTES)
        except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
            raise InputError(f"{self.path}: member {name} is unreadable ({exc})") from None
