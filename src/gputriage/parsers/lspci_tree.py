"""``lspci -tv`` (``-t``, ``-tvnn``): the PCI tree, one node per function with the bridge
it hangs below.

The tree draws each root bus as ``-[dddd:bb]-``, each function as ``dd.f``, a bridge's
secondary (and subordinate) bus as ``-[ss]`` / ``-[ss-ee]`` right after it, a single child
as ``----dd.f`` and several as a fork (``+-`` for all but the last, ``\\-`` for the last)
whose column the following lines continue (``|``). With ``-v`` a name follows each function
after two spaces (with ``-nn`` ending in ``[vvvv:dddd]``). A node's parent is the bridge
drawn to its left; a function on a root bus has none (the host bridge is not a function).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["TreeNode", "claim_lspci_tree", "parse_lspci_tree"]

_QUOTE = re.compile(r"^(?:[ ]{0,3}>[ ]?)+")
_ROOT = re.compile(r"\[(?:(?P<dom>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2})\]")
_DEV = re.compile(r"(?P<dev>[0-9a-fA-F]{2}\.[0-7])"
                  r"(?:-\[(?P<sec>[0-9a-fA-F]{2})(?:-(?P<sub>[0-9a-fA-F]{2}))?\])?")
_IDS = re.compile(r"\[(?P<v>[0-9a-fA-F]{4}):(?P<d>[0-9a-fA-F]{4})\]\s*$")
_MAX_NODES = 4096  # far more functions than any host has: a bound, not a limit
_MAX_LINE = 4096

# --- recognising it in a paste: the first line draws a root bus, the others go on
_FIRST = re.compile(r"^\s*(?:[+\\]-|-(?:\+-)?)\[(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}\]-")
_BODY = re.compile(r"^[ |]*(?:[+\\]-(?:\[(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}\]|"
                   r"[0-9a-fA-F]{2}\.[0-7])|\|\s*$)")


@dataclass(frozen=True)
class TreeNode:
    """One function of the tree: its address, the bridge above it (None on a root bus),
    the buses below it when it is a bridge, and the name ``-v`` printed."""

    address: str  # "0000:03:00.0"
    parent: str | None
    secondary: str | None = None  # "0000:03" for a bridge
    subordinate: str | None = None
    description: str = ""
    vendor: int | None = None
    device: int | None = None
    line: str = ""  # the tree line that draws it

    @property
    def is_bridge(self) -> bool:
        """Drawn with buses below it."""
        return self.secondary is not None


@dataclass
class _Context:
    """What the next function drawn on a line hangs below: its bus and bridge."""

    domain: str
    bus: str
    bridge: str | None


def _node(ctx: _Context, m: re.Match[str], rest: str, line: str) -> TreeNode:
    address = f"{ctx.domain}:{ctx.bus}:{m.group('dev')}".lower()
    sec, sub = m.group("sec"), m.group("sub")
    desc = rest.strip()
    ids = _IDS.search(desc)
    return TreeNode(
        address=address, parent=ctx.bridge,
        secondary=f"{ctx.domain}:{sec}".lower() if sec else None,
        subordinate=f"{ctx.domain}:{sub or sec}".lower() if sec else None,
        description=desc, vendor=int(ids.group("v"), 16) if ids else None,
        device=int(ids.group("d"), 16) if ids else None, line=line.strip())


def _scan(line: str, forks: dict[int, _Context], out: list[TreeNode]) -> None:
    """Read one tree line left to right; ``forks`` maps a fork's column to what the
    functions drawn at that column (on this and later lines) hang below."""
    pending: _Context | None = None
    domain = "0000"
    i = 0
    while i < len(line):
        ch = line[i]
        root = _ROOT.match(line, i) if ch == "[" else None
        if root:
            domain = (root.group("dom") or domain).lower().rjust(4, "0")
            pending = _Context(domain, root.group("bus").lower(), None)
            i = root.end()
            continue
        if ch in "+\\" and line[i + 1:i + 2] == "-":
            if pending is not None:
                forks[i] = pending
            else:
                pending = forks.get(i)
            i += 2
            continue
        dev = _DEV.match(line, i) if ch not in "-| " else None
        if dev and pending is not None:
            rest = line[dev.end():]
            out.append(_node(pending, dev, rest if rest[:1].isspace() else "", line))
            if not dev.group("sec") or rest[:1].isspace():
                return
            pending = _Context(pending.domain, dev.group("sec").lower(), out[-1].address)
            i = dev.end()
            continue
        if ch not in "-| ":
            return  # anything else (a name without -v's two spaces, a note): the line ends
        i += 1


def parse_lspci_tree(text: str) -> list[TreeNode]:
    """The functions of an ``lspci -t``/``-tv`` tree, in the order drawn; a function
    drawn twice keeps its first place. Empty text gives []; text without a tree raises
    ParseError."""
    if not text.strip():
        return []
    forks: dict[int, _Context] = {}
    out: list[TreeNode] = []
    started = False
    for raw_line in split_lines(text):
        line = _QUOTE.sub("", raw_line).rstrip()[:_MAX_LINE]
        if not started:
            if not _FIRST.match(line):
                continue
            started = True
        _scan(line, forks, out)
        if len(out) > _MAX_NODES:
            break
    if not out:
        raise ParseError("no lspci -t tree found (expected lines like "
                         "'-[0000:00]-+-01.0-[01]----00.0  NVIDIA Corporation ...')")
    seen: dict[str, TreeNode] = {}
    for node in out:
        seen.setdefault(node.address, node)
    return list(seen.values())


# a tree starts at a free line that draws a root bus (its "]-" left of any quoting)
_FIRST_GATE = Gate(_FIRST)


@gated_by(_FIRST_GATE)
def claim_lspci_tree(doc: PasteDoc) -> None:
    """An ``lspci -t``/``-tv`` tree: from a line that draws a root bus, every line that
    goes on drawing it."""
    if not _FIRST_GATE.open(doc):
        return
    i = 0
    while i < len(doc.lines):
        line = _QUOTE.sub("", doc.lines[i])
        if doc.free(i) and _FIRST.match(line):
            end = doc.extend(i + 1, lambda s: bool(_BODY.match(_QUOTE.sub("", s)))
                             or bool(_FIRST.match(_QUOTE.sub("", s))))
            doc.claim("lspci_tree", i, end)
            i = max(end, i + 1)
        else:
            i += 1
