"""Rules on PCIe link health of GPUs and NICs: a link trained narrower or slower
than it can run, replay counters, and AER error reports.

An idle NVIDIA GPU drops its link to Gen1 to save power, so a slow link is
only a fault while the GPU works; a VM's reported width follows the
platform's wiring, so there it is only worth knowing.
"""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.facts.pcie import IDLE_GTS, PcieLink, aer_total
from gputriage.facts.pcie_path import Hop, PciePaths
from gputriage.knowledge.pcie_hops import hop_case
from gputriage.model import Action, Blame, Evidence, Finding, Scope, Severity, evidence, gpu_scope
from gputriage.parsers.dmidecode import Slot
from gputriage.parsers.lspci import ACS_REDIRECT, AcsControl
from gputriage.rules.base import action_for, finding, rule

REPLAYS_WARN = 1000  # replays since reset: a link that keeps retrying packets
AER_CORRECTABLE_WARN = 100  # corrected errors since boot before it is worth a look
BENIGN_UNCORRECTABLE = frozenset({"UnsupReq"})  # config-space probing sets it routinely
BENIGN_CORRECTABLE = frozenset({"AdvNonFatalErr"})  # mirrors an advisory UnsupReq


def _scope(link: PcieLink) -> Scope:
    if link.kind == "gpu":
        return gpu_scope(link.bus_id or None, link.index, link.uuid)
    if link.kind == "nic":
        return Scope(kind="nic", pci_bus_id=link.bus_id, name=link.bus_id)
    return Scope(kind="device", pci_bus_id=link.bus_id or None, name=link.label)


def _evidence(link: PcieLink, *sources: str | None) -> list[Evidence]:
    """The link lines of the named sources (or of all), in that order."""
    wanted = [s for s in sources if s] or list(link.evidence)
    return [evidence(s, link.evidence[s]) for s in dict.fromkeys(wanted) if link.evidence.get(s)]


def _aer_evidence(link: PcieLink) -> list[Evidence]:
    return [evidence(s, lines) for s, lines in link.aer_evidence.items() if lines]


def _model(link: PcieLink) -> str:
    if link.profile is not None:
        gen = f", a PCIe Gen{link.profile.pcie_gen} part" if link.profile.pcie_gen else ""
        return f"{link.profile.model}{gen}"
    return f"{link.name or 'unknown model'} (no profile: generic check)"


def _gts(v: float | None) -> str:
    return f"{v:g} GT/s" if v is not None else "? GT/s"


def _slot(slots: list[Slot] | None, bus_id: str | None) -> Slot | None:
    """The physical slot (dmidecode) holding a device, when known."""
    if not bus_id or slots is None:
        return None
    return next((s for s in slots if s.bus_address == bus_id), None)


def _half_width_card(link: PcieLink, cur: int, mx: int | None) -> bool:
    """A GPU at half its width where only nvidia-smi tells the width (no sysfs/lspci
    LnkCap) and the model is not a datacenter part: likely a card wired that way."""
    smi_only = link.width_source is not None and link.width_source == link.smi_source
    not_datacenter = link.profile is None or not link.profile.datacenter
    return (link.kind == "gpu" and smi_only and not_datacenter and mx is not None
            and cur * 2 >= mx)


def _port(paths: PciePaths | None, link: PcieLink) -> Hop | None:
    """The hop from the port above to the device, when the path is known."""
    return paths.port_above(link.bus_id) if paths is not None and link.bus_id else None


def _port_evidence(hop: Hop | None) -> list[Evidence]:
    up = hop.upper if hop is not None else None
    return [evidence(up.source, list(up.lines))] if up and up.source and up.lines else []


