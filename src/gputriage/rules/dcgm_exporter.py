"""dcgm-exporter: the GPU fields it exports (judged like the same counters read by
nvidia-smi, per GPU or MIG instance) and its own log (a monitoring stack that cannot
reach DCGM or cannot start is a configuration problem, never a drained node).

``DCGM_FI_DEV_XID_ERRORS`` is the last Xid DCGM saw on the GPU, not a count: its
meaning and verdict come from the Xid catalog, 0 means none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from gputriage.hostfacts.dcgm import dcgm_support
from gputriage.hostfacts.stack import GpuSighting
from gputriage.knowledge.xid import xid_info
from gputriage.model import Action, Blame, Finding, Severity
from gputriage.parsers.dcgm_exporter import ExporterLog, ExporterMetrics, GpuMetrics
from gputriage.rules.base import action_for, evidence, finding, gpu_scope, rule

NOT_THE_GPU = "The GPUs are not implicated by this alone."
SRC = "dcgm_exporter_metrics"
CORRECTED_HIGH = 1000  # corrected ECC errors that mean memory wearing out (as memory.py)
REPLAYS_WARN = 1000  # PCIe replays since reset (as pcie.py)
NVLINK_ERRORS_WARN = 100  # CRC / replay errors over all links
REMAP_UNCORRECTABLE_RMA = 8  # uncorrectable-error rows remapped: a repair case (as memory.py)
# clock-event (throttle) reason bits, as NVML defines them
HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE = 0x8, 0x20, 0x40, 0x80
_REASONS = {0x1: "GPU idle", 0x2: "application clocks setting", 0x4: "software power cap",
            0x8: "hardware slowdown", 0x10: "sync boost", 0x20: "software thermal slowdown",
            0x40: "hardware thermal slowdown", 0x80: "hardware power brake",
            0x100: "display clock setting"}


def _v(g: GpuMetrics, *names: str) -> float | None:
    return next((g.values[n] for n in names if n in g.values), None)


def _ev(g: GpuMetrics, *names: str) -> list:
    lines = [g.lines[n] for n in names if n in g.lines]
    return [evidence(SRC, lines)] if lines else []


def _scope(g: GpuMetrics):
    return gpu_scope(g.bus_id, g.index, g.uuid)


def _xid(g: GpuMetrics) -> Finding | None:
    value = _v(g, "DCGM_FI_DEV_XID_ERRORS")
    if not value:
        return None
    code = int(value)
    info = xid_info(code)
    if info is None:
        return finding("dcgm.xid", Severity.WARNING, f"{g.label}: last Xid {code} (unknown code)",
                       "DCGM's last Xid on this GPU is not in the catalog: read the kernel log "
                       "around it.", Action.NONE, Blame.UNKNOWN, _scope(g),
                       _ev(g, "DCGM_FI_DEV_XID_ERRORS"))
    return finding(
        "dcgm.xid", info.severity, f"{g.label}: last Xid {code} ({info.meaning})",
        "DCGM_FI_DEV_XID_ERRORS is the last Xid the GPU raised, not a count: when it came "
        f"and how often is in the kernel log. {info.explanation}", info.action, info.blame,
        _scope(g), _ev(g, "DCGM_FI_DEV_XID_ERRORS"))


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
    if (sbe_vol or 0) >= CORRECTED_HIGH or (sbe_agg or 0) >= CORRECTED_HIGH:
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


_NVLINK = ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
           "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
           "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
           "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")


def _nvlink(g: GpuMetrics) -> Finding | None:
    counts = {n: g.values[n] for n in _NVLINK if g.values.get(n)}
    if not counts:
        return None
    recovery = counts.get(_NVLINK[3], 0)
    total = sum(counts.values())
    loud = recovery > 0 or total >= NVLINK_ERRORS_WARN
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
    mask = int(g.values[name])
    bad = mask & (HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE)
    if not bad:
        return None
    what = ", ".join(t for bit, t in _REASONS.items() if mask & bit)
    ev = _ev(g, name, "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL")
    busy = bool(_v(g, "DCGM_FI_DEV_GPU_UTIL"))
    if bad & (HW_THERMAL | HW_POWER_BRAKE) or (bad & HW_SLOWDOWN and busy):
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


_CHECKS: tuple[Callable[[GpuMetrics], Finding | None], ...] = (_xid, _remap, _pcie, _nvlink,
                                                                _clocks)


@rule("dcgm.exporter-fields",
      produces=("dcgm.metrics-healthy", "dcgm.xid", "dcgm.ecc-uncorrectable",
                "dcgm.ecc-correctable-high", "dcgm.remap-failed", "dcgm.remap-pending",
                "dcgm.pcie-replays", "dcgm.nvlink-counters", "dcgm.clock-events"))
def exporter_fields(dcgm_exporter_metrics: ExporterMetrics) -> Iterator[Finding]:
    """Each GPU's (or MIG instance's) error fields: the last Xid through the Xid catalog,
    ECC, row remapping, PCIe replays, NVLink errors and clock-event reasons; healthy
    fields give one ok finding."""
    m = dcgm_exporter_metrics
    found = 0
    for g in m.gpus:
        for f in (*_ecc(g), *(check(g) for check in _CHECKS)):
            if f is not None:
                found += 1
                yield f
    if not found:
        gpus = {g.uuid or g.gpu for g in m.gpus}
        migs = sum(1 for g in m.gpus if g.mig_instance is not None)
        first = next(iter(m.gpus[0].lines.values()), "")
        fields = ", ".join(sorted(f.removeprefix("DCGM_FI_DEV_") for f in m.fields))[:160]
        yield finding(
            "dcgm.metrics-healthy", Severity.OK,
            f"dcgm-exporter: {len(gpus)} GPU(s)"
            + (f", {migs} MIG instance(s)" if migs else "") + ", no error field set",
            f"The exported fields ({fields}) "
            "show no Xid, ECC, remap, replay or slowdown."
            + (f" {m.unreadable} damaged line(s) were skipped." if m.unreadable else ""),
            Action.NONE, Blame.UNKNOWN, evidence=[evidence(SRC, [first])])


# --- the exporter's log ----------------------------------------------------------------------
Visible = tuple[str, list[GpuSighting]]


@rule("dcgm.exporter-log",
      produces=("dcgm.exporter-hostengine-unreachable", "dcgm.exporter-stale",
                "dcgm.exporter-profiling-unsupported", "dcgm.exporter-metrics-file-invalid",
                "dcgm.exporter-unsupported-gpu"))
def exporter_log(dcgm_exporter_log: ExporterLog, visible_gpus: Visible | None = None
                 ) -> Iterator[Finding]:
    """What keeps dcgm-exporter from exporting: no host engine to connect to, a lost
    connection (stale metrics), a profiling module the GPU does not have, a malformed
    counters file, a GPU DCGM does not support. Monitoring problems, not GPU faults."""
    log = dcgm_exporter_log
    names = [g.name for g in (visible_gpus[1] if visible_gpus else ()) if g.name]
    support = next((s for s in map(dcgm_support, names) if s), None)
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
        arch = (f" ({support.architecture})" if support and support.profiling is False
                else "")
        yield finding(
            "dcgm.exporter-profiling-unsupported", Severity.WARNING,
            f"dcgm-exporter: DCGM's profiling (DCP) metrics are not available{arch}",
            "DCGM's profiling module is not loaded: profiling fields (DCGM_FI_PROF_*) exist on "
            "Volta and newer datacenter GPUs only, so on older ones it never loads. The "
            "DCGM_FI_DEV_* fields still work: use a counters file without DCGM_FI_PROF_* "
            f"lines (or run on a supported GPU). {NOT_THE_GPU}", Action.FIX_CONFIG,
            Blame.CONFIG, evidence=[evidence("dcgm_exporter_log", [e.line for e in dcp][:4])])
    yield from _connection(log, support)


def _connection(log: ExporterLog, support) -> Iterator[Finding]:
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
