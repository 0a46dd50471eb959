"""Rules on the container stack's errors in a job's output (docker, podman, containerd,
CRI-O, the NVIDIA container toolkit, libnvidia-container) and on the NVML errors a job
printed, each judged with where the output was printed (the job's context) and, when
the snapshot has them, the host's own facts.

One finding per message of the catalog (:mod:`gputriage.knowledge.job_messages`,
families ``container`` and ``nvml``); the catalog row gives the first judgement and
these rules refine it. A hook's error is judged by the cause it carries after
``stderr:`` (the generic hook finding stays only when no cause is recognised), and an
error libnvidia-container reports from the host (``nvml error: driver not loaded``) is
the node's, which causes.py folds under the host's own finding when it is there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from gputriage.knowledge import cuda_compat as cc
from gputriage.knowledge.job_messages import Hit, one_per_line, scan_line
from gputriage.model import Action, Blame, DriverVersions, Evidence, Finding, Severity, evidence
from gputriage.parsers.job_context import JobContext
from gputriage.parsers.job_log import JobLog
from gputriage.parsers.k8s_model import Cluster
from gputriage.parsers.nvsmi import SmiReport
from gputriage.parsers.pci import PciFunction
from gputriage.rules.base import finding, rule

FAMILIES = ("container", "nvml")
CHECK_NODE = ("Run `gputriage check` on the node (or paste its nvidia-smi) to confirm "
              "{what}.")
REPAIR_ORDER = ("Order of repair: finish the driver change (reboot, or reload the nvidia "
                "modules), then regenerate the CDI spec (nvidia-ctk cdi generate), then "
                "restart the container engine and the device plugin.")
CGROUP_WHY = (
    "Inside a running container this is the device cgroup losing /dev/nvidia*: with "
    "the systemd cgroup driver, a `systemctl daemon-reload` on the host (a package "
    "install does one) rewrites the container's device rules. The GPUs and the driver "
    "are fine. Recreate the container (or pod); then make device access survive reloads: "
    "nvidia-ctk system create-dev-char-symlinks --create-all (and its udev rule), CDI "
    "devices, or the cgroupfs driver.")


@dataclass(frozen=True)
class Host:
    """What the host's own facts say, as far as the snapshot has them."""

    versions: DriverVersions | None
    smi_gpus: int  # GPUs the host's nvidia-smi lists
    smi_failed: bool  # the host's nvidia-smi printed an NVML error instead
    pci_gpus: int | None  # NVIDIA GPUs on the PCI bus (None: unknown)
    driver_loaded: bool | None
    smi_source: str | None = None  # the nvidia-smi output that lists them
    gpu_name: str | None = None  # the first GPU's name as nvidia-smi gives it

    @property
    def known(self) -> bool:
        return bool(self.smi_gpus or self.smi_failed or self.pci_gpus is not None
                    or self.driver_loaded is not None
                    or (self.versions and (self.versions.userspace or self.versions.cuda)))

    @property
    def healthy(self) -> bool:
        """The host's nvidia-smi lists GPUs without an NVML error."""
        return self.smi_gpus > 0 and not self.smi_failed


def _host(versions: DriverVersions | None, smi: Sequence[tuple[str, SmiReport]],
          pci_gpus: list[PciFunction] | None, driver_loaded: bool | None) -> Host:
    gpus = max((len(r.gpus) for _, r in smi), default=0)
    failed = any(e.kind in ("nvml-init", "version-mismatch", "driver-communication")
                 for _, r in smi for e in r.errors)
    source = next((src for src, r in smi if len(r.gpus) == gpus), None) if gpus else None
    name = next((g.name for _, r in smi for g in r.gpus if g.name), None)
    return Host(versions, gpus, failed, None if pci_gpus is None else len(pci_gpus),
                driver_loaded, source, name)


def _kept(hits: list[Hit]) -> list[Hit]:
    """The container and NVML hits that say something of their own (one per line, a
    hook's failure only without its cause: the catalog's one_per_line)."""
    return [h for h in one_per_line(hits) if h.message.family in FAMILIES]


def finding_id(hit: Hit) -> str:
    """The finding of a message: a container message's own id, ``container.nvml-*`` for
    an NVML one."""
    mid = hit.message.id
    return mid if hit.message.family == "container" else "container.nvml-" + mid.split(".", 1)[1]


