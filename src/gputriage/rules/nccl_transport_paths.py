"""NCCL transport rules on the data paths: network channels without GPUDirect
RDMA, and GPU pairs that talk through host shared memory instead of P2P.

The rules themselves are registered in :mod:`gputriage.rules.nccl_transport`
(the rules area); this module builds their findings from the facts those rules
are given.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gputriage.facts.nccl import NcclJob, NcclLogText, env_value, nccl_bus_id
from gputriage.model import NODE, Action, Blame, Evidence, Finding, Severity, evidence, gpu_scope
from gputriage.parsers.nccl_model import NET_IB, NET_PLUGIN, P2P, SHM, NcclChannel, NcclGdr
from gputriage.parsers.nccl_model import NcclProcess as Proc
from gputriage.parsers.topo import TopoMatrix, distance, nvlink_count
from gputriage.rules.base import finding
from gputriage.rules.modules import PEERMEM_MODULES as PEERMEM
from gputriage.rules.modules import loaded_line
from gputriage.text.fields import strict_int

if TYPE_CHECKING:
    from gputriage.facts.topology import GpuPlacement
    from gputriage.parsers.infiniband import IbPort
    from gputriage.parsers.modules import Module
    from gputriage.parsers.pci import PciFunction

__all__ = ["LOW_P2P_LEVELS", "HostLayout", "gdr_findings", "shm_findings"]

SRC = "nccl_log"
TOPO = "nvidia_smi_topo"
# NCCL_P2P_LEVEL values that leave PCIe pairs (or all pairs: LOC, 0) without P2P
LOW_P2P_LEVELS = ("LOC", "NVL", "PIX", "0", "1")
GDR_LEVEL_LINE = "NCCL_NET_GDR_LEVEL set by environment"

GdrLine = tuple[Proc, NcclGdr]
_PairKey = tuple[str | None, str | None, str | None]  # (host, GPU, HCA) as printed
Channel = tuple[Proc, NcclChannel]
Verdict = tuple[str, str, Severity, Action, Blame]  # title, why, severity, action, blame


@dataclass(frozen=True)
class HostLayout:
    """This host's facts that place GPUs and HCAs (empty when absent)."""

    placements: list[GpuPlacement]  # gpu_nic_map
    topology: TopoMatrix | None
    pci: list[PciFunction]
    ib_ports: list[IbPort]


def _hca_name(p: Proc, g: NcclGdr) -> str | None:
    """The HCA's name: quoted in the line, or the n-th of ``NET/IB : Using``."""
    if g.hca_name:
        return g.hca_name
    n = strict_int(g.hca, signed=False)
    if n is not None and n < len(p.ib_devices):
        return p.ib_devices[n].split(":")[0]
    return None


def _is_socket_gdr(p: Proc, g: NcclGdr) -> bool:
    """NET/Socket prints a GDR line for its interfaces; that is normal."""
    return (g.net or "").lower() == "socket" or (g.hca_name or "") in p.socket_ifaces


def _net_channels(p: Proc) -> list[NcclChannel]:
    return [c for c in p.channels if c.family in (NET_IB, NET_PLUGIN) and c.gdr is not None]


def _dev(c: NcclChannel) -> str:
    """``NET/IB/1`` from ``NET/IB/1/GDRDMA`` (PXN relay kept off)."""
    parts = c.transport.split("/")
    return "/".join(parts[:3]).split("(")[0]


def _local_dev(c: NcclChannel) -> str | None:
    """The logging rank's own GPU: the receiver of a [receive] line, else the sender."""
    return c.peer_dev if c.direction == "receive" else c.rank_dev


def _where(p: Proc, text: str, many_hosts: bool) -> str:
    return f"{p.host}: {text}" if many_hosts and p.host else text


def _env_first(procs: Iterable[Proc], name: str) -> str | None:
    """The first process's value of an ``NCCL_X set by environment`` echo."""
    return next((value for p in procs if (value := env_value(p, name))), None)


# --- where the host places a GPU and an HCA ------------------------------------------


def _topo_note(host: HostLayout, gpu_bus: str | None, hca: str | None
               ) -> tuple[str, list[Evidence]]:
    """How the host's own facts place a GPU (by PCI address) and an HCA."""
    if not gpu_bus:
        return "", []
    place = next((pl for pl in host.placements if pl.bus_id == gpu_bus), None)
    if place is not None and host.topology is not None:
        return _matrix_note(place, host.topology, gpu_bus, hca)
    return _numa_note(host, gpu_bus, hca), []


