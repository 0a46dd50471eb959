"""A parametrised model of a simulated HGX H100 host.

A scenario takes :func:`healthy_hgx_h100`, mutates the returned :class:`Host`
(unload a module, mark a GPU lost, add kernel log events, make a command
fail...) and hands it to the renderers, which write every source in its real
format. Everything random is drawn from a generator seeded by the host name,
so a scenario always renders to the same bytes.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

USERSPACE_DRIVER = "550.54.15"
CUDA_VERSION = "12.4"
KERNEL_RELEASE = "5.15.0-105-generic"

# Builder stamps as the open kernel module prints them, per driver version.
BUILDS: dict[str, tuple[str, str]] = {
    "550.54.15": ("dvs-builder@U16-I3-B03-4-3", "Tue Mar  5 22:15:33 UTC 2024"),
    "535.161.07": ("dvs-builder@U16-I3-D08-1-2", "Sat Feb 17 22:55:48 UTC 2024"),
}


@dataclass(frozen=True)
class GpuProcess:
    """A compute process holding GPU memory."""

    pid: int
    name: str
    used_mib: int


@dataclass
class Gpu:
    """One H100 SXM5 GPU as the host sees it."""

    index: int
    bus: str  # 0000:18:00.0
    numa: int
    uuid: str
    serial: str
    module_id: int
    pcie_gen: int = 5
    pcie_gen_max: int = 5
    pcie_width: int = 16
    pcie_width_max: int = 16
    # the PCIe switch uplink (root port -> switch upstream port) above this GPU and the
    # HCA beside it, as trained (both ends support Gen5 x16)
    uplink_gen: int = 5
    uplink_width: int = 16
    replays: int = 0
    temp_c: int = 30
    power_w: float = 70.0
    memory_used_mib: int = 1
    nvlinks_up: int = 18
    fabric_state: str = "Completed"
    fabric_status: str = "Success"
    # load: an idle GPU in persistence mode sits in P0 at the idle clock
    utilization_pct: int = 0
    memory_util_pct: int = 0
    perf_state: str = "P0"
    sm_clock_mhz: int = 345
    # active clock event reasons, nvidia-smi XML keys without the prefix
    clock_events: frozenset[str] = frozenset({"gpu_idle"})
    processes: list[GpuProcess] = field(default_factory=list)
    # ECC counters that are not zero, by XML key ("dram_uncorrectable", ...)
    ecc_volatile: dict[str, int] = field(default_factory=dict)
    ecc_aggregate: dict[str, int] = field(default_factory=dict)
    # row remapper: rows remapped for correctable / uncorrectable errors, flags,
    # and the bank availability histogram (max, high, partial, low, none)
    remapped_corr: int = 0
    remapped_unc: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    remap_histogram: tuple[int, int, int, int, int] = (2560, 0, 0, 0, 0)
    reset_required: bool = False  # nvidia-smi -q GPU Reset Status: Reset Required
    # failure states
    in_driver: bool = True  # listed under /proc/driver/nvidia/gpus
    lost: bool = False  # fell off the bus: NVML/nvidia-smi cannot get a handle

    @property
    def bus_upper(self) -> str:
        """nvidia-smi form: ``00000000:18:00.0`` with upper-case hex."""
        return "0000" + self.bus.upper()


@dataclass
class NvSwitch:
    """One third-generation NVSwitch (PCI function class 0x0680)."""

    index: int
    bus: str
    numa: int = 0


@dataclass
class Nic:
    """One ConnectX-7 single-port NDR InfiniBand HCA."""

    name: str  # mlx5_0
    bus: str
    numa: int
    node_guid: int
    lid: int
    state: str = "ACTIVE"  # sysfs word: DOWN / INIT / ARMED / ACTIVE
    phys_state: str = "LinkUp"  # Polling / LinkUp / Disabled ...
    rate_gbps: int = 400
    # index of the GPU whose PCIe switch the HCA shares (PIX); None: the HCA
    # hangs off a root port of its socket on its own
    switch: int | None = None
    # port error counters that are not zero ("symbol_error", "link_downed", ...)
    counters: dict[str, int] = field(default_factory=dict)


@dataclass
class Outcome:
    """How a command source ends when the scenario overrides it."""

    text: str
    rc: int


@dataclass
class Host:
    """Everything the renderers need to write one snapshot."""

    hostname: str
    rng_seed: str
    boot_time: datetime
    now: datetime
    boot_id: str
    userspace_version: str = USERSPACE_DRIVER
    kernel_module_version: str = USERSPACE_DRIVER
    cuda_version: str = CUDA_VERSION
    kernel_release: str = KERNEL_RELEASE
    gpus: list[Gpu] = field(default_factory=list)
    switches: list[NvSwitch] = field(default_factory=list)
    nics: list[Nic] = field(default_factory=list)
    nvidia_modules: list[str] = field(default_factory=lambda: [
        "nvidia_peermem", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia"])
    cpus_per_node: int = 56  # physical cores per socket (HT doubles)
    mem_total_kb: int = 2113389528
    majors: dict[str, int] = field(default_factory=lambda: {
        "nvidia-nvlink": 511, "nvidia-nvswitch": 510, "nvidia-caps": 509, "nvidia-uvm": 508})
    fabricmanager_active: bool = True
    # the fabric manager's own failure message: the unit then ends "failed"
    # (Result=exit-code) and its journal shows the failed start
    fabricmanager_failure: str | None = None
    persistenced_active: bool = True
    # extra kernel command line words ("hugepagesz=2M", "hugepages=32768")
    cmdline_extra: list[str] = field(default_factory=list)
    # hugepage pools: page size in kB -> pages per NUMA node (allocated, free),
    # and what the command line asked for (size kB -> pages) when it asked
    hugepages_nr: dict[int, tuple[int, int]] = field(default_factory=dict)
    hugepages_free: dict[int, tuple[int, int]] = field(default_factory=dict)
    hugepages_requested: dict[int, int] = field(default_factory=dict)
    # (seconds after boot, message) kernel lines added by a scenario
    kernel_events: list[tuple[float, str]] = field(default_factory=list)
    # command sources whose whole output is replaced (e.g. nvidia-smi failing)
    command_overrides: dict[str, Outcome] = field(default_factory=dict)
    # NVML init failure: (error_code, pynvml error string)
    nvml_init_error: tuple[int, str] | None = None
    # sources this host genuinely lacks: recorded as error="absent", no file
    absent: set[str] = field(default_factory=set)
    # the driver version /etc/cdi/nvidia.yaml was generated for (None: the installed one)
    cdi_driver_version: str | None = None

    # -- derived views ------------------------------------------------------------
    @property
    def uvm_loaded(self) -> bool:
        """Whether nvidia_uvm is among the loaded modules."""
        return "nvidia_uvm" in self.nvidia_modules

    @property
    def cmdline(self) -> str:
        """The kernel command line (without the trailing newline)."""
        words = [f"BOOT_IMAGE=/vmlinuz-{self.kernel_release}", "root=/dev/md0", "ro",
                 "console=tty0", "console=ttyS0,115200n8", "iommu=pt", "pci=realloc=off",
                 "init_on_alloc=0", *self.cmdline_extra]
        return " ".join(words)

    @property
    def default_hugepage_kb(self) -> int:
        """The default hugepage size in kB (``default_hugepagesz=`` or 2 MiB)."""
        for word in self.cmdline_extra:
            if word.startswith("default_hugepagesz="):
                return {"1G": 1048576, "2M": 2048}.get(word.split("=", 1)[1], 2048)
        return 2048

    def hugepages_total(self, size_kb: int) -> int:
        """Pages of ``size_kb`` allocated over all nodes."""
        return sum(self.hugepages_nr.get(size_kb, (0, 0)))

    def hugepages_free_total(self, size_kb: int) -> int:
        """Free pages of ``size_kb`` over all nodes."""
        return sum(self.hugepages_free.get(size_kb, self.hugepages_nr.get(size_kb, (0, 0))))

    @property
    def driver_gpus(self) -> list[Gpu]:
        """GPUs the kernel module lists under /proc/driver/nvidia/gpus."""
        return [g for g in self.gpus if g.in_driver]

    def cpulist(self, node: int) -> str:
        """``local_cpulist`` of a NUMA node (cores, then their HT siblings)."""
        n = self.cpus_per_node
        total = n * 2  # two sockets
        return f"{node * n}-{node * n + n - 1},{total + node * n}-{total + node * n + n - 1}"

    def at(self, seconds: float) -> datetime:
        """Wall-clock time ``seconds`` after boot."""
        return self.boot_time + timedelta(seconds=seconds)

    @property
    def uptime_s(self) -> float:
        """Seconds between boot and the snapshot time."""
        return (self.now - self.boot_time).total_seconds()

    def rng(self, salt: str) -> random.Random:
        """A generator seeded by the host name and a purpose (reproducible)."""
        return random.Random(f"{self.rng_seed}:{salt}")


GPU_SLOTS: tuple[tuple[str, int], ...] = (
    ("0000:18:00.0", 0), ("0000:2a:00.0", 0), ("0000:3a:00.0", 0), ("0000:5d:00.0", 0),
    ("0000:9a:00.0", 1), ("0000:ab:00.0", 1), ("0000:ba:00.0", 1), ("0000:db:00.0", 1),
)
NIC_SLOTS: tuple[str, ...] = (
    "0000:17:00.0", "0000:29:00.0", "0000:39:00.0", "0000:5c:00.0",
    "0000:99:00.0", "0000:aa:00.0", "0000:b9:00.0", "0000:da:00.0",
)
SWITCH_SLOTS: tuple[str, ...] = ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0")
# HGX baseboard module ids as the GPUs enumerate (they do not follow PCI order)
MODULE_IDS: tuple[int, ...] = (2, 4, 3, 1, 7, 5, 8, 6)


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def healthy_hgx_h100(hostname: str = "gpu-node-017",
                     now: datetime | None = None) -> Host:
    """A healthy 8x H100 SXM HGX node: every source agrees, nothing to report."""
    rng = random.Random(f"gputriage-scenario:{hostname}")
    now = now or datetime(2024, 5, 14, 9, 30, 0, tzinfo=timezone.utc)
    boot = now - timedelta(seconds=44_612 + rng.randint(0, 3600))
    host = Host(hostname=hostname, rng_seed=f"gputriage-scenario:{hostname}",
                boot_time=boot.replace(microsecond=0), now=now, boot_id=_uuid(rng))
    for i, (bus, numa) in enumerate(GPU_SLOTS):
        host.gpus.append(Gpu(
            index=i, bus=bus, numa=numa,
            uuid="GPU-" + _uuid(rng),
            serial=f"16549230{rng.randint(10000, 99999)}",
            module_id=MODULE_IDS[i],
            temp_c=rng.randint(27, 34),
            power_w=round(rng.uniform(68.0, 78.0), 2),
        ))
    host.switches = [NvSwitch(i, bus) for i, bus in enumerate(SWITCH_SLOTS)]
    for i, bus in enumerate(NIC_SLOTS):
        host.nics.append(Nic(name=f"mlx5_{i}", bus=bus, numa=0 if i < 4 else 1,
                             node_guid=0xA088C20300000000 | rng.getrandbits(24),
                             lid=rng.randint(100, 4000), switch=i))
    return host
