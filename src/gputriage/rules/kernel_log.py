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
log's events inside the selected :class:`gputriage.facts.window.LogWindow`.

This module holds the SXid rule and the rule on the other event kinds; the Xid
judgement is :mod:`.kernel_xid`, host hardware events :mod:`.kernel_host`, and the
helpers they share :mod:`.kernel_common`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from gputriage.facts.resets import Reset, Resets
from gputriage.facts.stack import GpuSighting
from gputriage.knowledge import xid as catalog
from gputriage.knowledge.xid import SxidInfo, XidInfo
from gputriage.logscan.events import DriverEvent
from gputriage.model import NODE, Action, Blame, Finding, Scope, Severity
from gputriage.parsers.kernel_fold import weight
from gputriage.rules.base import action_for, rule
from gputriage.rules.kernel_common import (
    DOC_SXID,
    GPU_LIBS,
    GSP_REPEAT,
    GpuMap,
    Judged,
    MakeFinding,
    count_text,
    emit,
    ended_by,
    gpu_label,
    gpu_map,
    group,
    history,
    lost_gpu_xid,
    past,
    scope_of,
    split_boots,
    split_resets,
    xid_code,
    xid_events,
)
from gputriage.rules.kernel_host import judge_host
from gputriage.text.fields import strict_int

SXID_IDS = tuple(f"sxid.{x.code}" for x in catalog.all_sxids())


# --- SXid -----------------------------------------------------------------------------------

@rule("kernel.sxid", produces=SXID_IDS)
def sxid_findings(log_events: list[DriverEvent],
                  resets_seen: Resets | None = None) -> Iterator[Finding]:
    """NVSwitch SXid errors: one finding per switch and code; fatal ones are critical,
    non-fatal ones a warning when they repeat; those a driver load ended are history."""
    yield from judge_sxids(log_events, resets_seen)


def _sxid_judged(code: int, events: list[DriverEvent]) -> Judged:
    info = catalog.sxid_info(code)
    switch = events[0].details.get("switch") or events[0].bus_id or "?"
    if strict_int(switch, signed=False) is not None:
        switch = f"nvidia-nvswitch{switch}"
    links = sorted({ev.details["link"] for ev in events if ev.details.get("link")},
                   key=lambda s: (len(s), s))
    where = f" link{'s' if len(links) > 1 else ''} {', '.join(links)}" if links else ""
    meaning = info.meaning if info else "not in the catalog"
    n = weight(events)
    title = f"SXid {code} on {switch}{where}: {meaning} ({count_text(n)})"
    fatal = sxid_fatal(info, events)
    if info is not None:
        action, blame, why = info.action, info.blame, info.explanation
    else:
        action, blame = Action.NONE, Blame.UNKNOWN
        why = f"SXid {code} is not in gputriage's catalog; see the Fabric Manager guide."
    if fatal:
        return Judged(Severity.CRITICAL, Action.RESET_GPU if action is Action.NONE else action,
                      Blame.NODE if blame is Blame.UNKNOWN else blame, title, why)
    severity = Severity.WARNING if n > 1 else Severity.INFO
    if info is not None and info.fatal:  # logged non-fatal; NVSentinel's table says fatal
        severity = Severity.WARNING
        guide = (" (the Fabric Manager guide lists it among the non-fatal SXids too)"
                 if info.category == "non-fatal" else "")
        why = (f"The driver logged it as non-fatal{guide}: NVLink traffic keeps flowing. "
               f"NVIDIA's health monitor (NVSentinel) still handles it as "
               f"{info.bucket or 'fatal'}: plan that at the next maintenance window, and "
               "drain sooner if it repeats or fatal SXids follow.")
    return Judged(severity, action_for(severity, action),
                  Blame.NODE if blame is Blame.UNKNOWN else blame, title, why)


def sxid_fatal(info: SxidInfo | None, events: Sequence[DriverEvent]) -> bool:
    """Whether SXid events are fatal: never when the catalog says the code is not
    (whatever a line prints), always for the guide's always-fatal codes, else as the
    driver logged them ("Fatal" / "Non-fatal"), else as the catalog says."""
    if info is not None and not info.fatal:
        return False
    if info is not None and info.category == "always-fatal":
        return True
    printed = {(ev.details.get("severity") or "").lower() for ev in events} - {""}
    if printed:
        return "fatal" in printed
    return info is not None


