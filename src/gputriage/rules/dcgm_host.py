"""DCGM on the host: what ``dcgmi discovery``, ``health -c`` and ``nvlink`` say, whether
the DCGM release knows the GPUs, and whether nv-hostengine answers at all.

DCGM is a monitoring tool: when it cannot see or reach the GPUs, that is said as a
monitoring problem (blame config, never a drain); what it reports about a GPU is
judged like the same fact from nvidia-smi, and folds under nvidia-smi's finding when
both are there (causes.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gputriage import knowledge
from gputriage.facts.dcgm import DcgmVersion, dcgm_support
from gputriage.facts.fabric import FabricNeed
from gputriage.knowledge.cuda_compat import version_key
from gputriage.model import (
    NODE,
    Action,
    Blame,
    Evidence,
    Finding,
    Scope,
    Severity,
    evidence,
    gpu_scope,
)
from gputriage.parsers.dcgm_exporter import ExporterLog
from gputriage.parsers.dcgmi import Discovery, HealthIncident, HealthReport, NvlinkReport
from gputriage.parsers.nv_hostengine import HostengineLog
from gputriage.rules.base import action_for, finding, rule
from gputriage.rules.dcgm_marks import judge_mark
from gputriage.rules.fabric import Visible, counter_severe, locate

__all__ = ["NOT_THE_GPU", "Visible", "dcgm_gpu"]

NOT_THE_GPU = "The GPUs are not implicated by this alone."


def dcgm_gpu(gpu_id: int | None, discovery: Discovery | None = None,
             visible: Visible | None = None) -> Scope:
    """The scope of DCGM's GPU ``gpu_id``: its bus id and UUID from dcgmi discovery, else
    from the driver's GPU of that index (DCGM numbers GPUs in NVML's order)."""
    for g in discovery.gpus if discovery is not None else ():
        if g.gpu_id == gpu_id and g.bus_id:
            return gpu_scope(g.bus_id, gpu_id, g.uuid)
    return locate(visible, gpu_id, None)


@rule("dcgm.discovery", produces=("dcgm.gpus-seen", "dcgm.gpus-unseen",
                                  "dcgm.gpu-count-unexpected"))
def discovery(dcgmi_discovery: Discovery, visible_gpus: Visible | None = None
              ) -> Iterator[Finding]:
    """The GPUs DCGM sees against those the driver uses (a GPU DCGM misses is a
    monitoring gap), or, alone, against the sizes its model's baseboards come in."""
    d = dcgmi_discovery
    if d.gpu_count is None:
        return  # dcgmi could not reach nv-hostengine: dcgm.hostengine says so
    ev = [evidence("dcgmi_discovery", d.count_lines[:1] + [ln for g in d.gpus
                                                            for ln in g.lines[:2]])]
    if visible_gpus is not None:
        source, visible = visible_gpus
        seen = set(d.bus_ids)
        unseen = [g for g in visible if g.bus_id and seen and g.bus_id not in seen]
        short = len(visible) - d.gpu_count
        if unseen or short > 0:
            names = ", ".join(g.bus_id or "?" for g in unseen) or f"{short} GPU(s)"
            yield finding(
                "dcgm.gpus-unseen", Severity.WARNING,
                f"DCGM sees {d.gpu_count} of the {len(visible)} GPUs the driver uses "
                f"(missing: {names})",
                "nv-hostengine does not list GPUs that the driver and nvidia-smi use: its "
                "health watches, diagnostics and exporter say nothing about them. A DCGM "
                "release older than the GPUs, or a host engine started before the GPUs came "
                "up, does this: restart nvidia-dcgm (nv-hostengine) and upgrade DCGM if they "
                f"stay missing. {NOT_THE_GPU}", Action.FIX_SOFTWARE, Blame.CONFIG,
                evidence=ev + [evidence(source, [g.line for g in unseen][:4])])
            return
    profile = _baseboard_short(d)
    if profile is not None and visible_gpus is None:
        sizes = " or ".join(str(n) for n in profile.baseboard_gpus)
        yield finding(
            "dcgm.gpu-count-unexpected", Severity.WARNING,
            f"DCGM sees {d.gpu_count} {profile.model} GPUs; its baseboards carry {sizes}",
            "A GPU of the board is probably missing altogether (not even on the PCI bus, so "
            "neither the driver nor DCGM lists it). Check nvidia-smi, lspci and the kernel "
            "log; if the node should have a full board, drain it, power-cycle, then reseat "
            "or RMA (state the GPU count in expect.toml to make a short node critical).",
            Action.PLAN_REPAIR, Blame.NODE, evidence=ev)
        return
    yield finding("dcgm.gpus-seen", Severity.OK,
                  f"DCGM sees {d.gpu_count} GPU(s)"
                  + (f" and {d.switch_count} NVSwitch(es)" if d.switch_count else ""),
                  "nv-hostengine lists the GPUs. '0 NvSwitches found' is normal where the "
                  "switches are not exposed to this host.", Action.NONE, Blame.UNKNOWN,
                  evidence=ev)


