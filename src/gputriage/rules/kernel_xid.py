"""Judging Xid errors: the catalog's verdict per code, refined by the GPU's context.

An Xid 45 that follows another Xid on its GPU (or says "caused by previous
Xid N") is a consequence, not a cause; 13 / 31 / 43 from several programs on
one GPU point at the GPU, one program (restarted under new pids, faulting the
same way) at its job; 48 with 63 / 64 is the
row-remapping flow; a 119 that keeps coming back repairs the GPU; 154 names its
own action. Every other verdict (and the starting point of these) is the catalog's
(:mod:`gputriage.knowledge.xid`). "Fallen off the bus" messages without their Xid
line count as the Xid the catalog names for them (79).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from gputriage.facts.resets import Resets
from gputriage.facts.stack import GpuSighting
from gputriage.knowledge import xid as catalog
from gputriage.logscan.events import DriverEvent
from gputriage.model import Action, Blame, Finding, Severity
from gputriage.parsers.kernel_fold import FOLLOW_ON_S, LOOKBACK, seconds, weight
from gputriage.parsers.kernel_repeats import fault_pattern, process_key
from gputriage.rules.base import action_for, rule
from gputriage.rules.kernel_common import (
    DOC_XID,
    GSP_REPEAT,
    GpuMap,
    Judged,
    cap_severity,
    count_text,
    emit,
    gpu_label,
    gpu_map,
    group,
    history,
    latest_of,
    past,
    scope_of,
    split_boots,
    split_resets,
    worse,
    xid_events,
)
from gputriage.text.fields import strict_int

APP_FAULTS = (13, 31, 43)
REMAP_PENDING, REMAP_FAILED = 63, 64  # row remap recorded / failed (after an Xid 48)
CONTAINED = 94  # the error contained to one process, which the driver ended

# --- Xid ------------------------------------------------------------------------------------

def _follow_on_causes(ev: DriverEvent, earlier_on_gpu: Sequence[tuple[int, DriverEvent]]
                      ) -> set[int]:
    """The Xids an Xid 45 is a consequence of (empty when it stands alone), from the
    GPU's Xids before it: for events the scan did not judge (``follows`` None)."""
    causes: set[int] = set()
    named = strict_int(ev.details.get("caused_by"), signed=False)
    if named is not None:
        causes.add(named)
    t = seconds(ev)
    for code, prev in reversed(earlier_on_gpu[-LOOKBACK:]):
        if code == 45:
            continue
        pt = seconds(prev)
        if t is None or pt is None or 0 <= t - pt <= FOLLOW_ON_S:
            causes.add(code)
            break
    return causes


@dataclass
class _Follows:
    """What the occurrences of one Xid 45 event follow."""

    causes: dict[int, int]  # cause code -> occurrences that follow it
    uncaused: int  # occurrences that follow no other Xid


def _follows(ev: DriverEvent, earlier_on_gpu: Sequence[tuple[int, DriverEvent]]) -> _Follows:
    """As the scan judged it (``follows``; a folded event's ``repeats``), else from the
    GPU's Xids listed before it."""
    if ev.repeats is not None:
        return _Follows(dict(ev.repeats.causes), ev.repeats.uncaused)
    causes = (set(ev.follows) if ev.follows is not None
              else _follow_on_causes(ev, earlier_on_gpu))
    return _Follows(dict.fromkeys(causes, 1), 0 if causes else 1)


PIDS_SHOWN = 6


@dataclass
class _AppFaults:
    """Who raised the application-fault Xids (13 / 31 / 43) on one GPU."""

    processes: set[str] = field(default_factory=set)  # pid when printed, else name
    programs: dict[str, set[str]] = field(default_factory=dict)  # name -> its pids
    unnamed: bool = False  # a faulting pid printed no usable name
    more: bool = False  # a folded storm had processes beyond those it names
    items: list[tuple[int, DriverEvent]] = field(default_factory=list, repr=False)

    def count(self) -> str:
        """How many processes: ``3``, or ``at least 128`` when a storm named only some."""
        return f"at least {len(self.processes)}" if self.more else str(len(self.processes))

    def crash_loop(self) -> str | None:
        """The program's name when several processes (pids) are one program, restarted
        and faulting again; None otherwise. Only different programs faulting on one GPU
        point at the GPU: one program's faults may differ from run to run."""
        if len(self.processes) >= 2 and not self.unnamed and len(self.programs) == 1:
            return next(iter(self.programs))
        return None

    def suspects(self) -> int:
        """How many different sources of faults: programs when every process is
        named and faults differ, else processes (pids)."""
        if not self.unnamed and self.programs and self.crash_loop() is None:
            return len(self.programs) if len(self.programs) >= 2 else len(self.processes)
        return len(self.processes)

    def shared_pattern(self) -> bool:
        """Whether every process raised one common fault pattern (its code and message,
        numbers blanked), the ones a folded storm kept included. Worked out only when a
        crash loop is described: each message costs a substitution."""
        patterns: dict[str, set[str]] = {}
        # a pattern is of the code and message: a program's repeated fault is worked out once
        known: dict[tuple[int, str | None], str] = {}
        for code, ev in self.items:
            key, _ = process_key(ev)
            if key:
                said = (code, ev.details.get("message"))
                pattern = known.get(said)
                if pattern is None:
                    pattern = known[said] = fault_pattern(code, ev)
                patterns.setdefault(key, set()).add(pattern)
            reps = ev.repeats
            if reps is not None:
                for key in reps.processes:
                    patterns.setdefault(key, set()).update(reps.patterns.get(key, ()))
        return bool(patterns) and bool(set.intersection(*patterns.values()))


