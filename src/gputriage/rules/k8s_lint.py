"""Lint of GPU workloads: what a pod template of a manifest, a paste or a live cluster
asks of the GPU pool, judged before (or while) it runs.

The same rules read ``gputriage k8s lint`` (manifests), ``analyze`` of a pasted YAML and
``gputriage k8s status`` (the controllers' templates and bare pods of a live cluster):
GPU resources as the API and the device plugin accept them, the toleration of the
pool's GPU taint, ``/dev/shm`` for NCCL and data loaders, gang scheduling of multi-pod
training, and probes that a model's loading outlasts. Each finding names the object
and the path in the manifest; a workload's own settings are blamed on the job
(``job-config``), and lint never takes a node out of service.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, cast

from gputriage.model import Action, Blame, Finding, Scope, Severity
from gputriage.parsers.k8s_model import Cluster, KNode, Taint, Toleration
from gputriage.rules.base import finding, rule
from gputriage.rules.k8s_common import object_scope
from gputriage.rules.k8s_workloads import (
    Container,
    Template,
    Workload,
    model_size_gb,
    say_gb,
    show,
    workloads,
)
from gputriage.text.fields import as_int

INT32_MAX = 2 ** 31 - 1  # the API's probe fields are int32
CONVENTION_TAINT = Taint("nvidia.com/gpu", None, "NoSchedule")
_GPU_LABEL = re.compile(r"(?i)gpu|accelerator|nvidia")
READ_FAST_GBS, READ_SLOW_GBS = 2.0, 1.0  # weights read from network storage, GB/s
_SHM_HINT = re.compile(r"(?i)num[_-]workers|dataloader|torchrun|deepspeed|nccl|"
                       r"tensor[_-]parallel[_-]size[= ]*(?:[2-9]|[0-9]{2})")
_BUILTIN_TAINT = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _scope(w: Workload) -> Scope:
    return object_scope(w.kind, w.name, w.namespace)


def _gpu_workloads(cluster: Cluster) -> Iterator[Workload]:
    for w in workloads(cluster):
        if any(c.gpus() for c in w.containers()) or _targets_gpus(w):
            yield w


# --- GPU resources -------------------------------------------------------------------
def _resource_issues(c: Container) -> list[tuple[str, str, str]]:
    """What the API server or the device plugin refuses in a container's GPU resources:
    (path, what in short, why)."""
    from gputriage.parsers.k8s_model import gpu_resources

    lim, req = gpu_resources(c.resources("limits")), gpu_resources(c.resources("requests"))
    out = []
    for name in sorted(set(req) - set(lim)):
        out.append((f"{c.path}.resources.limits", f"{name} in requests only",
                    f"{name} is in requests ({req[name]:g}) but not in limits: an extended "
                    "resource must be set in limits"))
    for name in sorted(set(req) & set(lim)):
        if req[name] != lim[name]:
            out.append((f"{c.path}.resources",
                        f"{name} requests {req[name]:g} != limits {lim[name]:g}",
                        f"{name} requests {req[name]:g} but limits "
                        f"{lim[name]:g}: they must be equal (GPUs cannot be overcommitted)"))
    for name, value in sorted({**req, **lim}.items()):
        if value != int(value) or value < 0:
            out.append((f"{c.path}.resources.limits", f"{name}: {value:g} is not whole",
                        f"{name}: {value:g} is not a whole "
                        "number (a GPU is not divided by a fraction: use MIG or a shared "
                        "resource)"))
        elif name.endswith(".shared") and value > 1:
            out.append((f"{c.path}.resources.limits",
                        f"{name}: {value:g}, more than one shared replica",
                        f"{name}: {value:g}: a shared GPU "
                        "(time-slicing, MPS) is given one replica at a time; the device "
                        "plugin refuses more ('maximum request size for shared resources "
                        "is 1')"))
    return out


@rule("k8s.lint-resources", produces=("k8s.lint-gpu-requests",))
def lint_gpu_requests(cluster: Cluster) -> Iterator[Finding]:
    """GPU resources that the API server or the device plugin refuses: nvidia.com/gpu
    (MIG, shared) in requests only, requests unequal to limits, fractions, more than one
    replica of a shared GPU. The pod is never created or never starts."""
    for w in workloads(cluster):
        issues = [(c, path, short, why) for c in w.containers()
                  for path, short, why in _resource_issues(c)]
        if not issues:
            continue
        lines = [w.say(f"{c.path}.resources", _d(c.raw.get("resources")))
                 for c, _, _, _ in issues]
        first = issues[0]
        yield finding(
            "k8s.lint-gpu-requests", Severity.WARNING,
            f"{w.ref}: {first[2]} in {first[1]}: its pods are refused",
            "GPUs are an extended resource: whole numbers, set in limits (requests default "
            "to them and must equal them). " + " ".join(
                f"{c.name} ({path}): {why}." for c, path, _, why in issues)
            + " Set nvidia.com/gpu in limits only, as a whole number.",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, _scope(w), [w.evidence(lines)])


# --- the pool's GPU taint -------------------------------------------------------------
def _selector(t: Template) -> dict[str, str]:
    return {str(k): str(v) for k, v in _d(t.spec.get("nodeSelector")).items()}


def _affinity_keys(t: Template) -> list[str]:
    node = _d(_d(t.spec.get("affinity")).get("nodeAffinity"))
    terms = _d(node.get("requiredDuringSchedulingIgnoredDuringExecution"))
    return [str(e.get("key")) for term in _l(terms.get("nodeSelectorTerms"))
            for e in _l(_d(term).get("matchExpressions")) if isinstance(e, dict)]


def _targets(t: Template) -> list[str]:
    """The GPU labels a template selects nodes by (``key=value`` or ``key``)."""
    found = [f"{k}={v}" for k, v in _selector(t).items() if _GPU_LABEL.search(f"{k}={v}")]
    return found + [k for k in _affinity_keys(t) if _GPU_LABEL.search(k)]


def _targets_gpus(w: Workload) -> bool:
    return any(_targets(t) for t in w.templates)


def _tolerations(t: Template) -> list[Toleration]:
    return [Toleration(str(x["key"]) if x.get("key") else None,
                       str(x.get("operator") or "Equal"),
                       None if x.get("value") is None else str(x.get("value")),
                       str(x["effect"]) if x.get("effect") else None)
            for x in _l(t.spec.get("tolerations")) if isinstance(x, dict)]


def _repelling(node: KNode, tolerations: list[Toleration]) -> list[Taint]:
    return [taint for taint in node.taints or []
            if taint.effect in ("NoSchedule", "NoExecute")
            and not taint.key.startswith(_BUILTIN_TAINT)
            and not any(tol.tolerates(taint) for tol in tolerations)]


def _taint_issue(cluster: Cluster, t: Template) -> tuple[list[str], bool] | None:
    """The taints that keep a template off the GPU nodes it targets (the nodes' own
    when known, else the nvidia.com/gpu:NoSchedule convention), and whether they are
    the nodes' own."""
    tolerations = _tolerations(t)
    gpu_nodes = list(cluster.gpu_nodes())
    if gpu_nodes and all(n.taints is not None for n in gpu_nodes):
        sel = _selector(t)
        nodes = [n for n in gpu_nodes if all(n.labels.get(k) == v for k, v in sel.items())]
        if not nodes or not (t.gpus() or _targets(t)):
            return None  # no node matches: the pending rules say why
        repelled = [_repelling(n, tolerations) for n in nodes]
        if all(repelled):
            return sorted({str(x) for r in repelled for x in r}), True
        return None
    if _targets(t) and not any(tol.tolerates(CONVENTION_TAINT) for tol in tolerations):
        return [str(CONVENTION_TAINT)], False
    return None


