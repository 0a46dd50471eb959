"""Job-level NCCL diagnoses from the job's log: ranks that load different NCCL
releases, a communicator init that never completed, and a framework watchdog
timeout (PyTorch ProcessGroupNCCL) with the CUDA error on another rank that
caused it. The WARN-level rules are in :mod:`.nccl_errors`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from gputriage.model import (
    NODE,
    Action,
    Blame,
    Evidence,
    Finding,
    Occurrences,
    Scope,
    Severity,
    evidence,
    gpu_scope,
)
from gputriage.parsers.nccl_model import NcclComm, NcclLog, NcclProcess, NcclWarn
from gputriage.rules.base import finding, rule
from gputriage.rules.nccl_errors import plural
from gputriage.text.fields import split_lines, strict_int

if TYPE_CHECKING:
    from gputriage.parsers.kernel_model import DriverEvent

LOG = "nccl_log"
SHOWN = 6


# --- versions -----------------------------------------------------------------------------


@rule("nccl.version-mismatch", produces=("nccl.version-mismatch",))
def version_mismatch(nccl_log: NcclLog) -> Iterator[Finding]:
    """Ranks of one job that load different NCCL releases (or one release built for
    different CUDA versions) speak different protocols: hangs or corrupt results."""
    log = nccl_log
    seen: dict[str, list[str]] = {}
    raw: dict[str, str] = {}  # the version line as one process of each version printed it
    for p in log.processes:
        if p.nccl_version:
            build = f"+cuda{p.cuda_build}" if p.cuda_build else ""
            seen.setdefault(p.nccl_version + build, []).append(p.label)
            if "version" in p.notes:
                raw.setdefault(p.nccl_version + build, p.notes["version"])
    known = {v.split("+")[0] for v in seen}
    for v in sorted(log.versions):
        if v.split("+")[0] not in known and v not in seen:
            seen.setdefault(v, [])
    if len(seen) < 2:
        return
    releases = {v.split("+")[0] for v in seen}
    parts = [f"{v} on {', '.join(sorted(set(who))[:4]) or '(unattributed)'}"
             + (f" +{len(set(who)) - 4} more" if len(set(who)) > 4 else "")
             for v, who in sorted(seen.items())]
    lines = [raw.get(v) or f"{who[0] if who else '(no host prefix)'}: NCCL version {v}"
             for v, who in sorted(seen.items())]
    if len(releases) > 1:
        sev, what = Severity.CRITICAL, f"{len(releases)} NCCL releases in one job"
    else:
        sev, what = Severity.WARNING, "one NCCL release built for different CUDA versions"
    yield finding(
        "nccl.version-mismatch", sev, f"{what}: {'; '.join(parts)}",
        "Every rank of a job must load the same NCCL library: different releases can "
        "disagree on the wire protocol and the algorithms, which shows up as hangs at init "
        "or in collectives, or as wrong results. Run all ranks from one container image or "
        "environment (check LD_LIBRARY_PATH and the framework's bundled NCCL).",
        Action.FIX_SOFTWARE, Blame.JOB, NODE,
        [evidence(LOG, lines, "the version line of one process per version")])


# --- an NCCL build that does not know the GPU ------------------------------------------------

@rule("nccl.shared-mem-exceeded", produces=("nccl.shared-mem-exceeded",))
def shared_mem_exceeded(nccl_log: NcclLog) -> Iterator[Finding]:
    """NCCL printing that its kernels want more shared memory per block than the device
    offers: the library was built before this GPU's architecture (its tables assume a
    larger GPU), so collectives may fail to launch or run on a fallback path."""
    hit = [p for p in nccl_log.processes if p.shared_mem is not None]
    if not hit:
        return
    p = hit[0]
    assert p.shared_mem is not None
    wanted, offered = p.shared_mem
    build = (f"NCCL {p.nccl_version}" if p.nccl_version else "this NCCL") + (
        f" (built with CUDA {p.cuda_build})" if p.cuda_build else "")
    driver = (f"; the driver supports CUDA {p.cuda_driver // 1000}.{p.cuda_driver % 1000 // 10}"
              if p.cuda_driver else "")
    lines = [p.notes["shared-mem"]] + [p.notes[k] for k in ("version",) if k in p.notes]
    yield finding(
        "nccl.shared-mem-exceeded", Severity.WARNING,
        f"{build} wants {wanted} bytes of shared memory per block, the GPU offers "
        f"{offered}{driver} ({plural(len(hit), 'process')})",
        "NCCL sizes its kernels from tables compiled into the library; a GPU newer than "
        "the build (a new architecture, often a GeForce or workstation part with less "
        "shared memory than the data-center GPU of its generation) does not match them. "
        "Failures and hangs in collectives, peer-to-peer included, follow from the "
        "library, not from the node: use an NCCL release that supports this GPU, built "
        "with a CUDA version that knows its architecture (the framework's bundled NCCL "
        "counts: upgrade the wheel or the image).",
        Action.FIX_SOFTWARE, Blame.JOB_CONFIG, NODE,
        [evidence(LOG, lines, "NCCL's own line, and its version")])


# --- init that did not complete -------------------------------------------------------------

_NETWORK_STEP = re.compile(r"NET/|Bootstrap|OOB|Channel|Connected|via|Socket|network|\bIB\b|"
                           r"GPU Direct", re.IGNORECASE)


def _stuck_comms(log: NcclLog) -> list[tuple[NcclProcess, NcclComm]]:
    """Communicators whose init started but did not complete (and printed no timings,
    which NCCL prints after init)."""
    whole = bool(log.versions) or any(p.nccl_version for p in log.processes)
    stuck = []
    for p in log.processes:
        for c in p.comms:
            timed = c.init_total_s is not None or bool(c.init_steps_s)
            if not c.init_complete and not timed and (whole or "Init START" in c.line):
                stuck.append((p, c))
    return stuck


def _stuck_why(network: bool, warned: int) -> str:
    why = ("The rank began creating its communicator and never finished; a log cut short "
           "looks the same, so check that the log covers the time of the hang. ")
    why += ("It stopped while setting up the network (bootstrap or connections to peers): a "
            "peer that never arrived, a firewall or a wrong NCCL_SOCKET_IFNAME / NCCL_IB_HCA, "
            "or an unreachable HCA path." if network else
            "Look at what the other ranks logged at that time.")
    if warned:
        why += (f" These processes logged {plural(warned, 'WARN')} first: see the other "
                "nccl.* findings.")
    return why


@rule("nccl.init-incomplete", produces=("nccl.init-incomplete",))
def init_incomplete(nccl_log: NcclLog) -> Iterator[Finding]:
    """A communicator whose init started (Init START, or a log with the version line)
    but never logged Init COMPLETE: the rank hung (or the log was cut short) at the last
    step it printed. Excerpts without a START or version line are left alone."""
    log = nccl_log
    stuck = _stuck_comms(log)
    if not stuck:
        return
    total = {(p.label, c.comm, c.rank) for p in log.processes for c in p.comms}
    first_p, _ = stuck[0]
    step = first_p.last_step or first_p.last_line or "nothing after the start"
    ranks = sorted({c.rank for _, c in stuck if c.rank is not None})
    who = (f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks[:8]))}"
           if ranks else plural(len(stuck), "communicator"))
    network = _NETWORK_STEP.search(step) is not None
    why = _stuck_why(network, sum(len(p.warns) for p, _ in stuck))
    lines = []
    for p, c in stuck[:SHOWN]:
        lines.append(c.line)
        if p.last_line and p.last_line != c.line:
            lines.append(p.last_line)
    yield finding(
        "nccl.init-incomplete", Severity.WARNING,
        f"NCCL init did not complete for {who} ({len(stuck)} of {len(total)} communicator "
        f"records): stuck after '{step.strip()[:120]}'",
        why, Action.FIX_CONFIG if network else Action.RESTART_JOB, Blame.UNKNOWN, NODE,
        [evidence(LOG, lines, "each stuck communicator and the last line its process logged")])


# --- framework watchdog timeouts and their cause -------------------------------------------

_TIMEOUT = re.compile(r"collective operation timeout|Watchdog caught|timed out", re.IGNORECASE)
_CUDA = re.compile(r"CUDA error:\s*([^\n]+)|Cuda failure '?([^'\n]+)'?", re.IGNORECASE)
_RANK = re.compile(r"\[rank([0-9]+)\]|\[Rank ([0-9]+)\]|\bRank ([0-9]+)\b", re.IGNORECASE)
_SEQ = re.compile(r"SeqNum=([0-9]+)")
_OP = re.compile(r"OpType=(\w+)")
_TIMEOUT_MS = re.compile(r"Timeout\(ms\)=([0-9]+)")
_RAN = re.compile(r"ran for ([0-9]+) milliseconds")
_ECC = re.compile(r"ECC", re.IGNORECASE)
_APP = re.compile(r"illegal memory access|illegal address|misaligned address|illegal instruction|"
                  r"invalid argument|device-side assert", re.IGNORECASE)
GPU_XIDS = frozenset({13, 31, 43, 48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 154})


def _rank(w: NcclWarn) -> int | None:
    if w.rank is not None:
        return w.rank
    m = _RANK.search(w.line) or _RANK.search(w.message)
    return strict_int(next(g for g in m.groups() if g), signed=False) if m else None


def _num(w: NcclWarn, attr: str, pattern: re.Pattern[str]) -> str | None:
    value = getattr(w, attr)
    if value is not None:
        return str(value)
    m = pattern.search(w.message) or pattern.search(w.line)
    return m.group(1) if m else None


def _cuda_error(w: NcclWarn) -> str | None:
    m = _CUDA.search(w.message) or _CUDA.search(w.line)
    return (m.group(1) or m.group(2)).strip().rstrip(".") if m else None


def _timeout_text(group: list[NcclWarn]) -> str:
    """``ALLREDUCE SeqNum 51753, ran 600.1 s (timeout 600 s)`` from one rank's records."""
    def pick(attr: str, pattern: re.Pattern[str]) -> str | None:
        return next((v for w in group if (v := _num(w, attr, pattern))), None)

    op, seq = pick("op_type", _OP), pick("seq_num", _SEQ)
    limit, ran = pick("timeout_ms", _TIMEOUT_MS), pick("elapsed_ms", _RAN)
    parts = [" ".join(x for x in (op, f"SeqNum {seq}" if seq else None) if x)]
    if (ran_ms := strict_int(ran, signed=False)) is not None:
        parts.append(f"ran {ran_ms / 1000:g} s")
    if (limit_ms := strict_int(limit, signed=False)) is not None:
        parts.append(f"timeout {limit_ms / 1000:g} s")
    return ", ".join(p for p in parts if p) or "collective"


