"""The triage screen: the incident view in the order an on-call thinks.

1. what changed (against a baseline, when one is given),
2. the findings that matter (critical, then warning) with node-or-job blame,
3. the next actions, deduplicated, most drastic first, each with the GPUs /
   units it applies to.

:func:`build_triage` is pure; :func:`render_triage` prints it with rich
``Text`` only (never markup, control characters escaped); :func:`triage_to_json` gives the
``gputriage/triage/v1`` document for tickets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gputriage.diff import Diff
from gputriage.model import Action, Finding, Result, Severity
from gputriage.views.diffview import changed_line, diff_to_json
from gputriage.views.safe import printable
from gputriage.views.status import exit_status, verdict

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

TRIAGE_SCHEMA = "gputriage/triage/v1"

# Most drastic first: the order the next actions are listed in.
ACTION_ORDER = (Action.DRAIN_AND_REPAIR, Action.REBOOT_NODE, Action.RESET_GPU,
                Action.FIX_SOFTWARE, Action.FIX_CONFIG, Action.RESTART_JOB)
_ACTION_TEXT = {
    Action.DRAIN_AND_REPAIR: "cordon, drain and send for hardware repair",
    Action.REBOOT_NODE: "reboot the node",
    Action.RESET_GPU: "reset the GPU(s)",
    Action.FIX_SOFTWARE: "upgrade or fix the software",
    Action.FIX_CONFIG: "fix the configuration",
    Action.RESTART_JOB: "restart the job / look at the application",
}
_STYLE = {"critical": "bold red", "warning": "bold yellow", "ok": "bold green",
          "unknown": "bold magenta"}


@dataclass(frozen=True)
class NextAction:
    """One action and everything it applies to."""

    action: Action
    targets: tuple[str, ...]  # scope labels: "node", "GPU 3 0000:5d:00.0", "unit ..."
    findings: tuple[str, ...]  # finding ids that call for it

    @property
    def text(self) -> str:
        """What to do, in words."""
        return _ACTION_TEXT.get(self.action, self.action.value)


@dataclass
class Triage:
    """The three parts of the screen plus the verdict."""

    result: Result
    baseline: str | None = None
    diff: Diff | None = None
    findings: list[Finding] = field(default_factory=list)  # warning or worse, worst first
    actions: list[NextAction] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """ok / warning / critical / unknown, as for check."""
        return verdict(self.result)

    @property
    def exit_status(self) -> int:
        """The Nagios exit status of the analysed host (as for check)."""
        return int(exit_status(self.result))


def next_actions(findings: list[Finding]) -> list[NextAction]:
    """Deduplicated actions, most drastic first, with their targets and findings."""
    targets: dict[Action, list[str]] = {}
    ids: dict[Action, list[str]] = {}
    for f in findings:
        if f.action == Action.NONE:
            continue
        label = f.scope.label()
        if label not in targets.setdefault(f.action, []):
            targets[f.action].append(label)
        if f.id not in ids.setdefault(f.action, []):
            ids[f.action].append(f.id)
    rank = {a: i for i, a in enumerate(ACTION_ORDER)}
    return [NextAction(a, tuple(targets[a]), tuple(ids[a]))
            for a in sorted(targets, key=lambda a: rank.get(a, len(rank)))]


def build_triage(result: Result, diff: Diff | None = None,
                 baseline: str | None = None) -> Triage:
    """The triage of one analysed host, optionally against a baseline's diff."""
    serious = [f for f in result.sorted_findings()
               if f.severity.rank >= Severity.WARNING.rank]
    return Triage(result, baseline, diff, serious, next_actions(serious))


