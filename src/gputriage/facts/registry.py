"""Facts of one area each, listed here once by name: :data:`AREAS` says which module of
this package defines each fact; :data:`REGISTRY` is every fact by name.

An area's module is imported when one of its facts is first looked up, so that a
command that asks for a few facts (``gputriage logs``: the kernel log's) does not import
every area. tests/test_facts_registry.py holds :data:`AREAS` to what the modules define.

A fact of a source that only needs parsing needs no entry: a source that declares its
parser in :mod:`gputriage.sources` is a fact of its own name.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from gputriage.facts.table import Fact, FactTable, merge

__all__ = ["AREAS", "REGISTRY", "area_table", "defined_facts", "fact"]

# area module (of gputriage.facts) -> the names of the facts its FACTS table defines
AREAS: dict[str, tuple[str, ...]] = {
    "stack": ("window", "source_records", "host_name", "kernel_module", "module_versions",
              "modules", "libs", "libnvidia_ml_targets", "hung_driver_queries", "smi",
              "gpu_resets", "device_query", "log_scan", "log_host", "log_events", "not_read",
              "log_window", "log_modified", "driver_events", "proc_gpus", "driver_loaded",
              "pci_listing", "pci", "pci_source", "pci_gpus", "has_infiniband", "devnodes",
              "char_majors", "units", "container_cgroup_lines", "in_container",
              "visible_gpus", "lost_gpus"),
    "host": ("host_meminfo", "host_hugepages", "host_hugepage_nodes", "host_cmdline",
             "host_thp", "host_thp_defrag", "host_thp_text", "host_cgroup"),
    "fabric": ("nvlink", "nvlink_errors", "fm_log", "nvswitches", "fabric_states",
               "needs_fabric_manager"),
    "infiniband": ("ib_ports", "ib_tool_problems", "ib_gpu_affinity"),
    "nccl": ("nccl_log", "nccl_tests", "nccl_log_text", "nccl_job"),
    "nccl_bandwidth": ("nccl_expectations",),
    "pcie": ("pcie_links", "pcie_acs"),
    "pcie_path": ("pcie_paths",),
    "topology": ("topology", "numa", "numa_balancing", "gpu_nic_map"),
    "smi_views": ("smi_views",),
    "identity": ("driver_versions", "named_host", "host_identity"),
    "expectations": ("expectations", "gpu_traces"),
    "resets": ("resets_seen",),
    "k8s": ("cluster", "shared_link_gbits"),
    "dcgm": ("dcgm_version", "dcgm_unanswered"),
}

_AREA_OF: dict[str, str] = {name: area for area, names in AREAS.items() for name in names}


def area_table(area: str) -> FactTable:
    """The facts the module ``area`` of this package defines (importing it)."""
    table: FactTable = importlib.import_module(f"{__package__}.{area}").FACTS
    return table


def fact(name: str) -> Fact | None:
    """The explicit fact ``name`` (importing its area's module), None when no area lists
    it; an area that lists a fact its module does not define is an error."""
    area = _AREA_OF.get(name)
    if area is None:
        return None
    found = area_table(area).get(name)
    if found is None:
        raise LookupError(f"facts.registry lists {name} under {area}, which does not define it")
    return found


def defined_facts() -> dict[str, Fact]:
    """Every fact the area modules define, by name (importing every area); a name two
    areas define is an error. :data:`AREAS` must list exactly these."""
    return merge(*(area_table(area) for area in AREAS))


class _Registry(Mapping[str, Fact]):
    """Every explicit fact by name: looking one up imports its area only."""

    def __getitem__(self, name: str) -> Fact:
        found = fact(name)
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(_AREA_OF)

    def __len__(self) -> int:
        return len(_AREA_OF)


REGISTRY: Mapping[str, Fact] = _Registry()
