"""The GPU pool's policy: research and production sharing the pool (quota, priority,
preemption), disruption budgets of GPU inference, and autoscalers on the wrong signal.

A workload's tier is read from its labels (``env``, ``environment``, ``tier``,
``stage``), its namespace's labels, its PriorityClass's name, then its namespace's
name: ``prod``, ``production``, ``serving``, ``live``, ``online`` are production;
``research``, ``dev``, ``experiment(s)``, ``sandbox``, ``scratch``, ``lab``, ``adhoc``,
``playground``, ``notebook(s)`` are research. Nothing is said of a pool where neither
shows. The cluster's policy is blamed on its configuration (``config``); a workload's
own settings (its autoscaler, its budget) on the job (``job-config``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from gputriage.model import Action, Blame, Finding, Severity, evidence
from gputriage.parsers.k8s_model import Cluster, KObject
from gputriage.rules.base import finding, rule
from gputriage.rules.k8s_common import object_scope
from gputriage.rules.k8s_workloads import SOURCE, Template, Workload, autoscalers, show, workloads
from gputriage.text.fields import as_int

_PROD = re.compile(r"(?i)(?:^|[-_./])(prod|production|serving|live|online)(?:$|[-_./])")
_RESEARCH = re.compile(r"(?i)(?:^|[-_./])(research|dev|development|experiments?|sandbox|"
                       r"scratch|lab|adhoc|playground|notebooks?)(?:$|[-_./])")
_TIER_KEYS = ("env", "environment", "tier", "stage", "workload-tier", "purpose")
BUILTIN_PRIORITY = {"system-cluster-critical": 2_000_000_000,
                    "system-node-critical": 2_000_001_000}


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _word(text: str | None) -> str | None:
    if not text:
        return None
    if _PROD.search(text):
        return "production"
    return "research" if _RESEARCH.search(text) else None


def _gpu_template(w: Workload) -> Template | None:
    return next((t for t in w.templates if t.gpus() > 0), None)


def tier(w: Workload, namespaces: dict[str, dict[str, str]]) -> str | None:
    """``production``, ``research`` or None (see the module's docstring)."""
    t = _gpu_template(w)
    labels = {**w.obj.labels, **(t.labels if t else {})}
    for source in (labels, namespaces.get(w.namespace or "", {})):
        for key in _TIER_KEYS:
            found = _word(source.get(key))
            if found:
                return found
    return _word(str((t.spec if t else {}).get("priorityClassName") or "")) \
        or _word(w.namespace)


class Priorities:
    """The PriorityClasses: a workload's priority and its class's preemption policy."""

    def __init__(self, cluster: Cluster) -> None:
        self.classes = {o.name: o for o in cluster.of_kind("PriorityClass")}
        default = next((o for o in self.classes.values() if o.raw.get("globalDefault")), None)
        self.default = default

    def of(self, w: Workload) -> tuple[int | None, str]:
        """The priority of the workload's GPU pods and the class that gives it."""
        t = _gpu_template(w)
        name = str((t.spec if t else {}).get("priorityClassName") or "")
        if not name:
            if self.default is not None:
                return _int(self.default.raw.get("value")), f"{self.default.name} (default)"
            return 0, "no priorityClassName (priority 0)"
        if name in BUILTIN_PRIORITY:
            return BUILTIN_PRIORITY[name], name
        cls = self.classes.get(name)
        return (None, name) if cls is None else (_int(cls.raw.get("value")), name)

    def preempts(self, name: str) -> bool:
        cls = self.classes.get(name.split(" ")[0])
        policy = cls.raw.get("preemptionPolicy") if cls is not None else None
        return policy != "Never"


def _int(value: Any) -> int | None:
    return as_int(value) if isinstance(value, int) else None


def _share(cluster: Cluster, a: Workload, b: Workload) -> bool:
    """Two GPU workloads can land on the same GPU nodes: their node selectors agree on
    every key both set (or, when the nodes are known, select a common GPU node)."""
    ta, tb = _gpu_template(a), _gpu_template(b)
    if ta is None or tb is None:
        return False
    sa, sb = (_d(t.spec.get("nodeSelector")) for t in (ta, tb))
    nodes = list(cluster.gpu_nodes())
    if nodes:
        def match(sel: dict[str, Any]) -> set[str]:
            return {n.name for n in nodes
                    if all(n.labels.get(k) == str(v) for k, v in sel.items())}
        return bool(match(sa) & match(sb))
    return all(str(sa[k]) == str(sb[k]) for k in set(sa) & set(sb))


def _pool(cluster: Cluster) -> tuple[list[Workload], list[Workload]]:
    """The production and research GPU workloads that share a pool."""
    namespaces = {o.name: o.labels for o in cluster.of_kind("Namespace")}
    gpu = [w for w in workloads(cluster) if w.gpus() > 0 and w.kind != "DaemonSet"]
    prod = [w for w in gpu if tier(w, namespaces) == "production"]
    research = [w for w in gpu if tier(w, namespaces) == "research"]
    shared_r = [r for r in research if any(_share(cluster, r, p) for p in prod)]
    shared_p = [p for p in prod if any(_share(cluster, r, p) for r in shared_r)]
    return shared_p, shared_r


def _line(w: Workload, extra: str = "") -> str:
    t = _gpu_template(w)
    sel = _d(t.spec.get("nodeSelector")) if t else {}
    return (f"{w.ref} ({w.where}): {w.pods} pod(s) x {t.gpus() if t else 0:g} GPU"
            + (f", nodeSelector {show(sel)}" if sel else "") + extra)


def _gpu_quota(cluster: Cluster, namespace: str | None) -> list[KObject]:
    return [q for q in cluster.of_kind("ResourceQuota") if q.namespace == namespace
            and any(str(k).startswith("requests.nvidia.com/")
                    for k in _d(_d(q.raw.get("spec")).get("hard")))]


def _kueue(cluster: Cluster, ws: list[Workload]) -> bool:
    """Every workload goes through a Kueue LocalQueue of its namespace (Kueue's quota
    stands for a ResourceQuota)."""
    queues = {(q.namespace, q.name) for q in cluster.of_kind("LocalQueue")}
    for w in ws:
        labels = {**w.obj.labels, **{k: v for t in w.templates for k, v in t.labels.items()}}
        if (w.namespace, labels.get("kueue.x-k8s.io/queue-name")) not in queues:
            return False
    return True


def _forbidden(cluster: Cluster, kind: str) -> bool:
    return any(k.lower().rstrip("s") in (kind.lower(), kind.lower() + "e")
               or k == kind for k in cluster.errors)


@rule("k8s.pool-quota", produces=("k8s.lint-pool-no-quota",))
def pool_no_quota(cluster: Cluster) -> Iterator[Finding]:
    """A research namespace whose GPU workloads share the pool with production and that
    has no ResourceQuota on requests.nvidia.com/gpu (nor a Kueue queue): research can
    take every GPU of the pool, and production's next pod stays Pending."""
    if _forbidden(cluster, "ResourceQuota"):
        return
    prod, research = _pool(cluster)
    for ns in sorted({r.namespace or "" for r in research}):
        mine = [r for r in research if (r.namespace or "") == ns]
        if _gpu_quota(cluster, ns or None) or _kueue(cluster, mine):
            continue
        asked = sum(t.pods * t.gpus() for r in mine for t in r.templates)
        others = [_why_not_gpus(q) for q in cluster.of_kind("ResourceQuota")
                  if q.namespace == ns]
        yield finding(
            "k8s.lint-pool-no-quota", Severity.WARNING,
            f"namespace {ns}{'' if 'research' in ns.lower() else ' (research workloads)'} "
            "shares the GPU pool with production and has no "
            "ResourceQuota on requests.nvidia.com/gpu",
            f"Research workloads of {ns} ask {asked:g} GPUs from the nodes production "
            f"({', '.join(p.ref for p in prod[:3])}) runs on, and nothing caps them"
            + (f" ({'; '.join(others)})" if others else "")
            + ": a burst of research jobs takes the free GPUs and production's next replica, "
            "rollout or rescheduled pod stays Pending (Insufficient "
            f"nvidia.com/gpu). Cap it: a ResourceQuota in {ns} with hard "
            "requests.nvidia.com/gpu: <research share>, or admit research through a Kueue "
            "ClusterQueue with a GPU quota (borrowing allowed, production first).",
            Action.FIX_CONFIG, Blame.CONFIG, object_scope("Namespace", ns),
            [evidence(SOURCE, [_line(w) for w in mine + prod[:3]])])


def _why_not_gpus(quota: KObject) -> str:
    """Why a ResourceQuota of the namespace does not cap its GPUs, in words."""
    hard = [str(k) for k in _d(_d(quota.raw.get("spec")).get("hard"))]
    misnamed = [k for k in hard if "nvidia.com/" in k and not k.startswith("requests.")]
    if misnamed:
        return (f"its ResourceQuota {quota.name} does not count GPUs: it names "
                f"{', '.join(misnamed)}, and Kubernetes quotas an extended resource only "
                "under its requests. name, so the key must be requests.nvidia.com/gpu")
    caps = f"it caps only {', '.join(hard)}" if hard else "it caps nothing"
    return f"its ResourceQuota {quota.name} does not count GPUs: {caps}"


Ranked = tuple[Workload, int | None, str]  # (workload, its priority, its class)


def _preempting(prio: Priorities, evicting: list[Ranked], p_value: int, low: Ranked,
                lines: list[str]) -> Iterator[Finding]:
    """One finding per research PriorityClass above production's that may preempt."""
    for name in sorted({cls.split(" ")[0] for _, _, cls in evicting}):
        value = next(v for _, v, c in evicting if c.split(" ")[0] == name)
        pc = prio.classes.get(name)
        yield finding(
            "k8s.lint-preempts-production", Severity.WARNING,
            f"PriorityClass {name} ({value}) of research work is above production's "
            f"{p_value} and may preempt: research evicts production GPU pods",
            f"Research pods of class {name} (value {value}, preemptionPolicy "
            f"{(pc.raw.get('preemptionPolicy') if pc else None) or 'PreemptLowerPriority'}) "
            f"outrank production's {low[0].ref} ({low[2]}): when the shared pool is full "
            "the scheduler evicts production's GPU pods to place them. Give production "
            "the highest class of the pool and research a lower one with "
            "preemptionPolicy: Never (it waits instead of evicting).",
            Action.FIX_CONFIG, Blame.CONFIG, object_scope("PriorityClass", name),
            [evidence(SOURCE, lines)])


def _no_priority(low: Ranked, p_value: int, r_top: int, lines: list[str]) -> Finding:
    """Production's lowest GPU workload has no priority above research's highest."""
    return finding(
        "k8s.lint-pool-no-priority", Severity.WARNING,
        f"production GPU pods ({low[0].ref}: {p_value}) have no higher priority than "
        f"research's ({r_top}) in their shared pool",
        "When the pool is full, the scheduler makes room for a pending pod only by "
        "preempting pods of lower priority: production's replicas and rescheduled pods "
        "wait behind research jobs instead. Give production GPU workloads a "
        "PriorityClass above research's (and research preemptionPolicy: Never).",
        Action.FIX_CONFIG, Blame.CONFIG,
        object_scope("Namespace", low[0].namespace or ""), [evidence(SOURCE, lines)])


@rule("k8s.pool-priority", produces=("k8s.lint-pool-no-priority",
                                     "k8s.lint-preempts-production"))
def pool_priority(cluster: Cluster) -> Iterator[Finding]:
    """Production GPU pods of a shared pool without a higher priority than research's
    (the scheduler cannot make room for production), and research PriorityClasses whose
    value is above production's and that may preempt: research evicts production."""
    if _forbidden(cluster, "PriorityClass"):
        return
    prio = Priorities(cluster)
    prod, research = _pool(cluster)
    p_known: list[Ranked] = [(w, *prio.of(w)) for w in prod]
    r_known: list[Ranked] = [(w, *prio.of(w)) for w in research]
    if not p_known or any(v is None for _, v, _ in p_known + r_known):
        return  # a class this input does not define: its value is unknown
    low = min(p_known, key=lambda x: x[1] or 0)
    p_value = low[1] or 0
    lines = [_line(w, f", priority {v} ({cls})") for w, v, cls in p_known + r_known]
    above = [(w, v, cls) for w, v, cls in r_known if (v or 0) > p_value]
    evicting = [x for x in above if prio.preempts(x[2])]
    if evicting:
        yield from _preempting(prio, evicting, p_value, low, lines)
        return
    r_top = max((v or 0 for _, v, _ in r_known), default=0)
    if p_value > r_top:
        return
    yield _no_priority(low, p_value, r_top, lines)


# --- disruption budgets and autoscalers ----------------------------------------------------
def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for k, v in _d(selector.get("matchLabels")).items():
        if labels.get(str(k)) != str(v):
            return False
    for e in _l(selector.get("matchExpressions")):
        key, op, values = str(_d(e).get("key")), _d(e).get("operator"), \
            [str(v) for v in _l(_d(e).get("values"))]
        if (op == "In" and labels.get(key) not in values) \
                or (op == "NotIn" and labels.get(key) in values) \
                or (op == "Exists" and key not in labels) \
                or (op == "DoesNotExist" and key in labels):
            return False
    return True


@rule("k8s.pool-pdb", produces=("k8s.lint-no-pdb",))
def lint_no_pdb(cluster: Cluster) -> Iterator[Finding]:
    """A GPU inference Deployment or StatefulSet that no PodDisruptionBudget selects: a
    node drain (a driver upgrade, a repair) may evict every replica at once, and each
    takes minutes to load its model again. Production or several replicas: a warning;
    a single research replica: information."""
    if _forbidden(cluster, "PodDisruptionBudget"):
        return
    pdbs = cluster.of_kind("PodDisruptionBudget")
    namespaces = {o.name: o.labels for o in cluster.of_kind("Namespace")}
    for w in workloads(cluster):
        if not w.serving or w.partial:
            continue
        labels = w.templates[0].labels
        if any(p.namespace == w.namespace
               and _selects(_d(_d(p.raw.get("spec")).get("selector")), labels) for p in pdbs):
            continue
        prod = tier(w, namespaces) == "production"
        severity = Severity.WARNING if prod or w.replicas >= 2 else Severity.INFO
        yield finding(
            "k8s.lint-no-pdb", severity,
            f"{w.ref}: GPU inference ({w.replicas} replica(s)"
            + (", production" if prod else "") + ") with no PodDisruptionBudget",
            "A drain (the GPU operator's driver upgrade, a node repair, the cluster "
            "autoscaler's scale-down) evicts pods without asking how many replicas must "
            "stay up; GPU inference replicas take minutes to come back (image, weights, "
            "warm-up). Add a PodDisruptionBudget selecting "
            f"{show(labels) if labels else 'its pods'} with maxUnavailable: 1 (and run two "
            "replicas or more: a budget that allows no eviction blocks every drain).",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, object_scope(w.kind, w.name, w.namespace),
            [w.evidence([w.say("spec.replicas", w.replicas),
                         w.say(f"{w.templates[0].path[:-5]}.metadata.labels", labels or None),
                         f"PodDisruptionBudgets in {w.namespace}: "
                         + (", ".join(p.name for p in pdbs if p.namespace == w.namespace)
                            or "none")])])


def _no_eviction(pdb: KObject, replicas: int | None) -> str | None:
    """Why a budget allows no voluntary eviction (maxUnavailable 0 or 0%, minAvailable
    100% or at least the replicas it guards); None when it allows one."""
    spec = _d(pdb.raw.get("spec"))
    most, least = spec.get("maxUnavailable"), spec.get("minAvailable")
    if most is not None and str(most).strip() in ("0", "0%"):
        return f"maxUnavailable: {most}"
    if least is not None and str(least).strip() == "100%":
        return f"minAvailable: {least}"
    floor = as_int(least) if least is not None and "%" not in str(least) else None
    if floor is not None and replicas is not None and floor >= replicas > 0:
        return f"minAvailable: {floor} of {replicas} replica(s)"
    return None


@rule("k8s.pool-pdb-blocks", produces=("k8s.lint-pdb-blocks-drain",))
def lint_pdb_blocks_drain(cluster: Cluster) -> Iterator[Finding]:
    """A PodDisruptionBudget that allows no eviction (maxUnavailable 0, or minAvailable
    equal to the replicas it selects): kubectl drain, the GPU operator's driver upgrade
    and the autoscaler's scale-down wait on it forever, so the node is never emptied for a
    repair or an upgrade."""
    serving = [w for w in workloads(cluster) if not w.partial]
    for pdb in cluster.of_kind("PodDisruptionBudget"):
        selector = _d(_d(pdb.raw.get("spec")).get("selector"))
        guarded = [w for w in serving if w.namespace == pdb.namespace and selector
                   and w.templates and _selects(selector, w.templates[0].labels)]
        replicas = sum(w.replicas for w in guarded) if guarded else None
        gpu = [w for w in guarded if w.gpus() > 0]
        why = _no_eviction(pdb, replicas)
        if why is None or (guarded and not gpu):  # a budget of CPU pods: not ours to say
            continue
        what = ", ".join(w.ref for w in (gpu or guarded)[:3]) or "its pods"
        yield finding(
            "k8s.lint-pdb-blocks-drain", Severity.WARNING,
            f"PodDisruptionBudget {pdb.namespace}/{pdb.name} ({why}) allows no eviction: "
            "it blocks every drain and driver upgrade of the nodes its pods run on",
            f"The budget guards {what} and lets no pod of it be evicted, so kubectl drain "
            "retries forever (\"Cannot evict pod as it would violate the pod's disruption "
            "budget\"), the GPU operator's driver upgrade waits at its drain step and the "
            "cluster autoscaler never scales the node down: a GPU node that needs a repair "
            "or a new driver cannot be emptied. Allow one eviction: maxUnavailable: 1 (or "
            "minAvailable below the replicas), with two replicas or more so that one keeps "
            "serving.",
            Action.FIX_CONFIG, Blame.JOB_CONFIG,
            object_scope("PodDisruptionBudget", pdb.name, pdb.namespace),
            [evidence(SOURCE, [f"{pdb.ref} ({pdb.origin or 'input'}) spec: "
                               f"{show(_d(pdb.raw.get('spec')))}",
                               *(f"{w.ref} ({w.where}) replicas: {w.replicas}"
                                 for w in guarded[:3])])])


def _metrics(hpa: KObject) -> tuple[list[str], str]:
    """What an autoscaler scales on (``cpu``, ``memory``, ``pods:...``) and the path."""
    spec = _d(hpa.raw.get("spec"))
    if "targetCPUUtilizationPercentage" in spec:
        return ["cpu"], "spec.targetCPUUtilizationPercentage"
    found = []
    for m in _l(spec.get("metrics")):
        kind = str(_d(m).get("type") or "")
        body = _d(_d(m).get(kind[:1].lower() + kind[1:]))
        if kind in ("Resource", "ContainerResource"):
            found.append(str(body.get("name")))
        else:
            found.append(f"{kind}:{_d(body.get('metric')).get('name')}")
    return found or ["cpu"], "spec.metrics"


@rule("k8s.pool-hpa", produces=("k8s.lint-hpa-cpu",))
def lint_hpa_cpu(cluster: Cluster) -> Iterator[Finding]:
    """A HorizontalPodAutoscaler of a GPU workload that scales on CPU or memory (or on
    nothing named: the default is CPU): a GPU server's CPU says little of its load, so
    it scales too late or never."""
    for w in workloads(cluster):
        if w.gpus() <= 0:
            continue
        for hpa in autoscalers(cluster, w):
            metrics, path = _metrics(hpa)
            where = w.where if cluster.origin == "api" else hpa.origin or "paste"
            if any(m not in ("cpu", "memory") for m in metrics):
                continue
            yield finding(
                "k8s.lint-hpa-cpu", Severity.WARNING,
                f"{hpa.ref}: scales GPU workload {w.ref} on {', '.join(metrics)}",
                "A GPU inference server spends its time on the GPU: its CPU stays low while "
                "requests queue up (or runs high while loading), so the autoscaler adds "
                "replicas too late or not at all. Scale on the GPU's utilisation (DCGM "
                "exporter's DCGM_FI_DEV_GPU_UTIL through the Prometheus adapter) or, better, "
                "on the server's queue or latency (vLLM's num_requests_waiting, Triton's "
                "queue time) as Pods or External metrics.",
                Action.FIX_CONFIG, Blame.JOB_CONFIG,
                object_scope("HorizontalPodAutoscaler", hpa.name, hpa.namespace),
                [evidence(SOURCE, [f"{hpa.ref} ({where}) {path}: "
                                   f"{show(_d(hpa.raw.get('spec')).get(path.split('.')[1]))}",
                                   f"{w.ref}: {w.gpus():g} GPU(s) a pod"])])
