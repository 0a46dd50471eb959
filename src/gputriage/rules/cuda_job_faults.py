"""The job's CUDA errors that tell of the node's state (fabric not ready, driver halves
that differ, no device, unknown error) and of the job's own faults (illegal address and
launch failures, told from the GPU's by the kernel log's Xids; out of memory). The
compatibility arithmetic is :mod:`gputriage.rules.cuda_job`'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from gputriage.facts.fabric import FabricNeed
from gputriage.knowledge.job_messages import CUDA_FAMILY, FRAMEWORK_FAMILY, Hit, catalog
from gputriage.logscan.events import DriverEvent
from gputriage.model import Action, Blame, DriverVersions, Evidence, Finding, Severity, evidence
from gputriage.parsers.job_log import JobLog
from gputriage.rules.base import SOFTWARE_DRAIN, finding, rule
from gputriage.rules.cuda_job import (
    ASK_HOST,
    DOC_COMPAT,
    JOB_XIDS,
    KERNEL_FAULT,
    NO_DEVICE,
    NO_IMAGE,
    NODE_XIDS,
    OOM,
    TOO_OLD,
)
from gputriage.rules.kernel_common import xid_code

DOC_FM = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/"
DOC_XID = "https://docs.nvidia.com/deploy/xid-errors/"


def _of(log: JobLog, ids: frozenset[str] | set[str]) -> list[Hit]:
    return [h for h in log.hits if h.message.id in ids]


def _job_ev(hits: list[Hit], extra: tuple[str, ...] = ()) -> Evidence:
    return evidence("job_log", dict.fromkeys([h.line.strip() for h in hits] + list(extra)))


def _fabric(hits: list[Hit], need: FabricNeed | None) -> Finding:
    ev = [_job_ev(hits)]
    if need is not None and need.needed:
        ev.extend(need.evidence)
        where = f"This host needs the fabric manager: {need.reason}."
    elif need is not None:
        where = (f"gputriage sees no NVSwitch here ({need.reason}): check the fabric state "
                 "the GPUs report (nvidia-smi -q | grep -A2 Fabric) and the driver's log.")
    else:
        where = ("The host's facts are not here: run `gputriage check` on the node to see its "
                 "NVSwitches, the fabric manager service and the GPUs' fabric state.")
    return finding(
        "cuda.fabric-not-ready", Severity.CRITICAL,
        "CUDA error 802: the system is not initialised (NVLink fabric not ready)",
        "CUDA refuses to start until the NVSwitch fabric is configured: the node's fabric "
        "manager is not running, failed, or does not match the driver. This is the node's "
        "software, whatever the job: move the job to another node, then start and enable "
        f"nvidia-fabricmanager (same version as the driver) and wait for the GPUs' fabric "
        f"state to read Completed. {SOFTWARE_DRAIN} {where}",
        Action.FIX_CONFIG, Blame.CONFIG, evidence=ev, references=(DOC_FM,))


def _mismatch(log: JobLog, hits: list[Hit], drv: DriverVersions | None) -> Finding:
    compat = [p for p in log.versions.libcuda if "compat" in p.lower()]
    ev = [_job_ev(hits, tuple(log.versions.line("libcuda")))]
    if compat:
        return finding(
            "cuda.driver-mismatch", Severity.WARNING,
            f"CUDA error 803: a compat libcuda ({compat[0]}) does not fit the kernel module",
            "The forward-compatibility libcuda on the library path does not work with the "
            "loaded kernel module's branch. Take it off the path (or use a supported driver "
            "branch for forward compatibility).", Action.FIX_CONFIG, Blame.CONFIG,
            evidence=ev, references=(DOC_COMPAT,))
    known = ""
    if drv is not None and drv.kernel_module and drv.userspace:
        known = f" Here the module is {drv.kernel_module} and the library {drv.userspace}."
        ev.append(evidence("host", (f"node: kernel module {drv.kernel_module}, user-space "
                                    f"driver {drv.userspace}",)))
    else:
        known = (" Compare /proc/driver/nvidia/version with the library's version (run "
                 "`gputriage check` on the node).")
    return finding(
        "cuda.driver-mismatch", Severity.CRITICAL,
        "CUDA error 803: unsupported display driver / CUDA driver combination (the node's "
        "driver)",
        "libcuda and the kernel module are not one working driver: a driver upgraded under "
        "a running system (the old module still loaded), a partial package upgrade, or a "
        "driver too old for the CUDA runtime the program bundles. No CUDA program runs on "
        "this node until the driver is whole: install one current driver release "
        "completely (kernel module and libraries of the same version, new enough for the "
        "program's CUDA) and reboot, or reload the nvidia modules once no process holds "
        "them; a reboot alone does not help when the installed packages disagree. Drain "
        f"only to protect jobs: the GPUs are not at fault.{known}",
        Action.FIX_SOFTWARE, Blame.CONFIG, evidence=ev, references=(DOC_COMPAT,))


def _no_device(log: JobLog, hits: list[Hit], drv: DriverVersions | None) -> Finding:
    ctx = log.context
    in_container = getattr(ctx, "in_container", None)
    ctx_lines = tuple(getattr(ctx, "lines", ()) or ())
    ev = [_job_ev(hits, ctx_lines)]
    ids = {h.message.id for h in hits}
    if ids == {"cuda.101"}:
        return finding(
            "cuda.no-device", Severity.WARNING,
            "CUDA error 101: the job asked for a GPU it was not given",
            "The device ordinal the program uses is not among the GPUs visible to it: "
            "CUDA_VISIBLE_DEVICES (or the scheduler's allocation) gives fewer GPUs than the "
            "program expects. Fix the job's device selection.", Action.FIX_CONFIG,
            Blame.JOB_CONFIG, evidence=ev)
    driver = (drv.kernel_module or drv.userspace) if drv is not None else None
    runs = list(getattr(ctx, "gpuless_runs", ()) or ())
    if runs and getattr(ctx, "gpus", None) is None and getattr(ctx, "runtime", None) is None:
        return finding(
            "cuda.no-device", Severity.WARNING,
            "the container was started without a GPU: no --gpus, CDI device or nvidia runtime",
            f"The container was started with `{runs[0][:160]}`, which asks for no GPU, so "
            "the NVIDIA runtime injected neither the GPU's device files nor the driver's "
            "libraries and the program finds no GPU (only an engine whose default runtime "
            "is nvidia, with NVIDIA_VISIBLE_DEVICES set in the image, gives GPUs without "
            "asking). Start it with --gpus all (or --device "
            "nvidia.com/gpu=all with CDI, --runtime=nvidia; in Kubernetes, a nvidia.com/gpu "
            "request). The node and its toolkit are not at fault.", Action.FIX_CONFIG,
            Blame.JOB_CONFIG, evidence=ev)
    if in_container:
        blame, why = Blame.JOB_CONFIG, (
            "The process runs in a container that was not given a GPU (or not the driver's "
            "libraries): start it with --gpus / a CDI device / the nvidia runtime, with "
            "NVIDIA_VISIBLE_DEVICES set and 'compute' in NVIDIA_DRIVER_CAPABILITIES; in "
            "Kubernetes, request nvidia.com/gpu.")
    elif driver:
        blame, why = Blame.JOB_CONFIG, (
            f"The node's driver is loaded ({driver}), so the "
            "process was given no GPU: check CUDA_VISIBLE_DEVICES and, in a container, what "
            "it was given (device nodes, NVIDIA_VISIBLE_DEVICES, CDI).")
    elif in_container is False:
        blame, why = Blame.NODE, (
            "The job ran on the host and CUDA sees no GPU: the driver is not loaded or the "
            "GPUs are gone. Run nvidia-smi and `gputriage check` on the node.")
    elif ids == {"torch.no-cuda-gpus"}:
        blame, why = Blame.JOB_CONFIG, (
            "PyTorch's CUDA runtime started and counted no GPU it may use: most often the "
            "job's own selection hides them: CUDA_VISIBLE_DEVICES set (in the environment or "
            "hard-coded in the script: os.environ['CUDA_VISIBLE_DEVICES'] = '1' on a one-GPU "
            "machine hides GPU 0) to an index or UUID this machine does not have, or empty; "
            "in a container, no GPU given (--gpus, NVIDIA_VISIBLE_DEVICES, a nvidia.com/gpu "
            "request). Print CUDA_VISIBLE_DEVICES where the job runs and compare it with "
            f"nvidia-smi -L; only if nvidia-smi lists no GPU either is it the node ({ASK_HOST}).")
    else:
        blame, why = Blame.UNKNOWN, (
            "Either the process was given no GPU (a container without --gpus / CDI / "
            "nvidia.com/gpu, CUDA_VISIBLE_DEVICES empty) or the node's driver is not loaded. "
            f"The output does not say where it ran: {ASK_HOST} and that the GPUs are listed.")
    return finding(
        "cuda.no-device", Severity.WARNING, "CUDA sees no GPU", why, Action.FIX_CONFIG, blame,
        evidence=ev)


# where CUDA is being started: its 999 there is the node's driver state, not the program
_AT_INIT = re.compile(r"initiali[sz]|cuInit|cudaGetDeviceCount|NumCudaDevices|cudaSetDevice|"
                      r"device count|_cuda_init|lazy_init", re.IGNORECASE)


def _unknown(hits: list[Hit]) -> Finding:
    if any(_AT_INIT.search(h.line) for h in hits):
        return finding(
            "cuda.unknown-error", Severity.WARNING,
            "CUDA error 999: unknown error at initialisation (the node's driver state)",
            "CUDA could not start and gives no reason. When it fails this early, the node's "
            "driver is not in a state to serve CUDA: most often the nvidia_uvm module is not "
            "loaded or /dev/nvidia-uvm is missing (after a driver update, suspend/resume, or "
            "in a container started before the module was loaded); otherwise a GPU or driver "
            "fault. Not the job: check lsmod | grep nvidia_uvm and ls /dev/nvidia-uvm, load "
            "it (modprobe nvidia_uvm), and if nvidia-smi fails too read the kernel log for "
            "Xids and reinstall the driver or reboot.", Action.FIX_SOFTWARE, Blame.NODE,
            evidence=[_job_ev(hits)])
    return finding(
        "cuda.unknown-error", Severity.WARNING,
        "CUDA error 999: unknown error",
        "CUDA gives no reason. Often the driver's state (the nvidia_uvm module missing or "
        "broken, a GPU in error after an Xid, device files the container lost); sometimes "
        "the program. Check the node's kernel log for Xids, that /dev/nvidia-uvm exists "
        "(modprobe nvidia_uvm), and whether nvidia-smi works; with a clean node, rerun the "
        "job and look at the call that failed.", Action.FIX_CONFIG, Blame.UNKNOWN,
        evidence=[_job_ev(hits)])


_HARDWARE = {  # CUDA errors that are the GPU's hardware: the catalog's node, reset-gpu
    "cuda.214": ("cuda.ecc-uncorrectable", "an uncorrectable ECC error",
                 "its memory had an error ECC could not correct (the kernel log shows Xid 48, "
                 "63, 64, 94 or 95 with it)", "nvidia-smi -q -d ECC,ROW_REMAPPER (or "
                 "PAGE_RETIREMENT) shows the counters: a remap that failed, pending retirements "
                 "at their limit or errors that come back after the reset mean a repair (RMA)"),
    "cuda.220": ("cuda.nvlink-uncorrectable", "an uncorrectable NVLink error",
                 "an NVLink error that could not be corrected hit it (the kernel log shows "
                 "Xid 74, or SXid errors on an NVSwitch system)", "nvidia-smi nvlink -s and "
                 "-e show the links and their errors: a link that stays down or keeps failing "
                 "after the reset means a repair"),
}


def _hardware(hits: list[Hit]) -> Iterator[Finding]:
    """A CUDA error that reports the GPU's own hardware: unlike most CUDA errors, the
    node's fault whatever the job (one finding per kind)."""
    for mid, (fid, what, why, check) in _HARDWARE.items():
        mine = [h for h in hits if h.message.id == mid]
        if not mine:
            continue
        ordinal = re.search(r"device (?:ordinal )?([0-9]{1,3})\b", mine[0].line)
        on = f" on CUDA device {ordinal.group(1)}" if ordinal else ""
        yield finding(
            fid, Severity.CRITICAL, f"CUDA error {mid[5:]}: {what}{on} (the GPU's hardware)",
            f"The job failed because the GPU{on} reported {what}: {why}. This is the node's "
            "hardware, not the job: the job's data on that GPU is lost, rerun it elsewhere. "
            f"Drain the GPU and reset it; then {check}. Run gputriage check on the node to "
            "find the GPU (CUDA's device numbers follow CUDA_VISIBLE_DEVICES, not nvidia-smi's"
            ").", Action.RESET_GPU, Blame.NODE, evidence=[_job_ev(mine)], references=(DOC_XID,))


