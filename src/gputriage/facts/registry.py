"""Facts of one area each, listed here once: :data:`REGISTRY` is every fact by name.

A fact of a source that only needs parsing needs no entry: a source that declares its
parser in :mod:`gputriage.sources` is a fact of its own name.
"""

from gputriage.facts import (
    dcgm,
    expectations,
    fabric,
    host,
    identity,
    infiniband,
    k8s,
    nccl,
    nccl_bandwidth,
    pcie,
    pcie_path,
    resets,
    smi_views,
    stack,
    topology,
)
from gputriage.facts.table import Fact, merge

__all__ = ["REGISTRY"]

REGISTRY: dict[str, Fact] = merge(stack.FACTS, host.FACTS, fabric.FACTS, infiniband.FACTS,
                                  nccl.FACTS, nccl_bandwidth.FACTS, pcie.FACTS, pcie_path.FACTS,
                                  topology.FACTS, smi_views.FACTS, identity.FACTS,
                                  expectations.FACTS, resets.FACTS, k8s.FACTS,
                                  dcgm.FACTS)
