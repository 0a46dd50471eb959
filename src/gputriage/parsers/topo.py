"""``nvidia-smi topo -m`` and ``nvidia-smi topo -p2p r|w|n|a`` matrices.

The output is a matrix with one column per device (``GPU0``.., ``NIC0``.. or,
from older drivers, the HCA names ``mlx5_0``..) followed on GPU rows by
``CPU Affinity``, ``NUMA Affinity`` and (newer drivers) ``GPU NUMA ID``
columns, then a ``Legend:`` and a ``NIC Legend:`` (``NIC0: mlx5_0``).
Drivers print it tab-separated; pastes are often re-aligned with spaces,
quoted with ``>``, cut after the rows or preceded by other text. Cells of
``topo -m`` name the path (``X``, ``NV#``, ``PIX``, ``PXB``, ``PHB``,
``NODE``, ``SYS``); cells of ``topo -p2p`` say whether peer access works
(``OK``, ``CNS``, ``GNS``, ``TNS``, ``NS``, ``U``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["P2P_CODES", "UNKNOWN_DISTANCE", "TopoMatrix", "claim_topo", "distance",
           "nvlink_count", "parse_topo"]

P2P_CODES = frozenset({"OK", "CNS", "GNS", "TNS", "NS", "DR", "U"})
UNKNOWN_DISTANCE = 9

_RANK = {"X": 0, "C2C": 1, "NVL": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6,
         "SOC": 6}  # SOC: the name older drivers printed for SYS
_NV = re.compile(r"^NV([0-9]{1,3})$")
_QUOTE = re.compile(r"^\s*(?:>\s?)+")
_DEVICE = re.compile(r"^(?:GPU[0-9]{1,4}|NIC[0-9]{1,4}|[a-z][a-z0-9_-]{0,30}[0-9])$")
_AFFINITY_WORDS = frozenset({"CPU", "NUMA", "GPU", "Affinity", "ID"})
_CELL = re.compile(r"^(?:X|[A-Z][A-Z0-9/]{0,7})$")
_LEGEND = re.compile(r"^\s*(X|NV#|[A-Z][A-Z0-9]{0,5})\s+=\s+(\S.*?)\s*$")
_NIC_LEGEND = re.compile(r"^\s*(NIC[0-9]{1,4})\s*:\s*(\S+)\s*$")


def distance(link: str | None) -> int:
    """Rank a matrix cell, nearest first: X 0 < NV# 1 < PIX 2 < PXB 3 < PHB 4 < NODE 5
    < SYS 6; anything else (``N/A``, p2p codes, None) is :data:`UNKNOWN_DISTANCE`."""
    if not link:
        return UNKNOWN_DISTANCE
    token = link.strip().upper()
    if _NV.match(token):
        return 1
    return _RANK.get(token, UNKNOWN_DISTANCE)


def nvlink_count(link: str | None) -> int | None:
    """The number of bonded NVLinks in an ``NV#`` cell (``NV18`` -> 18), else None."""
    m = _NV.match((link or "").strip().upper())
    return int(m.group(1)) if m else None


@dataclass
class TopoMatrix:
    """One topology (``kind="matrix"``) or peer-to-peer (``kind="p2p"``) matrix."""

    kind: str = "matrix"
    devices: list[str] = field(default_factory=list)  # column names: "GPU0", "NIC0", "mlx5_0"
    nic_names: dict[str, str] = field(default_factory=dict)  # "NIC0" -> "mlx5_0"
    links: dict[tuple[str, str], str] = field(default_factory=dict)  # (row, column) -> cell
    cpu_affinity: dict[str, str] = field(default_factory=dict)  # GPU -> "0-47,96-143"
    numa_affinity: dict[str, str] = field(default_factory=dict)  # GPU -> "0" / "N/A"
    gpu_numa_id: dict[str, str] = field(default_factory=dict)  # GPU -> "N/A" / "2"
    legend: dict[str, str] = field(default_factory=dict)  # "PIX" -> its description
    columns: list[str] = field(default_factory=list)  # affinity columns as named
    header: str = ""  # the header line as printed
    rows: dict[str, str] = field(default_factory=dict)  # row device -> its line as printed
    p2p: TopoMatrix | None = None  # a topo -p2p matrix pasted with this topo -m one

    @property
    def gpus(self) -> list[str]:
        """The GPU devices, in column order."""
        return [d for d in self.devices if d.startswith("GPU")]

    @property
    def nics(self) -> list[str]:
        """The network devices (every non-GPU column), in column order."""
        return [d for d in self.devices if not d.startswith("GPU")]

    def link(self, a: str, b: str) -> str | None:
        """The cell between two devices (row ``a`` first, else row ``b``)."""
        return self.links.get((a, b)) or self.links.get((b, a))

    def nic_name(self, nic: str) -> str:
        """The HCA name of a NIC column (``NIC0`` -> ``mlx5_0``; the column name when
        the legend is missing or the column already is the HCA name)."""
        return self.nic_names.get(nic, nic)

    def is_empty(self) -> bool:
        """True for empty input: no devices at all."""
        return not self.devices


def _clean(line: str) -> str:
    return _QUOTE.sub("", line).rstrip()


def _is_header(tokens: list[str]) -> bool:
    if len(tokens) < 1 or tokens[0] != "GPU0" or "X" in tokens:
        return False
    return all(t in _AFFINITY_WORDS or _DEVICE.match(t) for t in tokens)


