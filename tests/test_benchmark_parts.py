"""benchmarks/scan_parts.py times each part of a worker's block through the functions
that do it: renaming one of them must show here, not as a silently empty part."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from gputriage.logscan import ScanConfig, hsearch

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not hsearch.available(), reason="the storm pass needs Hyperscan")
def test_every_part_of_a_storm_block_is_found_and_timed(tmp_path):
    log = tmp_path / "storm.log"
    _load("log_scan").generate(log, 1 << 20, profile="storm")
    # (Hyperscan for spans of any size: a small log's block gets the storm pass)
    line = _load("scan_parts").measure(str(log), 2, ScanConfig(engine="hyperscan"))
    assert "not found" not in line, line
    parts = dict(part.rsplit(" ", 1) for part in
                 line.split(" = ", 1)[1].split(";")[0].split(", "))
    assert set(parts) == {"search", "storm pass", "per-line parse", "numbering", "other"}
    assert float(parts["storm pass"]) > 0 and float(parts["search"]) > 0


@pytest.mark.parametrize(("fmt", "read_as"), [
    ("short-iso", "journalctl-short-iso"), ("dmesg", "dmesg-raw"), ("syslog", "syslog"),
    ("rfc3339", "journalctl-short-iso")])
def test_each_generated_kernel_log_format_is_read_as_such_to_its_last_xid(tmp_path, fmt,
                                                                          read_as):
    """benchmarks/log_scan.py's storm in each ``--format`` is a log of that format to
    gputriage, every Xid line of it read (folded or not)."""
    from gputriage.logscan import scan_paths
    from gputriage.parsers.kernel_model import EventKind

    log_scan = _load("log_scan")
    assert fmt in log_scan.FORMATS
    log = tmp_path / "kern.txt"
    log_scan.generate(log, 256 << 10, profile="storm", fmt=fmt)
    text = log.read_text()
    scan = scan_paths([str(log)])
    assert scan.formats == [read_as]
    assert sum(ev.count for ev in scan.events if ev.kind is EventKind.XID) == \
        text.count("NVRM: Xid (PCI:")


def test_task_cpu_times_each_tree_in_turn(tmp_path):
    """benchmarks/task_cpu.py runs the worker task of each tree (here the same tree under
    two names), each with its own modules, and reports each task's least time."""
    logscan_before = sys.modules["gputriage.logscan"]
    bench = _load("task_cpu")
    log = tmp_path / "storm.log"
    _load("log_scan").generate(log, 1 << 20, profile="storm")
    src = str(Path(bench.REPO) / "src")
    best = bench.measure({"this": src, "baseline": src}, str(log), None, 2)
    assert list(best) == ["this", "baseline"] and list(best["this"]) == [0]
    assert all(t > 0 for per in best.values() for t in per.values())
    lines = bench.report(best)
    assert lines[0].lstrip().startswith("this: 0:") and "sum" in lines[0]
    assert lines[-1].startswith("this checkout against the baseline:")
    assert sys.modules["gputriage.logscan"] is logscan_before  # (put back as it was)


def test_task_cpu_refuses_a_baseline_without_the_package(tmp_path):
    """A baseline folder with no gputriage in it is refused, not timed as the installed
    package (which would compare this tree with itself)."""
    bench = _load("task_cpu")
    log = tmp_path / "storm.log"
    _load("log_scan").generate(log, 1 << 20, profile="storm")
    with pytest.raises(ValueError, match="no gputriage package"):
        bench.measure({"baseline": str(tmp_path)}, str(log), None, 1)
    assert sys.modules["gputriage.logscan"].__name__ == "gputriage.logscan"


def test_detect_paste_times_the_detector_on_each_text(tmp_path):
    """benchmarks/detect_paste.py makes its three texts (a storm kernel log, a training
    log, NCCL lines alone) and times the detector on each in a fresh process: each is
    what the detector takes it for."""
    bench = _load("detect_paste")
    inputs = bench.texts(tmp_path, 64 << 10)
    assert list(inputs) == ["Xid storm kernel log", "training log, 1 % NCCL",
                            "NCCL lines alone"]
    src = str(Path(bench.REPO) / "src")
    found = []
    for path in inputs.values():
        assert 60 << 10 <= path.stat().st_size <= 64 << 10
        got = bench.once(src, path)
        assert got["cold"] > 0 and got["warm"] > 0
        found.append(got["found"])
    assert found == [["kernel_log"], ["nccl_log"], ["nccl_log"]]


def test_detect_paste_refuses_a_baseline_without_the_package(tmp_path, monkeypatch, capsys):
    bench = _load("detect_paste")
    monkeypatch.setattr(sys, "argv", ["detect_paste.py", "--baseline", str(tmp_path)])
    assert bench.main() == 2
    assert "no gputriage package" in capsys.readouterr().err


def test_log_scan_times_a_run_unsampled_and_samples_the_memory_in_a_run_of_its_own(tmp_path):
    # the process tree's memory is read from /proc every 50 ms, which slows the run it
    # samples (a worker's smaps_rollup walks its mappings): timed runs are not sampled
    log_scan = _load("log_scan")
    argv = [sys.executable, "-c", "import time; b = bytearray(40 << 20); time.sleep(0.3)"]
    wall, peak, tree, rc = log_scan._timed(argv, tmp_path / "out", 1)
    assert rc == 0 and wall > 0.3 and peak > 40 << 10
    assert tree == 0  # (not sampled)
    timed_cpu = log_scan._cpu(argv)
    assert timed_cpu > 0
    sampled = log_scan._tree_peak(argv, tmp_path / "out")
    if Path("/proc/self/status").exists():
        assert sampled > 40 << 10
    assert log_scan._cpu(argv) == timed_cpu  # (the sampled run's CPU is not kept)


def test_nccl_scan_times_the_log_piped_beside_a_piped_grep(tmp_path, capsys):
    """benchmarks/nccl_scan.py --stdin: gputriage reads the whole log from the pipe."""
    import json

    nccl_scan = _load("nccl_scan")
    log = tmp_path / "job.log"
    nccl_scan.generate(log, 1 << 16, 5.0)
    nccl_scan._piped(log, tmp_path, [None], 1, log.stat().st_size / 1e6, None)
    out = capsys.readouterr().out
    assert out.startswith("piped: gputriage nccl - --json: ") and "grep -F NCCL piped" in out
    read = json.loads((tmp_path / "outp").read_text())["nccl"]["log"]
    assert read["origins"] == ["<stdin>"]
    assert read["lines_read"] == log.read_bytes().count(b"\n") and read["nccl_lines"] > 0


def test_nccl_scan_times_the_first_mebibytes_each_a_file(tmp_path, capsys):
    """benchmarks/nccl_scan.py --sizes: a file per size, cut after a whole line."""
    nccl_scan = _load("nccl_scan")
    log = tmp_path / "job.log"
    nccl_scan.generate(log, (1 << 20) + 5000, 5.0)
    nccl_scan._small(log, tmp_path, [None], 1, None)
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == [f"first {m} MiB" for m in (1, 4, 16)]
    first = (tmp_path / "first-1MiB.log").read_bytes()
    assert first.endswith(b"\n") and (1 << 20) - 1000 < len(first) <= 1 << 20
    assert (tmp_path / "first-16MiB.log").read_bytes() == log.read_bytes()
