"""What the command modules share: the :class:`Environment` a command runs in, the
early-exit signal, the kernel-log window, the result report and the common options.

Imports only click at import time; :mod:`gputriage.cli` imports the command
modules, never the other way round.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

import click


def _strict_int(kind: click.ParamType, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
    if not isinstance(value, str):
        return value
    from gputriage.text.fields import strict_int

    number = strict_int(value.strip())
    if number is None:
        kind.fail(f"{value[:40]!r} is not a whole number (ASCII digits, at most 20).", param, ctx)
    return number


class StrictInt(click.types.IntParamType):
    """click's INT, reading the text with the one number converter
    (:func:`gputriage.text.fields.strict_int`): ASCII digits only, so ``١٢``, ``1_000``
    and 5,000 digits are usage errors, as click words them."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        return super().convert(_strict_int(self, value, param, ctx), param, ctx)


class StrictIntRange(click.IntRange):
    """click's IntRange, reading the text as :class:`StrictInt` does."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        return super().convert(_strict_int(self, value, param, ctx), param, ctx)


class StrictFloatRange(click.FloatRange):
    """click's FloatRange, reading the text with the one number converter
    (:func:`gputriage.text.fields.strict_float`): ``nan``, ``inf``, ``1e400`` and
    Unicode digits are usage errors (a NaN passes every range check)."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            from gputriage.text.fields import strict_float

            number = strict_float(value.strip())
            if number is None:
                self.fail(f"{value[:40]!r} is not a finite number.", param, ctx)
            value = number
        return super().convert(value, param, ctx)


@dataclass
class Environment:
    """What the CLI touches, replaced wholesale in tests."""

    stdout: IO[str] = field(default_factory=lambda: sys.stdout)
    stderr: IO[str] = field(default_factory=lambda: sys.stderr)
    host: Any = None  # a collect.host.Host; LiveHost() when None
    pager: Callable[[str], None] | None = None  # shows a long report; None: run_pager
    progress_after_s: float = 1.0  # work shorter than this shows no progress

    def write_json(self, doc: Any, **options: Any) -> None:
        """A JSON document on stdout: indented for a terminal, compact (one line, the
        fast C encoder) when piped to a program or a file."""
        import json

        tty = getattr(self.stdout, "isatty", None)
        indent = 2 if tty is not None and tty() else None
        self.stdout.write(json.dumps(doc, indent=indent, **options) + "\n")

    def live_host(self) -> Any:
        if self.host is None:
            from gputriage.collect.host import LiveHost

            self.host = LiveHost()
        return self.host


class CommandExit(Exception):
    """Raised by a command to end with this exit status (caught in ``cli.main``)."""

    def __init__(self, code: int) -> None:
        self.code = code


def current_env() -> Environment:
    return click.get_current_context().obj


def log_window(since: str | None, boot: str | None) -> Any:
    """The kernel-log window of ``--since`` / ``--boot`` (usage error when malformed)."""
    from gputriage.facts.window import LogWindow

    try:
        return LogWindow.of(since, boot)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since/--boot") from None


