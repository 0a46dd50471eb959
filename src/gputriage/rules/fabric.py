"""Rules on the NVLink fabric: link state and errors, NVSwitches and the fabric manager.

Hardware-aware: link counts come from the GPU's profile, PCIe cards without an
NVLink bridge are left alone, and the fabric manager is demanded only where
NVSwitches are (or where GPUs wait for fabric registration).
"""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.facts.fabric import (
    FM_SOURCE,
    FabricNeed,
    FabricState,
    NvSwitchSighting,
    gpu_profile_of,
)
from gputriage.facts.stack import GpuSighting
from gputriage.knowledge import GpuProfile
from gputriage.knowledge import xid as catalog
from gputriage.model import Action, Blame, Evidence, Finding, Scope, Severity, evidence, gpu_scope
from gputriage.parsers.fabricmanager import FmEntry, FmLog
from gputriage.parsers.nvlink import (
    NvlinkErrorGpu,
    NvlinkErrors,
    NvlinkGpu,
    NvlinkStatus,
    counter_kind,
)
from gputriage.parsers.pci import PciFunction
from gputriage.parsers.systemd import UnitState
from gputriage.rules.base import SOFTWARE_DRAIN, finding, rule
from gputriage.text.fields import split_lines, strict_int

FM_UNIT = "nvidia-fabricmanager"
# a counter at or above this (per link, since the driver loaded) is a warning
ERROR_THRESHOLDS = {"crc": 100, "replay": 100, "recovery": 1, "ecc": 1, "error": 1}
SATURATED = 65535  # 16-bit counters of older GPUs stop here
_LIFECYCLE_DOWN = ("stopped", "stopping", "start-failed", "nothing-to-do")


Visible = tuple[str, list[GpuSighting]]  # the ``visible_gpus`` fact: (source, GPUs)
Units = dict[str, UnitState]


def _locate(visible: Visible | None, index: int | None, uuid: str | None) -> Scope:
    """A GPU scope with the bus id of the GPU of that UUID (or index) when known."""
    for g in (visible[1] if visible else []):
        if (uuid and g.uuid == uuid) or (not uuid and index is not None and g.index == index):
            return gpu_scope(g.bus_id, index if index is not None else g.index, uuid or g.uuid)
    return gpu_scope(None, index, uuid)


locate = _locate  # public: the DCGM rules place their GPUs the same way


def counter_severe(name: str, value: int | float) -> bool:
    """Whether an NVLink error counter (by its name: CRC, replay, recovery...) is at or
    above the count that makes it a warning (``ERROR_THRESHOLDS``)."""
    return value >= ERROR_THRESHOLDS.get(counter_kind(name) or "error", 1)


def _label(index: int | None, name: str | None) -> str:
    where = f"GPU {index}" if index is not None else "GPU"
    return f"{where} ({name})" if name else where


def _fm_lines(entries: list[FmEntry], limit: int = 12) -> list[str]:
    """The printed lines of some records, each record once, in log order."""
    unique = list({id(e): e for e in entries}.values())
    return [ln for e in unique for ln in split_lines(e.line)][:limit]


# --- NVLink state ------------------------------------------------------------------------

def _single_gpu(switches: list[NvSwitchSighting] | None, visible: Visible | None,
                status: NvlinkStatus) -> bool:
    """Only one GPU on the host and no NVSwitch: its links have no peer to train with."""
    if switches:
        return False
    count = len(visible[1]) if visible else len(status.gpus)
    return count <= 1 and len(status.gpus) <= 1 and all(g.index in (0, None)
                                                        for g in status.gpus)


