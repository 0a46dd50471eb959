"""Snapshots and fleet inputs from strangers are read under budgets: member counts,
declared and decompressed sizes, time, only regular files, and JSON of any shape or
depth. Each case ends in a result, a problem line or one InputError (exit 66)."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import os
import socket
import tarfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from resultkit import document, finding, gpus, host

from gputriage.cli import EXIT_INPUT, Environment, main
from gputriage.errors import InputError
from gputriage.fleet import walk as fleet_walk
from gputriage.fleet.report import load_fleet
from gputriage.snapshot import bundle as snapshot
from gputriage.snapshot.bundle import Snapshot
from gputriage.snapshot.writer import new_manifest, source_record, write_snapshot

SCHEMA = "gputriage/snapshot/v1"
DEEP = "[" * 100_000  # json.loads raises RecursionError on it
UNAME = b"Linux h1 6.1.0 x\n"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def budgets(monkeypatch: pytest.MonkeyPatch, **kw: float) -> None:
    monkeypatch.setattr(snapshot, "BUDGETS", dataclasses.replace(snapshot.BUDGETS, **kw))


def bounded(fn: Callable[[], object], seconds: float = 10.0) -> object:
    """``fn()`` in a thread that must finish within ``seconds`` (a FIFO must not hang)."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except Exception as exc:  # handed to the test
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "hung"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def manifest_bytes(files: dict[str, str], **extra: object) -> bytes:
    doc = {"schema": SCHEMA, "complete": True,
           "sources": {name: {"file": f, "rc": 0} for name, f in files.items()}, **extra}
    return json.dumps(doc).encode()


