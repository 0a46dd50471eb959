"""Parser for plain ``nvidia-smi`` (the boxed table), ``nvidia-smi -L`` and their errors.

Both table layouts are understood: the pre-530 one (narrow name column,
``Persistence-M|`` without a space) and the >=530 one, including the R6xx
header that says ``KMD Version`` / ``CUDA UMD Version``. Each GPU block is
two or three rows whose second cell holds the bus id; the Processes box may
be present, absent, empty, or say "No running processes found", with or
without the GI/CI columns. ``nvidia-smi -L`` lines
(``GPU 0: NAME (UUID: GPU-...)``) give a ``format="list"`` report, one GPU per UUID; they
and the error lines may carry ``kubectl logs --prefix``'s ``[pod/NAME/CONTAINER]``.
"""

from __future__ import annotations

import re

from gputriage.errors import ParseError
from gputriage.parsers import nvsmi_mig
from gputriage.parsers.detect_gate import Gate, gated_by, gated_lines
from gputriage.parsers.nvsmi import (
    MigDevice,
    SmiError,
    SmiGpu,
    SmiProcess,
    SmiReport,
    parse_float,
    parse_int,
    parse_str,
    scan_smi_errors,
)
from gputriage.text.fields import normalize_bus_id, split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["claim_nvsmi_table", "parse_nvsmi_table"]

_HEADER_RE = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?P<dkind>Driver|KMD)\s+Version:\s*(?P<driver>\S+)"
    r"(?:\s+CUDA(?:\s+UMD)?\s+Version:\s*(?P<cuda>\S+))?"
)
_BUS_CELL_RE = re.compile(
    r"^\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*(?P<disp>\S+)?\s*$"
)
_NAME_CELL_RE = re.compile(
    r"^\s*(?P<idx>[0-9]{1,6})\s+(?P<name>.*?)(?:\s+(?P<pm>On|Off|WDDM|TCC))?\s*$"
)
_ERR = "ERR!"  # what nvidia-smi prints for a field it failed to read
_NOTE_LISTING = {"No GPU": "gpu-instances", "No com": "compute-instances"}
_TEMP_RE = re.compile(r"(?<![0-9])(-?[0-9]{1,6})C\b")
_PERF_RE = re.compile(r"\b(P[0-9]{1,2})\b")
_POWER_RE = re.compile(r"(?P<draw>\S+)\s*/\s*(?P<cap>\S+)\s*$")
_MEM_RE = re.compile(r"(?<![0-9])(?P<used>[0-9]{1,18})\s*MiB\s*/\s*(?P<total>[0-9]{1,18})\s*MiB")
_UTIL_RE = re.compile(r"^\s*(?P<util>[0-9]+%|N/A|ERR!)\s*(?P<mode>.*?)\s*$")
# ``kubectl logs --prefix``: the pod and container each line came from
_POD_PREFIX = re.compile(r"^\s*\[pod/[^\]\s]{1,300}\]\s")
_LIST_RE = re.compile(
    r"^\s*GPU\s+(?P<idx>[0-9]{1,6}):\s*(?P<name>.*?)\s*\(UUID:\s*(?P<uuid>[^)\s]+)\)\s*$"
)
_PROC_RE = re.compile(
    r"^\s*(?P<gpu>[0-9]{1,6}|N/A)\s+(?:(?P<gi>[0-9]{1,6}|N/A)\s+(?P<ci>[0-9]{1,6}|N/A)\s+)?(?P<pid>[0-9]{1,18})\s+"
    r"(?P<type>[A-Z+]{1,5})\s+(?P<name>.*?)\s*(?P<mem>[0-9]+\s*MiB|N/A)?\s*$"
)


def _cells(line: str) -> list[str] | None:
    """The cells of a ``| a | b | c |`` row, or None when the line is not a row."""
    stripped = line.strip()
    if not stripped.startswith("|") or not stripped.endswith("|") or len(stripped) < 2:
        return None
    return stripped[1:-1].split("|")


def parse_nvsmi_table(text: str) -> SmiReport:
    """Parse plain ``nvidia-smi`` / ``nvidia-smi -L`` output (or its error) into an SmiReport.

    Empty input gives an empty ``format="table"`` report; an error message
    alone gives ``format="error"``; text with neither a table, ``-L`` lines
    nor a known error raises :class:`ParseError`.
    """
    if not text or not text.strip():
        return SmiReport(format="table")
    lines = [_POD_PREFIX.sub("", ln, count=1) for ln in split_lines(text)]
    reader = _TableReader(scan_smi_errors(lines))
    for line in lines:
        reader.line(line.replace("\r", "").expandtabs(8))
    return reader.result()


