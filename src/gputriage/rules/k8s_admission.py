"""What holds GPU work before the scheduler: a ResourceQuota that refuses the pod,
Kueue's ClusterQueue with no quota for a resource the job asks, a gang (Volcano PodGroup)
that cannot fit whole, KAI's queue quota for non-preemptible workloads. Each is the job's
or the queue's settings (job-config), never the nodes'; except KAI refusing a request that
fits its quota exactly, which is the scheduler's own arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gputriage.model import NODE, Action, Blame, Finding, Severity, evidence
from gputriage.parsers.k8s_model import Cluster, KEvent
from gputriage.rules.base import finding, rule
from gputriage.rules.k8s_common import object_scope
from gputriage.rules.k8s_sched import (
    QueueQuota,
    gang_message,
    kai_quota_message,
    queue_message,
    quota_message,
)

SOURCE = "cluster"


@rule("k8s.admission", produces=("k8s.pending-quota", "k8s.pending-queue",
                                 "k8s.gang-unschedulable", "k8s.pending-queue-quota",
                                 "k8s.scheduler-quota-exact-fit"))
def admission(cluster: Cluster) -> Iterator[Finding]:
    """What holds GPU work before the scheduler: a ResourceQuota that refuses the pod,
    Kueue's ClusterQueue that has no quota for a resource the job asks, a gang
    (Volcano PodGroup) that cannot fit whole."""
    seen: set[tuple[str, str]] = set()
    queued: dict[str, list[tuple[KEvent, list[str]]]] = {}
    for e in cluster.events:
        res = queue_message(e)
        if res is not None:
            queued.setdefault(e.about or "a workload", []).append((e, res))
    for who, found in queued.items():
        yield _queue(who, found)
    for e in cluster.events:
        who = e.about or "a workload"
        quota = quota_message(e)
        if quota is not None and ("quota", who) not in seen:
            seen.add(("quota", who))
            yield _quota(e, who, quota)
        gang = gang_message(e.message)
        if gang is not None and ("gang", who) not in seen:
            seen.add(("gang", who))
            yield _gang(who, gang, [e.line or e.message], e.name)
        kai = kai_quota_message(e.message)
        if kai is not None and ("kai", who) not in seen:
            seen.add(("kai", who))
            yield _kai_quota(e, who, kai)
    for obj in cluster.of_kind("PodGroup"):
        raw = obj.raw.get("status")
        status: dict[str, Any] = raw if isinstance(raw, dict) else {}
        for c in status.get("conditions") or ():
            gang = gang_message(str(c.get("message", ""))) if isinstance(c, dict) else None
            if gang is not None and ("gang", obj.ref) not in seen:
                seen.add(("gang", obj.ref))
                yield _gang(obj.ref, gang, obj.lines or [str(c.get("message"))], obj.name)


def _queue(who: str, found: list[tuple[KEvent, list[str]]]) -> Finding:
    e = found[0][0]
    lines = [x.line or x.message for x, _ in found]
    missing = " and ".join(dict.fromkeys(r for _, res in found for r in res)) or "a resource"
    return finding(
        "k8s.pending-queue", Severity.WARNING,
        f"{who} waits in Kueue: the ClusterQueue has no quota for {missing}",
        f"Kueue admits a workload only when its ClusterQueue covers every resource the "
        f"pods request; this one does not cover {missing}, so every job that requests it "
        "stays Pending however idle the nodes are. Add it to the ClusterQueue's "
        "coveredResources with a nominalQuota (large, if it is not meant to be limited) in "
        "each flavor. The nodes are fine.", Action.FIX_CONFIG, Blame.JOB_CONFIG,
        object_scope(e.kind or "Workload", e.name or "workload", e.namespace),
        [evidence(SOURCE, lines, limit=8)])


def _quota(e: KEvent, who: str, quota: tuple[str, str | None, str | None, str | None]
           ) -> Finding:
    name, requested, used, limited = quota
    numbers = ", ".join(f"{w} {v}" for w, v in (("requested", requested), ("used", used),
                                                ("limited", limited)) if v)
    return finding(
        "k8s.pending-quota", Severity.WARNING,
        f"{who}: the namespace's ResourceQuota {name} is exhausted",
        f"The API refuses to create the pod: {numbers or e.message}. Free some of the "
        "quota (finished jobs still holding GPUs), or raise the quota if the team should "
        "have more.", Action.FIX_CONFIG, Blame.JOB_CONFIG,
        object_scope(e.kind or "ResourceQuota", e.name or name, e.namespace),
        [evidence(SOURCE, [e.line or e.message])])


def _gang(who: str, gang: tuple[int, int, int | None], lines: list[str],
          name: str | None) -> Finding:
    pending_n, minimum, running = gang
    partial = (f" {running} of its pods run already: a partial start that holds GPUs "
               "while waiting for the rest," if running else "")
    return finding(
        "k8s.gang-unschedulable", Severity.WARNING,
        f"{'the gang' if who.endswith('/?') else who} needs {minimum} pods at once and "
        f"{pending_n} cannot be placed",
        f"The gang scheduler starts the job only when minAvailable ({minimum}) pods fit "
        f"together; the cluster's free GPUs do not hold them (NotEnoughResources).{partial} "
        "Free capacity, or lower minAvailable and the replicas to what the pool holds. "
        "The nodes are not faulty.", Action.FIX_CONFIG, Blame.JOB_CONFIG,
        object_scope("PodGroup", name or "podgroup"), [evidence(SOURCE, lines, limit=10)])


def _kai_quota(e: KEvent, who: str, q: QueueQuota) -> Finding:
    """KAI's refusal of a non-preemptible workload over its queue's GPU quota."""
    have = f"{q.allocated:g} allocated + " if q.allocated is not None else ""
    sums = f"{have}{q.requested:g} requested against a quota of {q.quota:g} GPUs"
    scope = object_scope(e.kind or "Pod", e.name, e.namespace) if e.name else NODE
    ev = [evidence(SOURCE, e.lines)]
    if q.fits:
        return finding(
            "k8s.scheduler-quota-exact-fit", Severity.WARNING,
            f"KAI refuses {'the workload' if who == 'a workload' else who} although it fits "
            f"queue {q.queue}'s quota exactly ({sums})",
            f"The numbers add up to the quota ({sums}), yet the scheduler calls the "
            "non-preemptible workload over quota: its comparison of fractional GPUs is off "
            "by a rounding error (KAI-Scheduler issue #2209, 0.1 + 0.2 > 0.3 in floating "
            "point). A scheduler bug: the nodes and GPUs are free and healthy. Until a KAI "
            "release fixes it, give the queue a little headroom (a quota of "
            f"{q.quota + 0.01:g} for {q.quota:g}) or submit the workload as preemptible.",
            Action.FIX_SOFTWARE, Blame.CONFIG, scope, ev)
    return finding(
        "k8s.pending-queue-quota", Severity.WARNING,
        f"KAI holds {'the workload' if who == 'a workload' else who}: queue {q.queue}'s GPU "
        f"quota is used up for non-preemptible work ({sums})",
        f"KAI admits a non-preemptible workload only within its queue's deserved quota "
        f"({sums}). Submit it as preemptible (a preemptible priority class) to run over "
        "quota, wait for the queue's other non-preemptible work to end, or raise the queue's "
        "GPU quota. The nodes are fine.", Action.FIX_CONFIG, Blame.JOB_CONFIG, scope, ev)