@rule("nvlink.links", produces=("nvlink.links-down",))
def nvlink_links(nvlink: NvlinkStatus, nvswitches: list[NvSwitchSighting] | None = None,
                 visible_gpus: Visible | None = None,
                 pci_gpus: list[PciFunction] | None = None) -> Iterator[Finding]:
    """NVLinks that did not train: fewer active links than the GPU model has
    (SXM and superchip parts), or a partly trained bridge on PCIe cards. PCIe
    cards without links are left alone; unknown models get a generic check."""
    for gpu in nvlink.gpus:
        profile = gpu_profile_of(gpu.name, None, pci_gpus, visible_gpus)
        scope = _locate(visible_gpus, gpu.index, gpu.uuid)
        if profile is None or profile.form == "pcie":
            found = _unprofiled_or_pcie(gpu, profile, scope)
        else:
            found = _links_finding(gpu, profile, scope,
                                   _single_gpu(nvswitches, visible_gpus, nvlink),
                                   bool(nvswitches))
        if found is not None:
            yield found


def _unprofiled_or_pcie(gpu: NvlinkGpu, profile: GpuProfile | None,
                        scope: Scope) -> Finding | None:
    """Links of a GPU without a profile (generic check) or of a PCIe card (bridge)."""
    active, inactive = gpu.active_links, gpu.inactive_links
    ev = [evidence("nvidia_smi_nvlink_status", gpu.evidence_lines())]
    label = _label(gpu.index, gpu.name)
    if not (inactive and active):
        return None  # all up, or (on a PCIe card) no bridge fitted: nothing to say
    if profile is None:
        return finding(
            "nvlink.links-down", Severity.WARNING,
            f"{label}: {len(inactive)} of {len(gpu.links)} NVLinks inactive "
            f"(links {_numbers(inactive)})",
            "gputriage has no profile for this GPU model, so it cannot tell how many "
            "links it should have; but some links are up and others are not, which "
            "usually means a link that failed to train. Compare with identical nodes; at "
            "the next maintenance window reset the GPU, and repair it if the same links "
            "stay down.",
            Action.PLAN_REPAIR, Blame.NODE, scope, ev)
    return finding(
        "nvlink.links-down", Severity.WARNING,
        f"{label}: NVLink bridge partly trained, {active} of {len(gpu.links)} links up",
        f"This {profile.model} card has an NVLink bridge but only some of its links "
        "are active: a bridge not fully seated or a failing link. Peer traffic falls "
        "back to PCIe on the missing links: slower, still correct. Reseat the bridge at "
        "the next maintenance window (drain the node then).",
        Action.PLAN_REPAIR, Blame.NODE, scope, ev)


def _links_finding(gpu: NvlinkGpu, profile: GpuProfile, scope: Scope, single: bool,
                   switches: bool) -> Finding | None:
    """Links of an SXM or superchip GPU against the count its model has."""
    active, inactive = gpu.active_links, gpu.inactive_links
    all_down = gpu.all_inactive or (bool(gpu.links) and active == 0)
    ev = [evidence("nvidia_smi_nvlink_status", gpu.evidence_lines())]
    label = _label(gpu.index, gpu.name)
    expected = profile.nvlink_links
    if all_down:
        if single:
            if profile.form != "sxm":
                return None  # a standalone superchip has no GPU peer to link to
            return finding(
                "nvlink.links-down", Severity.WARNING,
                f"{label}: all NVLinks inactive on a lone {profile.model} GPU",
                "This SXM GPU is the only one here and no NVSwitch is visible (typically "
                "a VM given one GPU of a baseboard): its NVLinks have no peer to train "
                "with. Multi-GPU jobs need the whole baseboard; see the fabric state "
                "findings for whether CUDA can start at all.",
                Action.FIX_CONFIG, Blame.CONFIG, scope, ev)
        first = "; check nvidia-fabricmanager first on an NVSwitch system" \
            if switches or profile.form == "sxm" else ""
        return finding(
            "nvlink.links-down", Severity.CRITICAL,
            f"{label}: all NVLinks inactive (0 of {expected} up)",
            f"A {profile.model} GPU should have {expected} active NVLinks; with none, "
            "NVLink peer-to-peer and NCCL over NVLink fail or fall back to slow paths, so "
            f"the node is unfit for multi-GPU jobs{first}. Then reset the GPU; if the "
            "links stay down, drain the node and repair (RMA) the GPU or baseboard.",
            Action.RESET_GPU, Blame.NODE, scope, ev)
    if inactive:
        return finding(
            "nvlink.links-down", Severity.CRITICAL,
            f"{label}: {len(inactive)} NVLink(s) inactive, {active} of {expected} up "
            f"(links {_numbers(inactive)})",
            f"A {profile.model} GPU should have {expected} active NVLinks. Missing links cut "
            "NVLink bandwidth and can make NCCL hang or slow every collective on the node. "
            "Drain the node; reset the GPU, and repair the GPU or baseboard if the same "
            "links stay down.", Action.DRAIN_AND_REPAIR, Blame.NODE, scope, ev)
    if gpu.links and active < expected and not gpu.truncated:
        return finding(
            "nvlink.links-down", Severity.WARNING,
            f"{label}: nvidia-smi lists {active} NVLinks, a {profile.model} has {expected}",
            "Fewer links than the model has are listed and none as inactive: a partly "
            "disabled fabric or a virtualised GPU. Compare with identical nodes and check "
            "the NVLink bandwidth before scheduling multi-GPU jobs here; repair at the "
            "next maintenance window if identical nodes list more.",
            Action.PLAN_REPAIR, Blame.NODE, scope, ev)
    return None


