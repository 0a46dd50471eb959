"""The commands that compare across time or nodes: ``gputriage diff A B``,
``triage`` (the incident screen), ``history`` (the recorded checks) and
``fleet`` (many nodes' results with each finding's blast radius)."""

from __future__ import annotations

import os
from typing import Any

import click

from gputriage.commands.common import (
    STATE_DIR_HELP,
    CommandExit,
    StrictFloatRange,
    StrictIntRange,
    boot_option,
    current_env,
    deadline_option,
    html_option,
    log_window,
    no_pager_option,
    quiet_option,
    since_option,
    timeout_option,
    verbose_option,
)
from gputriage.text.safe import printable


@click.command("history")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help=STATE_DIR_HELP)
@click.option("--json", "as_json", is_flag=True,
              help="Print the entries as JSON (schema gputriage/history/v1).")
@click.option("-n", "count", type=StrictIntRange(min=1), default=20, show_default=True,
              help="Show the last N entries.")
@click.option("-q", "--quiet", is_flag=True,
              help="Print only one line per check: time, host, verdict, critical and "
                   "warning counts. --json wins over it.")
def history(state_dir: str | None, as_json: bool, count: int, quiet: bool) -> None:
    """List the recorded checks, oldest first: time, host, boot id, verdict,
    critical / warning counts, digest; "changed" marks a digest that differs from
    the entry before."""
    from gputriage.errors import InputError
    from gputriage.state.history import (
        HistoryError,
        NoHistory,
        default_state_dir,
        history_rows,
        list_entries,
    )
    from gputriage.views.console import make_console
    from gputriage.views.historyview import render_rows

    env = current_env()
    where = state_dir or str(default_state_dir())
    notes: list[str] = []
    try:
        entries = list_entries(where, count + 1, notes=notes)
    except NoHistory:
        entries = []
    except HistoryError as exc:  # corrupt, unreadable, newer schema: exit 66, one line
        raise InputError(str(exc)) from None
    for note in notes:
        env.stderr.write(f"gputriage: note: {printable(note)}\n")
    previous = entries[0] if len(entries) > count else None
    rows = history_rows(entries[-count:], previous)
    if as_json:
        doc = {"schema": "gputriage/history/v1", "state_dir": where, "entries": rows}
        env.write_json(doc)
    elif not rows:
        env.stdout.write(f"no checks recorded in {printable(where)}\n")
    elif quiet:
        env.stdout.write("".join(
            printable(f"{row['time']} {row['host'] or '-'} {row['verdict'].upper()} "
                      f"{row['critical']} critical, {row['warning']} warning"
                      + (" (changed)" if row["changed"] else "")) + "\n" for row in rows))
    else:
        render_rows(rows, make_console(env.stdout))
    raise CommandExit(0)


@click.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True,
              help="Print the diff as JSON (schema gputriage/diff/v1).")
@click.option("--all", "include_noise", is_flag=True,
              help="Also compare noise: temperatures, power, clocks, counters, idle link speed.")
@verbose_option
@click.option("-q", "--quiet", is_flag=True,
              help="Print only one line: CHANGED or SAME, the counts and the changed facts; "
                   "the exit status is the same. --json wins over it.")
@since_option
@boot_option
def diff(a: str, b: str, as_json: bool, include_noise: bool, verbose: bool, quiet: bool,
         since: str | None, boot: str | None) -> None:
    """What changed from A to B: each anything analyze accepts, or a JSON result of
    check/analyze --json. Facts that changed (kernel, driver, CUDA, GPUs, VBIOS, links,
    NVLinks, IB ports, hugepages, persistence, fabric manager, container toolkit, CDI),
    then findings new / resolved / still there. Exit status: 0 nothing changed, 1 facts
    changed or findings are new (resolved ones alone give 0); 64 usage, 66 unreadable."""
    from gputriage.results.diff import diff_views, load_view

    env = current_env()
    window = log_window(since, boot)
    result = diff_views(load_view(a, include_noise, window), load_view(b, include_noise, window))
    if as_json:
        import json

        env.stdout.write(json.dumps(diff_document(result), indent=2, ensure_ascii=False)
                         + "\n")
    elif quiet:
        from gputriage.views.diffview import diff_line

        for warning in result.warnings:
            env.stderr.write(f"gputriage: warning: {printable(warning)}\n")
        env.stdout.write(diff_line(result) + "\n")
    else:
        from rich.text import Text

        from gputriage.views.console import make_console
        from gputriage.views.diffview import render_diff

        console = make_console(env.stdout)
        for warning in result.warnings:  # first: it changes how the rest reads
            console.print(Text(f"warning: {printable(warning)}", style="bold yellow"))
        render_diff(result, console, verbose=verbose)
    raise CommandExit(result.exit_status)


def diff_document(result: Any) -> dict:
    """The ``gputriage/diff/v1`` document of a diff (its warnings included)."""
    from gputriage.views.diffview import diff_to_json

    return {**diff_to_json(result), "warnings": list(result.warnings)}


@click.command("triage")
@click.argument("paths", nargs=-1)
@click.option("--baseline", metavar="PATH", default=None,
              help="Show what changed since this snapshot, bug report or result JSON.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the triage as JSON (schema gputriage/triage/v1).")
