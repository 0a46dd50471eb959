"""The device plugin's configuration: GPU sharing (time-slicing, MPS) and the MIG strategy.

The plugin's config is a ConfigMap whose data values are YAML documents with
``version: v1`` and ``flags:`` and/or ``sharing:`` (the GPU operator's
``devicePlugin.config``, the plugin chart's ``nvidia-device-plugin-configs``); a
ConfigMap may hold several (one a key, chosen per node by the
``nvidia.com/device-plugin.config`` label). A value that is not such YAML is not a plugin
config and is passed over silently. Each finding quotes the ConfigMap, the data key and
the path in the YAML (``sharing.timeSlicing.resources[0].replicas``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gputriage.model import Action, Blame, Finding, Scope, Severity, evidence
from gputriage.parsers.k8s_model import Cluster, KObject, KPod, quantity
from gputriage.rules.base import finding, rule
from gputriage.rules.k8s_common import group_pods, object_scope
from gputriage.rules.k8s_workloads import SOURCE, Workload, workloads

_MAX_VALUE = 256 * 1024  # a plugin config is a few lines; a larger value is something else
_STRATEGIES = ("timeSlicing", "mps")
_CONFIG_LABEL = "nvidia.com/device-plugin.config"
_MIG_LABEL = "nvidia.com/mig.strategy"


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


@dataclass(frozen=True)
class Shared:
    """One shared resource of a config: its plain name, the name it is advertised under,
    its replicas and the path of its entry."""

    name: str
    advertised: str
    replicas: int
    strategy: str  # timeSlicing | mps
    path: str


@dataclass
class PluginConfig:
    """One data key of a ConfigMap that holds a device plugin config."""

    obj: KObject
    key: str
    body: dict[str, Any]
    shared: list[Shared] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.obj.ref} data[{self.key}]"

    def say(self, path: str, value: Any) -> str:
        return f"{self.where} {path}: {value}"

    @property
    def mig_strategy(self) -> str | None:
        value = _d(self.body.get("flags")).get("migStrategy")
        return str(value) if isinstance(value, str) else None

    @property
    def fail_greater_than_one(self) -> dict[str, bool]:
        """Per strategy, whether the plugin refuses a request for more than one replica."""
        return {s: _d(_d(self.body.get("sharing")).get(s)).get("failRequestsGreaterThanOne")
                is True for s in _STRATEGIES}


def _load(text: str) -> dict[str, Any] | None:
    """A data value as a plugin config, or None (not YAML, not a plugin config)."""
    if len(text) > _MAX_VALUE or "version" not in text or \
            ("sharing" not in text and "flags" not in text):
        return None
    import yaml  # type: ignore[import-untyped]

    try:
        body = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    if not isinstance(body, dict) or str(body.get("version")) != "v1" or \
            not (isinstance(body.get("flags"), dict) or isinstance(body.get("sharing"), dict)):
        return None
    return body


def _shared(body: dict[str, Any]) -> list[Shared]:
    sharing = _d(body.get("sharing"))
    out = []
    for strategy in _STRATEGIES:
        block = _d(sharing.get(strategy))
        by_default = block.get("renameByDefault") is True
        for i, res in enumerate(_l(block.get("resources"))):
            res = _d(res)
            name, replicas = res.get("name"), quantity(res.get("replicas"))
            if not isinstance(name, str) or replicas is None or replicas < 2:
                continue
            name = name if "/" in name else f"nvidia.com/{name}"
            rename = res.get("rename")
            if isinstance(rename, str) and rename:
                advertised = rename if "/" in rename else f"nvidia.com/{rename}"
            else:
                advertised = f"{name}.shared" if by_default else name
            out.append(Shared(name, advertised, int(replicas), strategy,
                              f"sharing.{strategy}.resources[{i}]"))
    return out


def plugin_configs(cluster: Cluster) -> list[PluginConfig]:
    """Every device plugin config among the cluster's ConfigMaps (read once)."""
    return cluster.derived("plugin-configs", _configs)


def _configs(cluster: Cluster) -> list[PluginConfig]:
    out = []
    for obj in cluster.of_kind("ConfigMap"):
        for key, value in _d(obj.raw.get("data")).items():
            body = _load(value) if isinstance(value, str) else None
            if body is not None:
                out.append(PluginConfig(obj, str(key), body, _shared(body)))
    return out


def _scope(cfg: PluginConfig) -> Scope:
    return object_scope("ConfigMap", cfg.obj.name, cfg.obj.namespace)