@rule("cuda.node-state",
      produces=("cuda.fabric-not-ready", "cuda.driver-mismatch", "cuda.no-device",
                "cuda.unknown-error", *(fid for fid, *_ in _HARDWARE.values())))
def node_state(job_log: JobLog, driver_versions: DriverVersions | None = None,
               needs_fabric_manager: FabricNeed | None = None) -> Iterator[Finding]:
    """A job's CUDA errors that speak of the node: 802 (the NVLink fabric is not ready:
    the fabric manager), 803 (user-space driver and kernel module differ), no device
    (in a container: what it was given; on a host: the driver), 999 (unknown: the
    driver's state when CUDA is starting), and the GPU's own hardware (214 uncorrectable
    ECC, 220 uncorrectable NVLink)."""
    yield from _hardware(job_log.hits)
    if hits := _of(job_log, {"cuda.802"}):
        yield _fabric(hits, needs_fabric_manager)
    if hits := _of(job_log, {"cuda.803"}):
        yield _mismatch(job_log, hits, driver_versions)
    if hits := _of(job_log, NO_DEVICE):
        yield _no_device(job_log, hits, driver_versions)
    if hits := _of(job_log, {"cuda.999"}):
        yield _unknown(hits)


def _codes(events: list[DriverEvent]) -> str:
    codes = {xid_code(e) for e in events} - {None}
    return ", ".join(str(c) for c in sorted(c for c in codes if c is not None))


