"""All rules, registered explicitly by importing their modules in order."""

from __future__ import annotations

from gputriage.rules import devnodes, driver, inventory, modules, persistence  # noqa: F401
from gputriage.rules.base import REGISTRY, Rule

__all__ = ["REGISTRY", "Rule", "all_rules"]


def all_rules() -> list[Rule]:
    return list(REGISTRY)
