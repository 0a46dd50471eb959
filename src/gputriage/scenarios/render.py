"""Render a :class:`~gputriage.scenarios.model.Host` into every snapshot source.

:data:`RENDERERS` maps each source name (see :mod:`gputriage.sources`) to the
function writing its text. :func:`render_all` applies the host's failure
overrides: a command the scenario makes fail keeps its error output and rc,
and a source the host lacks is returned with no data and ``error="absent"``.
File and tree sources carry ``rc=None``; commands their exit status.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gputriage import sources
from gputriage.scenarios import container_cdi as ctr
from gputriage.scenarios import render_host as h
from gputriage.scenarios import render_logs as lg
from gputriage.scenarios import render_nvsmi as smi
from gputriage.scenarios import render_pci as pci
from gputriage.scenarios.model import Host


@dataclass(frozen=True)
class Rendered:
    """One source's outcome: its bytes (None when absent), rc and error kind."""

    data: bytes | None
    rc: int | None = 0
    error: str | None = None
    error_detail: str | None = None


def _const(text: str) -> Callable[[Host], str]:
    return lambda host: text


RENDERERS: dict[str, Callable[[Host], str]] = {
    "nvidia_smi_q_xml": smi.nvidia_smi_q_xml,
    "nvidia_smi": smi.nvidia_smi_table,
    "nvidia_smi_topo": smi.nvidia_smi_topo,
    "nvidia_smi_nvlink_status": smi.nvidia_smi_nvlink_status,
    "nvidia_smi_nvlink_errors": smi.nvidia_smi_nvlink_errors,
    "nvml": smi.nvml_json,
    "proc_driver_nvidia_version": h.proc_driver_nvidia_version,
    "proc_driver_nvidia_gpus": h.proc_driver_nvidia_gpus,
    "proc_modules": h.proc_modules,
    "proc_devices": h.proc_devices,
    "sys_module_nvidia": h.sys_module_nvidia,
    "dev_nvidia": h.dev_nvidia,
    "dev_nvidia_caps": h.dev_nvidia_caps,
    "nvidia_libs": h.nvidia_libs,
    "pci_devices": h.pci_devices,
    "lspci_nvidia": lg.lspci_nvidia,
    "lspci_tree": pci.lspci_tree,
    "lspci_mellanox": lg.lspci_mellanox,
    "dmidecode_slots": lg.dmidecode_slots,
    "proc_meminfo": h.proc_meminfo,
    "hugepages": h.hugepages,
    "hugepages_per_node": h.hugepages_per_node,
    "thp_enabled": _const("always [madvise] never\n"),
    "thp_defrag": _const("always defer defer+madvise [madvise] never\n"),
    "numa_balancing": _const("0\n"),
    "proc_cmdline": h.proc_cmdline,
    "cgroup_controllers": _const("cpuset cpu io memory hugetlb pids rdma misc\n"),
    "proc_self_cgroup": _const("0::/user.slice/user-0.slice/session-4.scope\n"),
    "numactl": h.numactl,
    "os_release": h.os_release,
    "uname": h.uname,
    "boot_id": lambda host: host.boot_id + "\n",
    "hostname": lambda host: host.hostname + "\n",
    "uptime": h.uptime,
    "kernel_log": lg.kernel_log,
    "systemctl_persistenced": lg.systemctl_persistenced,
    "systemctl_fabricmanager": lg.systemctl_fabricmanager,
    "fabricmanager_journal": lg.fabricmanager_journal,
    "persistenced_journal": lg.persistenced_journal,
    "infiniband": lg.infiniband,
    "ibstat": lg.ibstat,
    "container_toolkit_config": lg.container_toolkit_config,
    "nvidia_ctk_version": lg.nvidia_ctk_version,
    "nvidia_container_cli_info": lg.nvidia_container_cli_info,
    **ctr.RENDERERS,
}


# tools a scenario host lacks unless it supplies their output (DCGM is optional)
NOT_INSTALLED = frozenset({"dcgmi_discovery", "dcgmi_health", "dcgmi_version"})


def render_all(host: Host) -> dict[str, Rendered]:
    """Every source of ``host``, in the declaration order of :mod:`gputriage.sources`."""
    out: dict[str, Rendered] = {}
    for spec in sources.SOURCES:
        name = spec.name
        if name not in RENDERERS and name not in host.command_overrides and \
                name not in NOT_INSTALLED:
            continue  # (a job source is written only when a scenario supplies it)
        is_command = spec.kind == "command"
        if name in host.absent or (name in NOT_INSTALLED and name not in RENDERERS
                                   and name not in host.command_overrides):
            out[name] = Rendered(None, rc=None, error="absent",
                                 error_detail="not present on this host")
            continue
        override = host.command_overrides.get(name)
        if override is not None:
            # the command ran: its error output is the capture, its rc says it
            # failed (recorded as the collector records a non-zero exit)
            failed = override.rc not in (0, None)
            out[name] = Rendered(override.text.encode(), rc=override.rc,
                                 error="failed" if failed else None,
                                 error_detail=f"exit status {override.rc}" if failed else None)
            continue
        out[name] = Rendered(RENDERERS[name](host).encode(), rc=0 if is_command else None)
    return out
