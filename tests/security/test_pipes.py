"""``gputriage analyze crit | head -1`` keeps the verdict's exit status (issue 10, item 9):
a reader that goes away ends the output, not the command, and leaves stderr empty (no
traceback, no "Exception ignored" at interpreter exit)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gputriage.cli import PipeSafeStdout, main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def critical(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pipes") / "crit"
    assert main(["scenario", "build", "gpu-fallen-off-bus", "-o", str(out)]) == 0
    return out


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "80"}


def _closed_pipe_run(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run gputriage with stdout a pipe whose reader is already gone: every write fails."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "gputriage", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, env=_env(), timeout=120)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("extra", [["-v"], ["--json"]])
def test_reader_gone_keeps_the_verdict(critical: Path, extra: list[str]) -> None:
    proc = _closed_pipe_run(["analyze", *extra, str(critical)])
    assert (proc.returncode, proc.stderr) == (2, "")


def test_reader_closing_after_one_line(critical: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "gputriage", "analyze", "-v", str(critical)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 2
    assert first.startswith(b"CRITICAL") and err == b""


class _Broken(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        raise OSError("no descriptor")  # nothing to point at /dev/null here


def test_guard_drops_output_after_epipe() -> None:
    guard = PipeSafeStdout(_Broken())
    assert guard.write("abc") == 3 and guard.broken
    guard.write("more")
    guard.flush()
    assert guard.getvalue() == ""  # everything else is the wrapped stream's
