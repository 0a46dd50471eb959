"""What the lint rules read of a cluster's workloads: each controller (or bare pod) with
its pod templates, where each sits in the manifest, how many pods it makes, and the
figures the rules share (a model's size from its name, the GPUs a container asks for).

Kinds read: Deployment, StatefulSet, ReplicaSet, DaemonSet, Job (batch and Volcano),
CronJob, Pod, JobSet, PyTorchJob / MPIJob / TFJob (Kubeflow), LeaderWorkerSet, RayJob,
RayCluster. A live cluster's pods carry no mapping (``cluster_from_api(keep_raw=False)``):
a bare pod is then read from its typed form, which lacks volumes and probes (``partial``);
a pod that a controller owns is left to its controller's template, so that a finding is
one per controller, never one per pod.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gputriage.model import Evidence, evidence
from gputriage.parsers.k8s_model import Cluster, KObject, KPod, gpu_resources, quantity
from gputriage.text.fields import strict_float, strict_int

__all__ = ["Container", "Template", "Workload", "model_size_gb", "say_gb", "show",
           "workloads"]

SOURCE = "k8s_objects"
# documented annotations: a workload may state what the lint cannot guess
MODEL_SIZE_ANNOTATION = "gputriage.io/model-size"  # e.g. "140Gi": the weights it loads
IMAGE_SIZE_ANNOTATION = "gputriage.io/image-size"  # e.g. "12Gi": its image, compressed
_TRAINING = re.compile(r"torchrun|torch\.distributed|deepspeed|accelerate launch|horovodrun|"
                       r"mpirun|megatron|nproc[_-]per[_-]node|pretrain|\btrain(?:er|ing)?\b|"
                       r"train\.py|finetune|fine-tune", re.I)
_TRAINING_ENV = frozenset({"WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PET_NNODES"})


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _count(value: Any, default: int = 1) -> int:
    n = quantity(value) if value is not None else None
    return int(n) if n is not None and n >= 0 else default


@dataclass
class Container:
    """One container of a template: its mapping and its path in the manifest."""

    raw: dict[str, Any]
    path: str  # spec.template.spec.containers[0]
    init: bool

    @property
    def name(self) -> str:
        return str(self.raw.get("name") or "?")

    @property
    def image(self) -> str:
        return str(self.raw.get("image") or "")

    def resources(self, which: str) -> dict[str, Any]:
        return _d(_d(self.raw.get("resources")).get(which))

    def gpus(self) -> dict[str, float]:
        """The GPU resources it asks for (limits stand for requests)."""
        return gpu_resources({**self.resources("requests"), **self.resources("limits")})

    @property
    def env(self) -> dict[str, str]:
        return {str(e.get("name")): str(e.get("value")) for e in _l(self.raw.get("env"))
                if isinstance(e, dict) and e.get("name") and e.get("value") is not None}

    @property
    def words(self) -> list[str]:
        """Its command and arguments, word by word (a shell script split on blanks)."""
        out: list[str] = []
        for key in ("command", "args"):
            for item in _l(self.raw.get(key)):
                out.extend(str(item).split())
        return out

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass
class Template:
    """A pod template: its pod spec, its metadata, its path and how many pods it makes."""

    spec: dict[str, Any]
    meta: dict[str, Any]
    path: str  # of the pod spec: spec.template.spec
    pods: int
    role: str | None = None  # a replica type or task name (Worker, Launcher, leader)

    @property
    def labels(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in _d(self.meta.get("labels")).items()}

    def containers(self, init: bool = True) -> Iterator[Container]:
        keys = ("initContainers", "containers") if init else ("containers",)
        for key in keys:
            for i, raw in enumerate(_l(self.spec.get(key))):
                if isinstance(raw, dict):
                    yield Container(raw, f"{self.path}.{key}[{i}]", key == "initContainers")

    def gpus(self) -> float:
        """GPUs (any NVIDIA GPU resource) one pod of this template asks for."""
        return sum(sum(c.gpus().values()) for c in self.containers(init=False))

    def volumes(self) -> dict[str, dict[str, Any]]:
        return {str(v.get("name")): v for v in _l(self.spec.get("volumes"))
                if isinstance(v, dict)}


@dataclass
class Workload:
    obj: KObject
    templates: list[Template]
    where: str  # the file and document (or "api", "paste")
    replicas: int = 1  # of the controller (Deployment, StatefulSet); 1 for the others
    partial: bool = False  # read from a pod's typed form: no volumes, no probes
    extra: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.obj.kind

    @property
    def name(self) -> str:
        return self.obj.name

    @property
    def namespace(self) -> str | None:
        return self.obj.namespace

    @property
    def ref(self) -> str:
        return self.obj.ref

    @property
    def spec(self) -> dict[str, Any]:
        return _d(self.obj.raw.get("spec"))

    @property
    def pods(self) -> int:
        return sum(t.pods for t in self.templates)

    def gpus(self) -> float:
        return sum(t.gpus() for t in self.templates)

    def annotation(self, key: str) -> str | None:
        for meta in (_d(self.obj.raw.get("metadata")), *(t.meta for t in self.templates)):
            value = _d(meta.get("annotations")).get(key)
            if value is not None:
                return str(value)
        return None

    def containers(self, init: bool = True) -> Iterator[Container]:
        for t in self.templates:
            yield from t.containers(init)

    @property
    def training(self) -> bool:
        """Its commands or environment say it trains (torchrun, deepspeed, WORLD_SIZE...)."""
        if self.kind in ("PyTorchJob", "MPIJob", "TFJob", "JobSet"):
            return True
        return any(_TRAINING.search(c.text) or _TRAINING_ENV & set(c.env)
                   for c in self.containers(init=False))

    @property
    def serving(self) -> bool:
        """A long-running GPU workload that serves (a Deployment or StatefulSet that does
        not train)."""
        return self.kind in ("Deployment", "StatefulSet") and self.gpus() > 0 \
            and not self.training

    def say(self, path: str, value: Any) -> str:
        """One evidence line: the object, where it was read, a path and its value."""
        return f"{self.ref} ({self.where}) {path}: {show(value)}"

    def evidence(self, lines: list[str], note: str | None = None) -> Evidence:
        return evidence(SOURCE, lines, note)


def show(value: Any) -> str:
    """A value as a manifest shows it, on one line."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return "null" if value is None else str(value)


