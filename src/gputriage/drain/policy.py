"""The drain budget, pure: given what the fleet looks like and what this node's check
found, may this node be drained now, and if not, which breaker says no.

Breakers, checked in this order (the first that refuses is named):

``kill-switch``    the kill-switch file exists: every recipe is observe-only;
``observe-only``   the recipes are not set to enforce (their first-install default);
``allow-list``     no current critical finding of the node is one that may drain
                   (default: the node's hardware, ``blame:node``; a job's, a
                   configuration's or an unknown blame never drains);
``fleet-fraction`` too many GPU nodes are already out of service for gputriage;
``rate``           too many were taken out for gputriage in the last hour.

The limits scale with the fleet: ``max(floor, percent of the GPU nodes)``, so 8 nodes
and 10,000 nodes both live with the defaults (docs/unattended.md says why these)."""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = ["DEFAULTS", "JOB_REASONS", "Decision", "Fleet", "Limit", "OutNode", "Settings",
           "allowed", "confirm", "decide", "decide_uncordon", "decide_undrain", "is_ours",
           "job_reason",
           "settings_from"]

KILL_SWITCH = Path("/etc/gputriage/observe-only")
RATE_WINDOW = timedelta(hours=1)
OURS = re.compile(r"(?:^|[\s:;,(])gputriage\b", re.IGNORECASE)  # a drain reason of ours
NEVER_DRAIN_BLAMES = frozenset({"job", "job-config", "unknown"})


@dataclass(frozen=True)
class Limit:
    """``max(floor, percent % of the fleet)`` nodes, or ``absolute`` nodes when set."""

    percent: float = 0.0
    floor: int = 1
    absolute: int | None = None

    def of(self, fleet_size: int) -> int:
        if self.absolute is not None:
            return max(0, self.absolute)
        return max(self.floor, math.floor(self.percent * fleet_size / 100.0))

    def describe(self, fleet_size: int) -> str:
        if self.absolute is not None:
            return f"{self.of(fleet_size)}"
        return (f"{self.of(fleet_size)} = max({self.floor}, {self.percent:g} % of "
                f"{fleet_size})")

    @classmethod
    def parse(cls, text: str, floor: int) -> Limit:
        """``2%`` (with the floor) or ``25`` (nodes); ValueError otherwise."""
        text = text.strip()
        try:
            if text.endswith("%"):
                percent = float(text[:-1])
                if not 0 <= percent <= 100:
                    raise ValueError
                return cls(percent=percent, floor=floor)
            value = int(text)
            if value < 0:
                raise ValueError
            return cls(absolute=value)
        except ValueError:
            raise ValueError(f"not a node count or a percentage: {text!r}") from None


@dataclass(frozen=True)
class Settings:
    """What the envelope allows; every field has a setting (docs/unattended.md)."""

    enforce: bool = False  # observe-only until switched on
    kill_switch: Path = KILL_SWITCH
    per_hour: Limit = Limit(percent=2.0, floor=2)
    out_at_once: Limit = Limit(percent=10.0, floor=2)
    allow: tuple[str, ...] = ("blame:node",)


DEFAULTS = Settings()


@dataclass(frozen=True)
class OutNode:
    """A GPU node out of service: since when (None: unknown), and whether for us."""

    name: str
    since: datetime | None
    ours: bool
    reason: str = ""


@dataclass(frozen=True)
class Fleet:
    """The GPU nodes (their count) and those out of service."""

    size: int
    out: tuple[OutNode, ...] = ()
    # gputriage's drains remembered after the node returned to service (Kubernetes: the
    # ``gputriage/drained-at`` annotation; Slurm: the ledger file), for the rate
    ledger: tuple[OutNode, ...] = ()

    def drains(self, now: datetime, *, without: str | None = None) -> list[OutNode]:
        """gputriage's drains of the last hour: those in place and those remembered
        (a node drained, resumed and drained again counts twice)."""
        seen: dict[tuple[str, datetime], OutNode] = {}
        for n in (*self.out, *self.ledger):
            if n.ours and n.name != without and n.since is not None \
                    and timedelta(0) <= now - n.since < RATE_WINDOW:
                seen.setdefault((n.name, n.since), n)
        return list(seen.values())

    def ours(self, *, without: str | None = None) -> list[OutNode]:
        return [n for n in self.out if n.ours and n.name != without]

    def find(self, name: str) -> OutNode | None:
        return next((n for n in self.out if n.name == name), None)


