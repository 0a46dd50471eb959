"""``gputriage watch``'s loop, metrics and history policy, in process: the metrics parsed
back with prometheus_client's parser, the scheduler driven with checks that block."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_inputs
from gputriage.scenarios import build_scenario
from gputriage.watch.cycle import CycleOutcome
from gputriage.watch.logs import WatchLog
from gputriage.watch.loop import Watch, WatchState, sources_of
from gputriage.watch.metrics import make_registry
from gputriage.watch.recording import HistoryRecorder, signature

FALLEN_BUS = "0000:9a:00.0"  # the GPU that falls off the bus in gpu-fallen-off-bus
WAIT_S = 20.0  # the longest a test waits for the loop (it is done far sooner)


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("watch-scenarios")
    return {name: build_scenario(name, root / f"{name}.tar.gz")
            for name in ("healthy-8xh100", "gpu-fallen-off-bus", "xid31-one-job")}


@pytest.fixture(scope="module")
def results(snapshots: dict[str, Path]) -> dict[str, Any]:
    return {name: analyze(load_inputs([str(path)])) for name, path in snapshots.items()}


def _metrics(registry: Any) -> dict[str, list[Any]]:
    from prometheus_client import generate_latest

    text = generate_latest(registry).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def _samples(metrics: dict[str, list[Any]], name: str, **labels: str) -> list[Any]:
    family = name.removesuffix("_total")
    return [s for s in metrics.get(family, []) if s.name == name
            and all(s.labels.get(k) == v for k, v in labels.items())]


def _wait(condition: Callable[[], bool]) -> None:
    done = threading.Event()
    for _ in range(int(WAIT_S / 0.02)):
        if condition():
            return
        done.wait(0.02)
    raise AssertionError("the watch did not get there in time")


def _watch(check: Callable[[], Any], *, interval: float = 0.0, limit: float = 60.0,
           **kw: Any) -> tuple[Watch, io.StringIO]:
    log = io.StringIO()
    return Watch(check, WatchState(interval, limit), WatchLog(log), **kw), log


@pytest.fixture
def running() -> Iterator[Callable[[Watch], threading.Thread]]:
    """Runs a watch in a thread; stopped and joined at the end of the test."""
    started: list[tuple[Watch, threading.Thread]] = []

    def start(watch: Watch) -> threading.Thread:
        thread = threading.Thread(target=watch.run, daemon=True)
        thread.start()
        started.append((watch, thread))
        return thread

    yield start
    for watch, thread in started:
        watch.stop(grace_s=0)
        thread.join(timeout=WAIT_S)


def _publish(state: WatchState, result: Any, number: int = 1) -> None:
    from gputriage.status import exit_status
    from gputriage.watch.loop import Running

    run = Running(number, state.clock())
    state.publish(CycleOutcome(number, _now(), 0.1, result, int(exit_status(result)),
                               sources=sources_of(result)), run)


def _now() -> Any:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


# --- the metrics ---------------------------------------------------------------------------

def test_a_fallen_gpu_is_a_critical_finding_series_with_its_labels(results):
    state = WatchState(60, 120)
    _publish(state, results["gpu-fallen-off-bus"])
    metrics = _metrics(make_registry(state))
    [xid] = _samples(metrics, "gputriage_finding", id="xid.79")
    assert xid.labels == {"id": "xid.79", "severity": "critical", "blame": "node",
                          "action": "drain-and-repair", "gpu": "", "bus_id": FALLEN_BUS,
                          "uuid": ""}
    assert xid.value == 1
    health = {s.labels["state"]: s.value for s in
              _samples(metrics, "gputriage_gpu_health", bus_id=FALLEN_BUS)}
    assert health == {"ok": 0, "warning": 0, "critical": 1, "unknown": 0}
    assert _samples(metrics, "gputriage_verdict", state="critical")[0].value == 1
    assert _samples(metrics, "gputriage_check_exit_status")[0].value == 2
    assert _samples(metrics, "gputriage_findings", severity="critical")[0].value >= 1
    # nvidia-smi failed on that host: a failed source, not an absent one
    assert _samples(metrics, "gputriage_source_up", source="nvidia_smi")[0].value == 0
    assert _samples(metrics, "gputriage_source_up", source="proc_modules")[0].value == 1
    assert _samples(metrics, "gputriage_build_info")[0].labels["version"]


def test_a_healthy_host_has_no_finding_series_and_every_gpu_ok(results):
    state = WatchState(60, 120)
    _publish(state, results["healthy-8xh100"])
    metrics = _metrics(make_registry(state))
    assert _samples(metrics, "gputriage_finding") == []
    health = _samples(metrics, "gputriage_gpu_health")
    assert len(health) == 8 * 4  # every state of every GPU
    assert {s.labels["gpu"] for s in health} == {str(i) for i in range(8)}
    assert all(s.value == (1 if s.labels["state"] == "ok" else 0) for s in health)
    assert _samples(metrics, "gputriage_verdict", state="ok")[0].value == 1
    assert _samples(metrics, "gputriage_check_exit_status")[0].value == 0


def test_a_jobs_fault_leaves_its_gpu_healthy(results):
    """gputriage_gpu_health counts node-side findings only: xid31-one-job's GPU 2 is ok
    (its GpuRow.severity, the report's, is warning), its finding series says job."""
    result = results["xid31-one-job"]
    assert [g.severity.value for g in result.gpus if g.index == 2] == ["warning"]
    state = WatchState(60, 120)
    _publish(state, result)
    metrics = _metrics(make_registry(state))
    [xid] = _samples(metrics, "gputriage_finding", id="xid.31")
    assert (xid.labels["blame"], xid.labels["gpu"]) == ("job", "2")
    health = {s.labels["state"]: s.value for s in
              _samples(metrics, "gputriage_gpu_health", gpu="2")}
    assert health == {"ok": 1, "warning": 0, "critical": 0, "unknown": 0}
    assert not [s for s in _samples(metrics, "gputriage_gpu_health", state="warning")
                if s.value == 1]  # no GPU in warning


def test_gpu_counts_say_how_many_the_driver_can_use_against_the_expected(results):
    """gpu-fallen-off-bus: 7 of 8 usable, the expectations' 8; the interval and the limit
    a staleness or overrun alert compares against."""
    state = WatchState(60, 120, expected_gpus=8)
    metrics = _metrics(make_registry(state))
    assert _samples(metrics, "gputriage_gpus") == []  # no check yet: no count
    assert _samples(metrics, "gputriage_gpus_expected")[0].value == 8
    _publish(state, results["gpu-fallen-off-bus"])
    metrics = _metrics(make_registry(state))
    assert _samples(metrics, "gputriage_gpus")[0].value == 7
    assert _samples(metrics, "gputriage_check_interval_seconds")[0].value == 60
    assert _samples(metrics, "gputriage_check_limit_seconds")[0].value == 120
    healthy = WatchState(0, 90)  # no expectations: no expected series
    _publish(healthy, results["healthy-8xh100"])
    metrics = _metrics(make_registry(healthy))
    assert _samples(metrics, "gputriage_gpus")[0].value == 8
    assert _samples(metrics, "gputriage_gpus_expected") == []
    assert _samples(metrics, "gputriage_check_interval_seconds")[0].value == 0


def test_absent_sources_have_no_status_series(results):
    result = results["healthy-8xh100"]
    statuses = sources_of(result)
    # DCGM is not installed on that scenario host: absent, which is not a failure
    assert statuses and all(s.error in (None, "absent") for s in statuses)
    assert any(s.error is None for s in statuses)
    from gputriage.watch.cycle import SourceStatus

    state = WatchState(60, 120)
    _publish(state, result)
    with state.lock:
        assert state.last is not None
        state.last = CycleOutcome(1, _now(), 0.1, result, 0, sources=(
            SourceStatus("nvidia_smi", "timeout", 10.0), SourceStatus("ibstat", "absent", 0.0),
            SourceStatus("numactl", "not-applicable", None)))
    metrics = _metrics(make_registry(state))
    assert [(s.labels["source"], s.value) for s in
            _samples(metrics, "gputriage_source_up")] == [("nvidia_smi", 0)]
    assert [(s.labels["source"], s.value) for s in
            _samples(metrics, "gputriage_source_duration_seconds")] == [("nvidia_smi", 10.0)]


def test_a_findings_series_goes_when_the_finding_goes(results, running):
    """The registry is rebuilt from the last result at each scrape: nothing lingers."""
    order = iter([results["gpu-fallen-off-bus"], results["healthy-8xh100"]])
    scraped: list[dict[str, list[Any]]] = []
    watch, _ = _watch(lambda: next(order), max_cycles=2)
    registry = make_registry(watch.state)
    watch.sinks = (lambda outcome: scraped.append(_metrics(registry)),)
    running(watch).join(timeout=WAIT_S)
    assert len(scraped) == 2
    assert _samples(scraped[0], "gputriage_finding", id="xid.79")
    assert _samples(scraped[1], "gputriage_finding") == []
    # the fallen GPU's series (no index, no name) went; the GPU is back, listed as GPU 4
    assert _samples(scraped[1], "gputriage_gpu_health", bus_id=FALLEN_BUS, gpu="") == []
    assert _samples(scraped[1], "gputriage_gpu_health", bus_id=FALLEN_BUS, gpu="4",
                    state="ok")[0].value == 1
    assert _samples(scraped[1], "gputriage_checks_total", outcome="ok")[0].value == 2


def test_a_failed_check_keeps_the_last_findings_and_says_unknown(results, running):
    calls = iter([lambda: results["gpu-fallen-off-bus"], lambda: 1 / 0])
    watch, log = _watch(lambda: next(calls)(), max_cycles=2)
    running(watch).join(timeout=WAIT_S)
    metrics = _metrics(make_registry(watch.state))
    assert _samples(metrics, "gputriage_checks_total", outcome="failed")[0].value == 1
    assert _samples(metrics, "gputriage_verdict", state="unknown")[0].value == 1
    assert _samples(metrics, "gputriage_check_exit_status")[0].value == 3
    assert _samples(metrics, "gputriage_finding", id="xid.79")  # from the last good check
    assert _samples(metrics, "gputriage_last_success_timestamp_seconds")[0].value > 0
    assert "ZeroDivisionError" in (watch.state.health() or "")
    assert "check failed" in log.getvalue()


# --- the scheduler -------------------------------------------------------------------------

class Gate:
    """A check that blocks until released, and counts how many run at once."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.release = threading.Event()
        self.calls = 0
        self.inside = 0
        self.most_inside = 0
        self.lock = threading.Lock()

    def __call__(self) -> Any:
        with self.lock:
            self.calls += 1
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        self.release.wait(WAIT_S)
        with self.lock:
            self.inside -= 1
        return self.result


def test_a_tick_that_finds_the_check_running_is_skipped_and_counted(results, running):
    gate = Gate(results["healthy-8xh100"])
    watch, log = _watch(gate, interval=0.02, max_cycles=2)
    thread = running(watch)
    _wait(lambda: watch.state.counts["skipped_overlap"] >= 3)
    assert gate.calls == 1
    gate.release.set()
    thread.join(timeout=WAIT_S)
    assert gate.most_inside == 1 and gate.calls == 2
    assert watch.state.counts["ok"] == 2
    assert "tick skipped" in log.getvalue()


def test_a_check_past_its_limit_is_reported_and_awaited(results, running):
    gate = Gate(results["gpu-fallen-off-bus"])
    watch, log = _watch(gate, interval=0.0, limit=0.05, max_cycles=1)
    thread = running(watch)
    _wait(lambda: watch.state.counts["overran"] == 1)
    why = watch.state.health()
    assert why is not None and "past its limit" in why
    assert watch.state.last is None  # awaited, not abandoned
    metrics = _metrics(make_registry(watch.state))
    assert _samples(metrics, "gputriage_checks_total", outcome="overran")[0].value == 1
    gate.release.set()
    thread.join(timeout=WAIT_S)
    assert watch.state.last is not None and watch.state.last.extra["overran"] is True
    assert watch.state.counts == {"ok": 0, "failed": 0, "skipped_overlap": 0, "overran": 1}
    assert watch.state.health() is None
    assert "overran" in log.getvalue()


@pytest.mark.slow  # watches a held loop for 2 x 0.5 s
def test_the_next_check_and_the_end_wait_for_the_sinks(results, running):
    """A check is running until its sinks have run: the next one does not start, and
    --max-cycles does not return (the process would exit before the Node condition is
    written)."""
    release = threading.Event()
    entered: list[int] = []
    calls: list[int] = []

    def slow_sink(outcome: CycleOutcome) -> None:
        entered.append(outcome.number)
        release.wait(WAIT_S)

    def check() -> Any:
        calls.append(1)
        return results["healthy-8xh100"]

    for cycles in (1, 2):
        release.clear()
        entered.clear()
        calls.clear()
        watch, _ = _watch(check, max_cycles=cycles, sinks=[slow_sink])
        thread = running(watch)
        _wait(lambda: entered == [1])
        threading.Event().wait(0.5)  # a loop that did not wait would be done by now
        assert calls == [1] and thread.is_alive()
        assert watch.state.running is not None and watch.state.last is not None
        release.set()
        thread.join(timeout=WAIT_S)
        assert not thread.is_alive() and entered == list(range(1, cycles + 1))
        assert watch.state.running is None


@pytest.mark.slow  # waits for two of the loop's 0.5 s polls
def test_stop_abandons_a_check_that_outlives_the_grace(results):
    gate = Gate(results["healthy-8xh100"])
    watch, log = _watch(gate, interval=0.0, limit=60, grace_s=600)
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    _wait(lambda: gate.calls == 1)
    watch.signalled("SIGTERM")  # what the handler does: attributes only
    _wait(lambda: "waiting for the running check" in log.getvalue())
    assert thread.is_alive()  # within the grace: waiting for the check
    watch.signalled("SIGTERM")  # a second signal: no more grace
    thread.join(timeout=WAIT_S)
    assert not thread.is_alive()
    assert "check abandoned" in log.getvalue() and "stopping on SIGTERM" in log.getvalue()
    gate.release.set()


def test_a_failing_sink_is_logged_and_the_others_still_run(results, running):
    seen: list[int] = []

    def broken(outcome: CycleOutcome) -> None:
        raise RuntimeError("API down")

    watch, log = _watch(lambda: results["healthy-8xh100"], max_cycles=2,
                        sinks=[broken, lambda outcome: seen.append(outcome.number)])
    running(watch).join(timeout=WAIT_S)
    assert seen == [1, 2]
    assert log.getvalue().count("sink failed") == 2 and "API down" in log.getvalue()


def test_json_log_lines(results, running):
    import json

    log = io.StringIO()
    watch = Watch(lambda: results["gpu-fallen-off-bus"], WatchState(0, 60),
                  WatchLog(log, "json"), max_cycles=1)
    running(watch).join(timeout=WAIT_S)
    lines = [json.loads(line) for line in log.getvalue().splitlines()]
    assert all(set(line) == {"ts", "level", "msg", "fields"} for line in lines)
    [cycle] = [line for line in lines if line["msg"].startswith("check 1")]
    assert cycle["fields"]["verdict"] == "critical" and cycle["fields"]["critical"] >= 1
    assert any(line["level"] == "warning" and line["msg"] == "sources not read"
               and "nvidia_smi:failed" in line["fields"]["sources"] for line in lines)


# --- the history -----------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_history_is_recorded_on_change_and_at_most_every_interval_otherwise(
        results, tmp_path):
    from gputriage.state.history import list_entries

    clock = Clock()
    recorder = HistoryRecorder(tmp_path / "state", WatchLog(io.StringIO()), every_s=3600,
                               clock=clock)
    healthy, fallen = results["healthy-8xh100"], results["gpu-fallen-off-bus"]
    assert recorder(healthy)  # the first
    clock.now += 60
    assert not recorder(healthy)  # unchanged, a minute later
    assert recorder(fallen)  # changed
    clock.now += 60
    assert not recorder(fallen)
    clock.now += 3600
    assert recorder(fallen)  # unchanged, but an hour has passed
    assert recorder(healthy)  # changed back
    entries = list_entries(tmp_path / "state")
    assert [e.verdict for e in entries] == ["ok", "critical", "critical", "ok"]
    assert signature(healthy) != signature(fallen)


def test_the_signature_orders_scopes_with_and_without_a_gpu_index(results):
    """Two findings alike but for a GPU index known on one, not the other: no TypeError
    sorting None against a number."""
    from dataclasses import replace

    result = results["gpu-fallen-off-bus"]
    [xid] = [f for f in result.findings if f.id == "xid.79"]
    assert xid.scope.gpu_index is None
    indexed = replace(xid, scope=replace(xid.scope, gpu_index=4))
    both = replace(result, findings=[*result.findings, indexed])
    assert signature(both) == signature(replace(result, findings=[indexed, *result.findings]))
    assert signature(both) != signature(result)


def test_a_history_that_cannot_be_written_is_said_once_and_never_fails(results, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    log = io.StringIO()
    recorder = HistoryRecorder(blocker / "state", WatchLog(log))
    assert not recorder(results["healthy-8xh100"])
    assert not recorder(results["healthy-8xh100"])  # tried again, not said again
    assert log.getvalue().count("history not recorded") == 1
