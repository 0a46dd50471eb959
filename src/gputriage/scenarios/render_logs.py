"""Renderers for logs, services, InfiniBand, lspci and container tooling.

The kernel log is ``journalctl -k -b -o short-iso``: boot messages, the NVIDIA
module loading lines for the loaded version, mlx5 bring-up and whatever
events the scenario added, in time order. Multi-line kernel messages keep
journalctl's indentation of continuation lines.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gputriage.scenarios.model import Host
from gputriage.scenarios.render_host import KERNEL_BUILD, nvrm_banner, switch_path, tree

IB_FW = "28.39.1002"


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S%z")


def _journal_header(host: Host) -> str:
    first = host.boot_time - timedelta(days=33, hours=5, minutes=12)
    fmt = "%a %Y-%m-%d %H:%M:%S UTC"
    return f"-- Journal begins at {first.strftime(fmt)}, ends at {host.now.strftime(fmt)}. --"


def _entries(host: Host, ident: str, entries: list[tuple[float, str]]) -> list[str]:
    out = []
    for seconds, message in sorted(entries, key=lambda e: e[0]):
        prefix = f"{_iso(host.at(seconds))} {host.hostname} {ident}: "
        first, *rest = message.split("\n")
        out.append(prefix + first)
        out += [" " * len(prefix) + line for line in rest]
    return out


def _boot_messages(host: Host) -> list[tuple[float, str]]:
    ev: list[tuple[float, str]] = [
        (0.0, f"Linux version {host.kernel_release} (buildd@lcy02-amd64-051) (gcc (Ubuntu "
              "11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) "
              f"{KERNEL_BUILD} (Ubuntu 5.15.0-105.115-generic 5.15.148)"),
        (0.0, "Command line: " + host.cmdline),
        (0.0, "DMI: Supermicro SYS-821GE-TNHR/X13DEG-OAD, BIOS 2.1 01/22/2024"),
        (0.512, "smpboot: CPU0: Intel(R) Xeon(R) Platinum 8480+ (family: 0x6, model: 0x8f, "
                "stepping: 0x8)"),
        (0.873, f"smp: Brought up 2 nodes, {host.cpus_per_node * 4} CPUs"),
    ]
    t = 2.104
    for s in host.switches:
        ev.append((t, f"pci {s.bus}: [10de:22a3] type 00 class 0x068000"))
        t += 0.0003
    for n in host.nics:
        ev.append((t, f"pci {n.bus}: [15b3:1021] type 00 class 0x020700"))
        t += 0.0003
    for g in host.gpus:
        ev.append((t, f"pci {g.bus}: [10de:2330] type 00 class 0x030200"))
        if (g.pcie_gen, g.pcie_width) != (g.pcie_gen_max, g.pcie_width_max):
            ev.append((t + 0.0001, _downtrained(g.bus, g.pcie_gen, g.pcie_width,
                                                g.pcie_gen_max, g.pcie_width_max)))
        elif (g.uplink_gen, g.uplink_width) != (5, 16):  # the switch uplink above it limits it
            ev.append((t + 0.0001, _downtrained(g.bus, g.uplink_gen, g.uplink_width,
                                                g.pcie_gen_max, g.pcie_width_max,
                                                at=switch_path(g.bus)[1])))
        t += 0.0003
    ev += _hugetlb_messages(host)
    ev.append((6.913, "EXT4-fs (md0): mounted filesystem with ordered data mode. Opts: (null). "
                      "Quota mode: none."))
    t = 8.201
    for n in host.nics:
        ev.append((t, f"mlx5_core {n.bus}: firmware version: {IB_FW}"))
        ev.append((t + 0.0011, f"mlx5_core {n.bus}: 504.112 Gb/s available PCIe bandwidth "
                               "(32.0 GT/s PCIe x16 link)"))
        t += 0.23
    ver = host.kernel_module_version
    majors = host.majors
    ev += [
        (10.412, "nvidia: loading out-of-tree module taints kernel."),
        (10.412, "nvidia: module verification failed: signature and/or required key missing "
                 "- tainting kernel"),
        (10.519, f"nvidia-nvlink: Nvlink Core is being initialized, major device number "
                 f"{majors['nvidia-nvlink']}"),
        (10.862, f"NVRM: loading {nvrm_banner(ver)}"),
    ]
    if "nvidia_modeset" in host.nvidia_modules:
        banner = nvrm_banner(ver).replace("Open Kernel Module", "Open Kernel Mode Setting Driver")
        ev.append((11.204, f"nvidia-modeset: Loading {banner}"))
    if "nvidia_drm" in host.nvidia_modules:
        t = 11.337
        for g in host.gpus:
            gid = int(g.bus[5:7], 16) << 8
            ev.append((t, f"[drm] [nvidia-drm] [GPU ID 0x{gid:08x}] Loading driver"))
            ev.append((t + 0.41, f"[drm] Initialized nvidia-drm 0.0.0 20160202 for {g.bus} on "
                                 f"minor {g.index + 1}"))
            t += 0.42
    if host.uvm_loaded:
        ev.append((15.118, f"nvidia-uvm: Loaded the UVM driver, major device number "
                           f"{majors['nvidia-uvm']}."))
    t = 17.402
    for n in host.nics:
        num = int(n.bus[5:7], 16)
        ev.append((t, f"mlx5_core {n.bus} ibp{num}s0: renamed from ib{n.name[5:]}"))
        t += 0.011
    return ev


# usable Mb/s per lane after line encoding, as the kernel computes it
_LANE_MBS = {1: 2000, 2: 4000, 3: 7876, 4: 15753, 5: 31507}
_GTS = {1: "2.5", 2: "5.0", 3: "8.0", 4: "16.0", 5: "32.0"}


def _downtrained(bus: str, gen: int, width: int, gen_max: int, width_max: int,
                 at: str | None = None) -> str:
    """The kernel's boot-time note about a PCIe link trained below its capability (``at``:
    the device whose upstream link limits it, when not the device itself)."""
    have, could = _LANE_MBS[gen] * width, _LANE_MBS[gen_max] * width_max
    return (f"pci {bus}: {have // 1000}.{have % 1000:03d} Gb/s available PCIe bandwidth, "
            f"limited by {_GTS[gen]} GT/s PCIe x{width} link at {at or bus} (capable of "
            f"{could // 1000}.{could % 1000:03d} Gb/s with {_GTS[gen_max]} GT/s PCIe "
            f"x{width_max} link)")


def _page_size(size_kb: int) -> str:
    return "1.00 GiB" if size_kb == 1048576 else f"{size_kb / 1024:.2f} MiB"


def _hugetlb_messages(host: Host) -> list[tuple[float, str]]:
    """HugeTLB boot lines, printed when the command line reserves pools."""
    ev: list[tuple[float, str]] = []
    for size, wanted in sorted(host.hugepages_requested.items()):
        got = host.hugepages_total(size)
        if got < wanted:
            ev.append((1.204, f"HugeTLB: allocating {wanted} of page size {_page_size(size)} "
                              f"failed.  Only allocated {got} hugepages."))
    if host.hugepages_requested:
        for size in (1048576, 2048):
            ev.append((1.206, f"HugeTLB registered {_page_size(size)} page size, "
                              f"pre-allocated {host.hugepages_total(size)} pages"))
    return ev


def kernel_log(host: Host) -> str:
    """``journalctl -k -b -o short-iso``: boot messages plus the scenario's events."""
    lines = [_journal_header(host)]
    lines += _entries(host, "kernel", _boot_messages(host) + list(host.kernel_events))
    return "\n".join(lines) + "\n"