def _baseboard_short(d: Discovery) -> knowledge.GpuProfile | None:
    """The model profile when DCGM lists one GPU short of a baseboard size."""
    profiles = {knowledge.gpu_profile(g.name) for g in d.gpus}
    if len(profiles) != 1 or not d.gpu_count:
        return None
    profile = profiles.pop()
    if profile is None or not profile.baseboard_gpus or d.gpu_count in profile.baseboard_gpus:
        return None
    return profile if d.gpu_count * 2 > max(profile.baseboard_gpus) else None


@rule("dcgm.version", produces=("dcgm.too-old",))
def version(dcgm_version: DcgmVersion, dcgmi_discovery: Discovery | None = None,
            visible_gpus: Visible | None = None) -> Iterator[Finding]:
    """A DCGM release older than the first that supports the GPUs' architecture: what
    it reports (no NVSwitch, missing fields) is DCGM's ignorance, not a broken fabric."""
    names = [g.name for g in (dcgmi_discovery.gpus if dcgmi_discovery else ()) if g.name]
    names += [g.name for g in (visible_gpus[1] if visible_gpus else ()) if g.name]
    for name in dict.fromkeys(names):
        support = dcgm_support(name)
        if support is None or not support.min_dcgm:
            continue
        if dcgm_version.key >= version_key(support.min_dcgm):
            continue
        switches = ""
        if dcgmi_discovery is not None and dcgmi_discovery.switch_count == 0:
            switches = (" Its '0 NvSwitches found' comes from that, not from a broken "
                        "NVLink fabric (check the fabric with nvidia-smi -q and the fabric "
                        "manager instead).")
        ev = [evidence(dcgm_version.source, [dcgm_version.line])]
        if dcgmi_discovery is not None:
            ev.append(evidence("dcgmi_discovery", dcgmi_discovery.count_lines))
        yield finding(
            "dcgm.too-old", Severity.WARNING,
            f"DCGM {dcgm_version.version} is too old for the {name} "
            f"({support.architecture}: DCGM {support.min_dcgm} or later)",
            f"This DCGM release predates {support.architecture} GPUs, so its health "
            "watches, diagnostics and exporter fields are partial or wrong on them."
            f"{switches} Upgrade DCGM (datacenter-gpu-manager-{support.min_dcgm.split('.')[0]}"
            f") and restart nvidia-dcgm. {NOT_THE_GPU}", Action.FIX_SOFTWARE, Blame.CONFIG,
            evidence=ev)
        return


