"""NUMA layout from ``numactl --hardware``, from ``lscpu`` and from sysfs.

``numactl --hardware`` prints ``available: 2 nodes (0-1)``, then per node
``node 0 cpus: 0 1 ..``, ``node 0 size: 257579 MB`` and ``node 0 free: ..``
lines, then a ``node distances:`` table. ``lscpu`` prints ``NUMA node(s): 2``
and ``NUMA node0 CPU(s): 0-47,96-143`` (empty for CPU-less nodes such as
GPU memory onlined as NUMA nodes on GH200 and POWER9). The sysfs tree of
``/sys/devices/system/node`` gives ``node<N>/cpulist`` files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_blocks, gated_by
from gputriage.parsers.driver import split_tree
from gputriage.text.fields import split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["NumaHardware", "NumaNode", "claim_numactl", "format_cpulist", "parse_cpulist",
           "parse_lscpu", "parse_numactl", "parse_sysfs_nodes"]

_MAX_CPUS = 1 << 16
_MAX_NODE = 1 << 12

_AVAILABLE = re.compile(r"^available:\s*([0-9]{1,5})\s+nodes?\s*\(([^)]*)\)")
_NO_NUMA = re.compile(r"^No NUMA available", re.IGNORECASE)
_NODE_CPUS = re.compile(r"^node\s+([0-9]{1,5})\s+cpus:\s*(.*)$")
_NODE_MEM = re.compile(r"^node\s+([0-9]{1,5})\s+(size|free):\s*([0-9]{1,15})\s*MB\s*$")
_DISTANCES = re.compile(r"^node distances:\s*$")
_DIST_HEAD = re.compile(r"^node((?:\s+[0-9]{1,5})+)\s*$")
_DIST_ROW = re.compile(r"^([0-9]{1,5}):((?:\s+[0-9]{1,5})+)\s*$")

_LSCPU_NODES = re.compile(r"^NUMA node\(s\):\s*([0-9]{1,5})\s*$")
_LSCPU_NODE = re.compile(r"^NUMA node([0-9]{1,5}) CPU\(s\):\s*(.*)$")
_LSCPU_SOCKETS = re.compile(r"^Socket\(s\):\s*([0-9]{1,5})\s*$")
_LSCPU_ANY = re.compile(r"^(?:Architecture|CPU\(s\)|Socket\(s\)|NUMA node\S*|Model name|"
                        r"Vendor ID|Thread\(s\) per core|Core\(s\) per socket|"
                        r"On-line CPU\(s\) list)\s*(?:\S.*)?:")


@dataclass
class NumaNode:
    """One NUMA node: its CPUs (empty for memory-only nodes) and memory."""

    id: int
    cpus: tuple[int, ...] = ()
    cpulist: str = ""  # as printed ("0-47,96-143", or numactl's list joined by commas)
    size_mb: int | None = None
    free_mb: int | None = None


@dataclass
class NumaHardware:
    """The host's NUMA nodes, as one of numactl, lscpu or sysfs reports them."""

    source: str = ""  # "numactl" | "lscpu" | "sysfs" ("" for empty input)
    nodes: dict[int, NumaNode] = field(default_factory=dict)
    distances: dict[tuple[int, int], int] = field(default_factory=dict)
    declared_nodes: int | None = None  # "available: N nodes" / "NUMA node(s): N"
    sockets: int | None = None  # lscpu "Socket(s)"
    available: bool = True  # False: "No NUMA available on this system"
    lines: list[str] = field(default_factory=list)  # the summary lines, for evidence

    @property
    def cpu_nodes(self) -> list[int]:
        """Nodes that hold CPUs (memory-only GPU nodes are not sockets)."""
        return sorted(n.id for n in self.nodes.values() if n.cpus)

    @property
    def node_count(self) -> int:
        """How many nodes the host has (declared count or nodes seen)."""
        return max(self.declared_nodes or 0, len(self.nodes))

    @property
    def multi_node(self) -> bool:
        """More than one NUMA node with CPUs, or more than one socket."""
        return len(self.cpu_nodes) > 1 or (self.sockets or 0) > 1

    def is_empty(self) -> bool:
        """True when nothing was learnt (empty input)."""
        return not (self.nodes or self.declared_nodes or self.sockets) and self.available


def parse_cpulist(text: str | None) -> tuple[int, ...]:
    """``"0-47,96-143"`` or ``"0 1 2"`` -> sorted CPU numbers; bad pieces are skipped."""
    cpus: set[int] = set()
    for piece in re.split(r"[,\s]+", (text or "").strip()):
        m = re.fullmatch(r"([0-9]{1,6})(?:-([0-9]{1,6}))?", piece)
        if not m:
            continue
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo or hi - lo >= _MAX_CPUS or len(cpus) + hi - lo >= _MAX_CPUS:
            continue
        cpus.update(range(lo, hi + 1))
    return tuple(sorted(cpus))


def format_cpulist(cpus: tuple[int, ...] | list[int]) -> str:
    """CPU numbers -> the kernel's compact list form (``0-47,96-143``)."""
    out: list[str] = []
    nums = sorted(set(cpus))
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(out)


def _node(hw: NumaHardware, node_id: int) -> NumaNode | None:
    if node_id > _MAX_NODE:
        return None
    return hw.nodes.setdefault(node_id, NumaNode(node_id))