def _xids(events: list[DriverEvent] | None) -> tuple[list[DriverEvent], list[DriverEvent]]:
    node, job = [], []
    for ev in events or ():
        code = xid_code(ev)
        if code in NODE_XIDS:
            node.append(ev)
        elif code in JOB_XIDS:
            job.append(ev)
    return node, job


def _kernel_fault(hits: list[Hit], events: list[DriverEvent] | None) -> Finding:
    node, job = _xids(events)
    what = hits[0].message.text or hits[0].message.meaning
    title = f"CUDA error {hits[0].message.code}: {what}"
    ev = [_job_ev(hits)]
    if node:
        codes = _codes(node)
        ev.append(evidence("kernel_log", [e.line for e in node[:6]]))
        return finding(
            "cuda.kernel-fault", Severity.WARNING, f"{title} (the GPU's fault: Xid "
            f"{codes})",
            f"The kernel log shows Xid {codes} in the same window: a "
            "GPU memory or hardware error ended the job's kernel, not the job's code. Rerun "
            "the job on another node; the Xid finding says what the GPU needs.",
            Action.RESTART_JOB, Blame.NODE, evidence=ev, references=(DOC_XID,))
    if job:
        codes = _codes(job)
        ev.append(evidence("kernel_log", [e.line for e in job[:6]]))
        tail = (f"The kernel log's Xid {codes} (an application fault) "
                "confirms it; no hardware Xid is in the window.")
    elif events is not None:
        tail = "The kernel log shows no hardware Xid (48/63/64/79/94/95) in the window."
    else:
        tail = ("The node's kernel log is not here: run `gputriage check` (or `gputriage logs`) "
                "on the node; Xid 13/31/43 confirm the job, 48/63/64/79/94/95 would make it "
                "the GPU's fault.")
    return finding(
        "cuda.kernel-fault", Severity.WARNING, f"{title} (the job's fault)",
        "A kernel of the job accessed memory it does not own or faulted: almost always a bug "
        "in the program or a library; the CUDA context is lost and the process must restart. "
        "Rerun with CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer to find the kernel. " + tail,
        Action.RESTART_JOB, Blame.JOB, evidence=ev, references=(DOC_XID,))


