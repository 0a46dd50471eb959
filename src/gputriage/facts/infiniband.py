"""InfiniBand / RoCE facts: the HCA ports, and which HCAs carry GPU traffic.

* ``ib_ports``: list of :class:`~gputriage.parsers.infiniband.IbPort`, from the
  sysfs tree (``infiniband``) when present, enriched by the ``ibstat`` source's
  outputs (netdev names, GIDs); from ``ibstat`` alone otherwise.
* ``ib_gpu_affinity``: device name -> :class:`HcaAffinity`: whether the HCA
  shares a PCIe switch or NUMA node with a GPU (a "GPU rail"), and on what basis.
* ``ib_tool_problems``: what the RDMA tools said when they found no device.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from gputriage.facts.table import FactReader, FactTable, Missing
from gputriage.parsers.ib_tools import IbToolProblem
from gputriage.parsers.infiniband import (
    IbPort,
    merge_ports,
    parse_ib_problems,
    parse_ib_tree,
    parse_ibstat,
)
from gputriage.parsers.pci import PciFunction

FACTS = FactTable()

__all__ = ["LOCAL_LINKS", "RAIL_GROUP_MIN", "HcaAffinity", "ib_gpu_affinity", "ib_ports",
           "ib_tool_problems"]

# topo -m link types meaning "same PCIe switch / host bridge / NUMA node"
SWITCH_LINKS = frozenset({"PIX", "PXB"})
LOCAL_LINKS = frozenset({"PIX", "PXB", "PHB", "NODE"})
# identical HCAs on a GPU host from which a set is taken to be the GPU rails
RAIL_GROUP_MIN = 4


@dataclass(frozen=True)
class HcaAffinity:
    """How one HCA relates to the host's GPUs."""

    device: str
    rail: bool | None  # True: carries GPU traffic; False: does not; None: cannot tell
    basis: str  # "topology" | "numa" | "peer-group" | "unknown"
    gpus: tuple[str, ...] = ()  # the closest GPUs it is local to ("GPU0" or a PCI address)
    link: str | None = None  # closest topo -m link to a GPU ("PIX") when known
    numa_node: int | None = None
    pci_address: str | None = None

    def describe(self) -> str:
        """One line on why the HCA is (or is not) taken as a GPU rail."""
        if self.basis == "topology":
            if self.rail:
                return (f"{self.device} is local to {', '.join(self.gpus[:4])}"
                        f"{' ...' if len(self.gpus) > 4 else ''} ({self.link} in topo -m)")
            return f"{self.device} is not local to any GPU ({self.link or 'SYS'} in topo -m)"
        if self.basis == "numa":
            if self.rail:
                return f"{self.device} shares NUMA node {self.numa_node} with GPU(s) " \
                       f"{', '.join(self.gpus[:4])}"
            return f"{self.device} is on NUMA node {self.numa_node}, where no GPU is"
        if self.basis == "peer-group":
            if self.rail:
                return f"{self.device} is one of the fastest set of identical HCAs on a " \
                       "GPU host (taken as a GPU rail)"
            return f"{self.device} is not one of the host's GPU-rail HCAs (taken as " \
                   "frontend or storage)"
        return f"which GPUs {self.device} serves is unknown (no topo -m, no PCI affinity)"


@FACTS.fact("ib_ports", sources=("infiniband", "ibstat"))
def ib_ports(facts: FactReader) -> list[IbPort]:
    """HCA ports: sysfs first (enriched by pasted tool outputs), else ``ibstat``."""
    reasons = []
    try:
        ports = facts.parse("infiniband", parse_ib_tree, as_json=True)
    except Missing as exc:
        ports = None
        reasons.append(str(exc))
    try:
        text_ports = facts.parse("ibstat", parse_ibstat)
    except Missing as exc:
        text_ports = None
        reasons.append(str(exc))
    if ports:
        return merge_ports(ports, text_ports or [])
    if text_ports is not None:
        return text_ports
    if ports is not None:
        return ports  # the sysfs tree exists and holds no HCA
    raise Missing("; ".join(reasons))


@FACTS.fact("ib_tool_problems", sources=("ibstat",))
def ib_tool_problems(facts: FactReader) -> list[IbToolProblem]:
    """The RDMA tools' complaints that they found no device (``No IB devices found``,
    libibverbs' missing providers, ``sys files not found``)."""
    problems = facts.parse("ibstat", parse_ib_problems)
    if not problems:
        raise Missing("ibstat: no tool complained of a missing device")
    return problems


