"""Every source gputriage reads, declared once.

A source has a stable name (its key in the snapshot manifest), a kind, what
it reads (a path, a glob tree, or an argv), a timeout and a size cap, and the
file it is stored as in a snapshot. Collection, the snapshot reader, the
bug-report splitter and the content detector all refer to sources by name.

Kinds:
  file      one file, stored as text
  command   an argv run without a shell; ``fallback`` argvs are tried in turn
            when the program is absent, fails, or finds no entries
  tree      files matched by globs under a root, stored as one JSON document
            ``{"files": {rel: text}, "links": {rel: target}, "errors": {rel: kind}}``
  devnodes  character devices matching a glob, stored as JSON
            ``[{"path", "major", "minor", "mode"}]``
  nvml      readings through NVML (nvidia-ml-py), stored as JSON, taken in a
            child process so that a wedged driver cannot hang the collector
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_CAP_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Source:
    name: str
    kind: str
    description: str
    path: str | None = None  # file path, tree root, or devnode glob
    globs: tuple[str, ...] = ()  # tree: patterns relative to path
    argv: tuple[str, ...] = ()
    fallback: tuple[tuple[str, ...], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    cap_bytes: int = DEFAULT_CAP_BYTES
    suffix: str = ".txt"
    select: str | None = None  # tree: name of a filter in collect.trees
    collect: bool = True  # False: read from pasted outputs and bug reports only
    applies: str | None = None  # "nvidia" | "infiniband": hardware the source is about
    parser: str | None = None  # "module:function" of gputriage.parsers; the source's fact

    @property
    def filename(self) -> str:
        return f"sources/{self.name}{self.suffix}"

    @property
    def target(self) -> str | list[str]:
        if self.kind == "command":
            return list(self.argv)
        if self.kind == "tree":
            return [f"{self.path}/{g}" for g in self.globs]
        return self.path or ""


_PCI_ATTRS = (
    "vendor", "device", "class", "subsystem_vendor", "subsystem_device", "numa_node",
    "local_cpulist", "current_link_speed", "current_link_width", "max_link_speed",
    "max_link_width", "driver", "enable", "aer_dev_correctable", "aer_dev_fatal",
    "aer_dev_nonfatal", "physfn", "iommu_group", "power_state",
)
_HUGEPAGE_ATTRS = ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages",
                   "nr_overcommit_hugepages")
_IB_PORT_ATTRS = ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid")


def _cmd(name: str, argv: tuple[str, ...], description: str, **kw) -> Source:
    return Source(name=name, kind="command", argv=argv, description=description, **kw)


def _file(name: str, path: str, description: str, **kw) -> Source:
    return Source(name=name, kind="file", path=path, description=description, **kw)


SOURCES: tuple[Source, ...] = (
    # --- NVIDIA driver and tools
    _cmd("nvidia_smi_q_xml", ("nvidia-smi", "-q", "-x"), "full GPU state as XML", suffix=".xml",
         timeout_s=30.0, applies="nvidia",
         parser="nvsmi_xml:parse_nvsmi_xml"),
    _cmd("nvidia_smi_q", ("nvidia-smi", "-q"), "full GPU state as text (input only: live "
         "collection takes the XML)", collect=False,
         parser="nvsmi_text:parse_nvsmi_text"),
    _cmd("nvidia_smi", ("nvidia-smi",), "the nvidia-smi summary table", applies="nvidia",
         parser="nvsmi_table:parse_nvsmi_table"),
    _cmd("nvidia_smi_csv", ("nvidia-smi", "--query-gpu=index,pci.bus_id,name,driver_version,"
                            "pstate,utilization.gpu,pcie.link.gen.current,pcie.link.gen.max,"
                            "pcie.link.width.current,pcie.link.width.max", "--format=csv"),
         "nvidia-smi --query-gpu / --query-remapped-rows / --query-retired-pages / "
         "--query-compute-apps CSV outputs (input only: live collection takes the XML)",
         collect=False,
         parser="nvsmi_csv:parse_nvsmi_csv"),
    _cmd("gpu_reset", ("nvidia-smi", "--gpu-reset"), "what nvidia-smi -r / --gpu-reset and a "
         "MIG mode change printed, with the device holders around them (fuser -v "
         "/dev/nvidia*); input only: gputriage never resets a GPU", collect=False,
         parser="gpu_reset:parse_gpu_reset"),
    _cmd("nvidia_smi_topo", ("nvidia-smi", "topo", "-m"), "GPU/NIC/CPU topology matrix",
         applies="nvidia",
         parser="topo:parse_topo"),
    _cmd("nvidia_smi_nvlink_status", ("nvidia-smi", "nvlink", "-s"), "NVLink link state",
         applies="nvidia",
         parser="nvlink:parse_nvlink_status"),
    _cmd("nvidia_smi_nvlink_errors", ("nvidia-smi", "nvlink", "-e"), "NVLink error counters",
         applies="nvidia",
         parser="nvlink:parse_nvlink_errors"),
    Source(name="nvml", kind="nvml", description="NVML readings (or the init error text)",
           suffix=".json", timeout_s=20.0,
         parser="nvml:parse_nvml"),
    _file("proc_driver_nvidia_version", "/proc/driver/nvidia/version",
          "loaded NVIDIA kernel module version", applies="nvidia",
         parser="driver:parse_proc_driver_version"),
    Source(name="proc_driver_nvidia_gpus", kind="tree", path="/proc/driver/nvidia/gpus",
           globs=("*/information",), suffix=".json",
           description="per-GPU information as the kernel module sees it", applies="nvidia",
         parser="driver:parse_gpus_information"),
    _file("proc_modules", "/proc/modules", "loaded kernel modules",
         parser="modules:parse_modules"),
    _file("proc_devices", "/proc/devices", "character device majors (nvidia-uvm is dynamic)",
         parser="devices:parse_proc_devices"),
    Source(name="sys_module_nvidia", kind="tree", path="/sys/module",
           globs=("nvidia*/version", "nvidia*/initstate"), suffix=".json",
           description="version of each loaded nvidia* module", applies="nvidia",
         parser="driver:parse_sys_module_versions"),
    Source(name="dev_nvidia", kind="devnodes", path="/dev/nvidia*", suffix=".json",
           description="NVIDIA device nodes with major:minor", applies="nvidia",
         parser="devices:parse_devnodes"),
    Source(name="dev_nvidia_caps", kind="devnodes", path="/dev/nvidia-caps/*", suffix=".json",
           description="NVIDIA capability device nodes (MIG)", applies="nvidia"),
    Source(name="nvidia_libs", kind="tree", path="/",
           globs=("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*", "usr/lib64/libnvidia-ml.so.*",
                  "usr/lib/aarch64-linux-gnu/libnvidia-ml.so.*", "usr/lib/libnvidia-ml.so.*",
                  "usr/lib/x86_64-linux-gnu/libcuda.so.*", "usr/lib64/libcuda.so.*",
                  "usr/lib/aarch64-linux-gnu/libcuda.so.*", "usr/lib/libcuda.so.*"),
           select="names_only", suffix=".json",
           description="userspace driver libraries (their file names carry the version)",
         parser="driver:parse_nvidia_libs"),
    # --- PCI
    Source(name="pci_devices", kind="tree", path="/sys/bus/pci/devices",
           globs=tuple(f"*/{a}" for a in _PCI_ATTRS), select="gpu_and_nic_functions",
           suffix=".json",
           description="NVIDIA and network PCI functions: ids, class, NUMA, link speed/width",
         parser="pci:parse_pci_tree"),
    _cmd("lspci_nvidia", ("lspci", "-vvv", "-nn", "-D", "-d", "10de:"),
         "lspci detail of NVIDIA functions", applies="nvidia",
         parser="lspci:parse_lspci"),
    _cmd("dmidecode_slots", ("dmidecode", "-t", "slot"),
         "physical PCIe slots: type, electrical width, what sits in them",
         parser="dmidecode:parse_dmidecode_slots"),
    _cmd("lspci_mellanox", ("lspci", "-vvv", "-nn", "-D", "-d", "15b3:"),
         "lspci detail of Mellanox/NVIDIA networking functions", applies="infiniband",
         parser="lspci:parse_lspci"),
    # --- memory, kernel, OS
    _file("proc_meminfo", "/proc/meminfo", "memory and hugepage totals",
         parser="memory:parse_meminfo"),
    Source(name="hugepages", kind="tree", path="/sys/kernel/mm/hugepages",
           globs=tuple(f"*/{a}" for a in _HUGEPAGE_ATTRS), suffix=".json",
           description="hugepage pools per page size",
         parser="memory:parse_hugepages"),
    Source(name="hugepages_per_node", kind="tree", path="/sys/devices/system/node",
           globs=tuple(f"node*/hugepages/*/{a}" for a in _HUGEPAGE_ATTRS) + ("node*/cpulist",),
           suffix=".json", description="hugepage pools and CPUs per NUMA node",
         parser="memory:parse_hugepages_per_node"),
    _file("thp_enabled", "/sys/kernel/mm/transparent_hugepage/enabled",
          "transparent hugepage mode",
         parser="hostcfg:parse_thp"),
    _file("thp_defrag", "/sys/kernel/mm/transparent_hugepage/defrag",
          "transparent hugepage defrag mode"),
    _file("numa_balancing", "/proc/sys/kernel/numa_balancing", "automatic NUMA balancing",
         parser="hostcfg:parse_numa_balancing"),
    _file("proc_cmdline", "/proc/cmdline", "kernel command line",
         parser="hostcfg:parse_cmdline"),
    _file("cgroup_controllers", "/sys/fs/cgroup/cgroup.controllers",
          "cgroup v2 controllers (absent on cgroup v1)",
         parser="hostcfg:parse_cgroup_controllers"),
    _file("proc_self_cgroup", "/proc/self/cgroup", "cgroup membership (container detection)"),
    _cmd("numactl", ("numactl", "--hardware"), "NUMA nodes, CPUs, memory, distances",
         parser="numactl:parse_numactl"),
    _file("os_release", "/etc/os-release", "distribution"),
    _cmd("uname", ("uname", "-a"), "kernel release and architecture"),
    _file("boot_id", "/proc/sys/kernel/random/boot_id", "boot id"),
    _file("hostname", "/proc/sys/kernel/hostname", "host name"),
    _file("uptime", "/proc/uptime", "seconds since boot"),
    # --- logs and services
    _cmd("kernel_log", ("journalctl", "-k", "-b", "-o", "short-iso", "--no-pager"),
         "kernel log of the current boot", fallback=(("dmesg", "--time-format", "iso"),
                                                      ("dmesg",)),
         timeout_s=30.0, cap_bytes=64 * 1024 * 1024,
         parser="kernel_events:scan_driver_events"),
    _cmd("systemctl_persistenced", ("systemctl", "show", "nvidia-persistenced", "--no-pager"),
         "nvidia-persistenced unit state",
         parser="systemd:parse_systemctl_show"),
    _cmd("systemctl_fabricmanager", ("systemctl", "show", "nvidia-fabricmanager", "--no-pager"),
         "nvidia-fabricmanager unit state",
         parser="systemd:parse_systemctl_show"),
    _cmd("fabricmanager_journal",
         ("journalctl", "-u", "nvidia-fabricmanager", "-b", "-o", "short-iso", "--no-pager"),
         "fabric manager journal of the current boot",
         parser="fabricmanager:parse_fabricmanager_log"),
    # --- InfiniBand / RoCE
    Source(name="infiniband", kind="tree", path="/sys/class/infiniband",
           globs=tuple(f"*/ports/*/{a}" for a in _IB_PORT_ATTRS)
           + ("*/ports/*/counters/*", "*/fw_ver", "*/hca_type", "*/node_desc", "*/device"),
           suffix=".json", description="HCA ports: state, rate, link layer, counters",
           applies="infiniband",
         parser="infiniband:parse_ib_tree"),
    _cmd("ibstat", ("ibstat",), "InfiniBand HCA and port status", applies="infiniband",
         parser="infiniband:parse_ibstat"),
    # --- containers
    _file("container_toolkit_config", "/etc/nvidia-container-runtime/config.toml",
          "NVIDIA container runtime configuration"),
    Source(name="cdi_specs", kind="tree", path="/",
           globs=("etc/cdi/*", "var/run/cdi/*"), suffix=".json",
           description="Container Device Interface specs"),
    _cmd("nvidia_ctk_version", ("nvidia-ctk", "--version"), "container toolkit version"),
    _cmd("nvidia_container_cli_info", ("nvidia-container-cli", "info"),
         "what libnvidia-container sees"),
    # --- the job's side (input only: a job's logs, never collected from the host)
    _cmd("nccl_log", ("env", "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,ENV,NET,GRAPH",
                      "all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "1"),
         "NCCL_DEBUG=INFO output of a job (input only: one file per rank or all ranks "
         "interleaved)", collect=False,
         parser="nccl_log:parse_nccl_log"),
    _cmd("device_query", ("deviceQuery",), "the CUDA sample deviceQuery: devices the CUDA "
         "runtime sees, or the cudaError it stopped on (input only)", collect=False,
         parser="device_query:parse_device_query"),
    _cmd("nccl_tests", ("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "1"),
         "nccl-tests results table (input only)", collect=False,
         parser="nccl_tests:parse_nccl_tests"),
)

BY_NAME: dict[str, Source] = {s.name: s for s in SOURCES}


def get(name: str) -> Source:
    return BY_NAME[name]


def parser_of(name: str) -> tuple[Callable[[Any], Any], bool]:
    """The parser of a source (imported on first use) and whether it takes the decoded
    JSON document rather than the text; KeyError when the source has none."""
    src = BY_NAME[name]
    if not src.parser:
        raise KeyError(f"source {name} declares no parser")
    module, _, func = src.parser.partition(":")
    parse = getattr(importlib.import_module(f"gputriage.parsers.{module}"), func)
    return parse, src.suffix == ".json"


PARSED: tuple[str, ...] = tuple(s.name for s in SOURCES if s.parser)
