"""Analyse a snapshot: facts -> rules -> one Result for the views."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta

from gputriage.facts import Facts, Missing
from gputriage.logwindow import LogWindow
from gputriage.model import Result, Severity, Skipped
from gputriage.rules import all_rules
from gputriage.rules.base import Rule
from gputriage.snapshot import Snapshot


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


def analyze(snapshot: Snapshot, window: LogWindow | None = None) -> Result:
    """Run every rule whose inputs are present over one host's snapshot; kernel-log
    events are judged inside ``window`` (default: all boots, only the last current)."""
    return analyze_facts(Facts(snapshot, window=window or LogWindow()))


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
            found = rule.func(facts) if rule.legacy else rule.func(**_inputs_of(facts, rule))
            result.findings.extend(found)
        except Missing as exc:
            result.skipped.append(Skipped(rule.id, f"needs {exc}"))
            continue
        if rule.requires or rule.any_of:  # a rule that needs no input tells nothing
            ran += 1
    result.unreadable = list(snapshot.problems) + facts.problems
    result.inputs = _inputs(snapshot)
    result.gpus = _gpus(facts, result)
    result.host = _host(facts, result, ran)
    return result


def _inputs(snapshot: Snapshot) -> list[dict]:
    by_origin: dict[str, list[str]] = {}
    for name, cap in sorted(snapshot.captures.items()):
        if cap.text is None:
            continue
        origin = (cap.origin.split(":sources/")[0] if snapshot.manifest
                  else cap.origin.split("#")[0])
        by_origin.setdefault(origin or snapshot.origin, []).append(name)
    return [{"origin": o, "sources": names} for o, names in by_origin.items()]


def _gpus(facts: Facts, result: Result) -> list[dict]:
    visible = facts.maybe("visible_gpus")
    rows: dict[str, dict] = {}
    order: list[str] = []
    if visible:
        for i, g in enumerate(visible[1]):
            key = g.bus_id or f"#{i}"
            order.append(key)
            rows[key] = {"index": g.index, "pci_bus_id": g.bus_id, "name": g.name,
                         "uuid": g.uuid, "persistence_mode": g.persistence_mode,
                         "visible": True}
    lost = facts.maybe("lost_gpus", {})
    for f in facts.maybe("pci_gpus", []):
        if f.address not in rows:
            order.append(f.address)
            rows[f.address] = {"index": None, "pci_bus_id": f.address, "name": None,
                               "uuid": None, "visible": False}
        if f.address in lost:
            rows[f.address]["visible"] = False
    _add_board_facts(facts, rows, visible)
    for key in order:
        row = rows[key]
        sev = [x.severity for x in result.findings if x.scope.kind == "gpu"
               and x.scope.pci_bus_id and x.scope.pci_bus_id == row["pci_bus_id"]]
        row["severity"] = max(sev, key=lambda s: s.rank, default=Severity.OK).value
    return [rows[k] for k in order]


def _add_board_facts(facts: Facts, rows: dict[str, dict], visible) -> None:
    """Serial, VBIOS and GSP firmware per GPU, for diff, history and fleet."""
    if visible:
        for g in visible[1]:
            if g.bus_id in rows and g.serial:
                rows[g.bus_id]["serial"] = g.serial
    for _, report in facts.maybe("smi", []):
        for g in report.gpus:
            row = rows.get(g.pci_bus_id or "")
            if row is None:
                continue
            if g.vbios and "vbios" not in row:
                row["vbios"] = g.vbios
            firmware = g.raw.get("GSP Firmware Version") or g.raw.get("gsp_firmware_version")
            if firmware and firmware != "N/A" and "firmware" not in row:
                row["firmware"] = firmware
    for g in facts.maybe("proc_gpus", []):
        row = rows.get(g.bus_id or "")
        if row is not None:
            if g.vbios and "vbios" not in row:
                row["vbios"] = g.vbios
            if g.firmware and "firmware" not in row:
                row["firmware"] = g.firmware


_TOOLKIT_VERSION = re.compile(r"version\s+v?(\d[\w.+~-]*)", re.IGNORECASE)


def _boot_time(facts: Facts) -> str | None:
    """When the host booted: the snapshot's time less its uptime."""
    created = (facts.snapshot.manifest or {}).get("created")
    uptime = (facts.snapshot.text("uptime") or "").split()
    try:
        when = datetime.fromisoformat(str(created))
        seconds = float(uptime[0]) if uptime else None
    except ValueError:
        return None
    if seconds is None or not 0 <= seconds < 1e9:
        return None
    return (when - timedelta(seconds=seconds)).isoformat(timespec="seconds")


def _first_line(facts: Facts, source: str) -> str | None:
    text = facts.snapshot.text(source)
    return text.strip().splitlines()[0] if text and text.strip() else None


def _toolkit(facts: Facts) -> str | None:
    m = _TOOLKIT_VERSION.search(facts.snapshot.text("nvidia_ctk_version") or "")
    return m.group(1) if m else None


def _os_name(facts: Facts) -> str | None:
    for line in facts.lines("os_release"):
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return None


def _host(facts: Facts, result: Result, ran: int) -> dict:
    manifest = facts.snapshot.manifest or {}
    uname = (_first_line(facts, "uname") or "").split()
    km = facts.maybe("kernel_module")
    cuda = None
    userspace = None
    for _, report in facts.maybe("smi", []):
        cuda = cuda or report.cuda_version
        userspace = userspace or report.driver_version
    reading = facts.maybe("nvml")
    if reading is not None and reading.available:
        userspace = reading.library_driver_version or userspace
        if reading.cuda_driver_version and not cuda:
            major, minor = divmod(reading.cuda_driver_version, 1000)
            cuda = f"{major}.{minor // 10}"
    libs = sorted({lib.version for lib in facts.maybe("libs", [])
                   if lib.library == "libnvidia-ml" and lib.version})
    if libs and (userspace is None or len(libs) == 1):
        userspace = libs[-1]
    visible = facts.maybe("visible_gpus")
    pci_gpus = facts.maybe("pci_gpus")
    worst = result.worst
    verdict = worst.value if worst.rank >= Severity.WARNING.rank else "ok"
    if not result.findings and ran == 0:
        verdict = "unknown"  # nothing could be checked: say so, never "OK"
    return {
        "hostname": manifest.get("host") or _first_line(facts, "hostname"),
        "kernel": uname[2] if len(uname) > 2 else None,
        "os": _os_name(facts),
        "boot_id": manifest.get("boot_id") or _first_line(facts, "boot_id"),
        "driver": {"kernel_module": km.version if km else None, "userspace": userspace,
                   "cuda": cuda},
        "gpus_on_pci": len(pci_gpus) if pci_gpus is not None else None,
        "gpus_visible": len(visible[1]) if visible else None,
        "rules_run": ran,
        "boot_time": _boot_time(facts),
        "container_toolkit": _toolkit(facts),
        "verdict": verdict,
    }
