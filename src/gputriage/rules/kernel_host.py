"""Judging the host-side kernel-log events: PCIe AER reports tied to the device
that suffered them, EDAC / MCE / APEI hardware errors, nvidia-peermem load
failures, network link flaps and failing disks. Called by rule ``kernel.events``
(:mod:`gputriage.rules.kernel_log`), whose finding ids these are."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from gputriage.logscan.events import DriverEvent
from gputriage.model import NODE, Action, Blame, Finding, Scope, Severity
from gputriage.parsers.kernel_fold import FoldKey, fold_key, weight
from gputriage.parsers.kernel_host import pci_class
from gputriage.rules.kernel_common import (
    AER_BURST,
    GpuMap,
    Judged,
    MakeFinding,
    count_text,
    emit,
    folded,
    gpu_label,
    group,
    history,
    log_order,
    scope_of,
    split_boots,
    when,
)
from gputriage.text.fields import strict_int

HOST_KINDS = frozenset({"pcie-aer", "peermem-load-failed", "hw-error", "link-state",
                        "mlx5-link", "storage-error"})
LINK_NEAR = 60  # lines between a port's AER report and a driver's recovery line of one error
NIC_INIT_S = 180.0  # uptime within which a port still trains after boot
CE_BURST = 10  # corrected memory errors worth a repair ticket
DOC_PEERMEM = "https://docs.nvidia.com/cuda/gpudirect-rdma/index.html"


def judge_host(events: Sequence[DriverEvent], gpus: GpuMap,
               xid_buses: set[str | None]) -> Iterator[Finding]:
    """Findings for the host-side kinds among ``events`` (every boot)."""
    current, earlier = split_boots([ev for ev in events if ev.kind in HOST_KINDS])
    for part, make in ((current, emit), (earlier, history)):
        yield from _aer(part, gpus, xid_buses, make)
        yield from _peermem(part, make)
        yield from _hw_errors(part, make)
        yield from _links(part, make)
        yield from _storage(part, make)


# --- PCIe AER -------------------------------------------------------------------------------

def _uncorrected(ev: DriverEvent) -> bool:
    sev = (ev.details.get("severity") or "").lower()
    return "uncorrect" in sev or ("fatal" in sev and "non-fatal" not in sev)


def _aer_text(events: Sequence[DriverEvent]) -> str:
    errors = sorted({e for ev in events for e in (ev.details.get("errors") or "").split(", ")
                     if e})
    return f" ({', '.join(errors)})" if errors else ""


def _device(events: Sequence[DriverEvent], bus: str | None, gpus: GpuMap,
            on_gpu: bool) -> str:
    if on_gpu:
        return gpu_label(bus, gpus)
    ids = next((ev.details["vendor_device"] for ev in events if ev.details.get("vendor_device")),
               None)
    driver = next((ev.details["driver"] for ev in events if ev.details.get("driver")), None)
    if driver is None and any(ev.line.lstrip("[] .0123456789+").count("pcieport") for ev in events):
        driver = "pcieport"
    what = {"hca": "HCA", "port": "PCIe root/switch port", "gpu": "GPU"}.get(
        pci_class(ids, driver), "device")
    return f"{what} {bus or '(address not logged)'}" + (f" [{ids}]" if ids else "")


def _gpu_buses(by_bus: dict[str | None, list[DriverEvent]], gpus: GpuMap,
               xid_buses: set[str | None]) -> set[str | None]:
    """The addresses among ``by_bus`` that are GPUs (inventory, Xids or the report)."""
    return {bus for bus, evs in by_bus.items()
            if bus in gpus or bus in xid_buses or any(
                pci_class(ev.details.get("vendor_device"), ev.details.get("driver")) == "gpu"
                for ev in evs)}


def _link_failure(own: list[DriverEvent], others: list[DriverEvent]
                  ) -> tuple[list[DriverEvent], list[DriverEvent], bool] | None:
    """A GPU's fatal link failure: its events with the uncorrected errors of the ports
    near its unrecoverable ones (and those ports' recovery lines), the ports' errors,
    and whether the driver could not recover; None when the GPU had no fatal error."""
    stuck = [ev for ev in own if ev.details.get("recovery")]
    if not stuck and not any(_uncorrected(ev) for ev in own):
        return None
    near = [ev for ev in others if _uncorrected(ev) and any(_close(ev, s) for s in stuck)]
    port_evs = [ev for ev in others
                if ev.details.get("recovery") and any(_close(ev, n) for n in near)]
    joined = sorted(own + near + port_evs, key=lambda ev: ev.lineno or 0)
    return joined, near, bool(stuck)


def _link_failure_judged(label: str, own: list[DriverEvent], near: list[DriverEvent],
                         stuck: bool) -> Judged:
    ports = sorted({ev.bus_id for ev in near if ev.bus_id})
    via = (f" (link through {', '.join(ports)}{_aer_text(near)})" if ports
           else _aer_text(own))
    recover = " and the driver cannot recover it" if stuck else ""
    return Judged(
        Severity.CRITICAL, Action.DRAIN_AND_REPAIR, Blame.NODE,
        f"fatal PCIe error on {label}{via}{recover}",
        "The PCIe link to the GPU failed with an uncorrectable error (completion "
        "timeout, surprise link down, poisoned or malformed transactions). The NVIDIA "
        "driver has no AER recovery: the GPU stays lost until the node reboots. Drain the "
        "node, reboot, then reseat or swap the card, riser or cable and check its power; "
        "repair the GPU or slot if it recurs.")


def _aer(events: list[DriverEvent], gpus: GpuMap, xid_buses: set[str | None],
         make: MakeFinding) -> Iterator[Finding]:
    """A GPU's fatal link failure as one finding (with the ports' reports that belong to
    it), then the other devices' AER reports grouped by device."""
    aer = [ev for ev in events if ev.kind == "pcie-aer"]
    by_bus = group(aer, lambda ev: ev.bus_id)
    gpu_buses = _gpu_buses(by_bus, gpus, xid_buses)
    others = [ev for bus, evs in by_bus.items() if bus not in gpu_buses for ev in evs]
    taken: set[int] = set()
    for bus in [b for b in by_bus if b in gpu_buses]:
        failure = _link_failure(by_bus[bus], others)
        if failure is None:
            continue
        joined, near, stuck = failure
        taken.update(id(ev) for ev in joined)
        judged = _link_failure_judged(gpu_label(bus, gpus), by_bus[bus], near, stuck)
        yield make("kernel.pcie-aer", judged, joined, scope_of(bus, gpus), ())
    rest = [ev for ev in aer if id(ev) not in taken]
    for bus, evs in group(rest, lambda ev: ev.bus_id).items():
        if not any(ev.details.get("severity") for ev in evs):
            continue  # recovery lines alone of a device that is not a GPU
        on_gpu = bus in gpu_buses
        label = _device(evs, bus, gpus, on_gpu) + _aer_text(evs)
        yield make("kernel.pcie-aer", _aer_judged(evs, label, on_gpu), evs,
                   scope_of(bus, gpus, device=not on_gpu), ())


