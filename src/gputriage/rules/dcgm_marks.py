"""A node a GPU health checker marked (NVSentinel, the EKS node monitoring agent), judged
by the DCGM error code of its mark (knowledge/dcgm_errors.csv): the verdict is the
checker's, so the blame is what its code means -- the Xid it names, DCGM's own trouble,
IMEX on a node that has no multi-node NVLink domain (a false alarm) -- and unknown when
the code is not one this project knows.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from gputriage.knowledge.dcgm_errors import DcgmError, by_number, lookup
from gputriage.knowledge.xid import xid_info
from gputriage.model import NODE, Action, Blame, Finding, Scope, Severity, evidence
from gputriage.parsers.health_marks import HealthMark
from gputriage.rules.base import action_for, finding, rule
from gputriage.rules.fabric import Visible, locate

__all__ = ["MarkVerdict", "judge_mark"]

DOC_IMEX = "https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/overview.html"
# GPUs built into multi-node NVLink domains (NVL racks): the only ones IMEX serves
_MNNVL_GPU = re.compile(r"\bG[BH][0-9]{3}\b|NVL(?:36|72|144|576)\b", re.IGNORECASE)


@dataclass(frozen=True)
class MarkVerdict:
    severity: Severity
    action: Action
    blame: Blame
    what: str  # the title's words after "<checker> marked ..."
    why: str  # the explanation


def judge_mark(code: str, number: int | None, xids: list[int], recommended: str | None,
               gpu_names: list[str]) -> MarkVerdict:
    """What a checker's mark with this DCGM code means, with the GPU models the input
    names (they tell whether IMEX belongs on the node)."""
    row = by_number(number) if number is not None else lookup(code)
    said = f" The checker recommends {recommended}." if recommended else ""
    if row is None:
        return MarkVerdict(
            Severity.WARNING, Action.PLAN_REPAIR, Blame.UNKNOWN, f"{code}",
            f"A health checker marked the node with {code}, a code this project does not "
            f"know: whose fault it is cannot be told from the mark alone.{said} Read the "
            "checker's event for the node and run gputriage check on it.")
    if row.judge == "by-xid":
        return _by_xid(row, xids, said)
    if row.judge == "mnnvl":
        return _imex(row, gpu_names, said)
    severity = row.severity
    return MarkVerdict(severity, action_for(severity, row.action), row.blame,
                       f"{row.title} ({row.code})", f"{row.meaning}{said}")


def _by_xid(row: DcgmError, xids: list[int], said: str) -> MarkVerdict:
    infos = [i for i in (xid_info(x) for x in xids) if i is not None]
    if not infos:
        return MarkVerdict(Severity.WARNING, Action.PLAN_REPAIR, Blame.UNKNOWN, row.code,
                           f"{row.meaning} The mark does not say which Xid.{said}")
    worst = max(infos, key=lambda i: i.severity.rank)
    names = ", ".join(f"Xid {i.code} ({i.meaning})" for i in infos)
    if worst.blame.side == "job":
        return MarkVerdict(
            Severity.WARNING, Action.RESTART_JOB, worst.blame, f"{row.code} for {names}",
            f"{names} is the application's own fault (a bad address, a kernel error), not "
            f"the GPU's.{said} Fix or restart the job that raised it; the checker's mark "
            "stays until it is cleared, so clear it rather than repair the node.")
    return MarkVerdict(worst.severity, action_for(worst.severity, worst.action), worst.blame,
                       f"{row.code} for {names}", f"{worst.explanation}{said}")


def _imex(row: DcgmError, gpu_names: list[str], said: str) -> MarkVerdict:
    rack = next((n for n in gpu_names if _MNNVL_GPU.search(n)), None)
    if rack is None:
        return MarkVerdict(
            Severity.INFO, Action.NONE, Blame.CONFIG, f"{row.title} ({row.code}), a false alarm "
            "outside a multi-node NVLink domain",
            f"{row.meaning} Nothing is wrong with the GPUs or NVLink: mute this code in the "
            "checker for nodes outside a multi-node NVLink domain (and on NVL racks while no "
            f"ComputeDomain is active).{said}")
    return MarkVerdict(
        Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG,
        f"{row.title} ({row.code}) on {rack} (multi-node NVLink)",
        f"{row.meaning} On {rack} nodes IMEX is needed for multi-node NVLink jobs: if a "
        "ComputeDomain or a multi-node job is expected here, check the nvidia-imex service "
        "(or the ComputeDomain's IMEX pods), its nodes_config and the IMEX channels; at idle "
        f"with no ComputeDomain it is expected. The GPUs are not implicated.{said}")


def _names(visible_gpus: Visible | None) -> list[str]:
    return [g.name for g in (visible_gpus[1] if visible_gpus else ()) if g.name]


def _scope(mark: HealthMark, visible_gpus: Visible | None) -> Scope:
    if mark.gpu is None:
        return NODE
    return locate(visible_gpus, mark.gpu, None)


@rule("dcgm.checker-mark", produces=("dcgm.checker-mark",))
def checker_mark(health_checker_marks: list[HealthMark], visible_gpus: Visible | None = None
                 ) -> Iterator[Finding]:
    """A health checker's mark pasted alone, judged by its DCGM error code: the Xid it
    names, DCGM's own trouble, or IMEX outside a multi-node NVLink domain."""
    names = _names(visible_gpus)
    for mark in health_checker_marks:
        v = judge_mark(mark.code, mark.number, mark.xids, mark.recommended, names)
        on = f" on GPU {mark.gpu}" if mark.gpu is not None else ""
        check = f" ({mark.check})" if mark.check else ""
        yield finding(
            "dcgm.checker-mark", v.severity, f"{mark.checker} marked the node{check}: "
            f"{v.what}{on}"[:200], v.why, v.action, v.blame, _scope(mark, visible_gpus),
            [evidence("health_checker_marks", mark.lines, limit=8)],
            references=(DOC_IMEX,) if "IMEX" in mark.code.upper() or mark.number == 122
            else ())