def say_gb(gb: float) -> str:
    return f"{gb:,.0f} GB" if gb >= 10 else f"{gb:.1f} GB"


def _pod_template(spec: Any, path: str, pods: int, role: str | None = None) -> Template:
    t = _d(spec)
    return Template(_d(t.get("spec")), _d(t.get("metadata")), f"{path}.spec", pods, role)


def _templates(obj: KObject) -> tuple[list[Template], int]:
    """The pod templates of a workload and its replicas."""
    spec = _d(obj.raw.get("spec"))
    kind, api = obj.kind, obj.api_version or ""
    if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        n = _count(spec.get("replicas"))
        return [_pod_template(spec.get("template"), "spec.template", n)], n
    if kind == "DaemonSet":
        return [_pod_template(spec.get("template"), "spec.template", 1)], 1
    if kind == "Job" and api.startswith("batch.volcano.sh"):
        return _volcano_templates(spec), 1
    if kind == "Job":
        return [_pod_template(spec.get("template"), "spec.template",
                              _count(spec.get("parallelism")))], 1
    if kind == "CronJob":
        job = _d(_d(spec.get("jobTemplate")).get("spec"))
        return [_pod_template(job.get("template"), "spec.jobTemplate.spec.template",
                              _count(job.get("parallelism")))], 1
    if kind == "Pod":
        return [Template(spec, _d(obj.raw.get("metadata")), "spec", 1)], 1
    if kind in ("PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob"):
        return _kubeflow_templates(spec), 1
    if kind == "JobSet":
        return _jobset_templates(spec), 1
    if kind == "LeaderWorkerSet":
        return _lws_templates(spec)
    if kind in ("RayJob", "RayCluster"):
        return _ray_templates(spec, kind), 1
    return [], 1


def _volcano_templates(spec: dict[str, Any]) -> list[Template]:
    """A Volcano Job's templates: one a task."""
    return [_pod_template(t.get("template"), f"spec.tasks[{i}].template",
                          _count(t.get("replicas")), str(t.get("name") or i))
            for i, t in enumerate(_l(spec.get("tasks"))) if isinstance(t, dict)]


def _kubeflow_templates(spec: dict[str, Any]) -> list[Template]:
    """A Kubeflow training job's templates: one a role of its ``*ReplicaSpecs``."""
    key = next((k for k in spec if k.endswith("ReplicaSpecs")), "")
    return [_pod_template(r.get("template"), f"spec.{key}.{role}.template",
                          _count(r.get("replicas")), role)
            for role, r in _d(spec.get(key)).items() if isinstance(r, dict)]


