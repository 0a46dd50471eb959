"""Every source gputriage reads, declared once, end to end.

A source has a stable name (its key in the snapshot manifest), a kind, what
it reads (a path, a glob tree, or an argv), a timeout and a size cap, the
file it is stored as in a snapshot, its parser (or why it is kept as text),
the detector that recognises it in a paste and its aliases. Collection, the
snapshot reader, the fact store, the bug-report splitter and the paste detector
all take what they need from here; nothing else lists sources.

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
  input     a job's output or a command gputriage never runs itself: read from
            pastes and bug reports only (``argv`` shows what produces it)

A command with ``opt_in`` runs only when the collection is told the value of that
option (``collect --model-dir DIR``, ``--dcgm-diag LEVEL``): the value replaces ``{}``
in its argv, and its timeout is not cut to the run's deadline (the deadline grows to
hold it). Without the option it is read from pastes and bug reports only, as an input.

Recognition of a paste (:mod:`gputriage.ingest.detect`):
  detector      ``"module:function"`` under ``gputriage`` taking a
                :class:`gputriage.text.paste.PasteDoc`; it claims the lines of the
                blocks it recognises. Several sources may name one detector (it runs
                once, and claims for each of them).
  detect_order  detectors run in this order, lowest first: an earlier detector
                wins a line (job logs before the system log, the kernel log last).
  keeps_prompt  when the prompt line that printed the output belongs to it:
                ``"alone"``: when the output is all this source's (a CSV query names
                its columns, each command of a reset session is a step); ``"named"``:
                when the command names this source and it claimed some of the output
                (an nccl-tests run and the NCCL log interleaved in it).
  prompt_step   ``"module:function"``: a predicate on a prompt's command without
                output of its own that is a step of this source's session.

Aliases (``aliases``) say what produces a source; a file source's own path is
one implicitly. Each alias is one of:
  ``/path``       a file (a glob) a reader command prints (``cat``, ``tail``, ``zcat``...)
  ``*** /path``   a file section of an nvidia-bug-report log (a glob); for a tree
                  source, each section becomes one file of the tree
  ``prog word..`` a command line: ``prog`` is a glob on the program's base name
                  (a bug-report command section is matched the same way); each word
                  is alternatives ``a|b`` that some argument must match (globs; ``#``
                  is a number; ``~text``: the line mentions text); ``!word``: no
                  argument may match; ``?word``: optional, and the alias then allows
                  no argument that its words do not name. The alias with the most
                  words wins; on a tie, the one declared first.

The one-line ``description`` of a source with a detector is what the error for an
unrecognised paste lists.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_CAP_BYTES = 16 * 1024 * 1024
# how long ``dcgmi diag -r N`` may run (DCGM's guide: -r 1 seconds, -r 2 about two
# minutes, -r 3 up to half an hour, -r 4 up to two hours on eight GPUs), with room
DCGM_DIAG_TIMEOUT_S = {1: 120.0, 2: 600.0, 3: 3600.0, 4: 10800.0}


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
    applies: str | None = None  # "nvidia" | "infiniband": hardware the source is about
    parser: str | None = None  # "module:function" under gputriage; the source's fact
    raw: str | None = None  # why a source without a parser is kept as text
    detector: str | None = None  # "module:function" of gputriage: claims it in a paste
    detect_order: int = 0  # detectors run lowest first (see the module's docstring)
    aliases: tuple[str, ...] = ()  # command lines, files and bug-report sections that give it
    keeps_prompt: str | None = None  # "alone" | "named": when its prompt line belongs to it
    prompt_step: str | None = None  # "module:function": commands that are steps of it
    opt_in: str | None = None  # the collect option that runs it (see the module's docstring)

    @property
    def collect(self) -> bool:
        """Whether every collection reads it (job outputs are only ever pasted; an
        opt-in command runs when its option is given)."""
        return self.kind != "input" and self.opt_in is None

    def argv_for(self, value: str) -> tuple[str, ...]:
        """An opt-in command's argv with the option's value in place of ``{}``."""
        return tuple(value if word == "{}" else word for word in self.argv)

    @property
    def filename(self) -> str:
        return f"sources/{self.name}{self.suffix}"

    @property
    def target(self) -> str | list[str]:
        if self.kind in ("command", "input"):
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


def _input(name: str, argv: tuple[str, ...], description: str, **kw) -> Source:
    return Source(name=name, kind="input", argv=argv, description=description, **kw)


def _kubectl(words: str) -> tuple[str, ...]:
    """An alias for kubectl and for OpenShift's oc (the same commands)."""
    return (f"kubectl {words}", f"oc {words}")


_SMI_QUERY = "-q|--query|-a"  # the options that print nvidia-smi's full query (-a: its alias)