_SIZE = r"([0-9]{1,9}(?:\.[0-9]{1,4})?)\s?([KMGT]i?B)"
# PyTorch's out-of-memory message, before 2.1 and after
_TORCH_TOTAL = re.compile(rf"(?:{_SIZE} total capacity|total capacity of {_SIZE})")
_TORCH_OWN = re.compile(rf"(?:{_SIZE} reserved in total by PyTorch|this process has {_SIZE} "
                        r"memory in use)")
_TORCH_FREE = re.compile(rf"(?:{_SIZE} free\b|of which {_SIZE} is free)")
_UNITS = {"K": 2**-20, "M": 2**-10, "G": 1.0, "T": 2**10}


def _gib(m: re.Match[str] | None) -> float | None:
    """The first size a match holds, in GiB."""
    if m is None:
        return None
    groups = [g for g in m.groups() if g is not None]
    return float(groups[0]) * _UNITS[groups[1][0].upper()] if len(groups) >= 2 else None


def _oom_numbers(hits: list[Hit], needs: str | None) -> tuple[str, str, Blame, Action] | None:
    """(title, what the numbers say, blame, action) when the message gives them: memory
    held by other processes (a shared GPU), or a program bigger than the GPU."""
    for h in hits:
        total, own = _gib(_TORCH_TOTAL.search(h.line)), _gib(_TORCH_OWN.search(h.line))
        free = _gib(_TORCH_FREE.search(h.line))
        if total and own is not None and free is not None and total - own - free > 0.25 * total:
            others = total - own - free
            return (f"CUDA out of memory: other processes hold {others:.1f} GiB of the GPU's "
                    f"{total:.1f} GiB", f"This process holds {own:.2f} GiB; {others:.1f} GiB are "
                    "held by other processes on the same GPU. A GPU shared by several pods or "
                    "jobs (time-slicing, MPS without limits, a stray process) gives none of "
                    "them memory isolation: each must cap its own use "
                    "(torch.cuda.set_per_process_memory_fraction, a smaller batch), share it "
                    "among fewer replicas, or use MIG on GPUs that have it. ",
                    Blame.JOB_CONFIG, Action.FIX_CONFIG)
    if needs:
        return (f"out of GPU memory: the program needs {needs} at once",
                f"XLA's buffer assignment puts the program's allocations at {needs} in all: if "
                "that is more than the GPU's memory no setting fits it: use a GPU with more "
                "memory, or a smaller model, input or batch (JAX preallocates 75 % of the GPU "
                "by default; XLA_PYTHON_CLIENT_MEM_FRACTION does not make room that is not "
                "there). ", Blame.JOB, Action.RESTART_JOB)
    return None


