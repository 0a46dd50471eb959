"""Driver-stack events in a kernel log: API mismatch, GPU fallen off the bus,
RmInitAdapter failures, no adapter probed, missing GSP firmware, module load
failures and Xid lines.

Accepted line shapes (each prefix optional, stripped in this order): a
markdown ``> `` quote; Talos ``<ip>: kern: <level>: [ts]: ``; dmesg -x
``kern  :warn  : ``; syslog ``Mon dd hh:mm:ss host kernel: `` or ISO
``2024-05-01T10:00:00+0000 host kernel: ``; a bare ``kernel: ``; dmesg
``[ 1234.567890] `` or dmesg -T ``[Fri Aug 30 11:11:22 2024] `` (optionally
followed by ``host kernel: `` as journalctl -o short-monotonic prints).
rsyslog ``#012`` escapes are split into lines. Multi-line messages (API
mismatch, "The NVIDIA GPU ... has fallen off the bus") are joined from
their continuation lines: lines without a timestamp, or with the head's own
timestamp, whose text starts with ``NVRM:``.

The scan streams: it holds at most one pending multi-line message, uses
only bounded regular expressions, and keeps nothing but the events found.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from gputriage.parsers.base import normalize_bus_id

__all__ = ["DriverEvent", "iter_driver_events", "scan_driver_events"]

MAX_LINE = 8192  # longer lines are cut before matching
MAX_CONTINUATION = 8


@dataclass
class DriverEvent:
    """One driver-stack event with the raw line(s) that prove it."""

    kind: str  # api-mismatch | fallen-off-bus | rm-init-adapter-failed | no-adapter-probed
    #            | gsp-firmware-missing | module-load-failed | xid
    line: str  # raw line(s); continuation lines joined with "\n"
    bus_id: str | None = None
    timestamp: str | None = None  # as printed; None when absent
    details: dict[str, str] = field(default_factory=dict)


# --- line prefixes ----------------------------------------------------------------------

_QUOTE = re.compile(r"^\s{0,8}(?:>\s?){1,8}")
_TALOS = re.compile(r"^\S{1,255}: kern:\s{1,4}[a-z]{1,10}: \[(?P<ts>[^\]]{1,64})\]:?\s?")
_FACILITY = re.compile(r"^[a-z]{2,8}\s{0,3}:[a-z]{2,7}\s{0,3}: ")  # dmesg -x
_SYSLOG = re.compile(
    r"^(?P<ts>(?:[A-Z][a-z]{2} [ \d]?\d|\d{4}-\d\d-\d\d[T ])\s?\d\d:\d\d:\d\d"
    r"(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)\s{1,4}")
_HOST_KERNEL = re.compile(r"^\S{1,255} kernel: ?")
_KERNEL_TAG = re.compile(r"^kernel: ?")
_BRACKET = re.compile(r"^\[(?P<ts>\s{0,12}\d{1,12}\.\d{1,9}|[A-Z][a-z]{2} [A-Z][a-z]{2}"
                      r" [ \d]?\d \d\d:\d\d:\d\d \d{4})\]\s?")


_PREFIXES = (_TALOS, _FACILITY, _SYSLOG, _HOST_KERNEL, _KERNEL_TAG, _BRACKET, _HOST_KERNEL)


def _split_prefix(raw: str) -> tuple[tuple[str, ...], str]:
    """A line's printed timestamps (outermost first) and its message text."""
    text = raw.strip()
    m = _QUOTE.match(text)
    if m:
        text = text[m.end():].lstrip()
    stamps: list[str] = []
    for pattern in _PREFIXES:
        m = pattern.match(text)
        if m:
            ts = m.groupdict().get("ts")
            if ts:
                stamps.append(ts.strip())
            text = text[m.end():]
    return tuple(stamps), text.strip()


# --- event patterns ---------------------------------------------------------------------

_XID = re.compile(r"NVRM: Xid \(PCI:(?P<bus>[^)]{0,32})\): (?P<code>\d{1,5}),\s?(?P<rest>.*)")
_XID_PID = re.compile(r"^pid=(?P<pid>'?[^,']{0,32}'?),\s?")
_XID_NAME = re.compile(r"^name=(?P<name>[^,]{0,64}),\s?")
_GPU_BUS = re.compile(r"\bGPU (?:at PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
                      r"(?:\.[0-7])?)")
_DEV_BUS = re.compile(r"^[\w\-]{1,32} (?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
                      r"\.[0-7]): ")
