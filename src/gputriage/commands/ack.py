"""``gputriage ack``: acknowledge a finding or a GPU after a repair, so that the next
check reports it as acknowledged, not current (the repair -> ack -> resume loop)."""

from __future__ import annotations

import click

from gputriage.commands.common import STATE_DIR_HELP, StrictInt, current_env
from gputriage.text.safe import printable


def _who() -> str:
    import getpass
    import os

    for name in ("SUDO_USER", "LOGNAME", "USER"):
        if os.environ.get(name):
            return os.environ[name]
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


@click.command()
@click.argument("finding", required=False, metavar="[FINDING-ID]")
@click.option("--gpu", metavar="BUS", help="The GPU's PCI bus id (0000:9a:00.0): every "
              "finding of that GPU, or only FINDING-ID's.")
@click.option("--reason", help="Why: the repair done, the ticket (required to acknowledge).")
@click.option("--until", metavar="TIME", help="When it expires: ISO 8601, a duration such "
              "as 12h or 7d, or never (default: 30 days). A new event after the "
              "acknowledgement is current whatever this says.")
@click.option("--by", "who", metavar="NAME", help="Who acknowledges (default: the user).")
@click.option("--host", metavar="NAME", help="The host it is for (default: any host "
              "sharing this history directory).")
@click.option("--list", "show", is_flag=True, help="List the acknowledgements.")
@click.option("--clear", "clear_id", type=StrictInt(), metavar="ID",
              help="Withdraw acknowledgement ID.")
@click.option("--json", "as_json", is_flag=True,
              help="Print as JSON (schema gputriage/ack/v1; with --list, ack-list).")
@click.option("-q", "--quiet", is_flag=True,
              help="Print only the acknowledgement's id (with --list: the ids in force, one "
                   "a line). --json wins over it.")
@click.option("--state-dir", type=click.Path(), default=None, help=STATE_DIR_HELP)
def ack(finding: str | None, gpu: str | None, reason: str | None, until: str | None,
        who: str | None, host: str | None, show: bool, clear_id: int | None, as_json: bool,
        quiet: bool, state_dir: str | None) -> None:
    """Acknowledge FINDING-ID and/or --gpu BUS after a repair: the next check reports
    what it covers as acknowledged (not current), until it expires or a new event
    comes. Recorded in the history store with who, when and why.

    \b
    gputriage ack xid.79 --gpu 0000:9a:00.0 --reason "reseated, INC-4821"
    gputriage ack --gpu 0000:9a:00.0 --reason "GPU reset after Xid 48" --until 7d
    gputriage ack --list
    gputriage ack --clear 3"""
    from datetime import datetime, timezone

    from gputriage.engine import acks
    from gputriage.state import ackstore
    from gputriage.state.history import HistoryError, default_state_dir
    from gputriage.text.fields import normalize_bus_id

    env = current_env()
    where = state_dir or default_state_dir()
    now = datetime.now(timezone.utc).replace(microsecond=0)
    try:
        if show:
            return _list(ackstore.load(where), as_json, now, quiet=quiet)
        if clear_id is not None:
            if not ackstore.clear(where, clear_id, now):
                raise click.UsageError(f"no open acknowledgement {clear_id}")
            env.stdout.write(f"{clear_id}\n" if quiet and not as_json
                             else f"acknowledgement {clear_id} withdrawn\n")
            return None
        if not finding and not gpu:
            raise click.UsageError("name a FINDING-ID, a --gpu BUS, or both")
        if not reason or not reason.strip():
            raise click.UsageError("--reason is required: say what was repaired")
        bus = normalize_bus_id(gpu) if gpu else None
        if gpu and bus is None:
            raise click.BadParameter(f"not a PCI bus id: {gpu!r}", param_hint="--gpu")
        try:
            expires = acks.parse_until(until, now)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--until") from None
        done = ackstore.record(where, acks.Ack(None, now, who or _who(), reason.strip(),
                                           finding, bus, host, expires))
    except HistoryError as exc:
        raise click.ClickException(f"history: {exc}") from None
    if as_json:
        env.write_json(done.to_json())
    elif quiet:
        env.stdout.write(f"{done.id}\n")
    else:
        env.stdout.write(f"acknowledgement {done.id}: {printable(_what(done))} "
                         f"{printable(done.describe())}\n")
    return None


def _what(a: object) -> str:
    finding = getattr(a, "finding", None)
    gpu = getattr(a, "gpu", None)
    return " on ".join(x for x in (finding or "every finding", gpu and f"GPU {gpu}") if x)


def _list(items: list, as_json: bool, now: object, *, quiet: bool = False) -> None:
    env = current_env()
    if as_json:
        env.write_json([dict(a.to_json(), in_force=a.in_force(now)) for a in items])
        return
    if quiet:
        env.stdout.write("".join(f"{a.id}\n" for a in items if a.in_force(now)))
        return
    if not items:
        env.stdout.write("no acknowledgements\n")
    for a in items:
        state = "in force" if a.in_force(now) else ("withdrawn" if a.cleared else "expired")
        env.stdout.write(f"{a.id:>4}  {state:<9} {printable(_what(a))}  "
                         f"{printable(a.describe())}\n")
