"""Renderings of a :class:`gputriage.results.diff.Diff`: terminal lines and JSON.

The terminal view opens with one "changed:" line (``kernel 5.15.0-105 ->
5.15.0-112; driver module 535.161.07 -> 550.54.15 ...``), then the GPU set
changes, then the findings that are new, resolved and still there. Host text
is printed as rich ``Text`` (never markup), so ``gpu[0000:18:00.0]`` keys
print verbatim, with control characters escaped (:mod:`gputriage.text.safe`);
wrapped between words on a terminal, one line each when piped.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gputriage import __version__
from gputriage.results.diff import DIFF_SCHEMA, Diff, FactChange, FindingRef, GpuChange
from gputriage.text.safe import printable
from gputriage.text.words import counted

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

# Friendlier names for the top-level keys; the rest print as their key.
_NAMES = {"driver.module": "driver module", "driver.userspace": "userspace driver",
          "cuda": "CUDA", "container.toolkit": "container toolkit",
          "container.cdi_specs": "CDI specs"}
_STYLE = {"critical": "bold red", "warning": "bold yellow", "info": "cyan", "ok": "green"}


def _value(value: Any) -> str:
    return "(none)" if value is None else str(value)


def change_text(change: FactChange) -> str:
    """``kernel 5.15.0-105 -> 5.15.0-112``."""
    name = _NAMES.get(change.key, change.key)
    return f"{name} {_value(change.before)} -> {_value(change.after)}"


def gpu_change_text(change: GpuChange) -> str:
    """One GPU set change as a phrase."""
    what = f"{change.name} " if change.name else ""
    if change.change == "moved":
        return f"GPU {what}{change.ident} moved {change.bus_before} -> {change.bus_after}"
    bus = change.bus_before if change.change == "removed" else change.bus_after
    ident = "" if change.ident == bus else f" {change.ident}"
    note = f" ({change.note})" if change.note else ""
    return f"GPU {change.change}: {what}{bus}{ident}{note}"


def changed_line(d: Diff) -> str:
    """The one-line summary of changed facts and GPUs ("changed: nothing" when none)."""
    parts = [change_text(c) for c in d.changes] + [gpu_change_text(g) for g in d.gpus]
    return "changed: " + ("; ".join(parts) if parts else "nothing")


def finding_text(f: FindingRef) -> str:
    """``[critical] xid.79 GPU 4 0000:9a:00.0: title``."""
    scope = "" if f.scope == "node" else f" ({f.scope})"
    return f"[{f.severity}] {f.id}{scope}: {f.title}"


def diff_line(d: Diff) -> str:
    """The diff in one line (``-q``): ``CHANGED`` (exit 1) or ``SAME`` (exit 0), the
    counts, then the changed facts."""
    word = "CHANGED" if d.exit_status else "SAME"
    counts = ", ".join((counted(len(d.changes) + len(d.gpus), "fact") + " changed",
                        counted(len(d.new), "new finding"),
                        f"{len(d.resolved)} resolved", f"{len(d.still)} still there"))
    facts = changed_line(d).removeprefix("changed: ")
    return printable(f"{word}: {counts}" + ("" if facts == "nothing" else f"; {facts}"))


def render_diff(d: Diff, console: Console, verbose: bool = False) -> None:
    """Print the diff for a terminal; every line goes through :func:`printable`."""
    from rich.text import Text

    from gputriage.views import tables

    def say(text: str, style: str = "") -> None:
        tables.say(console, Text(printable(text), style=style))

    say(f"A: {d.a}", "dim")
    say(f"B: {d.b}", "dim")
    say(changed_line(d), "bold" if d.facts_changed else "")
    for title, items, style in (("new findings", d.new, "bold red"),
                                ("resolved findings", d.resolved, "green"),
                                ("still there", d.still, "")):
        if not items:
            continue
        say(f"{title} ({len(items)}):", style)
        for f in items:
            say("  " + finding_text(f), _STYLE.get(f.severity, "") if style else "")
    if not (d.new or d.resolved or d.still):
        say("findings: none on either side")
    if d.not_compared and verbose:
        say("not compared (only one side shows them): " + ", ".join(d.not_compared), "dim")
    elif d.not_compared:
        say(f"{counted(len(d.not_compared), 'fact family')} shown by one side only "
            "(-v lists them)", "dim")


def diff_to_json(d: Diff) -> dict:
    """The ``gputriage/diff/v1`` document of a diff (see docs/json-schema.md)."""
    def plain(value: Any) -> Any:
        return value if value is None or isinstance(value, (bool, int, float, str)) \
            else str(value)

    return {
        "schema": DIFF_SCHEMA,
        "tool_version": __version__,
        "a": d.a,
        "b": d.b,
        "exit_status": d.exit_status,
        "changed": [{"key": c.key, "before": plain(c.before), "after": plain(c.after)}
                    for c in d.changes],
        "gpus": [{k: v for k, v in vars(g).items() if v is not None} for g in d.gpus],
        "findings": {"new": [f.to_json() for f in d.new],
                     "resolved": [f.to_json() for f in d.resolved],
                     "still": [f.to_json() for f in d.still]},
        "not_compared": list(d.not_compared),
    }


def dumps_diff(d: Diff) -> str:
    """The ``gputriage/diff/v1`` document as indented JSON text."""
    return json.dumps(diff_to_json(d), indent=2, ensure_ascii=False)
