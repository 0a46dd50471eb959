"""The triage of one analysed host: the incident in the order an on-call thinks.

1. what changed (against a baseline, when one is given),
2. the findings that matter (critical, then warning) with node-or-job blame,
3. the next actions, deduplicated, most drastic first, each with the GPUs /
   units it applies to.

:func:`build_triage` is pure; :func:`triage_snapshot` analyses a snapshot and diffs it
against a baseline. :mod:`gputriage.views.triage` prints a :class:`Triage` and gives
its JSON document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gputriage.model import Action, Finding, Result, Severity
from gputriage.results.diff import Diff
from gputriage.status import exit_status, verdict
from gputriage.vocabulary import ACTION_ORDER

__all__ = ["ACTION_ORDER", "NextAction", "Triage", "build_triage", "next_actions",
           "triage_snapshot"]

_ACTION_TEXT = {
    Action.DRAIN_AND_REPAIR: "cordon, drain and send for hardware repair",
    Action.REBOOT_NODE: "reboot the node",
    Action.RESET_GPU: "reset the GPU(s)",
    Action.PLAN_REPAIR: "repair at the next maintenance window",
    Action.FIX_SOFTWARE: "upgrade or fix the software",
    Action.FIX_CONFIG: "fix the configuration",
    Action.RESTART_JOB: "restart the job / look at the application",
}


@dataclass(frozen=True)
class NextAction:
    """One next step and everything it applies to: the findings it closes and their
    GPUs / units."""

    action: Action
    targets: tuple[str, ...]  # scope labels: "node", "GPU 3 0000:5d:00.0", "unit ..."
    findings: tuple[str, ...]  # finding ids that call for it
    step: str | None = None  # the concrete step (None: the findings carry none)
    severity: Severity = Severity.WARNING  # the worst of those findings
    consequences: tuple[str, ...] = ()  # ids folded into those findings: closed with them

    @property
    def closes(self) -> tuple[str, ...]:
        """Every finding id the step closes: its findings, then their consequences."""
        return tuple(dict.fromkeys((*self.findings, *self.consequences)))

    @property
    def text(self) -> str:
        """The action in words (its vocabulary label)."""
        return _ACTION_TEXT.get(self.action, self.action.value)

    @property
    def says(self) -> str:
        """What to do: the concrete step, else the action in words."""
        return self.step or self.text


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
    """The next steps of the current findings, deduplicated (one per distinct step;
    findings without one, one per action), worst first, then most drastic first, each
    with the findings it closes and their targets."""
    groups: dict[tuple[Action, str | None], list[Finding]] = {}
    for f in findings:
        if f.current and f.action is not Action.NONE:
            groups.setdefault((f.action, f.step), []).append(f)
    rank = {a: i for i, a in enumerate(ACTION_ORDER)}
    out = [_next_action(action, step, found) for (action, step), found in groups.items()]
    return sorted(out, key=lambda a: (-a.severity.rank, rank.get(a.action, len(rank))))


def _next_action(action: Action, step: str | None, found: list[Finding]) -> NextAction:
    targets: list[str] = []
    for f in found:
        targets.extend(label for s in f.scopes if (label := s.label()) not in targets)
    ids = tuple(dict.fromkeys(f.id for f in found))
    worst = max((f.severity for f in found), key=lambda s: s.rank)
    folded = tuple(dict.fromkeys(c.id for f in found for c in f.consequences
                                 if c.id not in ids))
    return NextAction(action, tuple(targets), ids, step, worst, folded)


def build_triage(result: Result, diff: Diff | None = None,
                 baseline: str | None = None) -> Triage:
    """The triage of one analysed host, optionally against a baseline's diff."""
    serious = [f for f in result.sorted_findings()
               if f.severity.rank >= Severity.WARNING.rank]
    return Triage(result, baseline, diff, serious, next_actions(serious))


def triage_snapshot(snapshot: Any, window: Any = None, baseline: str | None = None,
                    label: str = "now", context: Any = None) -> Triage:
    """Analyse ``snapshot`` (with the expectations and acknowledgements of
    ``context``) and, when ``baseline`` names an input (anything ``diff`` accepts),
    diff it against that baseline; InputError when the baseline cannot be read."""
    from gputriage.engine.analysis import analyze_facts
    from gputriage.facts.store import Facts
    from gputriage.facts.window import LogWindow
    from gputriage.results.diff import diff_views, load_view, view_from_result

    facts = Facts(snapshot, window=window or LogWindow())
    if context is not None:
        facts.context = context
    result = analyze_facts(facts)
    diff = None
    if baseline is not None:
        diff = diff_views(load_view(baseline, window=window),
                          view_from_result(result, facts, label))
    return build_triage(result, diff, baseline)
