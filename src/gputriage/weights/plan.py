"""The arithmetic: GPU memory a model needs, the smallest tensor-parallel degree that
holds it on each GPU model, the time to read it from each storage tier, and the herd
of replicas that start together over one shared link."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

__all__ = ["DEFAULT_BANDWIDTH", "HERD_WARN_S", "GpuSku", "Fit", "HerdRow", "Need", "TIERS",
           "TP_DEGREES", "degrees", "fits", "gpu_skus", "herd", "herd_verdict", "load_times",
           "per_gpu", "staged_batch"]

# A start of every replica that keeps the last one without its weights longer than this
# is a herd worth fixing (a warning, as ``k8s lint`` says of the same herd): five minutes
# outlasts what a scale-up can make queued requests wait and what a drain or a rollout
# should leave the service short, and the shared link is saturated all that time for
# everything else that uses it.
HERD_WARN_S = 300.0

# Bandwidths assumed for one reader when neither --measure nor --bandwidth says
# (bytes/s); rough, stated in the report as assumptions.
TIERS = ("local_nvme", "page_cache", "nfs", "object_store")
DEFAULT_BANDWIDTH: dict[str, float] = {
    "local_nvme": 3.0e9,  # one PCIe Gen4 NVMe, a loader's sequential reads
    "page_cache": 10.0e9,  # memory copies of a warm page cache
    "nfs": 1.2e9,  # one client over a 10-25 Gb/s NIC
    "object_store": 0.5e9,  # one client of S3-like storage (FUSE or SDK)
}
TIER_LABEL = {"local_nvme": "local NVMe", "page_cache": "page cache (warm)",
              "nfs": "network file system", "object_store": "object store"}
TP_DEGREES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class GpuSku:
    """One GPU of ``knowledge/gpu_memory.csv``."""

    sku: str
    profile: str
    memory_gb: float
    node_gpus: int
    note: str = ""


@functools.cache
def gpu_skus() -> tuple[GpuSku, ...]:
    """Every GPU SKU of the memory table, in table order."""
    from gputriage.knowledge import csv_rows

    return tuple(GpuSku(r["sku"], r["profile"], float(r["memory_gb"]), int(r["node_gpus"]),
                        r.get("note") or "") for r in csv_rows("gpu_memory.csv"))


@dataclass(frozen=True)
class Need:
    """GPU memory one replica needs: weights, KV cache, and the share of each GPU kept
    for the CUDA context, activations and fragmentation."""

    weights: float
    kv_cache: float
    overhead: float  # fraction of each GPU's memory not available to weights and cache

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache


@dataclass(frozen=True)
class Fit:
    """The smallest tensor-parallel degree of one GPU SKU that holds the model."""

    sku: GpuSku
    tp: int | None  # None: not even at the largest degree tried
    per_gpu: float | None  # bytes each GPU holds at that degree
    nodes: int | None  # nodes that degree spans (1: fits one node)


def degrees(heads: int | None) -> tuple[int, ...]:
    """The degrees tried: those of :data:`TP_DEGREES` that divide the attention heads
    (all of them when the heads are not known)."""
    return tuple(tp for tp in TP_DEGREES if not heads or heads % tp == 0)


def per_gpu(need: Need, tp: int, kv_heads: int | None = None) -> float:
    """Bytes on each GPU at degree ``tp``: the weights split ``tp`` ways, the KV cache
    split by KV head, so past ``kv_heads`` GPUs each holds one head's share (the heads
    are replicated, not split further)."""
    kv_ways = min(tp, kv_heads) if kv_heads else tp
    return need.weights / tp + need.kv_cache / kv_ways


def fits(need: Need, skus: tuple[GpuSku, ...], heads: int | None = None,
         kv_heads: int | None = None) -> list[Fit]:
    """For each SKU, the smallest power-of-two degree whose per-GPU share fits in
    ``memory × (1 − overhead)``; a degree must divide the attention heads when known."""
    out = []
    for sku in skus:
        usable = sku.memory_gb * 1e9 * (1 - need.overhead)
        chosen = next((tp for tp in degrees(heads) if per_gpu(need, tp, kv_heads) <= usable),
                      None)
        if chosen is None:
            out.append(Fit(sku, None, None, None))
        else:
            out.append(Fit(sku, chosen, per_gpu(need, chosen, kv_heads),
                           math.ceil(chosen / sku.node_gpus)))
    return out


def load_times(model_bytes: float, bandwidth: dict[str, float]) -> dict[str, float]:
    """Seconds for one reader to read the model from each tier."""
    return {tier: model_bytes / bandwidth[tier] for tier in TIERS}


@dataclass(frozen=True)
class HerdRow:
    """One way of starting N replicas: bytes over the shared link, and seconds until the
    last replica has its weights (the pull ahead of time, when it is off the start)."""

    strategy: str
    link_bytes: float
    ready_s: float
    ahead_s: float = 0.0
    note: str = ""


def staged_batch(model_bytes: float, link: float, replicas: int) -> int:
    """Replicas a staged rollout starts at a time so that each batch's pull stays within
    :data:`HERD_WARN_S` over the link (at least 1, at most all of them)."""
    return max(1, min(replicas, int(HERD_WARN_S * link // max(model_bytes, 1.0))))


def herd(model_bytes: float, replicas: int, link: float, bandwidth: dict[str, float],
         source: str = "object_store", per_node: int = 1) -> list[HerdRow]:
    """N replicas of ``model_bytes`` starting together behind one shared link of ``link``
    bytes/s, reading from ``source``; ``per_node`` replicas share a node. The first row
    is the herd as it stands; the others are the plans that cut it."""
    nodes = math.ceil(replicas / per_node)
    one_reader = model_bytes / bandwidth[source]
    local = model_bytes / bandwidth["local_nvme"]
    direct_bytes = replicas * model_bytes
    node_bytes = nodes * model_bytes
    once = max(model_bytes / link, one_reader)  # one pull of the model into the cluster
    rows = [HerdRow("every replica pulls at once", direct_bytes,
                    max(direct_bytes / link, one_reader),
                    note=f"{replicas} × the model through the link; the last replica "
                         "waits for all of it")]
    first = max(node_bytes / link, one_reader) + (local if per_node > 1 else 0.0)
    rows.append(HerdRow("node-local cache (one pull per node)", node_bytes, first,
                        note=f"{nodes} pull(s) on the first start; a restart on the same "
                             f"node reads the cache: {local:.0f} s from local NVMe"))
    rows.append(HerdRow("staged to local NVMe ahead (pre-pull DaemonSet)", node_bytes, local,
                        ahead_s=max(node_bytes / link, one_reader),
                        note="the pull is done before the start; the start reads local NVMe"))
    rows.append(HerdRow("page cache warm (a restart, RAM holds the model)", 0.0,
                        model_bytes / bandwidth["page_cache"],
                        note="only while MemAvailable holds the whole model"))
    rounds = math.ceil(math.log2(nodes)) if nodes > 1 else 0
    rows.append(HerdRow("one pull into the cluster, then peer-to-peer fan-out", model_bytes,
                        once + rounds * local,
                        note=f"the link carries the model once; nodes that have it copy it "
                             f"to those that do not, doubling each round ({rounds} round(s) "
                             "at the local NVMe rate, the east-west network taken as no "
                             "slower)"))
    shared = max(model_bytes / bandwidth["nfs"], direct_bytes / link)
    rows.append(HerdRow("shared read-only volume filled once (ReadOnlyMany PVC, node cache)",
                        model_bytes, shared, ahead_s=once,
                        note=f"one pull into the volume ahead; at the start its server serves "
                             f"{replicas} × the model (taken at the link's rate: a faster "
                             "server, or a node cache filled from it, starts sooner)"))
    batch = staged_batch(model_bytes, link, replicas)
    if batch < replicas:
        batches = math.ceil(replicas / batch)
        each = max(batch * model_bytes / link, one_reader)
        rows.append(HerdRow(f"staged rollout, {batch} at a time (maxSurge {batch})",
                            direct_bytes, batches * each,
                            note=f"the first {batch} serve after {each:.0f} s, the rest in "
                                 f"{batches - 1} more batch(es); the link is never held "
                                 f"longer than {HERD_WARN_S:.0f} s at a time"))
    return rows


def herd_verdict(rows: list[HerdRow]) -> str:
    """"warning" when the herd as it stands (the first row) keeps the last replica
    waiting longer than :data:`HERD_WARN_S`, else "ok"."""
    return "warning" if rows and rows[0].ready_s > HERD_WARN_S else "ok"
