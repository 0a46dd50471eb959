"""Parser for ``nvidia-smi -q`` / ``nvidia-smi -a`` text output.

The format is indentation based: ``Key : Value`` lines and bare section
names, nested by indentation, under one ``GPU 00000000:18:00.0`` header per
GPU. Key padding differs between drivers, so keys are matched after
whitespace normalisation. Partial outputs (``-q -d SECTION``,
``--display=PIDS``, a grep of one section) are accepted; indented lines seen
before any GPU header are attributed to an implicit first GPU.
"""

from __future__ import annotations

import re

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import gated_blocks, gated_by
from gputriage.parsers.nvsmi import (
    FieldSpec,
    SmiGpu,
    SmiProcess,
    SmiReport,
    finish_gpu,
    norm_key,
    parse_float,
    parse_int,
    parse_link_width,
    parse_str,
    scan_smi_errors,
)
from gputriage.text.fields import normalize_bus_id, parse_bool, split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["claim_nvsmi_text", "parse_nvsmi_text"]

_GPU_HEADER_RE = re.compile(
    r"^GPU\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$"
)
_BANNER_RE = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
_SECTION_RE = re.compile(r"^[A-Z][A-Za-z0-9 ()/.-]{1,60}$")  # a bare section name
_LINK = "pci/gpu link info"

_SPECS: tuple[FieldSpec, ...] = (
    ("name", parse_str, ("product name",)),
    ("product_brand", parse_str, ("product brand",)),
    ("architecture", parse_str, ("product architecture",)),
    ("persistence_mode", parse_bool, ("persistence mode",)),
    ("mig_mode_current", parse_str, ("mig mode/current",)),
    ("serial", parse_str, ("serial number",)),
    ("uuid", parse_str, ("gpu uuid",)),
    ("minor_number", parse_int, ("minor number",)),
    ("vbios", parse_str, ("vbios version",)),
    ("virtualization_mode", parse_str, ("gpu virtualization mode/virtualization mode",)),
    ("recovery_action", parse_str, ("gpu recovery action",)),
    ("pcie_gen_max", parse_int, (f"{_LINK}/pcie generation/max",)),
    ("pcie_gen_current", parse_int, (f"{_LINK}/pcie generation/current",)),
    ("pcie_width_max", parse_link_width, (f"{_LINK}/link width/max",)),
    ("pcie_width_current", parse_link_width, (f"{_LINK}/link width/current",)),
    ("pcie_replays", parse_int, ("pci/replays since reset",)),
    ("ecc_mode", parse_bool, ("ecc mode/current",)),
    ("retired_pages_sbe", parse_int, ("retired pages/single bit ecc",)),
    ("retired_pages_dbe", parse_int, ("retired pages/double bit ecc",)),
    ("remapped_correctable", parse_int, ("remapped rows/correctable error",)),
    ("remapped_uncorrectable", parse_int, ("remapped rows/uncorrectable error",)),
    ("remapping_pending", parse_bool, ("remapped rows/pending",)),
    ("remapping_failure", parse_bool, ("remapped rows/remapping failure occurred",)),
    ("temperature_c", parse_int, ("temperature/gpu current temp",)),
    ("temp_shutdown_c", parse_int, ("temperature/gpu shutdown temp",)),
    ("temp_slowdown_c", parse_int, ("temperature/gpu slowdown temp",)),
    ("power_draw_w", parse_float, (
        "gpu power readings/power draw", "power readings/power draw",
        "gpu power readings/instantaneous power draw", "gpu power readings/average power draw",
    )),
    ("power_limit_w", parse_float, (
        "gpu power readings/current power limit", "power readings/current power limit",
        "gpu power readings/enforced power limit", "power readings/enforced power limit",
        "power readings/power limit",
    )),
    ("utilization_gpu_pct", parse_int, ("utilization/gpu",)),
    ("memory_total_mib", parse_int, ("fb memory usage/total",)),
    ("memory_used_mib", parse_int, ("fb memory usage/used",)),
    ("performance_state", parse_str, ("performance state",)),
    ("fabric_state", parse_str, ("fabric/state",)),
    ("fabric_status", parse_str, ("fabric/status",)),
    ("fabric_clique_id", parse_str, ("fabric/cliqueid",)),
    ("fabric_cluster_uuid", parse_str, ("fabric/clusteruuid",)),
)

_TOP_KEYS = {
    "timestamp": "timestamp",
    "driver version": "driver_version",
    "cuda version": "cuda_version",
    "cuda umd version": "cuda_version",
    "kmd version": "kmd_version",
}


