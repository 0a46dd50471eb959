"""Outputs are written as root where others may plant files: a link planted at the
output or inside it is never written through, an existing output is replaced only
with --force, a failed write leaves nothing behind, and a snapshot is private."""

from __future__ import annotations

import errno
import io
import os
import shutil
import stat
import tarfile
from pathlib import Path

import pytest
from fakehost import FakeHost

from gputriage.cli import EXIT_USAGE, Environment, main
from gputriage.fleet.scenario import write_demo
from gputriage.snapshot import writer as snapshot_writer
from gputriage.snapshot.bundle import Snapshot


def _host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path / "root", commands={("uname", "-a"): (0, "Linux n1 6.1 x86_64\n")})
    host.write("/proc/sys/kernel/hostname", "n1\n")
    host.write("/proc/modules", "nvidia 1 0 - Live 0x0\n")
    return host


def _run(argv: list[str], host: FakeHost | None = None) -> tuple[int, str]:
    err = io.StringIO()
    code = main(argv, Environment(stdout=io.StringIO(), stderr=err, host=host))
    return code, err.getvalue()


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    return victim


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gputriage: "), err
    return lines[0]


def _leftovers(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.name.startswith(".") or ".part" in p.name)


def test_a_link_planted_at_the_old_part_name_is_never_followed(tmp_path):
    victim = _victim(tmp_path)
    (tmp_path / "s.tar.gz.part").symlink_to(victim)
    code, err = _run(["collect", "-o", str(tmp_path / "s.tar.gz")], _host(tmp_path))
    assert code == 0, err
    assert victim.read_text() == "precious\n"
    assert os.readlink(tmp_path / "s.tar.gz.part") == str(victim)
    assert Snapshot.load(tmp_path / "s.tar.gz").text("uname").startswith("Linux")


def _planted_dir(tmp_path: Path) -> tuple[Path, Path, Path]:
    """An old snapshot directory with links to a file and to a directory inside."""
    victim = _victim(tmp_path)
    victim_dir = tmp_path / "victim-dir"
    victim_dir.mkdir()
    (victim_dir / "keep.txt").write_text("keep\n")
    out = tmp_path / "snap"
    (out / "sources").mkdir(parents=True)
    (out / "sources" / "uname.txt").symlink_to(victim)
    (out / "sources" / "dir").symlink_to(victim_dir)
    return out, victim, victim_dir


def test_a_link_inside_an_existing_directory_is_refused_then_replaced_unfollowed(tmp_path):
    out, victim, victim_dir = _planted_dir(tmp_path)
    host = _host(tmp_path)
    code, err = _run(["collect", "-o", str(out)], host)
    assert code == EXIT_USAGE
    assert "already exists" in _one_line_error(err) and "--force" in err
    assert host.calls == []  # refused before collecting anything
    code, err = _run(["collect", "-o", str(out), "--force"], host)
    assert code == 0, err
    assert victim.read_text() == "precious\n"
    assert (victim_dir / "keep.txt").read_text() == "keep\n"
    assert not (out / "sources" / "uname.txt").is_symlink()
    assert Snapshot.load(out).text("uname").startswith("Linux")
    assert _leftovers(tmp_path) == []


def test_removing_the_old_directory_does_not_follow_links():
    assert shutil.rmtree.avoids_symlink_attacks  # fd-based rmtree: what _swap relies on


def test_an_existing_file_is_refused_then_replaced_with_force(tmp_path):
    out = tmp_path / "s.tar.gz"
    out.write_bytes(b"old")
    code, err = _run(["collect", "-o", str(out)], _host(tmp_path))
    assert code == EXIT_USAGE and "already exists" in _one_line_error(err)
    assert out.read_bytes() == b"old"
    code, err = _run(["collect", "-o", str(out), "--force"], _host(tmp_path))
    assert code == 0, err
    assert Snapshot.load(out).text("proc_modules").startswith("nvidia")


def test_a_link_at_the_destination_is_replaced_not_written_through(tmp_path):
    victim = _victim(tmp_path)
    out = tmp_path / "s.tar.gz"
    out.symlink_to(victim)
    code, err = _run(["collect", "-o", str(out)], _host(tmp_path))
    assert code == EXIT_USAGE and "already exists" in _one_line_error(err)
    code, err = _run(["collect", "-o", str(out), "--force"], _host(tmp_path))
    assert code == 0, err
    assert not out.is_symlink() and victim.read_text() == "precious\n"
    assert tarfile.is_tarfile(out)