# --- dcgmi health -c ------------------------------------------------------------------------
# system -> (finding id, action of a failure)
_SYSTEMS: dict[str, tuple[str, Action]] = {
    "pcie": ("dcgm.health-pcie", Action.DRAIN_AND_REPAIR),
    "nvlink": ("dcgm.health-nvlink", Action.DRAIN_AND_REPAIR),
    "memory": ("dcgm.health-memory", Action.RESET_GPU),
    "sm": ("dcgm.health-sm", Action.DRAIN_AND_REPAIR),
    "inforom": ("dcgm.health-inforom", Action.PLAN_REPAIR),
    "thermal": ("dcgm.health-thermal", Action.DRAIN_AND_REPAIR),
    "power": ("dcgm.health-power", Action.DRAIN_AND_REPAIR),
    "driver": ("dcgm.health-driver", Action.REBOOT_NODE),
    "nvswitch nf": ("dcgm.health-nvswitch", Action.PLAN_REPAIR),
    "nvswitch f": ("dcgm.health-nvswitch", Action.DRAIN_AND_REPAIR),
}
_WHAT = {
    "dcgm.health-pcie": "its PCIe link (replays, link errors)",
    "dcgm.health-nvlink": "its NVLinks (CRC, replay or recovery errors, links down)",
    "dcgm.health-memory": "its memory (ECC errors, pending or failed row remaps)",
    "dcgm.health-sm": "its streaming multiprocessors (SRAM errors)",
    "dcgm.health-inforom": "its InfoROM (corrupted: the GPU's error records are unreliable)",
    "dcgm.health-thermal": "its temperature (thermal violations, slowdown)",
    "dcgm.health-power": "its power (power violations, brake)",
    "dcgm.health-driver": "the driver (an error the driver reported for the GPU)",
    "dcgm.health-nvswitch": "an NVSwitch (fatal or non-fatal switch errors)",
    "dcgm.health-unknown": "a watched system",
}


@rule("dcgm.health", produces=("dcgm.health-ok", "dcgm.health-unchecked", "dcgm.health-pcie",
                               "dcgm.health-nvlink", "dcgm.health-memory", "dcgm.health-sm",
                               "dcgm.health-inforom", "dcgm.health-thermal",
                               "dcgm.health-power", "dcgm.health-driver",
                               "dcgm.health-nvswitch", "dcgm.health-unknown",
                               "dcgm.health-imex"))
def health(dcgmi_health: HealthReport, dcgmi_discovery: Discovery | None = None,
           visible_gpus: Visible | None = None) -> Iterator[Finding]:
    """``dcgmi health -c``: each GPU's failed or warned system as the matching cause
    (placed on the GPU's bus id, so that nvidia-smi's same fact explains it); DCGM's own
    internal error or unset watches as what could not be told."""
    h = dcgmi_health
    if h.hostengine_error:
        return  # dcgm.hostengine says it
    if h.error and not h.incidents:
        yield finding(
            "dcgm.health-unchecked", Severity.INFO, "DCGM's health watches could not be read",
            f"dcgmi health -c answered '{h.error}': nothing can be told from DCGM's health "
            "watches (enable them with 'dcgmi health -s a', which the host engine keeps "
            "until it restarts).", Action.NONE, Blame.CONFIG,
            evidence=[evidence("dcgmi_health", [h.error])])
        return
    names = [g.name for g in (dcgmi_discovery.gpus if dcgmi_discovery else ()) if g.name]
    names += [g.name for g in (visible_gpus[1] if visible_gpus else ()) if g.name]
    for inc in h.incidents:
        scope = (dcgm_gpu(inc.entity_id, dcgmi_discovery, visible_gpus)
                 if inc.entity == "GPU" else NODE)
        yield _imex(inc, scope, names) if "IMEX" in inc.message else _incident(inc, scope)
    if not h.incidents and h.overall == "healthy":
        yield finding("dcgm.health-ok", Severity.OK, "DCGM's health watches: healthy",
                      "dcgmi health -c reports no incident.", Action.NONE, Blame.UNKNOWN,
                      evidence=[evidence("dcgmi_health", [h.overall_line])])