def _close(a: DriverEvent, b: DriverEvent) -> bool:
    """Whether two events (a folded one: any line from its first to its latest) are
    within :data:`LINK_NEAR` lines of each other."""
    if a.origin != b.origin:
        return False
    a0, a1 = a.lineno or 0, a.latest.lineno or 0
    b0, b1 = b.lineno or 0, b.latest.lineno or 0
    return max(a0, b0) - min(a1, b1) <= LINK_NEAR


def _aer_judged(events: list[DriverEvent], label: str, on_gpu: bool) -> Judged:
    n = weight(events)
    if any(_uncorrected(ev) for ev in events):
        then = ("Drain the node; check seating, risers, retimers and power, and repair."
                if on_gpu else "No GPU is shown affected: check seating, risers, retimers "
                "and power at the next maintenance window, and drain sooner if a GPU behind "
                "it logs errors.")
        return Judged(Severity.CRITICAL if on_gpu else Severity.WARNING,
                      Action.DRAIN_AND_REPAIR if on_gpu else Action.PLAN_REPAIR,
                      Blame.NODE, f"uncorrected PCIe errors (AER) at {label} ({count_text(n)})",
                      "The PCIe link dropped or corrupted transactions it could not correct: "
                      "on a GPU this precedes Xid 79 and lost GPUs; behind a port, every device "
                      "below it is at risk. " + then)
    burst = n >= AER_BURST
    return Judged(Severity.WARNING if burst else Severity.INFO,
                  Action.PLAN_REPAIR if burst else Action.NONE, Blame.NODE,
                  f"corrected PCIe errors (AER) at {label} ({count_text(n)})",
                  "Corrected errors cost only retries; a steady stream points at a marginal "
                  "link (seating, riser, retimer) to fix at the next maintenance.")


# --- nvidia-peermem -------------------------------------------------------------------------

