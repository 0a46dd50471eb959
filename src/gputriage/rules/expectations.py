"""Rules on what the node should have (the expectations file, ``gputriage.parsers.expect``):
one rule per group, a node short of a stated value is critical with the gap in the
title; what the snapshot cannot show is listed in one ``expect.unchecked`` finding.

Hardware short (GPUs, NVSwitches, links, ports) is drain-and-repair on the node;
software (driver, CUDA) fix-software and settings (MIG, persistence, hugepages)
fix-config, both the node's configuration. The measures are public so that
``gputriage expect --from`` writes what the rules check.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from gputriage.facts.fabric import NvSwitchSighting
from gputriage.facts.host import DEFAULT_HUGEPAGE_KB
from gputriage.facts.pcie import GEN_GTS, IDLE_GTS, PcieLink
from gputriage.facts.stack import GpuSighting
from gputriage.model import (
    NODE,
    Action,
    Blame,
    DriverVersions,
    Evidence,
    Finding,
    Scope,
    Severity,
    evidence,
    gpu_scope,
)
from gputriage.parsers.driver import KernelModuleVersion
from gputriage.parsers.expect import Expectations
from gputriage.parsers.infiniband import IbPort
from gputriage.parsers.memory import HugePagePool
from gputriage.parsers.nvsmi import SmiReport
from gputriage.parsers.pci import PciFunction
from gputriage.rules.base import finding, rule, versions_agree
from gputriage.rules.doubts import UNKNOWN_COUNT
from gputriage.text.fields import strict_int

__all__ = ["PCI_SOURCES", "UNKNOWN_COUNT", "active_ports", "gen_of", "mig_modes",
           "model_matches", "nvswitch_count", "pcie_gaps", "usable_gpus"]

Visible = tuple[str, list[GpuSighting]]
# UNKNOWN_COUNT (rules.doubts): the check's doubt, the verdict is "unknown"
PCI_SOURCES = ("pci_devices", "lspci_nvidia", "lspci_mellanox")
DEFAULT_IB_STATE = "Active"


def _stated(exp: Expectations, *keys: str) -> Evidence:
    """The expectation lines a finding holds the node to."""
    lines = [line for key in keys if (line := exp.line(key)) is not None]
    return Evidence("expectations", tuple(lines), exp.path)


def _short(fid: str, title: str, explanation: str, action: Action, blame: Blame,
           ev: Sequence[Evidence], scope: Scope = NODE) -> Finding:
    """A node short of an expectation: critical."""
    return finding(fid, Severity.CRITICAL, title, explanation, action, blame, scope, ev)


# -- measures (shared with gputriage expect --from) -------------------------------------
def usable_gpus(visible: Visible | None, lost: dict[str, list[tuple[str, str]]] | None
                ) -> list[GpuSighting] | None:
    """The GPUs the driver lists and no layer reports lost; None without a listing."""
    if visible is None:
        return None
    gone = set(lost or {})
    return [g for g in visible[1] if not g.bus_id or g.bus_id not in gone]


def model_matches(name: str, want: str) -> bool:
    """Whether a GPU's name is the expected model ("H100 80GB HBM3" matches "NVIDIA H100
    80GB HBM3"; case and repeated spaces do not matter)."""
    def norm(s: str) -> str:
        words = s.casefold().split()
        return " ".join(words[1:] if words[:1] == ["nvidia"] else words)

    return norm(name) == norm(want)


def nvswitch_count(seen: Sequence[NvSwitchSighting]) -> tuple[int, list[NvSwitchSighting]]:
    """How many NVSwitches the sightings show, and those counted: the PCI bus's when it
    shows any, else the source that shows the most (device nodes, fabric manager)."""
    by_source: dict[str, dict[str, NvSwitchSighting]] = {}
    for s in seen:
        if s.where.endswith("ctl"):
            continue
        group = "pci" if s.source in PCI_SOURCES else s.source
        by_source.setdefault(group, {}).setdefault(s.where, s)
    if not by_source:
        return 0, []
    best = by_source.get("pci") or max(by_source.values(), key=len)
    return len(best), list(best.values())


def gen_of(gts: float | None) -> int | None:
    """The PCIe generation of a transfer rate (32.0 GT/s -> 5)."""
    for gen, rate in GEN_GTS.items():
        if gts is not None and abs(rate - gts) < 0.01:
            return gen
    return None


