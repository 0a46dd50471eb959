"""The NVIDIA device plugin as its log tells it: whether it reached NVML, found GPUs and
registered them with the kubelet, and which devices it took away since (an Xid, an NVML
that went stale under a driver change).

The plugin's failures at start are the node's configuration, never the GPUs: its
container cannot see the driver (the nvidia runtime is not the default of the node's
engine, or the node image has no libnvidia-ml), it runs where no NVML exists (Jetson),
or no GPU reaches its container at all. What fixes them depends on the engine, named
when the log or the cluster says which.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from gputriage.knowledge.xid import xid_info
from gputriage.model import Action, Blame, Evidence, Finding, Scope, Severity, evidence, gpu_scope
from gputriage.parsers.device_plugin_log import DevicePluginLog, DpEntry
from gputriage.parsers.k8s_model import GPU, Cluster, KPod
from gputriage.rules.base import action_for, finding, rule
from gputriage.rules.k8s_common import object_scope

SOURCE = "device_plugin_log"
_PLUGIN_POD = re.compile(r"device-plugin(?!-validator)", re.IGNORECASE)
_OUTCOMES = ("registered", "nvml-init-failed", "platform-non-nvml", "incompatible-strategy",
             "incompatible-platform", "no-devices")
# how to give the plugin's container the driver, per container engine of the node
FIXES = {
    "docker": "set \"default-runtime\": \"nvidia\" in /etc/docker/daemon.json (nvidia-ctk "
              "runtime configure --runtime=docker --set-as-default), restart docker",
    "containerd": "make nvidia containerd's default runtime (nvidia-ctk runtime configure "
                  "--runtime=containerd --set-as-default; systemctl restart containerd) or "
                  "run the plugin with runtimeClassName: nvidia",
    "k3s": "k3s writes its own containerd config: add the nvidia runtime through "
           "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl (k3s adds an 'nvidia' "
           "runtime when it finds the toolkit) and run the plugin with runtimeClassName: nvidia",
    "microk8s": "MicroK8s runs its own containerd, not docker: enable its GPU support "
                "(microk8s enable gpu, which deploys the GPU operator)",
    "cri-o": "nvidia-ctk runtime configure --runtime=crio, restart crio",
    "minikube": "minikube's docker driver passes no GPU into its node: start it with "
                "--gpus all (or use a node with the NVIDIA runtime)",
}
_ENGINE_WORDS = (("microk8s", "microk8s"), ("k3s", "k3s"), ("minikube", "minikube"),
                 ("docker", "docker"), ("cri-o", "cri-o"), ("crio", "cri-o"),
                 ("containerd", "containerd"))


def _lines(entries: list[DpEntry]) -> list[str]:
    return [e.line for e in entries]


def plugin_pods(cluster: Cluster | None) -> list[KPod]:
    """The device plugin's pods the cluster shows."""
    return [p for p in (cluster.pods if cluster else []) if _PLUGIN_POD.search(p.name)]


def crash_looping(pods: list[KPod]) -> list[KPod]:
    """The pods in CrashLoopBackOff (their status, or a container's reason)."""
    return [p for p in pods if "CrashLoop" in (p.status or "")
            or any(c.reason == "CrashLoopBackOff" for c in p.containers)]


def _crashloop(cluster: Cluster | None) -> tuple[str, list[Evidence]]:
    looping = crash_looping(plugin_pods(cluster))
    if not looping:
        return "", []
    names = ", ".join(f"{p.name} ({p.restarts} restarts)" if p.restarts is not None
                      else p.name for p in looping[:4])
    return (f" The plugin's pod is in CrashLoopBackOff: {names}.",
            [evidence("cluster", [ln for p in looping for ln in (p.lines or [p.ref])])])


def engine(log: DevicePluginLog, cluster: Cluster | None) -> str | None:
    """The node's container engine, when the nodes or the paste say which."""
    for node in (cluster.nodes.values() if cluster else []):
        words = f"{node.kubelet_version or ''} {node.runtime_version or ''} {node.os_image or ''}"
        words += " ".join(node.labels)
        for word, name in _ENGINE_WORDS:
            if word in words.lower():
                return name
    hint = (log.tegra_hint or "").lower()
    return next((name for word, name in _ENGINE_WORDS[:3] if word in hint), None)


def _fix(log: DevicePluginLog, cluster: Cluster | None) -> str:
    name = engine(log, cluster)
    if name:
        return f"On this node ({name}): {FIXES[name]}; then delete the plugin's pod."
    return ("Per engine: docker: " + FIXES["docker"] + "; containerd: " + FIXES["containerd"]
            + "; k3s: " + FIXES["k3s"] + "; MicroK8s: " + FIXES["microk8s"]
            + ". Then delete the plugin's pod.")