def _jobset_templates(spec: dict[str, Any]) -> list[Template]:
    """A JobSet's templates: one a replicated job, its pods replicas times parallelism."""
    out = []
    for i, rj in enumerate(_l(spec.get("replicatedJobs"))):
        job = _d(_d(_d(rj).get("template")).get("spec"))
        pods = _count(_d(rj).get("replicas")) * _count(job.get("parallelism"))
        out.append(_pod_template(job.get("template"),
                                 f"spec.replicatedJobs[{i}].template.spec.template",
                                 pods, str(_d(rj).get("name") or i)))
    return out


def _lws_templates(spec: dict[str, Any]) -> tuple[list[Template], int]:
    """A LeaderWorkerSet's worker template (and leader's, when it has one) and its groups."""
    lwt = _d(spec.get("leaderWorkerTemplate"))
    groups, size = _count(spec.get("replicas")), _count(lwt.get("size"))
    worker = _pod_template(lwt.get("workerTemplate"),
                           "spec.leaderWorkerTemplate.workerTemplate",
                           groups * max(size - (1 if "leaderTemplate" in lwt else 0), 0),
                           "worker")
    if "leaderTemplate" not in lwt:
        return [worker], groups
    leader = _pod_template(lwt.get("leaderTemplate"),
                           "spec.leaderWorkerTemplate.leaderTemplate", groups, "leader")
    return [leader, worker], groups


def _ray_templates(spec: dict[str, Any], kind: str) -> list[Template]:
    """A RayJob's or RayCluster's templates: the head group's and one a worker group."""
    ray = _d(spec.get("rayClusterSpec")) if kind == "RayJob" else spec
    base = "spec.rayClusterSpec" if kind == "RayJob" else "spec"
    out = [_pod_template(_d(ray.get("headGroupSpec")).get("template"),
                         f"{base}.headGroupSpec.template", 1, "head")]
    for i, g in enumerate(_l(ray.get("workerGroupSpecs"))):
        out.append(_pod_template(_d(g).get("template"),
                                 f"{base}.workerGroupSpecs[{i}].template",
                                 _count(_d(g).get("replicas")),
                                 str(_d(g).get("groupName") or i)))
    return out


WORKLOAD_KINDS = frozenset({
    "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "CronJob", "Pod",
    "PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob", "JobSet", "LeaderWorkerSet",
    "RayJob", "RayCluster"})


def _typed_pod(pod: KPod) -> dict[str, Any]:
    """A pod's mapping rebuilt from its typed form (a live pod keeps no mapping)."""
    containers = [{"name": c.name, "image": c.image, "resources": {
        "requests": dict(c.requests), "limits": dict(c.limits)},
        "env": [{"name": k, "value": v} for k, v in c.env.items()]}
        for c in pod.containers if not c.init]
    tolerations = [{k: v for k, v in (("key", t.key), ("operator", t.operator),
                                      ("value", t.value), ("effect", t.effect)) if v}
                   for t in pod.tolerations or []]
    spec: dict[str, Any] = {"containers": containers, "tolerations": tolerations,
                            "nodeSelector": dict(pod.node_selector or {})}
    if pod.affinity:
        spec["affinity"] = pod.affinity
    return {"metadata": {"name": pod.name, "namespace": pod.namespace,
                         "labels": dict(pod.labels)}, "spec": spec}


def _owner(obj: KObject) -> str | None:
    for o in _l(_d(obj.raw.get("metadata")).get("ownerReferences")):
        if isinstance(o, dict) and o.get("controller"):
            return f"{o.get('kind')}/{o.get('name')}"
    return None


def workloads(cluster: Cluster) -> list[Workload]:
    """Every workload of the cluster: each controller once, and each bare pod; pods a
    controller owns stand for it (one per controller) only when it is not there."""
    return cluster.derived("workloads", _workloads)


def _workloads(cluster: Cluster) -> list[Workload]:
    out: list[Workload] = []
    origin = "api" if cluster.origin == "api" else None
    owners_seen: set[tuple[str | None, str]] = set()
    present = {(o.namespace, f"{o.kind}/{o.name}") for o in cluster.objects}
    for obj in cluster.objects:
        if obj.kind not in WORKLOAD_KINDS or not obj.raw:
            continue
        if obj.kind == "Pod":
            owner = _owner(obj)
            if owner is not None:
                if (obj.namespace, owner) in present or (obj.namespace, owner) in owners_seen:
                    continue
                owners_seen.add((obj.namespace, owner))
        if obj.kind in ("ReplicaSet", "Job") and _owner(obj) and \
                (obj.namespace, _owner(obj)) in present:
            continue  # the Deployment's (or CronJob's) template says the same
        templates, replicas = _templates(obj)
        if templates:
            out.append(Workload(obj, templates, origin or obj.origin or "paste", replicas))
    if cluster.origin == "api":
        for pod in cluster.pods:
            if pod.owner is None:
                raw = _typed_pod(pod)
                obj = KObject("Pod", pod.name, pod.namespace, "v1", raw, "api")
                out.append(Workload(obj, [Template(raw["spec"], raw["metadata"], "spec", 1)],
                                    "api", 1, partial=True))
    return out