@rule("pcie.width", produces=("pcie.width-degraded",))
def link_width(pcie_links: list[PcieLink], dmidecode_slots: list[Slot] | None = None,
               pcie_paths: PciePaths | None = None) -> Iterator[Finding]:
    """A PCIe link trained with fewer lanes than the device and slot support cuts
    host<->device bandwidth in proportion: a riser, slot or seating fault on a
    server, the instance's wiring inside a VM. A port above that has no more lanes
    decides the width: a placement, not a fault."""
    for link in pcie_links:
        cur, mx = link.cur_width, link.max_width
        if cur is None or cur <= 0:  # unknown, or x0: a suspended link, not a narrow one
            continue
        narrow = (mx is not None and cur < mx) or (mx is None and "width" in link.downgraded)
        if not narrow:
            continue
        of = f"x{mx}" if mx else "its maximum (not in the input)"
        title = f"{link.label}: PCIe link width x{cur} of {of}"
        hop = _port(pcie_paths, link)
        ev = _evidence(link) + _port_evidence(hop)
        port_width = hop.upper.max_width if hop is not None else None
        if port_width is not None and port_width <= cur and not link.is_virtualized:
            placed = hop_case("port-limited-width")
            yield finding(
                "pcie.width-degraded", placed.severity,
                f"{title}: the {hop.upper.label} above it has only x{port_width}"
                if hop is not None else title,
                f"The port above the device supports {port_width} lanes, so the link runs at "
                "the width both ends can do: a placement (or the port's bifurcation), not a "
                "failing link. If the device needs its full bandwidth, move it to a "
                "full-width port or slot.",
                placed.action, placed.blame, _scope(link), ev, (placed.source,))
            continue
        if link.is_virtualized:
            yield finding(
                "pcie.width-degraded", Severity.INFO,
                f"{title} inside a VM ({link.virtualization})",
                "In a virtual machine the width the guest sees follows how the cloud instance "
                "type wires the GPU, not a fault on this host. Compare it with the width "
                "expected for this instance type before acting.",
                Action.NONE, Blame.UNKNOWN, _scope(link), ev)
            continue
        slot_info = _slot(dmidecode_slots, link.bus_id)
        if slot_info is not None and slot_info.width is not None and slot_info.width <= cur:
            yield finding(
                "pcie.width-degraded", Severity.INFO,
                f"{title}: slot {slot_info.designation or '?'} is only x{slot_info.width}",
                f"The card sits in a slot wired for {slot_info.width} lanes ({slot_info.type}): a "
                "placement limit, not a failing link. If the device needs its full "
                "bandwidth, move it to a full-width slot.",
                Action.FIX_CONFIG, Blame.CONFIG, _scope(link),
                ev + [evidence("dmidecode_slots", slot_info.lines)])
            continue
        if _half_width_card(link, cur, mx):
            yield finding(
                "pcie.width-degraded", Severity.INFO,
                f"{title}: the maximum is the GPU chip's, the card may be wired x{cur}",
                "Only nvidia-smi describes this link, and its maximum width is what the GPU "
                f"chip supports; many workstation and consumer cards ({_model(link)}) wire "
                f"only x{cur} lanes to the slot. Check the card's specification (or lspci "
                "LnkCap) before suspecting the slot or riser.",
                Action.NONE, Blame.UNKNOWN, _scope(link), ev)
            continue
        severe = cur <= 2 if mx is None else cur * 4 <= mx
        slot = ("; a NIC in a narrower slot also shows this: check the slot width "
                "(dmidecode -t slot) first" if link.kind == "nic" else "")
        severity = Severity.CRITICAL if severe else Severity.WARNING
        when = ("Drain the node and reseat or repair it." if severe else
                "It still works correctly, only slower: reseat or repair it at the next "
                "maintenance window.")
        yield finding(
            "pcie.width-degraded", severity, title,
            f"The link runs on {cur} lane(s) where {mx or 'more'} are possible, so every "
            f"transfer to and from the device is that much slower ({_model(link)}). On a "
            f"server this is a riser, cable or slot fault or a badly seated card{slot}. "
            + when, action_for(severity, Action.DRAIN_AND_REPAIR), Blame.NODE, _scope(link),
            ev)


def _narrow(link: PcieLink) -> bool:
    """Trained with fewer lanes than it can (or says so)."""
    cur, mx = link.cur_width, link.max_width
    return (cur is not None and mx is not None and cur < mx) or "width" in link.downgraded


