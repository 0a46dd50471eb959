"""Facts: typed views of a snapshot, parsed once and shared by all rules.

Each fact is computed on first use from one or more sources. A fact whose
sources are absent raises :class:`Missing` with the reason, which the engine
reports as a skipped rule. A malformed source is reported once in
``problems`` and treated as missing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gputriage.errors import InputError, ParseError
from gputriage.logwindow import LogWindow
from gputriage.parsers.base import normalize_bus_id
from gputriage.snapshot import Snapshot

if TYPE_CHECKING:  # parsers are imported when a fact first needs them
    from gputriage.parsers import devices, driver, kernel_events, modules, nvml, pci, systemd
    from gputriage.parsers.nvsmi import SmiReport


class Missing(Exception):
    """A fact cannot be established from the inputs."""


# Facts defined outside this class (next to the rules of one area), by name.
FACT_PROVIDERS: dict[str, Callable[[Facts], Any]] = {}


def fact(name: str) -> Callable[[Callable[[Facts], Any]], Callable[[Facts], Any]]:
    """Register ``func(facts) -> value`` (raising Missing) as the fact ``name``."""

    def register(func: Callable[[Facts], Any]) -> Callable[[Facts], Any]:
        if name in FACT_PROVIDERS or hasattr(Facts, f"_fact_{name}"):
            raise ValueError(f"duplicate fact {name}")
        FACT_PROVIDERS[name] = func
        return func

    return register


def is_fact(name: str) -> bool:
    """Whether a fact of that name exists (for the conformance test)."""
    return hasattr(Facts, f"_fact_{name}") or name in FACT_PROVIDERS


# nvidia-smi outputs, best first: (source, parser module, parser function)
SMI_SOURCES = (("nvidia_smi_q_xml", "nvsmi_xml", "parse_nvsmi_xml"),
               ("nvidia_smi_q", "nvsmi_text", "parse_nvsmi_text"),
               ("nvidia_smi", "nvsmi_table", "parse_nvsmi_table"),
               ("nvidia_smi_csv", "nvsmi_csv", "parse_nvsmi_csv"))


def parser(module: str, func: str) -> Callable[[Any], Any]:
    """A parser function, its module imported on first use."""
    import importlib

    return getattr(importlib.import_module(f"gputriage.parsers.{module}"), func)

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


@dataclass
class Facts:
    """Lazily parsed facts of one host."""

    snapshot: Snapshot
    window: LogWindow = field(default_factory=LogWindow)
    problems: list[str] = field(default_factory=list)
    _cache: dict[str, Any] = field(default_factory=dict)

    def prefill(self, name: str, value: Any) -> None:
        """Supply a fact computed elsewhere (``gputriage logs`` scans files itself)."""
        self._cache[name] = value

    # -- machinery ---------------------------------------------------------------
    def get(self, name: str) -> Any:
        """The fact ``name``, or raise Missing."""
        if name not in self._cache:
            method = getattr(self, f"_fact_{name}", None)
            if method is None and name not in FACT_PROVIDERS:
                import gputriage.hostfacts  # noqa: F401 - registers the area facts
            provider = method or (lambda: FACT_PROVIDERS[name](self))
            try:
                self._cache[name] = provider()
            except Missing as exc:
                self._cache[name] = exc
        value = self._cache[name]
        if isinstance(value, Missing):
            raise value
        return value

    def has(self, name: str) -> bool:
        try:
            self.get(name)
        except Missing:
            return False
        return True

    def maybe(self, name: str, default: Any = None) -> Any:
        try:
            return self.get(name)
        except Missing:
            return default

    def _parse(self, source: str, parser: Callable[[Any], Any], *, as_json: bool = False) -> Any:
        cap = self.snapshot.get(source)
        if cap is None:
            raise Missing(self.snapshot.missing_reason(source))
        try:
            return parser(cap.json() if as_json else cap.text)
        except (ParseError, InputError) as exc:
            if cap.record.get("error"):  # a failed command printed its complaint
                raise Missing(self.snapshot.missing_reason(source)) from None
            msg = f"{cap.origin or source}: {exc}"
            if msg not in self.problems:
                self.problems.append(msg)
            raise Missing(f"{source}: malformed ({exc})") from None

    def lines(self, source: str) -> list[str]:
        text = self.snapshot.text(source) or ""
        return text.splitlines()

    # -- driver stack ----------------------------------------------------------------
    def _fact_kernel_module(self) -> driver.KernelModuleVersion:
        value = self._parse("proc_driver_nvidia_version",
                            parser("driver", "parse_proc_driver_version"))
        if value is None or not value.version:
            raise Missing("proc_driver_nvidia_version: empty")
        return value

    def _fact_module_versions(self) -> driver.ModuleVersions:
        return self._parse("sys_module_nvidia", parser("driver", "parse_sys_module_versions"),
                           as_json=True)

    def _fact_modules(self) -> dict[str, modules.Module]:
        parsed = self._parse("proc_modules", parser("modules", "parse_modules"))
        if not parsed:
            raise Missing("proc_modules: empty")
        return {m.name: m for m in parsed}

    def _fact_libs(self) -> list[driver.LibFile]:
        return self._parse("nvidia_libs", parser("driver", "parse_nvidia_libs"), as_json=True)

    def _fact_nvml(self) -> nvml.NvmlReading:
        return self._parse("nvml", parser("nvml", "parse_nvml"), as_json=True)

    def _fact_smi(self) -> list[tuple[str, SmiReport]]:
        """Every nvidia-smi output we have, best first."""
        reports = []
        reasons = []
        for source, module, func in SMI_SOURCES:
            try:
                reports.append((source, self._parse(source, parser(module, func))))
            except Missing as exc:
                reasons.append(str(exc))
        if not reports:
            raise Missing("; ".join(reasons))
        return reports

    def _fact_gpu_resets(self) -> Any:
        """GPU reset attempts pasted (a ``gputriage.parsers.gpu_reset.ResetLog``)."""
        log = self._parse("gpu_reset", parser("gpu_reset", "parse_gpu_reset"))
        if not log.attempts:
            raise Missing("gpu_reset: no reset attempt in it")
        return log

    def _fact_device_query(self) -> Any:
        """A deviceQuery run (``gputriage.parsers.device_query.DeviceQuery``)."""
        dq = self._parse("device_query", parser("device_query", "parse_device_query"))
        if not dq.lines:
            raise Missing("device_query: empty")
        return dq

    def _fact_driver_events(self) -> list[kernel_events.DriverEvent]:
        """Driver events of the current boot inside the log window (earlier boots are
        history: they never make a GPU lost or the driver broken now)."""
        return [ev for ev in self.get("log_events") if ev.boot == 0]

    def _fact_log_scan(self) -> Any:
        """The kernel log scanned once (a ``gputriage.logscan.LogScan``); callers that
        scanned files themselves (``gputriage logs``) pre-fill this fact."""
        from gputriage.logscan import scan_text

        cap = self.snapshot.get("kernel_log")
        if cap is None:
            raise Missing(self.snapshot.missing_reason("kernel_log"))
        return scan_text(cap.text or "", cap.origin or "kernel_log")

    def _fact_log_events(self) -> list[kernel_events.DriverEvent]:
        """Kernel-log events inside the log window, in log order."""
        return [ev for ev in self.get("log_scan").events if self.window.admits(ev)]

    def _fact_proc_gpus(self) -> list[driver.ProcGpu]:
        return self._parse("proc_driver_nvidia_gpus", parser("driver", "parse_gpus_information"),
                           as_json=True)

    def _fact_driver_loaded(self) -> bool:
        """Whether the nvidia kernel module is loaded, from any source that can tell."""
        mods = self.maybe("modules")
        if mods is not None:
            return "nvidia" in mods
        versions = self.maybe("module_versions")
        if versions is not None and versions.versions:
            return "nvidia" in versions.versions
        if self.has("kernel_module"):
            return True
        cap = self.snapshot.record("proc_driver_nvidia_version")
        if cap and cap.get("error") == "absent" and self.snapshot.manifest is not None:
            return False  # a live snapshot where the file does not exist
        raise Missing("no module list, /sys/module or /proc/driver/nvidia/version")

    # -- hardware --------------------------------------------------------------------
    def _fact_pci(self) -> list[pci.PciFunction]:
        """PCI functions from sysfs; lspci output (bug reports, pastes) otherwise."""
        try:
            functions = self._parse("pci_devices", parser("pci", "parse_pci_tree"), as_json=True)
            self._cache["pci_source"] = "pci_devices"
            return functions
        except Missing as first:
            found: dict[str, pci.PciFunction] = {}
            for source in ("lspci_nvidia", "lspci_mellanox"):
                try:
                    functions = self._parse(source, parser("lspci", "parse_lspci"))
                except Missing:
                    continue
                found.update((f.address, f) for f in functions if f.address)
            if not found:
                raise first from None
            self._cache["pci_source"] = "lspci_nvidia"
            return sorted(found.values(), key=lambda f: f.address)

    def _fact_pci_source(self) -> str:
        """Which source the PCI functions came from (for evidence labels)."""
        self.get("pci")
        return self._cache.get("pci_source", "pci_devices")

    def _fact_pci_gpus(self) -> list[pci.PciFunction]:
        return [f for f in self.get("pci") if f.is_gpu]

    def _fact_has_infiniband(self) -> bool:
        """InfiniBand/RoCE HCAs on the host: HCA ports (sysfs or any ib* tool) or
        an InfiniBand-class PCI function."""
        if self.maybe("ib_ports"):
            return True
        if any(f.is_infiniband for f in self.maybe("pci", [])):
            return True
        if not self.has("pci") and not self.has("ib_ports"):
            raise Missing("no InfiniBand source (sysfs, PCI or ibstat)")
        return False

    def _fact_devnodes(self) -> list[devices.DevNode]:
        return self._parse("dev_nvidia", parser("devices", "parse_devnodes"), as_json=True)

    def _fact_char_majors(self) -> dict[str, int]:
        return self._parse("proc_devices", parser("devices", "parse_proc_devices"))

    def _fact_units(self) -> dict[str, systemd.UnitState]:
        units = {}
        for source, unit in (("systemctl_persistenced", "nvidia-persistenced"),
                             ("systemctl_fabricmanager", "nvidia-fabricmanager")):
            try:
                state = self._parse(source, parser("systemd", "parse_systemctl_show"))
            except Missing:
                continue
            if state is not None:
                units[unit] = state
        if not units:
            raise Missing("no systemd unit state (systemctl show)")
        return units

    def _fact_in_container(self) -> bool:
        text = self.snapshot.text("proc_self_cgroup")
        if text is None:
            raise Missing(self.snapshot.missing_reason("proc_self_cgroup"))
        return bool(CONTAINER_CGROUP.search(text))

    # -- the GPUs as each layer sees them ---------------------------------------------
    def _fact_visible_gpus(self) -> tuple[str, list[GpuSighting]]:
        """GPUs the driver can use, from the most direct source available."""
        reading = self.maybe("nvml")
        if reading is not None and reading.available and reading.device_count is not None:
            return "nvml", [GpuSighting(normalize_bus_id(d.pci_bus_id), "nvml", d.index,
                                        d.name, d.uuid, d.serial, d.minor_number,
                                        d.persistence_mode, f"NVML device {d.index}: {d.name}")
                            for d in reading.devices if not d.error]
        for source, report in self.maybe("smi", []):
            if report.gpus and report.format in ("xml", "text"):
                return source, [_smi_sighting(source, g) for g in report.gpus]
        proc = self.maybe("proc_gpus")
        if proc:
            return "proc_driver_nvidia_gpus", [
                GpuSighting(g.bus_id, "proc_driver_nvidia_gpus", None, g.model, g.uuid,
                            minor=g.device_minor, line=f"{g.bus_id}: {g.model}")
                for g in proc]
        for source, report in self.maybe("smi", []):
            if report.gpus:
                return source, [_smi_sighting(source, g) for g in report.gpus]
        raise Missing("no source lists the driver's GPUs (NVML, nvidia-smi, "
                      "/proc/driver/nvidia/gpus)")

    def _fact_lost_gpus(self) -> dict[str, list[tuple[str, str]]]:
        """Bus id -> [(source, line)] for GPUs some layer reports as lost."""
        lost: dict[str, list[tuple[str, str]]] = {}
        for source, report in self.maybe("smi", []):
            for err in report.errors:
                if err.kind in ("device-handle", "gpu-lost") and err.bus_id:
                    lost.setdefault(err.bus_id, []).append((source, err.line))
        reading = self.maybe("nvml")
        if reading is not None:
            for d in reading.devices:
                if d.error and d.pci_bus_id:
                    lost.setdefault(normalize_bus_id(d.pci_bus_id) or d.pci_bus_id, []).append(
                        ("nvml", f"device {d.index}: {d.error}"))
        for ev in self.maybe("driver_events", []):
            if ev.bus_id and (ev.kind == "fallen-off-bus"
                              or (ev.kind == "xid" and ev.details.get("code") == "79")):
                lost.setdefault(ev.bus_id, []).append(("kernel_log", ev.line))
        return lost


def _smi_sighting(source: str, g: Any) -> GpuSighting:
    return GpuSighting(g.pci_bus_id, source, g.index, g.name, g.uuid, g.serial,
                       g.minor_number, g.persistence_mode,
                       f"GPU {g.index} {g.pci_bus_id or ''} {g.name or ''}".strip())
