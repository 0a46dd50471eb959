"""What later log lines add to an event: the rows of
:data:`gputriage.parsers.kernel_table.EVENTS` name one of these.

A :class:`Follow` keeps an emitted event open for a few lines: a call trace after a
hung task (does it run through nvidia code?), an SXid's severity and data lines,
an AER report's status and error-bit lines, a hardware error record or a GSP core
dump, one event per record. A :class:`Message` is a message the driver prints over
several ``NVRM:`` lines (API mismatch, "The NVIDIA GPU ... has fallen off the bus"),
joined into one event.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from gputriage.parsers.kernel_host import AER_KEY, aer_detail, hw_detail
from gputriage.parsers.kernel_model import DriverEvent, LogLine, make_event
from gputriage.parsers.kernel_patterns import (
    FALLEN_HEAD,
    NV_FRAME,
    PCI_ID,
    SXID,
    SXID_CONT,
    mismatch_details,
    nvrm_text,
)
from gputriage.parsers.kernel_probe import (
    BAR_HEAD,
    LEGACY_HEAD,
    bar_continues,
    bar_message,
    gpu_notice,
    legacy_complete,
    legacy_message,
)
from gputriage.text.fields import normalize_bus_id
from gputriage.vocabulary import EventKind

__all__ = ["AER_REPORT", "API_MISMATCH", "BAR_INVALID", "CALL_TRACE", "CORE_DUMP",
           "FALLEN_OFF_BUS", "HW_RECORD", "LEGACY_GPU", "SXID_LINES", "Follow", "Message",
           "OpenEvent", "Verdict", "starts_message"]

TRACE_WINDOW = 30  # lines after a hung task / soft lockup searched for nvidia frames
MAX_GROUP = 64  # lines joined into one GSP core-dump event or hardware error record
AER_LINES = 8  # lines after "PCIe Bus Error" searched for its status and error bits
SXID_WINDOW = 4  # lines after an SXid searched for its severity and data lines


class Verdict(Enum):
    """What an open event makes of a line."""

    KEEP = "keep"  # not its line: stay open
    TAKE = "take"  # its line (joined to the event)
    CLOSE = "close"  # the event is complete; the line is not its


@dataclass
class OpenEvent:
    """An emitted event that later lines may still complete (kept in log order)."""

    event: DriverEvent
    follow: Follow
    until: int  # the last line number it may take
    key: str = ""  # the prefix its lines start with
    last: int = 0  # the line number of its last line
    count: int = 1  # its lines


class Follow:
    """How an event of one pattern takes later lines. ``passive``: it looks at every
    line and takes none (so it is offered lines another event took); ``context``:
    the scanner must hand over the lines after a line that opens it, whatever they
    hold; ``starts``: a literal such a line holds (None: any line of its row);
    ``exclusive``: a new one replaces the one open."""

    passive = False
    context = False
    exclusive = False
    starts: str | None = None

    def open(self, ev: DriverEvent, line: LogLine) -> OpenEvent | None:
        raise NotImplementedError

    def offer(self, o: OpenEvent, line: LogLine) -> Verdict:
        raise NotImplementedError


class _CallTrace(Follow):
    """A hung task or soft lockup: ``in_nvidia="yes"`` when a call-trace line within
    :data:`TRACE_WINDOW` lines names nvidia code."""

    passive = context = exclusive = True

    def open(self, ev: DriverEvent, line: LogLine) -> OpenEvent | None:
        return OpenEvent(ev, self, (line.lineno or 0) + TRACE_WINDOW)

    def offer(self, o: OpenEvent, line: LogLine) -> Verdict:
        if "Modules linked in" not in line.msg and NV_FRAME.search(line.msg):
            o.event.details["in_nvidia"] = "yes"
            return Verdict.CLOSE
        return Verdict.KEEP


class _SxidLines(Follow):
    """An SXid's "Severity ... Engine instance" and "Data" lines (same switch, code)."""

    def open(self, ev: DriverEvent, line: LogLine) -> OpenEvent | None:
        if "severity" not in ev.details:
            return None
        return OpenEvent(ev, self, (line.lineno or 0) + SXID_WINDOW)

    def offer(self, o: OpenEvent, line: LogLine) -> Verdict:
        m = SXID.search(line.msg) if "SXid" in line.msg else None
        cont = SXID_CONT.match(m.group("rest").strip()) if m else None
        if not (m and cont and normalize_bus_id(m.group("bus")) == o.event.bus_id
                and m.group("code") == o.event.details.get("code")):
            return Verdict.KEEP
        o.event.line += "\n" + line.text
        for key, group in (("severity_level", "lvl"), ("engine_instance", "eng"),
                           ("subengine_instance", "sub"), ("data", "data")):
            if cont.group(group):
                o.event.details[key] = cont.group(group)
        return Verdict.TAKE


class _AerReport(Follow):
    """The status/mask and error-bit lines of a "PCIe Bus Error" report (lines of the
    same device within :data:`AER_LINES` lines)."""

    context = True
    starts = "PCIe Bus Error"

    def open(self, ev: DriverEvent, line: LogLine) -> OpenEvent | None:
        if self.starts not in line.msg:
            return None
        key = AER_KEY.match(line.msg)
        if not key:
            return None
        return OpenEvent(ev, self, (line.lineno or 0) + AER_LINES, key.group(0))

    def offer(self, o: OpenEvent, line: LogLine) -> Verdict:
        if not line.msg.startswith(o.key):
            return Verdict.KEEP
        if not aer_detail(line.msg, o.event.details):
            return Verdict.CLOSE  # the device's next message: the report is complete
        o.event.line += "\n" + line.text
        return Verdict.TAKE


