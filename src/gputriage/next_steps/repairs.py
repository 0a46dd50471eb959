"""The repairs, by finding id and id family: what fixes a finding (reseat, reinstall,
reload), with the versions, GPUs and commands its host names; ``repair`` looks one up."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from gputriage.knowledge.cuda_compat import capability_of, version_key
from gputriage.model import Action, Blame, Finding
from gputriage.next_steps.container_stack import REPAIRS as CONTAINER_STACK
from gputriage.next_steps.container_stack import catalog_next
from gputriage.next_steps.host import Host, bus_ids, dash_i, gpu_scopes, serials, what
from gputriage.next_steps.logs import REPAIRS as LOG_REPAIRS
from gputriage.next_steps.logs import known_warning
from gputriage.next_steps.node_software import REPAIRS as NODE_SOFTWARE
from gputriage.parsers.base import strict_int

__all__ = ["BY_FAMILY", "BY_ID", "Repair", "joined", "repair"]


Repair = Callable[[Finding, Host], str | None]


def _lost_gpu(f: Finding, host: Host) -> str:
    many = len(gpu_scopes(f)) > 1
    do, them = ("do", "them") if many else ("does", "it")
    return (f"power-cycle it (a warm reboot rarely brings back a GPU that fell off the bus) "
            f"and, if {what(f, host)} {do} not come back (lspci -d 10de:; nvidia-smi -L), "
            f"reseat {them} or RMA {them}{serials(f, host)}")


def _missing_boards(f: Finding, host: Host) -> str:
    return ("power-cycle it (a warm reboot rarely brings back GPUs that left the bus) and read "
            "the BMC's event log (ipmitool sel list); if the GPUs do not come back on the PCI "
            "bus (lspci -d 10de:; nvidia-smi -L), reseat the GPUs, riser or baseboard or open "
            "a hardware case")


def _rma(f: Finding, host: Host) -> str:
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


def _remap_check(f: Finding, host: Host) -> str:
    if _retires_pages(f, host):
        return (f"nvidia-smi -q -d PAGE_RETIREMENT{dash_i(f)} should then show no page "
                "pending retirement (Pending Page Blacklist: No); track the retired-page "
                "count, and replace the GPU if it keeps growing or double-bit errors recur")
    return (f"nvidia-smi -q -d ROW_REMAPPER{dash_i(f)} should then show no pending and no "
            "failed remap")


def _memory(f: Finding, host: Host) -> str | None:
    """A memory finding that a reset settles: the check after it."""
    return _remap_check(f, host) if f.action is Action.RESET_GPU else None


def _gsp(f: Finding, host: Host) -> str:
    if f.action is Action.DRAIN_AND_REPAIR:
        return (f"reset {what(f, host)} (nvidia-smi -r{dash_i(f)}) or reboot; if the GSP "
                "errors come back, capture nvidia-bug-report.sh and update the driver or "
                "RMA the GPU")
    return "if the GSP errors come back, capture nvidia-bug-report.sh and drain it for repair"


def _nvlink(f: Finding, host: Host) -> str:
    check = f"nvidia-smi nvlink -s{dash_i(f)}"
    if f.action is Action.RESET_GPU:
        return f"{check} should then show every link up, else drain it for repair"
    return (f"reset {what(f, host)} (nvidia-smi -r{dash_i(f)}); if links stay down or keep "
            f"failing ({check}), reseat it or RMA it{serials(f, host)}")


def _pcie(f: Finding, host: Host) -> str:
    g = what(f, host)
    bus = (bus_ids(f) or [f.scope.pci_bus_id or "BUS"])[0]
    text = (f"reseat {g} and check its riser, cable and slot; lspci -vv -s {bus} | grep "
            "LnkSta should then show the full width and speed")
    if "aer" in f.id or "replay" in f.id:
        text += ", and if errors go on, replace the riser or the card"
    return text


def _ib_port(f: Finding, host: Host) -> str:
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


def _link(f: Finding, host: Host) -> str:
    return (f"check the cable, transceiver and switch port of {what(f, host)} (ip link; "
            "ethtool), and replace what fails")


def _power_brake(f: Finding, host: Host) -> str:
    return ("check its power supplies and the BMC's power events (ipmitool sdr type 'Power "
            "Supply'; ipmitool sel list) and replace the failed PSU or power cable")


def _thermal(f: Finding, host: Host) -> str:
    return (f"check the cooling and power of {what(f, host)}: fans, airflow and inlet "
            f"temperature in the BMC (ipmitool sdr type Temperature; nvidia-smi -q -d "
            f"PERFORMANCE,TEMPERATURE{dash_i(f)})")


def _fabric_manager(f: Finding, host: Host) -> str | None:
    if f.id == "fabric.manager-not-needed":
        return ("disable the unit, it has no NVSwitch to manage here: systemctl disable --now "
                "nvidia-fabricmanager (or mask it)")
    start = ("systemctl enable --now nvidia-fabricmanager; the GPUs' fabric state reads "
             "Completed about a minute later (nvidia-smi -q | grep -A2 Fabric)")
    version = host.version
    if f.action is not Action.FIX_SOFTWARE or not version:
        return (f"start the fabric manager: {start}; journalctl -u nvidia-fabricmanager -b "
                "says why it fails (its version must be the driver's)")
    has = _fm_version(host, version)
    return (f"install nvidia-fabricmanager {version} to match the driver"
            + (f", in place of {has}" if has else "")
            + f" ({_fm_package(host, version)} or your distribution's package), then {start}")


def _fm_version(host: Host, driver: str) -> str | None:
    """The fabric manager's own version from its version-mismatch records."""
    log = host.fact("fm_log")
    for entry in log.having("version-mismatch") if log is not None else ():
        for v in re.findall(r"\b[0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?\b", entry.message):
            if v != driver:
                return str(v)
    return None