def _last_outcome(log: DevicePluginLog) -> str | None:
    """What the plugin's last start came to: registered, or how it failed."""
    found = log.having(*_OUTCOMES)
    return found[-1].event if found else None


@rule("k8s.plugin-start", produces=("k8s.plugin-nvml-missing", "k8s.plugin-no-nvml-platform",
                                    "k8s.plugin-incompatible-strategy", "k8s.plugin-registered"))
def plugin_start(device_plugin_log: DevicePluginLog, cluster: Cluster | None = None
                 ) -> Iterator[Finding]:
    """How the device plugin's last start ended: registered with the kubelet (its
    resources and MIG strategy), or unable to reach NVML (the runtime, the node image,
    a Jetson), or with no GPU in its container ("Incompatible strategy", "No devices
    found")."""
    log = device_plugin_log
    outcome = _last_outcome(log)
    if outcome is None or (outcome == "nvml-init-failed" and _stale_reason(log)):
        return
    crash, crash_ev = _crashloop(cluster)
    if outcome == "registered":
        yield _registered(log, cluster)
        return
    failed = log.having("nvml-init-failed", "platform-non-nvml", "incompatible-strategy",
                        "incompatible-platform", "no-devices", "hint-docker-runtime",
                        "hint-toolkit", "hint-not-gpu-node", "platform-tegra")
    ev = [evidence(SOURCE, _lines(failed)), *crash_ev]
    tegra = log.having("platform-tegra")
    if tegra or (log.tegra_hint and not log.having("platform-non-tegra")):
        said = tegra[0].line if tegra else log.tegra_hint
        yield finding(
            "k8s.plugin-no-nvml-platform", Severity.WARNING,
            "device plugin on a Jetson/Tegra board: no NVML there",
            f"The plugin looks for GPUs through NVML, which Jetson (Tegra) boards do not "
            f"have ({said}). This is not a fault of the node or its GPU: use a plugin "
            "release that detects Tegra (it then reads the toolkit's CSV files) with the "
            "container toolkit in CSV mode, and keep the NVML-only plugin off these boards; "
            f"do not drain.{crash}", Action.FIX_SOFTWARE, Blame.CONFIG, evidence=ev)
    elif log.having("nvml-init-failed", "platform-non-nvml"):
        yield _nvml_missing(log, cluster, ev, crash)
    else:
        nested = engine(log, cluster) == "minikube"
        yield finding(
            "k8s.plugin-incompatible-strategy", Severity.WARNING,
            "device plugin finds no GPU in its container (incompatible strategy, no devices)",
            "The plugin found neither NVML nor a Tegra platform inside its container, so it "
            "advertises no nvidia.com/gpu and waits. The GPUs are not at fault: the plugin's "
            "pod does not run with the NVIDIA runtime (the toolkit is not configured as the "
            "default runtime of the node's containerd/CRI-O, or the pod lacks "
            "runtimeClassName: nvidia), or the node is itself a container given no GPU "
            f"(minikube's docker driver, kind).{' ' + FIXES['minikube'] + '.' if nested else ''}"
            f" {_fix(log, cluster)}{crash}", Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)


def _nvml_missing(log: DevicePluginLog, cluster: Cluster | None, ev: list[Evidence],
                  crash: str) -> Finding:
    reasons = [e.detail for e in log.having("nvml-init-failed", "platform-non-nvml") if e.detail]
    reason = reasons[-1] if reasons else "no reason printed"
    image = ""
    if "libnvidia-ml" in reason or log.having("platform-non-tegra"):
        image = (" A node whose image lacks the driver's user-space libraries (libnvidia-ml: "
                 "an EKS GPU AMI release once shipped without them) fails the same way: check "
                 "ls /usr/lib*/libnvidia-ml.so* on the node and move to a fixed image.")
    root = log.driver_root
    said = f"nvidiaDriverRoot is {root}" if root else "the plugin printed no driver root"
    where = (f" The plugin finds the driver's files under its driver root ({said}): a driver "
             "installed elsewhere (under /opt, a host directory of its own, or the GPU "
             "operator's /run/nvidia/driver) needs the plugin's nvidiaDriverRoot (Helm value, "
             "or the operator's driver root) set to the root that holds it, with the library "
             "known to that root's dynamic loader (ldconfig), or a CDI spec that names its "
             "real paths.")
    elsewhere = ""
    if log.having("hint-not-gpu-node"):
        elsewhere = (" If this node has no GPU, keep the DaemonSet off it (a nodeSelector on "
                     "nvidia.com/gpu.present=true or feature.node.kubernetes.io/"
                     "pci-10de.present=true).")
    return finding(
        "k8s.plugin-nvml-missing", Severity.WARNING,
        f"device plugin cannot load NVML ({reason.rstrip('.')})",
        "The plugin's container cannot load or start NVML, so the node advertises no "
        "nvidia.com/gpu. The node's configuration is at fault, not the GPUs: the container "
        f"engine does not start the plugin with the NVIDIA runtime, or the driver's "
        f"library is not where the plugin looks. {_fix(log, cluster)}{where}"
        f"{image}{elsewhere}{crash}", Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)


