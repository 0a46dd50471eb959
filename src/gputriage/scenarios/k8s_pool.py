"""Scenarios ``k8s-shared-pool`` (Q5) and ``k8s-weights-herd`` (Q4): a GPU pool's
manifests, as ``helm template`` prints them, pasted next to the healthy node.

``k8s_shared_pool_objects()`` and ``k8s_weights_herd_objects()`` give the objects (for
the replay server and ``gputriage k8s lint``); :func:`manifests` writes them as YAML.
"""

from __future__ import annotations

from typing import Any

from gputriage.scenarios.model import Host, Outcome, healthy_hgx_h100

__all__ = ["k8s_shared_pool", "k8s_shared_pool_objects", "k8s_weights_herd",
           "k8s_weights_herd_objects", "manifests"]

PRODUCT = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
CHART = "gpu-pool"


def _meta(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    return meta


def _shm(size: str = "32Gi") -> dict[str, Any]:
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def _pod_spec(containers: list[dict[str, Any]], volumes: list[dict[str, Any]],
              **extra: Any) -> dict[str, Any]:
    return {"nodeSelector": dict(PRODUCT), "tolerations": list(GPU_TOLERATION),
            **extra, "containers": containers, "volumes": volumes}


def _trainer(name: str, gpus: int, script: str) -> dict[str, Any]:
    return {"name": name, "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "imagePullPolicy": "IfNotPresent",
            "command": ["torchrun", f"--nproc_per_node={gpus}", script],
            "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "48", "memory": "512Gi"}},
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}


def k8s_shared_pool_objects() -> list[dict[str, Any]]:
    """Production inference and research training on the same H100 nodes: research has
    no GPU quota and a PriorityClass above production's (which has none), production's
    Deployment no PodDisruptionBudget and an autoscaler on CPU."""
    serve = {
        "name": "vllm", "image": "vllm/vllm-openai:v0.6.3", "imagePullPolicy": "IfNotPresent",
        "args": ["--model", "/models/Llama-3.1-8B-Instruct", "--port", "8000"],
        "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "8", "memory": "64Gi"}},
        "startupProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 10,
                         "failureThreshold": 30},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 5},
        "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"}]}
    labels = {"app": "llm-serving"}
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": _meta("prod-inference", env="production")},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta("research", env="research")},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
         "metadata": _meta("research-urgent"), "value": 1000000, "globalDefault": False,
         "description": "Deadline runs of the research team"},
        {"apiVersion": "v1", "kind": "ResourceQuota",
         "metadata": _meta("research-compute", "research"),
         "spec": {"hard": {"requests.cpu": "512", "requests.memory": "4Ti", "pods": "200"}}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": _meta("llm-serving", "prod-inference", **labels),
         "spec": {"replicas": 4, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": _pod_spec(
                      [serve], [{"name": "models", "persistentVolumeClaim": {
                          "claimName": "models-rox", "readOnly": True}}, _shm("8Gi")])}}},
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
         "metadata": _meta("llm-serving", "prod-inference"),
         "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": "llm-serving"},
                  "minReplicas": 4, "maxReplicas": 8,
                  "metrics": [{"type": "Resource", "resource": {
                      "name": "cpu", "target": {"type": "Utilization",
                                                "averageUtilization": 70}}}]}},
        {"apiVersion": "batch/v1", "kind": "Job",
         "metadata": _meta("llama-finetune", "research", team="nlp"),
         "spec": {"backoffLimit": 2, "template": {"metadata": {"labels": {"team": "nlp"}},
                  "spec": _pod_spec([_trainer("finetune", 8, "finetune.py")], [_shm()],
                                    priorityClassName="research-urgent",
                                    restartPolicy="Never")}}},
        {"apiVersion": "batch/v1", "kind": "Job",
         "metadata": _meta("sweep-lr-3e-4", "research", team="vision"),
         "spec": {"template": {"spec": _pod_spec(
             [{**_trainer("sweep", 1, "sweep.py"), "command": ["python", "sweep.py"]}],
             [_shm("4Gi")], priorityClassName="research-urgent", restartPolicy="Never")}}},
    ]


def k8s_weights_herd_objects() -> list[dict[str, Any]]:
    """A 70B model served by 8 replicas (an autoscaler may take it to 16), each
    downloading the weights from the Hub in an init container, on an image pulled
    Always from :latest, with a startup probe shorter than the model's loading."""
    labels = {"app": "llama-70b"}
    init = {"name": "fetch-weights", "image": "python:3.11-slim",
            "command": ["sh", "-c", "pip install -q huggingface_hub[cli] && "
                        "huggingface-cli download meta-llama/Meta-Llama-3-70B-Instruct "
                        "--local-dir /models/llama-3-70b --exclude '*.pth'"],
            "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
                "name": "hf-token", "key": "token"}}}],
            "volumeMounts": [{"name": "models", "mountPath": "/models"}]}
    serve = {
        "name": "vllm", "image": "vllm/vllm-openai:latest", "imagePullPolicy": "Always",
        "args": ["--model", "/models/llama-3-70b", "--tensor-parallel-size", "4",
                 "--port", "8000"],
        "resources": {"limits": {"nvidia.com/gpu": 4, "cpu": "32", "memory": "320Gi"}},
        "startupProbe": {"httpGet": {"path": "/health", "port": 8000},
                         "initialDelaySeconds": 0, "periodSeconds": 10,
                         "failureThreshold": 6},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 10},
        "volumeMounts": [{"name": "models", "mountPath": "/models"},
                         {"name": "dshm", "mountPath": "/dev/shm"}]}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta("llm", env="production")},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": _meta("llama-70b", "llm", **labels),
         "spec": {"replicas": 8, "selector": {"matchLabels": labels},
                  "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
                  "template": {"metadata": {"labels": labels}, "spec": _pod_spec(
                      [serve], [{"name": "models", "emptyDir": {"sizeLimit": "200Gi"}},
                                _shm()], initContainers=[init])}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": _meta("llama-70b", "llm"),
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}},
        {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
         "metadata": _meta("llama-70b", "llm"),
         "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": "llama-70b"},
                  "minReplicas": 8, "maxReplicas": 16,
                  "metrics": [{"type": "Pods", "pods": {
                      "metric": {"name": "vllm:num_requests_waiting"},
                      "target": {"type": "AverageValue", "averageValue": "10"}}}]}},
    ]


def manifests(objects: list[dict[str, Any]], chart: str = CHART) -> str:
    """The objects as ``helm template`` prints them: one document each, after a
    ``# Source:`` comment naming its template."""
    import yaml  # type: ignore[import-untyped]

    docs = []
    for obj in objects:
        template = f"{chart}/templates/{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        docs.append(f"---\n# Source: {template}\n"
                    + yaml.safe_dump(obj, sort_keys=False, default_flow_style=False))
    return "".join(docs)


def _with(objects: list[dict[str, Any]]) -> Host:
    host = healthy_hgx_h100()
    host.command_overrides["k8s_objects"] = Outcome(manifests(objects), 0)
    return host


def k8s_shared_pool() -> Host:
    return _with(k8s_shared_pool_objects())


def k8s_weights_herd() -> Host:
    return _with(k8s_weights_herd_objects())
