"""What the kernel-log rules share (:mod:`.kernel_log`, :mod:`.kernel_xid`,
:mod:`.kernel_host`): the GPU map, scopes and labels, evidence and occurrences of a
group of events, the judged outcome of a group, current vs earlier boots, and the
events a later reset (of their GPU, or a driver load) has made history.

An event may stand for a storm folded while scanning (:mod:`gputriage.parsers.kernel_fold`:
``count`` occurrences, the last one ``latest``): groups are counted in occurrences
(:func:`weight`), dated from their first to their latest occurrence, and a reset ends a
folded event when its latest occurrence was before it."""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, TypeVar

from gputriage.knowledge import xid as catalog
from gputriage.logscan.events import DriverEvent
from gputriage.model import (
    NODE,
    Action,
    Blame,
    Evidence,
    Finding,
    Occurrences,
    Scope,
    Severity,
    Status,
    gpu_scope,
)
from gputriage.parsers.kernel_fold import weight
from gputriage.rules.base import action_for, finding
from gputriage.text.fields import split_lines, strict_int
from gputriage.vocabulary import EventKind

if TYPE_CHECKING:
    from gputriage.facts.resets import Reset, Resets
    from gputriage.facts.stack import GpuSighting

_Item = TypeVar("_Item")
_Key = TypeVar("_Key")

DOC_XID = "https://docs.nvidia.com/deploy/xid-errors/index.html"
DOC_SXID = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html"
EVIDENCE_HEAD, EVIDENCE_TAIL = 7, 2  # events whose lines are kept: the first few, the last
EVENT_LINES = 6  # lines kept of one multi-line message (a GSP core dump runs to dozens)
GSP_REPEAT = 3  # Xid 119 this often in one log: it survives resets, repair the GPU
AER_BURST = 10
# what a reset of their GPU ends; a driver load ends these and the driver-wide ones too
RESET_ENDS = frozenset({"xid", "fallen-off-bus", "gsp-rpc-timeout", "gsp-error",
                        "gpu-reset-required", "nvlink-error"})
LOAD_ENDS = RESET_ENDS | {"sxid", "hung-task", "soft-lockup"}
# the module prints its banner after probing the GPUs: what it logged this close before
# the banner is that load's own complaint, not something the load ended
PROBE_S, PROBE_LINES = 30.0, 50
GPU_LIBS = re.compile(r"lib(?:cuda|nccl|nvidia|cudnn|cublas|nvrtc|nvJitLink|cufft|cusparse|"
                      r"cusolver|curand|torch_cuda|nvinfer|dcgm)", re.IGNORECASE)

# --- shared helpers -------------------------------------------------------------------------

GpuMap = dict[str, tuple[int | None, str | None]]  # bus id -> (index, uuid)


def gpu_map(visible: tuple[str, list[GpuSighting]] | None) -> GpuMap:
    """Bus id -> (index, UUID) of the GPUs the inventory knows (the fact
    ``visible_gpus``, None when absent)."""
    if not visible:
        return {}
    return {g.bus_id: (g.index, g.uuid) for g in visible[1] if g.bus_id}


def when(ev: DriverEvent) -> str | None:
    """An event's time: ISO 8601 when known, else as printed."""
    t = getattr(ev, "time", None)
    return t.isoformat() if t is not None else ev.timestamp


@lru_cache(maxsize=1024)
def _code_of(raw: str) -> int | None:
    return strict_int(raw, signed=False)


def code_of(raw: str | None) -> int | None:
    """The code ``raw`` spells (an Xid / SXid event's ``code`` detail), or None. A few
    codes recur in thousands of events: each distinct text is checked once."""
    return _code_of(raw) if isinstance(raw, str) else None


def xid_code(ev: DriverEvent) -> int | None:
    """The numeric code of an Xid / SXid event."""
    return code_of(ev.details.get("code"))