def _rank_gpu(log: NcclLog, rank: int | None) -> int | None:
    """The CUDA device of the process that owns ``rank``, when the log tells."""
    for p in log.processes:
        if rank is not None and rank in p.ranks and len(p.cuda_devs) == 1:
            return next(iter(p.cuda_devs))
    return None


def _xids(events: list[DriverEvent]) -> tuple[str, list[str], set[str]]:
    """('Xid 48, Xid 63 (3)', lines, bus ids) of GPU-fault Xids in this host's kernel log."""
    coded = [(ev, code) for ev in events if ev.kind == "xid"
             and (code := strict_int(str(ev.details.get("code", "")), signed=False)) in GPU_XIDS
             and code is not None]
    found = [ev for ev, _ in coded]
    counts = Counter(code for _, code in coded)
    text = ", ".join(f"Xid {c}" + (f" ({n})" if n > 1 else "") for c, n in sorted(counts.items()))
    return text, [split_lines(ev.line)[0] for ev in found[:4]], {ev.bus_id for ev in found
                                                                  if ev.bus_id}


Timeouts = dict[int | None, list[NcclWarn]]  # rank -> its timeout records
Causes = dict[int | None, list[tuple[NcclWarn, str]]]  # rank -> (record, CUDA error)


def _framework_records(log: NcclLog) -> tuple[Timeouts, Causes]:
    """The framework's timeouts and CUDA errors by rank; when there are timeouts but no
    CUDA error, NCCL's own CUDA failure WARNs stand in as the causes."""
    timeouts: Timeouts = {}
    causes: Causes = {}
    for w in log.framework_errors:
        err = _cuda_error(w)
        if err:
            causes.setdefault(_rank(w), []).append((w, err))
        elif w.kind == "timeout" or _TIMEOUT.search(w.message) or _SEQ.search(w.message):
            timeouts.setdefault(_rank(w), []).append(w)
    if timeouts and not causes:
        for p in log.processes:
            rank = next(iter(p.ranks)) if len(p.ranks) == 1 else None
            for w in p.warns:
                if w.kind == "cuda" and (err := _cuda_error(w)):
                    causes.setdefault(w.rank if w.rank is not None else rank, []).append(
                        (w, err))
    return timeouts, causes


