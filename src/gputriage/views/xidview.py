"""``gputriage xid CODE...``: explain Xid (or NVSwitch SXid) codes from the catalog.

For each code: what it means, where it likely comes from, whether it is the
node's or the job's problem, what to do, NVIDIA's own bucket and mnemonic,
and a short explanation. rich is imported inside :func:`render_xids` only,
and all text goes in as rich ``Text`` (never markup).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from gputriage.knowledge.xid import SxidInfo, XidInfo, sxid_info, xid_info
from gputriage.results.document import plain
from gputriage.vocabulary import ACTION_WORDS as VOCABULARY_ACTIONS

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

SEVERITY_STYLES = {"critical": "bold red", "warning": "bold yellow", "info": "bold cyan"}

ACTION_WORDS = VOCABULARY_ACTIONS
BLAME_WORDS = {
    "node": "node (hardware or host, not the job)",
    "job": "job (the application, not the node)",
    "config": "config (setup or software mismatch)",
    "job-config": "job-config (the job's own settings, not the node)",
    "unknown": "unknown (could be either)",
}


def _lookup(code: int, sxid: bool) -> XidInfo | SxidInfo | None:
    return sxid_info(code) if sxid else xid_info(code)


def _rows(info: XidInfo | SxidInfo) -> list[tuple[str, str]]:
    """(label, value) pairs describing one catalog entry (its meaning heads the entry)."""
    origins = ", ".join(info.origins) or "unknown"
    rows = [("likely origin", origins),
            ("node or job", BLAME_WORDS.get(info.blame.value, info.blame.value)),
            ("action", f"{info.action.value}: {ACTION_WORDS.get(info.action.value, '-')}")]
    if isinstance(info, XidInfo):
        rows.append(("NVIDIA bucket", info.nvidia_bucket or "none given"))
    else:
        rows.append(("NVIDIA bucket", info.bucket or "none given"))
        fatality = "fatal" if info.fatal else "non-fatal"
        if info.category:
            fatality += f" (Fabric Manager guide table: {info.category})"
        rows.append(("fatality", fatality))
    rows.append(("mnemonic", info.mnemonic or "-"))
    if isinstance(info, XidInfo) and info.legacy:
        rows.append(("note", "legacy code: not raised on Ampere or newer GPUs"))
    rows.append(("why", info.explanation))
    return rows


def render_xids(codes: list[int], console: Console, *, sxid: bool = False) -> int:
    """Print the catalog entry of each code on ``console``; return how many are unknown."""
    from rich.text import Text

    from gputriage.views.tables import new_table, print_table, say

    kind = "SXid" if sxid else "Xid"
    unknown = 0
    for i, code in enumerate(codes):
        if i:
            console.print()
        info = _lookup(code, sxid)
        if info is None:
            unknown += 1
            head = Text()
            head.append(f"{kind} {code}", style="bold")
            head.append(": not in the catalog", style="bold magenta")
            say(console, head)
            continue
        sev = info.severity.value
        head = Text()
        head.append(f"{kind} {code}", style="bold")
        head.append("  ")
        head.append(sev.upper(), style=SEVERITY_STYLES.get(sev, ""))
        head.append("  ")
        head.append(info.meaning)
        say(console, head)
        grid = new_table(console, header=False)
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column(overflow="fold")
        for label, value in _rows(info):
            grid.add_row(Text(label), Text(value))
        print_table(console, grid)
    return unknown


def xid_lines(codes: list[int], *, sxid: bool = False) -> list[str]:
    """One line per code (``-q``): the code, its severity, whose fault, its meaning
    and the action."""
    kind = "SXid" if sxid else "Xid"
    lines = []
    for code in codes:
        info = _lookup(code, sxid)
        if info is None:
            lines.append(f"{kind} {code} UNKNOWN: not in the catalog")
            continue
        lines.append(f"{kind} {code} {info.severity.value.upper()} [{info.blame.value}]: "
                     f"{info.meaning} — {ACTION_WORDS.get(info.action.value, info.action.value)}")
    return lines


def xids_json(codes: list[int], sxid: bool = False) -> list[dict]:
    """The catalog entries of ``codes`` as plain JSON data (``known`` false when unknown)."""
    out: list[dict] = []
    for code in codes:
        info = _lookup(code, sxid)
        if info is None:
            out.append({"code": code, "kind": "sxid" if sxid else "xid", "known": False})
            continue
        entry: dict[str, Any] = {"code": code, "kind": "sxid" if sxid else "xid", "known": True}
        entry.update({k: plain(v) for k, v in asdict(info).items() if k != "code"})
        out.append(entry)
    return out
