"""Latency of the core commands, measured side by side with reference commands.

Prints:
  * analysis of an 8-GPU scenario snapshot, in process (target < 100 ms) and
    through the CLI;
  * ``gputriage --help`` start-up (target < 150 ms) against a bare
    ``python -c pass`` start-up, as a ratio;
  * ``gputriage explain`` of a CUDA error number and of a pasted line (target
    < 150 ms: the catalog is read, nothing of the host is);
  * ``gputriage check`` wall time on this machine, beside ``nvidia-smi -q``
    when this machine has one.

Usage: python benchmarks/check_latency.py [--runs N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _wall(argv: list[str], runs: int) -> float:
    """Median wall time of a command in seconds."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _in_process(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    runs = args.runs

    from gputriage.engine.analysis import analyze
    from gputriage.scenarios import build_scenario
    from gputriage.snapshot.bundle import Snapshot

    gt = [sys.executable, "-m", "gputriage"]
    exe = shutil.which("gputriage")
    with tempfile.TemporaryDirectory() as tmp:
        snap_dir = build_scenario("healthy-8xh100", Path(tmp) / "healthy")
        faulty = build_scenario("gpu-fallen-off-bus", Path(tmp) / "faulty.tar.gz")
        analyze(Snapshot.load(snap_dir))  # warm the caches of the first run
        t_load_analyze = _in_process(lambda: analyze(Snapshot.load(snap_dir)), runs)
        t_faulty = _in_process(lambda: analyze(Snapshot.load(faulty)), runs)
        t_cli_analyze = _wall(gt + ["analyze", str(snap_dir)], max(3, runs // 3))

    t_python = _wall([sys.executable, "-c", "pass"], runs)
    t_help = _wall(gt + ["--help"], runs)
    t_help_exe = _wall([exe, "--help"], runs) if exe else None
    t_explain = _wall(gt + ["explain", "700"], runs)
    t_explain_line = _wall(gt + ["explain", "RuntimeError: CUDA error: no kernel image is "
                                 "available for execution on the device"], runs)

    print("gputriage latency (median of runs)")
    print(f"  analyze 8-GPU healthy snapshot, in process : {t_load_analyze * 1000:7.1f} ms"
          "  (target < 100 ms)")
    print(f"  analyze 8-GPU fallen-off-bus .tar.gz        : {t_faulty * 1000:7.1f} ms")
    print(f"  gputriage analyze (CLI, whole process)      : {t_cli_analyze * 1000:7.1f} ms")
    print(f"  python -c pass (interpreter start)          : {t_python * 1000:7.1f} ms")
    print(f"  python -m gputriage --help                  : {t_help * 1000:7.1f} ms"
          f"  (target < 150 ms; {t_help / t_python:.1f}x a bare interpreter)")
    if t_help_exe is not None:
        print(f"  gputriage --help (console script)           : {t_help_exe * 1000:7.1f} ms")
    print(f"  python -m gputriage explain 700             : {t_explain * 1000:7.1f} ms"
          f"  (target < 150 ms; {(t_explain - t_help) * 1000:+.0f} ms beside --help)")
    print(f"  python -m gputriage explain 'RuntimeError..': {t_explain_line * 1000:7.1f} ms"
          "  (target < 150 ms; scans the line with every pattern)")

    t_check = _wall(gt + ["check", "--no-history"], 3)
    print(f"  gputriage check on this machine             : {t_check * 1000:7.1f} ms")
    smi = shutil.which("nvidia-smi")
    if smi:
        t_smi = _wall([smi, "-q"], 3)
        print(f"  nvidia-smi -q on this machine               : {t_smi * 1000:7.1f} ms"
              f"  (check = {t_check / t_smi:.2f}x nvidia-smi -q)")
    else:
        print("  nvidia-smi -q                               :   (no nvidia-smi here)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
