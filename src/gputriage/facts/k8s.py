"""The cluster: what every Kubernetes source gave, in one :class:`Cluster`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputriage.facts.table import FactReader, FactTable, Missing

if TYPE_CHECKING:  # imported where a cluster is built: most hosts have no Kubernetes input
    from gputriage.parsers.k8s_model import Cluster

FACTS = FactTable()

# the sources that each give a Cluster, in the order their objects are merged
CLUSTER_SOURCES = ("k8s_objects", "k8s_describe", "k8s_table")


@FACTS.fact("cluster", sources=CLUSTER_SOURCES)
def cluster(facts: FactReader) -> Cluster:
    """Nodes, pods, events, DaemonSets and other objects of every Kubernetes source
    (API objects first: a node described too keeps the fields each form shows)."""
    found: Cluster | None = None
    for source in CLUSTER_SOURCES:
        part = facts.maybe(source)
        if part is None:
            continue
        if found is None:
            from gputriage.parsers.k8s_model import Cluster

            found = Cluster(origin=part.origin)
        found.merge(part)
    if found is None:
        raise Missing("no Kubernetes objects (kubectl get, kubectl describe, the API)")
    return found


@FACTS.fact("shared_link_gbits")
def shared_link_gbits(facts: FactReader) -> float:
    """The rate of the link the replicas of a workload share to fetch weights and images
    (storage or registry egress), Gb/s, as the operator states it (k8s lint --link)."""
    rate = facts.context.link_gbits
    if rate is None:
        raise Missing("no link rate given (k8s lint --link RATE)")
    return float(rate)