def _matrix_note(place: GpuPlacement, matrix: TopoMatrix, gpu_bus: str,
                 hca: str | None) -> tuple[str, list[Evidence]]:
    """``topo -m: GPU3 [0000:..] to mlx5_1 is SYS; its nearest NIC is mlx5_3 (PIX)``."""
    cols = [c for c in matrix.nics if hca and matrix.nic_name(c) == hca]
    cell = matrix.link(place.gpu, cols[0]) if cols else None
    note = f"topo -m: {place.gpu} [{gpu_bus}]"
    if cell:
        note += f" to {hca} is {cell}"
    if place.nearest_link and (cell is None or distance(place.nearest_link) < distance(cell)):
        note += f"; its nearest NIC is {', '.join(place.nearest_names)} ({place.nearest_link})"
    rows = [matrix.header] + [matrix.rows[g] for g in (place.gpu,) if g in matrix.rows]
    return note, [evidence(TOPO, rows)]


def _numa_note(host: HostLayout, gpu_bus: str, hca: str | None) -> str:
    """The NUMA nodes sysfs gives the GPU and the HCA, when it gives both."""
    pci = {f.address: f for f in host.pci}
    gpu = pci.get(gpu_bus)
    port = next((pt for pt in host.ib_ports if pt.device == hca and pt.pci_address), None)
    nic = pci.get(port.pci_address) if port and port.pci_address else None
    if gpu is None or nic is None or gpu.numa_node is None or nic.numa_node is None:
        return ""
    same = "the same NUMA node" if gpu.numa_node == nic.numa_node else "different NUMA nodes"
    return (f"sysfs: GPU {gpu_bus} on NUMA node {gpu.numa_node}, {hca} "
            f"({nic.address}) on NUMA node {nic.numa_node} ({same})")


# --- nccl.gdr-disabled ---------------------------------------------------------------


def _gdr_off_lines(procs: list[Proc]) -> tuple[list[GdrLine], list[GdrLine]]:
    """(GDR disabled with a distance, GDR disabled without one); NET/Socket's own lines
    left out."""
    off = [(p, g) for p in procs for g in p.gdr if not g.enabled and not _is_socket_gdr(p, g)]
    return ([(p, g) for p, g in off if g.distance is not None],
            [(p, g) for p, g in off if g.distance is None])


def _gdr_channels(procs: list[Proc]) -> tuple[list[Channel], list[Channel]]:
    """(network channels with /GDRDMA, those without it). A [send] without /GDRDMA on a
    NIC whose receives have it is left out: GDR read (the NIC reading GPU memory) is off,
    NCCL's default on PCIe platforms before Ampere or with NCCL_NET_GDR_READ=0; the data
    path itself has GPUDirect."""
    chans = [(p, c) for p in procs for c in _net_channels(p)]
    with_gdr = [(p, c) for p, c in chans if c.gdr]
    gdr_recv = {(p.host, _dev(c)) for p, c in with_gdr if c.direction == "receive"}
    without = [(p, c) for p, c in chans if not c.gdr
               and not (c.direction == "send" and (p.host, _dev(c)) in gdr_recv)]
    return with_gdr, without


def gdr_findings(job: NcclJob, text: NcclLogText, modules: dict[str, Module] | None,
                 host: HostLayout) -> Iterator[Finding]:
    """The findings of rule ``nccl.gdr-disabled`` (see its docstring)."""
    procs = job.log.processes
    many = len(job.hosts) > 1
    far, flat = _gdr_off_lines(procs)
    with_gdr, without = _gdr_channels(procs)
    if far:
        yield _far_finding(far, without, many, text, host)
    elif with_gdr and without:
        yield _mixed_finding(with_gdr, without, many)
    if flat or (without and not with_gdr and not far):
        yield _unsupported_finding(flat, without, text, modules)


