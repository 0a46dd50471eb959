"""dcgm-exporter: the GPU fields it exports (judged like the same counters read by
nvidia-smi, with nvidia-smi's thresholds, per GPU or MIG instance) and its own log (a
monitoring stack that cannot reach DCGM or cannot start is a configuration problem,
never a drained node).

``DCGM_FI_DEV_XID_ERRORS`` is the last Xid DCGM saw on the GPU, not a count and with no
time: its meaning comes from the Xid catalog (0 means none), but it drains the node only
when the kernel log has that Xid on that GPU too (and then it folds under the kernel's
finding); alone it asks for a look at the next window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from gputriage.facts.dcgm import DcgmSupport, dcgm_support
from gputriage.knowledge.xid import all_xids, xid_info
from gputriage.model import Action, Blame, Evidence, Finding, Scope, Severity, evidence, gpu_scope
from gputriage.parsers.dcgm_exporter import (
    ExporterEntry,
    ExporterLog,
    ExporterMetrics,
    GpuMetrics,
)
from gputriage.parsers.kernel_model import DriverEvent
from gputriage.rules.base import action_for, finding, rule
from gputriage.rules.dcgm_host import NOT_THE_GPU, Visible
from gputriage.rules.fabric import counter_severe
from gputriage.rules.kernel_common import split_boots, xid_events
from gputriage.rules.memory import (
    CORRECTED_AGGREGATE_HIGH,
    CORRECTED_VOLATILE_HIGH,
    REMAP_UNCORRECTABLE_RMA,
)
from gputriage.rules.pcie import REPLAYS_WARN
from gputriage.rules.thermal import HW_REASONS, TROUBLE_REASONS

SRC = "dcgm_exporter_metrics"
XID_IDS = tuple(f"dcgm.xid.{x.code}" for x in all_xids())  # as the kernel's xid.N
# clock-event (throttle) reason bits as NVML defines them, by nvidia-smi's names
_REASON_BITS = {0x1: ("gpu_idle", "GPU idle"),
                0x2: ("applications_clocks_setting", "application clocks setting"),
                0x4: ("sw_power_cap", "software power cap"),
                0x8: ("hw_slowdown", "hardware slowdown"), 0x10: ("sync_boost", "sync boost"),
                0x20: ("sw_thermal_slowdown", "software thermal slowdown"),
                0x40: ("hw_thermal_slowdown", "hardware thermal slowdown"),
                0x80: ("hw_power_brake_slowdown", "hardware power brake"),
                0x100: ("display_clocks_setting", "display clock setting")}


def _v(g: GpuMetrics, *names: str) -> float | None:
    return next((g.values[n] for n in names if n in g.values), None)


def _ev(g: GpuMetrics, *names: str) -> list[Evidence]:
    lines = [g.lines[n] for n in names if n in g.lines]
    return [evidence(SRC, lines)] if lines else []


def _scope(g: GpuMetrics) -> Scope:
    return gpu_scope(g.bus_id, g.index, g.uuid)


def _xid(g: GpuMetrics, logged: set[tuple[int, str | None]]) -> Finding | None:
    """The last Xid; ``logged``: the (code, bus id) of the kernel log's Xids (this boot)."""
    value = _v(g, "DCGM_FI_DEV_XID_ERRORS")
    if not value or not value.is_integer() or not 0 < value < 1_000_000:
        return None  # 0: none; a negative or fractional value is no Xid
    code = int(value)
    info = xid_info(code)
    ev = _ev(g, "DCGM_FI_DEV_XID_ERRORS")
    if info is None:
        return finding(f"dcgm.xid.{code}", Severity.WARNING,
                       f"{g.label}: last Xid {code} (unknown code)",
                       "DCGM's last Xid on this GPU is not in the catalog: read the kernel log "
                       "around it.", Action.NONE, Blame.UNKNOWN, _scope(g), ev)
    backed = (code, g.bus_id) in logged
    severity = info.severity
    if not backed and severity.rank > Severity.WARNING.rank:
        severity = Severity.WARNING  # no time, no kernel line: not enough to drain on
    action = action_for(severity, info.action)
    why = ("The kernel log has it on this GPU too." if backed else
           "The kernel log at hand does not show it: it may be old (the field keeps the last "
           "Xid until the driver reloads), so this alone does not drain; read the kernel "
           "log (journalctl -k | grep Xid) and act on what it shows.")
    return finding(
        f"dcgm.xid.{code}", severity, f"{g.label}: last Xid {code} ({info.meaning})",
        "DCGM_FI_DEV_XID_ERRORS is the last Xid the GPU raised, not a count and without a "
        f"time. {why} {info.explanation}", action, info.blame, _scope(g), ev)


