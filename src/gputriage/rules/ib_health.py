"""InfiniBand / RoCE rules beyond a port's current state: a port seen in different
states while it was watched, error counters other than symbol errors and link downs
(``perfquery``, sysfs), IPoIB interfaces that say nothing of the link, and tools that
found no RDMA device at all (and why: the kernel registered none, or the userspace verbs
providers are missing)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from gputriage.knowledge.ib_counters import ib_counter
from gputriage.logscan.events import DriverEvent
from gputriage.model import Action, Blame, Finding, Scope, Severity, evidence
from gputriage.parsers.ib_tools import IbToolProblem
from gputriage.parsers.infiniband import IbPort
from gputriage.parsers.modules import Module
from gputriage.rules.base import finding, rule
from gputriage.rules.infiniband import counter_lines, link_errors_judged


def _scope(port: IbPort) -> Scope:
    return Scope(kind="port", name=port.key, pci_bus_id=port.pci_address)


def _state(state: str | None, phys: str | None) -> str:
    return "/".join(x for x in (state or "?", phys) if x)


def _passes(state: str | None) -> bool:
    return state in ("Active", "ActiveDefer")


@rule("ib.port-unstable", produces=("ib.port-unstable",))
def port_unstable(ib_ports: list[IbPort]) -> Iterator[Finding]:
    """A port read more than once (``rdma link`` or ``ibstat`` run again) whose state
    changed between readings: a link that trains and drops, even if its last reading is
    Active (a port that ends down is ib.port-not-active's)."""
    for port in ib_ports:
        seen = [(s, p) for s, p, _ in port.history] + [(port.state, port.phys_state)]
        if len(set(seen)) < 2 or not _passes(port.state):
            continue
        went_down = sum(1 for s, _ in seen if not _passes(s))
        path = " -> ".join(_state(s, p) for s, p in seen)
        yield finding(
            "ib.port-unstable", Severity.WARNING,
            f"{port.device} port {port.port} changed state across {len(seen)} readings: {path}",
            f"The port was not Active in {went_down} of {len(seen)} readings taken one after "
            "another: its link is training and dropping (a marginal cable or transceiver, a "
            "switch port, or the HCA), so jobs that start while it is down fail to connect "
            "or hang in initialisation, and the last reading being Active does not make it "
            "healthy. Unless the port was being brought up on purpose, watch it (rdma link, "
            "ibstat) and its link_downed counter; if it keeps changing, move the work off "
            "this host and have the link (cable, transceiver, switch port) checked.",
            Action.PLAN_REPAIR, Blame.NODE, _scope(port),
            [evidence(port.source, port.lines[:12])])


@rule("ib.port-errors", produces=("ib.port-errors",))
def port_errors(ib_ports: list[IbPort]) -> Iterator[Finding]:
    """Receive, integrity and buffer-overrun errors on a port (a damaged link), and
    transmit discards (congestion elsewhere in the fabric); traffic counters are never
    errors, and symbol errors and link downs have rules of their own."""
    for port in ib_ports:
        over: dict[str, list[tuple[str, int]]] = {}
        for name, value in port.counters.items():
            counter = ib_counter(name)
            if counter is None or counter.warn_at is None or value < counter.warn_at:
                continue
            over.setdefault(counter.kind, []).append((name, value))
        if over.get("integrity"):
            if not link_errors_judged(port):  # else ib.symbol-errors reports the link
                yield _errors_finding(port, over["integrity"], Severity.WARNING)
        elif over.get("congestion"):
            yield _errors_finding(port, over["congestion"], Severity.INFO)


def _errors_finding(port: IbPort, counts: list[tuple[str, int]], severity: Severity) -> Finding:
    names = [n for n, _ in counts]
    lines = counter_lines(port, tuple(names))
    text = ", ".join(f"{value} {name}" for name, value in counts)
    if severity is Severity.WARNING:
        return finding(
            "ib.port-errors", severity, f"{port.device} port {port.port}: {text}",
            "Packets arrive damaged on this port's link, or the link partners lose flow-"
            "control credit: retransmits cut bandwidth and NCCL may time out. Clear the "
            "counters (perfquery -x -R) and read them again under load; if they climb, "
            "reseat or replace the cable or transceiver at the next maintenance window "
            "(remote physical errors point at a link nearer the sender).",
            Action.PLAN_REPAIR, Blame.NODE, _scope(port), [evidence(port.source, lines)])
    return finding(
        "ib.port-errors", severity, f"{port.device} port {port.port}: {text}",
        "Packets waited or were discarded because the fabric was busy or a peer was down: "
        "congestion, not a fault of this port's link. Compare with the switch's counters "
        "if jobs are slow.", Action.NONE, Blame.UNKNOWN, _scope(port),
        [evidence(port.source, lines)])


@rule("ib.link-state-unshown", produces=("ib.link-state-unshown",))
def link_state_unshown(ib_ports: list[IbPort]) -> Iterator[Finding]:
    """``ibdev2netdev`` alone shows each port's network interface, not its link: an IPoIB
    interface is Down whenever IPoIB is not set up, while the InfiniBand link may be
    Active. Said once, so that Down there is not read as a dead HCA."""
    ipoib = [p for p in ib_ports if p.state is None and p.netdev_kind == "ipoib"
             and (p.netdev_state or "").lower() == "down"]
    if not ipoib:
        return
    names = ", ".join(p.device for p in ipoib[:8]) + (", ..." if len(ipoib) > 8 else "")
    yield finding(
        "ib.link-state-unshown", Severity.INFO,
        f"{len(ipoib)} InfiniBand port(s) show only their IPoIB interface as Down ({names}): "
        "the link state is not shown",
        "ibdev2netdev's (Up)/(Down) is the state of the IP interface on top of the port "
        "(IPoIB), not of the InfiniBand link: on a fabric without IPoIB every such "
        "interface is Down while the links are Active. Read the link state with ibstat "
        "(State: Active, Physical state: LinkUp) before suspecting the HCAs.",
        Action.NONE, Blame.UNKNOWN, Scope(kind="port", name=ipoib[0].key),
        [evidence(ipoib[0].source, [ln for p in ipoib for ln in p.lines][:12])])


_NO_DEVICE_KINDS = ("no-device", "uverbs-missing", "umad-missing", "provider-missing")
_DEVICE_FILES = {"ib_umad": "/dev/infiniband/umad*, which ibstat, the subnet manager and the "
                            "fabric tools open",
                 "ib_uverbs": "/dev/infiniband/uverbs*, which every verbs program opens"}


@rule("ib.no-devices", produces=("ib.no-devices",))
def no_devices(ib_ports: list[IbPort], ib_tool_problems: list[IbToolProblem] | None = None,
               driver_events: Sequence[DriverEvent] = (),
               modules: dict[str, Module] | None = None) -> Iterator[Finding]:
    """An RDMA tool found no device at all. Why decides who acts: userspace verbs providers
    missing (the image's or host's packages), a kernel module not loaded, or no device the
    kernel registered (HCA firmware too old for the driver, no HCA, no driver)."""
    if ib_ports or not ib_tool_problems:
        return  # some port was read: a tool that lost one device is not this finding
    kinds = {p.kind for p in ib_tool_problems}
    if not kinds & set(_NO_DEVICE_KINDS):
        return
    lines = [p.line for p in ib_tool_problems]
    ev = [evidence("ibstat", lines)]
    firmware = [e for e in driver_events if e.kind == "hca-firmware-old"]
    if "provider-missing" in kinds:
        yield finding(
            "ib.no-devices", Severity.WARNING,
            "no RDMA device visible to libibverbs: its userspace providers are missing",
            "libibverbs found no provider library for the HCAs (no /etc/libibverbs.d "
            "entries, or the provider failed to load), so every verbs program (ibv_devinfo, "
            "NCCL's IB transport, UCX) sees no device although the kernel may have "
            "registered them: RDMA jobs fall back to TCP or fail. Install the providers in "
            "this image or host (rdma-core's ibverbs-providers / libibverbs, or the MLNX_OFED "
            "userspace); the HCA is not at fault.",
            Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)
        return
    if kinds & {"uverbs-missing", "umad-missing"}:
        module = "ib_umad" if "umad-missing" in kinds else "ib_uverbs"
        yield finding(
            "ib.no-devices", Severity.WARNING,
            f"the RDMA tools cannot reach the HCAs: kernel module {module} is not loaded",
            f"{module} gives userspace its device files ({_DEVICE_FILES[module]}); without "
            f"it the tools report no device. Load it (modprobe {module}) and at every boot "
            "(a modules-load.d entry); in a container, also pass /dev/infiniband.",
            Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)
        return
    if firmware:
        ev.append(evidence("kernel_log", [e.line for e in firmware][:6]))
        yield finding(
            "ib.no-devices", Severity.WARNING,
            "no InfiniBand device registered: the HCA driver asks for newer firmware",
            "The kernel created no InfiniBand device (ibstatus finds no ports under "
            "/sys/class/infiniband) and the mlx driver says the adapter's firmware is too "
            "old for it. Update the HCA firmware (mlxfwmanager, or the vendor's OEM image "
            "for cards with their own board id) and reboot: a reboot alone does not help.",
            Action.FIX_SOFTWARE, Blame.NODE, evidence=ev)
        return
    loaded = sorted(m for m in (modules or {}) if m.startswith(("mlx5_ib", "mlx4_ib", "ib_")))
    held = f" ({', '.join(loaded[:4])} loaded)" if loaded else ""
    yield finding(
        "ib.no-devices", Severity.WARNING,
        f"the RDMA tools found no InfiniBand device{held}",
        "No RDMA device is registered or visible: the HCA driver (mlx5_ib, mlx4_ib) or "
        "ib_uverbs not loaded, HCA firmware the driver refused, no HCA on the PCI bus, or "
        "in a container /dev/infiniband not passed. Check lspci -d 15b3:, lsmod | grep "
        "-e mlx -e ib_, and the kernel log of the mlx driver; if this node should have no "
        "InfiniBand, nothing is wrong.",
        Action.FIX_CONFIG, Blame.UNKNOWN, evidence=ev)
