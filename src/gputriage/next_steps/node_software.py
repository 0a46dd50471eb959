"""The repairs of the software around the GPUs: module builds and installs, the driver
losing its GPUs to another driver, the fabric manager's prerequisites and multicast
state, IMEX, GDRCopy and the RDMA stack; each filled from the facts the finding came
from (the module, its version and kernel, the driver that holds a GPU)."""

from __future__ import annotations

import re

from gputriage.model import Action, Finding
from gputriage.next_steps.hardware import fabric_errors
from gputriage.next_steps.host import Host, Repair, dash_i, gpus, what

__all__ = ["REPAIRS", "fabric_manager", "module_loaded", "not_loaded", "version_mismatch"]


def _module_build(f: Finding, host: Host) -> str:
    build = host.fact("module_build")
    module = getattr(build, "module", None) or f.scope.name or "the module"
    version = getattr(build, "version", None)
    kernels = list(getattr(build, "kernels", None) or []) or [host.kernel or "<kernel>"]
    kinds = build.kinds() if build is not None else []
    target = f"{module}/{version}" if version else module
    check = (f"dkms status must then list {target} installed for {kernels[0]}"
             if version else f"modinfo -k {kernels[0]} {module} must then find it")
    if "headers-missing" in kinds:
        return (f"install the kernel headers of {', '.join(kernels)} (the distribution's "
                "headers package for each installed kernel), then rebuild: dkms autoinstall "
                f"-k {kernels[0]}; {check}")
    if "symvers" in kinds or "undefined-symbol" in kinds:
        peer = ("; for GPUDirect RDMA on driver R470 and later use the driver's own "
                "nvidia-peermem (modprobe nvidia-peermem) instead of nv_peer_mem"
                if "peer" in module else "")
        return (f"rebuild {module} against the installed NVIDIA driver and RDMA stack with a "
                f"release that supports kernel {kernels[0]}{peer}; {check}")
    if "compile-error" in kinds:
        return (f"install a release of {module} that supports kernel {kernels[0]} (or boot the "
                f"previous kernel and hold the kernel package until it does); {check}")
    return (f"read the first error of the build log (/var/lib/dkms/{module}/"
            f"{version or '<version>'}/build/make.log) and fix it, then rebuild: dkms "
            f"autoinstall -k {kernels[0]}; {check}")


def _install_failed(f: Finding, host: Host) -> str:
    return ("find why nvidia.ko did not load in the kernel log (dmesg | grep -i -e NVRM -e "
            "nvidia), fix it, then run the installer again; nvidia-smi must then list the GPUs")


def _holders(host: Host) -> list[str]:
    events = host.fact("driver_events") or []
    return sorted({e.details["holder"] for e in events
                   if e.kind == "no-adapter-probed" and e.details.get("holder")})


_BLACKLIST = {"novacore": "nova_core, nova_drm and nova", "nova_core": "nova_core, nova_drm "
              "and nova", "nouveau": "nouveau", "vfio-pci": "vfio-pci's ids for the GPU"}


def _no_adapter(f: Finding, host: Host) -> str:
    holders = _holders(host)
    names = [_BLACKLIST.get(h.lower(), h) for h in holders] or ["nouveau (and, on kernels "
                                                                  "with nova_core, nova_core, "
                                                                  "nova_drm and nova)"]
    bus = f.scope.pci_bus_id or "<bus id>"
    return (f"blacklist {' and '.join(names)} in /etc/modprobe.d (blacklist <module> and "
            "install <module> /bin/false), rebuild the initramfs (update-initramfs -u or "
            f"dracut -f) and reboot; lspci -k -s {bus} must then show 'Kernel driver in use: "
            "nvidia'")


def _umad(f: Finding, host: Host) -> str:
    return ("load ib_umad now (modprobe ib_umad) and at every boot (ib_umad in "
            "/etc/modules-load.d/, or machine.kernel.modules on Talos), then restart the "
            "fabric manager (systemctl restart nvidia-fabricmanager); nvidia-smi -q | grep -A2 "
            "Fabric must then show State: Completed on every GPU")


def _multicast(f: Finding, host: Host) -> str:
    return ("reboot it (or, with no job left on it, stop nvidia-fabricmanager, reset the GPUs "
            "with nvidia-smi -r and start the fabric manager again); an NVLS run (nccl-tests "
            "all_reduce_perf with NCCL_NVLS_ENABLE=1) must then finish")


