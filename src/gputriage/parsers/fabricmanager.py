"""The NVIDIA fabric manager's own log and its systemd journal.

Two line formats, possibly mixed in one paste:

* the log file (``/var/log/fabricmanager.log``):
  ``[Feb 25 2025 13:59:45] [INFO] [tid 1803] message``, a message possibly
  going on over following lines that do not start with ``[``;
* journal / syslog records of the unit (``journalctl -u nvidia-fabricmanager``):
  ``Sep 18 03:19:01 host nv-fabricmanager[4177]: message`` (the month may be
  localised, e.g. ``11月 15``; ``short-iso`` times are read too), or bare
  ``nv-fabricmanager: message`` lines as people paste them (after any prefix: a
  node's address from ``talosctl logs``, an elided host), with indented
  continuation lines, or the messages alone (behind any prefix) when they are ones
  only the fabric manager and its start script print (``Detected Pre-NVL5 system``,
  ``[NV_WARN_NOTHING_TO_DO]``, ``Kernel module "ib_umad" has not been loaded``).

Each record becomes an :class:`FmEntry` with a level and, when the message is
one gputriage knows, an ``event`` (see :data:`EVENTS`). Other lines (shell
prompts, prose) are ignored; a text with no record at all raises ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.parsers.systemd import JOURNAL_LINE, UNIT_LIFECYCLE
from gputriage.text.fields import ParseError, normalize_bus_id, split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["EVENTS", "LIFECYCLE", "LOG_LINE", "FmEntry", "FmLog", "claim_fabricmanager_log",
           "is_fm_message", "parse_fabricmanager_log"]

_FM_LINE = re.compile(r"^\s{0,4}\[(?P<time>[^\]\n]{1,40})\]\s{0,4}\[(?P<level>[A-Za-z]{1,12})\]"
                      r"\s{0,4}(?:\[tid\s{0,4}[0-9]{1,12}\]\s{0,4})?(?P<msg>.{0,4000})$")
LOG_LINE = _FM_LINE  # "[time] [LEVEL] [tid N] message": the NVIDIA daemons' log line (IMEX too)
_BARE = re.compile(r"^\s{0,4}(?:(?:[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[\w.-]{1,64}):\s{1,4})?"
                   r"(?P<prog>nv-fabricmanager|nvidia-fabricmanager(?:-start\.sh)?|"
                   r"nvlsm|systemd)(?:\[(?P<pid>[0-9]{1,10})\])?:\s{0,4}(?P<msg>.{0,4000})$")
# messages only the fabric manager and its start script print, behind any prefix (a
# journal prefix stripped, elided or of an unknown tool)
_FM_MESSAGE = re.compile(r"(?:^|(?<=\s))(?P<msg>(?:Detected (?:Pre-)?NVL5\+? system|request to "
                         r"query NVSwitch device information|Successfully configured all the "
                         r"available (?:NVSwitches|GPUs)|Fabric ?Manager version|Polling for at "
                         r"least one Infiniband device before starting Fabric ?Manager|Kernel "
                         r"module \W?ib_umad\W? has not been loaded|"
                         r"\S[^\n]{0,200}\[NV_WARN_NOTHING_TO_DO\])[^\n]{0,4000})$", re.IGNORECASE)
_JOB_FAILED = re.compile(r"^\s{0,4}(?P<msg>Job for nvidia-fabricmanager\S{0,16} failed.{0,400})$")
_BOOT_MARK = re.compile(r"^-- (?:Boot [0-9a-f]{1,64}|Logs begin|Journal begins|No entries|Reboot)")

_LEVELS = {"INFO": "info", "DEBUG": "debug", "WARN": "warning", "WARNING": "warning",
           "ERROR": "error", "ERR": "error", "FATAL": "fatal", "CRITICAL": "fatal",
           "NOTICE": "info"}

# event -> pattern, first match wins (order matters)
EVENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nothing-to-do", re.compile(r"NV_WARN_NOTHING_TO_DO|Nothing to do", re.IGNORECASE)),
    # NVL5+ systems: the start script's pre-check, or NVLSM itself (through libibumad)
    ("umad-missing", re.compile(r"ib_umad\W? has not been loaded|is ib_umad module loaded|"
                                r"umad_init: can't read ABI version|modprobe ib_umad",
                                re.IGNORECASE)),
    ("uncorrectable", re.compile(r"\buncorrectable\b", re.IGNORECASE)),
    ("nvswitch-nonfatal", re.compile(r"non-?fatal error", re.IGNORECASE)),
    ("nvswitch-fatal", re.compile(r"NVSwitch.{0,200}\bfatal\b|\bfatal\b.{0,200}NVSwitch",
                                  re.IGNORECASE)),
    ("version-mismatch", re.compile(r"version.{0,80}(?:mismatch|do(?:es)?(?: not|n't) match|"
                                    r"not compatible|incompatible)", re.IGNORECASE)),
    ("link-training-failed", re.compile(r"train\w{0,4}.{0,40}fail|fail\w{0,4}.{0,40}train",
                                        re.IGNORECASE)),
    # NVLS multicast teams the fabric manager lost track of (the release of a team it does
    # not know, a GPU handle missing from a team); a failed setup alone is multicast-error
    ("multicast-team", re.compile(r"fail\w{0,3} to (?:release|find).{0,80}multicast team|"
                                  r"cannot find the team", re.IGNORECASE)),
    ("multicast-error", re.compile(r"multicast.{0,200}(?:fail|error)|(?:fail|error).{0,200}"
                                   r"multicast", re.IGNORECASE)),
    ("start-failed", re.compile(r"\" failed! Exit code|Control process exited.{0,80}FAILURE|"
                                r"Main process exited.{0,80}FAILURE|Failed with result|"
                                r"Failed to start|Job for nvidia-fabricmanager\S{0,16} failed|"
                                r"failed to (?:start|initiali[sz]e)", re.IGNORECASE)),
    ("configured", re.compile(r"Successfully configured all the available", re.IGNORECASE)),
    ("pre-nvl5", re.compile(r"Detected Pre-NVL5 system", re.IGNORECASE)),
    ("nvl5", re.compile(r"Detected NVL5 system", re.IGNORECASE)),
    *UNIT_LIFECYCLE,
    ("error", re.compile(r"\b(?:error|failed|failure|fatal)\b", re.IGNORECASE)),
)
# events that say whether the service runs, in the order they happen
LIFECYCLE = frozenset({"starting", "started", "configured", "stopping", "stopped",
                       "start-failed", "nothing-to-do"})
_ERROR_EVENTS = frozenset({"uncorrectable", "nvswitch-fatal", "nvswitch-nonfatal",
                           "version-mismatch", "link-training-failed", "multicast-error",
                           "multicast-team", "umad-missing", "start-failed", "error"})
_SWITCH_BUS = re.compile(r"NVSwitch\s{1,4}pci\s{1,4}bus\s{1,4}id\s{1,4}"
                         r"(?P<bus>[0-9A-Fa-f:.]{7,20})", re.IGNORECASE)
_CODE = re.compile(r"(?:non-?fatal|fatal) error (?P<code>[0-9]{1,6})", re.IGNORECASE)
_PORT = re.compile(r"\bport (?P<port>[0-9]{1,4})\b", re.IGNORECASE)


@dataclass
class FmEntry:
    """One fabric manager record: time as printed, level, program, message, event."""

    time: str | None
    level: str  # debug | info | warning | error | fatal
    program: str | None  # nv-fabricmanager, nvidia-fabricmanager-start.sh, systemd, ...
    message: str
    line: str  # the record as printed (continuations joined with newlines)
    event: str | None = None
    nvswitch: str | None = None  # the NVSwitch PCI address a message names
    code: str | None = None  # an NVSwitch error code (12028)
    port: int | None = None

    @property
    def is_error(self) -> bool:
        """A record reporting a problem (a failed start counts; Nothing to do does not)."""
        return self.event in _ERROR_EVENTS or self.level in ("error", "fatal")


@dataclass
class FmLog:
    """The fabric manager's records in order, and what format they came in."""

    entries: list[FmEntry] = field(default_factory=list)
    formats: set[str] = field(default_factory=set)  # "log", "journal", "bare"

    def having(self, *events: str) -> list[FmEntry]:
        """The entries whose event is one of ``events``."""
        return [e for e in self.entries if e.event in events]

    @property
    def last_lifecycle(self) -> FmEntry | None:
        """The latest record that says whether the service runs (start, stop, failure)."""
        for entry in reversed(self.entries):
            if entry.event in LIFECYCLE:
                return entry
        return None

    @property
    def errors(self) -> list[FmEntry]:
        """Records reporting a problem, lifecycle failures included."""
        return [e for e in self.entries if e.is_error]


