"""Host configuration facts: memory and hugepage pools, the kernel command line,
transparent hugepages and the cgroup hierarchy.

Registers the facts ``host_meminfo``, ``host_hugepages``,
``host_hugepage_nodes``, ``host_cmdline``, ``host_thp``, ``host_thp_defrag``,
``host_thp_text`` and ``host_cgroup``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gputriage.facts.table import FactReader, FactTable, Missing
from gputriage.parsers import hostcfg, memory

FACTS = FactTable()

__all__ = ["CgroupHierarchy", "DEFAULT_HUGEPAGE_KB", "hugepage_pool_sizes"]

DEFAULT_HUGEPAGE_KB = 2048  # x86-64 and arm64 (4 KiB base pages) default hugepage size


@dataclass
class CgroupHierarchy:
    """Which cgroup version the host runs, and the lines that show it."""

    version: int  # 1 (legacy or hybrid) or 2 (unified)
    controllers: list[str] = field(default_factory=list)  # v2 controllers, when read
    evidence: dict[str, list[str]] = field(default_factory=dict)


@FACTS.fact("host_meminfo")
def host_meminfo(facts: FactReader) -> memory.MemInfo:
    """``/proc/meminfo``."""
    info = facts.parse("proc_meminfo", memory.parse_meminfo)
    if not info.values:
        raise Missing("proc_meminfo: empty")
    return info


@FACTS.fact("host_hugepages")
def host_hugepages(facts: FactReader) -> list[memory.HugePagePool]:
    """Host-wide hugepage pools by size (sysfs)."""
    pools = facts.parse("hugepages", memory.parse_hugepages, as_json=True)
    if not pools:
        raise Missing("hugepages: no pool in the tree")
    return pools


@FACTS.fact("host_hugepage_nodes")
def host_hugepage_nodes(facts: FactReader) -> list[memory.NodeHugePages]:
    """Hugepage pools and CPUs per NUMA node (sysfs)."""
    nodes = facts.parse("hugepages_per_node", memory.parse_hugepages_per_node, as_json=True)
    if not nodes:
        raise Missing("hugepages_per_node: no node in the tree")
    return nodes


@FACTS.fact("host_cmdline")
def host_cmdline(facts: FactReader) -> hostcfg.KernelCmdline:
    """The kernel command line."""
    cmd = facts.parse("proc_cmdline", hostcfg.parse_cmdline)
    if not cmd.params:
        raise Missing("proc_cmdline: empty")
    return cmd


def _thp_mode(facts: FactReader, source: str) -> str:
    """The bracketed choice of a transparent-hugepage sysfs file."""
    mode = facts.parse(source, hostcfg.parse_thp)
    if mode is None:
        raise Missing(f"{source}: empty")
    return mode


@FACTS.fact("host_thp")
def host_thp(facts: FactReader) -> str:
    """The transparent hugepage mode (always / madvise / never)."""
    return _thp_mode(facts, "thp_enabled")


@FACTS.fact("host_thp_defrag")
def host_thp_defrag(facts: FactReader) -> str:
    """The transparent hugepage defrag mode."""
    return _thp_mode(facts, "thp_defrag")


@FACTS.fact("host_thp_text", sources=("thp_enabled", "thp_defrag"))
def host_thp_text(facts: FactReader) -> dict[str, str]:
    """The transparent-hugepage sysfs files as read (source -> text), for evidence."""
    texts = {source: facts.text(source) for source in ("thp_enabled", "thp_defrag")}
    return {source: text for source, text in texts.items() if text}


@FACTS.fact("host_cgroup")
def host_cgroup(facts: FactReader) -> CgroupHierarchy:
    """cgroup v2 when ``cgroup.controllers`` exists at the root; v1 (legacy or
    hybrid) when ``/proc/self/cgroup`` lists controller hierarchies."""
    controllers = None
    text = facts.text("cgroup_controllers")
    if text is not None:
        try:
            controllers = facts.parse("cgroup_controllers", hostcfg.parse_cgroup_controllers)
        except Missing:
            controllers = None
    lines: list[hostcfg.CgroupLine] = []
    if facts.text("proc_self_cgroup") is not None:
        try:
            lines = facts.parse("proc_self_cgroup", hostcfg.parse_self_cgroup)
        except Missing:
            lines = []
    if controllers is not None:
        return CgroupHierarchy(2, controllers, {"cgroup_controllers": [" ".join(controllers)
                                                                        or "(empty)"]})
    v1 = [ln for ln in lines if ln.is_v1]
    if v1:
        return CgroupHierarchy(1, [], {"proc_self_cgroup": [ln.line for ln in v1]})
    if lines:
        return CgroupHierarchy(2, [], {"proc_self_cgroup": [ln.line for ln in lines]})
    raise Missing("no cgroup_controllers or /proc/self/cgroup")


def hugepage_pool_sizes(pools: Sequence[memory.HugePagePool] | None,
                        nodes: Sequence[memory.NodeHugePages] | None,
                        info: memory.MemInfo | None) -> dict[int, tuple[int, str, list[str]]]:
    """Pages in each pool now: size_kb -> (pages, source, evidence lines), from the
    sysfs ``pools``, else the per-node pools summed, else ``/proc/meminfo`` (default
    size)."""
    out: dict[int, tuple[int, str, list[str]]] = {}
    for pool in pools or ():
        if pool.nr is not None:
            out[pool.size_kb] = (pool.nr, "hugepages",
                                 [f"hugepages-{pool.size_kb}kB/nr_hugepages: {pool.nr}"])
    if not out:
        out = _node_pool_sums(nodes or ())
    if info is not None and info.hugepagesize_kb and info.hugepages_total is not None \
            and info.hugepagesize_kb not in out:
        out[info.hugepagesize_kb] = (info.hugepages_total, "proc_meminfo",
                                     [info.lines["HugePages_Total"], info.lines["Hugepagesize"]])
    return out


def _node_pool_sums(nodes: Sequence[memory.NodeHugePages]) -> dict[int, tuple[int, str,
                                                                             list[str]]]:
    """The per-node pools summed by page size, with one evidence line per node."""
    sums: dict[int, tuple[int, list[str]]] = {}
    for node in nodes:
        for size, pool in node.pools.items():
            if pool.nr is None:
                continue
            total, lines = sums.get(size, (0, []))
            lines.append(f"node{node.node}/hugepages/hugepages-{size}kB/nr_hugepages: "
                         f"{pool.nr}")
            sums[size] = (total + pool.nr, lines)
    return {size: (n, "hugepages_per_node", lines) for size, (n, lines) in sums.items()}
