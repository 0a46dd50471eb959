"""The watch's Prometheus metrics: a custom collector that yields, at each scrape, the
series of what the watch knows now (:class:`~gputriage.watch.loop.WatchState`).

Nothing is registered per finding: the finding and GPU series are built afresh from the
last result at every scrape, so the series of a finding that went away are gone with it
and the registry never grows. The names and labels are documented in docs/watch.md.

- Findings, finding counts and GPU health come from the last *successful* check (a
  failed cycle keeps them; ``gputriage_last_success_timestamp_seconds`` says how old).
- Verdict, exit status, check duration and source status describe the last cycle (a
  failed one: verdict ``unknown``, exit status 3, no source series).
"""

from __future__ import annotations

import platform
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from gputriage import __version__
from gputriage.vocabulary import VERDICTS
from gputriage.watch.cycle import NOT_FAILURES

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from gputriage.watch.loop import WatchState

__all__ = ["GPU_STATES", "WatchCollector", "finding_labels", "gpu_state", "make_registry"]

GPU_STATES = ("ok", "warning", "critical", "unknown")
SEVERITIES = ("critical", "warning", "info")
SERIES_SEVERITIES = ("critical", "warning")  # the findings with a gputriage_finding series
FINDING_LABELS = ("id", "severity", "blame", "action", "gpu", "bus_id", "uuid")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def finding_labels(finding: Any) -> list[tuple[str, ...]]:
    """The label values of each series of a finding: one per scope (a finding on several
    GPUs has one per GPU); gpu, bus_id and uuid are "" when not GPU-scoped."""
    out: list[tuple[str, ...]] = []
    for scope in finding.scopes:
        gpu = scope.kind == "gpu"
        out.append((finding.id, finding.severity.value, finding.blame.value,
                    finding.action.value, _text(scope.gpu_index) if gpu else "",
                    _text(scope.pci_bus_id) if gpu else "", _text(scope.uuid) if gpu else ""))
    return out


def gpu_state(row: Any, findings: Sequence[Any]) -> str:
    """A GPU's state word: unknown when the driver could not be asked about it, else the
    worst severity of the current node-side findings on it (info counts as ok). A fault
    blamed on the job or its settings leaves the GPU ok, unlike ``GpuRow.severity``."""
    if getattr(row, "unknown", False):
        return "unknown"
    on_it = [x.severity for f in findings if f.current for x in (f, *f.consequences)
             if x.current and x.blame.side == "node" and _on_gpu(x, row.pci_bus_id)]
    worst = max(on_it, key=lambda sev: sev.rank, default=None)
    return worst.value if worst is not None and worst.value in ("warning", "critical") \
        else "ok"


def _on_gpu(finding: Any, bus_id: str | None) -> bool:
    return bool(bus_id) and any(s.kind == "gpu" and s.pci_bus_id == bus_id
                                for s in finding.scopes)


