"""The repairs of the GPU stack in a Kubernetes cluster: the device plugin, the GPU
operator, nodes and scheduling, and the workloads' and pool's policy (rules/k8s_*.py).
Each is written once, by finding id; a step names the node the finding is about where
the input names it. :data:`REPAIRS` joins :data:`gputriage.next_steps.repairs.BY_ID`."""

from __future__ import annotations

import re

from gputriage.knowledge.job_messages import message
from gputriage.model import Finding
from gputriage.next_steps.host import Host, Repair

__all__ = ["REPAIRS"]

_K8S_STACK = {  # the GPU stack in the cluster (rules/k8s_stack.py, rules/k8s_operator.py)
    "k8s.plugin-nvml-missing": "give the plugin's pod the NVIDIA runtime as the finding says "
    "for the node's engine (or, for a driver installed outside the standard paths, set the "
    "plugin's nvidiaDriverRoot to the root that holds it), then kubectl delete pod -n "
    "<namespace> <device plugin pod>; "
    "kubectl describe node must then list nvidia.com/gpu under Allocatable",
    "k8s.plugin-no-nvml-platform": "deploy a device plugin release that detects Tegra on "
    "the Jetson nodes (and keep the NVML-only DaemonSet off them with a nodeSelector)",
    "k8s.plugin-incompatible-strategy": "make nvidia the default runtime of the node's "
    "containerd (nvidia-ctk runtime configure --runtime=containerd --set-as-default) or set "
    "runtimeClassName: nvidia on the plugin's DaemonSet, then delete the plugin's pod",
    "k8s.plugin-unregistered": "delete the device plugin's pod on the node so that it "
    "registers with the kubelet again; kubectl describe node must then list nvidia.com/gpu "
    "under Allocatable",
    "k8s.plugin-devices-unhealthy": "after the GPU is checked on the node (gputriage check), "
    "delete the plugin's pod on that node so that it offers the GPU again",
    "k8s.operator-upgrade": "read the driver pod's log on the node (kubectl logs -n "
    "<namespace> <driver pod> -c nvidia-driver-ctr), fix what it names, then set the node's "
    "label back: kubectl label node <node> nvidia.com/gpu-driver-upgrade-state=upgrade-required "
    "--overwrite",
    "k8s.operator-operand-failing": "fix the driver or validation finding first; the "
    "operands start on their own once /run/nvidia/validations holds driver-ready and "
    "toolkit-ready",
}


_K8S_NODES = {  # nodes and scheduling (rules/k8s_nodes.py, rules/k8s_pending.py)
    "k8s.gpus-not-advertised": "find the device plugin's pod on the node (kubectl get pods "
    "-A -o wide | grep device-plugin), make it run there (tolerations, node selector, the "
    "NVIDIA runtime) and read its log; "
    "kubectl describe node must then list nvidia.com/gpu under Allocatable",
    "k8s.gpus-short": "find the unhealthy GPU in the plugin's log (XidCriticalError), run "
    "gputriage check on the node, then delete the plugin's pod there so that it re-counts",
    "k8s.driver-drift": "finish the driver upgrade on the odd nodes (drain, upgrade, reboot) "
    "so that nvidia.com/cuda.driver-version.full is one value across the pool",
    "k8s.node-condition": "act on the Xid or the DCGM error code as the finding says; the "
    "condition stays set until the plugin's pod (or the node's GPU health agent) clears it",
    # issue 31 part G: a node a health checker cordoned or tainted (rules/k8s_node_marks.py)
    "k8s.node-health-mark": "read the checker's event for the node (kubectl get node <node> "
    "-o jsonpath='{.metadata.annotations.quarantineHealthEvent}', kubectl describe node "
    "<node> for its GPU conditions), act on the DCGM code or Xid it names, then let the "
    "checker clear the quarantine (or kubectl uncordon <node> and remove its taint once "
    "gputriage check on the node is clean)",
    "k8s.pending-insufficient-gpu": "compare Allocatable with Allocated resources in "
    "kubectl describe node <gpu node>: GPUs in use, or not offered",
    "k8s.pending-fragmented": "ask for GPUs per pod that one node can hold, or free a "
    "whole node (bin-packing, a descheduler)",
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
    "k8s.lint-pdb-blocks-drain": "let the budget allow one eviction: kubectl patch pdb "
    "<name> -n <namespace> --type merge -p '{\"spec\":{\"maxUnavailable\":1,"
    "\"minAvailable\":null}}' (with two replicas or more); kubectl get pdb -n <namespace> "
    "must then show ALLOWED DISRUPTIONS 1",
    "k8s.lint-probe-vs-load": "give the container a startupProbe whose failureThreshold x "
    "periodSeconds outlasts the load time the finding states",
    "k8s.lint-hpa-cpu": "scale on DCGM_FI_DEV_GPU_UTIL or the server's queue length (Pods "
    "or External metrics through the Prometheus adapter) instead of cpu",
    "k8s.lint-pool-no-priority": "give production's GPU pods a PriorityClass above "
    "research's, and research's class preemptionPolicy: Never",
    "k8s.lint-weights-herd": "cache the weights once per node (a pre-pull DaemonSet into a "
    "hostPath or local PV, or a ReadOnlyMany PVC) and mount it in place of the download",
    "k8s.lint-pull-always": "pin the image by version or digest with imagePullPolicy: "
    "IfNotPresent and pre-pull it on the GPU nodes",
    "k8s.sharing-time-sliced": "keep training and latency-bound pods off the shared GPUs "
    "(a nodeSelector on nvidia.com/gpu.sharing-strategy=none, or MIG)",
    "k8s.sharing-not-applied": "hand the ConfigMap to the plugin (helm upgrade <release> "
    "nvdp/nvidia-device-plugin --set config.name=<configmap> --set config.default=<key>, or "
    "the ClusterPolicy's devicePlugin.config name and default), label the node with its key "
    "(kubectl label node <node> nvidia.com/device-plugin.config=<key> --overwrite) and "
    "restart the plugin's pod; its log must print the sharing block under 'Running with "
    "config:' and kubectl describe node <node> must show GPUs x replicas under Capacity",
    "k8s.sharing-multi-replica": "ask for 1 of the shared resource, or for GPUs of a pool "
    "or config key that does not share them",
    "k8s.sharing-renamed": "ask for the name the finding gives in resources.limits (kubectl "
    "describe node shows it under Allocatable)",
    "k8s.mig-strategy-config": "give the device plugin and GFD one MIG strategy (the "
    "operator's ClusterPolicy mig.strategy), then restart both DaemonSets",
}


