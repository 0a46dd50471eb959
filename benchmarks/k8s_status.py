"""``gputriage k8s status`` over a large replayed cluster, beside kubectl.

Generates a cluster of 5,000 nodes (half of them GPU nodes with GFD labels) and 50,000
pods as the API server stores them (managedFields, labels, owner references, container
statuses), some GPU pods pending with their FailedScheduling events, serves it from
tests/k8s_replay.py in a separate process, then runs, each in a subprocess:

  * ``gputriage k8s status --json`` (targets: < 10 s wall, < 500 MB peak RSS), and the
    read alone (collect.k8s_api.read_cluster: the lists, slimmed, into the Cluster);
  * ``kubectl get nodes,pods -A -o json`` against the same server (the reference: it
    reads the same two big lists and decodes them), when kubectl is installed.

Prints wall time and peak RSS of each (os.wait4: the child's own rusage) and the ratio.
Not a timed test: run it by hand. Usage: python benchmarks/k8s_status.py [--nodes N]
[--pods N] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
T0 = "2024-06-03T08:00:00Z"


def _managed(manager: str) -> list[dict[str, Any]]:
    return [{"manager": manager, "operation": "Update", "apiVersion": "v1", "time": T0,
             "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                          "f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {
                              ".": {}, "f:lastHeartbeatTime": {}, "f:status": {}}}}}}]


def _node(i: int, gpu: bool, rng: random.Random) -> dict[str, Any]:
    name = f"{'gpu' if gpu else 'cpu'}-{i:05d}"
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": f"zone-{i % 3}",
              "node.kubernetes.io/instance-type": "p5.48xlarge" if gpu else "m6i.8xlarge"}
    cap = {"cpu": "192", "memory": "2113389584Ki", "pods": "110",
           "ephemeral-storage": "1843972236Ki"}
    alloc = dict(cap)
    taints = []
    if gpu:
        driver = "550.54.15" if rng.random() > 0.002 else "535.104.05"
        labels.update({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8",
                       "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                       "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.family": "hopper",
                       "nvidia.com/cuda.driver-version.full": driver,
                       "nvidia.com/cuda.runtime-version.full": "12.4",
                       "nvidia.com/mig.strategy": "single",
                       "feature.node.kubernetes.io/pci-10de.present": "true"})
        cap["nvidia.com/gpu"] = "8"
        alloc["nvidia.com/gpu"] = "8" if rng.random() > 0.003 else "7"
        taints = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    conditions = [{"type": t, "status": "False", "lastHeartbeatTime": T0,
                   "lastTransitionTime": T0, "reason": f"KubeletHasNo{t}",
                   "message": f"kubelet has no {t}"}
                  for t in ("MemoryPressure", "DiskPressure", "PIDPressure")]
    conditions.append({"type": "Ready", "status": "True", "lastHeartbeatTime": T0,
                       "lastTransitionTime": T0, "reason": "KubeletReady",
                       "message": "kubelet is posting ready status"})
    images = [{"names": [f"registry.example.com/team/image-{k}@sha256:{k:064x}",
                         f"registry.example.com/team/image-{k}:v{k}"],
               "sizeBytes": 1_000_000_000 + k} for k in range(12)]
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": str(i),
                         "creationTimestamp": T0, "labels": labels,
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                         "volumes.kubernetes.io/controller-managed-"
                                         "attach-detach": "true"},
                         "managedFields": _managed("kubelet")},
            "spec": {"podCIDR": "10.0.0.0/24", "taints": taints} if taints
            else {"podCIDR": "10.0.0.0/24"},
            "status": {"capacity": cap, "allocatable": alloc, "conditions": conditions,
                       "addresses": [{"type": "InternalIP", "address": f"10.1.{i // 250}."
                                                                      f"{i % 250}"}],
                       "nodeInfo": {"kubeletVersion": "v1.30.4", "osImage": "Ubuntu 22.04",
                                    "containerRuntimeVersion": "containerd://1.7.12",
                                    "kernelVersion": "5.15.0-107-generic"},
                       "images": images}}


def _pod(i: int, node: str | None, gpus: int, rng: random.Random) -> dict[str, Any]:
    app = f"app-{i % 700}"
    name = f"{app}-{i:06d}"
    ns = f"team-{i % 40}"
    res = {"limits": {"nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "64Gi"},
           "requests": {"nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "64Gi"}} if gpus \
        else {"requests": {"cpu": "100m", "memory": "128Mi"}}
    container = {"name": "main", "image": f"registry.example.com/{app}:v1", "resources": res,
                 "env": [{"name": "MODE", "value": "serve"},
                         {"name": "POD_IP", "valueFrom": {"fieldRef": {
                             "fieldPath": "status.podIP"}}}],
                 "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                 "terminationMessagePath": "/dev/termination-log",
                 "imagePullPolicy": "IfNotPresent"}
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Always",
                            "schedulerName": "default-scheduler", "priority": 0,
                            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                             "effect": "NoSchedule"}] if gpus else []}
    status: dict[str, Any]
    if node:
        spec["nodeName"] = node
        status = {"phase": "Running", "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": T0}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": "main", "ready": True, "restartCount":
                                   rng.randrange(3), "state": {"running": {"startedAt": T0}},
                                   "image": container["image"], "imageID": "sha256:0",
                                   "containerID": f"containerd://{i:064x}"}],
            "hostIP": "10.1.0.1", "podIP": "10.2.0.1", "startTime": T0, "qosClass": "Burstable"}
    else:
        status = {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "lastTransitionTime": T0, "message": "0/5000 nodes are available: 2500 "
             "Insufficient nvidia.com/gpu, 2500 node(s) had untolerated taint "
             "{nvidia.com/gpu: }."}], "qosClass": "Burstable"}
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{i}",
                         "creationTimestamp": T0, "labels": {"app": app, "team": ns},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": f"{app}-5d8f7", "uid": "u",
                                              "controller": True}],
                         "managedFields": _managed("kube-controller-manager")},
            "spec": spec, "status": status}


def generate(n_nodes: int, n_pods: int, seed: int = 17) -> list[dict[str, Any]]:
    """The cluster's lists, as ``kubectl get --raw`` returns them."""
    rng = random.Random(seed)
    nodes = [_node(i, i % 2 == 0, rng) for i in range(n_nodes)]
    gpu_nodes = [n["metadata"]["name"] for n in nodes if n["metadata"]["name"][:3] == "gpu"]
    cpu_nodes = [n["metadata"]["name"] for n in nodes if n["metadata"]["name"][:3] == "cpu"]
    pods, events = [], []
    for i in range(n_pods):
        if i % 250 == 0:  # pending GPU pods, with their event
            pod = _pod(i, None, 8, rng)
            pods.append(pod)
            meta = pod["metadata"]
            events.append({
                "metadata": {"name": f"{meta['name']}.17d5a", "namespace": meta["namespace"],
                             "managedFields": _managed("default-scheduler")},
                "involvedObject": {"kind": "Pod", "name": meta["name"],
                                   "namespace": meta["namespace"]},
                "reason": "FailedScheduling", "type": "Warning", "count": 12,
                "message": pod["status"]["conditions"][0]["message"],
                "source": {"component": "default-scheduler"}, "lastTimestamp": T0})
        elif i % 10 < 3:
            pods.append(_pod(i, gpu_nodes[i % len(gpu_nodes)], 1, rng))
        else:
            pods.append(_pod(i, cpu_nodes[i % len(cpu_nodes)], 0, rng))
    return [{"kind": "NodeList", "apiVersion": "v1", "items": nodes},
            {"kind": "PodList", "apiVersion": "v1", "items": pods},
            {"kind": "EventList", "apiVersion": "v1", "items": events}]


