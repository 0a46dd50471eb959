"""The verdict banner and the findings: the causes in full (severity, blame, action,
scope, next step, explanation, evidence collapsed in ``<details>``, what each explains),
the minor findings as a table, then acknowledged and past findings set apart."""

from __future__ import annotations

from gputriage.model import Finding, Result, Severity, Status
from gputriage.status import (
    counted_severity,
    job_faults_capped,
    leading_side,
    side_verdict,
    verdict,
)
from gputriage.text.words import counted
from gputriage.views.html.markup import (
    badge,
    banner_box,
    definitions,
    esc,
    lines_block,
    para,
    section,
    table,
    tag,
)
from gputriage.views.opening import CAPPED, SIDE_WORDS, worst_current
from gputriage.views.scopes import also_text, scope_word
from gputriage.vocabulary import ACTION_WORDS

BLAME_WORDS = {
    "node": "the node (hardware or host), not the job",
    "config": "the node's configuration (setup or software)",
    "job": "the job (the application), not the node",
    "job-config": "the job's own settings, not the node",
    "unknown": "unknown (the node or the job)",
}
PAST_SECTIONS = ((Status.ACKNOWLEDGED, "Acknowledged findings", "acknowledged"),
                 (Status.PAST, "History: ended by a reset or a reboot", "history"))


def banner(result: Result, who: str | None = None, *, who_is_job: bool = False) -> str:
    """The verdict in words and colour, the one-line verdict, the next step, who is at
    fault (node or job), and what was not read."""
    from gputriage.views.oneline import verdict_line

    word = verdict(result)
    line = verdict_line(result, who=who, who_is_job=who_is_job).removeprefix(f"{word.upper()} ")
    lines: list[str] = []
    lead = leading_side(result)
    worst = worst_current(result, lead)
    fault = worst is not None and worst.severity.rank >= Severity.WARNING.rank
    if word == "unknown":
        lines.append(para("Could not tell: see the skipped rules and unreadable inputs "
                          "below."))
    if worst is not None and fault:
        lines.append(tag("p", tag("strong", "Blame: ") + esc(
            f"{SIDE_WORDS[worst.blame]} ({lead} side); node verdict "
            f"{side_verdict(result, 'node')}, job verdict {side_verdict(result, 'job')}")))
        if worst.step:
            lines.append(tag("p", tag("strong", "Next: ") + esc(worst.step)))
    if job_faults_capped(result):
        lines.append(para(CAPPED, "muted"))
    for item in result.not_read:
        lines.append(tag("p", tag("strong", "Not read: ") + esc(item)))
    return banner_box(word, esc(line), "".join(lines))


def _where(f: Finding) -> str:
    where = also_text(f)
    label = scope_word(f)
    if where and where.startswith("on "):
        return where
    return label + (f"; {where}" if where else "")


def _evidence(f: Finding) -> str:
    """The evidence blocks, collapsed: source (and note) over the quoted lines."""
    if not f.evidence:
        return ""
    count = sum(len(e.lines) for e in f.evidence)
    sources = ", ".join(dict.fromkeys(e.source for e in f.evidence))
    parts = []
    for e in f.evidence:
        head = tag("code", esc(e.source)) + (f" \u2014 {esc(e.note)}" if e.note else "")
        parts.append(tag("p", head, class_="muted") + (lines_block(e.lines) if e.lines else ""))
    summary = f"Evidence: {count} line{'s' if count != 1 else ''} from {sources}"
    return tag("details", tag("summary", esc(summary)) + "".join(parts), class_="evidence")


def _references(f: Finding) -> str:
    links = []
    for ref in f.references[:12]:
        text = esc(ref, 300)
        links.append(tag("a", text, href=ref, rel="noreferrer")
                     if str(ref).startswith("https://") else text)
    return tag("p", "References: " + ", ".join(links), class_="muted") if links else ""