# --- a model's size from its name --------------------------------------------------
_PARAMS = re.compile(r"(?i)(?:^|[-_/.:=])(?:([0-9]+)x)?([0-9]+(?:\.[0-9]+)?)b(?=$|[-_/.:,\s])")
_BYTES = ((re.compile(r"(?i)awq|gptq|int4|4bit|w4a16|nf4|q4|bnb-4"), 0.5, "4-bit"),
          (re.compile(r"(?i)fp8|int8|8bit|w8a8|q8"), 1.0, "8-bit"),
          (re.compile(r"(?i)fp32|float32"), 4.0, "FP32"))
_MODEL_ENV = ("HF_MODEL", "HF_MODEL_ID", "MODEL_ID", "MODEL_NAME", "MODEL", "MODEL_PATH",
              "HUGGING_FACE_HUB_MODEL", "LLM_MODEL")
MAX_BILLIONS, MAX_EXPERTS = 1e6, 4096  # beyond these a name's "NxMB" is not a model size
MOE_SHARE = 0.83  # an NxMB mixture of experts shares its attention: ~0.83 x N x M params


def model_names(c: Container) -> list[str]:
    """The model ids a container names: in its arguments (``--model X``, a download's
    argument) and in the usual environment variables."""
    words = c.words
    names = [w for w in words if _PARAMS.search(w) and re.search(r"[A-Za-z]{2}", w)]
    names += [v for k, v in c.env.items() if k in _MODEL_ENV]
    for i, w in enumerate(words[:-1]):
        if w in ("--model", "--model-id", "--model_id", "--model-path", "--model_path"):
            names.append(words[i + 1])
    seen: list[str] = []
    for n in names:
        n = n.split("=", 1)[1] if n.startswith("--") and "=" in n else n
        if n not in seen:
            seen.append(n)
    return seen


def model_size_gb(w: Workload, c: Container | None = None) -> tuple[float, str] | None:
    """The weights' size in GB and how it was told: the annotation, or a parameter count
    in a model's name (``Llama-3-70B`` in FP16 is ~140 GB); None when nothing says."""
    stated = w.annotation(MODEL_SIZE_ANNOTATION)
    if stated and quantity(stated):
        return (quantity(stated) or 0.0) / 1e9, f"{MODEL_SIZE_ANNOTATION}={stated}"
    containers = [c] if c is not None else list(w.containers())
    for cont in containers:
        flags = cont.text + " " + " ".join(cont.env.values())
        for name in model_names(cont):
            m = _PARAMS.search(name)
            if m is None:
                continue
            billions = strict_float(m.group(2), hi=MAX_BILLIONS)
            experts = strict_int(m.group(1), lo=1, hi=MAX_EXPERTS) if m.group(1) else 1
            if billions is None or experts is None:
                continue
            params = billions * (experts * MOE_SHARE if m.group(1) else 1)
            per, dtype = next(((b, d) for rx, b, d in _BYTES if rx.search(name + " " + flags)),
                              (2.0, "FP16/BF16"))
            return params * per, f"{name}: ~{params:g}B parameters x {per:g} bytes ({dtype})"
    return None


def autoscalers(cluster: Cluster, w: Workload) -> list[KObject]:
    """The HorizontalPodAutoscalers that scale a workload."""
    out = []
    for hpa in cluster.of_kind("HorizontalPodAutoscaler"):
        target = _d(_d(hpa.raw.get("spec")).get("scaleTargetRef"))
        if hpa.namespace == w.namespace and target.get("name") == w.name \
                and target.get("kind") in (None, w.kind):
            out.append(hpa)
    return out


def most_pods(cluster: Cluster, w: Workload) -> tuple[int, str]:
    """The most pods a workload runs at once and what says so (its replicas, or an
    autoscaler's maxReplicas)."""
    n, why = w.pods, f"{w.pods} pod(s)"
    for hpa in autoscalers(cluster, w):
        top = _count(_d(hpa.raw.get("spec")).get("maxReplicas"), 0)
        if top > n:
            n, why = top, f"HorizontalPodAutoscaler/{hpa.name} maxReplicas {top}"
    return n, why
