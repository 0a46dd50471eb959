"""The repairs of the hardware a finding is about: a GPU that left the bus, its memory,
firmware, PCIe and NVLink links, the node's InfiniBand and Ethernet ports, power and
cooling, and what the kernel log says of them; each with the GPUs, ports, serials and
commands of the finding. :data:`REPAIRS` joins :data:`gputriage.next_steps.repairs.BY_ID`;
the Xid and SXid catalogs' steps (next_steps/catalogs.py) call the helpers."""

from __future__ import annotations

import re

from gputriage.knowledge.cuda_compat import capability_of, version_key
from gputriage.model import Action, Finding
from gputriage.next_steps.host import (
    Host,
    Repair,
    bus_ids,
    dash_i,
    gpu_scopes,
    gpus,
    serials,
    what,
)

__all__ = ["REPAIRS", "bus_arg", "cooling", "fabric_errors", "gsp", "hardware_case", "ib_port",
           "link", "lost_gpu", "missing_boards", "nvlink", "pcie", "pcie_hop", "remap_check", "rma",
           "thermal"]


def bus_arg(f: Finding) -> str:
    """The bus id of the finding's one GPU (or device), else ``BUS`` to fill in."""
    return (bus_ids(f) or [f.scope.pci_bus_id or "BUS"])[0]


def hardware_case(f: Finding, host: Host) -> str:
    """Capture the driver's report and open a hardware case for what the finding names."""
    return (f"capture nvidia-bug-report.sh and open a hardware case for {gpus(f, host)}"
            f"{serials(f, host)} with the system vendor")


def lost_gpu(f: Finding, host: Host) -> str:
    many = len(gpu_scopes(f)) > 1
    do, them = ("do", "them") if many else ("does", "it")
    return (f"power-cycle it (a warm reboot rarely brings back a GPU that fell off the bus) "
            f"and, if {what(f, host)} {do} not come back (lspci -d 10de:; nvidia-smi -L), "
            f"reseat {them} or RMA {them}{serials(f, host)}")


def missing_boards(f: Finding, host: Host) -> str:
    return ("power-cycle it (a warm reboot rarely brings back GPUs that left the bus) and read "
            "the BMC's event log (ipmitool sel list); if the GPUs do not come back on the PCI "
            "bus (lspci -d 10de:; nvidia-smi -L), reseat the GPUs, riser or baseboard or open "
            "a hardware case")


def rma(f: Finding, host: Host) -> str:
    return (f"send {what(f, host)}{serials(f, host)} for RMA: its memory can no longer be "
            "repaired by remapping, a reset does not cure it")


def _retires_pages(f: Finding, host: Host) -> bool:
    """Whether the finding's GPU answers memory errors by retiring pages (before Ampere)
    rather than remapping rows: what its nvidia-smi view reports, else its name."""
    bus = f.scope.pci_bus_id
    for view in host.fact("smi_views") or ():
        if bus and view.bus_id != bus:
            continue
        if any(view.value(k) is not None for k in ("remapping_pending", "remapping_failure")):
            return False
        if any(view.value(k) is not None for k in ("retired_pages_pending",
                                                   "retired_pages_dbe", "retired_pages_sbe")):
            return True
        capability = capability_of(view.name)
        return capability is not None and version_key(capability) < (8,)
    return False


def remap_check(f: Finding, host: Host) -> str:
    if _retires_pages(f, host):
        return (f"nvidia-smi -q -d PAGE_RETIREMENT{dash_i(f)} should then show no page "
                "pending retirement (Pending Page Blacklist: No); track the retired-page "
                "count, and replace the GPU if it keeps growing or double-bit errors recur")
    return (f"nvidia-smi -q -d ROW_REMAPPER{dash_i(f)} should then show no pending and no "
            "failed remap")


def gsp(f: Finding, host: Host) -> str:
    if f.action is Action.DRAIN_AND_REPAIR:
        return (f"reset {gpus(f, host)} (nvidia-smi -r{dash_i(f)}) or reboot; if the GSP "
                "errors come back, capture nvidia-bug-report.sh and update the driver or "
                "RMA the GPU")
    return "if the GSP errors come back, capture nvidia-bug-report.sh and drain it for repair"