class Zeros(io.RawIOBase):
    """``size`` zero bytes, produced as they are read (huge members cost no memory)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = min(len(buf), self.left)
        buf[:n] = bytes(n)
        self.left -= n
        return n


def make_tar(path: Path, members: Iterable[tuple[str, bytes | int]], gz: bool = True) -> Path:
    """A tarball of ``(name, bytes or a size of zeros)``, gzip level 1."""
    raw = gzip.open(path, "wb", compresslevel=1) if gz else open(path, "wb")  # noqa: SIM115
    with raw, tarfile.open(fileobj=raw, mode="w|") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = data if isinstance(data, int) else len(data)
            tar.addfile(info, Zeros(data) if isinstance(data, int) else io.BytesIO(data))
    return path


def snapshot_dir(tmp_path: Path, name: str = "snap") -> Path:
    manifest = new_manifest("h1", "2026-12-01T00:00:00+00:00", "b00t", "0.1.0")
    payloads = {"uname": UNAME, "proc_modules": b"nvidia 1 0 - Live 0x0\n"}
    for source, data in payloads.items():
        manifest["sources"][source] = source_record(source, nbytes=len(data))
    return write_snapshot(tmp_path / name, manifest, payloads)


def edit_manifest(path: Path, change: Callable[[dict], None]) -> None:
    doc = json.loads((path / "manifest.json").read_text())
    change(doc)
    (path / "manifest.json").write_text(json.dumps(doc))


# -- tarball budgets -------------------------------------------------------------------
def test_member_count_budget_stops_the_walk(tmp_path, monkeypatch):
    budgets(monkeypatch, tar_members=1000)
    path = make_tar(tmp_path / "many.tar.gz", ((f"s/sources/e{i}", b"") for i in range(20_000)))
    started = time.monotonic()
    with pytest.raises(InputError, match="more than 1000 members: not a gputriage snapshot"):
        Snapshot.load(path)
    assert time.monotonic() - started < 1.0


def test_real_member_budget_stops_before_reading_the_rest(tmp_path):
    path = make_tar(tmp_path / "many.tar", ((f"s/e{i}", b"") for i in range(4097)), gz=False)
    with path.open("ab") as fh:  # what lies past member 4,097 is never looked at
        fh.write(b"\xff" * 4096)
    with pytest.raises(InputError, match="more than 4096 members"):
        Snapshot.load(path)


def test_declared_size_over_the_total_is_refused_before_any_data_is_walked(tmp_path):
    header = tarfile.TarInfo("s/sources/big.txt")
    header.size = 3 << 30  # the data is not even there: the header alone decides
    path = tmp_path / "liar.tar.gz"
    path.write_bytes(gzip.compress(header.tobuf(), compresslevel=1))
    with pytest.raises(InputError, match=r"unpack to more than 2\.0 GiB"):
        Snapshot.load(path)


def test_huge_zero_members_cost_bounded_time_and_memory(tmp_path, monkeypatch):
    mib = 1 << 20
    budgets(monkeypatch, read_cap=4 * mib, tar_skip=4 * mib, read_total=13 * mib)
    names = [f"sources/z{i}.txt" for i in range(7)]
    members = [(f"s/{n}", 6 * mib) for n in names[:6]] + [("s/" + names[6], 9 * mib)]
    manifest = manifest_bytes({f"s{i}": n for i, n in enumerate(names)})
    path = make_tar(tmp_path / "zeros.tar.gz", [*members, ("s/manifest.json", manifest)])
    assert path.stat().st_size < 1 << 20  # 51 MiB of members
    tracemalloc.start()
    started = time.monotonic()
    try:
        snap = Snapshot.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 3.0
    assert peak < 24 * mib  # two kept tails and their text, not 45 MiB of members
    # each read walks 2 MiB of head and keeps a 4 MiB tail: two fit in 13 MiB
    kept = [n for n in snap.names() if snap.text(n) is not None]
    assert kept == ["s0", "s1"]
    assert [len(snap.text(n)) for n in kept] == [4 * mib, 4 * mib]  # the tails only
    text = "\n".join(snap.problems)
    assert "only the last 4.0 MiB read" in text
    assert "read budget was spent" in text and "sources/z5.txt" in text
    assert "sources/z6.txt: a member of 9.0 MiB, over 8.0 MiB: not read" in text
    assert snap.missing_reason("s6").startswith("s6: absent")


def test_total_declared_budget_lowered(tmp_path, monkeypatch):
    budgets(monkeypatch, tar_total=1 << 20)
    path = make_tar(tmp_path / "t.tar.gz", [("s/a", 600_000), ("s/b", 600_000)])
    with pytest.raises(InputError, match="unpack to more than 1.0 MiB"):
        Snapshot.load(path)


def test_a_huge_pax_header_is_refused(tmp_path, monkeypatch):
    budgets(monkeypatch, tar_header=4096)
    path = tmp_path / "pax.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("s/manifest.json")
        info.pax_headers = {"comment": "x" * 20_000}
        tar.addfile(info, io.BytesIO())
    with pytest.raises(InputError, match="tar header record"):
        Snapshot.load(path)


def test_wall_time_budget(tmp_path, monkeypatch):
    budgets(monkeypatch, load_s=0.0)
    path = make_tar(tmp_path / "t.tar.gz", [("s/manifest.json", manifest_bytes({}))])
    with pytest.raises(InputError, match=r"loading took longer than 0 s"):
        Snapshot.load(path)
    with pytest.raises(InputError, match="loading took longer"):
        Snapshot.load(snapshot_dir(tmp_path))


# -- which manifest --------------------------------------------------------------------
def _real(prefix: str = "snap/") -> list[tuple[str, bytes | int]]:
    return [(f"{prefix}sources/uname.txt", UNAME),
            (f"{prefix}manifest.json", manifest_bytes({"uname": "sources/uname.txt"}))]


def test_a_decoy_manifest_first_is_not_taken(tmp_path):
    decoy = json.dumps({"schema": SCHEMA, "sources": {}}).encode()
    path = make_tar(tmp_path / "d.tar.gz", [("decoy-manifest.json", decoy), *_real()])
    assert Snapshot.load(path).text("uname") == UNAME.decode()


def test_a_nested_manifest_beside_the_snapshot_is_explained(tmp_path):
    decoy = json.dumps({"schema": SCHEMA, "sources": {}}).encode()
    path = make_tar(tmp_path / "d.tar.gz", [("x/y/manifest.json", decoy), *_real()])
    with pytest.raises(InputError, match="no manifest.json: not a gputriage snapshot"):
        Snapshot.load(path)


def test_a_manifest_at_the_tar_root_is_taken(tmp_path):
    path = make_tar(tmp_path / "r.tar.gz", _real("./"))
    assert Snapshot.load(path).text("uname") == UNAME.decode()


# -- a snapshot directory opens only regular files inside it ---------------------------
def test_fifo_socket_and_outside_link_in_a_snapshot_dir(tmp_path):
    path = snapshot_dir(tmp_path)
    sources = path / "sources"
    os.mkfifo(sources / "fifo.txt")
    (tmp_path / "outside.txt").write_text("secret\n")
    (sources / "out.txt").symlink_to(tmp_path / "outside.txt")
    (sources / "in.txt").symlink_to(sources / "uname.txt")
    sock = socket.socket(socket.AF_UNIX)
    sock_path = sources / "s.sock"
    try:
        sock.bind(str(sock_path))
    except OSError:  # path too long for AF_UNIX here
        sock_path = None

    def point(doc: dict) -> None:
        for name, f in (("fifo", "fifo.txt"), ("out", "out.txt"), ("inside", "in.txt"),
                        ("sock", "s.sock"), ("dev", "../../../../../../dev/zero")):
            doc["sources"][name] = {"file": f"sources/{f}", "rc": 0}
    try:
        edit_manifest(path, point)
        snap = bounded(lambda: Snapshot.load(path))
    finally:
        sock.close()
    assert isinstance(snap, Snapshot)
    problems = "\n".join(snap.problems)
    assert "sources/fifo.txt: a FIFO, not a regular file: not read" in problems
    assert "sources/out.txt: a link pointing outside the snapshot" in problems
    assert snap.text("inside") == UNAME.decode()  # a link inside the snapshot is fine
    assert snap.get("fifo") is None and snap.get("out") is None and snap.get("dev") is None
    assert "not a path inside the snapshot" in problems
    if sock_path is not None:
        assert "a socket, not a regular file" in problems
    code, _, err = bounded(lambda: cli("analyze", str(path)))  # type: ignore[misc]
    assert code in (0, 1, 2, 3), err


def test_a_fifo_given_as_a_snapshot_is_refused(tmp_path):
    os.mkfifo(tmp_path / "x.tar.gz")
    with pytest.raises(InputError, match="a FIFO, not a snapshot"):
        bounded(lambda: Snapshot.load(tmp_path / "x.tar.gz"))


def test_directory_read_budget_and_tail(tmp_path, monkeypatch):
    path = snapshot_dir(tmp_path)
    budgets(monkeypatch, read_cap=8, read_total=10)
    snap = Snapshot.load(path)
    problems = "\n".join(snap.problems)
    assert "only the last 8 bytes read" in problems
    assert "1 source(s) not read, the 10 bytes read budget was spent" in problems


def test_manifest_size_and_source_count_budgets(tmp_path, monkeypatch):
    path = snapshot_dir(tmp_path)
    budgets(monkeypatch, sources=1)
    with pytest.raises(InputError, match="more than 1 sources"):
        Snapshot.load(path)
    budgets(monkeypatch, manifest_bytes=64)
    with pytest.raises(InputError, match="manifest.json is larger than 64 bytes"):
        Snapshot.load(path)


# -- JSON of any depth or shape ----------------------------------------------------------
def test_deep_manifest_is_exit_66_in_a_dir_and_a_tar(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "manifest.json").write_text('{"a":' * 100_000)
    tar = make_tar(tmp_path / "d.tar.gz", [("s/manifest.json", DEEP.encode())])
    for path in (tmp_path / "d", tar):
        code, _, err = cli("analyze", str(path))
        assert code == EXIT_INPUT and "nested too deeply" in err and err.count("\n") == 1


def test_a_manifest_nested_under_the_decoder_limit_is_refused(tmp_path):
    path = snapshot_dir(tmp_path)
    edit_manifest(path, lambda d: d.update(extra=json.loads("[" * 500 + "]" * 500)))
    code, _, err = cli("analyze", str(path))
    assert code == EXIT_INPUT and "nested more than 64 levels" in err


@pytest.mark.parametrize("value", [["sources/uname.txt"], 7, "/etc/passwd",
                                   "../../etc/passwd", "sources/../../x", "", {"a": 1}])
def test_odd_file_fields_never_leave_the_snapshot(tmp_path, value):
    path = snapshot_dir(tmp_path)
    edit_manifest(path, lambda d: d["sources"]["uname"].update(file=value))
    snap = Snapshot.load(path)
    assert snap.get("uname") is None
    code, _, err = cli("analyze", str(path))
    assert code in (0, 1, 2, 3) and "internal error" not in err


@pytest.mark.parametrize("field", ["rc", "bytes", "truncated", "error", "error_detail",
                                   "target", "duration_s", "kind"])
@pytest.mark.parametrize("value", [[1, 2], {"a": 1}, True, 3.5])
def test_wrong_typed_record_fields_are_problems(tmp_path, field, value):
    path = snapshot_dir(tmp_path)
    edit_manifest(path, lambda d: d["sources"]["uname"].update({field: value}))
    snap = Snapshot.load(path)
    expected_ok = (field == "truncated" and value is True) or (
        field == "duration_s" and value == 3.5)
    assert (snap.get("uname") is not None) == expected_ok
    if not expected_ok:
        assert any(f"'{field}' is" in p for p in snap.problems)
        assert snap.missing_reason("uname").startswith("uname: malformed")
    code, _, err = cli("analyze", str(path))
    assert code in (0, 1, 2, 3) and "internal error" not in err


def test_wrong_typed_manifest_fields_are_dropped(tmp_path):
    path = snapshot_dir(tmp_path)
    edit_manifest(path, lambda d: d.update(host=["a"], created={"x": 1}, complete="yes"))
    snap = Snapshot.load(path)
    assert snap.manifest["host"] is None and snap.manifest["created"] is None
    assert sum("expected" in p for p in snap.problems) == 3
    code, _, err = cli("analyze", "--json", str(path))
    assert code in (0, 1, 2, 3) and "internal error" not in err


# DEEP is slow: ~3 s in PyYAML's scanner, which reads the CDI spec when JSON refuses it
@pytest.mark.parametrize("body", [pytest.param(DEEP, marks=pytest.mark.slow),
                                  '{"a":' * 100_000, "[" * 500 + "]" * 500])
def test_deep_json_sources_are_problems_not_crashes(tmp_path, body):
    manifest = new_manifest("h1", "2026-12-01T00:00:00+00:00", "b00t", "0.1.0")
    payloads = {name: body.encode() for name in ("sys_module_nvidia", "nvidia_libs", "nvml",
                                                 "cdi_specs")}
    for source, data in payloads.items():
        manifest["sources"][source] = source_record(source, nbytes=len(data))
    path = write_snapshot(tmp_path / "s", manifest, payloads)
    code, out, err = cli("analyze", str(path))
    assert code in (0, 1, 2, 3) and "internal error" not in err
    assert "not valid JSON" in out
    code, _, err = cli("diff", str(path), str(path))
    assert code in (0, 1) and "internal error" not in err


@pytest.mark.parametrize("body", [DEEP, '{"schema": "gputriage/result/v1", "host": ' + DEEP,
                                  '{"schema": "gputriage/result/v1", "digest": {"k": '
                                  + "[" * 500 + "]" * 500 + "}}"])
def test_deep_json_given_to_diff_is_exit_66(tmp_path, body):
    path = tmp_path / "r.json"
    path.write_text(body)
    code, _, err = cli("diff", str(path), str(path))
    assert code == EXIT_INPUT and err.count("\n") == 1


def test_a_result_with_a_field_nested_past_the_parser_is_refused_not_read_as_empty(tmp_path):
    """Read as a paste it would be a host with no GPU: "8 GPUs removed" against a good
    result. It is refused, one line naming it (issue 29)."""
    good = document(gpu_rows=gpus(8))
    (tmp_path / "good.json").write_text(json.dumps(good))
    body = json.dumps(good)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (tmp_path / "deep.json").write_text(body)
    code, out, err = cli("diff", str(tmp_path / "good.json"), str(tmp_path / "deep.json"))
    assert (code, out) == (EXIT_INPUT, "")
    assert err == (f"gputriage: input error: {tmp_path / 'deep.json'}: JSON nested too deeply "
                   "to read: not a result\n")


# -- fleet inputs ------------------------------------------------------------------------
def _result(name: str) -> str:
    return json.dumps(document(finding("x.y", "warning"), host_summary=host(name)))


def test_fleet_skips_fifos_and_outside_links_and_refuses_a_fifo_argument(tmp_path):
    top = tmp_path / "fleet"
    top.mkdir()
    (top / "a.json").write_text(_result("a"))
    os.mkfifo(top / "b.json")
    os.mkfifo(top / "c.tar.gz")
    (tmp_path / "elsewhere.json").write_text(_result("z"))
    (top / "out.json").symlink_to(tmp_path / "elsewhere.json")
    (top / "in.json").symlink_to(top / "a.json")
    os.mkfifo(tmp_path / "arg.json")
    report = bounded(lambda: load_fleet([str(top), str(tmp_path / "arg.json")]))
    reasons = {Path(b.path).name: b.reason for b in report.bad_inputs}
    assert reasons == {"b.json": "a FIFO, not a regular file",
                       "c.tar.gz": "a FIFO, not a regular file",
                       "out.json": f"a symbolic link pointing outside {top}",
                       "arg.json": "a FIFO, not a regular file"}
    assert report.nodes == 1 and report.duplicates == 1


def test_fleet_skips_and_names_symbolic_link_loops_and_reads_the_other_nodes(tmp_path):
    """One loop in a results folder hid every node of it (exit 66): a regression."""
    top = tmp_path / "fleet"
    (top / "rack2").mkdir(parents=True)
    for name in ("a", "b"):
        (top / f"{name}.json").write_text(_result(name))
    (top / "rack2" / "c.json").write_text(_result("c"))
    (top / "self").symlink_to("self")
    (top / "ping.json").symlink_to("pong.json")
    (top / "pong.json").symlink_to("ping.json")
    (top / "rack2" / "up").symlink_to("..")  # a link to a folder: not walked
    report = bounded(lambda: load_fleet([str(top), str(top / "self")]))
    reasons = sorted((Path(b.path).name, b.reason) for b in report.bad_inputs)
    assert reasons == [("ping.json", "a symbolic link loop"),
                       ("pong.json", "a symbolic link loop"),
                       ("self", "a symbolic link loop"), ("self", "a symbolic link loop")]
    assert report.nodes == 3
    code, out, err = cli("fleet", str(top))
    assert code == 1 and "a symbolic link loop" in out, err  # the nodes' warning


def test_fleet_walk_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(fleet_walk, "MAX_ENTRIES", 10)
    for i in range(20):
        (tmp_path / f"n{i:02}.json").write_text(_result(f"n{i}"))
    report = load_fleet([str(tmp_path)])
    assert report.nodes == 0
    assert [b.reason for b in report.bad_inputs] == [
        "more than 10 entries: the rest of it was not walked"]


@pytest.mark.parametrize("body", [DEEP, '{"a":' * 100_000,
                                  '{"schema": "gputriage/result/v1", "findings": '
                                  '[{"id": "x", "severity": ' + "[" * 900 + "]" * 900 + "}]}"])
def test_fleet_deep_json_is_a_bad_input(tmp_path, body):
    (tmp_path / "n.json").write_text(body)
    report = load_fleet([str(tmp_path)])
    assert report.bad_count + report.nodes == 1
    assert all("could not be analysed" not in b.reason for b in report.bad_inputs)


def test_diff_of_results_with_container_values_refuses_them_naming_the_field():
    """A diff compares and hashes the values it reads: a container where the schema has
    text is refused, and keys outside the schema are never read."""
    from gputriage.results.diff import diff_views, view_from_json

    doc = document(gpu_rows=gpus(1)) | {"digest": {"kernel": {"v": 1}}}
    assert diff_views(view_from_json(doc, "a"), view_from_json(doc, "b")).exit_status == 0
    doc["gpus"][0]["uuid"] = ["GPU-1"]
    with pytest.raises(InputError) as caught:
        view_from_json(doc, "a")
    assert str(caught.value) == "a: gpus[0].uuid: expected a string, got an array of 1"