@rule("pcie.speed", produces=("pcie.speed-degraded",))
def link_speed(pcie_links: list[PcieLink],
               pcie_paths: PciePaths | None = None) -> Iterator[Finding]:
    """A PCIe link slower than it can run. GPUs slow their link to Gen1 when idle,
    so for a GPU this counts only while it works; when the load is unknown it is
    reported with that caveat. A port above of an older generation decides the speed:
    the link is where both its ends can be (a Gen5 NIC behind a Gen4 root port)."""
    for link in pcie_links:
        cur, mx = link.cur_gts, link.max_gts
        slow = (cur is not None and mx is not None and cur < mx) or (
            cur is not None and mx is None and "speed" in link.downgraded)
        hop = _port(pcie_paths, link)
        port_gts = hop.upper.max_gts if hop is not None else None
        if not slow or (cur is not None and port_gts is not None and cur >= port_gts):
            continue
        title = f"{link.label}: PCIe link at {_gts(cur)} of " + (
            _gts(mx) if mx is not None else "its maximum (not in the input)")
        ev = _evidence(link) + _port_evidence(hop)
        if link.kind == "nic":
            yield finding(
                "pcie.speed-degraded", Severity.WARNING, title,
                "A network adapter does not slow its link to save power: it trained at a "
                "lower speed, from a slot of an older generation or a signal problem on the "
                "riser. RDMA traffic through it is capped. Check the slot, then reseat it at "
                "the next maintenance window.",
                Action.PLAN_REPAIR, Blame.NODE, _scope(link), ev)
            continue
        if link.load == "idle":
            continue  # idle power saving: the link speeds up as soon as work arrives
        if link.load == "busy":
            yield finding(
                "pcie.speed-degraded", Severity.WARNING, f"{title} while busy ({link.load_reason})",
                f"The GPU is working yet its link did not come up to full speed ({_model(link)}):"
                " host<->GPU copies are slowed in proportion. Usually a riser or slot signal "
                "problem, or a BIOS limit on the slot's generation. Check the BIOS PCIe "
                "setting, then reseat or replace the riser at the next maintenance window.",
                Action.PLAN_REPAIR, Blame.NODE, _scope(link), ev)
            continue
        if cur == IDLE_GTS and link.driver in ("nvidia", None) and not _narrow(link):
            # a GPU's (or an unnamed device's, e.g. an excerpt) full-width Gen1 link
            yield finding(
                "pcie.speed-degraded", Severity.INFO,
                f"{title}: likely idle power saving (load unknown)",
                "The nvidia driver drops an idle GPU's link to 2.5 GT/s (Gen1) and raises it "
                "under load, so this alone is not a fault. Re-check while a job runs "
                "(nvidia-smi -q -d PCIE); if it stays at Gen1, suspect the riser or slot.",
                Action.NONE, Blame.UNKNOWN, _scope(link), ev)
            continue
        yield finding(
            "pcie.speed-degraded", Severity.WARNING,
            f"{title}: speed below max; cannot tell if idle",
            "An idle GPU lowers its link speed to save power, but a riser or slot with signal "
            "problems also forces a lower speed; the input does not show whether the GPU was "
            "working. Re-check under load: if it stays low, replace the riser or set the slot's "
            "PCIe generation in the BIOS.",
            Action.NONE, Blame.UNKNOWN, _scope(link), ev)


@rule("pcie.replays", produces=("pcie.replays",))
def replays(pcie_links: list[PcieLink]) -> Iterator[Finding]:
    """PCIe replays are packets the link had to resend. A few since the last reset
    are normal; thousands mean a marginal link (riser, slot, cable)."""
    small = []
    for link in pcie_links:
        n = link.replays
        if not n:
            continue
        if n < REPLAYS_WARN:
            small.append(link)
            continue
        yield finding(
            "pcie.replays", Severity.WARNING,
            f"{link.label}: {n} PCIe replays since reset",
            "The link keeps resending packets: a marginal riser, slot or cable. It slows "
            "transfers and often comes before the GPU falls off the bus. Watch whether the "
            "count keeps rising; if it does, reseat or repair at the next maintenance "
            "window.",
            Action.PLAN_REPAIR, Blame.NODE, _scope(link), _evidence(link, link.smi_source))
    if small:
        counts = ", ".join(f"{x.label} {x.replays}" for x in small)
        yield finding(
            "pcie.replays", Severity.INFO,
            f"small PCIe replay counts on {len(small)} GPU(s): {counts}",
            f"A few replays since reset are normal (below {REPLAYS_WARN} here). Worth tracking: "
            "a count that keeps rising between checks points at a riser or slot.",
            Action.NONE, Blame.UNKNOWN,
            evidence=[e for x in small for e in _evidence(x, x.smi_source)])


def _nonzero(counts: dict[str, int]) -> set[str]:
    return {k for k, v in counts.items() if v and not k.startswith("TOTAL_")}