def _measure(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MB (the child's own, from wait4) and exit status."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.stderr is not None:
        err = proc.stderr.read().decode(errors="replace").strip()
        if err and proc.returncode not in (0, 1, 2):
            print(f"  ({argv[0]} said: {err[:300]})")
    return wall, usage.ru_maxrss / 1024, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--write", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        Path(args.write).write_text(json.dumps(generate(args.nodes, args.pods)))
        return 0
    with tempfile.TemporaryDirectory(prefix="gputriage-k8s-bench-") as tmp:
        start = time.perf_counter()
        objects = Path(tmp) / "objects.json"
        # generated in a child: a child's peak RSS starts from its parent's at fork, so
        # this process stays small for the figures to be the commands' own
        subprocess.run([sys.executable, __file__, "--nodes", str(args.nodes), "--pods",
                        str(args.pods), "--write", str(objects)], check=True)
        size = objects.stat().st_size / 2 ** 20
        print(f"cluster: {args.nodes} nodes, {args.pods} pods ({size:.0f} MB of API JSON), "
              f"generated in {time.perf_counter() - start:.1f} s")
        port_file = Path(tmp) / "url"
        server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "k8s_replay.py"),
                                   str(objects), str(port_file)])
        try:
            for _ in range(600):
                if port_file.exists() and port_file.read_text():
                    break
                time.sleep(0.1)
            url = port_file.read_text()
            return _compare(url, Path(tmp), args.runs)
        finally:
            server.terminate()
            server.wait(timeout=30)


def _compare(url: str, tmp: Path, runs: int) -> int:
    config = tmp / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "u"}}]}))
    ours = [sys.executable, "-m", "gputriage", "k8s", "status", "--json",
            "--kubeconfig", str(config)]
    best = min((_measure(ours) for _ in range(runs)), key=lambda r: r[0])
    print(f"gputriage k8s status --json : {best[0]:6.2f} s  {best[1]:6.0f} MB peak RSS  "
          f"(exit {best[2]})  targets < 10 s, < 500 MB: "
          f"{'met' if best[0] < 10 and best[1] < 500 else 'MISSED'}")
    probe = ("import sys; from gputriage.collect.k8s_api import ReadOptions, read_cluster; "
             f"read_cluster(ReadOptions(kubeconfig={str(config)!r}))")
    read = min((_measure([sys.executable, "-c", probe]) for _ in range(runs)),
               key=lambda r: r[0])
    print(f"  of which the read alone     : {read[0]:6.2f} s  {read[1]:6.0f} MB peak RSS "
          "(the rest is the rules)")
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("kubectl not installed: no reference")
        return 0
    ref = min((_measure([kubectl, "--server", url, "--kubeconfig", os.devnull, "get",
                         "nodes,pods", "-A", "-o", "json"]) for _ in range(runs)),
              key=lambda r: r[0])
    print(f"kubectl get nodes,pods -A -o json: {ref[0]:6.2f} s  {ref[1]:6.0f} MB peak RSS  "
          f"(exit {ref[2]})")
    print(f"ratio gputriage / kubectl: wall {best[0] / ref[0]:.2f}x, "
          f"RSS {best[1] / ref[1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
