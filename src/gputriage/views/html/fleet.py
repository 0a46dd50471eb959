"""The ``gputriage fleet`` report in HTML: the counts, then each finding with its nodes
and its blast radius (the attributes the affected nodes share that the others do not,
ranked by F1), then the skipped and duplicate inputs."""

from __future__ import annotations

from gputriage.fleet.report import FleetReport
from gputriage.text.words import counted
from gputriage.views.fleetview import fleet_counts, fleet_verdict
from gputriage.views.html.markup import (
    badge,
    banner_box,
    esc,
    lines_block,
    para,
    section,
    table,
    tag,
)
from gputriage.views.html.page import document

NODES_SHOWN = 12
BAD_SHOWN = 50


def _nodes(nodes: tuple[str, ...]) -> str:
    shown = ", ".join(nodes[:NODES_SHOWN])
    more = len(nodes) - NODES_SHOWN
    return esc(shown + (f" (+{more} more)" if more > 0 else ""))


def _radius(f: object, total: int) -> str:
    seps = getattr(f, "blast_radius", ())
    count = getattr(f, "count", 0)
    if not seps:
        return esc("every node has it" if count >= total else "-")
    items = "".join(tag("li", esc(f"{s.attribute} = {s.value}") + " " + tag("span", esc(
        f"(F1 {s.score:.2f}; {s.affected_with} of the {s.nodes_with} nodes with it are "
        f"affected; it covers {s.affected_with} of {count} affected)"), class_="muted"))
        for s in seps)
    return tag("ol", items)


def fleet_html(report: FleetReport, origin: str) -> str:
    """The whole document of a fleet report."""
    word = fleet_verdict(report)
    banner = banner_box(word, esc(f"fleet: {fleet_counts(report)}"))
    rows = [(esc(f.id) + " " + badge(f.severity), esc(f.count), _nodes(f.nodes),
             _radius(f, report.nodes)) for f in report.findings]
    findings = section("Blast radius", table(
        ("finding", "nodes", "which", "shared by the affected nodes"), rows,
        caption="Each finding, its nodes, and what the affected nodes share")
        if rows else para("No finding on any node."), ident="blast")
    parts = [banner, findings]
    if report.bad_count:
        listed = [f"{b.path}: {b.reason}" for b in report.bad_inputs[:BAD_SHOWN]]
        parts.append(section("Skipped inputs", para(
            f"{counted(report.bad_count, 'unusable input')}; the first {len(listed)}:")
            + lines_block(listed), ident="skipped"))
    if report.duplicates:
        listed = [f"{d.node}: kept {d.kept}, left out {d.dropped}"
                  for d in report.duplicate_hosts[:BAD_SHOWN]]
        parts.append(section("Duplicate inputs", para(
            f"{counted(report.duplicates, 'input')} repeated a host (the newest result kept):")
            + lines_block(listed), ident="duplicates"))
    return document(f"gputriage fleet: {word.upper()} \u2014 {counted(report.nodes, 'node')}",
                    f"Fleet report: {counted(report.nodes, 'node')}", [f"Inputs: {origin}"], parts)