@dataclass(frozen=True)
class Decision:
    """``drain`` or not; ``breaker``: what refused (None when allowed)."""

    drain: bool
    breaker: str | None
    why: str
    details: dict[str, Any] = field(default_factory=dict)

    def line(self, node: str) -> str:
        if self.drain:
            return f"{node}: drain allowed ({self.why})"
        return f"{node}: not drained, breaker {self.breaker}: {self.why}"


def is_ours(reason: str) -> bool:
    """Whether a drain/cordon reason is gputriage's (``gputriage CRITICAL: ...``, also
    wrapped by NHC as ``NHC: check_cmd_status: gputriage ...``)."""
    return bool(OURS.search(reason or ""))


def _matches(entry: str, finding: Mapping[str, Any]) -> bool:
    if entry.startswith("blame:"):
        return str(finding.get("blame", "")) == entry[6:]
    fid = str(finding.get("id", ""))
    return fnmatch.fnmatchcase(fid, entry) or fnmatch.fnmatchcase(fid, entry + ".*")


def allowed(findings: Iterable[Mapping[str, Any]], allow: Iterable[str]) -> list[str]:
    """The ids of the current critical findings that may drain: named by the allow-list
    (a finding id glob, a family such as ``xid`` for ``xid.*``, or ``blame:node``) and
    not blamed on the job, its settings or nothing known."""
    entries = [a for a in allow if a]
    out = []
    for f in findings:
        if not isinstance(f, Mapping) or f.get("severity") != "critical":
            continue
        if f.get("status", "current") != "current":
            continue
        if str(f.get("blame", "")) in NEVER_DRAIN_BLAMES:  # none said: by id only
            continue
        if any(_matches(e, f) for e in entries) and str(f.get("id")) not in out:
            out.append(str(f.get("id")))
    return out


def decide(node: str, fleet: Fleet, now: datetime, settings: Settings, *,
           findings: Iterable[Mapping[str, Any]] | None = None,
           kill_switch_on: bool = False) -> Decision:
    """Whether ``node`` may be drained now. ``findings``: its check's (the JSON
    result's); None when the caller's own policy asks (an UNKNOWN or a timeout set to
    drain), which skips the allow-list but not the budget."""
    if kill_switch_on:
        return Decision(False, "kill-switch", f"{settings.kill_switch} exists: observe-only")
    if not settings.enforce:
        return Decision(False, "observe-only", "drains are not enforced (set "
                        "GPUTRIAGE_DRAIN=enforce to drain)")
    if findings is not None:
        may = allowed(findings, settings.allow)
        if not may:
            return Decision(False, "allow-list", "no current critical finding may drain "
                            f"(allowed: {' '.join(settings.allow) or 'nothing'})")
    else:
        may = []
    if fleet.size <= 0:
        return Decision(False, "fleet-unknown", "no GPU node counted")
    mine = fleet.find(node)
    if mine is not None:
        return Decision(False, "already-out", f"already out of service ({mine.reason})")
    ours = fleet.ours(without=node)
    at_once = settings.out_at_once.of(fleet.size)
    if len(ours) >= at_once:
        return Decision(False, "fleet-fraction",
                        f"{len(ours)} of {fleet.size} GPU nodes already out for gputriage "
                        f"(limit {settings.out_at_once.describe(fleet.size)})",
                        {"out": len(ours), "limit": at_once})
    recent = fleet.drains(now)
    per_hour = settings.per_hour.of(fleet.size)
    if len(recent) >= per_hour:
        return Decision(False, "rate", f"{len(recent)} GPU nodes taken out for gputriage "
                        f"in the last hour (limit {settings.per_hour.describe(fleet.size)})",
                        {"recent": len(recent), "limit": per_hour})
    return Decision(True, None, f"{len(ours) + 1} of {fleet.size} out with it, limit "
                    f"{at_once}; {len(recent) + 1} this hour, limit {per_hour}"
                    + (f"; for {', '.join(may)}" if may else ""))