class _Record(Follow):
    """Consecutive lines that start with the same prefix: one record, one event (at
    most :data:`MAX_GROUP` lines); ``add`` notes what each line adds."""

    def __init__(self, key: Callable[[DriverEvent, LogLine], str | None],
                 add: Callable[[OpenEvent, str], None]) -> None:
        self.key = key
        self.add = add

    def open(self, ev: DriverEvent, line: LogLine) -> OpenEvent | None:
        key = self.key(ev, line)
        if not key:
            return None
        lineno = line.lineno or 0
        return OpenEvent(ev, self, lineno + 1, key, lineno)

    def offer(self, o: OpenEvent, line: LogLine) -> Verdict:
        lineno = line.lineno or 0
        if not (line.msg.startswith(o.key) and lineno - o.last <= 1 and o.count < MAX_GROUP):
            return Verdict.CLOSE
        o.event.line += "\n" + line.text
        o.count += 1
        o.last = lineno
        o.until = lineno + 1
        self.add(o, line.msg)
        return Verdict.TAKE


def _hw_key(ev: DriverEvent, line: LogLine) -> str | None:
    return ev.details.pop("key", None)


def _hw_add(o: OpenEvent, msg: str) -> None:
    hw_detail(msg, o.event.details)


def _dump_key(ev: DriverEvent, line: LogLine) -> str | None:
    if "kflcnCoreDump" not in line.msg:
        return None
    function, _, rest = line.msg.partition(":")
    return function + ":" + rest.partition(":")[0]


def _dump_add(o: OpenEvent, msg: str) -> None:
    o.event.details["lines"] = str(o.count)


CALL_TRACE: Follow = _CallTrace()
SXID_LINES: Follow = _SxidLines()
AER_REPORT: Follow = _AerReport()
HW_RECORD: Follow = _Record(_hw_key, _hw_add)
CORE_DUMP: Follow = _Record(_dump_key, _dump_add)


# --- messages over several lines -----------------------------------------------------

class Message:
    """A message printed over several ``NVRM:`` lines: when it is complete, and the
    event its joined text proves (None: it proves none)."""

    def complete(self, texts: list[str]) -> bool:
        raise NotImplementedError

    def event(self, head: LogLine, lines: list[str], texts: list[str]) -> DriverEvent | None:
        raise NotImplementedError

    def continues(self, msg: str) -> bool:
        """Whether an ``NVRM:`` line may be the message's next line."""
        return True


class _ApiMismatch(Message):
    def complete(self, texts: list[str]) -> bool:
        return "same version" in texts[-1]

    def event(self, head: LogLine, lines: list[str], texts: list[str]) -> DriverEvent | None:
        joined = " ".join(nvrm_text(texts).split())
        return make_event(EventKind.API_MISMATCH, head, None, mismatch_details(joined),
                          "\n".join(lines))


class _FallenOffBus(Message):
    """``NVRM: The NVIDIA GPU <bus> ...``: fallen off the bus, or (the open kernel module)
    not supported because the GPU has no GSP."""

    def complete(self, texts: list[str]) -> bool:
        text = nvrm_text(texts)
        return "fallen off the bus" in text or "nvidia.com" in texts[-1]

    def event(self, head: LogLine, lines: list[str], texts: list[str]) -> DriverEvent | None:
        joined = " ".join(nvrm_text(texts).split())
        m = FALLEN_HEAD.search(texts[0])
        bus = normalize_bus_id(m.group("bus")) if m else None
        if "fallen off the bus" not in joined:
            return gpu_notice(joined, head, bus, lines)
        details = {}
        pci = PCI_ID.search(joined)
        if pci:
            details["pci_id"] = pci.group("id").lower()
        return make_event(EventKind.FALLEN_OFF_BUS, head, bus, details, "\n".join(lines))


class _BarInvalid(Message):
    """The invalid PCI I/O region message: the BAR lines that name the regions and what
    the driver adds about them (a 64-bit BAR above 4 GB, the BIOS)."""

    def complete(self, texts: list[str]) -> bool:
        return False  # it ends at the first line that is not its own

    def continues(self, msg: str) -> bool:
        return bar_continues(msg)

    def event(self, head: LogLine, lines: list[str], texts: list[str]) -> DriverEvent | None:
        return bar_message(head, lines, texts)


class _LegacyGpu(Message):
    """A GPU this driver branch left to a legacy driver ("... will ignore this GPU")."""

    def complete(self, texts: list[str]) -> bool:
        return legacy_complete(texts)

    def event(self, head: LogLine, lines: list[str], texts: list[str]) -> DriverEvent | None:
        return legacy_message(head, lines, texts)


API_MISMATCH: Message = _ApiMismatch()
FALLEN_OFF_BUS: Message = _FallenOffBus()
BAR_INVALID: Message = _BarInvalid()
LEGACY_GPU: Message = _LegacyGpu()


def starts_message(msg: str) -> bool:
    """Whether a line starts a message of its own (so it continues none)."""
    return ("NVRM: API mismatch" in msg or msg.startswith("NVRM: The NVIDIA GPU ")
            or "Xid (" in msg or BAR_HEAD in msg or LEGACY_HEAD.match(msg) is not None)
