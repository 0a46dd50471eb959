"""Rules on the driver stack: loaded or not, versions in agreement, a wedged
driver, the errors nvidia-smi prints instead of output, GPU init failures."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from gputriage.knowledge import node_messages
from gputriage.knowledge.job_messages import Message, message, scan_line
from gputriage.model import Action, Blame, Evidence, Finding, Scope, Severity, evidence, gpu_scope
from gputriage.parsers.kernel_fold import weight
from gputriage.rules.base import SOFTWARE_DRAIN, finding, rule, versions_agree
from gputriage.text.fields import split_lines

if TYPE_CHECKING:
    from gputriage.facts.expectations import GpuTraces
    from gputriage.parsers.driver import KernelModuleVersion, LibFile, ModuleVersions
    from gputriage.parsers.job_log import JobLog
    from gputriage.parsers.kernel_model import DriverEvent
    from gputriage.parsers.modules import Module
    from gputriage.parsers.nvml import NvmlReading
    from gputriage.parsers.nvsmi import SmiError, SmiReport
    from gputriage.parsers.pci import PciFunction

DOC_XID = "https://docs.nvidia.com/deploy/xid-errors/index.html"
Versions = dict[str, list[Evidence]]  # version -> the evidence that shows it


def _pci_line(f: PciFunction) -> str:
    return (f"{f.address} [{(f.vendor or 0):04x}:{(f.device or 0):04x}] class "
            f"{(f.class_code or 0):06x} driver={f.driver or 'none'}")


@rule("driver.presence",
      produces=("driver.not-loaded", "host.not-gpu-host", "driver.no-gpus-on-pci",
                "host.gpus-gone"))
def driver_presence(pci: list[PciFunction], pci_gpus: list[PciFunction], pci_source: str,
                    driver_loaded: bool | None = None, modules: dict[str, Module] | None = None,
                    driver_events: Sequence[DriverEvent] = (),
                    gpu_traces: GpuTraces | None = None) -> Iterator[Finding]:
    """NVIDIA GPUs on the PCI bus need the nvidia kernel module; a host with neither
    is not a GPU host, unless the kernel log, device nodes or the loaded module show
    it had GPUs: then they are gone."""
    gpus = pci_gpus
    loaded = driver_loaded
    if not gpus:
        if gpu_traces is not None and gpu_traces.evidence:
            yield _gpus_gone(pci, pci_source, gpu_traces)
            return
        if loaded:
            yield finding(
                "driver.no-gpus-on-pci", Severity.WARNING,
                "nvidia kernel module loaded but no NVIDIA GPU on the PCI bus",
                "The driver is loaded yet the PCI bus shows no NVIDIA GPU function: GPUs "
                "that fell off the bus hard disappear from PCI too. Check lspci and the "
                "kernel log; if this node should have GPUs, drain it and power-cycle it: "
                "that brings back a GPU that dropped off.",
                Action.PLAN_REPAIR, Blame.NODE)
            return
        hints = gpu_traces.hints if gpu_traces is not None else ()
        yield finding(
            "host.not-gpu-host", Severity.INFO,
            "no NVIDIA driver loaded and no NVIDIA PCI devices: not a GPU host",
            "Nothing on this host calls for NVIDIA checks." + (
                " The NVIDIA driver is installed, though: if this node should have GPUs, "
                "state how many in /etc/gputriage/expect.toml ([gpu] count) and the check "
                "reports them missing." if hints else ""), Action.NONE, Blame.UNKNOWN,
            evidence=[evidence(pci_source, [f"{len(pci)} PCI functions of interest, none an "
                                            "NVIDIA GPU"]), *hints])
        return
    if loaded is False:
        ev = [evidence(pci_source, [_pci_line(f) for f in gpus])]
        mods = modules or {}
        if "nouveau" in mods:
            ev.append(evidence("proc_modules", [mods["nouveau"].line],
                               "the open-source nouveau driver holds the GPUs"))
        events = [e for e in driver_events
                  if e.kind in ("no-adapter-probed", "module-load-failed",
                                "rm-init-adapter-failed", "api-mismatch")]
        if events:
            ev.append(evidence("kernel_log", [e.line for e in events]))
        yield finding(
            "driver.not-loaded", Severity.CRITICAL,
            f"{len(gpus)} NVIDIA GPU(s) on the PCI bus but the nvidia kernel module is not "
            "loaded",
            "Without the nvidia module no CUDA job can run here. Usual causes: a kernel "
            "update without a rebuilt DKMS module, Secure Boot refusing an unsigned module, "
            "nouveau claiming the GPUs, or a failed driver install. The kernel log says "
            f"which. {SOFTWARE_DRAIN}", Action.FIX_SOFTWARE, Blame.CONFIG, evidence=ev)


def _gpus_gone(pci: list[PciFunction], pci_source: str, traces: GpuTraces) -> Finding:
    """No GPU on the PCI bus of a host that shows it had some."""
    had = f"{len(traces.bus_ids)} GPUs" if len(traces.bus_ids) > 1 else "GPUs"
    return finding(
        "host.gpus-gone", Severity.CRITICAL,
        f"GPUs gone: no NVIDIA GPU on the PCI bus, but this host had {had}",
        "The PCI bus shows no NVIDIA GPU, yet the kernel log, the device nodes or the "
        "driver show this host had them: they fell off the bus (Xid 79) or were removed, "
        "and the driver let go of them. This is not a CPU host: drain the node, "
        "power-cycle it (a reboot does not bring back a GPU that dropped off) and repair "
        "the GPUs, riser or baseboard if they do not come back.",
        Action.DRAIN_AND_REPAIR, Blame.NODE,
        evidence=[evidence(pci_source, [f"{len(pci)} PCI functions of interest, none an "
                                        "NVIDIA GPU"]), *traces.evidence])


def _kernel_versions(km: KernelModuleVersion | None, mv: ModuleVersions | None) -> Versions:
    """The loaded module's version: /proc/driver/nvidia/version, /sys/module."""
    kernel: Versions = {}
    if km is not None and km.version:
        kernel.setdefault(km.version, []).append(
            evidence("proc_driver_nvidia_version", [km.line]))
    if mv is not None and mv.versions.get("nvidia"):
        kernel.setdefault(mv.versions["nvidia"], []).append(
            evidence("sys_module_nvidia", [f"/sys/module/nvidia/version: {mv.versions['nvidia']}"]))
    return kernel


