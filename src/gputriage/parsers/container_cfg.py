"""The NVIDIA container toolkit's own configuration and outputs: its config.toml, the
CDI specs it generated, ``nvidia-ctk --version``, ``nvidia-ctk cdi list`` and
``nvidia-container-cli info``.

Tree sources (CDI specs) can also be pasted: their parsers take the text, which is a
tree document (``{"files": ...}``, as collected) or one pasted file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gputriage.errors import ParseError
from gputriage.io import safejson
from gputriage.text.fields import split_lines, strict_int

__all__ = ["CdiSpec", "CdiSpecs", "CliDevice", "CliInfo", "CtkCdiList", "ToolkitConfig",
           "parse_cdi_specs", "parse_container_cli_info", "parse_ctk_cdi_list",
           "parse_ctk_version", "parse_toolkit_config", "toml_loads", "tree_files"]

PASTED = "(pasted)"  # the name of a pasted file of a tree source


def tree_files(text: str) -> dict[str, str]:
    """The files of a tree source's text: a tree document's ``files``, else the text as
    one pasted file; ParseError for a tree document that is not one."""
    head = text.lstrip()[:200]
    if head.startswith("{") and '"files"' in text[:4096]:
        try:
            doc = safejson.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and set(doc) <= {"files", "links", "errors"}:
            files = doc.get("files")
            if not isinstance(files, dict):
                raise ParseError("tree document without a files table")
            return {str(k): v for k, v in files.items() if isinstance(v, str)}
    return {PASTED: text} if text.strip() else {}


def toml_loads(text: str) -> dict[str, Any]:
    """TOML through the standard library (tomli before Python 3.11); ParseError when
    malformed."""
    import importlib

    reader: Any = None
    for name in ("tomllib", "tomli"):
        try:
            reader = importlib.import_module(name)
            break
        except ImportError:
            continue
    if reader is None:
        raise ParseError("reading TOML needs Python 3.11 or the tomli package")
    try:
        doc: dict[str, Any] = reader.loads(text)
    except (reader.TOMLDecodeError, RecursionError, ValueError) as exc:
        raise ParseError(f"malformed TOML ({str(exc)[:120]})") from None
    if safejson.too_deep(doc):  # a later walk of it would recurse as deep
        raise ParseError(f"malformed TOML (nested more than {safejson.MAX_DEPTH} levels)")
    return doc


# --- /etc/nvidia-container-runtime/config.toml ------------------------------------------
@dataclass
class ToolkitConfig:
    """What the container runtime's config.toml sets (``None``: not set, the default)."""

    mode: str | None = None  # nvidia-container-runtime.mode: auto | legacy | cdi | csv
    runtimes: tuple[str, ...] = ()  # the low-level runtimes it wraps
    no_cgroups: bool | None = None  # nvidia-container-cli.no-cgroups
    ldconfig: str | None = None
    spec_dirs: tuple[str, ...] = ()  # modes.cdi.spec-dirs
    capabilities: tuple[str, ...] = ()  # supported-driver-capabilities
    lines: dict[str, str] = field(default_factory=dict)  # key -> the line that sets it


_TOOLKIT_KEYS = {"mode": ("nvidia-container-runtime", "mode"),
                 "no-cgroups": ("nvidia-container-cli", "no-cgroups"),
                 "ldconfig": ("nvidia-container-cli", "ldconfig")}


