"""NCCL transport rules: which network a job's NCCL chose and why, the socket
interfaces it uses, and how it grouped the ranks into nodes.

The first suspects when a job runs at full speed on one node and at half speed
across nodes: NCCL fell back to TCP sockets although the hosts have IB/RoCE
HCAs, or GPUDirect RDMA is off (the GPUDirect and shared-memory findings are
built in :mod:`gputriage.rules.nccl_transport_paths`). Host facts
(active HCA ports, loaded modules, ``topo -m``) sharpen the verdicts when they
come with the log.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from gputriage.facts.nccl import (
    NcclJob,
    NcclLogText,
    env_value,
    on_sockets,
    process_network,
)
from gputriage.model import Action, Blame, Evidence, Finding, Severity, evidence
from gputriage.parsers.kernel_host import is_virtual_interface
from gputriage.parsers.nccl_model import NET_IB, NET_SOCKET, SHM, NcclChannel, NcclComm, NcclProcess
from gputriage.rules import nccl_transport_paths as paths
from gputriage.rules.base import finding, rule
from gputriage.rules.nccl_errors import plural as _plural
from gputriage.rules.nccl_transport_causes import Cause, socket_causes

if TYPE_CHECKING:
    from gputriage.facts.stack import GpuSighting
    from gputriage.facts.topology import GpuPlacement
    from gputriage.parsers.infiniband import IbPort
    from gputriage.parsers.modules import Module
    from gputriage.parsers.pci import PciFunction
    from gputriage.parsers.topo import TopoMatrix

SRC = "nccl_log"
IPOIB_IFACE = re.compile(r"^ib[a-z]?[0-9]", re.IGNORECASE)  # ib0, ibs85f0, ibp12s0


def _hosts_text(procs: list[NcclProcess]) -> str:
    hosts = sorted({p.host for p in procs if p.host})
    text = _plural(len(procs), "process")
    return text + (f" on {_plural(len(hosts), 'host')}" if hosts else "")


# --- nccl.socket-transport ----------------------------------------------------------


def _ipoib(procs: list[NcclProcess]) -> list[str]:
    names = [i for p in procs for i in p.socket_ifaces + [p.bootstrap_iface or ""]]
    return sorted({n for n in names if IPOIB_IFACE.match(n)})


def _port_up(port: IbPort) -> bool:
    return port.is_active or (port.state is None
                              and (port.netdev_state or "").lower() == "up")


def _host_rdma(ports: list[IbPort] | None, has_infiniband: bool | None
               ) -> tuple[bool | None, list[IbPort], bool, list[Evidence]]:
    """(host has HCAs? (None: no host source), its active ports, whether port states
    are known, host evidence)."""
    if ports is None:
        return has_infiniband, [], False, []
    if not ports:
        return False, [], True, []
    active = [p for p in ports if _port_up(p)]
    ev = [evidence(p.source, [ln for ln in p.lines if "counters/" not in ln][:3])
          for p in (active or ports)[:2]]
    return True, active, True, ev


# when the host has HCAs and the log shows no reason for the fallback
_UNSEEN_CAUSE = Cause(
    "unknown", "this host's HCAs go unused and the log does not say why",
    "This host has IB/RoCE HCAs, yet NCCL used sockets and the log does not show why (its "
    "NET/IB lines are not in it). Usual causes: the RDMA devices are not exposed to the "
    "container, libibverbs is missing from the image, or NCCL_IB_DISABLE / NCCL_NET are set "
    "in the job.", Action.FIX_CONFIG, Blame.CONFIG, True)


def _socket_severity(has_hcas: bool | None, active: bool, multi_node: bool | None,
                     hint: bool) -> Severity:
    """Critical with unused active HCA ports on a multi-node job; a warning when HCAs or
    hints of RDMA hardware exist; info otherwise."""
    if has_hcas is False:
        return Severity.INFO
    if active and multi_node:
        return Severity.CRITICAL
    return Severity.WARNING if has_hcas or hint else Severity.INFO


def _socket_figures(job: NcclJob, procs: list[NcclProcess],
                    channels: list[tuple[NcclProcess, NcclChannel]], active: int) -> str:
    """``2 processes on 2 hosts; job: 2 nodes (nNodes); interface eth0; ...``."""
    ifaces = sorted({i for p in procs for i in p.socket_ifaces})
    figures = [_hosts_text(procs)]
    if job.nodes_basis:
        figures.append("job: " + job.describe_nodes())
    if ifaces:
        figures.append("interface " + ", ".join(ifaces[:4]))
    if channels:
        figures.append(_plural(len(channels), "NET/Socket channel"))
    if active:
        figures.append(f"{_plural(active, 'active HCA port')} on this host unused")
    return "; ".join(figures)


def _socket_verdict(lead: str, figures: str, cause: Cause | None,
                    expected: bool) -> tuple[str, str, Action, Blame]:
    """(title, explanation, action, blame): sockets expected on this network, sockets
    for no reason the log shows, or sockets for ``cause``."""
    if expected:
        why = ((cause.why + " ") if cause else "This host has no IB/RoCE HCA. ") + (
            "Inter-node bandwidth is limited to what TCP over these interfaces gives, far "
            "below IB/RoCE rates. For faster multi-node jobs use RDMA-capable nodes or a "
            "cloud's own GPU network plugin (e.g. TCPX/TCPXO on GKE, EFA on AWS).")
        return (f"{lead} ({figures}): expected on this network; inter-node bandwidth is "
                "limited to TCP", why, Action.NONE, Blame.UNKNOWN)
    if cause is None:
        why = ("NCCL used TCP sockets and the log holds none of the lines that say why "
               "(NET/IB, NET/Plugin, environment echoes: log with "
               "NCCL_DEBUG_SUBSYS=INIT,ENV,NET). On a network without RDMA NICs this is "
               "expected. If the nodes have IB/RoCE HCAs, the usual causes are RDMA devices "
               "not exposed to the container, libibverbs missing from the image, or "
               "NCCL_IB_DISABLE / NCCL_NET set in the job.")
        return (f"{lead} ({figures}); the log does not show why", why, Action.NONE,
                Blame.UNKNOWN)
    why = cause.why + (" Over sockets, inter-node collectives run at TCP speed and without "
                       "GPUDirect RDMA: all-reduce across nodes falls well below the "
                       "single-node rate, often to half or less.")
    return f"{lead}: {cause.title} ({figures})", why, cause.action, cause.blame


def _socket_context(job: NcclJob, ipoib: list[str], ports_inactive: bool,
                    others: list[Cause]) -> str:
    """What else the explanation says: IPoIB underneath, inactive HCA ports, an unknown
    node count, the other causes seen, and processes on other networks."""
    why = ""
    if ipoib:
        why += (f" The socket interfaces {', '.join(ipoib)} are IPoIB interfaces, so "
                "InfiniBand is there: NCCL is running TCP over it instead of RDMA.")
    if ports_inactive:
        why += " This host's HCA ports are not active: see ib.port-not-active."
    if job.multi_node is None:
        why += (" The log does not show how many nodes the job spans; on a single node "
                "the socket network carries nothing.")
    if others:
        why += " Also seen: " + "; ".join(c.title for c in others) + "."
    mixed = {k: v for k, v in job.networks.items() if k != "Socket"}
    if mixed:
        why += (" Other processes use " + ", ".join(
            f"{k} ({_hosts_text(v)})" for k, v in sorted(mixed.items())) +
            ": ranks that disagree on the network cannot connect, or connect slowly.")
    return why


def _socket_lines(job: NcclJob, procs: list[NcclProcess], cause: Cause | None,
                  others: list[Cause], channels: list[tuple[NcclProcess, NcclChannel]],
                  text: NcclLogText) -> list[str]:
    """The causes' lines, NCCL's choice of the socket network, the node count's line and
    a few socket channels."""
    lines = list(cause.lines if cause else [])
    for c in others:
        lines += c.lines[:1]
    lines += text.quote("Using network Socket", [], 1)
    lines += text.quote("NET/Socket : Using", [
        f"{p.label}: NET/Socket : Using {', '.join(p.socket_ifaces)}" for p in procs
        if p.socket_ifaces], 1)
    if job.nodes_line:
        lines.append(job.nodes_line)
    return lines + [c.line for _, c in channels[:3]]


def _socket_procs(job: NcclJob) -> list[NcclProcess]:
    """The processes on TCP sockets, unless their network carries nothing between nodes:
    a single-node job, or one that pushed its own intra-node traffic onto the network
    (that is nccl.p2p-disabled)."""
    if job.multi_node is False:
        return []
    if len(job.hosts) <= 1 and {"p2p", "shm"} <= set(disabled_paths(job)):
        return []
    return [p for p in job.log.processes if on_sockets(p)]


@rule("nccl.socket-transport", produces=("nccl.socket-transport",))
def socket_transport(nccl_job: NcclJob, nccl_log_text: NcclLogText,
                     ib_ports: list[IbPort] | None = None,
                     has_infiniband: bool | None = None) -> Iterator[Finding]:
    """NCCL moves inter-node traffic over TCP sockets (NET/Socket) instead of IB/RoCE.

    Severity follows the evidence that RDMA hardware exists: active HCA ports on
    this host (critical on a multi-node job), hints in the log (NCCL_IB_DISABLE,
    a missing libibverbs, the OFI plugin without EFA, IPoIB interface names:
    warning), nothing (info: expected on plain Ethernet). A single-node job never
    fires: its socket network carries nothing."""
    job = nccl_job
    procs = _socket_procs(job)
    if not procs:
        return
    has_hcas, active, states_known, host_ev = _host_rdma(ib_ports, has_infiniband)
    causes = socket_causes(procs, bool(has_hcas), nccl_log_text)
    ipoib = _ipoib(procs)
    hint = bool(ipoib) or any(c.hint for c in causes)
    if job.multi_node is None and not (hint or has_hcas):
        return  # one host, node count unknown, nothing wrong in sight
    severity = _socket_severity(has_hcas, bool(active), job.multi_node, hint)
    channels = [(p, c) for p, c in job.net_channels if c.family == NET_SOCKET]
    lead = "Inter-node traffic runs over TCP sockets" if job.multi_node \
        else "NCCL chose TCP sockets for its network"
    cause = causes[0] if causes else (_UNSEEN_CAUSE if has_hcas else None)
    expected = severity is Severity.INFO and (
        has_hcas is False or (cause is not None and cause.key == "no-device"))
    title, why, action, blame = _socket_verdict(
        lead, _socket_figures(job, procs, channels, len(active)), cause, expected)
    others = [c for c in causes if cause is None or c.key != cause.key]
    why += _socket_context(job, ipoib, bool(has_hcas and states_known and not active), others)
    lines = _socket_lines(job, procs, cause, others, channels, nccl_log_text)
    yield finding("nccl.socket-transport", severity, title, why, action, blame,
                  evidence=[evidence(SRC, lines)] + host_ev)


# --- nccl.socket-iface-virtual -------------------------------------------------------


def _virtual_ifaces(job: NcclJob) -> dict[str, list[tuple[NcclProcess, str]]]:
    """Virtual interface name -> [(process, role)]: bootstrap, out-of-band, NET/Socket."""
    found: dict[str, list[tuple[NcclProcess, str]]] = {}
    for p in job.log.processes:
        uses = [("bootstrap", p.bootstrap_iface), ("out-of-band (IB setup)", p.oob_iface)]
        if process_network(p) == "Socket":
            uses += [("NET/Socket data", i) for i in p.socket_ifaces]
        for role, name in uses:
            if name and is_virtual_interface(name):
                found.setdefault(name, []).append((p, role))
    return found


@rule("nccl.socket-iface-virtual", produces=("nccl.socket-iface-virtual",))
def socket_iface_virtual(nccl_job: NcclJob, nccl_log_text: NcclLogText) -> Iterator[Finding]:
    """NCCL's bootstrap, out-of-band or NET/Socket interface is loopback, a bridge,
    a container/overlay network, a tunnel or a VPN: traffic between nodes goes
    through it (slow, or unreachable from the other nodes). A warning on a
    multi-node job; info when the log does not show more than one node."""
    job = nccl_job
    found = _virtual_ifaces(job)
    if not found:
        return
    procs = sorted({p.label for v in found.values() for p, _ in v})
    setters = [p for v in found.values() for p, _ in v if env_value(p, "NCCL_SOCKET_IFNAME")]
    roles = {name: sorted({r for _, r in v}) for name, v in found.items()}
    names = ", ".join(f"{n} ({'/'.join(r)})" for n, r in sorted(roles.items()))
    title = f"NCCL uses virtual interface(s) {names} ({_plural(len(procs), 'process')})"
    why = ("These interfaces are loopback, bridges, container or overlay networks, tunnels "
           "or VPNs, not the data network: connections between nodes either fail (loopback, "
           "a bridge private to the host) or crawl through an extra hop.")
    if setters:
        value = env_value(setters[0], "NCCL_SOCKET_IFNAME")
        why += f" The job set NCCL_SOCKET_IFNAME={value}: point it at the data interface."
        blame = Blame.JOB_CONFIG
    else:
        why += (" NCCL picked them itself: set NCCL_SOCKET_IFNAME to the data interface "
                "(e.g. the IPoIB or the high-speed Ethernet interface), or exclude these "
                "with a '^' list.")
        blame = Blame.CONFIG
    if job.multi_node:
        severity = Severity.WARNING
    elif job.multi_node is None:
        severity = Severity.INFO
        why += (" The log does not show whether the job spans nodes; on one node this does "
                "not matter yet, across nodes it does.")
    else:
        severity = Severity.INFO
        why += " This job runs on one node, where it does not matter yet."
    lines = nccl_log_text.quote("NCCL_SOCKET_IFNAME set by environment", [], 1)
    for name in roles:
        lines += raw_iface_lines(nccl_log_text, name, found[name])
    yield finding("nccl.socket-iface-virtual", severity, title, why, Action.FIX_CONFIG,
                  blame, evidence=[evidence(SRC, lines)])


def raw_iface_lines(text: NcclLogText, name: str,
                    uses: list[tuple[NcclProcess, str]]) -> list[str]:
    """Log lines that name interface ``name`` (bootstrap, OOB or NET/Socket lines)."""
    p, role = uses[0]
    found = text.find(f"]{name}:", 2) + text.find(f"Using {name}:", 1)
    return found or [f"{p.label}: {role} interface {name}"]


# --- nccl.node-split -----------------------------------------------------------------

Members = list[tuple[NcclProcess, NcclComm]]  # the records of one communicator


@rule("nccl.node-split", produces=("nccl.node-split",))
def node_split(nccl_job: NcclJob,
               visible_gpus: tuple[str, list[GpuSighting]] | None = None,
               host_name: str | None = None) -> Iterator[Finding]:
    """NCCL counts more nodes than the job has hosts: it treats groups of one
    host's GPUs (NVLink islands, rails it cannot join) as separate nodes, so
    same-host traffic goes over the network and rings cross rails (a hang on
    rail-isolated fabrics). Warning when proven (all ranks logged on fewer hosts,
    or more ranks of one host than localRanks); info when only the arithmetic of
    a comm line hints at it."""
    job = nccl_job
    groups: dict[object, Members] = {}
    for p, c in job.comms():
        if c.nnodes and c.nnodes > 1 and c.local_ranks and c.nranks:
            key = c.comm_id or (c.nranks, c.nnodes, c.local_ranks)
            groups.setdefault(key, []).append((p, c))
    host_gpus = _host_gpu_count(visible_gpus, host_name, job)
    seen: set[tuple[int | None, int | None, int | None]] = set()
    for members in groups.values():
        c0 = members[0][1]
        shape = (c0.nranks, c0.nnodes, c0.local_ranks)
        if shape in seen:
            continue
        seen.add(shape)
        yield from _split_finding(members, host_gpus)


def _host_gpu_count(visible: tuple[str, list[GpuSighting]] | None, name: str | None,
                    job: NcclJob) -> tuple[int, str] | None:
    """(GPUs on this host, source) when the log's host is this host."""
    if not visible or not visible[1]:
        return None
    if name and name not in job.hosts and len(job.hosts) > 0:
        return None
    if not name and len(job.hosts) > 1:
        return None
    return len(visible[1]), visible[0]


