"""What the command modules share: the early-exit signal, the current
:class:`~gputriage.cli.Environment`, the kernel-log window, the result report
and the common options.

Imports only click at import time; :mod:`gputriage.cli` imports the command
modules, never the other way round at import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # pragma: no cover
    from gputriage.cli import Environment


class _Exit(Exception):
    """Raised by a command to end with this exit status (caught in ``cli.main``)."""

    def __init__(self, code: int) -> None:
        self.code = code


def _env() -> Environment:
    return click.get_current_context().obj


def _window(since: str | None, boot: str | None) -> Any:
    """The kernel-log window of ``--since`` / ``--boot`` (usage error when malformed)."""
    from gputriage.logwindow import LogWindow, parse_boot, parse_since

    try:
        return LogWindow(boot=parse_boot(boot) if boot is not None else None,
                         since=parse_since(since) if since is not None else None)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since/--boot") from None


def _report(result: Any, as_json: bool, verbose: bool) -> None:
    from gputriage.views.status import exit_status

    env = _env()
    if as_json:
        from gputriage.views.jsonview import dumps

        env.stdout.write(dumps(result) + "\n")
    else:
        from rich.console import Console

        from gputriage.views.terminal import render_terminal

        render_terminal(result, Console(file=env.stdout, highlight=False), verbose=verbose)
    raise _Exit(int(exit_status(result)))


_json_opt = click.option("--json", "as_json", is_flag=True,
                         help="Print the result as JSON (schema gputriage/result/v1).")
_verbose_opt = click.option("-v", "--verbose", is_flag=True,
                            help="Show every finding in full and the skipped rules.")
_timeout_opt = click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
                            help="Per-command timeout in seconds (default 10, 30 for "
                                 "nvidia-smi -q and the kernel log).")
_since_opt = click.option("--since", default=None, metavar="TIME",
                          help="Judge only kernel-log events at or after TIME: ISO 8601 (UTC "
                               "unless an offset is given) or an age such as 2h, 30m, 1d.")
_boot_opt = click.option("--boot", default=None, metavar="N|all",
                         help="Judge the kernel-log events of one boot: 0 the current (last) "
                              "boot, -1 the one before...; default all, where only boot 0 "
                              "counts as current and earlier boots are history.")
_deadline_opt = click.option("--deadline", type=click.FloatRange(min=1), default=90.0,
                             show_default=True, help="Global collection deadline in seconds.")
_state_dir_help = ("History directory (default: $GPUTRIAGE_STATE_DIR, else "
                   "$XDG_STATE_HOME/gputriage, /var/lib/gputriage as root).")