def confirm(node: str, fleet: Fleet, now: datetime, settings: Settings) -> Decision:
    """After draining ``node``, with the fleet as it now is (other nodes may have
    drained at the same moment): keep it only when it is within both limits among
    gputriage's drains ordered by (time, name); the others give their drain back.
    Every node ranks the same drains the same way, so together they keep exactly as
    many as the limits allow."""
    ours = fleet.ours()
    if not any(n.name == node for n in ours):
        ours.append(OutNode(node, now, True))
    far_past = datetime.min.replace(tzinfo=now.tzinfo)

    def order(n: OutNode) -> tuple[datetime, str]:
        return (n.since or far_past, n.name)

    ranked = sorted(ours, key=order)
    rank = [n.name for n in ranked].index(node)
    at_once = settings.out_at_once.of(fleet.size)
    if rank >= at_once:
        return Decision(False, "fleet-fraction", f"drained together with others: number "
                        f"{rank + 1} of {len(ranked)} out for gputriage (limit "
                        f"{settings.out_at_once.describe(fleet.size)})")
    recent = sorted(Fleet(fleet.size, tuple(ranked), fleet.ledger).drains(now), key=order)
    names = [n.name for n in recent]
    per_hour = settings.per_hour.of(fleet.size)
    if node in names and names.index(node) >= per_hour:
        return Decision(False, "rate", f"drained together with others: number "
                        f"{names.index(node) + 1} of {len(names)} this hour (limit "
                        f"{settings.per_hour.describe(fleet.size)})")
    return Decision(True, None, f"number {rank + 1} out for gputriage, limit {at_once}")


def _flag(value: str | None) -> bool | None:
    if value is None or not value.strip():
        return None
    word = value.strip().lower()
    if word in ("enforce", "1", "yes", "true", "on", "drain"):
        return True
    if word in ("observe", "observe-only", "0", "no", "false", "off", "log"):
        return False
    raise ValueError(f"GPUTRIAGE_DRAIN: {value!r}: say enforce or observe")


def settings_from(env: Mapping[str, str], **given: Any) -> Settings:
    """Settings from the environment (``GPUTRIAGE_DRAIN=enforce``,
    ``GPUTRIAGE_KILL_SWITCH``, ``GPUTRIAGE_DRAIN_PER_HOUR``, ``GPUTRIAGE_DRAIN_MAX_OUT``,
    ``GPUTRIAGE_DRAIN_MIN``, ``GPUTRIAGE_DRAIN_ALLOW``), overridden by ``given``
    (command-line options; None means not given). ValueError on a bad value."""
    floor_text = given.get("floor") or env.get("GPUTRIAGE_DRAIN_MIN") or ""
    try:
        floor = int(floor_text) if floor_text.strip() else DEFAULTS.per_hour.floor
    except ValueError:
        raise ValueError(f"GPUTRIAGE_DRAIN_MIN: not a number: {floor_text!r}") from None
    enforce = given.get("enforce")
    if enforce is None:
        enforce = _flag(env.get("GPUTRIAGE_DRAIN"))
    per_hour = given.get("per_hour") or env.get("GPUTRIAGE_DRAIN_PER_HOUR") or "2%"
    max_out = given.get("max_out") or env.get("GPUTRIAGE_DRAIN_MAX_OUT") or "10%"
    allow = given.get("allow") or env.get("GPUTRIAGE_DRAIN_ALLOW")
    kill = given.get("kill_switch") or env.get("GPUTRIAGE_KILL_SWITCH")
    return Settings(enforce=bool(enforce),
                    kill_switch=Path(kill) if kill else KILL_SWITCH,
                    per_hour=Limit.parse(per_hour, floor),
                    out_at_once=Limit.parse(max_out, floor),
                    allow=tuple(allow.replace(",", " ").split()) if allow is not None
                    else DEFAULTS.allow)