# literals one of which every _FM_MESSAGE holds (a cheap test first)
_FM_WORDS = ("NVL5", "NVSwitch", "Successfully configured", "abric", "Polling for",
             "ib_umad", "NV_WARN_NOTHING_TO_DO")


def _fm_message(line: str) -> re.Match[str] | None:
    if not any(w in line for w in _FM_WORDS):
        return None
    return _FM_MESSAGE.search(line)


def is_fm_message(line: str) -> bool:
    """A message only the fabric manager prints, behind any prefix or none."""
    return _fm_message(line) is not None


def _level(raw: str | None, message: str, event: str | None) -> str:
    if raw:
        return _LEVELS.get(raw.upper(), "info")
    if event == "nothing-to-do" or re.search(r"\bWARN(?:ING)?\b", message):
        return "warning"
    if event in ("nvswitch-fatal", "uncorrectable"):
        return "fatal"
    if event in _ERROR_EVENTS:
        return "error"
    return "info"


def _event(message: str) -> str | None:
    text = message.strip()
    for name, pattern in EVENTS:
        if pattern.search(text):
            return name
    return None


def _entry(time: str | None, level: str | None, prog: str | None, message: str,
           line: str) -> FmEntry:
    event = _event(message)
    entry = FmEntry(time, _level(level, message, event), prog, message.strip(), line.rstrip(),
                    event)
    _details(entry)
    return entry