_FAR_WHY = (
    "NCCL measures the PCIe path from each GPU to the HCA it sends through; when the path "
    "is longer than its GPUDirect limit (NCCL_NET_GDR_LEVEL, by default a shared PCIe "
    "switch) it turns GPUDirect RDMA off and stages every transfer through host memory, "
    "which costs inter-node bandwidth and CPU memory traffic. This follows from the "
    "platform layout (the HCA sits behind another PCIe switch or CPU socket), not from a "
    "fault: give each GPU an HCA under its own switch (NCCL_IB_HCA per rank, rail-aligned "
    "placement), or raise NCCL_NET_GDR_LEVEL only where the platform supports peer-to-peer "
    "through the CPU root complex. The numbers are NCCL's path types, from near to far LOC, "
    "NVL, PIX, PXB, PHB, SYS (releases number them differently); by default anything "
    "through the CPU (PHB) or across sockets (SYS) is too far.")


def _far_pairs(far: list[GdrLine], many: bool, host: HostLayout
               ) -> tuple[dict[_PairKey, GdrLine], list[str], list[str], list[Evidence]]:
    """(one line per host/GPU/HCA, their texts, host notes, host evidence)."""
    pairs: dict[_PairKey, GdrLine] = {}
    for p, g in far:
        pairs.setdefault((p.host, g.gpu, g.hca), (p, g))
    texts, notes, host_ev = [], [], []
    for p, g in pairs.values():
        hca = _hca_name(p, g)
        texts.append(_where(p, f"GPU {g.gpu} / HCA {g.hca}{f' ({hca})' if hca else ''} at "
                               f"distance {g.distance}, limit {g.max_distance}", many))
        note, ev = _topo_note(host, nccl_bus_id(g.gpu), hca)
        if note and note not in notes:
            notes.append(note)
            host_ev += ev
    return pairs, texts, notes, host_ev


def _far_finding(far: list[GdrLine], without: list[Channel], many: bool, text: NcclLogText,
                 host: HostLayout) -> Finding:
    pairs, texts, notes, host_ev = _far_pairs(far, many, host)
    hosts = sorted({p.host for p, _ in pairs.values() if p.host})
    title = (f"GPUDirect RDMA is off for {len(pairs)} GPU/HCA pair(s)"
             f"{f' on {len(hosts)} hosts' if len(hosts) > 1 else ''}: the HCA is too far from "
             f"the GPU ({'; '.join(texts[:3])}{' ...' if len(texts) > 3 else ''})")
    if without:
        title += f"; {len(without)} network channel(s) without /GDRDMA"
    why = _FAR_WHY
    level = _env_first((p for p, _ in pairs.values()), "NCCL_NET_GDR_LEVEL")
    blame = Blame.CONFIG
    if level:
        why += (f" The job sets NCCL_NET_GDR_LEVEL={level}: that is the limit here; unset it "
                "unless the platform needs it.")
        blame = Blame.JOB_CONFIG
    if notes:
        why += " Host: " + "; ".join(notes) + "."
    buses = {nccl_bus_id(g.gpu) for _, g in pairs.values()}
    scope = gpu_scope(buses.pop()) if len(buses) == 1 and None not in buses else None
    lines = [g.line for _, g in list(pairs.values())[:4]] + [c.line for _, c in without[:2]]
    lines += text.quote(GDR_LEVEL_LINE, [], 1) if level else []
    return finding("nccl.gdr-disabled", Severity.WARNING, title, why, Action.FIX_CONFIG,
                   blame, scope or NODE, evidence=[evidence(SRC, lines)] + host_ev)


def _mixed_finding(with_gdr: list[Channel], without: list[Channel], many: bool) -> Finding:
    good = sorted({_dev(c) for _, c in with_gdr})
    bad = sorted({_dev(c) for _, c in without})
    total = len(with_gdr) + len(without)
    title = (f"{len(without)} of {total} network channels lose GPUDirect RDMA "
             f"({', '.join(bad)} without it; {', '.join(good)} with it)")
    gpus_good = {(p.host, _local_dev(c)) for p, c in with_gdr}
    same = sorted({str(_local_dev(c)) for p, c in without
                   if _local_dev(c) is not None and (p.host, _local_dev(c)) in gpus_good})
    why = ("Channels without /GDRDMA stage their data through host memory; with GPUDirect on "
           "some channels and not on others, the slow ones pace the collective.")
    if same:
        why += (f" GPU {', '.join(same)} uses GPUDirect on {', '.join(good)}, so GPUDirect "
                f"support is there: {', '.join(bad)} is too far from that GPU (a NIC behind "
                "another PCIe switch or the other CPU socket), and its traffic crosses that "
                "longer path as well.")
    why += (" Give each GPU its near NIC (rail-aligned NCCL_IB_HCA per rank, NCCL_CROSS_NIC=0) "
            "or expect reduced inter-node bandwidth; check nvidia-smi topo -m for where each "
            "NIC sits.")
    lines = [c.line for _, c in with_gdr[:2]] + [c.line for _, c in without[:2]]
    return finding("nccl.gdr-disabled", Severity.WARNING, title, why, Action.FIX_CONFIG,
                   Blame.CONFIG, evidence=[evidence(SRC, lines)])