SOURCES: tuple[Source, ...] = (
    # --- NVIDIA driver and tools
    _cmd("nvidia_smi_q_xml", ("nvidia-smi", "-q", "-x"), "nvidia-smi -q -x XML (full GPU state)",
         suffix=".xml", timeout_s=30.0, applies="nvidia",
         parser="parsers.nvsmi_xml:parse_nvsmi_xml",
         detector="parsers.nvsmi_xml:claim_nvsmi_xml", detect_order=30,
         aliases=(f"nvidia-smi {_SMI_QUERY} -x|--xml-format !-u|--unit",)),
    _input("nvidia_smi_q", ("nvidia-smi", "-q"),
           "nvidia-smi -q text or one of its sections (full GPU state, live collection "
           "takes the XML)",
           parser="parsers.nvsmi_text:parse_nvsmi_text",
           detector="parsers.nvsmi_text:claim_nvsmi_text", detect_order=40,
           aliases=(f"nvidia-smi {_SMI_QUERY} !-u|--unit",)),
    _cmd("nvidia_smi", ("nvidia-smi",), "the nvidia-smi table (or an excerpt), its error "
         "message, nvidia-smi -L, nvidia-smi mig -lgi/-lci (MIG instances)", applies="nvidia",
         parser="parsers.nvsmi_table:parse_nvsmi_table",
         detector="parsers.nvsmi_table:claim_nvsmi_table", detect_order=100,
         aliases=("nvidia-smi ?-i|--id|--id=*|#|-L|--list-gpus",
                  "nvidia-smi mig -lgi|--list-gpu-instances|-lci|--list-compute-instances")),
    _input("nvidia_smi_csv", ("nvidia-smi", "--query-gpu=index,pci.bus_id,name,driver_version,"
                              "pstate,utilization.gpu,pcie.link.gen.current,pcie.link.gen.max,"
                              "pcie.link.width.current,pcie.link.width.max", "--format=csv"),
           "nvidia-smi --query-gpu/--query-remapped-rows/--query-retired-pages/"
           "--query-compute-apps CSV (live collection takes the XML)",
           parser="parsers.nvsmi_csv:parse_nvsmi_csv",
           detector="parsers.nvsmi_csv:claim_nvsmi_csv", detect_order=130, keeps_prompt="alone",
           aliases=("nvidia-smi --query-gpu=*|--query-remapped-rows=*|--query-retired-pages=*"
                    "|--query-compute-apps=*",)),
    _input("gpu_reset", ("nvidia-smi", "--gpu-reset"),
           "nvidia-smi -r / --gpu-reset or a MIG mode change with the device holders "
           "around it (fuser -v /dev/nvidia*), which gputriage never does itself",
           parser="parsers.gpu_reset:parse_gpu_reset",
           detector="parsers.gpu_reset:claim_gpu_reset", detect_order=110, keeps_prompt="alone",
           prompt_step="parsers.gpu_reset:is_reset_step",
           aliases=("nvidia-smi -r|--gpu-reset",)),
    _cmd("nvidia_smi_topo", ("nvidia-smi", "topo", "-m"),
         "nvidia-smi topo -m (GPU/NIC/CPU topology matrix)", applies="nvidia",
         parser="parsers.topo:parse_topo",
         detector="parsers.topo:claim_topo", detect_order=80,
         aliases=("nvidia-smi topo -m|--matrix",)),
    _cmd("nvidia_smi_nvlink_status", ("nvidia-smi", "nvlink", "-s"),
         "nvidia-smi nvlink -s (NVLink link state)", applies="nvidia",
         parser="parsers.nvlink:parse_nvlink_status",
         detector="parsers.nvlink:claim_nvlink", detect_order=90,
         aliases=("nvidia-smi nvlink -s|--status !-e|--errorcounters",)),
    _cmd("nvidia_smi_nvlink_errors", ("nvidia-smi", "nvlink", "-e"),
         "nvidia-smi nvlink -e (NVLink error counters)", applies="nvidia",
         parser="parsers.nvlink:parse_nvlink_errors",
         detector="parsers.nvlink:claim_nvlink", detect_order=90,
         aliases=("nvidia-smi nvlink -e|--errorcounters",)),
    Source(name="nvml", kind="nvml", description="NVML readings (or the init error text)",
           suffix=".json", timeout_s=20.0,
           parser="parsers.nvml:parse_nvml"),
    _file("proc_driver_nvidia_version", "/proc/driver/nvidia/version",
          "/proc/driver/nvidia/version (the loaded NVIDIA kernel module)", applies="nvidia",
          parser="parsers.driver:parse_proc_driver_version",
          detector="parsers.driver:claim_driver_version", detect_order=70),
    Source(name="proc_driver_nvidia_gpus", kind="tree", path="/proc/driver/nvidia/gpus",
           globs=("*/information",), suffix=".json",
           description="per-GPU information as the kernel module sees it", applies="nvidia",
           parser="parsers.driver:parse_gpus_information",
           aliases=("*** /proc/driver/nvidia/gpus/*/information",)),
    _file("proc_modules", "/proc/modules", "lsmod or /proc/modules (loaded kernel modules)",
          parser="parsers.modules:parse_modules",
          detector="parsers.modules:claim_modules", detect_order=190,
          aliases=("lsmod",)),
    _file("proc_devices", "/proc/devices", "character device majors (nvidia-uvm is dynamic)",
          parser="parsers.devices:parse_proc_devices"),
    Source(name="sys_module_nvidia", kind="tree", path="/sys/module",
           globs=("nvidia*/version", "nvidia*/initstate"), suffix=".json",
           description="version of each loaded nvidia* module", applies="nvidia",
           parser="parsers.driver:parse_sys_module_versions"),
    Source(name="dev_nvidia", kind="devnodes", path="/dev/nvidia*", suffix=".json",
           description="NVIDIA device nodes with major:minor", applies="nvidia",
           parser="parsers.devices:parse_devnodes"),
    Source(name="dev_nvidia_caps", kind="devnodes", path="/dev/nvidia-caps/*", suffix=".json",
           description="NVIDIA capability device nodes (MIG)", applies="nvidia",
           raw="kept for the reader of a snapshot: no check reads it yet"),
    Source(name="nvidia_libs", kind="tree", path="/",
           globs=("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*", "usr/lib64/libnvidia-ml.so.*",
                  "usr/lib/aarch64-linux-gnu/libnvidia-ml.so.*", "usr/lib/libnvidia-ml.so.*",
                  "usr/lib/x86_64-linux-gnu/libcuda.so.*", "usr/lib64/libcuda.so.*",
                  "usr/lib/aarch64-linux-gnu/libcuda.so.*", "usr/lib/libcuda.so.*"),
           select="names_only", suffix=".json",
           description="userspace driver libraries (their file names carry the version)",
           parser="parsers.driver:parse_nvidia_libs"),
    # --- PCI
    Source(name="pci_devices", kind="tree", path="/sys/bus/pci/devices",
           globs=("*",) + tuple(f"*/{a}" for a in _PCI_ATTRS), select="gpu_and_nic_paths",
           suffix=".json",
           description="NVIDIA and network PCI functions and the PCIe ports above them: ids, "
                       "class, NUMA, link speed/width, place in the tree",
           parser="parsers.pci:parse_pci_tree"),
    _cmd("lspci_nvidia", ("lspci", "-vvv", "-nn", "-D", "-d", "10de:"),
         "lspci -vvv of NVIDIA functions and the bridges above them (or its LnkCap/LnkSta/"
         "ACSCtl lines)", applies="nvidia",
         parser="parsers.lspci:parse_lspci",
         detector="parsers.lspci:claim_lspci", detect_order=170,
         aliases=("lspci ~10de|~nvidia",)),
    _cmd("lspci_tree", ("lspci", "-tv", "-nn"),
         "lspci -tv (the PCI tree: which root port and switch ports each device hangs below)",
         parser="parsers.lspci_tree:parse_lspci_tree",
         detector="parsers.lspci_tree:claim_lspci_tree", detect_order=165,
         aliases=("lspci -t|-tv|-vt|-tvv|-tvnn|-nntv|-nnvt|-vtnn|-tnnv|-nnt",)),
    _cmd("dmidecode_slots", ("dmidecode", "-t", "slot"),
         "dmidecode -t slot (physical PCIe slots: type, electrical width, what sits in them)",
         parser="parsers.dmidecode:parse_dmidecode_slots",
         detector="parsers.dmidecode:claim_dmidecode_slots", detect_order=180),
    _cmd("lspci_mellanox", ("lspci", "-vvv", "-nn", "-D", "-d", "15b3:"),
         "lspci -vvv of Mellanox/NVIDIA networking functions", applies="infiniband",
         parser="parsers.lspci:parse_lspci",
         detector="parsers.lspci:claim_lspci", detect_order=170),
    # --- memory, kernel, OS
    _file("proc_meminfo", "/proc/meminfo", "memory and hugepage totals",
          parser="parsers.memory:parse_meminfo"),
    Source(name="hugepages", kind="tree", path="/sys/kernel/mm/hugepages",
           globs=tuple(f"*/{a}" for a in _HUGEPAGE_ATTRS), suffix=".json",
           description="hugepage pools per page size",
           parser="parsers.memory:parse_hugepages"),
    Source(name="hugepages_per_node", kind="tree", path="/sys/devices/system/node",
           globs=tuple(f"node*/hugepages/*/{a}" for a in _HUGEPAGE_ATTRS) + ("node*/cpulist",),
           suffix=".json", description="hugepage pools and CPUs per NUMA node",
           parser="parsers.memory:parse_hugepages_per_node"),
    _file("thp_enabled", "/sys/kernel/mm/transparent_hugepage/enabled",
          "transparent hugepage mode",
          parser="parsers.hostcfg:parse_thp"),
    _file("thp_defrag", "/sys/kernel/mm/transparent_hugepage/defrag",
          "transparent hugepage defrag mode",
          raw="one bracketed word, read by the host_thp_defrag fact"),
    _file("numa_balancing", "/proc/sys/kernel/numa_balancing", "automatic NUMA balancing",
          parser="parsers.hostcfg:parse_numa_balancing"),
    _file("proc_cmdline", "/proc/cmdline", "kernel command line",
          parser="parsers.hostcfg:parse_cmdline"),
    _file("cgroup_controllers", "/sys/fs/cgroup/cgroup.controllers",
          "cgroup v2 controllers (absent on cgroup v1)",
          parser="parsers.hostcfg:parse_cgroup_controllers"),
    _file("proc_self_cgroup", "/proc/self/cgroup", "cgroup membership (container detection)",
          raw="only searched for a container runtime's name"),
    _cmd("numactl", ("numactl", "--hardware"),
         "numactl -H or lscpu (NUMA nodes, CPUs, memory, distances)",
         parser="parsers.numactl:parse_numactl",
         detector="parsers.numactl:claim_numactl", detect_order=160,
         aliases=("numactl -H|--hardware", "lscpu")),
    _file("os_release", "/etc/os-release", "distribution",
          raw="one field (PRETTY_NAME), read by the host identity fact"),
    _cmd("uname", ("uname", "-a"), "kernel release and architecture",
         raw="one line, split by the host identity fact"),
    _file("boot_id", "/proc/sys/kernel/random/boot_id", "boot id",
          raw="one line: the boot id"),
    _file("hostname", "/proc/sys/kernel/hostname", "host name", raw="one line: the host name"),
    _file("uptime", "/proc/uptime", "seconds since boot",
          raw="one number, read by the host identity fact"),
    # --- logs and services
    _cmd("kernel_log", ("journalctl", "-k", "-b", "-o", "short-iso", "--no-pager"),
         "a kernel log (dmesg/journalctl/syslog)", fallback=(("dmesg", "--time-format", "iso"),
                                                             ("dmesg",)),
         timeout_s=30.0, cap_bytes=64 * 1024 * 1024,
         parser="logscan.events:scan_driver_events",
         detector="parsers.detect_kernel:claim_kernel_log", detect_order=210,
         aliases=("dmesg", "dmesg:", "journalctl -k|--dmesg|_TRANSPORT=kernel",
                  "/var/log/syslog*", "/var/log/messages*", "/var/log/kern.log*",
                  "/var/log/dmesg*")),
    _cmd("systemctl_persistenced", ("systemctl", "show", "nvidia-persistenced", "--no-pager"),
         "systemctl show/status of nvidia-persistenced",
         parser="parsers.systemd:parse_systemctl_show",
         detector="parsers.systemd:claim_units", detect_order=50,
         aliases=("systemctl show|status ~persistenced",)),
    _cmd("systemctl_fabricmanager", ("systemctl", "show", "nvidia-fabricmanager", "--no-pager"),
         "systemctl show/status of nvidia-fabricmanager",
         parser="parsers.systemd:parse_systemctl_show",
         detector="parsers.systemd:claim_units", detect_order=50,
         aliases=("systemctl show|status ~fabricmanager",)),
    _cmd("fabricmanager_journal",
         ("journalctl", "-u", "nvidia-fabricmanager", "-b", "-o", "short-iso", "--no-pager"),
         "a fabric manager log or journal",
         parser="parsers.fabricmanager:parse_fabricmanager_log",
         detector="parsers.fabricmanager:claim_fabricmanager_log", detect_order=200,
         aliases=("journalctl ~fabricmanager", "/*fabricmanager*.log",
                  "*** /*fabricmanager*.log*")),
    _input("imex_log", ("journalctl", "-u", "nvidia-imex", "--no-pager"),
           "the IMEX daemon's log or journal (nvidia-imex; a ComputeDomain daemon pod's log)",
           parser="parsers.imex:parse_imex_log",
           detector="parsers.imex:claim_imex_log", detect_order=194,
           aliases=("journalctl ~nvidia-imex", "/*nvidia-imex*.log",
                    *_kubectl("logs ~computedomain|~compute-domain|~imex"))),
    _cmd("persistenced_journal",
         ("journalctl", "-u", "nvidia-persistenced", "-b", "-o", "short-iso", "--no-pager"),
         "a journal of nvidia-persistenced (its records and systemd's about its unit)",
         applies="nvidia", parser="parsers.persistenced:parse_persistenced_journal",
         detector="parsers.persistenced:claim_persistenced_journal", detect_order=201,
         aliases=("journalctl ~persistenced",)),
    _input("gdrcopy", ("gdrcopy_sanity",),
           "GDRCopy's tests (gdrcopy_sanity, gdrcopy_copybw, their older sanity and copybw)",
           parser="parsers.gdrcopy:parse_gdrcopy",
           detector="parsers.gdrcopy:claim_gdrcopy", detect_order=143,
           aliases=("gdrcopy_*",)),
    # --- InfiniBand / RoCE
    Source(name="infiniband", kind="tree", path="/sys/class/infiniband",
           globs=tuple(f"*/ports/*/{a}" for a in _IB_PORT_ATTRS)
           + ("*/ports/*/counters/*", "*/fw_ver", "*/hca_type", "*/node_desc", "*/device"),
           suffix=".json", description="HCA ports: state, rate, link layer, counters",
           applies="infiniband",
           parser="parsers.infiniband:parse_ib_tree"),
    _cmd("ibstat", ("ibstat",), "ibstat, ibstatus, ibv_devinfo, ibdev2netdev, show_gids "
         "(InfiniBand HCA and port status)", applies="infiniband",
         parser="parsers.infiniband:parse_ibstat",
         detector="parsers.infiniband:claim_ib_tools", detect_order=150,
         aliases=("ibstat", "ibstatus", "ibv_devinfo", "ibdev2netdev", "show_gids")),
    # --- containers (absent files are normal: a host without the toolkit or an engine)
    _file("container_toolkit_config", "/etc/nvidia-container-runtime/config.toml",
          "the NVIDIA container runtime's config.toml",
          parser="parsers.container_cfg:parse_toolkit_config",
          detector="parsers.detect_container:claim_container_config", detect_order=62),
    Source(name="cdi_specs", kind="tree", path="/",
           globs=("etc/cdi/*", "var/run/cdi/*"), suffix=".json",
           description="a Container Device Interface spec (/etc/cdi/nvidia.yaml, YAML or JSON)",
           parser="parsers.container_cfg:parse_cdi_specs",
           detector="parsers.detect_container:claim_container_config", detect_order=62,
           aliases=("/etc/cdi/*", "/var/run/cdi/*", "nvidia-ctk cdi generate")),
    _cmd("nvidia_ctk_version", ("nvidia-ctk", "--version"), "nvidia-ctk --version",
         parser="parsers.container_cfg:parse_ctk_version",
         detector="parsers.detect_container:claim_container_config", detect_order=62,
         aliases=("nvidia-ctk --version|-v|version",)),
    _cmd("nvidia_ctk_cdi_list", ("nvidia-ctk", "cdi", "list"),
         "nvidia-ctk cdi list (the CDI devices the runtime can resolve)",
         parser="parsers.container_cfg:parse_ctk_cdi_list",
         detector="parsers.detect_container:claim_container_config", detect_order=62,
         aliases=("nvidia-ctk cdi list",)),
    _input("nvidia_ctk_log", ("nvidia-ctk", "runtime", "configure", "--runtime=containerd"),
           "nvidia-ctk's log lines (runtime configure, cdi generate, system create-*: "
           "INFO[0000] ...) and docker info's Runtimes lines",
           parser="parsers.ctk_log:parse_ctk_log",
           detector="parsers.ctk_log:claim_ctk_log", detect_order=206,
           aliases=("nvidia-ctk runtime|system|config",)),
    _cmd("nvidia_container_cli_info", ("nvidia-container-cli", "info"),
         "nvidia-container-cli info (what libnvidia-container sees)",
         parser="parsers.container_cfg:parse_container_cli_info",
         detector="parsers.detect_container:claim_container_cli_info", detect_order=60,
         aliases=("nvidia-container-cli info",)),
    Source(name="docker_daemon_json", kind="tree", path="/",
           globs=("etc/docker/daemon.json", "root/.config/docker/daemon.json",
                  "home/*/.config/docker/daemon.json"), suffix=".json",
           description="Docker's daemon.json (runtimes, default-runtime; rootless daemons "
           "read ~/.config/docker/daemon.json)",
           parser="parsers.container_engines:parse_docker_daemon_json",
           detector="parsers.detect_container:claim_container_config", detect_order=62,
           aliases=("/etc/docker/daemon.json", "/*/.config/docker/daemon.json")),
    Source(name="containerd_config", kind="tree", path="/",
           globs=("etc/containerd/config.toml", "etc/containerd/conf.d/*.toml",
                  "var/lib/rancher/k3s/agent/etc/containerd/config.toml*",
                  "var/lib/rancher/rke2/agent/etc/containerd/config.toml*"), suffix=".json",
           description="containerd's config.toml (CRI runtimes, default_runtime_name; k3s's "
           "config.toml.tmpl; a diff of it)",
           parser="parsers.container_engines:parse_containerd_config",
           detector="parsers.detect_container:claim_container_config", detect_order=62,
           aliases=("/etc/containerd/config.toml", "/etc/containerd/conf.d/*.toml",
                    "/var/lib/rancher/*/agent/etc/containerd/config.toml*",
                    "containerd config dump")),
    _input("crictl_info", ("crictl", "info"),
           "crictl info (the running containerd's CRI runtimes and their options; a part of "
           "it with ... elisions)",
           parser="parsers.crictl_info:parse_crictl_info",
           detector="parsers.crictl_info:claim_crictl_info", detect_order=24,
           aliases=("crictl info", "k3s crictl info")),
    Source(name="container_env", kind="tree", path="/",
           globs=(".dockerenv", "run/.containerenv", "proc/self/environ"), suffix=".json",
           select="nvidia_environment",
           description="whether gputriage runs in a container and the NVIDIA_*/CUDA_* "
           "variables it was given (env | grep NVIDIA)",
           parser="parsers.container_engines:parse_container_env",
           detector="parsers.detect_container:claim_container_env", detect_order=207,
           aliases=("/run/.containerenv",)),
    # --- the job's side (never collected from the host)
    _input("nccl_log", ("env", "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,ENV,NET,GRAPH",
                        "all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "1"),
           "an NCCL_DEBUG=INFO log of a job (one file per rank or all ranks interleaved)",
           parser="parsers.nccl_log:parse_nccl_log",
           detector="parsers.detect_jobs:claim_nccl_log", detect_order=10),
    _input("device_query", ("deviceQuery",), "deviceQuery (the CUDA sample: devices the CUDA "
           "runtime sees, or the cudaError it stopped on)",
           parser="parsers.device_query:parse_device_query",
           detector="parsers.device_query:claim_device_query", detect_order=120),
    _input("slurm_log", ("sinfo", "-R"),
           "Slurm's word on a GPU node: slurmctld or slurmd log lines, sinfo -R or scontrol "
           "show node reasons (a gres/gpu count lower than configured, GPU autodetection "
           "through NVML failing) and slurmstepd's OOM kills",
           parser="parsers.slurm_log:parse_slurm_log",
           detector="parsers.slurm_log:claim_slurm_log", detect_order=204,
           aliases=("sinfo -R|--list-reasons", "scontrol show node|nodes",
                    "/var/log/slurm*/slurmctld.log*", "/var/log/slurm*/slurmd.log*",
                    "journalctl ~slurmctld|~slurmd")),
    _input("job_log", ("python", "train.py"),
           "a job's output with a CUDA, NVML, container-runtime or framework error (a "
           "traceback, a container log, docker/podman/nvidia-container-cli messages) or the "
           "versions it printed (torch, nvcc, ldconfig -p | grep libcuda)",
           parser="parsers.job_log:parse_job_log",
           detector="parsers.job_log:claim_job_log", detect_order=205),
    # --- Kubernetes (pasted, or read by `gputriage k8s status` through the API)
    _input("k8s_objects", ("kubectl", "get", "nodes,pods,events,daemonsets", "-A", "-o", "json"),
           "Kubernetes objects as JSON or YAML (kubectl get -o json|yaml, manifests, helm "
           "template or kustomize output)",
           parser="parsers.k8s_objects:parse_k8s_objects",
           detector="parsers.detect_k8s:claim_k8s_objects", detect_order=25,
           aliases=(*_kubectl("get json|yaml|-ojson|-oyaml|-o=json|-o=yaml|--output=json|"
                              "--output=yaml"), "helm template", "kustomize build")),
    _input("k8s_describe", ("kubectl", "describe", "nodes"),
           "kubectl describe of nodes, pods or other objects (oc describe too)",
           parser="parsers.k8s_describe:parse_k8s_describe",
           detector="parsers.detect_k8s:claim_k8s_describe", detect_order=26,
           keeps_prompt="named",
           aliases=_kubectl("describe")),
    _input("k8s_table", ("kubectl", "get", "pods", "-A", "-o", "wide"),
           "kubectl get tables (nodes, pods, daemonsets, events, -o wide, custom columns)",
           parser="parsers.k8s_table:parse_k8s_table",
           detector="parsers.detect_k8s:claim_k8s_table", detect_order=27,
           aliases=_kubectl("get")),
    _input("device_plugin_log", ("kubectl", "logs", "-n", "kube-system",
                                 "ds/nvidia-device-plugin-daemonset"),
           "the NVIDIA device plugin's log (plain, klog or CRI log format)",
           parser="parsers.device_plugin_log:parse_device_plugin_log",
           detector="parsers.device_plugin_log:claim_device_plugin_log", detect_order=196,
           aliases=_kubectl("logs ~device-plugin")),
    _input("module_build", ("dkms", "autoinstall"),
           "a kernel module's build or install output (DKMS and its make.log, a module's "
           "make against /lib/modules/<kernel>/build, the NVIDIA .run installer)",
           parser="parsers.module_build:parse_module_build",
           detector="parsers.module_build:claim_module_build", detect_order=193,
           aliases=("dkms install|build|autoinstall", "nvidia-installer", "NVIDIA-Linux-*.run",
                    "/var/lib/dkms/*/make.log", "/var/log/nvidia-installer.log")),
    _input("gpu_operator_log", ("kubectl", "logs", "-n", "gpu-operator",
                                "ds/nvidia-driver-daemonset"),
           "logs of the GPU operator's containers (driver, toolkit, validator, operator)",
           parser="parsers.gpu_operator_log:parse_gpu_operator_log",
           detector="parsers.gpu_operator_log:claim_gpu_operator_log", detect_order=197,
           aliases=_kubectl("logs ~driver|~validator|~toolkit|~gpu-operator")),
    # --- weights: where a model directory lies (gputriage weights --model-dir writes it)
    # (collect/check --model-dir DIR, or [weights] model_dir in the expectations file; in a
    # child process: a hung network mount cannot hold the collection)
    _cmd("weights_host", ("gputriage", "weights", "--model-dir", "{}", "--host-report"),
         "gputriage weights --host-report (a model directory's mount, free space, RAM)",
         opt_in="model_dir", timeout_s=30.0,
         parser="parsers.weights_host:parse_weights_host",
         detector="parsers.weights_host:claim_weights_host", detect_order=187,
         aliases=("gputriage weights --host-report",)),
    # --- a fleet's table of one Xid's counts per node (after the kernel log: its Xid lines
    # are never taken as the line naming the Xid)
    _input("xid_counts", ("promtool", "query", "instant", "URL",
                          "sum by (Hostname) (xid_count)"),
           "a table of one Xid's counts per node (node and count pairs under a line naming "
           "the Xid)",
           parser="parsers.xid_counts:parse_xid_counts",
           detector="parsers.xid_counts:claim_xid_counts", detect_order=215),
    # --- DCGM: dcgmi diag and nvvs (issue 18 part A: parsers/dcgmi_diag.py)
    # (collect/check --dcgm-diag LEVEL only: it loads the GPUs for minutes to hours)
    _cmd("dcgmi_diag", ("dcgmi", "diag", "-r", "{}", "-j"),
         "dcgmi diag -r 1|2|3|4 (DCGM's diagnostic: its table, its -j JSON or dcgmi's "
         "error)",
         opt_in="dcgm_diag", applies="nvidia", timeout_s=DCGM_DIAG_TIMEOUT_S[1],
         parser="parsers.dcgmi_diag:parse_dcgmi_diag",
         detector="parsers.dcgmi_diag:claim_dcgmi_diag", detect_order=113,
         keeps_prompt="named",
         aliases=("dcgmi diag|--diag",)),
    _input("nvvs_log", ("cat", "/var/log/nvidia-dcgm/nvvs.log"),
           "nvvs.log (the log of DCGM's diagnostic: plugin, config and child-process errors)",
           parser="parsers.nvvs_log:parse_nvvs_log",
           detector="parsers.nvvs_log:claim_nvvs_log", detect_order=117,
           aliases=("/var/log/nvidia-dcgm/nvvs.log*", "/*/nvvs.log*")),
    # --- DCGM: discovery, health, nvlink, dcgm-exporter, nv-hostengine (issue 18 part B)
    # (collected when DCGM is installed; an absent dcgmi is normal, a hang is nv-hostengine's)
    _cmd("dcgmi_discovery", ("dcgmi", "discovery", "-l"),
         "dcgmi discovery -l (the GPUs and NVSwitches DCGM's host engine sees)",
         parser="parsers.dcgmi:parse_discovery", detector="parsers.dcgmi:claim_dcgmi",
         detect_order=125, aliases=("dcgmi discovery -l|--list",)),
    _cmd("dcgmi_health", ("dcgmi", "health", "-c"),
         "dcgmi health -c (DCGM's health watches: failures and warnings per GPU)",
         parser="parsers.dcgmi:parse_health", detector="parsers.dcgmi:claim_dcgmi",
         detect_order=125, aliases=("dcgmi health -c|--check",)),
    _cmd("dcgmi_version", ("dcgmi", "--version"), "dcgmi --version (the DCGM release)",
         raw="one line, read by the dcgm_version fact"),
    _input("dcgmi_nvlink", ("dcgmi", "nvlink", "--link-status"),
           "dcgmi nvlink --link-status / -e -g N (NVLink states and error counters as DCGM "
           "sees them)",
           parser="parsers.dcgmi:parse_nvlink", detector="parsers.dcgmi:claim_dcgmi",
           detect_order=125, aliases=("dcgmi nvlink -s|--link-status|-e|--errors",)),
    _input("dcgm_exporter_metrics", ("curl", "-s", "http://localhost:9400/metrics"),
           "dcgm-exporter /metrics (DCGM_FI_DEV_* / DCGM_FI_PROF_* samples)",
           parser="parsers.dcgm_exporter:parse_metrics",
           detector="parsers.dcgm_exporter:claim_metrics", detect_order=135,
           aliases=("curl ~:9400", "curl ~dcgm")),
    _input("dcgm_exporter_log", ("kubectl", "logs", "-n", "gpu-operator",
                                 "ds/nvidia-dcgm-exporter"),
           "dcgm-exporter's log (logrus text, or the old exporter script's lines)",
           parser="parsers.dcgm_exporter:parse_exporter_log",
           detector="parsers.dcgm_exporter:claim_exporter_log", detect_order=198,
           aliases=(*_kubectl("logs ~dcgm-exporter"), "docker logs ~dcgm")),
    # --- issue 31 part E: what a GPU health checker left on a node (NVSentinel, EKS agent)
    _input("health_checker_marks", ("kubectl", "get", "node", "-o", "yaml"),
           "a GPU health checker's mark pasted alone (NVSentinel's condition message or "
           "event with its DCGM_FR_* code, the EKS agent's DCGMHealthCode / DCGMError)",
           parser="parsers.health_marks:parse_health_marks",
           detector="parsers.health_marks:claim_health_marks", detect_order=195),
    _input("nv_hostengine_log", ("journalctl", "-u", "nvidia-dcgm", "--no-pager"),
           "nv-hostengine's log, debug log or journal (and dcgmi's 'Unable to connect to "
           "host engine')",
           parser="parsers.nv_hostengine:parse_hostengine_log",
           detector="parsers.nv_hostengine:claim_hostengine_log", detect_order=199,
           aliases=("journalctl ~nvidia-dcgm|~nv-hostengine", "/*nv-hostengine*.log",
                    "/*nvhostengine*.log")),
    _input("nccl_tests", ("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "1"),
           "nccl-tests output (all_reduce_perf...)",
           parser="parsers.nccl_tests:parse_nccl_tests",
           detector="parsers.detect_jobs:claim_nccl_tests", detect_order=20, keeps_prompt="named",
           aliases=("*_perf", "*_perf_mpi")),
)

BY_NAME: dict[str, Source] = {s.name: s for s in SOURCES}


def get(name: str) -> Source:
    return BY_NAME[name]


def parser_of(name: str) -> tuple[Callable[[Any], Any], bool]:
    """The parser of a source (imported on first use) and whether it takes the decoded
    JSON document rather than the text; KeyError when the source has none. A tree source
    that can be pasted takes the text: a tree document as collected, or one pasted file."""
    src = BY_NAME[name]
    if not src.parser:
        raise KeyError(f"source {name} declares no parser")
    as_json = src.suffix == ".json" and not (src.kind == "tree" and src.detector)
    return load(src.parser), as_json


PARSED: tuple[str, ...] = tuple(s.name for s in SOURCES if s.parser)


def load(ref: str) -> Callable[..., Any]:
    """The function a ``"module:function"`` reference under ``gputriage`` names."""
    module, _, func = ref.partition(":")
    return getattr(importlib.import_module(f"gputriage.{module}"), func)


def detector_refs() -> list[str]:
    """The ``"module:function"`` of each paste detector in the order they run (a detector
    several sources name, once, at its first place), none of them imported."""
    out: list[str] = []
    for src in sorted((s for s in SOURCES if s.detector), key=lambda s: s.detect_order):
        if src.detector not in out:
            out.append(src.detector or "")
    return out


def detectors() -> list[Callable[[Any], None]]:
    """The paste detectors in the order they run (see :func:`detector_refs`), imported
    (two references to one function give it once)."""
    out: list[Callable[[Any], None]] = []
    for ref in detector_refs():
        fn = load(ref)
        if fn not in out:
            out.append(fn)
    return out
