"""Renderers for the kernel, /proc, /sys, /dev and OS sources of a simulated host.

Tree sources are returned as the collector stores them:
``{"files": {rel: text}, "links": {rel: target}, "errors": {}}``; devnode
sources as a list of ``{"path", "major", "minor", "mode", "kind"}``.
"""

from __future__ import annotations

import json

from gputriage.scenarios.model import BUILDS, Host

GCC_LINE = "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) "
LIB_DIR = "usr/lib/x86_64-linux-gnu"


def tree(files: dict[str, str], links: dict[str, str] | None = None) -> str:
    """A tree source document as JSON text."""
    return json.dumps({"files": files, "links": links or {}, "errors": {}}, indent=1,
                      sort_keys=True) + "\n"


def nvrm_banner(version: str) -> str:
    """The open kernel module's NVRM version line for ``version``."""
    builder, date = BUILDS.get(version, BUILDS["550.54.15"])
    return (f"NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  "
            f"({builder})  {date}")


def proc_driver_nvidia_version(host: Host) -> str:
    """/proc/driver/nvidia/version of the LOADED kernel module."""
    return f"NVRM version: {nvrm_banner(host.kernel_module_version)}\n{GCC_LINE}\n"


def proc_driver_nvidia_gpus(host: Host) -> str:
    """/proc/driver/nvidia/gpus/<bus>/information for each GPU the module holds."""
    files = {}
    for g in host.driver_gpus:
        files[f"{g.bus}/information"] = (
            "Model: \t\t NVIDIA H100 80GB HBM3\n"
            "IRQ:   \t\t 0\n"
            f"GPU UUID: \t {g.uuid}\n"
            "Video BIOS: \t 96.00.74.00.01\n"
            "Bus Type: \t PCIe\n"
            "DMA Size: \t 52 bits\n"
            "DMA Mask: \t 0xfffffffffffff\n"
            f"Bus Location: \t {g.bus}\n"
            f"Device Minor: \t {g.index}\n"
            f"GPU Firmware: \t {host.kernel_module_version}\n"
            "GPU Excluded:\t No\n")
    return tree(files)


# name, size, used-by list (None -> "-"), whether out-of-tree (taints)
_BASE_MODULES: tuple[tuple[str, int, tuple[str, ...]], ...] = (
    ("xt_conntrack", 16384, ()), ("nf_conntrack", 172032, ("xt_conntrack",)),
    ("overlay", 151552, ()), ("rdma_ucm", 28672, ()), ("ib_ipoib", 135168, ()),
    ("ib_umad", 28672, ()), ("mlx5_ib", 450560, ()),
    ("ib_uverbs", 135168, ("rdma_ucm", "mlx5_ib")),
    ("ib_core", 434176, ("rdma_ucm", "ib_ipoib", "ib_umad", "mlx5_ib", "ib_uverbs",
                         "nvidia_peermem")),
    ("mlx5_core", 2076672, ("mlx5_ib",)), ("mlxfw", 36864, ("mlx5_core",)),
    ("psample", 20480, ("mlx5_core",)), ("tls", 118784, ("mlx5_core",)),
    ("pci_hyperv_intf", 16384, ("mlx5_core",)), ("ipmi_ssif", 40960, ()),
    ("intel_rapl_msr", 20480, ()), ("ext4", 991232, ()), ("mbcache", 16384, ("ext4",)),
    ("jbd2", 172032, ("ext4",)), ("nvme", 53248, ()), ("nvme_core", 139264, ("nvme",)),
    ("raid1", 49152, ()), ("md_mod", 172032, ("raid1",)),
)