def _mismatch_events(events: Iterable[DriverEvent], kernel: Versions, user: Versions,
                     flags: list[Evidence]) -> None:
    """The kernel log's API-mismatch lines: the versions the first one names, and a flag."""
    mismatch_events = [e for e in events if e.kind == "api-mismatch"]
    for ev in mismatch_events[:1]:
        line = split_lines(ev.line)
        if ev.details.get("kernel_version"):
            kernel.setdefault(ev.details["kernel_version"], []).append(
                evidence("kernel_log", line))
        if ev.details.get("client_version"):
            user.setdefault(ev.details["client_version"], []).append(
                evidence("kernel_log", line))
    if mismatch_events:
        flags.append(evidence("kernel_log", split_lines(mismatch_events[0].line),
                              f"API mismatch reported {weight(mismatch_events)} time(s)"))


def _userspace_versions(libs: Iterable[LibFile], reading: NvmlReading | None,
                        smi: Iterable[tuple[str, SmiReport]], user: Versions,
                        flags: list[Evidence]) -> None:
    """Userspace versions: the libraries' file names, NVML, nvidia-smi's complaint."""
    for lib in libs:
        if lib.version:
            user.setdefault(lib.version, []).append(evidence("nvidia_libs", [lib.path]))
    if reading is not None:
        if reading.available and reading.library_driver_version:
            user.setdefault(reading.library_driver_version, []).append(
                evidence("nvml", [f"NVML library version {reading.library_version}"]))
        if reading.version_mismatch:
            flags.append(evidence("nvml", [f"nvmlInit: {reading.error}"]))
    for source, report in smi:
        for err in report.errors:
            if err.kind == "version-mismatch":
                if err.nvml_library_version:
                    user.setdefault(err.nvml_library_version, []).append(
                        evidence(source, [f"NVML library version: {err.nvml_library_version}"]))
                # the complaint quotes the version line too: one line each, kept once
                flags.append(evidence(source, split_lines(err.line)))