def _topo_affinity(topo: Any, device: str) -> tuple[bool | None, tuple[str, ...], str | None]:
    """(rail, local GPUs, closest link) of one HCA from an ``nvidia-smi topo -m`` matrix."""
    names = getattr(topo, "nic_names", None) or {}
    devices = list(getattr(topo, "devices", None) or [])
    links = getattr(topo, "links", None) or {}
    columns = [c for c, n in names.items() if n == device]
    if device in devices:
        columns.append(device)
    gpus = [d for d in devices if str(d).startswith("GPU")]
    if not columns or not gpus or not isinstance(links, dict):
        return None, (), None
    seen: dict[str, str] = {}  # GPU -> its closest link to this HCA
    for gpu in gpus:
        for col in columns:
            link = links.get((gpu, col)) or links.get((col, gpu))
            if isinstance(link, str) and link.strip():
                link = link.strip().upper()
                if gpu not in seen or _rank(link) < _rank(seen[gpu]):
                    seen[gpu] = link
    if not seen:
        return None, (), None
    best = min(seen.values(), key=_rank)
    if best not in LOCAL_LINKS:
        return False, (), best
    return True, tuple(g for g, link in seen.items() if link == best), best


def _rank(link: str) -> int:
    order = ("PIX", "PXB", "PHB", "NODE", "SYS")
    return order.index(link) if link in order else len(order)


@FACTS.fact("ib_gpu_affinity")
def ib_gpu_affinity(facts: FactReader) -> dict[str, HcaAffinity]:
    """For every HCA: is it a GPU rail (same PCIe switch or NUMA node as a GPU)?

    Taken from ``nvidia-smi topo -m`` (fact ``topology``) when it names the HCA,
    else from sysfs NUMA nodes of the HCA's and the GPUs' PCI functions, else,
    on a host known to have GPUs, from the HCA being one of a set of identical
    HCAs (how GPU rails are built); otherwise unknown.
    """
    ports = facts.get("ib_ports")
    topo = facts.maybe("topology")
    pci = {f.address: f for f in facts.maybe("pci", []) or []}
    gpus = [f for f in pci.values() if f.is_gpu]
    visible = facts.maybe("visible_gpus")
    has_gpus = bool(gpus) or bool(visible and visible[1])
    rail_groups = _rail_groups(ports) if has_gpus else set()
    gpu_numas = [g for g in gpus if g.numa_node is not None and g.numa_node >= 0]
    out: dict[str, HcaAffinity] = {}
    for port in _one_port_per_device(ports):
        dev = port.device
        addr = next((p.pci_address for p in ports if p.device == dev and p.pci_address), None)
        out[dev] = _affinity(port, addr, pci.get(addr) if addr else None, topo, gpu_numas,
                             rail_groups)
    return out


def _affinity(port: IbPort, addr: str | None, fn: PciFunction | None, topo: Any,
              gpu_numas: list[PciFunction],
              rail_groups: set[tuple[str | None, str | None]]) -> HcaAffinity:
    """One HCA's affinity: from the topology matrix, else NUMA nodes, else its peers."""
    dev = port.device
    numa = fn.numa_node if fn is not None and fn.numa_node is not None \
        and fn.numa_node >= 0 else None
    if topo is not None:
        rail, local, link = _topo_affinity(topo, dev)
        if rail is not None:
            return HcaAffinity(dev, rail, "topology", local, link, numa, addr)
    if numa is not None and gpu_numas:
        shared = tuple(g.address for g in gpu_numas if g.numa_node == numa)
        return HcaAffinity(dev, bool(shared), "numa", shared, None, numa, addr)
    if rail_groups and port.hca_type:
        rail = (port.hca_type, port.link_layer) in rail_groups
        return HcaAffinity(dev, rail, "peer-group", (), None, numa, addr)
    return HcaAffinity(dev, None, "unknown", (), None, numa, addr)


def _rail_groups(ports: list[IbPort]) -> set[tuple[str | None, str | None]]:
    """The (model, link layer) sets taken as GPU rails: of the sets of at least
    RAIL_GROUP_MIN identical HCAs, the fastest (the compute fabric is the fastest)."""
    heads = _one_port_per_device(ports)
    sizes = Counter((p.hca_type, p.link_layer) for p in heads if p.hca_type)
    speed: dict[tuple[str | None, str | None], float] = {}
    for p in ports:
        if p.is_active and p.hca_type:
            key = (p.hca_type, p.link_layer)
            speed[key] = max(speed.get(key, 0.0), p.rate_gbps or 0.0)
    big = [key for key, n in sizes.items() if n >= RAIL_GROUP_MIN]
    if not big:
        return set()
    top = max(speed.get(k, 0.0) for k in big)
    return {k for k in big if speed.get(k, 0.0) == top}


def _one_port_per_device(ports: list[IbPort]) -> list[IbPort]:
    seen: dict[str, IbPort] = {}
    for p in ports:
        seen.setdefault(p.device, p)
    return list(seen.values())
