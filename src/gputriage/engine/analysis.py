"""Analyse a snapshot: facts -> rules -> one Result for the views."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gputriage.facts.context import CheckContext
from gputriage.facts.store import Facts, Missing
from gputriage.facts.window import LogWindow
from gputriage.model import (
    UNKNOWN_STATE,
    Action,
    Blame,
    Evidence,
    Finding,
    GpuRow,
    HostSummary,
    Result,
    Severity,
    Skipped,
)
from gputriage.rules import all_rules
from gputriage.rules.base import Rule
from gputriage.snapshot.bundle import Snapshot

# A rule that raises is reported as skipped with this reason, and the others still run;
# with GPUTRIAGE_STRICT set (the test suite sets it) the exception propagates.
RULE_ERROR = "rule error"
STRICT_ENV = "GPUTRIAGE_STRICT"


def _inputs_of(facts: Facts, rule: Rule) -> dict:
    """The keyword arguments of a rule: its required facts, then its optional ones."""
    kwargs = {name: facts.get(name) for name in rule.requires}
    for name, default in rule.defaults:
        kwargs[name] = facts.maybe(name, default)
    return kwargs


def _skip_reason(facts: Facts, rule: Rule) -> str | None:
    for name in rule.requires:
        try:
            facts.get(name)
        except Missing as exc:
            return f"needs {name}: {exc}"
    if rule.any_of and not any(facts.has(name) for name in rule.any_of):
        return f"needs one of {', '.join(rule.any_of)}"
    return None


def analyze(snapshot: Snapshot, window: LogWindow | None = None,
            context: CheckContext | None = None) -> Result:
    """Run every rule whose inputs are present over one host's snapshot; kernel-log
    events are judged inside ``window`` (default: all boots, only the last current),
    with the expectations and acknowledgements of ``context``."""
    return analyze_facts(Facts(snapshot, window=window or LogWindow(),
                               context=context or CheckContext()))


def analyze_facts(facts: Facts, rules: Sequence[Rule] | None = None) -> Result:
    """Run every rule (or those of ``rules``) whose inputs are present over prepared
    facts."""
    snapshot = facts.snapshot
    result = Result(manifest=snapshot.manifest)
    ran = 0
    for rule in all_rules() if rules is None else rules:
        reason = _skip_reason(facts, rule)
        if reason:
            result.skipped.append(Skipped(rule.id, reason))
            continue
        try:
            found = rule.func(**_inputs_of(facts, rule))
            result.findings.extend(found)
        except Missing as exc:
            result.skipped.append(Skipped(rule.id, f"needs {exc}"))
            continue
        except Exception as exc:  # one rule's bug must not hide the others
            if os.environ.get(STRICT_ENV):
                raise
            result.skipped.append(Skipped(rule.id, f"{RULE_ERROR}: {type(exc).__name__}: "
                                                   f"{exc}"))
            continue
        if rule.requires or rule.any_of:  # a rule that needs no input tells nothing
            ran += 1
    result.findings = [as_pasted(f, snapshot) for f in settle(result.findings, facts)]
    result.job_faults_fail = facts.context.job_faults_fail
    result.unreadable = list(snapshot.problems) + facts.problems
    result.not_read = facts.maybe("not_read", [])
    result.inputs = _inputs(snapshot)
    result.gpus = _gpus(facts, result.findings)
    result.host = _host(facts, result, ran)
    return result


def as_pasted(found: Finding, snapshot: Snapshot) -> Finding:
    """The finding with its evidence lines as pasted: a line read without its framing
    (a quote, a container's log prefix, a JSON record: ``Captured.framed``) is quoted
    whole, so that it can be found in the input."""
    framed: dict[str, dict[str, str]] = {
        name: cap.framed for name, cap in snapshot.captures.items()
        if getattr(cap, "framed", None)}  # (a large log's scan has no pasted lines)
    if not framed:
        return found

    def restore(ev: Evidence) -> Evidence:
        pasted = framed.get(ev.source)
        if not pasted:
            return ev
        return replace(ev, lines=tuple(pasted.get(ln, ln) for ln in ev.lines))

    return replace(found, evidence=tuple(restore(ev) for ev in found.evidence),
                   consequences=tuple(as_pasted(c, snapshot) for c in found.consequences))


def settle(findings: list[Finding], facts: Facts) -> list[Finding]:
    """The rules' findings as the report gives them: consequences folded into their
    cause and per-GPU repeats into one finding, the operator's acknowledgements
    applied, each with its concrete next step."""
    if not findings:  # (a healthy host: nothing to fold, acknowledge or advise)
        return []
    from gputriage.engine import acks, causes

    folded = causes.fold(findings)
    acked = acks.apply(folded, facts.context.acks, facts.context.now)
    if not any(_needs_step(f) for f in acked):  # the next steps of every area stay unimported
        return acked
    from gputriage import next_steps

    return next_steps.fill(acked, facts)


def _needs_step(found: Finding) -> bool:
    """Whether a settled finding gets a next step (as :func:`next_steps.fill` decides): a
    current one that asks for an action."""
    return found.current and found.action is not Action.NONE


def _inputs(snapshot: Snapshot) -> list[dict]:
    by_origin: dict[str, list[str]] = {}
    for name, cap in sorted(snapshot.captures.items()):
        if cap.text is None:
            continue
        origin = (cap.origin.split(":sources/")[0] if snapshot.manifest
                  else cap.origin.split("#")[0])
        if cap.record.get("kind") == "sosreport":  # "ARCHIVE:sos_commands/...": the archive
            origin = cap.origin.removesuffix(f":{cap.record.get('origin')}")
        by_origin.setdefault(origin or snapshot.origin, []).append(name)
    return [{"origin": o, "sources": names} for o, names in by_origin.items()]


def _gpus(facts: Facts, findings: list[Finding]) -> list[GpuRow]:
    """One row per GPU the driver lists (in its order), then per GPU only on PCI."""
    visible = facts.maybe("visible_gpus")
    rows: dict[str, GpuRow] = {}
    order: list[str] = []
    for i, g in enumerate(visible[1] if visible else ()):
        key = g.bus_id or f"#{i}"
        order.append(key)
        rows[key] = GpuRow(g.index, g.bus_id, g.name, g.uuid,
                           persistence_mode=g.persistence_mode)
    lost = facts.maybe("lost_gpus", {})
    for f in facts.maybe("pci_gpus", []):
        if f.address not in rows:
            order.append(f.address)
            rows[f.address] = GpuRow(None, f.address, visible=False, listed=False)
        if f.address in lost:
            rows[f.address] = replace(rows[f.address], visible=False)
    if _driver_unasked(facts, visible):
        rows = {k: replace(r, state=UNKNOWN_STATE) if r.visible else r
                for k, r in rows.items()}
    boards = _board_facts(facts, visible)
    return [_finish(rows[k], boards.get(rows[k].pci_bus_id or "", {}), findings)
            for k in order]


# nvidia-smi errors that mean the driver could not be asked at all
_UNASKED = frozenset({"version-mismatch", "driver-communication", "nvml-init"})


def _driver_unasked(facts: Facts, visible: Any) -> bool:
    """Whether the GPUs' state is unknown: no driver query listed them (the rows
    come from /proc or the PCI bus) and NVML or nvidia-smi failed to initialise, or
    hung. A paste without either query says nothing of the driver: not unknown."""
    if visible and visible[0] != "proc_driver_nvidia_gpus":
        return False
    if facts.maybe("hung_driver_queries"):
        return True
    reading = facts.maybe("nvml")
    if reading is not None and not reading.available:
        return True
    return any(err.kind in _UNASKED for _, report in facts.maybe("smi", [])
               for err in report.errors)


def _finish(row: GpuRow, board: dict[str, str], findings: list[Finding]) -> GpuRow:
    """``row`` with its board facts and the worst severity of its findings."""
    return replace(row, serial=board.get("serial"), vbios=board.get("vbios"),
                   firmware=board.get("firmware"),
                   severity=_gpu_severity(row.pci_bus_id, findings))


def _gpu_severity(bus_id: str | None, findings: list[Finding]) -> Severity:
    """The worst severity of the current findings on the GPU at ``bus_id``: on any of
    their scopes (a per-GPU repeat covers several), or of their consequences'."""
    def on_it(f: Finding) -> bool:
        return any(s.kind == "gpu" and s.pci_bus_id and s.pci_bus_id == bus_id
                   for s in f.scopes)

    sev = [x.severity for f in findings if f.current
           for x in (f, *f.consequences) if x.current and on_it(x)]
    return max(sev, key=lambda s: s.rank, default=Severity.OK)