class _TableReader:
    """The table read line by line: the header, GPU blocks, processes, MIG listings and
    messages, -L lines."""

    def __init__(self, errors: list[SmiError]) -> None:
        self.report = SmiReport(format="table", errors=errors)
        self.seen_header = False
        self.section = ""  # "processes" or a MIG box kind (nvsmi_mig.MIG_BOXES)
        self.gpu: SmiGpu | None = None
        self.row_in_block = 0
        self.listed: list[SmiGpu] = []

    def line(self, line: str) -> None:
        if self._header(line) or self._list_line(line) or self._mig_note(line):
            return
        stripped = line.strip()
        if stripped.startswith(("+", "|=")) or not stripped:
            self.gpu, self.row_in_block = None, 0
            return
        cells = _cells(line)
        if cells is not None:
            self._row(cells, stripped)

    def _mig_note(self, line: str) -> bool:
        text = nvsmi_mig.note(line)
        if text is None:
            return False
        report = self.report
        report.mig_notes.append(text)
        if text.startswith("No MIG-enabled"):
            report.mig_enabled = False
        else:  # no instances: the listing is shown, and empty
            report.mig_listing = report.mig_listing or _NOTE_LISTING.get(text[:6], "table")
            report.mig_devices = report.mig_devices or []
        return True

    def _mig(self, device: MigDevice, listing: str) -> None:
        report = self.report
        report.mig_devices = [*(report.mig_devices or []), device]
        report.mig_listing = report.mig_listing or listing

    def _header(self, line: str) -> bool:
        m = _HEADER_RE.search(line)
        if m is None:
            return False
        self.seen_header, self.section = True, ""
        self.report.driver_version = m.group("driver")
        if m.group("dkind") == "KMD":
            self.report.kmd_version = m.group("driver")
        self.report.cuda_version = parse_str(m.group("cuda"))
        return True

    def _list_line(self, line: str) -> bool:
        lm = _LIST_RE.match(line)
        if lm is None:
            device = nvsmi_mig.list_line(line, self.listed[-1].index if self.listed else None)
            if device is not None:
                self._mig(device, "list")
            return device is not None
        if any(g.uuid == lm.group("uuid") for g in self.listed):
            return True  # the same GPU again (two containers given one GPU print it twice)
        self.listed.append(SmiGpu(index=int(lm.group("idx")), pci_bus_id=None,
                                  name=parse_str(lm.group("name")), uuid=lm.group("uuid")))
        return True

    def _row(self, cells: list[str], printed: str) -> None:
        joined = " ".join(c.strip() for c in cells)
        kind = nvsmi_mig.box_kind(joined)
        if joined.startswith("Processes:") or kind:
            self.section = kind or "processes"
            if kind and kind != "profiles":  # the box is shown: its instances, or none
                self.report.mig_devices = self.report.mig_devices or []
                self.report.mig_listing = self.report.mig_listing or kind
        elif self.section == "processes":
            proc = _process_row(joined)
            if proc is not None:
                self.report.processes.append(proc)
        elif self.section:
            device = nvsmi_mig.row(self.section, cells, joined)
            if device is not None:
                device.line = printed
                self._mig(device, self.section)
        elif len(cells) >= 3 and _BUS_CELL_RE.match(cells[1]):
            self.gpu = _first_row(cells, len(self.report.gpus))
            if self.gpu is not None:
                self.report.gpus.append(self.gpu)
                self.row_in_block = 1
        elif self.gpu is not None and len(cells) >= 3:
            self._next_row(self.gpu, cells)

    def _next_row(self, gpu: SmiGpu, cells: list[str]) -> None:
        """The second (or third: MIG mode) row of a GPU block."""
        self.row_in_block += 1
        if self.row_in_block == 2:
            _second_row(gpu, cells)
        elif self.row_in_block == 3:
            gpu.mig_mode_current = parse_str(cells[2])
            if gpu.mig_mode_current == _ERR:
                gpu.mig_mode_current = None
                _error_field(gpu, "MIG mode")

    def result(self) -> SmiReport:
        report = self.report
        if report.gpus or self.seen_header:
            by_index = {g.index: g for g in report.gpus}
            for item in self.listed:
                target = by_index.get(item.index)
                if target is not None and target.uuid is None:
                    target.uuid = item.uuid
            return report
        if self.listed:
            report.format, report.gpus = "list", self.listed
            return report
        if report.mig_devices is not None or report.mig_enabled is not None:
            report.format = "mig"
            return report
        if report.errors:
            return SmiReport(format="error", errors=report.errors)
        raise ParseError("not nvidia-smi table output: no header, GPU row, -L line, MIG "
                         "listing or known error")