@rule("k8s.sharing-time-sliced", produces=("k8s.sharing-time-sliced",))
def time_sliced(cluster: Cluster) -> Iterator[Finding]:
    """GPUs the device plugin advertises several times (time-slicing, MPS): pods that
    share a GPU share its memory and its faults; nothing reserves a pod's memory."""
    for cfg in plugin_configs(cluster):
        if not cfg.shared:
            continue
        said = ", ".join(f"{s.name} x{s.replicas} as {s.advertised} ({s.strategy})"
                         for s in cfg.shared)
        lines = [cfg.say(f"{s.path}.replicas", s.replicas) for s in cfg.shared]
        lines += [cfg.say(f"{s.path}.name", s.name) + f" -> advertised as {s.advertised}"
                  for s in cfg.shared if s.advertised != s.name]
        yield finding(
            "k8s.sharing-time-sliced", Severity.INFO,
            f"{cfg.where}: each GPU is advertised several times: {said}",
            "The device plugin hands the same GPU to as many pods as the replicas say. "
            "Time-slicing isolates neither memory nor faults: one pod may take all of the "
            "GPU's memory and the others fail with out-of-memory, and an Xid or a crash in "
            "one pod's context can take down the others. MPS caps each client's memory and "
            "threads but shares one server per GPU. Nothing is wrong with the node; keep "
            "training and latency-bound inference on GPUs that are not shared (MIG or a "
            "separate pool). The nodes that use this config key are the ones whose "
            f"{_CONFIG_LABEL} label names it (or all, when it is the default).",
            Action.NONE, Blame.CONFIG, _scope(cfg), [evidence(SOURCE, lines)])


def _asking(cluster: Cluster) -> Iterator[tuple[str, str | None, str, dict[str, float],
                                               list[str], KPod | None]]:
    """(ref, namespace, name, GPU resources asked, evidence lines, pod or None) for each
    workload and each pod that no workload stands for."""
    seen: set[tuple[str | None, str]] = set()
    for w in workloads(cluster):
        seen.add((w.namespace, f"{w.kind}/{w.name}"))
        asked: dict[str, float] = {}
        lines = []
        for c in w.containers(init=False):
            for name, value in c.gpus().items():
                asked[name] = asked.get(name, 0.0) + value
                lines.append(_say(w, f"{c.path}.resources.limits", f"{name}: {value:g}"))
        if asked:
            yield w.ref, w.namespace, w.name, asked, lines, None
    for pod in cluster.pods:
        if (pod.namespace, f"Pod/{pod.name}") in seen or \
                (pod.owner and (pod.namespace, pod.owner) in seen):
            continue
        asked = pod.gpu_requests()
        if asked:
            yield pod.ref, pod.namespace, pod.name, asked, list(pod.lines), pod


def _say(w: Workload, path: str, value: str) -> str:
    return f"{w.ref} ({w.where}) {path}: {value}"


@rule("k8s.sharing-requests", produces=("k8s.sharing-multi-replica", "k8s.sharing-renamed"))
def sharing_requests(cluster: Cluster) -> Iterator[Finding]:
    """Pods against the sharing config: more than one replica of a shared GPU (more
    slices of the same GPU, not more GPUs; refused with failRequestsGreaterThanOne), and
    the plain resource name asked for where the config renames it (the pod waits).
    A request for more than one ``nvidia.com/gpu.shared`` is the lint's
    (k8s.lint-gpu-requests), not repeated here."""
    configs = [c for c in plugin_configs(cluster) if c.shared]
    if not configs:
        return
    offered = {name for node in cluster.nodes.values()
               for name, n in (node.gpus("allocatable") or {}).items() if n > 0}
    pods: list[Finding] = []
    for ref, ns, name, asked, lines, pod in _asking(cluster):
        found = [*_multi(configs, ref, ns, name, asked, lines),
                 *_renamed(configs, offered, ref, ns, name, asked, lines, pod)]
        if pod is None:
            yield from found
        else:
            pods.extend(found)
    yield from group_pods(pods, lambda f: f.title.split(":", 1)[0])


def _subject_scope(ref: str, ns: str | None, name: str) -> Scope:
    return object_scope(ref.split("/", 1)[0], name, ns)


def _multi(configs: list[PluginConfig], ref: str, ns: str | None, name: str,
           asked: dict[str, float], lines: list[str]) -> Iterator[Finding]:
    for res, n in sorted(asked.items()):
        if n <= 1 or res.endswith(".shared"):
            continue
        hits = [(cfg, s) for cfg in configs for s in cfg.shared if s.advertised == res]
        if not hits:
            continue
        cfg, s = hits[0]
        refused = any(c.fail_greater_than_one[sh.strategy] for c, sh in hits)
        fate = ("the plugin refuses it when the kubelet admits the pod "
                "(UnexpectedAdmissionError: 'maximum request size for shared resources is "
                "1', failRequestsGreaterThanOne: true)" if refused else
                "the plugin may hand it replicas of one GPU: the same GPU twice, its memory "
                "and compute not doubled")
        yield finding(
            "k8s.sharing-multi-replica", Severity.WARNING,
            f"{ref}: asks for {n:g} {res}, a GPU shared {s.replicas} ways",
            f"{res} is time-shared ({s.strategy}, {s.replicas} replicas a GPU, "
            f"{cfg.where} {s.path}): each unit is a slice of a GPU, not a GPU. Asking for "
            f"{n:g} gets {n:g} slices, and {fate}. A pod that needs several GPUs must ask "
            "for a resource that is not shared (a separate pool or config key); one that "
            "shares should ask for 1.",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, _subject_scope(ref, ns, name),
            [evidence(SOURCE, [*lines, cfg.say(f"{s.path}.replicas", s.replicas),
                               cfg.say(f"sharing.{s.strategy}.failRequestsGreaterThanOne",
                                       str(refused).lower())])])