def _app_faults(items: Iterable[tuple[int, DriverEvent]]) -> _AppFaults:
    """Processes and program names of Xid 13 / 31 / 43 lines; a folded storm adds the
    processes it kept (up to its bound: the processes beyond it, only counted, are taken
    as more of the programs named)."""
    out = _AppFaults(items=list(items))
    names: dict[str, str] = {}
    for _, ev in out.items:
        key, name = process_key(ev)
        if key:
            out.processes.add(key)
            if name:
                names[key] = name
        reps = ev.repeats
        if reps is None:
            continue
        out.more = out.more or reps.other_processes > 0
        for key, name in reps.processes.items():
            out.processes.add(key)
            if name:
                names[key] = name
    for key in out.processes:
        if key not in names:
            out.unnamed = True
            continue
        pids = out.programs.setdefault(names[key], set())
        if strict_int(key, signed=False) is not None:
            pids.add(key)
    return out


def _crash_loop_note(app: _AppFaults, name: str) -> str:
    pids = sorted(app.programs[name], key=int)
    shown = ", ".join(pids[:PIDS_SHOWN]) + (", ..." if len(pids) > PIDS_SHOWN else "")
    how = "the same way" if app.shared_pattern() else "again"
    return (f"{app.count()} restarts of one program '{name}' (pids {shown}) fault "
            f"{how} on this GPU: one job ({name}) crash-looping, not several programs "
            "hitting a bad GPU. No node action; restarting it unchanged will fault again, so "
            "look at the application (its code, inputs, memory use) before resubmitting.")


def recovery_target(ev: DriverEvent) -> tuple[str, Action]:
    """Xid 154: the recovery action the driver now asks for (its name as printed,
    e.g. "Drain and Reset") and our action for it."""
    text = ev.details.get("recovery_action") or ev.details.get("message") or ev.line
    m = re.search(r"\bto\s+(.{1,80}?)\s*\.?\s*$", text.strip())
    target = (m.group(1) if m else text).strip()
    inner = re.search(r"\(([^()]{1,64})\)", target)
    action = catalog.recovery_action(text) or catalog.recovery_action(target)
    return (inner.group(1) if inner else target), action or Action.RESET_GPU


@dataclass
class _GpuContext:
    """Everything one GPU logged this boot, for judging each of its groups."""

    events: list[tuple[int, DriverEvent]]
    codes: set[int]
    app: _AppFaults
    follow_ons: dict[int, int]  # cause code -> number of Xid 45 it triggered


def _gpu_contexts(xids: list[tuple[int, DriverEvent]]
                  ) -> tuple[dict[str | None, _GpuContext], dict[int, _Follows]]:
    """Per-GPU context and, per Xid 45 event id, what its occurrences follow."""
    per_gpu = group(xids, lambda item: item[1].bus_id)
    contexts: dict[str | None, _GpuContext] = {}
    causes_of: dict[int, _Follows] = {}
    for bus, items in per_gpu.items():
        follow: dict[int, int] = {}
        for i, (code, ev) in enumerate(items):
            if code == 45:
                f = causes_of[id(ev)] = _follows(ev, items[:i])
                for c, n in f.causes.items():
                    if c != 45:
                        follow[c] = follow.get(c, 0) + n
        contexts[bus] = _GpuContext(
            items, {c for c, _ in items},
            _app_faults((c, ev) for c, ev in items if c in APP_FAULTS), follow)
    return contexts, causes_of