def _systemctl_show(host: Host, unit: str, description: str, exec_path: str, pid: int,
                    started: float, active: bool, failed: bool = False) -> str:
    """``systemctl show UNIT``; ``failed``: the start's control process exited 1."""
    ts = host.at(started).strftime("%a %Y-%m-%d %H:%M:%S UTC")
    props = [
        ("Type", "forking"), ("Restart", "no"), ("NotifyAccess", "none"),
        ("MainPID", str(pid if active else 0)), ("ControlPID", "0"),
        ("Result", "exit-code" if failed else "success"), ("ExecMainStartTimestamp", ts),
        ("ExecMainPID", str(pid)), ("ExecMainCode", "1" if failed else "0"),
        ("ExecMainStatus", "1" if failed else "0"),
        ("ExecStart", f"{{ path={exec_path} ; argv[]={exec_path} ; ignore_errors=no }}"),
        ("Id", unit), ("Names", unit), ("Description", description),
        ("LoadState", "loaded"),
        ("ActiveState", "failed" if failed else "active" if active else "inactive"),
        ("SubState", "failed" if failed else "running" if active else "dead"),
        ("FragmentPath", f"/lib/systemd/system/{unit}"),
        ("UnitFileState", "enabled"), ("UnitFilePreset", "enabled"),
        ("ActiveEnterTimestamp", ts if active else ""),
        ("InactiveExitTimestamp", ts),
    ]
    return "\n".join(f"{k}={v}" for k, v in props) + "\n"


