"""The named situations: each is the healthy host plus one mutation.

To add a scenario, write ``def _my_case() -> Host`` that starts from
:func:`healthy_hgx_h100`, changes what the situation changes (a GPU's link
width, an NIC's state, a unit inactive, kernel events, a failing command),
and register it in :data:`CATALOG` with the finding ids it must produce.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gputriage.scenarios.container_cdi import stale_cdi_after_upgrade
from gputriage.scenarios.containers import container_nvml_unknown_error
from gputriage.scenarios.cuda_job import cuda_driver_too_old
from gputriage.scenarios.gpus_gone import gpus_gone
from gputriage.scenarios.k8s_driver import gpus_gone_after_driver_update
from gputriage.scenarios.k8s_pool import k8s_shared_pool, k8s_weights_herd
from gputriage.scenarios.model import Gpu, GpuProcess, Host, Outcome, healthy_hgx_h100
from gputriage.scenarios.render_host import nvrm_banner
from gputriage.scenarios.render_nccl import NcclJob, nccl_log, nccl_tests

NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
# pynvml's NVMLError str() for these codes
NVML_STR_RM_VERSION_MISMATCH = "RM has detected an NVML/RM version mismatch."

NVSMI_COMMANDS = ("nvidia_smi", "nvidia_smi_q_xml", "nvidia_smi_topo",
                  "nvidia_smi_nvlink_status", "nvidia_smi_nvlink_errors")


@dataclass(frozen=True)
class Entry:
    """A catalog row: how to build the host and what analysis must conclude."""

    name: str
    title: str
    description: str
    expected: tuple[str, ...]
    make_host: Callable[[], Host]


def _healthy() -> Host:
    return healthy_hgx_h100()


def _driver_mismatch() -> Host:
    host = healthy_hgx_h100()
    old = "535.161.07"
    host.kernel_module_version = old  # still loaded since boot
    # userspace was upgraded under the running system (libs, nvidia-smi, NVML)
    failure = ("Failed to initialize NVML: Driver/library version mismatch\n"
               f"NVML library version: {'.'.join(host.userspace_version.split('.')[:2])}\n")
    for name in NVSMI_COMMANDS:
        host.command_overrides[name] = Outcome(failure, NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    host.command_overrides["nvidia_container_cli_info"] = Outcome(
        "nvidia-container-cli: initialization error: nvml error: driver/library version "
        "mismatch\n", 1)
    host.nvml_init_error = (NVML_ERROR_LIB_RM_VERSION_MISMATCH, NVML_STR_RM_VERSION_MISMATCH)
    mismatch = (f"NVRM: API mismatch: the client has the version {host.userspace_version}, but\n"
                f"NVRM: this kernel module has the version {old}.  Please\n"
                "NVRM: make sure that this kernel module and all NVIDIA driver\n"
                "NVRM: components have the same version.")
    for seconds in (38_411.207, 38_411.958, 38_702.331, 41_066.019):
        host.kernel_events.append((seconds, mismatch))
    return host


LOST_INDEX = 4  # 0000:9a:00.0


def _gpu_fallen_off_bus() -> Host:
    host = healthy_hgx_h100()
    g = host.gpus[LOST_INDEX]
    g.lost = True
    g.in_driver = False
    handle = f"Unable to determine the device handle for GPU{g.bus.upper()}: Unknown Error\n"
    for name in NVSMI_COMMANDS:
        host.command_overrides[name] = Outcome(handle, 255)
    host.command_overrides["nvidia_container_cli_info"] = Outcome(
        "nvidia-container-cli: detection error: nvml error: unknown error\n", 1)
    short = g.bus[:-2]  # 0000:9a:00
    t = 40_917.552
    host.kernel_events += [
        (t, f"NVRM: GPU at PCI:{short}: {g.uuid}"),
        (t, f"NVRM: GPU Board Serial Number: {g.serial}"),
        (t, f"NVRM: Xid (PCI:{short}): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus."),
        (t + 0.0001, f"NVRM: GPU {g.bus}: GPU has fallen off the bus."),
        (t + 0.0001, f"NVRM: GPU {g.bus}: GPU serial number is {g.serial}."),
        (t + 0.0004, "NVRM: A GPU crash dump has been created. If possible, please run\n"
                     "NVRM: nvidia-bug-report.sh as root to collect this data before\n"
                     "NVRM: the NVIDIA kernel module is unloaded."),
    ]
    return host


def _short(bus: str) -> str:
    """The address as Xid lines print it: ``0000:9a:00`` (no function)."""
    return bus[:-2]


def _xid31_one_job() -> Host:
    host = healthy_hgx_h100()
    g = host.gpus[2]
    t = 31_406.118
    for i, (gpc, addr) in enumerate(((2, "0x7f3a_1c000000"), (2, "0x7f3a_1c200000"),
                                     (5, "0x7f3a_1c400000"))):
        host.kernel_events.append((
            t + i * 0.0021,
            f"NVRM: Xid (PCI:{_short(g.bus)}): 31, pid=48211, name=python3, Ch 00000008, "
            f"intr 00000000. MMU Fault: ENGINE GRAPHICS GPC{gpc} GPCCLIENT_T1_{i} faulted @ "
            f"{addr}. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"))
    return host


def _xid48_row_remap() -> Host:
    host = healthy_hgx_h100()
    g = host.gpus[5]
    t = 27_733.904
    host.kernel_events += [
        (t, f"NVRM: GPU at PCI:{_short(g.bus)}: {g.uuid}"),
        (t, f"NVRM: GPU Board Serial Number: {g.serial}"),
        (t, f"NVRM: Xid (PCI:{_short(g.bus)}): 48, pid='<unknown>', name=<unknown>, An "
            "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
            "at physAddr 0x3c1f0a5e0 partition 5, subpartition 1."),
        (t + 0.0004, f"NVRM: Xid (PCI:{_short(g.bus)}): 48, pid=77120, name=python, channel "
                     "0x00000011"),
        (t + 0.0011, f"NVRM: Xid (PCI:{_short(g.bus)}): 63, pid=77120, name=python, Row "
                     "Remapper: New row (0x00000003c1f0a5e0) marked for remapping, reset gpu "
                     "to activate."),
    ]
    return host


RELOAD_AFTER_S = 1_778.4  # the driver reload that reset the GPUs, after the Xid 48


def _xid48_reset() -> Host:
    """The Xid 48 / 63 of GPU 5, then the on-call's driver reload: every GPU reset, the
    spare row in use, nothing pending."""
    host = _xid48_row_remap()
    g = host.gpus[5]
    g.remapped_unc, g.remap_histogram = 1, (2559, 1, 0, 0, 0)
    g.ecc_aggregate = {"dram_uncorrectable": 1}
    t = 27_733.904 + RELOAD_AFTER_S
    host.kernel_events += [
        (t, "nvidia-nvlink: Nvlink Core is being initialized, major device number "
            f"{host.majors['nvidia-nvlink']}"),
        (t + 0.343, f"NVRM: loading {nvrm_banner(host.kernel_module_version)}"),
        (t + 4.256, "nvidia-uvm: Loaded the UVM driver, major device number "
                    f"{host.majors['nvidia-uvm']}."),
    ]
    return host


def _xid119_repeated() -> Host:
    host = healthy_hgx_h100()
    g = host.gpus[3]
    calls = (("nvidia-smi", 90112, "103 (GSP_RM_ALLOC) (0x2081 0x4)"),
             ("python", 90377, "76 (GSP_RM_CONTROL) (0x20800a4c 0x4)"),
             ("nv-hostengine", 3120, "76 (GSP_RM_CONTROL) (0x2080014b 0x5)"),
             ("nvidia-smi", 91544, "10 (FREE) (0xa55a0090 0x0)"))
    t = 39_115.271
    for i, (name, pid, call) in enumerate(calls):
        host.kernel_events.append((
            t + i * 417.3,
            f"NVRM: Xid (PCI:{_short(g.bus)}): 119, pid={pid}, name={name}, Timeout after 6s "
            f"of waiting for RPC response from GPU{g.index} GSP! Expected function {call}."))
    return host


def _uvm_not_loaded() -> Host:
    host = healthy_hgx_h100()
    host.nvidia_modules = [m for m in host.nvidia_modules if m != "nvidia_uvm"]
    return host


# -- hardware health and topology (issue 4) ---------------------------------------

def _busy(g: Gpu, util: int, used_mib: int, power_w: float, temp_c: int, pid: int,
          sm_clock_mhz: int = 1980) -> None:
    """Put a training process on ``g``: P0 at boost clock, memory used, no idle reason."""
    g.utilization_pct, g.memory_util_pct = util, util * 2 // 3
    g.perf_state, g.sm_clock_mhz = "P0", sm_clock_mhz
    g.clock_events = frozenset()
    g.memory_used_mib, g.power_w, g.temp_c = used_mib + 3, power_w, temp_c
    g.processes = [GpuProcess(pid, "python3", used_mib)]


def _pcie_x8_gpu3() -> Host:
    host = healthy_hgx_h100()
    g = host.gpus[3]
    g.pcie_width = 8  # trained at x8 of x16 (Gen5 kept): half the host bandwidth
    _busy(g, 95, 66_120, 612.37, 61, 52_907)
    return host


def _pcie_switch_uplink_gen3() -> Host:
    host = healthy_hgx_h100()
    g = host.gpus[2]
    g.uplink_gen = 3  # the root port -> PCIe switch link trained at Gen3 (x16 kept)
    _busy(g, 93, 65_880, 598.12, 60, 48_311)
    return host


def _nic_far_socket() -> Host:
    host = healthy_hgx_h100()
    nic = host.nics[0]
    # rail 0's HCA sits in a slot behind socket 1's root port, not beside GPU 0
    nic.bus, nic.numa, nic.switch = "0000:ca:00.0", 1, None
    return host


HUGEPAGES_2M_KB = 2048


def _hugepages_not_reserved() -> Host:
    host = healthy_hgx_h100()
    host.cmdline_extra = ["default_hugepagesz=2M", "hugepagesz=2M", "hugepages=32768"]
    host.hugepages_requested = {HUGEPAGES_2M_KB: 32768}
    host.hugepages_nr = {HUGEPAGES_2M_KB: (4608, 4608)}  # 9216 of 32768
    return host


FM_VERSION = "550.90.07"


def _fabric_manager_down() -> Host:
    host = healthy_hgx_h100()
    host.fabricmanager_active = False
    host.fabricmanager_failure = (
        f"fabric manager NVIDIA GPU driver interface version {FM_VERSION} don't match with "
        f"driver version {host.kernel_module_version}. Please update with matching NVIDIA "
        "driver package.")
    for g in host.gpus:
        g.fabric_state, g.fabric_status = "In Progress", "N/A"
    return host


def _ib_port_polling() -> Host:
    host = healthy_hgx_h100()
    nic = host.nics[3]
    nic.state, nic.phys_state = "DOWN", "Polling"
    return host


def _remap_failure() -> Host:
    host = healthy_hgx_h100()
    g = host.gpus[6]
    g.remapped_unc = 3
    g.remap_failure = True
    g.ecc_aggregate = {"dram_uncorrectable": 3}
    g.remap_histogram = (2558, 0, 0, 1, 1)  # one bank has no spare row left
    t = 35_208.417
    host.kernel_events += [
        (t, f"NVRM: GPU at PCI:{_short(g.bus)}: {g.uuid}"),
        (t, f"NVRM: GPU Board Serial Number: {g.serial}"),
        (t, f"NVRM: Xid (PCI:{_short(g.bus)}): 64, pid='<unknown>', name=<unknown>, Row "
            "Remapper Error: failed to remap row (0x00000005a3e17c40), no spare row left in "
            "the bank."),
    ]
    return host


def _hw_slowdown() -> Host:
    host = healthy_hgx_h100()
    g = host.gpus[2]
    _busy(g, 98, 71_438, 241.06, 49, 61_344, sm_clock_mhz=690)
    g.clock_events = frozenset({"hw_slowdown", "hw_power_brake_slowdown"})
    return host


# The job's NCCL output is what the node's owner pastes next to the snapshot:
# written as the input-only job sources (rc 0), the host itself stays healthy.
# NCCL_IB_DISABLE=1 left in the job: NCCL runs TCP over the IPoIB interfaces of the eight
# rails (NCCL_SOCKET_IFNAME=ib), which carries about half of what verbs with GPUDirect give.
SOCKET_JOB = NcclJob(env=(("NCCL_SOCKET_IFNAME", "ib"), ("NCCL_IB_DISABLE", "1")),
                     network="Socket", iface="ib0", subnet="192.168.100",
                     socket_ifaces=tuple(f"ib{i}" for i in range(8)), channels=8,
                     peak_busbw=183.0, latency_us=118.0)


def _nccl_socket_fallback() -> Host:
    host = healthy_hgx_h100()
    host.command_overrides["nccl_log"] = Outcome(nccl_log(host, SOCKET_JOB), 0)
    host.command_overrides["nccl_tests"] = Outcome(nccl_tests(host, SOCKET_JOB), 0)
    return host


CATALOG: tuple[Entry, ...] = (
    Entry("healthy-8xh100", "Healthy HGX H100 node (8 GPUs, 4 NVSwitches, 8 NDR HCAs)",
          "A freshly booted 8x H100 SXM node on driver 550.54.15 / CUDA 12.4 with fabric "
          "manager and persistence daemon running and all InfiniBand ports active. Every "
          "source agrees; the on-call should conclude there is nothing to do.",
          (), _healthy),
    Entry("driver-mismatch",
          "Driver upgraded under a running system: kernel module 535, userspace 550",
          "The 550.54.15 userspace driver was installed while the 535.161.07 kernel module "
          "stayed loaded, so NVML and nvidia-smi fail with 'Driver/library version mismatch' "
          "and the kernel logs API mismatch lines. The GPUs are fine: reboot the node (or "
          "reload the modules) so the new kernel module loads.",
          ("driver.version-mismatch",), _driver_mismatch),
    Entry("gpu-fallen-off-bus", "GPU 4 (0000:9a:00.0) fell off the bus (Xid 79)",
          "GPU 4 at 0000:9a:00.0 stopped responding and the driver logged Xid 79: it is "
          "still a PCI function but the driver and NVML have lost it, and nvidia-smi aborts "
          "on its device handle. Drain the node; a reboot may bring it back, a repeat means "
          "hardware repair.",
          ("gpu.missing", "nvidia-smi.gpu-lost", "xid.79"), _gpu_fallen_off_bus),
    Entry("uvm-not-loaded", "nvidia_uvm kernel module not loaded",
          "The nvidia, nvidia_modeset, nvidia_drm and nvidia_peermem modules are loaded but "
          "nvidia_uvm is not: there is no nvidia-uvm device, so CUDA applications fail to "
          "initialise although nvidia-smi looks healthy. Load it (modprobe nvidia-uvm / "
          "nvidia-modprobe -u -c=0) and find out why it was not loaded at boot.",
          ("module.nvidia-uvm-missing",), _uvm_not_loaded),
    Entry("xid79-gpu-lost", "Xid 79: GPU 4 (0000:9a:00.0) fell off the bus",
          "The kernel log's Xid 79 is the first sign: GPU 4 stopped answering on PCIe, the "
          "driver and NVML lost it and nvidia-smi aborts on its device handle. The log rule "
          "and the inventory agree on the GPU. Cordon and drain the node, power-cycle it, and "
          "repair the GPU if it happens again.",
          ("xid.79", "gpu.missing", "nvidia-smi.gpu-lost"), _gpu_fallen_off_bus),
    Entry("xid31-one-job", "Xid 31 MMU faults from one process on GPU 2",
          "One python3 process (pid 48211) hit three GPU page faults (Xid 31) on GPU 2 within "
          "a few milliseconds and died. A single process on a single GPU is an application "
          "bug: restart or debug the job; the node needs no action.",
          ("xid.31",), _xid31_one_job),
    Entry("xid48-row-remap", "Xid 48 double-bit ECC error then Xid 63 row remap on GPU 5",
          "GPU 5 reported an uncorrectable double-bit ECC error (Xid 48) that killed the job "
          "on it, then the row remapper reserved a spare row (Xid 63), pending until the GPU "
          "is reset. Drain the GPU and reset it to apply the remap; repair only if remapping "
          "fails or errors recur.",
          ("xid.48", "xid.63"), _xid48_row_remap),
    Entry("xid48-reset", "Xid 48 on GPU 5, then a driver reload reset the GPUs: resolved",
          "GPU 5 reported an uncorrectable double-bit ECC error (Xid 48) and a row remap "
          "(Xid 63); half an hour later the on-call drained the node and reloaded the NVIDIA "
          "driver, which resets every GPU and put the spare row in use (remapped rows 1, "
          "nothing pending). The Xids are history: the node may go back into service, and "
          "a new Xid 48 would be a new failure.",
          ("xid.48",), _xid48_reset),
    Entry("xid119-repeated", "Repeated Xid 119 GSP RPC timeouts on GPU 3",
          "The GPU System Processor of GPU 3 stopped answering RPCs four times in half an hour, "
          "for different callers (nvidia-smi, a job, DCGM). A GSP timeout needs a GPU reset; "
          "one that keeps coming back means draining the node and repairing the GPU.",
          ("xid.119",), _xid119_repeated),
    Entry("pcie-x8-gpu3", "GPU 3 (0000:5d:00.0) trained at PCIe Gen5 x8 of x16 while busy",
          "GPU 3 runs a job at 95 % utilisation in P0, but its PCIe link came up at x8 of the "
          "x16 it supports (still Gen5), so host transfers get half the bandwidth; the kernel "
          "noted it at boot and sysfs, lspci and nvidia-smi agree. Drain the node and reseat or "
          "repair the GPU's riser, cable or slot; it will not retrain by itself.",
          ("pcie.width-degraded", "kernel.pcie-bandwidth-limited"), _pcie_x8_gpu3),
    Entry("pcie-switch-uplink-gen3",
          "The PCIe switch above GPU 2 and mlx5_2 trained its uplink at Gen3 of Gen5",
          "The link from root port 0000:35:01.0 to the PCIe switch (upstream port "
          "0000:36:00.0) that serves GPU 2 and the HCA mlx5_2 came up at 8 GT/s although both "
          "ends support 32 GT/s x16. The GPU's own link is Gen5 and it is busy, yet every host "
          "copy and every GPUDirect RDMA transfer of both devices shares a quarter of the "
          "bandwidth; the kernel noted it at boot. One finding for the hop, both devices as "
          "its blast radius: reseat or replace the switch's riser or cable at the next window.",
          ("pcie.hop-degraded", "kernel.pcie-bandwidth-limited"), _pcie_switch_uplink_gen3),
    Entry("nic-far-socket", "HCA mlx5_0 for GPU 0's rail sits on the far socket (SYS)",
          "The ConnectX-7 serving rail 0 (mlx5_0) is installed behind socket 1 (NUMA 1) while "
          "GPU 0 is on socket 0, so topo -m shows SYS from GPU0 to NIC0 and GPUDirect RDMA "
          "traffic crosses the socket interconnect, while the other NICs on GPU 0's socket are "
          "NODE. Move the HCA to the slot beside GPU 0 (or fix the rail mapping) before "
          "blaming the network for slow collectives.",
          ("topology.nic-far",), _nic_far_socket),
    Entry("hugepages-not-reserved", "Boot asked for 32768 2 MiB hugepages, got 9216",
          "The kernel command line reserves 32768 hugepages of 2 MiB (64 GiB) but the kernel "
          "could allocate only 9216 at boot and says so in its log; /proc/meminfo and sysfs "
          "show the short pool. Jobs that expect the full pool fail or fall back to small "
          "pages: find what claimed the memory first, then reserve the pool again (or reboot).",
          ("hugepages.not-reserved",), _hugepages_not_reserved),
    Entry("fabric-manager-down", "HGX H100 with nvidia-fabricmanager failed: fabric In Progress",
          f"nvidia-fabricmanager failed at boot because its package ({FM_VERSION}) does not "
          "match the driver (550.54.15), so no GPU finished registering with the NVLink fabric "
          "(Fabric State In Progress, Status N/A) and CUDA fails with error 802 (system not yet "
          "initialized). Install the fabric manager matching the driver and start the unit; the "
          "GPUs themselves are fine.",
          ("fabric.manager-inactive", "fabric.state-not-completed"), _fabric_manager_down),
    Entry("ib-port-polling", "InfiniBand mlx5_3 port 1 Down, physical state Polling",
          "The HCA beside GPU 3 (mlx5_3) has port 1 Down with its physical layer Polling: it "
          "sees no link partner, which points at the cable, transceiver or switch port. GPU 3's "
          "rail carries no traffic, so multi-node jobs fail or slow down: drain the node and "
          "have the cable and switch port checked.",
          ("ib.port-not-active",), _ib_port_polling),
    Entry("remap-failure", "GPU 6 (0000:ba:00.0) row remapping failed (Xid 64)",
          "GPU 6 logged Xid 64: the row remapper could not replace a failing memory row because "
          "its bank has no spare row left, and nvidia-smi shows Remapping Failure Occurred: Yes "
          "with 3 rows already remapped for uncorrectable errors. A reset does not fix this: "
          "drain the node and send the GPU for repair (RMA).",
          ("memory.remap-failed", "xid.64"), _remap_failure),
    Entry("hw-slowdown", "GPU 2 busy with HW Slowdown and HW Power Brake active",
          "GPU 2 runs a job at 98 % utilisation but its clocks are held at 690 MHz by HW "
          "Slowdown and HW Power Brake Slowdown while its temperature is a normal 49 C: the "
          "baseboard is asserting the power brake, typically a power supply or power delivery "
          "fault, not heat. Drain the node and have the power supplies and baseboard checked.",
          ("clocks.hw-power-brake",), _hw_slowdown),
    Entry("nccl-socket-fallback",
          "Two-node all-reduce at half speed: NCCL fell back to TCP sockets",
          "A 2-node x 8-GPU job on this healthy node (8 active 400G NDR HCAs, nvidia_peermem "
          "loaded) exported NCCL_IB_DISABLE=1, so NCCL chose 'Using network Socket' and sent "
          "all inter-node traffic as TCP over the rails' IPoIB interfaces ib0-ib7 while NVLink "
          "carried the intra-node hops. all_reduce_perf peaks near half the bus bandwidth the "
          "rails give with verbs and GPUDirect RDMA. The node is fine: unset NCCL_IB_DISABLE "
          "in the job so NCCL uses NET/IB with GPUDirect RDMA.",
          ("nccl.socket-transport", "nccl.busbw-low"), _nccl_socket_fallback),
    Entry("gpus-gone", "Every GPU fell off the bus and is gone from it; driver unloaded",
          "The HGX baseboard dropped off the PCI bus: the kernel log shows Xid 79 on all "
          "eight GPUs, then nvidia-persistenced was stopped and the nvidia modules unloaded. "
          "lspci and sysfs show no NVIDIA function and nvidia-smi cannot reach a driver, yet "
          "the kernel log and the /dev/nvidia0-7 nodes left behind show this host had GPUs: "
          "it is not a CPU host. Drain it, power-cycle it and repair the baseboard if the "
          "GPUs do not come back.",
          ("host.gpus-gone", "xid.79", "nvidia-smi.cannot-communicate",
           "persistence.daemon-inactive", "persistence.daemon-stopped"), gpus_gone),
    Entry("stale-cdi-after-upgrade",
          "Pods get no GPU after a driver upgrade: the CDI spec still names the old driver",
          "The driver was upgraded from 535.161.07 to 550.54.15 and the node rebooted, so the "
          "kernel module and the libraries agree, but /etc/cdi/nvidia.yaml was generated "
          "before the upgrade and still mounts libcuda.so.535.161.07. Every GPU pod fails to "
          "start: runc cannot mount the old library, which is gone. Regenerate the spec "
          "(nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml), restart containerd, then "
          "the device plugin.",
          ("container.cdi-stale-spec", "container.mount-missing-file"), stale_cdi_after_upgrade),
    Entry("k8s-gpus-gone-after-driver-update",
          "Pods get no GPU after a driver update: the plugin lost NVML, the CDI spec is stale",
          "gpu-node-017's driver went from 535.161.07 to 550.54.15 and was reloaded without a "
          "reboot. The NVIDIA device plugin kept its old NVML handles: its event wait fails "
          "with ERROR_UNKNOWN and it marked all 8 GPUs unhealthy, so the node's allocatable "
          "nvidia.com/gpu is 0 (capacity 8) and the training job's pods stay Pending on "
          "'Insufficient nvidia.com/gpu'. /etc/cdi/nvidia.yaml still mounts the 535 libraries, "
          "so the pods would fail to start even once scheduled (a notebook that restarted its "
          "container since fails on the missing library). Repair in order: regenerate the "
          "CDI spec and restart containerd, restart the device plugin's pod on the node, and "
          "the pods schedule.",
          ("container.cdi-stale-spec", "container.mount-missing-file", "k8s.plugin-stale-nvml",
           "k8s.gpus-short", "k8s.pending-insufficient-gpu"), gpus_gone_after_driver_update),
    Entry("container-nvml-unknown-error",
          "A job's container lost its GPUs after a daemon-reload: NVML Unknown Error",
          "A training job ran in a Docker container given --gpus all on this healthy node. "
          "nvidia-smi worked when the container started; after a `systemctl daemon-reload` "
          "on the host (the systemd cgroup driver rewrote the container's device rules) the "
          "same container prints 'Failed to initialize NVML: Unknown Error', while the "
          "host's own nvidia-smi, NVML and driver are fine. The node stays in service: "
          "recreate the container and make device access survive reloads (nvidia-ctk "
          "system create-dev-char-symlinks, CDI devices or the cgroupfs driver).",
          ("container.nvml-unknown-error",), container_nvml_unknown_error),
    Entry("cuda-driver-too-old",
          "A cu128 job on a 535 node: PTX newer than the driver (CUDA error 222)",
          "A PyTorch 2.7 job built for CUDA 12.8 runs on this healthy node whose driver is "
          "535.161.07 (CUDA 12.2). Minor-version compatibility lets it start and see the "
          "GPUs, but its run-time compiled kernels carry 12.8 PTX that the 12.2 driver "
          "cannot JIT-compile: 'the provided PTX was compiled with an unsupported "
          "toolchain'. The node is fine for 12.2 jobs: run a build for CUDA 12.2 or older "
          "(the PyTorch cu121 wheel) or upgrade the driver to 570.26 or later.",
          ("cuda.driver-too-old",), cuda_driver_too_old),
    Entry("k8s-shared-pool",
          "Research and production share one H100 pool: no GPU quota, research outranks",
          "Production serves an 8B model from four replicas on the H100 nodes that the "
          "research namespace trains on. Research has a ResourceQuota that counts no GPU and "
          "a PriorityClass (1000000, may preempt) above production's pods, which have none: "
          "a burst of research jobs takes the pool and evicts production. Production's "
          "Deployment has no PodDisruptionBudget and scales on CPU. Cap research with a quota "
          "on requests.nvidia.com/gpu, give production the higher priority and research "
          "preemptionPolicy Never, add the budget and scale on GPU or queue metrics.",
          ("k8s.lint-pool-no-quota", "k8s.lint-preempts-production", "k8s.lint-no-pdb",
           "k8s.lint-hpa-cpu"), k8s_shared_pool),
    Entry("k8s-weights-herd",
          "16 replicas of a 70B model each download 140 GB from the Hub at start",
          "A vLLM Deployment of Llama 3 70B runs 8 replicas (its autoscaler allows 16); an "
          "init container downloads the ~140 GB of weights from the Hugging Face Hub into "
          "an emptyDir at every start, the image is vllm/vllm-openai:latest pulled Always, "
          "and the startup probe gives up after 60 s. A rollout moves ~2 TB over the shared "
          "link and pods are killed before they load. Cache the weights on the node (a "
          "pre-pull DaemonSet, a local or ReadOnlyMany volume), pin the image and lengthen "
          "the startup probe.",
          ("k8s.lint-weights-herd", "k8s.lint-pull-always", "k8s.lint-probe-vs-load"),
          k8s_weights_herd),
)