def _split_proofs(members: Members) -> tuple[list[str], bool]:
    """(proofs that NCCL split hosts into nodes, whether the log verifies its count)."""
    c0 = members[0][1]
    nranks, nnodes, local = c0.nranks or 0, c0.nnodes or 0, c0.local_ranks or 0
    ranks = {c.rank for _, c in members if c.rank is not None}
    hosts = sorted({p.host for p, _ in members if p.host})
    per_host: dict[str, set[int]] = {}
    for p, c in members:
        if p.host and c.rank is not None:
            per_host.setdefault(p.host, set()).add(c.rank)
    proofs = []
    complete = nranks <= len(ranks) and ranks.issuperset(range(nranks))
    if complete and hosts and len(hosts) < nnodes:
        proofs.append(f"all {nranks} ranks are in the log and run on "
                      f"{_plural(len(hosts), 'host')}, not {nnodes}")
    crowded = {h: r for h, r in per_host.items() if len(r) > local}
    for h, r in sorted(crowded.items()):
        proofs.append(f"{h} runs {len(r)} ranks of this communicator, more than "
                      f"localRanks {local}")
    return proofs, complete and len(hosts) == nnodes and not crowded


_SPLIT_FIX = (
    "Check: NCCL_NET_DISABLE_INTRA=1 keeps traffic between GPUs of one host off the "
    "network; on rail-isolated fabrics route between the rails or align NCCL_IB_HCA per "
    "rank so that each rank talks on its own rail (NCCL_CROSS_NIC=0).")