def _fm_package(host: Host, version: str) -> str:
    os_name = (host.os or "").lower()
    if any(n in os_name for n in ("red hat", "rhel", "rocky", "alma", "centos", "fedora",
                                  "oracle")):
        return f"dnf install nvidia-fabric-manager-{version}-1"
    branch = version.split(".")[0]
    return f"apt-get install nvidia-fabricmanager-{branch}={version}-1"


def _fabric_state(f: Finding, host: Host) -> str:
    check = f"nvidia-smi -q{dash_i(f)} | grep -A4 Fabric"
    if f.action is Action.RESET_GPU:
        return f"{check} should then read State: Completed, Status: Success"
    if f.action is Action.DRAIN_AND_REPAIR:
        return ("have the NVLink fabric repaired: on an NVSwitch baseboard read journalctl -u "
                "nvidia-fabricmanager -b, restart the service and reset the GPUs; on a "
                "rack-scale NVLink system have the switch trays' fabric manager place this "
                f"tray in a partition; {check} should then read Status: Success (and, with "
                "multi-node NVLink, a non-zero CliqueId and ClusterUUID)")
    return (f"start the fabric manager (systemctl enable --now nvidia-fabricmanager; "
            f"journalctl -u nvidia-fabricmanager -b says why it fails), and {check} reads "
            "State: Completed about a minute later")


def _mig_instances(f: Finding, host: Host) -> str:
    gpu = f" -i {f.scope.gpu_index}" if f.scope.gpu_index is not None else ""
    return (f"create the MIG instances {host.called} is meant to have: nvidia-smi mig{gpu} -lgip "
            f"lists the profiles, nvidia-smi mig{gpu} -cgi PROFILE[,PROFILE...] -C creates GPU "
            "and compute instances (under the GPU operator, set the node's nvidia.com/mig.config"
            " label and let mig-manager apply it), and nvidia-smi -L should then list the MIG "
            f"devices; if whole GPUs are wanted instead, turn MIG off (nvidia-smi{gpu} -mig 0, "
            "then reset the GPU)")