def _numbers(links: list[int], limit: int = 12) -> str:
    text = ", ".join(str(n) for n in links[:limit])
    return text + (", ..." if len(links) > limit else "")


# --- NVLink error counters ---------------------------------------------------------------

@rule("nvlink.errors", produces=("nvlink.errors",))
def nvlink_errors(nvlink_errors: NvlinkErrors,
                  visible_gpus: Visible | None = None) -> Iterator[Finding]:
    """NVLink CRC, replay and recovery counters above zero: signal-integrity trouble
    on a link; warning from a per-counter threshold, information below it."""
    for gpu in nvlink_errors.gpus:
        found = _errors_finding(visible_gpus, gpu)
        if found is not None:
            yield found


def _errors_finding(visible: Visible | None, gpu: NvlinkErrorGpu) -> Finding | None:
    errors = gpu.errors()
    if not errors:
        return None
    parts: list[str] = []
    severe = saturated = False
    for link, counters in sorted(errors.items()):
        for name, value in counters.items():
            severe |= counter_severe(name, value)
            saturated |= value >= SATURATED
            parts.append(f"link {link} {name} {value}")
    lines = [gpu.header] if gpu.header else []
    for link in sorted(errors):
        lines += [ln for ln in gpu.lines.get(link, []) if not ln.rstrip().endswith(": 0")]
    label = _label(gpu.index, gpu.name)
    more = f" and {len(parts) - 4} more" if len(parts) > 4 else ""
    title = f"{label}: NVLink errors on {len(errors)} link(s): {'; '.join(parts[:4])}{more}"
    scope = _locate(visible, gpu.index, gpu.uuid)
    ev = [evidence("nvidia_smi_nvlink_errors", lines)]
    if not severe:
        return finding(
            "nvlink.errors", Severity.INFO, title,
            "A few NVLink errors since the driver loaded; links retry them transparently. "
            "Compare with a later reading: only counters that keep climbing matter.",
            Action.NONE, Blame.NODE, scope, ev)
    sat = (" A counter at 65535 is saturated: the real count is higher."
           if saturated else "")
    return finding(
        "nvlink.errors", Severity.WARNING, title,
        "CRC and replay errors mean a link is corrupting data that has to be resent, and "
        "recovery errors mean it had to retrain: bandwidth drops and collectives slow "
        "down or hang. If the counters keep rising, plan a repair: at the next window "
        f"drain the node and reseat or repair the GPU or baseboard.{sat}",
        Action.PLAN_REPAIR, Blame.NODE, scope, ev)


# --- the fabric manager service ----------------------------------------------------------

_SHOW_KEYS = ("LoadState", "ActiveState", "SubState", "Result", "ExecMainStatus",
              "UnitFileState")
_STATUS_KEYS = ("Loaded", "Active", "Main PID")