class WatchCollector:
    """Yields the watch's metric families from ``state`` at every collection."""

    def __init__(self, state: WatchState) -> None:
        self.state = state

    def describe(self) -> list:
        return []  # the families vary with the result: described by collecting

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        state = self.state
        with state.lock:
            last, good = state.last, state.last_good
            counts = dict(state.counts)
            success = state.last_success_time
        result = good.result if good is not None else None

        finding = GaugeMetricFamily(
            "gputriage_finding", "A current warning or critical finding (1 per finding and "
            "scope; the count when several non-GPU scopes share the labels)",
            labels=FINDING_LABELS)
        per_severity = dict.fromkeys(SEVERITIES, 0)
        series: dict[tuple[str, ...], int] = {}
        for f in (result.findings if result is not None else ()):
            if not f.current:
                continue
            if f.severity.value in per_severity:
                per_severity[f.severity.value] += 1
            if f.severity.value not in SERIES_SEVERITIES:
                continue  # notes (the topology map, "runtime configured"): counted only
            for labels in finding_labels(f):
                series[labels] = series.get(labels, 0) + 1
        for labels, value in series.items():
            finding.add_metric(labels, value)
        yield finding

        findings = GaugeMetricFamily("gputriage_findings",
                                     "Current findings per severity", labels=["severity"])
        for severity, n in per_severity.items():
            findings.add_metric([severity], n)
        yield findings
        yield self._gpus(result)
        yield from self._gpu_counts(result, state.expected_gpus)

        from gputriage.status import ExitStatus

        verdict_now = "unknown"
        status = int(ExitStatus.UNKNOWN)
        if last is not None and last.result is not None:
            from gputriage.status import verdict

            verdict_now, status = verdict(last.result), last.exit_status
        elif last is None:
            status = -1  # no check yet: no status series either
        verdict_family = GaugeMetricFamily(
            "gputriage_verdict", "The last check's verdict (1 for it, 0 for the others)",
            labels=["state"])
        if last is not None:
            for word in VERDICTS:
                verdict_family.add_metric([word], 1 if word == verdict_now else 0)
        yield verdict_family
        exit_family = GaugeMetricFamily(
            "gputriage_check_exit_status",
            "The status gputriage check would exit with (0 OK, 1 warning, 2 critical, "
            "3 unknown)")
        if status >= 0:
            exit_family.add_metric([], status)
        yield exit_family
        yield from self._sources(last)

        duration = GaugeMetricFamily("gputriage_check_duration_seconds",
                                     "How long the last check took")
        if last is not None:
            duration.add_metric([], last.duration_s)
        yield duration
        yield GaugeMetricFamily("gputriage_check_interval_seconds",
                                "Seconds between the starts of two checks (--interval; 0: "
                                "back to back)", value=state.interval_s)
        yield GaugeMetricFamily("gputriage_check_limit_seconds",
                                "How long a check may run before it counts as overran (the "
                                "collection deadline + 30 s)", value=state.limit_s)
        checks = CounterMetricFamily(
            "gputriage_checks", "Checks by outcome: ok, failed (raised), overran (ran "
            "past the limit), skipped_overlap (a tick found the previous still running)",
            labels=["outcome"])
        for outcome, n in counts.items():
            checks.add_metric([outcome], n)
        yield checks
        yield GaugeMetricFamily("gputriage_last_success_timestamp_seconds",
                                "When the last successful check ended (Unix time; 0: none "
                                "yet)", value=success)
        build = GaugeMetricFamily("gputriage_build_info", "gputriage's version",
                                  labels=["version", "python_version"])
        build.add_metric([__version__, platform.python_version()], 1)
        yield build

    @staticmethod
    def _gpus(result: Any) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily(
            "gputriage_gpu_health", "A GPU's health state (1 for its state, 0 for the "
            "others)", labels=["gpu", "bus_id", "uuid", "name", "state"])
        seen = set()
        findings = result.findings if result is not None else ()
        for row in (result.gpus if result is not None else ()):
            key = (_text(row.index), _text(row.pci_bus_id), _text(row.uuid),
                   _text(row.name))
            if key in seen:
                continue
            seen.add(key)
            state = gpu_state(row, findings)
            for word in GPU_STATES:
                family.add_metric([*key, word], 1 if word == state else 0)
        return family

    @staticmethod
    def _gpu_counts(result: Any, expected: int | None) -> Iterator[Any]:
        """How many GPUs the driver can use (none before a successful check) and how
        many the expectations state (none when they do not)."""
        from prometheus_client.core import GaugeMetricFamily

        usable = GaugeMetricFamily(
            "gputriage_gpus", "GPUs the driver lists and no layer reports lost, in the "
            "last successful check")
        if result is not None:
            usable.add_metric([], sum(1 for row in result.gpus if row.visible))
        yield usable
        expected_family = GaugeMetricFamily(
            "gputriage_gpus_expected", "GPUs the node should have (the expectations' "
            "gpu.count; no series when not stated)")
        if expected is not None:
            expected_family.add_metric([], expected)
        yield expected_family

    @staticmethod
    def _sources(last: Any) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        up = GaugeMetricFamily(
            "gputriage_source_up", "1: the source was read in the last check; 0: it "
            "failed (timeout, error, permission). Absent and not-applicable sources have "
            "no series", labels=["source"])
        seconds = GaugeMetricFamily("gputriage_source_duration_seconds",
                                    "How long collecting the source took in the last check",
                                    labels=["source"])
        for source in (last.sources if last is not None else ()):
            if source.error in NOT_FAILURES:
                continue
            up.add_metric([source.name], 0 if source.error else 1)
            if source.duration_s is not None:
                seconds.add_metric([source.name], source.duration_s)
        yield up
        yield seconds


def make_registry(state: WatchState) -> CollectorRegistry:
    """A registry of its own (not the process-wide default) holding the collector."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(WatchCollector(state))
    return registry
