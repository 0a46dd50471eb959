"""nv-hostengine, DCGM's daemon: its log (``-f FILE``, ``--log-level debug``), its journal
(``nv-hostengine[PID]: Started host engine version 3.3.9 using port number: 5555``), what
it prints when it cannot start (``Error: Failed to initialize NVML``), and what dcgmi
prints when it cannot reach it (``Error: Unable to connect to host engine``) or when a
watch the host engine serves fails (``Error setting watches. Result: ...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.parsers.dcgmi import HOSTENGINE_ERROR
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import ParseError, split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["PROFILING_BUSY", "HostengineEntry", "HostengineLog", "claim_hostengine_log",
           "parse_hostengine_log"]

# 2021-11-23 00:15:20.507 ERROR [76:76] message [/path/File.cpp:3647] [Function]
_DEBUG = re.compile(r"^(?P<time>[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}"
                    r"(?:\.[0-9]{1,6})?)\s+"
                    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|VERBOSE)\s+"
                    r"\[[0-9]{1,10}:[0-9]{1,10}\]\s+(?P<msg>.*)$")
# Aug 28 01:36:35 dell nv-hostengine[100107]: Started host engine version 3.3.9 ...
_JOURNAL = re.compile(r"^(?P<time>\S{3,20} +[0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2}|"
                      r"[0-9]{4}-[0-9]{2}-[0-9]{2}T\S{8,40})\s+"
                      r"\S{1,253}\s+nv-hostengine\[[0-9]{1,10}\]:\s+(?P<msg>.*)$")
_VERSION = re.compile(r"(?:host engine version|version:)\s{0,40}"
                      r"(?P<v>[0-9]{1,6}\.[0-9]{1,6}(?:\.[0-9]{1,9}){0,2})\b")
_SUFFIX = re.compile(r"(?<!\s)\s+\[[^\]]{1,300}:[0-9]{1,6}\]\s{1,40}\[[^\]]{1,200}\]\s*$")


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


# DCGM_ST_PROFILING_LIBRARY_ERROR (-37): the profiling library (PerfWorks) could not start
# its session on the GPU's performance monitor, which another profiler holds
PROFILING_BUSY = _re(r"third-party Profiling module returned an unrecoverable error|"
                     r"NVPW_DCGM_PeriodicSampler_BeginSession|EnableMetrics returned -37|"
                     r"DCGM_PROFILING_SR_WATCH_FIELDS failed with -37|"
                     r"DCGMError_ProfilingLibraryError")
EVENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("profiling-busy", PROFILING_BUSY),
    # the NvSwitch module's libraries (NSCQ, NVSDM): needed only where NVSwitches are
    ("nvswitch-libs-missing", _re(r"Could not load (?:NSCQ|NVSDM)|Could not initialize NSCQ|"
                                  r"AttachTo(?:Nscq|Nvsdm)\(\) returned|libnvidia-nscq")),
    ("nvml-init-failed", _re(r"Failed to initialize NVML|Cannot initialize the hostengine")),
    ("init-failed", _re(r"DcgmHostEngineHandler::Init failed|Failed to start host engine|"
                        r"Host engine failed to start")),
    ("unreachable", HOSTENGINE_ERROR),
    ("started", _re(r"Started host engine version|DCGM initialized")),
)
_PLAIN = re.compile(r"^\s*Error: (?:Failed to initialize NVML|Unable to connect to host engine|"
                    r"unable to establish a connection to the specified host)", re.IGNORECASE)
# dcgmi's own report of a watch the host engine could not set (dcgmi dmon, dcgmi stats)
_WATCH = re.compile(r"^\s*(?:Error setting watches|Error: Unable to (?:set|watch)\b.{0,60})\."
                    r"?\s*Result:\s*\S", re.IGNORECASE)


@dataclass
class HostengineEntry:
    message: str
    line: str
    level: str | None = None
    event: str | None = None


@dataclass
class HostengineLog:
    """nv-hostengine's records and the version it reports (None: not printed)."""

    entries: list[HostengineEntry] = field(default_factory=list)
    version: str | None = None

    def of(self, *events: str) -> list[HostengineEntry]:
        return [e for e in self.entries if e.event in events]


def _split(line: str) -> tuple[str | None, str] | None:
    text = line.strip().strip("`")
    if m := _DEBUG.match(text):
        return m.group("level").upper(), _SUFFIX.sub("", m.group("msg")).strip()
    if m := _JOURNAL.match(text):
        return None, m.group("msg").strip()
    if _PLAIN.match(text) or _WATCH.match(text):
        return "ERROR", text
    return None


def parse_hostengine_log(text: str) -> HostengineLog:
    """Parse nv-hostengine's log or journal; ParseError when no line is one of its."""
    out = HostengineLog()
    for line in split_lines(text):
        parts = _split(line)
        if parts is None:
            continue
        level, msg = parts
        event = next((name for name, pat in EVENTS if pat.search(msg)), None)
        out.entries.append(HostengineEntry(msg, line.strip().strip("`"), level, event))
        if m := _VERSION.search(msg):
            out.version = out.version or m.group("v")
    if not out.entries:
        raise ParseError("not an nv-hostengine log: no record of it")
    return out


# a debug-log record holds its "[pid:tid]", a journal record "nv-hostengine[pid]:"
_GATE = Gate(_JOURNAL, _WATCH, _PLAIN, searches=(re.compile(r"\[[0-9]{1,10}:[0-9]{1,10}\]"),))


@gated_by(_GATE)
def claim_hostengine_log(doc: PasteDoc) -> None:
    """nv-hostengine's debug-log and journal records, and dcgmi's "cannot connect" lines
    (a bare ``Error: Failed to initialize NVML`` stays the job log's: any NVML user
    prints it)."""
    if not _GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if not doc.free(i):
            continue
        text = ln.strip().strip("`")
        if _DEBUG.match(text) or _JOURNAL.match(text) or _WATCH.match(text) or (
                _PLAIN.match(text) and HOSTENGINE_ERROR.search(text)):
            doc.claim("nv_hostengine_log", i, i + 1)