def _renamed(configs: list[PluginConfig], offered: set[str], ref: str, ns: str | None,
             name: str, asked: dict[str, float], lines: list[str],
             pod: KPod | None) -> Iterator[Finding]:
    if pod is not None and pod.phase in ("Running", "Succeeded"):
        return  # it got the plain name somewhere
    for res in sorted(asked):
        hits = [(cfg, s) for cfg in configs for s in cfg.shared
                if s.name == res and s.advertised != res]
        if not hits or res in offered:
            continue
        cfg, s = hits[0]
        how = "renameByDefault: true" if s.advertised == f"{s.name}.shared" else \
            f"rename: {s.advertised}"
        yield finding(
            "k8s.sharing-renamed", Severity.WARNING,
            f"{ref}: asks for {res}, which the sharing config advertises as {s.advertised}",
            f"{cfg.where} shares {res} ({s.strategy}) with {how}: the nodes that take this "
            f"config advertise {s.advertised}, not {res}, and a pod that asks for {res} "
            f"waits (Pending, 'Insufficient {res}') until it asks for {s.advertised} or a "
            "node offers the plain name."
            + ("" if offered else " No node in the input shows its allocatable resources, "
               "so whether another node offers the plain name could not be told."),
            Action.FIX_CONFIG, Blame.JOB_CONFIG, _subject_scope(ref, ns, name),
            [evidence(SOURCE, [*lines, cfg.say(f"sharing.{s.strategy}", how)])])


@rule("k8s.mig-strategy-config", produces=("k8s.mig-strategy-config",))
def mig_strategy_config(cluster: Cluster) -> Iterator[Finding]:
    """The plugin config's flags.migStrategy against GPU Feature Discovery's
    nvidia.com/mig.strategy label on the nodes: they disagree, so one of the two does
    not run the config, and the resource names pods ask for differ from what is meant."""
    configs = [c for c in plugin_configs(cluster) if c.mig_strategy]
    for cfg in configs:
        odd = []
        for node in cluster.nodes.values():
            label = node.labels.get(_MIG_LABEL)
            chosen = node.labels.get(_CONFIG_LABEL)
            if label is None or (chosen is not None and chosen != cfg.key) or \
                    (chosen is None and _keyed(configs)):
                continue
            if label != cfg.mig_strategy:
                odd.append(node)
        if not odd:
            continue
        names = ", ".join(n.name for n in odd[:10]) + (f" and {len(odd) - 10} more"
                                                        if len(odd) > 10 else "")
        labels = sorted({n.labels[_MIG_LABEL] for n in odd})
        lines = [cfg.say("flags.migStrategy", cfg.mig_strategy)]
        lines += [f"node/{n.name} labels: {_MIG_LABEL}={n.labels[_MIG_LABEL]}"
                  for n in odd[:10]]
        yield finding(
            "k8s.mig-strategy-config", Severity.WARNING,
            f"{cfg.where}: migStrategy {cfg.mig_strategy}, but {names} "
            f"label{'s' if len(odd) == 1 else ''} {_MIG_LABEL}={'/'.join(labels)}",
            f"The plugin config says flags.migStrategy: {cfg.mig_strategy}; GPU Feature "
            f"Discovery, which reads its strategy from its own config or flags, labels "
            f"the node(s) {'/'.join(labels)}. The strategy decides the resource names: "
            "single advertises MIG slices as nvidia.com/gpu, mixed as "
            "nvidia.com/mig-<profile>, none ignores MIG. With the two out of step, the "
            "labels that pods select on and the resources they ask for do not match. Give "
            "the plugin and GFD the same strategy (the GPU operator: ClusterPolicy "
            "mig.strategy; the chart: one config for both), then restart both DaemonSets.",
            Action.FIX_CONFIG, Blame.CONFIG, _scope(cfg), [evidence(SOURCE, lines)])


def _keyed(configs: list[PluginConfig]) -> bool:
    """Several keys with different strategies: a node without the config label cannot
    be matched to one of them."""
    return len({c.mig_strategy for c in configs}) > 1
