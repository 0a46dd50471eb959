"""PCIe link facts: one :class:`PcieLink` per GPU and network function, merging
sysfs or lspci (link width/speed, AER) with nvidia-smi (generation, replays,
load, virtualization).

Registers the fact ``pcie_links``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gputriage import knowledge
from gputriage.facts.table import FactReader, FactTable, Missing
from gputriage.parsers import lspci
from gputriage.parsers.nvsmi import SmiGpu
from gputriage.parsers.pci import PciFunction
from gputriage.text.fields import normalize_bus_id, split_lines

FACTS = FactTable()

__all__ = ["GEN_GTS", "PcieLink", "aer_total", "gen_to_gts", "link_lines", "pcie_acs",
           "pcie_links"]

# PCIe generation -> transfer rate per lane in GT/s.
GEN_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
IDLE_GTS = 2.5  # the speed NVIDIA GPUs drop their link to when idle
BUSY_MEMORY_MIB = 1024  # memory in use above this (and 5 % of the total) with P0: a job
#: P-states from this one down are idle ones (NVIDIA: P0/P1 full speed, P2/P3 compute,
#: P8 idle, P12 minimum power); the driver lowers the link's generation with them
LOW_POWER_PSTATE = 5
_PSTATE = re.compile(r"^\s*P([0-9]{1,2})\s*$")
_LSPCI_SOURCES = ("lspci_nvidia", "lspci_mellanox")


def gen_to_gts(gen: int | None) -> float | None:
    """PCIe generation -> GT/s (None when unknown)."""
    return GEN_GTS.get(gen) if gen is not None else None


@dataclass
class PcieLink:
    """The PCIe link of one GPU or NIC, from every source that describes it.

    ``kind`` is "gpu", "nic" or "device" (an lspci excerpt without its header
    line: the function is unknown). ``load`` is "busy", "idle" or "unknown".
    ``evidence`` maps a source name to the lines that show the link.
    """

    bus_id: str  # "" for a headerless lspci excerpt
    kind: str
    name: str | None = None
    index: int | None = None
    uuid: str | None = None
    device_id: int | None = None
    driver: str | None = None
    cur_gts: float | None = None
    max_gts: float | None = None
    cur_width: int | None = None
    max_width: int | None = None
    downgraded: frozenset[str] = frozenset()  # lspci's "(downgraded)" tags: speed, width
    load: str = "unknown"
    load_reason: str | None = None
    virtualization: str | None = None  # "Pass-Through", "VGPU" when in a VM
    replays: int | None = None
    aer: dict[str, dict[str, int]] = field(default_factory=dict)  # sysfs aer_dev_* counters
    uesta: tuple[str, ...] = ()  # lspci AER status flags set
    cesta: tuple[str, ...] = ()
    profile: knowledge.GpuProfile | None = None
    speed_source: str | None = None
    width_source: str | None = None
    smi_source: str | None = None
    evidence: dict[str, list[str]] = field(default_factory=dict)  # link lines by source
    aer_evidence: dict[str, list[str]] = field(default_factory=dict)  # AER lines by source

    @property
    def label(self) -> str:
        """How titles name the device: ``GPU 3 0000:5d:00.0`` / ``NIC 0000:19:00.0``."""
        if self.kind == "gpu":
            idx = f"GPU {self.index}" if self.index is not None else "GPU"
            return f"{idx} {self.bus_id}".strip()
        if self.kind == "nic":
            return f"NIC {self.bus_id}"
        return "PCI device (excerpt without its address)" if not self.bus_id \
            else f"PCI device {self.bus_id}"

    @property
    def is_virtualized(self) -> bool:
        """Seen from inside a VM (pass-through or vGPU guest)."""
        v = (self.virtualization or "").lower()
        return "pass" in v or v == "vgpu"

    def add_evidence(self, source: str, lines: list[str], aer: bool = False) -> None:
        """Remember link (or, with ``aer``, AER) lines of one source, each once."""
        kept = (self.aer_evidence if aer else self.evidence).setdefault(source, [])
        kept.extend(ln for ln in lines if ln and ln not in kept)


def _kind(f: PciFunction) -> str | None:
    """GPUs, and the NICs that carry GPU traffic: InfiniBand / ConnectX functions and
    other network functions built for x8 or more (not the onboard management port)."""
    if f.is_gpu:
        return "gpu"
    if f.is_infiniband or (f.is_network and (f.max_link_width or 0) >= 8):
        return "nic"
    return None


def _printed(text: list[str], label: str, value: str) -> str:
    """The line as printed: lspci values in ``raw`` carry their continuation lines."""
    best = ""
    for line in text:
        body = line.strip()
        if body.startswith(label + ":"):
            rest = body[len(label) + 1:].strip()
            if rest and value.startswith(rest) and len(body) > len(best):
                best = body
    return best or f"{label}: {value}"


def link_lines(f: PciFunction, source: str, text: list[str]) -> list[str]:
    """The lines that show a function's link: its sysfs attributes, or its lspci header
    with LnkCap and LnkSta as printed (``text``: the lspci input's lines)."""
    if source == "pci_devices":
        attrs = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")
        return [f"{f.address}/{a}: {f.raw[a]}" for a in attrs if f.raw.get(a)]
    lines = [f.raw["header"]] if f.raw.get("header") else []
    for key, label in (("lnkcap", "LnkCap"), ("lnksta", "LnkSta")):
        if f.raw.get(key):
            lines.append(_printed(text, label, f.raw[key]))
    return lines


def _aer_lines(f: PciFunction, source: str, text: list[str]) -> list[str]:
    if source == "pci_devices":
        return [f"{f.address}/{name}: " + " ".join(f"{k} {v}" for k, v in counts.items() if v)
                for name, counts in sorted(f.aer.items()) if any(counts.values())]
    head = [f.raw["header"]] if f.raw.get("header") else []
    found = [_printed(text, label, f.raw[key])
             for key, label in (("uesta", "UESta"), ("cesta", "CESta"))
             if f.raw.get(key) and f.raw.get(f"{key}_set")]
    return head + found if found else []


def _from_pci(f: PciFunction, kind: str, source: str, text: list[str]) -> PcieLink:
    link = PcieLink(bus_id=f.address, kind=kind, device_id=f.device, driver=f.driver,
                    name=f.raw.get("description"))
    link.cur_gts, link.max_gts = f.link_speed_gts("current"), f.link_speed_gts("max")
    link.cur_width, link.max_width = f.current_link_width, f.max_link_width
    if link.cur_gts is not None or link.cur_width is not None:
        link.speed_source = link.width_source = source
    down = f.raw.get("lnksta_downgraded", "")
    link.downgraded = frozenset(d for d in down.split(",") if d)
    link.aer = {k: dict(v) for k, v in f.aer.items()}
    link.uesta = tuple(x for x in f.raw.get("uesta_set", "").split(",") if x)
    link.cesta = tuple(x for x in f.raw.get("cesta_set", "").split(",") if x)
    link.add_evidence(source, link_lines(f, source, text))
    link.add_evidence(source, _aer_lines(f, source, text), aer=True)
    if kind == "gpu":
        link.profile = knowledge.gpu_profile(None, f.device)
    return link


def _headerless(facts: FactReader) -> list[tuple[str, PciFunction]]:
    """lspci excerpts cut from inside a block (only LnkCap/LnkSta and such)."""
    out: list[tuple[str, PciFunction]] = []
    for source in _LSPCI_SOURCES:
        try:
            functions = facts.parse(source, lspci.parse_lspci)
        except Missing:
            continue
        out.extend((source, f) for f in functions if not f.address and (
            f.current_link_width is not None or f.current_link_speed is not None
            or f.raw.get("uesta") or f.raw.get("cesta")))
    return out


def _low_power_state(state: str | None) -> bool:
    """P5 and below (P8 idle, P12 minimum): the driver has clocked the GPU, and trained
    its link, down for want of work, whatever process holds memory on it."""
    m = _PSTATE.match(state or "")
    return m is not None and int(m.group(1)) >= LOW_POWER_PSTATE


def _smi_load(g: SmiGpu) -> tuple[str, str | None]:
    """Whether nvidia-smi shows the GPU working, idle, or cannot tell."""
    util, state, used, total = (g.utilization_gpu_pct, g.performance_state,
                                g.memory_used_mib, g.memory_total_mib)
    if util is not None and util > 0:
        return "busy", f"utilization {util} %"
    compute = [p for p in g.processes if "c" in (p.type or "").lower()]
    if _low_power_state(state):
        held = f", {len(compute)} idle compute process(es) holding memory" if compute else ""
        return "idle", f"performance state {state}{held}"
    if compute:
        return "busy", f"{len(compute)} compute process(es) on the GPU"
    if state == "P0" and used is not None and used > BUSY_MEMORY_MIB and (
            total is None or used > total * 0.05):
        return "busy", f"P0 with {used} MiB in use"
    if util == 0:
        return "idle", f"utilization 0 %, {state or 'P-state unknown'}"
    if state and state not in ("P0", "P1", "P2"):
        return "idle", f"performance state {state}"
    return "unknown", None


def _smi_line(g: SmiGpu) -> str:
    parts = [f"GPU {g.index} {g.pci_bus_id or ''} {g.name or ''}".strip() + ":"]
    if g.pcie_gen_current is not None or g.pcie_gen_max is not None:
        parts.append(f"PCIe generation {g.pcie_gen_current} of max {g.pcie_gen_max},")
    if g.pcie_width_current is not None or g.pcie_width_max is not None:
        parts.append(f"link width x{g.pcie_width_current} of x{g.pcie_width_max},")
    if g.pcie_replays is not None:
        parts.append(f"replays since reset {g.pcie_replays},")
    util = g.utilization_gpu_pct if g.utilization_gpu_pct is not None else "?"
    used = g.memory_used_mib if g.memory_used_mib is not None else "?"
    parts.append(f"utilization {util} %, {g.performance_state or 'P?'}, {used} MiB used")
    if g.virtualization_mode and g.virtualization_mode.lower() not in ("none", "n/a"):
        parts.append(f"(virtualization: {g.virtualization_mode})")
    return " ".join(parts)


def _merge_smi(link: PcieLink, g: SmiGpu, source: str) -> None:
    link.smi_source = source
    link.driver = link.driver or "nvidia"  # nvidia-smi lists only GPUs the driver holds
    link.index = g.index if link.index is None else link.index
    link.uuid = link.uuid or g.uuid
    link.name = g.name or link.name
    # nvidia-smi's "Max" generation already allows for what the host slot supports,
    # so it is the better yardstick for speed; sysfs/lspci stay first for width.
    cur, mx = gen_to_gts(g.pcie_gen_current), gen_to_gts(g.pcie_gen_max)
    if cur is not None and mx is not None:
        link.cur_gts, link.max_gts, link.speed_source = cur, mx, source
    if link.cur_width is None and g.pcie_width_current is not None:
        link.cur_width, link.max_width, link.width_source = (
            g.pcie_width_current, g.pcie_width_max, source)
    link.replays = g.pcie_replays
    link.load, link.load_reason = _smi_load(g)
    link.virtualization = g.virtualization_mode
    if link.profile is None:
        link.profile = knowledge.gpu_profile(g.name, link.device_id)
    link.add_evidence(source, [_smi_line(g)])


def _smi_gpus(facts: FactReader) -> dict[str, tuple[str, SmiGpu]]:
    found: dict[str, tuple[str, SmiGpu]] = {}
    for source, report in facts.maybe("smi", []):
        for g in report.gpus:
            bus = normalize_bus_id(g.pci_bus_id)
            if bus and bus not in found:
                found[bus] = (source, g)
    return found


def _busless_smi_gpus(facts: FactReader) -> list[tuple[str, SmiGpu]]:
    """nvidia-smi GPUs known without a bus id (a CSV query of index and link fields, a
    ``-q`` section) that say something about their PCIe link."""
    out: list[tuple[str, SmiGpu]] = []
    for source, report in facts.maybe("smi", []):
        out.extend((source, g) for g in report.gpus if not g.pci_bus_id and any(
            v is not None for v in (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current,
                                    g.pcie_width_max)))
    return out


def _skip_sibling(f: PciFunction, kinds: dict[str, str]) -> bool:
    """Function N>0 of a multi-port NIC shares the physical link of function 0."""
    if f.raw.get("physfn"):
        return True  # an SR-IOV virtual function: no link of its own
    base = f.address[:-1] + "0"
    return not f.address.endswith(".0") and kinds.get(base) == "nic"


def _text(facts: FactReader, source: str) -> list[str]:
    return [] if source == "pci_devices" else split_lines(facts.text(source) or "")


def _evidence_source(facts: FactReader, f: PciFunction, kind: str, source: str) -> str:
    """The source a function's lines came from (lspci input may be split in two)."""
    if source == "pci_devices":
        return source
    if kind == "nic" and facts.text("lspci_mellanox") is not None:
        return "lspci_mellanox"
    return "lspci_nvidia" if facts.text("lspci_nvidia") is not None else source


@FACTS.fact("pcie_links", sources=_LSPCI_SOURCES)
def pcie_links(facts: FactReader) -> list[PcieLink]:
    """Every GPU and NIC PCIe link the inputs describe (sysfs, lspci, nvidia-smi)."""
    functions: list[PciFunction] = facts.maybe("pci", [])
    source = facts.maybe("pci_source", "pci_devices")
    kinds = {f.address: k for f in functions if (k := _kind(f))}
    links: dict[str, PcieLink] = {}
    for f in functions:
        kind = kinds.get(f.address)
        if kind and not _skip_sibling(f, kinds):
            src = _evidence_source(facts, f, kind, source)
            links[f.address] = _from_pci(f, kind, src, _text(facts, src))
    for bus, (smi_source, g) in _smi_gpus(facts).items():
        link = links.get(bus)
        if link is None:
            link = links[bus] = PcieLink(bus_id=bus, kind="gpu")
        _merge_smi(link, g, smi_source)
    for smi_source, g in _busless_smi_gpus(facts):
        link = next((x for x in links.values() if x.kind == "gpu" and x.index == g.index), None)
        if link is None:
            link = links[f"#{smi_source}:{g.index}"] = PcieLink(bus_id="", kind="gpu")
        if link.cur_gts is None or link.bus_id == "":
            _merge_smi(link, g, smi_source)
    out = sorted(links.values(), key=lambda x: (x.kind != "gpu", x.index is None,
                                                x.index or 0, x.bus_id))
    out += [_from_pci(f, "device", src, _text(facts, src)) for src, f in _headerless(facts)]
    if not out:
        raise Missing("no PCIe link information (sysfs pci_devices, lspci or nvidia-smi)")
    return out


def aer_total(link: PcieLink, which: str) -> int:
    """A sysfs AER total: ``which`` is "correctable", "fatal" or "nonfatal"."""
    counts: dict[str, Any] = link.aer.get(f"aer_dev_{which}", {})
    totals = [v for k, v in counts.items() if k.startswith("TOTAL_")]
    return totals[0] if totals else sum(counts.values())


@FACTS.fact("pcie_acs", sources=_LSPCI_SOURCES)
def pcie_acs(facts: FactReader) -> list[tuple[str, lspci.AcsControl]]:
    """(source, control) for every ACSCtl line of the lspci inputs, bridges included."""
    found: list[tuple[str, lspci.AcsControl]] = []
    for source in _LSPCI_SOURCES:
        found += [(source, c) for c in lspci.acs_controls(facts.text(source) or "")]
    if not found:
        raise Missing("no ACSCtl line in the lspci input (lspci -vvv run as root prints them)")
    return found