def active_ports(ports: Sequence[IbPort], state: str, rate: float | None) -> list[IbPort]:
    """The ports in ``state`` (case-insensitive) at ``rate`` Gb/s or faster."""
    def in_state(p: IbPort) -> bool:
        return (p.state or "").split(":")[-1].strip().casefold() == state.casefold()

    return [p for p in ports if in_state(p)
            and (rate is None or (p.rate_gbps is not None and p.rate_gbps >= rate))]


def mig_modes(smi: Sequence[tuple[str, SmiReport]] | None) -> tuple[str, list[tuple[str, str]]]:
    """(source, [(GPU label, MIG mode)]) of the first nvidia-smi output that reports the
    current MIG mode of its GPUs ("Enabled", "Disabled", "N/A")."""
    for source, report in smi or ():
        modes = [(f"GPU {g.index} {g.pci_bus_id or ''}".strip(), mode)
                 for g in report.gpus if (mode := g.mig_mode_current)]
        if modes:
            return source, modes
    return "", []


def _ib_label(p: IbPort) -> str:
    state = p.state or "state unknown"
    if p.phys_state and p.phys_state.casefold() != "linkup":
        state += f" ({p.phys_state})"
    rate = f", {p.rate_gbps:g} Gb/s" if p.rate_gbps is not None else ""
    return f"{p.key} {state}{rate}"


def _link_text(link: PcieLink) -> str:
    gen = gen_of(link.cur_gts)
    speed = f"Gen{gen}" if gen else (f"{link.cur_gts:g} GT/s" if link.cur_gts else "Gen?")
    width = f"x{link.cur_width}" if link.cur_width else "x?"
    return f"{speed} {width}"


def pcie_gaps(exp: Expectations, links: Sequence[PcieLink] | None
              ) -> tuple[list[PcieLink], list[PcieLink]]:
    """(GPU links short of the expected generation or width, GPU links whose generation
    cannot be judged: idle at the idle speed, or unknown)."""
    short: list[PcieLink] = []
    unsure: list[PcieLink] = []
    want_gts = GEN_GTS.get(exp.pcie.gen) if exp.pcie.gen is not None else None
    for link in links or ():
        if link.kind != "gpu":
            continue
        narrow = (exp.pcie.width is not None and link.cur_width is not None
                  and link.cur_width < exp.pcie.width)
        slow = False
        if want_gts is not None:
            if link.cur_gts is None:
                unsure.append(link)
            elif link.cur_gts < want_gts:
                # an idle GPU drops its link to the idle speed: only a busy link, or one
                # above that speed, shows what it trained at
                if link.load == "busy" or link.cur_gts > IDLE_GTS:
                    slow = True
                else:
                    unsure.append(link)
        if narrow or slow:
            short.append(link)
    return short, unsure


