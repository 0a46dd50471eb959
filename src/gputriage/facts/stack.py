"""Facts of the driver stack and of the GPUs as each layer of it reports them: the
kernel module and its version, loaded modules, userspace libraries, NVML, every
nvidia-smi output, PCI functions, device nodes, systemd units, the kernel log's
events, and the GPUs visible or lost."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from gputriage.facts.table import FactReader, FactTable, Missing
from gputriage.text.fields import normalize_bus_id, split_lines

if TYPE_CHECKING:  # parsers are imported when a fact first needs them
    from gputriage.facts.window import WindowReport
    from gputriage.logscan import events as kernel_events
    from gputriage.parsers import devices, driver, modules, pci, systemd
    from gputriage.parsers.nvsmi import SmiReport

__all__ = ["CONTAINER_CGROUP", "DRIVER_QUERIES", "FACTS", "SMI_SOURCES", "GpuSighting"]

FACTS = FactTable()

# nvidia-smi outputs, best first (each parsed by the parser its source declares)
SMI_SOURCES = ("nvidia_smi_q_xml", "nvidia_smi_q", "nvidia_smi", "nvidia_smi_csv")

# commands that query the driver: one killed at its timeout means a wedged driver
DRIVER_QUERIES = ("nvidia_smi_q_xml", "nvidia_smi", "nvidia_smi_topo", "nvml")

CONTAINER_CGROUP = re.compile(r"docker|kubepods|containerd|libpod|crio|lxc", re.IGNORECASE)


@dataclass
class GpuSighting:
    """One GPU as some layer of the stack reports it."""

    bus_id: str | None
    source: str
    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    minor: int | None = None
    persistence_mode: bool | None = None
    line: str = ""


# -- inputs of the run itself ------------------------------------------------------------
@FACTS.fact("window")
def window(facts: FactReader) -> Any:
    """The kernel-log window findings are judged in (a ``LogWindow``)."""
    return facts.window


@FACTS.fact("source_records")
def source_records(facts: FactReader) -> dict[str, dict]:
    """Each source's manifest record (rc, error kind, timing) by name; empty for pastes."""
    manifest = facts.snapshot.manifest or {}
    return dict(manifest.get("sources") or {})


@FACTS.fact("host_name", sources=("hostname",))
def host_name(facts: FactReader) -> str:
    """The host's name: the snapshot manifest's, else the hostname source."""
    name = (facts.snapshot.manifest or {}).get("host") or (facts.text("hostname") or "").strip()
    if not name:
        raise Missing("no host name (manifest or /proc/sys/kernel/hostname)")
    return str(name)


# -- driver stack ----------------------------------------------------------------------
@FACTS.fact("kernel_module", sources=("proc_driver_nvidia_version",))
def kernel_module(facts: FactReader) -> driver.KernelModuleVersion:
    """The loaded NVIDIA kernel module's version line."""
    value = facts.get("proc_driver_nvidia_version")
    if value is None or not value.version:
        raise Missing("proc_driver_nvidia_version: empty")
    return value


@FACTS.fact("module_versions", sources=("sys_module_nvidia",))
def module_versions(facts: FactReader) -> driver.ModuleVersions:
    """Version and init state of each loaded nvidia* module (/sys/module)."""
    return facts.get("sys_module_nvidia")


@FACTS.fact("modules", sources=("proc_modules",))
def loaded_modules(facts: FactReader) -> dict[str, modules.Module]:
    """Loaded kernel modules by name."""
    parsed = facts.get("proc_modules")
    if not parsed:
        raise Missing("proc_modules: empty")
    return {m.name: m for m in parsed}


@FACTS.fact("libs", sources=("nvidia_libs",))
def libs(facts: FactReader) -> list[driver.LibFile]:
    """Userspace driver libraries and the versions their file names carry."""
    return facts.get("nvidia_libs")


@FACTS.fact("libnvidia_ml_targets", sources=("nvidia_libs",))
def libnvidia_ml_targets(facts: FactReader) -> set[str]:
    """File names the ``libnvidia-ml.so.1`` links point to: the library the loader
    picks when several versions are installed."""
    return facts.parse("nvidia_libs", _nvml_link_targets, as_json=True)