def nvlink(f: Finding, host: Host) -> str:
    check = f"nvidia-smi nvlink -s{dash_i(f)}"
    if f.action is Action.RESET_GPU:
        return f"{check} should then show every link up, else drain it for repair"
    return (f"reset {gpus(f, host)} (nvidia-smi -r{dash_i(f)}); if links stay down or keep "
            f"failing ({check}), reseat or RMA the GPU{serials(f, host)}")


def pcie(f: Finding, host: Host) -> str:
    g = what(f, host)
    bus = bus_arg(f)
    if f.action is Action.FIX_CONFIG:  # a narrow slot, not a failing link
        return (f"move {g} to a slot wired for its full width if it needs the bandwidth "
                f"(dmidecode -t slot lists each slot's width); lspci -vv -s {bus} | grep "
                "LnkSta should then show the full width")
    text = (f"reseat {g} and check its riser, cable and slot; lspci -vv -s {bus} | grep "
            "LnkSta should then show the full width and speed")
    if "aer" in f.id or "replay" in f.id:
        text += ", and if errors go on, replace the riser or the card"
    return text


def pcie_hop(f: Finding, host: Host) -> str:
    """A downtrained link between two PCIe ports: the hop's riser, cable or board."""
    hop = f.scope.name or "the PCIe hop"
    lower = f.scope.pci_bus_id or "<port>"
    if f.action is Action.NONE:
        return (f"re-check {hop} while a job runs on the devices below it: lspci -vv -s "
                f"{lower} | grep LnkSta should show the speed and width both ends support")
    return (f"reseat or replace the riser, cable or retimer between {hop.replace(' -> ', ' and ')}"
            f" (the switch tray or baseboard if the hop is on it); lspci -vv -s {lower} | grep "
            "LnkSta should then show the speed and width both ends support, and every device "
            "below it its full bandwidth")


def ib_port(f: Finding, host: Host) -> str:
    port = what(f, host)
    dev, _, num = (f.scope.name or "").partition("/")
    check = f"ibstat {dev} {num}".rstrip() if dev else "ibstat"
    if dev.startswith("LID "):  # read by perfquery: the port is known by its LID
        check = f"perfquery -x {dev.removeprefix('LID ')} {num}"
    if f.id == "ib.port-not-active" and f.action is Action.FIX_CONFIG and "virtual function" \
            in f.explanation:
        return (f"enable the link of {port}'s virtual function: linkState: enable in its "
                "SriovIBNetwork / SriovNetwork (or ip link set <PF> vf <n> state enable on the "
                "host), bring the PF up, and recreate the pod; ibdev2netdev in the pod must "
                "then show it (Up)")
    if f.id == "ib.port-not-active" and f.action is Action.FIX_CONFIG:
        return (f"enable {port} or have its subnet manager (opensm / UFM) configure it; "
                f"{check} should then show State: Active")
    if f.id == "ib.port-errors":
        return (f"clear {port}'s counters (perfquery -x -R) and read them again under load; if "
                f"they climb, reseat or replace its cable or transceiver and have the switch "
                f"port checked ({check})")
    if f.id in ("ib.symbol-errors", "ib.link-downed"):
        return (f"replace the cable or transceiver of {port} and have the switch port checked;"
                f" its counters ({check}) should then stay still")
    return (f"reseat or replace the cable and transceiver of {port} and have the switch port "
            f"checked; {check} should then show State: Active, Physical state: LinkUp at the "
            "rate of its peers")


def link(f: Finding, host: Host) -> str:
    return (f"check the cable, transceiver and switch port of {what(f, host)} (ip link; "
            "ethtool), and replace what fails")


def _power_brake(f: Finding, host: Host) -> str:
    return ("check its power supplies and the BMC's power events (ipmitool sdr type 'Power "
            "Supply'; ipmitool sel list) and replace the failed PSU or power cable")


