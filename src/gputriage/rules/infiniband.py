"""InfiniBand / RoCE rules: ports that are not up, ports slower than their peers,
and link error counters.

A port matters most when it is a GPU rail (its HCA shares a PCIe switch or NUMA
node with a GPU, see the ``ib_gpu_affinity`` fact): a rail that is down or slow
breaks or slows every multi-node job. Frontend and storage HCAs get warnings.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

from gputriage.facts.infiniband import HcaAffinity
from gputriage.model import Action, Blame, Evidence, Finding, Scope, Severity, evidence
from gputriage.parsers.infiniband import IbPort
from gputriage.rules.base import action_for, finding, rule

SYMBOL_ERROR_WARN = 10  # symbol errors since the counters were cleared (boot)
LINK_ERROR_RECOVERY_WARN = 1  # link retrains
SATURATED = {"symbol_error": 65535, "link_error_recovery": 255, "link_downed": 255}
LINK_DOWNED_REPAIR = 5  # from here on a flapping link wants a repair, not a watch

_PHYS_MEANING = {
    "Polling": "no link partner: cable, transceiver or switch port?",
    "Disabled": "the port is disabled",
    "Sleep": "the port is asleep",
    "LinkErrorRecovery": "the link is retraining after errors",
    "PortConfigurationTraining": "the link is still training",
}


def _scope(port: IbPort) -> Scope:
    return Scope(kind="port", name=port.key, pci_bus_id=port.pci_address)


def _what(port: IbPort) -> str:
    """``mlx5_0 port 1 (MT4129, Ethernet)``."""
    extra = ", ".join(x for x in (port.hca_type, port.link_layer) if x)
    return f"{port.device} port {port.port}" + (f" ({extra})" if extra else "")


def _evidence(port: IbPort, note: str | None = None) -> Evidence:
    """The port's state lines (counters left out)."""
    lines = [ln for ln in port.lines if "counters/" not in ln]
    return evidence(port.source, lines or [f"{port.key}: state {port.state}"], note)


Affinity = dict[str, HcaAffinity]  # the ``ib_gpu_affinity`` fact: HCA name -> affinity


def _affinity(affinity: Affinity | None, port: IbPort) -> HcaAffinity | None:
    return (affinity or {}).get(port.device)


# PCI location in predictable RDMA / netdev names: roceP2p1s0f1, enp1s0f0np0, ibp24s0f1
_NAME_PCI = re.compile(r"(?:P(?P<dom>[0-9]{1,4}))?p(?P<bus>[0-9]{1,3})s"
                       r"(?P<slot>[0-9]{1,3})f[0-9]{1,2}")


def _adapter(port: IbPort) -> str | None:
    """The physical adapter a port belongs to (PCI bus:device, without the function),
    when the address or a predictable name tells it."""
    if port.pci_address:
        return port.pci_address.rsplit(".", 1)[0]
    for name in (port.device, port.netdev or ""):
        m = _NAME_PCI.search(name)
        if m:
            return f"{m.group('dom') or 0}:{m.group('bus')}:{m.group('slot')}"
    return None


def _sibling_up(port: IbPort, ports: list[IbPort]) -> IbPort | None:
    """An active port on the same adapter: another port of the device, or another
    PCI function of the same card."""
    adapter = _adapter(port)
    for other in ports:
        if other is port or not _passes_traffic(other):
            continue
        if other.device == port.device and other.port != port.port:
            return other
        if adapter is not None and other.device != port.device and _adapter(other) == adapter:
            return other
    return None


def _passes_traffic(port: IbPort) -> bool:
    if port.state is not None:
        return port.is_active
    return (port.netdev_state or "").lower() == "up"


