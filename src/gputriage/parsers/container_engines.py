"""The container engines' configuration as it concerns GPUs: Docker's ``daemon.json``
(root and rootless daemons), containerd's ``config.toml`` (and k3s/RKE2's copies, a
template, a pasted diff of it) and the environment the collecting process was given.

Each is a tree source (several files); its parser takes the text: a tree document as
collected, or one pasted file (see :func:`gputriage.parsers.container_cfg.tree_files`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gputriage.errors import ParseError
from gputriage.io import safejson
from gputriage.parsers.container_cfg import PASTED, toml_loads, tree_files
from gputriage.text.fields import split_lines

__all__ = ["ContainerEnv", "ContainerdConfig", "CriRuntime", "DaemonConfig", "DockerConfigs",
           "parse_container_env", "parse_containerd_config", "parse_docker_daemon_json"]


# --- Docker daemon.json ----------------------------------------------------------------
@dataclass
class DaemonConfig:
    """One daemon.json: its runtimes (name -> path) and its default runtime."""

    path: str
    runtimes: dict[str, str] = field(default_factory=dict)
    default_runtime: str | None = None
    lines: tuple[str, ...] = ()  # the lines naming runtimes

    @property
    def rootless(self) -> bool:
        """A rootless (per-user) daemon's file: ``~/.config/docker/daemon.json``."""
        return ".config/docker/" in self.path

    @property
    def has_nvidia(self) -> bool:
        return any("nvidia" in n or "nvidia" in p for n, p in self.runtimes.items())


@dataclass
class DockerConfigs:
    """Every daemon.json found, root's first."""

    files: list[DaemonConfig] = field(default_factory=list)


def parse_docker_daemon_json(text: str) -> DockerConfigs:
    """Parse Docker's daemon.json files; ParseError when a file is not a JSON object."""
    out = DockerConfigs()
    for path, body in sorted(tree_files(text).items(), key=lambda kv: ("config/" in kv[0],
                                                                         kv[0])):
        try:
            doc = safejson.loads(body) if body.strip() else {}
        except ValueError as exc:
            raise ParseError(f"{path}: malformed JSON ({str(exc)[:80]})") from None
        if not isinstance(doc, dict):
            raise ParseError(f"{path}: not a JSON object")
        runtimes = doc.get("runtimes")
        found = {str(k): str(v.get("path", "")) if isinstance(v, dict) else ""
                 for k, v in runtimes.items()} if isinstance(runtimes, dict) else {}
        default = doc.get("default-runtime")
        lines = tuple(ln.strip() for ln in split_lines(body)
                      if re.search(r'"(?:default-runtime|runtimes|path)"|"nvidia"', ln))
        out.files.append(DaemonConfig(path, found, default if isinstance(default, str) else None,
                                      lines))
    return out


# --- containerd config.toml ------------------------------------------------------------
@dataclass
class CriRuntime:
    """One runtime of containerd's CRI plugin."""

    name: str
    runtime_type: str | None = None
    binary: str | None = None  # options.BinaryName
    systemd_cgroup: bool | None = None  # options.SystemdCgroup
    line: str = ""  # its table header


@dataclass
class ContainerdConfig:
    """The CRI plugin's runtimes and default runtime across containerd's config files."""

    runtimes: dict[str, CriRuntime] = field(default_factory=dict)
    default_runtime: str | None = None
    default_line: str | None = None
    paths: tuple[str, ...] = ()
    diff: bool = False  # read from a unified diff (its + side)
    template: bool = False  # a k3s/RKE2 config.toml.tmpl (Go template lines skipped)
    cri_disabled: bool = False  # disabled_plugins names "cri" (Docker's own containerd)

    @property
    def nvidia(self) -> CriRuntime | None:
        """The runtime that runs the NVIDIA container runtime, if any."""
        return nvidia_runtime(self.runtimes.values())


R = TypeVar("R")


def nvidia_runtime(runtimes: Iterable[R]) -> R | None:
    """The first runtime (with a ``name`` and a ``binary``) that runs the NVIDIA container
    runtime: by its handler's name or its binary's path."""
    for rt in runtimes:
        if "nvidia" in getattr(rt, "name", "") or "nvidia" in (getattr(rt, "binary", "") or ""):
            return rt
    return None


_RUNTIME_TABLE = re.compile(r"\.containerd\.runtimes\.(?P<name>[\w.-]+?)(?P<opts>\.options)?$")
_HEADER = re.compile(r"^\s*\[(?P<t>[^\[\]]+)\]\s*(?:#.*)?$")
_KEYVAL = re.compile(r"^\s*(?P<k>[\w.\"-]+)\s*=\s*(?P<v>.+?)\s*(?:#.*)?$")


def parse_containerd_config(text: str) -> ContainerdConfig:
    """Parse containerd's config files (or a pasted file, template or unified diff of
    one); ParseError when a file is not TOML, or a pasted text has no containerd table
    (a collected file without one is containerd's default: runc only)."""
    out = ContainerdConfig()
    seen = False
    files = tree_files(text)
    for path, body in sorted(files.items()):
        lines = split_lines(body)
        if _is_diff(lines):
            out.diff = True
            lines = [ln[1:] for ln in lines if ln[:1] in (" ", "+")
                     and not ln.startswith("+++")]
        if any("{{" in ln for ln in lines):
            out.template = True
            lines = [ln for ln in lines if "{{" not in ln]
        if out.diff or out.template or path == PASTED:
            seen |= _read_lines(out, lines)  # a partial file: key by key
        else:
            seen |= _read_doc(out, toml_loads("\n".join(lines)), lines)
        out.paths += (path,)
        out.cri_disabled |= bool(re.search(r"^\s*disabled_plugins\s*=.*[\"']cri[\"']",
                                           "\n".join(lines), re.M))
    if PASTED in files and not seen:
        raise ParseError("no containerd CRI table or runtime")
    return out