def _active_libs(libs: Iterable[LibFile], targets: set[str] | None) -> list[LibFile]:
    """The libnvidia-ml the loader would pick: the one .so.1 points to, else all."""
    found = [lib for lib in libs if lib.version and lib.library == "libnvidia-ml"]
    if len({lib.version for lib in found}) <= 1:
        return found
    chosen = [lib for lib in found if lib.path.rsplit("/", 1)[-1] in (targets or set())]
    return chosen or found


@rule("driver.version-mismatch",
      any_of=("kernel_module", "module_versions", "driver_events", "libs", "nvml", "smi"),
      produces=("driver.version-mismatch", "driver.versions-consistent"))
def version_mismatch(kernel_module: KernelModuleVersion | None = None,
                     module_versions: ModuleVersions | None = None,
                     driver_events: Sequence[DriverEvent] = (),
                     libs: Sequence[LibFile] = (),
                     libnvidia_ml_targets: set[str] | None = None,
                     nvml: NvmlReading | None = None,
                     smi: Sequence[tuple[str, SmiReport]] = ()) -> Iterator[Finding]:
    """The loaded kernel module and the userspace driver must be one release;
    after an upgrade without a reboot they are not, and NVML and CUDA refuse to
    work."""
    kernel = _kernel_versions(kernel_module, module_versions)
    user: Versions = {}
    flags: list[Evidence] = []
    _mismatch_events(driver_events, kernel, user, flags)
    _userspace_versions(_active_libs(libs, libnvidia_ml_targets), nvml, smi, user, flags)
    disagree = [(k, u) for k in kernel for u in user if not versions_agree(k, u)]
    if disagree or flags:
        k_txt = " / ".join(_most_specific(kernel))
        u_txt = " / ".join(_most_specific(user))
        title = (f"driver version mismatch: kernel module {k_txt or 'unknown'}, userspace "
                 f"{u_txt or 'unknown'}" if k_txt or u_txt else
                 "driver version mismatch: the loaded kernel module and the userspace "
                 "driver differ (their versions are not in this output)")
        ev = [e for v in kernel.values() for e in v] + [e for v in user.values() for e in v]
        ev += flags
        yield finding(
            "driver.version-mismatch", Severity.CRITICAL,
            title,
            "The loaded nvidia kernel module is not the release of the userspace driver "
            "(libnvidia-ml, libcuda): nvidia-smi, NVML and CUDA fail until they agree. "
            + _mismatch_fix(_most_specific(kernel), _most_specific(user)) + " "
            + SOFTWARE_DRAIN, Action.FIX_SOFTWARE, Blame.CONFIG, evidence=ev)
        return
    if kernel and user:
        version = sorted(kernel)[0]
        yield finding(
            "driver.versions-consistent", Severity.OK,
            f"kernel module and userspace driver agree ({version})",
            "The loaded module and the installed libraries are the same release.",
            Action.NONE, Blame.UNKNOWN,
            evidence=[e for v in kernel.values() for e in v][:1]
            + [e for v in user.values() for e in v][:1])