def _first_row(cells: list[str], position: int) -> SmiGpu | None:
    """``| idx name persistence | bus-id disp | ecc |`` -> a new GPU."""
    nm = _NAME_CELL_RE.match(cells[0])
    bm = _BUS_CELL_RE.match(cells[1])
    if nm is None or bm is None:
        return None
    gpu = SmiGpu(index=int(nm.group("idx")), pci_bus_id=normalize_bus_id(bm.group("bus")),
                 name=parse_str(nm.group("name")))
    pm = nm.group("pm")
    if pm in {"On", "Off"}:
        gpu.persistence_mode = pm == "On"
    elif pm:
        gpu.raw["driver_model"] = pm
    if gpu.name == _ERR:
        gpu.name = None
        _error_field(gpu, "name")
    if gpu.name and gpu.name.endswith("..."):
        gpu.raw["name_truncated"] = "yes"
    disp = parse_str(bm.group("disp"))
    if disp:
        gpu.raw["display_active"] = disp
    ecc = cells[2].strip()
    if ecc == _ERR:
        _error_field(gpu, "volatile uncorrectable ECC")
    gpu.raw["volatile_uncorr_ecc"] = ecc
    gpu.ecc_volatile_uncorrected = parse_int(ecc) if re.fullmatch(r"[0-9]+", ecc) else None
    gpu.raw["position"] = str(position)
    return gpu


def _second_row(gpu: SmiGpu, cells: list[str]) -> None:
    """``| fan temp perf draw / cap | used / total | util compute-mode |``."""
    first = cells[0]
    gpu.raw["fan_temp_perf_power"] = " ".join(first.split())
    tm = _TEMP_RE.search(first)
    if tm:
        gpu.temperature_c = int(tm.group(1))
    pm = _PERF_RE.search(first)
    if pm:
        gpu.performance_state = pm.group(1)
    fan = first.split()[0] if first.split() else ""
    if fan.endswith("%"):
        gpu.raw["fan"] = fan
    wm = _POWER_RE.search(first)
    if wm:
        gpu.power_draw_w = parse_float(wm.group("draw").rstrip("W"))
        gpu.power_limit_w = parse_float(wm.group("cap").rstrip("W"))
    mm = _MEM_RE.search(cells[1])
    if mm:
        gpu.memory_used_mib = int(mm.group("used"))
        gpu.memory_total_mib = int(mm.group("total"))
    _errors_in_row(gpu, first, cells)
    um = _UTIL_RE.match(cells[2])
    if um:
        gpu.utilization_gpu_pct = parse_int(um.group("util"))
        if um.group("mode"):
            gpu.raw["compute_mode"] = um.group("mode")


def _error_field(gpu: SmiGpu, name: str) -> None:
    """Note a field nvidia-smi printed as ``ERR!`` (it could not read it from the GPU)."""
    fields = [f for f in gpu.raw.get("error_fields", "").split(",") if f]
    gpu.raw["error_fields"] = ",".join(dict.fromkeys([*fields, name]))


def _errors_in_row(gpu: SmiGpu, first: str, cells: list[str]) -> None:
    """``ERR!`` in the second row: fan, temperature, P-state, power; memory; utilisation."""
    words = first.replace("/", " ").split()
    if _ERR in words:
        labels = ("fan", "temperature", "performance state", "power draw", "power cap")
        for label, word in zip(labels, words, strict=False):
            if word == _ERR:
                _error_field(gpu, label)
    if _ERR in cells[1]:
        _error_field(gpu, "memory usage")
    if _ERR in cells[2]:
        _error_field(gpu, "utilization")


def _process_row(joined: str) -> SmiProcess | None:
    """One row of the Processes box, or None for headers and "No running processes"."""
    m = _PROC_RE.match(joined)
    if m is None:
        return None
    return SmiProcess(
        gpu_index=parse_int(m.group("gpu")),
        pid=int(m.group("pid")),
        type=m.group("type"),
        name=parse_str(m.group("name")),
        used_memory_mib=parse_int(m.group("mem")),
        gpu_instance_id=parse_str(m.group("gi")),
        compute_instance_id=parse_str(m.group("ci")),
    )


