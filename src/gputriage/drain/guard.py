"""One drain through the envelope: read the fleet, decide, drain, then confirm against
the fleet as it is a moment later and give the drain back when others drained at the
same moment and this one overflows the budget (every node ranks the same drains the
same way, so when every node's check fails at once exactly the budget stays drained)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

from gputriage.drain.policy import Decision, Fleet, Settings, confirm, decide

__all__ = ["Backend", "SETTLE_S", "guard"]

SETTLE_S = 2.0  # past the second of our own drain: Slurm's reason times are in seconds


class Backend(Protocol):
    def read(self) -> Fleet: ...
    def drain(self, node: str, reason: str) -> None: ...
    def give_back(self, node: str) -> None: ...


def guard(backend: Backend, node: str, reason: str, settings: Settings, *,
          now: Callable[[], datetime],
          findings: Iterable[Mapping[str, Any]] | None = None,
          kill_switch_on: bool = False, dry_run: bool = False,
          settle_s: float = SETTLE_S,
          sleep: Callable[[float], None] = time.sleep) -> Decision:
    """Drain ``node`` with ``reason`` when the envelope allows; the decision (a
    refusal names its breaker). Backend errors surface as the ``fleet-unknown`` or
    ``backend`` breaker: a fleet that cannot be counted is never drained."""
    if kill_switch_on or not settings.enforce:  # refuse before asking the scheduler
        return decide(node, Fleet(0), now(), settings, findings=findings,
                      kill_switch_on=kill_switch_on)
    try:
        fleet = backend.read()
    except Exception as exc:  # SlurmError, K8sError: one line
        return Decision(False, "fleet-unknown", f"cannot count the fleet: {exc}")
    decision = decide(node, fleet, now(), settings, findings=findings)
    if not decision.drain or dry_run:
        return decision
    try:
        backend.drain(node, reason)
    except Exception as exc:
        return Decision(False, "backend", f"drain failed: {exc}")
    if settle_s > 0:
        sleep(settle_s)
    try:
        after = backend.read()
    except Exception as exc:  # drained, and cannot tell whether others did too: keep it
        return Decision(True, None, f"{decision.why}; not confirmed: {exc}")
    kept = confirm(node, after, now(), settings)
    if kept.drain:
        return decision
    try:
        backend.give_back(node)
    except Exception as exc:
        return Decision(False, kept.breaker, f"{kept.why}; giving it back failed: {exc}",
                        {"drained": True})
    return Decision(False, kept.breaker, f"{kept.why}; drain given back")
