"""The repairs of the software around the GPUs: module builds and installs, the driver
losing its GPUs to another driver, the fabric manager's prerequisites and multicast
state, IMEX, GDRCopy and the RDMA stack; each filled from the facts the finding came
from (the module, its version and kernel, the driver that holds a GPU)."""

from __future__ import annotations

from gputriage.model import Finding
from gputriage.next_steps.host import Host, what

__all__ = ["REPAIRS"]


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


REPAIRS = {
    "driver.module-build-failed": _module_build, "driver.install-failed": _install_failed,
    "driver.no-adapter-probed": _no_adapter,
    "fabric.manager-prerequisite": _umad, "fabric.multicast-state": _multicast,
    "imex.no-local-address": _imex,
    "gdrcopy.open-failed": _gdr_open, "gdrcopy.pin-failed": _gdr_pin,
    "ib.no-devices": _ib_no_devices, "ib.port-unstable": _ib_unstable,
}