@rule("k8s.lint-taint", produces=("k8s.lint-gpu-toleration",))
def lint_gpu_toleration(cluster: Cluster) -> Iterator[Finding]:
    """A workload aimed at the GPU nodes that does not tolerate their taint: the nodes'
    own taints when the cluster's nodes are known, else the nvidia.com/gpu:NoSchedule
    convention (a warning when the pod asks no GPU, as the ExtendedResourceToleration
    admission plugin adds the toleration only to pods that do)."""
    for w in _gpu_workloads(cluster):
        for t in w.templates:
            issue = _taint_issue(cluster, t)
            if issue is None:
                continue
            taints, real = issue
            asks = t.gpus() > 0
            severity = Severity.WARNING if real or not asks else Severity.INFO
            lines = [w.say(f"{t.path}.nodeSelector", _selector(t) or None),
                     w.say(f"{t.path}.tolerations", _l(t.spec.get("tolerations")) or None)]
            whose = ("the GPU nodes it can land on carry" if real else
                     "GPU pools are conventionally tainted")
            yield finding(
                "k8s.lint-gpu-toleration", severity,
                f"{w.ref}: no toleration for the GPU taint {', '.join(taints)} in "
                f"{t.path}.tolerations",
                f"{whose} {', '.join(taints)} so that only GPU work lands there; this "
                f"template targets them ({', '.join(_targets(t)) or 'it asks for GPUs'}) "
                "without tolerating it, so its pods stay Pending"
                + ("" if real or not asks else " unless the ExtendedResourceToleration "
                   "admission plugin adds the toleration (it does for pods asking "
                   "nvidia.com/gpu where enabled)")
                + ". Add to the pod spec: tolerations: [{key: nvidia.com/gpu, operator: "
                "Exists, effect: NoSchedule}].",
                Action.FIX_CONFIG, Blame.JOB_CONFIG, _scope(w), [w.evidence(lines)])
            break