def _oom(hits: list[Hit], needs: str | None, extra: tuple[str, ...] = ()) -> Finding:
    ids = {h.message.id for h in hits}
    masked = ids & {"cublas.not-initialized", "cudnn.not-initialized"}
    title = ("cuBLAS/cuDNN could not initialise: GPU memory was not free" if masked and
             not ids - masked else "CUDA out of memory")
    if known := _oom_numbers(hits, needs):
        title, said, blame, action = known
        return finding(
            "cuda.out-of-memory", Severity.WARNING, title,
            f"The job could not get the GPU memory it asked for. {said}A job or co-tenancy "
            "problem, not the node's: the GPU is not at fault.", action, blame,
            evidence=[_job_ev(hits, extra)])
    return finding(
        "cuda.out-of-memory", Severity.WARNING, title,
        "The job could not get the GPU memory it asked for"
        + (" (cuBLAS/cuDNN report it as NOT_INITIALIZED when their workspace cannot be "
           "allocated)" if masked else "")
        + ". Other processes on the same GPU (stray or co-tenant jobs: nvidia-smi lists them) "
        "or the job's own size take it. Free the GPU, reduce the batch or model size, or "
        "enable memory growth / limit per-process memory. A job or co-tenancy problem, not "
        "the node's.", Action.RESTART_JOB, Blame.JOB, evidence=[_job_ev(hits)])


