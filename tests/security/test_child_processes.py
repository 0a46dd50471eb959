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

from gputriage.collect import confine
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
    assert set(env) <= {"PATH", "LD_LIBRARY_PATH", "TZ", "LC_ALL", "LANG",
                        confine.TOKEN_VAR}
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


@pytest.mark.slow  # waits out a kill grace
def test_a_group_that_survives_the_kill_is_abandoned(tmp_path, monkeypatch):
    """Stands in for a process in uninterruptible sleep: the kill has no effect."""
    monkeypatch.setattr(confine.Cell, "kill", lambda self: None)
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


# --- a child that makes a session of its own (setsid) is still the command's


@pytest.fixture(params=["cgroup", "process group"])
def cell_kind(request, monkeypatch):
    """Each test twice: in a cgroup leaf (where this host lets gputriage make one), and
    with the process group and the environment token only."""
    if request.param == "cgroup":
        if confine.cgroup_base() is None:
            pytest.skip("no writable cgroup v2 here (cgroup v1, read-only cgroupfs or "
                        "not delegated): the process-group run covers this host")
    else:
        monkeypatch.setattr(confine, "_base_cache", [None])
    return request.param


def _escaper(tmp_path: Path, body: str = "sleep 60") -> tuple[Path, Path]:
    pidfile = tmp_path / "escaped.pid"
    script = _script(tmp_path / "nvidia-smi", (
        "echo 'No devices were found'\n"
        f"setsid sh -c 'echo $$ > {pidfile}; exec {body}' </dev/null >/dev/null 2>&1 &\n"
        f"while [ ! -s {pidfile} ]; do sleep 0.01; done\nexit 6\n"))
    return script, pidfile


def test_a_child_in_a_session_of_its_own_is_killed_and_named(tmp_path, cell_kind):
    script, pidfile = _escaper(tmp_path)
    outcome = run_bounded([str(script)], timeout_s=20, cap_bytes=1 << 16)
    pid = int(pidfile.read_text())
    assert _gone_soon(pid, within_s=1.0), "the setsid child outlived the command"
    assert outcome.rc == 6 and b"No devices were found" in outcome.output
    assert outcome.confined == cell_kind
    assert len(outcome.strays) == 1 and f"pid {pid} (sleep)" in outcome.strays[0]
    assert "session of its own: killed" in outcome.strays[0]
    assert outcome.duration_s < 3


def test_a_hung_command_that_escaped_is_killed_at_the_timeout(tmp_path, cell_kind):
    pidfile = tmp_path / "escaped.pid"
    script = _script(tmp_path / "hang", (
        f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 60' </dev/null >/dev/null 2>&1 &\n"
        "trap '' TERM\nsleep 60\n"))
    outcome = run_bounded([str(script)], timeout_s=0.5, cap_bytes=1 << 16)
    assert outcome.timed_out
    assert _gone_soon(int(pidfile.read_text()), within_s=1.0)
    assert any("session of its own: killed" in s for s in outcome.strays)


def test_no_cgroup_leaf_is_left_behind(tmp_path):
    base = confine.cgroup_base()
    if base is None:
        pytest.skip("no writable cgroup v2 here")
    script, _ = _escaper(tmp_path)
    before = set(base.iterdir())
    for _ in range(3):
        run_bounded([str(script)], timeout_s=20, cap_bytes=1 << 16)
    assert sorted(set(base.iterdir()) - before) == []
    # and gputriage itself is back in its own cgroup, not in a leaf
    assert os.getpid() in confine._read_pids(base / "cgroup.procs")