def _header_columns(tokens: list[str]) -> tuple[list[str], list[str]]:
    devices: list[str] = []
    i = 0
    while i < len(tokens) and tokens[i] not in _AFFINITY_WORDS:
        if tokens[i] not in devices:
            devices.append(tokens[i])
        i += 1
    columns: list[str] = []
    rest = tokens[i:]
    j = 0
    while j < len(rest):
        if rest[j:j + 3] == ["GPU", "NUMA", "ID"]:
            columns.append("GPU NUMA ID")
            j += 3
        elif rest[j:j + 2] in (["CPU", "Affinity"], ["NUMA", "Affinity"]):
            columns.append(f"{rest[j]} Affinity")
            j += 2
        elif rest[j] == "NUMA":  # a trimmed header: "CPU Affinity    NUMA"
            columns.append("NUMA Affinity")
            j += 1
        else:
            columns.append(rest[j])
            j += 1
    return devices, columns


def _split_row(line: str) -> list[str]:
    if "\t" in line:
        cells = [c.strip() for c in line.split("\t")]
        while cells and not cells[0]:
            cells.pop(0)
        return cells
    return line.split()


_COLUMN_FIELD = {"CPU Affinity": "cpu_affinity", "NUMA Affinity": "numa_affinity",
                 "GPU NUMA ID": "gpu_numa_id"}


def _read_row(matrix: TopoMatrix, label: str, cells: list[str], line: str) -> None:
    n = len(matrix.devices)
    for col, cell in zip(matrix.devices, cells[:n], strict=False):
        if _CELL.match(cell):
            matrix.links[(label, col)] = cell
    extra = [c for c in cells[n:] if c]
    for name, value in zip(matrix.columns, extra, strict=False):
        attr = _COLUMN_FIELD.get(name)
        if attr and len(value) <= 200:
            getattr(matrix, attr)[label] = value
    matrix.rows[label] = line


def parse_topo(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` (or ``topo -p2p``) output into a TopoMatrix.

    Leading text, ``>`` quote prefixes, spaces instead of tabs and a cut
    legend are tolerated; empty input gives an empty matrix; text without a
    ``GPU0`` matrix header followed by device rows raises ParseError. A ``topo -p2p``
    matrix pasted after (or before) the ``topo -m`` one rides along as ``p2p``.
    """
    if not text or not text.strip():
        return TopoMatrix()
    lines = [_clean(ln) for ln in split_lines(text)]
    starts = [i for i, ln in enumerate(lines) if _is_header(ln.split())]
    if not starts:
        raise ParseError("not nvidia-smi topo output: no matrix header starting with GPU0")
    matrices: list[TopoMatrix] = []
    for a, b in zip(starts, [*starts[1:], len(lines)], strict=True):
        try:
            matrices.append(_matrix(lines[a:b]))
        except ParseError:
            continue  # a header a paste cut off from its rows: the others still count
    if not matrices:
        raise ParseError("nvidia-smi topo header without any device row")
    main = next((m for m in matrices if m.kind == "matrix"), matrices[0])
    if main.kind == "matrix":
        main.p2p = next((m for m in matrices if m.kind == "p2p"), None)
    return main


def _matrix(lines: list[str]) -> TopoMatrix:
    """One matrix: its header line first, then its rows and legends."""
    devices, columns = _header_columns(lines[0].split())
    matrix = TopoMatrix(devices=devices, columns=columns, header=lines[0])
    end = 1
    for end in range(1, len(lines)):
        line = lines[end]
        if not line.strip():
            if matrix.rows:
                break
            continue
        cells = _split_row(line)
        if not cells or cells[0] not in devices:
            break
        _read_row(matrix, cells[0], cells[1:], line)
    else:
        end = len(lines)
    if not matrix.rows:
        raise ParseError("nvidia-smi topo header without any device row")
    for line in lines[end:]:
        m = _NIC_LEGEND.match(line)
        if m:
            matrix.nic_names[m.group(1)] = m.group(2)
            continue
        m = _LEGEND.match(line)
        if m:
            matrix.legend[m.group(1)] = m.group(2)
    codes = {c for (a, b), c in matrix.links.items() if a != b} - {"X"}
    if (codes and codes <= P2P_CODES) or ("OK" in matrix.legend and not matrix.columns):
        matrix.kind = "p2p"
    return matrix


# --- recognising it in a paste -------------------------------------------------------
_TOPO_HEAD = re.compile(r"^\s*GPU0(?:\s+(?:GPU[0-9]+|NIC[0-9]+|mlx\S+|CPU|NUMA|Affinity|ID|"
                        r"GPU))*\s*$")
_TOPO_ROW = re.compile(r"^\s*(?:GPU[0-9]+|NIC[0-9]+|mlx\S+)\s")
_TOPO_FIRST = re.compile(r"^\s*GPU0\s+X\b")
_LEGEND_HEAD = re.compile(r"^\s*(?:NIC )?Legend:\s*$")
_HEAD_GATE = Gate(_TOPO_HEAD)  # a matrix starts at a free header line


def _legend_line(line: str) -> bool:
    return not line.strip() or line[0].isspace()


@gated_by(_HEAD_GATE)
def claim_topo(doc: PasteDoc) -> None:
    """The matrix of ``nvidia-smi topo -m`` (header, rows) and its legends."""
    if not _HEAD_GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and _TOPO_HEAD.match(ln)):
            continue
        j = doc.next_nonblank(i + 1)
        if not (doc.free(j) and _TOPO_FIRST.match(doc.lines[j])):
            continue
        e = doc.extend(j, lambda s: bool(_TOPO_ROW.match(s)))
        k = doc.next_nonblank(e)
        while doc.free(k) and _LEGEND_HEAD.match(doc.lines[k]):
            e = doc.extend(k + 1, _legend_line)
            k = doc.next_nonblank(e)
        doc.claim("nvidia_smi_topo", i, e)