def parse_toolkit_config(text: str) -> ToolkitConfig:
    """Parse the NVIDIA container runtime's ``config.toml``; ParseError when it is not
    TOML or sets none of the toolkit's tables or keys."""
    doc = toml_loads(text)
    known = ("nvidia-container-cli", "nvidia-container-runtime", "nvidia-container-runtime-hook",
             "nvidia-ctk", "disable-require", "supported-driver-capabilities")
    if not any(k in doc for k in known):
        raise ParseError("no table of the NVIDIA container toolkit")
    runtime = _table(doc, "nvidia-container-runtime")
    cli = _table(doc, "nvidia-container-cli")
    cdi = _table(_table(runtime, "modes"), "cdi")
    caps = doc.get("supported-driver-capabilities")
    cfg = ToolkitConfig(
        mode=_str(runtime.get("mode")), runtimes=_strs(runtime.get("runtimes")),
        no_cgroups=cli.get("no-cgroups") if isinstance(cli.get("no-cgroups"), bool) else None,
        ldconfig=_str(cli.get("ldconfig")), spec_dirs=_strs(cdi.get("spec-dirs")),
        capabilities=tuple(c.strip() for c in caps.split(",") if c.strip())
        if isinstance(caps, str) else ())
    for line in split_lines(text):
        key = line.split("=", 1)[0].strip()
        if "=" in line and not line.lstrip().startswith("#") and key in (*_TOOLKIT_KEYS,
                                                                          "runtimes"):
            cfg.lines.setdefault(key, line.strip())
    return cfg


def _table(doc: Any, name: str) -> dict[str, Any]:
    value = doc.get(name) if isinstance(doc, dict) else None
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


# --- CDI specs (/etc/cdi, /var/run/cdi) ------------------------------------------------
# the driver's own libraries: their file names carry the driver version the spec mounts
_DRIVER_LIB = re.compile(r"/(?:libcuda|libnvidia-ml)\.so\.(?P<v>[0-9]{3}\.[0-9]{1,3}"
                         r"(?:\.[0-9]{1,3})?)\b")
_FIRMWARE = re.compile(r"/firmware/nvidia/(?P<v>[0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?)/")


@dataclass
class CdiSpec:
    """One CDI spec file: its kind, the devices it names and the driver version its
    mounts carry."""

    path: str
    kind: str | None = None  # "nvidia.com/gpu"
    cdi_version: str | None = None
    devices: tuple[str, ...] = ()  # device names: "0", "1", "all", a UUID
    driver_versions: tuple[str, ...] = ()  # from libcuda / libnvidia-ml / firmware paths
    lines: tuple[str, ...] = ()  # lines that show the versions

    @property
    def qualified(self) -> tuple[str, ...]:
        """The fully qualified names a container asks for (``nvidia.com/gpu=0``)."""
        return tuple(f"{self.kind}={d}" for d in self.devices) if self.kind else ()


@dataclass
class CdiSpecs:
    """Every CDI spec found (empty: none; CDI is not in use)."""

    specs: list[CdiSpec] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)  # path -> why

    def of_kind(self, prefix: str = "nvidia.com/") -> list[CdiSpec]:
        return [s for s in self.specs if (s.kind or "").startswith(prefix)]


def parse_cdi_specs(text: str) -> CdiSpecs:
    """Parse the CDI spec files (a tree document, or one pasted spec in YAML or JSON);
    a file that is not a spec is listed as unreadable; ParseError when no file is a
    spec and some file is unreadable."""
    out = CdiSpecs()
    for path, body in sorted(tree_files(text).items()):
        try:
            out.specs.append(_cdi_spec(path, body))
        except ParseError as exc:
            out.unreadable[path] = str(exc)
    if out.unreadable and not out.specs:
        raise ParseError("; ".join(f"{p}: {why}" for p, why in out.unreadable.items())[:300])
    return out


def _cdi_doc(body: str) -> Any:
    stripped = body.lstrip()
    if stripped.startswith("{"):
        try:
            return safejson.loads(stripped)
        except ValueError as exc:
            raise ParseError(f"malformed JSON ({str(exc)[:80]})") from None
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:  # PyYAML is optional: read the few keys by line
        return _cdi_lines(body)
    try:
        return yaml.safe_load(body)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise ParseError(f"malformed YAML ({str(exc)[:80]})") from None


