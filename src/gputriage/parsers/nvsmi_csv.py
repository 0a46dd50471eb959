"""Parser for nvidia-smi's CSV queries (``--format=csv`` with or without
``noheader`` / ``nounits``):

* ``--query-gpu=FIELDS``: one row per GPU, any field list;
* ``--query-remapped-rows=...``: row-remapper counters per GPU;
* ``--query-retired-pages=...``: one row per retired page (``[N/A]`` address rows
  are placeholders printed on GPUs that remap rows instead: not retired pages);
* ``--query-compute-apps=...``: one row per compute process.

A paste may hold several queries, each after its command line or its header
line; a query repeated later (the same GPUs read again) updates the earlier
reading. Without a header the command line names the columns; without either,
only columns whose shape is certain are read (a PCI bus id, a GPU UUID, a
driver version, a P-state, a product name) and the rest stay in ``raw``.
Values ``[N/A]``, ``[Not Supported]`` and other bracketed words are unknown;
units (``MiB``, ``%``, ``W``, ``MHz``) are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.parsers.detect_kernel import is_kernel_line
from gputriage.parsers.nvsmi import (
    SmiGpu,
    SmiProcess,
    SmiReport,
    clock_reason_key,
    parse_active,
    parse_float,
    parse_int,
    parse_link_width,
    parse_str,
    scan_smi_errors,
)
from gputriage.text.fields import normalize_bus_id, parse_bool, split_lines, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["CSV_QUERIES", "claim_nvsmi_csv", "csv_cells", "is_csv_header", "is_csv_row",
           "parse_nvsmi_csv", "query_of_command"]

CSV_QUERIES = ("gpu", "remapped-rows", "retired-pages", "compute-apps")
_QUERY = re.compile(r"--query-(?P<kind>gpu|remapped-rows|retired-pages|compute-apps)"
                    r"(?:=|\s+)(?P<fields>[\w.,\[\]*%-]+)")
_TARGET = re.compile(r"(?:^|\s)(?:-i|--id)(?:=|\s+)(?P<id>\S+)")
_FIELD = re.compile(r"^(?P<name>[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*)"
                    r"(?:\s*\[(?P<unit>[^\]]{1,12})\])?$")
_COMMENT = re.compile(r"(?<=\s)#\s.*$")  # anchored on "#": linear on long blank runs
_BUS = re.compile(r"^(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_UUID = re.compile(r"^(?:GPU|MIG)-[0-9A-Fa-f-]{8,}$")
_DRIVER = re.compile(r"^[0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?$")
_PSTATE = re.compile(r"^P[0-9]{1,2}$")
_NAME = re.compile(r"\b(?:NVIDIA|GeForce|Tesla|Quadro|TITAN|RTX|Jetson|GRID)\b")
_ERROR_VALUE = re.compile(r"^\[(?!N/A\]|Not Supported\]|Unknown\]|Not Available\])[^\]]{2,40}\]$")

# the field names nvidia-smi prints in a header (and the aliases a query may use)
_ALIASES = {
    "gpu_name": "name", "gpu_bus_id": "pci.bus_id", "gpu_uuid": "uuid",
    "gpu_serial": "serial", "persistence_mode": "persistence_mode",
    "pcie.link.gen.gpucurrent": "pcie.link.gen.current",
    "pcie.link.gen.gpumax": "pcie.link.gen.max", "used_gpu_memory": "used_memory",
    "process_name": "name", "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
    "retired_pages.dbe": "retired_pages.double_bit.count", "power.draw.instant": "power.draw",
    "enforced.power.limit": "power.limit", "performance_state": "pstate",
}
_KINDS = (("remapped_rows.", "remapped-rows"), ("retired_pages.address", "retired-pages"),
          ("retired_pages.cause", "retired-pages"), ("pid", "compute-apps"))
_KNOWN_PREFIXES = ("name", "index", "pci.", "uuid", "serial", "driver_version", "vbios_version",
                   "pstate", "temperature.", "utilization.", "memory.", "power.", "pcie.",
                   "clocks", "ecc.", "retired_pages.", "remapped_rows.", "mig.", "fan.", "count",
                   "timestamp", "persistence_mode", "compute_mode", "display_", "pid",
                   "process_name", "used_memory", "used_gpu_memory", "gpu_", "enforced.")

_Conv = Callable[[str], object]
# canonical field -> (SmiGpu attribute, converter)
_GPU_FIELDS: dict[str, tuple[str, _Conv]] = {
    "name": ("name", parse_str),
    "uuid": ("uuid", parse_str),
    "serial": ("serial", parse_str),
    "vbios_version": ("vbios", parse_str),
    "persistence_mode": ("persistence_mode", parse_bool),
    "pstate": ("performance_state", parse_str),
    "temperature.gpu": ("temperature_c", parse_int),
    "utilization.gpu": ("utilization_gpu_pct", parse_int),
    "memory.total": ("memory_total_mib", parse_int),
    "memory.used": ("memory_used_mib", parse_int),
    "power.draw": ("power_draw_w", parse_float),
    "power.limit": ("power_limit_w", parse_float),
    "pcie.link.gen.current": ("pcie_gen_current", parse_int),
    "pcie.link.gen.max": ("pcie_gen_max", parse_int),
    "pcie.link.width.current": ("pcie_width_current", parse_link_width),
    "pcie.link.width.max": ("pcie_width_max", parse_link_width),
    "ecc.mode.current": ("ecc_mode", parse_bool),
    "ecc.errors.corrected.volatile.total": ("ecc_volatile_corrected", parse_int),
    "ecc.errors.corrected.aggregate.total": ("ecc_aggregate_corrected", parse_int),
    "ecc.errors.uncorrected.volatile.total": ("ecc_volatile_uncorrected", parse_int),
    "ecc.errors.uncorrected.aggregate.total": ("ecc_aggregate_uncorrected", parse_int),
    "retired_pages.single_bit_ecc.count": ("retired_pages_sbe", parse_int),
    "retired_pages.double_bit.count": ("retired_pages_dbe", parse_int),
    "retired_pages.pending": ("retired_pages_pending", parse_bool),
    "remapped_rows.correctable": ("remapped_correctable", parse_int),
    "remapped_rows.uncorrectable": ("remapped_uncorrectable", parse_int),
    "remapped_rows.pending": ("remapping_pending", parse_bool),
    "remapped_rows.failure": ("remapping_failure", parse_bool),
    "mig.mode.current": ("mig_mode_current", parse_str),
}


def _canonical(name: str) -> str:
    name = name.strip().lower()
    return _ALIASES.get(name, name)


def query_of_command(line: str) -> tuple[str, list[str], str | None] | None:
    """(query kind, field names, ``-i`` target) of an ``nvidia-smi --query-*`` command."""
    m = _QUERY.search(line)
    if m is None or "nvidia-smi" not in line:
        return None
    target = _TARGET.search(line)
    fields = [_canonical(f) for f in m.group("fields").split(",") if f.strip()]
    return m.group("kind"), fields, target.group("id") if target else None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in _COMMENT.sub("", line).rstrip().split(",")]


def csv_cells(line: str) -> list[str]:
    """The cells of one CSV line (a trailing ``# comment`` dropped)."""
    return _cells(line)


# what a line needs before its cells are worth cutting (a GPU node's log holds the words
# of the gate on every line: its host name, a process's "pid=" and "name="): a header
# starts with a known field, a row holds a bus id's end or a UUID's start somewhere
_HEAD_START = re.compile(r"\s*(?:" + "|".join(map(re.escape, _KNOWN_PREFIXES)) + ")")
_BUS_END = re.compile(r":[0-9A-Fa-f]{2}\.[0-7]")  # (led by its colon, which the engine skips to)


def is_csv_row(line: str) -> bool:
    """A headerless row that is surely nvidia-smi's: two cells or more, one of them a
    whole PCI bus id or GPU UUID."""
    if "GPU-" not in line and "MIG-" not in line and not _BUS_END.search(line):
        return False
    cells = _cells(line)
    return len(cells) >= 2 and any(_BUS.match(c) or _UUID.match(c) for c in cells)


def is_csv_header(line: str) -> bool:
    """A CSV header nvidia-smi prints: known field names, with their units in brackets."""
    if not _HEAD_START.match(line):
        return False
    cells = _cells(line)
    if len(cells) < 1 or not all(_FIELD.match(c) for c in cells):
        return False
    names = [m.group("name") for c in cells if (m := _FIELD.match(c))]
    known = sum(1 for n in names if n.startswith(_KNOWN_PREFIXES))
    return known == len(names) and (len(names) > 1 or "." in names[0] or "_" in names[0])


def _kind_of(fields: list[str]) -> str:
    for prefix, kind in _KINDS:
        if any(f == prefix or f.startswith(prefix) and prefix.endswith(".") for f in fields):
            return kind
    return "gpu"


@dataclass
class _Table:
    """One query's column names and what the command line said about it."""

    kind: str
    fields: list[str | None]  # None: a column whose meaning is unknown
    target: str | None = None
    inferred: bool = False


@dataclass
class _State:
    report: SmiReport
    gpus: dict[str, SmiGpu] = field(default_factory=dict)
    readings: int = 0  # rows of the current table (a repeated query reads GPUs again)


def _gpu_for(state: _State, ident: Mapping[str, str], position: int,
             target: str | None) -> SmiGpu:
    """The GPU a row describes: by bus id, UUID or index, else by its position."""
    bus = normalize_bus_id(parse_str(ident.get("pci.bus_id")))
    uuid = parse_str(ident.get("uuid"))
    index = parse_int(ident.get("index"))
    if index is None:
        index = strict_int(target, signed=False)
    if bus is None and target and _BUS.match(target):
        bus = normalize_bus_id(target)
    keys = [k for k in (bus and f"bus:{bus}", uuid and f"uuid:{uuid}",
                        index is not None and f"index:{index}") if k]
    if not keys:
        keys = [f"row:{position}"]
    gpu = next((state.gpus[k] for k in keys if k in state.gpus), None)
    if gpu is None:
        gpu = SmiGpu(index=index if index is not None else position, pci_bus_id=bus)
        state.report.gpus.append(gpu)
    gpu.pci_bus_id = gpu.pci_bus_id or bus
    gpu.uuid = gpu.uuid or uuid
    if index is not None:
        gpu.index = index
    for k in keys:
        state.gpus[k] = gpu
    return gpu


def _apply_gpu(state: _State, gpu: SmiGpu, row: dict[str, str]) -> None:
    for name, raw in row.items():
        value = raw.strip()
        gpu.raw[name] = value
        if _ERROR_VALUE.match(value):
            errs = [e for e in gpu.raw.get("error_fields", "").split(",") if e]
            gpu.raw["error_fields"] = ",".join(dict.fromkeys([*errs, name]))
            continue
        spec = _GPU_FIELDS.get(name)
        if spec is not None:
            converted = spec[1](value)
            if converted is not None:
                setattr(gpu, spec[0], converted)
        elif name.startswith(("clocks_event_reasons.", "clocks_throttle_reasons.")):
            active = parse_active(value)
            if active is not None:
                gpu.clock_event_reasons[clock_reason_key(name.split(".", 1)[1])] = active
        elif name == "driver_version" and parse_str(value):
            state.report.driver_version = value
        elif name == "count":
            state.report.attached_gpus = parse_int(value)
        elif name == "timestamp":
            state.report.timestamp = parse_str(value)


def _apply_retired(gpu: SmiGpu | None, row: dict[str, str]) -> None:
    """One retired page; ``[N/A]`` addresses are placeholders, not pages."""
    if gpu is None or parse_str(row.get("retired_pages.address")) is None:
        return
    cause = (row.get("retired_pages.cause") or "").lower()
    attr = "retired_pages_dbe" if "double" in cause else "retired_pages_sbe"
    setattr(gpu, attr, (getattr(gpu, attr) or 0) + 1)


def _apply_process(state: _State, row: dict[str, str], target: str | None) -> None:
    bus = normalize_bus_id(parse_str(row.get("pci.bus_id")))
    uuid = parse_str(row.get("uuid"))
    index = strict_int(target, signed=False)
    proc = SmiProcess(gpu_index=index, pid=parse_int(row.get("pid")), type="C",
                      name=parse_str(row.get("name")),
                      used_memory_mib=parse_int(row.get("used_memory")),
                      gpu_uuid=uuid, gpu_bus_id=bus)
    owner = next((g for g in state.report.gpus if (bus and g.pci_bus_id == bus)
                  or (uuid and g.uuid == uuid)), None)
    (owner.processes if owner is not None else state.report.processes).append(proc)


def _row(state: _State, table: _Table, cells: list[str]) -> None:
    row = {name: value for name, value in zip(table.fields, cells, strict=True) if name}
    extra = {f"column {i + 1}": v for i, (name, v) in enumerate(zip(table.fields, cells,
                                                                    strict=True)) if not name}
    position = state.readings
    state.readings += 1
    if table.kind == "compute-apps":
        _apply_process(state, row, table.target)
        return
    ident: dict[str, str] = {k: row[k] for k in ("pci.bus_id", "uuid", "index") if k in row}
    if table.kind == "retired-pages":
        known = bool(ident) or table.target is not None
        gpu = _gpu_for(state, ident, position, table.target) if known and parse_str(
            row.get("retired_pages.address")) else None
        _apply_retired(gpu, row)
        return
    gpu = _gpu_for(state, ident, position, table.target)
    _apply_gpu(state, gpu, row)
    gpu.raw.update(extra)
    if table.inferred:
        gpu.raw["columns"] = "inferred by shape (no header)"


def _infer(rows: list[list[str]]) -> list[str | None]:
    """Column names of a headerless query, where the values' shape is certain."""
    width = len(rows[0])
    fields: list[str | None] = []
    for i in range(width):
        values = [r[i] for r in rows if parse_str(r[i]) is not None]
        name = None
        if values and all(_BUS.match(v) for v in values):
            name = "pci.bus_id"
        elif values and all(_UUID.match(v) for v in values):
            name = "uuid"
        elif values and all(_DRIVER.match(v) for v in values):
            name = "driver_version"
        elif values and all(_PSTATE.match(v) for v in values):
            name = "pstate"
        elif values and all(_NAME.search(v) for v in values):
            name = "name"
        fields.append(name if name not in fields else None)
    return fields


def _headerless(state: _State, block: list[list[str]], command: _Table | None) -> bool:
    """Rows with no header: the command names them, else what shape tells; False when
    no column can be mapped."""
    if command is not None and len(command.fields) == len(block[0]):
        table = command
    else:
        fields = _infer(block)
        if not any(fields):
            return False
        table = _Table(_kind_of([f for f in fields if f]), fields, inferred=True)
    state.readings = 0
    for cells in block:
        _row(state, table, cells)
    return True


def _header_names(line: str) -> list[str]:
    names = []
    for cell in _cells(line):
        m = _FIELD.match(cell)
        names.append(_canonical(m.group("name") if m else cell))
    return names


def parse_nvsmi_csv(text: str) -> SmiReport:
    """Parse nvidia-smi ``--query-*`` CSV output (one or several queries) into an
    :class:`SmiReport` with ``format="csv"``.

    Empty input gives an empty report; a text with neither a header, a query
    command nor a row whose columns can be mapped raises :class:`ParseError`.
    """
    report = SmiReport(format="csv")
    if not text or not text.strip():
        return report
    report.errors = scan_smi_errors(text)
    reader = _CsvReader(_State(report))
    for raw in split_lines(text):
        line = raw.replace("\r", "").strip()
        if line:
            reader.line(line)
    reader.flush()
    if not (reader.seen or report.gpus or report.processes):
        if report.errors:
            return SmiReport(format="error", errors=report.errors)
        why = ("rows without a header or a command line, and no column whose meaning is "
               "certain: cannot map the fields") if reader.unmapped else (
            "no --query command or header")
        raise ParseError(f"not readable as nvidia-smi CSV output: {why}")
    return report


class _CsvReader:
    """Query command lines, headers and rows read in turn; rows without a header wait
    in ``pending`` until their block ends."""

    def __init__(self, state: _State) -> None:
        self.state = state
        self.table: _Table | None = None
        self.command: _Table | None = None
        self.pending: list[list[str]] = []
        self.seen = self.unmapped = False

    def flush(self) -> None:
        """Map the pending headerless rows (by the command's fields or by inference)."""
        if self.pending and not _headerless(self.state, self.pending, self.command):
            self.unmapped = True
        self.pending = []

    def line(self, line: str) -> None:
        query = query_of_command(line)
        header = query is None and is_csv_header(line)
        cells = _cells(line)
        if query is not None or header or (self.pending and len(cells) != len(self.pending[0])):
            self.flush()
        if query is not None:
            kind, fields, target = query
            self.command = _Table(kind, list(fields), target)
            self.table, self.seen = None, True
        elif header:
            names = _header_names(line)
            kind = self.command.kind if self.command else _kind_of(names)
            self.table = _Table(kind, list(names), self.command.target if self.command else None)
            self.state.readings, self.seen = 0, True
        elif self.table is not None and len(cells) == len(self.table.fields):
            _row(self.state, self.table, cells)
        elif len(cells) >= 2 or self.command is not None:
            self.table = None
            self.pending.append(cells)


# --- recognising it in a paste -------------------------------------------------------
_ONE_CELL = re.compile(r"[\w.\[\]/%: -]{1,40}")


def _row_of_width(line: str, width: int) -> bool:
    return is_csv_row(line) and len(csv_cells(line)) == width


def _body_of_width(line: str, width: int) -> bool:
    """A data row under a CSV header of ``width`` columns."""
    if not line.strip() or is_csv_header(line) or is_kernel_line(line):
        return False
    if len(csv_cells(line)) != width:
        return False
    return width > 1 or _ONE_CELL.fullmatch(line.strip()) is not None


def _csv_block_end(doc: PasteDoc, i: int) -> int | None:
    """Where a CSV block starting at line ``i`` ends (None: none starts there)."""
    ln = doc.lines[i]
    if not doc.free(i):
        return None
    if is_csv_header(ln):
        return doc.extend(i + 1, partial(_body_of_width, width=len(csv_cells(ln))))
    if is_csv_row(ln) and not is_kernel_line(ln):
        return doc.extend(i + 1, partial(_row_of_width, width=len(csv_cells(ln))))
    return None


# a block starts at a header (known field names) or at a row with a bus id or a UUID
_GATE = Gate(literals=_KNOWN_PREFIXES,
             searches=(_BUS_END, re.compile(r"(?:GPU|MIG)-[0-9A-Fa-f-]{8}")),  # (_UUID's case)
             test=lambda line: is_csv_header(line) or is_csv_row(line))


@gated_by(_GATE)
def claim_nvsmi_csv(doc: PasteDoc) -> None:
    """nvidia-smi --query-* CSV: a header and its rows, or rows that carry a bus id or
    a GPU UUID (noheader); rows after a query's prompt line come by its command."""
    if not _GATE.open(doc):
        return
    i = 0
    while i < len(doc.lines):
        end = _csv_block_end(doc, i)
        if end is None:
            i += 1
            continue
        doc.claim("nvidia_smi_csv", i, end)
        i = max(end, i + 1)
