"""The MIG manager (the GPU operator's ``nvidia-mig-manager``, ``nvidia-mig-parted`` run
alone or by HAMi) and the ``nvidia.com/mig.config.state`` label it leaves on the node.

``MIG configuration applied successfully`` is what mig-parted prints when its apply
returned no error; it is not proof that the MIG devices exist. A mig-parted release that
does not know the GPU (``failed to find device with id '2bb5'``) has no MIG profiles for
it, applies an empty configuration and still prints it: nothing was created. A failed
apply sets the state label to ``failed``; the usual reasons are GPU clients that still
hold the GPU, and a MIG mode change that waits for a GPU reset or a reboot.
"""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.knowledge import gpu_profile
from gputriage.model import NODE, Action, Blame, Evidence, Finding, Severity, evidence
from gputriage.parsers.gpu_operator_log import GpuOperatorLog, OpEntry
from gputriage.parsers.k8s_model import Cluster, KNode
from gputriage.rules.base import finding, rule
from gputriage.rules.k8s_common import object_scope
from gputriage.text.fields import strict_hex

SOURCE = "gpu_operator_log"
STATE = "nvidia.com/mig.config.state"
CONFIG = "nvidia.com/mig.config"


def _named(device: str) -> str:
    """A PCI device id with the GPU model this project knows it as."""
    device_id = strict_hex(device.lower().removeprefix("0x")[-4:])
    profile = gpu_profile(device_id=device_id) if device_id is not None else None
    return f"{profile.model} (PCI device id {device})" if profile else f"PCI device id {device}"


def _states(cluster: Cluster | None) -> list[tuple[KNode, str]]:
    return [(n, n.labels[STATE]) for n in (cluster.nodes.values() if cluster else [])
            if n.labels.get(STATE)]


def _label_lines(node: KNode) -> list[str]:
    return [f"{k}={node.labels[k]}" for k in (CONFIG, STATE) if k in node.labels]


@rule("k8s.mig-manager", any_of=("gpu_operator_log", "cluster"),
      produces=("k8s.mig-unknown-device", "k8s.mig-config-failed", "k8s.mig-config-applied"))
def mig_manager(gpu_operator_log: GpuOperatorLog | None = None,
                cluster: Cluster | None = None) -> Iterator[Finding]:
    """How the MIG manager's last apply ended: on a GPU its mig-parted does not know (a
    "success" that created nothing), failed (its log, or the node's mig.config.state
    label), or applied."""
    mig = gpu_operator_log.of("mig") if gpu_operator_log else []
    unknown = [e for e in mig if e.event == "mig-unknown-device"]
    failed = [e for e in mig if e.event == "mig-failed"]
    applied = [e for e in mig if e.event == "mig-applied"]
    labels = _states(cluster)
    if unknown:
        yield _unknown_device(unknown, applied)
        return
    bad = [(n, s) for n, s in labels if s == "failed"]
    last_ok = bool(applied) and (not failed or mig.index(applied[-1]) > mig.index(failed[-1]))
    if (failed and not last_ok) or bad:
        yield _failed(failed, bad)
        return
    done = [(n, s) for n, s in labels if s == "success"]
    if last_ok or done:
        yield _applied(mig, applied, done)


def _unknown_device(unknown: list[OpEntry], applied: list[OpEntry]) -> Finding:
    device = unknown[0].detail or "?"
    said = (" and still printed 'MIG configuration applied successfully'" if applied else "")
    return finding(
        "k8s.mig-unknown-device", Severity.WARNING,
        f"nvidia-mig-parted does not know the GPU ({_named(device)}): its MIG configuration "
        "created nothing",
        f"mig-parted could not find {_named(device)} among the GPUs it knows, so it has no "
        f"MIG profiles for it: it applied an empty configuration{said}. No MIG instance "
        "exists, and whatever trusts that line (HAMi's dynamic MIG, the MIG manager's state "
        "label) hands out MIG devices that are not there. The GPU is fine: update "
        "nvidia-mig-parted (the GPU operator's MIG manager, or the copy HAMi bundles) to a "
        "release that supports this GPU, then apply again and check nvidia-smi mig -lgi.",
        Action.FIX_SOFTWARE, Blame.CONFIG,
        evidence=[evidence(SOURCE, [e.line for e in [*applied[-1:], *unknown]], limit=8)])


def _failed(failed: list[OpEntry], bad: list[tuple[KNode, str]]) -> Finding:
    ev: list[Evidence] = []
    if failed:
        ev.append(evidence(SOURCE, [e.line for e in failed], limit=8))
    if bad:
        ev.append(evidence("cluster", [ln for n, _ in bad for ln in _label_lines(n)]))
    wanted = next((n.labels.get(CONFIG) for n, _ in bad if n.labels.get(CONFIG)), None)
    where = f" on {', '.join(n.name for n, _ in bad)}" if bad else ""
    scope = object_scope("Node", bad[0][0].name) if bad and bad[0][0].name != "?" else NODE
    return finding(
        "k8s.mig-config-failed", Severity.WARNING,
        f"the MIG manager could not apply {wanted or 'the MIG configuration'}{where}",
        "The MIG manager's apply failed, so the node's GPUs keep their previous MIG layout "
        "(its log says at which step). Usual reasons: GPU clients still hold the GPUs (the "
        "manager stops the operator's own; jobs, DCGM or a host nvidia-persistenced it does "
        "not know must stop), a MIG mode change that takes effect only after a GPU reset or a "
        "reboot (A100/A30: reboot the node, then the manager applies again), or profiles "
        "that this GPU does not have. Not a fault of the GPUs.",
        Action.FIX_CONFIG, Blame.CONFIG, scope, ev)


def _applied(mig: list[OpEntry], applied: list[OpEntry],
             done: list[tuple[KNode, str]]) -> Finding:
    ev: list[Evidence] = []
    if applied:
        modes = [e for e in mig if e.event == "mig-mode"]
        ev.append(evidence(SOURCE, [e.line for e in [*modes[-2:], applied[-1]]]))
    if done:
        ev.append(evidence("cluster", [ln for n, _ in done for ln in _label_lines(n)]))
    config = next((n.labels.get(CONFIG) for n, _ in done if n.labels.get(CONFIG)), None)
    return finding(
        "k8s.mig-config-applied", Severity.OK,
        f"MIG configuration {config + ' ' if config else ''}applied",
        "The MIG manager applied the node's MIG configuration without an error"
        + (" and set mig.config.state to success." if done else ".")
        + " The MIG devices are advertised once the device plugin restarts.",
        Action.NONE, Blame.UNKNOWN, evidence=ev)