def _mismatch_fix(kernel: list[str], user: list[str]) -> str:
    """Whether the packages disagree (complete or roll back the upgrade) or agree with
    each other but not with the loaded module (reboot into the new module), from the
    versions the input shows; what to compare when it shows too few."""
    if any(not versions_agree(a, b) for a in user for b in user):
        return (f"The userspace libraries are themselves of different releases "
                f"({', '.join(user)}): a package upgrade stopped half-way (unattended "
                "upgrades often take some of the driver's packages and not the others). "
                "Complete the upgrade or roll it back so that every NVIDIA package is one "
                "release, then reboot (or reload the nvidia modules with no GPU user left); "
                "a reboot alone does not help while the packages disagree.")
    if kernel and user:
        return (f"The installed userspace is {user[0]} and the running module "
                f"{', '.join(kernel)}: the driver was upgraded under the running system. If "
                f"the installed kernel module is {user[0]} too (modinfo -F version nvidia), "
                "reboot into it (or stop every GPU user and reload the nvidia modules); if it "
                "is not (a DKMS build that failed, a held package), complete or roll back "
                "the packages first: a reboot alone does not help.")
    return ("The input does not show both versions: compare the running module (cat "
            "/proc/driver/nvidia/version) with the installed packages (dpkg -l | grep -i "
            "nvidia, or rpm -qa | grep -i nvidia). When the packages are all one release, "
            "reboot into its module (or reload the nvidia modules with no GPU user left); "
            "when they are of two releases (a partial upgrade), complete or roll back the "
            "upgrade first: a reboot alone does not help.")


def _most_specific(versions: Versions) -> list[str]:
    """Drop versions that another one extends ("550.54" when "550.54.15" is known)."""
    names = sorted(versions)
    return [v for v in names
            if not any(o != v and o.startswith(v + ".") for o in names)]


@rule("driver.wedged", produces=("driver.wedged",))
def driver_wedged(hung_driver_queries: dict[str, dict[str, Any]] | None = None
                  ) -> Iterator[Finding]:
    """A driver query that never returns (nvidia-smi, NVML killed at their
    timeout) means the driver is wedged: that is a finding, not a hung tool."""
    hung = []
    for source, rec in (hung_driver_queries or {}).items():
        target = rec.get("target")
        cmd = " ".join(target) if isinstance(target, list) else str(target or source)
        hung.append(evidence(source, [f"{cmd}: {rec.get('error_detail') or 'timed out'}"]))
    if hung:
        yield finding(
            "driver.wedged", Severity.CRITICAL,
            f"{len(hung)} driver quer{'y' if len(hung) == 1 else 'ies'} hung: the NVIDIA "
            "driver is not answering",
            "nvidia-smi or NVML did not return before its timeout. A wedged driver usually "
            "follows a GPU fault (see the kernel log for Xid errors); jobs on this node will "
            "hang. Drain the node and reboot it; if a GPU fell off the bus, repair it.",
            Action.REBOOT_NODE, Blame.NODE, evidence=hung)


_SMI_ERRORS = {
    "driver-communication": (
        "nvidia-smi.cannot-communicate", "nvidia-smi cannot communicate with the NVIDIA driver",
        "The nvidia kernel module is not loaded or not working. Look at the kernel log for "
        "why it failed to load (kernel updated without a DKMS rebuild, Secure Boot, nouveau) "
        "and reinstall or rebuild the driver.", Action.FIX_SOFTWARE, Blame.CONFIG),
    "no-devices": (
        "nvidia-smi.no-devices", "nvidia-smi found no devices",
        "The driver is loaded but initialised no GPU. The kernel log's RmInitAdapter lines "
        "tell why: a BIOS setting (Resizable BAR / Above 4G decoding), GPU firmware that did "
        "not boot, or failing hardware. Reboot once; if it persists, repair.",
        Action.REBOOT_NODE, Blame.NODE),
    "device-handle": (
        "nvidia-smi.gpu-lost", "nvidia-smi cannot open a GPU: it is lost",
        "NVML cannot get a handle to this GPU: it fell off the bus or stopped responding "
        "(usually after Xid 79). Processes using it hang; a GPU reset rarely brings it back. "
        "Drain the node, power-cycle it, and reseat or RMA the GPU if it recurs.",
        Action.DRAIN_AND_REPAIR, Blame.NODE),
    "gpu-lost": (
        "nvidia-smi.gpu-lost", "nvidia-smi reports a GPU as lost",
        "The GPU stopped responding to the driver. Drain the node, power-cycle it, and "
        "reseat or RMA the GPU if it recurs.", Action.DRAIN_AND_REPAIR, Blame.NODE),
    "insufficient-permissions": (
        "nvidia-smi.no-permission", "nvidia-smi lacks permission to open the GPU devices",
        "The user or container cannot open /dev/nvidia*: check the device node modes and "
        "the container's device access.", Action.FIX_CONFIG, Blame.CONFIG),
}