def _nvml_link_targets(doc: Any) -> set[str]:
    """File names that links called ``libnvidia-ml.so.1`` point to."""
    links = doc.get("links") if isinstance(doc, dict) else None
    if not isinstance(links, dict):
        return set()
    return {str(t).rsplit("/", 1)[-1] for k, t in links.items()
            if str(k).endswith("libnvidia-ml.so.1")}


@FACTS.fact("hung_driver_queries", sources=DRIVER_QUERIES)
def hung_driver_queries(facts: FactReader) -> dict[str, dict[str, Any]]:
    """Driver queries (nvidia-smi, NVML) killed at their timeout: source -> its
    record, in :data:`DRIVER_QUERIES` order; empty when none hung."""
    records = {source: facts.record(source) or {} for source in DRIVER_QUERIES}
    return {source: rec for source, rec in records.items() if rec.get("error") == "timeout"}


@FACTS.fact("smi", sources=SMI_SOURCES)
def smi(facts: FactReader) -> list[tuple[str, SmiReport]]:
    """Every nvidia-smi output we have, best first."""
    reports = []
    reasons = []
    for source in SMI_SOURCES:
        try:
            reports.append((source, facts.get(source)))
        except Missing as exc:
            reasons.append(str(exc))
    if not reports:
        raise Missing("; ".join(reasons))
    return reports


@FACTS.fact("gpu_resets", sources=("gpu_reset",))
def gpu_resets(facts: FactReader) -> Any:
    """GPU reset attempts pasted (a ``gputriage.parsers.gpu_reset.ResetLog``)."""
    log = facts.get("gpu_reset")
    if not log.attempts:
        raise Missing("gpu_reset: no reset attempt in it")
    return log


@FACTS.fact("device_query", sources=("device_query",))
def device_query(facts: FactReader) -> Any:
    """A deviceQuery run (``gputriage.parsers.device_query.DeviceQuery``)."""
    from gputriage.parsers.device_query import parse_device_query

    dq = facts.parse("device_query", parse_device_query)
    if not dq.lines:
        raise Missing("device_query: empty")
    return dq


@FACTS.fact("log_scan", sources=("kernel_log",))
def log_scan(facts: FactReader) -> Any:
    """The kernel log scanned once (a ``gputriage.logscan.LogScan``); callers that
    scanned files themselves (``gputriage logs``) pre-fill this fact."""
    cap = facts.snapshot.get("kernel_log")
    if cap is None:  # (the scanner not even imported: a job's inputs never need it)
        raise Missing(facts.snapshot.missing_reason("kernel_log"))
    scanned = getattr(cap, "scan", None)  # a large log scanned whole (ingest.streamed)
    if scanned is not None:
        return scanned
    from gputriage.logscan import scan_text

    return scan_text(cap.text or "", cap.origin or "kernel_log", now=_collected(facts))


def _collected(facts: FactReader) -> datetime | None:
    """When a snapshot was collected (its manifest's ``created``): the reference of its
    kernel log's year-less stamps. None for pastes, which carry no such time."""
    created = (facts.snapshot.manifest or {}).get("created")
    try:
        when = datetime.fromisoformat(str(created)) if created else None
    except ValueError:
        return None
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when


# "<stamp> <host> kernel:" / "<stamp> <host> <program>[pid]:" (syslog, journalctl), and
# "<host> kernel:" where the paste kept the host but cut the time
_LOG_HOST = re.compile(r"(?m)^[ \t]{0,4}(?:(?:[A-Z][a-z]{2} [ 0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9]"
                       r"[0-9](?:\.[0-9]{1,9})?|"
                       r"[0-9]{4}-[0-9][0-9]-[0-9][0-9][T ][0-9][0-9]:[0-9][0-9]:[0-9][0-9][0-9.,:+"
                       r"Z-]{0,20})[ \t]{1,4}"
                       r"(?P<host>[A-Za-z][\w.-]{0,62})[ \t](?:kernel|[\w.@-]{1,40}\[[0-9]{1,10}\])"
                       r"|(?P<bare>[A-Za-z][\w.-]{0,62})[ \t]kernel):")
