"""The repairs of the findings read from kernel logs and jobs' NCCL output that need
their own words: the driver refusing a GPU at probe time, a failing disk, a contained
ECC error, and NCCL's transport, fabric and network failures. Keyed by finding id
(:data:`BY_ID`), merged into :data:`gputriage.next_steps.repairs.BY_ID`."""

from __future__ import annotations

import re

from gputriage.model import Action, Finding
from gputriage.next_steps.host import Host, bus_ids, dash_i, what

__all__ = ["REPAIRS", "known_warning"]


def _bus_arg(f: Finding) -> str:
    buses = bus_ids(f)
    return buses[0] if len(buses) == 1 else "BUS"


def _bar_unmapped(f: Finding, host: Host) -> str:
    return ("give the GPUs' BAR1 a 64-bit memory window: in a VM set pciPassthru.use64bitMMIO"
            " = TRUE and pciPassthru.64bitMMIOSizeGB to at least the sum of the GPUs' BAR1 "
            "sizes with EFI firmware (VMware), or a large enough 64-bit PCI hole (KVM/OVMF); "
            "on bare metal enable Above 4G Decoding in the BIOS or boot with pci=realloc. "
            f"After the reboot lspci -vv -s {_bus_arg(f)} shows Region 1 with its full size "
            f"and nvidia-smi lists {what(f, host)}")


def _gpu_unsupported(f: Finding, host: Host) -> str:
    m = re.search(r"supported by the (\S+) legacy driver", f.title)
    if m:
        return (f"install the {m.group(1)} legacy driver on {host.called} and pin its packages "
                "so that an upgrade does not replace it (or move the job to newer GPUs); "
                "nvidia-smi should then list the GPU")
    version = f" {host.version}" if host.version else ""
    return (f"install the proprietary kernel module of the{version} driver on {host.called} "
            "instead of the open one (the non-open package flavour: kernel / akmod-nvidia in "
            "place of kernel-open, nvidia-driver-N in place of nvidia-driver-N-open, or the "
            "runfile with -m=kernel), rebuild it for the running kernel and reboot; "
            "cat /proc/driver/nvidia/version should then not say Open Kernel Module and "
            "nvidia-smi should list the GPU")


def _probe_failed(f: Finding, host: Host) -> str:
    return ("read why the driver refused the GPU in the lines before the probe failure "
            "(dmesg | grep -i -e NVRM -e 'probe' ), then fix what they name (an unmapped "
            "BAR, a GPU the module does not support, missing GSP firmware, a device bound to "
            f"vfio-pci or nouveau: lspci -k -s {_bus_arg(f)} shows the driver in use)")


def _storage(f: Finding, host: Host) -> str:
    disks = re.findall(r"\b((?:nvme[0-9]+n[0-9]+|[shv]d[a-z]+|xvd[a-z]+))\b", f.title)
    arrays = re.findall(r"\b(md[0-9]+)\b", f"{f.title} {f.explanation}")
    disk = disks[0] if disks else "DISK"
    check = (f"nvme smart-log /dev/{disk}" if disk.startswith("nvme")
             else f"smartctl -a /dev/{disk}")
    text = (f"check the disk ({check}; Media and Data Integrity Errors, Critical Warning) and "
            f"replace {disk} if it reports errors")
    if arrays:
        text += (f"; rebuild /dev/{arrays[0]} with the new disk (cat /proc/mdstat; mdadm "
                 f"--detail /dev/{arrays[0]})")
    return text + ("; then unmount and repair the filesystem (xfs_repair / fsck) before the "
                   "node takes jobs again" if "XFS" in f.title or "ext4" in f.title else "")


def _contained_ecc(f: Finding, host: Host) -> str | None:
    """Xid 94: the process that touched the bad memory was killed, the GPU serves on."""
    if f.action is not Action.RESTART_JOB:
        return None
    return (f"restart the job that was killed (the GPU contained the error to it; other work "
            f"on {what(f, host)} goes on); when {what(f, host)} is idle, reset it "
            f"(nvidia-smi -r{dash_i(f)}) so that the pending row remap takes effect, and "
            f"nvidia-smi -q -d ROW_REMAPPER{dash_i(f)} should then show no pending remap")


def _app_fault(f: Finding, host: Host) -> str | None:
    """Xid 13 / 31 / 43 of one program that keeps faulting: not a restart."""
    m = re.search(r"one job \(([^)]{1,64})\) crash-looping", f.title)
    if f.action is not Action.RESTART_JOB or m is None:
        return None
    return (f"do not resubmit {m.group(1)} unchanged: it faults the same way every run; look "
            "at the program and the stack it was built for (its code and inputs, "
            "compute-sanitizer, the CUDA and driver versions it expects) before it runs "
            f"again; {what(f, host)} needs nothing")


def _peermem(f: Finding, host: Host) -> str:
    kernel = f" {host.kernel}" if host.kernel else " running"
    if "nv_peer_mem" in f.title:
        return ("rebuild nv_peer_mem (the nvidia-peer-memory DKMS package) against the "
                f"installed NVIDIA driver and MLNX_OFED for the{kernel} kernel, or move to the "
                "driver's own nvidia-peermem (R470 and later); then modprobe it and lsmod | "
                "grep peer should list it")
    return (f"rebuild nvidia-peermem for the{kernel} kernel against the installed MLNX_OFED / "
            "DOCA-OFED (reinstall the driver after OFED), then modprobe nvidia-peermem")


# --- NCCL ---------------------------------------------------------------------------------

_TITLE_HOST = re.compile(r"^(?P<host>[A-Za-z0-9][\w.-]{0,252}): ")


def _node(f: Finding, host: Host) -> str:
    """The host a job's finding is about: the one its NCCL records named (the title's
    prefix), else the host's own name, else the node the log came from."""
    m = _TITLE_HOST.match(f.title)
    if m:
        return m.group("host")
    return host.called


