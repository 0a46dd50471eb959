"""The PCIe path of each GPU and NIC, hop by hop: a link between two PCIe ports that
trained below what both its ends support.

Each link trains to the highest speed and width both ends support, so a link below
the lower of its two ends' capabilities is "downtrained" (the Linux PCI core's word for
it): a riser, cable, retimer or connector on that hop, or a port that failed to
equalise. A link at its weaker end's capability is correct however slow (a Gen5 NIC
behind a Gen4 root port runs at Gen4). One downtrained switch uplink slows every GPU
and NIC below it: it is one finding naming the hop, with what sits below it as its
blast radius; the devices' own link findings fold under it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from gputriage.facts.pcie import IDLE_GTS, PcieLink
from gputriage.facts.pcie_path import Hop, PciePaths
from gputriage.model import Action, Blame, Evidence, Finding, Scope, Severity, evidence, gpu_scope
from gputriage.rules.base import action_for, finding, rule

#: the hop carries this share of what both ends support, or less: the devices below are
#: starved (a Gen5 x16 uplink at Gen1, or at x2), not merely slowed
SEVERE_SHARE = 1 / 8
SEVERE_WIDTH_SHARE = 1 / 4  # the width rule's own threshold (x4 of x16)
REFERENCES = (
    "Linux PCI core, 'PCI: Check for PCIe Link downtraining' (commit 2d1ce5ec2117): a link "
    "is downtrained when both its ends can do more than it runs at",
    "NVIDIA DCGM, NVSwitch and ConnectX module: whether an adapter operates at its "
    "expected PCIe width and speed",
)


def _gts(v: float | None) -> str:
    return f"{v:g} GT/s" if v is not None else "? GT/s"


def _state(gts: float | None, width: int | None) -> str:
    return f"{_gts(gts)} x{width if width is not None else '?'}"


def device_scope(link: PcieLink) -> Scope:
    """The scope a GPU's or NIC's own findings carry."""
    if link.kind == "gpu":
        return gpu_scope(link.bus_id or None, link.index, link.uuid)
    return Scope(kind="nic", pci_bus_id=link.bus_id, name=link.bus_id)


def _share(hop: Hop) -> float:
    """The share of what both ends support that the link carries."""
    share = 1.0
    if hop.slow and hop.cur_gts and hop.cap_gts:
        share *= hop.cur_gts / hop.cap_gts
    if hop.narrow and hop.cur_width and hop.cap_width:
        share *= hop.cur_width / hop.cap_width
    return share


def _evidence(hop: Hop) -> list[Evidence]:
    out: list[Evidence] = []
    for end in (hop.upper, hop.lower):
        if end.source and end.lines:
            out.append(evidence(end.source, list(end.lines)))
    if hop.tree_lines:
        out.append(evidence("lspci_tree", list(hop.tree_lines)))
    return out


def _may_idle(hop: Hop) -> bool:
    """A Gen1 uplink at full width above GPUs none of which is known to work: the GPUs'
    idle power saving may be what it follows."""
    return (hop.cur_gts == IDLE_GTS and not hop.narrow and bool(hop.below)
            and all(x.kind == "gpu" and x.load != "busy" for x in hop.below))


@rule("pcie.path", produces=("pcie.hop-degraded",))
def hop_degraded(pcie_paths: PciePaths) -> Iterator[Finding]:
    """A link between two PCIe ports on a GPU's or NIC's path (a root port to a switch,
    a switch to a switch) trained slower or narrower than both its ends support: every
    device below it shares the lost bandwidth. The devices' own links are judged by
    pcie.speed and pcie.width against the port above them."""
    for hop in pcie_paths.hops:
        if hop.endpoint or not (hop.slow or hop.narrow):
            continue
        below = sorted(hop.below, key=lambda x: (x.kind != "gpu", x.index or 0, x.bus_id))
        names = ", ".join(x.label for x in below)
        title = (f"PCIe hop {hop.label}: {_state(hop.cur_gts, hop.cur_width)} where both ends "
                 f"support {_state(hop.cap_gts, hop.cap_width)} (below it: {names})")
        scope = Scope(kind="device", pci_bus_id=hop.lower.address, name=hop.label)
        also = tuple(device_scope(x) for x in below)
        ev = _evidence(hop)
        if pcie_paths.virtual:
            yield _with_also(finding(
                "pcie.hop-degraded", Severity.INFO, f"{title}, inside a VM",
                "These ports are the hypervisor's emulation: the speed and width they show "
                "need not be what the physical link does. Only worth knowing; check the "
                "host's own lspci if transfers are slow.",
                Action.NONE, Blame.UNKNOWN, scope, ev, REFERENCES), also)
            continue
        if _may_idle(hop):
            yield _with_also(finding(
                "pcie.hop-degraded", Severity.INFO, f"{title}: the GPUs below may be idle",
                "Idle NVIDIA GPUs lower their link speed to 2.5 GT/s and some platforms "
                "let the ports above follow; none of the GPUs below is known to be working. "
                "Re-check while a job runs: a hop that stays at Gen1 under load is a riser, "
                "cable or switch fault.", Action.NONE, Blame.UNKNOWN, scope, ev, REFERENCES),
                also)
            continue
        severe = _share(hop) <= SEVERE_SHARE or (
            hop.narrow and (hop.cur_width or 0) <= (hop.cap_width or 0) * SEVERE_WIDTH_SHARE)
        severity = Severity.CRITICAL if severe else Severity.WARNING
        when = ("They are starved of host bandwidth: drain the node, then reseat or replace "
                "the riser, cable or board on this hop." if severe else
                "It still works correctly, only slower: reseat or replace the riser, cable or "
                "retimer of this hop at the next maintenance window.")
        yield _with_also(finding(
            "pcie.hop-degraded", severity, title,
            f"The link between {hop.upper.label} and {hop.lower.label} trained below what "
            f"both its ends support, so every transfer of the {len(below)} device(s) below "
            f"it (host copies, GPUDirect RDMA, peer traffic across the root complex) shares "
            f"{_share(hop):.0%} of the bandwidth it should have. Both ends could do more, so "
            "neither the slot's generation nor the devices decide it: the physical path "
            f"does (riser, cable, retimer, connector). {when}",
            action_for(severity, Action.DRAIN_AND_REPAIR), Blame.NODE, scope, ev, REFERENCES),
            also)


def _with_also(f: Finding, also: tuple[Scope, ...]) -> Finding:
    """The hop's finding with the devices below it (its blast radius) as its other
    scopes: their own link findings fold under it."""
    return replace(f, also=also)
