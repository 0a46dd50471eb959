"""How a link on a PCIe path is judged (``pcie_hops.csv``): each case with its severity,
action, blame and source. Loaded once."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gputriage.knowledge import csv_rows
from gputriage.vocabulary import Action, Blame, Severity

__all__ = ["HopCase", "hop_case"]


@dataclass(frozen=True)
class HopCase:
    """One way a link on a path can stand, and what it calls for."""

    case: str
    severity: Severity
    action: Action
    blame: Blame
    share_at_most: float | None
    width_share_at_most: float | None
    meaning: str
    source: str


def _float(raw: str) -> float | None:
    return float(raw) if raw.strip() else None


@functools.cache
def _cases() -> dict[str, HopCase]:
    return {r["case"]: HopCase(r["case"], Severity(r["severity"]), Action(r["action"]),
                               Blame(r["blame"]), _float(r["share_at_most"]),
                               _float(r["width_share_at_most"]), r["meaning"], r["source"])
            for r in csv_rows("pcie_hops.csv")}


def hop_case(case: str) -> HopCase:
    """The row of ``case`` (KeyError for a case the table does not have)."""
    return _cases()[case]
