"""One verdict per text: what ``gputriage explain TEXT`` says of each message it finds is
what ``gputriage analyze`` says of the same text pasted as a file.

The text is analysed as a paste (offline: nothing of this host is read), and each
catalog message found in it takes the severity, blame, action and next step of the
finding that judges its line -- so the context the text carries (a shell prompt inside
a container, a ``docker run`` without ``--gpus``, a pod, the driver's version) changes
both answers the same way. A message no finding judges (a CUDA error's number alone, a
line that is not a paste ``analyze`` reads) keeps its catalog row's verdict, with the
step the row's id takes in a report of a node these outputs came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gputriage.errors import InputError, ParseError
from gputriage.knowledge.job_messages import Hit
from gputriage.model import NODE, Action, Blame, Finding, Severity
from gputriage.next_steps import Host, step_for

__all__ = ["Verdict", "verdicts"]

# a CUDA error's number alone: no reader takes it (tests/test_one_verdict.py holds it)
_BARE_NUMBER = re.compile(r"\s*[-+]?[0-9]+\s*")


@dataclass(frozen=True)
class Verdict:
    """How one message is judged: by a finding of ``analyze`` (``finding`` names its
    id) or, when none judges it, by its catalog row (``finding`` None)."""

    severity: Severity
    blame: Blame
    action: Action
    step: str | None
    finding: str | None = None
    title: str | None = None


def _same_message(finding_id: str, row_id: str) -> bool:
    """Whether a finding id is the catalog row's own (NVML's rows are reported as
    ``container.nvml-*`` by the container rules)."""
    return finding_id in (row_id, row_id.replace("nvml.", "container.nvml-", 1))


def _quotes(f: Finding, line: str) -> bool:
    return bool(line) and any(line in ln for e in f.evidence for ln in e.lines)


def _flat(findings: list[Finding], cause: Finding | None = None
          ) -> list[tuple[Finding, Finding | None]]:
    """Every finding with the cause it is folded under (None: a cause itself)."""
    out: list[tuple[Finding, Finding | None]] = []
    for f in findings:
        out += [(f, cause), *_flat(list(f.consequences), cause or f)]
    return out


def _judging(findings: list[tuple[Finding, Finding | None]], hit: Hit
             ) -> tuple[Finding, Finding | None] | None:
    """The finding that judges ``hit`` and its cause: the row's own id first, else the
    first (in the report's order: the cause an on-call acts on first) that quotes its
    line."""
    line = hit.line.strip()
    own = [p for p in findings if _same_message(p[0].id, hit.message.id)]
    quoting = [p for p in findings if _quotes(p[0], line)]
    for pair in [*[p for p in own if _quotes(p[0], line)], *own, *quoting]:
        return pair
    return None


def _analysed(text: str) -> list[tuple[Finding, Finding | None]]:
    """The findings of ``text`` analysed as a pasted file; none when it is not a paste
    gputriage reads (a bare number or name: a number is not even read, so that
    ``explain 700`` does not import the readers and the engine to learn it)."""
    if _BARE_NUMBER.fullmatch(text):
        return []
    from gputriage.engine.analysis import analyze
    from gputriage.ingest import load_text

    try:
        result = analyze(load_text(text if text.endswith("\n") else text + "\n", "paste"))
    except (InputError, ParseError):
        return []
    return _flat(list(result.findings))


def _of_row(hit: Hit) -> Verdict:
    msg = hit.message
    f = Finding(msg.id, msg.severity, msg.meaning, msg.cause, msg.action, msg.blame, NODE)
    return Verdict(msg.severity, msg.blame, msg.action, step_for(f, Host()))


def verdicts(text: str, hits: list[Hit]) -> list[Verdict]:
    """The verdict of each of ``hits`` (messages found in ``text``), in their order."""
    if not hits:
        return []
    findings = _analysed(text)
    out = []
    for hit in hits:
        judged = _judging(findings, hit)
        if judged is None:
            out.append(_of_row(hit))
            continue
        f, cause = judged
        if cause is None:
            out.append(Verdict(f.severity, f.blame, f.action, f.step, f.id, f.title))
        else:  # folded: the cause's step closes it, as the report says
            out.append(Verdict(f.severity, f.blame, f.action, cause.step, f.id,
                               f"{f.title}; a consequence of {cause.id}: {cause.title}"))
    return out
