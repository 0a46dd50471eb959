"""The concrete next step of each finding: what an on-call runs, with the versions,
GPUs, units, ports and commands taken from the finding and the host's facts.

A step is a repair (what fixes this finding: reseat, reinstall, reload) placed in the
frame of the finding's action (how the node leaves and re-enters service: drain, reset,
acknowledge, resume). Repairs are keyed by finding id (next_steps/repairs.py's ``BY_ID``,
and each catalog's rows: next_steps/catalogs.py); every id a rule can produce has one,
or reports only (next_steps/informational.py), which tests/test_next_steps_by_id.py
holds. Consequences folded into a cause take no step of their own: the cause's closes
them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gputriage.model import DRAINING_ACTIONS, Action, Blame, Finding
from gputriage.next_steps.frames import FRAMES, confirm_first
from gputriage.next_steps.host import Host
from gputriage.next_steps.informational import REPORT_ONLY
from gputriage.next_steps.repairs import repair, repair_of

__all__ = ["FRAMES", "REPORT_ONLY", "Host", "fill", "repair", "repair_of", "step_for"]


def step_for(f: Finding, host: Host) -> str | None:
    """The concrete next step of one finding; None when it asks for no action."""
    frame = FRAMES.get(f.action)
    if frame is None:
        return None
    if f.blame is Blame.UNKNOWN and f.action in DRAINING_ACTIONS:
        frame = confirm_first
    try:
        fix = repair(f, host)
    except Exception:  # advice never breaks a check: fall back to the action's frame
        fix = None
    return frame(f, host, fix)


def fill(findings: list[Finding], facts: Any) -> list[Finding]:
    """The findings, each current one that asks for an action with its concrete next
    step (history, acknowledged findings and folded consequences get none)."""
    if not any(f.current and f.action is not Action.NONE for f in findings):
        return list(findings)
    host = Host.of(facts)
    out = []
    for f in findings:
        step = step_for(f, host) if f.current and not f.step else None
        out.append(replace(f, step=step) if step else f)
    return out