def _cdi_lines(body: str) -> dict[str, Any]:
    """The keys a spec is judged on, read line by line (no YAML library)."""
    doc: dict[str, Any] = {"devices": [], "containerEdits": {"mounts": []}}
    for line in split_lines(body):
        m = re.match(r"^(kind|cdiVersion):\s*['\"]?([^'\"\s]+)", line)
        if m:
            doc[m.group(1)] = m.group(2)
        elif m := re.match(r"^\s*(?:- )?name:\s*['\"]?([^'\"\s]+)", line):
            doc["devices"].append({"name": m.group(1)})
        elif m := re.match(r"^\s*(?:- )?hostPath:\s*(\S+)", line):
            doc["containerEdits"]["mounts"].append({"hostPath": m.group(1)})
    return doc


def _cdi_spec(path: str, body: str) -> CdiSpec:
    if "\0" in body:
        raise ParseError("binary data")
    doc = _cdi_doc(body)
    if not isinstance(doc, dict) or not ("cdiVersion" in doc or "kind" in doc):
        raise ParseError("not a CDI spec (no cdiVersion or kind)")
    devices = [d for d in doc.get("devices") or () if isinstance(d, dict)] \
        if isinstance(doc.get("devices"), list) else []
    names = tuple(str(d["name"]) for d in devices if isinstance(d.get("name"), (str, int)))
    hosts = list(_host_paths(doc.get("containerEdits")))
    for d in devices:
        hosts.extend(_host_paths(d.get("containerEdits")))
    versions = _driver_versions(hosts)
    shown = [ln.strip() for ln in split_lines(body) if "containerPath" not in ln
             and any(f".so.{v}" in ln or f"/{v}/" in ln for v in versions)]
    kind, cdi = doc.get("kind"), doc.get("cdiVersion")
    return CdiSpec(path, kind if isinstance(kind, str) else None,
                   str(cdi) if isinstance(cdi, (str, int, float)) else None, names,
                   tuple(versions), tuple(shown[:4]))


def _driver_versions(hosts: list[str]) -> list[str]:
    """The driver versions the host paths of a spec carry: its libraries' suffixes, else
    its firmware directory."""
    for pattern in (_DRIVER_LIB, _FIRMWARE):
        found = sorted({m.group("v") for p in hosts for m in (pattern.search(p),) if m})
        if found:
            return found
    return []


def _host_paths(edits: Any) -> list[str]:
    """The host paths of a containerEdits' mounts (and its hooks' arguments)."""
    if not isinstance(edits, dict):
        return []
    out = [m["hostPath"] for m in edits.get("mounts") or () if isinstance(m, dict)
           and isinstance(m.get("hostPath"), str)]
    for hook in edits.get("hooks") or ():
        if isinstance(hook, dict) and isinstance(hook.get("args"), list):
            out.extend(a for a in hook["args"] if isinstance(a, str))
    return out


# --- nvidia-ctk ------------------------------------------------------------------------
_CTK_VERSION = re.compile(r"NVIDIA Container Toolkit CLI version\s+v?(?P<v>[0-9][\w.+~-]*)"
                          r"|^nvidia-ctk version\s+v?(?P<w>[0-9][\w.+~-]*)", re.I | re.M)


def parse_ctk_version(text: str) -> str:
    """The toolkit version ``nvidia-ctk --version`` prints; ParseError when it prints
    none."""
    m = _CTK_VERSION.search(text or "")
    if not m:
        raise ParseError("no NVIDIA Container Toolkit version line")
    return m.group("v") or m.group("w")


@dataclass
class CtkCdiList:
    """``nvidia-ctk cdi list``: the CDI devices the runtime can resolve."""

    count: int | None = None  # "Found N CDI devices"
    devices: tuple[str, ...] = ()  # "nvidia.com/gpu=0"
    lines: tuple[str, ...] = ()


_FOUND = re.compile(r"Found (?P<n>[0-9]+) CDI devices?", re.I)
_QUALIFIED = re.compile(r"^\s*(?P<d>[a-z0-9][\w.-]*\.[a-z]{2,}/[\w.-]+=[\w.:-]+)\s*$", re.I)


