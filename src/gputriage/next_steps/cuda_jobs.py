"""The repairs of what a job printed: CUDA errors, the compatibility of its build with
the node's driver, a container without its GPUs, NVML errors in a container, and the
container stack's host-side hooks; each says whose change it is (the job's settings, its
image, the node's driver). :data:`REPAIRS` joins
:data:`gputriage.next_steps.repairs.BY_ID`."""

from __future__ import annotations

import re

from gputriage.knowledge.job_messages import message
from gputriage.model import DRAINING_ACTIONS, Action, Blame, Finding
from gputriage.next_steps.container_stack import catalog_next
from gputriage.next_steps.host import Host, Repair
from gputriage.next_steps.node_software import (
    fabric_manager,
    module_loaded,
    not_loaded,
    version_mismatch,
)

__all__ = ["REPAIRS"]


def _container_devices(f: Finding, host: Host) -> str | None:
    """A container that lost its GPUs (NVML Unknown Error inside it), not the node; on
    the host itself, the node's driver (a reboot's repair); not told, both."""
    if f.action in DRAINING_ACTIONS:
        return ("first read the kernel log for the GPU fault (journalctl -k | grep -i -e xid -e "
                "'fallen off'): a GPU that fell off the bus needs repair after the reboot")
    if f.blame is Blame.UNKNOWN:
        return ("if it was printed inside a container, recreate the container (or pod) and make "
                "device access survive `systemctl daemon-reload` (nvidia-ctk system "
                "create-dev-char-symlinks --create-all, or CDI); if on the host, run gputriage "
                "check there and act on its Xids")
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
    if "inside this container" in f.title:
        return _container_devices(f, host)
    if "mismatch" in f.title.lower():
        return version_mismatch(f, host)
    return ("read why NVML cannot start: the kernel log's Xids (journalctl -k | grep -i "
            "-e xid -e nvrm) name a GPU to repair, and /proc/driver/nvidia/version against "
            "nvidia-smi's version a driver updated without a reboot; if nvidia-smi ran inside "
            "a container, recreate the container instead")


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
        return (f"{module_loaded('nvidia_uvm')(f, host)}; if it loads and CUDA still fails, "
                "reinstall the driver (or reboot) and read the kernel log for Xids")
    if f.id == "cuda.driver-mismatch" and f.action is Action.FIX_SOFTWARE:
        return ("install one current driver release completely (its kernel module and "
                "libraries; cat /proc/driver/nvidia/version and nvidia-smi must print the "
                "same version) and reboot; then rerun the program")
    if f.id == "cuda.forward-compat-unsupported" and f.blame is Blame.NODE:
        return ("upgrade the node's driver to one that supports the program's CUDA "
                "(nvidia-smi's CUDA Version must reach the image's), or reboot if it was "
                "just updated in place; then torch.cuda.is_available() in the container")
    if f.id == "cuda.forward-compat-unsupported" or f.id == "cuda.driver-mismatch":
        return _compat_libs(f, host)  # the job's compat library
    return ("read the node's kernel log for Xids (journalctl -k | grep -i xid), check that "
            "/dev/nvidia-uvm exists (else modprobe nvidia_uvm) and that nvidia-smi works; "
            "with all three clean, rerun the job and look at the call that failed")


def _no_device(f: Finding, host: Host) -> str | None:
    if f.blame is Blame.NODE:  # on the host itself: its driver
        return not_loaded(f, host)
    if f.blame is Blame.UNKNOWN:
        return ("find where the job ran: in a container, give it its GPUs (--gpus all, a CDI "
                "device, runtimeClassName nvidia, a nvidia.com/gpu request); on the host, run "
                "nvidia-smi and gputriage check, which tell whether the driver is loaded and "
                "the GPUs listed")
    if "asked for a GPU it was not given" in f.title:
        return ("make the job's device selection match what it was given: the ranks per node, "
                "CUDA_VISIBLE_DEVICES and the scheduler's GPU count (torch.cuda.device_count() "
                "where it runs)")
    if "without a GPU" in f.title:
        return ("start the container with --gpus all (--device nvidia.com/gpu=all with CDI, "
                "or a nvidia.com/gpu request in Kubernetes); nvidia-smi -L inside it must then "
                "list the GPUs")
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


def _cuda_build(f: Finding, host: Host) -> str:
    """A program built for a CUDA, or GPUs, the node's driver does not serve, where the
    rule could not name the build (its facts lacked the versions)."""
    from gputriage.rules.cuda_job import CUDA_BUILD_CHECK  # (its module loads the job-log parser)

    return ("compare the program's CUDA (torch.version.cuda, nvcc --version, the image tag) "
            "with the CUDA Version nvidia-smi prints on the node, and install a wheel or "
            "image made for the node's CUDA or upgrade the driver to one that supports the "
            f"program's; {CUDA_BUILD_CHECK}")