_RMINIT = re.compile(r"RmInitAdapter failed! \((?P<code>0x[0-9a-fA-F]{1,8}:0x[0-9a-fA-F]{1,8}"
                     r":\d{1,6})\)")
_FW_LOAD = re.compile(r"Direct firmware load for (?P<file>nvidia/(?:(?P<ver>[\d.]{1,20})/)?"
                      r"[\w.\-]{1,64}) failed with error (?P<err>-?\d{1,5})")
_VER = r"(\d{1,4}(?:\.\d{1,4}){0,3})"
_MISMATCH_CLIENT = re.compile(r"API mismatch: the client '([^']{0,64})'(?: \(pid (\d{1,10})\))?")
_MISMATCH_CLIENT_VERSION = re.compile(r"has the version " + _VER + r",? but")
_MISMATCH_KERNEL_VERSION = re.compile(r"kernel module has the version " + _VER)
_FALLEN_HEAD = re.compile(r"NVRM: The NVIDIA GPU (?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:"
                          r"[0-9a-fA-F]{2}(?:\.[0-7])?)")
_PCI_ID = re.compile(r"\(PCI ID: (?P<id>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\)")
_MODPROBE = re.compile(r"could not insert '(?P<module>nvidia[\w\-]{0,32})': ?(?P<reason>.{0,200})")
_UDEV_MODPROBE = re.compile(r"Process '\S{0,64}modprobe (?P<module>nvidia[\w\-]{0,32})' failed "
                            r"with exit code (?P<code>\d{1,4})")
_SYMBOL = re.compile(r"^(?P<module>nvidia[\w\-]{0,32}): (?P<reason>Unknown symbol .{0,200}|"
                     r"disagrees about version of symbol .{0,200})")
_NVRM_TEXT = re.compile(r"^NVRM:\s?")


def _bus_near(msg: str) -> str | None:
    m = _GPU_BUS.search(msg) or _DEV_BUS.match(msg)
    return normalize_bus_id(m.group("bus")) if m else None


def _xid_event(line: str, stamp: str | None, m: re.Match[str]) -> DriverEvent:
    rest = m.group("rest")
    details = {"code": m.group("code")}
    p = _XID_PID.match(rest)
    if p:
        details["pid"] = p.group("pid").strip("'")
        rest = rest[p.end():]
    n = _XID_NAME.match(rest)
    if n:
        details["process"] = n.group("name")
        rest = rest[n.end():]
    details["message"] = rest.strip()
    return DriverEvent("xid", line, normalize_bus_id(m.group("bus")), stamp, details)


def _single_line_events(line: str, stamp: str | None, msg: str) -> Iterator[DriverEvent]:
    """Events that a single line proves."""
    if "Xid" in msg:
        m = _XID.search(msg)
        if m:
            yield _xid_event(line, stamp, m)
    if "fallen off the bus" in msg:
        m = _XID.search(msg)
        bus = normalize_bus_id(m.group("bus")) if m else _bus_near(msg)
        yield DriverEvent("fallen-off-bus", line, bus, stamp)
    if "RmInitAdapter failed!" in msg:
        m = _RMINIT.search(msg)
        details = {"code": m.group("code")} if m else {}
        yield DriverEvent("rm-init-adapter-failed", line, _bus_near(msg), stamp, details)
    if "No NVIDIA graphics adapter probed" in msg:
        yield DriverEvent("no-adapter-probed", line, None, stamp)
    if "Direct firmware load for nvidia/" in msg:
        m = _FW_LOAD.search(msg)
        if m:
            details = {"file": m.group("file"), "error": m.group("err")}
            if m.group("ver"):
                details["driver_version"] = m.group("ver")
            yield DriverEvent("gsp-firmware-missing", line, _bus_near(msg), stamp, details)
    if "No firmware image found" in msg:
        fn = msg.removeprefix("NVRM:").strip().partition(":")[0]
        details = {"function": fn} if fn and " " not in fn else {}
        yield DriverEvent("gsp-firmware-missing", line, _bus_near(msg), stamp, details)
    if "nvidia" in msg:
        m = _MODPROBE.search(msg) or _UDEV_MODPROBE.search(msg) or _SYMBOL.match(msg)
        if m:
            details = {k: v.strip() for k, v in m.groupdict().items() if v}
            yield DriverEvent("module-load-failed", line, None, stamp, details)