def _split_finding(members: Members, host_gpus: tuple[int, str] | None) -> Iterator[Finding]:
    """A proven split (warning), or one the comm line's arithmetic suggests (info)."""
    c0 = members[0][1]
    nnodes, local = c0.nnodes, c0.local_ranks or 0
    proofs, verified = _split_proofs(members)
    notes = []
    if host_gpus and host_gpus[0] > local:
        notes.append(f"this host has {host_gpus[0]} GPUs ({host_gpus[1]}) while NCCL counts "
                     f"{local} per node")
    if not proofs and (verified or (not notes and local not in (2, 3))):
        return
    arithmetic = f"{c0.nranks} ranks as {nnodes} nodes of {local}"
    ev = [evidence(SRC, [c.line for _, c in members[:2]])]
    if proofs:
        yield _split_proven(arithmetic, proofs, notes, ev)
        return
    why = (f"The communicator counts {nnodes} nodes with {local} local rank(s) each. If the "
           f"job runs on {nnodes} hosts with {local} GPU(s) each, that is right. If it runs on "
           "fewer hosts (for example two hosts with twice as many GPUs), NCCL is treating "
           "groups of a host's GPUs (NVLink islands, separate rails) as separate nodes, "
           "sending same-host traffic over the network and crossing rails, which hangs on "
           "rail-isolated fabrics. " + _SPLIT_FIX)
    if notes:
        why += " Note: " + "; ".join(notes) + "."
    yield finding("nccl.node-split", Severity.INFO,
                  f"NCCL sees {arithmetic}: check that the job really runs on {nnodes} hosts",
                  why, Action.NONE, Blame.UNKNOWN, evidence=ev)


