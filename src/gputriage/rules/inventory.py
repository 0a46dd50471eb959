"""Rules on the GPU inventory: every GPU on the PCI bus should be one the
driver can use, and a baseboard carries a known number of GPUs."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from gputriage import knowledge
from gputriage.facts.stack import GpuSighting
from gputriage.model import Action, Blame, Evidence, Finding, Severity, evidence, gpu_scope
from gputriage.parsers.nvsmi import SmiReport
from gputriage.parsers.pci import PciFunction
from gputriage.parsers.topo import TopoMatrix, nvlink_count
from gputriage.rules.base import finding, rule

PASSTHROUGH_DRIVERS = {"vfio-pci", "pci-stub"}
Visible = tuple[str, list[GpuSighting]]  # the visible_gpus fact: (source, GPUs)
Lost = dict[str, list[tuple[str, str]]]  # the lost_gpus fact: bus id -> [(source, line)]


@rule("gpu.count", produces=("gpu.missing", "gpu.count-ok", "gpu.passthrough"))
def gpu_count(pci_gpus: list[PciFunction], visible_gpus: Visible, pci_source: str,
              driver_loaded: bool | None = None, lost_gpus: Lost | None = None
              ) -> Iterator[Finding]:
    """Compare NVIDIA GPU functions on the PCI bus (by class, not audio or
    NVSwitch functions) with the GPUs the driver can use; name the missing ones."""
    if not pci_gpus or driver_loaded is False:
        return  # driver.presence covers these
    source, visible = visible_gpus
    lost = lost_gpus or {}
    passthrough = [f for f in pci_gpus if f.driver in PASSTHROUGH_DRIVERS]
    if passthrough:
        yield finding(
            "gpu.passthrough", Severity.INFO,
            f"{len(passthrough)} GPU(s) bound to {passthrough[0].driver} for passthrough",
            "GPUs given to virtual machines are not expected to be visible to this host's "
            "driver.", Action.NONE, Blame.CONFIG,
            evidence=[evidence(pci_source, [f"{f.address} driver={f.driver}"
                                               for f in passthrough])])
    expected = [f for f in pci_gpus if f.driver not in PASSTHROUGH_DRIVERS]
    seen = {g.bus_id for g in visible if g.bus_id and g.bus_id not in lost}
    if not any(g.bus_id for g in visible):
        # the source lists no bus ids: compare counts only
        if len(visible) < len(expected):
            yield finding(
                "gpu.missing", Severity.CRITICAL,
                f"{len(expected) - len(visible)} GPU(s) on PCI not visible to the driver "
                f"({len(visible)} of {len(expected)})", _MISSING_WHY, Action.DRAIN_AND_REPAIR,
                Blame.NODE,
                evidence=[evidence(pci_source, [_line(f) for f in expected]),
                          evidence(source, [g.line for g in visible])])
        return
    missing = [f for f in expected if f.address not in seen]
    for f in missing:
        ev = [evidence(pci_source, [_line(f)], "on the PCI bus"),
              evidence(source, [f"{f.address} is not among the {len(seen)} GPUs listed"])]
        ev += [evidence(lost_source, [line]) for lost_source, line in lost.get(f.address, [])]
        yield _missing(f, ev)
    if not missing:
        yield finding(
            "gpu.count-ok", Severity.OK,
            f"all {len(expected)} GPU(s) on the PCI bus are visible to the driver",
            f"Compared the PCI bus with {source}.", Action.NONE, Blame.UNKNOWN)


def _missing(f: PciFunction, ev: list[Evidence]) -> Finding:
    """A GPU on the PCI bus the driver cannot use (or that nouveau holds)."""
    if f.driver == "nouveau":
        return finding(
            "gpu.missing", Severity.CRITICAL, f"GPU {f.address} is held by the nouveau driver",
            "nouveau, not nvidia, drives this GPU. Blacklist nouveau, rebuild the initramfs "
            "and reboot.", Action.FIX_CONFIG, Blame.CONFIG, gpu_scope(f.address), ev)
    return finding("gpu.missing", Severity.CRITICAL,
                   f"GPU {f.address} is on the PCI bus but not usable by the driver",
                   _MISSING_WHY, Action.DRAIN_AND_REPAIR, Blame.NODE, gpu_scope(f.address), ev)


def _in_vm(smi: Iterable[tuple[str, SmiReport]]) -> bool:
    """GPUs passed through to a VM (nvidia-smi's virtualization mode says so)."""
    for _, report in smi:
        for g in report.gpus:
            if g.virtualization_mode and g.virtualization_mode.lower() not in ("none", "n/a"):
                return True
    return False


_MISSING_WHY = (
    "The GPU is on the PCI bus but the driver cannot use it: it fell off the bus, failed "
    "to initialise, or stopped responding. Jobs here see fewer GPUs or hang. A GPU reset "
    "rarely helps: drain the node, power-cycle it, and reseat or RMA the GPU if it recurs.")


def _line(f: PciFunction) -> str:
    return (f"{f.address} [{(f.vendor or 0):04x}:{(f.device or 0):04x}] "
            f"driver={f.driver or 'none'}")


@rule("gpu.count-unexpected", produces=("gpu.count-unexpected",))
def gpu_count_unexpected(visible_gpus: Visible, pci_gpus: list[PciFunction] | None = None,
                         smi: Sequence[tuple[str, SmiReport]] = ()) -> Iterator[Finding]:
    """Baseboard GPUs come in fixed counts (HGX: 4 or 8): seven visible H100 SXM
    means one is gone, even when the PCI bus no longer shows it."""
    source, visible = visible_gpus
    profile = _unexpected_count_profile(visible_gpus, pci_gpus, smi)
    if profile is None:
        return
    sizes = " or ".join(str(n) for n in profile.baseboard_gpus)
    yield finding(
        "gpu.count-unexpected", Severity.WARNING,
        f"{len(visible)} {profile.model} GPUs visible; its baseboards carry {sizes}",
        "A GPU is probably missing altogether (not even on the PCI bus): one that did not "
        "train its link or fell off hard. Check lspci and the kernel log; if the node should "
        "have a full board, drain it, power-cycle, then reseat or RMA (state the GPU count "
        "in expect.toml to make a short node critical).", Action.PLAN_REPAIR, Blame.NODE,
        evidence=[evidence(source, [g.line for g in visible])])


def _unexpected_count_profile(visible_gpus: Visible | None, pci_gpus: list[PciFunction] | None,
                              smi: Iterable[tuple[str, SmiReport]]
                              ) -> knowledge.GpuProfile | None:
    """The model profile when the driver sees a GPU count its baseboards never carry
    (and the PCI bus does not already show the missing ones)."""
    visible = visible_gpus[1] if visible_gpus else []
    if not visible or (pci_gpus is not None and len(pci_gpus) > len(visible)):
        return None  # gpu.count names the missing ones
    profiles = {knowledge.gpu_profile(g.name) for g in visible}
    if len(profiles) != 1:
        return None
    profile = profiles.pop()
    if profile is None or not profile.baseboard_gpus or len(visible) in profile.baseboard_gpus:
        return None
    if len(visible) * 2 <= max(profile.baseboard_gpus) or _in_vm(smi):
        return None  # VMs and partitions get subsets of a board; only "one short" is telling
    return profile


SWITCHED_BOARD = 8  # GPUs of a baseboard whose NVSwitches sit on the host's PCI bus
SWITCHED_SIZES = (4, 8, 16)  # GPUs per NVSwitch-connected board or tray
MAX_NVLINKS = 18  # links one GPU has at most (NVLink 4 / 5)


def _switched_size(matrix: TopoMatrix) -> int | None:
    """The board size a topology matrix is one GPU short of, when its GPUs all reach
    each other with the same NVLink count and more links than a GPU has (so through
    NVSwitches)."""
    gpus = matrix.gpus
    cells = {matrix.link(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]}
    if len(cells) != 1:
        return None
    links = nvlink_count(cells.pop())
    if not links or links * (len(gpus) - 1) <= MAX_NVLINKS:
        return None
    return next((n for n in SWITCHED_SIZES if n == len(gpus) + 1), None)


@rule("gpu.board-count", any_of=("pci", "topology"), produces=("gpu.board-short",))
def board_count(pci: list[PciFunction] | None = None, topology: TopoMatrix | None = None,
                pci_source: str | None = None, visible_gpus: Visible | None = None,
                pci_gpus: list[PciFunction] | None = None,
                smi: Sequence[tuple[str, SmiReport]] = ()) -> Iterator[Finding]:
    """NVSwitch boards come with a fixed number of GPUs: NVSwitches on the PCI bus
    beside fewer than 8 GPUs, or a topology whose GPUs all meet through NVSwitches
    one GPU short of a board (7 of 8), means GPUs are missing altogether."""
    if _unexpected_count_profile(visible_gpus, pci_gpus, smi) is not None:
        return  # gpu.count-unexpected already says it
    switches = [f for f in pci or () if f.is_nvswitch]
    gpus = [f for f in pci or () if f.is_gpu]
    if switches and gpus and len(gpus) < SWITCHED_BOARD:
        yield finding(
            "gpu.board-short", Severity.WARNING,
            f"{len(gpus)} GPU(s) on the PCI bus beside {len(switches)} NVSwitch(es): "
            f"NVSwitch baseboards carry {SWITCHED_BOARD}",
            "An HGX/DGX board whose NVSwitches are on the PCI bus carries 8 GPUs; the others "
            "did not enumerate (link training, power, a GPU fallen off hard), unless this "
            "listing is cut short. Check the full lspci and the kernel log; if GPUs are "
            "missing, drain the node, power-cycle, then reseat or RMA. With NVSwitches, "
            "nvidia-fabricmanager must run too.",
            Action.PLAN_REPAIR, Blame.NODE,
            evidence=[evidence(pci_source or "pci_devices",
                               [_line(f) for f in switches + gpus])])
        return
    matrix = topology
    size = _switched_size(matrix) if matrix is not None else None
    if matrix is None or size is None:
        return
    cell = matrix.link(matrix.gpus[0], matrix.gpus[1])
    yield finding(
        "gpu.board-short", Severity.WARNING,
        f"{len(matrix.gpus)} GPUs joined through NVSwitch ({cell} every pair): "
        f"one short of the {size} GPUs such boards carry",
        "All GPUs reach each other over more NVLink links than one GPU has, so through "
        f"NVSwitches, and such boards carry {' or '.join(map(str, SWITCHED_SIZES))} GPUs: "
        "one is probably missing (not enumerated or fallen off), unless this container or "
        "VM was given a subset. Check lspci and the kernel log; if one is missing, drain the "
        "node, power-cycle, then reseat or RMA.", Action.PLAN_REPAIR, Blame.NODE,
        evidence=[evidence("nvidia_smi_topo", [matrix.header] + list(matrix.rows.values()))])