def parse_ctk_cdi_list(text: str) -> CtkCdiList:
    """Parse ``nvidia-ctk cdi list``; ParseError when it prints neither a count nor a
    device."""
    out = CtkCdiList()
    devices: list[str] = []
    lines: list[str] = []
    for line in split_lines(text or ""):
        if m := _FOUND.search(line):
            out.count = strict_int(m.group("n"), signed=False)
            lines.append(line.strip())
        elif m := _QUALIFIED.match(line):
            devices.append(m.group("d"))
            lines.append(line.strip())
    if out.count is None and not devices:
        raise ParseError("no CDI device count or device name")
    out.devices, out.lines = tuple(devices), tuple(lines)
    return out


# --- nvidia-container-cli info ---------------------------------------------------------
@dataclass
class CliDevice:
    """One device block of ``nvidia-container-cli info`` (``None``: printed ``(null)``)."""

    index: int | None = None
    minor: int | None = None
    model: str | None = None
    brand: str | None = None
    uuid: str | None = None
    bus: str | None = None
    architecture: str | None = None


@dataclass
class CliInfo:
    """What libnvidia-container sees: the driver, its CUDA version and the devices; or
    the error it stopped on."""

    nvrm: str | None = None
    cuda: str | None = None
    devices: list[CliDevice] = field(default_factory=list)
    listed: tuple[str, ...] = ()  # the debug lines "listing device /dev/nvidia0 (...)"
    error: str | None = None  # "nvidia-container-cli: initialization error: ..."
    lines: tuple[str, ...] = ()  # the version lines, for evidence


_CLI_FIELDS = {"Device Index": "index", "Device Minor": "minor", "Model": "model",
               "Brand": "brand", "GPU UUID": "uuid", "Bus Location": "bus",
               "Architecture": "architecture"}
_CLI_LINE = re.compile(r"^(?P<k>NVRM version|CUDA version|Device Index|Device Minor|Model|Brand|"
                       r"GPU UUID|Bus Location|Architecture):\s*(?P<v>.*?)\s*$")
_LISTING = re.compile(r"listing device (?P<d>\S+)")
_CLI_ERROR = re.compile(r"nvidia-container-cli: .*error.*", re.I)


def parse_container_cli_info(text: str) -> CliInfo:
    """Parse ``nvidia-container-cli info`` (with or without its debug lines); ``(null)``
    fields (Jetson: no NVML, no PCI) read as None. ParseError when it prints neither a
    version, a device nor an error."""
    info = CliInfo()
    dev: CliDevice | None = None
    shown: list[str] = []
    listed: list[str] = []
    for line in split_lines(text or ""):
        m = _CLI_LINE.match(line.strip())
        if m:
            key, value = m.group("k"), _null(m.group("v"))
            if key in ("NVRM version", "CUDA version"):
                setattr(info, "nvrm" if key.startswith("NVRM") else "cuda", value)
                shown.append(line.strip())
            elif key == "Device Index":
                dev = CliDevice(index=_int(value))
                info.devices.append(dev)
            elif dev is not None:
                attr = _CLI_FIELDS[key]
                setattr(dev, attr, _int(value) if attr == "minor" else value)
        elif (lm := _LISTING.search(line)) and lm.group("d").startswith("/dev/"):
            listed.append(lm.group("d"))
        elif info.error is None and (em := _CLI_ERROR.search(line)):
            info.error = em.group(0).strip()
    if not (shown or info.devices or info.error):
        raise ParseError("no NVRM version, device or error line")
    info.listed, info.lines = tuple(listed), tuple(shown)
    return info


def _null(value: str) -> str | None:
    return None if value in ("", "(null)") else value


def _int(value: str | None) -> int | None:
    return strict_int(value, signed=False, hi=99999)


def dumps_tree(files: dict[str, str]) -> str:
    """A tree document of ``files`` (tests and scenarios)."""
    return json.dumps({"files": files, "links": {}, "errors": {}}, indent=1, sort_keys=True)