def _split_proven(arithmetic: str, proofs: list[str], notes: list[str],
                  ev: list[Evidence]) -> Finding:
    why = ("NCCL believes some GPUs of one host are on different nodes (NVLink islands "
           "it cannot join, or rails it cannot reach from every GPU), so traffic between "
           "them goes over the network and rings cross from one rail to another; on "
           "fabrics whose rails are not routed to each other those connections hang, "
           "elsewhere they are slow. " + _SPLIT_FIX)
    if len(proofs) > 1 or notes:
        why += " Also: " + "; ".join(proofs[1:] + notes) + "."
    return finding("nccl.node-split", Severity.WARNING,
                   f"NCCL splits hosts into several nodes: {arithmetic}, but {proofs[0]}",
                   why, Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)


# --- nccl.p2p-disabled ---------------------------------------------------------------


def disabled_paths(job: NcclJob) -> dict[str, tuple[NcclProcess, str]]:
    """Intra-node paths the job's environment turns off: ``p2p`` / ``shm`` -> (a process
    that says so, the setting)."""
    out: dict[str, tuple[NcclProcess, str]] = {}
    for p in job.log.processes:
        disable = env_value(p, "NCCL_P2P_DISABLE")
        level = (env_value(p, "NCCL_P2P_LEVEL") or "").upper()
        shm = env_value(p, "NCCL_SHM_DISABLE")
        if disable not in (None, "", "0"):
            out.setdefault("p2p", (p, f"NCCL_P2P_DISABLE={disable}"))
        elif level in ("LOC", "0"):
            out.setdefault("p2p", (p, f"NCCL_P2P_LEVEL={level}"))
        if shm not in (None, "", "0"):
            out.setdefault("shm", (p, f"NCCL_SHM_DISABLE={shm}"))
    return out


