"""Host memory and hugepage pools: ``/proc/meminfo`` and the sysfs hugepage trees.

``parse_meminfo`` reads ``Name:   value [kB]`` lines. ``parse_hugepages``
reads the ``hugepages`` tree (``hugepages-2048kB/nr_hugepages`` ...) and
``parse_hugepages_per_node`` the ``hugepages_per_node`` tree
(``node0/hugepages/hugepages-2048kB/nr_hugepages``, ``node0/cpulist``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.parsers.driver import split_tree
from gputriage.text.fields import split_lines

__all__ = [
    "HugePagePool",
    "MemInfo",
    "NodeHugePages",
    "parse_hugepages",
    "parse_hugepages_per_node",
    "parse_meminfo",
    "pool_size_kb",
]

_MEMINFO_LINE = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z0-9_]{0,40}(?:\([A-Za-z0-9_]{1,20}\))?)"
                           r"\s*:\s*(?P<val>[0-9]{1,18})(?:\s*(?P<unit>[kKmMgG]B))?\s*$")
_UNIT_KB = {"kb": 1, "mb": 1024, "gb": 1024 * 1024}
_POOL_DIR = re.compile(r"^hugepages-(?P<kb>[0-9]{1,12})kB$")
_NODE_DIR = re.compile(r"^node(?P<n>[0-9]{1,5})$")
_POOL_ATTRS = {"nr_hugepages": "nr", "free_hugepages": "free", "resv_hugepages": "resv",
               "surplus_hugepages": "surplus", "nr_overcommit_hugepages": "overcommit"}


@dataclass
class MemInfo:
    """``/proc/meminfo``: every numeric field (sizes in kB, page counts as counts)."""

    values: dict[str, int] = field(default_factory=dict)
    lines: dict[str, str] = field(default_factory=dict)  # field -> the line as printed

    @property
    def mem_total_kb(self) -> int | None:
        """MemTotal in kB."""
        return self.values.get("MemTotal")

    @property
    def hugepages_total(self) -> int | None:
        """Pages in the default-size pool (HugePages_Total)."""
        return self.values.get("HugePages_Total")

    @property
    def hugepages_free(self) -> int | None:
        """Free pages of the default-size pool."""
        return self.values.get("HugePages_Free")

    @property
    def hugepages_rsvd(self) -> int | None:
        """Reserved (promised, not yet faulted) pages of the default-size pool."""
        return self.values.get("HugePages_Rsvd")

    @property
    def hugepages_surp(self) -> int | None:
        """Surplus (overcommitted) pages of the default-size pool."""
        return self.values.get("HugePages_Surp")

    @property
    def hugepagesize_kb(self) -> int | None:
        """The default hugepage size in kB."""
        return self.values.get("Hugepagesize")

    @property
    def hugetlb_kb(self) -> int | None:
        """Memory held by all hugepage pools, every size (Hugetlb), in kB."""
        return self.values.get("Hugetlb")


@dataclass
class HugePagePool:
    """One hugepage pool (one page size, host-wide or on one NUMA node)."""

    size_kb: int
    nr: int | None = None  # pages in the pool now (what the kernel managed to allocate)
    free: int | None = None
    resv: int | None = None
    surplus: int | None = None
    overcommit: int | None = None


@dataclass
class NodeHugePages:
    """The hugepage pools and CPUs of one NUMA node."""

    node: int
    cpulist: str | None = None  # as printed, "0-31,64-95"; "" for a CPU-less node
    pools: dict[int, HugePagePool] = field(default_factory=dict)  # size_kb -> pool

    @property
    def has_cpus(self) -> bool:
        """Whether the node has CPUs (GPU-memory and CXL nodes have none)."""
        return bool(self.cpulist and self.cpulist.strip())


def pool_size_kb(name: str) -> int | None:
    """``"hugepages-2048kB"`` -> 2048; None for any other name."""
    m = _POOL_DIR.match(name)
    return int(m.group("kb")) if m else None


def parse_meminfo(text: str) -> MemInfo:
    """Parse ``/proc/meminfo`` (also per-node ``meminfo`` with a ``Node N`` prefix).

    Values with a unit are converted to kB; counts (``HugePages_*``) are kept.
    Lines that do not parse are skipped. Empty text gives an empty MemInfo;
    text without a single ``Name: number`` line raises ParseError.
    """
    info = MemInfo()
    if not text.strip():
        return info
    for raw in split_lines(text):
        line = raw.strip()
        if line.startswith("Node "):  # /sys/devices/system/node/nodeN/meminfo
            parts = line.split(None, 2)
            line = parts[2] if len(parts) == 3 else ""
        m = _MEMINFO_LINE.match(line)
        if not m:
            continue
        key = m.group("key")
        value = int(m.group("val")) * _UNIT_KB.get((m.group("unit") or "kB").lower(), 1)
        if key not in info.values:
            info.values[key] = value
            info.lines[key] = raw.strip()
    if not info.values:
        raise ParseError("not /proc/meminfo: no 'Name:   value kB' line")
    return info


def _count(text: str) -> int | None:
    v = text.strip()
    return int(v) if v.isascii() and v.isdigit() and len(v) <= 18 else None


def _fill(pool: HugePagePool, attr: str, text: str) -> None:
    name = _POOL_ATTRS.get(attr)
    if name is not None:
        setattr(pool, name, _count(text))


def parse_hugepages(tree: object) -> list[HugePagePool]:
    """Parse the ``hugepages`` tree into pools sorted by page size.

    Keys look like ``hugepages-2048kB/nr_hugepages``; unknown attributes are
    ignored and unreadable values stay None. An empty tree (or one holding only
    read errors) gives []; a tree whose files are all foreign raises ParseError.
    """
    files, _links, _errors = split_tree(tree)
    pools: dict[int, HugePagePool] = {}
    for rel, text in files.items():
        head, _, attr = rel.strip("/").partition("/")
        size = pool_size_kb(head)
        if size is None or not attr or "/" in attr:
            continue
        _fill(pools.setdefault(size, HugePagePool(size)), attr, text)
    if files and not pools:
        raise ParseError("not a hugepages tree: no 'hugepages-<N>kB/<attr>' entries")
    return [pools[k] for k in sorted(pools)]


def parse_hugepages_per_node(tree: object) -> list[NodeHugePages]:
    """Parse the ``hugepages_per_node`` tree into NUMA nodes sorted by number.

    Keys look like ``node0/hugepages/hugepages-2048kB/nr_hugepages`` and
    ``node0/cpulist``. An empty tree gives []; a tree whose files are all
    foreign raises ParseError.
    """
    files, _links, _errors = split_tree(tree)
    nodes: dict[int, NodeHugePages] = {}
    for rel, text in files.items():
        parts = rel.strip("/").split("/")
        m = _NODE_DIR.match(parts[0]) if parts else None
        if m is None:
            continue
        n = int(m.group("n"))
        if parts[1:] == ["cpulist"]:
            nodes.setdefault(n, NodeHugePages(n)).cpulist = text.strip()
            continue
        if len(parts) != 4 or parts[1] != "hugepages":
            continue
        size = pool_size_kb(parts[2])
        if size is None:
            continue
        node = nodes.setdefault(n, NodeHugePages(n))
        _fill(node.pools.setdefault(size, HugePagePool(size)), parts[3], text)
    if files and not nodes:
        raise ParseError("not a per-node hugepages tree: no 'node<N>/...' entries")
    return [nodes[k] for k in sorted(nodes)]