def _imex(inc: HealthIncident, scope: Scope, names: list[str]) -> Finding:
    """DCGM's IMEX check, reported under the NVLink watch: IMEX is for multi-node NVLink
    domains, so outside one it is a false alarm, and never the GPU's fault."""
    v = judge_mark("DCGM_FR_IMEX_UNHEALTHY", None, [], None, names)
    who = f"{inc.entity} {inc.entity_id}" if inc.entity_id is not None else inc.entity
    return finding("dcgm.health-imex", v.severity,
                   f"DCGM health: {v.what} ({inc.system} {inc.health} on {who})"[:200],
                   v.why, v.action, v.blame, scope, [evidence("dcgmi_health", inc.lines)])


def _incident(inc: HealthIncident, scope: Scope) -> Finding:
    fid, fail_action = _SYSTEMS.get(inc.system.lower(), ("dcgm.health-unknown",
                                                         Action.PLAN_REPAIR))
    who = f"{inc.entity} {inc.entity_id}" if inc.entity_id is not None else inc.entity
    msg = f": {inc.message}" if inc.message else ""
    ev = [evidence("dcgmi_health", inc.lines)]
    if inc.health == "internal-error":
        return finding(
            "dcgm.health-unknown", Severity.WARNING,
            f"DCGM could not check {inc.system} on {who} (internal error)",
            "DCGM's health check itself failed for this system: that says nothing about "
            "the GPU. Look at nv-hostengine's log, restart nvidia-dcgm and check again; "
            f"{NOT_THE_GPU}", Action.FIX_SOFTWARE, Blame.UNKNOWN, scope, ev)
    severity = Severity.CRITICAL if inc.health == "failure" else Severity.WARNING
    action = action_for(severity, fail_action)
    then = ("Drain the GPU and act on the cause; compare with nvidia-smi -q for it."
            if severity is Severity.CRITICAL else
            "Still in service: watch it, and repair at the next maintenance window if it "
            "persists.")
    return finding(
        fid, severity, f"DCGM health: {inc.system} {inc.health} on {who}{msg}"[:200],
        f"DCGM's health watch reports a {inc.health} of {_WHAT.get(fid, 'a system')}. "
        f"{then}", action, Blame.NODE, scope, ev)


# --- dcgmi nvlink -------------------------------------------------------------------------
@rule("dcgm.nvlink", produces=("dcgm.nvlink-up", "dcgm.nvlink-down", "dcgm.nvlink-errors"))
def nvlink(dcgmi_nvlink: NvlinkReport, dcgmi_discovery: Discovery | None = None,
           visible_gpus: Visible | None = None) -> Iterator[Finding]:
    """Link states: every link down on every GPU with no NVSwitch is a bridge not fitted
    or not seated; some links down beside others up is a failing link; a paste that does
    not show whether NVSwitches are there is a warning. Error counters are judged like
    nvidia-smi's (rules/fabric.py): recovery errors, or a CRC or replay counter at 100."""
    r = dcgmi_nvlink
    names = {g.gpu_id: g.name for g in (dcgmi_discovery.gpus if dcgmi_discovery else ())}
    down = {g: st for g, st in r.gpu_links.items() if "D" in st}
    if down:
        yield _links_down(r, down, names)
    elif r.gpu_links:
        ups = sum(st.count("U") for st in r.gpu_links.values())
        yield finding("dcgm.nvlink-up", Severity.OK,
                      f"DCGM: {ups} NVLinks up on {len(r.gpu_links)} GPU(s), none down",
                      "No NVLink is down.", Action.NONE, Blame.UNKNOWN,
                      evidence=[evidence("dcgmi_nvlink", r.lines[min(r.gpu_links)])])
    for gpu, rows in sorted(r.error_lines.items()):
        links = r.errors.get(gpu, {})
        recovery = sum(c.get("Recovery Error", 0) for c in links.values())
        total = sum(sum(c.values()) for c in links.values())
        loud = any(counter_severe(name, n) for c in links.values() for name, n in c.items()
                   if n)
        yield finding(
            "dcgm.nvlink-errors", Severity.WARNING if loud else Severity.INFO,
            f"GPU {gpu}: {total} NVLink error(s) counted by DCGM"
            + (f", {recovery} recovery" if recovery else ""),
            "NVLink CRC and replay errors are retried transparently; recovery errors mean a "
            "link went down and came back. Many of them, or recoveries, mean a link wearing "
            "out: watch the counters and reseat or repair the GPU or baseboard at the next "
            "maintenance window." if loud else
            "A few retried NVLink errors are normal. Worth watching.",
            Action.PLAN_REPAIR if loud else Action.NONE, Blame.NODE,
            dcgm_gpu(gpu, dcgmi_discovery, visible_gpus), [evidence("dcgmi_nvlink", rows[:8])])