def judge_sxids(events: Iterable[DriverEvent], resets: Resets | None = None
                ) -> Iterator[Finding]:
    """Findings for the SXid events in ``events``."""
    sx = [ev for ev in events if ev.kind == "sxid" and xid_code(ev) is not None]
    this_boot, earlier = split_boots(sx)
    current, ended = split_resets(this_boot, resets)
    parts: list[tuple[list[DriverEvent], MakeFinding]] = [(current, emit), (earlier, history)]
    parts += [(evs, _ended_by(r)) for r, evs in ended.items()]
    for part, make in parts:
        for (code, _), evs in group(part, _switch_key).items():
            assert code is not None  # ``sx`` holds only SXids with a code
            judged = _sxid_judged(code, evs)
            first = evs[0]
            scope = (Scope(kind="device", pci_bus_id=first.bus_id,
                           name=first.details.get("switch"))
                     if first.bus_id or first.details.get("switch") else NODE)
            yield make(f"sxid.{code}", judged, evs, scope, (DOC_SXID,))



def _ended_by(reset: Reset) -> MakeFinding:
    """The finding maker for events ``reset`` ended."""

    def make(fid: str, judged: Judged, events: Sequence[DriverEvent], scope: Scope,
             refs: Iterable[str]) -> Finding:
        return past(fid, judged, events, scope, refs, reset)

    return make


def _switch_key(ev: DriverEvent) -> tuple[int | None, str | None]:
    return xid_code(ev), ev.bus_id or ev.details.get("switch")


# --- other kernel events --------------------------------------------------------------------

# a GSP error beside one of these (same GPU, same boot) is its detail, not a second finding
COVERED_GSP = frozenset({"rm-init-adapter-failed", "gpu-reset-required"})
GPU_KINDS = frozenset({"gsp-rpc-timeout", "gsp-error", "gpu-reset-required", "nvlink-error"})
_NVIDIA_CODE = re.compile(r"nvidia|nvrm|nv_|_nv\w|\bos_|uvm|nvkms", re.IGNORECASE)
Judge = Callable[[list[DriverEvent], str, set[int]], "Judged | None"]
DUMP_LINES = 40  # a GSP dump header this close after another belongs to its incident


def _text(events: Sequence[DriverEvent]) -> str:
    return "\n".join(ev.line + " " + " ".join(ev.details.values()) for ev in events)


def _as_xid(kind: str, xid_codes: set[int]) -> XidInfo | None:
    """The catalog's Xid that a ``kind`` message reports without its number; None when
    that Xid is logged on the GPU too (its finding tells it) or there is none."""
    info = catalog.xid_for_event(kind)
    return None if info is None or info.code in xid_codes else info


def _gsp_timeouts(events: list[DriverEvent], label: str, xid_codes: set[int]) -> Judged | None:
    info = _as_xid("gsp-rpc-timeout", xid_codes)
    if info is None:
        return None
    n = _incidents(events)
    action = Action.DRAIN_AND_REPAIR if n >= GSP_REPEAT else info.action
    return Judged(info.severity, action_for(info.severity, action), info.blame,
                  f"GPU firmware (GSP) RPC timeouts on {label} ({count_text(n)})",
                  "The GPU System Processor stopped answering the driver: the GPU is hung. "
                  "Reset it (or reboot the node); if it keeps timing out, repair the GPU.")


def _gsp_errors(events: list[DriverEvent], label: str, xid_codes: set[int]) -> Judged | None:
    info = _as_xid("gsp-error", xid_codes)
    if info is None:
        return None
    return Judged(info.severity, info.action, info.blame,
                  f"GPU firmware (GSP) error on {label} ({count_text(weight(events))})",
                  "The GPU System Processor firmware reported an error or crashed; the GPU "
                  "needs a reset (or the node a reboot) before new work.")


def _reset_required(events: list[DriverEvent], label: str, xid_codes: set[int]) -> Judged:
    return Judged(Severity.CRITICAL, Action.RESET_GPU, Blame.NODE,
                  f"the driver says {label} must be reset ({count_text(weight(events))})",
                  "The driver refuses new work on this GPU until it is reset "
                  "(NV_ERR_RESET_REQUIRED); CUDA reports the device busy or unavailable. "
                  "Drain it and reset the GPU, or reboot the node.")


def _peermem_context(events: list[DriverEvent], label: str, xid_codes: set[int]) -> Judged:
    n = weight(events)
    return Judged(Severity.INFO, Action.NONE, Blame.UNKNOWN,
                  f"nvidia-peermem: invalid context on free ({count_text(n)})",
                  "nvidia-peermem was asked to release GPUDirect RDMA memory whose CUDA "
                  "context was already gone, as a process that used GPUDirect RDMA exits or is "
                  "killed. NVIDIA's GPUDirect maintainers call the message harmless: the "
                  "driver's mitigation of a known issue prints it (R535), and drivers from "
                  "R560 on carry the full fix and no longer print it. A burst is teardown, "
                  "never a cause by itself: look at what ended the process (an Xid, the "
                  "job's log).")


