"""The watch's scheduler: a check every interval, never two at once.

The main thread keeps the time; each check runs in a worker thread of its own (one at a
time), then hands its :class:`CycleOutcome` to the :class:`WatchState` (which the
metrics, the server and the textfile read) and to every sink.

- Ticks are at a fixed rate (start, start + interval, ...). A tick that finds the check
  still running is skipped and counted (``skipped_overlap``); with interval 0 the checks
  run back to back and nothing is skipped.
- A check still running ``limit_s`` after it started is reported once (counted
  ``overran``, logged, ``/healthz`` degraded) and its end awaited: collection is bounded,
  so it ends; its late result is published as any other.
- :meth:`Watch.stop` (SIGTERM, SIGINT) ends the loop after the running check, or
  abandons that check once ``grace_s`` has passed (its thread is a daemon).

Nothing grows per cycle: the state keeps the last outcome and the last successful one,
four counters and the running check.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from gputriage.watch.cycle import NOT_FAILURES, CycleOutcome, Sink, SourceStatus
from gputriage.watch.logs import WatchLog

__all__ = ["NOT_FAILURES", "OUTCOMES", "Running", "Watch", "WatchState", "sources_of"]

OUTCOMES = ("ok", "failed", "skipped_overlap", "overran")
DEFAULT_GRACE_S = 10.0
POLL_S = 0.5  # the longest the loop sleeps without looking for a signal


@dataclass
class Running:
    """The check in progress, until its sinks have run (``done`` is then set)."""

    number: int
    started: float  # monotonic
    done: threading.Event = field(default_factory=threading.Event)
    overran: bool = False


class WatchState:
    """What the watch knows, written by the loop and read (from other threads) by the
    metrics collector, the HTTP server and the textfile writer."""

    def __init__(self, interval_s: float, limit_s: float,
                 clock: Callable[[], float] = time.monotonic, *,
                 expected_gpus: int | None = None) -> None:
        self.interval_s = interval_s
        self.limit_s = limit_s
        self.expected_gpus = expected_gpus  # the expectations' gpu.count (None: unstated)
        self.clock = clock
        self.started = clock()
        self.lock = threading.Lock()
        self.last: CycleOutcome | None = None
        self.last_good: CycleOutcome | None = None  # the last with a result
        self.last_success_time = 0.0  # Unix time the last successful check ended
        self.last_end = self.started  # monotonic
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.running: Running | None = None

    def count(self, outcome: str) -> None:
        with self.lock:
            self.counts[outcome] += 1

    def publish(self, outcome: CycleOutcome, run: Running) -> None:
        """A finished check: the last outcome (and the last good one), counted ``ok`` or
        ``failed`` unless it was already counted as ``overran``. The check stays
        ``running`` until its sinks have run too (see ``Watch._cycle``)."""
        with self.lock:
            self.last = outcome
            if outcome.result is not None:
                self.last_good = outcome
                self.last_success_time = time.time()
            if not run.overran:
                self.counts["ok" if outcome.result is not None else "failed"] += 1
            self.last_end = self.clock()

    def health(self) -> str | None:
        """None while checks complete in time, else why not (for ``/healthz``)."""
        now = self.clock()
        with self.lock:
            running, last, last_end = self.running, self.last, self.last_end
        if running is not None and running.overran:
            return (f"check {running.number} has run for {now - running.started:.0f} s, "
                    f"past its limit of {self.limit_s:g} s")
        if last is not None and last.result is None:
            return f"check {last.number} failed: {last.error}"
        quiet_for = now - last_end
        if quiet_for > self.interval_s + self.limit_s:
            return f"no check has completed for {quiet_for:.0f} s"
        return None


def sources_of(result: Any) -> tuple[SourceStatus, ...]:
    """How each source of the result's snapshot manifest was collected (none for
    inputs without a manifest, such as a pasted file or a bug report)."""
    manifest = getattr(result, "manifest", None)
    records = manifest.get("sources") if isinstance(manifest, dict) else None
    if not isinstance(records, dict):
        return ()
    out = []
    for name, rec in sorted(records.items()):
        if not isinstance(rec, dict):
            continue
        error = rec.get("error")
        duration = rec.get("duration_s")
        out.append(SourceStatus(str(name), str(error) if error else None,
                                float(duration) if isinstance(duration, (int, float))
                                and not isinstance(duration, bool) else None))
    return tuple(out)


class Watch:
    """Runs ``check`` (which returns a Result, or raises) every ``interval_s`` seconds
    until :meth:`stop` or ``max_cycles`` checks; ``listeners`` are called (from the main
    thread) when the state changes between checks: a skipped tick, an overrun."""

    def __init__(self, check: Callable[[], Any], state: WatchState, log: WatchLog, *,
                 sinks: Sequence[Sink] = (), listeners: Sequence[Callable[[], None]] = (),
                 max_cycles: int | None = None, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.check = check
        self.state = state
        self.log = log
        self.sinks = tuple(sinks)
        self.listeners = tuple(listeners)
        self.max_cycles = max_cycles
        self.grace_s = grace_s
        self.cycles = 0  # checks started
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._failing: frozenset[tuple[str, str]] = frozenset()  # sources last seen failing
        self.signal: str | None = None  # the signal that asked the loop to end

    # -- control ---------------------------------------------------------------------------

    def stop(self, grace_s: float | None = None) -> None:
        """End the loop (from another thread); ``grace_s`` shortens the wait for the
        running check."""
        if grace_s is not None:
            self.grace_s = min(self.grace_s, grace_s)
        self._stop.set()
        self._wake.set()

    def signalled(self, name: str) -> None:
        """End the loop from a signal handler: only attributes are set (taking a lock
        the interrupted main thread may hold would deadlock); the loop, which wakes at
        least every POLL_S, sees them. A second signal abandons the running check."""
        if self.signal is not None:
            self.grace_s = 0.0
        self.signal = name

    @property
    def stopping(self) -> bool:
        return self._stop.is_set() or self.signal is not None

    def run(self) -> None:
        """The loop; returns once stopped or after ``max_cycles`` checks."""
        state, clock = self.state, self.state.clock
        interval = self.state.interval_s
        next_tick = clock()
        while not self.stopping:
            self._wake.clear()
            now = clock()
            running = state.running
            if running is not None and running.done.is_set():
                running = None
            if running is None and self._finished():
                break
            if now >= next_tick:
                if running is None:
                    running = self._start()
                elif interval > 0:
                    self._skipped(running, now)
                if interval > 0:
                    while next_tick <= now:
                        next_tick += interval
                else:
                    next_tick = now
            if running is not None and not running.overran \
                    and now >= running.started + state.limit_s:
                self._overran(running, now)
            self._wake.wait(min(POLL_S, max(0.0, self._wait(running, next_tick, now))))
        if self.signal is not None:
            self.log.info(f"stopping on {self.signal}")
        self._wind_down()

    def _wait(self, running: Running | None, next_tick: float, now: float) -> float:
        """Seconds until something is due: the next tick, the running check's limit (its
        end wakes the loop anyway)."""
        if running is None:
            return next_tick - now
        due = [next_tick] if self.state.interval_s > 0 else []
        if not running.overran:
            due.append(running.started + self.state.limit_s)
        return min(due) - now if due else 1.0

    def _finished(self) -> bool:
        return self.max_cycles is not None and self.cycles >= self.max_cycles

    def _wind_down(self) -> None:
        """After the loop: wait for the running check up to the grace, else abandon it."""
        running = self.state.running
        if running is None or running.done.is_set():
            return
        start = self.state.clock()
        self.log.info("stopping: waiting for the running check", cycle=running.number,
                      grace_s=self.grace_s)
        while not running.done.is_set():
            left = start + self.grace_s - self.state.clock()
            if left <= 0:
                self.log.warning("stopping: check abandoned, it did not end within the "
                                 "grace", cycle=running.number, grace_s=self.grace_s)
                return
            self._wake.clear()
            if not running.done.is_set():
                self._wake.wait(min(left, POLL_S))

    # -- events ----------------------------------------------------------------------------

    def _start(self) -> Running:
        self.cycles += 1
        run = Running(self.cycles, self.state.clock())
        with self.state.lock:
            self.state.running = run
        worker = threading.Thread(target=self._cycle, args=(run,), daemon=True,
                                  name=f"gputriage-check-{run.number}")
        worker.start()
        return run

    def _skipped(self, running: Running, now: float) -> None:
        self.state.count("skipped_overlap")
        self.log.warning("tick skipped: the previous check is still running",
                         cycle=running.number, running_s=round(now - running.started, 1))
        self._tell()

    def _overran(self, running: Running, now: float) -> None:
        running.overran = True
        self.state.count("overran")
        self.log.warning("check overran its limit; awaiting its end", cycle=running.number,
                         running_s=round(now - running.started, 1),
                         limit_s=self.state.limit_s)
        self._tell()

    def _tell(self) -> None:
        for listener in self.listeners:
            try:
                listener()
            except Exception as exc:  # a listener never stops the loop
                self.log.error("state update failed", error=f"{type(exc).__name__}: {exc}")

    # -- the worker ------------------------------------------------------------------------

    def _cycle(self, run: Running) -> None:
        try:
            outcome = self._judge(run)
            self.state.publish(outcome, run)
            for sink in self.sinks:
                try:
                    sink(outcome)
                except Exception as exc:  # the other sinks still run
                    self.log.error("sink failed", cycle=run.number,
                                   sink=getattr(sink, "__name__", type(sink).__name__),
                                   error=f"{type(exc).__name__}: {exc}")
            self._report(outcome)
        except Exception as exc:  # a bug here must not end the watch
            self.log.error("cycle failed", cycle=run.number,
                           error=f"{type(exc).__name__}: {exc}")
        finally:
            # only now: the next check, and the end of the loop, wait for the sinks
            with self.state.lock:
                if self.state.running is run:
                    self.state.running = None
            run.done.set()
            self._wake.set()

    def _judge(self, run: Running) -> CycleOutcome:
        from gputriage.status import ExitStatus, exit_status

        started = datetime.now(timezone.utc)
        t0 = time.perf_counter()
        try:
            result = self.check()
        except Exception as exc:  # a failed check is an outcome
            return CycleOutcome(run.number, started, time.perf_counter() - t0, None,
                                int(ExitStatus.UNKNOWN), error=f"{type(exc).__name__}: {exc}",
                                extra={"overran": run.overran})
        return CycleOutcome(run.number, started, time.perf_counter() - t0, result,
                            int(exit_status(result)), sources=sources_of(result),
                            extra={"overran": run.overran})

    def _report(self, outcome: CycleOutcome) -> None:
        """The cycle's line, and a line when the set of failing sources changes."""
        if outcome.result is None:
            self.log.error("check failed", cycle=outcome.number, error=outcome.error,
                           duration_s=round(outcome.duration_s, 3))
            return
        from gputriage.status import verdict

        counts = {"critical": 0, "warning": 0, "info": 0}
        for finding in outcome.result.findings:
            if finding.current and finding.severity.value in counts:
                counts[finding.severity.value] += 1
        self.log.info(f"check {outcome.number}: {verdict(outcome.result)}",
                      cycle=outcome.number, verdict=verdict(outcome.result),
                      exit_status=outcome.exit_status, **counts,
                      duration_s=round(outcome.duration_s, 3))
        failing = frozenset((s.name, s.error) for s in outcome.sources
                            if s.error is not None and s.error not in NOT_FAILURES)
        if failing != self._failing:
            if failing:
                self.log.warning("sources not read", cycle=outcome.number,
                                 sources=",".join(f"{n}:{e}" for n, e in sorted(failing)))
            else:
                self.log.info("every source read again", cycle=outcome.number)
            self._failing = failing