LOG_HOST_BYTES = 64 << 10  # of the kernel log read for the host its lines name


@FACTS.fact("log_host", sources=("kernel_log",))
def log_host(facts: FactReader) -> str:
    """The host every syslog- or journal-framed line of the kernel log names (a paste
    of another machine's journal names that machine)."""
    cap = facts.snapshot.get("kernel_log")
    head = getattr(cap, "head", "")  # a large log scanned whole: its head (ingest.streamed)
    text = (head + (facts.text("kernel_log") or ""))[:LOG_HOST_BYTES]
    hosts = {m.group("host") or m.group("bare") for m in _LOG_HOST.finditer(text)}
    if len(hosts) != 1:
        raise Missing("kernel_log: no single host named by its lines")
    return hosts.pop()


@FACTS.fact("log_events")
def log_events(facts: FactReader) -> list[kernel_events.DriverEvent]:
    """Kernel-log events inside the log window, in log order; a ``--boot`` the log does
    not hold is a usage error (``NoSuchBoot``), never an empty, healthy window."""
    scan = facts.get("log_scan")
    facts.window.check_boot(scan.boots)
    return [ev for ev in scan.events if facts.window.admits(ev)]


# problem lines of the readers that say part of an input was left out
_NOT_READ_MARKS = ("only the last", "not read", "not a kernel log", "unrecognised content",
                   "binary data")

@FACTS.fact("not_read")
def not_read(facts: FactReader) -> list[str]:
    """What the judgement leaves out, and why, one line each: inputs or parts of them
    not read (caps, budgets, refused inputs), kernel-log lines that could not be
    decoded, and the events the log window (``--since``, ``--boot``) excludes."""
    out = [p for p in facts.snapshot.problems if any(m in p for m in _NOT_READ_MARKS)]
    for name, cap in sorted(facts.snapshot.captures.items()):
        rec = cap.record or {}
        if rec.get("truncated") and "origin" not in rec:  # cut by the collector
            out.append(f"{name}: longer than the collection cap; only its tail was read")
    for source, report in facts.maybe("smi", []):
        if report.headerless:  # a section pasted alone: read, but on which GPU?
            out.append(f"{source}: a section pasted without its 'GPU <bus id>' header: "
                       "which GPU it describes could not be told")
    scan = facts.maybe("log_scan")
    if scan is not None:
        facts.window.check_boot(scan.boots)
        out.extend(p for p in scan.problems if p not in out)
        if scan.skipped:
            out.append(f"kernel log: {scan.skipped:,} candidate line"
                       f"{'s' if scan.skipped != 1 else ''} cut or not decodable, not judged")
        excluded = facts.window.excluded(scan.events)
        report = facts.maybe("log_window")
        said = report.line() if report is not None else None
        if said:  # the window holds nothing the log has, or could not be read: say how
            excluded = [ln for ln in excluded if not ln.startswith("--since")] + [said]
        out.extend(excluded)
    return out


@FACTS.fact("log_window")
def log_window(facts: FactReader) -> WindowReport:
    """What ``--since`` / ``--boot`` let in and left out of the kernel log, and whether
    the log reaches into the window: its last NVIDIA-relevant record, its collection
    (a snapshot's time) or the last write of its files (``log_modified``) at or after
    ``--since``; without a collection or write time (a pipe) it counts as reached
    (Missing without a window option)."""
    scan = facts.get("log_scan")
    ends = max((b.last for b in scan.boots if b.last is not None), default=None,
               key=_utc)
    written = facts.maybe("log_modified")
    known = [t for t in (_collected(facts), written) if t is not None]
    report = facts.window.report(scan.events, ends, max(known, default=None, key=_utc))
    if report is None:
        raise Missing("no --since or --boot window")
    return report


@FACTS.fact("log_modified", sources=("kernel_log",))
def log_modified(facts: FactReader) -> datetime:
    """When the files the kernel log was read from were last written (the latest);
    callers that read files themselves (``gputriage logs``) pre-fill it."""
    import os

    cap = facts.snapshot.get("kernel_log")
    origins = (cap.origin or "").split(", ") if cap is not None else []
    times = []
    for origin in origins:
        try:
            if os.path.isfile(origin):
                times.append(os.stat(origin).st_mtime)
        except (OSError, ValueError):
            continue
    if not times:
        raise Missing("kernel_log: not read from a file")
    return datetime.fromtimestamp(max(times), timezone.utc)