def _nvlink(events: list[DriverEvent], label: str, xid_codes: set[int]) -> Judged:
    return Judged(Severity.WARNING, Action.PLAN_REPAIR, Blame.NODE,
                  f"NVLink errors on {label} ({count_text(weight(events))})",
                  "The driver reported NVLink errors: multi-GPU jobs may hang or slow "
                  "down. Reset the GPU when it is idle or at the next maintenance window; if "
                  "the same link keeps failing, repair it (an Xid 74 beside it is the "
                  "critical finding).")


def _bandwidth(events: list[DriverEvent], label: str, xid_codes: set[int]) -> Judged:
    return Judged(Severity.WARNING, Action.PLAN_REPAIR, Blame.NODE,
                  f"PCIe link of {label} trained below its capability "
                  f"({count_text(weight(events))})",
                  "The device reports less PCIe bandwidth than it is capable of (a narrower "
                  "or slower link): transfers are slower. Reseat the card or fix the "
                  "riser / slot at the next maintenance.")


def _segfaults(events: list[DriverEvent], label: str, xid_codes: set[int]) -> Judged | None:
    if not GPU_LIBS.search(_text(events)):
        return None
    procs = sorted({ev.details.get("process") or "" for ev in events}.union(
        *(ev.repeats.processes.values() for ev in events if ev.repeats is not None)) - {""})
    libs = sorted({ev.details.get("library") or "" for ev in events} - {""})
    who = f" ({', '.join(procs[:3])})" if procs else ""
    where = ", ".join(libs[:3]) if libs else "a GPU library"
    return Judged(Severity.WARNING, Action.RESTART_JOB, Blame.JOB,
                  f"process crashed inside {where}{who} ({count_text(weight(events))})",
                  "A segfault in libcuda / libnccl / libnvidia-* is usually the application "
                  "or a library mismatch in its container, not the node: look at the job.")


def _stuck_in_nvidia(what: str) -> Judge:
    """Hung tasks or soft lockups, when their call trace runs through nvidia code."""

    def judge(events: list[DriverEvent], label: str, xid_codes: set[int]) -> Judged | None:
        flags = {ev.details.get("in_nvidia") for ev in events}
        if "yes" not in flags and (flags != {None} or not _NVIDIA_CODE.search(_text(events))):
            return None  # the stack shows no nvidia frame (or the scanner could not tell)
        return Judged(Severity.CRITICAL, Action.REBOOT_NODE, Blame.NODE,
                      f"{what} in NVIDIA driver code ({count_text(weight(events))})",
                      "Kernel threads are stuck inside the NVIDIA driver: the driver is "
                      "wedged and GPU processes will not finish. Drain the node and reboot it.")

    return judge


# kind -> (finding id, judge of one (kind, bus) group; None from it: nothing to report)
EVENT_JUDGES: dict[str, tuple[str, Judge]] = {
    "gsp-rpc-timeout": ("kernel.gsp-rpc-timeout", _gsp_timeouts),
    "gsp-error": ("kernel.gsp-error", _gsp_errors),
    "peermem-invalid-context": ("kernel.peermem-invalid-context", _peermem_context),
    "nvlink-error": ("kernel.nvlink-error", _nvlink),
    "pcie-bandwidth-limited": ("kernel.pcie-bandwidth-limited", _bandwidth),
    "segfault": ("kernel.segfault-in-gpu-library", _segfaults),
    "hung-task": ("kernel.hung-task-in-nvidia", _stuck_in_nvidia("hung tasks")),
    "soft-lockup": ("kernel.soft-lockup-in-nvidia", _stuck_in_nvidia("CPU soft lockups")),
    "gpu-reset-required": ("kernel.gpu-reset-required", _reset_required),
}
EVENT_IDS = {kind: fid for kind, (fid, _) in EVENT_JUDGES.items()}


def judge_event_group(kind: str, events: list[DriverEvent], label: str,
                      xid_codes: set[int]) -> Judged | None:
    """The verdict on one (kind, bus) group of non-Xid events; None: nothing to report."""
    entry = EVENT_JUDGES.get(kind)
    return entry[1](events, label, xid_codes) if entry is not None else None