def _registered(log: DevicePluginLog, cluster: Cluster | None) -> Finding:
    resources = log.resources
    strategy = log.mig_strategy
    counts, lines = [], []
    for node in (cluster.gpu_nodes() if cluster else []):
        alloc = node.gpus("allocatable") or {}
        for name in resources or [GPU]:
            if name in alloc:
                counts.append(f"{node.name}: {alloc[name]:g} {name}")
                lines += node.lines
    fallback = log.having("mig-fallback")
    how = (f" MIG strategy {log.configured_strategy} fell back to none: no GPU has MIG "
           "enabled, which is normal." if fallback and log.configured_strategy
           else f" MIG strategy {strategy}." if strategy else "")
    advertised = f" Advertised: {'; '.join(counts)}." if counts else ""
    ev = [evidence(SOURCE, _lines(log.having("registered", "mig-fallback", "platform-nvml")))]
    if lines:
        ev.append(evidence("cluster", lines))
    return finding(
        "k8s.plugin-registered", Severity.OK,
        f"device plugin registered {', '.join(resources) or 'its resources'} with the kubelet",
        f"The plugin reached NVML and registered with the kubelet.{advertised}{how}",
        Action.NONE, Blame.UNKNOWN, evidence=ev)


def _stale_reason(log: DevicePluginLog) -> str | None:
    """NVML's error that says the driver changed under the plugin."""
    for e in log.having("nvml-init-failed"):
        if e.detail and "mismatch" in e.detail.lower():
            return e.detail
    return None


@rule("k8s.plugin-health", produces=("k8s.plugin-devices-unhealthy", "k8s.plugin-stale-nvml",
                                     "k8s.plugin-unregistered",
                                     "k8s.plugin-healthcheck-unsupported"))
def plugin_health(device_plugin_log: DevicePluginLog, cluster: Cluster | None = None
                  ) -> Iterator[Finding]:
    """Devices the plugin took away: one GPU after a critical Xid (blamed as the Xid
    catalog says), or all of them when NVML's event wait fails after a driver change;
    a GPU NVML cannot watch for Xids, marked unhealthy by an old plugin; and the
    kubelet that lost the plugin's endpoint (a registration not renewed)."""
    log = device_plugin_log
    lost = log.having("endpoint-lost")
    if lost:
        yield _unregistered(lost, log)
    unsupported = log.having("healthcheck-unsupported")
    if unsupported:
        yield _healthcheck_unsupported(unsupported, log)
    by_device: dict[tuple[int, str], list[DpEntry]] = {}
    for e in log.having("xid-unhealthy"):
        if e.xid is not None and e.device:
            by_device.setdefault((e.xid, e.device), []).append(e)
    for (xid, device), entries in by_device.items():
        marked = [e for e in log.having("device-unhealthy") if e.device == device]
        yield _xid_unhealthy(xid, device, entries + marked)
    stale = log.having("event-error", "all-unhealthy")
    reason = _stale_reason(log)
    if stale or reason:
        lines = _lines(stale + log.having("nvml-init-failed") if reason else stale)
        lines += [e.line for e in log.having("device-unhealthy") if not e.xid][:8]
        crash, crash_ev = _crashloop(cluster)
        detail = reason or next((e.detail for e in stale if e.detail), "an NVML error")
        yield finding(
            "k8s.plugin-stale-nvml", Severity.WARNING,
            f"device plugin lost NVML ({detail}): its devices are marked unhealthy",
            "NVML fails under the running plugin, as it does after the driver was updated or "
            "reloaded while the plugin (and GPU feature discovery, dcgm-exporter) kept the old "
            "driver's handles; the plugin marks every GPU unhealthy and never re-checks them, "
            "so the node's allocatable nvidia.com/gpu stays at 0. Restart the plugin, GFD and "
            "dcgm-exporter pods on the node after any driver change (the GPU operator's "
            f"driver upgrade does it), then check nvidia-smi on the node.{crash}",
            Action.FIX_SOFTWARE, Blame.CONFIG,
            evidence=[evidence(SOURCE, lines), *crash_ev])


