"""What ``gputriage nccl`` reports about a job besides the findings: the NCCL log
summarised per host and per process, and each nccl-tests run with its peak bus
bandwidth against the expectation for the hardware.

:func:`summarize` builds it once; :mod:`gputriage.views.ncclview` only formats it
(terminal report and the ``nccl`` object of the JSON document).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gputriage.facts.nccl import process_network
from gputriage.facts.nccl_bandwidth import Expectation
from gputriage.parsers.nccl_model import NcclLog, NcclProcess, NcclTestRow, NcclTestRun

__all__ = ["Judged", "JudgedRun", "NcclSummary", "Peak", "driver_text", "gdr_counts",
           "host_groups", "peak_busbw", "process_summary", "summarize", "version_text"]

Judged = tuple[NcclTestRun, Expectation | None, str]  # (run, expectation, why none)


@dataclass(frozen=True)
class Peak:
    """The best row of a run: its busbw, the row, and which placement gave it."""

    busbw: float
    row: NcclTestRow
    placement: str  # "out-of-place" | "in-place"


@dataclass(frozen=True)
class JudgedRun:
    """One nccl-tests run, its peak, and how that compares with the expectation."""

    run: NcclTestRun
    expectation: Expectation | None
    why_none: str  # why there is no expectation ("" when there is one)
    peak: Peak | None

    @property
    def percent(self) -> int | None:
        """The peak as a percentage of the expectation (None: no peak or no figure)."""
        if self.expectation is None or self.peak is None:
            return None
        return self.expectation.percent(self.peak.busbw)

    @property
    def verdict_line(self) -> str | None:
        """``busbw 48.1 GB/s = 52 % of the ~92 GB/s expected for ...`` (None: no figure)."""
        if self.expectation is None or self.peak is None:
            return None
        return self.expectation.line(self.peak.busbw)


@dataclass(frozen=True)
class NcclSummary:
    """Everything the NCCL report shows besides the findings."""

    log: NcclLog
    hosts: list[dict[str, Any]]  # one summary per host, by first rank
    processes: list[dict[str, Any]]
    runs: list[JudgedRun]

    @property
    def host_count(self) -> int:
        """The hosts the log's processes ran on, as the report groups them: one per
        host prefix, and the processes without one as one more."""
        return len(self.hosts)


def summarize(log: NcclLog, judged: Sequence[Judged]) -> NcclSummary:
    """The report's summary of a job's NCCL log and its judged nccl-tests runs."""
    return NcclSummary(log, host_groups(log), [process_summary(p) for p in log.processes],
                       [JudgedRun(run, exp, why, peak_busbw(run)) for run, exp, why in judged])


def peak_busbw(run: NcclTestRun) -> Peak | None:
    """The run's best row, out-of-place preferred on a tie."""
    row = run.peak
    if row is None:
        return None
    oop, ip = row.oop_busbw or 0.0, row.ip_busbw or 0.0
    return Peak(oop, row, "out-of-place") if oop >= ip else Peak(ip, row, "in-place")


def version_text(p: NcclProcess) -> str | None:
    """``2.21.5+cuda12.4`` as the process printed it."""
    if not p.nccl_version:
        return None
    return p.nccl_version + (f"+cuda{p.cuda_build}" if p.cuda_build else "")


def driver_text(p: NcclProcess) -> str | None:
    """The CUDA driver version NCCL printed (``12040`` -> ``12.4``)."""
    if p.cuda_driver is None:
        return None
    major, rest = divmod(p.cuda_driver, 1000)
    return f"{major}.{rest // 10}"


def gdr_counts(procs: Sequence[NcclProcess]) -> dict[str, int]:
    """GDR state: the GDR lines, and the network channels with and without /GDRDMA."""
    nets = [c for p in procs for c in p.channels if c.gdr is not None]
    return {"enabled_lines": sum(1 for p in procs for g in p.gdr if g.enabled),
            "disabled_lines": sum(1 for p in procs for g in p.gdr if not g.enabled),
            "net_channels": len(nets), "gdrdma_channels": sum(1 for c in nets if c.gdr)}


def _distinct(values: Iterable[Any]) -> list[Any]:
    """The sorted distinct values that are set (None and "" left out)."""
    return sorted({v for v in values if v})


def host_groups(log: NcclLog) -> list[dict[str, Any]]:
    """One summary per host (processes without a host prefix form one group), in the
    order of their first rank."""
    by_host: dict[str | None, list[NcclProcess]] = {}
    for p in log.processes:
        by_host.setdefault(p.host, []).append(p)
    groups = [_group(host, procs) for host, procs in by_host.items()]
    return sorted(groups, key=lambda g: (g["ranks"][0] if g["ranks"] else 1 << 62,
                                         g["host"] or ""))


def _group(host: str | None, procs: list[NcclProcess]) -> dict[str, Any]:
    return {"host": host, **_identity(procs), **_versions(procs), **_networks(procs),
            "gdr": gdr_counts(procs),
            "channels": dict(sorted(Counter(c.family for p in procs
                                            for c in p.channels).items())),
            "env": _merged_env(procs), "warns": sum(len(p.warns) for p in procs),
            **_comm_counts(procs)}


def _identity(procs: list[NcclProcess]) -> dict[str, Any]:
    return {"processes": len(procs),
            "pids": sorted(p.pid for p in procs if p.pid is not None),
            "ranks": sorted({r for p in procs for r in p.ranks}),
            "cuda_devices": sorted({d for p in procs for d in p.cuda_devs})}


def _versions(procs: list[NcclProcess]) -> dict[str, list[str]]:
    return {"nccl_versions": _distinct(version_text(p) for p in procs),
            "cuda_driver": _distinct(driver_text(p) for p in procs)}


def _networks(procs: list[NcclProcess]) -> dict[str, list[str]]:
    return {"networks": _distinct(process_network(p) for p in procs),
            "net_plugins": _distinct(p.net_plugin for p in procs),
            "ib_devices": sorted({d for p in procs for d in p.ib_devices}),
            "socket_ifaces": sorted({d for p in procs for d in p.socket_ifaces}),
            "bootstrap_ifaces": _distinct(p.bootstrap_iface for p in procs)}


def _merged_env(procs: list[NcclProcess]) -> dict[str, str | list[str]]:
    """Each NCCL_* setting: its one value, or every distinct value in order of first use."""
    env: dict[str, list[str]] = {}
    for p in procs:
        for k, v in p.env.items():
            if v not in env.setdefault(k, []):
                env[k].append(v)
    return {k: v[0] if len(v) == 1 else v for k, v in sorted(env.items())}


def _comm_counts(procs: list[NcclProcess]) -> dict[str, int]:
    """Communicators whose init completed, and all of them (per process, comm and rank)."""
    return {"init_complete": len({(p.pid, c.comm, c.rank) for p in procs for c in p.comms
                                  if c.init_complete}),
            "comms": len({(p.pid, c.comm, c.rank) for p in procs for c in p.comms})}


def process_summary(p: NcclProcess) -> dict[str, Any]:
    """One process as the JSON document lists it."""
    return {"label": p.label, "host": p.host, "pid": p.pid, "ranks": sorted(p.ranks),
            "cuda_devices": sorted(p.cuda_devs), "nccl_version": version_text(p),
            "cuda_driver": driver_text(p), "network": process_network(p),
            "net_plugin": p.net_plugin,
            "ib_devices": list(p.ib_devices), "socket_ifaces": list(p.socket_ifaces),
            "channels": dict(sorted(Counter(c.family for c in p.channels).items())),
            "env": dict(p.env), "warns": len(p.warns), "last_step": p.last_step,
            "lines": p.lines}
