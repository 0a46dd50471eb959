"""Command line: ``main(argv, env) -> exit status``.

Imports of everything heavier than click happen inside the commands, so
``gputriage --help`` answers fast. Exit status follows the Nagios convention
(0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN); usage errors exit 64 and unreadable
input 66, with one line on stderr, never a traceback.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import IO, Any

import click

from gputriage import __version__

EXIT_USAGE = 64
EXIT_INPUT = 66
EXIT_INTERNAL = 70


@dataclass
class Environment:
    """What the CLI touches, replaced wholesale in tests."""

    stdout: IO[str] = field(default_factory=lambda: sys.stdout)
    stderr: IO[str] = field(default_factory=lambda: sys.stderr)
    host: Any = None  # a collect.host.Host; LiveHost() when None

    def live_host(self) -> Any:
        if self.host is None:
            from gputriage.collect.host import LiveHost

            self.host = LiveHost()
        return self.host


class _Exit(Exception):
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gputriage")
def cli() -> None:
    """Triage a GPU node: what is wrong, is it the node or the job, what to do
    next, with the evidence lines.

    \b
    gputriage check                 collect this host and analyse it
    gputriage analyze PATH...       analyse a snapshot, a bug report, or pasted outputs
    gputriage collect -o FILE       save a snapshot of this host
    gputriage logs FILE...          per-GPU timeline and findings of kernel logs
    gputriage xid CODE...           explain Xid (or --sxid SXid) codes
    gputriage scenario list         simulated hosts to try it on

    Exit status: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; 64 usage, 66 unreadable input.
    """


@cli.command()
@click.option("-o", "--output", type=click.Path(dir_okay=True, writable=True),
              help="Snapshot directory or FILE.tar.gz (default: "
                   "gputriage-HOST-TIME.tar.gz here).")
@_timeout_opt
@_deadline_opt
def collect(output: str | None, timeout: float | None, deadline: float) -> None:
    """Capture this host into a snapshot (read-only; every command bounded)."""
    from gputriage.collect import CollectOptions
    from gputriage.collect import collect as do_collect

    env = _env()
    host = env.live_host()
    if output is None:
        import socket

        stamp = host.now().strftime("%Y%m%dT%H%M%SZ")
        output = f"gputriage-{socket.gethostname()}-{stamp}.tar.gz"
    path = do_collect(host, output, CollectOptions(timeout_s=timeout, deadline_s=deadline))
    env.stderr.write(f"snapshot written to {path}\n")


@cli.command()
@_json_opt
@_verbose_opt
@_timeout_opt
@_deadline_opt
@click.option("--keep", type=click.Path(file_okay=True), default=None,
              help="Also keep the snapshot (directory or .tar.gz) for later.")
@_since_opt
@_boot_opt
def check(as_json: bool, verbose: bool, timeout: float | None, deadline: float,
          keep: str | None, since: str | None, boot: str | None) -> None:
    """Collect this host into a temporary snapshot, analyse it, report."""
    import tempfile

    from gputriage.collect import CollectOptions
    from gputriage.collect import collect as do_collect
    from gputriage.engine import analyze
    from gputriage.snapshot import Snapshot

    env = _env()
    window = _window(since, boot)
    opts = CollectOptions(timeout_s=timeout, deadline_s=deadline)
    with tempfile.TemporaryDirectory(prefix="gputriage-") as tmp:
        path = do_collect(env.live_host(), keep or f"{tmp}/snapshot", opts)
        result = analyze(Snapshot.load(path), window)
    _report(result, as_json, verbose)


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@_json_opt
@_verbose_opt
@_since_opt
@_boot_opt
def analyze(paths: tuple[str, ...], as_json: bool, verbose: bool, since: str | None,
            boot: str | None) -> None:
    """Analyse what you have: snapshots (dir or .tar.gz), an nvidia-bug-report.log(.gz),
    or pasted outputs (nvidia-smi -q/-x/table, /proc/driver/nvidia/version, lsmod,
    a kernel log...). Several paths combine into one host view; - reads stdin."""
    from gputriage.engine import analyze as do_analyze
    from gputriage.ingest import load_inputs

    window = _window(since, boot)
    result = do_analyze(load_inputs(list(paths)), window)
    _report(result, as_json, verbose)


_COMPRESSED = (b"\x1f\x8b", b"\xfd7zXZ", b"BZh")


def _binary_files(paths: tuple[str, ...]) -> list[str]:
    """Inputs whose first 64 KiB are binary (compressed logs excepted)."""
    from gputriage.ingest import looks_binary

    found = []
    for path in paths:
        if path == "-":
            continue
        try:
            with open(path, "rb") as fh:
                head = fh.read(64 * 1024)
        except OSError:
            continue  # the scan reports unreadable inputs
        if not head.startswith(_COMPRESSED) and looks_binary(head):
            found.append(path)
    return found


def _judge_scan(scan: Any, window: Any) -> tuple[Any, list]:
    """The engine over an already scanned log (no second decoding): the facts'
    ``log_scan`` is pre-filled; every rule the kernel log alone can feed runs."""
    from gputriage.engine import analyze_facts
    from gputriage.facts import Facts
    from gputriage.snapshot import Snapshot

    facts = Facts(Snapshot({}, None, "logs"), window=window)
    facts.prefill("log_scan", scan)
    result = analyze_facts(facts)
    if not scan.lines:
        result.host["verdict"] = "unknown"
    return result, facts.get("log_events")


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print the timeline and findings as JSON (schema gputriage/logs/v1).")
@_verbose_opt
@_since_opt
@_boot_opt
def logs(paths: tuple[str, ...], as_json: bool, verbose: bool, since: str | None,
         boot: str | None) -> None:
    """Read kernel logs (dmesg, journalctl -k, syslog / kern.log, rotated .gz / .xz;
    - reads stdin) and print each GPU's timeline of NVIDIA events, then the findings.
    Several files make one timeline. Exit status as for analyze."""
    from gputriage.logscan import scan_paths
    from gputriage.views.status import exit_status
    from gputriage.views.timeline import build_timeline, logs_document, render_logs

    env = _env()
    window = _window(since, boot)
    binary = _binary_files(paths)
    if binary and len(binary) == len(paths):
        from gputriage.errors import InputError

        raise InputError(f"{binary[0]}: binary data, not a text log")
    scan = scan_paths([p for p in paths if p not in binary])
    scan.problems.extend(f"{p}: binary data, not a text log: skipped" for p in binary)
    result, events = _judge_scan(scan, window)
    lanes = build_timeline(events)
    if as_json:
        import json

        doc = logs_document(scan, lanes, result, {
            "boot": window.boot, "since": window.since.isoformat() if window.since else None})
        env.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        from rich.console import Console

        render_logs(scan, lanes, result, Console(file=env.stdout, highlight=False),
                    verbose=verbose)
    raise _Exit(int(exit_status(result)))


@cli.command("xid")
@click.argument("codes", nargs=-1, required=True)
@click.option("--sxid", is_flag=True, help="Explain NVSwitch SXid codes instead of Xid codes.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the catalog entries as JSON (schema gputriage/xid/v1).")
def xid(codes: tuple[str, ...], sxid: bool, as_json: bool) -> None:
    """Explain Xid (or --sxid SXid) CODEs: meaning, likely origin, node or job, what
    to do, NVIDIA's resolution bucket. A code not in the catalog gets a "not in the
    catalog" line (JSON: "known": false) and the exit status stays 0."""
    numbers = []
    for raw in codes:
        text = raw.strip().lower().removeprefix("sxid").removeprefix("xid").strip(" :,")
        if not text.isdigit():
            raise click.BadParameter(f"{raw!r} is not an Xid code (a number such as 79)",
                                     param_hint="CODE")
        numbers.append(int(text))
    env = _env()
    if as_json:
        import json

        from gputriage.views.xidview import xids_json

        doc = {"schema": "gputriage/xid/v1", "catalog": "sxid" if sxid else "xid",
               "entries": xids_json(numbers, sxid=sxid)}
        env.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        from rich.console import Console

        from gputriage.views.xidview import render_xids

        render_xids(numbers, Console(file=env.stdout, highlight=False), sxid=sxid)
    raise _Exit(0)


