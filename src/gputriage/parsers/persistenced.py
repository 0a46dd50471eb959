"""The journal of nvidia-persistenced (``journalctl -u nvidia-persistenced``).

Two kinds of records, in journal or syslog form (``May 31 05:33:40 host prog[pid]:
message``, ``short-iso`` times too), or bare (``nvidia-persistenced[pid]: message``):

* the daemon's own: ``Started (PID)``, ``device 0000:3d:00.0 - registered``,
  ``Received signal 15``, ``Shutdown (PID)``, ``Failed to ...``;
* systemd's about the unit: ``Starting NVIDIA Persistence Daemon...``,
  ``nvidia-persistenced.service: start operation timed out. Terminating.``,
  ``Main process exited, code=...``, ``Failed with result 'timeout'``, ``Stopped ...``.

Each record becomes a :class:`PdEntry` with an ``event`` (see :data:`EVENTS`); other
lines are ignored. A text with no record at all raises ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.parsers.systemd import JOURNAL_LINE, UNIT_LIFECYCLE
from gputriage.text.fields import ParseError, normalize_bus_id, split_lines, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["ENDS", "EVENTS", "STARTS", "PdEntry", "PersistencedLog", "claim_persistenced_journal",
           "parse_persistenced_journal"]

_DAEMON = r"nvidia-persistenced"
_UNIT_WORDS = r"(?:nvidia-persistenced(?:\.service)?|NVIDIA Persistence Daemon)"
_BARE = re.compile(r"^\s{0,4}(?P<prog>nvidia-persistenced|systemd)(?:\[(?P<pid>[0-9]{1,10})\])?:"
                   r"\s{0,4}(?P<msg>.{0,4000})$")
_ABOUT_UNIT = re.compile(_UNIT_WORDS, re.IGNORECASE)
_BOOT_MARK = re.compile(r"^-- (?:Boot [0-9a-f]{1,64}|Logs begin|Journal begins|No entries|Reboot)")

# event -> pattern on the message, first match wins (order matters)
EVENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("timeout", re.compile(r"start operation timed out|Failed with result 'timeout'",
                           re.IGNORECASE)),
    ("device-failed", re.compile(r"^device \S{1,32} - failed", re.IGNORECASE)),
    ("failed", re.compile(r"^Failed\b|failed to initiali[sz]e|Main process exited|"
                          r"Control process exited|Failed with result", re.IGNORECASE)),
    ("signal", re.compile(r"^Received signal (?P<signal>[0-9]{1,3})", re.IGNORECASE)),
    ("shutdown", re.compile(r"^Shutdown\b", re.IGNORECASE)),
    *UNIT_LIFECYCLE,
    ("registered", re.compile(r"^device \S{1,32} - (?:registered|persistence mode enabled)",
                              re.IGNORECASE)),
)
STARTS = frozenset({"starting", "started"})
# what ends a run: the daemon or systemd saying it is gone, or a failure of the start
ENDS = frozenset({"signal", "shutdown", "stopped", "failed", "timeout"})
_DEVICE = re.compile(r"^device (?P<bus>[0-9A-Fa-f:.]{7,20}) - ")


@dataclass
class PdEntry:
    """One record: time as printed, program, pid, message, event."""

    time: str | None
    program: str  # nvidia-persistenced | systemd
    pid: int | None
    message: str
    line: str
    event: str | None = None
    signal: int | None = None  # the number of a received signal
    device: str | None = None  # the PCI address a device record names


@dataclass
class PersistencedLog:
    """The daemon's and systemd's records about it, in order."""

    entries: list[PdEntry] = field(default_factory=list)

    def having(self, *events: str) -> list[PdEntry]:
        """The entries whose event is one of ``events``."""
        return [e for e in self.entries if e.event in events]

    @property
    def last_run(self) -> list[PdEntry]:
        """The records from the last start on (systemd's ``Starting`` and the daemon's
        ``Started`` open one run); all records when no start is logged."""
        starts = [i for i, e in enumerate(self.entries) if e.event in STARTS]
        if not starts:
            return list(self.entries)
        first = k = starts[-1]
        while k > 0 and self.entries[k - 1].event not in ENDS:
            k -= 1
            if self.entries[k].event in STARTS:
                first = k
        return self.entries[first:]

    @property
    def ended(self) -> list[PdEntry]:
        """The records that ended the last logged run (stopped, killed or failed, with no
        start after them); empty while it runs."""
        return [e for e in self.last_run if e.event in ENDS]

    @property
    def devices(self) -> list[str]:
        """The devices the daemon registered, in order, each once."""
        found: list[str] = []
        for entry in self.having("registered"):
            if entry.device and entry.device not in found:
                found.append(entry.device)
        return found


def _entry(time: str | None, prog: str, pid: str | None, message: str, line: str) -> PdEntry:
    text = message.strip()
    entry = PdEntry(time, prog, strict_int(pid, signed=False), text, line.rstrip())
    for name, pattern in EVENTS:
        m = pattern.search(text)
        if m:
            entry.event = name
            if name == "signal":
                entry.signal = strict_int(m.group("signal"), signed=False)
            break
    dev = _DEVICE.match(text)
    entry.device = normalize_bus_id(dev.group("bus")) if dev else None
    return entry


def _record(line: str) -> PdEntry | None:
    m = JOURNAL_LINE.match(line) or _BARE.match(line)
    if m is None:
        return None
    prog = m.group("prog")
    if prog != _DAEMON and not (prog == "systemd" and _ABOUT_UNIT.search(m.group("msg"))):
        return None
    return _entry(m.groupdict().get("time"), prog, m.group("pid"), m.group("msg"), line)


def parse_persistenced_journal(text: str) -> PersistencedLog:
    """Parse the records of nvidia-persistenced and of systemd about its unit.

    Empty text (or only ``-- No entries --``) gives an empty log; a text without any
    record raises ParseError.
    """
    log = PersistencedLog()
    if not text or not text.strip():
        return log
    saw_marker = False
    for raw in split_lines(text):
        line = raw.rstrip()
        if _BOOT_MARK.match(line.strip()):
            saw_marker = True
            continue
        entry = _record(line)
        if entry is not None:
            log.entries.append(entry)
    if not log.entries and not saw_marker:
        raise ParseError("not a journal of nvidia-persistenced: no 'nvidia-persistenced[pid]:' "
                         "record and no systemd record about its unit")
    return log


# --- recognising it in a paste -------------------------------------------------------
_CLAIM = re.compile(r"(?:^|\s)nvidia-persistenced(?:\[[0-9]+\])?:"
                    rf"|(?:^|\s)systemd(?:\[1\])?: .*{_UNIT_WORDS}")


_GATE = Gate(_CLAIM)


@gated_by(_GATE)
def claim_persistenced_journal(doc: PasteDoc) -> None:
    """The daemon's records and systemd's records about its unit, line by line."""
    if not _GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if doc.owner[i] is None and _CLAIM.search(ln):
            doc.owner[i] = "persistenced_journal"