PRODUCES = (
    "container.unknown-runtime", "container.no-gpu-driver", "container.no-nvidia-gpu",
    "container.cdi-unresolvable", "container.cdi-host-device-missing",
    "container.cdi-inject-failed", "container.cdi-generate-failed",
    "container.hook-driver-not-loaded", "container.hook-driver-mismatch",
    "container.hook-nvml-error", "container.hook-library-missing", "container.hook-cuda-error",
    "container.cuda-requirement", "container.requirement-unmet", "container.mount-missing-file",
    "container.mount-file-exists", "container.ldcache-error", "container.device-error",
    "container.hook-failed", "container.nvml-unknown-error", "container.nvml-version-mismatch",
    "container.nvml-driver-not-loaded", "container.nvml-insufficient-permissions",
    "container.nvml-library-not-found", "container.nvml-os-blocked", "container.nvml-init-failed",
    "container.no-compute-capability", "container.mount-proc-driver",
    "container.selinux-denied", "container.group-name-missing",
    "container.nvml-symbol-missing",
    "container.driver-rpc-timeout",
)


@rule("container.job-errors", any_of=("job_log", "cluster"), produces=PRODUCES)
def job_errors(job_log: JobLog | None = None, driver_versions: DriverVersions | None = None,
               smi: Sequence[tuple[str, SmiReport]] = (),
               pci_gpus: list[PciFunction] | None = None,
               driver_loaded: bool | None = None,
               cluster: Cluster | None = None) -> Iterator[Finding]:
    """The container stack's and NVML's errors in a job's output or in a pod's events
    (the kubelet's FailedCreatePodSandBox): each with its cause (a hook's stderr
    unwrapped), judged by where the output was printed (a container's prompt, the
    host's) and by the host's facts when the snapshot has them; and a container given
    driver capabilities without ``compute``."""
    host = _host(driver_versions, smi, pci_gpus, driver_loaded)
    ctx = job_log.context if job_log is not None else JobContext()
    groups: dict[str, list[Hit]] = {}
    for hit in _kept(job_log.hits if job_log is not None else []):
        groups.setdefault(finding_id(hit), []).append(hit)
    for fid, hits in groups.items():
        yield _judge(fid, hits, ctx, host)
    yield from _event_errors(cluster, set(groups), host)
    if ctx.lacks_compute:
        yield finding(
            "container.no-compute-capability", Severity.WARNING,
            f"the container was given NVIDIA_DRIVER_CAPABILITIES={ctx.driver_capabilities}"
            ": no compute, so CUDA cannot work in it",
            "NVIDIA_DRIVER_CAPABILITIES says which driver libraries the runtime mounts; "
            "without `compute` (or `all`) libcuda is not there and every CUDA call fails, "
            "although nvidia-smi (`utility`) may work. Set it to compute,utility in the "
            "job or the image.", Action.FIX_CONFIG, Blame.JOB_CONFIG,
            evidence=[evidence("job_log", [ln for ln in ctx.lines
                                           if "NVIDIA_DRIVER_CAPABILITIES" in ln])])


# a pod's sandbox asks containerd for the RuntimeClass's handler: in a cluster, the
# toolkit (the GPU operator's toolkit DaemonSet) adds it once the driver is in place
SANDBOX_WHY = (
    "In Kubernetes the pod's RuntimeClass (nvidia) names a containerd runtime handler the "
    "node's containerd does not have: the NVIDIA container toolkit has not configured it "
    "there. With the GPU operator the toolkit DaemonSet adds it only after the driver "
    "container has loaded the driver; read that pod's log first (a nouveau module it cannot "
    "unload is a common cause: blacklist nouveau in /etc/modprobe.d, update-initramfs -u, "
    "reboot). The GPUs are not at fault.")


def _event_errors(cluster: Cluster | None, seen: set[str], host: Host) -> Iterator[Finding]:
    """The catalog's messages in the cluster's events, as the job's would be judged; an
    event's finding that the job's output already gives is not repeated."""
    hits: list[Hit] = []
    lines: dict[int, list[str]] = {}
    for n, e in enumerate(cluster.events if cluster else []):
        for hit in scan_line(e.message, n):
            hits.append(hit)
            lines[n] = e.lines
    groups: dict[str, list[Hit]] = {}
    for hit in _kept(hits):
        groups.setdefault(finding_id(hit), []).append(hit)
    events = cluster.events if cluster else []
    for fid, found in groups.items():
        if fid in seen:
            continue
        f = _judge(fid, found, JobContext(), host)
        ev = [evidence("cluster", [ln for h in found for ln in lines[h.lineno]], limit=12)]
        why = f.explanation
        if fid == "container.unknown-runtime" and any(
                events[h.lineno].reason == "FailedCreatePodSandBox" for h in found):
            why = f"{SANDBOX_WHY} {why}"
        yield replace(f, evidence=tuple(ev), explanation=why)


