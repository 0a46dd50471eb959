"""``gputriage watch --listen`` under the floods of issue 29, at the issue's sizes.

Starts, for each flood, a fresh ``gputriage watch --snapshot S --interval 1 --listen
127.0.0.1:0`` of the source tree given (this checkout's by default: pass another
checkout's ``src`` to measure its server), then floods it on 127.0.0.1 and prints:

  * big-heads   100 connections, each sending 5.9 MB of header lines without ending
                the head, then held (the issue: 640-1,070 MiB, OOM under 512 MiB);
  * idle        1,000 connections that send nothing, held (the issue: 1,002 threads);
  * slowloris   4,500 connections sending a header byte every 2 s (reconnecting when
                cut) (the issue: /metrics unanswered for over 90 s, the check stalled);

for each: the peak RSS of the watch (VmHWM) before and after, the most threads it had,
the slowest and median of the scrapes made during the flood (a scrape unanswered in
30 s counts as 30 s), and how many checks completed during the flood against the
ticks of its interval (the check loop's cadence).

Usage: python benchmarks/exporter_floods.py [--src PATH] [--hold SECONDS]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from floods import (  # noqa: E402 - tests/ on the path first
    WatchProcess,
    big_headers,
    idle_connections,
    raise_fd_limit,
    slowloris,
)

SCRAPE_TIMEOUT_S = 30.0


def _measure(watch: WatchProcess, seconds: float) -> dict[str, float]:
    """Scrapes every 0.5 s and thread samples every 0.1 s for ``seconds``."""
    scrapes: list[float] = []
    threads = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            threads[0] = max(threads[0], watch.status()["Threads"])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        answer, took = watch.scrape(SCRAPE_TIMEOUT_S)
        scrapes.append(took if answer.startswith(b"HTTP/1.1 200") else SCRAPE_TIMEOUT_S)
        time.sleep(0.5)
    stop.set()
    sampler.join()
    return {"threads": threads[0], "scrape_max": max(scrapes),
            "scrape_median": statistics.median(scrapes), "scrapes": len(scrapes)}


def _run(name: str, snapshot: Path, src: Path, hold_s: float) -> None:
    watch = WatchProcess(snapshot, interval_s=1.0, src=src)
    try:
        before = watch.status()
        checks = watch.checks_done()
        start = time.monotonic()
        if name == "big-heads":
            flood = big_headers(watch.host, watch.port, 100, 5_900_000, within_s=60)
        elif name == "idle":
            flood = idle_connections(watch.host, watch.port, 1000)
        else:
            flood = slowloris(watch.host, watch.port, 4500, every_s=2.0)
        with flood as held:
            seen = _measure(watch, hold_s)
            peak = watch.status()["VmHWM"]
        elapsed = time.monotonic() - start
        done = watch.checks_done() - checks
        what = f"{held} bytes sent" if name == "big-heads" else \
            f"{len(held)} held" if name == "idle" else f"{held['open']} held, {held['cut']} cut"
        print(f"{name:10} {what:>28}  peak RSS {before['VmHWM'] / 1024:6.0f} -> "
              f"{peak / 1024:6.0f} MiB  threads {before['Threads']:>3} -> "
              f"{seen['threads']:>5.0f}  scrape max {seen['scrape_max']:6.2f} s median "
              f"{seen['scrape_median']:5.3f} s ({seen['scrapes']:.0f})  checks {done} in "
              f"{elapsed:.0f} s", flush=True)
    finally:
        watch.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src",
                        help="the source tree whose watch is measured")
    parser.add_argument("--hold", type=float, default=10.0, metavar="SECONDS",
                        help="how long each flood is held while scraping")
    parser.add_argument("--only", choices=["big-heads", "idle", "slowloris"], default=None)
    args = parser.parse_args()
    if not raise_fd_limit(10_000):
        print("the open-file limit is under 10,000: the floods would be cut short")
        return 1
    sys.path.insert(0, str(ROOT / "src"))
    from gputriage.scenarios import build_scenario

    with tempfile.TemporaryDirectory(prefix="gputriage-floods-") as tmp:
        snapshot = build_scenario("gpu-fallen-off-bus", Path(tmp) / "fallen.tar.gz")
        print(f"watch of {args.src}, floods held {args.hold:g} s each")
        for name in ("big-heads", "idle", "slowloris"):
            if args.only in (None, name):
                _run(name, snapshot, args.src, args.hold)
    return 0


if __name__ == "__main__":
    sys.exit(main())