def _catalog_judged(code: int, n: int, gpu: str) -> Judged:
    info = catalog.xid_info(code)
    if info is None:
        return Judged(Severity.WARNING, Action.NONE, Blame.UNKNOWN,
                      f"Xid {code} on {gpu}: not in the catalog ({count_text(n)})",
                      f"Xid {code} is not in gputriage's catalog; look it up in NVIDIA's "
                      "Xid documentation and capture nvidia-bug-report.sh output.")
    return Judged(info.severity, info.action, info.blame,
                  f"Xid {code} on {gpu}: {info.meaning} ({count_text(n)})", info.explanation)


@dataclass
class _Group:
    """One (code, GPU) group of Xid events and what its judgement may look at."""

    code: int
    events: list[DriverEvent]
    ctx: _GpuContext
    causes_of: dict[int, _Follows]
    gpu: str


def _take_verdict(j: Judged, code: int) -> None:
    """Severity, action and blame of Xid ``code`` as the catalog gives them."""
    info = catalog.xid_info(code)
    if info is not None:
        j.severity, j.action, j.blame = info.severity, info.action, info.blame


def _judge_48(j: Judged, g: _Group) -> None:
    """A double-bit ECC error and what the row-remap flow did next."""
    if REMAP_FAILED in g.ctx.codes:
        _take_verdict(j, REMAP_FAILED)
        j.notes.append("Xid 64 follows: the row remap / page retirement failed, so the "
                       "bad memory stays in use: drain the node and repair the GPU.")
    elif REMAP_PENDING in g.ctx.codes:
        j.notes.append("Xid 63 follows: a row remap is pending; drain the GPU and reset it "
                       "to apply the remap, then check that no remap failed.")
    if CONTAINED in g.ctx.codes:
        procs = sorted({f"{ev.details['process']} pid {ev.details['pid']}"
                        for c, ev in g.ctx.events if c == CONTAINED
                        and ev.details.get("process", "<unknown>") != "<unknown>"
                        and ev.details.get("pid")})
        who = f" ({', '.join(procs[:3])})" if procs else ""
        j.notes.append(f"Xid 94 follows: the error was contained to the process that read "
                       f"the memory{who}, which the driver ended; the GPU's other work went "
                       "on. Restart that job elsewhere; the reset applies the remap.")


def _judge_63(j: Judged, g: _Group) -> None:
    """A remap recorded is as bad as a remap that failed beside it."""
    failed = catalog.xid_info(REMAP_FAILED)
    if REMAP_FAILED in g.ctx.codes and failed is not None and (
            failed.severity.rank >= j.severity.rank):
        _take_verdict(j, REMAP_FAILED)
        j.notes.append("Xid 64 follows: the remap failed, so the bad memory stays in use.")


def _judge_119(j: Judged, g: _Group) -> None:
    """GSP timeouts that keep coming back on one GPU: repair it."""
    n119 = weight(ev for c, ev in g.ctx.events if c == g.code)
    if n119 < GSP_REPEAT:
        return
    j.action = Action.DRAIN_AND_REPAIR
    count = count_text(weight(g.events))
    j.title = j.title.replace(f" ({count})", f", repeating ({count})")
    j.notes.append(f"The GSP timed out {n119} times on this GPU: it keeps coming back, "
                   "so drain the node and repair the GPU if a reset does not hold.")


def _judge_109(j: Judged, g: _Group) -> None:
    """A context-switch timeout after the job's own fault on the GPU is that job's hang:
    restart it; only a timeout without one calls for the GPU reset the catalog names."""
    faults = sorted(set(APP_FAULTS) & g.ctx.codes)
    if not faults:
        return
    j.severity, j.action, j.blame = Severity.WARNING, Action.RESTART_JOB, Blame.JOB
    j.notes.append(f"It follows the job's own fault on this GPU (Xid {', '.join(map(str, faults))})"
                   ": the faulting job hung the channel. Restart the job; if Xid 109 comes "
                   "back without an application fault before it, drain and reset the GPU.")


def _judge_154(j: Judged, g: _Group) -> None:
    """The recovery action the driver asks for is the action."""
    target, action = recovery_target(latest_of(g.events))
    j.action = action
    j.severity = Severity.INFO if action is Action.NONE else Severity.CRITICAL
    j.blame = Blame.UNKNOWN if action is Action.NONE else Blame.NODE
    j.title = (f"Xid 154 on {g.gpu}: the driver asks for: {target} "
               f"({count_text(weight(g.events))})")
    j.notes.append(f"Latest recovery action: {target}; do exactly that.")


def _judge_45_group(j: Judged, g: _Group) -> None:
    _judge_45(j, g.events, g.ctx, g.causes_of, g.gpu)