def thermal(f: Finding, host: Host) -> str:
    return (f"check the cooling and power of {what(f, host)}: fans, airflow and inlet "
            f"temperature in the BMC (ipmitool sdr type Temperature; nvidia-smi -q -d "
            f"PERFORMANCE,TEMPERATURE{dash_i(f)})")


def cooling(f: Finding, host: Host) -> str:
    return (f"improve the cooling of {what(f, host)}: fan speeds, airflow and inlet temperature"
            f" in the BMC (ipmitool sdr type Temperature; nvidia-smi -q -d "
            f"TEMPERATURE{dash_i(f)})")


def _power_limit(f: Finding, host: Host) -> str:
    return (f"restore the power limit of {what(f, host)} to its default: nvidia-smi -q -d "
            f"POWER{dash_i(f)} shows Default Power Limit, nvidia-smi{dash_i(f)} -pl WATTS "
            "sets it")


def _ecc_off(f: Finding, host: Host) -> str:
    return (f"turn ECC on first (nvidia-smi -e 1{dash_i(f)}) so the reset applies it, and "
            f"nvidia-smi -q -d ECC{dash_i(f)} should then show it Enabled")


def _reset_blocked(f: Finding, host: Host) -> str:
    return (f"stop what holds {what(f, host)} (nvidia-smi --query-compute-apps=pid,process_name "
            f"--format=csv{dash_i(f)}; fuser -v /dev/nvidia*; systemctl stop nvidia-dcgm "
            f"nvidia-persistenced), then nvidia-smi -r{dash_i(f)}")


def _pending_memory(f: Finding, host: Host) -> str:
    """A row remap or page retirement that the next reset applies."""
    if f.action is Action.RESET_GPU:
        return remap_check(f, host)
    return (f"reset {gpus(f, host)} while no job runs on it (nvidia-smi -r{dash_i(f)}) so that "
            f"the pending remap takes effect; {remap_check(f, host)}")


def _links_down(f: Finding, host: Host) -> str:
    if f.action is Action.FIX_CONFIG:  # one SXM GPU of a baseboard given to a VM
        return (f"run only single-GPU jobs on {host.called}, or give the VM the whole baseboard "
                "(every GPU and NVSwitch, with the fabric manager) for multi-GPU jobs; "
                "nvidia-smi nvlink -s should then show the links up")
    if "bridge" in f.title:
        return (f"reseat the NVLink bridge of {what(f, host)} (power the node off first); "
                f"nvidia-smi nvlink -s{dash_i(f)} should then show every link up")
    return nvlink(f, host)


def _reset_required(f: Finding, host: Host) -> str:
    return (f"if the reset is refused or the driver asks for it again, reboot; if it keeps "
            f"asking, {hardware_case(f, host)}")


def _hung_in_driver(f: Finding, host: Host) -> str:
    return ("capture nvidia-bug-report.sh first (with a timeout: it may hang too) for the "
            "stuck threads' stacks, then reboot it; read the kernel log before the first hung "
            "task for an Xid (journalctl -k -b -1 | grep -i xid) and update the driver if it "
            "hangs again without one")


def _gpu_init(f: Finding, host: Host) -> str:
    return (f"power-cycle it (ipmitool chassis power cycle) and read why the driver could not "
            f"bring {what(f, host)} up (dmesg | grep -i -e RmInitAdapter -e NVRM): a BAR it "
            "could not map wants Above 4G Decoding (and Resizable BAR) in the BIOS "
            f"(lspci -vv -s {bus_arg(f)} shows Region 1), missing GSP firmware a complete "
            "reinstall of the driver; if nvidia-smi -L still does not list it, reseat it or "
            f"{hardware_case(f, host)}")


def _error_state(f: Finding, host: Host) -> str:
    if f.action is Action.PLAN_REPAIR:  # one sensor, the GPU works
        return (f"reset {what(f, host)} (nvidia-smi -r{dash_i(f)}); if nvidia-smi -q{dash_i(f)} "
                f"still reads ERR! for it, {hardware_case(f, host)}")
    return (f"reboot it to recover {what(f, host)} (a reset is usually refused in this state); "
            "if nvidia-smi reads ERR! again, the kernel log names why (Xid 79: the GPU fell "
            "off the bus, repair it; Xid 119/120: GSP timeouts, update the driver)")


