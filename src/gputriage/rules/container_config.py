"""The container stack's configuration against the host: CDI specs generated for another
driver than the loaded one, engines without the NVIDIA runtime, a default runtime that is
not it, a container given no ``compute`` capability, and what libnvidia-container sees.

Every repair here is configuration on the node (blame ``config``, action fix-config), and
none drains it. After a driver upgrade the order of repair is fixed: the driver first
(reboot or reload, so that module and libraries agree), then the CDI spec, then the
runtime, then the device plugin (:data:`REPAIR_ORDER`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from gputriage.model import Action, Blame, DriverVersions, Evidence, Finding, Severity, evidence
from gputriage.parsers.container_cfg import PASTED
from gputriage.rules.base import finding, rule, versions_agree
from gputriage.text.words import counted

if TYPE_CHECKING:
    from gputriage.parsers.container_cfg import CdiSpecs, CliInfo, CtkCdiList, ToolkitConfig
    from gputriage.parsers.container_engines import (
        ContainerdConfig,
        ContainerEnv,
        DaemonConfig,
        DockerConfigs,
    )
    from gputriage.parsers.job_log import JobLog

REPAIR_ORDER = (
    "Repair in this order: (1) reboot, or reload the driver, so that the kernel module and "
    "the libraries are one version; (2) regenerate the CDI spec: nvidia-ctk cdi generate "
    "--output=/etc/cdi/nvidia.yaml; (3) restart the container runtime (systemctl restart "
    "containerd, or docker); (4) restart the NVIDIA device plugin's pods so that the node "
    "advertises its GPUs again.")
CHECK_ON_NODE = "run `gputriage check` on the node to confirm the loaded driver version"
# a driver library named in a job's error: "libcuda.so.535.161.07", "libnvidia-ml.so.550.54.15"
_JOB_LIB = re.compile(r"lib(?:cuda|nvidia-[\w-]+)\.so\.(?P<v>[0-9]{3}\.[0-9]{1,3}"
                      r"(?:\.[0-9]{1,3})?)")
_MISSING = re.compile(r"no such file|not found|does not exist|error mounting|mount error", re.I)
_UNKNOWN_RUNTIME = re.compile(r"unknown or invalid runtime name: nvidia|unknown runtime "
                              r"(?:name|specified)?:? ?nvidia|no runtime for \"?nvidia", re.I)


def _loaded(driver: DriverVersions | None) -> tuple[str | None, str]:
    """The driver whose libraries are on disk (what a spec must mount), and where that
    was read; the kernel module's version when the libraries' is not known."""
    if driver is None:
        return None, ""
    if driver.userspace:
        return driver.userspace, "the installed driver libraries"
    return driver.kernel_module, "the loaded kernel module"


def _job_missing_libs(job_log: JobLog | None) -> list[tuple[str, str]]:
    """(version, line) of the driver libraries a job's error says are missing."""
    out: list[tuple[str, str]] = []
    for line in job_log.lines if job_log is not None else ():
        m = _JOB_LIB.search(line)
        if m and _MISSING.search(line):
            out.append((m.group("v"), line))
    return out


@rule("container.cdi", produces=("container.cdi-stale-spec", "container.cdi-spec-current",
                                 "container.cdi-spec-version"))