class _GpuBuilder:
    """Collects one GPU section's lines before they are mapped to fields."""

    def __init__(self, index: int, bus_id: str | None, implicit: bool) -> None:
        self.gpu = SmiGpu(index=index, pci_bus_id=bus_id)
        self.implicit = implicit
        self.values: dict[str, str] = {}
        self.stack: list[tuple[int, str]] = []
        self.pending_ids: dict[str, str | None] = {}
        self.process: SmiProcess | None = None

    def add(self, indent: int, key: str, value: str | None) -> None:
        """Record one indented line under the sections currently open."""
        while self.stack and self.stack[-1][0] >= indent:
            self.stack.pop()
        names = [name for _, name in self.stack] + [key]
        self.stack.append((indent, key))
        path = norm_key("/".join(n.replace("/", " ") for n in names))
        if value is not None:
            self.values[path] = value
            self.gpu.raw["/".join(names)] = value
        parts = path.split("/")
        if len(parts) > 1 and parts[0] == "processes":
            self._process_line(parts[-1], value)

    def _process_line(self, key: str, value: str | None) -> None:
        """Apply one line of the Processes section (a new ``Process ID`` starts a process)."""
        if key in {"gpu instance id", "compute instance id"}:
            self.pending_ids[key] = parse_str(value)
        elif key == "process id":
            self.process = SmiProcess(
                gpu_index=self.gpu.index, pid=parse_int(value), type=None, name=None,
                used_memory_mib=None,
                gpu_instance_id=self.pending_ids.pop("gpu instance id", None),
                compute_instance_id=self.pending_ids.pop("compute instance id", None),
            )
            self.gpu.processes.append(self.process)
        elif self.process is not None:
            if key == "type":
                self.process.type = parse_str(value)
            elif key in {"name", "process name"}:
                self.process.name = parse_str(value)
            elif key == "used gpu memory":
                self.process.used_memory_mib = parse_int(value)

    def finish(self) -> int:
        """Map the collected values to fields; return how many known fields were found."""
        hits = finish_gpu(self.gpu, self.values, _SPECS)
        if self.gpu.pci_bus_id is None:
            self.gpu.pci_bus_id = normalize_bus_id(parse_str(self.values.get("pci/bus id")))
        return hits + len(self.gpu.processes)


def parse_nvsmi_text(text: str) -> SmiReport:
    """Parse ``nvidia-smi -q`` / ``-a`` text (complete or partial) into an :class:`SmiReport`.

    Empty input gives an empty report; an nvidia-smi error message printed
    instead of the output gives ``format="error"``; text with no GPU section,
    header or known field raises :class:`ParseError`.
    """
    report = SmiReport(format="text")
    if not text or not text.strip():
        return report
    report.errors = scan_smi_errors(text)
    builders: list[_GpuBuilder] = []
    current: _GpuBuilder | None = None
    recognised = False
    for raw_line in split_lines(text):
        line = raw_line.replace("\r", "").expandtabs(4).rstrip()
        content = line.strip()
        if not content:
            continue
        indent = len(line) - len(line.lstrip(" "))
        if _BANNER_RE.match(content):
            recognised = True
            continue
        if indent == 0:
            m = _GPU_HEADER_RE.match(content)
            if m:
                current = _GpuBuilder(len(builders), normalize_bus_id(m.group("bus")), False)
                builders.append(current)
                recognised = True
            elif _top_level(report, content):
                recognised = True
            elif _SECTION_RE.match(content) and (current is None or current.implicit):
                # a section pasted without its GPU header (-q -d ROW_REMAPPER, a grep)
                current = current or _GpuBuilder(len(builders), None, True)
                if current not in builders:
                    builders.append(current)
                current.add(0, content, None)
            elif (current is not None and current.implicit and current.stack
                  and current.stack[0][0] == 0 and ":" in content):
                # a section pasted alone that lost its indentation (Fabric / State : ...)
                key, _, value = content.partition(":")
                current.add(1, key.strip(), value.strip())
            continue
        key, sep, value = content.partition(":")
        if current is None:
            current = _GpuBuilder(len(builders), None, True)
            builders.append(current)
        current.add(indent, key.strip(), value.strip() if sep else None)
    for builder in builders:
        hits = builder.finish()
        if hits or not builder.implicit:
            recognised = recognised or hits > 0
            report.gpus.append(builder.gpu)
            if builder.implicit and not (builder.gpu.pci_bus_id or builder.gpu.uuid):
                report.headerless = True
    for position, gpu in enumerate(report.gpus):
        gpu.index = position
        for proc in gpu.processes:
            proc.gpu_index = position
    if not recognised:
        if report.errors:
            return SmiReport(format="error", errors=report.errors)
        raise ParseError("not nvidia-smi -q output: no GPU section, header or known field")
    return report


