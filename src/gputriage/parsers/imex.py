"""The log of the NVIDIA IMEX daemon (``nvidia-imex``: memory export and import between
the nodes of a multi-node NVLink domain, GB200 NVL72 and later), as its log file, its
journal or a ComputeDomain daemon pod's ``kubectl logs`` print it.

Its records have the fabric manager's shape (``[Mar 21 2025 20:45:38] [ERROR] [tid 39]
message``) behind an ``IMEX Log initializing at: ...`` header and an ``IMEX version ...
is running with the following configuration options`` banner. Each record becomes an
:class:`ImexEntry` with its level and, for a message gputriage knows, an ``event`` (see
:data:`EVENTS`). A text with no IMEX record raises ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.parsers.fabricmanager import LOG_LINE
from gputriage.parsers.systemd import JOURNAL_LINE
from gputriage.text.fields import ParseError, split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["EVENTS", "ImexEntry", "ImexLog", "claim_imex_log", "parse_imex_log"]

_HEADER = re.compile(r"IMEX Log initializing at:?\s*(?P<time>.{0,40})$")
_VERSION = re.compile(r"IMEX version (?P<version>[0-9]{2,4}(?:\.[0-9]{1,4}){1,3}) is running")
# event -> pattern, first match wins. Sources: kubernetes-sigs/dra-driver-nvidia-gpu#289 and
# #298 (the daemon's own messages when its nodes_config.cfg names no local address)
EVENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("no-local-address", re.compile(r"No matching network interface found for any IP address",
                                    re.IGNORECASE)),
    ("log-file", re.compile(r"failed to (?:open|chmod) IMEX log file", re.IGNORECASE)),
)
_LEVELS = {"INFO": "info", "DEBUG": "debug", "WARN": "warning", "WARNING": "warning",
           "ERROR": "error", "ERR": "error", "FATAL": "fatal", "CRITICAL": "fatal"}
# a message only the IMEX daemon prints (recognised even without its header)
_IMEX_ONLY = re.compile(r"IMEX Log initializing|IMEX version \S{1,20} is running|"
                        r"IMEX [Ll]ibrary communication|nvidia-imex(?:\[[0-9]{1,10}\])?:|"
                        r"No matching network interface found for any IP addresses in the node "
                        r"configuration")


@dataclass
class ImexEntry:
    """One record of the IMEX daemon: time as printed, level, message, event."""

    time: str | None
    level: str  # debug | info | warning | error | fatal
    message: str
    line: str
    event: str | None = None

    @property
    def is_error(self) -> bool:
        return self.level in ("error", "fatal") and self.event != "log-file"


@dataclass
class ImexLog:
    """The daemon's records in order, and the version its banner names."""

    entries: list[ImexEntry] = field(default_factory=list)
    version: str | None = None

    def having(self, *events: str) -> list[ImexEntry]:
        return [e for e in self.entries if e.event in events]

    @property
    def errors(self) -> list[ImexEntry]:
        return [e for e in self.entries if e.is_error]


def _event(message: str) -> str | None:
    return next((name for name, pattern in EVENTS if pattern.search(message)), None)


def _level(raw: str | None, message: str) -> str:
    if raw:
        return _LEVELS.get(raw.upper(), "info")
    return "error" if re.search(r"\b(?:ERROR|FATAL)\b", message) else "info"


def parse_imex_log(text: str) -> ImexLog:
    """The IMEX daemon's records; ParseError when the text holds none of them."""
    log = ImexLog()
    imex = False
    for raw in split_lines(text):
        line = raw.rstrip()
        if not line.strip():
            continue
        if _HEADER.search(line):
            imex = True
            continue
        m = LOG_LINE.match(line)
        if m:
            msg = m.group("msg").strip()
            log.entries.append(ImexEntry(m.group("time").strip(), _level(m.group("level"), msg),
                                         msg, line, _event(msg)))
        elif (j := JOURNAL_LINE.match(line)) and j.group("prog").startswith("nvidia-imex"):
            msg = j.group("msg").strip()
            log.entries.append(ImexEntry(j.group("time"), _level(None, msg), msg, line,
                                         _event(msg)))
        else:
            continue
        if (v := _VERSION.search(line)) is not None:
            log.version = v.group("version")
        imex = imex or _imex_only(line)
    if not imex or not log.entries:
        raise ParseError("not an IMEX daemon log: no 'IMEX Log initializing' header, no 'IMEX "
                         "version ... is running' banner and no IMEX-only message")
    return log


# literals one of which every _IMEX_ONLY line holds (a cheap test first)
_IMEX_WORDS = ("IMEX", "imex", "No matching network")


def _imex_only(line: str) -> bool:
    """A line only the IMEX daemon prints."""
    return ("IMEX" in line or "imex" in line or "No matching network" in line) \
        and _IMEX_ONLY.search(line) is not None


_IMEX_GATE = Gate(literals=_IMEX_WORDS)  # what a claim starts at (doc.lines_with)


@gated_by(_IMEX_GATE)
def claim_imex_log(doc: PasteDoc) -> None:
    """From an IMEX header, banner or IMEX-only message to the end of the run of log
    records around it."""
    for i in doc.lines_with(_IMEX_WORDS):
        if not doc.free(i) or not _imex_only(doc.lines[i]):
            continue
        first = i
        while doc.free(first - 1) and (LOG_LINE.match(doc.lines[first - 1])
                                       or _HEADER.search(doc.lines[first - 1])):
            first -= 1
        end = doc.extend(i + 1, lambda s: bool(LOG_LINE.match(s)) or _imex_only(s))
        doc.claim("imex_log", first, end)