# Why GPUDirect RDMA is off when NCCL does not say it is a distance: (reason, why, action,
# blame, host evidence)
Cause = tuple[str, str, Action, Blame, list[Evidence]]


def _gdr_limited(level: str) -> Cause:
    """The job's NCCL_NET_GDR_LEVEL is the limit."""
    return (f"NCCL_NET_GDR_LEVEL={level} set by the environment",
            f"The job limits GPUDirect RDMA with NCCL_NET_GDR_LEVEL={level}; transfers are "
            "staged through host memory. Unset it unless the platform needs it.",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, [])


def _peermem_missing(mods: dict[str, Module]) -> Cause:
    """No nvidia_peermem on this host and no DMA-BUF in the log."""
    line = next((m.line for name, m in mods.items() if name == "nvidia"), None)
    return ("nvidia_peermem is not loaded on this host",
            "GPUDirect RDMA needs the nvidia_peermem kernel module (or DMA-BUF support in the "
            "driver, kernel and NCCL); this host has not loaded nvidia_peermem and the log "
            "shows no DMA-BUF, so the HCA cannot reach GPU memory and every transfer is "
            "staged through host memory. Load it (modprobe nvidia_peermem, and at boot) or "
            "use a driver/kernel/NCCL combination with DMA-BUF.",
            Action.FIX_CONFIG, Blame.CONFIG,
            [evidence("proc_modules", [line] if line else [],
                      "no nvidia_peermem (or nv_peer_mem) in the module list")])


def _off_with_support(mods: dict[str, Module] | None, loaded: bool) -> Cause:
    """GPUDirect support exists (nvidia_peermem loaded, or DMA-BUF) yet NCCL turned it
    off."""
    basis = "nvidia_peermem is loaded" if loaded else "DMA-BUF is available"
    ev = []
    line = loaded_line(mods, PEERMEM) if loaded and mods else None
    if line is not None:
        ev.append(evidence("proc_modules", [line]))
    return (f"GPUDirect RDMA is off although {basis}",
            f"{basis[0].upper() + basis[1:]}, so GPUDirect support exists; NCCL still turned "
            "it off, most often because the HCA is too far from the GPU (the log does not "
            "show the distance: enable NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH), or because the "
            "container cannot use it. Transfers are staged through host memory.",
            Action.FIX_CONFIG, Blame.CONFIG, ev)


_NO_SUPPORT: Cause = (
    "no GPUDirect support found (nvidia_peermem not loaded? no DMA-BUF)",
    "NCCL did not use GPUDirect RDMA and the log shows no DMA-BUF support: the usual cause "
    "is the nvidia_peermem module not loaded on the host (check lsmod), less often an HCA "
    "too far from the GPU. Transfers are staged through host memory, costing inter-node "
    "bandwidth.", Action.FIX_CONFIG, Blame.CONFIG, [])


def _unsupported_cause(procs: list[Proc], level: str | None,
                       mods: dict[str, Module] | None) -> Cause:
    loaded = None if mods is None else loaded_line(mods, PEERMEM) is not None
    dmabuf = any(p.dmabuf for p in procs)
    if level:
        return _gdr_limited(level)
    if loaded is False and not dmabuf and mods is not None:
        return _peermem_missing(mods)
    if loaded or dmabuf:
        return _off_with_support(mods, bool(loaded))
    return _NO_SUPPORT


