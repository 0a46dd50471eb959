"""The reports of ``gputriage k8s status`` and ``k8s lint``: a short summary of the
cluster (or the manifests), then the findings as the host report prints them
(:mod:`gputriage.views.terminal`), and the ``gputriage/k8s/v1`` JSON document.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from gputriage import __version__
from gputriage.status import exit_status, verdict

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from gputriage.model import Result
    from gputriage.parsers.k8s_model import Cluster

SCHEMA = "gputriage/k8s/v1"
ERRORS_SHOWN = 6  # kinds not read, listed one per line


@dataclass
class Summary:
    """What the report says before its findings."""

    command: str  # status | lint
    nodes: int = 0
    gpu_nodes: int = 0
    gpu_capacity: float = 0.0
    gpu_allocatable: float = 0.0
    pods: int = 0
    pending_gpu_pods: int = 0
    objects: dict[str, int] = field(default_factory=dict)  # kind -> count
    errors: dict[str, str] = field(default_factory=dict)  # kind -> why not read
    cluster: dict[str, Any] | None = None  # server, context, read, seconds (status)
    files: list[str] | None = None  # the manifests read (lint)

    def to_json(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "gpu_nodes": self.gpu_nodes,
                "gpus": {"capacity": _number(self.gpu_capacity),
                         "allocatable": _number(self.gpu_allocatable)},
                "pods": self.pods, "pending_gpu_pods": self.pending_gpu_pods,
                "objects": dict(sorted(self.objects.items()))}


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def summarize(cluster: Cluster, command: str) -> Summary:
    """Counts of ``cluster`` for the summary lines."""
    s = Summary(command, errors=dict(cluster.errors))
    s.nodes = len(cluster.nodes)
    for node in cluster.gpu_nodes():
        s.gpu_nodes += 1
        s.gpu_capacity += sum((node.gpus("capacity") or {}).values())
        s.gpu_allocatable += sum((node.gpus("allocatable") or {}).values())
    s.pods = len(cluster.pods)
    s.pending_gpu_pods = sum(1 for p in cluster.pods
                             if p.phase == "Pending" and not p.node and p.gpu_requests())
    s.objects = dict(Counter(o.kind for o in cluster.objects))
    return s


def k8s_json(result: Result, summary: Summary, *, generated: datetime | None = None
             ) -> dict[str, Any]:
    """The ``gputriage/k8s/v1`` document."""
    from gputriage.results.document import plain

    when = generated or datetime.now(timezone.utc)
    return {
        "schema": SCHEMA, "tool_version": __version__,
        "generated": when.isoformat(timespec="seconds"), "command": summary.command,
        "verdict": verdict(result), "exit_status": int(exit_status(result)),
        "cluster": summary.cluster, "files": summary.files,
        "summary": summary.to_json(), "not_read": dict(summary.errors),
        "findings": [plain(f.to_json()) for f in result.sorted_findings()],
        "skipped": [{"rule": s.rule, "reason": s.reason} for s in result.skipped],
        "inputs": plain(list(result.inputs or [])),
        "unreadable": [str(u) for u in result.unreadable],
    }


def _gpus(value: float) -> str:
    return f"{value:g}"


def print_summary(out: Any, summary: Summary) -> None:
    """The summary lines: the cluster or the manifests, nodes and GPUs, pending GPU
    pods, what could not be read."""
    from gputriage.views.styles import STYLES

    c = summary.cluster
    if c is not None:
        where = str(c.get("server") or "?")
        if c.get("context"):
            where += f" (context {c['context']})"
        out.labelled(("cluster", "bold"), (where, ""),
                     (f"{out.dot}read in {float(c.get('seconds') or 0):.1f} s", "dim"))
    if summary.files is not None:
        n = len(summary.files)
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(summary.objects.items()))
        out.labelled(("manifests", "bold"),
                     (f"{n} file{'s' if n != 1 else ''}, "
                      f"{sum(summary.objects.values())} objects", ""),
                     (f"{out.dot}{kinds}" if kinds else "", "dim"))
    if summary.nodes or summary.command == "status":
        gpus = (f"{summary.gpu_nodes} with GPUs; nvidia GPUs capacity "
                f"{_gpus(summary.gpu_capacity)}, allocatable {_gpus(summary.gpu_allocatable)}")
        short = summary.gpu_allocatable < summary.gpu_capacity
        out.labelled(("nodes", "bold"), (f"{summary.nodes}", ""), (out.dot, "dim"),
                     (gpus, STYLES["warning"] if short else ""))
    if summary.pods or summary.command == "status":
        pending = summary.pending_gpu_pods
        out.labelled(("pods", "bold"), (f"{summary.pods}", ""), (out.dot, "dim"),
                     (f"{pending} pending asking for GPUs",
                      STYLES["warning"] if pending else ""))
    errors = sorted(summary.errors.items())
    for kind, why in errors[:ERRORS_SHOWN]:
        out.labelled(("not read", "bold yellow"), (f"{kind}: ", "yellow"), (why, "yellow"))
    if len(errors) > ERRORS_SHOWN:
        out.labelled(("not read", "bold yellow"),
                     (f"and {len(errors) - ERRORS_SHOWN} more kinds (--json lists them)",
                      "yellow"))


def render_k8s(result: Result, summary: Summary, console: Console, *,
               verbose: bool = False) -> None:
    """The terminal report: the verdict and next step, the summary, the causes, the
    minor findings, then skipped rules and inputs."""
    from gputriage.views.opening import print_opening
    from gputriage.views.out import Out
    from gputriage.views.terminal import print_causes, print_minor, print_tail

    out = Out(console, verbose)
    print_opening(out, result)
    console.print()
    print_summary(out, summary)
    print_causes(out, result)
    print_minor(out, result)
    print_tail(out, result)
