"""Topology and NUMA facts: the topology matrix, the NUMA layout, the
automatic NUMA balancing switch, and where each GPU sits relative to the
host's NICs and NUMA nodes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gputriage.errors import ParseError
from gputriage.facts.table import FactReader, FactTable, Missing
from gputriage.parsers.numactl import NumaHardware, parse_numactl, parse_sysfs_nodes
from gputriage.parsers.topo import TopoMatrix, distance, parse_topo
from gputriage.text.fields import strict_int

FACTS = FactTable()

__all__ = ["GpuPlacement", "multi_node_evidence", "parse_balancing_value"]

_GPU_INDEX = re.compile(r"^GPU([0-9]{1,4})$")


@dataclass(frozen=True)
class GpuPlacement:
    """Where one GPU of the topology matrix sits: NUMA node and nearest NICs."""

    gpu: str  # the matrix column, "GPU0"
    index: int | None
    bus_id: str | None  # when another source ties the index to a PCI address
    name: str | None  # product name when known
    numa_node: int | None
    numa_source: str | None  # "nvidia_smi_topo" or the PCI source
    cpu_affinity: str | None
    nearest_link: str | None  # best cell to any NIC ("PIX"); None: no NIC columns
    nearest_nics: tuple[str, ...] = ()  # NIC columns at that distance ("NIC0")
    nearest_names: tuple[str, ...] = ()  # their HCA names ("mlx5_0")
    rail_nic: str | None = None  # the NIC of this GPU's rail (GPUi <-> NICi), when evident
    rail_name: str | None = None  # its HCA name ("mlx5_0")
    rail_link: str | None = None  # the cell between the GPU and its rail NIC

    @property
    def closer_nic_exists(self) -> bool:
        """Whether another NIC is closer to this GPU than its rail NIC."""
        return (self.rail_link is not None and self.nearest_link is not None
                and distance(self.nearest_link) < distance(self.rail_link))


def parse_balancing_value(text: str) -> str:
    """``/proc/sys/kernel/numa_balancing`` -> "0", "1", "2" or "3" as printed;
    ParseError for anything else (empty text gives "")."""
    value = (text or "").strip()
    if value and strict_int(value, signed=False, hi=999) is None:
        raise ParseError(f"numa_balancing is not a number: {value[:40]!r}")
    return value


@FACTS.fact("topology", sources=("nvidia_smi_topo",))
def topology(facts: FactReader) -> TopoMatrix:
    """The ``nvidia-smi topo -m`` matrix (or a pasted ``topo -p2p`` one)."""
    matrix = facts.parse("nvidia_smi_topo", parse_topo)
    if matrix.is_empty():
        raise Missing("nvidia_smi_topo: empty")
    return matrix


@FACTS.fact("numa", sources=("numactl", "hugepages_per_node"))
def numa(facts: FactReader) -> NumaHardware:
    """NUMA nodes from numactl (or lscpu pasted as such), else sysfs cpulists."""
    try:
        hw = facts.parse("numactl", parse_numactl)
        if not hw.is_empty():
            return hw
        first = Missing("numactl: empty")
    except Missing as exc:
        first = exc
    try:
        hw = facts.parse("hugepages_per_node", parse_sysfs_nodes, as_json=True)
    except Missing:
        raise first from None
    if not hw.nodes:
        raise first
    return hw


@FACTS.fact("numa_balancing", sources=("numa_balancing",))
def numa_balancing(facts: FactReader) -> str:
    """kernel.numa_balancing as printed ("0" off, "1" on, "2"/"3" tiering modes)."""
    value = facts.parse("numa_balancing", parse_balancing_value)
    if not value:
        raise Missing("numa_balancing: empty")
    return value


def _bus_ids(facts: FactReader, gpus: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """Matrix GPU -> (bus id, name): by index from the driver's GPU list, else by
    PCI address order (nvidia-smi numbers GPUs in bus order) when counts agree."""
    out: dict[str, tuple[str | None, str | None]] = {}
    visible = facts.maybe("visible_gpus")
    if visible:
        by_index = {g.index: g for g in visible[1] if g.index is not None}
        for gpu in gpus:
            g = by_index.get(int(gpu[3:]))
            if g is not None:
                out[gpu] = (g.bus_id, g.name)
    if not out:
        pci_gpus = facts.maybe("pci_gpus") or []
        if len(pci_gpus) == len(gpus):
            ordered = sorted(pci_gpus, key=lambda f: f.address)
            out = {gpu: (f.address, None) for gpu, f in zip(gpus, ordered, strict=False)}
    return out


def _nearest(matrix: TopoMatrix, gpu: str) -> tuple[str | None, tuple[str, ...]]:
    cells = [(distance(matrix.link(gpu, nic)), matrix.link(gpu, nic), nic)
             for nic in matrix.nics if matrix.link(gpu, nic)]
    cells = [c for c in cells if c[0] < 9]
    if not cells:
        return None, ()
    best = min(c[0] for c in cells)
    link = next(c[1] for c in cells if c[0] == best)
    return link, tuple(c[2] for c in cells if c[0] == best)


def _rails(matrix: TopoMatrix, gpus: list[str],
           nearest: dict[str, tuple[str | None, tuple[str, ...]]]) -> dict[str, str]:
    """GPU -> the NIC of its rail (``GPUi`` <-> ``NICi``) when the matrix shows a
    rail-per-GPU design: at least as many NICs as GPUs and, for most GPUs, NIC i
    is among the nearest NICs of GPU i. Empty otherwise."""
    nics = set(matrix.nics)
    rails = {g: f"NIC{g[3:]}" for g in gpus if f"NIC{g[3:]}" in nics}
    if len(gpus) < 2 or len(nics) < len(gpus) or len(rails) < len(gpus):
        return {}
    agree = sum(1 for g, nic in rails.items() if nic in nearest[g][1])
    return rails if agree * 2 > len(gpus) else {}


@FACTS.fact("gpu_nic_map")
def gpu_nic_map(facts: FactReader) -> list[GpuPlacement]:
    """For each GPU of the topology matrix: its NUMA node, nearest NIC(s) and
    link, and on rail-per-GPU hosts its rail NIC and that link."""
    matrix: TopoMatrix = facts.get("topology")
    if matrix.kind != "matrix":
        raise Missing("nvidia_smi_topo: a peer-to-peer matrix, not the topology matrix")
    gpus = [g for g in matrix.gpus if _GPU_INDEX.match(g)]
    if not gpus:
        raise Missing("nvidia_smi_topo: no GPU in the matrix")
    ids = _bus_ids(facts, gpus)
    sysfs_numa = {f.address: f.numa_node for f in facts.maybe("pci") or []}
    nearest = {g: _nearest(matrix, g) for g in gpus}
    rails = _rails(matrix, gpus, nearest)
    out = []
    for gpu in gpus:
        bus_id, name = ids.get(gpu, (None, None))
        numa_text = matrix.numa_affinity.get(gpu, "")
        numa_node: int | None = None
        numa_source: str | None = None
        if (numa := strict_int(numa_text, signed=False)) is not None:
            numa_node, numa_source = numa, "nvidia_smi_topo"
        elif bus_id and sysfs_numa.get(bus_id) is not None:
            numa_node, numa_source = sysfs_numa[bus_id], facts.maybe("pci_source")
        link, nics = nearest[gpu]
        rail = rails.get(gpu)
        out.append(GpuPlacement(
            gpu=gpu, index=int(gpu[3:]), bus_id=bus_id, name=name, numa_node=numa_node,
            numa_source=numa_source, cpu_affinity=matrix.cpu_affinity.get(gpu),
            nearest_link=link, nearest_nics=nics,
            nearest_names=tuple(matrix.nic_name(n) for n in nics), rail_nic=rail,
            rail_name=matrix.nic_name(rail) if rail else None,
            rail_link=matrix.link(gpu, rail) if rail else None))
    return out


def multi_node_evidence(hw: NumaHardware | None, matrix: TopoMatrix | None,
                        ) -> tuple[bool | None, list[tuple[str, str]]]:
    """Whether the host has more than one NUMA node with CPUs (from the ``numa`` and
    ``topology`` facts), and the (source, line) pairs that show it; None when neither
    can tell."""
    answer: bool | None = None
    lines: list[tuple[str, str]] = []
    if hw is not None:
        answer = hw.multi_node
        src = "numactl" if hw.source in ("numactl", "lscpu") else "hugepages_per_node"
        lines += [(src, ln) for ln in hw.lines[:4]]
    if matrix is not None and matrix.kind == "matrix":
        numas = {n for v in matrix.numa_affinity.values()
                 if (n := strict_int(v, signed=False)) is not None}
        if len(numas) > 1:
            answer = True
            lines.append(("nvidia_smi_topo", matrix.header))
            lines += [("nvidia_smi_topo", matrix.rows[g]) for g in matrix.gpus
                      if g in matrix.rows][:8]
        elif answer is None and numas:
            answer = False
    return answer, lines