_MMU = re.compile(r"MMU Fault: ENGINE (?P<engine>[A-Z_]{1,24}[0-9]{0,3}) (?P<client>\S{1,40}) "
                  r"faulted @ (?P<addr>0x[0-9a-fA-F_]{1,24})\. Fault is of type (?P<type>\w{1,32})")


def _mmu_note(events: Sequence[DriverEvent]) -> str | None:
    """What an Xid 31's MMU fault details say: the engine, the fault type, one address."""
    faults = [m for ev in events if (m := _MMU.search(ev.details.get("message", "")))]
    if not faults:
        return None
    engines = sorted({m["engine"] for m in faults})
    types = sorted({m["type"] for m in faults})
    addrs = {m["addr"] for m in faults}
    note = (f"MMU fault details: engine {', '.join(engines)}, {', '.join(types)}"
            + (f", every time at {next(iter(addrs))}" if len(addrs) == 1 and len(faults) > 1
               else ""))
    if any(e.startswith("HOST") for e in engines):
        note += (": the channel's host engine (its command fetch) faulted, so the commands "
                 "or semaphores the program submitted point at memory that is not mapped: "
                 "the program, or the user-space driver it drives the GPU with, does not "
                 "match the kernel module (a program that programs the GPU directly needs "
                 "the module it was written for), not a failing GPU")
    elif any(t.startswith("FAULT_PDE") or t.startswith("FAULT_PTE") for t in types):
        note += ": the address was never mapped, a bad pointer of the program"
    return note + "."


def _judge_app_fault_group(j: Judged, g: _Group) -> None:
    _judge_app_fault(j, g.ctx.app)
    loop = g.ctx.app.crash_loop()
    if loop is not None:
        j.title = (f"Xid {g.code} on {g.gpu}: one job ({loop}) crash-looping: "
                   f"{g.ctx.app.count()} restarts ({count_text(weight(g.events))})")
    note = _mmu_note(g.events) if g.code == 31 else None
    if note:
        j.notes.append(note)


# the codes whose verdict the GPU's other events refine (every other code: the catalog's)
_CONTEXT: dict[int, Callable[[Judged, _Group], None]] = {
    45: _judge_45_group, **dict.fromkeys(APP_FAULTS, _judge_app_fault_group),
    48: _judge_48, REMAP_PENDING: _judge_63, 109: _judge_109, 119: _judge_119,
    154: _judge_154}


def judge_xid_group(code: int, events: list[DriverEvent], ctx: _GpuContext,
                    causes_of: dict[int, _Follows], gpu: str) -> Judged:
    """Catalog judgement of one (code, GPU) group, refined by the GPU's context."""
    j = _catalog_judged(code, weight(events), gpu)
    refine = _CONTEXT.get(code)
    if refine is not None:
        refine(j, _Group(code, events, ctx, causes_of, gpu))
    followed = ctx.follow_ons.get(code, 0)
    if code != 45 and followed:
        j.notes.append(f"It was followed by {followed} Xid 45 channel teardown(s), its "
                       "consequence rather than a separate cause.")
    return j


def _judge_app_fault(j: Judged, app: _AppFaults) -> None:
    """Xid 13 / 31 / 43: the job's fault unless several programs fault on one GPU."""
    n = app.suspects()
    loop = app.crash_loop()
    if loop is None and n >= 2:
        who = f"{app.count()} different processes"
        if len(app.programs) >= 2 and not app.unnamed:
            who += f" of {n} programs ({', '.join(sorted(app.programs))})"
        # NVIDIA's immediate action for these codes is RESTART_APP (43: IGNORE); several
        # programs faulting on one GPU is its investigatory workflow (a diagnostic of the
        # GPU), never a drain on the Xids alone.
        j.severity = worse(j.severity, Severity.WARNING)
        j.action = Action.PLAN_REPAIR
        j.blame = Blame.NODE
        j.notes.append(f"Application faults (Xid 13/31/43) on this GPU come from {who}: "
                       "suspect the GPU, not the jobs. NVIDIA's catalog answers each with a "
                       "restart of the application, so the node is not drained on these "
                       "Xids alone: run DCGM diagnostics (dcgmi diag -r 3) on this GPU when "
                       "it is idle or at the next maintenance window, and drain it if the "
                       "diagnostic fails.")
        return
    j.severity = cap_severity(j.severity, Severity.WARNING)  # the catalog's job verdict
    j.action = action_for(j.severity, j.action)
    j.notes.append(_crash_loop_note(app, loop) if loop is not None
                   else "Only one process faulted on this GPU: no node action.")


