"""Soak of ``gputriage watch``: many cycles of the real loop, memory and cost per cycle.

Runs N cycles (default 10,000) of the watch loop on a scenario snapshot with interval 0,
each cycle what ``gputriage watch --snapshot S --textfile DIR`` does (acknowledgements
read, the history recorded when due, the Prometheus registry rendered into the textfile),
and prints:
  * RSS every N/20 cycles, the first sample against the last (the ratio: flat within
    10 % passes), and the peak RSS;
  * the cost of a cycle (ms of wall and of CPU time), against a plain analysis of the
    same snapshot (load + analyze, what ``gputriage analyze`` does in process); on a
    busy machine the CPU times are the steadier comparison.

Usage: python benchmarks/watch_soak.py [--cycles N] [--scenario NAME]
Exit status 1 when RSS grew by more than 10 %, 2 when a cycle failed.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FLAT = 1.10  # the last RSS sample may be at most this many times the first


def rss_mib() -> float:
    """Resident set size now, in MiB (Linux /proc)."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--scenario", default="gpu-fallen-off-bus")
    args = parser.parse_args()
    cycles = max(20, args.cycles)

    from gputriage.commands.common import Environment
    from gputriage.commands.watch import _check
    from gputriage.engine.analysis import analyze
    from gputriage.ingest import load_inputs
    from gputriage.scenarios import build_scenario
    from gputriage.watch.logs import WatchLog
    from gputriage.watch.loop import Watch, WatchState
    from gputriage.watch.metrics import make_registry
    from gputriage.watch.textfile import TextfileWriter

    with tempfile.TemporaryDirectory(prefix="gputriage-soak-") as tmp, \
            open(os.devnull, "w") as devnull:
        snap = build_scenario(args.scenario, Path(tmp) / "snap.tar.gz")
        textfiles = Path(tmp) / "textfile"
        textfiles.mkdir()
        analyze(load_inputs([str(snap)]))  # warm the caches of the first run
        plain, plain_cpu = [], []
        for _ in range(20):
            start, cpu = time.perf_counter(), time.process_time()
            analyze(load_inputs([str(snap)]))
            plain.append(time.perf_counter() - start)
            plain_cpu.append(time.process_time() - cpu)
        t_plain, cpu_plain = statistics.median(plain), statistics.median(plain_cpu)

        log = WatchLog(devnull)
        state = WatchState(0.0, 120.0)
        registry = make_registry(state)
        check = _check(Environment(stdout=devnull, stderr=devnull), log,
                       from_snapshot=str(snap), expectations=None, timeout=None,
                       deadline=90.0, opt_in={}, state_dir=str(Path(tmp) / "state"),
                       no_history=False, history_every_s=3600.0)
        every = cycles // 20
        samples: list[tuple[int, float]] = []
        failed: list[str] = []  # a sink runs in the check's thread: no SystemExit there

        def sample(outcome: Any) -> None:
            if outcome.result is None:
                failed.append(f"cycle {outcome.number} failed: {outcome.error}")
                watch.stop()
                return
            if outcome.number % every == 0:
                samples.append((outcome.number, rss_mib()))
                print(f"  cycle {outcome.number:>6}: RSS {samples[-1][1]:7.1f} MiB",
                      flush=True)

        watch = Watch(check, state, log, sinks=[TextfileWriter(textfiles, registry), sample],
                      max_cycles=cycles)
        print(f"gputriage watch soak: {cycles} cycles on {args.scenario}, interval 0, "
              "metrics + textfile + history")
        start, cpu = time.perf_counter(), time.process_time()
        watch.run()
        elapsed, cpu_used = time.perf_counter() - start, time.process_time() - cpu

    if failed:
        print(f"  {failed[0]}", file=sys.stderr)
        return 2
    first, last = samples[0][1], samples[-1][1]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    per_cycle = elapsed / cycles
    ratio = last / first
    print(f"  RSS first sample (cycle {samples[0][0]}) : {first:7.1f} MiB")
    print(f"  RSS last sample (cycle {samples[-1][0]})  : {last:7.1f} MiB"
          f"  (x{ratio:.3f}; flat within 10 %: {'yes' if ratio <= FLAT else 'NO'})")
    print(f"  peak RSS                      : {peak:7.1f} MiB")
    print(f"  per cycle, wall time          : {per_cycle * 1000:7.1f} ms"
          f"  (plain analysis of the snapshot {t_plain * 1000:.1f} ms: "
          f"x{per_cycle / t_plain:.2f})")
    cpu_cycle = cpu_used / cycles
    print(f"  per cycle, CPU time           : {cpu_cycle * 1000:7.1f} ms"
          f"  (plain analysis {cpu_plain * 1000:.1f} ms: x{cpu_cycle / cpu_plain:.2f})")
    print(f"  counts                        : {dict(state.counts)}")
    return 0 if ratio <= FLAT else 1


if __name__ == "__main__":
    sys.exit(main())