def proc_modules(host: Host) -> str:
    """/proc/modules: the NVIDIA stack (as loaded) on top of ordinary modules."""
    loaded = set(host.nvidia_modules)
    nv: dict[str, tuple[int, tuple[str, ...]]] = {
        "nvidia_peermem": (16384, ()),
        "nvidia_uvm": (4956160, ()),
        "nvidia_drm": (122880, ()),
        "nvidia_modeset": (1511424, ("nvidia_drm",)),
        "nvidia": (8556544, ("nvidia_uvm", "nvidia_peermem", "nvidia_modeset")),
    }
    lines = []
    addr = 0
    for name in ("nvidia_peermem", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia"):
        if name not in loaded:
            continue
        size, users = nv[name]
        users = tuple(u for u in users if u in loaded)
        refs = {"nvidia": 60 + 2 * len(host.gpus), "nvidia_drm": 0, "nvidia_uvm": 4}
        refcount = refs.get(name, len(users))
        used = "".join(f"{u}," for u in users) or "-"
        lines.append(f"{name} {size} {refcount} {used} Live 0x{addr:016x} (OE)")
    lines.append("drm_kms_helper 311296 1 nvidia_drm, Live 0x0000000000000000")
    lines.append("drm 622592 4 nvidia_drm,drm_kms_helper, Live 0x0000000000000000")
    for name, size, users in _BASE_MODULES:
        users = tuple(u for u in users if not u.startswith("nvidia") or u in loaded)
        used = "".join(f"{u}," for u in users) or "-"
        lines.append(f"{name} {size} {len(users)} {used} Live 0x{addr:016x}")
    return "\n".join(lines) + "\n"


def proc_devices(host: Host) -> str:
    """/proc/devices: fixed 195 for nvidia, dynamic majors for the rest."""
    chars = [(1, "mem"), (4, "/dev/vc/0"), (4, "tty"), (4, "ttyS"), (5, "/dev/tty"),
             (5, "/dev/console"), (5, "/dev/ptmx"), (5, "ttyprintk"), (7, "vcs"),
             (10, "misc"), (13, "input"), (21, "sg"), (29, "fb"), (89, "i2c"), (108, "ppp"),
             (128, "ptm"), (136, "pts"), (180, "usb"), (189, "usb_device"),
             (195, "nvidia"), (195, "nvidia-modeset"), (195, "nvidiactl"),
             (226, "drm"), (231, "infiniband_verbs"), (234, "ipmidev"), (238, "nvme-generic"),
             (239, "nvme"), (240, "hidraw"), (242, "bsg"), (245, "ptp"), (246, "pps"),
             (247, "rtc"), (248, "dma_heap"), (249, "dax"), (251, "ndctl"), (252, "tpm")]
    majors = dict(host.majors)
    if not host.uvm_loaded:
        majors.pop("nvidia-uvm", None)
    chars += [(m, n) for n, m in majors.items()]
    chars.sort(key=lambda c: c[0])
    out = ["Character devices:"] + [f"{m:>3} {n}" for m, n in chars]
    out += ["", "Block devices:", "  7 loop", "  8 sd", "  9 md", " 65 sd", "253 device-mapper",
            "254 mdp", "259 blkext"]
    return "\n".join(out) + "\n"


def sys_module_nvidia(host: Host) -> str:
    """/sys/module/nvidia*/{version,initstate} of the loaded modules."""
    files = {}
    for name in host.nvidia_modules:
        files[f"{name}/version"] = host.kernel_module_version + "\n"
        files[f"{name}/initstate"] = "live\n"
    return tree(files)


def _node(path: str, major: int, minor: int) -> dict:
    return {"path": path, "major": major, "minor": minor, "mode": "crw-rw-rw-", "kind": "char"}


def dev_nvidia(host: Host) -> str:
    """The /dev/nvidia* device nodes (what nvidia-modprobe / udev created)."""
    nodes = [_node(f"/dev/nvidia{g.index}", 195, g.index) for g in host.gpus]
    nodes.append(_node("/dev/nvidia-modeset", 195, 254))
    nodes += [_node(f"/dev/nvidia-nvswitch{s.index}", host.majors["nvidia-nvswitch"], s.index)
              for s in host.switches]
    nodes.append(_node("/dev/nvidia-nvswitchctl", host.majors["nvidia-nvswitch"], 255))
    if host.uvm_loaded:
        nodes.append(_node("/dev/nvidia-uvm", host.majors["nvidia-uvm"], 0))
        nodes.append(_node("/dev/nvidia-uvm-tools", host.majors["nvidia-uvm"], 1))
    nodes.append(_node("/dev/nvidiactl", 195, 255))
    nodes.sort(key=lambda n: n["path"])
    return json.dumps(nodes, indent=1) + "\n"


def dev_nvidia_caps(host: Host) -> str:
    """/dev/nvidia-caps/*: the MIG config/monitor capabilities."""
    major = host.majors["nvidia-caps"]
    nodes = [{**_node("/dev/nvidia-caps/nvidia-cap1", major, 1), "mode": "cr--------"},
             {**_node("/dev/nvidia-caps/nvidia-cap2", major, 2), "mode": "cr--r--r--"}]
    return json.dumps(nodes, indent=1) + "\n"


def nvidia_libs(host: Host) -> str:
    """Userspace driver library names (they carry the installed version)."""
    v = host.userspace_version
    files = {f"{LIB_DIR}/libnvidia-ml.so.{v}": "", f"{LIB_DIR}/libcuda.so.{v}": ""}
    links = {f"{LIB_DIR}/libnvidia-ml.so.1": f"libnvidia-ml.so.{v}",
             f"{LIB_DIR}/libcuda.so.1": f"libcuda.so.{v}"}
    return tree(files, links)


def _speed(gen: int) -> str:
    return {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe",
            5: "32.0 GT/s PCIe"}.get(gen, "Unknown")


def pci_devices(host: Host) -> str:
    """/sys/bus/pci/devices attributes of the GPU, NVSwitch and HCA functions."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}

    def add(bus: str, vendor: int, device: int, cls: int, numa: int, driver: str,
            gen: int = 5, gen_max: int = 5, width: int = 16, width_max: int = 16,
            sub: tuple[int, int] = (0x10DE, 0x16C1)) -> None:
        attrs = {"vendor": f"0x{vendor:04x}", "device": f"0x{device:04x}",
                 "class": f"0x{cls:06x}", "subsystem_vendor": f"0x{sub[0]:04x}",
                 "subsystem_device": f"0x{sub[1]:04x}", "numa_node": str(numa),
                 "local_cpulist": host.cpulist(numa), "current_link_speed": _speed(gen),
                 "max_link_speed": _speed(gen_max), "current_link_width": str(width),
                 "max_link_width": str(width_max), "enable": "1", "power_state": "D0",
                 "aer_dev_correctable": _aer(("RxErr", "BadTLP", "BadDLLP", "Rollover",
                                              "Timeout", "NonFatalErr", "CorrIntErr",
                                              "HeaderOF"), "TOTAL_ERR_COR"),
                 "aer_dev_fatal": _aer(("Undefined", "DLP", "SDES", "TLP", "FCP",
                                        "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF",
                                        "MalfTLP", "ECRC", "UnsupReq", "ACSViol",
                                        "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked",
                                        "TLPBlockedErr", "PoisonTLPBlocked"),
                                       "TOTAL_ERR_FATAL")}
        attrs["aer_dev_nonfatal"] = attrs["aer_dev_fatal"].replace("TOTAL_ERR_FATAL",
                                                                   "TOTAL_ERR_NONFATAL")
        for key, value in attrs.items():
            files[f"{bus}/{key}"] = value + ("" if value.endswith("\n") else "\n")
        links[f"{bus}/driver"] = f"../../../../bus/pci/drivers/{driver}"
        links[f"{bus}/iommu_group"] = f"../../../../kernel/iommu_groups/{int(bus[5:7], 16)}"

    nic_of = {n.switch: n for n in host.nics if n.switch is not None}
    for g in host.gpus:
        add(g.bus, 0x10DE, 0x2330, 0x030200, g.numa, "nvidia", g.pcie_gen, g.pcie_gen_max,
            g.pcie_width, g.pcie_width_max)
        nic = nic_of.get(g.index)
        path = switch_path(g.bus)
        for port, (vendor, device) in zip(path[:-1], ((0x8086, 0x352A), (0x1000, 0xC030)),
                                          strict=True):  # the root port, the switch's uplink
            add(port, vendor, device, 0x060400, g.numa, "pcieport", g.uplink_gen, 5,
                g.uplink_width, 16, sub=(vendor, 0x0000))
        add(path[-1], 0x1000, 0xC030, 0x060400, g.numa, "pcieport", g.pcie_gen, 5,
            g.pcie_width, 16, sub=(0x1000, 0x0000))  # the GPU's downstream port
        for dev, dsp in ((g.bus, path[-1]), (nic.bus if nic else None, _nic_port(g.bus))):
            if dev is None:
                continue
            if dsp != path[-1]:
                add(dsp, 0x1000, 0xC030, 0x060400, g.numa, "pcieport", sub=(0x1000, 0x0000))
            _place(links, [*path[:-1], dsp, dev])
    for n in host.nics:
        if n.switch is None:  # an HCA in a slot of its own, below a root port
            port = nic_root_port(n.bus)
            add(port, 0x8086, 0x352A, 0x060400, n.numa, "pcieport", sub=(0x8086, 0x0000))
            _place(links, [port, n.bus])
    for s in host.switches:
        add(s.bus, 0x10DE, 0x22A3, 0x068000, s.numa, "nvidia-nvswitch", gen=4, gen_max=4,
            width=2, width_max=2, sub=(0x10DE, 0x1796))
    for n in host.nics:
        add(n.bus, 0x15B3, 0x1021, 0x020700, n.numa, "mlx5_core", sub=(0x15B3, 0x0041))
    return tree(files, links)


def _bus(address: str, delta: int) -> str:
    return f"{address[:5]}{int(address[5:7], 16) + delta:02x}"


def switch_path(gpu_bus: str) -> list[str]:
    """The ports above an HGX GPU, top first: the root port, the PCIe switch's upstream
    port, the GPU's downstream port (the HCA beside it hangs off another one)."""
    return [_bus(gpu_bus, -5) + ":01.0", _bus(gpu_bus, -4) + ":00.0",
            _bus(gpu_bus, -3) + ":01.0"]


def nic_root_port(nic_bus: str) -> str:
    """The root port of an HCA that shares no GPU's switch."""
    return _bus(nic_bus, -1) + ":01.0"


def _place(links: dict[str, str], chain: list[str]) -> None:
    """Each function's own sysfs link: its real path below its root bus."""
    for i, node in enumerate(chain):
        links[node] = "../../../devices/pci" + node[:7] + "/" + "/".join(chain[:i + 1])


def _nic_port(gpu_bus: str) -> str:
    """The switch downstream port of the HCA that shares the GPU's switch."""
    return _bus(gpu_bus, -3) + ":00.0"


def _aer(names: tuple[str, ...], total: str) -> str:
    return "".join(f"{n} 0\n" for n in names) + f"{total} 0\n"


def proc_meminfo(host: Host) -> str:
    """/proc/meminfo of a 2 TiB host; the default-size hugepage pool as the host holds it."""
    total = host.mem_total_kb
    size = host.default_hugepage_kb
    pool_kb = sum(host.hugepages_total(s) * s for s in host.hugepages_nr)
    rows = [("MemTotal", total), ("MemFree", total - 61234876 - pool_kb),
            ("MemAvailable", total - 38872104 - pool_kb),
            ("Buffers", 1843212), ("Cached", 24511960), ("SwapCached", 0),
            ("Active", 9456320), ("Inactive", 19023744), ("SwapTotal", 0), ("SwapFree", 0),
            ("Dirty", 212), ("Writeback", 0), ("AnonPages", 2096784), ("Mapped", 1423052),
            ("Shmem", 287160), ("Slab", 9841220), ("SReclaimable", 2453668),
            ("SUnreclaim", 7387552), ("KernelStack", 61760), ("PageTables", 41876),
            ("CommitLimit", total // 2), ("Committed_AS", 9734512),
            ("VmallocTotal", 34359738367), ("VmallocUsed", 1204556), ("HardwareCorrupted", 0),
            ("AnonHugePages", 393216)]
    lines = [f"{k + ':':<16}{v:>8} kB" for k, v in rows]
    lines += [f"HugePages_Total:   {host.hugepages_total(size):>5}",
              f"HugePages_Free:    {host.hugepages_free_total(size):>5}",
              "HugePages_Rsvd:        0", "HugePages_Surp:        0",
              f"Hugepagesize:   {size:>8} kB", f"Hugetlb:        {pool_kb:>8} kB"]
    return "\n".join(lines) + "\n"


_HP_ATTRS = ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages",
             "nr_overcommit_hugepages")


def _pool(host: Host, size: int, node: int | None = None) -> dict[str, int]:
    """Counters of one hugepage pool, host-wide or on one NUMA node."""
    nr = host.hugepages_nr.get(size, (0, 0))
    free = host.hugepages_free.get(size, nr)
    if node is None:
        return {"nr_hugepages": sum(nr), "free_hugepages": sum(free)}
    return {"nr_hugepages": nr[node], "free_hugepages": free[node]}


def hugepages(host: Host) -> str:
    """/sys/kernel/mm/hugepages: the 2 MiB and 1 GiB pools (empty unless reserved)."""
    files = {}
    for size in (2048, 1048576):
        pool = _pool(host, size)
        for a in _HP_ATTRS:
            files[f"hugepages-{size}kB/{a}"] = f"{pool.get(a, 0)}\n"
    return tree(files)


def hugepages_per_node(host: Host) -> str:
    """/sys/devices/system/node: per-node pools and CPU lists."""
    files = {}
    for node in (0, 1):
        files[f"node{node}/cpulist"] = host.cpulist(node) + "\n"
        for size in (2048, 1048576):
            pool = _pool(host, size, node)
            for a in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
                files[f"node{node}/hugepages/hugepages-{size}kB/{a}"] = f"{pool.get(a, 0)}\n"
    return tree(files)


def proc_cmdline(host: Host) -> str:
    """/proc/cmdline of the booted kernel."""
    return host.cmdline + "\n"


def os_release(host: Host) -> str:
    """/etc/os-release of Ubuntu 22.04.4."""
    return ('PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
            'VERSION="22.04.4 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\n'
            'ID_LIKE=debian\nHOME_URL="https://www.ubuntu.com/"\n'
            'SUPPORT_URL="https://help.ubuntu.com/"\n'
            'BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"\n'
            'PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"\n'
            'UBUNTU_CODENAME=jammy\n')


KERNEL_BUILD = "#115-Ubuntu SMP Mon Apr 15 09:52:04 UTC 2024"


def uname(host: Host) -> str:
    """``uname -a``."""
    return (f"Linux {host.hostname} {host.kernel_release} {KERNEL_BUILD} x86_64 x86_64 "
            "x86_64 GNU/Linux\n")


def uptime(host: Host) -> str:
    """/proc/uptime (seconds up, idle seconds summed over CPUs)."""
    up = host.uptime_s
    return f"{up:.2f} {up * 221.7:.2f}\n"


def numactl(host: Host) -> str:
    """``numactl --hardware`` for two sockets."""
    out = ["available: 2 nodes (0-1)"]
    free = (1031542, 1028874)
    for node in (0, 1):
        cpus = host.cpulist(node)
        expanded: list[str] = []
        for part in cpus.split(","):
            lo, hi = part.split("-")
            expanded += [str(c) for c in range(int(lo), int(hi) + 1)]
        out.append(f"node {node} cpus: {' '.join(expanded)}")
        out.append(f"node {node} size: {host.mem_total_kb // 2048} MB")
        out.append(f"node {node} free: {free[node]} MB")
    out += ["node distances:", "node   0   1 ", "  0:  10  21 ", "  1:  21  10 "]
    return "\n".join(out) + "\n"