def _evidence(hits: list[Hit], ctx: JobContext) -> list[Evidence]:
    lines = [h.line.strip() for h in hits]
    return [evidence("job_log", list(dict.fromkeys(ctx.launch_lines() + lines)), limit=8)]


def _judge(fid: str, hits: list[Hit], ctx: JobContext, host: Host) -> Finding:
    """The finding of one message, its catalog judgement refined."""
    msg, fields = hits[0].message, hits[0].fields
    severity, blame, action = msg.severity, msg.blame, msg.action
    detail = next((fields[k] for k in ("device", "want", "cause", "library", "path", "reason")
                   if fields.get(k)), None)
    if detail and fields.get("path") == detail:  # a file in the container: its own path
        detail = re.sub(r"^/\S*?/(?:merged|rootfs)(?=/)", "", detail)
    meaning = msg.meaning.rstrip(".")
    if meaning[1:2].islower():  # "The engine ..." -> "the engine ...", NVML kept
        meaning = meaning[:1].lower() + meaning[1:]
    title = meaning + (f" ({detail.strip()[:80]})" if detail else "")
    why = [msg.cause, msg.next]
    ev = _evidence(hits, ctx)
    if fid in ("container.no-gpu-driver", "container.unknown-runtime") and _no_nvidia(ctx, host):
        seen = "; ".join(ctx.other_gpus[:2]) or "the host's PCI bus shows none"
        ev.append(evidence("job_log", ctx.other_gpus))
        return finding(
            "container.no-nvidia-gpu", Severity.WARNING,
            "no NVIDIA GPU on this machine: a container cannot be given one",
            f"The engine has no GPU device driver to offer, and this machine has no NVIDIA "
            f"GPU ({seen}). Neither the driver nor the container toolkit is at fault: run "
            "the job on CPU or on a node with an NVIDIA GPU.",
            Action.FIX_CONFIG, Blame.JOB_CONFIG, evidence=ev)
    if fid == "container.cdi-unresolvable" and ctx.podman_as_docker:
        why.insert(0, "`docker` here is podman's shim, and podman gives GPUs through CDI "
                      "specs only: --gpus needs a generated spec.")
    if fid == "container.nvml-unknown-error":
        return _nvml_unknown(hits, ctx, host, ev)
    if fid == "container.cuda-requirement":
        title, why, blame = _cuda_requirement(fields.get("want"), host, blame)
    if fid in ("container.hook-driver-mismatch", "container.nvml-version-mismatch",
               "container.mount-missing-file", "container.cdi-host-device-missing"):
        why.append(REPAIR_ORDER)
    if (fid in ("container.hook-driver-not-loaded", "container.nvml-driver-not-loaded")
            and host.driver_loaded):
        severity, action = Severity.WARNING, Action.FIX_SOFTWARE
        why.insert(0, "The host's facts show the nvidia module loaded now: the job ran "
                      "before it was, or on another node.")
    if blame is Blame.NODE and not host.known:
        why.append(CHECK_NODE.format(what="the driver's state"))
    return finding(fid, severity, title, " ".join(w for w in why if w), action, blame,
                   evidence=ev)


def _no_nvidia(ctx: JobContext, host: Host) -> bool:
    """Whether the paste or the host's facts show no NVIDIA GPU on the machine."""
    if host.pci_gpus is not None:
        return host.pci_gpus == 0 and not host.smi_gpus
    return bool(ctx.other_gpus) and not host.smi_gpus