def _links_down(r: NvlinkReport, down: dict[int, list[str]],
                names: dict[int, str | None]) -> Finding:
    ev = [evidence("dcgmi_nvlink", [ln for g in sorted(down) for ln in r.lines.get(g, [])]
                   + (["No NvSwitches found."] if r.no_switches else []))]
    all_down = all("U" not in st for st in r.gpu_links.values()) and len(down) == len(
        r.gpu_links)
    profile = next((p for p in (knowledge.gpu_profile(n) for n in names.values() if n) if p),
                   None)
    # what says the GPUs are joined by NVSwitches or a baseboard: their model (from
    # dcgmi discovery), or switches dcgmi lists with their links; "No NvSwitches found"
    # says they are not, and a paste with neither (cut short) says nothing
    switched = (profile is not None and profile.form != "pcie") or bool(r.switch_links)
    bridged = r.no_switches and not switched
    n_down = sum(st.count("D") for st in down.values())
    gpus = ", ".join(str(g) for g in sorted(down))
    if all_down and bridged:
        return finding(
            "dcgm.nvlink-down", Severity.WARNING,
            f"every NVLink down on GPU(s) {gpus} and no NVSwitch: the NVLink bridge is "
            "absent or not seated",
            "PCIe cards (H100 NVL, A100/A40 PCIe...) join pairs through an NVLink bridge. With "
            "every link of every GPU down and no NVSwitch, the bridge is missing, not seated, "
            "or its links failed to train. Peer traffic falls back to PCIe (slower, still "
            "correct). Reseat or fit the bridges at the next maintenance window. If these are "
            "SXM GPUs of a baseboard, it is critical instead: check the fabric manager.",
            Action.PLAN_REPAIR, Blame.NODE, evidence=ev)
    if all_down and switched:
        return finding(
            "dcgm.nvlink-down", Severity.CRITICAL,
            f"every NVLink down on GPU(s) {gpus}",
            "Baseboard GPUs with no NVLink up cannot run NVLink peer traffic or NCCL over "
            "NVLink. On an NVSwitch system check nvidia-fabricmanager first; then reset the "
            "GPUs, and drain the node for repair if the links stay down.",
            Action.RESET_GPU, Blame.NODE, evidence=ev)
    if all_down:
        return finding(
            "dcgm.nvlink-down", Severity.WARNING,
            f"every NVLink down on GPU(s) {gpus} (NVSwitches not shown)",
            "The output shows every link of these GPUs down but not whether the node has "
            "NVSwitches (no 'NvSwitches:' section: the paste may be cut short). On PCIe cards "
            "it is an NVLink bridge absent or not seated; on baseboard GPUs it is critical "
            "(check nvidia-fabricmanager, then reset the GPUs). Run dcgmi nvlink "
            "--link-status and dcgmi discovery -l in full to tell which.",
            Action.PLAN_REPAIR, Blame.NODE, evidence=ev)
    severity = Severity.CRITICAL if switched else Severity.WARNING
    return finding(
        "dcgm.nvlink-down", severity,
        f"{n_down} NVLink(s) down on GPU(s) {gpus} while others are up",
        "Links down beside links up is a link that failed to train or a failing GPU, "
        "baseboard or bridge: NVLink bandwidth drops and NCCL can slow or hang. "
        + ("Drain the node; reset the GPU and repair it if the same links stay down."
           if severity is Severity.CRITICAL else
           "Reseat the bridge at the next maintenance window (on baseboard GPUs, drain the "
           "node and reset the GPU instead)."),
        action_for(severity, Action.DRAIN_AND_REPAIR), Blame.NODE, evidence=ev)


