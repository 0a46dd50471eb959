"""Facts about the NVLink fabric: link state and errors, NVSwitches, the fabric
manager's log, per-GPU fabric registration and whether this host needs the
fabric manager at all.

Registered facts: ``nvlink``, ``nvlink_errors``, ``fm_log``, ``nvswitches``,
``fabric_states`` and ``needs_fabric_manager``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gputriage.facts.stack import SMI_SOURCES, GpuSighting
from gputriage.facts.table import FactReader, FactTable, Missing
from gputriage.knowledge import GpuProfile, gpu_profile
from gputriage.model import Evidence
from gputriage.parsers import fabricmanager, nvlink
from gputriage.parsers.pci import PciFunction
from gputriage.text.fields import split_lines

FACTS = FactTable()

__all__ = ["FM_SOURCE", "FabricNeed", "FabricState", "NvSwitchSighting", "gpu_profile_for",
           "gpu_profile_of"]

FM_SOURCE = "fabricmanager_journal"
_NVSWITCH_NODE = re.compile(r"/dev/nvidia-nvswitch[0-9]+$")
_FABRIC_HEAD = re.compile(r"^\s*Fabric\s*$|<fabric>")
_FABRIC_FIELD = re.compile(r"^\s*(?:State|Status)\s*:|<(?:state|status)>")
_PARTITION_FIELD = re.compile(r"^\s*(?:CliqueId|ClusterUUID)\s*:|<(?:cliqueId|clusterUuid)>")
_PENDING = ("in progress", "not started")


@dataclass(frozen=True)
class NvSwitchSighting:
    """Evidence that an NVSwitch exists: a PCI function, a device node or an FM message."""

    source: str
    where: str  # PCI address, device node path, or "fabric manager"
    line: str


@dataclass(frozen=True)
class FabricState:
    """One GPU's NVLink fabric registration as nvidia-smi reports it (Hopper and later)."""

    index: int | None
    bus_id: str | None
    uuid: str | None
    name: str | None
    state: str  # Not Started | In Progress | Completed
    status: str | None  # Success, an NV_ERR_* code, or None for N/A
    source: str
    lines: tuple[str, ...]
    clique_id: str | None = None  # "0" and an all-zero cluster UUID outside an NVLink
    cluster_uuid: str | None = None  # partition (normal on a single NVSwitch board)
    partition_lines: tuple[str, ...] = ()  # the CliqueId / ClusterUUID lines as printed

    @property
    def pending(self) -> bool:
        """Registration has not finished (CUDA reports 802 until it does)."""
        return self.state.strip().lower() in _PENDING

    @property
    def completed(self) -> bool:
        """Registration finished and succeeded."""
        return self.state.strip().lower() == "completed" and (
            self.status is None or self.status.strip().lower() == "success")


@dataclass(frozen=True)
class FabricNeed:
    """Whether this host needs nvidia-fabricmanager, and where it must run.

    ``where`` is "here" (NVSwitches on this host: the service must run here),
    "host" (GPUs wait for fabric registration but no NVSwitch is visible: a VM
    given SXM GPUs without their switches; the fabric is managed outside) or
    "nowhere" (no NVSwitch: the service has nothing to do).
    """

    needed: bool
    where: str
    reason: str
    evidence: tuple[Evidence, ...] = ()


@FACTS.fact("nvlink", sources=("nvidia_smi_nvlink_status",))
def _nvlink(facts: FactReader) -> nvlink.NvlinkStatus:
    """NVLink state per GPU (``nvidia-smi nvlink -s``)."""
    return facts.parse("nvidia_smi_nvlink_status", nvlink.parse_nvlink_status)


@FACTS.fact("nvlink_errors", sources=("nvidia_smi_nvlink_errors",))
def _nvlink_errors(facts: FactReader) -> nvlink.NvlinkErrors:
    """NVLink error counters per GPU and link (``nvidia-smi nvlink -e``)."""
    return facts.parse("nvidia_smi_nvlink_errors", nvlink.parse_nvlink_errors)


@FACTS.fact("fm_log", sources=(FM_SOURCE,))
def _fm_log(facts: FactReader) -> fabricmanager.FmLog:
    """The fabric manager's journal or log file."""
    return facts.parse(FM_SOURCE, fabricmanager.parse_fabricmanager_log)