def scope_of(bus: str | None, gpus: GpuMap, *, device: bool = False,
             name: str | None = None) -> Scope:
    """The GPU at ``bus`` (index / UUID filled from the inventory); with ``device``,
    a device (NIC, bridge, ``name`` e.g. its interface) unless the bus is a known
    GPU; the node when there is no address."""
    if not bus:
        return NODE
    if device and bus not in gpus:
        return Scope(kind="device", pci_bus_id=bus, name=name)
    index, uuid = gpus.get(bus, (None, None))
    return gpu_scope(bus, index, uuid)


def gpu_label(bus: str | None, gpus: GpuMap) -> str:
    """``GPU 4 (0000:9a:00.0)`` when the index is known, else ``GPU 0000:9a:00.0``."""
    if not bus:
        return "a GPU (address not logged)"
    index = gpus.get(bus, (None, None))[0]
    return f"GPU {index} ({bus})" if index is not None else f"GPU {bus}"


def folded(events: Iterable[DriverEvent]) -> bool:
    """Whether any of ``events`` stands for a folded storm."""
    return any(ev.repeats is not None for ev in events)


def log_order(events: Sequence[DriverEvent]
              ) -> Callable[[DriverEvent], tuple[int, int, int, float]]:
    """A sort key placing occurrences of ``events`` (first ones and ``latest`` ones) in
    log order: boot, input (in the order the group first shows it), line, time."""
    origins = {origin: i for i, origin in enumerate(dict.fromkeys(
        [*(ev.origin for ev in events), *(ev.latest.origin for ev in events)]))}
    unknown = len(origins)

    def key(ev: DriverEvent) -> tuple[int, int, int, float]:
        t = ev.time  # (seconds(ev), inline: called for every occurrence of a group)
        at = t.timestamp() if t is not None else ev.uptime_s
        return (ev.boot, origins.get(ev.origin, unknown),
                ev.lineno if ev.lineno is not None else -1, at or 0.0)

    return key


def latest_of(events: Sequence[DriverEvent]) -> DriverEvent:
    """The last occurrence of a group in log order: its last event, unless a folded
    event's latest occurrence came after the events listed behind it."""
    if not folded(events):
        return events[-1]
    return max((ev.latest for ev in events), key=log_order(events))


def _lines(ev: DriverEvent) -> list[str]:
    own = split_lines(ev.line) or [""]
    more = len(own) - EVENT_LINES
    return own[:EVENT_LINES] + ([f"... ({more} more lines of this message)"] if more > 0 else [])


def _tail(events: Sequence[DriverEvent], head: list[DriverEvent]) -> list[DriverEvent]:
    """The last :data:`EVIDENCE_TAIL` occurrences known to be the last ones: walking back
    from the latest, an occurrence with a folded event's hidden occurrences after it ends
    the tail (the lines between are not known)."""
    key = log_order(events)
    spans = [(key(ev), key(ev.latest)) for ev in events if ev.count > 2]
    seen = {id(ev) for ev in head}
    known = [*events, *(ev.latest for ev in events if ev.latest is not ev)]
    # the walk looks at no more than EVIDENCE_TAIL + 1 occurrences, latest first (those
    # of one key in reverse list order, as a stable sort's reversal gives them)
    out: list[DriverEvent] = []
    for ev in heapq.nlargest(EVIDENCE_TAIL + 1, reversed(known), key=key):
        if len(out) == EVIDENCE_TAIL or id(ev) in seen:
            break
        if out and any(a <= key(ev) < b for a, b in spans):
            break
        out.append(ev)
    return out[::-1]


def _evidence(events: Sequence[DriverEvent]) -> Evidence:
    """The first few and the last raw lines, with the count (of occurrences) noted. A
    folded event shows its first line among the first ones, its latest among the last."""
    n = weight(events)
    lines: list[str] = []
    if not folded(events):
        picked: list[DriverEvent | None] = list(events)
        if n > EVIDENCE_HEAD + EVIDENCE_TAIL:
            picked = [*events[:EVIDENCE_HEAD], None, *events[-EVIDENCE_TAIL:]]
        for ev in picked:
            lines.extend(_lines(ev) if ev is not None else
                         [f"... ({n - EVIDENCE_HEAD - EVIDENCE_TAIL} more occurrences)"])
    else:
        head = list(events[:EVIDENCE_HEAD])
        tail = _tail(events, head)
        for ev in head:
            lines.extend(_lines(ev))
        if n > len(head) + len(tail):
            lines.append(f"... ({n - len(head) - len(tail)} more occurrences)")
        for ev in tail:
            lines.extend(_lines(ev))
    return Evidence("kernel_log", tuple(lines), f"{n} occurrences" if n > 1 else None)