def triage_snapshot(snapshot: Any, window: Any = None, baseline: str | None = None,
                    label: str = "now") -> Triage:
    """Analyse ``snapshot`` and, when ``baseline`` names an input (anything
    ``diff`` accepts), diff it against that baseline; InputError when the
    baseline cannot be read."""
    from gputriage.diff import diff_views, load_view, view_from_result
    from gputriage.engine import analyze_facts
    from gputriage.facts import Facts
    from gputriage.logwindow import LogWindow

    facts = Facts(snapshot, window=window or LogWindow())
    result = analyze_facts(facts)
    diff = None
    if baseline is not None:
        diff = diff_views(load_view(baseline, window=window),
                          view_from_result(result, facts, label))
    return build_triage(result, diff, baseline)


def _host_line(t: Triage) -> str:
    host = t.result.host or {}
    name = host.get("hostname") or "this host"
    driver = d if isinstance(d := host.get("driver"), dict) else {}
    parts = [f"TRIAGE {name}: {t.verdict.upper()}"]
    if host.get("kernel"):
        parts.append(f"kernel {host['kernel']}")
    if driver.get("kernel_module") or driver.get("userspace"):
        parts.append(f"driver {driver.get('kernel_module') or driver.get('userspace')}")
    if host.get("gpus_on_pci") is not None or host.get("gpus_visible") is not None:
        parts.append(f"GPUs {host.get('gpus_visible', '?')} visible of "
                     f"{host.get('gpus_on_pci', '?')} on PCI")
    return " | ".join(parts)


def render_triage(t: Triage, console: Console) -> None:
    """Print the triage screen; host and input text goes through :func:`printable`."""
    from rich.text import Text

    def say(text: str, style: str = "") -> None:
        console.print(Text(printable(text), style=style))

    say(_host_line(t), _STYLE.get(t.verdict, "bold"))
    say("1. What changed", "bold")
    if t.diff is None:
        say("   no baseline (give one with --baseline PATH)", "dim")
    else:
        say(f"   since {t.baseline}: {changed_line(t.diff)}")
        if t.diff.new:
            say("   new findings: " + ", ".join(f.id for f in t.diff.new))
        if t.diff.resolved:
            say("   resolved: " + ", ".join(f.id for f in t.diff.resolved))
    crit = sum(1 for f in t.findings if f.severity == Severity.CRITICAL)
    say(f"2. Findings ({crit} critical, {len(t.findings) - crit} warning)", "bold")
    if not t.findings:
        say("   none")
    for f in t.findings:
        line = Text("   ")
        line.append(f"{f.severity.value.upper():<8}", style=_STYLE.get(f.severity.value, ""))
        line.append(f" {f.blame.value.upper():<7} ")
        scope = "" if f.scope.kind == "node" else f" ({f.scope.label()})"
        line.append(printable(f"{f.id}{scope}: {f.title}"))
        console.print(line)
    say("3. Next actions", "bold")
    if not t.actions:
        say("   none needed")
    for i, a in enumerate(t.actions, 1):
        say(f"   {i}. {a.action.value}: {a.text} -> {', '.join(a.targets)} "
            f"[{', '.join(a.findings)}]")
    if t.result.unreadable:
        say(f"({len(t.result.unreadable)} input problem(s); gputriage analyze -v shows them)",
            "dim")


def triage_to_json(t: Triage) -> dict[str, Any]:
    """The ``gputriage/triage/v1`` document."""
    from gputriage import __version__
    from gputriage.views.jsonview import _plain

    return {
        "schema": TRIAGE_SCHEMA,
        "tool_version": __version__,
        "verdict": t.verdict,
        "exit_status": t.exit_status,
        "host": _plain(t.result.host or {}),
        "baseline": t.baseline,
        "changed": diff_to_json(t.diff) if t.diff is not None else None,
        "findings": [_plain(f.to_json()) for f in t.findings],
        "actions": [{"action": a.action.value, "text": a.text, "targets": list(a.targets),
                     "findings": list(a.findings)} for a in t.actions],
    }


__all__ = ["ACTION_ORDER", "NextAction", "Triage", "build_triage", "next_actions",
           "render_triage", "triage_snapshot", "triage_to_json"]