def _xid_unhealthy(xid: int, device: str, entries: list[DpEntry]) -> Finding:
    info = xid_info(xid)
    meaning = info.meaning if info else "an Xid this catalog does not know"
    scope: Scope = gpu_scope(None, uuid=device) if device.startswith(("GPU-", "MIG-")) \
        else object_scope("device", device)
    ev = [evidence(SOURCE, _lines(entries))]
    title = f"device plugin marked {device} unhealthy after Xid {xid} ({meaning})"
    removed = ("The GPU leaves the node's allocatable nvidia.com/gpu (capacity stays) until "
               "the plugin's pod restarts: the plugin never re-checks an unhealthy device.")
    if info is not None and info.blame.side == "job":
        return finding(
            "k8s.plugin-devices-unhealthy", Severity.WARNING, title,
            f"Xid {xid} is the application's fault, not the GPU's: {info.explanation} "
            f"{removed} Recent plugins ignore application Xids (13, 31, 43, 45, 68, 109); "
            "this one counted it (an old release, or DP_ENABLE_HEALTHCHECKS). Restart the "
            "plugin's pod to give the GPU back and look at the job.",
            Action.RESTART_JOB, info.blame, scope, ev)
    severity = info.severity if info else Severity.WARNING
    action = action_for(severity, info.action if info else Action.DRAIN_AND_REPAIR)
    blame = info.blame if info else Blame.UNKNOWN
    if severity is Severity.CRITICAL and action is Action.NONE:
        action = Action.DRAIN_AND_REPAIR
    return finding(
        "k8s.plugin-devices-unhealthy", severity, title,
        f"{info.explanation if info else 'Look the Xid up in the kernel log of the node.'} "
        f"{removed} Run gputriage check on the node before giving the GPU back.",
        action, blame, scope, ev)


def _unregistered(lost: list[DpEntry], log: DevicePluginLog) -> Finding:
    """The kubelet has no endpoint for a device plugin's resource."""
    renewed = log.having("registered")
    after = bool(renewed) and log.entries.index(renewed[-1]) > log.entries.index(lost[-1])
    return finding(
        "k8s.plugin-unregistered", Severity.INFO if after else Severity.WARNING,
        "the kubelet lost the device plugin's endpoint"
        + (" (the plugin registered again after it)" if after else ""),
        "The kubelet keeps an endpoint per resource a device plugin registers; 'endpoint "
        "not found in cache for a registered resource' means the plugin's registration is "
        "gone: the kubelet restarted and recreated kubelet.sock (or the plugin's socket was "
        "removed) and the plugin did not register again. The node then offers no "
        "nvidia.com/gpu and containers that were given a GPU fail to start "
        "(CreateContainerConfigError). Restart the device plugin's pod on the node; "
        "kubectl describe node must then list nvidia.com/gpu under Allocatable. Not the "
        "GPUs' fault.", Action.NONE if after else Action.FIX_CONFIG, Blame.CONFIG,
        evidence=[evidence(SOURCE, [e.line for e in lost])])


def _healthcheck_unsupported(entries: list[DpEntry], log: DevicePluginLog) -> Finding:
    """GPUs NVML cannot register for Xid events: not faulty, but an old plugin took them
    away (its "Marking ... unhealthy" lines say so)."""
    devices = list(dict.fromkeys(e.device for e in entries if e.device))
    marked = [e for e in log.having("device-unhealthy") if e.device in devices
              or "not supported" in e.message.lower()]
    removed = marked or [e for e in entries if "unhealthy" in e.message.lower()]
    scope: Scope = gpu_scope(None, uuid=devices[0]) if devices and devices[0].startswith(
        "GPU-") else Scope()
    names = ", ".join(devices[:4]) or "a GPU"
    crashed = any("fatal: nvml" in e.message.lower() for e in entries)
    fate = ("The plugin (a 1.x release) exits on it ('Fatal: nvml: Not Supported', then a "
            "panic), so its pod restarts in a loop and the node offers no nvidia.com/gpu."
            if crashed else
            "The plugin then marked it unhealthy, so the node offers one GPU fewer "
            "(allocatable nvidia.com/gpu 0 on a one-GPU node) and GPU pods stay Pending with "
            "'Insufficient nvidia.com/gpu'." if removed else
            "Plugins before the fix of December 2025 (k8s-device-plugin PR #1562) then mark "
            "the GPU unhealthy and the node stops offering it.")
    return finding(
        "k8s.plugin-healthcheck-unsupported", Severity.WARNING,
        f"device plugin cannot watch {names} for Xid events (GPU too old for its health "
        "check)" + (": the plugin exits" if crashed else ": marked unhealthy" if removed
                    else ""),
        "NVML cannot register this GPU for its critical-error events (NOT_SUPPORTED): older "
        f"and consumer GPUs (Kepler GeForce cards among them) lack it. {fate} The GPU is "
        "not faulty and the node needs no repair: upgrade the device plugin to a release "
        "that skips such GPUs' health check, or set DP_DISABLE_HEALTHCHECKS=xids in the "
        "plugin's environment, then restart its pod.",
        Action.FIX_SOFTWARE, Blame.CONFIG, scope,
        [evidence(SOURCE, _lines(entries + [e for e in removed if e not in entries]))])