def _unit_lines(unit: UnitState) -> list[str]:
    """The unit's state lines as printed (show: Key=Value; status: Key: value)."""
    lines = [f"{k}={unit.raw[k]}" for k in _SHOW_KEYS if k in unit.raw]
    lines += [f"{k}: {unit.raw[k]}" for k in _STATUS_KEYS if k in unit.raw]
    return lines or [f"ActiveState={unit.active_state}"]


def _fm_down(unit: UnitState | None,
             log: FmLog | None) -> tuple[str, Action, list[Evidence]] | None:
    """Why the fabric manager is not running now, if it is not."""
    if unit is not None:
        ev = [evidence("systemctl_fabricmanager", _unit_lines(unit))]
        if log is not None:
            ev.append(evidence(FM_SOURCE, _fm_lines(log.errors + log.having("nothing-to-do"))))
        if not unit.installed:
            return "nvidia-fabricmanager is not installed", Action.FIX_SOFTWARE, ev
        if unit.active:
            return None
        state = unit.active_state or "not active"
        result = f" ({unit.result})" if unit.result and unit.result != "success" else ""
        action = Action.FIX_SOFTWARE if state == "failed" else Action.FIX_CONFIG
        return f"nvidia-fabricmanager is {state}{result}", action, ev
    if log is None:
        return None
    job = [e for e in log.entries if e.program == "systemctl" and e.event == "start-failed"]
    last = log.last_lifecycle
    if job:
        shown = job + log.errors + log.having("nothing-to-do")
        return ("nvidia-fabricmanager failed to (re)start", Action.FIX_SOFTWARE,
                [evidence(FM_SOURCE, _fm_lines(shown))])
    if last is not None and last.event in _LIFECYCLE_DOWN:
        failed = last.event in ("start-failed", "nothing-to-do")
        what = "failed to start" if failed else "was stopped"
        shown = log.errors + log.having("nothing-to-do") + [last]
        return (f"nvidia-fabricmanager {what} (last journal record)",
                Action.FIX_SOFTWARE if failed else Action.FIX_CONFIG,
                [evidence(FM_SOURCE, _fm_lines(shown))])
    return None


def _needed_and_down(need: FabricNeed | None, units: Units | None,
                     log: FmLog | None) -> tuple[str, Action, list[Evidence]] | None:
    """Why the fabric manager is not running on a host whose NVSwitches need it here."""
    if need is None or not need.needed or need.where != "here":
        return None
    return _fm_down((units or {}).get(FM_UNIT), log)


@rule("fabric.manager", any_of=("units", "fm_log"),
      produces=("fabric.manager-inactive", "fabric.manager-not-needed"))