def _details(entry: FmEntry) -> None:
    bus = _SWITCH_BUS.search(entry.message)
    entry.nvswitch = normalize_bus_id(bus.group("bus")) if bus else None
    code = _CODE.search(entry.message)
    entry.code = code.group("code") if code else None
    port = _PORT.search(entry.message)
    entry.port = int(port.group("port")) if port else None


def _continue(entry: FmEntry, line: str, printed_level: bool) -> None:
    """Append a continuation line and look at the whole message again."""
    entry.message = f"{entry.message} {line.strip()}".strip()
    entry.line = f"{entry.line}\n{line.rstrip()}"
    event = _event(entry.message)
    if event is not None and event != entry.event and (
            entry.event in (None, "error") or event == "nothing-to-do"):
        entry.event = event
        if not printed_level:
            entry.level = _level(None, entry.message, event)
    _details(entry)


def parse_fabricmanager_log(text: str) -> FmLog:
    """Parse fabric manager log lines and/or journal records of its unit.

    Empty text (or only ``-- No entries --``) gives an empty :class:`FmLog`;
    a text without any record raises ParseError.
    """
    log = FmLog()
    if not text or not text.strip():
        return log
    saw_marker = False
    last: FmEntry | None = None
    last_kind: str | None = None
    for raw in split_lines(text):
        line = raw.rstrip()
        if not line.strip():
            last = None if last_kind == "bare" else last
            continue
        if _BOOT_MARK.match(line.strip()):
            saw_marker = True
            last = None
            continue
        m = _FM_LINE.match(line)
        if m:
            last = _entry(m.group("time").strip(), m.group("level"), "nv-fabricmanager",
                          m.group("msg"), line)
            last_kind = "log"
            log.formats.add("log")
            log.entries.append(last)
            continue
        j = JOURNAL_LINE.match(line)
        if j:
            last = _entry(j.group("time"), None, j.group("prog"), j.group("msg"), line)
            last_kind = "journal"
            log.formats.add("journal")
            log.entries.append(last)
            continue
        wrapped = last is not None and last_kind != "log" and line[:1].isspace()
        b = _BARE.match(line) or _JOB_FAILED.match(line) or (
            None if wrapped else _fm_message(line))
        if b:
            prog = b.groupdict().get("prog") or (
                "systemctl" if _JOB_FAILED.match(line) else "nv-fabricmanager")
            last = _entry(None, None, prog, b.group("msg"), line)
            last_kind = "bare"
            log.formats.add("bare")
            log.entries.append(last)
            continue
        if last is not None and (last_kind == "log" and not line.lstrip().startswith("[")
                                 or line[:1].isspace()):
            _continue(last, line, last_kind == "log")
            continue
        last = None
    if not log.entries and not saw_marker:
        raise ParseError("not a fabric manager log or journal: no '[time] [LEVEL]' line and "
                         "no 'host program[pid]: message' record")
    return log


