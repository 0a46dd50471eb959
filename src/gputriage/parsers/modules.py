"""Loaded kernel modules, from ``/proc/modules`` or ``lsmod`` output.

``/proc/modules``: ``name size refcount used_by state offset [taints]``
(``used_by`` is ``-`` or ``a,b,``). ``lsmod``: a ``Module  Size  Used by``
header, then ``name size refcount [a,b]`` (no state).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gputriage.parsers.detect_gate import gated_blocks, gated_by, gated_lines
from gputriage.text.fields import ParseError, split_lines, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["Module", "claim_modules", "parse_modules"]

_STATES = {"Live", "Loading", "Unloading"}


@dataclass
class Module:
    """One loaded kernel module."""

    name: str
    size: int | None
    refcount: int | None
    used_by: tuple[str, ...]
    state: str | None  # "Live" | "Loading" | "Unloading" (``/proc/modules`` only)
    line: str


def _int(token: str | None) -> int | None:
    return strict_int(token, signed=False)


def _users(token: str | None) -> tuple[str, ...]:
    if not token or token in {"-", "[permanent]"}:
        return ()
    return tuple(u for u in token.split(",") if u and u != "[permanent]")


def _parse_line(line: str) -> Module | None:
    tokens = line.split()
    size = strict_int(tokens[1], signed=False) if len(tokens) >= 2 else None
    if size is None:
        return None
    name = tokens[0]
    if not all(c.isalnum() or c in "_-" for c in name):
        return None
    refcount = _int(tokens[2]) if len(tokens) > 2 else None
    rest = tokens[3:]
    state = None
    if len(rest) >= 2 and rest[1] in _STATES:  # /proc/modules
        used_by = _users(rest[0])
        state = rest[1]
    else:  # lsmod: the Used-by list, possibly followed by "[permanent]"
        used_by = _users(rest[0]) if rest else ()
    return Module(name=name, size=size, refcount=refcount, used_by=used_by,
                  state=state, line=line.rstrip())


def parse_modules(text: str) -> list[Module]:
    """Parse ``/proc/modules`` or ``lsmod`` output into modules, in file order.

    Empty text gives ``[]``; text with lines but no module line raises ParseError.
    Unparseable lines among module lines are skipped.
    """
    modules: list[Module] = []
    other = 0
    for line in split_lines(text):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("Module") and "Size" in stripped:
            continue  # lsmod header
        mod = _parse_line(stripped)
        if mod is None:
            other += 1
        else:
            modules.append(mod)
    if not modules and other:
        raise ParseError("not /proc/modules or lsmod output: no 'name size refcount' line")
    return modules


# --- recognising it in a paste -------------------------------------------------------
_LSMOD_HEAD = re.compile(r"^Module\s+Size\s+Used by")
_LSMOD_ROW = re.compile(r"^\w+\s+[0-9]+\s+[0-9]+")
_PROC_ROW = re.compile(
    r"^\w+ [0-9]+ [0-9]+ \S+ (?:Live|Loading|Unloading)\b|^nvidia\w*\s+[0-9]+\s+[0-9]+"
    r"(?:\s+\S+)?\s*$")


@gated_by(_LSMOD_HEAD, _PROC_ROW)
def claim_modules(doc: PasteDoc) -> None:
    """``lsmod`` (header and rows) and /proc/modules rows (or nvidia* rows of lsmod)."""
    gated_blocks(doc, "proc_modules", _LSMOD_HEAD, lambda s: bool(_LSMOD_ROW.match(s)))
    gated_lines(doc, "proc_modules", _PROC_ROW)