# Slurm drain reasons that are a job's doing, not the node's (the Slurm documentation:
# slurmd sets "Kill task failed" when a job's processes outlive UnkillableStepTimeout;
# slurmctld sets "Prolog error" / "Epilog error" when the node's prolog or epilog
# failed, which a job can cause too). Resumed only after a clean check of the node.
JOB_REASONS = (
    (re.compile(r"^\s*Kill task failed", re.IGNORECASE),
     "a job's processes could not be killed (UnkillableStepTimeout)"),
    (re.compile(r"^\s*(?:Prolog|Epilog) (?:error|failed)", re.IGNORECASE),
     "the prolog or epilog failed for a job"),
)


def job_reason(reason: str) -> str | None:
    """What a drain reason says the job did, when it is one of :data:`JOB_REASONS`."""
    for pattern, said in JOB_REASONS:
        if pattern.search(reason or ""):
            return said
    return None


def decide_undrain(node: str, fleet: Fleet, check_exit: int, settings: Settings, *,
                   kill_switch_on: bool = False) -> Decision:
    """Whether ``node``, drained for a job's reason, may return to service now that its
    own check exited ``check_exit``."""
    if kill_switch_on:
        return Decision(False, "kill-switch", f"{settings.kill_switch} exists: observe-only")
    mine = fleet.find(node)
    if mine is None:
        return Decision(False, "not-out", "not drained")
    if mine.ours:
        return Decision(False, "ours", f"drained by gputriage ({mine.reason}): repair, "
                        "acknowledge and resume with resume.sh --reason")
    said = job_reason(mine.reason)
    if said is None:
        return Decision(False, "not-a-job", f"drained for {mine.reason!r}, not a job's "
                        "reason gputriage knows")
    if check_exit not in (0, 1):
        return Decision(False, "check", f"drained for {mine.reason!r} ({said}), but the "
                        f"node's check exited {check_exit}")
    if not settings.enforce:
        return Decision(False, "observe-only", f"would resume: drained for {mine.reason!r} "
                        f"({said}), check exit {check_exit}")
    return Decision(True, None, f"drained for {mine.reason!r} ({said}); the node's check "
                    f"exited {check_exit}")


BLAMES = re.compile(r"\(blame ([a-z, -]+)\)")
JOB_BLAMES = frozenset({"job", "job-config"})


def decide_uncordon(out: OutNode, check_exit: int | None, checked: datetime | None,
                    settings: Settings, *, kill_switch_on: bool = False) -> Decision:
    """Whether a Node cordoned by gputriage may be uncordoned: its annotation blames
    the job (a cordon no current gputriage makes, but an older one or a caller's own
    policy could), or its check, run after the cordon, exited 0 or 1."""
    if kill_switch_on:
        return Decision(False, "kill-switch", f"{settings.kill_switch} exists: observe-only")
    if not out.ours:
        return Decision(False, "not-ours", f"cordoned by someone else ({out.reason})")
    blames = {b.strip() for m in BLAMES.findall(out.reason) for b in m.split(",")}
    if blames and blames <= JOB_BLAMES:
        why = f"cordoned for the job's fault ({out.reason})"
    elif check_exit in (0, 1) and checked is not None and out.since is not None \
            and checked > out.since:
        why = f"its check after the cordon exited {check_exit} ({out.reason})"
    elif check_exit is None or checked is None:
        return Decision(False, "no-check", "no fresh check of the node")
    else:
        return Decision(False, "check", f"its latest check exited {check_exit}"
                        + ("" if out.since is None or checked is None or checked > out.since
                           else ", before the cordon"))
    if not settings.enforce:
        return Decision(False, "observe-only", f"would uncordon: {why}")
    return Decision(True, None, why)
