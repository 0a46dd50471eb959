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
from gputriage.commands.nccl import nccl as nccl_command

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
    gputriage diff A B              what changed between two snapshots or results
    gputriage triage [PATH...]      incident screen: changes, findings, next actions
    gputriage collect -o FILE       save a snapshot of this host
    gputriage logs FILE...          per-GPU timeline and findings of kernel logs
    gputriage nccl LOG...           NCCL logs and nccl-tests results (with host outputs)
    gputriage xid CODE...           explain Xid (or --sxid SXid) codes
    gputriage history               the checks recorded on this host
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
@click.option("--state-dir", type=click.Path(), default=None,
              help="History directory (default: $GPUTRIAGE_STATE_DIR, else "
                   "$XDG_STATE_HOME/gputriage, /var/lib/gputriage as root).")
@click.option("--no-history", is_flag=True, help="Do not record this check in the history.")
@click.option("--history-keep", type=click.IntRange(min=0), default=500, show_default=True,
              help="Keep at least the last N history entries.")
@click.option("--history-days", type=click.FloatRange(min=0), default=90.0,
              show_default=True, help="Keep history entries younger than DAYS.")
def check(as_json: bool, verbose: bool, timeout: float | None, deadline: float,
          keep: str | None, since: str | None, boot: str | None, **hist: Any) -> None:
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
    _record_history(result, **hist)
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
    from gputriage.sniff import looks_binary

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
    from gputriage.rules import LOG_AREAS, rules_of
    from gputriage.snapshot import Snapshot

    facts = Facts(Snapshot({}, None, "logs"), window=window)
    facts.prefill("log_scan", scan)
    result = analyze_facts(facts, rules_of(LOG_AREAS))
    if scan.lines == 0:
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


def _record_history(result: Any, state_dir: str | None, no_history: bool,
                    history_keep: int, history_days: float) -> None:
    """Compare ``result`` with the last healthy check and record it; any problem
    is one stderr line, never a failed check."""
    if no_history:
        return
    env = _env()
    try:
        from gputriage.history import Retention, default_state_dir, record_check

        problems = record_check(state_dir or default_state_dir(), result,
                                env.live_host().now(), Retention(history_keep, history_days))
    except Exception as exc:  # noqa: BLE001 - history never fails the check
        problems = [f"{type(exc).__name__}: {exc}"]
    for problem in problems:
        env.stderr.write(f"gputriage: history not recorded: {problem}\n")


@cli.command("history")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="History directory (default: $GPUTRIAGE_STATE_DIR, else "
                   "$XDG_STATE_HOME/gputriage, /var/lib/gputriage as root).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the entries as JSON (schema gputriage/history/v1).")
@click.option("-n", "count", type=click.IntRange(min=1), default=20, show_default=True,
              help="Show the last N entries.")
def history(state_dir: str | None, as_json: bool, count: int) -> None:
    """List the recorded checks, oldest first: time, host, boot id, verdict,
    critical / warning counts, digest; "changed" marks a digest that differs from
    the entry before."""
    from gputriage.errors import InputError
    from gputriage.history import (
        HistoryError,
        db_path,
        default_state_dir,
        format_rows,
        history_rows,
        list_entries,
    )

    env = _env()
    where = state_dir or str(default_state_dir())
    if not db_path(where).is_file():
        entries = []
    else:
        try:
            entries = list_entries(where, count + 1)
        except HistoryError as exc:
            raise InputError(str(exc)) from None
    previous = entries[0] if len(entries) > count else None
    rows = history_rows(entries[-count:], previous)
    if as_json:
        import json

        doc = {"schema": "gputriage/history/v1", "state_dir": where, "entries": rows}
        env.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif not rows:
        env.stdout.write(f"no checks recorded in {where}\n")
    else:
        env.stdout.write("\n".join(format_rows(rows)) + "\n")
    raise _Exit(0)


@cli.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True,
              help="Print the diff as JSON (schema gputriage/diff/v1).")
@click.option("--all", "include_noise", is_flag=True,
              help="Also compare noise: temperatures, power, clocks, counters, idle link speed.")
@_verbose_opt
@_since_opt
@_boot_opt
def diff(a: str, b: str, as_json: bool, include_noise: bool, verbose: bool,
         since: str | None, boot: str | None) -> None:
    """What changed from A to B: each anything analyze accepts, or a JSON result of
    check/analyze --json. Facts that changed (kernel, driver, CUDA, GPUs, VBIOS, links,
    NVLinks, IB ports, hugepages, persistence, fabric manager, container toolkit, CDI),
    then findings new / resolved / still there. Exit status: 0 nothing changed, 1 facts
    changed or findings are new (resolved ones alone give 0); 64 usage, 66 unreadable."""
    from gputriage.diff import diff_views, load_view

    env = _env()
    window = _window(since, boot)
    result = diff_views(load_view(a, include_noise, window), load_view(b, include_noise, window))
    if as_json:
        from gputriage.views.diffview import dumps_diff

        env.stdout.write(dumps_diff(result) + "\n")
    else:
        from rich.console import Console

        from gputriage.views.diffview import render_diff

        render_diff(result, Console(file=env.stdout, highlight=False), verbose=verbose)
    raise _Exit(result.exit_status)


@cli.command("triage")
@click.argument("paths", nargs=-1)
@click.option("--baseline", metavar="PATH", default=None,
              help="Show what changed since this snapshot, bug report or result JSON.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the triage as JSON (schema gputriage/triage/v1).")