def _reset_failed(f: Finding, host: Host) -> str:
    return (f"reboot it at the next window: a reboot resets every GPU where nvidia-smi -r of "
            f"{what(f, host)} was refused; gputriage check should then show its errors as "
            "history")


def _no_devices(f: Finding, host: Host) -> str:
    return ("read why the driver brought no GPU up (dmesg | grep -i -e RmInitAdapter -e NVRM) "
            "and reboot it once; if nvidia-smi still finds no device, check the BIOS (Above 4G "
            "Decoding, Resizable BAR) and the GPUs on the PCI bus (lspci -d 10de:), and open a "
            "hardware case for the GPUs that stay down")


def _wedged(f: Finding, host: Host) -> str:
    return ("capture nvidia-bug-report.sh (with a timeout: it may hang as well), reboot it, "
            "and read the kernel log of the boot before (journalctl -k -b -1 | grep -i xid) "
            "for the Xid that wedged the driver: repair the GPU it names if one fell off the "
            "bus")


def _links_uneven(f: Finding, host: Host) -> str:
    return ("reset the GPUs with fewer links (nvidia-smi -r -i BUS for each, with no job on "
            "them), which retrains their links; nvidia-smi nvlink -s should then show every "
            "link up, else reseat the GPU or bridge, or have the baseboard repaired")


def _segfault(f: Finding, host: Host) -> str:
    return ("look at the crashed process (its own log and core dump) and the libraries in its "
            "container: a libcuda or libnccl copied into the image, or built for another "
            "driver, crashes like this (ldconfig -p | grep -e libcuda -e libnccl inside it; "
            f"libcuda must be the host driver's); restart the job; {host.called} needs "
            "nothing unless Xids or other jobs crash there too")


def _iommu(f: Finding, host: Host) -> str:
    return (f"add iommu=pt to {host.called}'s kernel command line (GRUB_CMDLINE_LINUX in "
            "/etc/default/grub, then update-grub or grub2-mkconfig) and reboot; cat "
            "/proc/cmdline should then show it, and GPU peer-to-peer and GPUDirect RDMA run "
            "untranslated")


def _roce_gid(f: Finding, host: Host) -> str:
    return (f"give the network interface of {what(f, host)} its IP address (the CNI, netplan "
            "or NetworkManager that should set it); show_gids should then list a RoCE v2 GID "
            "with that address, and NCCL_IB_GID_INDEX names its index")


def _version_skew(f: Finding, host: Host) -> str:
    return ("reboot it so that every nvidia module loads from the installed release (or, with "
            "no GPU client left, reload them: modprobe -r nvidia_uvm nvidia_drm nvidia_modeset "
            "nvidia; modprobe nvidia); cat /sys/module/nvidia*/version should then print one "
            "version")


def fabric_errors(f: Finding, host: Host) -> str:
    return ("reboot it (the GPUs and NVSwitches reset together, and the fabric manager starts "
            "afresh), match the errors' time with SXid and Xid lines (journalctl -k | grep -i "
            "-e sxid -e xid), and if they come back capture nvidia-bug-report.sh and "
            "/var/log/fabricmanager.log and open a case for the NVSwitch baseboard")


def _numa_unknown(f: Finding, host: Host) -> str:
    return (f"turn on the firmware's NUMA information for PCIe devices in {host.called}'s "
            "BIOS (ACPI SRAT / proximity domains) or update the BIOS; in a VM give the guest "
            f"a NUMA layout for the passed-through device; cat /sys/bus/pci/devices/"
            f"{bus_arg(f)}/numa_node should then show a node, not -1")


def _p2p_blocked(f: Finding, host: Host) -> str:
    return (f"turn PCIe ACS off on {host.called} (the BIOS's ACS setting, or setpci on each "
            "bridge) and boot with iommu=pt; nvidia-smi topo -p2p r should then read OK for "
            "every pair, and a P2P test (p2pBandwidthLatencyTest) pass")