def test_a_command_that_hangs_when_gputriage_exits_does_not_outlive_it(tmp_path, cell_kind):
    """A watch stopped (or a check interrupted) while nvidia-smi hangs: the command's
    thread is abandoned, and the exit kills what it started."""
    pidfile = tmp_path / "hung.pid"
    script = _script(tmp_path / "nvidia-smi", (
        f"setsid sh -c 'echo $$ >> {pidfile}; exec sleep 60' </dev/null >/dev/null 2>&1 &\n"
        f"echo $$ >> {pidfile}\ntrap '' TERM\nsleep 60\n"))
    group_only = cell_kind == "process group"
    code = (
        "import sys, threading, time\n"
        "from gputriage.collect import confine\n"
        f"if {group_only}: confine._base_cache[:] = [None]\n"
        "from gputriage.collect.host import run_bounded\n"
        f"threading.Thread(target=run_bounded, args=([{str(script)!r}], 60, 4096),"
        " daemon=True).start()\n"
        "deadline = time.monotonic() + 10\n"
        f"while open({str(pidfile)!r}, 'a+').seek(0, 2) < 4 or "
        f"len(open({str(pidfile)!r}).read().split()) < 2:\n"
        "    time.sleep(0.02)\n"
        "    assert time.monotonic() < deadline\n"
        "sys.exit(0)\n")
    import subprocess

    subprocess.run([PYTHON, "-c", code], check=True, timeout=30,
                   env={**os.environ, "PYTHONPATH": str(Path(hostmod.__file__).parents[2])})
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 2
    for pid in pids:
        assert _gone_soon(pid, within_s=2.0), f"pid {pid} outlived gputriage"


def test_strays_reach_the_report_as_problem_lines(tmp_path):
    from gputriage.engine.analysis import analyze
    from gputriage.snapshot import writer as snapshot_writer
    from gputriage.snapshot.bundle import Snapshot

    rec = snapshot_writer.source_record("nvidia_smi_q", rc=6, error="failed",
                                        error_detail="exit status 6", with_file=False)
    rec["strays"] = ["pid 4242 (nv-daemon) in a session of its own: killed",
                     {"not": "a string"}]
    manifest = snapshot_writer.new_manifest(host="gpu-1", created="2026-12-01T00:00:00+00:00",
                                            boot_id=None, tool_version="x")
    manifest["sources"] = {"nvidia_smi_q": rec}
    manifest["complete"] = True
    (tmp_path / "snap").mkdir()
    (tmp_path / "snap" / "manifest.json").write_text(json.dumps(manifest))
    result = analyze(Snapshot.load(tmp_path / "snap"))
    lines = [p for p in result.unreadable if "left a process behind" in p]
    assert lines == [f"{tmp_path / 'snap'}: nvidia_smi_q: left a process behind, "
                     "pid 4242 (nv-daemon) in a session of its own: killed"]


@pytest.mark.slow  # a watch process, stopped mid-check
def test_a_watch_stopped_while_nvidia_smi_hangs_leaves_nothing_behind(tmp_path, cell_kind):
    """The attack run's reproducer: `gputriage watch` stopped (SIGTERM twice: the running
    check is abandoned) while every nvidia-smi call hangs and leaves a setsid child."""
    import shutil
    import subprocess

    if any(shutil.which("nvidia-smi", path=d) for d in hostmod.SAFE_PATH):
        pytest.skip("a real nvidia-smi is installed: the planted one would not be run")
    pids = tmp_path / "pids"
    _script(tmp_path / "bin" / "nvidia-smi", (
        f"setsid sh -c 'echo $$ >> {pids}; exec sleep 60' </dev/null >/dev/null 2>&1 &\n"
        f"echo $$ >> {pids}\ntrap '' TERM\nsleep 60\n"))
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
           "PYTHONPATH": str(Path(hostmod.__file__).parents[2])}
    if cell_kind == "process group":
        env["GPUTRIAGE_CONFINE"] = "group"
    watch = subprocess.Popen([PYTHON, "-m", "gputriage", "watch", "--interval", "1",
                              "--no-history", "--state-dir", str(tmp_path / "state")],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not pids.exists() or len(pids.read_text().split()) < 4:
            assert time.monotonic() < deadline, "nvidia-smi was never run"
            time.sleep(0.05)
        watch.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        watch.send_signal(signal.SIGTERM)  # a second signal abandons the running check
        watch.wait(timeout=15)
    finally:
        watch.kill()
        watch.wait()
    left = [pid for pid in map(int, pids.read_text().split()) if not _gone_soon(pid, 2.0)]
    assert left == [], f"{len(left)} processes outlived the watch"