# --- nv-hostengine ------------------------------------------------------------------------
@rule("dcgm.hostengine", any_of=("nv_hostengine_log", "dcgm_unanswered", "dcgmi_discovery",
                                 "dcgmi_health", "dcgmi_nvlink"),
      produces=("dcgm.hostengine-unreachable", "dcgm.hostengine-nvml-failed"))
def hostengine(nv_hostengine_log: HostengineLog | None = None,
               dcgm_unanswered: dict[str, dict[str, Any]] | None = None,
               dcgmi_discovery: Discovery | None = None, dcgmi_health: HealthReport | None = None,
               dcgmi_nvlink: NvlinkReport | None = None) -> Iterator[Finding]:
    """nv-hostengine that could not start (NVML unavailable to it) or that dcgmi cannot
    reach (not running, hung): DCGM is blind, the GPUs are not implicated."""
    log = nv_hostengine_log
    nvml = log.of("nvml-init-failed", "init-failed") if log else []
    if nvml:
        yield finding(
            "dcgm.hostengine-nvml-failed", Severity.WARNING,
            "nv-hostengine cannot start: it failed to initialise NVML",
            "DCGM's host engine found no working NVML. In a container (dcgm-exporter's "
            "embedded engine) the GPU devices and driver libraries were not given to it: run "
            "it with the NVIDIA runtime / GPU access. On the host, check that nvidia-smi "
            "works. DCGM, dcgmi and the exporter report nothing until then. " + NOT_THE_GPU,
            Action.FIX_CONFIG, Blame.CONFIG,
            evidence=[evidence("nv_hostengine_log", [e.line for e in nvml][:4])])
    ev = _unreachable_evidence(log, dcgm_unanswered, dcgmi_discovery, dcgmi_health, dcgmi_nvlink)
    if not ev:
        return
    restarted = bool(log and log.entries and log.entries[-1].event == "started")
    severity = Severity.INFO if restarted else Severity.WARNING
    yield finding(
        "dcgm.hostengine-unreachable", severity,
        "dcgmi cannot reach nv-hostengine" + (" (started again since)" if restarted else ""),
        "dcgmi talks to DCGM's host engine (nv-hostengine, the nvidia-dcgm service, port "
        "5555); it is not running, hung, or listening elsewhere, so dcgmi hangs or fails and "
        "DCGM reports nothing. Start it (systemctl start nvidia-dcgm; systemctl status "
        "nvidia-dcgm and its journal say why it stopped). " + NOT_THE_GPU,
        Action.NONE if restarted else Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)


def _unreachable_evidence(log: HostengineLog | None,
                          unanswered: dict[str, dict[str, Any]] | None,
                          *outputs: Discovery | HealthReport | NvlinkReport | None
                          ) -> list[Evidence]:
    ev = []
    if log is not None and (lines := [e.line for e in log.of("unreachable")]):
        ev.append(evidence("nv_hostengine_log", lines[:4]))
    for name, rec in (unanswered or {}).items():
        target = rec.get("target")
        cmd = " ".join(target) if isinstance(target, list) else name
        ev.append(evidence(name, [f"{cmd}: {rec.get('error_detail') or 'timed out'}"]))
    names = ("dcgmi_discovery", "dcgmi_health", "dcgmi_nvlink")
    for name, out in zip(names, outputs, strict=True):
        if out is not None and out.hostengine_error:
            ev.append(evidence(name, out.hostengine_error[:2]))
    return ev


DOC_PROF = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/feature-overview.html"


@rule("dcgm.profiling", any_of=("nv_hostengine_log", "dcgm_exporter_log"),
      produces=("dcgm.profiling-busy",))