@rule("cuda.job-fault", produces=("cuda.kernel-fault", "cuda.out-of-memory"))
def job_fault(job_log: JobLog, driver_events: list[DriverEvent] | None = None
              ) -> Iterator[Finding]:
    """A job's kernel faults (700 illegal address, 719 launch failure...) are the job's
    unless the kernel log shows hardware Xids (48/63/64/79/94/95) in the window (Xid
    13/31/43 confirm the job); out of memory, including cuBLAS/cuDNN handles that could
    not be created, is the job's or its co-tenants'."""
    if hits := _of(job_log, KERNEL_FAULT):
        yield _kernel_fault(hits, driver_events)
    if hits := _of(job_log, OOM):
        yield _oom(hits, job_log.versions.needs_memory,
                   tuple(job_log.versions.line("needs_memory")))


# the CUDA errors the rules above and rules/cuda_job.py judge with the host's facts
JUDGED = (TOO_OLD | NO_IMAGE | NO_DEVICE | OOM | KERNEL_FAULT
          | {"cuda.802", "cuda.803", "cuda.804", "cuda.999", *_HARDWARE})
# the families whose rows no other rule reads are said here as their rows say
_CATALOGUED_FAMILIES = (CUDA_FAMILY, FRAMEWORK_FAMILY)
AS_CATALOGUED = tuple(m.id for m in catalog()
                      if m.family in _CATALOGUED_FAMILIES and m.id not in JUDGED)


@rule("cuda.job-error", produces=AS_CATALOGUED)
def job_error(job_log: JobLog) -> Iterator[Finding]:
    """A CUDA or framework error of the catalog that no rule judges with the host's facts
    (invalid argument, a busy device, peer access, an illegal state, JAX's backend that
    would not start...): said as its row says, as ``gputriage explain`` says it, rather
    than left out of the verdict. On a line of the container stack
    (``nvidia-container-cli: ... cuda error: ...``) it is the cause that
    rules/container.py judges there."""
    stack = {h.lineno for h in job_log.hits if h.message.family == "container"}
    found: dict[str, list[Hit]] = {}
    for h in job_log.hits:
        if h.message.family in _CATALOGUED_FAMILIES and h.message.id not in JUDGED \
                and h.lineno not in stack:
            found.setdefault(h.message.id, []).append(h)
    for hits in found.values():
        msg = hits[0].message
        title = (f"CUDA error {msg.code}: {msg.text or msg.name}" if msg.code is not None
                 else msg.meaning.rstrip("."))
        yield finding(
            msg.id, msg.severity, title, f"{msg.meaning} {msg.cause} {msg.next}", msg.action,
            msg.blame, evidence=[_job_ev(hits)])