@html_option
@quiet_option
@no_pager_option
@timeout_option
@deadline_option
@since_option
@boot_option
def triage(paths: tuple[str, ...], baseline: str | None, as_json: bool, html: str | None,
           quiet: bool, no_pager: bool, timeout: float | None, deadline: float, since: str | None,
           boot: str | None) -> None:
    """The incident screen: what changed (with --baseline), the critical findings with
    node-or-job blame, the next actions most drastic first. PATHs as for analyze; none:
    collect this host as check does (its expectations file and acknowledgements apply).
    Exit status as for check."""
    from gputriage.results.triage import triage_snapshot
    from gputriage.views.triage import render_triage, triage_to_json

    env = current_env()
    window = log_window(since, boot)
    if paths:
        from gputriage.commands.host import import_engine
        from gputriage.ingest import load_inputs

        snapshot = load_inputs(list(paths), meanwhile=import_engine)
        t = triage_snapshot(snapshot, window, baseline, ", ".join(paths))
    else:
        import tempfile

        from gputriage.collect import CollectOptions
        from gputriage.collect import collect as do_collect
        from gputriage.commands.common import load_expectations
        from gputriage.commands.host import host_acks
        from gputriage.facts.context import CheckContext
        from gputriage.snapshot.bundle import Snapshot

        context = CheckContext(expectations=load_expectations(None, default=True),
                               acks=tuple(host_acks(None)), now=env.live_host().now())
        from gputriage.commands.progress import progress_for

        with tempfile.TemporaryDirectory(prefix="gputriage-") as tmp, \
                progress_for(env, quiet) as progress:
            opts = CollectOptions(timeout_s=timeout, deadline_s=deadline,
                                  progress=progress.update)
            path = do_collect(env.live_host(), f"{tmp}/snapshot", opts)
            t = triage_snapshot(Snapshot.load(path), window, baseline, "this host", context)
    from gputriage.commands.common import save_html
    from gputriage.views.html import triage_html

    save_html(html, lambda: triage_html(t), quiet=quiet)
    if as_json:
        env.write_json(triage_to_json(t), ensure_ascii=False)
    elif quiet:
        from gputriage.commands.common import quiet_line

        quiet_line(t.result)
    else:
        from gputriage.commands.common import show

        show(lambda console: render_triage(t, console), no_pager=no_pager)
    raise CommandExit(t.exit_status)


@click.command("fleet")
@click.argument("paths", nargs=-1)
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as JSON (schema gputriage/fleet/v1).")
@click.option("--csv", "as_csv", is_flag=True, help="Print one CSV row per finding and "
              "separating attribute.")
@html_option
@quiet_option
@click.option("--top", type=StrictIntRange(min=1), default=5, show_default=True,
              help="Separating attributes shown per finding.")
@click.option("--min-severity", type=click.Choice(["info", "warning", "critical"]),
              default="warning", show_default=True, help="Findings to report.")
@click.option("--boot-window", type=StrictFloatRange(min=0.02), default=1.0,
              show_default=True, metavar="HOURS", help="Width of the boot time buckets.")
@click.option("-j", "--jobs", type=StrictIntRange(min=0), default=0, show_default=True,
              help="Worker processes reading inputs (0: one per CPU, at most 8).")
@click.option("--demo", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Write the 64-node demo fleet (6 nodes with Xid 79, all on one new "
                   "driver) to DIR as result JSON files, then stop.")
@click.option("--force", is_flag=True, help="With --demo: replace an existing DIR.")
def fleet(paths: tuple[str, ...], as_json: bool, as_csv: bool, html: str | None, quiet: bool,
          top: int, min_severity: str, boot_window: float, jobs: int, demo: str | None,
          force: bool) -> None:
    """Aggregate many nodes' results (check --json files) or snapshots (dirs,
    .tar.gz; directories are walked): each finding with its nodes, and its blast
    radius: the attributes the affected nodes share that the others do not,
    ranked by F1. Unusable inputs are counted, listed and skipped. Exit status:
    the worst finding in the fleet."""
    env = current_env()
    if demo is not None:
        from gputriage.fleet.scenario import write_demo

        written = write_demo(demo, force=force)
        env.stderr.write(f"{len(written)} node results written to {printable(demo)}; "
                         f"run: gputriage fleet {printable(demo)}\n")
        raise CommandExit(0)
    if not paths:
        raise click.UsageError("give PATH... (or --demo DIR)")
    from gputriage.errors import InputError
    from gputriage.fleet.report import load_fleet
    from gputriage.views.fleetview import (
        fleet_csv,
        fleet_json,
        fleet_line,
        fleet_verdict,
        render_fleet,
    )

    if jobs == 0:
        cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        jobs = min(len(cpus) if cpus else (os.cpu_count() or 1), 8)
    report = load_fleet(paths, boot_hours=boot_window, top=top, min_severity=min_severity,
                        jobs=jobs)
    if report.nodes == 0:
        first = report.bad_inputs[0] if report.bad_inputs else None
        why = f" (first: {first.path}: {first.reason})" if first else ""
        raise InputError(f"no usable node result or snapshot among the inputs{why}")
    from gputriage.commands.common import save_html
    from gputriage.views.html import fleet_html

    save_html(html, lambda: fleet_html(report, ", ".join(paths)), quiet=quiet)
    if as_json:
        env.write_json(fleet_json(report))
    elif as_csv:
        env.stdout.write(fleet_csv(report))
    elif quiet:
        env.stdout.write(fleet_line(report) + "\n")
    else:
        from gputriage.views.console import make_console

        render_fleet(report, make_console(env.stdout))
    raise CommandExit({"critical": 2, "warning": 1}.get(fleet_verdict(report), 0))