# nvidia-smi's errors judged by a row of knowledge/node_messages.csv (explain reads it too)
_SMI_CATALOG = {"inforom-corrupted": "nvidia-smi.inforom-corrupted"}


def _smi_error(kind: str) -> tuple[str, str, str, Action, Blame, Severity]:
    """Id, title, explanation, action, blame and severity of an nvidia-smi error."""
    if kind in _SMI_CATALOG:
        msg = node_messages.row(_SMI_CATALOG[kind])
        return (msg.id, msg.title, f"{msg.meaning} {msg.cause}", msg.action, msg.blame,
                msg.severity)
    fid, title, why, action, blame = _SMI_ERRORS[kind]
    return (fid, title, why, action, blame,
            Severity.WARNING if fid == "nvidia-smi.no-permission" else Severity.CRITICAL)


@rule("nvidia-smi.errors",
      produces=("nvidia-smi.cannot-communicate", "nvidia-smi.no-devices", "nvidia-smi.gpu-lost",
                "nvidia-smi.gpus-unreachable", "nvidia-smi.no-permission",
                "nvidia-smi.nvml-init-failed", "nvidia-smi.inforom-corrupted",
                "nvidia-smi.error"))
def smi_errors(smi: Sequence[tuple[str, SmiReport]],
               in_container: bool | None = None,
               job_log: JobLog | None = None) -> Iterator[Finding]:
    """nvidia-smi prints an error instead of output: each message has a meaning
    and a next step (a version mismatch is the driver.version-mismatch rule's). An
    NVML error printed inside a container (gputriage runs in one, or the paste shows
    the container's prompt) is the container's, not the node's. Every GPU failing at
    once with NVML's Unknown Error is one cause that this output cannot name (the
    environment's access to the GPUs more often than that many failed GPUs)."""
    seen: set[tuple[str, str | None]] = set()
    for source, report in smi:
        if (f := _all_unreachable(source, report)) is not None:
            seen.update((e.kind, e.bus_id) for e in report.errors
                        if e.kind in ("device-handle", "no-devices"))
            yield f
        for err in report.errors:
            if err.kind == "version-mismatch" or (err.kind, err.bus_id) in seen:
                continue
            seen.add((err.kind, err.bus_id))
            ev = [evidence(source, split_lines(err.line))]
            # GPUs the driver enumerated and lost beside it: the node's, wherever it ran
            lost_beside = any(e.kind in ("device-handle", "gpu-lost") for e in report.errors)
            if err.kind == "no-devices" and (f := _no_devices_unplaced(
                    ev, _container_side(in_container, job_log), lost_beside
                    or in_container is False or (
                        job_log is not None and job_log.context.ran_on_host("nvidia-smi")))):
                yield f
            elif err.kind in _SMI_ERRORS or err.kind in _SMI_CATALOG:
                fid, title, why, action, blame, severity = _smi_error(err.kind)
                scope = gpu_scope(err.bus_id) if err.bus_id else Scope()
                if err.bus_id:
                    title = f"{title} ({err.bus_id})"
                yield finding(fid, severity, title, why, action, blame, scope, ev)
            elif err.kind == "nvml-init":
                host_ran = job_log is not None and job_log.context.ran_on_host("nvidia-smi")
                yield _nvml_init_failed(err, ev, _container_side(in_container, job_log),
                                        sum(len(r.gpus) for _, r in smi) if host_ran else 0,
                                        host_shown=host_ran)
            else:
                yield finding("nvidia-smi.error", Severity.WARNING,
                              f"nvidia-smi failed: {err.reason or err.line.strip()[:80]}",
                              "nvidia-smi printed an error instead of its output.",
                              Action.NONE, Blame.UNKNOWN, evidence=ev)


