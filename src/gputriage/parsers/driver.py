"""Driver-side facts: the loaded kernel module version, per-module versions,
the kernel module's view of each GPU, and the userspace NVML / CUDA libraries.

Sources: ``proc_driver_nvidia_version`` (text), and the tree documents
``sys_module_nvidia``, ``proc_driver_nvidia_gpus`` and ``nvidia_libs``
(``{"files": {rel: text}, "links": {rel: target}, "errors": {rel: kind}}``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.parsers.detect_gate import gated_blocks, gated_by
from gputriage.text.fields import ParseError, normalize_bus_id, parse_int, split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["KernelModuleVersion", "LibFile", "ModuleVersions", "ProcGpu", "claim_driver_version",
           "parse_gpu_information", "parse_gpus_information", "parse_nvidia_libs",
           "parse_proc_driver_version", "parse_sys_module_versions", "split_tree"]

_TREE_KEYS = ("files", "links", "errors")


def split_tree(tree: object) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Validate a tree document and return its ``(files, links, errors)`` maps.

    A missing part is an empty map; ``None`` file contents become ``""``;
    entries whose key or value is not text are dropped. Raises ParseError when
    ``tree`` is not a dict, has none of the three parts (unless empty), or a
    part is not a dict.
    """
    if not isinstance(tree, dict):
        raise ParseError(f"tree document must be a JSON object, got {type(tree).__name__}")
    if tree and not any(k in tree for k in _TREE_KEYS):
        raise ParseError("not a tree document: no 'files', 'links' or 'errors' key")
    parts: list[dict[str, str]] = []
    for key in _TREE_KEYS:
        raw = tree.get(key)
        if raw is None:
            parts.append({})
            continue
        if not isinstance(raw, dict):
            raise ParseError(f"tree document: {key!r} must be an object, "
                             f"got {type(raw).__name__}")
        part: dict[str, str] = {}
        for k, v in raw.items():
            if v is None:
                v = ""
            if isinstance(k, str) and isinstance(v, str):
                part[k] = v
        parts.append(part)
    return parts[0], parts[1], parts[2]


# --- /proc/driver/nvidia/version -------------------------------------------------------

@dataclass
class KernelModuleVersion:
    """The loaded NVIDIA kernel module as ``/proc/driver/nvidia/version`` reports it."""

    version: str | None  # "570.181", "535.161.07"
    flavor: str | None  # "open" | "proprietary" | None
    gcc: str | None  # compiler version the module was built with, e.g. "12.3.0"
    line: str  # the NVRM version line, for evidence


_VERSION_AFTER_MODULE = re.compile(
    r"Kernel Module(?:\s+for\s+\S{1,32})?\s+([0-9]{1,4}\.[0-9]{1,4}(?:\.[0-9]{1,4}){0,2})\b")
_ANY_DRIVER_VERSION = re.compile(r"(?<![\w.])([0-9]{2,4}\.[0-9]{1,4}(?:\.[0-9]{1,4}){0,2})"
                                 r"(?![\w.])")
_GCC_VERSION = re.compile(r"gcc version\s+([0-9]{1,3}(?:\.[0-9]{1,4}){0,3})")


def parse_proc_driver_version(text: str) -> KernelModuleVersion | None:
    """Parse ``/proc/driver/nvidia/version``; None when empty.

    Raises ParseError when the text has no ``NVRM version:`` line.
    """
    if not text or not text.strip():
        return None
    nvrm: str | None = None
    gcc_line: str | None = None
    for raw in split_lines(text):
        line = raw.strip()
        if nvrm is None and line.startswith("NVRM version:"):
            nvrm = line
        elif gcc_line is None and line.startswith("GCC version:"):
            gcc_line = line
    if nvrm is None:
        raise ParseError("not /proc/driver/nvidia/version: no 'NVRM version:' line")
    body = nvrm[len("NVRM version:"):]
    m = _VERSION_AFTER_MODULE.search(body) or _ANY_DRIVER_VERSION.search(body)
    version = m.group(1) if m else None
    if "Open Kernel Module" in body:
        flavor: str | None = "open"
    elif "Kernel Module" in body:
        flavor = "proprietary"
    else:
        flavor = None
    gcc = None
    if gcc_line is not None:
        g = _GCC_VERSION.search(gcc_line)
        gcc = g.group(1) if g else (gcc_line[len("GCC version:"):].strip() or None)
    return KernelModuleVersion(version=version, flavor=flavor, gcc=gcc, line=nvrm)


# --- /sys/module/nvidia*/{version,initstate} ---------------------------------------------

@dataclass
class ModuleVersions:
    """Per-module version and init state from ``/sys/module/<mod>/``."""

    versions: dict[str, str] = field(default_factory=dict)  # {"nvidia": "550.54.14", ...}
    initstate: dict[str, str] = field(default_factory=dict)  # {"nvidia": "live"}