def _facts(f: Finding) -> list[tuple[str, str]]:
    pairs = [("Scope", esc(_where(f))),
             ("Blame", esc(f"{f.blame.value}: {BLAME_WORDS.get(f.blame.value, '')}")),
             ("Action", esc(f"{f.action.value}: {ACTION_WORDS.get(f.action.value, '')}"))]
    if f.step:
        pairs.append(("Next step", esc(f.step)))
    if f.occurrences is not None:
        o = f.occurrences
        span = f"{o.first} .. {o.last}" if o.last and o.last != o.first else (o.first or "")
        boot = "" if o.current_boot else "; an earlier boot"
        pairs.append(("Seen", esc(f"{o.count} time{'s' if o.count != 1 else ''}"
                                  + (f", {span}" if span else "") + boot)))
    if not f.current:
        pairs.append(("Status", esc(f"{f.status.value}"
                                    + (f": {f.status_note}" if f.status_note else ""))))
    return pairs


def finding_article(f: Finding, result: Result | None = None) -> str:
    """One finding in full, at the severity it counts with in ``result``; its
    consequences listed under it, each with its evidence."""
    sev = (counted_severity(result, f) if result is not None else f.severity).value
    head = tag("h3", badge(sev) + " " + esc(f.title) + " " + tag("span", esc(f.id), class_="fid"))
    body = definitions(_facts(f)) + para(f.explanation) + _evidence(f) + _references(f)
    if f.consequences:
        items = "".join(tag("li", badge(c.severity.value) + " " + esc(c.title) + " "
                            + tag("span", esc(c.id), class_="fid") + _evidence(c))
                        for c in f.consequences)
        body += tag("div", tag("p", esc(f"Explains {counted(len(f.consequences), 'other finding')} "
                                        "(closed with it):")) + tag("ul", items),
                    class_="consequences")
    return tag("article", head + body, class_=f"finding sev-{sev}")


def findings_sections(result: Result) -> list[str]:
    """Causes, minor findings, then acknowledged and past findings, each a section when
    it has any."""
    ordered = result.sorted_findings()
    causes = [f for f in ordered if f.current and f.severity.rank >= Severity.WARNING.rank]
    minor = [f for f in ordered if f.current and f.severity.rank < Severity.WARNING.rank]
    out = [section("Findings", "".join(finding_article(f, result) for f in causes)
                   or para("No current finding of warning or worse."), ident="findings")]
    if minor:
        rows = [(badge(counted_severity(result, f).value), esc(f.title) + _evidence(f),
                 esc(_where(f)), tag("code", esc(f.id))) for f in minor]
        out.append(section("Minor findings and checks passed", table(
            ("severity", "finding", "scope", "id"), rows, caption="Information and passed "
            "checks (current, below warning)"), ident="minor"))
    for status, heading, ident in PAST_SECTIONS:
        found = [f for f in ordered if f.status is status]
        if found:
            out.append(section(heading, para(
                "These no longer count in the verdict.", "muted")
                + "".join(finding_article(f, result) for f in found), ident=ident))
    return out


def tail_section(result: Result) -> str:
    """Skipped rules, input problems and what was read, collapsed."""
    parts = []
    if result.unreadable:
        parts.append(tag("details", tag("summary", esc(
            f"{len(result.unreadable)} input problem(s)")) + lines_block(result.unreadable)))
    if result.skipped:
        parts.append(tag("details", tag("summary", esc(
            f"{len(result.skipped)} rule(s) skipped")) + lines_block(
            f"{s.rule}: {s.reason}" for s in result.skipped)))
    inputs = [f"{i.get('origin')}: {', '.join(map(str, i.get('sources') or ()))}"
              for i in result.inputs]
    if inputs:
        parts.append(tag("details", tag("summary", esc(f"{len(inputs)} input(s) read"))
                         + lines_block(inputs)))
    return section("What was read", "".join(parts) or para("Nothing."), ident="read")