def _board_facts(facts: Facts, visible: Any) -> dict[str, dict[str, str]]:
    """Serial, VBIOS and GSP firmware by bus id, for diff, history and fleet: the
    driver's listing, then nvidia-smi, then /proc/driver/nvidia/gpus."""
    boards: dict[str, dict[str, str]] = {}
    for g in visible[1] if visible else ():
        if g.bus_id and g.serial:
            boards.setdefault(g.bus_id, {})["serial"] = g.serial
    for _, report in facts.maybe("smi", []):
        for g in report.gpus:
            firmware = g.raw.get("GSP Firmware Version") or g.raw.get("gsp_firmware_version")
            _add_board(boards, g.pci_bus_id, g.vbios,
                       firmware if firmware != "N/A" else None)
    for g in facts.maybe("proc_gpus", []):
        _add_board(boards, g.bus_id, g.vbios, g.firmware)
    return boards


def _add_board(boards: dict[str, dict[str, str]], bus_id: str | None, vbios: str | None,
               firmware: str | None) -> None:
    """Keep the first VBIOS and firmware versions seen for ``bus_id``."""
    if not bus_id:
        return
    board = boards.setdefault(bus_id, {})
    if vbios:
        board.setdefault("vbios", vbios)
    if firmware:
        board.setdefault("firmware", firmware)