def fabric_manager(units: Units | None = None, fm_log: FmLog | None = None,
                   needs_fabric_manager: FabricNeed | None = None) -> Iterator[Finding]:
    """nvidia-fabricmanager must run where NVSwitches are (CUDA fails with 802
    until it has configured them) and is pointless where there are none."""
    need, log = needs_fabric_manager, fm_log
    unit = (units or {}).get(FM_UNIT)
    nothing = log.having("nothing-to-do") if log is not None else []
    if need is not None and need.needed:
        down = _needed_and_down(need, units, log)
        if down is None:
            return  # running, or the fabric is managed outside (fabric.state says so)
        why, action, ev = down
        mismatch = log.having("version-mismatch") if log is not None else []
        if mismatch:
            why += ": its version does not match the driver"
            action = Action.FIX_SOFTWARE
        blind = (" It also reported NV_WARN_NOTHING_TO_DO: it cannot see the NVSwitches "
                 "(nvidia-nvswitch driver not bound, or switches not passed to this VM)."
                 if nothing else "")
        todo = ("Install the fabric manager package of exactly the driver's version, then "
                "start and enable it." if mismatch else
                "Start and enable nvidia-fabricmanager (its version must match the "
                "driver's) and read its journal if it fails.")
        yield finding(
            "fabric.manager-inactive", Severity.CRITICAL,
            f"{why} on an NVSwitch system ({need.reason})",
            "Until the fabric manager has configured the NVSwitches, CUDA cannot start on "
            "these GPUs (error 802, 'system not yet initialized') and NVLink peer traffic "
            f"stays off. {todo}{blind} {SOFTWARE_DRAIN}",
            action, Blame.CONFIG, Scope("unit", name=FM_UNIT),
            [*ev, evidence(FM_SOURCE, _fm_lines(mismatch)), *need.evidence])
        return
    failed_unit = unit is not None and unit.active_state == "failed"
    if nothing or (failed_unit and need is not None):
        ev = [evidence(FM_SOURCE, _fm_lines(log.having("pre-nvl5", "nothing-to-do")
                                            + log.having("start-failed")))] if log else []
        if unit is not None:
            ev.append(evidence("systemctl_fabricmanager", _unit_lines(unit)))
        reason = need.reason if need is not None else "the fabric manager found no NVSwitch"
        rack = (" On a compute tray of a rack-scale system (NVL72) the NVSwitches sit in "
                "switch trays managed from there; the GPUs' fabric state comes from that, "
                "not from this service." if log is not None
                and log.having("pre-nvl5", "nvl5") else "")
        yield finding(
            "fabric.manager-not-needed", Severity.INFO,
            "nvidia-fabricmanager fails"
            + (" with NV_WARN_NOTHING_TO_DO" if nothing else "")
            + f": not needed here ({reason})",
            "The fabric manager only manages NVSwitches; on a host without them (PCIe "
            "cards, NVLink bridges, 4-GPU boards with direct links) it exits with "
            "'Nothing to do' and systemd marks it failed. Harmless for CUDA: disable or mask "
            "the unit (systemctl disable --now nvidia-fabricmanager) so it stops alarming."
            + rack,
            Action.FIX_CONFIG, Blame.CONFIG, Scope("unit", name=FM_UNIT), ev)


# --- per-GPU fabric registration ---------------------------------------------------------

@rule("fabric.state", produces=("fabric.state-not-completed",))
def fabric_state(fabric_states: list[FabricState],
                 needs_fabric_manager: FabricNeed | None = None, units: Units | None = None,
                 fm_log: FmLog | None = None, pci_gpus: list[PciFunction] | None = None,
                 pci_source: str = "pci_devices",
                 visible_gpus: Visible | None = None) -> Iterator[Finding]:
    """Hopper and later GPUs on an NVSwitch fabric must finish fabric registration
    (State Completed, Status Success) before CUDA can use them (error 802 until then)."""
    unit = (units or {}).get(FM_UNIT)
    for state in fabric_states:
        if not state.completed:
            profile = gpu_profile_of(state.name, state.bus_id, pci_gpus, visible_gpus)
            pci = [f.raw.get("header", f.address) for f in pci_gpus or []]
            yield _state_finding(state, profile, needs_fabric_manager, unit, fm_log,
                                 evidence(pci_source, pci[:4],
                                          "no NVSwitch among the PCI functions"))


