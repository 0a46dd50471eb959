"""``gputriage scenario list|build``: the simulated hosts (and the demo fleet)."""

from __future__ import annotations

import click

from gputriage.commands.common import current_env
from gputriage.text.safe import printable

FLEET_SCENARIO = "fleet-64-xid79-driver"


@click.group()
def scenario() -> None:
    """Simulated hosts: realistic snapshots of named situations."""


@scenario.command("list")
def scenario_list() -> None:
    """List the scenarios."""
    from rich.text import Text

    from gputriage.scenarios import list_scenarios
    from gputriage.views.console import make_console
    from gputriage.views.tables import new_table, print_table

    console = make_console(current_env().stdout)
    table = new_table(console, header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    rows = [(sc.name, sc.title) for sc in list_scenarios()]
    rows.append((FLEET_SCENARIO, "a fleet of 64 nodes: 6 on one new driver show Xid 79 "
                 "(a directory of results for gputriage fleet)"))
    for name, title in rows:
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