def _cuda_verdict(err: str) -> tuple[Severity, Action, Blame, str]:
    """What a rank's CUDA error says: the GPU's memory (ECC), the application's kernels,
    or a cause to look up."""
    if _ECC.search(err):
        return (Severity.CRITICAL, Action.RESET_GPU, Blame.NODE,
                "The GPU of that rank returned memory ECC could not correct; its process "
                "aborted, so the others waited in the collective until the watchdog fired. "
                "Drain the GPU, reset it (row remapping takes effect on reset) and check its "
                "Xid 48/63/64/94/95 and remapped rows; repair it if it repeats.")
    if _APP.search(err):
        return (Severity.WARNING, Action.RESTART_JOB, Blame.JOB,
                "The rank's own kernels faulted (an application bug or bad input); its "
                "process died and the other ranks timed out waiting for it. Debug the "
                "application (CUDA_LAUNCH_BLOCKING=1, compute-sanitizer).")
    return (Severity.WARNING, Action.RESTART_JOB, Blame.UNKNOWN,
            "That rank's CUDA error ended its process; the other ranks timed out waiting "
            "for it. The error names the cause: look for Xids on its GPU.")


def _no_cause(waited: str, xid_note: str, ev: list[Evidence], count: int) -> Finding:
    return finding(
        "nccl.watchdog-timeout", Severity.WARNING,
        f"collective timed out ({waited}) with no cause in this log",
        "A rank waited for a collective that its peers never joined. The cause is on "
        "another rank: one that crashed, hit a GPU error or is stuck (data loader, "
        "checkpoint, a different code path). Read the other ranks' logs and their "
        f"hosts' Xids before blaming the network.{xid_note}",
        Action.RESTART_JOB, Blame.UNKNOWN, NODE, ev, occurrences=Occurrences(count))