def _count_outliers(f: Finding, host: Host) -> str:
    m = re.search(r"concentrated on (.+?) \(", f.title)
    nodes = m.group(1) if m else "the nodes the finding names"
    return (f"run gputriage check on {nodes} (or read their kernel log and nvidia-smi -q): a "
            "count does not say when, so drain only a node whose current state shows the "
            "fault")


def _hugepage_nodes(f: Finding, host: Host) -> str:
    return ("reserve the pages per NUMA node to match where the GPUs' jobs run: hugepages=0:N,"
            "1:N on the kernel command line, or echo N > /sys/devices/system/node/nodeX/"
            "hugepages/hugepages-SIZEkB/nr_hugepages for each node; numastat -m should then "
            "show them spread")


REPAIRS: dict[str, Repair] = {
    "gpu.missing": lost_gpu, "nvidia-smi.gpu-lost": lost_gpu,
    **dict.fromkeys(("driver.no-gpus-on-pci", "gpu.count-unexpected", "gpu.board-short",
                     "host.gpus-gone", "expect.gpu-count", "dcgm.gpu-count-unexpected"),
                    missing_boards),
    **dict.fromkeys(("memory.remap-failed", "memory.remap-exhausting",
                     "memory.retired-pages-limit", "dcgm.remap-failed"), rma),
    **dict.fromkeys(("memory.uncorrectable", "memory.remap-pending",
                     "memory.retired-pages-pending", "dcgm.remap-pending",
                     "dcgm.ecc-uncorrectable"), _pending_memory),
    "memory.ecc-disabled": _ecc_off, "gpu.reset-blocked": _reset_blocked,
    "clocks.hw-power-brake": _power_brake, "clocks.hw-slowdown": thermal,
    "clocks.hw-thermal-slowdown": thermal, "clocks.sw-thermal-slowdown": cooling,
    "thermal.near-limit": cooling, "power.at-limit": _power_limit,
    **dict.fromkeys(("pcie.aer-errors", "pcie.replays", "pcie.speed-degraded",
                     "pcie.width-degraded", "expect.pcie", "dcgm.pcie-failed",
                     "dcgm.pcie-replays", "kernel.pcie-aer", "kernel.pcie-bandwidth-limited"),
                    pcie),
    "pcie.hop-degraded": pcie_hop,
    **dict.fromkeys(("nvlink.errors", "dcgm.nvlink-down", "kernel.nvlink-error"), nvlink),
    "nvlink.links-down": _links_down,
    **dict.fromkeys(("ib.port-not-active", "ib.port-errors", "ib.symbol-errors",
                     "ib.link-downed", "ib.rate-below-peers"), ib_port),
    "ib.roce-gid": _roce_gid,
    **dict.fromkeys(("kernel.link-down", "kernel.link-flaps", "kernel.link-down-at-boot",
                     "kernel.netdev-tx-timeout"), link),
    **dict.fromkeys(("kernel.gsp-error", "kernel.gsp-rpc-timeout"), gsp),
    "kernel.gpu-reset-required": _reset_required,
    **dict.fromkeys(("kernel.hung-task-in-nvidia", "kernel.soft-lockup-in-nvidia"),
                    _hung_in_driver),
    "kernel.host-memory-error": lambda f, h: ("replace the failing DIMM: the BMC's event log "
                                              "(ipmitool sel list) or edac-util -v names it"),
    "kernel.hardware-error": lambda f, h: ("read the BMC's event log (ipmitool sel list) and "
                                           "replace the part it names"),
    "kernel.segfault-in-gpu-library": _segfault, "kernel.iommu": _iommu,
    "driver.gpu-init-failed": _gpu_init, "gpu.error-state": _error_state,
    "gpu.reset-failed": _reset_failed, "nvidia-smi.no-devices": _no_devices,
    "driver.wedged": _wedged, "module.version-skew": _version_skew,
    "topology.nvlink-uneven": _links_uneven, "topology.numa-unknown": _numa_unknown,
    "topology.p2p": _p2p_blocked,
    "xid-counts.node-outlier": _count_outliers, "hugepages.node-imbalance": _hugepage_nodes,
}