_THE_NODE = re.compile(r"\bthe node\b|<node>")
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


def _node(f: Finding, host: Host) -> str | None:
    """The node a finding is about: its Kubernetes node, else the host the input names."""
    name = f.scope.name if f.scope.kind == "k8s-node" else None
    if name and _NODE_NAME.fullmatch(name):
        return name
    return host.name if host.named else None


def _filled(text: str) -> Repair:
    def repair(f: Finding, host: Host) -> str:
        node = _node(f, host)
        return _THE_NODE.sub(node, text) if node else text
    return repair


_CUDA_CODE = re.compile(r"CUDA error (?P<code>[0-9]{1,4})\b")


def _validator_cuda(f: Finding, host: Host) -> str:
    """The cuda validator's CUDA error: the catalog's step for that error, on the node,
    then the validator's pod recreated so that it validates again."""
    m = _CUDA_CODE.search(f.title)
    msg = message(f"cuda.{m.group('code')}") if m else None
    step = msg.next.rstrip(".") if msg else "fix what the CUDA error names on the node"
    if msg is not None and msg.code in (35, 36):
        # the sample is the operator's own, built for a CUDA every driver of the release's
        # support runs: a driver the validation container did not get, or one too old
        step = ("check that the validation container gets the node's driver: the driver "
                "pod (nvidia-driver-daemonset) Running and its driver validation passed, or "
                "with a driver installed on the host driver.enabled=false and the toolkit's "
                "driver root pointing at it; nvidia-smi in the toolkit container must list "
                "the GPUs and print a driver the operator release supports (R525 or later "
                "for the CUDA 12 samples of recent releases: upgrade an older one)")
    node = _node(f, host)
    where = f" on {node}" if node else ""
    return (f"{step[:1].lower()}{step[1:]}; then delete the cuda validator's pod{where} "
            "(kubectl delete pod -n <namespace> -l app=nvidia-cuda-validator) so that it "
            "runs again, and read its log (kubectl logs -n <namespace> <nvidia-cuda-validator "
            "pod> -c cuda-validation)")


REPAIRS: dict[str, Repair] = {fid: _filled(text) for table in (_K8S_STACK, _K8S_NODES, _K8S_LINT)
                              for fid, text in table.items()}
REPAIRS["k8s.validator-cuda-error"] = _validator_cuda


_TAINT_IN_TITLE = re.compile(r"the taint \{(?P<taint>[^{}]{1,200})\}")


def _toleration(f: Finding, host: Host) -> str:
    """The toleration for the taint the finding names, in the pod template."""
    from gputriage.rules.k8s_pending import toleration_for

    m = _TAINT_IN_TITLE.search(f.title)
    taint = m.group("taint") if m and m.group("taint") != "?" else None
    named = f"the nodes' taint {{{taint}}}" if taint else "the GPU pool's taint"
    return (f"add tolerations: [{toleration_for(taint)}] for {named} to the pod template "
            "(spec.template.spec.tolerations): a node selector does not get past a taint; "
            "kubectl describe node <gpu node> | grep Taints shows the "
            "taint with its effect")