def _logged_xids(log_events: list[DriverEvent] | None) -> set[tuple[int, str | None]]:
    this_boot, _ = split_boots(log_events or ())
    return {(code, ev.bus_id) for code, ev in xid_events(this_boot)}


def _ecc(g: GpuMetrics) -> Iterator[Finding]:
    dbe_vol = _v(g, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
    dbe_agg = _v(g, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL")
    sbe_vol = _v(g, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
    sbe_agg = _v(g, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL")
    ev = _ev(g, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL")
    if dbe_vol:
        yield finding(
            "dcgm.ecc-uncorrectable", Severity.CRITICAL,
            f"{g.label}: {dbe_vol:g} uncorrectable (double-bit) ECC error(s) since the last "
            "reset",
            "An uncorrectable memory error corrupted data of the job that was running; that "
            "job must be restarted. Drain the GPU and reset it so the bad row is remapped or "
            "the page retired; repair the GPU if errors come back.",
            Action.RESET_GPU, Blame.NODE, _scope(g), ev)
    elif dbe_agg:
        yield finding(
            "dcgm.ecc-uncorrectable", Severity.INFO,
            f"{g.label}: {dbe_agg:g} uncorrectable ECC error(s) in its lifetime, none since "
            "the last reset", "Past uncorrectable errors were handled by a reset. Nothing to "
            "do now; a GPU that keeps collecting them should be repaired.",
            Action.NONE, Blame.NODE, _scope(g), ev)
    if (sbe_vol or 0) >= CORRECTED_VOLATILE_HIGH or (sbe_agg or 0) >= CORRECTED_AGGREGATE_HIGH:
        rising = bool(sbe_vol)
        yield finding(
            "dcgm.ecc-correctable-high", Severity.WARNING if rising else Severity.INFO,
            f"{g.label}: {sbe_agg if sbe_agg is not None else '?'} corrected ECC errors in "
            f"its lifetime, {sbe_vol if sbe_vol is not None else '?'} since the last reset",
            "ECC fixed them, so no job was harmed, but many corrected errors mean memory "
            "wearing out. Watch the trend; run the DCGM memory diagnostic at the next drain.",
            Action.NONE, Blame.NODE, _scope(g),
            _ev(g, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"))


def _remap(g: GpuMetrics) -> Finding | None:
    failed = _v(g, "DCGM_FI_DEV_ROW_REMAP_FAILURE")
    pending = _v(g, "DCGM_FI_DEV_ROW_REMAP_PENDING")
    unc = _v(g, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS") or 0
    ev = _ev(g, "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING",
             "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS")
    if failed or unc >= REMAP_UNCORRECTABLE_RMA:
        what = ("row remapping failed" if failed else
                f"{unc:g} rows remapped for uncorrectable errors")
        return finding(
            "dcgm.remap-failed", Severity.CRITICAL, f"{g.label}: {what}",
            "The GPU could not remap a failing memory row, or has remapped so many that its "
            "spares run out: the errors will keep coming back. Drain the node and have the "
            "GPU repaired or replaced (RMA).", Action.DRAIN_AND_REPAIR, Blame.NODE, _scope(g), ev)
    if pending:
        return finding(
            "dcgm.remap-pending", Severity.WARNING, f"{g.label}: row remap pending",
            "A memory row with errors was marked for remapping; the spare row is used only "
            "after a GPU reset. Reset the GPU when it is idle or at the next maintenance "
            "window.", Action.PLAN_REPAIR, Blame.NODE, _scope(g), ev)
    return None


def _pcie(g: GpuMetrics) -> Finding | None:
    n = _v(g, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")
    if not n:
        return None
    loud = n >= REPLAYS_WARN
    return finding(
        "dcgm.pcie-replays", Severity.WARNING if loud else Severity.INFO,
        f"{g.label}: {n:g} PCIe replays since the last reset",
        "The PCIe link keeps retrying packets: a riser, cable, slot or card degrading. Reseat "
        "the GPU at the next maintenance window and watch the counter." if loud else
        f"A few replays are normal (below {REPLAYS_WARN} here). Worth tracking.",
        Action.PLAN_REPAIR if loud else Action.NONE, Blame.NODE, _scope(g),
        _ev(g, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"))


_NVLINK = {"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "CRC FLIT Error",
           "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "CRC Data Error",
           "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "Replay Error",
           "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "Recovery Error"}


def _nvlink(g: GpuMetrics) -> Finding | None:
    counts = {n: g.values[n] for n in _NVLINK if g.values.get(n)}
    if not counts:
        return None
    total = sum(counts.values())
    loud = any(counter_severe(_NVLINK[n], v) for n, v in counts.items())  # as nvidia-smi's
    return finding(
        "dcgm.nvlink-counters", Severity.WARNING if loud else Severity.INFO,
        f"{g.label}: {total:g} NVLink error(s) (CRC, replay, recovery)",
        "NVLink CRC and replay errors are retried; recovery errors mean a link went down and "
        "came back. This many mean a link wearing out: watch it and reseat or repair the GPU "
        "or baseboard at the next maintenance window." if loud else
        "A few retried NVLink errors are normal. Worth watching.",
        Action.PLAN_REPAIR if loud else Action.NONE, Blame.NODE, _scope(g), _ev(g, *counts))


def _clocks(g: GpuMetrics) -> Finding | None:
    name = next((n for n in ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
                             "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS") if n in g.values), None)
    if name is None:
        return None
    value = g.values[name]
    if not value.is_integer() or not 0 <= value < 2**64:
        return None  # not a bitmask
    mask = int(value)
    reasons = [r for bit, r in _REASON_BITS.items() if mask & bit]
    active = {name for name, _ in reasons}
    if not active & TROUBLE_REASONS:  # the reasons nvidia-smi's clocks rule alarms on
        return None
    what = ", ".join(text for _, text in reasons)
    ev = _ev(g, name, "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL")
    busy = bool(_v(g, "DCGM_FI_DEV_GPU_UTIL"))
    if active & HW_REASONS or ("hw_slowdown" in active and busy):
        return finding(
            "dcgm.clock-events", Severity.CRITICAL, f"{g.label}: clocks cut by {what}",
            "The GPU's hardware protection cut its clocks (over-temperature, the chassis' "
            "power brake on PSU trouble, or over-current): jobs on it run far slower and hold "
            "back their peers. Drain the node and check its cooling, PSUs and the BMC's "
            "event log.", Action.DRAIN_AND_REPAIR, Blame.NODE, _scope(g), ev)
    return finding(
        "dcgm.clock-events", Severity.WARNING, f"{g.label}: clocks cut by {what}",
        "The GPU slows itself down (software thermal slowdown, or a hardware slowdown while "
        "idle). Check fans, airflow and inlet temperature, and check it under load.",
        action_for(Severity.WARNING, Action.FIX_CONFIG), Blame.NODE, _scope(g), ev)


_CHECKS: tuple[Callable[[GpuMetrics], Finding | None], ...] = (_remap, _pcie, _nvlink,
                                                                _clocks)


@rule("dcgm.exporter-fields",
      produces=("dcgm.metrics-healthy", *XID_IDS, "dcgm.ecc-uncorrectable",
                "dcgm.ecc-correctable-high", "dcgm.remap-failed", "dcgm.remap-pending",
                "dcgm.pcie-replays", "dcgm.nvlink-counters", "dcgm.clock-events"))
def exporter_fields(dcgm_exporter_metrics: ExporterMetrics,
                    log_events: list[DriverEvent] | None = None) -> Iterator[Finding]:
    """Each GPU's (or MIG instance's) error fields: the last Xid through the Xid catalog
    (a warning at most unless the kernel log has it too), ECC, row remapping, PCIe
    replays, NVLink errors and clock-event reasons, with nvidia-smi's thresholds;
    healthy fields give one ok finding."""
    m = dcgm_exporter_metrics
    logged = _logged_xids(log_events)
    found = 0
    for g in m.gpus:
        for f in (*_ecc(g), _xid(g, logged), *(check(g) for check in _CHECKS)):
            if f is not None:
                found += 1
                yield f
    if not found:
        yield _healthy(m)


def _healthy(m: ExporterMetrics) -> Finding:
    gpus = {g.uuid or g.gpu for g in m.gpus}
    migs = sum(1 for g in m.gpus if g.mig_instance is not None)
    first = next(iter(m.gpus[0].lines.values()), "")
    fields = ", ".join(sorted(f.removeprefix("DCGM_FI_DEV_") for f in m.fields))[:160]
    what = (f"The exported fields ({fields}) show no Xid, ECC, remap, replay or slowdown."
            if m.fields else
            f"{m.series} series listed by their labels only, without values: the GPUs are "
            "exported; their values are not in this paste.")
    pods = ("" if any(g.pod for g in m.gpus) else
            " No series carries pod, namespace or container labels: dcgm-exporter adds them "
            "only to the GPUs a pod is using at the time (through the kubelet's pod-resources "
            "socket), so an idle GPU has none; that is expected.")
    return finding(
        "dcgm.metrics-healthy", Severity.OK,
        f"dcgm-exporter: {len(gpus)} GPU(s)"
        + (f", {migs} MIG instance(s)" if migs else "")
        + (", no error field set" if m.fields else ", exported"),
        what + (f" {m.unreadable} damaged line(s) were skipped." if m.unreadable else "")
        + (f" {m.non_finite} NaN or infinite value(s) were skipped." if m.non_finite else "")
        + pods, Action.NONE, Blame.UNKNOWN, evidence=[evidence(SRC, [first])])


# --- the exporter's log ----------------------------------------------------------------------


DOC_EXPORTER = "https://docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/dcgm-exporter.html"
_FAILED = ("error", "fatal", "panic")


@rule("dcgm.exporter-log",
      produces=("dcgm.exporter-hostengine-unreachable", "dcgm.exporter-stale",
                "dcgm.exporter-profiling-unsupported", "dcgm.exporter-metrics-file-invalid",
                "dcgm.exporter-unsupported-gpu", "dcgm.exporter-nvml-missing",
                "dcgm.exporter-running"))
def exporter_log(dcgm_exporter_log: ExporterLog, visible_gpus: Visible | None = None
                 ) -> Iterator[Finding]:
    """What keeps dcgm-exporter from exporting: no NVML in its container, no host engine
    to connect to, a lost connection (stale metrics), a profiling module the GPU does not
    have, a malformed counters file, a GPU DCGM does not support. Monitoring problems,
    not GPU faults. An exporter that started serving without an error is said so."""
    log = dcgm_exporter_log
    names = [g.name for g in (visible_gpus[1] if visible_gpus else ()) if g.name]
    support = next((s for s in map(dcgm_support, names) if s), None)
    found = list(_problems(log, support))
    yield from found
    serving = log.of("serving")
    if serving and not found and not any(e.level in _FAILED for e in log.entries):
        yield finding(
            "dcgm.exporter-running", Severity.OK,
            "dcgm-exporter started and serves its metrics",
            "It initialised DCGM and started its web server with no error. Lines that it is "
            "not collecting NvSwitch, NvLink or CPU metrics say that the node has no such "
            "entities or no such fields listed: expected.", Action.NONE, Blame.UNKNOWN,
            evidence=[evidence("dcgm_exporter_log", [e.line for e in serving][:2])])


def _problems(log: ExporterLog, support: DcgmSupport | None) -> Iterator[Finding]:
    if nvml := log.of("nvml-init-failed"):
        yield finding(
            "dcgm.exporter-nvml-missing", Severity.WARNING,
            "dcgm-exporter has no NVML: its container was not given the driver",
            "The exporter (and the host engine it embeds) could not load or initialise "
            "libnvidia-ml inside its container, so it exports nothing and restarts. The "
            "container was started without the NVIDIA runtime: in Kubernetes give its pod "
            "runtimeClassName: nvidia (or make nvidia the node's default runtime, or use CDI); "
            "on GKE the driver sits under /home/kubernetes/bin/nvidia and is mounted only into "
            "pods that request nvidia.com/gpu, so deploy the exporter the way GKE documents; "
            "in kind or another nested node, the node container itself must carry the "
            f"driver's libraries (the GPU operator's toolkit does this). {NOT_THE_GPU}",
            Action.FIX_CONFIG, Blame.CONFIG,
            evidence=[evidence("dcgm_exporter_log", [e.line for e in nvml][:4])],
            references=(DOC_EXPORTER,))
    if bad := log.of("metrics-file-invalid"):
        yield finding(
            "dcgm.exporter-metrics-file-invalid", Severity.WARNING,
            "dcgm-exporter cannot read its metrics (counters) CSV file",
            "The counters file given with -f (or the ConfigMap) is malformed (a line with the "
            "wrong number of fields, or an HTML page saved in its place), so the exporter "
            "exits and restarts in a loop. Mount a correct counters CSV (the raw file). DCGM "
            f"itself initialised. {NOT_THE_GPU}", Action.FIX_CONFIG, Blame.CONFIG,
            evidence=[evidence("dcgm_exporter_log", [e.line for e in bad][:3])])
    if dcp := log.of("dcp-unavailable"):
        yield _dcp(dcp, support)
    yield from _connection(log, support)


def _dcp(dcp: list[ExporterEntry], support: DcgmSupport | None) -> Finding:
    """DCGM's profiling module not loaded: an exporter that stops on it (old releases
    watched every listed field) is a warning; one that skips the fields and goes on is
    what a GPU without profiling support looks like."""
    arch = (f" ({support.architecture})" if support and support.profiling is False else "")
    ev = [evidence("dcgm_exporter_log", [e.line for e in dcp][:4])]
    why = ("DCGM's profiling module is not loaded: profiling fields (DCGM_FI_PROF_*) exist on "
           "Volta and newer datacenter GPUs only, so on older ones (Kepler, Maxwell, Pascal) "
           "it never loads, nor on GeForce cards before Blackwell (DCGM before 2.1.7 also "
           "refused GPUs whose name NVML reports as 'NVIDIA ...' instead of 'Tesla ...', "
           "with 'Profiling is not supported for this group of GPUs'; DCGM 2.1.7 release "
           "notes). The DCGM_FI_DEV_* fields still work")
    if any(e.level in _FAILED or e.message.startswith("Error") for e in dcp):
        return finding(
            "dcgm.exporter-profiling-unsupported", Severity.WARNING,
            f"dcgm-exporter stops: DCGM's profiling (DCP) metrics are not available{arch}",
            f"{why}, but this exporter stops on the profiling fields it was given: releases "
            "before 2.1.2 watched every listed field and exit (CrashLoopBackOff) where the "
            "GPU has none. Upgrade dcgm-exporter (newer releases skip the fields the GPU "
            "lacks), or give it a counters file without DCGM_FI_PROF_* lines. "
            f"{NOT_THE_GPU}", Action.FIX_CONFIG, Blame.CONFIG, evidence=ev)
    return finding(
        "dcgm.exporter-profiling-unsupported", Severity.INFO,
        f"dcgm-exporter skips DCGM's profiling (DCP) metrics{arch}",
        f"{why}: the exporter skips the DCGM_FI_PROF_* lines of its counters file and goes "
        "on. Expected on GPUs without profiling support (use DCGM_FI_DEV_GPU_UTIL there); on "
        "a Volta-or-newer datacenter GPU it means the profiling module failed to load: "
        f"read nv-hostengine's log. {NOT_THE_GPU}", Action.NONE, Blame.UNKNOWN, evidence=ev)


def _connection(log: ExporterLog, support: DcgmSupport | None) -> Iterator[Finding]:
    remote = log.of("remote-hostengine")
    down = [e for e in log.of("hostengine-unreachable") if e.level in ("fatal", "error", None)]
    stale = log.of("collect-failed")
    legacy_stop = log.of("legacy-hostengine-stopped")
    addr = remote[0].detail if remote else None
    if down and not stale:
        where = f" at {addr}" if addr else ""
        yield finding(
            "dcgm.exporter-hostengine-unreachable", Severity.WARNING,
            f"dcgm-exporter cannot connect to nv-hostengine{where}",
            "The exporter was pointed at a standalone host engine (DCGM_REMOTE_HOSTENGINE_INFO"
            f"{'=' + addr if addr else ''}) that is not running there, and exits. Run the "
            "host engine (the nvidia-dcgm service or the GPU operator's DCGM pod) and point "
            "the exporter at it, or remove the variable to use the exporter's embedded host "
            f"engine. {NOT_THE_GPU}", Action.FIX_CONFIG, Blame.CONFIG,
            evidence=[evidence("dcgm_exporter_log", [e.line for e in remote + down][:4])])
    if stale:
        yield finding(
            "dcgm.exporter-stale", Severity.WARNING,
            f"dcgm-exporter lost nv-hostengine: its metrics are stale ({len(stale)} failed "
            "collection(s))",
            "The exporter's connection to the host engine broke (a host-engine restart) and "
            "it does not reconnect: it keeps serving the last values, and /health still says "
            "OK. Do not trust its GPU values; restart dcgm-exporter (or upgrade to a release "
            f"that reconnects). {NOT_THE_GPU}", Action.FIX_CONFIG, Blame.CONFIG,
            evidence=[evidence("dcgm_exporter_log", [e.line for e in stale][:3])])
    if legacy_stop and support is not None and support.exporter is False:
        yield finding(
            "dcgm.exporter-unsupported-gpu", Severity.WARNING,
            f"dcgm-exporter does not support this GPU ({support.architecture})",
            "The host engine starts and stops at once and no metrics are written: DCGM and "
            f"its exporter do not support {support.architecture} GPUs. The GPU itself is "
            "fine: monitor it another way (an nvidia-smi based exporter) or move the "
            "exporter to supported GPUs.", Action.FIX_SOFTWARE, Blame.CONFIG,
            evidence=[evidence("dcgm_exporter_log", [e.line for e in legacy_stop][:3])])