def systemctl_persistenced(host: Host) -> str:
    """``systemctl show nvidia-persistenced``."""
    return _systemctl_show(host, "nvidia-persistenced.service",
                           "NVIDIA Persistence Daemon", "/usr/bin/nvidia-persistenced",
                           PD_PID, 21.734, host.persistenced_active)


PD_PID = 2214


def persistenced_journal(host: Host, stopped_at: float | None = None) -> str:
    """``journalctl -u nvidia-persistenced -b -o short-iso``: the boot's clean start with
    every GPU registered, then, on a host where the daemon is not active, a stop asked
    of systemd (at ``stopped_at`` seconds after boot)."""
    lines = [_journal_header(host)]
    unit = "nvidia-persistenced.service"
    lines += _entries(host, "systemd[1]", [(21.702, "Starting NVIDIA Persistence Daemon...")])
    lines += _entries(host, f"nvidia-persistenced[{PD_PID}]", [
        (21.729, f"Started ({PD_PID})"),
        *((21.730 + 0.0004 * i, f"device {g.bus} - registered")
          for i, g in enumerate(host.gpus)),
    ])
    lines += _entries(host, "systemd[1]", [(21.734, "Started NVIDIA Persistence Daemon.")])
    if host.persistenced_active:
        return "\n".join(lines) + "\n"
    t = 3600.0 if stopped_at is None else stopped_at
    lines += _entries(host, "systemd[1]", [(t, "Stopping NVIDIA Persistence Daemon...")])
    lines += _entries(host, f"nvidia-persistenced[{PD_PID}]", [
        (t + 0.001, "Received signal 15"), (t + 0.002, "PID file unlocked."),
        (t + 0.003, "PID file closed."), (t + 0.004, f"Shutdown ({PD_PID})"),
    ])
    lines += _entries(host, "systemd[1]", [(t + 0.011, f"{unit}: Deactivated successfully."),
                                           (t + 0.012, "Stopped NVIDIA Persistence Daemon.")])
    return "\n".join(lines) + "\n"


FM_UNIT = "nvidia-fabricmanager.service"


def systemctl_fabricmanager(host: Host) -> str:
    """``systemctl show nvidia-fabricmanager`` (active, inactive or failed)."""
    failed = host.fabricmanager_failure is not None
    return _systemctl_show(host, FM_UNIT, "NVIDIA fabric manager service",
                           "/usr/bin/nvidia-fabricmanager-start.sh", 2871,
                           21.902 if failed else 29.511,
                           host.fabricmanager_active and not failed, failed)


def fabricmanager_journal(host: Host) -> str:
    """``journalctl -u nvidia-fabricmanager -b -o short-iso``: a clean start, or the
    failed one with the fabric manager's complaint and systemd's verdict."""
    lines = [_journal_header(host)]
    lines += _entries(host, "systemd[1]", [(21.902, "Starting NVIDIA fabric manager service...")])
    if host.fabricmanager_failure is not None:
        lines += _entries(host, "nv-fabricmanager[2871]", [(21.968, host.fabricmanager_failure)])
        lines += _entries(host, "systemd[1]", [
            (21.971, f"{FM_UNIT}: Control process exited, code=exited, status=1/FAILURE"),
            (21.971, f"{FM_UNIT}: Failed with result 'exit-code'."),
            (21.972, "Failed to start NVIDIA fabric manager service."),
        ])
        return "\n".join(lines) + "\n"
    lines += _entries(host, "nv-fabricmanager[2871]", [
        (27.140, "Connected to 1 node."),
        (29.498, "Successfully configured all the available NVSwitches to route GPU NVLink "
                 "traffic. NVLink Peer-to-Peer support will be enabled once the GPUs are "
                 "successfully registered with the NVLink fabric."),
    ])
    lines += _entries(host, "systemd[1]", [(29.511, "Started NVIDIA fabric manager service.")])
    return "\n".join(lines) + "\n"


_IB_STATE = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4}
_IB_PHYS = {"Sleep": 1, "Polling": 2, "Disabled": 3, "LinkUp": 5, "LinkErrorRecovery": 6}
# 4X port rate in Gb/s -> the IB speed name sysfs prints after it
_IB_SPEED = {10: "SDR", 20: "DDR", 40: "QDR", 56: "FDR", 100: "EDR", 200: "HDR", 400: "NDR",
             800: "XDR"}
