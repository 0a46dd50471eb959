"""``gputriage watch --listen`` under the floods of issue 29, against a real watch process
on 127.0.0.1, each flood bounded in connections and time: unfinished requests with
megabytes of headers (memory stays far inside the 512 MiB limit of
deploy/kubernetes/watch.yaml), a thousand idle connections (no thread each: a pids
limit of 1,024 is never approached), a slowloris of a thousand connections (scrapes
are answered within seconds and the check loop keeps its cadence). The protocol
details and the short deadlines are tested in tests/test_watch_httpd.py;
benchmarks/exporter_floods.py runs the issue's full-size floods."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from floods import WatchProcess, big_headers, idle_connections, raise_fd_limit, slowloris

from gputriage.scenarios import build_scenario

REPO = Path(__file__).resolve().parents[2]
SCRAPE_WITHIN_S = 5.0  # the longest a scrape may take under a flood (on a busy CI host)

pytestmark = pytest.mark.slow  # a thousand connections against a real watch process


def _memory_limit_kib() -> int:
    """The memory limit of the watch container in deploy/kubernetes/watch.yaml."""
    docs = yaml.safe_load_all((REPO / "deploy/kubernetes/watch.yaml").read_text())
    daemonset = next(d for d in docs if d and d.get("kind") == "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Mi"), limit
    return int(limit[:-2]) * 1024


@pytest.fixture(scope="module")
def watch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WatchProcess]:
    snapshot = build_scenario("gpu-fallen-off-bus",
                              tmp_path_factory.mktemp("exporter") / "fallen.tar.gz")
    process = WatchProcess(snapshot, interval_s=1.0)
    try:
        yield process
    finally:
        process.stop()


def _threads(watch: WatchProcess, seconds: float) -> int:
    """The most threads the process had over ``seconds`` (sampled every 0.1 s)."""
    most = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        most = max(most, watch.status()["Threads"])
        time.sleep(0.1)
    return most


def test_unfinished_requests_with_huge_headers_hold_no_memory(watch: WatchProcess) -> None:
    before = watch.status()["VmHWM"]
    # the flood: 100 heads of 5.9 MB that never end (it took 640-1,070 MiB)
    with big_headers(watch.host, watch.port, 100, 5_900_000, within_s=20) as sent:
        time.sleep(0.3)
        answer, took = watch.scrape(SCRAPE_WITHIN_S)
        peak = watch.status()["VmHWM"]
    assert answer.startswith(b"HTTP/1.1 200 ") and took < SCRAPE_WITHIN_S
    assert peak - before < 64 * 1024, f"peak RSS grew by {(peak - before) // 1024} MiB"
    assert peak < _memory_limit_kib() // 2
    assert sent < 100 * 5_900_000  # the server refused the heads: not all were sent


def test_a_thousand_idle_connections_cost_no_thread(watch: WatchProcess) -> None:
    if not raise_fd_limit(1500):
        pytest.skip("cannot open 1,000 connections: the open-file limit is too low")
    before = _threads(watch, 0.5)
    with idle_connections(watch.host, watch.port, 1000) as held:
        assert len(held) == 1000
        during = _threads(watch, 0.5)
        answer, took = watch.scrape(SCRAPE_WITHIN_S)
    assert answer.startswith(b"HTTP/1.1 200 ") and took < SCRAPE_WITHIN_S
    assert during <= before + 1 < 16, (before, during)  # 1,002 threads before


def test_a_slowloris_neither_stops_scrapes_nor_the_check_loop(watch: WatchProcess) -> None:
    if not raise_fd_limit(1500):
        pytest.skip("cannot open 1,000 connections: the open-file limit is too low")
    threads = _threads(watch, 0.5)
    checks = watch.checks_done()
    with slowloris(watch.host, watch.port, 1000, every_s=0.5) as held:
        time.sleep(0.5)
        start = time.monotonic()
        slowest = 0.0
        while time.monotonic() - start < 3.0:
            answer, took = watch.scrape(SCRAPE_WITHIN_S)
            assert answer.startswith(b"HTTP/1.1 200 "), f"no answer in {took:.1f} s"
            slowest = max(slowest, took)
            time.sleep(0.3)
        flood_threads = _threads(watch, 0.3)
        elapsed = time.monotonic() - start
    assert held["open"] == 1000
    assert slowest < SCRAPE_WITHIN_S
    assert flood_threads <= threads + 1
    # a check a second: at least half of the ticks of the flood's seconds still ran
    assert watch.checks_done() - checks >= int(elapsed) // 2