# --- multi-line messages ----------------------------------------------------------------

class _Pending:
    """A multi-line message being assembled from its continuation lines."""

    def __init__(self, kind: str, line: str, stamps: tuple[str, ...], msg: str) -> None:
        self.kind = kind
        self.lines = [line]
        self.stamps = stamps
        self.texts = [msg]

    def accepts(self, stamps: tuple[str, ...], msg: str) -> bool:
        if len(self.lines) >= MAX_CONTINUATION or not msg.startswith("NVRM:"):
            return False
        if _is_head(msg):
            return False
        return not stamps or stamps == self.stamps

    def add(self, line: str, msg: str) -> None:
        self.lines.append(line)
        self.texts.append(msg)

    def joined(self) -> str:
        return " ".join(_NVRM_TEXT.sub("", t).strip() for t in self.texts)

    @property
    def complete(self) -> bool:
        text = self.texts[-1]
        if self.kind == "api-mismatch":
            return "same version" in text
        return "fallen off the bus" in self.joined()

    def event(self) -> DriverEvent | None:
        joined = " ".join(self.joined().split())
        line = "\n".join(self.lines)
        stamp = self.stamps[0] if self.stamps else None
        if self.kind == "api-mismatch":
            return DriverEvent("api-mismatch", line, None, stamp, _mismatch_details(joined))
        if "fallen off the bus" not in joined:
            return None
        m = _FALLEN_HEAD.search(self.texts[0])
        details = {}
        pci = _PCI_ID.search(joined)
        if pci:
            details["pci_id"] = pci.group("id").lower()
        return DriverEvent("fallen-off-bus", line, normalize_bus_id(m.group("bus")) if m else None,
                           stamp, details)


def _mismatch_details(joined: str) -> dict[str, str]:
    """Versions (and the client, when named) from a joined API-mismatch message."""
    details: dict[str, str] = {}
    c = _MISMATCH_CLIENT.search(joined)
    if c:
        details["client"] = c.group(1)
        if c.group(2):
            details["client_pid"] = c.group(2)
    for key, pattern in (("client_version", _MISMATCH_CLIENT_VERSION),
                         ("kernel_version", _MISMATCH_KERNEL_VERSION)):
        m = pattern.search(joined)
        if m:
            details[key] = m.group(1)
    return details


def _is_head(msg: str) -> bool:
    return "NVRM: API mismatch" in msg or msg.startswith("NVRM: The NVIDIA GPU ") or "Xid (" in msg


def _head_kind(msg: str) -> str | None:
    if "NVRM: API mismatch" in msg:
        return "api-mismatch"
    if "NVRM: The NVIDIA GPU " in msg and _FALLEN_HEAD.search(msg):
        return "fallen-off-bus"
    return None


def _physical_lines(lines: Iterable[str]) -> Iterator[tuple[str, bool]]:
    """Lines with rsyslog ``#012`` escapes split; the flag marks split-off pieces."""
    for raw in lines:
        line = raw.rstrip("\r\n")[:MAX_LINE]
        if "#012" not in line:
            yield line, False
            continue
        for i, piece in enumerate(line.split("#012")):
            yield piece, i > 0


def iter_driver_events(lines: Iterable[str]) -> Iterator[DriverEvent]:
    """Stream driver events from an iterable of log lines (e.g. an open file)."""
    pending: _Pending | None = None
    for line, escaped in _physical_lines(lines):
        stamps, msg = _split_prefix(line)
        if escaped:
            stamps = ()
        if pending is not None:
            if pending.accepts(stamps, msg):
                pending.add(line, msg)
                if pending.complete:
                    ev = pending.event()
                    pending = None
                    if ev is not None:
                        yield ev
                continue
            ev = pending.event()
            pending = None
            if ev is not None:
                yield ev
        if not msg:
            continue
        kind = _head_kind(msg)
        if kind is not None:
            pending = _Pending(kind, line, stamps, msg)
            if pending.complete:
                ev = pending.event()
                pending = None
                if ev is not None:
                    yield ev
            continue
        yield from _single_line_events(line, stamps[0] if stamps else None, msg)
    if pending is not None:
        ev = pending.event()
        if ev is not None:
            yield ev


def scan_driver_events(text: str) -> list[DriverEvent]:
    """All driver events in a kernel log's text, in log order; never raises."""
    if not text:
        return []
    return list(iter_driver_events(io.StringIO(text)))