def _incidents(events: Sequence[DriverEvent]) -> int:
    """GSP timeouts counted once per incident: a banner or RPC history dump is one, with
    the dump headers that follow it within :data:`DUMP_LINES` lines. A folded run of
    headers starts new incidents as often as the headers listed before it did (never
    more often than every :data:`DUMP_LINES` lines of its span)."""
    n, last = 0, None
    gaps = new = 0  # gaps between dump headers listed, and those that began an incident
    for ev in events:
        if ev.details.get("dump") != "yes":
            n += ev.count
            continue
        lineno = ev.lineno or 0
        starts = last is None or lineno - last > DUMP_LINES
        if last is not None:
            gaps, new = gaps + 1, new + starts
        n += starts
        if ev.count > 1:
            span = (ev.latest.lineno or 0) - lineno
            guess = round((ev.count - 1) * new / gaps) if gaps else ev.count - 1
            n += min(guess, span // (DUMP_LINES + 1))
        last = ev.latest.lineno or 0
    return n


HOST_FINDING_IDS = ("kernel.pcie-aer", "kernel.peermem-load-failed", "kernel.host-memory-error",
                    "kernel.hardware-error", "kernel.link-down", "kernel.link-flaps",
                    "kernel.link-down-at-boot", "kernel.netdev-tx-timeout",
                    "kernel.storage-error")


@rule("kernel.events", produces=tuple(EVENT_IDS.values()) + HOST_FINDING_IDS)
def event_findings(log_events: list[DriverEvent],
                   visible_gpus: tuple[str, list[GpuSighting]] | None = None,
                   resets_seen: Resets | None = None) -> Iterator[Finding]:
    """Other driver-stack and host kernel events: GSP timeouts, peermem, NVLink, PCIe AER
    and bandwidth, network link flaps, EDAC / MCE / APEI hardware errors, crashes in GPU
    libraries, hangs in nvidia code; GPU events a later reset ended are history."""
    yield from judge_events(log_events, gpu_map(visible_gpus), resets_seen)


Where = tuple[str | None, bool]  # (bus id, current boot)


@dataclass
class _Seen:
    """What the log holds per GPU (or device) and boot, for judging each group."""

    xids: dict[Where, set[int]]  # Xid codes
    kinds: dict[Where, set[str]]  # event kinds
    lost: dict[bool, int]  # boot -> line number where a GPU first fell off the bus

    @classmethod
    def of(cls, events: list[DriverEvent]) -> _Seen:
        xids: dict[Where, set[int]] = {}
        lost: dict[bool, int] = {}
        lost_code = lost_gpu_xid()
        for code, ev in xid_events(events):
            xids.setdefault((ev.bus_id, ev.boot == 0), set()).add(code)
            if code == lost_code:
                lost.setdefault(ev.boot == 0, ev.lineno or 0)
        kinds: dict[Where, set[str]] = {}
        for bus, current, kind in {(ev.bus_id, ev.boot == 0, ev.kind) for ev in events}:
            kinds.setdefault((bus, current), set()).add(kind)
        return cls(xids, kinds, lost)

    def echo(self, ev: DriverEvent) -> bool:
        """Whether ``ev`` only echoes a failure logged before it: a crash after a GPU
        fell off the bus, a GSP timeout of no GPU beside one that has its Xid."""
        current = ev.boot == 0
        if ev.kind == "segfault":
            first = self.lost.get(current)
            return first is not None and (ev.lineno or 0) >= first
        if ev.kind == "gsp-rpc-timeout" and ev.bus_id is None:
            gsp = catalog.xid_for_event("gsp-rpc-timeout")
            return gsp is not None and any(
                cur == current and gsp.code in codes for (_, cur), codes in self.xids.items())
        return False

    def near(self, bus: str | None, current: bool) -> set[str]:
        """Kinds logged on ``bus`` (every device's, for events without an address)."""
        if bus:
            return self.kinds.get((bus, current), set())
        return {k for (_, cur), ks in self.kinds.items() if cur == current for k in ks}


def _status(ev: DriverEvent, resets: Resets | None) -> Reset | bool:
    """True: current; False: an earlier boot; a reset: the reset that ended it."""
    if ev.boot != 0:
        return False
    return ended_by(ev, resets) or True


def judge_events(events: Iterable[DriverEvent], gpus: GpuMap,
                 resets: Resets | None = None) -> Iterator[Finding]:
    """Findings for the non-Xid events in ``events`` (driver-rule kinds left out)."""
    events = list(events)
    seen = _Seen.of(events)
    picked = [ev for ev in events if ev.kind in EVENT_JUDGES and not seen.echo(ev)]
    for (kind, bus, status), evs in group(
            picked, lambda ev: (ev.kind, ev.bus_id, _status(ev, resets))).items():
        current = status is not False
        on_gpu = (kind in GPU_KINDS or bus in gpus or (bus, current) in seen.xids
                  or (bus, not current) in seen.xids)
        if kind == "gsp-error" and seen.near(bus, current) & COVERED_GSP:
            continue  # the GPU-init or reset-required finding already tells it
        label = gpu_label(bus, gpus) if on_gpu else (bus or "the node")
        judged = judge_event_group(kind, evs, label, seen.xids.get((bus, current), set()))
        if judged is None:
            continue
        scope = scope_of(bus, gpus, device=not on_gpu,
                         name=evs[0].details.get("interface") or evs[0].details.get("device"))
        make = emit if status is True else _ended_by(status) if status else history
        yield make(EVENT_IDS[kind], judged, evs, scope, ())
    yield from judge_host(events, gpus, {bus for bus, _ in seen.xids})
