"""The HTML report (``--html FILE`` of check, analyze, triage, nccl and fleet): one
self-contained file an on-call attaches to a ticket. No network, no script: inline CSS
only, and a Content-Security-Policy that forbids every fetch; every text from an input
escaped (:mod:`gputriage.views.html.markup`). Sections: the verdict banner, the findings
(evidence collapsed), the host and GPU table, the topology, the kernel-log timeline,
what was read; ``nccl`` adds its transports and bandwidths, ``fleet`` is the blast-radius
table. Like every view it renders what the commands built and judges nothing: the
topology and timeline come from the facts the analysis used (``facts``), when given."""

from __future__ import annotations

from typing import Any

from gputriage.model import Result
from gputriage.status import verdict
from gputriage.views.html.findings import banner, findings_sections, tail_section
from gputriage.views.html.gpus import gpu_section, host_section
from gputriage.views.html.markup import badge, esc, para, section, tag
from gputriage.views.html.page import document, when_text
from gputriage.views.html.topology import topology_section

__all__ = ["fleet_html", "nccl_html", "result_html", "triage_html"]


def _meta(result: Result, what: str) -> list[str]:
    created = when_text((result.manifest or {}).get("created"))
    origins = ", ".join(str(i.get("origin")) for i in result.inputs[:8])
    more = len(result.inputs) - 8
    lines = [f"{what}; " + (f"snapshot taken {created}" if created else
                            "input time not recorded")]
    if origins:
        lines.append(f"Input: {origins}" + (f" (+{more} more)" if more > 0 else ""))
    return lines


def _title(result: Result, who: str | None) -> tuple[str, str]:
    name = who or result.host.called
    created = when_text((result.manifest or {}).get("created"))
    return (f"gputriage: {verdict(result).upper()} {name}" + (f" \u2014 {created}"
                                                               if created else ""),
            f"GPU triage report: {name}")


def result_html(result: Result, facts: Any = None, *, what: str = "analysis") -> str:
    """The report of one analysed host (check, analyze)."""
    from gputriage.views.html.timeline import timeline_section

    title, heading = _title(result, None)
    sections = [banner(result), *findings_sections(result), host_section(result),
                gpu_section(result), topology_section(result, facts),
                timeline_section(result, facts), tail_section(result)]
    return document(title, heading, _meta(result, what), sections)


def triage_html(t: Any) -> str:
    """The incident screen (triage): what changed since the baseline, the report of the
    host, and the next actions most drastic first."""
    from gputriage.views.diffview import changed_line, finding_text

    result = t.result
    title, heading = _title(result, None)
    if t.diff is None:
        changed = para("No baseline (give one with --baseline PATH).", "muted")
    else:
        items = [f"since {t.baseline}: {changed_line(t.diff)}"]
        items += [f"new: {finding_text(f)}" for f in t.diff.new]
        items += [f"resolved: {finding_text(f)}" for f in t.diff.resolved]
        changed = tag("ul", "".join(tag("li", esc(i)) for i in items))
    steps = "".join(tag("li", badge(a.severity.value) + " " + esc(a.says) + tag("p", esc(
        f"closes {', '.join(a.closes)} on {', '.join(a.targets)} [{a.action.value}]"),
        class_="muted")) for a in t.actions)
    sections = [banner(result), section("What changed", changed, ident="changed"),
                section("Next actions", tag("ol", steps) if steps else para("None needed."),
                        ident="actions"),
                *findings_sections(result), host_section(result), gpu_section(result),
                tail_section(result)]
    return document(title, heading, _meta(result, "triage"), sections)


def nccl_html(result: Result, summary: Any) -> str:
    """The report of ``gputriage nccl``: the verdict, NCCL per host and the nccl-tests
    runs against expectation, the findings, the GPUs when host outputs were given."""
    from gputriage.views.html.nccl import nccl_section

    who = result.host.hostname or "the job"
    title, _ = _title(result, who)
    sections = [banner(result, who=who, who_is_job=not result.host.hostname),
                nccl_section(summary), *findings_sections(result)]
    if result.gpus:
        sections.append(gpu_section(result))
    sections.append(tail_section(result))
    return document(title, f"NCCL report: {who}", _meta(result, "NCCL logs and nccl-tests"),
                    sections)


def fleet_html(report: Any, origin: str) -> str:
    """The report of ``gputriage fleet``."""
    from gputriage.views.html.fleet import fleet_html as render

    return render(report, origin)