def _nvml_unknown(hits: list[Hit], ctx: JobContext, host: Host,
                  ev: list[Evidence]) -> Finding:
    """NVML's Unknown Error: the container's lost device access, or the host's fault."""
    fid = "container.nvml-unknown-error"
    if ctx.in_container or (host.healthy and ctx.in_container is not False):
        where = ("printed inside a container" if ctx.in_container
                 else "printed by the job while the host's own nvidia-smi works")
        if host.healthy and host.smi_source:
            where += f"; the host's nvidia-smi lists {host.smi_gpus} GPU(s)"
            ev = [*ev, evidence(host.smi_source, [],
                                f"the host's nvidia-smi lists {host.smi_gpus} GPU(s), no error")]
        return finding(fid, Severity.WARNING,
                       "NVML cannot open the GPUs inside the container: it lost its device "
                       "access (Unknown Error)",
                       f"NVML's Unknown Error was {where}. {CGROUP_WHY}"
                       + ("" if host.known else " "
                          + CHECK_NODE.format(what="that the host's GPUs are fine")),
                       Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)
    if ctx.in_container is False:
        return finding(fid, Severity.CRITICAL,
                       "NVML cannot open the GPUs on the host (Unknown Error)",
                       "NVML's Unknown Error was printed on the host itself: the driver "
                       "cannot reach the GPUs (a GPU fault, a wedged driver). Look at the "
                       "kernel log for Xid errors; drain and reboot the node.",
                       Action.REBOOT_NODE, Blame.NODE, evidence=ev)
    return finding(fid, Severity.WARNING,
                   "NVML cannot open the GPUs (Unknown Error): in a container, lost device "
                   "access; on a host, a driver fault",
                   f"{CGROUP_WHY} If it was printed on the host itself, the driver cannot "
                   "reach the GPUs: look for Xid errors and drain the node. "
                   + CHECK_NODE.format(what="whether the host's NVML works"),
                   Action.FIX_CONFIG, Blame.UNKNOWN, evidence=ev)


def _cuda_requirement(want: str | None, host: Host, blame: Blame
                      ) -> tuple[str, list[str], Blame]:
    """The image's CUDA requirement against the node's driver and GPU: the driver is
    older than the image's CUDA needs (upgrade it: the node's software), unless the GPU
    itself is too old for any driver of that CUDA (the image is too new for it)."""
    have = host.versions.cuda if host.versions else None
    driver = host.versions.userspace if host.versions else None
    need, floor = cc.min_driver(want), cc.family_floor(want)
    last = cc.last_cuda_for(cc.capability_of(host.gpu_name))
    if want and last and cc.version_key(want) > cc.version_key(last):
        return (f"the image needs CUDA >= {want}; the node's {host.gpu_name} is served up to "
                f"CUDA {last}",
                [f"The image was built for CUDA {want}, and no driver for CUDA {want} supports "
                 f"the {host.gpu_name} (its last CUDA release is {last}): upgrading the driver "
                 f"cannot help. Run an image built for CUDA {last} or older, or run the job on "
                 "newer GPUs."], Blame.JOB_CONFIG)
    minimum = f"driver {need} or newer" if need else f"a driver for CUDA {want}"
    if need and floor and cc.version_key(floor) < cc.version_key(need):
        minimum += (f" (CUDA {cc.version_key(want)[0]}.x programs also start on any driver "
                    f">= {floor} by minor-version compatibility, PTX JIT aside, but the check "
                    "refuses them unless the container is given NVIDIA_DISABLE_REQUIRE=1)")
    tell = ("Which side to change: if other nodes run this image, this node's driver lags the "
            "fleet (upgrade it); if the fleet keeps this driver on purpose, use an image tag "
            "for the driver's CUDA version or older.")
    if have:
        title = (f"the image needs CUDA >= {want}; the node's driver "
                 f"{driver or ''} supports CUDA {have}".replace("  ", " "))
        why = [f"libnvidia-container compared the image's NVIDIA_REQUIRE_CUDA with the "
               f"node's driver: it supports up to CUDA {have}, the image needs {want}. "
               f"Upgrade the node's driver to {minimum}, or pick an image tag for CUDA {have} "
               f"or older. {tell}"]
    else:
        title = f"the image needs CUDA >= {want}, newer than the node's driver supports"
        why = [f"libnvidia-container compared the image's NVIDIA_REQUIRE_CUDA with the node's "
               f"driver: the driver is older than CUDA {want} needs, so the node needs "
               f"{minimum}; with WSL2 or Docker Desktop that is the Windows host's driver. "
               f"Otherwise the job needs an image for the driver's CUDA. {tell}"]
    return title, why, blame