def _state_finding(state: FabricState, profile: GpuProfile | None, need: FabricNeed | None,
                   unit: UnitState | None, log: FmLog | None, pci: Evidence) -> Finding:
    model = profile.model if profile is not None else (state.name or "GPU")
    label = _label(state.index, state.name or (profile.model if profile else None))
    scope = gpu_scope(state.bus_id, state.index, state.uuid)
    status = state.status or "N/A"
    title = f"{label}: NVLink fabric state {state.state} (status {status})"
    ev: list[Evidence] = [evidence(state.source, state.lines)]
    if log is not None:
        ev.append(evidence(FM_SOURCE, _fm_lines(log.having("nothing-to-do", "start-failed"))))
    if need is not None and need.where == "host":
        if pci.lines:
            ev.append(pci)
        return finding(
            "fabric.state-not-completed", Severity.CRITICAL,
            title + ": no NVSwitch visible, the fabric cannot complete here",
            f"This {model} waits for NVLink fabric registration, but no NVSwitch is "
            "visible on this machine (typically a VM given an SXM GPU without its "
            "switches), so a fabric manager here has nothing to manage "
            "(NV_WARN_NOTHING_TO_DO) and CUDA fails with error 802. The fabric must be "
            "managed where the switches are (the host or service VM, shared NVSwitch "
            "virtualization); otherwise use a PCIe SKU.",
            Action.FIX_CONFIG, Blame.CONFIG, scope, ev)
    if state.pending:
        running = unit is not None and unit.active
        if running:
            why = ("nvidia-fabricmanager is running but this GPU has not registered: wait a "
                   "minute after the service starts; if it stays, restart the service and "
                   "reset the GPU, and look for NVLink / SXid errors.")
            action = Action.RESET_GPU
        else:
            why = ("Start and enable nvidia-fabricmanager (the NVSwitch fabric must be "
                   "configured first; its version must be the driver's, and its journal "
                   "says why it does not start); registration completes about a minute "
                   f"later. {SOFTWARE_DRAIN}")
            action = Action.FIX_CONFIG
        return finding(
            "fabric.state-not-completed", Severity.CRITICAL, title,
            "CUDA cannot initialise on a GPU whose NVLink fabric registration has not "
            f"completed (error 802, 'system not yet initialized'). {why}",
            action, Blame.NODE if running else Blame.CONFIG, scope, ev)
    return _registration_failed(state, title, scope, ev)


def _unplaced(state: FabricState) -> bool:
    """CliqueId 0 with an all-zero (or no) ClusterUUID: in no NVLink partition."""
    uuid = (state.cluster_uuid or "").replace("-", "").replace("0", "")
    return (state.clique_id or "").strip() == "0" and not uuid


def _registration_failed(state: FabricState, title: str, scope: Scope,
                         ev: list[Evidence]) -> Finding:
    """State Completed with a status other than Success: registration ended in error.
    The fault is the fabric's, not the GPU's: a reset alone does not put it back."""
    unplaced = _unplaced(state)
    if unplaced:
        title += ", in no NVLink partition (CliqueId 0)"
    ev[0] = evidence(state.source, [*state.lines, *state.partition_lines])
    where = (" CliqueId 0 with an all-zero ClusterUUID says the fabric placed it in no "
             "partition." if unplaced else "")
    return finding(
        "fabric.state-not-completed", Severity.CRITICAL,
        title.replace("NVLink fabric state", "NVLink fabric registration failed: state"),
        f"The GPU finished NVLink fabric registration with an error ({state.status}), so it "
        "is not part of a working NVLink fabric: peer traffic over NVLink, and on a "
        "multi-node NVLink system every job that spans the rack, fails on it, although "
        f"a check of State alone passes it.{where} Keep the node out of production until "
        "the fabric is repaired: on an NVSwitch baseboard the fabric manager's journal "
        "says why (restart it, then reset the GPUs); on a rack-scale NVLink system the "
        "switch trays' fabric manager must give this tray a partition. A GPU reset alone "
        "does not.", Action.DRAIN_AND_REPAIR, Blame.NODE, scope, ev)


# --- errors in the fabric manager's log --------------------------------------------------

_CRITICAL_EVENTS = ("nvswitch-fatal", "uncorrectable", "version-mismatch",
                    "link-training-failed")
_EVENT_TEXT = {
    "nvswitch-fatal": "NVSwitch fatal error", "uncorrectable": "uncorrectable error",
    "version-mismatch": "version mismatch", "link-training-failed": "NVLink training failure",
    "nvswitch-nonfatal": "NVSwitch non-fatal error", "multicast-error": "multicast error",
    "error": "error",
}