def _peermem_cause(reasons: str) -> str:
    """Why the peer-memory module did not load, from the symbols its errors name: the
    NVIDIA driver's (nvidia_p2p_*), ib_core's (ib_*), or both."""
    mismatch = "disagrees about version" in reasons
    nvidia = "nvidia_p2p_" in reasons
    ib = re.search(r"\bib_\w+", reasons) is not None
    if mismatch and nvidia and ib:
        return ("Its symbol versions match neither the installed NVIDIA driver (nvidia_p2p_*) "
                "nor the loaded ib_core: it was built against another Module.symvers (a "
                "shipped or stale one) than the driver's and the OFED's on this host. Rebuild "
                "it against both as installed (releases after nv_peer_mem 1.0 also resolve the "
                "NVIDIA symbols at load time).")
    if mismatch and nvidia:
        return ("It was built against another NVIDIA driver than the one installed: the "
                "nvidia_p2p_* symbols the driver exports have other versions. Rebuild it "
                "against the installed driver (after every driver upgrade: DKMS).")
    if mismatch:
        return ("It was built against a different ib_core than the one loaded (MLNX/DOCA "
                "OFED against the inbox RDMA stack, or the reverse): the symbol versions do "
                "not match. Rebuild it against the running OFED (a driver container must see "
                "the host's OFED headers), or load the host's OFED before the driver.")
    if "Unknown symbol" in reasons:
        return ("The loaded ib_core lacks the peer-memory API it was built for (the inbox "
                "RDMA stack, or MLNX OFED reinstalled or upgraded after the module was "
                "built). Rebuild or reinstall nv_peer_mem after (re)installing MLNX OFED, or "
                "use nvidia-peermem from the driver (R470 and later) built after OFED.")
    return ("Check dmesg for the reason; usually the module does not match the loaded "
            "ib_core (OFED) or the NVIDIA driver: rebuild it against both.")


def _peermem(events: list[DriverEvent], make: MakeFinding) -> Iterator[Finding]:
    evs = [ev for ev in events if ev.kind == "peermem-load-failed"]
    if not evs:
        return
    modules = sorted({ev.details.get("module", "nvidia-peermem") for ev in evs})
    reasons = " ".join(ev.details.get("reason", "") for ev in evs)
    cause = _peermem_cause(reasons)
    judged = Judged(
        Severity.WARNING, Action.FIX_SOFTWARE, Blame.CONFIG,
        f"{'/'.join(modules)} could not load: GPUDirect RDMA is off on this node "
        f"({count_text(weight(evs))})",
        "Without the peer-memory module the HCA cannot read or write GPU memory: NCCL's "
        "NET/IB runs without GDRDMA (data staged through host memory), GPUDirect RDMA "
        "transfers fail or fall back, and inter-node bandwidth drops. " + cause)
    yield make("kernel.peermem-load-failed", judged, evs, NODE, (DOC_PEERMEM,))


# --- EDAC / MCE / APEI ----------------------------------------------------------------------

def _hw_errors(events: list[DriverEvent], make: MakeFinding) -> Iterator[Finding]:
    hw = [ev for ev in events if ev.kind == "hw-error"]
    for memory, evs in group(hw, lambda ev: ev.details.get("memory") == "yes").items():
        bad = [ev for ev in evs if ev.details.get("severity") == "uncorrected"]
        picked = bad or evs
        dimms = sorted({ev.details["dimm"] for ev in picked if ev.details.get("dimm")})
        where = f" on {', '.join(dimms[:4])}" if dimms else ""
        count = sum(_count(ev) * ev.count for ev in picked)
        what = "host memory" if memory else "hardware (machine check / firmware record)"
        fid = "kernel.host-memory-error" if memory else "kernel.hardware-error"
        part = "DIMM" if memory else "component (CPU, memory, PCIe) named in the record"
        if bad:
            judged = Judged(Severity.CRITICAL, Action.DRAIN_AND_REPAIR, Blame.NODE,
                            f"uncorrectable {what} errors{where} ({count_text(count)})",
                            "The platform reported errors it could not correct: data was "
                            "lost or a process was killed, and more are likely. Drain the "
                            f"node and replace the failing {part}.")
        else:
            burst = count >= CE_BURST
            judged = Judged(Severity.WARNING if burst else Severity.INFO,
                            Action.PLAN_REPAIR if burst else Action.NONE, Blame.NODE,
                            f"corrected {what} errors{where} ({count_text(count)})",
                            "Corrected errors cost nothing yet; a growing count predicts "
                            f"uncorrectable ones: replace the {part} at the next maintenance.")
        yield make(fid, judged, picked, NODE, ())