def _drain(f: Finding, node: str) -> str:
    name = node if " " not in node else "<node>"
    return (f"drain {node} (scontrol update nodename={name} state=drain reason=\"gputriage "
            f"{f.id}\", or kubectl cordon {name}) to protect jobs")


def _nvls(f: Finding, host: Host) -> str:
    node = _node(f, host)
    reset = ("systemctl stop nvidia-fabricmanager; nvidia-smi -r (every GPU idle); "
             "systemctl start nvidia-fabricmanager")
    if "MNNVL" in f.title:
        return ("create the IMEX channel on every node (driver parameter "
                "NVreg_CreateImexChannel0=1, or mknod /dev/nvidia-caps-imex-channels/channel0 "
                "with the nvidia-caps-imex-channels major from /proc/devices), expose it to "
                "the job and check the IMEX service (systemctl status nvidia-imex); meanwhile "
                "NCCL_MNNVL_ENABLE=0 lets jobs run without cross-tray NVLink")
    if f.action is Action.FIX_CONFIG:
        return ("if the job runs in a container, give it the fabric capability devices "
                "(/dev/nvidia-caps); on the host, nvidia-smi -q | grep -A2 Fabric must read "
                f"State: Completed, else restart the fabric manager with a GPU reset ({reset}) "
                f"or reboot {node}; meanwhile NCCL_NVLS_ENABLE=0 in the job's environment "
                "lets it run")
    return (f"{_drain(f, node)}, then restore its fabric state: {reset}, or reboot it; "
            "nvidia-smi -q | grep -A2 Fabric should then read State: Completed and "
            "journalctl -u nvidia-fabricmanager show no error. Until then jobs run with "
            "NCCL_NVLS_ENABLE=0")


def _peer(f: Finding, host: Host) -> str:
    peer = f.scope.name or "that peer"
    return (f"resubmit the job without the node at {peer} (getent hosts {peer} names it; "
            "sbatch --exclude=NAME, or keep the pod off it), then have that node checked: "
            "gputriage check on it, its interfaces (ip -br addr) and its firewall; "
            f"{_node(f, host)} needs nothing")


def _ib_completion(f: Finding, host: Host) -> str:
    m = re.search(r"toward peer (\S+)", f.title)
    peer = m.group(1) if m else "the peer"
    if f.action is Action.FIX_CONFIG and "Hyper-V" in f.explanation:
        return ("put the VMs in one VM scale set (or availability set, or cluster) so that they "
                "share an InfiniBand partition: recreate the one created apart (cat "
                "/sys/class/infiniband/*/ports/1/pkeys/0 must show the same key on both), then "
                "rerun the job; meanwhile it can run over Ethernet (NCCL_IB_DISABLE=1) at lower "
                "bandwidth")
    if f.action is Action.FIX_CONFIG:
        return ("disable ACS on the PCIe switches between the GPUs and the HCAs, boot with "
                "iommu=pt, and check nvidia-peermem (lsmod | grep peermem) or DMA-BUF on every "
                "node; NCCL_DEBUG=INFO should then show via NET/IB/N/GDRDMA")
    if f.action is Action.DRAIN_AND_REPAIR:
        return ("check this host's HCA ports and cables (ibstat; the port counters link_downed "
                "and symbol errors; mlxlink on RoCE) and replace the cable, transceiver or "
                "switch port that fails")
    return (f"check whether {peer}'s rank or node died first (its log, gputriage on its "
            "kernel log); if it was alive, read the port counters on both ends (perfquery, or "
            "ethtool -S NETDEV | grep -i -e err -e discard on RoCE) and the switch ports "
            f"between them; resubmit the job, without {peer}'s node if it fails again")


def _tests_failed(f: Finding, host: Host) -> str | None:
    if "system not yet initialized" in f.title:
        return ("start nvidia-fabricmanager at the driver's exact version (systemctl enable "
                "--now nvidia-fabricmanager; journalctl -u nvidia-fabricmanager -b says why it "
                "fails), then rerun the test")
    m = re.search(r"setup on (\S+(?:, \S+)*) only", f.explanation)
    if m and f.action is Action.FIX_CONFIG:
        return (f"give {m.group(1)} an interface setting that fits it: NCCL_SOCKET_IFNAME "
                "listing every host's interface (enp6s0,enp4s0, or a prefix they share) or "
                "/etc/nccl.conf on each host, then rerun the test with NCCL_DEBUG=WARN; the "
                "nodes need nothing")
    if f.action is Action.RESTART_JOB:
        return ("rerun the test with NCCL_DEBUG=WARN (or INFO, with NCCL_DEBUG_SUBSYS=INIT,NET) "
                "to see the step that failed, then act on what that names")
    return None


def known_warning(f: Finding, host: Host) -> str | None:
    """The next step the known-WARN catalog (knowledge/nccl_warnings.csv) gives the
    finding's id, for every row of it; None for an id it has no row of."""
    from gputriage.knowledge.nccl_warnings import row

    found = row(f.id)
    return found.next if found is not None else None


REPAIRS = {
    "nccl.nvls-failed": _nvls,
    "nccl.peer-connect-failed": _peer,
    "nccl.ib-completion-error": _ib_completion,
    "nccl.tests-failed": _tests_failed,
    "driver.bar-unmapped": _bar_unmapped,
    "driver.gpu-unsupported": _gpu_unsupported,
    "driver.probe-failed": _probe_failed,
    "kernel.storage-error": _storage,
    "kernel.peermem-load-failed": _peermem,
    "xid.94": _contained_ecc,
    **dict.fromkeys(("xid.13", "xid.31", "xid.43"), _app_fault),
}