@rule("fabric.manager-log", produces=("fabric.manager-errors",))
def fabric_manager_log(fm_log: FmLog, needs_fabric_manager: FabricNeed | None = None,
                       units: Units | None = None) -> Iterator[Finding]:
    """Errors the fabric manager logged: NVSwitch fatal / non-fatal errors,
    uncorrectable errors, multicast (NVLS) failures, version mismatches. A
    failed start (and a version mismatch that stopped it) is the fabric.manager
    rule's."""
    errors = _logged_errors(fm_log, needs_fabric_manager, units)
    if not errors:
        return
    counts: dict[str, int] = {}
    for e in errors:
        counts[_event_of(e)] = counts.get(_event_of(e), 0) + 1
    worst = next((ev for ev in _CRITICAL_EVENTS if ev in counts), None)
    critical = worst is not None or any(e.level == "fatal" and not _never_fatal(e)
                                        for e in errors)
    why, action = _log_advice(worst, critical)
    software = action is Action.FIX_SOFTWARE  # a version mismatch: the packages, not the switches
    yield finding("fabric.manager-errors",
                  Severity.CRITICAL if critical else Severity.WARNING,
                  _log_title(errors, counts), why, action,
                  Blame.CONFIG if software else Blame.NODE, Scope("unit", name=FM_UNIT),
                  [evidence(FM_SOURCE, _fm_lines(errors, 20),
                            f"{len(errors)} error record(s)" if len(errors) > 1 else None)])


def _never_fatal(entry: FmEntry) -> bool:
    """An NVSwitch error whose code the SXid catalog calls non-fatal, however logged."""
    code = strict_int(entry.code, signed=False)
    info = catalog.sxid_info(code) if code is not None else None
    return info is not None and not info.fatal


def _event_of(entry: FmEntry) -> str:
    """The entry's event, a "fatal" NVSwitch error the catalog calls non-fatal as one."""
    if entry.event == "nvswitch-fatal" and _never_fatal(entry):
        return "nvswitch-nonfatal"
    return entry.event or "error"


# records other rules report: a failed start and NV_WARN_NOTHING_TO_DO (fabric.manager:
# no NVSwitch to manage), a lost NVLS multicast team and a missing ib_umad
# (fabric_services)
_OWN_RULES = frozenset({"start-failed", "nothing-to-do", "multicast-team", "umad-missing"})


def _logged_errors(log: FmLog, need: FabricNeed | None, units: Units | None) -> list[FmEntry]:
    """The error records this rule reports: not failed starts (fabric.manager's), not a
    version mismatch while the service is down (ditto), and no generic errors where
    no fabric manager is needed."""
    errors = [e for e in log.errors if e.event not in _OWN_RULES]
    if _needed_and_down(need, units, log) is not None:
        errors = [e for e in errors if e.event != "version-mismatch"]
    if need is not None and not need.needed:
        errors = [e for e in errors if e.event != "error"]
    return errors


def _log_title(errors: list[FmEntry], counts: dict[str, int]) -> str:
    summary = ", ".join(f"{n} {_EVENT_TEXT.get(ev, ev)}{'s' if n > 1 else ''}"
                        for ev, n in counts.items())
    details = sorted({f"{e.code or ''} on NVSwitch {e.nvswitch}"
                      + (f" port {e.port}" if e.port is not None else "")
                      for e in errors if e.nvswitch})
    return f"fabric manager log: {summary}" + (f" ({'; '.join(details[:3]).strip()})"
                                               if details else "")


def _log_advice(worst: str | None, critical: bool) -> tuple[str, Action]:
    """What the worst logged event means, and what to do."""
    if worst == "version-mismatch":
        return ("The fabric manager and the driver are different releases: it refuses "
                "to configure the fabric, and CUDA fails with error 802 until it does. "
                "Install the fabric manager package of exactly the driver's version (or "
                f"the driver of the fabric manager's). {SOFTWARE_DRAIN}"), Action.FIX_SOFTWARE
    if critical:
        return ("A fatal or uncorrectable fabric error stops NVLink traffic through "
                "the switch or GPU involved: jobs using it fail or hang. Drain the "
                "node, reboot it, and repair the baseboard if it comes back; match "
                "the time with SXid / Xid lines in the kernel log."), Action.DRAIN_AND_REPAIR
    return ("The fabric manager logged errors the fabric survived (NVSwitch "
            "non-fatal errors, failed multicast setups). Watch for them: if "
            "they recur on the same switch or port, match them with SXid lines "
            "and NVLink error counters and plan a repair."), Action.NONE
