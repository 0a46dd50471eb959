"""What ``nvidia-ctk`` said while it set the host up, and the runtimes docker then lists.

``runtime configure`` writes the engine's configuration (docker's daemon.json,
containerd's config.toml of schema version 1, 2 or 3) and asks for the engine to be
restarted; its warning that it "could not infer options from runtimes" only means it used
its defaults. docker then lists ``nvidia`` among its runtimes; a default runtime of
``runc`` is right for docker, where containers ask for GPUs with ``--gpus``.
"""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.model import Action, Blame, Finding, Severity, evidence
from gputriage.parsers.ctk_log import CtkLog
from gputriage.rules.base import finding, rule

SOURCE = "nvidia_ctk_log"


@rule("container.ctk", produces=("container.ctk-failed", "container.ctk-runtime-not-loaded",
                                 "container.ctk-configured"))
def ctk(nvidia_ctk_log: CtkLog) -> Iterator[Finding]:
    """nvidia-ctk's errors; a runtime it configured that docker does not list (not
    restarted since); else what it configured, the benign warnings said to be benign."""
    log = nvidia_ctk_log
    failed = [x for x in log.lines if x.failed]
    if failed:
        yield finding(
            "container.ctk-failed", Severity.WARNING,
            f"nvidia-ctk failed: {failed[0].message[:120]}",
            "nvidia-ctk stopped with an error, so the configuration it was asked for was not "
            "written (or the CDI spec not generated): read its message; a failure to load "
            "NVML means the driver is not usable on the host (nvidia-smi must work first). "
            "Run it again once the cause is fixed.", Action.FIX_CONFIG, Blame.CONFIG,
            evidence=[evidence(SOURCE, [x.line for x in failed], limit=8)])
        return
    runtimes = log.docker_runtimes
    if runtimes is not None and "nvidia" not in runtimes:
        written = [p for p in log.written if "docker" in p]
        yield finding(
            "container.ctk-runtime-not-loaded", Severity.WARNING,
            "docker does not list the nvidia runtime" + (" nvidia-ctk wrote" if written else ""),
            "docker info lists its runtimes as " + ", ".join(runtimes) + ": the nvidia runtime "
            + ("is in " + written[0] + " but the daemon was not restarted since" if written
               else "is not configured for this daemon")
            + ". Run nvidia-ctk runtime configure --runtime=docker (rootless: --config="
            "$HOME/.config/docker/daemon.json) and restart docker; docker info must then "
            "list nvidia among its Runtimes.", Action.FIX_CONFIG, Blame.CONFIG,
            evidence=[evidence(SOURCE, [x.line for x in log.lines if "Wrote" in x.message]
                               + log.docker_lines)])
        return
    if not (log.written or log.cdi_spec or runtimes):
        return
    yield _configured(log)


def _configured(log: CtkLog) -> Finding:
    parts = []
    for path in dict.fromkeys(log.written):
        what = f"wrote {path}"
        if "containerd" in path and log.config_version:
            what += (f" (containerd config version {log.config_version}"
                     + (f", CRI plugin {log.cri_plugin}" if log.cri_plugin else "") + ")")
        parts.append(what)
    if log.cdi_spec:
        parts.append(f"generated a CDI spec (version {log.cdi_spec})")
    benign = [x for x in log.of("WARN") if x.benign]
    notes = []
    if benign:
        notes.append("its warning '" + benign[0].message[:80] + "' only means it used its "
                     "default runtime options: nothing to do")
    if log.restart:
        notes.append("restart " + " and ".join(dict.fromkeys(log.restart))
                     + " for the change to take effect")
    if log.docker_runtimes is not None:
        notes.append("docker lists the runtimes " + ", ".join(log.docker_runtimes)
                     + (f" (default {log.docker_default}: containers ask for GPUs with "
                        "--gpus)" if log.docker_default else ""))
    lines = [x.line for x in log.lines if "Wrote" in x.message or x.benign
             or "CDI spec" in x.message] + log.docker_lines
    return finding(
        "container.ctk-configured", Severity.OK,
        "nvidia-ctk configured the container stack"
        + (f" for {', '.join(log.engines)}" if log.engines else ""),
        "nvidia-ctk " + "; ".join(parts or ["ran without an error"]) + "."
        + ("".join(f" {n[:1].upper()}{n[1:]}." for n in notes)),
        Action.NONE, Blame.UNKNOWN, evidence=[evidence(SOURCE, lines, limit=12)])