def _judge_45(j: Judged, events: list[DriverEvent], ctx: _GpuContext,
              causes_of: dict[int, _Follows], gpu: str) -> None:
    n = weight(events)
    follows = [causes_of.get(id(ev), _Follows({}, ev.count)) for ev in events]
    uncaused = sum(f.uncaused for f in follows)
    if uncaused:
        if uncaused < n:
            j.notes.append(f"{n - uncaused} of them follow another Xid.")
        return
    named = {c for f in follows for c, k in f.causes.items() if k} - {45}
    if not named:  # "caused by previous Xid 45" only: a teardown names no cause
        _judge_45_chain(j, n, gpu)
        return
    absent = sorted(c for c in named if c not in ctx.codes)
    what = ", ".join(f"Xid {c}" for c in sorted(named))
    j.title = f"Xid 45 on {gpu}: follow-on of {what} ({count_text(n)})"
    j.explanation = ("Xid 45 is the driver tearing down channels after another error; it "
                     "is a consequence, not a cause of its own.")
    if absent:
        worst = None
        for c in absent:
            info = catalog.xid_info(c)
            if info is not None and (worst is None or info.severity.rank > worst.severity.rank):
                worst = info
        if worst is not None:
            j.severity, j.action, j.blame = worst.severity, worst.action, worst.blame
        j.notes.append(f"Channels were torn down because of {what}, which this log does not "
                       "show (look earlier): act on that cause. "
                       + (worst.explanation if worst is not None else ""))
        return
    j.severity, j.action = Severity.INFO, Action.NONE
    j.notes.append(f"These teardowns are the consequence of {what} on this GPU (see that "
                   "finding), not a separate cause.")


def _judge_45_chain(j: Judged, n: int, gpu: str) -> None:
    """Xid 45s the driver blames on an earlier Xid 45 alone: the error that began the
    teardowns is older than the log (a follow-on needs a different earlier Xid)."""
    j.title = (f"Xid 45 on {gpu}: channel teardowns after earlier ones; what began them is "
               f"not in this log ({count_text(n)})")
    j.explanation = ("Xid 45 is the driver tearing down channels after another error; the "
                     "driver names an earlier Xid 45 as the cause of these, so the error that "
                     "started the teardowns happened before this log begins.")
    j.severity, j.action = Severity.INFO, Action.NONE
    j.notes.append("Look earlier in the kernel log (journalctl -k, the previous boot's log) "
                   "for the first Xid other than 45 on this GPU, and act on that one.")


XID_IDS = tuple(f"xid.{x.code}" for x in catalog.all_xids())


@rule("kernel.xid", produces=XID_IDS)
def xid_findings(log_events: list[DriverEvent],
                 visible_gpus: tuple[str, list[GpuSighting]] | None = None,
                 resets_seen: Resets | None = None) -> Iterator[Finding]:
    """Xid errors in the kernel log: one finding per GPU and code with its count and
    first/last time, judged from the Xid catalog and the GPU's other Xids; those a
    later reset of their GPU (or a driver load) ended are history."""
    yield from judge_xids(log_events, gpu_map(visible_gpus), resets_seen)


def judge_xids(events: Iterable[DriverEvent], gpus: GpuMap,
               resets: Resets | None = None) -> Iterator[Finding]:
    """Findings for the Xid events (and Xid-less "fallen off the bus") in ``events``."""
    this_boot, earlier = split_boots(events)
    current, ended = split_resets(this_boot, resets)
    for reset, evs_ended in ended.items():
        for (code, bus), items in group(xid_events(evs_ended),
                                         lambda it: (it[0], it[1].bus_id)).items():
            evs = [ev for _, ev in items]
            judged = _catalog_judged(code, weight(evs), gpu_label(bus, gpus))
            yield past(f"xid.{code}", judged, evs, scope_of(bus, gpus), (DOC_XID,), reset)
    xids = xid_events(current)
    contexts, causes_of = _gpu_contexts(xids)
    for (code, bus), items in group(xids, lambda it: (it[0], it[1].bus_id)).items():
        evs = [ev for _, ev in items]
        judged = judge_xid_group(code, evs, contexts[bus], causes_of, gpu_label(bus, gpus))
        yield emit(f"xid.{code}", judged, evs, scope_of(bus, gpus), (DOC_XID,))
    for (code, bus), items in group(xid_events(earlier),
                                     lambda it: (it[0], it[1].bus_id)).items():
        evs = [ev for _, ev in items]
        judged = _catalog_judged(code, weight(evs), gpu_label(bus, gpus))
        yield history(f"xid.{code}", judged, evs, scope_of(bus, gpus), (DOC_XID,))


