"""The scheduler's words: a FailedScheduling message read into per-reason node counts,
and what the events around a pod say (autoscaler, Kueue, quota, gang schedulers, KAI's
queue quota).

``0/6 nodes are available: 3 node(s) didn't match node selector, 6 Insufficient
nvidia.com/gpu. preemption: 0/6 nodes are available: 6 No preemption victims found for
incoming pod.`` gives six nodes, three left out by the selector and six short of GPUs (a
node may be counted under several reasons), and the preemption pass that found nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gputriage.parsers.k8s_model import KEvent
from gputriage.text.fields import strict_float, strict_int

__all__ = ["INSUFFICIENT", "SELECTOR", "AFFINITY", "TAINT", "UNSCHEDULABLE", "OTHER",
           "QueueQuota", "Reason", "SchedMessage", "gang_message", "kai_quota_message",
           "parse_failed_scheduling", "quota_message", "queue_message"]

INSUFFICIENT, SELECTOR, AFFINITY, TAINT, UNSCHEDULABLE, OTHER = (
    "insufficient", "selector", "affinity", "taint", "unschedulable", "other")

_HEAD = re.compile(r"(?P<avail>[0-9]+)/(?P<total>[0-9]+) nodes are available(?::\s*)?")
_PART = re.compile(r"(?:^|,\s*)(?P<n>[0-9]+)\s+(?P<text>.+?)(?=,\s*[0-9]+\s|$)")
_INSUFFICIENT = re.compile(r"^Insufficient (?P<res>\S+)$")
_TAINT = re.compile(r"had (?:untolerated )?taints? \{(?P<taint>[^}]*)\}|had taints? that the "
                    r"pod didn't tolerate")
_SELECTOR = re.compile(r"didn't match (?:Pod's )?node (?:selector|affinity)", re.I)
_AFFINITY = re.compile(r"pod (?:anti-)?affinity|existing pods anti-affinity", re.I)
_UNSCHED = re.compile(r"were unschedulable|node\(s\) were cordoned", re.I)
# Kueue: "couldn't assign flavors to pod set main: resource cpu unavailable in ClusterQueue"
_QUEUE = re.compile(r"resource (?P<res>\S+) unavailable in ClusterQueue|insufficient unused "
                    r"quota for (?P<res2>\S+)|couldn't assign flavors", re.I)
# "exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=2, used: ..., limited: ..."
_QUOTA = re.compile(r"exceeded quota: (?P<quota>[^,]+)(?:, requested: (?P<req>[^,]+(?:,[^,:]"
                    r"+)*?))?(?:, used: (?P<used>[^,]+))?(?:, limited: (?P<lim>[^,\s]+))?")
# Volcano: "12/8 tasks in gang unschedulable: pod group is not ready, 20 minAvailable, 8 Running"
_GANG = re.compile(r"(?P<pending>[0-9]+)/(?P<ready>[0-9]+) tasks in gang unschedulable.*?"
                   r"(?P<min>[0-9]+) minAvailable(?:,\s*(?P<running>[0-9]+) Running)?", re.I | re.S)


# KAI Scheduler: "Non-preemptible workload is over quota. Workload requested 0.2 GPUs, but
# aafa quota is 0.3 GPUs, while 0.1 GPUs are already allocated for non-preemptible pods."
_GPUS = r"[0-9]{1,12}(?:\.[0-9]{1,12})?"
_KAI_QUOTA = re.compile(rf"Non-preemptible workload is over quota\.\s*Workload requested "
                        rf"(?P<req>{_GPUS}) GPUs?,?\s+but (?P<queue>.{{1,100}}?) quota is "
                        rf"(?P<quota>{_GPUS}) GPUs?(?:,?\s+while (?P<alloc>{_GPUS}) "
                        r"GPUs? (?:are|is) already allocated)?", re.I | re.S)


@dataclass(frozen=True)
class QueueQuota:
    """KAI's refusal of a non-preemptible workload: its queue and the GPU numbers."""

    queue: str
    requested: float
    quota: float
    allocated: float | None  # None: not printed

    @property
    def fits(self) -> bool:
        """Whether the request fits the quota when counted exactly (to a millionth)."""
        return round((self.allocated or 0.0) + self.requested, 6) <= round(self.quota, 6)