# --- recognising it in a paste -------------------------------------------------------
_TABLE_HEAD = re.compile(r"^\s*\|\s*NVIDIA-SMI\s+\S")
_TABLE_LINE = re.compile(r"^\s*[+|]")
_CLOCK = re.compile(r"^\s*[A-Z][a-z]{2} [A-Z][a-z]{2}"
                    r"\s+[0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}\s*$")
_GPU_ROW = re.compile(r"^\s*\|\s*[0-9]{1,3}\s+[^|]*\|\s*(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:"
                      r"[0-9A-Fa-f]{2}\.[0-7]\s+\S*\s*\|")
_PREFIXED = r"^\s*(?:\[pod/[^\]\s]{1,300}\]\s+)?"  # a kubectl --prefix, or none
_SMI_ERR = re.compile(_PREFIXED + r"(?:NVIDIA-SMI has failed|NVIDIA-SMI couldn't find|No "
                      r"devices were found|Unable to determine the device handle|Failed to "
                      r"initialize NVML:|NVML library version:|WARNING: infoROM is corrupted "
                      r"at gpu)")
_MIG_BOX_HEAD = re.compile(r"^\s*\|\s*(?:GPU|Compute) instance(?:s| profiles):")
_MIG_MESSAGE = re.compile(r"^\s*(?:No MIG-enabled devices found|No GPU instances found"
                          r"|No compute instances found)\b")
_SMI_L = re.compile(_PREFIXED + r"(?:GPU [0-9]+: .+\(UUID: GPU-[^)]*\)\s*$|MIG .+Device\s+[0-9]+: "
                    r"\(UUID: MIG-)")
# each claim below starts at a free line its head (or row) matches
_TABLE_GATE, _ROW_GATE, _MIG_BOX_GATE = Gate(_TABLE_HEAD), Gate(_GPU_ROW), Gate(_MIG_BOX_HEAD)


def _table_line(line: str) -> bool:
    return bool(_TABLE_LINE.match(line))


def _table_end(doc: PasteDoc, e: int) -> int:
    """Where a table that goes on at line ``e`` ends (blank lines inside it kept)."""
    while doc.free(e):
        if _TABLE_LINE.match(doc.lines[e]):
            e += 1
            continue
        nxt = doc.next_nonblank(e)
        if doc.lines[e].strip() or not (doc.free(nxt) and _TABLE_LINE.match(doc.lines[nxt])):
            break
        e = nxt
    return e


def _claim_tables(doc: PasteDoc) -> None:
    if not _TABLE_GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and _TABLE_HEAD.match(ln)):
            continue
        s = i
        while doc.free(s - 1) and _TABLE_LINE.match(doc.lines[s - 1]):
            s -= 1
        if doc.free(s - 1) and _CLOCK.match(doc.lines[s - 1]):
            s -= 1
        doc.claim("nvidia_smi", s, _table_end(doc, i + 1))


def _claim_excerpts(doc: PasteDoc) -> None:
    """Rows of the table without its header (people paste the GPUs that matter)."""
    if not _ROW_GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and _GPU_ROW.match(ln)):
            continue
        s = i
        while doc.free(s - 1) and _TABLE_LINE.match(doc.lines[s - 1]):
            s -= 1
        doc.claim("nvidia_smi", s, doc.extend(i + 1, _table_line))


def _claim_mig_boxes(doc: PasteDoc) -> None:
    """The boxes of ``nvidia-smi mig -lgi`` / ``-lci`` (and their profile lists)."""
    if not _MIG_BOX_GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and _MIG_BOX_HEAD.match(ln)):
            continue
        s = i
        while doc.free(s - 1) and _TABLE_LINE.match(doc.lines[s - 1]):
            s -= 1
        doc.claim("nvidia_smi", s, _table_end(doc, i + 1))


@gated_by(_TABLE_GATE, _ROW_GATE, _MIG_BOX_GATE, _SMI_ERR, _SMI_L, _MIG_MESSAGE)
def claim_nvsmi_table(doc: PasteDoc) -> None:
    """The nvidia-smi table (with the clock line above it), excerpts of its GPU rows,
    nvidia-smi's error messages, ``nvidia-smi -L`` lines and the MIG listings
    (``nvidia-smi mig -lgi`` / ``-lci`` and their messages)."""
    _claim_tables(doc)
    _claim_excerpts(doc)
    _claim_mig_boxes(doc)
    gated_lines(doc, "nvidia_smi", _SMI_ERR)
    gated_lines(doc, "nvidia_smi", _SMI_L)
    gated_lines(doc, "nvidia_smi", _MIG_MESSAGE)