_IB_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
                "port_xmit_discards", "port_xmit_constraint_errors",
                "port_rcv_constraint_errors", "local_link_integrity_errors",
                "excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_wait")


def infiniband(host: Host) -> str:
    """/sys/class/infiniband: port state, rate and counters of each HCA."""
    files: dict[str, str] = {}
    for n in host.nics:
        rng = host.rng(f"ib:{n.name}")
        port = f"{n.name}/ports/1"
        files[f"{port}/state"] = f"{_IB_STATE[n.state]}: {n.state}\n"
        files[f"{port}/phys_state"] = f"{_IB_PHYS[n.phys_state]}: {n.phys_state}\n"
        files[f"{port}/rate"] = (f"{n.rate_gbps} Gb/sec (4X {_IB_SPEED[n.rate_gbps]})\n"
                                 if n.state == "ACTIVE" else "10 Gb/sec (4X SDR)\n")
        files[f"{port}/link_layer"] = "InfiniBand\n"
        files[f"{port}/lid"] = f"0x{n.lid if n.state == 'ACTIVE' else 0:x}\n"
        files[f"{port}/sm_lid"] = "0x1\n" if n.state == "ACTIVE" else "0x0\n"
        for c in _IB_COUNTERS:
            files[f"{port}/counters/{c}"] = f"{n.counters.get(c, 0)}\n"
        for c in ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"):
            files[f"{port}/counters/{c}"] = f"{rng.randint(10**9, 10**11)}\n"
        files[f"{n.name}/fw_ver"] = IB_FW + "\n"
        files[f"{n.name}/hca_type"] = "MT4129\n"
        files[f"{n.name}/node_desc"] = f"{host.hostname} {n.name}\n"
    return tree(files)


def ibstat(host: Host) -> str:
    """``ibstat`` for the ConnectX-7 HCAs."""
    out: list[str] = []
    for n in host.nics:
        active = n.state == "ACTIVE"
        out += [f"CA '{n.name}'", "\tCA type: MT4129", "\tNumber of ports: 1",
                f"\tFirmware version: {IB_FW}", "\tHardware version: 0",
                f"\tNode GUID: 0x{n.node_guid:016x}",
                f"\tSystem image GUID: 0x{n.node_guid:016x}", "\tPort 1:",
                f"\t\tState: {n.state.capitalize()}",
                f"\t\tPhysical state: {n.phys_state}",
                f"\t\tRate: {n.rate_gbps if active else 10}",
                f"\t\tBase lid: {n.lid if active else 0}", "\t\tLMC: 0",
                f"\t\tSM lid: {1 if active else 0}", "\t\tCapability mask: 0xa751e848",
                f"\t\tPort GUID: 0x{n.node_guid:016x}", "\t\tLink layer: InfiniBand"]
    return "\n".join(out) + "\n"


def _lnk(gen: int, width: int, gen_max: int, width_max: int) -> tuple[str, str]:
    speeds = {1: "2.5GT/s", 2: "5GT/s", 3: "8GT/s", 4: "16GT/s", 5: "32GT/s"}
    s = speeds[gen] + (" (downgraded)" if gen < gen_max else " (ok)")
    w = f"x{width}" + (" (downgraded)" if width < width_max else " (ok)")
    cap = (f"\t\tLnkCap:\tPort #0, Speed {speeds[gen_max]}, Width x{width_max}, ASPM not "
           "supported\n\t\t\tClockPM- Surprise- LLActRep- BwNot- ASPMOptComp+")
    sta = (f"\t\tLnkSta:\tSpeed {s}, Width {w}\n"
           "\t\t\tTrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-")
    return cap, sta


def _lspci_block(bus: str, header: str, subsystem: str, numa: int, driver: str,
                 modules: str, link: tuple[int, int, int, int]) -> str:
    cap, sta = _lnk(*link)
    return "\n".join([
        f"{bus} {header}",
        f"\tSubsystem: {subsystem}",
        "\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr+ Stepping- "
        "SERR+ FastB2B- DisINTx+",
        "\tStatus: Cap+ 66MHz- UDF- FastB2B- ParErr- DEVSEL=fast >TAbort- <TAbort- "
        "<MAbort- >SERR- <PERR- INTx-",
        "\tLatency: 0",
        f"\tNUMA node: {numa}",
        "\tCapabilities: [60] Power Management version 3",
        "\tCapabilities: [78] Express (v2) Endpoint, MSI 00",
        cap, sta,
        f"\tKernel driver in use: {driver}",
        f"\tKernel modules: {modules}",
        "",
    ])


