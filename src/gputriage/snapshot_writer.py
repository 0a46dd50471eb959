"""Writing snapshots: the manifest records and the payloads of a collection (or a
scenario) written to a directory or a ``.tar.gz`` (read back by :mod:`gputriage.snapshot`)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

from gputriage import sources
from gputriage.snapshot import MANIFEST, SNAPSHOT_SCHEMA


def new_manifest(host: str, created: str, boot_id: str | None, tool_version: str,
                 extra: dict | None = None) -> dict:
    return {
        "schema": SNAPSHOT_SCHEMA,
        "tool_version": tool_version,
        "host": host,
        "created": created,
        "boot_id": boot_id,
        "complete": False,
        "sources": {},
        **(extra or {}),
    }


def source_record(name: str, *, rc: int | None = 0, duration_s: float = 0.0,
                  nbytes: int = 0, truncated: bool = False, error: str | None = None,
                  error_detail: str | None = None, argv: list[str] | None = None,
                  with_file: bool = True) -> dict:
    """The manifest record of one source (``error``: absent / permission /
    timeout / not-applicable / failed, or None)."""
    spec = sources.get(name)
    target: str | list[str] = argv if argv is not None else spec.target
    return {
        "kind": spec.kind,
        "target": target,
        "rc": rc,
        "duration_s": round(duration_s, 4),
        "bytes": nbytes,
        "truncated": truncated,
        "error": error,
        "error_detail": error_detail,
        "file": spec.filename if with_file else None,
    }


def write_snapshot(out: str | os.PathLike, manifest: dict,
                   payloads: dict[str, bytes]) -> Path:
    """Write payloads (by source name) and the manifest; a ``.tar.gz`` path
    gives a tarball. The manifest is written last, atomically, with
    ``complete: true``: a half-written snapshot is recognisable as such."""
    out = Path(out)
    manifest = {**manifest, "complete": True}
    body = json.dumps(manifest, indent=2, sort_keys=True).encode()
    if out.name.endswith((".tar.gz", ".tgz")):
        top = out.name.removesuffix(".tar.gz").removesuffix(".tgz")
        tmp = out.with_name(out.name + ".part")
        with tarfile.open(tmp, "w:gz") as tar:
            for name, data in payloads.items():
                _add_member(tar, f"{top}/{sources.get(name).filename}", data)
            _add_member(tar, f"{top}/{MANIFEST}", body)
        os.replace(tmp, out)
        return out
    (out / "sources").mkdir(parents=True, exist_ok=True)
    for name, data in payloads.items():
        (out / sources.get(name).filename).write_bytes(data)
    tmp = out / (MANIFEST + ".part")
    tmp.write_bytes(body)
    os.replace(tmp, out / MANIFEST)
    return out


def _add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))
