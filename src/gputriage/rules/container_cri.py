"""The running containerd against its configuration file: ``crictl info`` shows the CRI
plugin's runtimes as containerd loaded them; when the nvidia runtime there differs from
the config.toml that was edited, the edit never applied (containerd was not restarted,
was started with another ``--config``, or is k3s's or RKE2's, which render their own file
from a template, or the GPU operator's toolkit rewrote it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from gputriage.model import Action, Blame, Evidence, Finding, Severity, evidence
from gputriage.parsers.crictl_info import TOOLKIT_DIR
from gputriage.rules.base import finding, rule

if TYPE_CHECKING:
    from gputriage.parsers.container_engines import ContainerdConfig, CriRuntime
    from gputriage.parsers.crictl_info import CrictlInfo, RunningRuntime
    from gputriage.parsers.k8s_model import Cluster

TEMPLATES = {
    "k3s": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
    "rke2": "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl",
}
_RESTART = {"k3s": "systemctl restart k3s (k3s-agent on an agent)",
            "rke2": "systemctl restart rke2-server (rke2-agent on an agent)"}


def _distribution(info: CrictlInfo, cfg: ContainerdConfig, cluster: Cluster | None
                  ) -> str | None:
    """k3s or RKE2, when the running config, the file's path or the nodes say so."""
    if info.distribution:
        return info.distribution
    words = " ".join(cfg.paths).lower()
    for node in (cluster.nodes.values() if cluster else []):
        words += f" {node.kubelet_version or ''} {node.runtime_version or ''}".lower()
    return next((d for d in ("rke2", "k3s") if d in words), None)


def _differences(run: RunningRuntime, edited: CriRuntime) -> list[str]:
    out = []
    if run.binary and edited.binary and run.binary != edited.binary:
        out.append(f"BinaryName {run.binary} (the file: {edited.binary})")
    if run.systemd_cgroup is not None and edited.systemd_cgroup is not None \
            and run.systemd_cgroup != edited.systemd_cgroup:
        out.append(f"SystemdCgroup {str(run.systemd_cgroup).lower()} (the file: "
                   f"{str(edited.systemd_cgroup).lower()})")
    return out


def _repair(dist: str | None, toolkit: bool) -> str:
    if dist:
        return (f"{dist} never reads /etc/containerd/config.toml: it renders its own "
                f"containerd config at each start, from {TEMPLATES[dist]} when that exists. "
                "Copy the generated config.toml next to it as config.toml.tmpl, make the "
                f"change there, then {_RESTART[dist]}" + (
                    f"; the runtime in {TOOLKIT_DIR} is the GPU operator's toolkit, whose "
                    "settings (ClusterPolicy toolkit.env CONTAINERD_CONFIG) write that file "
                    "while it runs" if toolkit else "") + ".")
    if toolkit:
        return (f"The running runtime is the GPU operator's toolkit ({TOOLKIT_DIR}): the "
                "operator's toolkit container writes the containerd config (its settings: "
                "ClusterPolicy toolkit.env CONTAINERD_CONFIG, CONTAINERD_SOCKET), and k3s or "
                f"RKE2 render theirs from {TEMPLATES['k3s']} ({TEMPLATES['rke2']}): change the "
                "setting there, or remove the leftover toolkit when the operator is gone, then "
                "restart containerd (or k3s/rke2).")
    return ("Restart containerd after editing (systemctl restart containerd), and check "
            "which config file it was started with (containerd --config in its unit: "
            "systemctl cat containerd).")


def _file_lines(rt: CriRuntime) -> list[str]:
    lines = [rt.line] if rt.line else []
    if rt.binary is not None:
        lines.append(f'BinaryName = "{rt.binary}"')
    if rt.systemd_cgroup is not None:
        lines.append(f"SystemdCgroup = {str(rt.systemd_cgroup).lower()}")
    return lines


@rule("container.cri-running", produces=("container.cri-config-not-loaded",))
def cri_running(crictl_info: CrictlInfo, containerd_config: ContainerdConfig,
                cluster: Cluster | None = None) -> Iterator[Finding]:
    """The nvidia runtime containerd runs (``crictl info``) against the one in the
    config file read: another BinaryName or SystemdCgroup means the running containerd
    does not use the file that was edited."""
    run = crictl_info.nvidia
    edited = containerd_config.nvidia
    if edited is None or containerd_config.cri_disabled:
        return
    if run is not None and run.name != edited.name:
        edited = containerd_config.runtimes.get(run.name, edited)
    if run is None:
        diffs = [f"no nvidia runtime (the file registers {edited.name})"] \
            if crictl_info.whole and crictl_info.runtimes else []
        run_lines = [f"runtimes: {', '.join(crictl_info.runtimes)}"]
    else:
        diffs = _differences(run, edited)
        run_lines = [run.lines[k] for k in ("runtimeType", "BinaryName", "SystemdCgroup")
                     if k in run.lines]
    if not diffs:
        return
    dist = _distribution(crictl_info, containerd_config, cluster)
    toolkit = run is not None and run.operator_toolkit
    ev: list[Evidence] = [
        evidence("crictl_info", [*run_lines, *filter(None, [crictl_info.distribution_line])]),
        evidence("containerd_config", _file_lines(edited))]
    yield finding(
        "container.cri-config-not-loaded", Severity.WARNING,
        f"the running containerd's {edited.name} runtime is not the edited config.toml's",
        f"crictl info shows what containerd loaded: {'; '.join(diffs)}. The containerd that "
        "runs does not use the file that was edited, so the change (a SystemdCgroup "
        "workaround, another runtime binary) never applied. " + _repair(dist, toolkit),
        Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)