def _count(ev: DriverEvent) -> int:
    return max(1, strict_int(ev.details.get("count", "1")) or 1)


# --- network links --------------------------------------------------------------------------

def _port_key(ev: DriverEvent) -> str:
    return ev.bus_id or ev.details.get("interface") or ev.details.get("device") or "?"


def _transitions(evs: Sequence[DriverEvent]) -> list[DriverEvent]:
    """The events that change a port's state (duplicate netdev / IB port lines dropped).
    With a folded storm among them: the changes between the occurrences known (each
    event's first and latest), in log order."""
    if folded(evs):
        evs = sorted([*evs, *(ev.latest for ev in evs if ev.latest is not ev)],
                     key=log_order(evs))
    out: list[DriverEvent] = []
    for ev in evs:
        state = ev.details.get("state")
        if state in ("up", "down") and (not out or out[-1].details["state"] != state):
            out.append(ev)
    return out


def _links(events: list[DriverEvent], make: MakeFinding) -> Iterator[Finding]:
    links = [ev for ev in events if ev.kind in ("link-state", "mlx5-link")]
    for key, evs in group(links, _port_key).items():
        first = evs[0]
        names = sorted({ev.details[k] for ev in evs for k in ("interface", "device")
                        if ev.details.get(k)})
        label = ", ".join(names) + (f" ({key})" if key not in names else "") if names else key
        scope = Scope(kind="nic", pci_bus_id=first.bus_id, name=names[0] if names else None)
        stalls = [ev for ev in evs if ev.details.get("state") == "tx-timeout"]
        if stalls:
            yield make("kernel.netdev-tx-timeout", Judged(
                Severity.WARNING, Action.PLAN_REPAIR, Blame.NODE,
                f"transmit queue timed out on {label} ({count_text(weight(stalls))})",
                "The NIC stopped sending (NETDEV WATCHDOG) and was reset by its driver: "
                "traffic stalled meanwhile. Repeated, it points at NIC firmware or hardware: "
                "update the firmware or replace the NIC at the next maintenance window."),
                stalls, scope, ())
        states = [ev for ev in evs if ev.details.get("state") in ("up", "down")]
        judged = _link_judged(_transitions(states), label, states)
        if judged is not None:
            fid, verdict = judged
            yield make(fid, verdict, [ev for ev in evs if ev.details.get("state") != "tx-timeout"],
                       scope, ())


def _at_init(ev: DriverEvent) -> bool:
    return ev.uptime_s is not None and ev.uptime_s < NIC_INIT_S


def _went_down(steps: list[DriverEvent], states: list[DriverEvent]) -> int:
    """How many times a port went down from ``steps[0]`` on. A folded storm hides
    changes between its first and latest occurrence: one flap logs each of its down lines
    once (the netdev's, the IB port's), so it went down as often as its most frequent
    down line, and at most once per up logged after it."""
    downs = sum(1 for ev in steps if ev.details["state"] == "down")
    if not folded(states):
        return downs
    key = log_order(states)
    start = key(steps[0])
    ups = 0
    per_line: dict[FoldKey | None, int] = {}
    for ev in states:
        if ev.details["state"] == "up":
            ups += ev.count
        else:  # less the occurrence before ``steps[0]`` (a first down dropped)
            k = fold_key(ev)
            per_line[k] = per_line.get(k, 0) + ev.count - int(key(ev) < start)
    most = max([downs, *per_line.values()])
    return min(most, ups + (steps[0].details["state"] == "down")) if ups else most