@rule("nccl.p2p-disabled", produces=("nccl.p2p-disabled",))
def p2p_disabled(nccl_job: NcclJob, nccl_log_text: NcclLogText) -> Iterator[Finding]:
    """The job's environment turns GPU peer-to-peer and/or shared memory off
    (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL=LOC, NCCL_SHM_DISABLE): intra-node traffic then
    goes through host memory or, with both off, through the network (NET/Socket or IB
    loopback). Blamed on the job's configuration. Left to nccl.shm-transport when that
    finding already names the setting (SHM channels with P2P disabled)."""
    job = nccl_job
    off = disabled_paths(job)
    if not off:
        return
    if "shm" not in off and any(c.family == SHM for p in job.log.processes
                                for c in p.channels):
        return  # nccl.shm-transport tells it with the channels
    settings = [setting for _, setting in off.values()]
    nets = [(p, c) for p, c in job.net_channels if c.family in (NET_SOCKET, NET_IB)]
    if len(off) == 2:
        path = ("through the network transport" + (" (NET/Socket)" if any(
            c.family == NET_SOCKET for _, c in nets) else "")
                + ": every transfer between GPUs of one node leaves through a NIC or TCP")
    elif "p2p" in off:
        path = "through host shared memory (SHM) instead of NVLink / PCIe peer-to-peer"
    else:
        path = ("without host shared memory: pairs with no P2P path fall back to the "
                "network transport")
    why = (f"The job sets {' and '.join(settings)}, so NCCL moves intra-node traffic {path}. "
           "That is a debugging setting, far slower than NVLink or PCIe P2P: drop these "
           "variables for real runs unless they work around a known P2P problem of this "
           "platform.")
    if len(off) == 2 and len(job.hosts) <= 1:
        why += (" On one node the socket/IB network it ends up on is this setting's doing, "
                "not a missing RDMA stack.")
    lines = [ln for key in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE")
             for ln in nccl_log_text.quote(f"{key} set by environment", [], 1)]
    lines += [c.line for _, c in nets[:2]]
    yield finding("nccl.p2p-disabled", Severity.WARNING,
                  f"{' and '.join(settings)} set by the job: intra-node traffic avoids "
                  "GPU peer-to-peer", why, Action.FIX_CONFIG, Blame.JOB_CONFIG,
                  evidence=[evidence(SRC, lines or [f"{p.label}: {s}" for p, s in
                                                    off.values()])])