def _imex(f: Finding, host: Host) -> str:
    return ("list this node's address (ip -br addr; in Kubernetes the ComputeDomain daemon "
            "pod's IP) in /etc/nvidia-imex/nodes_config.cfg on every node of the domain, then "
            "restart the IMEX daemon (systemctl restart nvidia-imex, or delete the daemon pod); "
            "its log must no longer say 'No matching network interface'")


def _gdr_open(f: Finding, host: Host) -> str:
    return ("load gdrdrv with GDRCopy's insmod.sh (or its packaged gdrcopy service), which "
            "also creates /dev/gdrdrv with the module's major number, and make it load at "
            "boot; ls -l /dev/gdrdrv must then show the device and gdrcopy_sanity must pass "
            "without gdr_open errors")


def _gdr_pin(f: Finding, host: Host) -> str:
    driver = f" (driver {host.version})" if host.version else ""
    return (f"install GDRCopy 2.4.2 or later{driver}: its gdrdrv DKMS package and libgdrapi "
            "together, then reload gdrdrv (rmmod gdrdrv; insmod.sh); gdrcopy_sanity must then "
            "pass without gdr_pin_buffer failures")


def _ib_no_devices(f: Finding, host: Host) -> str:
    text = f.title.lower()
    if "providers" in text:
        return ("install the userspace verbs providers in this image or host (rdma-core's "
                "ibverbs-providers on Debian and Ubuntu, libibverbs on RHEL, or the MLNX_OFED "
                "userspace); ibv_devinfo must then list the HCAs")
    if "ib_umad" in text or "ib_uverbs" in text:
        module = "ib_umad" if "ib_umad" in text else "ib_uverbs"
        return (f"load {module} (modprobe {module}) and at every boot (/etc/modules-load.d); "
                "ibstat must then list the HCAs")
    if "firmware" in text:
        return ("update the HCA's firmware (mlxfwmanager --online -u, or the OEM's image for "
                "cards with their own board id: flint -d <device> q shows it) and reboot; "
                "ibstatus must then list the ports")
    return ("find the HCA (lspci -d 15b3:), load its driver (modprobe mlx5_ib, or mlx4_ib) and "
            "ib_uverbs, and read the mlx driver's lines in the kernel log; ibv_devinfo must "
            "then list the HCAs")


def _ib_unstable(f: Finding, host: Host) -> str:
    dev, _, num = (f.scope.name or "").partition("/")
    return (f"watch {what(f, host)} (rdma link show {dev}/{num}; its link_downed counter) and, "
            "if it keeps dropping, reseat or replace its cable or transceiver and have the "
            "switch port checked; it must then stay ACTIVE/LINK_UP")


# "driver version mismatch: kernel module 510.73.05, userspace 515.48.07" (the rule's title)
_VERSION = r"[0-9]{2,3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?"
_MISMATCH = re.compile(rf"kernel module (?P<module>{_VERSION}), userspace "
                       rf"(?P<user>{_VERSION}(?: / {_VERSION})*)")


def fabric_manager(f: Finding, host: Host) -> str | None:
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


def version_mismatch(f: Finding, host: Host) -> str | None:
    module, user = host.driver.kernel_module, host.driver.userspace
    if not (module and user and module != user):
        m = _MISMATCH.search(f.title)
        module, user = (m.group("module"), m.group("user")) if m else (None, None)
    if not (module and user and module != user):
        return ("compare the running module (cat /proc/driver/nvidia/version) with the "
                "installed packages (dpkg -l | grep -i nvidia, or rpm -qa | grep -i nvidia): "
                "if they are of two releases, complete or roll back the upgrade; then reboot "
                "(or, with no GPU client left, reload the nvidia modules); cat "
                "/proc/driver/nvidia/version and nvidia-smi must then print one version")
    if " / " in user:
        return (f"make the NVIDIA packages one release (they are {user}): finish the upgrade "
                f"(apt-get -f install, or dnf distro-sync) or roll it back, then reboot so the "
                "running module is that release; nvidia-smi must then print one version")
    return (f"check that the installed module is {user} (modinfo -F version nvidia), then "
            f"reboot to load it (or reinstall the {module} userspace to match the running "
            "module); nvidia-smi must then print one version")


def not_loaded(f: Finding, host: Host) -> str:
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


def module_loaded(name: str) -> Repair:
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