# --- recognising it in a paste -------------------------------------------------------
_FM_LOG = re.compile(r"^\[[A-Z][a-z]{2} [0-9]{1,2} [0-9]{4} [0-9][0-9]:[0-9][0-9]:[0-9][0-9]\] \[[A"
                     r"-Z]+\] \[tid [0-9]+\]")
_FM_JOURNAL = re.compile(r"(?:^|\s)(?:nv-fabricmanager|nvidia-fabricmanager-start\.sh|nvlsm)"
                         r"(?:\[[0-9]+\])?:"
                         r"|systemd\[1\]: .*(?:nvidia-fabricmanager|NVIDIA fabric manager)"
                         r"|^Job for nvidia-fabricmanager\S* failed")
_WRAPPED = re.compile(r"^\s+\S")
_FM_LOG_GATE = Gate(_FM_LOG)  # "] [tid " on a free line
# a journal line or message is claimed only on a free line with one of these words
_CLAIM_WORDS = ("fabric", "nvlsm", *_FM_WORDS)
_CLAIM_WORDS_GATE = Gate(literals=_CLAIM_WORDS)


@gated_by(_FM_LOG_GATE, _CLAIM_WORDS_GATE)
def claim_fabricmanager_log(doc: PasteDoc) -> None:
    """The fabric manager's own log (from its first to its last record), then its
    journal lines and fabric-manager messages with their wrapped lines."""
    hits = ([i for i, ln in enumerate(doc.lines) if doc.free(i) and _FM_LOG.match(ln)]
            if _FM_LOG_GATE.open(doc) else [])
    if hits:
        end = doc.extend(hits[-1] + 1, lambda s: bool(s.strip()) and not s.startswith("["))
        doc.claim("fabricmanager_journal", hits[0], end)
    if not _CLAIM_WORDS_GATE.open(doc):
        return
    for i in doc.lines_with(_CLAIM_WORDS):
        ln = doc.lines[i]
        if doc.owner[i] is not None:
            continue
        message = _fm_message(ln)
        if message is None and not _FM_JOURNAL.search(ln):
            continue
        doc.owner[i] = "fabricmanager_journal"
        j = i + 1
        while doc.free(j) and _WRAPPED.match(doc.lines[j]):
            doc.owner[j] = "fabricmanager_journal"
            j += 1
        if message is not None:
            _claim_same_prefix(doc, i, message)


def _shape(line: str, end: int) -> str:
    """A line's prefix (up to ``end``) with its digits blanked: the frame a journal or a
    log tool puts around each message (``Jul 20 16:15:36 edge-...:``)."""
    return re.sub(r"[0-9]", "0", line[:end])


def _claim_same_prefix(doc: PasteDoc, i: int, m: re.Match[str]) -> None:
    """The lines around a fabric-manager message (``m``, on line ``i``) behind an unknown
    prefix that carry the same prefix: the rest of that program's records (``Checking
    mlx5_10...``)."""
    if m.start("msg") < 8:
        return
    shape = _shape(doc.lines[i], m.start("msg"))
    for step in (-1, 1):
        j = i + step
        while doc.free(j) and len(doc.lines[j]) > len(shape) and \
                _shape(doc.lines[j], len(shape)) == shape:
            doc.owner[j] = "fabricmanager_journal"
            j += step
