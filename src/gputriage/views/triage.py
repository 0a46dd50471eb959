"""The triage screen and its JSON: a :class:`~gputriage.results.triage.Triage` rendered.

:func:`render_triage` prints it with rich ``Text`` only (never markup, control
characters escaped), the findings as a table (plain columns piped);
:func:`triage_to_json` gives the ``gputriage/triage/v1`` document for tickets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gputriage.model import Severity
from gputriage.results.document import plain
from gputriage.results.triage import Triage
from gputriage.status import counted_severity
from gputriage.text.safe import printable
from gputriage.views.diffview import changed_line, diff_to_json

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

__all__ = ["TRIAGE_SCHEMA", "render_triage", "triage_to_json"]

TRIAGE_SCHEMA = "gputriage/triage/v1"

_STYLE = {"critical": "bold red", "warning": "bold yellow", "ok": "bold green",
          "unknown": "bold magenta"}


def _host_line(t: Triage) -> str:
    host = t.result.host
    driver = host.driver
    parts = [f"TRIAGE {host.called}: {t.verdict.upper()}"]
    if host.kernel:
        parts.append(f"kernel {host.kernel}")
    if driver.kernel_module or driver.userspace:
        parts.append(f"driver {driver.kernel_module or driver.userspace}")
    if host.gpus_on_pci is not None or host.gpus_visible is not None:
        parts.append(f"GPUs {host.gpus_visible} visible of {host.gpus_on_pci} on PCI")
    return " | ".join(parts)


def render_triage(t: Triage, console: Console) -> None:
    """Print the triage screen; host and input text goes through :func:`printable`."""
    from rich.text import Text

    from gputriage.views import tables

    def say(text: str, style: str = "") -> None:
        tables.say(console, Text(printable(text), style=style))

    say(_host_line(t), _STYLE.get(t.verdict, "bold"))
    for item in t.result.not_read:  # what was not judged is said first, never last
        say(f"   not read: {item}", "yellow")
    say("1. What changed", "bold")
    if t.diff is None:
        say("   no baseline (give one with --baseline PATH)", "dim")
    else:
        say(f"   since {t.baseline}: {changed_line(t.diff)}")
        if t.diff.new:
            say("   new findings: " + ", ".join(f.id for f in t.diff.new))
        if t.diff.resolved:
            say("   resolved: " + ", ".join(f.id for f in t.diff.resolved))
    crit = sum(1 for f in t.findings
               if counted_severity(t.result, f) is Severity.CRITICAL)
    say(f"2. Findings ({crit} critical, {len(t.findings) - crit} warning)", "bold")
    if not t.findings:
        say("   none")
    else:
        _findings(t, console)
    say("3. Next actions", "bold")
    if not t.actions:
        say("   none needed")
    for i, a in enumerate(t.actions, 1):
        say(f"   {i}. {a.says}")
        folded = f" (with {', '.join(a.consequences)})" if a.consequences else ""
        say(f"      closes {', '.join(a.findings)}{folded} on {', '.join(a.targets)} "
            f"[{a.action.value}]", "dim")
    if t.result.unreadable:
        say(f"({len(t.result.unreadable)} input problem(s); gputriage analyze -v shows them)",
            "dim")


def _findings(t: Triage, console: Console) -> None:
    """The findings as a table: severity, blame, then id, scope and title."""
    from rich.text import Text

    from gputriage.views.tables import new_table, print_table

    table = new_table(console, header=False)
    table.add_column(no_wrap=True)  # the indent under "2. Findings"
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    for f in t.findings:
        scope = "" if f.scope.kind == "node" else f" ({', '.join(s.label() for s in f.scopes)})"
        status = "" if f.current else f" [{f.status.value}]"
        word = counted_severity(t.result, f).value  # the one the headline counts with
        table.add_row(Text(" "), Text(word.upper(), style=_STYLE.get(word, "")),
                      Text(f.blame.value.upper()),
                      Text(printable(f"{f.id}{scope}: {f.title}{status}")))
    print_table(console, table)


def triage_to_json(t: Triage) -> dict[str, Any]:
    """The ``gputriage/triage/v1`` document."""
    from gputriage import __version__

    return {
        "schema": TRIAGE_SCHEMA,
        "tool_version": __version__,
        "verdict": t.verdict,
        "exit_status": t.exit_status,
        "host": plain(t.result.host.to_json()),
        "baseline": t.baseline,
        "changed": diff_to_json(t.diff) if t.diff is not None else None,
        "findings": [plain(f.to_json()) for f in t.findings],
        "actions": [{"action": a.action.value, "text": a.text, "targets": list(a.targets),
                     "findings": list(a.findings), "step": a.step,
                     "closes": list(a.closes),
                     "severity": a.severity.value} for a in t.actions],
    }