# --- /dev/shm ----------------------------------------------------------------------------
def _shm(t: Template, c: Container) -> tuple[str, str] | None:
    """Why a GPU container's /dev/shm is too small: (severity word, why); None when it
    is a memory-backed emptyDir with a size."""
    if t.spec.get("hostIPC") is True:
        return None
    mount = next((m for m in _l(c.raw.get("volumeMounts")) if isinstance(m, dict)
                  and str(m.get("mountPath", "")).rstrip("/") == "/dev/shm"), None)
    if mount is None:
        return "warning", "nothing is mounted at /dev/shm: the container runtime's default is 64 MB"
    vol = t.volumes().get(str(mount.get("name")), {})
    empty = vol.get("emptyDir")
    if not isinstance(empty, dict) or empty.get("medium") != "Memory":
        return "warning", (f"/dev/shm is volume {mount.get('name')} ({show(vol) or '?'}), "
                           "not a memory-backed emptyDir")
    if empty.get("sizeLimit") is None:
        return "info", ("/dev/shm is a memory-backed emptyDir without sizeLimit: it may "
                        "grow to the pod's memory limit, and the kubelet evicts the pod past it")
    return None


def _needs_shm(w: Workload, t: Template, c: Container) -> bool:
    gpus = sum(v for k, v in c.gpus().items() if not k.endswith(".shared"))
    return gpus >= 2 or (gpus > 0 and ((w.pods > 1 and w.training)
                                       or bool(_SHM_HINT.search(c.text + " " + " ".join(
                                           f"{k}={v}" for k, v in c.env.items())))))


@rule("k8s.lint-dev-shm", produces=("k8s.lint-shm",))
def lint_shm(cluster: Cluster) -> Iterator[Finding]:
    """A multi-GPU or distributed GPU container (or one whose command runs data loader
    workers or NCCL) without a memory-backed emptyDir at /dev/shm: the runtime's 64 MB
    default breaks NCCL's shared-memory transport and PyTorch DataLoader workers."""
    for w in workloads(cluster):
        if w.partial:
            continue  # a live pod's typed form shows no volumes
        for t in w.templates:
            found = [(c, *why) for c in t.containers(init=False) if _needs_shm(w, t, c)
                     for why in [_shm(t, c)] if why is not None]
            if not found:
                continue
            c, level, why = found[0]
            severity = Severity.WARNING if any(x[1] == "warning" for x in found) \
                else Severity.INFO
            lines = [w.say(f"{x[0].path}.volumeMounts", _l(x[0].raw.get("volumeMounts"))
                           or None) for x in found]
            lines.append(w.say(f"{t.path}.volumes", _l(t.spec.get("volumes")) or None))
            yield finding(
                "k8s.lint-shm", severity,
                f"{w.ref}: {why.split(':')[0]} ({c.path}, {sum(c.gpus().values()):g} GPUs)",
                f"{why}. NCCL's shared-memory transport between GPUs of a pod and PyTorch "
                "DataLoader workers need far more (a bus error, 'unable to write to file "
                "</torch_...>', or NCCL 'Error while creating shared memory segment'). Mount "
                "an emptyDir {medium: Memory, sizeLimit: 16Gi or more} at /dev/shm "
                "(volumeMounts: [{name: dshm, mountPath: /dev/shm}]).",
                Action.FIX_CONFIG, Blame.JOB_CONFIG, _scope(w), [w.evidence(lines)])


