"""``gputriage scenario list|build``: the simulated hosts (and the demo fleet)."""

from __future__ import annotations

import click

from gputriage.commands.common import current_env, json_doc_option, list_quiet_option
from gputriage.text.safe import printable

FLEET_SCENARIO = "fleet-64-xid79-driver"


@click.group()
def scenario() -> None:
    """Simulated hosts: realistic snapshots of named situations."""


@scenario.command("list")
@json_doc_option("the scenarios", "gputriage/scenarios/v1")
@list_quiet_option("the scenarios' names")
def scenario_list(as_json: bool, quiet: bool) -> None:
    """List the scenarios: each name, then what it simulates."""
    from rich.text import Text

    from gputriage.scenarios import list_scenarios
    from gputriage.views.console import make_console
    from gputriage.views.tables import new_table, print_table

    env = current_env()
    rows = [(sc.name, sc.title, "host") for sc in list_scenarios()]
    rows.append((FLEET_SCENARIO, "a fleet of 64 nodes: 6 on one new driver show Xid 79 "
                 "(a directory of results for gputriage fleet)", "fleet"))
    if as_json:
        env.write_json({"schema": "gputriage/scenarios/v1", "scenarios": [
            {"name": name, "title": title, "kind": kind} for name, title, kind in rows]})
        return
    if quiet:
        env.stdout.write("".join(f"{printable(name)}\n" for name, _, _ in rows))
        return
    console = make_console(env.stdout)
    table = new_table(console, header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for name, title, _ in rows:
        table.add_row(Text(printable(name)), Text(printable(title)))
    print_table(console, table)


@scenario.command("build")
@click.argument("name")
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Snapshot directory, or FILE.tar.gz / FILE.tgz, to write (for "
                   f"{FLEET_SCENARIO}: a directory).")
@click.option("--force", is_flag=True, help="Replace an existing output (refused otherwise).")
def scenario_build(name: str, output: str, force: bool) -> None:
    """Write the snapshot of scenario NAME; then run: gputriage analyze OUTPUT."""
    from gputriage.scenarios import build_scenario, get_scenario

    if name == FLEET_SCENARIO:
        from gputriage.fleet.scenario import write_demo

        written = write_demo(output, force=force)
        current_env().stderr.write(f"scenario {name}: {len(written)} node results written to "
                            f"{printable(output)}; then run: gputriage fleet {printable(output)}\n")
        return
    try:
        get_scenario(name)
    except KeyError as exc:
        raise click.UsageError(str(exc.args[0]) if exc.args else str(exc)) from None
    path = build_scenario(name, output, force=force)
    current_env().stderr.write(f"scenario {name} written to {printable(path)}\n")