@rule("pcie.aer", produces=("pcie.aer-errors",))
def aer_errors(pcie_links: list[PcieLink]) -> Iterator[Finding]:
    """PCIe Advanced Error Reporting: uncorrectable (fatal or not) errors mean the
    device or its link failed a transaction; many corrected ones mean a marginal
    link."""
    for link in pcie_links:
        fatal, nonfatal = aer_total(link, "fatal"), aer_total(link, "nonfatal")
        corr = aer_total(link, "correctable")
        nonfatal_names = _nonzero(link.aer.get("aer_dev_nonfatal", {}))
        benign_only = bool(nonfatal_names) and nonfatal_names <= BENIGN_UNCORRECTABLE
        ue_flags = set(link.uesta) - BENIGN_UNCORRECTABLE
        ce_flags = set(link.cesta) - BENIGN_CORRECTABLE
        scope, ev = _scope(link), _aer_evidence(link)
        if fatal or (nonfatal and not benign_only) or ue_flags:
            what = (f"{fatal} fatal, {nonfatal} non-fatal uncorrectable AER error(s)"
                    if link.aer else
                    f"uncorrectable error status set ({', '.join(sorted(ue_flags))})")
            yield finding(
                "pcie.aer-errors", Severity.CRITICAL, f"{link.label}: {what}",
                "The device or its link failed PCIe transactions that hardware could not "
                "correct; data may have been lost and the GPU or NIC can drop off the bus. "
                "Drain the node; reseat, and repair if the errors return.",
                Action.DRAIN_AND_REPAIR, Blame.NODE, scope, ev)
        elif corr >= AER_CORRECTABLE_WARN or (benign_only and nonfatal >= AER_CORRECTABLE_WARN):
            yield finding(
                "pcie.aer-errors", Severity.WARNING,
                f"{link.label}: {corr} corrected AER error(s) since boot",
                "The link corrects many errors: it works, but it is marginal (riser, slot, "
                "signal integrity) and replays slow transfers. Plan a reseat at the next "
                "maintenance window; drain sooner if the count keeps climbing or "
                "uncorrectable errors appear.",
                Action.PLAN_REPAIR, Blame.NODE, scope, ev)
        elif ce_flags and not link.aer:
            yield finding(
                "pcie.aer-errors", Severity.INFO,
                f"{link.label}: corrected PCIe error status set ({', '.join(sorted(ce_flags))})",
                "lspci shows that the link corrected errors since the status was last cleared, "
                "without counts. Worth watching; the sysfs aer_dev_correctable counters tell "
                "how many.", Action.NONE, Blame.UNKNOWN, scope, ev)


@rule("acs.redirect", produces=("pcie.acs-redirect",))
def acs_redirect(pcie_acs: list[tuple[str, AcsControl]],
                 pcie_links: list[PcieLink] | None = None) -> Iterator[Finding]:
    """PCIe Access Control Services that validate or redirect peer traffic (ACSCtl
    SrcValid+ / ReqRedir+ / CmpltRedir+) send GPU-to-GPU and GPU-to-NIC transfers up to
    the root complex and the IOMMU: NCCL hangs or crawls over P2P on such a host (NCCL's
    troubleshooting guide). On bare metal it is a BIOS/kernel setting to turn off; a VM
    guest's virtual ports are the hypervisor's business."""
    on = [(source, c) for source, c in pcie_acs if c.redirects]
    if not on:
        return
    flags = [f for f in ACS_REDIRECT if any(f in c.enabled for _, c in on)]
    ports = sorted({c.address for _, c in on if c.address})
    more = ", ..." if len(ports) > 6 else ""
    where = (f"{len(ports)} PCIe port(s) ({', '.join(ports[:6])}{more})" if ports
             else f"{len(on)} PCIe port(s)")
    by_source: dict[str, list[str]] = {}
    for source, c in on:
        by_source.setdefault(source, []).extend([c.header, c.line] if c.header else [c.line])
    ev = [evidence(s, list(dict.fromkeys(lines))) for s, lines in by_source.items()]
    title = f"PCIe ACS redirects peer traffic on {where}: {' '.join(f + '+' for f in flags)}"
    if any(link.is_virtualized for link in pcie_links or ()):
        yield finding(
            "pcie.acs-redirect", Severity.INFO, f"{title} (inside a VM)",
            "Inside a virtual machine the ports and their ACS controls are the hypervisor's; "
            "GPUDirect peer traffic there depends on the host's ACS and ATS setup, not on "
            "these lines.", Action.NONE, Blame.UNKNOWN, evidence=ev)
        return
    yield finding(
        "pcie.acs-redirect", Severity.WARNING, title,
        "With ACS source validation or request/completion redirect on, peer-to-peer "
        "transfers between GPUs (and GPUDirect RDMA between a GPU and a NIC) below these "
        "ports are sent up to the root complex and through the IOMMU: NCCL all-reduce over "
        "P2P hangs or runs far below its bandwidth, and NCCL_P2P_DISABLE=1 makes it work, "
        "slowly. The GPUs are fine: turn ACS off (BIOS, or per bridge with setpci) on a "
        "bare-metal GPU host.", Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)