@cli.group()
def scenario() -> None:
    """Simulated hosts: realistic snapshots of named situations."""


@scenario.command("list")
def scenario_list() -> None:
    """List the scenarios."""
    from gputriage.scenarios import list_scenarios

    out = _env().stdout
    for sc in list_scenarios():
        out.write(f"{sc.name:<24} {sc.title}\n")


@scenario.command("build")
@click.argument("name")
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Snapshot directory or FILE.tar.gz to write.")
def scenario_build(name: str, output: str) -> None:
    """Write the snapshot of scenario NAME; then run: gputriage analyze OUTPUT."""
    from gputriage.scenarios import build_scenario, get_scenario

    try:
        get_scenario(name)
    except KeyError as exc:
        raise click.UsageError(str(exc.args[0]) if exc.args else str(exc)) from None
    path = build_scenario(name, output)
    _env().stderr.write(f"scenario {name} written to {path}\n")


def main(argv: list[str] | None = None, env: Environment | None = None) -> int:
    """Run the CLI and return its exit status (never raises)."""
    from gputriage.errors import InputError

    env = env or Environment()
    args = sys.argv[1:] if argv is None else argv
    try:
        cli.main(args=args, prog_name="gputriage", standalone_mode=False, obj=env)
    except _Exit as done:
        return done.code
    except click.UsageError as exc:
        if type(exc).__name__.startswith("NoArgsIsHelp") and exc.ctx is not None:
            env.stdout.write(exc.ctx.get_help() + "\n")
            return 0
        env.stderr.write(f"gputriage: usage error: {exc.format_message()}\n")
        if exc.ctx is not None:
            env.stderr.write(f"Try '{exc.ctx.command_path} --help'.\n")
        return EXIT_USAGE
    except click.Abort:
        env.stderr.write("gputriage: aborted\n")
        return 130
    except click.ClickException as exc:
        env.stderr.write(f"gputriage: error: {exc.format_message()}\n")
        return EXIT_USAGE
    except InputError as exc:
        env.stderr.write(f"gputriage: input error: {exc}\n")
        return EXIT_INPUT
    except (BrokenPipeError, KeyboardInterrupt):
        return 130
    except OSError as exc:
        env.stderr.write(f"gputriage: error: {exc}\n")
        return EXIT_INPUT
    except Exception as exc:  # noqa: BLE001 - last resort: one line, not a traceback
        if os.environ.get("GPUTRIAGE_DEBUG"):
            raise
        env.stderr.write(f"gputriage: internal error: {type(exc).__name__}: {exc} "
                         "(set GPUTRIAGE_DEBUG=1 for the traceback)\n")
        return EXIT_INTERNAL
    return 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