def _occurrences(events: Sequence[DriverEvent], current: bool) -> Occurrences:
    return Occurrences(weight(events), when(events[0]), when(latest_of(events)), current)


def count_text(n: int) -> str:
    """``1 event`` / ``3 events``."""
    return f"{n} event{'s' if n != 1 else ''}"


@dataclass
class Judged:
    """The verdict on one group of events, before it becomes a finding."""

    severity: Severity
    action: Action
    blame: Blame
    title: str
    explanation: str
    notes: list[str] = field(default_factory=list)


def history(fid: str, judged: Judged, events: Sequence[DriverEvent], scope: Scope,
             refs: Iterable[str]) -> Finding:
    """The finding for an earlier boot's events: shown, never a current failure."""
    boots = sorted({ev.boot for ev in events})
    which = ", ".join(str(b) for b in boots)
    why = (f"History from an earlier boot (boot {which}), not a current failure. "
           + judged.explanation)
    f = finding(fid, Severity.INFO, "earlier boot: " + judged.title, why, Action.NONE,
                judged.blame, scope, [_evidence(events)], refs, _occurrences(events, False))
    return replace(f, status=Status.PAST, status_note=f"earlier boot {which}")


def past(fid: str, judged: Judged, events: Sequence[DriverEvent], scope: Scope,
         refs: Iterable[str], reset: Reset) -> Finding:
    """The finding for current-boot events that ``reset`` ended: history, like an
    earlier boot's, with the reset as evidence."""
    what = "a driver load" if reset.kind == "driver-load" else "a GPU reset"
    why = (f"History: {what} after these events re-initialised the GPU, so they are not a "
           f"current failure ({reset.note()}). " + judged.explanation)
    ev = [_evidence(events)]
    if reset.line:
        ev.append(Evidence(reset.source, (reset.line,)))
    f = finding(fid, Severity.INFO, "before reset: " + judged.title, why, Action.NONE,
                judged.blame, scope, ev, refs, _occurrences(events, True))
    return replace(f, status=Status.PAST, status_note=reset.note())


def emit(fid: str, judged: Judged, events: Sequence[DriverEvent], scope: Scope,
          refs: Iterable[str]) -> Finding:
    """The finding for a current-boot group of events (a draining action only with
    the severity that drains: a judgement lowered below critical plans the repair)."""
    why = " ".join([judged.explanation, *judged.notes]).strip()
    action = action_for(judged.severity, judged.action)
    return finding(fid, judged.severity, judged.title, why, action, judged.blame,
                   scope, [_evidence(events)], refs, _occurrences(events, True))


# How a group of events becomes a finding: :func:`emit` (current boot) or :func:`history`
MakeFinding = Callable[[str, Judged, Sequence[DriverEvent], Scope, Iterable[str]], Finding]


def split_boots(events: Iterable[DriverEvent]) -> tuple[list[DriverEvent], list[DriverEvent]]:
    """(events of the current boot, events of earlier boots)."""
    current: list[DriverEvent] = []
    earlier: list[DriverEvent] = []
    for ev in events:
        (current if ev.boot == 0 else earlier).append(ev)
    return current, earlier


def _gap(ev: DriverEvent, reset: Reset) -> float | None:
    """Seconds from ``ev`` to ``reset`` on a clock both have; None when none."""
    if ev.time is not None and reset.at is not None:
        return (reset.at - ev.time).total_seconds()
    if ev.uptime_s is not None and reset.uptime_s is not None:
        return reset.uptime_s - ev.uptime_s
    return None