def _no_devices_unplaced(ev: list[Evidence], container: list[str] | None,
                         on_host: bool) -> Finding | None:
    """nvidia-smi's "No devices were found" where it is not the node's for sure: printed
    inside a container (the container was given no GPU: the configuration's), or with
    nothing to say where it ran (blame unknown, never a drain on this line alone). None
    when it ran on the host itself: the node's driver initialised no GPU."""
    if on_host:
        return None
    if container is not None:
        return finding(
            "nvidia-smi.no-devices", Severity.WARNING,
            "nvidia-smi found no devices inside this container: it was given no GPU",
            "Inside a container, nvidia-smi finding no device means the container was given "
            "none: the NVIDIA runtime mounts nvidia-smi whenever NVIDIA_DRIVER_CAPABILITIES "
            "has utility, but the GPUs only as NVIDIA_VISIBLE_DEVICES, --gpus, a CDI device "
            "or a nvidia.com/gpu request name them (void, none or an index the node does "
            "not have gives none). Recreate the container with its GPUs; run `gputriage "
            "check` on the host only if it lists none either.", Action.FIX_CONFIG,
            Blame.JOB_CONFIG,
            evidence=[*ev, evidence("job_log", container, "the container's prompt")]
            if container else ev)
    return finding(
        "nvidia-smi.no-devices", Severity.WARNING,
        "nvidia-smi found no devices (where it ran is not in this output)",
        "On the host, the driver is loaded but initialised no GPU (the kernel log's "
        "RmInitAdapter lines say why: a BIOS setting such as Resizable BAR or Above 4G "
        "decoding, GPU firmware that did not boot, failing hardware): drain and reboot. In "
        "a container, it was given no GPU (NVIDIA_VISIBLE_DEVICES, --gpus, CDI, a "
        "nvidia.com/gpu request): recreate it with its GPUs. This line alone does not tell "
        "which: run `gputriage check` on the host (or paste its nvidia-smi, dmesg and "
        "lspci -d 10de:) before draining.", Action.FIX_CONFIG, Blame.UNKNOWN, evidence=ev)


def _all_unreachable(source: str, report: SmiReport) -> Finding | None:
    """Two GPUs or more whose handles NVML could not open with an error that is not
    "GPU is lost", and no GPU listed: one finding, blame unknown (WSL2 with a GPU in TCC
    mode, a VM's passthrough, a container's device access, or the driver), never a
    drain on this output alone."""
    handles = [e for e in report.errors if e.kind == "device-handle"]
    buses = sorted({e.bus_id for e in handles if e.bus_id})
    if len(buses) < 2 or report.gpus:
        return None
    lines = [e.line for e in report.errors if e.kind in ("device-handle", "no-devices")]
    reason = handles[0].reason or "an error"
    return finding(
        "nvidia-smi.gpus-unreachable", Severity.WARNING,
        f"nvidia-smi could open none of its {len(buses)} GPUs ({reason})",
        f"NVML found {len(buses)} GPUs ({', '.join(buses)}) but could not open any of them "
        f"({reason}), and nvidia-smi then found no device. Every GPU failing at once this "
        "way is more often the environment than that many failed GPUs: under WSL2, "
        "paravirtualisation serves only GPUs in WDDM mode, and one GPU in TCC mode breaks "
        "it for all (nvidia-smi -dm 0 on the Windows host, or exclude that GPU); in a VM, "
        "the passthrough; in a container, its device access; or the driver's state. On "
        "bare metal, the kernel log tells: Xid 79 or 'fallen off the bus' for each GPU "
        "makes it the GPUs' (drain and repair); run gputriage check (or paste dmesg) there "
        "before draining.", Action.FIX_CONFIG, Blame.UNKNOWN,
        evidence=[evidence(source, lines[:6])])


_OS_BLOCKED = re.compile(r"blocked by the operating system", re.IGNORECASE)


def _container_side(in_container: bool | None, job_log: JobLog | None) -> list[str] | None:
    """The lines showing that nvidia-smi ran inside a container (gputriage's own cgroup,
    or a container's prompt in the paste); None when nothing shows it."""
    if in_container:
        return []
    ctx = job_log.context if job_log is not None else None
    if ctx is None or not ctx.ran_in_container("nvidia-smi"):
        return None
    return [ln for ln in ctx.lines if "nvidia-smi" in ln]


