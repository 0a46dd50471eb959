"""``gputriage scenario list|build``: the simulated hosts (and the demo fleet)."""

from __future__ import annotations

import click

from gputriage.commands.common import current_env
from gputriage.views.safe import printable

FLEET_SCENARIO = "fleet-64-xid79-driver"


@click.group()
def scenario() -> None:
    """Simulated hosts: realistic snapshots of named situations."""


@scenario.command("list")
def scenario_list() -> None:
    """List the scenarios."""
    from gputriage.scenarios import list_scenarios

    out = current_env().stdout
    for sc in list_scenarios():
        out.write(f"{sc.name:<24} {sc.title}\n")
    out.write(f"{FLEET_SCENARIO:<24} a fleet of 64 nodes: 6 on one new driver show Xid 79 "
              "(a directory of results for gputriage fleet)\n")


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
        from gputriage.fleet_scenario import write_demo

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