def parse_sys_module_versions(tree: object) -> ModuleVersions:
    """Parse the ``sys_module_nvidia`` tree (``<mod>/version``, ``<mod>/initstate``)."""
    files, _links, _errors = split_tree(tree)
    out = ModuleVersions()
    for rel, text in sorted(files.items()):
        module, _, attr = rel.strip("/").rpartition("/")
        value = text.strip()
        if not module or "/" in module or not value:
            continue
        if attr == "version":
            out.versions[module] = value
        elif attr == "initstate":
            out.initstate[module] = value
    return out


# --- /proc/driver/nvidia/gpus/<bus>/information ------------------------------------------

@dataclass
class ProcGpu:
    """One GPU as the kernel module lists it under ``/proc/driver/nvidia/gpus``."""

    bus_id: str | None
    model: str | None
    irq: int | None
    uuid: str | None
    vbios: str | None
    bus_type: str | None
    device_minor: int | None
    firmware: str | None
    raw: dict[str, str] = field(default_factory=dict)


def _none_if_na(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip()
    return None if not v or v in {"N/A", "[N/A]", "??.??.??.??.??"} else v


def parse_gpu_information(text: str, bus_hint: str | None = None) -> ProcGpu:
    """Parse one ``information`` file (``Key: value`` lines); ``bus_hint`` is its directory."""
    raw: dict[str, str] = {}
    for line in split_lines(text):
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key and len(key) <= 64:
            raw.setdefault(key, value.strip())
    bus = normalize_bus_id(raw.get("Bus Location")) or normalize_bus_id(bus_hint)
    return ProcGpu(
        bus_id=bus,
        model=_none_if_na(raw.get("Model")),
        irq=parse_int(raw.get("IRQ")),
        uuid=_none_if_na(raw.get("GPU UUID")),
        vbios=_none_if_na(raw.get("Video BIOS")),
        bus_type=_none_if_na(raw.get("Bus Type")),
        device_minor=parse_int(raw.get("Device Minor")),
        firmware=_none_if_na(raw.get("GPU Firmware")),
        raw=raw,
    )


def parse_gpus_information(tree: object) -> list[ProcGpu]:
    """Parse the ``proc_driver_nvidia_gpus`` tree; one ProcGpu per ``<bus>/information``."""
    files, _links, _errors = split_tree(tree)
    gpus: list[ProcGpu] = []
    for rel, text in files.items():
        parent, _, name = rel.strip("/").rpartition("/")
        if name != "information" or not text.strip():
            continue
        gpus.append(parse_gpu_information(text, parent.rpartition("/")[2]))
    return sorted(gpus, key=lambda g: g.bus_id or "")


# --- userspace libraries ------------------------------------------------------------------

@dataclass
class LibFile:
    """A userspace driver library found on disk (the name carries the version)."""

    path: str  # absolute path, e.g. "/usr/lib64/libnvidia-ml.so.550.54.14"
    library: str  # "libnvidia-ml" | "libcuda"
    version: str | None  # "550.54.14"; None for "libcuda.so.1" and the like


_LIB_NAME = re.compile(r"^(?P<lib>[A-Za-z0-9_+\-]{1,64})\.so(?:\.(?P<suffix>[0-9.]{1,32}))?$")
_LIB_VERSION = re.compile(r"^[0-9]{3,4}\.[0-9]{1,4}(?:\.[0-9]{1,4}){0,2}$")


def parse_nvidia_libs(tree: object) -> list[LibFile]:
    """Parse the ``nvidia_libs`` tree (names only): files and links, sorted by path."""
    files, links, _errors = split_tree(tree)
    out: dict[str, LibFile] = {}
    for rel in list(files) + list(links):
        name = rel.rstrip("/").rpartition("/")[2]
        m = _LIB_NAME.match(name)
        if not m:
            continue
        suffix = m.group("suffix")
        version = suffix if suffix and _LIB_VERSION.match(suffix) else None
        path = rel if rel.startswith("/") else "/" + rel
        out[path] = LibFile(path=path, library=m.group("lib"), version=version)
    return [out[p] for p in sorted(out)]


# --- recognising it in a paste -------------------------------------------------------
_NVRM_VERSION = re.compile(r"^NVRM version: NVIDIA ")


@gated_by(_NVRM_VERSION)
def claim_driver_version(doc: PasteDoc) -> None:
    """/proc/driver/nvidia/version: its NVRM line and the GCC line under it."""
    gated_blocks(doc, "proc_driver_nvidia_version", _NVRM_VERSION,
                 lambda s: s.startswith("GCC version:"))