def _unsupported_finding(flat: list[GdrLine], without: list[Channel], text: NcclLogText,
                         mods: dict[str, Module] | None) -> Finding:
    procs = list({id(p): p for p, _ in flat + without}.values())
    level = _env_first(procs, "NCCL_NET_GDR_LEVEL")
    reason, why, action, blame, host_ev = _unsupported_cause(procs, level, mods)
    what = []
    if flat:
        names = sorted({f"HCA {g.hca}" + (f" '{g.hca_name}'" if g.hca_name else "")
                        for _, g in flat})
        what.append(f"NCCL reports it disabled for {', '.join(names[:4])}")
    if without:
        what.append(f"{len(without)} network channel(s) without /GDRDMA")
    title = f"GPUDirect RDMA is off: {reason} ({'; '.join(what)})"
    lines = [g.line for _, g in flat[:3]] + [c.line for _, c in without[:3]]
    lines += text.quote(GDR_LEVEL_LINE, [], 1) if level else []
    return finding("nccl.gdr-disabled", Severity.WARNING, title, why, action, blame,
                   evidence=[evidence(SRC, lines)] + host_ev)


# --- nccl.shm-transport ---------------------------------------------------------------

Pair = tuple[str | None, frozenset[str]]  # (host, {device, device})


def _pair(p: Proc, c: NcclChannel) -> Pair | None:
    if c.rank_dev is None or c.peer_dev is None:
        return None
    return p.host, frozenset((c.rank_dev, c.peer_dev))


def _pair_text(key: Pair, many: bool) -> str:
    host, devs = key
    text = "-".join(sorted(devs, key=lambda d: (len(d), d)))
    return f"{host}:{text}" if many and host else text


def _topo_cells(matrix: TopoMatrix | None, pairs: list[Pair]) -> dict[Pair, str]:
    """topo -m cell of each (host, {a, b}) pair whose devices are plain GPU indexes
    (CUDA device numbers are taken as nvidia-smi indexes)."""
    out: dict[Pair, str] = {}
    if matrix is None or matrix.kind != "matrix":
        return out
    for key in pairs:
        devs = sorted(key[1])
        if len(devs) == 2 and all(d.isdigit() for d in devs):
            cell = matrix.link(f"GPU{devs[0]}", f"GPU{devs[1]}")
            if cell:
                out[key] = cell
    return out


def _intra_pairs(job: NcclJob) -> tuple[dict[Pair, NcclChannel], dict[Pair, NcclChannel]]:
    """(GPU pairs over SHM, GPU pairs over P2P), each with its first channel line."""
    shm: dict[Pair, NcclChannel] = {}
    p2p: dict[Pair, NcclChannel] = {}
    for p in job.log.processes:
        for c in p.channels:
            key = _pair(p, c)
            if key is None:
                continue
            if c.family == SHM:
                shm.setdefault(key, c)
            elif c.family == P2P:
                p2p.setdefault(key, c)
    return shm, p2p


_SLOW = ("SHM copies every transfer through host memory: a fraction of NVLink bandwidth "
         "and below PCIe peer-to-peer, and a ring runs at the pace of its slowest hop.")


def _shm_p2p_off(setting: str, figures: str) -> Verdict:
    """The job turned P2P off (or limited it)."""
    return (f"Intra-node traffic uses shared memory because {setting} is set ({figures})",
            f"The job turns GPU peer-to-peer off (or limits it to the nearest pairs) with "
            f"{setting}, so NCCL moves intra-node data through host shared memory. {_SLOW} "
            "Remove the setting unless it works around a known P2P problem of this "
            "platform.", Severity.WARNING, Action.FIX_CONFIG, Blame.JOB_CONFIG)


def _shm_over_nvlink(figures: str, nvlink: str, level: str | None) -> Verdict:
    """topo -m shows NVLink between GPUs that talk through SHM."""
    why = ("nvidia-smi topo -m shows NVLink between these GPUs, yet NCCL used SHM: P2P "
           "failed in the job's environment (containers that do not share the IPC "
           "namespace or limit IPC, CUDA_VISIBLE_DEVICES splitting the pair across "
           f"processes that cannot open each other's memory, P2P disabled). {_SLOW}")
    if level:
        why += f" The job sets NCCL_P2P_LEVEL={level}."
    return (f"GPUs joined by NVLink talk through shared memory ({figures}; topo -m: {nvlink})",
            why, Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)


