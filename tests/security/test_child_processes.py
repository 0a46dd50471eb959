"""Children of a root process: nothing from the caller's directory or environment
runs, and nothing the tool starts outlives the run or holds it open."""

from __future__ import annotations

import ast
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from gputriage.collect import host as hostmod
from gputriage.collect.host import LiveHost, child_env, run_bounded

PYTHON = sys.executable
MARK = "PLANTED CODE RAN"


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _planted_module(marker: Path) -> str:
    return f"open({str(marker)!r}, 'a').write('ran'); print({MARK!r})\n"


def _plant_package(root: Path, marker: Path) -> Path:
    """A fake gputriage probe, and modules the real probe imports, under ``root``."""
    code = _planted_module(marker)
    for rel in ("gputriage/__init__.py", "gputriage/collect/__init__.py",
                "gputriage/collect/nvml_probe.py", "pynvml.py", "json.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(code)
    return root


def _real_probe_ran(outcome) -> None:
    assert outcome.rc == 0, outcome.output
    assert MARK.encode() not in outcome.output
    doc = json.loads(outcome.output)
    assert doc["schema"] == "gputriage/nvml/v1"
    assert isinstance(doc["available"], bool)  # no GPU here: False with NVML's error


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie waits for the host's init to reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _gone_soon(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while _running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# --- item 1: nothing from the caller's directory or environment runs


def test_probe_from_the_current_directory_never_runs(tmp_path, monkeypatch):
    marker = tmp_path / "marker"
    monkeypatch.chdir(_plant_package(tmp_path / "cwd", marker))
    live = LiveHost()
    outcome = live.run(live.nvml_argv(), timeout_s=60, cap_bytes=1 << 20)
    _real_probe_ran(outcome)
    assert not marker.exists()


def test_pythonpath_and_pythonhome_are_ignored(tmp_path, monkeypatch):
    marker = tmp_path / "marker"
    planted = _plant_package(tmp_path / "planted", marker)
    monkeypatch.setenv("PYTHONPATH", str(planted))
    monkeypatch.setenv("PYTHONHOME", str(tmp_path / "no-such-home"))
    monkeypatch.setenv("PYTHONSTARTUP", str(planted / "json.py"))
    live = LiveHost()
    outcome = live.run(live.nvml_argv(), timeout_s=60, cap_bytes=1 << 20)
    _real_probe_ran(outcome)
    assert not marker.exists()


def test_probe_imports_only_stdlib_and_nvml():
    """It runs as a bare file under -I, so it must not need gputriage importable."""
    tree = ast.parse(Path(hostmod.__file__).with_name("nvml_probe.py").read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "json", "sys", "typing", "pynvml"}
    assert "-I" in LiveHost().nvml_argv()


@pytest.mark.parametrize("entry", [".", "", "bin"])
def test_relative_path_entries_never_find_planted_tools(tmp_path, monkeypatch, entry):
    marker = tmp_path / "marker"
    cwd = tmp_path / "cwd"
    for d in (cwd, cwd / "bin"):
        _script(d / "nvidia-smi", f"echo ran > {marker}\necho '{MARK}'\n")
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("PATH", f"{entry}:{os.environ.get('PATH', '')}")
    outcome = LiveHost().run(["nvidia-smi"], timeout_s=30, cap_bytes=1 << 16)
    assert not marker.exists()
    assert MARK.encode() not in outcome.output


def test_children_get_an_allowlisted_environment_and_run_in_root(monkeypatch):
    monkeypatch.setenv("PATH", f".::relative/bin:/opt/tools/bin:{os.environ['PATH']}")
    monkeypatch.setenv("LD_LIBRARY_PATH", ":lib:/opt/nvidia/lib64")
    monkeypatch.setenv("LD_PRELOAD", "/tmp/evil.so")
    monkeypatch.setenv("PYTHONPATH", "/tmp/evil")
    monkeypatch.setenv("TZ", "UTC")
    code = "import json, os; print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ)}))"
    outcome = run_bounded([PYTHON, "-I", "-c", code], timeout_s=30, cap_bytes=1 << 16)
    seen = json.loads(outcome.output)
    env = seen["env"]
    assert seen["cwd"] == "/"
    assert set(env) <= {"PATH", "LD_LIBRARY_PATH", "TZ", "LC_ALL", "LANG"}
    assert env["LD_LIBRARY_PATH"] == "/opt/nvidia/lib64"
    assert env["TZ"] == "UTC" and env["LC_ALL"] == "C"
    path = env["PATH"].split(":")
    assert all(p.startswith("/") for p in path)
    assert path[:6] == list(hostmod.SAFE_PATH) and "/opt/tools/bin" in path
    assert len(path) == len(set(path))


def test_child_env_without_a_path_still_has_the_system_dirs():
    env = child_env({"LD_LIBRARY_PATH": "::", "HOME": "/root"})
    assert env == {"PATH": ":".join(hostmod.SAFE_PATH), "LC_ALL": "C", "LANG": "C"}


# --- item 6: a child left in the background neither holds the run open nor survives it


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polling"])
def test_a_backgrounded_child_neither_hides_output_nor_outlives_the_run(tmp_path, monkeypatch,
                                                                       pidfd):
    if not pidfd:
        monkeypatch.setattr(hostmod, "_open_pidfd", lambda pid: None)
    pidfile = tmp_path / "bg.pid"
    wrapper = _script(tmp_path / "nvidia-smi", (
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the driver.\"\n"
        f"sleep 30 &\necho $! > {pidfile}\nexit 0\n"))
    outcome = run_bounded([str(wrapper)], timeout_s=20, cap_bytes=1 << 16)
    assert b"NVIDIA-SMI has failed" in outcome.output
    assert outcome.rc == 0 and not outcome.timed_out
    assert outcome.duration_s < 3
    assert _gone_soon(int(pidfile.read_text()))


def test_a_flooding_background_child_is_capped_and_killed(tmp_path):
    pidfile = tmp_path / "bg.pid"
    wrapper = _script(tmp_path / "flood", f"echo first\nyes &\necho $! > {pidfile}\nexit 3\n")
    outcome = run_bounded([str(wrapper)], timeout_s=20, cap_bytes=4096)
    assert outcome.rc == 3 and not outcome.timed_out
    assert outcome.truncated and len(outcome.output) <= 4096
    assert outcome.duration_s < 3
    assert _gone_soon(int(pidfile.read_text()))


def test_a_flooding_command_keeps_only_the_tail(tmp_path):
    cmd = _script(tmp_path / "flood", "head -c 3000000 /dev/zero | tr '\\0' x\n"
                  "echo\necho THE END\n")
    outcome = run_bounded([str(cmd)], timeout_s=30, cap_bytes=1000)
    assert outcome.rc == 0 and outcome.truncated
    assert len(outcome.output) <= 1000
    assert outcome.output.rstrip().endswith(b"THE END")


def test_a_hung_command_times_out_with_its_whole_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    cmd = _script(tmp_path / "hang", f"echo started\nsleep 60 &\necho $! > {pidfile}\nwait\n")
    outcome = run_bounded([str(cmd)], timeout_s=0.5, cap_bytes=1 << 16)
    assert outcome.timed_out and outcome.rc is None
    assert b"started" in outcome.output
    assert outcome.duration_s < 5
    assert _gone_soon(int(pidfile.read_text()))


def test_a_group_that_survives_the_kill_is_abandoned(tmp_path, monkeypatch):
    """Stands in for a process in uninterruptible sleep: the kill has no effect."""
    monkeypatch.setattr(hostmod, "_kill_group", lambda proc: None)
    monkeypatch.setattr(hostmod, "KILL_GRACE_S", 0.5)
    pidfile = tmp_path / "leader.pid"
    cmd = _script(tmp_path / "stuck", f"echo $$ > {pidfile}\necho started\nexec sleep 60\n")
    try:
        outcome = run_bounded([str(cmd)], timeout_s=0.5, cap_bytes=1 << 16)
        assert outcome.timed_out and outcome.rc is None
        assert b"started" in outcome.output
        assert outcome.duration_s < 0.5 + 0.5 + hostmod.DRAIN_GRACE_S + 1.5
    finally:
        os.killpg(int(pidfile.read_text()), signal.SIGKILL)