def _verdict(result: Result, ran: int, window_unread: bool = False) -> str:
    """The engine's verdict; "unknown" when no rule could run and nothing was found, or
    when the check doubts itself (GPUs expected, none countable) and found nothing
    critical, or when it found nothing because the log window (``--since``) lies after
    the end of the log (``window_unread``: nothing in it was read)."""
    if not result.findings and ran == 0:
        return "unknown"  # nothing could be checked: say so, never "OK"
    from gputriage.rules.doubts import DIAG_NO_VERDICT, UNKNOWN_COUNT

    worst = result.worst_of("node")
    if worst is Severity.CRITICAL and not any(
            f.current and f.severity is Severity.CRITICAL and f.blame.side == "node"
            and f.blame is not Blame.UNKNOWN for f in result.findings):
        return "unknown"  # critical, but whose fault is not known: never a drain (exit 2)
    if worst is not Severity.CRITICAL and any(f.id == UNKNOWN_COUNT and f.current
                                              for f in result.findings):
        return "unknown"
    if worst.rank < Severity.WARNING.rank and any(f.id in DIAG_NO_VERDICT and f.current
                                                  for f in result.findings):
        return "unknown"  # DCGM's diagnostic skipped every test or did not run: nothing told
    if worst.rank < Severity.WARNING.rank and window_unread:
        return "unknown"  # "no finding" of a window the log does not reach is not "OK"
    return worst.value if worst.rank >= Severity.WARNING.rank else "ok"


def _host(facts: Facts, result: Result, ran: int) -> HostSummary:
    visible = facts.maybe("visible_gpus")
    pci_gpus = facts.maybe("pci_gpus")
    window = facts.maybe("log_window")
    return HostSummary.of(facts.get("host_identity"),
                          gpus_on_pci=len(pci_gpus) if pci_gpus is not None else None,
                          gpus_visible=len(visible[1]) if visible else None,
                          rules_run=ran,
                          verdict=_verdict(result, ran, window is not None and not window.read),
                          log_window=window.to_json() if window is not None else None)
