"""What holds GPU work before the scheduler: a ResourceQuota that refuses the pod,
Kueue's ClusterQueue with no quota for a resource the job asks, a gang (Volcano PodGroup)
that cannot fit whole. Each is the job's or the queue's settings (job-config), never the
nodes'.
"""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.model import Action, Blame, Finding, Severity
from gputriage.parsers.k8s_model import Cluster, KEvent
from gputriage.rules.base import evidence, finding, rule
from gputriage.rules.k8s_common import object_scope
from gputriage.rules.k8s_sched import gang_message, queue_message, quota_message

SOURCE = "cluster"


@rule("k8s.admission", produces=("k8s.pending-quota", "k8s.pending-queue",
                                 "k8s.gang-unschedulable"))
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
    for obj in cluster.of_kind("PodGroup"):
        raw = obj.raw.get("status")
        status: dict = raw if isinstance(raw, dict) else {}
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
