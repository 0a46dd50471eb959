"""``gputriage fleet``: the fleet report as a terminal table, JSON or CSV.

The JSON document has the schema ``gputriage/fleet/v1``: ``nodes``,
``healthy``, ``findings`` (id, severity, count, nodes, blast_radius: attribute,
value, affected_with, nodes_with, precision, recall, score) and
``bad_inputs`` (count, listed: path and reason), ``duplicates`` (how many inputs
repeated a host) and ``duplicate_hosts`` (node, kept, dropped: the inputs). The
terminal view lists the duplicates and the skipped inputs too. The CSV has one row per
finding and separator (a finding without separators gets one row with the
separator columns empty), no cell starting like a spreadsheet formula. The table
takes the console's width (``COLUMNS`` on a terminal) and prints plain, unwrapped
columns piped (:mod:`gputriage.views.tables`); all text goes in as ``Text`` (never
markup, control characters escaped).
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict
from typing import TYPE_CHECKING

from gputriage.fleet.report import FLEET_SCHEMA, FleetReport
from gputriage.text.safe import csv_cell, printable
from gputriage.text.words import counted

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

SEVERITY_STYLES = {"critical": "bold red", "warning": "bold yellow", "info": "bold cyan"}
CSV_COLUMNS = ("finding", "severity", "node_count", "nodes", "rank", "attribute", "value",
               "affected_with", "nodes_with", "precision", "recall", "score")


def fleet_json(report: FleetReport) -> dict:
    """The ``gputriage/fleet/v1`` document of a report."""
    return {
        "schema": FLEET_SCHEMA,
        "nodes": report.nodes,
        "healthy": report.healthy,
        "duplicates": report.duplicates,
        "duplicate_hosts": [asdict(d) for d in report.duplicate_hosts],
        "findings": [{"id": f.id, "severity": f.severity, "count": f.count,
                      "nodes": list(f.nodes),
                      "blast_radius": [asdict(s) for s in f.blast_radius]}
                     for f in report.findings],
        "bad_inputs": {"count": report.bad_count,
                       "listed": [asdict(b) for b in report.bad_inputs]},
    }


def fleet_csv(report: FleetReport) -> str:
    """The report as CSV text (header row first); no cell starts like a formula."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(CSV_COLUMNS)
    for f in report.findings:
        head = [f.id, f.severity, f.count, " ".join(f.nodes)]
        if not f.blast_radius:
            out.writerow(map(csv_cell, head + [""] * 8))
        for rank, s in enumerate(f.blast_radius, 1):
            out.writerow(map(csv_cell, head + [
                rank, s.attribute, s.value, s.affected_with, s.nodes_with,
                f"{s.precision:.4f}", f"{s.recall:.4f}", f"{s.score:.4f}"]))
    return buf.getvalue()


def fleet_verdict(report: FleetReport) -> str:
    """The fleet's verdict word, the one its exit status says: its worst finding."""
    worst = {f.severity for f in report.findings}
    return "critical" if "critical" in worst else "warning" if "warning" in worst else "ok"


def fleet_counts(report: FleetReport) -> str:
    """``64 nodes, 58 without findings, 2 distinct findings, 0 inputs skipped``."""
    dups = f", {counted(report.duplicates, 'duplicate input')}" if report.duplicates else ""
    return (f"{counted(report.nodes, 'node')}, {report.healthy} without findings, "
            f"{counted(len(report.findings), 'distinct finding')}, "
            f"{counted(report.bad_count, 'input')} skipped{dups}")


def fleet_line(report: FleetReport) -> str:
    """The fleet in one line (``-q``): its verdict, the worst finding and how many
    nodes have it, and the counts.

    ``CRITICAL fleet of 64 nodes: xid.79 on 6 nodes (driver = 560.35.03) — 58 without
    findings; 2 distinct findings``"""
    word = fleet_verdict(report)
    head = f"{word.upper()} fleet of {counted(report.nodes, 'node')}: "
    counts = (f"{report.healthy} without findings; "
              f"{counted(len(report.findings), 'distinct finding')}")
    if report.bad_count:
        counts += f"; {counted(report.bad_count, 'input')} skipped"
    rank = {"critical": 2, "warning": 1}
    worst = max(report.findings, key=lambda f: (rank.get(f.severity, 0), f.count),
                default=None)
    if worst is None or word == "ok":
        return printable(f"{head}no finding at warning or worse — {counts}")
    where = (f" ({worst.blast_radius[0].attribute} = {worst.blast_radius[0].value})"
             if worst.blast_radius else "")
    return printable(f"{head}{worst.id} on {counted(worst.count, 'node')}{where} — {counts}")


def _node_list(nodes: tuple[str, ...], limit: int) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" (+{len(nodes) - limit} more)" if len(nodes) > limit else "")


def render_fleet(report: FleetReport, console: Console, *, max_nodes: int = 6,
                 max_bad: int = 5) -> None:
    """Print the fleet summary, one table row per finding with its best
    separators, then the first few skipped inputs."""
    from rich.text import Text

    from gputriage.views.tables import new_table, print_table, say

    def text(value: str, style: str = "") -> Text:
        return Text(printable(value, multiline=True), style=style)

    say(console, text(fleet_counts(report), "bold"))
    if report.findings:
        table = new_table(console, boxed=True)
        table.add_column("finding", overflow="fold")
        table.add_column("nodes", justify="right", no_wrap=True)
        table.add_column("which", overflow="fold")
        table.add_column("blast radius: shared by the affected nodes (F1, prec/recall)",
                         overflow="fold")
        for f in report.findings:
            name = Text(printable(f.id) + "\n")
            name.append(printable(f.severity), style=SEVERITY_STYLES.get(f.severity, ""))
            if f.blast_radius:
                radius = "\n".join(
                    printable(f"{s.attribute} = {s.value}  ({s.score:.2f}, "
                              f"{s.affected_with}/{s.nodes_with} · {s.affected_with}/{f.count})")
                    for s in f.blast_radius)
            else:
                radius = "every node has it" if f.count >= report.nodes else "-"
            table.add_row(name, Text(str(f.count)),
                          Text(printable(_node_list(f.nodes, max_nodes))), text(radius))
        print_table(console, table)
    if report.bad_count:
        say(console, text(f"skipped {counted(report.bad_count, 'unusable input')}:", "yellow"))
        for bad in report.bad_inputs[:max_bad]:
            say(console, Text(printable(f"  {bad.path}: {bad.reason}")))
        if report.bad_count > max_bad:
            say(console, text(f"  ... and {report.bad_count - max_bad} more (--json lists "
                              "them)"))
    _render_duplicates(report, console, max_bad)


def _render_duplicates(report: FleetReport, console: Console, limit: int) -> None:
    """The hosts several inputs named, and which input each kept (the newest)."""
    from rich.text import Text

    from gputriage.views.tables import say

    if not report.duplicates:
        return
    say(console, Text(printable(f"{counted(report.duplicates, 'input')} repeated a host "
                                "already seen (the newest result kept):"), style="yellow"))
    shown = report.duplicate_hosts[:limit]
    for d in shown:
        say(console, Text(printable(f"  {d.node}: kept {d.kept}, left out {d.dropped}")))
    if report.duplicates > len(shown):
        say(console, Text(printable(f"  ... and {report.duplicates - len(shown)} more "
                                    "(--json lists them)")))
