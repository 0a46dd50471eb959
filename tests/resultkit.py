"""``gputriage/result/v1`` documents for the tests of what reads them back (diff, fleet,
npd, :mod:`gputriage.results.reader`): made by the real writer (:mod:`gputriage.results.document`)
from model objects, so each is a document ``check --json`` could print."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from gputriage.model import (
    Action,
    Blame,
    DriverVersions,
    Finding,
    GpuRow,
    HostSummary,
    Result,
    Scope,
    Severity,
    Skipped,
)
from gputriage.results.document import to_json

GENERATED = datetime(2024, 5, 14, 9, 30, tzinfo=timezone.utc)

# The action a finding of this severity and side takes (severity and action agree).
_ACTION = {("critical", "node"): Action.DRAIN_AND_REPAIR, ("critical", "job"): Action.RESTART_JOB,
           ("warning", "node"): Action.PLAN_REPAIR, ("warning", "job"): Action.RESTART_JOB}


def finding(fid: str, severity: str = "critical", blame: str = "node", *,
            scope: Scope | None = None, title: str | None = None, **fields: Any) -> Finding:
    """A finding whose action agrees with its severity and blame (none when ``info`` or
    ``ok``); ``fields`` as :class:`~gputriage.model.Finding` takes them."""
    side = Blame(blame).side
    fields.setdefault("action", _ACTION.get((severity, side), Action.NONE))
    return Finding(fid, Severity(severity), title if title is not None else f"the {fid} title",
                   f"why {fid} matters", blame=Blame(blame), scope=scope or Scope(),
                   **fields)


def gpu_scope(index: int | None, bus: str | None = None) -> Scope:
    """The scope of one GPU."""
    return Scope("gpu", gpu_index=index, pci_bus_id=bus)


def host(hostname: str | None = "gpu-node-01", driver: str | None = "550.54.15",
         kernel: str | None = "5.15.0-105-generic", **fields: Any) -> HostSummary:
    """A host summary (``fields``: the other HostSummary fields)."""
    fields.setdefault("os", "Ubuntu 22.04.4 LTS")
    return HostSummary(hostname=hostname, kernel=kernel,
                       driver=DriverVersions(driver, driver, "12.4" if driver else None),
                       rules_run=fields.pop("rules_run", 12), **fields)


def gpus(count: int, name: str = "NVIDIA H100 80GB HBM3", uuid_prefix: str = "GPU-n",
         **fields: Any) -> list[GpuRow]:
    """``count`` visible GPUs at buses 0000:18:00.0, 0000:19:00.0, ..."""
    return [GpuRow(i, f"0000:{0x18 + i:02x}:00.0", name, f"{uuid_prefix}-{i}",
                   persistence_mode=True, **fields) for i in range(count)]


def document(*findings: Finding, host_summary: HostSummary | None = None,
             gpu_rows: Sequence[GpuRow] = (), manifest: dict | None = None,
             generated: datetime = GENERATED, skipped: Sequence[Skipped] = (),
             **result: Any) -> dict[str, Any]:
    """The result document of these findings, host and GPUs (``result``: the other
    fields of :class:`~gputriage.model.Result`: ``unreadable``, ``job_faults_fail``...)."""
    summary = host_summary if host_summary is not None else host()
    res = Result(findings=list(findings), skipped=list(skipped), host=summary,
                 gpus=list(gpu_rows), manifest=manifest, **result)
    return to_json(res, generated=generated)
