"""Scenario ``k8s-gpus-gone-after-driver-update`` (Q1): pods no longer get GPUs after a
driver update.

gpu-node-017's driver went from 535 to 550 and was reloaded without a reboot (module and
libraries agree again), but nobody regenerated /etc/cdi/nvidia.yaml (it still mounts the
535 libraries) nor restarted the NVIDIA device plugin: the plugin's NVML event wait fails
with ERROR_UNKNOWN, it marks all eight GPUs unhealthy, the node's allocatable
nvidia.com/gpu drops to 0 (capacity stays 8), and the training job's pods stay Pending on
"Insufficient nvidia.com/gpu". The order of repair: the CDI spec, then the plugin's pod,
and the pods schedule.

:func:`api_objects` gives the cluster as the API would (the replay server and ``gputriage
k8s status`` serve it); the snapshot carries it as ``kubectl get -o json`` with the plugin's
log beside the node's own sources.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from gputriage.scenarios.container_cdi import OLD_DRIVER, mount_error, stale_cdi_after_upgrade
from gputriage.scenarios.model import Host, Outcome, healthy_hgx_h100
from gputriage.scenarios.render_host import LIB_DIR

__all__ = ["api_objects", "device_plugin_log", "gpus_gone_after_driver_update"]

NODE = "gpu-node-017"  # the scenario host's name
NEW_DRIVER = "550.54.15"
PLUGIN_POD = "nvidia-device-plugin-daemonset-7xk2p"
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.14.5"
STARTED = datetime(2025, 3, 4, 9, 12, 1)  # the plugin's pod, before the update
RELOADED = datetime(2025, 3, 11, 14, 7, 52)  # the driver reloaded under it
JOB_PODS = ("trainer-0", "trainer-1")


def _klog(at: datetime, micros: int, where: str, text: str) -> str:
    return f"I{at:%m%d %H:%M:%S}.{micros:06d}       1 {where}] {text}"


def device_plugin_log(host: Host) -> str:
    """``kubectl logs`` of the plugin's pod on the node (klog, v0.14): registered with
    the kubelet a week ago, then NVML's event wait failing after the driver reload."""
    t = STARTED
    lines = [
        _klog(t, 482113, "main.go:178", "Starting FS watcher."),
        _klog(t, 482190, "main.go:185", "Starting OS watcher."),
        _klog(t, 482504, "main.go:200", "Starting Plugins."),
        _klog(t, 482531, "main.go:257", "Loading configuration."),
        _klog(t, 483230, "main.go:279", "Retrieving plugins."),
        _klog(t, 484519, "factory.go:107", "Detected NVML platform: found NVML library"),
        _klog(t, 484567, "factory.go:107", "Detected non-Tegra platform: "
              "/sys/devices/soc0/family file not found"),
        _klog(t, 526711, "server.go:165", "Starting GRPC server for 'nvidia.com/gpu'"),
        _klog(t, 527445, "server.go:117", "Starting to serve 'nvidia.com/gpu' on "
              "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"),
        _klog(t, 530117, "server.go:125", "Registered device plugin for 'nvidia.com/gpu' "
              "with Kubelet"),
        _klog(RELOADED, 118204, "health.go:131",
              "Error waiting for event: ERROR_UNKNOWN; Marking all devices as unhealthy"),
    ]
    for n, g in enumerate(host.gpus):
        lines.append(_klog(RELOADED, 118297 + 41 * n, "server.go:262",
                           f"'nvidia.com/gpu' device marked unhealthy: {g.uuid}"))
    return "\n".join(lines) + "\n"


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(name: str, labels: dict[str, str], capacity: dict[str, str],
          allocatable: dict[str, str], taints: list[dict[str, str]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "spec": {"taints": taints},
            "status": {"capacity": capacity, "allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady",
                                       "message": "kubelet is posting ready status"}],
                       "nodeInfo": {"kubeletVersion": "v1.29.6",
                                    "containerRuntimeVersion": "containerd://1.7.13",
                                    "osImage": "Ubuntu 22.04.4 LTS",
                                    "kernelVersion": "5.15.0-105-generic"}}}


def _pod(name: str, namespace: str, containers: list[dict[str, Any]], status: dict[str, Any],
         node: str | None = None, owner: tuple[str, str] | None = None,
         **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace,
                            "labels": {"app": name.rsplit("-", 1)[0]}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1" if owner[0] != "Job" else
                                    "batch/v1", "kind": owner[0], "name": owner[1],
                                    "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": containers, **({"nodeName": node} if node else {}),
                     **spec}, "status": status}


def _event(n: int, reason: str, message: str, about: tuple[str, str, str], typ: str,
           component: str, first: datetime, last: datetime, count: int) -> dict[str, Any]:
    kind, namespace, name = about
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name}.{17_300_000 + n:x}", "namespace": namespace},
            "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
            "reason": reason, "message": message, "type": typ,
            "source": {"component": component}, "count": count,
            "firstTimestamp": _iso(first), "lastTimestamp": _iso(last)}