REPAIRS["k8s.pending-untolerated-taint"] = _toleration


_GPU_STACK_POD = re.compile(r"device-plugin|feature-discovery|dcgm-exporter")


def _stale_nvml(f: Finding, host: Host) -> str:
    """The pods that hold the old driver's NVML handles, by name where the cluster shows
    them (a field selector alone would delete every pod of the namespace on the node)."""
    node = _node(f, host)
    cluster = host.fact("cluster")
    pods = [p for p in (cluster.pods if cluster else []) if _GPU_STACK_POD.search(p.name)
            and p.namespace and (node is None or p.node in (None, node))]
    by_ns: dict[str, list[str]] = {}
    for pod in pods:
        by_ns.setdefault(pod.namespace or "", []).append(pod.name)
    where = node or host.called
    if by_ns:
        delete = "; ".join(f"kubectl delete pod -n {ns} {' '.join(names)}"
                           for ns, names in by_ns.items())
        how = f"({delete}; their DaemonSets recreate them)"
    else:
        select = f"spec.nodeName={node}" if node else "spec.nodeName=NODE"
        how = (f"(kubectl get pods -A -o wide --field-selector {select} | grep -E "
               "'device-plugin|feature-discovery|dcgm-exporter', then kubectl delete pod -n "
               "NAMESPACE NAME for each)")
    return (f"delete the device plugin, GFD and dcgm-exporter pods of {where} {how}; "
            "nvidia.com/gpu allocatable must then come back to the GPU count")


_PRIORITY = re.compile(r"PriorityClass (?P<name>\S+) \((?P<value>-?[0-9]{1,10})\)")


def _preempts(f: Finding, host: Host) -> str:
    """Production above research, research unable to preempt: recreated, since neither a
    PriorityClass's value nor its preemptionPolicy can be edited."""
    m = _PRIORITY.search(f.title)
    name = m.group("name") if m else (f.scope.name or "the research PriorityClass")
    above = f" --value={int(m.group('value')) + 1000}" if m else ""
    return (f"give production's GPU workloads a class above {name} (kubectl create "
            f"priorityclass gpu-production{above}, then priorityClassName: gpu-production in "
            f"their pod templates) and recreate {name} with preemptionPolicy: Never (its "
            "value and policy cannot be edited: kubectl get priorityclass "
            f"{name} -o yaml, set preemptionPolicy: Never, kubectl replace --force -f)")


def _no_quota(f: Finding, host: Host) -> str:
    ns = f.scope.name if f.scope.kind == "namespace" and f.scope.name else None
    where = f"-n {ns} " if ns else ""
    return (f"cap the namespace{' ' + ns if ns else ''}: kubectl create quota gpu {where}"
            "--hard=requests.nvidia.com/gpu=N, N the GPUs it may hold while production "
            "runs (the pool's GPUs less production's replicas at their peak), or admit it "
            "through a Kueue ClusterQueue with a GPU quota")


def _labels(cluster: object, kind: str, ns: str, name: str) -> str | None:
    """The selector of a workload as kubectl's --selector takes it."""
    for obj in getattr(cluster, "of_kind", lambda *k: [])(kind):
        if obj.name == name and obj.namespace == ns:
            spec = obj.raw.get("spec") or {}
            labels = (spec.get("selector") or {}).get("matchLabels") or (
                ((spec.get("template") or {}).get("metadata") or {}).get("labels"))
            if isinstance(labels, dict) and labels:
                return ",".join(f"{k}={v}" for k, v in labels.items())
    return None


def _no_pdb(f: Finding, host: Host) -> str:
    ns, _, name = (f.scope.name or "").partition("/")
    if not (ns and name):
        return ("add a PodDisruptionBudget with maxUnavailable: 1 selecting the "
                "workload's pods (kubectl create poddisruptionbudget)")
    selector = _labels(host.fact("cluster"), f.scope.kind.capitalize(), ns, name)
    pick = f"--selector={selector}" if selector else (
        f"--selector=LABELS (the pods' labels: kubectl get {f.scope.kind} -n {ns} {name} "
        "-o jsonpath='{.spec.selector.matchLabels}')")
    return (f"add a budget: kubectl create poddisruptionbudget {name} -n {ns} {pick} "
            f"--max-unavailable=1; kubectl get pdb -n {ns} must then show ALLOWED "
            "DISRUPTIONS 1")


REPAIRS.update({"k8s.plugin-stale-nvml": _stale_nvml, "k8s.lint-preempts-production": _preempts,
                "k8s.lint-pool-no-quota": _no_quota, "k8s.lint-no-pdb": _no_pdb})