def _top_level(report: SmiReport, content: str) -> bool:
    """Apply a top-level ``Key : Value`` line; True when the key is one of nvidia-smi's."""
    key, sep, value = content.partition(":")
    if not sep:
        return False
    nkey = norm_key(key.replace("/", " "))
    if nkey == "attached gpus":
        report.attached_gpus = parse_int(value)
        return True
    attr = _TOP_KEYS.get(nkey)
    if attr is None:
        return False
    setattr(report, attr, parse_str(value))
    return True


# --- recognising it in a paste -------------------------------------------------------
_Q_START = re.compile(r"^=+\s*NVSMI LOG\s*=+\s*$|^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
                      r"[0-9A-Fa-f]{2}\.[0-7]\s*$")
_Q_CONT = re.compile(r"^\s*$|^\s|^[A-Z][\w ()/.,-]{0,80}\s:(?:\s|$)")
# a section of nvidia-smi -q pasted without its GPU header (-q -d ROW_REMAPPER, a grep,
# the section cut out of a GPU's block): its heading at any indentation
_Q_SECTION = re.compile(r"^[ \t]{0,12}(?:Remapped Rows|Retired Pages|Page Retirement|ECC Errors"
                        r"|ECC Mode|Temperature|GPU Power Readings|Power Readings"
                        r"|Module Power Readings|Clocks Event Reasons(?: Counters)?"
                        r"|Clocks Throttle Reasons|PCI|GPU Link Info|Fabric|FB Memory Usage"
                        r"|BAR1 Memory Usage|Utilization|Row Remapper|Clocks|Max Clocks"
                        r"|Applications Clocks|GPU Reset Status|GPU Recovery Action"
                        r"|Processes|GPU Operation Mode|MIG Mode)\s*$")
# one GPU's block pasted without its header: its first lines, at any indentation
_Q_GPU_KEY = re.compile(r"^[ \t]{0,12}(?:Product Name|Product Brand|Product Architecture"
                        r"|GPU UUID|Serial Number|VBIOS Version|Minor Number|Persistence Mode)"
                        r"\s+:\s*\S")
_Q_VALUE = re.compile(r"^\s+[A-Z][\w ()/.,-]{0,80}\s:\s*\S")


def _q_confirm(doc: PasteDoc, i: int) -> bool:
    j = doc.next_nonblank(i + 1)
    return "NVSMI" in doc.lines[i] or (doc.free(j) and bool(re.match(r"^\s+\S", doc.lines[j])))


def _indent(line: str) -> int:
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())


# the fabric section's first line as nvidia-smi -q prints it (State: Not Started, In
# Progress, Completed, N/A, Not Supported): a paste that lost its indentation still says it
_FABRIC_STATE = re.compile(r"^\s*State\s*:\s*(?:Not Started|In Progress|Completed|N/A"
                           r"|Not Supported)\s*$", re.IGNORECASE)


def _q_section_confirm(doc: PasteDoc, i: int) -> bool:
    """The heading is followed by ``Key : value`` lines indented deeper than it (the
    Fabric heading: by its State line, at any indentation)."""
    depth = _indent(doc.lines[i])
    near = doc.lines[i + 1:i + 4]
    if doc.lines[i].strip() == "Fabric" and near and _FABRIC_STATE.match(near[0]):
        return True
    return any(_Q_VALUE.match(x) and _indent(x) > depth for x in near)


def _q_gpu_block_confirm(doc: PasteDoc, i: int) -> bool:
    """Two known keys of a GPU's block (or one and a section heading) in its first lines."""
    near = doc.lines[i + 1:i + 6]
    return any(_Q_GPU_KEY.match(x) or _Q_SECTION.match(x) for x in near)


def _q_line(line: str) -> bool:
    return bool(_Q_CONT.match(line))


@gated_by(_Q_START, _Q_SECTION, _Q_GPU_KEY)
def claim_nvsmi_text(doc: PasteDoc) -> None:
    """Whole ``nvidia-smi -q`` outputs (from the NVSMI LOG banner or a GPU header), then
    sections of it pasted alone."""
    gated_blocks(doc, "nvidia_smi_q", _Q_START, _q_line, _q_confirm)
    gated_blocks(doc, "nvidia_smi_q", _Q_SECTION, _q_line, _q_section_confirm)
    gated_blocks(doc, "nvidia_smi_q", _Q_GPU_KEY, _q_line, _q_gpu_block_confirm)