# -- rules ------------------------------------------------------------------------------
@rule("expect.gpu-count", produces=("expect.gpu-count", UNKNOWN_COUNT))
def gpu_count(expectations: Expectations, visible_gpus: Visible | None = None,
              pci_gpus: list[PciFunction] | None = None,
              lost_gpus: dict[str, list[tuple[str, str]]] | None = None,
              pci_source: str | None = None) -> Iterator[Finding]:
    """Fewer usable GPUs than expected (listed by the driver, not lost), naming those on
    the PCI bus the driver lost; neither a driver listing nor the PCI bus: the check
    cannot tell (its verdict is unknown)."""
    want = expectations.gpu.count
    if want is None:
        return
    stated = _stated(expectations, "gpu.count")
    if visible_gpus is None and pci_gpus is None:
        yield finding(
            UNKNOWN_COUNT, Severity.INFO,
            f"could not check the {want} expected GPUs: neither the driver's GPU list nor "
            "the PCI bus could be read",
            "Without NVML, nvidia-smi, /proc/driver/nvidia/gpus or the PCI bus this check "
            "cannot count the GPUs: its verdict is unknown. Run it where it can read them "
            "(as root, outside a container that hides the devices).", Action.NONE,
            Blame.UNKNOWN, evidence=[stated])
        return
    usable = usable_gpus(visible_gpus, lost_gpus)
    have = len(usable) if usable is not None else len(pci_gpus or [])
    if have >= want:
        if have > want:
            yield finding("expect.gpu-count", Severity.INFO,
                          f"{have} GPUs, more than the {want} expected", "The node has more "
                          "GPUs than its expectations file states: update the file if this "
                          "is intended.", Action.NONE, Blame.CONFIG, evidence=[stated])
        return
    missing, gaps, absent = _count_gaps(want, have, usable, pci_gpus)
    ev = [stated]
    if visible_gpus is not None:
        ev.append(evidence(visible_gpus[0], [g.line for g in usable or []],
                           f"{have} GPU(s) the driver lists"))
    for bus in missing:
        ev += [evidence(src, [line]) for src, line in (lost_gpus or {}).get(bus, [])]
    if pci_gpus is not None:
        ev.append(evidence(pci_source or "pci_devices",
                           [f"{f.address} NVIDIA GPU" for f in pci_gpus],
                           f"{len(pci_gpus)} GPU(s) on the PCI bus"))
    yield _short(
        "expect.gpu-count", f"{have} of {want} expected GPUs: {'; '.join(gaps)}",
        "The node has fewer usable GPUs than it should: a job that asks for all of them "
        "fails or waits. A GPU the driver lost (Xid 79, fallen off the bus) or that is "
        "gone from the PCI bus needs a power cycle, then a repair if it does not come back. "
        "Drain the node.", Action.DRAIN_AND_REPAIR, Blame.NODE, ev,
        gpu_scope(missing[0]) if len(missing) == 1 and absent <= 0 else NODE)


def _count_gaps(want: int, have: int, usable: list[GpuSighting] | None,
                pci_gpus: list[PciFunction] | None) -> tuple[list[str], list[str], int]:
    """(GPUs on the PCI bus the driver does not list, the gaps in words, how many are
    missing without a name)."""
    on_pci = [f.address for f in pci_gpus or []]
    listed = {g.bus_id for g in usable or []}
    missing = [b for b in on_pci if b not in listed] if usable is not None else []
    gaps = [f"{', '.join(missing)} missing"] if missing else []
    absent = want - have - len(missing)
    if absent > 0:
        gaps.append(f"{absent} not on the PCI bus" if pci_gpus is not None
                    else f"{absent} missing")
    return missing, gaps, absent


@rule("expect.gpu-model", produces=("expect.gpu-model",))
def gpu_model(expectations: Expectations, visible_gpus: Visible | None = None
              ) -> Iterator[Finding]:
    """GPUs of another model than expected (the driver's names)."""
    want = expectations.gpu.model
    if want is None or visible_gpus is None:
        return
    wrong = [g for g in visible_gpus[1] if g.name and not model_matches(g.name, want)]
    if not wrong:
        return
    names = sorted({g.name or "" for g in wrong})
    who = (f"GPU {wrong[0].index} {wrong[0].bus_id or ''}".strip() if len(wrong) == 1
           else f"{len(wrong)} GPUs")
    yield _short(
        "expect.gpu-model", f"{who}: {', '.join(names)}, expected {want}",
        "The GPUs are not the model this node should have: a board was swapped for "
        "another kind, or the node is in the wrong pool (or its expectations file is "
        "another node type's). Drain it until the hardware or the file is corrected.",
        Action.DRAIN_AND_REPAIR, Blame.NODE,
        [_stated(expectations, "gpu.model"), evidence(visible_gpus[0], [g.line for g in wrong])],
        gpu_scope(wrong[0].bus_id, wrong[0].index) if len(wrong) == 1 else NODE)


@rule("expect.driver", produces=("expect.driver",))
def driver(expectations: Expectations, driver_versions: DriverVersions | None = None,
           kernel_module: KernelModuleVersion | None = None) -> Iterator[Finding]:
    """A driver version (kernel module or userspace) other than expected."""
    want = expectations.gpu.driver
    if want is None or driver_versions is None:
        return
    layers = [("kernel module", driver_versions.kernel_module),
              ("userspace", driver_versions.userspace)]
    bad = [(layer, v) for layer, v in layers if v and not versions_agree(v, want)]
    if not bad:
        return
    found = sorted({v for _, v in bad})
    text = (found[0] if len(found) == 1 and len(bad) == len([v for _, v in layers if v])
            else " / ".join(f"{v} ({layer})" for layer, v in bad))
    ev = [_stated(expectations, "gpu.driver")]
    if kernel_module is not None and kernel_module.line:
        ev.append(evidence("proc_driver_nvidia_version", [kernel_module.line]))
    yield _short(
        "expect.driver", f"driver {text}, expected {want}",
        "The node runs another NVIDIA driver than it should: jobs built and validated for "
        "the expected one may fail or behave differently, and fabric manager, DCGM and the "
        "container toolkit must match it. Install the expected driver (kernel module and "
        "userspace together) and reboot or reload the modules.",
        Action.FIX_SOFTWARE, Blame.CONFIG, ev)


