"""The readers of strangers' JSON take anything: the snapshot manifest (in a directory
and in a tarball), the result documents ``diff`` compares, and the results ``fleet``
reads. Each returns, or raises InputError / FleetInputError; nothing else.

Example counts come from the hypothesis profile (tests/conftest.py): ``ci`` by
default, ``HYPOTHESIS_PROFILE=fuzz`` for a long run."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputriage.engine.analysis import analyze
from gputriage.errors import InputError
from gputriage.fleet.report import FleetInputError, load_result, record_from_result
from gputriage.results.diff import diff_views, load_view, view_from_json
from gputriage.results.document import to_json
from gputriage.snapshot.bundle import Snapshot

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
PATHS = st.sampled_from(["sources/uname.txt", "sources/../sources/uname.txt", "../x",
                         "/etc/passwd", "sources", ".", "", "manifest.json", "a\0b"])
RECORD = st.fixed_dictionaries({}, optional={
    key: JSON for key in ("kind", "target", "rc", "duration_s", "bytes", "truncated",
                          "error", "error_detail")} | {"file": PATHS | JSON})
MANIFEST = st.fixed_dictionaries(
    {"schema": st.just("gputriage/snapshot/v1") | JSON,
     "sources": st.dictionaries(st.sampled_from(["uname", "nvml", "proc_modules", "x"]),
                                RECORD | JSON, max_size=4)},
    optional={"host": JSON, "created": JSON, "boot_id": JSON, "complete": JSON})
RESULT = st.fixed_dictionaries(
    {"schema": st.just("gputriage/result/v1")},
    optional={"host": JSON | st.fixed_dictionaries({}, optional={
                  "hostname": JSON, "kernel": JSON, "driver": JSON, "boot_time": JSON}),
              "gpus": st.lists(st.dictionaries(st.sampled_from(
                  ["pci_bus_id", "uuid", "name", "visible", "vbios"]), JSON), max_size=3) | JSON,
              "findings": st.lists(st.dictionaries(st.sampled_from(
                  ["id", "severity", "scope", "title", "action"]), JSON), max_size=3) | JSON,
              "digest": st.dictionaries(st.text(max_size=12), JSON, max_size=4) | JSON,
              "manifest": JSON})


def _snapshot_dir(root: Path, manifest: bytes) -> Path:
    (root / "sources").mkdir()
    (root / "sources" / "uname.txt").write_text("Linux h1 6.1.0 x\n")
    (root / "manifest.json").write_bytes(manifest)
    return root


def _snapshot_tar(root: Path, manifest: bytes) -> Path:
    path = root / "s.tar.gz"
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name, data in (("s/sources/uname.txt", b"Linux h1 6.1.0 x\n"),
                           ("s/manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _load_and_analyse(path: Path) -> None:
    try:
        snap = Snapshot.load(path)
    except InputError:
        return
    json.dumps(to_json(analyze(snap)))


@FUZZ
@given(doc=MANIFEST | JSON, in_tar=st.booleans())
def test_manifest_of_any_shape(doc, in_tar):
    with tempfile.TemporaryDirectory() as tmp:
        make = _snapshot_tar if in_tar else _snapshot_dir
        _load_and_analyse(make(Path(tmp), json.dumps(doc).encode()))


@FUZZ
@given(data=st.binary(max_size=2048), in_tar=st.booleans())
def test_manifest_of_any_bytes(data, in_tar):
    with tempfile.TemporaryDirectory() as tmp:
        make = _snapshot_tar if in_tar else _snapshot_dir
        _load_and_analyse(make(Path(tmp), data))


@FUZZ
@given(data=st.binary(max_size=2048))
def test_any_bytes_as_a_snapshot_tarball(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.tar.gz"
        path.write_bytes(b"\x1f\x8b" + data)
        _load_and_analyse(path)


@FUZZ
@given(a=RESULT | JSON, b=RESULT)
def test_diff_result_documents_of_any_shape(a, b):
    try:
        side_a, side_b = view_from_json(a, "a"), view_from_json(b, "b")
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    diff = diff_views(side_a, side_b)
    assert diff.exit_status in (0, 1)


@FUZZ
@given(doc=RESULT | JSON)
def test_diff_reads_any_json_file(doc):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "r.json")
        Path(path).write_text(json.dumps(doc))
        with contextlib.suppress(InputError):
            load_view(path)


@FUZZ
@given(doc=RESULT | JSON)
def test_fleet_record_of_any_document(doc):
    try:
        rec = record_from_result(doc, "x")
    except FleetInputError:
        return
    assert rec.node


@FUZZ
@given(data=st.binary(max_size=2048) | RESULT.map(lambda d: json.dumps(d, indent=2).encode()))
def test_fleet_reads_any_result_file(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "n.json")
        Path(path).write_bytes(data)
        with contextlib.suppress(FleetInputError):
            load_result(path)
