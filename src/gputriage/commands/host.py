"""``gputriage collect``, ``check`` and ``analyze``: capture this host, judge it
(recording the check in the history), or judge what you already have."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from gputriage.commands.common import (
    STATE_DIR_HELP,
    CommandExit,
    StrictFloatRange,
    StrictIntRange,
    boot_option,
    current_env,
    dcgm_diag_option,
    deadline_option,
    expect_option,
    html_option,
    job_faults_option,
    json_option,
    load_expectations,
    log_window,
    model_dir_option,
    no_pager_option,
    opt_in_sources,
    quiet_option,
    report_result,
    since_option,
    timeout_option,
    verbose_option,
)
from gputriage.text.safe import printable

_force_opt = click.option("--force", is_flag=True,
                          help="Replace an existing output (refused otherwise).")
_redact_opt = click.option(
    "--redact", is_flag=True,
    help="Replace host names, IP and MAC addresses, serial numbers, GPU UUIDs and user "
         "names with consistent tokens (the analysis stays the same) before writing.")


@click.command()
@click.option("-o", "--output", type=click.Path(),
              help="Snapshot directory, or FILE.tar.gz / FILE.tgz (default: "
                   "gputriage-HOST-TIME.tar.gz here). Written 0600/0700: it holds the "
                   "kernel log and configuration.")
@_force_opt
@_redact_opt
@timeout_option
@deadline_option
@model_dir_option
@dcgm_diag_option
@expect_option
def collect(output: str | None, force: bool, redact: bool, timeout: float | None,
            deadline: float, model_dir: str | None, dcgm_diag: str | None,
            expect_file: str | None) -> None:
    """Capture this host into a snapshot (read-only; every command bounded). The
    expectations file gives [weights] model_dir when --model-dir is not given."""
    from gputriage.collect import CollectOptions
    from gputriage.collect import collect as do_collect

    env = current_env()
    host = env.live_host()
    if output is None:
        import socket

        stamp = host.now().strftime("%Y%m%dT%H%M%SZ")
        name = "redacted" if redact else socket.gethostname()
        output = f"gputriage-{name}-{stamp}.tar.gz"
    expectations = load_expectations(expect_file, default=model_dir is None)
    opts = CollectOptions(timeout_s=timeout, deadline_s=deadline, force=force, redact=redact,
                          opt_in=opt_in_sources(model_dir, dcgm_diag, expectations))
    from gputriage.commands.progress import progress_for

    with progress_for(env) as progress:
        opts.progress = progress.update
        path = do_collect(host, output, opts)
    env.stderr.write(f"snapshot written to {printable(path)}\n")


@click.command()
@click.argument("job_outputs", nargs=-1, metavar="[JOB_OUTPUT]...")
@json_option
@html_option
@verbose_option
@quiet_option
@no_pager_option
@timeout_option
@deadline_option
@click.option("--keep", type=click.Path(), default=None,
              help="Also keep the snapshot (directory, or FILE.tar.gz / FILE.tgz) for later.")
@_force_opt
@_redact_opt
@since_option
@boot_option
@click.option("--state-dir", type=click.Path(), default=None, help=STATE_DIR_HELP)
@click.option("--no-history", is_flag=True, help="Do not record this check in the history.")
@click.option("--history-keep", type=StrictIntRange(min=0), default=500, show_default=True,
              help="Keep at least the last N history entries.")
@click.option("--history-days", type=StrictFloatRange(min=0), default=90.0,
              show_default=True, help="Keep history entries younger than DAYS.")
@expect_option
@model_dir_option
@dcgm_diag_option
@job_faults_option
@click.option("--snapshot", "from_snapshot", type=click.Path(), default=None,
              metavar="PATH", help="Judge this snapshot of the host (directory or "
                                   ".tar.gz, from collect) instead of collecting now: "
                                   "history, acknowledgements and expectations apply.")
def check(job_outputs: tuple[str, ...], as_json: bool, verbose: bool, timeout: float | None,
          deadline: float, keep: str | None, force: bool, redact: bool, since: str | None,
          boot: str | None, expect_file: str | None, job_faults_fail: bool,
          from_snapshot: str | None, quiet: bool, no_pager: bool, html: str | None,
          model_dir: str | None, dcgm_diag: str | None, **hist: Any) -> None:
    """Collect this host into a temporary snapshot, analyse it, report.

    JOB_OUTPUT: what a job on this host printed (its NCCL_DEBUG=INFO log, an nccl-tests
    output, its CUDA, NVML or container-runtime errors, or anything analyze reads), judged
    together with the host's facts; a check
    given job outputs is not recorded in the history (it is about one job). With --redact
    the snapshot, and so the report, names no host, address, serial, UUID or user, and the
    check is not recorded in the history either.

    The exit status is the node's: findings blamed on the job are reported and exit 1 at
    most (unless --job-faults-fail). Acknowledgements (gputriage ack) in the history
    directory apply; a finding they cover is reported as acknowledged, not current."""
    from gputriage.collect import CollectOptions
    from gputriage.facts.context import CheckContext

    env = current_env()
    window = log_window(since, boot)
    expectations = load_expectations(expect_file, default=True)
    if keep is not None:
        from gputriage.snapshot.writer import check_output

        check_output(keep, force)  # a bad --keep fails now, not after collecting
    extra = None
    if job_outputs:
        from gputriage.ingest import load_inputs

        extra = load_inputs(list(job_outputs))  # before collecting: a bad path fails fast
    opts = CollectOptions(timeout_s=timeout, deadline_s=deadline, force=force, redact=redact,
                          opt_in=opt_in_sources(model_dir, dcgm_diag, expectations))
    context = CheckContext(expectations=expectations, acks=tuple(host_acks(hist["state_dir"])),
                           now=env.live_host().now(), job_faults_fail=job_faults_fail)
    facts: list = []  # the analysis's facts, for the HTML report's topology and timeline
    result = judge_host(env, window, context, opts, from_snapshot=from_snapshot, keep=keep,
                        extra=extra, quiet=quiet, facts_out=facts)
    if extra is None and not redact:  # tokens would read as changes against the history
        _amend_from_history(result, hist["state_dir"], hist["no_history"], context)
        _record_history(result, **hist)
    report_result(result, as_json, verbose, quiet=quiet, no_pager=no_pager, html=html,
                  facts=facts[0] if facts else None)


def judge_host(env: Any, window: Any, context: Any, opts: Any, *,
               from_snapshot: str | None = None, keep: str | None = None,
               extra: Any = None, quiet: bool = True, facts_out: list | None = None) -> Any:
    """One check's judgement, as ``check`` and ``watch`` make it: this host collected
    into a temporary snapshot (or ``keep``), or the snapshot at ``from_snapshot`` read
    again, with ``extra`` inputs merged, analysed in ``context`` (its facts appended to
    ``facts_out`` when given)."""
    import tempfile

    from gputriage.collect import collect as do_collect
    from gputriage.engine.analysis import analyze_facts
    from gputriage.facts.store import Facts
    from gputriage.snapshot.bundle import Snapshot

    with tempfile.TemporaryDirectory(prefix="gputriage-") as tmp:
        if from_snapshot is not None:
            from gputriage.ingest import load_inputs

            snapshot = load_inputs([from_snapshot])
        else:
            from gputriage.commands.progress import progress_for

            with progress_for(env, quiet) as progress:
                opts.progress = progress.update
                snapshot = Snapshot.load(do_collect(env.live_host(),
                                                    keep or f"{tmp}/snapshot", opts))
        if extra is not None:
            snapshot.merge(extra)
        facts = Facts(snapshot, window, context)
        result = analyze_facts(facts)
    if facts_out is not None:
        facts_out.append(facts)
    if keep is None and from_snapshot is None:
        _name_live_input(result, tmp)
    return result


LIVE_INPUT = "this host, collected now, not kept"  # check --keep PATH keeps it


def import_engine() -> None:
    """Import what judges a host (called while worker processes scan a large log, whose
    time it then takes little from): the engine, its rules and the fact areas they look
    up, by judging an empty snapshot."""
    from gputriage.engine.analysis import analyze_facts
    from gputriage.facts.store import Facts
    from gputriage.snapshot.bundle import Snapshot

    analyze_facts(Facts(Snapshot({}, None, "")))


def import_judging(as_json: bool = True, quiet: bool = False, html: bool = False) -> None:
    """:func:`import_engine`, and what writes the result as :func:`report_result` will
    (JSON, the terminal report, HTML)."""
    import_engine()
    if html:
        import gputriage.views.html
    if as_json:
        import gputriage.results.document
    elif not quiet:
        import gputriage.views.terminal  # noqa: F401


def _print_formats() -> None:
    """``analyze --formats``: every input it reads, one a line; exit 0."""
    from gputriage.ingest.detect import formats

    current_env().stdout.write("".join(f"{line}\n" for line in formats()))
    raise CommandExit(0)


def _name_live_input(result: Any, tmp: str) -> None:
    """Name the collection by what it was, not by its temporary directory, which is
    gone once the report is printed."""
    for item in result.inputs:
        if str(item.get("origin", "")).startswith(tmp):
            item["origin"] = LIVE_INPUT


def host_acks(state_dir: str | None, warn: Callable[[str], None] | None = None) -> list:
    """The acknowledgements in the history directory; a problem reading them is one
    stderr line (or ``warn(problem)``), and none apply."""
    from gputriage.state import ackstore
    from gputriage.state.history import CorruptHistory, HistoryError, default_state_dir

    try:
        return ackstore.load(state_dir or default_state_dir())
    except CorruptHistory:
        return []  # recording the check moves it aside, and says so
    except HistoryError as exc:
        if warn is not None:
            warn(f"acknowledgements not read: {exc}")
        else:
            current_env().stderr.write(
                f"gputriage: acknowledgements not read: {printable(str(exc))}\n")
        return []


def _amend_from_history(result: Any, state_dir: str | None, no_history: bool,
                        context: Any) -> None:
    """Flapping signals latched and failures-again escalated, from the host's history
    (docs/unattended.md); a problem is one stderr line, never a failed check."""
    if no_history:
        return
    from gputriage.state.history import default_state_dir
    from gputriage.state.recurrence import apply_history

    env = current_env()
    for problem in apply_history(result, state_dir or default_state_dir(),
                                 env.live_host().now(), acks=context.acks):
        env.stderr.write(f"gputriage: history not read: {printable(problem)}\n")


def _record_history(result: Any, state_dir: str | None, no_history: bool,
                    history_keep: int, history_days: float) -> None:
    """Compare ``result`` with the last healthy check and record it; any problem
    is one stderr line, never a failed check."""
    if no_history:
        return
    from gputriage.state.history import Retention
    from gputriage.watch.recording import record_history

    env = current_env()
    problems = record_history(
        state_dir, result, env.live_host().now(), Retention(history_keep, history_days),
        notice=lambda text: env.stderr.write(f"gputriage: history: {printable(text)}\n"))
    for problem in problems:
        env.stderr.write(f"gputriage: history not recorded: {printable(problem)}\n")


@click.command()
@click.argument("paths", nargs=-1, required=True)
@json_option
@html_option
@verbose_option
@quiet_option
@no_pager_option
@since_option
@boot_option
@expect_option
@job_faults_option
@click.option("--formats", is_flag=True, is_eager=True, expose_value=False,
              callback=lambda ctx, _, value: _print_formats() if value else None,
              help="List every input analyze reads (snapshots, bug reports, each pasted "
                   "command's output) and stop.")
def analyze(paths: tuple[str, ...], as_json: bool, verbose: bool, quiet: bool, no_pager: bool,
            since: str | None, boot: str | None, expect_file: str | None,
            job_faults_fail: bool, html: str | None) -> None:
    """Analyse what you have: snapshots (dir or .tar.gz), an nvidia-bug-report.log(.gz),
    or pasted outputs (nvidia-smi -q/-x/table, /proc/driver/nvidia/version, lsmod,
    a kernel log...). Several paths combine into one host view; - reads stdin."""
    from gputriage.commands.progress import progress_for
    from gputriage.engine.analysis import analyze_facts
    from gputriage.facts.context import CheckContext
    from gputriage.facts.store import Facts
    from gputriage.ingest import load_inputs

    window = log_window(since, boot)
    expectations = load_expectations(expect_file, default=False)
    context = CheckContext(expectations=expectations, job_faults_fail=job_faults_fail)
    with progress_for(current_env(), quiet) as progress:  # a large log takes a while
        snapshot = load_inputs(list(paths), progress=progress.update,
                               meanwhile=lambda: import_judging(as_json, quiet, bool(html)))
    facts = Facts(snapshot, window, context)  # kept for the HTML report's topology
    result = analyze_facts(facts)
    report_result(result, as_json, verbose, quiet=quiet, no_pager=no_pager, html=html,
                  facts=facts)
