"""What ``nvidia-ctk`` prints while it sets a host up (``runtime configure``, ``cdi
generate``, ``system create-*``): logrus's short lines (``INFO[0000] Wrote updated config
to /etc/containerd/config.toml``, ``WARN[0000] ...``, ``ERRO[0000] ...``), and the two
lines of ``docker info`` that show the runtimes it configured (``Runtimes: nvidia runc``,
``Default Runtime: runc``).

Lines may carry the prefixes of :func:`gputriage.parsers.device_plugin_log.split_log_line`.
A text without one such line raises ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.parsers.device_plugin_log import split_log_line
from gputriage.text.fields import split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["CtkLine", "CtkLog", "claim_ctk_log", "parse_ctk_log"]

_LEVEL = re.compile(r"^(?P<level>INFO|WARN|WARNING|ERRO|ERROR|FATA|FATAL|DEBU|DEBUG|TRAC|PANI)"
                    r"\[[0-9]{1,8}\]\s*(?P<msg>.*)$")
_RUNTIMES = re.compile(r"^\s*Runtimes:\s*(?P<v>[\w.-]+(?:\s+[\w.-]+)*)\s*$")
_DEFAULT = re.compile(r"^\s*Default Runtime:\s*(?P<v>[\w.-]+)\s*$")
_WROTE = re.compile(r"Wrote updated config to (?P<path>\S+)")
_VERSION = re.compile(r"Using config version (?P<v>[0-9]+)")
_PLUGIN = re.compile(r"Using CRI runtime plugin name \"?(?P<v>[\w.\"-]+?)\"?\s*$")
_RESTART = re.compile(r"It is recommended that (?P<v>[\w-]+) daemon be restarted")
_SPEC = re.compile(r"Generated CDI spec with version (?P<v>[0-9.]+)")
_MODE = re.compile(r"Auto-detected mode as \"?(?P<v>[\w-]+)\"?")
# the warnings nvidia-ctk prints on every healthy run: nothing to act on
_BENIGN = re.compile(r"could not infer options from runtimes|Config file does not exist; "
                     r"using empty config|Ignoring runtime", re.IGNORECASE)
_ENGINES = (("/etc/docker/", "docker"), ("/.config/docker/", "docker"),
            ("containerd", "containerd"), ("/etc/crio/", "cri-o"))


@dataclass
class CtkLine:
    """One line of nvidia-ctk: its level (INFO, WARN, ERROR, FATAL, DEBUG) and message."""

    level: str
    message: str
    line: str

    @property
    def failed(self) -> bool:
        return self.level in ("ERROR", "FATAL", "PANIC")

    @property
    def benign(self) -> bool:
        return bool(_BENIGN.search(self.message))


_LEVELS = {"WARNING": "WARN", "ERRO": "ERROR", "FATA": "FATAL", "DEBU": "DEBUG",
           "TRAC": "TRACE", "PANI": "PANIC"}


@dataclass
class CtkLog:
    """nvidia-ctk's lines, what they say it wrote, and docker's runtimes when shown."""

    lines: list[CtkLine] = field(default_factory=list)
    written: list[str] = field(default_factory=list)  # config files it wrote
    config_version: str | None = None  # containerd's config schema version
    cri_plugin: str | None = None
    restart: list[str] = field(default_factory=list)  # daemons it asked to restart
    cdi_spec: str | None = None  # the CDI version of a spec it generated
    mode: str | None = None  # cdi generate's mode (nvml, csv, wsl, management)
    docker_runtimes: list[str] | None = None  # docker info's Runtimes
    docker_default: str | None = None  # docker info's Default Runtime
    docker_lines: list[str] = field(default_factory=list)

    def of(self, *levels: str) -> list[CtkLine]:
        return [x for x in self.lines if x.level in levels]

    @property
    def engines(self) -> list[str]:
        """The container engines whose configuration it wrote."""
        return list(dict.fromkeys(e for path in self.written for key, e in _ENGINES
                                  if key in path))


def _read(message: str, out: CtkLog) -> None:
    for pattern, name in ((_VERSION, "config_version"), (_PLUGIN, "cri_plugin"),
                          (_SPEC, "cdi_spec"), (_MODE, "mode")):
        if m := pattern.search(message):
            setattr(out, name, m.group("v").strip('"'))
    if m := _WROTE.search(message):
        out.written.append(m.group("path"))
    if m := _RESTART.search(message):
        out.restart.append(m.group("v"))


def _ctk_line(line: str) -> CtkLine | None:
    m = _LEVEL.match(split_log_line(line).message)
    if m is None:
        return None
    level = m.group("level")
    return CtkLine(_LEVELS.get(level, level), m.group("msg").strip(), line.rstrip())


def parse_ctk_log(text: str) -> CtkLog:
    """Parse nvidia-ctk's lines (and docker info's runtimes); ParseError when none."""
    out = CtkLog()
    for line in split_lines(text):
        if (entry := _ctk_line(line)) is not None:
            out.lines.append(entry)
            _read(entry.message, out)
        elif m := _RUNTIMES.match(line):
            out.docker_runtimes = m.group("v").split()
            out.docker_lines.append(line.strip())
        elif m := _DEFAULT.match(line):
            out.docker_default = m.group("v")
            out.docker_lines.append(line.strip())
    if not out.lines and out.docker_runtimes is None:
        raise ParseError("not nvidia-ctk output: no INFO[0000] / WARN / ERRO line and no "
                         "docker info Runtimes line")
    return out


_CTK_ANCHOR = re.compile(r"Wrote updated config to|Using config version|Using CRI runtime "
                         r"plugin name|It is recommended that [\w-]+ daemon be restarted|"
                         r"CDI spec|Auto-detected mode as|Selecting /dev/|could not infer "
                         r"options from runtimes|nvidia-ctk|nvidia-container|libnvidia|NVML")


def _is_ctk(line: str) -> bool:
    return _ctk_line(line) is not None


_GATE = Gate(_CTK_ANCHOR)  # no run is claimed without an anchor on a free line


@gated_by(_GATE)
def claim_ctk_log(doc: PasteDoc) -> None:
    """Runs of logrus short lines (``INFO[0000] ...``) of which one says what only
    nvidia-ctk says (a config written, a CRI plugin, a CDI spec, devices selected); and
    docker info's Runtimes / Default Runtime lines when some run was found."""
    if not _GATE.open(doc):
        return
    i, found = 0, False
    while i < len(doc.lines):
        end = doc.extend(i, _is_ctk)
        if end > i and any(_CTK_ANCHOR.search(doc.lines[j]) for j in range(i, end)):
            doc.claim("nvidia_ctk_log", i, end)
            found = True
        i = max(end, i + 1)
    if not found:
        return
    for i, line in enumerate(doc.lines):
        if doc.free(i) and (_RUNTIMES.match(line) or _DEFAULT.match(line)):
            doc.claim("nvidia_ctk_log", i, i + 1)