def _pci_line(fn: PciFunction) -> str:
    header = fn.raw.get("header")
    if header:
        return header
    dev = f"{fn.device:04x}" if fn.device is not None else "?"
    cls = f"{fn.class_code:06x}" if fn.class_code is not None else "?"
    return f"{fn.address}: vendor 10de device {dev} class {cls} (NVSwitch)"


@FACTS.fact("nvswitches")
def _nvswitches(facts: FactReader) -> list[NvSwitchSighting]:
    """NVSwitches seen on PCI, as /dev/nvidia-nvswitchN nodes or by the fabric
    manager; [] when the host's PCI listing shows none (or the fabric manager
    found none); Missing when nothing can tell."""
    seen: list[NvSwitchSighting] = []
    known = False
    functions = facts.maybe("pci")
    if functions is not None:
        source = facts.maybe("pci_source", "pci_devices")
        seen += [NvSwitchSighting(source, f.address, _pci_line(f))
                 for f in functions if f.is_nvswitch]
        known = any(f.is_gpu for f in functions) or bool(seen)
    for node in facts.maybe("devnodes", []) or []:
        if _NVSWITCH_NODE.search(node.path or ""):
            seen.append(NvSwitchSighting("dev_nvidia", node.path, node.path))
    log = facts.maybe("fm_log")
    if log is not None:
        for entry in log.entries:
            if entry.nvswitch or (entry.event == "configured" and "NVSwitch" in entry.message):
                seen.append(NvSwitchSighting(FM_SOURCE, entry.nvswitch or "fabric manager",
                                             split_lines(entry.line)[0]))
        if log.having("nothing-to-do"):
            known = True
    if not seen and not known:
        raise Missing("no PCI listing, NVSwitch device node or fabric manager log tells "
                      "whether this host has NVSwitches")
    return seen


def _fabric_blocks(text: str) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each GPU's Fabric section of nvidia-smi -q (text or XML), in order: its state and
    status lines, and its CliqueId / ClusterUUID lines."""
    lines = split_lines(text)
    blocks: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for i, line in enumerate(lines):
        if _FABRIC_HEAD.search(line):
            block = [line.strip()] if "<fabric>" not in line else []
            ids = [nxt.strip() for nxt in lines[i + 1:i + 8] if _PARTITION_FIELD.search(nxt)]
            block += [nxt.strip() for nxt in lines[i + 1:i + 8] if _FABRIC_FIELD.search(nxt)]
            blocks.append((tuple(block), tuple(ids)))
    return blocks


@FACTS.fact("fabric_states", sources=SMI_SOURCES)
def _fabric_states(facts: FactReader) -> list[FabricState]:
    """Per-GPU Fabric State / Status from the best nvidia-smi output that has them
    ([] when no GPU reports one: pre-Hopper and PCIe parts print N/A)."""
    for source, report in facts.get("smi"):
        gpus = [g for g in report.gpus if g.fabric_state
                and g.fabric_state.strip().lower() not in ("n/a", "not supported")]
        if not gpus:
            continue
        blocks = _fabric_blocks(facts.text(source) or "")
        aligned = len(blocks) == len(report.gpus)
        states = []
        for pos, g in enumerate(report.gpus):
            if not any(g is x for x in gpus):
                continue
            lines, ids = blocks[pos] if aligned else ((
                f"Fabric State: {g.fabric_state}", f"Fabric Status: {g.fabric_status or 'N/A'}"),
                ())
            states.append(FabricState(g.index, g.pci_bus_id, g.uuid, g.name,
                                      g.fabric_state.strip(), g.fabric_status, source, lines,
                                      g.fabric_clique_id, g.fabric_cluster_uuid, ids))
        return states
    return []


def gpu_profile_for(facts: FactReader, name: str | None = None,
                    bus_id: str | None = None) -> GpuProfile | None:
    """:func:`gpu_profile_of` with the host's GPUs read from the fact store."""
    return gpu_profile_of(name, bus_id, facts.maybe("pci_gpus"), facts.maybe("visible_gpus"))