def cdi_spec(cdi_specs: CdiSpecs, driver_versions: DriverVersions | None = None,
             job_log: JobLog | None = None,
             nvidia_ctk_cdi_list: CtkCdiList | None = None) -> Iterator[Finding]:
    """A CDI spec names the driver's libraries by their versioned file names: generated
    for another driver than the loaded one, every container that asks for a GPU through
    it fails to mount a file that is gone (pods have no GPUs after a driver update)."""
    loaded, where = _loaded(driver_versions)
    module = driver_versions.kernel_module if driver_versions is not None else None
    missing = _job_missing_libs(job_log)
    for spec in cdi_specs.of_kind():
        if not spec.driver_versions:
            continue
        ev = [evidence(f"cdi_specs:{spec.path}", [f"kind: {spec.kind}", *spec.lines], limit=6)]
        if nvidia_ctk_cdi_list is not None and nvidia_ctk_cdi_list.lines:
            ev.append(evidence("nvidia_ctk_cdi_list", nvidia_ctk_cdi_list.lines, limit=4))
        named = ", ".join(spec.driver_versions)
        job_hits = [ln for v, ln in missing if v in spec.driver_versions]
        if job_hits:
            ev.append(evidence("job_log", job_hits, limit=4))
        if loaded and not any(versions_agree(v, loaded) for v in spec.driver_versions):
            ev.append(evidence("driver", [f"{where}: {loaded}"]))
            yield finding(
                "container.cdi-stale-spec", Severity.CRITICAL if job_hits else Severity.WARNING,
                f"CDI spec {spec.path} was generated for driver {named}, the node has "
                f"{loaded}",
                f"The spec mounts the libraries of driver {named} into every container that "
                f"asks for {spec.kind}; those files are gone since the driver became {loaded}, "
                "so container creation fails with a missing-file mount error and pods get no "
                f"GPU. {REPAIR_ORDER}",
                Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)
        elif loaded and module and not any(versions_agree(v, module)
                                           for v in spec.driver_versions):
            ev.append(evidence("driver", [f"the loaded kernel module: {module}",
                                          f"{where}: {loaded}"]))
            yield finding(
                "container.cdi-spec-version", Severity.INFO,
                f"CDI spec {spec.path} mounts the libraries of driver {named}; the loaded "
                f"kernel module is {module} (mismatch)",
                f"The spec matches the driver libraries installed on disk ({loaded}), so "
                "containers start, but the running kernel module is another version: NVML "
                "and CUDA inside them fail (driver/library version mismatch) until the node "
                "reboots or the driver is reloaded. After that the spec is current: nothing "
                "to regenerate.", Action.NONE, Blame.CONFIG, evidence=ev)
        elif loaded:
            what = (f"the loaded driver {loaded}" if module else
                    f"the installed driver libraries {loaded}")
            yield finding(
                "container.cdi-spec-current", Severity.OK,
                f"CDI spec {spec.path} matches {what}",
                f"The spec mounts driver {named}'s libraries and lists "
                f"{counted(len(spec.devices), 'device')} of {spec.kind}.", Action.NONE,
                Blame.CONFIG, evidence=ev)
        else:
            sev = Severity.WARNING if job_hits else Severity.INFO
            yield finding(
                "container.cdi-spec-version", sev,
                f"CDI spec {spec.path} mounts the libraries of driver {named}",
                ("A job failed to mount one of them: the spec is likely stale (generated "
                 "before a driver upgrade). " + REPAIR_ORDER if job_hits else
                 "It must be regenerated whenever the driver changes.")
                + f" The loaded driver is not known here: {CHECK_ON_NODE}.",
                Action.FIX_CONFIG if job_hits else Action.NONE, Blame.CONFIG, evidence=ev)


def _containerd_ev(cfg: ContainerdConfig) -> list[Evidence]:
    lines = [x for x in (cfg.default_line, *(r.line for r in cfg.runtimes.values())) if x]
    return [evidence("containerd_config", lines, limit=8)]


def _docker_ev(cfg: DaemonConfig) -> list[Evidence]:
    return [evidence(f"docker_daemon_json:{cfg.path}", cfg.lines or ["{}"], limit=8)]


@rule("container.runtime", any_of=("containerd_config", "docker_daemon_json"),
      produces=("container.runtime-nvidia-missing", "container.runtime-daemon-mismatch",
                "container.runtime-default-not-nvidia", "container.runtime-configured"))
def engine_runtime(containerd_config: ContainerdConfig | None = None,
                   docker_daemon_json: DockerConfigs | None = None,
                   container_toolkit_config: ToolkitConfig | None = None,
                   nvidia_ctk_version: str | None = None,
                   job_log: JobLog | None = None) -> Iterator[Finding]:
    """The engines' runtimes: the NVIDIA runtime registered where the toolkit is
    installed, the engine in use being the one configured, and the default runtime."""
    toolkit = container_toolkit_config is not None or nvidia_ctk_version is not None
    refused = [ln for ln in (job_log.lines if job_log is not None else ())
               if _UNKNOWN_RUNTIME.search(ln)]
    engines: list[tuple[str, str | None, str | None, list[Evidence]]] = []
    if containerd_config is not None and containerd_config.paths \
            and not containerd_config.cri_disabled:  # Docker's containerd: no CRI, no pods
        nv = containerd_config.nvidia
        engines.append(("containerd", nv.name if nv else None, containerd_config.default_runtime,
                        _containerd_ev(containerd_config)))
    for cfg in docker_daemon_json.files if docker_daemon_json is not None else ():
        label = "Docker" if cfg.path == PASTED else f"Docker ({cfg.path})"
        engines.append((label, "nvidia" if cfg.has_nvidia else None, cfg.default_runtime,
                        _docker_ev(cfg)))
    for engine, name, default, ev in engines:
        if name is None and (toolkit or refused):
            yield finding(
                "container.runtime-nvidia-missing", Severity.WARNING,
                f"{engine} has no NVIDIA runtime",
                f"The NVIDIA container toolkit is {'installed' if toolkit else 'asked for'} "
                f"but {engine}'s configuration registers no nvidia runtime, so containers it "
                "starts get no GPU (or fail with 'unknown runtime'). Run nvidia-ctk runtime "
                "configure --runtime=containerd (or docker), then restart the engine and the "
                "device plugin.",
                Action.FIX_CONFIG, Blame.CONFIG,
                evidence=[*ev, evidence("job_log", refused, limit=3)])
        elif name is not None and refused:
            yield finding(
                "container.runtime-daemon-mismatch", Severity.WARNING,
                f"the engine refused the nvidia runtime that {engine}'s configuration "
                "registers",
                "The configuration read here has the nvidia runtime, yet the engine the job "
                "used does not know it: that engine reads another file (a rootless Docker "
                "daemon reads ~/.config/docker/daemon.json; another Docker context or host) or "
                "was not restarted since the file changed. Configure the daemon in use "
                "(nvidia-ctk runtime configure --runtime=docker --config="
                "$HOME/.config/docker/daemon.json for a rootless one) and restart it.",
                Action.FIX_CONFIG, Blame.CONFIG,
                evidence=[*ev, evidence("job_log", refused, limit=3)])
        elif name is not None:
            yield _configured(engine, name, default, ev)