def _numactl(lines: list[str]) -> NumaHardware:
    hw = NumaHardware(source="numactl")
    columns: list[int] = []
    for raw in lines:
        line = raw.strip()
        if m := _AVAILABLE.match(line):
            hw.declared_nodes = int(m.group(1))
            hw.lines.append(line)
        elif _NO_NUMA.match(line):
            hw.available = False
            hw.lines.append(line)
        elif (m := _NODE_CPUS.match(line)) and (node := _node(hw, int(m.group(1)))):
            node.cpus = parse_cpulist(m.group(2))
            node.cpulist = format_cpulist(node.cpus)
            hw.lines.append(line if len(line) <= 200 else line[:197] + "...")
        elif (m := _NODE_MEM.match(line)) and (node := _node(hw, int(m.group(1)))):
            setattr(node, f"{m.group(2)}_mb", int(m.group(3)))
        elif m := _DIST_HEAD.match(line):
            columns = [int(x) for x in m.group(1).split()]
        elif (m := _DIST_ROW.match(line)) and columns:
            row = int(m.group(1))
            for col, value in zip(columns, m.group(2).split(), strict=False):
                hw.distances[(row, col)] = int(value)
        elif (m := _LSCPU_SOCKETS.match(line)):
            hw.sockets = int(m.group(1))
    return hw


def parse_lscpu(text: str) -> NumaHardware:
    """Parse the NUMA lines of ``lscpu`` (``NUMA node(s)``, ``NUMA nodeN CPU(s)``,
    ``Socket(s)``); empty input gives an empty result, text without any lscpu
    line raises ParseError."""
    if not text or not text.strip():
        return NumaHardware()
    hw = NumaHardware(source="lscpu")
    seen = False
    for raw in split_lines(text):
        line = raw.strip()
        if _LSCPU_ANY.match(line):
            seen = True
        if m := _LSCPU_NODES.match(line):
            hw.declared_nodes = int(m.group(1))
            hw.lines.append(line)
        elif (m := _LSCPU_NODE.match(line)) and (node := _node(hw, int(m.group(1)))):
            node.cpulist = m.group(2).strip()[:200]
            node.cpus = parse_cpulist(node.cpulist)
            hw.lines.append(line[:200])
        elif m := _LSCPU_SOCKETS.match(line):
            hw.sockets = int(m.group(1))
            hw.lines.append(line)
    if not seen:
        raise ParseError("not lscpu output: no 'NUMA node' or 'CPU(s):' lines")
    return hw


def parse_numactl(text: str) -> NumaHardware:
    """Parse ``numactl --hardware`` (or, pasted in its place, ``lscpu``) output.

    Empty input gives an empty result; text that is neither raises ParseError.
    """
    if not text or not text.strip():
        return NumaHardware()
    lines = split_lines(text)
    if any(_AVAILABLE.match(ln.strip()) or _NODE_CPUS.match(ln.strip())
           or _NO_NUMA.match(ln.strip()) for ln in lines):
        return _numactl(lines)
    if any(_LSCPU_ANY.match(ln.strip()) for ln in lines):
        return parse_lscpu(text)
    raise ParseError("not numactl --hardware output: no 'available: N nodes' line")


def parse_sysfs_nodes(tree: object) -> NumaHardware:
    """NUMA nodes from a ``/sys/devices/system/node`` tree (``node<N>/cpulist``
    files; other files ignored). Raises ParseError when it is not a tree."""
    files, _links, _errors = split_tree(tree)
    hw = NumaHardware(source="sysfs")
    for rel, text in sorted(files.items()):
        m = re.fullmatch(r"node([0-9]{1,5})/cpulist", rel.strip("/"))
        if m and (node := _node(hw, int(m.group(1)))):
            node.cpulist = text.strip()[:200]
            node.cpus = parse_cpulist(node.cpulist)
            hw.lines.append(f"node{node.id}/cpulist: {node.cpulist}")
    return hw


# --- recognising it in a paste -------------------------------------------------------
_NUMACTL_START = re.compile(r"^available: [0-9]+ nodes? \(")
_NUMACTL_LINE = re.compile(r"^(?:node\b|\s*[0-9]+:|\s*$|No distance)")
_LSCPU_START = re.compile(r"^\s*(?:Architecture:\s+\S|NUMA:\s*$|NUMA node\(s\):\s+[0-9])")
_LSCPU_LINE = re.compile(r"^\s*[A-Za-z][\w()/.,+ -]*[\w)]:(?:\s|$)")
_LSCPU_KEY = re.compile(r"^\s*(?:NUMA node[0-9]*(?:\(s\))? ?(?:CPU\(s\))?|Socket\(s\)|CPU\(s\)"
                        r"|Model name):")
_LSCPU_GATE = Gate(_LSCPU_START)  # a block starts at a free line it matches


def _claim_lscpu(doc: PasteDoc) -> None:
    """``lscpu`` output (NUMA nodes and their CPUs)."""
    if not _LSCPU_GATE.open(doc):
        return
    i = 0
    while i < len(doc.lines):
        if not (doc.free(i) and _LSCPU_START.match(doc.lines[i])):
            i += 1
            continue
        end = doc.extend(i + 1, lambda s: bool(_LSCPU_LINE.match(s)))
        keys = sum(1 for ln in doc.lines[i:end] if _LSCPU_KEY.match(ln))
        if keys >= 2 or (keys >= 1 and "NUMA" in doc.lines[i]):
            doc.claim("numactl", i, end)
        i = max(end, i + 1)


@gated_by(_NUMACTL_START, _LSCPU_GATE)
def claim_numactl(doc: PasteDoc) -> None:
    """``numactl -H`` output, then ``lscpu`` output: the ``numactl`` source."""
    gated_blocks(doc, "numactl", _NUMACTL_START, lambda s: bool(_NUMACTL_LINE.match(s)))
    _claim_lscpu(doc)