@rule("ib.port-not-active", produces=("ib.port-not-active",))
def port_not_active(ib_ports: list[IbPort],
                    ib_gpu_affinity: Affinity | None = None) -> Iterator[Finding]:
    """An HCA port that is Down, Init or Armed, or whose netdev is down, passes no
    RDMA traffic: critical on a GPU rail, a warning elsewhere."""
    for port in ib_ports:
        if not port.is_down:
            continue
        aff = _affinity(ib_gpu_affinity, port)
        rail = bool(aff and aff.rail)
        phys = port.phys_state
        if port.state is None:
            status = f": netdev {port.netdev or '?'} is {port.netdev_state}"
        else:
            status = f" is {port.state}" + (f"/{phys}" if phys else "")
        meaning = _PHYS_MEANING.get(phys or "")
        if port.state in ("Init", "Armed") and phys in (None, "LinkUp"):
            meaning = "the link is up but the subnet manager has not activated it"
        title = f"{_what(port)}{status}" + (f" ({meaning})" if meaning else "")
        action, blame, why = _port_advice(port)
        where = aff.describe() if aff else "Which GPUs it serves is unknown."
        if rail:
            why = ("This HCA is a GPU rail, so multi-node NCCL jobs on this node fail or fall "
                   "back to slower paths. " + why)
        note = where if where.endswith(".") else where + "."
        sibling = None if rail or phys == "Disabled" else _sibling_up(port, ib_ports)
        if sibling is not None:
            yield finding(
                "ib.port-not-active", Severity.INFO, f"{title}; {sibling.key} on the same "
                "adapter is up (likely an unused port)",
                f"{sibling.key} on the same adapter passes traffic, so the adapter works; "
                "a second port that was never cabled looks exactly like this. Nothing to do "
                "if the port is unused (leave it out of NCCL_IB_HCA / UCX_NET_DEVICES); if it "
                "should be cabled, check the cable, transceiver and switch port.",
                Action.NONE, Blame.UNKNOWN, _scope(port),
                [_evidence(port, note), _evidence(sibling)])
            continue
        severity = Severity.CRITICAL if rail else Severity.WARNING
        if not rail and action is Action.DRAIN_AND_REPAIR:
            why += " It serves no GPU rail: repair it at the next maintenance window."
        yield finding("ib.port-not-active", severity, title, why,
                      action_for(severity, action), blame, _scope(port),
                      [_evidence(port, note)])


def _port_advice(port: IbPort) -> tuple[Action, Blame, str]:
    phys = port.phys_state
    if phys == "Disabled":
        return (Action.FIX_CONFIG, Blame.CONFIG,
                "The port is administratively disabled (on the HCA or the switch side). "
                "Enable it if it should carry traffic; otherwise leave it out of "
                "NCCL_IB_HCA and UCX_NET_DEVICES.")
    if port.state in ("Init", "Armed") and phys in (None, "LinkUp"):
        return (Action.FIX_CONFIG, Blame.CONFIG,
                "The physical link is up but no subnet manager has configured the port "
                "(opensm / UFM not running or not reaching it). Check the fabric's subnet "
                "manager and the port's partition.")
    if port.state is None and port.netdev_kind == "pod":
        return (Action.FIX_CONFIG, Blame.CONFIG,
                f"{port.netdev} is a secondary interface a CNI gave a pod: an SR-IOV virtual "
                "function of the HCA. A VF is Down when its link state is disabled (the "
                "SR-IOV network's linkState: disable, or auto with the PF down), not because "
                "of a cable: set linkState: enable in the SriovIBNetwork / SriovNetwork (or "
                "ip link set <PF> vf <n> state enable on the host), check that the PF is up, "
                "and recreate the pod.")
    if port.state is None:
        return (Action.DRAIN_AND_REPAIR, Blame.NODE,
                "The RDMA device's network interface is down: check `ip link` (it may be "
                "administratively down) and then the cable, transceiver and switch port.")
    return (Action.DRAIN_AND_REPAIR, Blame.NODE,
            "The port sees no working link. If it is meant to be cabled, reseat or replace "
            "the cable or transceiver and check the switch port; if it is unused, ignore "
            "it or disable it.")


