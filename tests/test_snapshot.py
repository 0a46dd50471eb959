"""Snapshot loading: bad input is a clear InputError or a partial view, never a crash."""

from __future__ import annotations

import json
import tarfile

import pytest

from gputriage.errors import InputError
from gputriage.ingest import load_input
from gputriage.snapshot.bundle import Snapshot
from gputriage.snapshot.writer import new_manifest, source_record, write_snapshot


def _write(tmp_path, name="snap"):
    manifest = new_manifest("h1", "2026-12-01T00:00:00+00:00", "b00t", "0.1.0")
    payloads = {"proc_modules": b"nvidia 1 0 - Live 0x0\n", "uname": b"Linux h1 6.1.0 x\n"}
    for source, data in payloads.items():
        manifest["sources"][source] = source_record(source, nbytes=len(data))
    manifest["sources"]["ibstat"] = source_record("ibstat", rc=None, error="absent",
                                                  with_file=False)
    return write_snapshot(tmp_path / name, manifest, payloads)


def test_directory_round_trip(tmp_path):
    snap = Snapshot.load(_write(tmp_path))
    assert snap.text("uname").startswith("Linux")
    assert snap.get("ibstat") is None
    assert snap.missing_reason("ibstat") == "ibstat: absent"
    assert snap.missing_reason("nvml") == "nvml: not in the input"
    assert not snap.problems


def test_tarball_round_trip_and_any_top_folder(tmp_path):
    path = _write(tmp_path, "x.tar.gz")
    assert Snapshot.load(path).text("proc_modules").startswith("nvidia")


@pytest.mark.parametrize("mode, suffix", [("w:xz", ".tar.xz"), ("w:bz2", ".tar.bz2"),
                                           ("w:gz", ".tgz"), ("w", ".tar")])
def test_a_tarball_is_read_whatever_its_compression(tmp_path, mode, suffix):
    folder = _write(tmp_path)
    path = tmp_path / f"x{suffix}"
    with tarfile.open(path, mode) as tar:
        tar.add(folder, arcname="snap")
    assert Snapshot.load(path).text("proc_modules").startswith("nvidia")
    assert load_input(str(path)).text("uname").startswith("Linux")


def test_missing_manifest(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(InputError, match="no manifest.json"):
        Snapshot.load(tmp_path / "d")


def test_corrupt_manifest(tmp_path):
    path = _write(tmp_path)
    (path / "manifest.json").write_text('{"schema": "gputriage/snapshot/v1", "sour')
    with pytest.raises(InputError, match="corrupt"):
        Snapshot.load(path)


def test_foreign_schema(tmp_path):
    path = _write(tmp_path)
    (path / "manifest.json").write_text(json.dumps({"schema": "other/v9", "sources": {}}))
    with pytest.raises(InputError, match="unknown snapshot schema"):
        Snapshot.load(path)


def test_half_written_snapshot_is_flagged_and_missing_files_reported(tmp_path):
    path = _write(tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["complete"] = False
    (path / "manifest.json").write_text(json.dumps(manifest))
    (path / "sources" / "uname.txt").unlink()
    snap = Snapshot.load(path)
    assert any("not finished" in p for p in snap.problems)
    assert any("uname" in p and "missing" in p for p in snap.problems)
    assert snap.get("uname") is None
    assert snap.text("proc_modules")


def test_truncated_tarball(tmp_path):
    path = _write(tmp_path, "t.tar.gz")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError):
        Snapshot.load(path)


def test_tarball_without_manifest(tmp_path):
    path = tmp_path / "other.tar.gz"
    src = tmp_path / "f.txt"
    src.write_text("hello")
    with tarfile.open(path, "w:gz") as tar:
        tar.add(src, arcname="f.txt")
    with pytest.raises(InputError, match="not a gputriage snapshot"):
        Snapshot.load(path)


def test_plain_file_is_not_a_snapshot(tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("hi")
    with pytest.raises(InputError, match="not a snapshot"):
        Snapshot.load(f)


def test_manifest_path_escape_is_refused(tmp_path):
    path = _write(tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["sources"]["uname"]["file"] = "../../etc/passwd"
    (path / "manifest.json").write_text(json.dumps(manifest))
    snap = Snapshot.load(path)
    assert snap.get("uname") is None