def _version(text: str) -> tuple[int, ...]:
    parts = (strict_int(p, signed=False) for p in text.split("."))
    return tuple(p for p in parts if p is not None)


@rule("expect.cuda", produces=("expect.cuda",))
def cuda(expectations: Expectations, driver_versions: DriverVersions | None = None
         ) -> Iterator[Finding]:
    """A driver that supports an older CUDA version than the minimum expected."""
    want = expectations.gpu.cuda
    have = driver_versions.cuda if driver_versions is not None else None
    if want is None or have is None or _version(have) >= _version(want):
        return
    yield _short(
        "expect.cuda", f"CUDA {have} supported by the driver, expected {want} or later",
        "The driver supports an older CUDA version than jobs on this node need: a job "
        "built for the newer toolkit fails at start (CUDA error 35, insufficient driver). "
        "Install a driver that supports it.", Action.FIX_SOFTWARE, Blame.CONFIG,
        [_stated(expectations, "gpu.cuda"),
         evidence("nvidia_smi", [f"CUDA Version: {have}"], "as the driver reports it")])


@rule("expect.nvswitch-count", produces=("expect.nvswitch-count",))
def nvswitches_expected(expectations: Expectations,
                        nvswitches: list[NvSwitchSighting] | None = None) -> Iterator[Finding]:
    """Fewer NVSwitches than expected (on the PCI bus, else as device nodes or in the
    fabric manager's log)."""
    want = expectations.nvswitch.count
    if want is None or nvswitches is None:
        return
    have, counted = nvswitch_count(nvswitches)
    if have >= want:
        return
    ev = [_stated(expectations, "nvswitch.count")]
    ev += [evidence(s.source, [s.line]) for s in counted]
    yield _short(
        "expect.nvswitch-count", f"{have} of {want} expected NVSwitches",
        "An NVSwitch is missing: the fabric manager cannot build the NVLink fabric and "
        "GPUs stay unregistered (CUDA error 802) or lose NVLink bandwidth. Drain the node "
        "and power-cycle it; a switch that stays missing is a baseboard repair.",
        Action.DRAIN_AND_REPAIR, Blame.NODE, ev)


@rule("expect.pcie", produces=("expect.pcie",))
def pcie(expectations: Expectations, pcie_links: list[PcieLink] | None = None
         ) -> Iterator[Finding]:
    """GPU PCIe links trained below the expected generation or width (a generation is
    judged only on a link that is busy or above the idle speed)."""
    want = expectations.pcie
    if want.gen is None and want.width is None:
        return
    short, _ = pcie_gaps(expectations, pcie_links)
    if not short:
        return
    expected = " ".join(p for p in (f"Gen{want.gen}" if want.gen else "",
                                    f"x{want.width}" if want.width else "") if p)
    parts = [f"{link.label} ({_link_text(link)})" for link in short]
    title = (f"{short[0].label} PCIe link {_link_text(short[0])}, expected {expected}"
             if len(short) == 1 else
             f"{len(short)} GPU PCIe links below {expected}: {', '.join(parts)}")
    ev = [_stated(expectations, "pcie.gen", "pcie.width")]
    for link in short:
        ev += [evidence(src, lines) for src, lines in link.evidence.items()]
    one = short[0]
    yield _short(
        "expect.pcie", title,
        "A GPU's PCIe link trained below what the slot gives: host-to-device transfers, "
        "GPUDirect RDMA and checkpoints run slower. It does not retrain by itself: drain "
        "the node and reseat or repair the riser, cable or slot.",
        Action.DRAIN_AND_REPAIR, Blame.NODE, ev,
        gpu_scope(one.bus_id, one.index, one.uuid) if len(short) == 1 else NODE)