@rule("ib.roce-gid", produces=("ib.roce-gid",))
def roce_gid(ib_ports: list[IbPort]) -> Iterator[Finding]:
    """Which GID index a RoCE port's routable (v2, IP-based) address has, for
    NCCL_IB_GID_INDEX; a RoCE port with no routable GID at all cannot carry routed
    RoCE traffic."""
    for port in ib_ports:
        v2 = [g for g in port.gids if g.version == "v2"]
        if not v2:
            continue
        routable = [g for g in v2 if not g.gid.lower().startswith("fe80")]
        lines = [ln for ln in port.lines if port.device in ln] or port.lines
        ev = [evidence(port.source, lines)]
        if not routable:
            yield finding(
                "ib.roce-gid", Severity.WARNING,
                f"{_what(port)}: no routable RoCE v2 GID (only link-local ones)",
                f"The port's netdev {port.netdev or ''} has no IP address, so RoCE has only "
                "link-local GIDs: traffic cannot cross an L3 hop and NCCL may fail to "
                "connect. Give the interface its address (or fix the CNI / netplan).",
                Action.FIX_CONFIG, Blame.CONFIG, _scope(port), ev)
            continue
        best = routable[0]
        v1 = [g.index for g in port.gids if g.version == "v1" and g.gid == best.gid]
        also = f" (index {', '.join(map(str, v1))} is RoCE v1, same address)" if v1 else ""
        yield finding(
            "ib.roce-gid", Severity.INFO,
            f"{_what(port)}: RoCE v2 GID index {best.index} for "
            f"{best.ipv4 or best.gid}{also}",
            f"For RoCE NCCL_IB_GID_INDEX should name the RoCE v2 GID of the port's IP "
            f"address, here {best.index}. A RoCE v1 GID is not routable and link-local "
            "(fe80) GIDs do not leave the L2 segment, so choosing one of those breaks or "
            "slows connections across subnets.",
            Action.NONE, Blame.UNKNOWN, _scope(port), ev)


def _rate_groups(ports: list[IbPort]) -> dict[tuple[str | None, str | None], list[IbPort]]:
    groups: dict[tuple[str | None, str | None], list[IbPort]] = {}
    for p in ports:
        if p.is_active and p.rate_gbps:
            groups.setdefault((p.hca_type, p.link_layer), []).append(p)
    return groups


@rule("ib.rate-below-peers", produces=("ib.rate-below-peers",))
def rate_below_peers(ib_ports: list[IbPort],
                     ib_gpu_affinity: Affinity | None = None) -> Iterator[Finding]:
    """An active port running slower than most ports of the same HCA model and link
    layer trained down (bad cable, wrong transceiver, switch port speed)."""
    for (model, layer), group in _rate_groups(ib_ports).items():
        counts = Counter(p.rate_gbps for p in group)
        usual, n_usual = max(counts.items(), key=lambda kv: (kv[1], kv[0] or 0.0))
        need = 2 if model else 3  # without a model name ask for a clearer majority
        if n_usual < need or n_usual * 2 <= len(group):
            continue
        for port in group:
            if port.rate_gbps is None or usual is None or port.rate_gbps >= usual:
                continue
            kind = " ".join(x for x in (model, layer) if x) or "HCA"
            aff = _affinity(ib_gpu_affinity, port)
            why = ("A port that trains at a lower rate than its identical peers usually has a "
                   "damaged cable, a wrong or failing transceiver, or a misconfigured switch "
                   "port; traffic over it runs at a fraction of the speed, still correctly. "
                   "At the next maintenance window reseat or replace the cable/transceiver "
                   "and check the switch port.")
            if aff and aff.rail:
                why = "This HCA is a GPU rail: collective operations slow to its speed. " + why
            peers = [p for p in group if p.rate_gbps == usual]
            yield finding(
                "ib.rate-below-peers", Severity.WARNING,
                f"{port.device} port {port.port} runs at {port.rate_gbps:g} Gb/s while "
                f"{n_usual} other {kind} ports run at {usual:g} Gb/s",
                why, Action.PLAN_REPAIR, Blame.NODE, _scope(port),
                [_evidence(port), evidence(peers[0].source, _rate_lines(peers[:2]),
                                           f"{n_usual} peer port(s) at {usual:g} Gb/s")])