def _acs(f: Finding, host: Host) -> str:
    ports = re.findall(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", f.title)
    each = f"for {', '.join(ports)}" if ports else "for each bridge that shows it"
    return ("turn PCIe ACS off on " + host.called + ": in the BIOS (its ACS / PCIe access "
            "control setting; VT-d/IOMMU off or iommu=pt on the kernel command line where "
            f"nothing needs the isolation), or until the next boot {each}: setpci -s BUS "
            "ECAP_ACS+6.w=0000; sudo lspci -vvv | grep ACSCtl should then show SrcValid- "
            "ReqRedir- CmpltRedir-, and a P2P test (nccl-tests all_reduce_perf over the "
            "node's GPUs) should then finish at full bandwidth")


def _version_mismatch(f: Finding, host: Host) -> str | None:
    module, user = host.driver.kernel_module, host.driver.userspace
    if not (module and user and module != user):
        return None
    return (f"reboot it to load the {user} kernel module the installed userspace expects (or "
            f"reinstall the {module} userspace to match the running module)")


def _not_loaded(f: Finding, host: Host) -> str:
    kernel = f" {host.kernel}" if host.kernel else ""
    version = f" {host.version}" if host.version else ""
    # with the host unknown (a pasted message alone), a driver installed by a container
    # is one of the ways it goes missing after a reboot
    container = ("; a driver that a container installs (GKE's nvidia-driver-installer, the GPU "
                 "operator's driver) is gone after each reboot unless it runs as a DaemonSet"
                 if host.kernel is None else "")
    return (f"load the driver: modprobe nvidia (dmesg | grep -i nvrm says why it fails); if "
            f"no module is built for kernel{kernel}, reinstall the{version} driver for it "
            f"(dkms status lists what is built){container}")


def _permissions(f: Finding, host: Host) -> str:
    return ("let the user or container open the GPUs: ls -l /dev/nvidia* (mode 0666, or a "
            "group the jobs' users are in) and, in a container, the NVIDIA runtime's device "
            "access (--gpus, the device plugin)")


def _module(name: str) -> Repair:
    dash = name.replace("_", "-")

    def repair(f: Finding, host: Host) -> str:
        extra = " (or nvidia-modprobe -u -c=0, which also creates /dev/nvidia-uvm)" \
            if name == "nvidia_uvm" else ""
        return (f"load {name}: modprobe {dash}{extra}, and at every boot: echo {dash} > "
                f"/etc/modules-load.d/{dash}.conf")
    return repair


def _peermem_build(f: Finding, host: Host) -> str:
    kernel = f" {host.kernel}" if host.kernel else ""
    return (f"rebuild nvidia-peermem for the{kernel} kernel against the installed MLNX_OFED / "
            "DOCA-OFED (reinstall the driver after OFED), then modprobe nvidia-peermem")


def _weights(f: Finding, host: Host) -> str:
    if f.id == "weights.local-nvme-short":
        return ("free space on the local NVMe volume (df -h; old checkpoints, images: crictl "
                "rmi --prune) or stage on a larger one, then copy the weights there once")
    return ("stage the weights on local NVMe ahead of the start (a node-local cache or a "
            "pre-pull DaemonSet) and point the loader there; gputriage weights --replicas N "
            "--link RATE shows what it saves")


def _persistence(f: Finding, host: Host) -> str:
    if f.id == "persistence.daemon-inactive" or f.title.endswith("not started again"):
        return ("start the persistence daemon: systemctl enable --now nvidia-persistenced; "
                "journalctl -u nvidia-persistenced -b says why it stopped")
    if f.id == "persistence.daemon-stopped":
        return ("fix the nvidia-persistenced unit (Type=forking with its PIDFile, "
                "TimeoutStartSec), then systemctl restart nvidia-persistenced and check "
                "nvidia-smi -q | grep Persistence shows Enabled")
    return (f"turn persistence on for {what(f, host)}: systemctl enable --now "
            f"nvidia-persistenced (or nvidia-smi -pm 1{dash_i(f)})")


def _hugepages(f: Finding, host: Host) -> str | None:
    asked = _hugepages_asked(host.fact("host_cmdline"))
    for pool in host.fact("host_hugepages") or ():
        want = asked.get(pool.size_kb)
        if want is not None and pool.nr is not None and pool.nr < want:
            path = f"/sys/kernel/mm/hugepages/hugepages-{pool.size_kb}kB/nr_hugepages"
            return (f"reserve the {want} pages of {pool.size_kb} kB the kernel command line "
                    f"asks for (it has {pool.nr}): echo {want} > {path} now (memory may be "
                    "too fragmented to get them all), else reboot to reserve them at boot; "
                    "grep Huge /proc/meminfo shows the pool")
    return None


def _hugepages_asked(cmdline: Any) -> dict[int, int]:
    """Pages asked for on the kernel command line, by page size in kB."""
    sizes = {"2M": 2048, "2048K": 2048, "1G": 1048576, "1048576K": 1048576}
    asked: dict[int, int] = {}
    size = 2048
    params = list(getattr(cmdline, "params", ()) or ())
    for key, value in params:
        if key == "default_hugepagesz" and value:
            size = sizes.get(value.upper(), size)
    for key, value in params:
        if key == "hugepagesz" and value:
            size = sizes.get(value.upper(), size)
        elif key == "hugepages" and (count := strict_int(value, signed=False)) is not None:
            asked[size] = count
    return asked


def _nic_far(f: Finding, host: Host) -> str:
    nic = re.search(r"\bmlx5_[0-9]+\b", f.title) or re.search(r"\bNIC[0-9]+\b", f.title)
    card = nic.group(0) if nic else "the HCA"
    return (f"give the rank on {what(f, host)} a NIC on its own CPU socket (NCCL_IB_HCA, the "
            f"rail mapping) or move {card} to a slot on that socket; nvidia-smi topo -m should "
            "then show PIX, PXB or NODE between them")


def _numa_balancing(f: Finding, host: Host) -> str:
    return ("turn automatic NUMA balancing off: sysctl -w kernel.numa_balancing=0, and keep it "
            "off in /etc/sysctl.d/")


def _reset_blocked(f: Finding, host: Host) -> str:
    return (f"stop what holds {what(f, host)} (nvidia-smi --query-compute-apps=pid,process_name "
            f"--format=csv{dash_i(f)}; fuser -v /dev/nvidia*; systemctl stop nvidia-dcgm "
            f"nvidia-persistenced), then nvidia-smi -r{dash_i(f)}")


def _ecc_off(f: Finding, host: Host) -> str:
    return (f"turn ECC on first (nvidia-smi -e 1{dash_i(f)}) so the reset applies it, and "
            f"nvidia-smi -q -d ECC{dash_i(f)} should then show it Enabled")


def _power_limit(f: Finding, host: Host) -> str:
    return (f"restore the power limit of {what(f, host)} to its default: nvidia-smi -q -d "
            f"POWER{dash_i(f)} shows Default Power Limit, nvidia-smi{dash_i(f)} -pl WATTS "
            "sets it")


def _cooling(f: Finding, host: Host) -> str:
    return (f"improve the cooling of {what(f, host)}: fan speeds, airflow and inlet temperature"
            f" in the BMC (ipmitool sdr type Temperature; nvidia-smi -q -d "
            f"TEMPERATURE{dash_i(f)})")


def _dcgm_rerun(f: Finding, host: Host) -> str:
    """DCGM's diagnostic: the repair is in the finding; the check is a clean rerun."""
    gpu = f" -i {f.scope.gpu_index}" if f.scope.gpu_index is not None else ""
    if f.id == "dcgm.test-failed":
        return (f"run the diagnostic on it again (dcgmi diag -r 3{gpu}) and repair or RMA "
                f"{what(f, host)}{serials(f, host)} if it fails again")
    where = ("on the whole node (sbatch --exclusive, or outside Slurm)"
             if f.blame is Blame.JOB_CONFIG else "on the node")
    return f"rerun dcgmi diag -r 3{gpu} {where}: every test must pass"


def _shm(f: Finding, host: Host) -> str:
    return ("give the job a larger /dev/shm (docker or podman --shm-size, a Kubernetes "
            "emptyDir of medium Memory on /dev/shm) and restart it")


def _nccl_version(f: Finding, host: Host) -> str:
    return ("run one NCCL version on every rank (the same container image or module on every "
            "node) and restart the job")


def _nccl(f: Finding, host: Host) -> str | None:
    """The known-WARN catalog's step for its ids; else a job setting the finding names
    (NCCL_IB_DISABLE=1), or the finding it points to."""
    known = known_warning(f, host)
    if known is not None:
        return known
    text = f"{f.title} {f.explanation}"
    env = re.search(r"\b(NCCL_[A-Z0-9_]{1,40})=(\S{1,40}?)[,;:)]?(?:\s|$)", text)
    if env and f.action is Action.FIX_CONFIG:
        return (f"unset {env.group(1)}={env.group(2)} in the job's environment (its launch "
                "script or container) and rerun it; NCCL_DEBUG=INFO then shows the transport "
                "it picks")
    see = re.search(r"\bsee ((?:nccl|ib|topology)\.[a-z0-9-]+)", f.explanation)
    if see and see.group(1) != f.id:
        return (f"fix what {see.group(1)} names, then rerun the test (all_reduce_perf) to "
                "check the bandwidth")
    return None


def _xid(f: Finding, host: Host) -> str | None:
    from gputriage.knowledge.xid import xid_info

    code = _code(f.id)
    if code in (79,):
        return _lost_gpu(f, host) if f.action is Action.DRAIN_AND_REPAIR else None
    if code in (64, 157) and f.action is Action.DRAIN_AND_REPAIR:
        return _rma(f, host)
    if code in (48, 63, 94, 95, 140, 156, 171) and f.action is Action.RESET_GPU:
        return _remap_check(f, host)
    if code in (119, 120):
        return _gsp(f, host)
    if code in (74, 136, *range(144, 151)):
        return _nvlink(f, host) if f.action in (Action.RESET_GPU, Action.DRAIN_AND_REPAIR) \
            else None
    info = xid_info(code) if code is not None else None
    bucket = info.nvidia_bucket if info is not None else None
    if bucket == "CHECK_MECHANICALS":
        return (f"check {what(f, host)}'s power cables, seating and cooling (ipmitool sel "
                "list shows the BMC's power and thermal events)")
    if bucket == "UPDATE_SWFW":
        return (f"update the driver on {host.called} and the firmware of {what(f, host)} to "
                "matching releases, then run gputriage check again")
    if f.action is Action.RESET_GPU:
        return "if it recurs after the reset, drain it for repair"
    return None


def _sxid(f: Finding, host: Host) -> str | None:
    if f.action is not Action.DRAIN_AND_REPAIR:
        return None
    return ("reboot it (a fatal SXid needs the GPUs and NVSwitches reset together) and, if the "
            "SXid returns, capture nvidia-bug-report.sh and open a case for the NVSwitch "
            "baseboard")


def _code(fid: str) -> int | None:
    return strict_int(fid.rsplit(".", 1)[-1], signed=False)


def _kernel(f: Finding, host: Host) -> str | None:
    """kernel.* findings: the repair of the family each names."""
    name = f.id.split(".", 1)[1]
    if name.startswith("gsp"):
        return _gsp(f, host)
    if name.startswith("pcie"):
        return _pcie(f, host)
    if name == "nvlink-error":
        return _nvlink(f, host)
    if name in ("link-down", "link-flaps", "link-down-at-boot", "netdev-tx-timeout"):
        return _link(f, host)
    if name == "peermem-load-failed":
        return _peermem_build(f, host)
    if name == "host-memory-error":
        return ("replace the failing DIMM: the BMC's event log (ipmitool sel list) or "
                "edac-util -v names it")
    if name == "hardware-error":
        return "read the BMC's event log (ipmitool sel list) and replace the part it names"
    return None


def _expected(f: Finding) -> str | None:
    """What the expectations file states, as the finding's title quotes it."""
    m = re.search(r"\bexpected (\S+(?: or later)?)", f.title)
    return m.group(1).rstrip(",;") if m else None


def _expect_driver(f: Finding, host: Host) -> str:
    want = _expected(f) or "expected"
    return (f"install the {want} driver (kernel module and userspace together, and the "
            f"fabric manager of the same version where NVSwitches are) on {host.called}, then "
            "reboot; nvidia-smi and /proc/driver/nvidia/version should both show it")


def _expect_cuda(f: Finding, host: Host) -> str:
    want = _expected(f) or "the expected version"
    return (f"install a driver that supports CUDA {want} on {host.called}, then reboot; "
            "nvidia-smi shows the CUDA version the driver supports")


def _expect_model(f: Finding, host: Host) -> str:
    return ("compare nvidia-smi -L with the node's record: replace the swapped board, or "
            "correct /etc/gputriage/expect.toml (or the node's pool) if the node is meant "
            "to hold these GPUs")


def _expect_switches(f: Finding, host: Host) -> str:
    return ("power-cycle it; if lspci -d 10de: still lists fewer NVSwitches than "
            "expect.toml states, have the NVSwitch baseboard repaired")


def _expect_ib(f: Finding, host: Host) -> str:
    return ("check the cable, transceiver and switch port of each port it names (ibstat; the "
            "switch's port counters) and replace what fails; ibstat should then show them "
            "Active at the expected rate")


def _expect_mig(f: Finding, host: Host) -> str:
    mode = "1" if "not enabled" in f.title else "0"
    return (f"set MIG mode on the idle GPUs (nvidia-smi -mig {mode}{dash_i(f)}), reset them "
            "(nvidia-smi -r) and find out what changed it")


def _expect_hugepages(f: Finding, host: Host) -> str | None:
    m = re.search(r"of ([0-9]+) kB reserved, expected ([0-9]+)", f.title)
    if not m:
        return None
    size, want = m.groups()
    return (f"reserve {want} pages: echo {want} > /sys/kernel/mm/hugepages/hugepages-{size}kB"
            "/nr_hugepages now, and at boot with hugepages= on the kernel command line")


def _container_devices(f: Finding, host: Host) -> str | None:
    """A container that lost its GPUs (NVML Unknown Error inside it), not the node."""
    if f.blame is not Blame.CONFIG:
        return None
    return ("recreate the container (or pod) so the runtime grants /dev/nvidia* again; then "
            "make access survive `systemctl daemon-reload`: nvidia-ctk system "
            "create-dev-char-symlinks --create-all (and its udev rule), CDI devices, or the "
            "cgroupfs driver")


def _nvml_init(f: Finding, host: Host) -> str | None:
    if "blocked by the operating system" in f.title or f.id == "container.nvml-os-blocked":
        return ("give the process the GPU's control device: a container with the NVIDIA "
                "runtime (--gpus all, or a CDI device); under WSL2 or a GPU-PV VM, the host "
                "driver's files in /usr/lib/wsl/lib with their symlinks (ls -l "
                "/usr/lib/wsl/lib); /usr/lib/wsl/lib/nvidia-smi must then list the GPU")
    return (_container_devices(f, host) if "inside this container" in f.title
            else _version_mismatch(f, host))


def _gpu_hardware(f: Finding, host: Host) -> str:
    """A CUDA error that is the GPU's hardware (214, 220): what to read after the reset."""
    if f.id == "cuda.nvlink-uncorrectable":
        return ("check its links after the reset: nvidia-smi nvlink -s and nvidia-smi nvlink -e "
                "must show every link up and no new errors, else repair the GPU or baseboard")
    return ("check its memory after the reset: nvidia-smi -q -d ECC,ROW_REMAPPER "
            "(PAGE_RETIREMENT on older GPUs) must show no pending remap, no remap failure and "
            "no new uncorrectable error, else RMA the GPU")


def _cuda_node(f: Finding, host: Host) -> str | None:
    """The node's software a CUDA error speaks of."""
    if f.id == "cuda.unknown-error" and f.blame is Blame.NODE:
        return (f"{_module('nvidia_uvm')(f, host)}; if it loads and CUDA still fails, "
                "reinstall the driver (or reboot) and read the kernel log for Xids")
    if f.id == "cuda.driver-mismatch" and f.action is Action.FIX_SOFTWARE:
        return ("install one current driver release completely (its kernel module and "
                "libraries; cat /proc/driver/nvidia/version and nvidia-smi must print the "
                "same version) and reboot; then rerun the program")
    if f.id == "cuda.forward-compat-unsupported" and f.blame is Blame.NODE:
        return ("upgrade the node's driver to one that supports the program's CUDA "
                "(nvidia-smi's CUDA Version must reach the image's), or reboot if it was "
                "just updated in place; then torch.cuda.is_available() in the container")
    return None


def _no_device(f: Finding, host: Host) -> str | None:
    if f.blame is not Blame.JOB_CONFIG:
        return None
    return ("print CUDA_VISIBLE_DEVICES and nvidia-smi -L where the job runs; unset it (or "
            "drop a hard-coded os.environ['CUDA_VISIBLE_DEVICES'] from the script) or set it "
            "to GPUs the machine has; in a container give it its GPUs (--gpus all, a "
            "nvidia.com/gpu request); torch.cuda.device_count() must then be above 0")


def _oom(f: Finding, host: Host) -> str:
    if "other processes hold" in f.title:
        return ("cap each process sharing the GPU (torch.cuda.set_per_process_memory_fraction,"
                " TF memory growth) or give the pods fewer replicas per GPU (or MIG); "
                "nvidia-smi --query-compute-apps=pid,used_memory --format=csv shows who holds "
                "it; resubmit the job")
    if "needs" in f.title:
        return ("run the job on a GPU with more memory than it needs, or shrink the model, "
                "input or batch until it fits; resubmit it")
    return ("lower the job's memory use (batch, sequence length) or free the GPU (nvidia-smi "
            "--query-compute-apps=pid,used_memory --format=csv lists stray processes), and "
            "resubmit it")


def _unreachable(f: Finding, host: Host) -> str:
    return ("find where nvidia-smi ran: on bare metal read the kernel log (dmesg | grep -i "
            "-e xid -e 'fallen off'; Xid 79 on a GPU means drain and repair it); under WSL2 "
            "put every GPU in WDDM mode on the Windows host (nvidia-smi -dm 0) or hide the TCC "
            "one; in a container or VM fix its device access; nvidia-smi must then list the "
            "GPUs")


def _devnodes(f: Finding, host: Host) -> str:
    return ("recreate the device nodes: nvidia-modprobe -c N for each GPU N and "
            "nvidia-modprobe -u -c=0 (or reboot), then ls -l /dev/nvidia* matches the GPUs")


def _stale_cdi(f: Finding, host: Host) -> str:
    return ("if the kernel module and the libraries differ, reboot first; then nvidia-ctk cdi "
            "generate --output=/etc/cdi/nvidia.yaml, restart containerd (or docker), restart "
            "the NVIDIA device plugin's pods, and nvidia-ctk cdi list should list the GPUs")


def _engine_runtime(f: Finding, host: Host) -> str:
    return ("nvidia-ctk runtime configure --runtime=containerd (or docker; --config=$HOME/"
            ".config/docker/daemon.json for a rootless daemon), restart that engine and the "
            "device plugin, then run a CUDA container with --runtime=nvidia")


def _cri_not_loaded(f: Finding, host: Host) -> str:
    """The running containerd does not use the edited file: where the change belongs."""
    for dist in ("k3s", "rke2"):
        if f"{dist} never reads" in f.explanation:
            return (f"put the change in /var/lib/rancher/{dist}/agent/etc/containerd/"
                    f"config.toml.tmpl (a copy of the generated config.toml), restart {dist}, "
                    "then check crictl info shows it")
    return ("make the change in the file containerd is started with (containerd --config; "
            "the GPU operator's toolkit settings, or k3s/RKE2's config.toml.tmpl), restart "
            "it, then check crictl info shows it")


def _cuda_build(f: Finding, host: Host) -> str:
    """A program built for a CUDA, or GPUs, the node's driver does not serve."""
    return ("install the build the explanation names (a wheel or image for the node's CUDA: "
            "nvidia-smi prints it as CUDA Version) or upgrade the driver to the minimum it "
            "names; then torch.cuda.is_available() (or deviceQuery) in the job's environment "
            "should pass before the job is resubmitted")


def _compat_libs(f: Finding, host: Host) -> str:
    return ("take the cuda-compat directory off LD_LIBRARY_PATH and the ld.so configuration "
            "(ldconfig -p | grep libcuda should list the driver's libcuda.so.1 only); after a "
            "driver update, reboot so that the kernel module and the libraries agree")


_K8S_STACK = {  # the GPU stack in the cluster (rules/k8s_stack.py, rules/k8s_operator.py)
    "k8s.plugin-nvml-missing": "give the plugin's pod the NVIDIA runtime as the finding says "
    "for the node's engine, then kubectl delete pod -n <namespace> <device plugin pod>; "
    "kubectl describe node must then list nvidia.com/gpu under Allocatable",
    "k8s.plugin-no-nvml-platform": "deploy a device plugin release that detects Tegra on "
    "the Jetson nodes (and keep the NVML-only DaemonSet off them with a nodeSelector)",
    "k8s.plugin-incompatible-strategy": "make nvidia the default runtime of the node's "
    "containerd (nvidia-ctk runtime configure --runtime=containerd --set-as-default) or set "
    "runtimeClassName: nvidia on the plugin's DaemonSet, then delete the plugin's pod",
    "k8s.plugin-stale-nvml": "delete the device plugin, GFD and dcgm-exporter pods of the "
    "node (kubectl delete pod -n <namespace> --field-selector spec.nodeName=<node>); "
    "nvidia.com/gpu allocatable must then come back to the GPU count",
    "k8s.plugin-unregistered": "delete the device plugin's pod on the node so that it "
    "registers with the kubelet again; kubectl describe node must then list nvidia.com/gpu "
    "under Allocatable",
    "k8s.plugin-devices-unhealthy": "after the GPU is checked on the node (gputriage check), "
    "delete the plugin's pod on that node so that it offers the GPU again",
    "k8s.operator-operand-failing": "fix the driver or validation finding first; the "
    "operands start on their own once /run/nvidia/validations holds driver-ready and "
    "toolkit-ready",
}


def _k8s_stack(f: Finding, host: Host) -> str | None:
    return _K8S_STACK.get(f.id)


_K8S_NODES = {  # nodes and scheduling (rules/k8s_nodes.py, rules/k8s_pending.py)
    "k8s.gpus-not-advertised": "find the device plugin's pod on the node (kubectl get pods "
    "-A -o wide | grep device-plugin), make it run there (tolerations, node selector, the "
    "NVIDIA runtime) and read its log; "
    "kubectl describe node must then list nvidia.com/gpu under Allocatable",
    "k8s.gpus-short": "find the unhealthy GPU in the plugin's log (XidCriticalError), run "
    "gputriage check on the node, then delete the plugin's pod there so that it re-counts",
    "k8s.driver-drift": "finish the driver upgrade on the odd nodes (drain, upgrade, reboot) "
    "so that nvidia.com/cuda.driver-version.full is one value across the pool",
    "k8s.node-condition": "act on the Xid as the finding says; the condition stays True "
    "until the plugin's pod (or the node's GPU agent) is restarted",
    "k8s.pending-insufficient-gpu": "compare Allocatable with Allocated resources in "
    "kubectl describe node <gpu node>: GPUs in use, or not offered",
    "k8s.pending-fragmented": "ask for GPUs per pod that one node can hold, or free a "
    "whole node (bin-packing, a descheduler)",
    "k8s.pending-untolerated-taint": "add the toleration {key, operator: Exists, effect: "
    "NoSchedule} for the GPU pool's taint to the pod template",
    "k8s.pending-selector-mismatch": "select on a label the GPU nodes carry (kubectl get "
    "nodes -L nvidia.com/gpu.product)",
    "k8s.pending-affinity": "pin the pod it must follow to the GPU nodes, or relax the "
    "pod affinity",
    "k8s.pending-unschedulable-node": "uncordon the node (kubectl uncordon <node>) once the "
    "reason it was cordoned is gone",
    "k8s.pending-quota": "free the GPUs finished jobs hold (kubectl describe resourcequota "
    "-n <namespace>), or raise requests.nvidia.com/gpu",
    "k8s.pending-queue": "add the resource to the ClusterQueue's coveredResources with a "
    "nominalQuota in each flavor (kubectl edit clusterqueue <name>)",
    "k8s.gang-unschedulable": "free GPUs for the whole gang, or lower minAvailable and the "
    "replicas to what the pool holds",
}


def _k8s_nodes(f: Finding, host: Host) -> str | None:
    return _K8S_NODES.get(f.id)


_K8S_LINT = {  # workloads and the pool's policy (rules/k8s_lint.py, k8s_pool.py, k8s_herd.py)
    "k8s.lint-gpu-requests": "set nvidia.com/gpu (or the MIG / shared name) in "
    "resources.limits only, as a whole number; kubectl apply --dry-run=server -f <file> "
    "must then pass",
    "k8s.lint-gpu-toleration": "add tolerations: [{key: nvidia.com/gpu, operator: Exists, "
    "effect: NoSchedule}] (or the pool's own taint) to the pod template",
    "k8s.lint-shm": "mount an emptyDir {medium: Memory, sizeLimit: 16Gi} at /dev/shm; df -h "
    "/dev/shm in the pod must then show it",
    "k8s.lint-no-gang": "label the job kueue.x-k8s.io/queue-name: <LocalQueue>, or run it "
    "with Volcano / coscheduling and a PodGroup whose minMember is every pod",
    "k8s.lint-no-pdb": "add a budget: kubectl create poddisruptionbudget <name> -n "
    "<namespace> --selector=<the pods' labels> --max-unavailable=1",
    "k8s.lint-probe-vs-load": "give the container a startupProbe whose failureThreshold x "
    "periodSeconds outlasts the load time the finding states",
    "k8s.lint-hpa-cpu": "scale on DCGM_FI_DEV_GPU_UTIL or the server's queue length (Pods "
    "or External metrics through the Prometheus adapter) instead of cpu",
    "k8s.lint-pool-no-quota": "cap the namespace: kubectl create quota gpu -n <namespace> "
    "--hard=requests.nvidia.com/gpu=<share>, or admit the namespace through a Kueue "
    "ClusterQueue with a GPU quota",
    "k8s.lint-pool-no-priority": "give production's GPU pods a PriorityClass above "
    "research's, and research's class preemptionPolicy: Never",
    "k8s.lint-preempts-production": "lower the research PriorityClass below production's "
    "and set its preemptionPolicy: Never (kubectl edit priorityclass <name> cannot change "
    "value: recreate it)",
    "k8s.lint-weights-herd": "cache the weights once per node (a pre-pull DaemonSet into a "
    "hostPath or local PV, or a ReadOnlyMany PVC) and mount it in place of the download",
    "k8s.lint-pull-always": "pin the image by version or digest with imagePullPolicy: "
    "IfNotPresent and pre-pull it on the GPU nodes",
    "k8s.sharing-time-sliced": "keep training and latency-bound pods off the shared GPUs "
    "(a nodeSelector on nvidia.com/gpu.sharing-strategy=none, or MIG)",
    "k8s.sharing-multi-replica": "ask for 1 of the shared resource, or for GPUs of a pool "
    "or config key that does not share them",
    "k8s.sharing-renamed": "ask for the name the finding gives in resources.limits (kubectl "
    "describe node shows it under Allocatable)",
    "k8s.mig-strategy-config": "give the device plugin and GFD one MIG strategy (the "
    "operator's ClusterPolicy mig.strategy), then restart both DaemonSets",
}


def _k8s_lint(f: Finding, host: Host) -> str | None:
    return _K8S_LINT.get(f.id)


_DCGM = {  # DCGM's own problems and the monitoring stack's (rules/dcgm_*.py)
    "dcgm.install-problem": "install one released DCGM whose dcgmi, nv-hostengine and "
    "plugins are of one version, with the CUDA support package for the driver's CUDA "
    "(datacenter-gpu-manager-4-cudaNN), restart nvidia-dcgm, and dcgmi diag -r 1 must run "
    "every test it lists",
    "dcgm.deployment-cascade": "fix the first check that failed (for persistence mode: "
    "systemctl enable --now nvidia-persistenced, or nvidia-smi -pm 1), then dcgmi diag -r 1 "
    "must pass every deployment check before the node goes back into service",
    "dcgm.diag-mig-blocked": "test these GPUs while MIG can be off: when they are idle, "
    "nvidia-smi -mig 0 (the GPU is reset), dcgmi diag -r 3, then re-create the MIG layout; "
    "a health check should skip dcgmi diag on MIG nodes",
    "dcgm.exporter-nvml-missing": "give the exporter's pod the NVIDIA runtime "
    "(runtimeClassName: nvidia in its DaemonSet or Helm values, or nvidia as the node's "
    "default runtime), then its log must show 'NVML provider successfully initialized' or "
    "'Starting webserver' and curl NODE:9400/metrics must list DCGM_FI_DEV_* samples",
    "dcgm.exporter-profiling-unsupported": "upgrade dcgm-exporter, or remove the "
    "DCGM_FI_PROF_* lines from its counters CSV (its ConfigMap), and restart its pod",
    "dcgm.profiling-busy": "list who holds the performance monitor (another nv-hostengine "
    "or dcgm-exporter: ps -ef | grep -e nv-hostengine -e dcgm-exporter; a profiler: ncu, "
    "nsys, nvprof), keep one host engine (dcgm-exporter -r localhost:5555), then dcgmi dmon "
    "-e 1002,1003 must print values",
    "dcgm.nvswitch-libs-missing": "install libnvidia-nscq of the driver's version where "
    "the host engine runs, restart nvidia-dcgm, and dcgmi discovery -l must list the "
    "NVSwitches",
}


def _dcgm(f: Finding, host: Host) -> str | None:
    return _DCGM.get(f.id)


def _dcgm_service(f: Finding, host: Host) -> str:
    return ("start or restart DCGM's host engine (systemctl restart nvidia-dcgm; in Kubernetes "
            "the GPU operator's nvidia-dcgm pod), upgrading DCGM first if it is older than the "
            "GPUs; dcgmi discovery -l should then list every GPU")


_OWN: dict[str, Repair] = {
    "weights.network-read": _weights, "weights.local-nvme-short": _weights,
    "container.cdi-stale-spec": _stale_cdi, "container.cdi-spec-version": _stale_cdi,
    "container.toolkit-cdi-mode-without-spec": _stale_cdi,
    "container.runtime-nvidia-missing": _engine_runtime,
    "container.runtime-daemon-mismatch": _engine_runtime,
    "container.cri-config-not-loaded": _cri_not_loaded,
    "xid.79": _lost_gpu, "gpu.missing": _lost_gpu, "nvidia-smi.gpu-lost": _lost_gpu,
    "driver.no-gpus-on-pci": _missing_boards, "gpu.count-unexpected": _missing_boards,
    "gpu.board-short": _missing_boards, "host.gpus-gone": _missing_boards,
    "expect.gpu-count": _missing_boards, "expect.gpu-model": _expect_model,
    "expect.driver": _expect_driver, "expect.cuda": _expect_cuda,
    "expect.nvswitch-count": _expect_switches, "expect.pcie": _pcie,
    "expect.infiniband": _expect_ib, "expect.mig": _expect_mig,
    "expect.persistence": _persistence, "expect.hugepages": _expect_hugepages,
    "driver.version-mismatch": _version_mismatch, "driver.not-loaded": _not_loaded,
    "nvidia-smi.cannot-communicate": _not_loaded, "nvidia-smi.no-permission": _permissions,
    "nvidia-smi.nvml-init-failed": _nvml_init,
    "container.nvml-unknown-error": _container_devices,
    "fabric.manager-inactive": _fabric_manager, "fabric.manager-not-needed": _fabric_manager,
    "fabric.state-not-completed": _fabric_state, "mig.no-instances": _mig_instances,
    "pcie.acs-redirect": _acs,
    "module.nvidia-uvm-missing": _module("nvidia_uvm"),
    "module.peermem-missing": _module("nvidia_peermem"),
    "memory.remap-failed": _rma, "memory.remap-exhausting": _rma,
    "memory.retired-pages-limit": _rma, "memory.ecc-disabled": _ecc_off,
    "clocks.hw-power-brake": _power_brake, "clocks.hw-slowdown": _thermal,
    "clocks.hw-thermal-slowdown": _thermal, "clocks.sw-thermal-slowdown": _cooling,
    "thermal.near-limit": _cooling, "power.at-limit": _power_limit,
    "hugepages.not-reserved": _hugepages, "topology.nic-far": _nic_far,
    "topology.numa-balancing": _numa_balancing, "gpu.reset-blocked": _reset_blocked,
    "nccl.shared-mem-exceeded": _shm, "nccl.version-mismatch": _nccl_version,
    "devnode.wrong-number": _devnodes,
    "cuda.driver-too-old": _cuda_build, "cuda.driver-unseen": _cuda_build,
    "cuda.no-kernel-image": _cuda_build,
    "cuda.compat-lib-shadowing": _compat_libs,
    "cuda.forward-compat-unsupported": lambda f, h: _cuda_node(f, h) or _compat_libs(f, h),
    "cuda.ecc-uncorrectable": _gpu_hardware, "cuda.nvlink-uncorrectable": _gpu_hardware,
    "cuda.unknown-error": _cuda_node, "cuda.driver-mismatch": _cuda_node,
    "cuda.no-device": _no_device, "cuda.out-of-memory": _oom,
    "nvidia-smi.gpus-unreachable": _unreachable, "container.nvml-os-blocked": _nvml_init,
    "dcgm.persistence-off": _persistence, "dcgm.cuda-not-ready": _fabric_manager,
    "dcgm.pcie-failed": _pcie, "dcgm.power-marginal": _dcgm_rerun,
    "dcgm.test-failed": _dcgm_rerun,
    "dcgm.internal-error": _dcgm_rerun, "dcgm.deployment-failed": _dcgm_rerun,
    "dcgm.hostengine-unreachable": _dcgm_service, "dcgm.gpus-unseen": _dcgm_service,
    "dcgm.too-old": _dcgm_service, "dcgm.remap-failed": _rma, "dcgm.nvlink-down": _nvlink,
    "dcgm.pcie-replays": _pcie, "dcgm.gpu-count-unexpected": _missing_boards,
}


def joined(*tables: Mapping[str, Repair]) -> dict[str, Repair]:
    """The tables as one; ValueError when two answer one finding id (the later would
    silently win, the earlier be dead text)."""
    out: dict[str, Repair] = {}
    for table in tables:
        twice = sorted(out.keys() & table.keys())
        if twice:
            raise ValueError(f"next steps written twice for {', '.join(twice)}")
        out.update(table)
    return out


BY_ID: dict[str, Repair] = joined(
    NODE_SOFTWARE, LOG_REPAIRS, CONTAINER_STACK,
    {fid: _k8s_stack for fid in _K8S_STACK},
    {fid: _k8s_nodes for fid in _K8S_NODES},
    {fid: _k8s_lint for fid in _K8S_LINT},
    {fid: _dcgm for fid in _DCGM},
    _OWN,
)
BY_FAMILY: tuple[tuple[str, Repair], ...] = (
    ("xid.", _xid), ("sxid.", _sxid), ("kernel.", _kernel), ("nvlink.", _nvlink),
    ("pcie.", _pcie), ("ib.", _ib_port), ("memory.", _memory),
    ("persistence.", _persistence), ("nccl.", _nccl),
    # a message of the job's catalog (knowledge/job_messages.py): its row's next step
    ("cuda.", catalog_next), ("container.", catalog_next),
)


def repair(f: Finding, host: Host) -> str | None:
    """The repair the table knows for this finding's id or family; None: only the
    action's frame applies."""
    fn = BY_ID.get(f.id) or next((r for prefix, r in BY_FAMILY if f.id.startswith(prefix)),
                                 None)
    return fn(f, host) if fn is not None else None