def _is_diff(lines: list[str]) -> bool:
    return any(ln.startswith("@@ ") for ln in lines) or any(
        ln.startswith("+++ ") for ln in lines[:20])


def _read_lines(out: ContainerdConfig, lines: list[str]) -> bool:
    """Tables and keys line by line (a diff's + side, a template, a fragment)."""
    table, seen = "", False
    for raw in lines:
        if m := _HEADER.match(raw):
            table = m.group("t").strip()
            seen |= _table_seen(out, table, raw.strip())
            continue
        if (m := _KEYVAL.match(raw)) and table:
            seen |= _key(out, table, m.group("k").strip('"'), _value(m.group("v")), raw.strip())
    return seen


def _read_doc(out: ContainerdConfig, doc: dict[str, Any], lines: list[str]) -> bool:
    """The same tables from a parsed TOML document, each table's header as evidence."""
    seen = False
    stack: list[tuple[str, dict[str, Any]]] = [("", doc)]
    while stack:
        prefix, table = stack.pop()
        if prefix:
            seen |= _table_seen(out, prefix, _header_line(lines, prefix))
        for key, value in table.items():
            name = f'{prefix}.{_quote(key)}' if prefix else _quote(key)
            if isinstance(value, dict):
                stack.append((name, value))
            elif prefix:
                line = next((ln.strip() for ln in lines if ln.strip().startswith(key)), "")
                seen |= _key(out, prefix, key, value, line or f"{key} = {value}")
    return seen


def _quote(key: str) -> str:
    return f'"{key}"' if "." in key else key


def _header_line(lines: list[str], table: str) -> str:
    flat = table.replace('"', "").replace(" ", "")
    for ln in lines:
        m = _HEADER.match(ln)
        if m and m.group("t").replace('"', "").replace(" ", "") == flat:
            return ln.strip()
    return f"[{table}]"


def _table_seen(out: ContainerdConfig, table: str, line: str) -> bool:
    m = _RUNTIME_TABLE.search(table.replace('"', ""))
    if m:
        rt = out.runtimes.setdefault(m.group("name"), CriRuntime(m.group("name")))
        rt.line = rt.line or line
        return True
    return table.replace('"', "").endswith((".containerd", "grpc.v1.cri", "cri.v1.runtime"))


def _key(out: ContainerdConfig, table: str, key: str, value: Any, line: str) -> bool:
    flat = table.replace('"', "")
    if key == "default_runtime_name" and flat.endswith(".containerd"):
        out.default_runtime, out.default_line = str(value), line
        return True
    m = _RUNTIME_TABLE.search(flat)
    if not m:
        return False
    rt = out.runtimes.setdefault(m.group("name"), CriRuntime(m.group("name")))
    if key == "runtime_type" and isinstance(value, str):
        rt.runtime_type = value
    elif key == "BinaryName" and isinstance(value, str):
        rt.binary = value
    elif key == "SystemdCgroup" and isinstance(value, bool):
        rt.systemd_cgroup = value
    return True


def _value(raw: str) -> Any:
    raw = raw.strip()
    if raw in ("true", "false"):
        return raw == "true"
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return raw[1:-1]
    return raw


# --- the collecting process's container and environment ---------------------------------
@dataclass
class ContainerEnv:
    """Whether the collecting process runs in a container, and the NVIDIA_* / CUDA_*
    variables it was given (no other variable is ever kept)."""

    markers: tuple[str, ...] = ()  # "/.dockerenv", "/run/.containerenv"
    engine: str | None = None  # from /run/.containerenv (podman): engine="podman-4.9"
    variables: dict[str, str] = field(default_factory=dict)
    read_environment: bool = False  # the environment was read (empty: none set)

    @property
    def in_container(self) -> bool:
        return bool(self.markers)

    @property
    def capabilities(self) -> tuple[str, ...] | None:
        """NVIDIA_DRIVER_CAPABILITIES as a list (None: not set)."""
        raw = self.variables.get("NVIDIA_DRIVER_CAPABILITIES")
        return None if raw is None else tuple(c.strip() for c in raw.split(",") if c.strip())

    def line(self, name: str) -> str:
        return f"{name}={self.variables.get(name, '')}"


ENV_NAME = re.compile(r"^(?:NVIDIA|CUDA)_[A-Z0-9_]+$")
_ENV_LINE = re.compile(r"^\s*(?:export\s+|declare -x\s+)?(?P<k>[A-Z][A-Z0-9_]*)=(?P<v>.*)$")
ENVIRON = "proc/self/environ"


def parse_container_env(text: str) -> ContainerEnv:
    """Parse the container markers and the NVIDIA_* / CUDA_* environment (a tree
    document, or pasted ``env`` lines); ParseError when the text shows neither."""
    out = ContainerEnv()
    files = tree_files(text)
    for path, body in sorted(files.items()):
        if path in (".dockerenv", "run/.containerenv"):
            out.markers += (f"/{path}",)
            if m := re.search(r'^engine="?([^"\n]+)', body, re.M):
                out.engine = m.group(1)
            continue
        out.read_environment = out.read_environment or path == ENVIRON
        for raw in split_lines(body.replace("\0", "\n")):
            m = _ENV_LINE.match(raw)
            if m and ENV_NAME.match(m.group("k")):
                out.variables[m.group("k")] = m.group("v").strip().strip("'\"")
    if path_pasted(files) and not out.variables:
        raise ParseError("no NVIDIA_* or CUDA_* variable")
    return out


def path_pasted(files: dict[str, str]) -> bool:
    return set(files) == {PASTED}
