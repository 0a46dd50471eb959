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
from gputriage.knowledge.pcie_hops import HopCase, hop_case
from gputriage.model import Evidence, Finding, Scope, evidence, gpu_scope
from gputriage.rules.base import finding, rule


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


def _starved(hop: Hop, case: HopCase) -> bool:
    """At most the table's share of the bandwidth, or of the lanes, both ends support."""
    narrow = (hop.narrow and case.width_share_at_most is not None
              and (hop.cur_width or 0) <= (hop.cap_width or 0) * case.width_share_at_most)
    return narrow or (case.share_at_most is not None and _share(hop) <= case.share_at_most)


def _judged(hop: Hop, virtual: bool) -> HopCase:
    if virtual:
        return hop_case("virtual")
    if _may_idle(hop):
        return hop_case("idle-gen1")
    starved = hop_case("starved")
    return starved if _starved(hop, starved) else hop_case("downtrained")


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
        case = _judged(hop, pcie_paths.virtual)
        explanation = {
            "virtual": "These ports are the hypervisor's emulation: the speed and width they "
                       "show need not be what the physical link does. Only worth knowing; "
                       "check the host's own lspci if transfers are slow.",
            "idle-gen1": "None of the GPUs below is known to be working, and 2.5 GT/s at "
                         "full width is the speed idle NVIDIA GPUs give their own links, so "
                         "this input cannot tell a fault from power saving. Re-check while a "
                         "job runs: a hop that stays at Gen1 under load is a riser, cable or "
                         "switch fault.",
        }.get(case.case) or (
            f"The link between {hop.upper.label} and {hop.lower.label} trained below what "
            f"both its ends support, so every transfer of the {len(below)} device(s) below "
            f"it (host copies, GPUDirect RDMA, peer traffic across the root complex) shares "
            f"{_share(hop):.0%} of the bandwidth it should have. Both ends could do more, so "
            "neither the slot's generation nor the devices decide it: the physical path "
            "does (riser, cable, retimer, connector). " + (
                "The devices below are starved of host bandwidth: drain the node, then reseat "
                "or replace the riser, cable or board on this hop." if case.case == "starved"
                else "It still works correctly, only slower: reseat or replace the riser, "
                     "cable or retimer of this hop at the next maintenance window."))
        suffix = {"virtual": ", inside a VM", "idle-gen1": ": the GPUs below may be idle"}
        yield replace(finding(
            "pcie.hop-degraded", case.severity, title + suffix.get(case.case, ""), explanation,
            case.action, case.blame,
            Scope(kind="device", pci_bus_id=hop.lower.address, name=hop.label),
            _evidence(hop), (case.source,)),
            also=tuple(device_scope(x) for x in below))
