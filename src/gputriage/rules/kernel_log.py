"""Judging kernel-log events: Xid, SXid and the other driver-stack messages.

One finding per GPU (or switch, or device) and cause: events are grouped by
(code or kind, bus id), counted and dated (``occurrences``). The catalog in
:mod:`gputriage.knowledge.xid` gives each code its severity, action and
blame; the log's context then refines it: an Xid 45 that follows another
Xid is a consequence, not a cause; 13 / 31 / 43 from several processes on
one GPU point at the GPU, not the job; 48 with 63 / 64 is the row-remapping
flow; a 119 that keeps coming back escalates; 154 names its own action.
Events of earlier boots are history: same ids, severity info, never a
current failure. The events judged are the fact ``log_events``: the kernel
log's events inside the selected :class:`gputriage.logwindow.LogWindow`.

This module holds the SXid rule and the rule on the other event kinds; the Xid
judgement is :mod:`.kernel_xid`, host hardware events :mod:`.kernel_host`, and the
helpers they share :mod:`.kernel_common`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

from gputriage.facts import Facts
from gputriage.knowledge import xid as catalog
from gputriage.model import NODE, Action, Blame, Finding, Scope, Severity
from gputriage.parsers.kernel_events import DriverEvent
from gputriage.rules.base import rule
from gputriage.rules.kernel_common import (
    DOC_SXID,
    GPU_LIBS,
    GSP_REPEAT,
    PEERMEM_BURST,
    GpuMap,
    Judged,
    count_text,
    emit,
    gpu_label,
    gpu_map,
    group,
    history,
    scope_of,
    split_boots,
    xid_code,
    xid_events,
)
from gputriage.rules.kernel_host import judge_host

SXID_IDS = tuple(f"sxid.{x.code}" for x in catalog.all_sxids())


# --- SXid -----------------------------------------------------------------------------------

@rule("kernel.sxid", requires=("log_events",), produces=SXID_IDS)
def sxid_findings(facts: Facts) -> Iterator[Finding]:
    """NVSwitch SXid errors: one finding per switch and code; fatal ones are critical,
    non-fatal ones a warning when they repeat."""
    yield from judge_sxids(facts.get("log_events"))


def _sxid_judged(code: int, events: list[DriverEvent]) -> Judged:
    info = catalog.sxid_info(code)
    switch = events[0].details.get("switch") or events[0].bus_id or "?"
    if switch.isdigit():
        switch = f"nvidia-nvswitch{switch}"
    links = sorted({ev.details["link"] for ev in events if ev.details.get("link")},
                   key=lambda s: (len(s), s))
    where = f" link{'s' if len(links) > 1 else ''} {', '.join(links)}" if links else ""
    fatal = any((ev.details.get("severity") or "").lower() == "fatal" for ev in events)
    meaning = info.meaning if info else "not in the catalog"
    title = f"SXid {code} on {switch}{where}: {meaning} ({count_text(len(events))})"
    if info is not None:
        fatal = fatal or info.fatal
        action, blame, why = info.action, info.blame, info.explanation
    else:
        action, blame = Action.NONE, Blame.UNKNOWN
        why = f"SXid {code} is not in gputriage's catalog; see the Fabric Manager guide."
    if fatal:
        severity = Severity.CRITICAL
        if action is Action.NONE:
            action = Action.RESET_GPU
    else:
        severity = Severity.WARNING if len(events) > 1 else Severity.INFO
    return Judged(severity, action, blame if fatal or blame is not Blame.UNKNOWN else Blame.NODE,
                  title, why)


def judge_sxids(events: Iterable[DriverEvent]) -> Iterator[Finding]:
    """Findings for the SXid events in ``events``."""
    sx = [ev for ev in events if ev.kind == "sxid" and xid_code(ev) is not None]
    current, earlier = split_boots(sx)
    for part, make in ((current, emit), (earlier, history)):
        for (code, _), evs in group(part, _switch_key).items():
            judged = _sxid_judged(code, evs)
            first = evs[0]
            scope = (Scope(kind="device", pci_bus_id=first.bus_id,
                           name=first.details.get("switch"))
                     if first.bus_id or first.details.get("switch") else NODE)
            yield make(f"sxid.{code}", judged, evs, scope, (DOC_SXID,))


def _switch_key(ev: DriverEvent) -> tuple[int | None, str | None]:
    return xid_code(ev), ev.bus_id or ev.details.get("switch")


# --- other kernel events --------------------------------------------------------------------

EVENT_IDS = {
    "gsp-rpc-timeout": "kernel.gsp-rpc-timeout",
    "gsp-error": "kernel.gsp-error",
    "peermem-invalid-context": "kernel.peermem-invalid-context",
    "nvlink-error": "kernel.nvlink-error",
    "pcie-bandwidth-limited": "kernel.pcie-bandwidth-limited",
    "segfault": "kernel.segfault-in-gpu-library",
    "hung-task": "kernel.hung-task-in-nvidia",
    "soft-lockup": "kernel.soft-lockup-in-nvidia",
    "gpu-reset-required": "kernel.gpu-reset-required",
}
# a GSP error beside one of these (same GPU, same boot) is its detail, not a second finding
COVERED_GSP = frozenset({"rm-init-adapter-failed", "gpu-reset-required"})
GPU_KINDS = frozenset({"gsp-rpc-timeout", "gsp-error", "gpu-reset-required", "nvlink-error"})
_NVIDIA_CODE = re.compile(r"nvidia|nvrm|nv_|_nv\w|\bos_|uvm|nvkms", re.IGNORECASE)


def _text(events: Sequence[DriverEvent]) -> str:
    return "\n".join(ev.line + " " + " ".join(ev.details.values()) for ev in events)


def judge_event_group(kind: str, events: list[DriverEvent], label: str, on_gpu: bool,
                      xid_codes: set[int]) -> Judged | None:
    """The verdict on one (kind, bus) group of non-Xid events; None: nothing to report."""
    n = len(events)
    text = _text(events)
    if kind == "gsp-rpc-timeout":
        if 119 in xid_codes:
            return None  # the xid.119 finding covers it
        n = _incidents(events)
        return Judged(Severity.CRITICAL, Action.DRAIN_AND_REPAIR if n >= GSP_REPEAT
                      else Action.RESET_GPU, Blame.NODE,
                      f"GPU firmware (GSP) RPC timeouts on {label} ({count_text(n)})",
                      "The GPU System Processor stopped answering the driver: the GPU is hung. "
                      "Reset it (or reboot the node); if it keeps timing out, repair the GPU.")
    if kind == "gsp-error":
        if 120 in xid_codes:
            return None
        return Judged(Severity.CRITICAL, Action.RESET_GPU, Blame.NODE,
                      f"GPU firmware (GSP) error on {label} ({count_text(n)})",
                      "The GPU System Processor firmware reported an error or crashed; the GPU "
                      "needs a reset (or the node a reboot) before new work.")
    if kind == "gpu-reset-required":
        return Judged(Severity.CRITICAL, Action.RESET_GPU, Blame.NODE,
                      f"the driver says {label} must be reset ({count_text(n)})",
                      "The driver refuses new work on this GPU until it is reset "
                      "(NV_ERR_RESET_REQUIRED); CUDA reports the device busy or unavailable. "
                      "Drain it and reset the GPU, or reboot the node.")
    if kind == "peermem-invalid-context":
        burst = n >= PEERMEM_BURST
        return Judged(Severity.WARNING if burst else Severity.INFO,
                      Action.FIX_SOFTWARE if burst else Action.NONE, Blame.UNKNOWN,
                      f"nvidia-peermem: invalid context on free ({count_text(n)})",
                      "nvidia-peermem was asked to release GPUDirect RDMA memory whose CUDA "
                      "context was already gone, typically as a job exits; a few are harmless. "
                      "Bursts of them point at an RDMA stack (driver / MOFED / peermem) "
                      "problem worth an upgrade.")
    if kind == "nvlink-error":
        return Judged(Severity.WARNING, Action.RESET_GPU, Blame.NODE,
                      f"NVLink errors on {label} ({count_text(n)})",
                      "The driver reported NVLink errors: multi-GPU jobs may hang or slow "
                      "down. Reset the GPU; if the same link keeps failing, repair it.")
    if kind == "pcie-bandwidth-limited":
        return Judged(Severity.WARNING, Action.DRAIN_AND_REPAIR, Blame.NODE,
                      f"PCIe link of {label} trained below its capability ({count_text(n)})",
                      "The device reports less PCIe bandwidth than it is capable of (a narrower "
                      "or slower link): transfers are slower. Reseat the card or fix the "
                      "riser / slot at the next maintenance.")
    if kind == "segfault":
        if not GPU_LIBS.search(text):
            return None
        procs = sorted({ev.details.get("process") or "" for ev in events} - {""})
        libs = sorted({ev.details.get("library") or "" for ev in events} - {""})
        who = f" ({', '.join(procs[:3])})" if procs else ""
        where = ", ".join(libs[:3]) if libs else "a GPU library"
        return Judged(Severity.WARNING, Action.RESTART_JOB, Blame.JOB,
                      f"process crashed inside {where}{who} ({count_text(n)})",
                      "A segfault in libcuda / libnccl / libnvidia-* is usually the application "
                      "or a library mismatch in its container, not the node: look at the job.")
    if kind in ("hung-task", "soft-lockup"):
        flags = {ev.details.get("in_nvidia") for ev in events}
        if "yes" not in flags and (flags != {None} or not _NVIDIA_CODE.search(text)):
            return None  # the stack shows no nvidia frame (or the scanner could not tell)
        what = "hung tasks" if kind == "hung-task" else "CPU soft lockups"
        return Judged(Severity.CRITICAL, Action.REBOOT_NODE, Blame.NODE,
                      f"{what} in NVIDIA driver code ({count_text(n)})",
                      "Kernel threads are stuck inside the NVIDIA driver: the driver is wedged "
                      "and GPU processes will not finish. Drain the node and reboot it.")
    return None


def _incidents(events: Sequence[DriverEvent]) -> int:
    """GSP timeouts counted once per incident: a banner or RPC history dump is one."""
    n, last = 0, None
    for ev in events:
        if ev.details.get("dump") != "yes" or last is None or (ev.lineno or 0) - last > 40:
            n += 1
        if ev.details.get("dump") == "yes":
            last = ev.lineno or 0
    return n


def _lost_gpu_before(ev: DriverEvent, lost: dict[bool, int]) -> bool:
    """Whether a GPU fell off the bus earlier in the same boot (a crash is its echo)."""
    first = lost.get(ev.boot == 0)
    return first is not None and (ev.lineno or 0) >= first


HOST_FINDING_IDS = ("kernel.pcie-aer", "kernel.peermem-load-failed", "kernel.host-memory-error",
                    "kernel.hardware-error", "kernel.link-down", "kernel.link-flaps",
                    "kernel.link-down-at-boot", "kernel.netdev-tx-timeout")


@rule("kernel.events", requires=("log_events",),
      produces=tuple(EVENT_IDS.values()) + HOST_FINDING_IDS)
def event_findings(facts: Facts) -> Iterator[Finding]:
    """Other driver-stack and host kernel events: GSP timeouts, peermem, NVLink, PCIe AER
    and bandwidth, network link flaps, EDAC / MCE / APEI hardware errors, crashes in GPU
    libraries, hangs in nvidia code."""
    yield from judge_events(facts.get("log_events"), gpu_map(facts))


def judge_events(events: Iterable[DriverEvent], gpus: GpuMap) -> Iterator[Finding]:
    """Findings for the non-Xid events in ``events`` (driver-rule kinds left out)."""
    events = list(events)
    xid_buses: dict[tuple[str | None, bool], set[int]] = {}
    for code, ev in xid_events(events):
        xid_buses.setdefault((ev.bus_id, ev.boot == 0), set()).add(code)
    kinds: dict[tuple[str | None, bool], set[str]] = {}
    for ev in events:
        kinds.setdefault((ev.bus_id, ev.boot == 0), set()).add(ev.kind)
    lost: dict[bool, int] = {}
    for code, ev in xid_events(events):
        if code == 79:
            lost.setdefault(ev.boot == 0, ev.lineno or 0)
    any119 = {cur for (_, cur), codes in xid_buses.items() if 119 in codes}
    picked = [ev for ev in events if ev.kind in EVENT_IDS
              and not (ev.kind == "segfault" and _lost_gpu_before(ev, lost))
              and not (ev.kind == "gsp-rpc-timeout" and ev.bus_id is None
                       and (ev.boot == 0) in any119)]
    for (kind, bus, current), evs in group(
            picked, lambda ev: (ev.kind, ev.bus_id, ev.boot == 0)).items():
        on_gpu = (kind in GPU_KINDS or bus in gpus or (bus, current) in xid_buses
                  or (bus, not current) in xid_buses)
        label = gpu_label(bus, gpus) if on_gpu else (bus or "the node")
        near = kinds.get((bus, current), set()) if bus else {
            k for (_, cur), ks in kinds.items() if cur == current for k in ks}
        if kind == "gsp-error" and near & COVERED_GSP:
            continue  # the GPU-init or reset-required finding already tells it
        judged = judge_event_group(kind, evs, label, on_gpu, xid_buses.get((bus, current), set()))
        if judged is None:
            continue
        scope = scope_of(bus, gpus, device=not on_gpu,
                         name=evs[0].details.get("interface") or evs[0].details.get("device"))
        fid = EVENT_IDS[kind]
        yield (emit if current else history)(fid, judged, evs, scope, ())
    yield from judge_host(events, gpus, {bus for bus, _ in xid_buses})
