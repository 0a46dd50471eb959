"""What an IB completion error asks the on-call to do: the fabric it ran over (RoCE
or InfiniBand), the host facts that bear on it, and the action and blame per
``ibv_wc_status``. Used by rule ``nccl.ib-completion-error`` in
:mod:`gputriage.rules.nccl_errors`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gputriage.knowledge.ib_status import ib_wc_points_at
from gputriage.model import Action, Blame, Evidence, evidence
from gputriage.rules.modules import PEERMEM_MODULES, loaded_line

if TYPE_CHECKING:
    from gputriage.parsers.hostcfg import KernelCmdline
    from gputriage.parsers.infiniband import IbPort
    from gputriage.parsers.modules import Module
    from gputriage.rules.nccl_completions import Completion

__all__ = ["HostRdma", "advice", "cloud_vm", "roce_path"]


@dataclass(frozen=True)
class HostRdma:
    """This host's facts that bear on an IB completion error (empty or None: absent)."""

    ib_ports: list[IbPort]
    modules: dict[str, Module] | None = None
    cmdline: KernelCmdline | None = None

_GID = re.compile(r"(?:localGid|remoteGids?)\s*([0-9a-fA-F:.]+)")


def roce_path(comps: list[Completion], ib_ports: list[IbPort] | None) -> bool | None:
    """Whether the errors ran over RoCE (True) or InfiniBand (False); None: cannot tell.
    RoCE GIDs are made from IP addresses (``::ffff:10.0.0.1``, a global IPv6 address);
    InfiniBand GIDs start with the subnet prefix, ``fe80::`` unless the site changed it."""
    devs = [d for c in comps for d in c.proc.ib_devices]
    gids = [g.lower() for c in comps for g in _GID.findall(c.warn.line)]
    if any("/RoCE" in d for d in devs) or any("::ffff:" in g for g in gids):
        return True
    if any(d.endswith("/IB") or "/IB/" in d for d in devs) or \
            any("%ib" in (c.peer or "") for c in comps):  # peer address on an IPoIB interface
        return False
    if gids and not any(g.startswith("fe80:") for g in gids):
        return True
    layers = {(p.link_layer or "").lower() for p in ib_ports or []}
    if layers in ({"ethernet"}, {"infiniband"}):
        return layers == {"ethernet"}
    return None


# Hyper-V names a VM's passed-through (SR-IOV) RDMA and Ethernet interfaces after their
# virtual PCI slot: ibP111p0s0, rdmaP1111p0s2, enP30832s1 (Azure's InfiniBand VMs)
_HYPERV = re.compile(r"^(?:ib|rdma|en|eth)P[0-9]{1,5}(?:p[0-9]{1,3})?s[0-9]{1,3}\b")


def cloud_vm(comps: list[Completion]) -> str | None:
    """The interface that shows the ranks run in Azure (Hyper-V) VMs, else None."""
    for c in comps:
        for name in [*c.proc.ib_devices, *c.proc.net_devices, c.proc.oob_iface or ""]:
            if _HYPERV.match(name):
                return name.split(":", 1)[0]
    return None


def _gdr_hints(host: HostRdma, comps: list[Completion]) -> tuple[list[str], list[Evidence]]:
    """What this host's facts and the log say about GPUDirect memory registration."""
    hints: list[str] = []
    ev: list[Evidence] = []
    mods = host.modules
    if mods is not None:
        peer = loaded_line(mods, PEERMEM_MODULES)
        if peer is None:
            hints.append("nvidia_peermem is not loaded on this host")
            ev.append(evidence("proc_modules", [], "no nvidia_peermem / nv_peer_mem loaded"))
        else:
            ev.append(evidence("proc_modules", [peer], "peer-memory module loaded"))
    if any(c.proc.dmabuf for c in comps):
        hints.append("the log shows DMA-BUF in use")
    cmd = host.cmdline
    if cmd is not None:
        from gputriage.rules.hostcfg import iommu_state

        on, pt = iommu_state(cmd)
        if on and not pt:
            hints.append("the IOMMU translates DMA (no iommu=pt on the kernel command line)")
            ev.append(evidence("host_cmdline", [cmd.text.strip()], "IOMMU on without pt"))
    return hints, ev


def _fabric(roce: bool | None) -> str:
    if roce:
        return "the RoCE path (switch port, cable, PFC/ECN settings of the lossless traffic class)"
    if roce is False:
        return "the InfiniBand path (cable, transceiver, switch port)"
    return "the IB/RoCE path (cable, transceiver, switch port; on RoCE also PFC/ECN)"


