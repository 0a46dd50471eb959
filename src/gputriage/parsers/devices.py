"""Device majors (``/proc/devices``) and the NVIDIA device nodes under ``/dev``.

``nvidia-uvm`` and ``nvidia-caps`` get dynamic majors, so a node created
with a stale major (after a module reload) only shows by comparing the two.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputriage.text.fields import ParseError, as_int, split_lines, strict_int

__all__ = ["DevNode", "parse_devnodes", "parse_proc_devices"]

_KINDS = {"c": "char", "b": "block"}


def parse_proc_devices(text: str) -> dict[str, int]:
    """Character-device name -> major from ``/proc/devices``; block devices are ignored.

    Lines before any section header count as character devices (pasted
    fragments). Empty text gives ``{}``; text without a single
    ``<major> <name>`` line or section header raises ParseError.
    """
    out: dict[str, int] = {}
    section = "char"
    recognised = False
    other = False
    for line in split_lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped == "Character devices:":
            section, recognised = "char", True
            continue
        if stripped == "Block devices:":
            section, recognised = "block", True
            continue
        parts = stripped.split()
        major = strict_int(parts[0], signed=False) if len(parts) == 2 else None
        if major is not None:
            recognised = True
            if section == "char":
                out.setdefault(parts[1], major)
        else:
            other = True
    if other and not recognised:
        raise ParseError("not /proc/devices: no 'Character devices:' section or "
                         "'<major> <name>' line")
    return out


@dataclass
class DevNode:
    """One device node as the collector saw it."""

    path: str
    major: int | None
    minor: int | None
    mode: str | None  # "crw-rw-rw-"
    kind: str | None  # "char" | "block" | "other"


def _as_int(value: object) -> int | None:
    return as_int(value, lo=0)


def parse_devnodes(doc: object) -> list[DevNode]:
    """Parse the ``devnodes`` source: a JSON list of node objects, sorted by path.

    Raises ParseError when ``doc`` is not a list; entries that are not objects
    with a text ``path`` are skipped. ``kind`` is taken from the entry, else
    from the first character of ``mode``.
    """
    if not isinstance(doc, list):
        raise ParseError(f"devnodes document must be a JSON list, got {type(doc).__name__}")
    nodes: list[DevNode] = []
    for entry in doc:
        if not isinstance(entry, dict):
            continue
        path = entry.get("path")
        if not isinstance(path, str) or not path:
            continue
        mode = entry.get("mode")
        mode = mode if isinstance(mode, str) and mode else None
        kind = entry.get("kind")
        if kind not in ("char", "block", "other"):
            kind = _KINDS.get(mode[0], "other") if mode else None
        nodes.append(DevNode(path=path, major=_as_int(entry.get("major")),
                             minor=_as_int(entry.get("minor")), mode=mode, kind=kind))
    return sorted(nodes, key=lambda n: n.path)
