"""NVIDIA-relevant events in kernel log lines: Xid and SXid, the driver stack
(API mismatch, fallen off the bus, RmInitAdapter, no adapter probed, GSP
firmware, GSP RPC timeouts and errors, reset required, module load failures),
NVLink, nvidia-peermem, PCIe AER and bandwidth, mlx5 link state, segfaults in
GPU libraries, hung tasks and soft lockups.

Accepted line shapes (each prefix optional, stripped in this order): a
markdown ``> `` quote; a ``<6>`` printk level; Talos ``<ip>: kern: <level>:
[ts]: ``; dmesg -x ``kern  :warn  : ``; syslog ``Mon dd hh:mm:ss[.us] host
kernel: `` or ISO ``2024-05-01T10:00:00+0000 host kernel: ``; a bare
``kernel: ``; dmesg ``[ 1234.567890] `` or dmesg -T ``[Fri Aug 30 11:11:22
2024] `` (optionally followed by ``host kernel: ``). rsyslog ``#012`` escapes
are split into lines. Multi-line messages (API mismatch, "The NVIDIA GPU ...
has fallen off the bus") are joined from their continuation lines; SXid
"Severity ... Engine instance" / "Data" lines join their SXid; a GSP falcon
core dump is one event; a hung task or soft lockup is marked
``in_nvidia="yes"`` when a call-trace line within 30 lines names nvidia code.

This module is pure: lines in, events out. Reading files, formats, absolute
times and boots are :mod:`gputriage.logscan`'s job; :func:`scan_driver_events`
delegates to it. The extractor streams: it holds at most one multi-line
message and a few open events, uses bounded regular expressions only, and
keeps nothing but the events found.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from gputriage.parsers.base import normalize_bus_id
from gputriage.parsers.kernel_host import (
    AER_KEY,
    aer_detail,
    aer_driver_event,
    hw_detail,
    hw_error_event,
    link_event,
    peermem_event,
)
from gputriage.parsers.kernel_patterns import (
    _AER_BUS_ERROR,
    _AER_RECEIVED,
    _BANDWIDTH,
    _DEV_BUS,
    _FALLEN_HEAD,
    _FW_LOAD,
    _GPU_LIB,
    _GSP_FAILURE,
    _HUNG,
    _LINK,
    _LOCKUP,
    _MLX5_LINK,
    _MODPROBE,
    _NV_FRAME,
    _NVLINK_FAILURE,
    _NVRM_TEXT,
    _PCI_ID,
    _RMINIT,
    _RPC_FUNCTION,
    _RPC_TIMEOUT,
    _SEGFAULT,
    _SXID,
    _SXID_CONT,
    _SYMBOL,
    _UDEV_MODPROBE,
    _XID,
    _bus_near,
    _gpu_details,
    _head_kind,
    _is_head,
    _mismatch_details,
    _sxid_details,
    _xid_details,
    split_prefix,
)  # the line-prefix and message patterns, and their pure helpers

__all__ = ["DriverEvent", "EventExtractor", "LogLine", "iter_driver_events",
           "scan_driver_events", "split_escaped", "split_prefix"]

MAX_LINE = 8192  # longer lines are cut before matching
MAX_CONTINUATION = 8
TRACE_WINDOW = 30  # lines after a hung task / soft lockup searched for nvidia frames
MAX_GROUP = 64  # lines joined into one GSP core-dump event or hardware error record
AER_LINES = 8  # lines after "PCIe Bus Error" searched for its status and error bits


@dataclass
class DriverEvent:
    """One NVIDIA-relevant event with the raw line(s) that prove it."""

    kind: str  # api-mismatch | fallen-off-bus | rm-init-adapter-failed | no-adapter-probed
    #   | gsp-firmware-missing | module-load-failed | xid | sxid | gsp-rpc-timeout | gsp-error
    #   | gpu-reset-required | peermem-invalid-context | nvlink-error | pcie-aer
    #   | pcie-bandwidth-limited | mlx5-link | segfault | hung-task | soft-lockup
    #   | peermem-load-failed | hw-error | link-state
    line: str  # raw line(s); continuation lines joined with "\n"
    bus_id: str | None = None
    timestamp: str | None = None  # as printed; None when absent
    details: dict[str, str] = field(default_factory=dict)
    time: datetime | None = None  # absolute, timezone-aware, when derivable
    uptime_s: float | None = None  # seconds since boot when printed
    boot: int = 0  # 0 = the last boot in the input, -1 the one before, ...
    lineno: int | None = None  # 1-based line number in its input
    origin: str | None = None  # the file or input the line came from


@dataclass
class LogLine:
    """One physical log line as the extractor sees it, with what the reader knows."""

    text: str  # the raw line (evidence)
    msg: str  # the message, prefixes stripped
    stamps: tuple[str, ...] = ()  # printed timestamps, outermost first
    lineno: int | None = None
    time: datetime | None = None
    uptime_s: float | None = None
    boot: int = 0
    origin: str | None = None
    bus_hint: str | None = None  # e.g. a /dev/kmsg DEVICE=+pci:... record
    escaped: bool = False  # a piece split off at an rsyslog #012 escape


def split_escaped(line: str) -> list[tuple[str, bool]]:
    """A line cut to MAX_LINE and split at rsyslog ``#012`` escapes; the flag
    marks split-off pieces."""
    line = line.rstrip("\r\n")[:MAX_LINE]
    if "#012" not in line:
        return [(line, False)]
    return [(piece, i > 0) for i, piece in enumerate(line.split("#012"))]


# --- the extractor ----------------------------------------------------------------------

class _Pending:
    """A multi-line message being assembled from its continuation lines."""

    def __init__(self, kind: str, line: LogLine) -> None:
        self.kind = kind
        self.head = line
        self.lines = [line.text]
        self.stamps = line.stamps
        self.texts = [line.msg]
        self.last_lineno = line.lineno

    def accepts(self, line: LogLine) -> bool:
        msg = line.msg
        if len(self.lines) >= MAX_CONTINUATION or not msg.startswith("NVRM:"):
            return False
        if _is_head(msg):
            return False
        if (line.lineno is not None and self.last_lineno is not None
                and line.lineno - self.last_lineno > 1):
            return False
        return not line.stamps or line.stamps == self.stamps

    def add(self, line: LogLine) -> None:
        self.lines.append(line.text)
        self.texts.append(line.msg)
        self.last_lineno = line.lineno

    def joined(self) -> str:
        return " ".join(_NVRM_TEXT.sub("", t).strip() for t in self.texts)

    @property
    def complete(self) -> bool:
        if self.kind == "api-mismatch":
            return "same version" in self.texts[-1]
        return "fallen off the bus" in self.joined()

    def event(self) -> DriverEvent | None:
        joined = " ".join(self.joined().split())
        line = "\n".join(self.lines)
        if self.kind == "api-mismatch":
            return _make("api-mismatch", self.head, None, _mismatch_details(joined), line)
        if "fallen off the bus" not in joined:
            return None
        m = _FALLEN_HEAD.search(self.texts[0])
        details = {}
        pci = _PCI_ID.search(joined)
        if pci:
            details["pci_id"] = pci.group("id").lower()
        return _make("fallen-off-bus", self.head,
                     normalize_bus_id(m.group("bus")) if m else None, details, line)



def _make(kind: str, line: LogLine, bus: str | None, details: dict[str, str] | None = None,
          text: str | None = None) -> DriverEvent:
    return DriverEvent(kind, line.text if text is None else text, bus,
                       line.stamps[0] if line.stamps else None, details or {}, line.time,
                       line.uptime_s, line.boot, line.lineno, line.origin)


class _Open:
    """An emitted event that later lines may still complete (kept in log order)."""

    def __init__(self, event: DriverEvent, mode: str, until: int, key: str = "") -> None:
        self.event = event
        self.mode = mode  # "trace" | "sxid" | "group" | "aer"
        self.until = until
        self.key = key
        self.last = event.lineno or 0
        self.count = 1


class EventExtractor:
    """Turns a stream of :class:`LogLine` into events, in log order.

    ``feed`` returns the events that are final; ``finish`` returns the rest.
    """

    def __init__(self) -> None:
        self._pending: _Pending | None = None
        self._open: list[_Open] = []
        self._queue: deque[DriverEvent] = deque()
        self._seq = 0

    def feed(self, line: LogLine) -> list[DriverEvent]:
        """Consume one line; return the events that no later line can change."""
        self._seq += 1
        if line.lineno is None:
            line.lineno = self._seq
        if not self._continue_open(line):
            self._feed_pending(line)
        return self._release()

    def finish(self) -> list[DriverEvent]:
        """Flush the multi-line message and the open events at the end of input."""
        if self._pending is not None:
            self._push(self._pending.event())
            self._pending = None
        self._open.clear()
        return self._release()

    # -- internals ----------------------------------------------------------------------
    def _push(self, ev: DriverEvent | None) -> None:
        if ev is not None:
            self._queue.append(ev)

    def _release(self) -> list[DriverEvent]:
        held = {id(o.event) for o in self._open}
        out = []
        while self._queue and id(self._queue[0]) not in held:
            out.append(self._queue.popleft())
        return out

    def _continue_open(self, line: LogLine) -> bool:
        """Offer a line to the open events; True when one consumed it."""
        lineno = line.lineno or 0
        self._open = [o for o in self._open if lineno <= o.until]
        consumed = False
        for o in list(self._open):
            if o.mode == "trace":
                if "Modules linked in" not in line.msg and _NV_FRAME.search(line.msg):
                    o.event.details["in_nvidia"] = "yes"
                    self._open.remove(o)
            elif o.mode == "group" and not consumed:
                if line.msg.startswith(o.key) and lineno - o.last <= 1 and o.count < MAX_GROUP:
                    o.event.line += "\n" + line.text
                    o.count += 1
                    o.last = lineno
                    o.until = lineno + 1
                    if o.event.kind == "hw-error":
                        hw_detail(line.msg, o.event.details)
                    else:
                        o.event.details["lines"] = str(o.count)
                    consumed = True
                else:
                    self._open.remove(o)
            elif o.mode == "aer" and not consumed:
                if line.msg.startswith(o.key):
                    if aer_detail(line.msg, o.event.details):
                        o.event.line += "\n" + line.text
                        consumed = True
                    else:  # the device's next message: this report is complete
                        self._open.remove(o)
            elif o.mode == "sxid" and not consumed:
                m = _SXID.search(line.msg) if "SXid" in line.msg else None
                cont = _SXID_CONT.match(m.group("rest").strip()) if m else None
                if (m and cont and normalize_bus_id(m.group("bus")) == o.event.bus_id
                        and m.group("code") == o.event.details.get("code")):
                    o.event.line += "\n" + line.text
                    for key, group in (("severity_level", "lvl"), ("engine_instance", "eng"),
                                       ("subengine_instance", "sub"), ("data", "data")):
                        if cont.group(group):
                            o.event.details[key] = cont.group(group)
                    consumed = True
        return consumed

    def _feed_pending(self, line: LogLine) -> None:
        if self._pending is not None:
            if self._pending.accepts(line):
                self._pending.add(line)
                if self._pending.complete:
                    self._push(self._pending.event())
                    self._pending = None
                return
            self._push(self._pending.event())
            self._pending = None
        if not line.msg:
            return
        kind = _head_kind(line.msg)
        if kind is not None:
            self._pending = _Pending(kind, line)
            if self._pending.complete:
                self._push(self._pending.event())
                self._pending = None
            return
        for ev in _single_line_events(line):
            self._push(ev)
            lineno = line.lineno or 0
            if ev.kind in ("hung-task", "soft-lockup"):
                self._open = [o for o in self._open if o.mode != "trace"]
                self._open.append(_Open(ev, "trace", lineno + TRACE_WINDOW))
            elif ev.kind == "sxid" and "severity" in ev.details:
                self._open.append(_Open(ev, "sxid", lineno + 4))
            elif ev.kind == "pcie-aer" and "PCIe Bus Error" in line.msg:
                aer = AER_KEY.match(line.msg)
                if aer:
                    self._open.append(_Open(ev, "aer", lineno + AER_LINES, aer.group(0)))
            elif ev.kind == "hw-error" and ev.details.get("key"):
                self._open.append(_Open(ev, "group", lineno + 1, ev.details.pop("key")))
            elif ev.kind == "gsp-error" and "kflcnCoreDump" in line.msg:
                key = line.msg.partition(":")[0] + ":" + line.msg.partition(":")[2].partition(
                    ":")[0]
                self._open.append(_Open(ev, "group", lineno + 1, key))


def _single_line_events(line: LogLine) -> list[DriverEvent]:
    """Events that a single line proves (at most one kind per line, except that an
    Xid 79 line is also a fallen-off-bus event)."""
    msg = line.msg
    out: list[DriverEvent] = []
    if "Xid" in msg:
        m = _SXID.search(msg)
        if m:
            rest = m.group("rest").strip()
            if not rest.startswith("Data"):  # a lone data dump proves nothing new
                details = _sxid_details(msg, m)
                cont = _SXID_CONT.match(rest)
                if cont and cont.group("lvl"):
                    details.update(severity_level=cont.group("lvl"),
                                   engine_instance=cont.group("eng"))
                out.append(_make("sxid", line, normalize_bus_id(m.group("bus")), details))
            return out
        m = _XID.search(msg)
        if m:
            out.append(_make("xid", line, normalize_bus_id(m.group("bus")),
                             _xid_details(m.group("code"), m.group("rest"))))
            if "fallen off the bus" in msg:
                out.append(_make("fallen-off-bus", line, out[0].bus_id))
            return out
    ev = _other_event(line, msg)
    if ev is not None:
        out.append(ev)
    return out


def _other_event(line: LogLine, msg: str) -> DriverEvent | None:  # noqa: C901 - a dispatch table
    """The one non-Xid event a line proves, if any."""
    hint = line.bus_hint
    if "fallen off the bus" in msg:
        return _make("fallen-off-bus", line, _bus_near(msg, hint))
    if "RmInitAdapter failed!" in msg:
        m = _RMINIT.search(msg)
        return _make("rm-init-adapter-failed", line, _bus_near(msg, hint),
                     {"code": m.group("code")} if m else {})
    if "No NVIDIA graphics adapter probed" in msg:
        return _make("no-adapter-probed", line, None)
    if "Direct firmware load for nvidia/" in msg:
        m = _FW_LOAD.search(msg)
        if m:
            details = {"file": m.group("file"), "error": m.group("err")}
            if m.group("ver"):
                details["driver_version"] = m.group("ver")
            return _make("gsp-firmware-missing", line, _bus_near(msg, hint), details)
    if "No firmware image found" in msg:
        fn = msg.removeprefix("NVRM:").strip().partition(":")[0]
        return _make("gsp-firmware-missing", line, _bus_near(msg, hint),
                     {"function": fn} if fn and " " not in fn else {})
    if "peer" in msg:
        found = peermem_event(msg)
        if found:
            return _make(found[0], line, found[1], found[2])
    if "nvidia" in msg:
        m = _MODPROBE.search(msg) or _UDEV_MODPROBE.search(msg) or _SYMBOL.match(msg)
        if m:
            return _make("module-load-failed", line, None,
                         {k: v.strip() for k, v in m.groupdict().items() if v})
    if "_kgspLogXid119" in msg or "RPC history (CPU -> GSP)" in msg:
        return _gsp_dump(line, msg, hint)
    low = msg.lower()
    if "gsp" in low or "rpc" in low or "kflcn" in low:
        ev = _gsp_event(line, msg, low, hint)
        if ev is not None:
            return ev
    if "NV_ERR_RESET_REQUIRED" in msg or "gpu reset required" in low:
        return _make("gpu-reset-required", line, _bus_near(msg, hint), _gpu_details(msg))
    if "peermem" in msg and "invalid context" in msg:
        return _make("peermem-invalid-context", line, _bus_near(msg, hint), _gpu_details(msg))
    if "nvlink" in low and _NVLINK_FAILURE.search(msg):
        details = _gpu_details(msg)
        lk = _LINK.search(msg)
        if lk:
            details["link"] = str(int(lk.group("link")))
        return _make("nvlink-error", line, _bus_near(msg, hint), details)
    if "error received" in msg or "PCIe Bus Error" in msg:
        return _aer_event(line, msg, hint)
    if "AER" in msg:
        found = aer_driver_event(msg)
        if found:
            return _make(found[0], line, found[1], found[2])
    if "PCIe bandwidth" in msg:
        m = _BANDWIDTH.search(msg)
        if m or "PCIe bandwidth limited" in msg:
            details = {k: v for k, v in (m.groupdict() if m else {}).items() if v}
            if "at" in details:
                details["limiting_link"] = normalize_bus_id(details.pop("at")) or ""
            return _make("pcie-bandwidth-limited", line, _bus_near(msg, hint), details)
    if "mlx5_core" in msg:
        m = _MLX5_LINK.search(msg)
        if m:
            details = {"state": m.group("state").lower()}
            if m.group("ifname"):
                details["interface"] = m.group("ifname")
            return _make("mlx5-link", line, normalize_bus_id(m.group("bus")), details)
    if "carrier" in msg or "mlx5_core" in msg or "NETDEV WATCHDOG" in msg:
        found = link_event(msg)
        if found:
            return _make(found[0], line, found[1], found[2])
    if "EDAC" in msg or "Hardware Error" in msg or "Memory failure" in msg \
            or "hardware memory error" in msg:
        found = hw_error_event(msg)
        if found:
            return _make(found[0], line, found[1], found[2])
    if "segfault at" in msg:
        m = _SEGFAULT.search(msg)
        if m and (_GPU_LIB.search(m.group("lib") or "") or _GPU_LIB.search(m.group("proc"))):
            details = {"process": m.group("proc"), "pid": m.group("pid"),
                       "address": m.group("addr")}
            if m.group("lib"):
                details["library"] = m.group("lib")
            return _make("segfault", line, None, details)
    if "blocked for more than" in msg:
        m = _HUNG.search(msg)
        if m:
            return _make("hung-task", line, None, {
                "process": m.group("proc"), "pid": m.group("pid"), "seconds": m.group("secs"),
                "in_nvidia": "no"})
    if "soft lockup" in msg:
        m = _LOCKUP.search(msg)
        if m:
            return _make("soft-lockup", line, None, {
                "process": m.group("proc"), "pid": m.group("pid"), "cpu": m.group("cpu"),
                "seconds": m.group("secs"), "in_nvidia": "no"})
    return None


def _gsp_event(line: LogLine, msg: str, low: str, hint: str | None) -> DriverEvent | None:
    """GSP RPC timeouts and GSP errors (lines that are not Xid lines)."""
    t = _RPC_TIMEOUT.search(msg)
    if t or "gsp rpc timeout" in low or "_kgsprpcrecvpoll" in low \
            or "timeout waiting for rpc from gsp" in low or "rate limiting gsp rpc" in low:
        details = _gpu_details(msg)
        if t:
            details["timeout_s"] = t.group("secs")
        f = _RPC_FUNCTION.search(msg)
        if f:
            details["rpc_function"] = f.group("name")
        if "rate limiting" in low:
            details["rate_limited"] = "yes"
        return _make("gsp-rpc-timeout", line, _bus_near(msg, hint), details)
    if "kflcncoredump" in low:  # a GSP falcon core dump, one event per dump
        return _make("gsp-error", line, _bus_near(msg, hint), {**_gpu_details(msg), "lines": "1"})
    if "gsp" not in low or "rpc history" in low or "rpc event history" in low \
            or "rpc buffer contains" in low:
        return None
    if _GSP_FAILURE.search(msg):
        return _make("gsp-error", line, _bus_near(msg, hint), _gpu_details(msg))
    return None


def _gsp_dump(line: LogLine, msg: str, hint: str | None) -> DriverEvent | None:
    """The driver's GSP timeout banner or RPC history dump: one event per dump (its
    header line), a GSP RPC timeout on the GPU named even without the Xid 119 line."""
    if "GSP Timeout" not in msg and "RPC history" not in msg:
        return None  # the banner's other lines
    return _make("gsp-rpc-timeout", line, _bus_near(msg, hint),
                 {**_gpu_details(msg), "dump": "yes"})


def _aer_event(line: LogLine, msg: str, hint: str | None) -> DriverEvent | None:
    m = _AER_RECEIVED.search(msg)
    if m:
        bus = normalize_bus_id(m.group("bus")) if m.group("bus") else None
        if bus is None and m.group("id"):
            rid = int(m.group("id"), 16)
            bus = f"0000:{rid >> 8:02x}:{(rid >> 3) & 0x1F:02x}.{rid & 7}"
        details = {"severity": m.group("sev")}
        reporter = _DEV_BUS.match(msg)
        if reporter:
            details["reported_by"] = normalize_bus_id(reporter.group("bus")) or ""
        return _make("pcie-aer", line, bus or _bus_near(msg, hint), details)
    m = _AER_BUS_ERROR.search(msg)
    if m:
        details = {"severity": m.group("sev").strip(), "type": m.group("type").strip()}
        if m.group("agent"):
            details["agent"] = m.group("agent").strip()
        return _make("pcie-aer", line, _bus_near(msg, hint), details)
    return None


def iter_driver_events(lines: Iterable[str]) -> Iterator[DriverEvent]:
    """Stream driver events from an iterable of log lines (e.g. an open file).

    Events carry the printed timestamp and the line number; absolute times and
    boots need :func:`gputriage.logscan.scan_text` / ``scan_paths``."""
    ex = EventExtractor()
    for lineno, raw in enumerate(lines, 1):
        for piece, escaped in split_escaped(raw):
            stamps, msg, _ = split_prefix(piece)
            yield from ex.feed(LogLine(piece, msg, () if escaped else stamps, lineno,
                                       escaped=escaped))
    yield from ex.finish()


def scan_driver_events(text: str) -> list[DriverEvent]:
    """All events in a kernel log's text, in log order, with times and boots;
    never raises (same as ``gputriage.logscan.scan_text(text).events``)."""
    if not text:
        return []
    from gputriage.logscan import scan_text

    return scan_text(text).events