def _compat_libs(f: Finding, host: Host) -> str:
    return ("take the cuda-compat directory off LD_LIBRARY_PATH and the ld.so configuration "
            "(ldconfig -p | grep libcuda should list the driver's libcuda.so.1 only); after a "
            "driver update, reboot so that the kernel module and the libraries agree")


def _driver_unseen(f: Finding, host: Host) -> str:
    """Error 35 with a driver that is enough: the process did not get the driver."""
    return ("give the container its GPU (docker run --gpus all, a CDI device, runtimeClassName "
            "nvidia or a nvidia.com/gpu request) and take any libcuda.so copied into the image "
            "off its library path (ldconfig -p | grep libcuda must list only the one the "
            "runtime mounts); nvidia-smi inside it must then list the GPU. The driver needs "
            "no upgrade")


_RETURNED = re.compile(r"returned ([0-9]{1,4})")


def _device_query(f: Finding, host: Host) -> str | None:
    """deviceQuery's error, as the catalog's row for its number says to fix it."""
    m = _RETURNED.search(f.title)
    msg = message(f"cuda.{m.group(1)}") if m else None
    if msg is None:
        return ("read the error deviceQuery printed, run nvidia-smi beside it and gputriage "
                "check on the node, which tell the driver's and the GPUs' state")
    if msg.id == "cuda.802":
        return fabric_manager(f, host)
    text = msg.next.rstrip(".")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def _kernel_fault(f: Finding, host: Host) -> str:
    if f.blame is Blame.NODE:
        return ("rerun the job on another node and act on the Xid finding of this one (its "
                "step drains or resets the GPU)")
    return ("rerun the job with CUDA_LAUNCH_BLOCKING=1, or under compute-sanitizer, to find the "
            f"kernel that faulted, and fix it before resubmitting; {host.called} needs "
            "nothing (no hardware Xid beside it)")


def _hook_driver(f: Finding, host: Host) -> str | None:
    """The toolkit's hook or NVML in a container met the host's driver in two halves."""
    fix = version_mismatch(f, host)
    return (f"{fix}; then regenerate the CDI spec (nvidia-ctk cdi generate) and restart the "
            "container engine and the device plugin" if fix else None)


def _hook_nvml(f: Finding, host: Host) -> str | None:
    """The toolkit's hook could not list the GPUs through NVML on the host."""
    if f.action in DRAINING_ACTIONS:
        return ("first read the kernel log for the GPU fault (journalctl -k | grep -i -e xid -e "
                "'fallen off'; nvidia-smi on the host lists a lost GPU as ERR! or not at all): "
                "a GPU that fell off the bus needs repair after the reboot")
    return catalog_next(f, host)


def _capabilities(f: Finding, host: Host) -> str:
    who = ("the job (or its image)" if f.blame is Blame.JOB_CONFIG
           else "where the containers are started (the image, the pod's env or the runtime's "
           "defaults)")
    return (f"set NVIDIA_DRIVER_CAPABILITIES=compute,utility (or all) in {who} and start the "
            "container again; ldconfig -p | grep libcuda inside it must then list the driver's "
            "libcuda")


def _no_nvidia_gpu(f: Finding, host: Host) -> str:
    return (f"run the job on a node with an NVIDIA GPU, or on the CPU: {host.called} has none, "
            "so no driver or container toolkit change helps")


REPAIRS: dict[str, Repair] = {
    **dict.fromkeys(("container.capabilities-no-compute", "container.no-compute-capability"),
                    _capabilities),
    "container.no-nvidia-gpu": _no_nvidia_gpu,
    "cuda.driver-too-old": _cuda_build, "cuda.no-kernel-image": _cuda_build,
    "cuda.driver-unseen": _driver_unseen,
    "cuda.compat-lib-shadowing": _compat_libs,
    "cuda.forward-compat-unsupported": _cuda_node,
    "cuda.ecc-uncorrectable": _gpu_hardware, "cuda.nvlink-uncorrectable": _gpu_hardware,
    "cuda.unknown-error": _cuda_node, "cuda.driver-mismatch": _cuda_node,
    "cuda.no-device": _no_device, "cuda.out-of-memory": _oom,
    "cuda.device-query-failed": _device_query, "cuda.kernel-fault": _kernel_fault,
    "cuda.fabric-not-ready": fabric_manager,
    "nvidia-smi.gpus-unreachable": _unreachable, "container.nvml-os-blocked": _nvml_init,
    "nvidia-smi.nvml-init-failed": _nvml_init,
    "container.nvml-unknown-error": _container_devices,
    **dict.fromkeys(("container.hook-driver-mismatch", "container.nvml-version-mismatch"),
                    _hook_driver),
    "container.hook-nvml-error": _hook_nvml,
}