def _retry_advice(roce: bool | None, host: HostRdma,
                  comps: list[Completion]) -> tuple[Action, Blame, str, str, list[Evidence]]:
    """Retry exceeded (12): a dead peer and a broken path look the same from this side.
    The node is blamed only where the errors point at it: this host's own HCA port is
    down, or one host lost several different peers at once."""
    fabric = _fabric(roce)
    context = "The HCA retried a send until the retry counter ran out: the peer did not answer."
    hosts = {c.proc.host or "(no host prefix)" for c in comps}
    peers = sorted({c.peer for c in comps if c.peer})
    down = [p for p in host.ib_ports if p.is_down]
    if down:
        keys = ", ".join(p.key for p in down[:4])
        return (Action.DRAIN_AND_REPAIR, Blame.NODE, context,
                f"This host's HCA port(s) {keys} are not active (see ib.port-not-active): its "
                f"own link is the suspect. Drain the node and repair {fabric}.",
                [evidence(p.source, p.lines[:3]) for p in down[:2]])
    if len(hosts) == 1 and len(peers) > 1:
        return (Action.DRAIN_AND_REPAIR, Blame.NODE, context,
                f"One host lost {len(peers)} different peers, so the element they share is "
                f"this host's HCA and its link: check {fabric} on this host and its port "
                "counters (link_downed, symbol errors); drain it if they confirm.", [])
    todo = ("A dead peer and a broken path look the same from this side: first check whether "
            "that peer's process or node died before this error (its log, its kernel log). "
            f"If it was alive, the fault is {fabric} between the two HCAs: read the port "
            "counters (link_downed, symbol errors) on both ends and the switch ports. If the "
            "same host or peer fails again, drain it.")
    if len(hosts) > 1 and len(peers) == 1:
        todo = (f"Every host lost the same peer {peers[0]}: that node, its process or its link "
                f"failed first. Look at its log and its HCA port, and at {fabric} towards it.")
    vm = cloud_vm(comps)
    if vm is not None and len(peers) <= 1:
        return (Action.FIX_CONFIG, Blame.CONFIG, context,
                f"These ranks run in Azure (Hyper-V) VMs (the interface {vm} carries a "
                "Hyper-V name): InfiniBand connects only VMs provisioned together, in one VM "
                "scale set, availability set or cluster (one IB partition). VMs created "
                "apart reach each other over Ethernet while their InfiniBand traffic is "
                "dropped, which looks exactly like this. If the peer's process was alive, "
                "check that both VMs belong to one scale set (and share the partition key: "
                "cat /sys/class/infiniband/*/ports/1/pkeys/0) and recreate them together if "
                "not. Not a GPU or HCA fault.", [])
    return Action.RESTART_JOB, Blame.NODE, context, todo, []


def advice(status: int, roce: bool | None, host: HostRdma,
            comps: list[Completion]) -> tuple[Action, Blame, str, str, list[Evidence]]:
    """(action, blame, what the status means when the table has no wording, what to do,
    host evidence) for a root-cause completion status."""
    if status == 12:
        return _retry_advice(roce, host, comps)
    if status in (4, 10):
        hints, ev = _gdr_hints(host, comps)
        side = "local" if status == 4 else "remote"
        todo = ("Disable ACS on the PCIe switches, use iommu=pt, and check nvidia-peermem "
                "(or DMA-BUF: NCCL_DMABUF_ENABLE) on every node.")
        if hints:
            todo += " Here: " + "; ".join(hints) + "."
        return (Action.FIX_CONFIG, Blame.CONFIG,
                f"The HCA was refused access to {side} memory: with GPUDirect RDMA, GPU memory "
                "the NIC cannot reach (PCIe ACS or the IOMMU blocking peer-to-peer, or a "
                "broken nvidia-peermem / DMA-BUF registration).", todo, ev)
    points = ib_wc_points_at(status)
    peer = _peer_named(comps)
    if status == 13 or points == "peer":
        return (Action.RESTART_JOB, Blame.NODE,
                "The peer could not complete the operation (its process or its HCA).",
                f"Look at {peer}'s own log and kernel log first (a rank that crashed or "
                "stalled, an HCA error there); this host is not the suspect on its own. "
                "Resubmit the job, without that node if it fails again.", [])
    if points == "path":
        return (Action.RESTART_JOB, Blame.NODE, "The request got no valid answer over the fabric.",
                f"Check the link and the switch ports between this HCA and {peer}, and "
                "whether the peer was alive; resubmit the job, without that node if it "
                "fails again.", [])
    if points == "local-hca":
        return (Action.RESTART_JOB, Blame.NODE, "This side's adapter reported the error.",
                "Look at this host's kernel log (mlx5 errors) and the HCA port state; if "
                "the adapter keeps failing, drain the node and repair it.", [])
    return (Action.RESTART_JOB, Blame.UNKNOWN, "The communicator failed on this error.",
            "The remaining ranks abort or hang; look at the HCA ports and the peer's log.", [])


def _peer_named(comps: list[Completion]) -> str:
    """The peer the errors name, in words (``peer 10.0.0.7``, ``the peer``)."""
    peers = sorted({c.peer for c in comps if c.peer})
    if len(peers) == 1:
        return f"peer {peers[0]}"
    return f"the peers ({', '.join(peers[:3])})" if peers else "the peer"