def _nvml_init_failed(err: SmiError, ev: list[Evidence], container: list[str] | None,
                      gpus_listed: int, host_shown: bool = False) -> Finding:
    """NVML's init error: the container's (warning, its configuration) when it was
    printed inside one; the node's (critical, blame unknown) when the paste shows the
    host's own prompt running nvidia-smi; else the NVML catalog's row, the verdict
    ``explain`` gives the same line. ``gpus_listed``: GPUs the host's own nvidia-smi
    lists beside it in the paste."""
    reason = err.reason or "unknown error"
    if _OS_BLOCKED.search(reason):
        return finding(
            "nvidia-smi.nvml-init-failed", Severity.WARNING,
            f"NVML cannot initialise: {reason}",
            "NVML_ERROR_OPERATING_SYSTEM: the operating system (or a cgroup) blocks the GPU's "
            "control device, so this is where NVML ran, not the GPUs. In a container: its "
            "device rules do not allow /dev/nvidiactl and /dev/nvidia* (start it with the "
            "NVIDIA runtime, --gpus or CDI). Under WSL2 or in a Hyper-V GPU-PV VM: the guest "
            "lacks the host driver's user-space files: copy the Windows driver's files "
            "(C:\\Windows\\System32\\lxss\\lib, and C:\\Program Files\\WSL\\lib for "
            "libd3d12) into /usr/lib/wsl/lib with their symlinks, and keep the host's and "
            "the guest's driver files of one release.", Action.FIX_CONFIG, Blame.CONFIG,
            evidence=ev)
    if container is not None and "driver not loaded" not in reason.lower():
        ev = [*ev, evidence("job_log", container, "the container's prompt")]
        beside = (f" The host's own nvidia-smi beside it lists {gpus_listed} GPU(s): the "
                  "node is fine." if gpus_listed else
                  " Run `gputriage check` on the host to confirm its GPUs are fine.")
        return finding(
            "nvidia-smi.nvml-init-failed", Severity.WARNING,
            f"NVML cannot initialise inside this container: {reason}",
            "Inside a container this is the container's access to the GPUs, not the node: "
            "with the systemd cgroup driver a `systemctl daemon-reload` on the host rewrites "
            "the container's device cgroup and takes /dev/nvidia* away (Unknown Error), or "
            "the NVIDIA runtime hook did not run. Recreate the container (or pod); then make "
            "device access survive reloads: nvidia-ctk system create-dev-char-symlinks "
            "--create-all, CDI devices, or the cgroupfs driver." + beside,
            Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)
    if host_shown:
        return finding(
            "nvidia-smi.nvml-init-failed", Severity.CRITICAL,
            f"NVML cannot initialise: {reason}",
            "The host's own nvidia-smi: the management library cannot talk to the driver, "
            "so monitoring and most CUDA jobs fail. This follows a GPU or driver fault; "
            "check the kernel log, drain and reboot if the GPUs are affected.",
            Action.REBOOT_NODE, Blame.UNKNOWN, evidence=ev)
    # where nothing shows where it ran: the NVML catalog's row, as `explain` says it
    msg = _nvml_row(err.line)
    return finding("nvidia-smi.nvml-init-failed", msg.severity,
                   f"NVML cannot initialise: {reason}", f"{msg.meaning} {msg.cause}",
                   msg.action, msg.blame, evidence=ev)


def _nvml_row(line: str) -> Message:
    """The NVML catalog's row of an init error's line (``nvml.init-failed`` when the
    line names no more specific one)."""
    for hit in scan_line(line):
        if hit.message.family == "nvml":
            return hit.message
    row = message("nvml.init-failed")
    assert row is not None  # a row of the shipped catalog
    return row