def _utc(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


@FACTS.fact("driver_events")
def driver_events(facts: FactReader) -> list[kernel_events.DriverEvent]:
    """Driver events of the current boot inside the log window (earlier boots are
    history: they never make a GPU lost or the driver broken now)."""
    return [ev for ev in facts.get("log_events") if ev.boot == 0]


@FACTS.fact("proc_gpus", sources=("proc_driver_nvidia_gpus",))
def proc_gpus(facts: FactReader) -> list[driver.ProcGpu]:
    """Each GPU as /proc/driver/nvidia/gpus describes it."""
    return facts.get("proc_driver_nvidia_gpus")


@FACTS.fact("driver_loaded", sources=("proc_driver_nvidia_version",))
def driver_loaded(facts: FactReader) -> bool:
    """Whether the nvidia kernel module is loaded, from any source that can tell."""
    mods = facts.maybe("modules")
    if mods is not None:
        return "nvidia" in mods
    versions = facts.maybe("module_versions")
    if versions is not None and versions.versions:
        return "nvidia" in versions.versions
    if facts.has("kernel_module"):
        return True
    record = facts.record("proc_driver_nvidia_version")
    if record and record.get("error") == "absent" and facts.snapshot.manifest is not None:
        return False  # a live snapshot where the file does not exist
    raise Missing("no module list, /sys/module or /proc/driver/nvidia/version")


# -- hardware --------------------------------------------------------------------------
@FACTS.fact("pci_listing", sources=("pci_devices", "lspci_nvidia", "lspci_mellanox"))
def pci_listing(facts: FactReader) -> tuple[str, list[pci.PciFunction]]:
    """(source, PCI functions): sysfs, or lspci output (bug reports, pastes) otherwise."""
    try:
        return "pci_devices", facts.get("pci_devices")
    except Missing as first:
        found: dict[str, pci.PciFunction] = {}
        for source in ("lspci_nvidia", "lspci_mellanox"):
            try:
                functions = facts.get(source)
            except Missing:
                continue
            found.update((f.address, f) for f in functions if f.address)
        if not found:
            raise first from None
        return "lspci_nvidia", sorted(found.values(), key=lambda f: f.address)


@FACTS.fact("pci")
def pci_functions(facts: FactReader) -> list[pci.PciFunction]:
    """PCI functions of GPUs and NICs."""
    return facts.get("pci_listing")[1]


@FACTS.fact("pci_source")
def pci_source(facts: FactReader) -> str:
    """Which source the PCI functions came from (for evidence labels)."""
    return facts.get("pci_listing")[0]


@FACTS.fact("pci_gpus")
def pci_gpus(facts: FactReader) -> list[pci.PciFunction]:
    """The GPUs on the PCI bus."""
    return [f for f in facts.get("pci") if f.is_gpu]


@FACTS.fact("has_infiniband")
def has_infiniband(facts: FactReader) -> bool:
    """InfiniBand/RoCE HCAs on the host: HCA ports (sysfs or any ib* tool) or an
    InfiniBand-class PCI function."""
    if facts.maybe("ib_ports"):
        return True
    if any(f.is_infiniband for f in facts.maybe("pci", [])):
        return True
    if not facts.has("pci") and not facts.has("ib_ports"):
        raise Missing("no InfiniBand source (sysfs, PCI or ibstat)")
    return False


@FACTS.fact("devnodes", sources=("dev_nvidia",))
def devnodes(facts: FactReader) -> list[devices.DevNode]:
    """/dev/nvidia* character devices."""
    return facts.get("dev_nvidia")


@FACTS.fact("char_majors", sources=("proc_devices",))
def char_majors(facts: FactReader) -> dict[str, int]:
    """Character device majors by driver name (/proc/devices)."""
    return facts.get("proc_devices")


@FACTS.fact("units", sources=("systemctl_persistenced", "systemctl_fabricmanager"))
def units(facts: FactReader) -> dict[str, systemd.UnitState]:
    """nvidia-persistenced and nvidia-fabricmanager unit states."""
    found = {}
    for source, unit in (("systemctl_persistenced", "nvidia-persistenced"),
                         ("systemctl_fabricmanager", "nvidia-fabricmanager")):
        try:
            state = facts.get(source)
        except Missing:
            continue
        if state is not None:
            found[unit] = state
    if not found:
        raise Missing("no systemd unit state (systemctl show)")
    return found


@FACTS.fact("container_cgroup_lines", sources=("proc_self_cgroup",))
def container_cgroup_lines(facts: FactReader) -> list[str]:
    """The lines of /proc/self/cgroup that name a container runtime (empty: none)."""
    text = facts.text("proc_self_cgroup")
    if text is None:
        raise Missing(facts.snapshot.missing_reason("proc_self_cgroup"))
    return [ln for ln in split_lines(text) if CONTAINER_CGROUP.search(ln)]


@FACTS.fact("in_container")
def in_container(facts: FactReader) -> bool:
    """Whether gputriage ran inside a container."""
    return bool(facts.get("container_cgroup_lines"))


# -- the GPUs as each layer sees them -------------------------------------------------
@FACTS.fact("visible_gpus")
def visible_gpus(facts: FactReader) -> tuple[str, list[GpuSighting]]:
    """GPUs the driver can use, from the most direct source available."""
    reading = facts.maybe("nvml")
    if reading is not None and reading.available and reading.device_count is not None:
        return "nvml", [GpuSighting(normalize_bus_id(d.pci_bus_id), "nvml", d.index,
                                    d.name, d.uuid, d.serial, d.minor_number,
                                    d.persistence_mode, f"NVML device {d.index}: {d.name}")
                        for d in reading.devices if not d.error]
    for source, report in facts.maybe("smi", []):
        if report.gpus and report.format in ("xml", "text"):
            return source, [_smi_sighting(source, g) for g in report.gpus]
    proc = facts.maybe("proc_gpus")
    if proc:
        return "proc_driver_nvidia_gpus", [
            GpuSighting(g.bus_id, "proc_driver_nvidia_gpus", None, g.model, g.uuid,
                        minor=g.device_minor, line=f"{g.bus_id}: {g.model}")
            for g in proc]
    for source, report in facts.maybe("smi", []):
        if report.gpus:
            return source, [_smi_sighting(source, g) for g in report.gpus]
    raise Missing("no source lists the driver's GPUs (NVML, nvidia-smi, "
                  "/proc/driver/nvidia/gpus)")


@FACTS.fact("lost_gpus")
def lost_gpus(facts: FactReader) -> dict[str, list[tuple[str, str]]]:
    """Bus id -> [(source, line)] for GPUs some layer reports as lost."""
    from gputriage.knowledge.xid import xid_for_event

    fell_off = xid_for_event("fallen-off-bus")
    lost_code = str(fell_off.code) if fell_off else None
    lost: dict[str, list[tuple[str, str]]] = {}
    for source, report in facts.maybe("smi", []):
        for err in report.errors:
            if err.kind in ("device-handle", "gpu-lost") and err.bus_id:
                lost.setdefault(err.bus_id, []).append((source, err.line))
    reading = facts.maybe("nvml")
    if reading is not None:
        for d in reading.devices:
            if d.error and d.pci_bus_id:
                lost.setdefault(normalize_bus_id(d.pci_bus_id) or d.pci_bus_id, []).append(
                    ("nvml", f"device {d.index}: {d.error}"))
    for ev in facts.maybe("driver_events", []):
        if ev.bus_id and (ev.kind == "fallen-off-bus"
                          or (ev.kind == "xid" and ev.details.get("code") == lost_code)):
            lost.setdefault(ev.bus_id, []).append(("kernel_log", ev.line))
    return lost


def _smi_sighting(source: str, g: Any) -> GpuSighting:
    return GpuSighting(g.pci_bus_id, source, g.index, g.name, g.uuid, g.serial,
                       g.minor_number, g.persistence_mode,
                       f"GPU {g.index} {g.pci_bus_id or ''} {g.name or ''}".strip())
