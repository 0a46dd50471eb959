"""``gputriage schema NAME``: print the JSON Schema of a ``--json`` document."""

from __future__ import annotations

import click

from gputriage.commands.common import (
    CommandExit,
    current_env,
    json_doc_option,
    list_quiet_option,
)
from gputriage.schemas import COMMANDS


@click.command("schema")
@click.argument("name", required=False, type=click.Choice(list(COMMANDS)), metavar="NAME")
@click.option("--list", "show", is_flag=True, help="List the schemas and the commands "
              "whose --json prints each.")
@json_doc_option("the list (with --list)", "gputriage/schemas/v1")
@list_quiet_option("the schemas' names (with --list)")
def schema(name: str | None, show: bool, as_json: bool, quiet: bool) -> None:
    """Print the JSON Schema (draft 2020-12) of a --json document, self-contained:
    result (check, analyze), nccl, logs, diff, triage, fleet, history, ack, ack-list,
    xid, explain, k8s. --list says which command prints which."""
    import json

    from gputriage import schemas

    env = current_env()
    if show and as_json:
        env.write_json({"schema": "gputriage/schemas/v1", "schemas": [
            {"name": each, "commands": schemas.COMMANDS[each]} for each in schemas.names()]})
        raise CommandExit(0)
    if show and quiet:
        env.stdout.write("".join(f"{each}\n" for each in schemas.names()))
        raise CommandExit(0)
    if show:
        width = max(map(len, schemas.names()))
        for each in schemas.names():
            env.stdout.write(f"{each:<{width}}  {schemas.COMMANDS[each]}\n")
        raise CommandExit(0)
    if name is None:
        raise click.UsageError("name a schema (gputriage schema --list lists them)")
    env.stdout.write(json.dumps(schemas.bundled(name), indent=2, ensure_ascii=False) + "\n")
    raise CommandExit(0)
