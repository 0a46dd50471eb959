"""The repairs of the GPU stack's findings in a cluster and in the container stack: the
kubelet's device admission, the device plugin's health check, the operator's driver and
validator, the MIG manager, KAI's quota, nvidia-ctk, and the container toolkit's
messages. :data:`REPAIRS` joins :data:`gputriage.next_steps.repairs.BY_ID`."""

from __future__ import annotations

import re

from gputriage.knowledge.job_messages import message
from gputriage.model import DRAINING_ACTIONS, Finding
from gputriage.next_steps.host import Host, Repair, fixed, serials, what

__all__ = ["REPAIRS", "catalog_next"]


def catalog_next(f: Finding, host: Host) -> str | None:
    """The next step of the catalog's message a finding is (``cuda.401``,
    ``container.selinux-denied``, ``container.nvml-os-blocked`` for ``nvml.os-blocked``):
    the one ``gputriage explain`` gives for the same line. None for a finding that drains
    (its frame takes the node out and back) or that is no message of the catalog."""
    mid = f.id.replace("container.nvml-", "nvml.", 1)
    msg = message(mid)
    if msg is None or f.action in DRAINING_ACTIONS:
        return None
    text = msg.next.rstrip(".")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def _allocate_lost(f: Finding, host: Host) -> str:
    return ("confirm the lost GPU on the node (nvidia-smi shows it lost or ERR!; dmesg | grep "
            "-i xid shows Xid 79), power-cycle it (a warm reboot rarely brings back a GPU that "
            "fell off the bus) and reseat or RMA the GPU if it comes back lost; GPU pods are "
            "admitted again once every GPU answers")


def _inforom(f: Finding, host: Host) -> str:
    return (f"replace {what(f, host)}{serials(f, host)}: capture nvidia-bug-report.sh and open "
            "an RMA (a reboot does not repair a corrupted infoROM); nvidia-smi must then exit 0")


_STEP = re.compile(r"stuck at the (?P<step>\w+) step")


def _validation(f: Finding, host: Host) -> str:
    m = _STEP.search(f.title)
    step = m.group("step") if m else "<step>"
    race = ("set validator.plugin.env WITH_WORKLOAD=false in the ClusterPolicy (kubectl edit "
            "clusterpolicy) or free a GPU, so that the plugin validator needs none")
    advertise = ("make the device plugin run on the node (devicePlugin.enabled=true in the "
                 "ClusterPolicy, no nvidia.com/gpu.deploy.device-plugin=false label) until "
                 "kubectl describe node lists nvidia.com/gpu under Capacity")
    if step == "plugin":
        taken, nothing = "found none free" in f.explanation, "nothing does" in f.explanation
        fix = (f"{advertise}; or, if the device plugin runs and the GPUs are all in use, {race}"
               if taken and nothing else race if taken else advertise)
        return f"{fix}; the validator's plugin-validation then passes"
    return (f"read the stuck step's log: kubectl logs -n <namespace> <validator pod> -c "
            f"{step}-validation; its pod turns Running once the step passes")


_SECURE_BOOT = ("sign the nvidia modules with a key enrolled in the machine's MOK list "
                "(mokutil --import, a reboot to enroll it; DKMS then signs with it), or use "
                "signed precompiled driver packages, or disable Secure Boot; mokutil "
                "--sb-state shows whether it is on")


def _driver_pod(f: Finding, host: Host) -> str:
    secure_boot = "key" in f.title.lower() and "Secure Boot" in f.explanation
    if "nouveau" in f.title.lower():
        return ("blacklist nouveau (blacklist nouveau and options nouveau modeset=0 in "
                "/etc/modprobe.d), rebuild the initramfs (update-initramfs -u, or dracut -f) "
                "and reboot the node; lsmod | grep nouveau must then print nothing and the "
                "driver install succeed")
    if "could not be installed or loaded" in f.title:  # the host's own install
        fix = _SECURE_BOOT if secure_boot else ("fix what the message names (the kernel's "
                                                "headers for the build, nouveau, the module's "
                                                "dependencies)")
        return f"{fix}; modprobe nvidia must then succeed and nvidia-smi list the GPUs"
    if "not ready" not in f.title:
        fix = _SECURE_BOOT if secure_boot else ("fix the node's kernel packages (or the "
                                                "driver's build)")
        return (f"{fix}, then kubectl logs -n <namespace> <driver pod> -c nvidia-driver-ctr "
                "must end with 'Done, now waiting for signal'")
    namespace, _, pod = (f.scope.name or "<driver pod>").rpartition("/")
    return (f"read why it does not start: kubectl logs -n {namespace or '<namespace>'} {pod} -c "
            "nvidia-driver-ctr (and -c k8s-driver-manager), and dmesg | grep -i -e nvrm -e "
            "xid on the node; fix what they name (kernel headers, package mirrors the pod "
            "cannot reach, Secure Boot, nouveau), then the pod turns Ready and the operands "
            "leave Init")


