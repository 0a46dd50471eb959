"""Rules on a GPU's state as the tools around it saw it: nvidia-smi fields it
could not read (``ERR!``), what a GPU reset attempt printed, and what the CUDA
sample deviceQuery said."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from gputriage.facts.fabric import FabricNeed
from gputriage.facts.smi_views import SmiView
from gputriage.knowledge.job_messages import Message, cuda_error
from gputriage.model import Action, Blame, Evidence, Finding, Severity, evidence, gpu_scope
from gputriage.parsers.device_query import DeviceQuery
from gputriage.parsers.gpu_reset import ResetAttempt, ResetLog
from gputriage.parsers.kernel_model import DriverEvent
from gputriage.rules.base import finding, rule

WHOLE_GPU_FIELDS = 3  # this many unreadable fields (or the name): the GPU, not a sensor
# daemons and agents that keep a GPU open; anything else holding it is a job
_SERVICES = ("nvidia-persistenced", "nvidia-persiste", "nv-hostengine", "dcgm", "nvidia-smi",
             "nv-fabricmanager", "nvidia-device-plugin", "gpu-feature-discovery", "xorg", "x",
             "gdm", "nvidia-dcgm-exporter", "dcgm-exporter", "nvsm", "nvidia-mps-server")


# --- ERR! in nvidia-smi ------------------------------------------------------------------

def _xids(events: Iterable[DriverEvent], bus: str | None) -> list[tuple[str, str]]:
    """(code, line) of the kernel log's Xid events for one GPU."""
    if not bus:
        return []
    return [(ev.details.get("code", "?"), ev.line) for ev in events
            if ev.kind == "xid" and ev.bus_id == bus]


def _error_evidence(view: SmiView, fields: list[str]) -> list[Evidence]:
    rows = view.table_rows()
    if rows:
        return rows
    source = view.parts[0].source if view.parts else "nvidia_smi"
    return [evidence(source, [f"{view.label}: unreadable {', '.join(fields)}"], "as parsed")]


@rule("gpu.error-state", produces=("gpu.error-state",))
def gpu_error_state(smi_views: list[SmiView],
                    driver_events: Sequence[DriverEvent] = ()) -> Iterator[Finding]:
    """nvidia-smi prints ERR! (or, in CSV, a bracketed error) where it could not read
    a value from the GPU: the GPU, or one of its sensors, no longer answers."""
    for view in smi_views:
        raw = view.raw("error fields")
        if not raw:
            continue
        fields = [f for f in raw.split(",") if f]
        whole = "name" in fields or len(fields) >= WHOLE_GPU_FIELDS
        xids = _xids(driver_events, view.bus_id)
        codes = sorted({c for c, _ in xids}, key=lambda c: (len(c), c))
        seen = f" The kernel log has Xid {', '.join(codes)} for it." if codes else ""
        ev = _error_evidence(view, fields) + (
            [evidence("kernel_log", [line for _, line in xids][:6])] if xids else [])
        if whole:
            yield finding(
                "gpu.error-state", Severity.CRITICAL,
                f"{view.label}: GPU in an error state (nvidia-smi reads ERR! for "
                f"{', '.join(fields)})",
                "nvidia-smi could not read this GPU at all: it no longer answers the driver "
                f"(often a GSP firmware timeout, Xid 119/120, or a GPU that fell off).{seen} "
                "Jobs on it hang or fail. Drain the node and reset the GPU; when the reset is "
                "refused or the state returns, reboot the node, and upgrade the driver if "
                "GSP timeouts repeat.", Action.REBOOT_NODE, Blame.NODE, view.scope, ev)
        else:
            yield finding(
                "gpu.error-state", Severity.WARNING,
                f"{view.label}: nvidia-smi cannot read {', '.join(fields)} (ERR!)",
                "The rest of the GPU reads fine, so a sensor or its reading path failed. "
                f"Watch it; reset the GPU at the next maintenance window.{seen}",
                Action.PLAN_REPAIR, Blame.NODE, view.scope, ev)


# --- GPU reset ---------------------------------------------------------------------------

def _label(bus: str | None) -> str:
    return f"GPU {bus}" if bus else "a GPU (not named)"


def _holders(log: ResetLog) -> str:
    seen = dict.fromkeys(f"{h.name} (pid {h.pid}{', ' + h.device if h.device else ''})"
                         for h in log.holders)
    return ", ".join(seen)


def _is_service(name: str) -> bool:
    low = name.lower()
    return any(low == s or low.startswith(s) for s in _SERVICES)


def _blocked(log: ResetLog, last: ResetAttempt, ev: list[Evidence]) -> Finding:
    named = _holders(log)
    what = {"mig-pending": "MIG mode change pending",
            "mig-refused": "MIG mode change refused"}.get(last.outcome, "reset refused")
    title = f"{_label(last.bus_id)}: {what}, in use by another client" + (
        f": {named}" if named else "")
    services = all(_is_service(h.name) for h in log.holders)
    pm = (" Turning persistence mode off is not enough while nvidia-persistenced keeps the "
          "device open: stop the daemon." if log.persistence_off and any(
              h.name.startswith("nvidia-persiste") for h in log.holders) else "")
    who = (f"It is held by {named}." if named else
           "The input does not name the holder: find it with fuser -v /dev/nvidia* or lsof.")
    return finding(
        "gpu.reset-blocked", Severity.WARNING, title,
        f"Not a hardware fault: a GPU can only be reset (or change MIG mode) when no process "
        f"has it open. {who}{pm} Stop those clients (nvidia-persistenced, DCGM and its "
        "exporter, the device plugin and feature discovery on Kubernetes, monitoring agents, "
        "jobs), reset, then start them again.",
        Action.FIX_CONFIG, Blame.CONFIG if services else Blame.JOB, gpu_scope(last.bus_id),
        ev)