def api_objects(host: Host | None = None) -> list[dict[str, Any]]:
    """The cluster as the API gives it: the GPU node (8 GPUs, none allocatable), a CPU
    node, the device plugin's DaemonSet and pod, the job's Pending pods and their
    events."""
    host = host or healthy_hgx_h100(NODE)
    gpus = str(len(host.gpus))
    gfd = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": gpus,
           "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.family": "hopper",
           "nvidia.com/cuda.driver-version.full": NEW_DRIVER,
           "nvidia.com/cuda.runtime-version.full": "12.4", "nvidia.com/mig.strategy": "single",
           "feature.node.kubernetes.io/pci-10de.present": "true"}
    base = {"cpu": "224", "memory": "2113370904Ki", "pods": "110",
            "ephemeral-storage": "3750000000Ki"}
    taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    tolerate = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    gpu_node = _node(host.hostname, gfd, {**base, "nvidia.com/gpu": gpus},
                     {**base, "nvidia.com/gpu": "0"}, taint)
    cpu_node = _node("cpu-node-002", {"node-role.kubernetes.io/worker": ""},
                     {"cpu": "64", "memory": "263842580Ki", "pods": "110"},
                     {"cpu": "63500m", "memory": "261643540Ki", "pods": "110"}, [])
    plugin_ds = {"apiVersion": "apps/v1", "kind": "DaemonSet",
                 "metadata": {"name": "nvidia-device-plugin-daemonset",
                              "namespace": "kube-system"},
                 "spec": {"template": {"spec": {
                     "tolerations": tolerate,
                     "nodeSelector": {"nvidia.com/gpu.present": "true"},
                     "containers": [{"name": "nvidia-device-plugin-ctr",
                                     "image": PLUGIN_IMAGE}]}}},
                 "status": {"desiredNumberScheduled": 1, "currentNumberScheduled": 1,
                            "numberReady": 1, "numberAvailable": 1}}
    plugin_pod = _pod(PLUGIN_POD, "kube-system",
                      [{"name": "nvidia-device-plugin-ctr", "image": PLUGIN_IMAGE}],
                      {"phase": "Running", "startTime": _iso(STARTED),
                       "containerStatuses": [{"name": "nvidia-device-plugin-ctr",
                                              "ready": True, "restartCount": 0,
                                              "state": {"running": {"startedAt":
                                                                    _iso(STARTED)}}}]},
                      node=host.hostname, owner=("DaemonSet", "nvidia-device-plugin-daemonset"),
                      tolerations=tolerate)
    objects = [gpu_node, cpu_node, plugin_ds, plugin_pod]
    asked = {"nvidia.com/gpu": "4", "cpu": "48", "memory": "512Gi"}
    failed = ("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't "
              "match Pod's node affinity/selector. preemption: 0/2 nodes are available: 1 No "
              "preemption victims found for incoming pod, 1 Preemption is not helpful for "
              "scheduling.")
    since = RELOADED + timedelta(minutes=23)
    for n, name in enumerate(JOB_PODS):
        objects.append(_pod(
            name, "ml", [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.03-py3",
                          "resources": {"limits": asked, "requests": asked},
                          "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}],
            {"phase": "Pending",
             "conditions": [{"type": "PodScheduled", "status": "False",
                             "reason": "Unschedulable", "message": failed}]},
            owner=("Job", "trainer"), tolerations=tolerate,
            nodeSelector={"nvidia.com/gpu.present": "true"},
            volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}]))
        objects.append(_event(n, "FailedScheduling", failed, ("Pod", "ml", name), "Warning",
                              "default-scheduler", since, since + timedelta(minutes=41), 9))
    return objects


def gpus_gone_after_driver_update() -> Host:
    """The stale CDI host (driver 535 -> 550, the spec not regenerated), reloaded rather
    than rebooted, with the cluster's view of it: the plugin's log and the API objects."""
    host = stale_cdi_after_upgrade()
    # a notebook that held GPUs before the reload restarts its container: the stale spec
    mount = mount_error(f"/{LIB_DIR}/libcuda.so.{OLD_DRIVER}")
    host.command_overrides["job_log"] = Outcome(
        "Events:\n"
        "  Type     Reason   Age                From     Message\n"
        "  ----     ------   ----               ----     -------\n"
        "  Normal   Pulled   3m (x4 over 31m)   kubelet  Container image \"nvcr.io/nvidia/"
        "pytorch:24.03-py3\" already present on machine\n"
        "  Warning  Failed   3m (x4 over 31m)   kubelet  Error: failed to create containerd "
        f"task: failed to create shim task: {mount}\n"
        "  Warning  BackOff  12s (x131 over 31m)  kubelet  Back-off restarting failed "
        "container notebook in pod notebook-2_ml\n", 0)
    host.command_overrides["device_plugin_log"] = Outcome(device_plugin_log(host), 0)
    doc = {"apiVersion": "v1", "kind": "List", "items": api_objects(host)}
    host.command_overrides["k8s_objects"] = Outcome(json.dumps(doc, indent=2) + "\n", 0)
    return host