def _configured(engine: str, name: str, default: str | None, ev: list[Evidence]) -> Finding:
    if default is not None and default != name:
        return finding(
            "container.runtime-default-not-nvidia", Severity.INFO,
            f"{engine}'s default runtime is {default}, not {name}",
            f"The {name} runtime is registered but not the default: a pod must ask for it "
            f"(runtimeClassName: {name}) or a container for --runtime={name}. Where the "
            "cluster expects every pod to get GPUs by default (the device plugin itself "
            "included), make it the default runtime.",
            Action.NONE, Blame.CONFIG, evidence=ev)
    return finding(
        "container.runtime-configured", Severity.OK,
        f"{engine} runs the NVIDIA runtime{' by default' if default == name else ''}",
        f"The {name} runtime is registered"
        + (" and is the default runtime." if default == name else "."),
        Action.NONE, Blame.CONFIG, evidence=ev)


@rule("container.capabilities", produces=("container.capabilities-no-compute",))
def capabilities(container_env: ContainerEnv) -> Iterator[Finding]:
    """NVIDIA_DRIVER_CAPABILITIES decides which driver libraries the runtime mounts: a
    list without ``compute`` gives a container no libcuda, so CUDA cannot start."""
    caps = container_env.capabilities
    if caps is None or "compute" in caps or "all" in caps:
        return
    name = "NVIDIA_DRIVER_CAPABILITIES"
    yield finding(
        "container.capabilities-no-compute", Severity.WARNING,
        f"{name}={','.join(caps) or '(empty)'} lacks compute",
        "The NVIDIA runtime mounts only the libraries of the capabilities asked for; "
        "without compute the container has no libcuda and CUDA fails to initialise (no "
        f"device, or error 35/100). Set {name}=compute,utility (or all) in the image or the "
        "pod spec.", Action.FIX_CONFIG, Blame.CONFIG,
        evidence=[evidence("container_env", [container_env.line(name)])])


@rule("container.toolkit", any_of=("nvidia_container_cli_info", "container_toolkit_config"),
      produces=("container.toolkit-sees-gpus", "container.toolkit-cdi-mode-without-spec"))
def toolkit(nvidia_container_cli_info: CliInfo | None = None,
            container_toolkit_config: ToolkitConfig | None = None,
            cdi_specs: CdiSpecs | None = None) -> Iterator[Finding]:
    """What libnvidia-container sees (the GPUs a container can be given), and a runtime
    set to CDI mode with no NVIDIA CDI spec to read."""
    info = nvidia_container_cli_info
    if info is not None and info.devices and not info.error:
        models = sorted({d.model for d in info.devices if d.model})
        seen = max(len(info.devices), len([d for d in info.listed if d.startswith("/dev/")]))
        yield finding(
            "container.toolkit-sees-gpus", Severity.OK,
            f"nvidia-container-cli sees {seen} GPU(s)"
            + (f" ({', '.join(models)})" if models else ""),
            f"libnvidia-container reads driver {info.nvrm or '(not reported: Tegra)'} "
            f"supporting CUDA {info.cuda or '?'} and can hand these GPUs to containers.",
            Action.NONE, Blame.CONFIG,
            evidence=[evidence("nvidia_container_cli_info", info.lines, limit=4)])
    cfg = container_toolkit_config
    if cfg is not None and cfg.mode == "cdi" and cdi_specs is not None \
            and not cdi_specs.of_kind():
        yield finding(
            "container.toolkit-cdi-mode-without-spec", Severity.WARNING,
            "the NVIDIA runtime is in CDI mode but no NVIDIA CDI spec exists",
            "In CDI mode the runtime resolves nvidia.com/gpu devices from the specs in "
            f"{', '.join(cfg.spec_dirs) or '/etc/cdi and /var/run/cdi'}; with none, every GPU "
            "container fails with 'unresolvable CDI devices'. Generate one: nvidia-ctk cdi "
            "generate --output=/etc/cdi/nvidia.yaml.",
            Action.FIX_CONFIG, Blame.CONFIG,
            evidence=[evidence("container_toolkit_config",
                               [cfg.lines.get("mode", 'mode = "cdi"')])])