def _link_judged(steps: list[DriverEvent], label: str,
                 states: list[DriverEvent]) -> tuple[str, Judged] | None:
    """Down from boot (never up) is information and a first down that came back may be
    initialisation; a port that was up and went down is the finding: down now is
    critical, repeated flaps that recovered a warning, a single one information.
    ``states``: the port's up / down events (to count the downs a folded storm hides)."""
    if not steps:
        return None
    if steps[0].details["state"] == "down" and (_at_init(steps[0]) or len(steps) > 1):
        if len(steps) == 1:
            return "kernel.link-down-at-boot", Judged(
                Severity.INFO, Action.NONE, Blame.UNKNOWN,
                f"{label} has been down since NIC initialisation (never up in this log)",
                "The port never came up after boot: not cabled, or the peer port is off. If "
                "the node should use it, check the cable and the switch port.")
        steps = steps[1:]  # down before it was ever seen up: training, or before the log
    downs = [ev for ev in steps if ev.details["state"] == "down"]
    if not downs:
        return None
    n = _went_down(steps, states)
    span = f"{when(downs[0])} to {when(steps[-1])}" if len(steps) > 1 else when(downs[0])
    flaps = f"{n} time{'s' if n != 1 else ''}" + (f", {span}" if span else "")
    if steps[-1].details["state"] == "down":
        return "kernel.link-down", Judged(
            Severity.CRITICAL, Action.DRAIN_AND_REPAIR, Blame.NODE,
            f"network link down on {label} (went down {flaps}; still down)",
            "A port that was up lost its link: multi-node jobs over it fail or hang (NCCL "
            "retry-exceeded errors, timeouts). Drain the node; check the cable, transceiver "
            "and switch port (mlxlink / ibstat link_downed counters, switch logs), or take "
            "the port out of NCCL_IB_HCA until fixed.")
    several = n >= 2
    return "kernel.link-flaps", Judged(
        Severity.WARNING if several else Severity.INFO,
        Action.PLAN_REPAIR if several else Action.NONE, Blame.NODE,
        f"network link flapped on {label} (down {flaps}; up again)",
        "The port lost its link and came back: every flap breaks the connections over it "
        "(NCCL jobs hang or fail with retry-exceeded). A port that keeps flapping has a bad "
        "cable, transceiver or switch port: replace it at the next maintenance.")


# --- storage --------------------------------------------------------------------------------

def _disk_text(evs: Sequence[DriverEvent]) -> str:
    """``nvme2n1 (3 write errors)``, ``XFS on md127: log I/O error -5`` ... per device."""
    parts = []
    for dev, mine in group(evs, lambda ev: ev.details.get("device") or "?").items():
        layer = mine[0].details.get("layer")
        n = weight(mine)
        if layer == "fs":
            fs = mine[0].details.get("fs", "").upper().replace("EXT4", "ext4")
            parts.append(f"{fs} on {dev}: {mine[0].details.get('error', 'error')}"
                         + (f" ({n}x)" if n > 1 else ""))
        elif layer == "md":
            failed = sorted({ev.details.get("failed", "?") for ev in mine})
            parts.append(f"{dev} dropped {', '.join(failed)}")
        else:
            ops = sorted({ev.details.get("op", "") for ev in mine} - {""})
            kind = f"{'/'.join(ops)} " if ops else ""
            what = "timeouts" if {ev.details.get("error") for ev in mine} == {"timeout"} \
                else "errors"
            parts.append(f"{dev} ({n} {kind}{what if n != 1 else what[:-1]})")
    return "; ".join(parts)


def _serious(ev: DriverEvent) -> bool:
    """Data was lost or a volume stopped: a failed write, a filesystem that shut down or
    lost its journal, an array that dropped a disk, an NVMe controller that went away."""
    d = ev.details
    return (d.get("op") == "write" or d.get("layer") in ("fs", "md")
            or (d.get("layer") == "nvme" and d.get("error") == "controller"))


def _storage(events: list[DriverEvent], make: MakeFinding) -> Iterator[Finding]:
    evs = [ev for ev in events if ev.kind == "storage-error"]
    if not evs:
        return
    disks = [ev.details["device"] for ev in evs
             if ev.details.get("layer") in ("block", "nvme") and ev.details.get("device")]
    first = disks[0] if disks else evs[0].details.get("device")
    text = _disk_text(evs)
    if any(_serious(ev) for ev in evs):
        judged = Judged(
            Severity.CRITICAL, Action.DRAIN_AND_REPAIR, Blame.NODE,
            f"storage failing: {text}",
            "A local disk failed I/O and the volume on it lost data or stopped (failed "
            "writes, a filesystem shut down or remounted read-only, an array running "
            "without a disk). Jobs that write checkpoints, caches or scratch there fail or "
            "hang. This is the node's disk, not its GPUs, driver or the job: drain the "
            "node, replace the disk and rebuild the volume.")
    else:
        judged = Judged(
            Severity.WARNING, Action.PLAN_REPAIR, Blame.NODE,
            f"storage errors: {text}",
            "A local disk returned read errors or timed out: jobs reading from it can "
            "fail. The GPUs are not involved. Check its health and replace it at the next "
            "maintenance window if it reports media errors.")
    yield make("kernel.storage-error", judged, evs,
               Scope(kind="device", name=first) if first else NODE, ())