@rule("expect.infiniband", produces=("expect.infiniband",))
def infiniband(expectations: Expectations, ib_ports: list[IbPort] | None = None
               ) -> Iterator[Finding]:
    """Fewer InfiniBand ports in the expected state (Active) at the expected rate than
    expected (every port when no count is stated)."""
    want = expectations.infiniband
    if (want.ports is None and want.rate_gbps is None and want.state is None) \
            or ib_ports is None:
        return
    state = want.state or DEFAULT_IB_STATE
    good = active_ports(ib_ports, state, want.rate_gbps)
    need = want.ports if want.ports is not None else len(ib_ports)
    if len(good) >= need:
        return
    bad = [p for p in ib_ports if p not in good]
    rate = f" at {want.rate_gbps:g} Gb/s" if want.rate_gbps is not None else ""
    gap = f": {', '.join(_ib_label(p) for p in bad)}" if bad else ""
    ev = [_stated(expectations, "infiniband.ports", "infiniband.rate_gbps",
                  "infiniband.state")]
    ev += [evidence(p.source, p.lines or [_ib_label(p)]) for p in bad]
    yield _short(
        "expect.infiniband", f"{len(good)} of {need} expected InfiniBand ports {state}{rate}"
        f"{gap}",
        "The node has fewer working HCA ports than it should: multi-node jobs lose a rail "
        "(NCCL falls back or hangs) or run at a lower rate. Check the cable, the switch "
        "port and the HCA (ibstat, the switch's port counters); drain the node until the "
        "port is back.", Action.DRAIN_AND_REPAIR, Blame.NODE, ev)


@rule("expect.mig", produces=("expect.mig",))
def mig(expectations: Expectations, smi: list[tuple[str, SmiReport]] | None = None
        ) -> Iterator[Finding]:
    """GPUs whose MIG mode is not the expected one."""
    want = expectations.gpu.mig
    if want is None:
        return
    source, modes = mig_modes(smi)
    bad = [(label, mode) for label, mode in modes
           if (mode.strip().casefold() == "enabled") != want]
    if not bad:
        return
    word = "enabled" if want else "disabled"
    yield _short(
        "expect.mig", f"MIG mode not {word} on {len(bad)} GPU(s): "
        f"{', '.join(label for label, _ in bad)}",
        "The GPUs' MIG mode is not what this node is set up for: jobs get MIG slices "
        "where they expect whole GPUs, or the reverse. Set it (nvidia-smi -mig 0|1 on the "
        "idle GPUs, then a GPU reset) and find out what changed it.",
        Action.FIX_CONFIG, Blame.CONFIG,
        [_stated(expectations, "gpu.mig"),
         evidence(source, [f"{label}: MIG Mode Current: {mode}" for label, mode in bad])])


@rule("expect.persistence", produces=("expect.persistence",))
def persistence(expectations: Expectations, visible_gpus: Visible | None = None
                ) -> Iterator[Finding]:
    """GPUs whose persistence mode is not the expected one."""
    want = expectations.gpu.persistence
    if want is None or visible_gpus is None:
        return
    bad = [g for g in visible_gpus[1]
           if g.persistence_mode is not None and g.persistence_mode != want]
    if not bad:
        return
    word = "on" if want else "off"
    yield _short(
        "expect.persistence", f"persistence mode not {word} on {len(bad)} GPU(s): "
        f"{', '.join(f'GPU {g.index}' for g in bad)}",
        "Persistence mode is not as this node is set up: without it the driver tears the "
        "GPUs down between jobs (slow starts, lost state, fabric re-registration). Start "
        "nvidia-persistenced (systemctl enable --now nvidia-persistenced).",
        Action.FIX_CONFIG, Blame.CONFIG,
        [_stated(expectations, "gpu.persistence"),
         evidence(visible_gpus[0], [f"{g.line}: persistence mode "
                                    f"{'on' if g.persistence_mode else 'off'}" for g in bad])])


