"""All rules, registered explicitly by importing their modules in order."""

from __future__ import annotations

from gputriage.rules import (  # noqa: F401
    devnodes,
    driver,
    fabric,
    hostcfg,
    infiniband,
    inventory,
    kernel_log,
    kernel_xid,
    memory,
    modules,
    pcie,
    persistence,
    thermal,
    topology,
)
from gputriage.rules.base import REGISTRY, Rule

__all__ = ["REGISTRY", "Rule", "all_rules"]


def all_rules() -> list[Rule]:
    return list(REGISTRY)
