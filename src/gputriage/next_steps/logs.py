"""The repairs of the findings read from kernel logs that need their own words: the
driver refusing a GPU at probe time, a failing disk, nvidia-peermem, and two Xid steps
(a contained ECC error, one program crash-looping) the Xid catalog's steps call. Keyed
by finding id, merged into :data:`gputriage.next_steps.repairs.BY_ID`."""

from __future__ import annotations

import re

from gputriage.model import Action, Finding
from gputriage.next_steps.host import Host, Repair, bus_ids, dash_i, what

__all__ = ["REPAIRS", "contained_ecc", "crash_loop"]


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


def contained_ecc(f: Finding, host: Host) -> str | None:
    """Xid 94: the process that touched the bad memory was killed, the GPU serves on."""
    if f.action is not Action.RESTART_JOB:
        return None
    return (f"restart the job that was killed (the GPU contained the error to it; other work "
            f"on {what(f, host)} goes on); when {what(f, host)} is idle, reset it "
            f"(nvidia-smi -r{dash_i(f)}) so that the pending row remap takes effect, and "
            f"nvidia-smi -q -d ROW_REMAPPER{dash_i(f)} should then show no pending remap")


def crash_loop(f: Finding, host: Host) -> str | None:
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


REPAIRS: dict[str, Repair] = {
    "driver.bar-unmapped": _bar_unmapped,
    "driver.gpu-unsupported": _gpu_unsupported,
    "driver.probe-failed": _probe_failed,
    "kernel.storage-error": _storage,
    "kernel.peermem-load-failed": _peermem,
}