@_timeout_opt
@_deadline_opt
@_since_opt
@_boot_opt
def triage(paths: tuple[str, ...], baseline: str | None, as_json: bool,
           timeout: float | None, deadline: float, since: str | None,
           boot: str | None) -> None:
    """The incident screen: what changed (with --baseline), the critical findings with
    node-or-job blame, the next actions most drastic first. PATHs as for analyze; none:
    collect this host as check does. Exit status as for check."""
    from gputriage.views.triage import render_triage, triage_snapshot, triage_to_json

    env = _env()
    window = _window(since, boot)
    if paths:
        from gputriage.ingest import load_inputs

        t = triage_snapshot(load_inputs(list(paths)), window, baseline, ", ".join(paths))
    else:
        import tempfile

        from gputriage.collect import CollectOptions
        from gputriage.collect import collect as do_collect
        from gputriage.snapshot import Snapshot

        opts = CollectOptions(timeout_s=timeout, deadline_s=deadline)
        with tempfile.TemporaryDirectory(prefix="gputriage-") as tmp:
            path = do_collect(env.live_host(), f"{tmp}/snapshot", opts)
            t = triage_snapshot(Snapshot.load(path), window, baseline, "this host")
    if as_json:
        import json

        env.stdout.write(json.dumps(triage_to_json(t), indent=2, ensure_ascii=False) + "\n")
    else:
        from rich.console import Console

        render_triage(t, Console(file=env.stdout, highlight=False))
    raise _Exit(t.exit_status)


@cli.command("fleet")
@click.argument("paths", nargs=-1)
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as JSON (schema gputriage/fleet/v1).")
@click.option("--csv", "as_csv", is_flag=True, help="Print one CSV row per finding and "
              "separating attribute.")
@click.option("--top", type=click.IntRange(min=1), default=5, show_default=True,
              help="Separating attributes shown per finding.")
@click.option("--min-severity", type=click.Choice(["info", "warning", "critical"]),
              default="warning", show_default=True, help="Findings to report.")
@click.option("--boot-window", type=click.FloatRange(min=0.02), default=1.0,
              show_default=True, metavar="HOURS", help="Width of the boot time buckets.")
@click.option("-j", "--jobs", type=click.IntRange(min=0), default=0, show_default=True,
              help="Worker processes reading inputs (0: one per CPU, at most 8).")
@click.option("--demo", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Write the 64-node demo fleet (6 nodes with Xid 79, all on one new "
                   "driver) to DIR as result JSON files, then stop.")
def fleet(paths: tuple[str, ...], as_json: bool, as_csv: bool, top: int, min_severity: str,
          boot_window: float, jobs: int, demo: str | None) -> None:
    """Aggregate many nodes' results (check --json files) or snapshots (dirs,
    .tar.gz; directories are walked): each finding with its nodes, and its blast
    radius: the attributes the affected nodes share that the others do not,
    ranked by F1. Unusable inputs are counted, listed and skipped. Exit status:
    the worst finding in the fleet."""
    env = _env()
    if demo is not None:
        from gputriage.fleet_scenario import write_demo

        written = write_demo(demo)
        env.stderr.write(f"{len(written)} node results written to {demo}; "
                         f"run: gputriage fleet {demo}\n")
        raise _Exit(0)
    if not paths:
        raise click.UsageError("give PATH... (or --demo DIR)")
    from gputriage.errors import InputError
    from gputriage.fleet import load_fleet
    from gputriage.views.fleetview import fleet_csv, fleet_json, render_fleet

    if jobs == 0:
        cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        jobs = min(len(cpus) if cpus else (os.cpu_count() or 1), 8)
    report = load_fleet(paths, boot_hours=boot_window, top=top, min_severity=min_severity,
                        jobs=jobs)
    if report.nodes == 0:
        first = report.bad_inputs[0] if report.bad_inputs else None
        why = f" (first: {first.path}: {first.reason})" if first else ""
        raise InputError(f"no usable node result or snapshot among the inputs{why}")
    if as_json:
        import json

        env.stdout.write(json.dumps(fleet_json(report), indent=2) + "\n")
    elif as_csv:
        env.stdout.write(fleet_csv(report))
    else:
        from rich.console import Console

        render_fleet(report, Console(file=env.stdout, highlight=False, width=160))
    worst = {f.severity for f in report.findings}
    raise _Exit(2 if "critical" in worst else 1 if "warning" in worst else 0)


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
    out.write(f"{FLEET_SCENARIO:<24} a fleet of 64 nodes: 6 on one new driver show Xid 79 "
              "(a directory of results for gputriage fleet)\n")


FLEET_SCENARIO = "fleet-64-xid79-driver"


@scenario.command("build")
@click.argument("name")
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Snapshot directory or FILE.tar.gz to write.")
def scenario_build(name: str, output: str) -> None:
    """Write the snapshot of scenario NAME; then run: gputriage analyze OUTPUT."""
    from gputriage.scenarios import build_scenario, get_scenario

    if name == FLEET_SCENARIO:
        from gputriage.fleet_scenario import write_demo

        written = write_demo(output)
        _env().stderr.write(f"scenario {name}: {len(written)} node results written to {output}; "
                            f"then run: gputriage fleet {output}\n")
        return
    try:
        get_scenario(name)
    except KeyError as exc:
        raise click.UsageError(str(exc.args[0]) if exc.args else str(exc)) from None
    path = build_scenario(name, output)
    _env().stderr.write(f"scenario {name} written to {path}\n")


cli.add_command(nccl_command)


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
