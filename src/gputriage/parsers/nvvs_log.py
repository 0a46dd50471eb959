"""``/var/log/nvidia-dcgm/nvvs.log``: the log of NVVS, the program behind ``dcgmi diag``.

DCGM's log format, ``2023-12-07 17:09:52.612 ERROR [73032:73032] message [file:line]
[function]``; a plugin's lines carry its name (``[[pcie]]``), and the output of a
plugin's helper follows its line unprefixed (``External command stdout: ...`` then the
helper's JSON). nv-hostengine writes the same format: a line is NVVS's when it names
NVVS's sources (``nvvs/src/...``), a plugin, or a message only NVVS prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["NvvsEntry", "NvvsLog", "claim_nvvs_log", "parse_nvvs_log"]

_LINE = re.compile(
    r"^\s*(?P<time>[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?)\s+"
    r"(?P<level>DEBUG|VERB|VERBOSE|INFO|WARN|WARNING|ERROR|CRIT|CRITICAL|FATAL)\s+"
    r"\[(?P<pid>[0-9]{1,10}):[0-9]{1,10}\]\s*(?P<msg>.*)$")  # msg stripped by the reader
_PLUGIN = re.compile(r"^\[\[(?P<plugin>[\w .-]{1,40})\]\]\s*")
_WHERE = re.compile(r"\[(?P<file>[^\[\]]{0,300}?\.(?:cpp|h|hpp|c):[0-9]{1,9})\]"
                    r"(?:\s{0,40}\[[^\[\]]{0,300}\])?\s*$")
# what only NVVS prints (its sources, its plugins, its config and child processes)
# (nv-hostengine tags its own modules' lines the same way: [[NvSwitch]], [[Profiling]]...)
_NVVS = re.compile(
    r"/nvvs/|\[\[(?!(?-i:Core|NvSwitch|VGPU|Introspection|Health|Policy|Config|Diag|Profiling|"
    r"SysMon|Sysmon|MnDiag|NvSwitchManager|Nvsdm)\]\])\w|\bnvvs\b|diag-skus|"
    r"package diag config|Output of child process|"
    r"numa_sched_setaffinity|PluginLib|PluginTest|ConfigFileParser|ShutdownPlugin|"
    r"/plugins/cuda[0-9]+/|datac[ae]nter-gpu-manager-config|Test \w[\w ]*: ",
    re.IGNORECASE)


@dataclass
class NvvsEntry:
    """One record of the log, with the unprefixed lines that follow it."""

    time: str
    level: str  # DEBUG | INFO | WARN | ERROR ...
    message: str  # without the [file:line] [function] suffix
    plugin: str | None = None  # the [[pcie]] tag
    source: str | None = None  # file:line it was logged at
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The message and what followed it, in one line."""
        return " ".join(" ".join(ln.strip() for ln in [self.message, *self.lines[1:]]).split())


@dataclass
class NvvsLog:
    entries: list[NvvsEntry] = field(default_factory=list)

    @property
    def problems(self) -> list[NvvsEntry]:
        """Warnings and errors, and plugin output (a helper's stdout may hold its error)."""
        return [e for e in self.entries
                if e.level not in ("DEBUG", "VERB", "VERBOSE", "INFO")
                or "External command" in e.message]


def parse_nvvs_log(text: str) -> NvvsLog:
    """Parse nvvs.log records; ParseError when no line is an NVVS record."""
    out = NvvsLog()
    cur: NvvsEntry | None = None
    for raw in split_lines(text):
        if m := _LINE.match(raw):
            msg = m.group("msg").strip()
            plugin = None
            if p := _PLUGIN.match(msg):
                plugin, msg = p.group("plugin"), msg[p.end():]
            where = _WHERE.search(msg)
            cur = NvvsEntry(m.group("time"), m.group("level"),
                            msg[:where.start()].rstrip() if where else msg, plugin,
                            where.group("file") if where else None, [raw.strip()])
            out.entries.append(cur)
        elif cur is not None and raw.strip() and len(cur.lines) < 200:
            cur.lines.append(raw.rstrip())
    if not any(_NVVS.search(" ".join(e.lines)) for e in out.entries):
        raise ParseError("not an nvvs.log: no NVVS record")
    return out


def _is_record(line: str) -> bool:
    """A DCGM log line that is NVVS's: where a claim starts."""
    return bool(_LINE.match(line) and _NVVS.search(line))


_GATE = Gate(_NVVS, test=_is_record)


@gated_by(_GATE)
def claim_nvvs_log(doc: PasteDoc) -> None:
    """Each NVVS record (a DCGM log line that is NVVS's) with the unprefixed lines after
    it, up to the next record or a blank line."""
    if not _GATE.open(doc):
        return
    i = 0
    while i < len(doc.lines):
        if not (doc.free(i) and _is_record(doc.lines[i])):
            i += 1
            continue
        end = doc.extend(i + 1, lambda s: bool(s.strip()) and not _LINE.match(s))
        doc.claim("nvvs_log", i, end)
        i = end