def test_an_empty_directory_is_a_fine_destination(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    code, err = _run(["collect", "-o", str(out)], _host(tmp_path))
    assert code == 0, err
    assert (out / "manifest.json").is_file()


def _failing(real, after: int, exc: BaseException):
    calls = []

    def write(*args, **kw):
        calls.append(1)
        if len(calls) > after:
            raise exc
        return real(*args, **kw)
    return write


ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("name", ["snap", "snap.tar.gz"])
@pytest.mark.parametrize(("exc", "code"), [(ENOSPC, 66), (KeyboardInterrupt(), 130)])
def test_a_failed_write_leaves_nothing_and_keeps_the_old_output(tmp_path, monkeypatch, name,
                                                                 exc, code):
    out = tmp_path / "out" / name
    out.parent.mkdir()
    assert _run(["collect", "-o", str(out)], _host(tmp_path))[0] == 0
    before = sorted(p.name for p in out.parent.iterdir())
    old = Snapshot.load(out).manifest
    target = "write_new" if name == "snap" else "_add_member"
    monkeypatch.setattr(snapshot_writer, target,
                        _failing(getattr(snapshot_writer, target), 2, exc))
    got, err = _run(["collect", "-o", str(out), "--force"], _host(tmp_path))
    assert got == code and "Traceback" not in err
    assert sorted(p.name for p in out.parent.iterdir()) == before  # no .part, no temp
    assert Snapshot.load(out).manifest == old


def test_a_failed_first_write_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot_writer, "write_new",
                        _failing(snapshot_writer.write_new, 1, ENOSPC))
    code, err = _run(["collect", "-o", str(tmp_path / "snap")], _host(tmp_path))
    assert code != 0 and "No space left" in _one_line_error(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


@pytest.mark.parametrize("name", ["x.zip", "x.tar", "x.tar.xz", "x.tar.bz2", "x.gz", "x.7z",
                                  "X.ZIP"])
def test_other_archive_names_are_usage_errors(tmp_path, name):
    host = _host(tmp_path)
    for argv in (["collect", "-o"], ["check", "--no-history", "--keep"],
                 ["scenario", "build", "healthy-8xh100", "-o"]):
        code, err = _run([*argv, str(tmp_path / name)], host)
        assert code == EXIT_USAGE and ".tar.gz" in _one_line_error(err), argv
    assert host.calls == [] and not (tmp_path / name).exists()


def _modes(path: Path) -> set[int]:
    return {stat.S_IMODE(p.lstat().st_mode) for p in [path, *path.rglob("*")]}


def test_snapshots_are_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        assert _run(["collect", "-o", str(tmp_path / "d")], _host(tmp_path))[0] == 0
        assert _run(["collect", "-o", str(tmp_path / "t.tgz")], _host(tmp_path))[0] == 0
    finally:
        os.umask(old)
    d = tmp_path / "d"
    assert {stat.S_IMODE(p.stat().st_mode) for p in [d, d / "sources"]} == {0o700}
    assert {stat.S_IMODE(p.stat().st_mode) for p in d.rglob("*") if p.is_file()} == {0o600}
    assert _modes(tmp_path / "t.tgz") == {0o600}
    with tarfile.open(tmp_path / "t.tgz") as tar:
        assert {m.mode for m in tar.getmembers()} == {0o600}


def test_scenario_build_refuses_to_overwrite_without_force(tmp_path):
    out = tmp_path / "s.tar.gz"
    assert _run(["scenario", "build", "healthy-8xh100", "-o", str(out)])[0] == 0
    code, err = _run(["scenario", "build", "xid79-gpu-lost", "-o", str(out)])
    assert code == EXIT_USAGE and "already exists" in _one_line_error(err)
    assert Snapshot.load(out).manifest["scenario"] == "healthy-8xh100"
    assert _run(["scenario", "build", "xid79-gpu-lost", "-o", str(out), "--force"])[0] == 0
    assert Snapshot.load(out).manifest["scenario"] == "xid79-gpu-lost"


def test_check_keep_refuses_an_existing_output_before_collecting(tmp_path):
    keep = tmp_path / "keep.tar.gz"
    keep.write_bytes(b"old")
    host = _host(tmp_path)
    code, err = _run(["check", "--no-history", "--keep", str(keep)], host)
    assert code == EXIT_USAGE and "already exists" in _one_line_error(err)
    assert host.calls == [] and keep.read_bytes() == b"old"
    code, _ = _run(["check", "--no-history", "--keep", str(keep), "--force"], host)
    assert code in (0, 1, 2, 3) and tarfile.is_tarfile(keep)


def test_fleet_scenario_is_a_directory_and_is_not_overwritten(tmp_path):
    code, err = _run(["scenario", "build", "fleet-64-xid79-driver", "-o",
                      str(tmp_path / "fleet.tar.gz")])
    assert code == EXIT_USAGE and "directory" in _one_line_error(err)
    assert not (tmp_path / "fleet.tar.gz").exists()
    out = tmp_path / "fleet"
    first = write_demo(out, nodes=2)
    assert [p.parent for p in first] == [out, out]
    with pytest.raises(snapshot_writer.OutputError, match="already exists"):
        write_demo(out, nodes=3)
    assert len(write_demo(out, nodes=3, force=True)) == 3
    assert len(list(out.iterdir())) == 3 and _leftovers(tmp_path) == []
    assert _modes(out) == {0o700, 0o600}


def test_fleet_demo_refuses_an_existing_directory_unless_forced(tmp_path):
    out = tmp_path / "demo"
    assert _run(["fleet", "--demo", str(out)])[0] == 0
    code, err = _run(["fleet", "--demo", str(out)])
    assert code == EXIT_USAGE and "--force" in _one_line_error(err)
    assert _run(["fleet", "--demo", str(out), "--force"])[0] == 0
    assert _leftovers(tmp_path) == []


# --- every single-file output goes through the same writer (issue 29) --------------------

@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("outputs") / "ok"
    assert _run(["scenario", "build", "healthy-8xh100", "-o", str(out)])[0] == 0
    return str(out)


def _expect(out: Path, healthy: str, *force: str) -> tuple[int, str]:
    return _run(["expect", "--from", healthy, "-o", str(out), *force])


def test_expect_never_creates_the_target_of_a_dangling_link(tmp_path, healthy):
    target = tmp_path / "elsewhere" / "created-as-root"
    target.parent.mkdir()
    out = tmp_path / "expect.toml"
    out.symlink_to(target)
    code, err = _expect(out, healthy)
    assert code == EXIT_USAGE and "already exists" in _one_line_error(err)
    assert not target.exists()
    code, err = _expect(out, healthy, "--force")
    assert code == 0, err
    assert not target.exists() and not out.is_symlink()
    assert out.read_text().startswith("# What ") and stat.S_IMODE(out.stat().st_mode) == 0o644


def test_expect_force_replaces_a_link_and_never_writes_through_it(tmp_path, healthy):
    victim = _victim(tmp_path)
    out = tmp_path / "expect.toml"
    out.symlink_to(victim)
    code, err = _expect(out, healthy, "--force")
    assert code == 0, err
    assert victim.read_text() == "precious\n" and "[gpu]" in out.read_text()
    assert _leftovers(tmp_path) == []


def test_expect_refuses_a_file_then_replaces_it_with_force(tmp_path, healthy):
    out = _victim(tmp_path)
    code, err = _expect(out, healthy)
    assert code == EXIT_USAGE and "already exists" in _one_line_error(err)
    assert out.read_text() == "precious\n"
    assert _expect(out, healthy, "--force")[0] == 0 and "[gpu]" in out.read_text()


def test_expect_into_a_missing_folder_is_one_line_and_leaves_nothing(tmp_path, healthy):
    code, err = _expect(tmp_path / "nowhere" / "expect.toml", healthy)
    assert code == EXIT_USAGE and "no such directory" in _one_line_error(err)
    assert not (tmp_path / "nowhere").exists()


def test_html_replaces_a_link_and_never_writes_through_it(tmp_path, healthy):
    victim = _victim(tmp_path)
    out = tmp_path / "report.html"
    out.symlink_to(victim)
    code, err = _run(["analyze", "-q", "--html", str(out), healthy])
    assert code == 0, err
    assert victim.read_text() == "precious\n" and not out.is_symlink()
    assert out.read_text().startswith("<!DOCTYPE html>") and _leftovers(tmp_path) == []


def test_watch_textfile_writes_through_no_link_planted_in_its_directory(tmp_path, healthy):
    """The textfile's directory is node_exporter's: links planted at the output's name,
    at the old probe's and at the old temporary's (pid and thread id) are not followed."""
    import threading

    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    victim = _victim(tmp_path)
    planted = [textfiles / "gputriage.prom",
               textfiles / f".gputriage.prom.probe.{os.getpid()}",
               textfiles / f"gputriage.prom.{os.getpid()}.{threading.get_ident()}"]
    for link in planted:
        link.symlink_to(victim)
    code, err = _run(["watch", "--snapshot", healthy, "--interval", "0", "--max-cycles", "1",
                      "--no-history", "--textfile", str(textfiles)])
    assert code == 0, err
    assert victim.read_text() == "precious\n"
    prom = textfiles / "gputriage.prom"
    assert not prom.is_symlink() and "gputriage_build_info" in prom.read_text()
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644
    assert sorted(p.name for p in textfiles.iterdir() if not p.is_symlink()) == ["gputriage.prom"]