def _cause_scope(xid_buses: set[str], dev: int | None) -> Scope:
    if len(xid_buses) == 1:
        return gpu_scope(next(iter(xid_buses)), dev)
    return Scope("gpu", gpu_index=dev) if dev is not None else NODE


@rule("nccl.watchdog-timeout", produces=("nccl.watchdog-timeout",))
def watchdog_timeout(nccl_log: NcclLog,
                     driver_events: list[DriverEvent] | None = None) -> Iterator[Finding]:
    """A framework's collective timeout (PyTorch ProcessGroupNCCL watchdog). When
    another rank hit a CUDA error (uncorrectable ECC, illegal address), that rank is
    the cause and the timeouts are collateral; kernel-log Xids of this host are named."""
    timeouts, causes = _framework_records(nccl_log)
    if not timeouts and not causes:
        return
    xid_text, xid_lines, xid_buses = _xids(driver_events or [])
    waited = "; ".join(f"rank {r if r is not None else '?'}: {_timeout_text(g)}"
                       for r, g in sorted(timeouts.items(), key=lambda kv: kv[0] or -1))
    ev = [evidence(LOG, [w.line for g in causes.values() for w, _ in g[:2]]
                   + [w.line for g in timeouts.values() for w in g[:3]])]
    if xid_lines:
        ev.append(evidence("kernel_log", xid_lines, f"GPU Xids on this host: {xid_text}"))
    xid_note = f" This host's kernel log shows {xid_text}." if xid_text else ""
    waits = sum(len(g) for g in timeouts.values())
    if not causes:
        yield _no_cause(waited, xid_note, ev, waits)
        return
    rank, found = next(iter(causes.items()))
    err = found[0][1]
    dev = _rank_gpu(nccl_log, rank)
    who = f"rank {rank}" if rank is not None else "a rank"
    where = f" (CUDA device {dev})" if dev is not None else ""
    title = f"{who}{where} hit 'CUDA error: {err}'"
    if timeouts:
        title += f"; the timeout on {waited} is collateral"
    sev, action, blame, why = _cuda_verdict(err)
    if len(causes) > 1:
        why += f" {plural(len(causes), 'rank')} reported CUDA errors; the first is shown."
    yield finding("nccl.watchdog-timeout", sev, title, why + xid_note, action, blame,
                  _cause_scope(xid_buses, dev), ev,
                  occurrences=Occurrences(sum(len(g) for g in causes.values()) + waits))