def _gsp_firmware(f: Finding, host: Host) -> str:
    version = f"the {host.version} driver" if host.version else "the loaded module's driver"
    path = f"/lib/firmware/nvidia/{host.version or 'VERSION'}/"
    return (f"install the firmware of {version} on {host.called} (ls {path} must list "
            "gsp_*.bin; a driver or vGPU manager container must mount its firmware directory "
            "there or name it in /sys/module/firmware_class/parameters/path), then reload "
            f"the nvidia module or reboot; nvidia-smi should then list {gpus(f, host)}")


def _module_load(f: Finding, host: Host) -> str:
    kernel = f" {host.kernel}" if host.kernel else ""
    return ("read why modprobe failed (dmesg | grep -i -e nvidia -e 'module verification'; "
            "mokutil --sb-state for Secure Boot), then rebuild the module for the running "
            f"kernel{kernel} (dkms autoinstall, or reinstall the driver) or sign it for Secure "
            "Boot; lsmod | grep nvidia should then list it")


def _fm_logged(f: Finding, host: Host) -> str | None:
    """The fabric manager's logged errors: a version mismatch is its package's to fix, a
    fatal fabric error the baseboard's."""
    return fabric_manager(f, host) if f.action is Action.FIX_SOFTWARE else fabric_errors(f, host)


def _slurm_node(f: Finding, host: Host) -> str:
    return f.scope.name if f.scope.kind == "slurm-node" and f.scope.name else host.called


def _slurm_gpus_low(f: Finding, host: Host) -> str:
    node = _slurm_node(f, host)
    resume = (f"scontrol update nodename={node} state=resume" if f.scope.name else
              "scontrol update nodename=<node> state=resume")
    return (f"run nvidia-smi -L on {node}: if it lists fewer GPUs than slurm.conf gives it, "
            "a GPU is lost: run gputriage check there (an Xid 79 or a GPU fallen off the bus "
            "means drain and repair it); if it lists them all, make slurmd see them (start it "
            "after the driver and nvidia-persistenced; gres.conf AutoDetect=nvml with a Slurm "
            "built with NVML, or File=/dev/nvidia[0-N]; the MIG layout slurm.conf counts) and "
            f"restart slurmd; once scontrol show node {node} shows its gres/gpu, {resume}")


def _slurm_nvml(f: Finding, host: Host) -> str:
    return ("install a Slurm build with NVML support (its gpu_nvml plugin), or replace "
            "AutoDetect=nvml in gres.conf by the GPUs' device files (Name=gpu "
            "File=/dev/nvidia[0-N]), then restart slurmd; scontrol show node must then list "
            "gres/gpu")


def _slurm_oom(f: Finding, host: Host) -> str:
    return ("raise the job's host-memory request (sbatch --mem, --mem-per-cpu or "
            "--mem-per-gpu; sacct -j JOBID -o JobID,MaxRSS,ReqMem shows what each step used "
            "and asked for) or lower its use (fewer data-loader workers, smaller pinned "
            "buffers), and resubmit it")


REPAIRS: dict[str, Repair] = {
    "slurm.gpu-count-low": _slurm_gpus_low, "slurm.nvml-autodetect-unavailable": _slurm_nvml,
    "slurm.step-oom-killed": _slurm_oom,
    "driver.module-build-failed": _module_build, "driver.install-failed": _install_failed,
    "driver.no-adapter-probed": _no_adapter,
    "fabric.manager-prerequisite": _umad, "fabric.multicast-state": _multicast,
    "imex.no-local-address": _imex,
    "gdrcopy.open-failed": _gdr_open, "gdrcopy.pin-failed": _gdr_pin,
    "ib.no-devices": _ib_no_devices, "ib.port-unstable": _ib_unstable,
    "driver.version-mismatch": version_mismatch, "driver.not-loaded": not_loaded,
    "nvidia-smi.cannot-communicate": not_loaded,
    "driver.gsp-firmware-missing": _gsp_firmware, "driver.module-load-failed": _module_load,
    "fabric.manager-inactive": fabric_manager, "fabric.manager-not-needed": fabric_manager,
    "dcgm.cuda-not-ready": fabric_manager, "fabric.state-not-completed": _fabric_state,
    "fabric.manager-errors": _fm_logged,
    "module.nvidia-uvm-missing": module_loaded("nvidia_uvm"),
    "module.peermem-missing": module_loaded("nvidia_peermem"),
}