def _rate_lines(ports: list[IbPort]) -> list[str]:
    """The header and rate lines of some ports (peers' evidence)."""
    out = []
    for p in ports:
        out += [ln for ln in p.lines if ln.lower().startswith(("rate", "ca '", "infiniband"))
                or "/rate:" in ln]
    return out


def _count(port: IbPort, name: str) -> str:
    value = port.counters.get(name, 0)
    sat = SATURATED.get(name)
    return f"{value}{'+ (saturated)' if sat is not None and value >= sat else ''}"


def counter_lines(port: IbPort, names: tuple[str, ...]) -> list[str]:
    """The lines that printed these counters (sysfs files, perfquery rows)."""
    printed = [port.counter_lines[n] for n in names if n in port.counter_lines]
    return printed or [ln for ln in port.lines if any(f"/counters/{n}:" in ln for n in names)]


def link_errors_judged(port: IbPort) -> bool:
    """Whether ib.symbol-errors reports this port's link (its symbol errors or link
    recoveries are past their thresholds)."""
    return (port.counters.get("symbol_error", 0) >= SYMBOL_ERROR_WARN
            or port.counters.get("link_error_recovery", 0) >= LINK_ERROR_RECOVERY_WARN)


@rule("ib.symbol-errors", produces=("ib.symbol-errors",))
def symbol_errors(ib_ports: list[IbPort]) -> Iterator[Finding]:
    """Symbol errors and link error recoveries count bit errors and retrains on a
    port's physical link: a marginal cable or transceiver."""
    for port in ib_ports:
        sym = port.counters.get("symbol_error", 0)
        rec = port.counters.get("link_error_recovery", 0)
        if not link_errors_judged(port):
            continue
        parts = []
        if sym >= SYMBOL_ERROR_WARN:
            parts.append(f"{_count(port, 'symbol_error')} symbol errors")
        if rec >= LINK_ERROR_RECOVERY_WARN:
            parts.append(f"{_count(port, 'link_error_recovery')} link error recoveries")
        names = ("symbol_error", "link_error_recovery", "port_rcv_errors",
                 "local_link_integrity_errors")
        yield finding(
            "ib.symbol-errors", Severity.WARNING,
            f"{_what(port)}: {' and '.join(parts)}",
            "The physical link is taking bit errors (and retraining), which shows up as "
            "retransmits, lower bandwidth and NCCL timeouts. Clear the counters and watch "
            "them; if they keep climbing, replace the cable or transceiver at the next "
            "maintenance window.", Action.PLAN_REPAIR, Blame.NODE, _scope(port),
            [evidence(port.source, counter_lines(port, names),
                      f"thresholds: symbol_error >= {SYMBOL_ERROR_WARN}, "
                      f"link_error_recovery >= {LINK_ERROR_RECOVERY_WARN}")])


@rule("ib.link-downed", produces=("ib.link-downed",))
def link_downed(ib_ports: list[IbPort]) -> Iterator[Finding]:
    """link_downed counts the times a port's link failed and went down since the
    counters were cleared: a flapping link kills the jobs using it."""
    for port in ib_ports:
        downs = port.counters.get("link_downed", 0)
        if downs <= 0:
            continue
        repair = downs >= LINK_DOWNED_REPAIR
        yield finding(
            "ib.link-downed", Severity.WARNING,
            f"{_what(port)} link went down {_count(port, 'link_downed')} time(s)",
            "Each time the link drops, RDMA connections over it break and running jobs "
            "abort. A single event may be a switch reboot; repeated ones mean a failing "
            "cable, transceiver or switch port: replace it at the next maintenance window "
            "(the counter counts since it was cleared; a link down now is reported as not "
            "active).",
            Action.PLAN_REPAIR if repair else Action.NONE, Blame.NODE, _scope(port),
            [evidence(port.source, counter_lines(port, ("link_downed",)))])