def profiling(nv_hostengine_log: HostengineLog | None = None,
              dcgm_exporter_log: ExporterLog | None = None) -> Iterator[Finding]:
    """DCGM's profiling (DCP) fields cannot be watched because the profiling library
    could not open its session on the GPU (DCGM_ST_PROFILING_LIBRARY_ERROR): another
    profiler holds the GPU's performance monitor. Software contention, not the GPU."""
    lines = [e.line for e in (nv_hostengine_log.of("profiling-busy")
                              if nv_hostengine_log else [])]
    exporter = [e.line for e in (dcgm_exporter_log.of("profiling-busy")
                                 if dcgm_exporter_log else [])]
    if not lines and not exporter:
        return
    ev = [evidence(src, found[:4]) for src, found in (("nv_hostengine_log", lines),
                                                      ("dcgm_exporter_log", exporter)) if found]
    yield finding(
        "dcgm.profiling-busy", Severity.WARNING,
        "DCGM's profiling fields cannot be watched: another profiler holds the GPU's "
        "performance monitor",
        "The profiling (DCP) fields (DCGM_FI_PROF_*, dcgmi dmon -e 1001-1012) need the GPU's "
        "performance monitor to themselves. Its session could not start (the third-party "
        "profiling module's unrecoverable error, -37): a second DCGM host engine (dcgm-"
        "exporter's embedded one beside the nvidia-dcgm service, or two exporters), Nsight "
        "Systems / Nsight Compute / nvprof / CUPTI, or another DCGM instance holds it. Keep "
        "one host engine per node (point dcgm-exporter at the standalone one with "
        "-r localhost:5555), and pause DCGM's profiling while a profiler runs (dcgmi profile "
        "--pause, then --resume). The other fields still work. " + NOT_THE_GPU,
        Action.FIX_CONFIG, Blame.CONFIG, evidence=ev, references=(DOC_PROF,))


@rule("dcgm.nvswitch-libraries", produces=("dcgm.nvswitch-libs-missing",))
def nvswitch_libraries(nv_hostengine_log: HostengineLog,
                       needs_fabric_manager: FabricNeed | None = None) -> Iterator[Finding]:
    """nv-hostengine could not load NSCQ / NVSDM, the libraries of its NvSwitch module:
    expected on a node without NVSwitches (PCIe GPUs), a monitoring gap on one with."""
    found = nv_hostengine_log.of("nvswitch-libs-missing")
    if not found:
        return
    ev = [evidence("nv_hostengine_log", [e.line for e in found][:4])]
    if needs_fabric_manager is not None and needs_fabric_manager.where == "here":
        yield finding(
            "dcgm.nvswitch-libs-missing", Severity.WARNING,
            "nv-hostengine cannot load NSCQ/NVSDM on a node with NVSwitches",
            f"This node has NVSwitches ({needs_fabric_manager.reason}), and DCGM's NvSwitch "
            "module could not load libnvidia-nscq (or NVSDM): DCGM reports nothing of the "
            "switches (no NVSwitch fields, health or errors). Install libnvidia-nscq of the "
            "driver's version (NVSDM for NVLink 5 switch trays) where the host engine runs "
            "and restart nvidia-dcgm. " + NOT_THE_GPU, Action.FIX_SOFTWARE, Blame.CONFIG,
            evidence=[*ev, *needs_fabric_manager.evidence])
        return
    where = (f" ({needs_fabric_manager.reason})" if needs_fabric_manager is not None
             and needs_fabric_manager.where == "nowhere" else "")
    yield finding(
        "dcgm.nvswitch-libs-missing", Severity.INFO,
        "nv-hostengine: NSCQ/NVSDM not loaded (needed only with NVSwitches)",
        "DCGM's NvSwitch module looks for libnvidia-nscq and NVSDM at start and logs an "
        "ERROR when they are absent; its own message says they matter only if the system has "
        f"NvSwitches. On PCIe GPUs or a board without NVSwitches{where} this is expected and "
        "the module still loads. Only on an HGX/DGX board with NVSwitches should "
        "libnvidia-nscq be installed.", Action.NONE, Blame.UNKNOWN, evidence=ev)