def _unknown_runtime(f: Finding, host: Host) -> str:
    if "RuntimeClass" in f.explanation:
        return ("get the NVIDIA container toolkit configured on the node: with the GPU "
                "operator, fix its driver pod first (its log; blacklist nouveau and reboot if "
                "it cannot unload it), and the toolkit DaemonSet then adds the nvidia handler; "
                "crictl info must list the nvidia runtime before the pod is recreated")
    return ("run nvidia-ctk runtime configure --runtime=docker (or containerd, crio), restart "
            "that engine; docker info (or crictl info) must then list the nvidia runtime")


def _requirement(f: Finding, host: Host) -> str | None:
    if "is served up to" in f.title:  # the GPU is too old for the image's CUDA
        return ("run an image built for the CUDA release the finding names, or move the job "
                "to newer GPUs; docker run --rm --gpus all <image> nvidia-smi must then start")
    return catalog_next(f, host)


REPAIRS: dict[str, Repair] = {
    "k8s.plugin-healthcheck-unsupported": fixed(
        "set DP_DISABLE_HEALTHCHECKS=xids on the device plugin (kubectl set env ds/<plugin "
        "DaemonSet> -n <namespace> DP_DISABLE_HEALTHCHECKS=xids, or the Helm chart's env) or "
        "upgrade it to a release with k8s-device-plugin PR #1562; kubectl describe node must "
        "then list the GPU under Allocatable"),
    "k8s.allocate-gpu-lost": _allocate_lost,
    "k8s.allocate-nvml-failed": fixed(
        "run nvidia-smi and gputriage check on the node: a GPU lost or in ERR! is drained for "
        "repair; with every GPU fine, delete the device plugin's pod there so that it starts "
        "NVML afresh, then resubmit the refused pods"),
    "k8s.allocate-devices-unavailable": fixed(
        "delete the refused pod so that the scheduler places it again; for the GPU operator's "
        "plugin validator, set validator.plugin.env WITH_WORKLOAD=false in the ClusterPolicy "
        "(kubectl edit clusterpolicy) so that it needs no free GPU"),
    "k8s.allocate-unhealthy-devices": fixed(
        "read the device plugin's log on the node (kubectl logs -n <namespace> <plugin pod> | "
        "grep -i -e xid -e unhealthy) and run gputriage check there; once the GPUs are fine, "
        "delete the plugin's pod so that it offers them again"),
    "k8s.allocate-shared-limit": fixed(
        "ask for 1 of the shared resource in the pod's resources.limits, or for a resource of "
        "a pool that does not time-share its GPUs"),
    "k8s.allocate-failed": fixed(
        "read the device plugin's log on the node around the refusal (kubectl logs -n "
        "<namespace> <plugin pod>), fix what it names, then resubmit the pod"),
    "k8s.mig-unknown-device": fixed(
        "update nvidia-mig-parted (the GPU operator's mig-manager image, or HAMi's bundled "
        "copy) to a release that knows this GPU, apply the configuration again, then nvidia-smi "
        "mig -lgi must list the GPU instances"),
    "k8s.mig-config-failed": fixed(
        "read the MIG manager's log (kubectl logs -n <namespace> -l app=nvidia-mig-manager), "
        "stop the GPU clients it names or reboot the node when the MIG mode change is pending, "
        "then set nvidia.com/mig.config again; nvidia.com/mig.config.state must turn success"),
    "k8s.scheduler-quota-exact-fit": fixed(
        "raise the queue's GPU quota by a hundredth (or submit the workload as preemptible) "
        "until a KAI release compares fractional quotas exactly"),
    "k8s.pending-queue-quota": fixed(
        "submit the workload as preemptible (a preemptible priority class), raise the queue's "
        "GPU quota, or wait for the queue's non-preemptible work to finish"),
    "k8s.operator-validation-stuck": _validation,
    "k8s.operator-driver-failed": _driver_pod,
    "driver.container-modules-in-use": fixed(
        "find what holds the nvidia modules (lsmod | grep nvidia; lsof /dev/nvidia*), stop it "
        "(nvidia-persistenced, the device plugin, dcgm-exporter, GPU jobs) and delete the "
        "driver pod, or drain and reboot the node; with a host driver meant to stay, set "
        "driver.enabled=false in the ClusterPolicy"),
    "nvidia-smi.inforom-corrupted": _inforom,
    "container.unknown-runtime": _unknown_runtime,
    "container.cuda-requirement": _requirement,
    "container.mount-proc-driver": fixed(
        "reboot it so that the installed driver's kernel module is the one loaded; cat "
        "/proc/driver/nvidia/version must then match nvidia-smi's driver version"),
    "container.ctk-failed": fixed(
        "fix what nvidia-ctk's error names (nvidia-smi must work on the host first), then run "
        "the same nvidia-ctk command again"),
    "container.ctk-runtime-not-loaded": fixed(
        "nvidia-ctk runtime configure --runtime=docker, then systemctl restart docker; docker "
        "info must then list nvidia among its Runtimes"),
}