# --- gang scheduling -----------------------------------------------------------------
_GANG_SCHEDULERS = re.compile(r"(?i)volcano|coschedul|scheduler-plugins")
_GROUP_KEYS = ("scheduling.k8s.io/group-name", "scheduling.x-k8s.io/pod-group",
               "pod-group.scheduling.sigs.k8s.io")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _multi_pod(w: Workload) -> bool:
    if w.gpus() <= 0 or w.pods <= 1:
        return False
    if w.kind == "Job" and (w.obj.api_version or "").startswith("batch.volcano.sh"):
        return False  # a Volcano Job is a gang by design (minAvailable)
    if w.kind in ("Job", "PyTorchJob", "MPIJob", "TFJob", "JobSet", "LeaderWorkerSet"):
        return True
    return w.kind == "StatefulSet" and w.training


def _gang(cluster: Cluster, w: Workload) -> tuple[bool, str]:
    """Whether the workload is admitted or scheduled as a whole, and what says so (or
    what is missing)."""
    top = _d(w.obj.raw.get("metadata"))
    meta = {**_d(top.get("labels")), **_d(top.get("annotations"))}
    for t in w.templates:
        meta.update({**_d(t.meta.get("labels")), **_d(t.meta.get("annotations"))})
    if meta.get(QUEUE_LABEL):
        return True, f"Kueue queue {meta[QUEUE_LABEL]}"
    schedulers = {str(t.spec.get("schedulerName")) for t in w.templates
                  if t.spec.get("schedulerName")}
    gang_sched = sorted(s for s in schedulers if _GANG_SCHEDULERS.search(s))
    if not gang_sched:
        return False, f"scheduler {', '.join(sorted(schedulers)) or 'default-scheduler'}, " \
            f"no {QUEUE_LABEL} label"
    group = next((str(meta[k]) for k in _GROUP_KEYS if meta.get(k)), None)
    policy = _d(_d(w.spec.get("runPolicy")).get("schedulingPolicy"))
    if group is None and not policy and w.kind not in ("PyTorchJob", "MPIJob", "TFJob"):
        return False, f"schedulerName {gang_sched[0]} but no PodGroup named for its pods"
    pg = next((o for o in cluster.of_kind("PodGroup") if o.name == group
               and o.namespace == w.namespace), None)
    need = policy.get("minAvailable") or _d(pg.raw.get("spec")).get("minMember") if pg \
        else policy.get("minAvailable")
    if isinstance(need, int) and need < w.pods:
        return False, f"its PodGroup's minMember {need} is below its {w.pods} pods"
    return True, f"{gang_sched[0]} PodGroup {group or '(made by the training operator)'}"


@rule("k8s.lint-gang", produces=("k8s.lint-no-gang",))
def lint_no_gang(cluster: Cluster) -> Iterator[Finding]:
    """Multi-pod GPU training (a Job with parallelism, PyTorchJob/MPIJob workers, a
    JobSet, a LeaderWorkerSet, a StatefulSet of trainers) with no gang scheduling (no
    Kueue queue, no Volcano or coscheduling PodGroup covering every pod): a partial
    start holds GPUs while it waits for the rest, and two such jobs deadlock."""
    for w in workloads(cluster):
        if not _multi_pod(w):
            continue
        ok, why = _gang(cluster, w)
        if ok:
            continue
        paths = [f"{t.path}: {t.pods} pod(s) x {t.gpus():g} GPU" for t in w.templates]
        yield finding(
            "k8s.lint-no-gang", Severity.WARNING,
            f"{w.ref}: {w.pods} GPU pods ({w.gpus():g} GPUs) without gang scheduling",
            f"The default scheduler places pods one by one: when the pool has room for some "
            f"of the {w.pods} pods only, those start, hold their GPUs and wait for the rest "
            "(NCCL's rendezvous times out), and two jobs that each got part of the pool wait "
            f"for each other for ever. Here: {why}. Admit it as a whole: a Kueue LocalQueue "
            f"({QUEUE_LABEL} label), or Volcano / coscheduling with a PodGroup whose "
            f"minMember is {w.pods}.",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, _scope(w),
            [w.evidence([w.say(p.split(":")[0], p.split(": ", 1)[1]) for p in paths])])


