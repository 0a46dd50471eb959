"""Why NCCL ended up on TCP sockets: the causes a log (and the host) can show,
each with its wording, action and blame, for rule ``nccl.socket-transport`` in
:mod:`gputriage.rules.nccl_transport`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gputriage.facts.nccl import NcclLogText, env_value
from gputriage.model import Action, Blame

if TYPE_CHECKING:
    from gputriage.parsers.nccl_model import NcclProcess

__all__ = ["Cause", "socket_causes"]


@dataclass
class Cause:
    """One reason for the socket fallback and what to do about it."""

    key: str
    title: str  # the title's reason part
    why: str
    action: Action
    blame: Blame
    hint: bool  # whether this cause itself suggests RDMA hardware exists
    lines: list[str] = field(default_factory=list)


def socket_causes(procs: list[NcclProcess], host_hcas: bool, text: NcclLogText) -> list[Cause]:
    """Why NCCL ended up on sockets, most specific first (``text`` quotes the lines)."""
    out: list[Cause] = []

    def first(pred: Callable[[NcclProcess], object]) -> NcclProcess | None:
        return next((p for p in procs if pred(p)), None)

    p = first(lambda p: (env_value(p, "NCCL_NET") or "").lower() == "socket")
    if p:
        out.append(Cause(
            "net-forced", "NCCL_NET=Socket set by the environment",
            "The job forces the socket transport with NCCL_NET=Socket, so NCCL never tries "
            "the IB/RoCE verbs transport or a net plugin. Remove it from the job's "
            "environment.", Action.FIX_CONFIG, Blame.JOB_CONFIG, True,
            text.quote("NCCL_NET set by environment", [f"{p.label}: NCCL_NET=Socket"])))
    p = first(lambda p: (env_value(p, "NCCL_IB_DISABLE") or "0") not in ("0", ""))
    if p:
        out.append(Cause(
            "ib-disabled", f"NCCL_IB_DISABLE={env_value(p, 'NCCL_IB_DISABLE')} set by the "
            "environment",
            "The job's environment disables NCCL's IB/RoCE verbs transport "
            "(NCCL_IB_DISABLE), so NCCL falls back to TCP sockets even where HCAs exist. "
            "Unset it (or set it to 0) to get NET/IB with GPUDirect RDMA.",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, True,
            text.quote("NCCL_IB_DISABLE set by environment",
                       [f"{p.label}: NCCL_IB_DISABLE={env_value(p, 'NCCL_IB_DISABLE')}"])))
    p = first(lambda p: p.ibverbs_missing)
    if p:
        out.append(Cause(
            "no-verbs", "libibverbs could not be loaded",
            "NCCL could not load libibverbs.so, so it could not even look for IB/RoCE "
            "devices and used TCP sockets. The job's image lacks the RDMA user-space "
            "libraries: install rdma-core (or MOFED/DOCA user space) in the image if the "
            "nodes have IB/RoCE HCAs; on plain Ethernet nodes sockets are expected.",
            Action.FIX_SOFTWARE, Blame.JOB, True,
            text.quote("Failed to open libibverbs", [f"{p.label}: Failed to open libibverbs.so"])))
    p = first(lambda p: p.ib_no_device and env_value(p, "NCCL_IB_HCA"))
    if p:
        value = env_value(p, "NCCL_IB_HCA")
        out.append(Cause(
            "hca-filter", f"NCCL_IB_HCA={value} matched no usable device",
            f"The job restricts NCCL to HCAs matching NCCL_IB_HCA={value} and NCCL found "
            "none: the names do not exist in this container or their ports are down. Fix the "
            "list (prefix match; '=' for exact names) or unset it.",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, True,
            text.quote("NCCL_IB_HCA set by environment", [f"{p.label}: NCCL_IB_HCA={value}"])
            + text.quote("No device found", [f"{p.label}: NET/IB : No device found."], 1)))
    ofi = [(p, w) for p in procs for w in p.warns if "OFI" in w.message]
    if ofi:
        p, w = ofi[0]
        out.append(Cause(
            "ofi", "the OFI (libfabric) plugin found no usable provider",
            f"The aws-ofi-nccl plugin is installed but gave up ('{w.message.strip()}'): the "
            "instance has no EFA device, EFA is not attached or enabled, or the device is "
            "not passed into the container. NCCL then falls back to TCP sockets. Use "
            "EFA-enabled instances (and security group rules that allow EFA traffic) or "
            "expect low inter-node bandwidth.", Action.FIX_CONFIG, Blame.CONFIG, True,
            [w.line for _, w in ofi[:2]]))
    p = first(lambda p: p.net_plugin and not any(c.key == "ofi" for c in out))
    if p:
        out.append(Cause(
            "plugin", f"the net plugin {p.net_plugin} found no device",
            f"A net plugin ({p.net_plugin}) was loaded but NCCL still chose sockets: the "
            "plugin found no device it can drive. Check that the plugin matches the "
            "network and that its devices are visible in the container.",
            Action.FIX_CONFIG, Blame.CONFIG, True,
            text.quote("NET/Plugin", [f"{p.label}: net plugin {p.net_plugin}"], 2)))
    p = first(lambda p: p.ib_no_device)
    if p:
        lines = text.quote("No device found", [f"{p.label}: NET/IB : No device found."], 2)
        out.append(Cause(
            "not-exposed", "NET/IB found no device although this host has HCAs",
            "NCCL looked for IB/RoCE devices and found none, yet this host has HCAs: the "
            "RDMA devices are not exposed to the job's container (/dev/infiniband not "
            "mounted, no RDMA device plugin or shared-device resource requested, missing "
            "IPC_LOCK / memlock limits). Expose them and NCCL will use NET/IB.",
            Action.FIX_CONFIG, Blame.CONFIG, True, lines) if host_hcas else Cause(
            "no-device", "no IB/RoCE device was found",
            "NCCL looked for IB/RoCE devices and found none, so it used TCP sockets. On a "
            "network without RDMA NICs (plain Ethernet, gVNIC, ENA) this is expected; if "
            "the nodes do have HCAs, they are not visible inside the job's container.",
            Action.NONE, Blame.UNKNOWN, False, lines))
    return out
