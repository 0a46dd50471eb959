"""A sharing config (time-slicing, MPS) that the device plugin is not running with.

The plugin reads a config only when it is told which: the chart's ``config.name`` and
``config.default`` (or the GPU operator's ClusterPolicy ``devicePlugin.config.name`` and
``default``), chosen per node by the ``nvidia.com/device-plugin.config`` label. A
ConfigMap created but never handed to the plugin, a key the node's label does not name,
or a plugin not restarted after the change leaves every GPU advertised once. The signs,
each enough alone: the node advertises fewer of the resource than the replicas of one
GPU (``nvidia.com/gpu: 1`` under ``replicas: 4``), or a count that is no multiple of
them; GPU Feature Discovery labels the node ``nvidia.com/gpu.replicas=1`` or
``nvidia.com/gpu.sharing-strategy=none``; a renamed resource (``nvidia.com/gpu.shared``)
missing while the plain one is advertised; the plugin's own ``Running with config:``
dump without the sharing block. Facts from the device plugin's README (shared access to
GPUs, per-node configuration) and the GPU operator's time-slicing guide.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gputriage.model import Action, Blame, Evidence, Finding, Severity, evidence
from gputriage.parsers.device_plugin_log import DevicePluginLog
from gputriage.parsers.k8s_model import Cluster, KNode, quantity
from gputriage.rules.base import finding, rule
from gputriage.rules.k8s_common import object_scope
from gputriage.rules.k8s_sharing import PluginConfig, Shared, plugin_configs
from gputriage.rules.k8s_workloads import SOURCE

__all__ = ["sharing_not_applied", "unapplied"]

_CONFIG_LABEL = "nvidia.com/device-plugin.config"
_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"


@dataclass(frozen=True)
class Unapplied:
    """A node that a sharing config is meant for and that does not show it."""

    node: KNode
    cfg: PluginConfig
    shared: Shared
    why: str  # what the node shows, in words


def _meant_for(node: KNode, configs: list[PluginConfig]) -> PluginConfig | None:
    """The sharing config meant for a node: the key its config label names, else the
    only sharing config in the input (the one the paste shows beside the node)."""
    key = node.labels.get(_CONFIG_LABEL)
    if key:
        return next((c for c in configs if c.key == key), None)
    return configs[0] if len(configs) == 1 else None


def _sign(node: KNode, s: Shared) -> str | None:
    """What on the node says ``s`` is not in effect; None when nothing does (or it is)."""
    labels = node.labels
    replicas = quantity(labels.get(_REPLICAS_LABEL))
    if replicas == 1:
        return f"GPU Feature Discovery labels it {_REPLICAS_LABEL}={labels[_REPLICAS_LABEL]}"
    if labels.get(_STRATEGY_LABEL) == "none":
        return f"GPU Feature Discovery labels it {_STRATEGY_LABEL}=none"
    capacity = node.gpus("capacity")
    if not capacity:
        return None
    count = capacity.get(s.advertised)
    if count is None:
        if s.advertised != s.name and s.name in capacity:
            return (f"it advertises {s.name}: {capacity[s.name]:g} and no {s.advertised}, "
                    "the name the config gives the shared GPUs")
        return None
    if 0 < count < s.replicas:
        return (f"it advertises {s.advertised}: {count:g}, fewer than the {s.replicas} "
                "replicas of one GPU")
    if count % s.replicas:
        return (f"it advertises {s.advertised}: {count:g}, which is not a multiple of "
                f"{s.replicas} replicas per GPU")
    return None


def unapplied(cluster: Cluster) -> list[Unapplied]:
    """The GPU nodes whose sharing config is not in effect, and why."""
    configs = [c for c in plugin_configs(cluster) if c.shared]
    out = []
    for node in cluster.gpu_nodes():
        cfg = _meant_for(node, configs)
        for s in cfg.shared if cfg else []:
            why = _sign(node, s)
            if why:
                out.append(Unapplied(node, cfg, s, why))  # type: ignore[arg-type]
                break
    return out


def _plugin_dump(log: DevicePluginLog | None) -> tuple[str | None, list[str]]:
    """What the plugin's own config dump says of sharing: a sentence and its lines, or
    (None, []) when it printed no dump or the dump shares GPUs."""
    if log is None or log.config is None:
        return None, []
    sharing = log.config.get("sharing")
    blocks = sharing.values() if isinstance(sharing, dict) else []
    if any(isinstance(b, dict) and b.get("resources") for b in blocks):
        return None, []
    return ("The plugin's log confirms it: its 'Running with config:' dump has no sharing "
            "resources, so it runs with the defaults."), log.config_lines[:12]


@rule("k8s.sharing-not-applied", produces=("k8s.sharing-not-applied",))
def sharing_not_applied(cluster: Cluster, device_plugin_log: DevicePluginLog | None = None
                        ) -> Iterator[Finding]:
    """A time-slicing or MPS config that a node should use and does not: the node still
    advertises each GPU once (its capacity, GFD's replica labels), the plugin's config
    dump without the sharing block."""
    dump, dump_lines = _plugin_dump(device_plugin_log)
    for u in unapplied(cluster):
        s, cfg, node = u.shared, u.cfg, u.node
        label = node.labels.get(_CONFIG_LABEL)
        chosen = (f"its {_CONFIG_LABEL} label names the key {label}" if label else
                  f"no {_CONFIG_LABEL} label chooses a key for it, so only the plugin's "
                  "default config applies")
        ev: list[Evidence] = [
            evidence(SOURCE, [cfg.say(f"{s.path}.replicas", s.replicas)]),
            evidence("cluster", node.lines[:8] or [f"node {node.name}: {u.why}"])]
        if dump:
            ev.append(evidence("device_plugin_log", dump_lines))
        yield finding(
            "k8s.sharing-not-applied", Severity.WARNING,
            f"node {node.name} does not share its GPUs as {cfg.where} asks ({s.name} x"
            f"{s.replicas}): {u.why}",
            f"The config asks the device plugin to advertise each GPU {s.replicas} times "
            f"as {s.advertised} ({s.strategy}), and the node shows the plugin is not using "
            f"it ({chosen}). The plugin reads a config only when it is told which: the "
            "ConfigMap's name and default key in the plugin chart's config.name and "
            "config.default (the GPU operator: ClusterPolicy devicePlugin.config.name and "
            f"default), a node's own key by the {_CONFIG_LABEL} label, and a plugin that "
            "picks the change up (its config-manager sidecar, or a restart). "
            f"{dump + ' ' if dump else ''}The GPUs and the node are not at fault.",
            Action.FIX_CONFIG, Blame.CONFIG, object_scope("Node", node.name), ev)