def gpu_profile_of(name: str | None, bus_id: str | None = None,
                   pci_gpus: list[PciFunction] | None = None,
                   visible_gpus: tuple[str, list[GpuSighting]] | None = None,
                   ) -> GpuProfile | None:
    """The profile of a GPU from its name, else its PCI function (device id or the
    lspci description), else the one GPU model on the host's PCI bus, else the one
    model the driver lists."""
    profile = gpu_profile(name) if name else None
    if profile is not None:
        return profile
    gpus = list(pci_gpus or [])
    chosen = [f for f in gpus if bus_id and f.address == bus_id] or gpus
    found = {_pci_profile(f) for f in chosen} - {None}
    if len(found) == 1:
        return found.pop()
    names = {g.name for g in visible_gpus[1] if g.name} if visible_gpus else set()
    found = {gpu_profile(n) for n in names} - {None}
    return found.pop() if len(found) == 1 else None


def _pci_profile(fn: PciFunction) -> GpuProfile | None:
    return gpu_profile(fn.raw.get("description"), fn.device)


def _gpu_names(facts: FactReader) -> list[tuple[str | None, GpuProfile | None]]:
    """(name, profile) of every GPU the driver or the PCI bus lists."""
    visible = facts.maybe("visible_gpus")
    if visible and visible[1] and any(g.name for g in visible[1]):
        return [(g.name, gpu_profile_for(facts, g.name, g.bus_id)) for g in visible[1]]
    return [(f.raw.get("description"), _pci_profile(f)) for f in facts.maybe("pci_gpus", []) or []]


def _switch_evidence(switches: list[NvSwitchSighting]) -> list[Evidence]:
    by_source: dict[str, list[str]] = {}
    for s in switches:
        by_source.setdefault(s.source, []).append(s.line)
    return [Evidence(src, tuple(lines[:8])) for src, lines in by_source.items()]


def _switch_reason(switches: list[NvSwitchSighting]) -> str:
    pci = {s.where for s in switches if s.source not in ("dev_nvidia", FM_SOURCE)}
    nodes = {s.where for s in switches if s.source == "dev_nvidia"}
    if pci:
        return f"{len(pci)} NVSwitch{'es' if len(pci) > 1 else ''} on PCI"
    if nodes:
        return f"{len(nodes)} /dev/nvidia-nvswitch device node{'s' if len(nodes) > 1 else ''}"
    return "the fabric manager log names NVSwitches"


@FACTS.fact("needs_fabric_manager")
def _needs_fabric_manager(facts: FactReader) -> FabricNeed:
    """Whether nvidia-fabricmanager must run, here or outside this (virtual) machine."""
    switches = facts.maybe("nvswitches")
    states = facts.maybe("fabric_states", []) or []
    pending = [s for s in states if s.pending]
    if switches:
        return FabricNeed(True, "here", _switch_reason(switches),
                          tuple(_switch_evidence(switches)))
    state_ev = tuple(Evidence(s.source, s.lines) for s in pending[:4])
    if switches is not None:  # known: no NVSwitch here
        if pending:
            return FabricNeed(True, "host", "GPUs wait for NVLink fabric registration but no "
                              "NVSwitch is visible here", state_ev)
        return FabricNeed(False, "nowhere", "no NVSwitch on this host")
    if pending:
        return FabricNeed(True, "here", "GPUs wait for NVLink fabric registration", state_ev)
    need = _need_from_inventory(_gpu_names(facts))
    if need is None:
        raise Missing("cannot tell whether this host has NVSwitches (no PCI listing, no "
                      "fabric manager log, no 8-GPU SXM inventory)")
    return need


def _need_from_inventory(gpus: list[tuple[str | None, GpuProfile | None]]) -> FabricNeed | None:
    """What the GPU models alone tell: an 8-GPU SXM baseboard carries NVSwitches, PCIe
    and GeForce cards have none; None when they cannot tell."""
    if not gpus:
        return None
    profiles = [p for _, p in gpus]
    sxm = [p for p in profiles if p is not None and p.form == "sxm"]
    if len(sxm) == len(gpus) and len(gpus) >= 8 and 8 in sxm[0].baseboard_gpus:
        return FabricNeed(True, "here", f"{len(gpus)} {sxm[0].model} GPUs: an 8-GPU baseboard "
                          "carries NVSwitches")
    if all(p is not None and p.form == "pcie" for p in profiles):
        return FabricNeed(False, "nowhere", "PCIe cards only: no NVSwitch")
    if all(p is None and n and "GeForce" in n for n, p in gpus):
        return FabricNeed(False, "nowhere", "GeForce cards: no NVSwitch")
    return None