_INIT_EVENTS = {
    "rm-init-adapter-failed": ("driver.gpu-init-failed", "the driver failed to initialise a GPU",
                               Action.DRAIN_AND_REPAIR, Blame.NODE),
    "no-adapter-probed": ("driver.no-adapter-probed",
                          "the nvidia module probed no GPU (another driver holds them?)",
                          Action.FIX_CONFIG, Blame.CONFIG),
    "module-load-failed": ("driver.module-load-failed", "an NVIDIA kernel module failed to load",
                           Action.FIX_SOFTWARE, Blame.CONFIG),
}
_INIT_WHY = {
    "driver.gpu-init-failed": "RmInitAdapter failed: the GPU did not come up (firmware that "
    "did not boot, a BAR that could not be mapped, or failing hardware). It is unusable "
    "until fixed; power-cycle the node, then repair if it persists.",
    "driver.no-adapter-probed": "The nvidia module loaded but bound no GPU: another kernel "
    "driver claimed them first (nouveau; on kernels built with CONFIG_NOVA_CORE its "
    "successor nova_core, which the driver names NovaCore; vfio-pci for passthrough), or the "
    "GPUs are not visible. The GPU is not at fault: blacklist the driver that holds it "
    "(nouveau, or nova_core, nova_drm and nova), rebuild the initramfs and reboot.",
    "driver.module-load-failed": "modprobe could not insert an NVIDIA module: nvidia.ko is "
    "missing for this kernel (no DKMS rebuild after a kernel update), unsigned under Secure "
    "Boot, or built for another release. Everything above it (uvm, drm, persistenced) fails "
    "in turn. Rebuild or reinstall the driver for the running kernel. " + SOFTWARE_DRAIN,
}


# init events judged by a row of knowledge/node_messages.csv (explain reads it too)
_INIT_CATALOG = {"gsp-firmware-missing": "driver.gsp-firmware-missing"}


def _init_verdict(kind: str) -> tuple[str, str, str, Action, Blame, Severity]:
    """Id, title, explanation, action, blame and severity of a driver init event."""
    if kind in _INIT_CATALOG:
        msg = node_messages.row(_INIT_CATALOG[kind])
        why = f"{msg.meaning} {msg.cause}"
        if msg.blame is Blame.CONFIG and msg.severity is Severity.CRITICAL:
            why += " " + SOFTWARE_DRAIN
        return msg.id, msg.title, why, msg.action, msg.blame, msg.severity
    fid, title, action, blame = _INIT_EVENTS[kind]
    return fid, title, _INIT_WHY[fid], action, blame, Severity.CRITICAL


@rule("driver.init-events", produces=(*(v[0] for v in _INIT_EVENTS.values()),
                                      *_INIT_CATALOG.values()))
def init_events(driver_events: Sequence[DriverEvent]) -> Iterator[Finding]:
    """Kernel log lines showing that the driver could not bring a GPU up."""
    groups: dict[tuple[str, str | None], list[DriverEvent]] = {}
    for ev in driver_events:
        if ev.kind in _INIT_EVENTS or ev.kind in _INIT_CATALOG:
            # a probe that bound nothing is one cause, whichever GPUs its lines name
            bus = None if ev.kind == "no-adapter-probed" else ev.bus_id
            groups.setdefault((ev.kind, bus), []).append(ev)
    for (kind, bus_id), events in groups.items():
        fid, title, why, action, blame, severity = _init_verdict(kind)
        codes = sorted({e.details.get("code") or e.details.get("module") or ""
                        for e in events} - {""})
        if codes:
            title += f" ({', '.join(codes)})"
        held = sorted({f"{e.bus_id or 'a GPU'} is held by {e.details['holder']}"
                       for e in events if e.details.get("holder")})
        if held:
            title = f"the nvidia module probed no GPU: {'; '.join(held)}"
        if bus_id:
            title += f" at {bus_id}"
        buses = {e.bus_id for e in events if e.bus_id}
        where = bus_id or (buses.pop() if len(buses) == 1 else None)
        yield finding(fid, severity, title, why, action, blame,
                      gpu_scope(where) if where else Scope(),
                      [evidence("kernel_log", [ln for e in events for ln in split_lines(e.line)],
                                f"{weight(events)} occurrence(s)" if weight(events) > 1
                                else None,
                                limit=12)])
