"""Parsers: pure functions from a source's text (or JSON document) to typed
dataclasses. ``PARSERS`` maps each source name to its parser, for the
conformance test and for anyone who wants one source parsed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PARSERS", "parser_for"]

# source name -> (module, function name, takes decoded JSON)
PARSERS: dict[str, tuple[str, str, bool]] = {
    "nvidia_smi_q_xml": ("nvsmi_xml", "parse_nvsmi_xml", False),
    "nvidia_smi_q": ("nvsmi_text", "parse_nvsmi_text", False),
    "nvidia_smi": ("nvsmi_table", "parse_nvsmi_table", False),
    "nvidia_smi_csv": ("nvsmi_csv", "parse_nvsmi_csv", False),
    "gpu_reset": ("gpu_reset", "parse_gpu_reset", False),
    "device_query": ("device_query", "parse_device_query", False),
    "nvml": ("nvml", "parse_nvml", True),
    "proc_driver_nvidia_version": ("driver", "parse_proc_driver_version", False),
    "proc_driver_nvidia_gpus": ("driver", "parse_gpus_information", True),
    "sys_module_nvidia": ("driver", "parse_sys_module_versions", True),
    "nvidia_libs": ("driver", "parse_nvidia_libs", True),
    "proc_modules": ("modules", "parse_modules", False),
    "proc_devices": ("devices", "parse_proc_devices", False),
    "dev_nvidia": ("devices", "parse_devnodes", True),
    "pci_devices": ("pci", "parse_pci_tree", True),
    "lspci_nvidia": ("lspci", "parse_lspci", False),
    "lspci_mellanox": ("lspci", "parse_lspci", False),
    "dmidecode_slots": ("dmidecode", "parse_dmidecode_slots", False),
    "systemctl_persistenced": ("systemd", "parse_systemctl_show", False),
    "systemctl_fabricmanager": ("systemd", "parse_systemctl_show", False),
    "kernel_log": ("kernel_events", "scan_driver_events", False),
    "nvidia_smi_topo": ("topo", "parse_topo", False),
    "numactl": ("numactl", "parse_numactl", False),
    "nvidia_smi_nvlink_status": ("nvlink", "parse_nvlink_status", False),
    "nvidia_smi_nvlink_errors": ("nvlink", "parse_nvlink_errors", False),
    "fabricmanager_journal": ("fabricmanager", "parse_fabricmanager_log", False),
    "infiniband": ("infiniband", "parse_ib_tree", True),
    "ibstat": ("infiniband", "parse_ibstat", False),
    "proc_meminfo": ("memory", "parse_meminfo", False),
    "hugepages": ("memory", "parse_hugepages", True),
    "hugepages_per_node": ("memory", "parse_hugepages_per_node", True),
    "proc_cmdline": ("hostcfg", "parse_cmdline", False),
    "thp_enabled": ("hostcfg", "parse_thp", False),
    "numa_balancing": ("hostcfg", "parse_numa_balancing", False),
    "cgroup_controllers": ("hostcfg", "parse_cgroup_controllers", False),
    "nccl_log": ("nccl_log", "parse_nccl_log", False),
    "nccl_tests": ("nccl_tests", "parse_nccl_tests", False),
}


def parser_for(source: str) -> tuple[Callable[[Any], Any], bool]:
    """The parser of a source and whether it takes a decoded JSON document."""
    import importlib

    module, func, as_json = PARSERS[source]
    return getattr(importlib.import_module(f"gputriage.parsers.{module}"), func), as_json