def show(render: Callable[[Any], None], *, no_pager: bool = False) -> None:
    """A terminal view: ``render(console)`` onto stdout; on a terminal, a view longer
    than the terminal is high goes through the pager (unless ``no_pager``)."""
    from gputriage.views.console import make_console

    env = current_env()
    console = make_console(env.stdout)
    if no_pager or not _isatty(env.stdout):  # FORCE_COLOR colours a pipe, never pages it
        render(console)
        return
    with console.capture() as captured:
        render(console)
    text = captured.get()
    if text.count("\n") < console.size.height:
        env.stdout.write(text)
    else:
        (env.pager or run_pager)(text)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def run_pager(text: str) -> None:
    """``text`` through ``$GPUTRIAGE_PAGER``, else ``$PAGER``, else ``less -FRX`` (run
    without a shell; empty or ``cat``: no pager); straight to stdout when it cannot run."""
    import os
    import shlex
    import subprocess

    stdout = current_env().stdout
    command = os.environ.get("GPUTRIAGE_PAGER", os.environ.get("PAGER", "less -FRX"))
    argv = shlex.split(command) if command.strip() not in ("", "cat") else []
    if argv:
        env = {**os.environ, "LESS": os.environ.get("LESS", "FRX")}
        try:
            stdout.flush()
            pager = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env)
        except (OSError, ValueError):
            pass
        else:
            assert pager.stdin is not None
            try:
                pager.stdin.write(text.encode(getattr(stdout, "encoding", None) or "utf-8",
                                              "replace"))
                pager.stdin.close()
            except BrokenPipeError:  # quit before the end
                pass
            while True:
                try:
                    pager.wait()
                    return
                except KeyboardInterrupt:  # the pager has the keyboard: let it end
                    continue
    stdout.write(text)


def quiet_line(result: Any, who: str | None = None, *, who_is_job: bool = False) -> None:
    """The one-line verdict (``-q``) on stdout; ``who``: what was judged (default: the
    host's name); ``who_is_job`` when ``who`` names the job."""
    from gputriage.views.oneline import verdict_line

    env = current_env()
    encoding = (getattr(env.stdout, "encoding", None) or "utf-8").lower().replace("-", "")
    env.stdout.write(verdict_line(result, who=who, unicode=encoding.startswith("utf"),
                                  who_is_job=who_is_job) + "\n")


def save_html(path: str | None, render: Callable[[], str], *, quiet: bool = False) -> None:
    """``--html FILE``: write the report ``render()`` makes (nothing when ``path`` is None);
    one stderr line says where, unless ``quiet``."""
    if path is None:
        return
    from gputriage.text.safe import printable
    from gputriage.views.html.output import write_html

    out = write_html(path, render())
    if not quiet:
        current_env().stderr.write(f"HTML report written to {printable(str(out))}\n")


def report_result(result: Any, as_json: bool, verbose: bool, *, quiet: bool = False,
                  no_pager: bool = False, html: str | None = None, facts: Any = None) -> None:
    """Print ``result`` (JSON, the one-line verdict or the terminal report), write its
    HTML report when ``html`` names a file (topology and timeline from ``facts``), and
    end with its exit status."""
    from gputriage.status import exit_status

    env = current_env()
    if html is not None:
        from gputriage.views.html import result_html

        save_html(html, lambda: result_html(result, facts), quiet=quiet)
    if as_json:
        from gputriage.results.document import dumps

        env.stdout.write(dumps(result) + "\n")
    elif quiet:
        quiet_line(result)
    else:
        from gputriage.views.terminal import render_terminal

        show(lambda console: render_terminal(result, console, verbose=verbose),
             no_pager=no_pager)
    raise CommandExit(int(exit_status(result)))


