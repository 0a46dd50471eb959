"""The resets seen: what re-initialised a GPU, so that the kernel events logged on it
before are history, not current failures.

A reset is a GPU reset (``nvidia-smi -r`` saying "was successfully reset", or the
driver's Xid 154 clearing a recovery action back to None), a driver load (the module's
``NVRM: loading NVIDIA UNIX ... Kernel Module`` banner: every GPU re-initialised) or a
reboot (a new boot in the log). nvidia-smi's reset status (``Reset Required``, ``Drain
and Reset Recommended``, a recovery action other than None) says a GPU still needs
one: whatever the log shows, that GPU's events stay current.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gputriage.facts.table import FactReader, FactTable, Missing
from gputriage.parsers.kernel_fold import recovery_cleared
from gputriage.text.fields import normalize_bus_id, split_lines

if TYPE_CHECKING:
    from gputriage.logscan.events import DriverEvent

__all__ = ["FACTS", "Reset", "Resets", "pending_resets", "resets_in_log",
           "resets_in_reset_log"]

FACTS = FactTable()

GPU_RESET, DRIVER_LOAD, REBOOT = "gpu-reset", "driver-load", "reboot"
# nvidia-smi -q fields (text and XML keys, normalised) that say a reset is still due
_DUE_FIELDS = ("reset required", "drain and reset recommended")
_NONE = {"", "none", "no", "n/a", "0x0"}


@dataclass(frozen=True)
class Reset:
    """One reset: which GPU (None: every GPU), what kind, when and what shows it."""

    bus_id: str | None
    kind: str  # gpu-reset | driver-load | reboot
    time: str | None  # ISO 8601 when known, else as printed; None: not printed
    source: str  # the source that shows it: kernel_log, gpu_reset
    line: str  # the evidence line ("" for a reboot: the new boot itself)
    boot: int | None = None  # its boot in the kernel log; None: not from the log
    lineno: int | None = None
    origin: str | None = None
    uptime_s: float | None = None
    at: datetime | None = None  # absolute time, when derivable

    def note(self) -> str:
        """``ended by gpu-reset at 2024-05-14T08:00:00+00:00 (kernel_log line 812)``."""
        where = f"{self.source} line {self.lineno}" if self.lineno else self.source
        when = self.time or ("a time not printed" if self.boot is not None
                             else "a time not printed, taken as after the log")
        return f"ended by {self.kind} at {when} ({where})"


@dataclass
class Resets:
    """The resets seen, in the order found, and the GPUs nvidia-smi says still need
    one or cannot reach (bus id -> the line that says so)."""

    resets: list[Reset] = field(default_factory=list)
    pending: dict[str, str] = field(default_factory=dict)


def _when(ev: DriverEvent) -> str | None:
    return ev.time.isoformat() if ev.time is not None else ev.timestamp


def _of_event(ev: DriverEvent, bus: str | None, kind: str) -> Reset:
    return Reset(bus, kind, _when(ev), "kernel_log", split_lines(ev.line)[0] if ev.line else "",
                 ev.boot, ev.lineno, ev.origin, ev.uptime_s, ev.time)


def resets_in_log(events: list[DriverEvent]) -> list[Reset]:
    """Driver loads and GPU resets among the kernel log's events (a scan never folds
    these: each is one event, see :mod:`gputriage.parsers.kernel_fold`)."""
    out = []
    for ev in events:
        if ev.kind == "driver-load":
            out.append(_of_event(ev, None, DRIVER_LOAD))
        elif recovery_cleared(ev):
            out.append(_of_event(ev, ev.bus_id, GPU_RESET))
    return out


def _reboots(boots: list[Any]) -> list[Reset]:
    """Each boot after the first in the log: every GPU re-initialised."""
    out = []
    for b in boots[1:]:
        first = getattr(b, "first", None)
        out.append(Reset(None, REBOOT, first.isoformat() if first else None, "kernel_log", "",
                         b.index, at=first))
    return out


def resets_in_reset_log(log: Any) -> list[Reset]:
    """The GPUs an ``nvidia-smi -r`` session reset (a ``parsers.gpu_reset.ResetLog``);
    it prints no time."""
    return [Reset(a.bus_id, GPU_RESET, None, "gpu_reset", a.line)
            for a in log.attempts if a.outcome == "reset" and a.bus_id]


def _due(key: str, value: str) -> bool:
    from gputriage.parsers.nvsmi import norm_key

    k = norm_key(key)
    v = value.strip().lower()
    if k.endswith("gpu recovery action"):
        return v not in _NONE
    return any(k.endswith(f) for f in _DUE_FIELDS) and v.startswith("yes")


def pending_resets(reports: list[tuple[str, Any]], nvml: Any = None) -> dict[str, str]:
    """GPU bus id -> the nvidia-smi (or NVML) line saying it still needs a reset, or that
    it is still lost (no device handle): a reset did not bring it back."""
    out: dict[str, str] = {}
    for _, report in reports:
        for err in report.errors:
            if err.kind in ("device-handle", "gpu-lost") and err.bus_id:
                out.setdefault(err.bus_id, err.line)
    for d in getattr(nvml, "devices", ()):
        bus = normalize_bus_id(d.pci_bus_id) if d.error and d.pci_bus_id else None
        if bus:
            out.setdefault(bus, f"NVML device {d.index}: {d.error}")
    for _, report in reports:
        for g in report.gpus:
            bus = normalize_bus_id(g.pci_bus_id) if g.pci_bus_id else None
            if bus is None or bus in out:
                continue
            for key, value in g.raw.items():
                if isinstance(value, str) and _due(key, value):
                    out[bus] = f"GPU {bus}: {key.replace('/', ': ')}: {value.strip()}"
                    break
    return out


@FACTS.fact("resets_seen", sources=("gpu_reset",))
def resets_seen(facts: FactReader) -> Resets:
    """GPU resets, driver loads and reboots seen in the kernel log and in pasted
    ``nvidia-smi -r`` output, and the GPUs nvidia-smi says still need a reset."""
    out = Resets()
    scan = facts.maybe("log_scan")
    if scan is not None:
        out.resets += resets_in_log(scan.events) + _reboots(scan.boots)
    log = facts.maybe("gpu_reset")
    if log is not None:
        out.resets += resets_in_reset_log(log)
    out.pending = pending_resets(facts.maybe("smi") or [], facts.maybe("nvml"))
    if not (out.resets or out.pending):
        raise Missing("no GPU reset, driver load or reboot seen")
    return out