def _shm_partial(figures: str, kinds: str, level: str | None) -> Verdict:
    """Some pairs have P2P, the others go through SHM: the machine's topology."""
    why = ("Only some GPU pairs talk peer-to-peer: the others have no NVLink between them "
           "or sit behind different CPU sockets, so NCCL routes them through host shared "
           f"memory. This is the machine's topology, not a software fault. {_SLOW} Pick GPUs "
           "that are all NVLink-connected (or a host with full NVLink) when bandwidth "
           "matters.")
    if kinds:
        why += f" topo -m for the SHM pairs: {kinds}."
    if level:
        why += f" The job sets NCCL_P2P_LEVEL={level}, which may also exclude pairs."
    return (f"Some GPU pairs have no peer-to-peer path and use shared memory ({figures})",
            why, Severity.WARNING, Action.NONE, Blame.CONFIG)


def _shm_everywhere(figures: str, level: str | None) -> Verdict:
    """No pair uses P2P at all."""
    why = ("Every intra-node channel goes through host shared memory: the GPUs have no "
           "NVLink and sit on different PCIe root complexes or CPU sockets, or P2P is "
           f"unavailable in this environment. {_SLOW} Check nvidia-smi topo -m and "
           "nvidia-smi topo -p2p r.")
    if level:
        why += f" The job sets NCCL_P2P_LEVEL={level}."
    return (f"No GPU pair uses peer-to-peer; intra-node traffic goes through shared memory "
            f"({figures})", why, Severity.INFO, Action.NONE, Blame.UNKNOWN)


def _shm_verdict(shm: dict[Pair, NcclChannel], p2p: dict[Pair, NcclChannel],
                 cells: dict[Pair, str], setting: str | None, level: str | None,
                 many: bool) -> Verdict:
    figures = f"{len(shm)} GPU pair(s) via SHM: " + ", ".join(
        _pair_text(k, many) for k in list(shm)[:6])
    if p2p:
        figures += f"; {len(p2p)} pair(s) via P2P: " + ", ".join(
            _pair_text(k, many) for k in list(p2p)[:6])
    nv_shm = [k for k in shm if nvlink_count(cells.get(k))]
    if setting:
        return _shm_p2p_off(setting, figures)
    if nv_shm:
        return _shm_over_nvlink(figures, ", ".join(f"{_pair_text(k, many)} {cells[k]}"
                                                   for k in nv_shm[:4]), level)
    if p2p:
        kinds = ", ".join(sorted({f"{_pair_text(k, many)} {v}" for k, v in cells.items()
                                  if k in shm}))
        return _shm_partial(figures, kinds, level)
    return _shm_everywhere(figures, level)


def shm_findings(job: NcclJob, text: NcclLogText,
                 topology: TopoMatrix | None) -> Iterator[Finding]:
    """The findings of rule ``nccl.shm-transport`` (see its docstring)."""
    shm, p2p = _intra_pairs(job)
    if not shm:
        return
    procs = job.log.processes
    disabled = next((p for p in procs if (env_value(p, "NCCL_P2P_DISABLE") or "0") != "0"),
                    None)
    level = _env_first(procs, "NCCL_P2P_LEVEL")
    setting = None
    if disabled:
        setting = f"NCCL_P2P_DISABLE={env_value(disabled, 'NCCL_P2P_DISABLE')}"
    elif level and level.upper() in LOW_P2P_LEVELS:
        setting = f"NCCL_P2P_LEVEL={level}"
    cells = _topo_cells(topology, list(shm) + list(p2p))
    title, why, severity, action, blame = _shm_verdict(shm, p2p, cells, setting, level,
                                                       len(job.hosts) > 1)
    host_ev = []
    if cells:
        host_ev.append(evidence(TOPO, [f"GPU{'-GPU'.join(sorted(k[1]))} {v}"
                                       for k, v in cells.items()],
                                "GPU pairs of the log's channels (CUDA device = GPU index)"))
    lines = text.quote("NCCL_P2P_DISABLE set by environment", [], 1) if disabled else []
    lines += text.quote("NCCL_P2P_LEVEL set by environment", [], 1) if level else []
    lines += [c.line for c in list(shm.values())[:3]] + [c.line for c in list(p2p.values())[:2]]
    yield finding("nccl.shm-transport", severity, title, why, action, blame,
                  evidence=[evidence(SRC, lines)] + host_ev)
