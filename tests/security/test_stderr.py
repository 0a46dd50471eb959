"""The verdict and the exit status never depend on stderr (issue 29): progress, notes,
warnings and error lines go there, and a stderr that cannot be written (a full disk:
/dev/full; closed with ``2>&-``) loses those lines, never the verdict on stdout nor
the exit status."""

from __future__ import annotations

import errno
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakehost import FakeHost

from gputriage import cli
from gputriage.cli import main
from gputriage.commands.common import Environment

REPO = Path(__file__).resolve().parents[2]
GENERATED = re.compile(r'"generated": "[^"]*"')  # the two runs may fall in two seconds


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("stderr")
    for name, scenario in (("crit", "gpu-fallen-off-bus"), ("ok", "healthy-8xh100")):
        assert main(["scenario", "build", scenario, "-o", str(where / name)],
                    Environment(stdout=io.StringIO(), stderr=io.StringIO())) == 0
    (where / "not-a-dir").write_text("")
    return where


class _FullDisk(io.StringIO):
    """stderr on a full disk: every write and flush fails with ENOSPC."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


class _Closed(io.StringIO):
    def write(self, text: str) -> int:
        raise ValueError("I/O operation on closed file.")


def _argv(where: Path, case: str) -> list[str]:
    """Commands that write a note, a progress or an error line on stderr."""
    return {
        # the history cannot be recorded there: one stderr line, then the verdict
        "check": ["check", "--snapshot", str(where / "crit"), "-q",
                  "--state-dir", str(where / "not-a-dir")],
        "check-json": ["check", "--snapshot", str(where / "crit"), "--json",
                       "--state-dir", str(where / "not-a-dir")],
        "analyze-missing": ["analyze", str(where / "missing")],
        "expect": ["expect", "--from", str(where / "crit"), "-o", str(where / "out" / "e.toml")],
        "scenario": ["scenario", "build", "xid79-gpu-lost", "-o", str(where / "out" / "s")],
        "collect": ["collect", "-o", str(where / "out" / "c.tar.gz")],
        "history": ["history", "--state-dir", str(where / "not-a-dir")],
    }[case]


def _host(where: Path) -> FakeHost:
    host = FakeHost(where / "root", commands={("uname", "-a"): (0, "Linux n1 6.1 x86_64\n")})
    host.write("/proc/sys/kernel/hostname", "n1\n")
    return host


CASES = ("check", "check-json", "analyze-missing", "expect", "scenario", "collect", "history")


@pytest.mark.parametrize("broken", [_FullDisk, _Closed])
@pytest.mark.parametrize("case", CASES)
def test_a_stderr_that_fails_changes_neither_stdout_nor_the_exit_status(
        tmp_path, snapshots, case, broken):
    outcomes = []
    for n, err in enumerate((io.StringIO(), broken())):
        where = tmp_path / str(n)
        (where / "out").mkdir(parents=True)
        for name in ("crit", "not-a-dir"):
            os.symlink(snapshots / name, where / name)
        out = io.StringIO()
        code = main(_argv(where, case), Environment(stdout=out, stderr=err, host=_host(where)))
        text = GENERATED.sub('"generated": "WHEN"', out.getvalue().replace(str(where), "WHERE"))
        outcomes.append((code, text, sorted(p.name for p in (where / "out").iterdir())))
        if n == 0:
            assert err.getvalue(), f"{case} writes nothing on stderr: not a test of it"
    assert outcomes[1] == outcomes[0]


def _run(args: list[str], stderr: str) -> subprocess.CompletedProcess[str]:
    """``gputriage ARGS`` as a program, stderr on /dev/full or closed (``2>&-``)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "80"}
    argv = [sys.executable, "-m", "gputriage", *args]
    if stderr == "closed":
        argv = ["sh", "-c", 'exec "$0" "$@" 2>&-', *argv]
        return subprocess.run(argv, stdout=subprocess.PIPE, text=True, env=env, timeout=120)
    with open(os.devnull if stderr == "null" else "/dev/full", "w") as err:
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                              timeout=120)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("stderr", ["full", "closed"])
def test_check_prints_its_verdict_and_exits_with_it_whatever_stderr_is(snapshots, stderr):
    proc = _run(["check", "--snapshot", str(snapshots / "crit"), "-q",
                 "--state-dir", str(snapshots / "not-a-dir")], stderr)
    assert proc.returncode == 2
    assert proc.stdout.startswith("CRITICAL ") and "Xid 79" in proc.stdout


def test_a_closed_stderr_descriptor_is_held_by_dev_null(tmp_path):
    """With descriptor 2 closed, the next file opened (a snapshot being written) would
    take its number, and a child's error lines would land in it: /dev/null holds it."""
    probe = tmp_path / "fd2"
    code = ("import os, sys\n"
            "from gputriage import cli\n"
            f"sys.argv = ['gputriage', 'scenario', 'list']\n"
            "import atexit\n"
            f"atexit.register(lambda: open({str(probe)!r}, 'w').write("
            "os.readlink('/proc/self/fd/2')))\n"
            "cli.run()\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run(["sh", "-c", 'exec "$0" "$@" 2>&-', sys.executable, "-c", code],
                          stdout=subprocess.PIPE, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and "healthy-8xh100" in proc.stdout
    assert probe.read_text() == os.devnull


def test_the_guard_drops_what_follows_a_failure_and_reports_no_terminal():
    guard = cli.QuietStderr(_FullDisk())
    assert guard.write("lost\n") == 5 and guard.broken
    guard.write("also lost\n")
    guard.flush()
    assert not guard.isatty()
    none = cli.QuietStderr(None)
    assert none.write("x") == 1 and not none.isatty()
    none.flush()
