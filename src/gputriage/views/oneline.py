"""The one-line verdict an on-call pastes into a ticket, and all that ``-q`` prints:

``CRITICAL gpu-node-017: GPU 4 0000:9a:00.0: <worst cause> — drain and repair; 1 cause,
2 consequences``

The verdict word is the exit status's; the cause is the worst current finding of the side
that sets it (the job's marked ``job:``), with its scope when the title does not name it.
Plain text, one line, whatever the host text holds (:func:`gputriage.text.safe.printable`).
"""

from __future__ import annotations

from gputriage.model import Action, Finding, Result, Severity
from gputriage.status import leading_side, verdict
from gputriage.text.safe import printable
from gputriage.text.words import counted
from gputriage.views.scopes import also_text, names_scope

__all__ = ["ACTION_WORDS", "cause_counts", "verdict_line"]

# The action, in the words of the verdict line.
ACTION_WORDS = {
    Action.NONE: "nothing to do",
    Action.RESTART_JOB: "restart the job",
    Action.RESET_GPU: "reset the GPU",
    Action.REBOOT_NODE: "reboot the node",
    Action.DRAIN_AND_REPAIR: "drain and repair",
    Action.FIX_SOFTWARE: "fix the software",
    Action.FIX_CONFIG: "fix the configuration",
    Action.PLAN_REPAIR: "plan a repair at the next window",
}


def _causes(result: Result) -> list[Finding]:
    """The current findings of warning or worse, in report order."""
    return [f for f in result.sorted_findings()
            if f.current and f.severity.rank >= Severity.WARNING.rank]


def cause_counts(result: Result) -> tuple[int, int]:
    """(current causes of warning or worse, the findings folded into them)."""
    causes = _causes(result)
    return len(causes), sum(len(f.consequences) for f in causes)


def window_unread(result: Result) -> str | None:
    """Why nothing was judged when the kernel log ends before the ``--since`` window;
    None otherwise."""
    window = result.host.log_window or {}
    if window.get("window_read", True):
        return None
    return "the kernel log ends before the --since window; nothing in it was read"


def verdict_line(result: Result, *, who: str | None = None, unicode: bool = True,
                 who_is_job: bool = False) -> str:
    """The verdict line of ``result``; ``who`` names what was judged (default: the host
    name), ``who_is_job`` when it names the job (then its causes are not marked ``job:``
    again); ``unicode`` False writes the dash as ``-``."""
    dash = " — " if unicode else " - "
    word = verdict(result)
    name = who or result.host.called
    head = f"{word.upper()} {name}: "
    causes, folded = cause_counts(result)
    counts = f"{counted(causes, 'cause')}, {counted(folded, 'consequence')}"
    if word == "unknown":
        why = next((f.title for f in result.findings if f.current), None) or \
            window_unread(result)
        return printable(head + (f"could not tell: {why}" if why else
                                 "could not tell (no rule could decide)"))
    found = _causes(result)
    lead = leading_side(result)
    worst = next((f for f in found if f.blame.side == lead), found[0] if found else None)
    if worst is None:
        past = sum(1 for f in result.findings if not f.current)
        tail = f" ({past} acknowledged or past)" if past else ""
        return printable(f"{head}no current fault{dash}nothing to do{tail}")
    where = also_text(worst)  # a per-GPU repeat: "on 8 GPUs: 0-7" / "also on GPU 5 ..."
    if where is not None and where.startswith("on "):
        cause = f"{worst.title} ({where})"
    else:
        cause = worst.title if names_scope(worst.title, worst.scope) else (
            f"{worst.scope.label()}: {worst.title}")
        cause += f" ({where})" if where else ""
    if worst.blame.side == "job" and not who_is_job:
        cause = f"job: {cause}"
    action = ACTION_WORDS[worst.action]
    if worst.action is Action.NONE:  # a warning to keep an eye on, not "nothing to do"
        action = "no action now: watch it"
    return printable(f"{head}{cause}{dash}{action}; {counts}")