def _done(log: ResetLog, last: ResetAttempt, refused: int, ev: list[Evidence]) -> Finding:
    steps = [s for a in log.attempts if a.bus_id == last.bus_id for s in a.steps_before]
    after = f" after {refused} refused attempt(s)" if refused else ""
    how = (f" What let it through: {'; '.join(dict.fromkeys(steps))}." if refused and steps
           else "")
    return finding(
        "gpu.reset-done", Severity.INFO, f"{_label(last.bus_id)} was reset{after}",
        f"The reset cleared the GPU's state: Xid and other errors logged for "
        f"{last.bus_id or 'this GPU'} before it are history, not a current fault; judge the "
        f"GPU by what it logs from now on.{how}", Action.NONE, Blame.UNKNOWN,
        gpu_scope(last.bus_id), ev)


@rule("gpu.reset", produces=("gpu.reset-done", "gpu.reset-blocked", "gpu.reset-failed"))
def gpu_reset(gpu_resets: ResetLog) -> Iterator[Finding]:
    """The last reset attempt of each GPU: done (its earlier errors are history),
    refused because a client holds the GPU (stop it: a configuration matter), or
    refused for another reason (reboot)."""
    log = gpu_resets
    ev = [evidence("gpu_reset", log.lines)]
    for bus, last in log.last_by_gpu().items():
        refused = sum(1 for a in log.attempts if a.bus_id == bus and a.outcome != "reset")
        if last.outcome == "reset":
            yield _done(log, last, refused, ev)
        elif last.outcome in ("in-use", "mig-pending", "mig-refused"):
            yield _blocked(log, last, ev)
        else:
            yield finding(
                "gpu.reset-failed", Severity.WARNING,
                f"{_label(bus)} could not be reset: {last.reason or 'reason not printed'}",
                "The reset was refused for another reason than a client holding the GPU "
                "(not supported here, the primary display GPU, or the GPU no longer "
                "answering). A reboot resets every GPU of the node: reboot it at the next "
                "maintenance window, or now if the GPU's errors are critical.",
                Action.PLAN_REPAIR, Blame.UNKNOWN, gpu_scope(bus), ev)


# --- deviceQuery -------------------------------------------------------------------------

def _judged_on_node(msg: Message) -> tuple[Severity, Action, Blame]:
    """The catalog's judgement of a CUDA error, as deviceQuery reports it.

    deviceQuery is the node's own probe, built with the node's toolkit and run on the
    node: what the catalog blames on a job's build or settings (job, job-config: 35 a
    runtime newer than the driver, 209 no code for this GPU) is the node's software
    here (config), to fix, not a job to restart."""
    blame = Blame.CONFIG if msg.blame in (Blame.JOB, Blame.JOB_CONFIG) else msg.blame
    action = Action.FIX_SOFTWARE if msg.action is Action.RESTART_JOB else msg.action
    return msg.severity, action, blame


def _dq_failed(dq: DeviceQuery, need: FabricNeed | None, ev: list[Evidence]) -> Finding:
    code = dq.error_code if dq.error_code is not None else (100 if dq.detected == 0 else None)
    known = cuda_error(code) if code is not None else None
    text = f" ({dq.error_text})" if dq.error_text else ""
    title = (f"deviceQuery failed: cudaGetDeviceCount returned {code}{text}" if code is not None
             else "deviceQuery failed")
    if known is None:
        return finding(
            "cuda.device-query-failed", Severity.WARNING, title,
            "The CUDA runtime could not start on this host; the error above says why. Check "
            "nvidia-smi, the driver version against the program's CUDA release, and the "
            "container's GPU access.", Action.NONE, Blame.UNKNOWN, evidence=ev)
    severity, action, blame = _judged_on_node(known)
    why = f"{known.meaning} Likely cause: {known.cause} {known.next}"
    extra = []
    if code == 802 and need is not None and need.needed:
        why += f" This host needs it: {need.reason}."
        extra = list(need.evidence)
    return finding(
        "cuda.device-query-failed", severity, f"{title}: {known.name}",
        f"CUDA cannot be used here: {why}", action, blame, evidence=ev + extra)


@rule("cuda.device-query", produces=("cuda.device-query-failed", "cuda.device-query-ok"))
def device_query(device_query: DeviceQuery,
                 needs_fabric_manager: FabricNeed | None = None) -> Iterator[Finding]:
    """deviceQuery is the smallest CUDA program: when it fails, its cudaError number
    says why CUDA cannot start (802: fabric not ready, 35: driver older than the
    runtime, 100: no device); when it passes, CUDA works on the devices it lists."""
    dq = device_query
    ev = [evidence("device_query", dq.lines)]
    if dq.failed:
        yield _dq_failed(dq, needs_fabric_manager, ev)
        return
    if not dq.devices and dq.result != "PASS":
        return
    names = ", ".join(f"{d.index}: {d.name}" for d in dq.devices) or "devices not listed"
    first = dq.devices[0] if dq.devices else None
    versions = (f" (CUDA driver {first.driver_version} / runtime {first.runtime_version})"
                if first and first.driver_version else "")
    yield finding(
        "cuda.device-query-ok", Severity.OK,
        f"deviceQuery passed: {len(dq.devices) or dq.detected or '?'} device(s){versions}",
        f"The CUDA runtime starts and enumerates {names}.", Action.NONE, Blame.UNKNOWN,
        evidence=ev)