# --- probes against model loading ------------------------------------------------------
def _budget(probe: dict[str, Any]) -> tuple[int, str] | None:
    """The seconds a probe allows and how; None when a field is not a whole number of
    the int32 the API takes (the manifest is refused, its probe is not judged)."""
    numbers = [as_int(probe.get(key) or default, lo=0, hi=INT32_MAX)
               for key, default in (("initialDelaySeconds", 0), ("periodSeconds", 10),
                                    ("failureThreshold", 3))]
    if None in numbers:
        return None
    delay, period, failures = cast(list[int], numbers)
    return delay + failures * period, (f"initialDelaySeconds {delay} + failureThreshold "
                                       f"{failures} x periodSeconds {period}")


@rule("k8s.lint-probes", produces=("k8s.lint-probe-vs-load",))
def lint_probe_vs_load(cluster: Cluster) -> Iterator[Finding]:
    """A GPU inference container whose startup probe (or, without one, liveness probe)
    gives up before its model can be loaded (size from the model's name or the
    gputriage.io/model-size annotation, read at 2 GB/s at best): the kubelet restarts it
    in a loop. A readiness probe alone restarts nothing and is not judged."""
    for w in workloads(cluster):
        if w.partial or not w.serving:
            continue
        for c in w.containers(init=False):
            if not c.gpus():
                continue
            size = model_size_gb(w, c) or model_size_gb(w)
            kind = "startupProbe" if isinstance(c.raw.get("startupProbe"), dict) else \
                "livenessProbe" if isinstance(c.raw.get("livenessProbe"), dict) else None
            if size is None or kind is None:
                continue
            gb, how = size
            allowed = _budget(c.raw[kind])
            if allowed is None:
                continue
            budget, terms = allowed
            fast, slow = gb / READ_FAST_GBS, gb / READ_SLOW_GBS
            if budget >= fast:
                continue
            need, failures = int(slow * 2), max(int(slow * 2 / 10) + 1, 3)
            container = c.raw.get("name") or "the GPU container"
            yield finding(
                "k8s.lint-probe-vs-load", Severity.WARNING,
                f"{w.ref}: {kind} gives up after {budget} s, loading ~{say_gb(gb)} of "
                f"weights takes {fast:.0f}-{slow:.0f} s",
                f"The model is ~{say_gb(gb)} ({how}). Read at an assumed {READ_SLOW_GBS:g}-"
                f"{READ_FAST_GBS:g} GB/s (network storage; a local NVMe may do better) that is "
                f"{fast:.0f}-{slow:.0f} s "
                "before the server answers, plus moving it into GPU memory and warming up "
                f"(CUDA graphs): tens of seconds more. The {kind} allows {budget} s ({terms}), "
                "so the kubelet kills the container before it is up, and it loads again "
                f"from the start. Give a startupProbe failureThreshold x periodSeconds of "
                f"at least {need} s (e.g. periodSeconds 10, failureThreshold "
                f"{failures}) and keep the liveness probe short.",
                Action.FIX_CONFIG, Blame.JOB_CONFIG, _scope(w),
                [w.evidence([w.say(f"{c.path}.{kind}", c.raw[kind]),
                             w.say(f"{c.path}.image", c.image)])],
                fix=f"give container {container} of {w.ref} a startupProbe with periodSeconds "
                    f"10 and failureThreshold {failures} ({failures * 10} s, twice the slowest "
                    f"load of ~{say_gb(gb)}), keeping its livenessProbe short; kubectl get pod "
                    "-w must then show it Ready without restarts")