def lspci_nvidia(host: Host) -> str:
    """``lspci -vvv -nn -D -d 10de:``: abridged blocks for GPUs and NVSwitches."""
    blocks = []
    for s in host.switches:
        blocks.append(_lspci_block(
            s.bus, "Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] "
            "(rev a1)", "NVIDIA Corporation Device [10de:1796]", s.numa, "nvidia-nvswitch",
            "nvidia", (4, 2, 4, 2)))
    for g in host.gpus:
        blocks.append(_lspci_block(
            g.bus, "3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] "
            "[10de:2330] (rev a1)", "NVIDIA Corporation Device [10de:16c1]", g.numa,
            "nvidia", "nvidiafb, nouveau, nvidia_drm, nvidia",
            (g.pcie_gen, g.pcie_width, g.pcie_gen_max, g.pcie_width_max)))
    blocks.sort()
    return "\n".join(blocks)


def lspci_mellanox(host: Host) -> str:
    """``lspci -vvv -nn -D -d 15b3:``: the ConnectX-7 HCAs."""
    return "\n".join(_lspci_block(
        n.bus, "Infiniband controller [0207]: Mellanox Technologies MT2910 Family "
        "[ConnectX-7] [15b3:1021]", "Mellanox Technologies Device [15b3:0041]", n.numa,
        "mlx5_core", "mlx5_core", (5, 16, 5, 16)) for n in host.nics)


def container_toolkit_config(host: Host) -> str:
    """/etc/nvidia-container-runtime/config.toml as the toolkit installs it."""
    return "\n".join([
        "#accept-nvidia-visible-devices-as-volume-mounts = false",
        "#accept-nvidia-visible-devices-envvar-when-unprivileged = true",
        "disable-require = false",
        'supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"',
        "", "[nvidia-container-cli]", "environment = []",
        'ldconfig = "@/sbin/ldconfig.real"', "load-kmods = true", "#no-cgroups = false",
        "", "[nvidia-container-runtime]", 'log-level = "info"', 'mode = "auto"',
        'runtimes = ["docker-runc", "runc", "crun"]', "",
        "[nvidia-container-runtime.modes.cdi]", 'annotation-prefixes = ["cdi.k8s.io/"]',
        'default-kind = "nvidia.com/gpu"', 'spec-dirs = ["/etc/cdi", "/var/run/cdi"]', "",
        "[nvidia-container-runtime-hook]", 'path = "nvidia-container-runtime-hook"',
        "skip-mode-detection = false", "", "[nvidia-ctk]", 'path = "nvidia-ctk"', ""])


def nvidia_ctk_version(host: Host) -> str:
    commit = f"{host.rng('ctk').getrandbits(160):040x}"
    return f"NVIDIA Container Toolkit CLI version 1.15.0\ncommit: {commit}\n"


def nvidia_container_cli_info(host: Host) -> str:
    """``nvidia-container-cli info`` when NVML works."""
    out = [f"NVRM version:   {host.kernel_module_version}",
           f"CUDA version:   {host.cuda_version}", ""]
    for g in host.gpus:
        out += [f"Device Index:   {g.index}", f"Device Minor:   {g.index}",
                "Model:          NVIDIA H100 80GB HBM3", "Brand:          Nvidia",
                f"GPU UUID:       {g.uuid}", f"Bus Location:   {g.bus_upper}",
                "Architecture:   9.0", ""]
    return "\n".join(out)


def dmidecode_slots(host: Host) -> str:
    """``dmidecode -t slot``: one full-width Gen5 slot per GPU baseboard link and NIC."""
    out = ["# dmidecode 3.3", "Getting SMBIOS data from sysfs.", "SMBIOS 3.5.0 present.", ""]
    devices = [(f"GPU{g.index}", g.bus, 16) for g in host.gpus]
    devices += [(f"NIC{i}", n.bus, 16) for i, n in enumerate(host.nics)]
    for handle, (label, bus, width) in enumerate(devices, start=0x20):
        out += [f"Handle 0x{handle:04X}, DMI type 9, 24 bytes", "System Slot Information",
                f"\tDesignation: {label}_SLOT", f"\tType: x{width} PCI Express 5 x{width}",
                "\tCurrent Usage: In Use", "\tLength: Other", f"\tID: {handle - 0x1f}",
                "\tCharacteristics:", "\t\t3.3 V is provided", "\t\tPME signal is supported",
                f"\tBus Address: {bus}", "\tData Bus Width: 16", "\tPeer Devices: 0", ""]
    return "\n".join(out)