def _check_html(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A bad --html path fails before any work."""
    if value is not None:
        from gputriage.views.html.output import check_html_path

        check_html_path(value)
    return value


html_option = click.option(
    "--html", "html", type=click.Path(dir_okay=False), default=None, metavar="FILE",
    callback=_check_html,
    help="Also write the report as one self-contained HTML file (no network, no script; "
         "an existing file is replaced); the terminal or JSON output and the exit status "
         "are unchanged.")
json_option = click.option("--json", "as_json", is_flag=True,
                         help="Print the result as JSON (schema gputriage/result/v1).")
verbose_option = click.option("-v", "--verbose", is_flag=True,
                            help="Show every finding in full and the skipped rules.")
quiet_option = click.option(
    "-q", "--quiet", is_flag=True,
    help="Print only the one-line verdict (no progress); the exit status is the same. "
         "--json wins over it.")


def list_quiet_option(what: str) -> Callable[[Any], Any]:
    """``-q`` of a command whose output is a list: ``what`` (the names, the ids) only,
    one a line, for a script to read."""
    return click.option("-q", "--quiet", is_flag=True,
                        help=f"Print only {what}, one a line. --json wins over it.")


def json_doc_option(what: str, schema: str) -> Callable[[Any], Any]:
    """``--json`` of a command that prints ``what`` as the document ``schema``."""
    return click.option("--json", "as_json", is_flag=True,
                        help=f"Print {what} as JSON (schema {schema}).")


no_pager_option = click.option(
    "--no-pager", is_flag=True,
    help="Never page the report (by default a report longer than the terminal goes "
         "through $GPUTRIAGE_PAGER, else $PAGER, else less -FRX; never when piped).")
timeout_option = click.option("--timeout", type=StrictFloatRange(min=0.1), default=None,
                            help="Per-command timeout in seconds (default 10, 30 for "
                                 "nvidia-smi -q and the kernel log).")
since_option = click.option("--since", default=None, metavar="TIME",
                          help="Judge only kernel-log events at or after TIME: ISO 8601 (UTC "
                               "unless an offset is given) or an age such as 2h, 30m, 1d.")
boot_option = click.option("--boot", default=None, metavar="N|all",
                         help="Judge the kernel-log events of one boot: 0 the current (last) "
                              "boot, -1 the one before...; default all, where only boot 0 "
                              "counts as current and earlier boots are history.")
deadline_option = click.option("--deadline", type=StrictFloatRange(min=1), default=90.0,
                             show_default=True, help="Global collection deadline in seconds.")
job_faults_option = click.option(
    "--job-faults-fail", is_flag=True,
    help="Let findings blamed on the job or its settings fail the check (exit 2); by "
         "default they are reported and exit 1 at most, so a job's fault never drains "
         "the node.")
expect_option = click.option(
    "--expect", "expect_file", type=click.Path(dir_okay=False), default=None,
    metavar="FILE", help="What the node should have (TOML: GPU count and model, driver, "
                         "NVSwitches, IB ports, PCIe...); a node short of it is critical. "
                         "check reads /etc/gputriage/expect.toml when present.")


def load_expectations(path: str | None, *, default: bool) -> Any:
    """The expectations of ``--expect`` (or, with ``default``, the standard file when
    present); None when there are none. A bad file is an input error."""
    from gputriage.parsers import expect
    if path is None and default:
        found = expect.default_path()
        path = str(found) if found is not None else None
    return expect.load(path) if path is not None else None


model_dir_option = click.option(
    "--model-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
    help="Also judge where this host keeps a model's weights: the file system (local NVMe, "
         "NFS, Lustre, an object-store FUSE mount, image layers), free space there and on "
         "local NVMe, RAM for the page cache (default: [weights] model_dir of the "
         "expectations file).")
dcgm_diag_option = click.option(
    "--dcgm-diag", "dcgm_diag", type=click.Choice(["1", "2", "3", "4"]), default=None,
    metavar="LEVEL", help="Also run DCGM's diagnostic, dcgmi diag -r LEVEL -j (1: seconds, "
                          "2: minutes, 3: up to an hour, 4: hours; it loads every GPU, so "
                          "never without this option); the deadline grows to hold it.")


def opt_in_sources(model_dir: str | None, dcgm_diag: str | None,
                   expectations: Any = None) -> dict[str, str]:
    """The opt-in sources' options for :class:`gputriage.collect.CollectOptions`."""
    import os

    out: dict[str, str] = {}
    if model_dir is None and expectations is not None:
        model_dir = expectations.weights.model_dir
    if model_dir is not None:
        out["model_dir"] = os.path.abspath(model_dir)
    if dcgm_diag is not None:
        out["dcgm_diag"] = dcgm_diag
    return out


STATE_DIR_HELP = ("History directory (default: $GPUTRIAGE_STATE_DIR, else "
                   "$XDG_STATE_HOME/gputriage, /var/lib/gputriage as root).")
