"""``crictl info``: the CRI plugin's configuration as the running containerd holds it
(its runtimes with their ``BinaryName`` and ``SystemdCgroup`` options, the default
runtime, whether CDI is enabled), which may differ from the config.toml on disk when
containerd was not restarted or reads another file (k3s and RKE2 render their own).

People paste it cut short: ``...`` for the parts left out, trailing commas, a fragment
that starts at ``"config":``. The text is read line by line, following the nesting of
its keys, so that such a paste reads as well as the whole document; a document that
loads as JSON is re-indented first (a one-line dump reads the same).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gputriage.errors import ParseError
from gputriage.io import safejson
from gputriage.parsers.container_engines import nvidia_runtime
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["CrictlInfo", "RunningRuntime", "claim_crictl_info", "parse_crictl_info"]

TOOLKIT_DIR = "/usr/local/nvidia/toolkit"  # where the GPU operator's toolkit installs


@dataclass
class RunningRuntime:
    """One runtime of the running CRI plugin."""

    name: str
    runtime_type: str | None = None
    binary: str | None = None  # options.BinaryName
    systemd_cgroup: bool | None = None  # options.SystemdCgroup
    lines: dict[str, str] = field(default_factory=dict)  # key -> the line that set it

    @property
    def operator_toolkit(self) -> bool:
        """Its binary is the GPU operator's toolkit copy."""
        return (self.binary or "").startswith(TOOLKIT_DIR)


@dataclass
class CrictlInfo:
    """What ``crictl info`` says of the running containerd's CRI configuration."""

    runtimes: dict[str, RunningRuntime] = field(default_factory=dict)
    default_runtime: str | None = None
    default_line: str | None = None
    cdi_enabled: bool | None = None
    cdi_line: str | None = None
    distribution: str | None = None  # "k3s" | "rke2": from the paths it names
    distribution_line: str | None = None
    whole: bool = False  # the text loaded as JSON (nothing elided)

    @property
    def nvidia(self) -> RunningRuntime | None:
        """The runtime that runs the NVIDIA container runtime, if any."""
        return nvidia_runtime(self.runtimes.values())


_KEYED = re.compile(r'^\s*"(?P<k>[^"]*)"\s*:\s*(?P<v>.*?)\s*,?\s*$')
_CLOSE = re.compile(r"^\s*[}\]]")
_ELIDED = re.compile(r"^\s*(?:\.\.\.|…)\s*$")


def parse_crictl_info(text: str) -> CrictlInfo:
    """Parse ``crictl info`` (whole or cut short); ParseError when it names neither a
    runtime nor a default runtime."""
    out = CrictlInfo()
    lines = split_lines(text)
    try:
        doc = safejson.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        out.whole = True
        if len(lines) < 3:  # a one-line dump: its keys one per line
            lines = split_lines(json.dumps(doc, indent=2))
    for path, key, value, line in _leaves(lines):
        _read(out, path, key, value, line)
    if not out.runtimes and out.default_runtime is None:
        raise ParseError("no CRI runtime or default runtime in crictl info")
    return out


def _leaves(lines: list[str]) -> list[tuple[tuple[str, ...], str, Any, str]]:
    """(path of keys, key, value, line) of every scalar: the path follows the braces,
    ``...`` lines are skipped (what they hide is taken as balanced)."""
    stack: list[str] = []
    pending = False  # a key whose value opens on the next line ("config":)
    out: list[tuple[tuple[str, ...], str, Any, str]] = []
    for raw in lines:
        if not raw.strip() or _ELIDED.match(raw):
            continue
        if m := _KEYED.match(raw):
            key, val = m.group("k"), m.group("v")
            if val in ("{", "[", ""):
                stack.append(key)
                pending = val == ""
            else:
                out.append((tuple(stack), key, _value(val), raw.strip()))
                pending = False
            continue
        stripped = raw.strip()
        if _CLOSE.match(raw):
            if stack:
                stack.pop()
        elif stripped.startswith(("{", "[")) and not pending and not stripped.endswith(
                ("}", "},", "]", "],")):
            stack.append("")  # an element of a list, or the document itself
        pending = False
    return out


def _value(raw: str) -> Any:
    raw = raw.rstrip(",").strip()
    if raw in ("true", "false"):
        return raw == "true"
    if raw.startswith('"') and raw.endswith('"') and len(raw) >= 2:
        return raw[1:-1]
    return raw


def _read(out: CrictlInfo, path: tuple[str, ...], key: str, value: Any, line: str) -> None:
    if isinstance(value, str) and out.distribution is None:
        if "rancher/rke2" in value:
            out.distribution, out.distribution_line = "rke2", line
        elif "rancher/k3s" in value or "/run/k3s" in value:
            out.distribution, out.distribution_line = "k3s", line
    if "runtimes" in path and path.index("runtimes") + 1 < len(path):
        name = path[path.index("runtimes") + 1]
        rt = out.runtimes.setdefault(name, RunningRuntime(name))
        if key == "runtimeType" and isinstance(value, str):
            rt.runtime_type = value
        elif key == "BinaryName" and isinstance(value, str):
            rt.binary = value
        elif key == "SystemdCgroup" and isinstance(value, bool):
            rt.systemd_cgroup = value
        else:
            return
        rt.lines[key] = line
    elif key == "defaultRuntimeName" and isinstance(value, str):
        out.default_runtime, out.default_line = value, line
    elif key == "enableCDI" and isinstance(value, bool):
        out.cdi_enabled, out.cdi_line = value, line


# --- recognition in a paste ------------------------------------------------------------
# keys only the CRI plugin's JSON has (containerd's TOML writes them unquoted)
_MARKER = re.compile(r'^\s*"(?:BinaryName|SystemdCgroup|runtimeType|defaultRuntimeName|'
                     r'enableCDI)"\s*:')
_JSONISH = re.compile(r'^\s*(?:"[^"]*"\s*:.*|[\[\]{}]+,?|"[^"]*",?|-?[0-9][0-9.eE+-]*,?|'
                      r'(?:true|false|null),?|\.\.\.|…)\s*$')


def _jsonish(line: str) -> bool:
    return bool(_JSONISH.match(line))


_GATE = Gate(_MARKER)  # no claim without a free line with a key of the CRI plugin


@gated_by(_GATE)
def claim_crictl_info(doc: PasteDoc) -> None:
    """The JSON of ``crictl info`` (or the part of it pasted) around a line with a key
    of the CRI plugin's runtimes: every JSON-looking line next to it."""
    if not _GATE.open(doc):
        return
    for i, line in enumerate(doc.lines):
        if not (doc.free(i) and _MARKER.match(line)):
            continue
        start = i
        while doc.free(start - 1) and _jsonish(doc.lines[start - 1]):
            start -= 1
        end = doc.extend(i + 1, _jsonish)
        doc.claim("crictl_info", start, end)