# --- data paths (built in nccl_transport_paths) -------------------------------------


@rule("nccl.gdr-disabled", produces=("nccl.gdr-disabled",))
def gdr_disabled(nccl_job: NcclJob, nccl_log_text: NcclLogText,
                 modules: dict[str, Module] | None = None,
                 gpu_nic_map: list[GpuPlacement] | None = None,
                 topology: TopoMatrix | None = None, pci: list[PciFunction] | None = None,
                 ib_ports: list[IbPort] | None = None) -> Iterator[Finding]:
    """Network channels without GPUDirect RDMA: transfers are staged through host
    memory. Three causes: the HCA is too far from the GPU (NCCL's distance
    exceeds its GDR limit); some channels have GDR and others not (a far NIC);
    no GDR support at all (nvidia_peermem not loaded, no DMA-BUF). NET/Socket's
    own "GDR disabled" lines are normal and ignored, and so are [send] channels
    without /GDRDMA next to receives with it (GDR read off, NCCL's default on
    PCIe platforms before Ampere).

    Everything is blamed on CONFIG, not NODE: nothing on the node is broken. A
    distance is how the platform is laid out and which HCA each GPU is given
    (fix: NCCL_IB_HCA, rail alignment, NCCL_NET_GDR_LEVEL where the platform
    allows); a missing nvidia_peermem is the host's setup (FIX_CONFIG, as
    module.peermem-missing says)."""
    host = paths.HostLayout(gpu_nic_map or [], topology, pci or [], ib_ports or [])
    yield from paths.gdr_findings(nccl_job, nccl_log_text, modules, host)


@rule("nccl.shm-transport", produces=("nccl.shm-transport",))
def shm_transport(nccl_job: NcclJob, nccl_log_text: NcclLogText,
                  topology: TopoMatrix | None = None) -> Iterator[Finding]:
    """Intra-node channels through host shared memory (SHM) where GPU peer-to-peer
    should carry them: P2P disabled by the job (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL),
    NVLink present between the pair yet SHM used (P2P failing in the container),
    or a topology where only some pairs have NVLink/P2P (the SHM hops pace every
    ring through them)."""
    yield from paths.shm_findings(nccl_job, nccl_log_text, topology)