@rule("expect.hugepages", produces=("expect.hugepages",))
def hugepages(expectations: Expectations, host_hugepages: list[HugePagePool] | None = None
              ) -> Iterator[Finding]:
    """Fewer hugepages of the expected size reserved than expected."""
    want = expectations.hugepages
    if want.count is None or host_hugepages is None:
        return
    size = want.size_kb or DEFAULT_HUGEPAGE_KB
    pool = next((p for p in host_hugepages if p.size_kb == size), None)
    have = (pool.nr or 0) if pool is not None else 0
    if have >= want.count:
        return
    line = (f"hugepages-{size}kB/nr_hugepages: {have}" if pool is not None
            else f"no hugepages-{size}kB pool")
    yield _short(
        "expect.hugepages", f"{have} hugepages of {size} kB reserved, expected {want.count}",
        "The hugepage pool is smaller than this node should reserve: jobs that map it "
        "(DPDK, some MPI and storage stacks) fail or fall back to small pages. Reserve it "
        "at boot (hugepages= on the kernel command line) or through "
        "/sys/kernel/mm/hugepages, and look for what took the memory.",
        Action.FIX_CONFIG, Blame.CONFIG,
        [_stated(expectations, "hugepages.size_kb", "hugepages.count"),
         evidence("hugepages", [line])])


@rule("expect.unchecked", produces=("expect.unchecked",))
def unchecked(expectations: Expectations, visible_gpus: Visible | None = None,
              driver_versions: DriverVersions | None = None,
              smi: list[tuple[str, SmiReport]] | None = None,
              nvswitches: list[NvSwitchSighting] | None = None,
              pcie_links: list[PcieLink] | None = None, ib_ports: list[IbPort] | None = None,
              host_hugepages: list[HugePagePool] | None = None) -> Iterator[Finding]:
    """The stated expectations the snapshot holds no input for (the GPU count has its
    own finding: it makes the verdict unknown)."""
    gpu = expectations.gpu
    drv = driver_versions or DriverVersions(None, None, None)
    names = [g.name for g in visible_gpus[1] if g.name] if visible_gpus else []
    persist = [g for g in visible_gpus[1] if g.persistence_mode is not None] \
        if visible_gpus else []
    missing: list[tuple[bool, str]] = [
        (gpu.model is not None and not names, "GPU model (no driver GPU list)"),
        (gpu.driver is not None and not (drv.kernel_module or drv.userspace),
         "driver (no /proc/driver/nvidia/version, nvidia-smi or NVML)"),
        (gpu.cuda is not None and not drv.cuda, "CUDA version (no nvidia-smi or NVML)"),
        (gpu.mig is not None and not mig_modes(smi)[1], "MIG mode (no nvidia-smi -q)"),
        (gpu.persistence is not None and not persist,
         "persistence mode (no NVML or nvidia-smi -q)"),
        (expectations.nvswitch.count is not None and nvswitches is None,
         "NVSwitches (no PCI listing, device nodes or fabric manager log)"),
        (any(v is not None for v in (expectations.infiniband.ports,
                                     expectations.infiniband.rate_gbps,
                                     expectations.infiniband.state)) and ib_ports is None,
         "infiniband (no ibstat output or /sys/class/infiniband)"),
        (expectations.hugepages.count is not None and host_hugepages is None,
         "hugepages (no /sys/kernel/mm/hugepages)"),
    ]
    gaps = [why for cond, why in missing if cond]
    gaps += _pcie_unchecked(expectations, pcie_links)
    if not gaps:
        return
    yield finding(
        "expect.unchecked", Severity.INFO, f"could not check: {'; '.join(gaps)}",
        "These expectations were not checked: the snapshot lacks what shows them. "
        "Collect on the host itself (gputriage check, as root) to check them all.",
        Action.NONE, Blame.UNKNOWN, evidence=[Evidence("expectations",
                                                       tuple(expectations.stated()),
                                                       expectations.path)])


def _pcie_unchecked(exp: Expectations, links: list[PcieLink] | None) -> list[str]:
    if exp.pcie.gen is None and exp.pcie.width is None:
        return []
    gpu_links = [x for x in links or () if x.kind == "gpu"]
    if not gpu_links:
        return ["PCIe links (no sysfs, lspci or nvidia-smi)"]
    out = []
    _, unsure = pcie_gaps(exp, gpu_links)
    if unsure:
        out.append(f"PCIe generation of {len(unsure)} idle GPU link(s) (an idle GPU slows "
                   "its link down)")
    if exp.pcie.width is not None and any(x.cur_width is None for x in gpu_links):
        out.append("PCIe width of some GPU links (not reported)")
    return out
