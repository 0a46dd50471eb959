"""All rules: each module of this package (an area) registers its rules when
imported; :data:`AREAS` is found by listing the package, so a new area is one new
module.

The modules are imported on first need, so that a command which needs only some
areas (``gputriage logs``: the kernel log) does not pay for the others.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from gputriage.rules.base import REGISTRY, Rule

__all__ = ["AREAS", "LOG_AREAS", "NCCL_AREAS", "REGISTRY", "Rule", "all_rules", "rules_of"]

# modules of this package that are helpers, not areas
_HELPERS = frozenset({"base", "dcgm_diag_bugs", "doubts", "k8s_common", "k8s_sched",
                      "k8s_workloads", "kernel_common",
                      "kernel_host", "nccl_completions", "nccl_ib_advice", "nccl_transport_causes",
                      "nccl_transport_paths"})
AREAS: tuple[str, ...] = tuple(sorted(
    m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)])
    if m.name not in _HELPERS))
# the areas whose rules a kernel log alone can feed (tests/test_logs_cli.py checks this)
LOG_AREAS: tuple[str, ...] = ("driver", "driver_probe", "kernel_log", "kernel_xid")
# the areas whose rules a job's NCCL logs and nccl-tests outputs alone can feed, with no
# host output among the inputs (tests/test_nccl_cli.py checks this)
NCCL_AREAS: tuple[str, ...] = ("driver", "nccl_bandwidth", "nccl_errors", "nccl_job",
                               "nccl_transport")


def rules_of(areas: tuple[str, ...]) -> list[Rule]:
    """The rules of some areas, in registration order."""
    modules = {f"{__name__}.{a}" for a in areas}
    for name in sorted(modules):
        importlib.import_module(name)
    return [r for r in REGISTRY if r.func.__module__ in modules]


def all_rules() -> list[Rule]:
    """Every rule of every area."""
    order = {f"{__name__}.{a}": i for i, a in enumerate(AREAS)}
    for name in order:
        importlib.import_module(name)
    return sorted(REGISTRY, key=lambda r: order.get(r.func.__module__, len(order)))