def _before(ev: DriverEvent, reset: Reset) -> bool:
    """Whether ``ev`` was logged before ``reset`` (and, for a driver load, before that
    load's own probe). A reset no log dates (``nvidia-smi -r`` output) comes after the
    current boot's events; events it cannot be ordered with are not ended."""
    if reset.boot is None:
        return ev.boot == 0
    if ev.boot != reset.boot:
        return False
    gap = _gap(ev, reset)
    probe = reset.kind == "driver-load"
    if reset.lineno is not None and ev.lineno is not None and ev.origin == reset.origin:
        if ev.lineno >= reset.lineno:
            return False
        if not probe:
            return True
        return gap > PROBE_S if gap is not None else reset.lineno - ev.lineno > PROBE_LINES
    if gap is None:
        return False
    return gap > (PROBE_S if probe else 0.0)


def ended_by(ev: DriverEvent, resets: Resets | None) -> Reset | None:
    """The first reset after ``ev`` that re-initialised its GPU (a reset of that GPU, or
    a driver load); None when none did, or when nvidia-smi says the GPU still needs one.
    A folded event is ended when its latest occurrence is (its occurrences never
    straddle a reset the log shows: the fold key holds the reset epoch)."""
    if resets is None or ev.kind not in LOAD_ENDS or (ev.bus_id and ev.bus_id in resets.pending):
        return None
    for r in resets.resets:
        if r.kind == "gpu-reset":
            applies = ev.kind in RESET_ENDS and ev.bus_id is not None and r.bus_id == ev.bus_id
        else:
            applies = r.kind == "driver-load"  # a reboot starts a boot: split_boots tells
        if applies and _before(ev.latest, r):
            return r
    return None


def split_resets(events: Iterable[DriverEvent], resets: Resets | None
                 ) -> tuple[list[DriverEvent], dict[Reset, list[DriverEvent]]]:
    """(current-boot events still current, the others by the reset that ended them)."""
    current: list[DriverEvent] = []
    ended: dict[Reset, list[DriverEvent]] = {}
    for ev in events:
        r = ended_by(ev, resets)
        if r is None:
            current.append(ev)
        else:
            ended.setdefault(r, []).append(ev)
    return current, ended


def group(events: Iterable[_Item], key: Callable[[_Item], _Key]) -> dict[_Key, list[_Item]]:
    """Items by ``key(item)``, keeping first-seen order (log order inside a group)."""
    groups: dict[_Key, list[_Item]] = {}
    for ev in events:
        groups.setdefault(key(ev), []).append(ev)
    return groups


def worse(a: Severity, b: Severity) -> Severity:
    """The worse of two severities."""
    return a if a.rank >= b.rank else b


def cap_severity(severity: Severity, ceiling: Severity) -> Severity:
    """``severity``, but no worse than ``ceiling``."""
    return severity if severity.rank <= ceiling.rank else ceiling


def lost_gpu_xid() -> int | None:
    """The Xid of a GPU fallen off the bus (the catalog's, 79)."""
    info = catalog.xid_for_event(EventKind.FALLEN_OFF_BUS)
    return info.code if info is not None else None


def xid_events(events: Iterable[DriverEvent]) -> list[tuple[int, DriverEvent]]:
    """(code, event) for Xid lines in log order, plus "fallen off the bus" messages
    as their Xid (79) on GPUs (of the same boot) whose Xid line is not in the log."""
    lost = lost_gpu_xid()
    xid, fallen = EventKind.XID, EventKind.FALLEN_OFF_BUS
    out: list[tuple[int, DriverEvent]] = []
    has_lost: set[tuple[str | None, int]] = set()
    fell = False  # a fallen-off-bus message is listed (kept unless its GPU has the Xid)
    for ev in events:
        kind = ev.kind
        if kind == xid:
            code = code_of(ev.details.get("code"))
            if code is not None:
                out.append((code, ev))
                if code == lost:
                    has_lost.add((ev.bus_id, ev.boot))
        elif kind == fallen and lost is not None:
            out.append((lost, ev))
            fell = True
    if fell and has_lost:
        out = [(code, ev) for code, ev in out
               if ev.kind != fallen or (ev.bus_id, ev.boot) not in has_lost]
    return out
