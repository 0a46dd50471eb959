"""Rules on topology and NUMA: which NIC and NUMA node each GPU is close to, GPUs
whose network path crosses the CPU socket, devices without NUMA affinity on a
multi-socket host, and automatic NUMA balancing on a GPU host."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

from gputriage.facts.stack import GpuSighting
from gputriage.facts.topology import GpuPlacement, multi_node_evidence
from gputriage.logscan.events import DriverEvent
from gputriage.model import Action, Blame, Finding, Scope, Severity, evidence, gpu_scope
from gputriage.parsers.numactl import NumaHardware
from gputriage.parsers.pci import PciFunction
from gputriage.parsers.topo import TopoMatrix, distance, nvlink_count
from gputriage.rules.base import finding, rule

TOPO = "nvidia_smi_topo"


def _gpu_links(matrix: TopoMatrix) -> tuple[Counter[str], list[str]]:
    """GPU-to-GPU cells: a count per link kind and one line per pair."""
    gpus = matrix.gpus
    counts: Counter[str] = Counter()
    pairs = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            cell = matrix.link(a, b)
            if cell:
                counts[cell] += 1
                pairs.append(f"{a}-{b} {cell}")
    return counts, pairs


def _map_line(p: GpuPlacement) -> str:
    where = f"{p.gpu}" + (f" [{p.bus_id}]" if p.bus_id else "")
    numa = f"NUMA {p.numa_node}" if p.numa_node is not None else "NUMA unknown"
    cpus = f", CPUs {p.cpu_affinity}" if p.cpu_affinity else ""
    if p.nearest_link:
        nics = f"nearest NIC {', '.join(p.nearest_names)} ({p.nearest_link})"
    else:
        nics = "no NIC in the matrix"
    return f"{where}: {numa}{cpus}; {nics}"


@rule("topology.map", produces=("topology.map",))
def topology_map(gpu_nic_map: list[GpuPlacement], topology: TopoMatrix) -> Iterator[Finding]:
    """The GPU <-> NIC <-> NUMA map read from the topology matrix, with how the
    GPUs are linked to each other (all NVLink, partly NVLink, or PCIe only)."""
    placements, matrix = gpu_nic_map, topology
    counts, pairs = _gpu_links(matrix)
    numas = sorted({p.numa_node for p in placements if p.numa_node is not None})
    lines = [_map_line(p) for p in placements]
    title = (f"topology: {len(placements)} GPU(s), {len(matrix.nics)} NIC(s), "
             f"{len(numas) or 'unknown'} NUMA node(s)")
    why = ("Which NUMA node and NIC each GPU is closest to: pin each rank's CPU threads "
           "and memory to its GPU's NUMA node and give it the nearest NIC.")
    if counts:
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(
            counts.items(), key=lambda kv: (distance(kv[0]), -(nvlink_count(kv[0]) or 0))))
        title += f"; GPU-GPU links {kinds}"
        lines.append(f"GPU-GPU links: {kinds}")
        nv = {k for k in counts if nvlink_count(k)}
        if nv and len(nv) < len(counts):
            lines.append("NVLink pairs: " + ", ".join(
                [pr for pr in pairs if nvlink_count(pr.rsplit(" ", 1)[1])][:16]))
            why += (" Only some GPU pairs are joined by NVLink; the others talk over PCIe, "
                    "so collectives over all GPUs run at PCIe speed.")
        if len(nv) > 1:
            why += (" NVLink pairs differ in link count "
                    f"({', '.join(sorted(nv, key=lambda k: nvlink_count(k) or 0, reverse=True))}): "
                    "check nvidia-smi nvlink -s for links that are down.")
        if not nv and len(placements) > 1 and matrix.p2p is None:
            why += (" Whether peer-to-peer works over these PCIe paths the matrix cannot show: "
                    "PCIe ACS or an IOMMU redirecting peer traffic through the root complex "
                    "(NCCL hangs or crawls, NCCL_P2P_DISABLE=1 cures it) shows only in lspci "
                    "-vvv's ACSCtl lines and in nvidia-smi topo -p2p r.")
        elif nv:
            why += (" An NV# cell counts the links that trained; whether that is all the "
                    "GPU or bridge has the matrix cannot show: nvidia-smi nvlink -s lists "
                    "each link.")
    if not matrix.nics:
        why += " The matrix shows no NIC, so GPU-to-network placement cannot be judged."
    yield finding("topology.map", Severity.INFO, title, why, Action.NONE, Blame.UNKNOWN,
                  evidence=[evidence(TOPO, lines, "derived from the topology matrix "
                                     "(NIC legend, CPU and NUMA affinity columns)")])


def nvlink_totals(matrix: TopoMatrix) -> dict[str, int]:
    """Per GPU, the NVLink links it shows to all its peers together."""
    return {a: sum(nvlink_count(matrix.link(a, b)) or 0 for b in matrix.gpus if b != a)
            for a in matrix.gpus}


@rule("topology.nvlink-uneven", produces=("topology.nvlink-uneven",))
def nvlink_uneven(topology: TopoMatrix) -> Iterator[Finding]:
    """GPUs that all use NVLink but show different totals of links to their peers:
    identical GPUs have the same number, so the ones with fewer lost links (down,
    untrained or a missing bridge). Designs whose pairs differ (cube mesh) keep equal
    totals and stay silent."""
    matrix = topology
    totals = nvlink_totals(matrix)
    if len(totals) < 2 or not all(totals.values()):
        return  # PCIe-only GPUs, or some without NVLink by design
    most = max(totals.values())
    short = [g for g, n in totals.items() if n < most]
    if not short:
        return
    full = [g for g, n in totals.items() if n == most]
    lines = [matrix.header] + [matrix.rows[g] for g in matrix.gpus if g in matrix.rows]
    lines.append("NVLink links per GPU: " + ", ".join(f"{g} {n}" for g, n in totals.items()))
    yield finding(
        "topology.nvlink-uneven", Severity.WARNING,
        f"{', '.join(f'{g} ({totals[g]})' for g in short)}: fewer NVLink links than "
        f"{', '.join(full)} ({most})",
        "GPUs of one board have the same number of NVLink links; these show fewer, so links "
        "are down or never trained (or a bridge is missing) and traffic over them runs "
        "slower or falls back to PCIe. Check nvidia-smi nvlink -s / -e and the kernel log "
        "for NVLink Xids; at the next maintenance window reset the GPUs, which may retrain "
        "them, and repair links that stay down.",
        Action.PLAN_REPAIR, Blame.NODE, evidence=[evidence(TOPO, lines)])


_P2P_MEANING = {"CNS": "chipset not supported", "GNS": "GPU not supported",
                "TNS": "topology not supported", "NS": "not supported",
                "DR": "disabled by regkey", "U": "unknown"}


@rule("topology.p2p", produces=("topology.p2p",))
def p2p_matrix(topology: TopoMatrix) -> Iterator[Finding]:
    """``nvidia-smi topo -p2p``: which GPU pairs can use peer-to-peer access. Pairs
    that cannot make NCCL and CUDA copies go through host memory."""
    matrix = topology if topology.kind == "p2p" else topology.p2p
    if matrix is None:
        return
    gpus = matrix.gpus
    pairs = [(a, b, matrix.link(a, b)) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    bad = [(a, b, c) for a, b, c in pairs if c and c.upper() != "OK"]
    lines = [matrix.header] + list(matrix.rows.values())
    if not bad:
        yield finding(
            "topology.p2p", Severity.INFO,
            f"peer-to-peer: all {len(pairs)} pairs of {len(gpus)} GPUs OK",
            "Every GPU pair supports peer-to-peer access for this operation.",
            Action.NONE, Blame.UNKNOWN, evidence=[evidence(TOPO, lines)])
        return
    if all(c.upper() == "GNS" for _, _, c in bad):
        yield finding(
            "topology.p2p", Severity.INFO,
            f"peer-to-peer: the GPUs do not support it (GNS) on {len(bad)} of {len(pairs)} "
            "pairs",
            "GNS ('GPU not supported') is the GPU's own answer, not the platform's: GeForce "
            "and many workstation cards (or a vGPU) do not offer PCIe peer-to-peer, so NCCL "
            "and cudaMemcpyPeer go through host memory by design. No BIOS, ACS or IOMMU "
            "setting changes it; only a P2P-capable GPU (or an NVLink bridge where the model "
            "has one) would.", Action.NONE, Blame.UNKNOWN, evidence=[evidence(TOPO, lines)])
        return
    codes = Counter(c for _, _, c in bad)
    what = ", ".join(f"{c} ({_P2P_MEANING.get(c.upper(), c)}) x{n}" for c, n in codes.items())
    shown = ", ".join(f"{a}-{b} {c}" for a, b, c in bad[:12])
    yield finding(
        "topology.p2p", Severity.WARNING,
        f"peer-to-peer unavailable for {len(bad)} of {len(pairs)} GPU pairs: {what}",
        f"Pairs {shown}{', ...' if len(bad) > 12 else ''} cannot reach each other directly, "
        "so NCCL and cudaMemcpyPeer stage through host memory (slower, more CPU). On a "
        "server this is the platform: PCIe ACS or the IOMMU blocking peer traffic, or a root "
        "complex that does not forward it; check the BIOS ACS/IOMMU settings and "
        "NVIDIA's platform support for P2P.", Action.FIX_CONFIG, Blame.CONFIG,
        evidence=[evidence(TOPO, lines)])


@rule("topology.nic-far", produces=("topology.nic-far",))
def nic_far(gpu_nic_map: list[GpuPlacement], topology: TopoMatrix) -> Iterator[Finding]:
    """On a rail-per-GPU host (GPUi <-> NICi), a GPU whose rail NIC sits across
    the CPU socket (SYS) while another NIC is NODE or closer to it: its
    GPUDirect RDMA traffic crosses the inter-socket link. Silent without NIC
    columns or without a rail design."""
    matrix = topology
    for p in gpu_nic_map:
        if not (p.rail_link and distance(p.rail_link) >= distance("SYS")
                and p.nearest_link and distance(p.nearest_link) <= distance("NODE")):
            continue
        rail = p.rail_nic if p.rail_name in (None, p.rail_nic) else (
            f"{p.rail_nic} ({p.rail_name})")
        shown = (p.gpu, p.rail_nic, *p.nearest_nics)
        lines = [matrix.header] + [matrix.rows[d] for d in shown if d in matrix.rows]
        lines += [f"{n}: {matrix.nic_name(n)}" for n in shown[1:] if n in matrix.nic_names]
        yield finding(
            "topology.nic-far", Severity.WARNING,
            f"{p.gpu}: its rail NIC {rail} is across the CPU socket "
            f"({p.rail_link}) while {', '.join(p.nearest_names)} is {p.nearest_link}",
            "Network traffic of this GPU's rail crosses the inter-socket link: NCCL may "
            "turn GPUDirect RDMA off for it and its bandwidth drops. Move the HCA to the slot "
            "beside the GPU, or fix the GPU-to-NIC rail mapping (NCCL_IB_HCA, cabling).",
            Action.FIX_CONFIG, Blame.CONFIG, gpu_scope(p.bus_id, p.index),
            [evidence(TOPO, lines)])


@rule("topology.numa-unknown", any_of=("numa", "topology"),
      produces=("topology.numa-unknown",))
def numa_unknown(pci: list[PciFunction], pci_source: str, numa: NumaHardware | None = None,
                 topology: TopoMatrix | None = None) -> Iterator[Finding]:
    """GPUs and NICs whose sysfs numa_node is -1 on a host with more than one
    NUMA node: nothing can place their CPU threads and memory locally."""
    multi, shown = multi_node_evidence(numa, topology)
    if not multi:
        return
    for f in pci:
        if f.numa_node != -1 or not (f.is_gpu or f.is_network):
            continue
        what = f"GPU {f.address}" if f.is_gpu else f"NIC {f.address}" + (
            f" ({f.driver})" if f.driver else "")
        ev = [evidence(pci_source, [f"{f.address}/numa_node: -1"])]
        ev += [evidence(src, [ln]) for src, ln in shown]
        yield finding(
            "topology.numa-unknown", Severity.WARNING,
            f"{what} reports no NUMA node (numa_node -1) on a multi-NUMA host",
            "The firmware gives this device no NUMA affinity, so the driver, NCCL and "
            "CPU pinning cannot keep its host threads and buffers on the local socket. "
            "Enable the BIOS/firmware proximity (SRAT/_PXM) information or update the "
            "firmware; in a VM, expose the guest NUMA layout of passed-through devices.",
            Action.FIX_CONFIG, Blame.CONFIG,
            gpu_scope(f.address) if f.is_gpu else Scope(kind="nic", pci_bus_id=f.address,
                                                         name=f.address), ev)


def _has_gpus(pci_gpus: list[PciFunction] | None, topology: TopoMatrix | None,
              visible_gpus: tuple[str, list[GpuSighting]] | None) -> bool:
    """Whether any source shows GPUs on this host."""
    return bool(pci_gpus or (topology is not None and topology.gpus)
                or (visible_gpus and visible_gpus[1]))


@rule("topology.numa-balancing", any_of=("pci_gpus", "topology", "visible_gpus"),
      produces=("topology.numa-balancing",))
def numa_balancing(numa_balancing: str, pci_gpus: list[PciFunction] | None = None,
                   topology: TopoMatrix | None = None,
                   visible_gpus: tuple[str, list[GpuSighting]] | None = None,
                   numa: NumaHardware | None = None) -> Iterator[Finding]:
    """Automatic NUMA balancing switched on on a GPU host (silent when the host is
    known to have a single NUMA node, where it does nothing)."""
    value = numa_balancing
    if value != "1" or not _has_gpus(pci_gpus, topology, visible_gpus):
        return
    if numa is not None and numa.node_count == 1:
        return
    yield finding(
        "topology.numa-balancing", Severity.WARNING,
        "automatic NUMA balancing is on (kernel.numa_balancing=1) on a GPU host",
        "The kernel periodically unmaps pages to find where they are used; the resulting "
        "faults and page migrations stall the CPU threads that feed the GPUs and add "
        "latency jitter. Set kernel.numa_balancing=0 (sysctl) and pin processes to their "
        "GPU's NUMA node instead.",
        Action.FIX_CONFIG, Blame.CONFIG,
        evidence=[evidence("numa_balancing", [f"kernel.numa_balancing = {value}"])])


def _gb(mb: int | None) -> str:
    return "? GB" if mb is None else f"{mb / 1024:.0f} GB"


@rule("topology.numa-layout", produces=("topology.numa-layout",))
def numa_layout(numa: NumaHardware, topology: TopoMatrix | None = None,
                visible_gpus: tuple[str, list[GpuSighting]] | None = None,
                pci_gpus: list[PciFunction] | None = None,
                driver_events: Sequence[DriverEvent] = ()) -> Iterator[Finding]:
    """The NUMA layout of a numactl (or lscpu) paste read on its own (a host's report
    places its GPUs on it through the topology map instead): the nodes with CPUs and
    their memory, and the CPU-less nodes (GPU memory onlined as NUMA memory on GH200 and
    POWER9, CXL memory, or empty nodes the firmware reserves), which are not sockets."""
    if not numa.available or not numa.nodes or driver_events \
            or _has_gpus(pci_gpus, topology, visible_gpus):
        return
    cpu_nodes = [numa.nodes[i] for i in numa.cpu_nodes]
    others = [n for n in numa.nodes.values() if not n.cpus]
    with_memory = [n for n in others if n.size_mb]
    title = (f"NUMA: {len(cpu_nodes)} node(s) with CPUs ("
             + "; ".join(f"{n.id}: CPUs {n.cpulist or '?'}"
                         + (f", {_gb(n.size_mb)}" if n.size_mb is not None else "")
                         for n in cpu_nodes[:8]) + ")")
    why = ("Pin each GPU's host threads and buffers to the node its GPU is attached to "
           "(nvidia-smi topo -m's NUMA column).")
    if others:
        title += (f"; {len(others)} without CPUs"
                  + (f" ({', '.join(f'{n.id}: {_gb(n.size_mb)}' for n in with_memory[:4])})"
                     if with_memory else ""))
        why += (" Nodes without CPUs are memory only: on GH200/GB200 and POWER9 the GPU's "
                "memory onlined as NUMA memory, or CXL memory; on Grace Hopper the empty ones "
                "are reserved for GPU memory partitions. They are not sockets, and a large "
                "distance to them is normal.")
    far = sorted({d for (a, b), d in numa.distances.items() if a != b
                  and a in numa.cpu_nodes and b in numa.cpu_nodes})
    if far:
        why += (f" Distance between CPU nodes: {', '.join(map(str, far))} (10 is local; the "
                "firmware's relative cost of a remote access).")
    yield finding("topology.numa-layout", Severity.INFO, title, why, Action.NONE,
                  Blame.UNKNOWN, evidence=[evidence(numa.source or "numactl",
                                                    numa.lines[:12] or [title])])