def kai_quota_message(text: str) -> QueueQuota | None:
    """The numbers of KAI's over-quota refusal; None when ``text`` is not one."""
    m = _KAI_QUOTA.search(text)
    if m is None:
        return None
    requested, quota = strict_float(m.group("req")), strict_float(m.group("quota"))
    if requested is None or quota is None:
        return None
    return QueueQuota(m.group("queue").strip(), requested, quota,
                      strict_float(m.group("alloc")))


@dataclass(frozen=True)
class Reason:
    count: int
    text: str  # as the scheduler wrote it: "Insufficient nvidia.com/gpu"
    kind: str  # INSUFFICIENT | SELECTOR | AFFINITY | TAINT | UNSCHEDULABLE | OTHER
    detail: str | None = None  # the resource short, or the taint


@dataclass(frozen=True)
class SchedMessage:
    """One FailedScheduling message: nodes in all, and why the others were left out."""

    available: int
    total: int
    reasons: tuple[Reason, ...]
    preemption: str | None

    def count(self, kind: str) -> int:
        return sum(r.count for r in self.reasons if r.kind == kind)

    def short_of(self) -> dict[str, int]:
        """Resource -> nodes short of it."""
        return {r.detail or "": r.count for r in self.reasons if r.kind == INSUFFICIENT}

    def gpu_short(self) -> int:
        return sum(n for res, n in self.short_of().items() if res.startswith("nvidia.com/"))

    def disjoint(self) -> bool:
        """Whether each node is counted once (the counts add up to the nodes)."""
        return sum(r.count for r in self.reasons) == self.total - self.available


def _kind(text: str) -> tuple[str, str | None]:
    m = _INSUFFICIENT.match(text)
    if m:
        return INSUFFICIENT, m.group("res")
    m = _TAINT.search(text)
    if m:
        return TAINT, (m.group("taint") or "").strip() or None
    if _SELECTOR.search(text):
        return SELECTOR, None
    if _AFFINITY.search(text):
        return AFFINITY, None
    if _UNSCHED.search(text):
        return UNSCHEDULABLE, None
    return OTHER, None


def parse_failed_scheduling(message: str) -> SchedMessage | None:
    """The counts of a FailedScheduling message; None when it is not one."""
    head = _HEAD.search(message)
    if head is None:
        return None
    body = message[head.end():]
    main, _, preemption = body.partition(" preemption:")
    main = main.strip().rstrip(".").strip()
    available, total = strict_int(head.group("avail")), strict_int(head.group("total"))
    if available is None or total is None:
        return None
    reasons = []
    for m in _PART.finditer(main):
        text = m.group("text").strip().rstrip(".")
        kind, detail = _kind(text)
        n = strict_int(m.group("n"))
        if n is not None:
            reasons.append(Reason(n, text, kind, detail))
    return SchedMessage(available, total, tuple(reasons),
                        preemption.strip().rstrip(".").strip() or None)


def queue_message(event: KEvent) -> list[str] | None:
    """The resources a Kueue admission event says the ClusterQueue has no quota for
    (empty: the event does not say which); None when it is not one."""
    if "ClusterQueue" not in event.message and "kueue" not in (event.source or "").lower():
        return None
    found = [m.group("res") or m.group("res2") for m in _QUEUE.finditer(event.message)]
    if not found:
        return None
    return [r for r in found if r]


def quota_message(event: KEvent) -> tuple[str, str | None, str | None, str | None] | None:
    """(quota, requested, used, limited) of an "exceeded quota" event; None otherwise."""
    m = _QUOTA.search(event.message)
    if m is None:
        return None
    return m.group("quota").strip(), m.group("req"), m.group("used"), m.group("lim")


def gang_message(text: str) -> tuple[int, int, int | None] | None:
    """(unschedulable tasks, minAvailable, running) of Volcano's gang condition."""
    m = _GANG.search(text)
    if m is None:
        return None
    pending, least = strict_int(m.group("pending")), strict_int(m.group("min"))
    if pending is None or least is None:
        return None
    return pending, least, strict_int(m.group("running"))
