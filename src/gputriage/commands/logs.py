"""``gputriage logs FILE...`` (per-GPU timeline and findings of kernel logs) and
``gputriage xid CODE...`` (the Xid / SXid catalog)."""

from __future__ import annotations

from typing import Any

import click

from gputriage.commands.common import (
    CommandExit,
    boot_option,
    current_env,
    list_quiet_option,
    log_window,
    no_pager_option,
    quiet_line,
    quiet_option,
    show,
    since_option,
    verbose_option,
)


def _judge_scan(scan: Any, window: Any, paths: tuple[str, ...] = ()) -> tuple[Any, list]:
    """The engine over an already scanned log (no second decoding): the facts'
    ``log_scan`` (and ``log_modified``: the last write of the files among ``paths``)
    are pre-filled; every rule the kernel log alone can feed runs."""
    from dataclasses import replace

    from gputriage.engine.analysis import analyze_facts
    from gputriage.facts.store import Facts
    from gputriage.rules import LOG_AREAS, rules_of
    from gputriage.snapshot.bundle import Snapshot

    facts = Facts(Snapshot({}, None, "logs"), window=window)
    facts.prefill("log_scan", scan)
    written = _modified(paths)
    if written is not None:
        facts.prefill("log_modified", written)
    result = analyze_facts(facts, rules_of(LOG_AREAS))
    if scan.lines == 0:
        result.host = replace(result.host, verdict="unknown")
    return result, facts.get("log_events")


def _import_judging() -> None:
    """Import what judges and shows a scan (called while the scan's worker processes
    search a large file, whose time it then takes nothing from): the rules, the engine
    and the next steps of findings, the fact areas the rules look up (by judging an
    empty scan), the timeline."""
    import gputriage.engine.acks
    import gputriage.engine.causes
    import gputriage.next_steps
    import gputriage.status
    import gputriage.views.timeline  # noqa: F401
    from gputriage.facts.window import LogWindow
    from gputriage.logscan import LogScan

    _judge_scan(LogScan(), LogWindow())


def _modified(paths: tuple[str, ...]) -> Any:
    """When the regular files among ``paths`` were last written (the latest), or None."""
    import os
    from datetime import datetime, timezone

    times = []
    for path in paths:
        try:
            if path != "-" and os.path.isfile(path):
                times.append(os.stat(path).st_mtime)
        except (OSError, ValueError):
            continue
    return datetime.fromtimestamp(max(times), timezone.utc) if times else None


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print the timeline and findings as JSON (schema gputriage/logs/v1).")
@click.option("--full", is_flag=True,
              help="List every event the scan kept instead of each GPU's first and last "
                   "bursts: the first 64 of each kind, code and device, then one line per "
                   "folded run (its count, first and last time); the scan keeps no more.")
@verbose_option
@quiet_option
@no_pager_option
@since_option
@boot_option
def logs(paths: tuple[str, ...], as_json: bool, full: bool, verbose: bool, quiet: bool,
         no_pager: bool, since: str | None, boot: str | None) -> None:
    """Read kernel logs (dmesg, journalctl -k, syslog / kern.log, rotated .gz / .xz;
    - reads stdin) and print each GPU's timeline of NVIDIA events as bursts (runs of one
    code, with count and span; the first and last of each GPU, --full for all), then the
    findings. Several files make one timeline; pipes and FIFOs are read once. Exit status
    as for analyze."""
    from gputriage.commands.progress import progress_for
    from gputriage.logscan import scan_paths

    env = current_env()
    window = log_window(since, boot)
    with progress_for(env, quiet) as progress:  # opens, sniffs and reads each input once
        scan = scan_paths(list(paths), shape=True, progress=progress.update,
                          meanwhile=_import_judging)
    # what judges and shows the scan is imported after it (or while worker processes
    # search a large file): they start without it
    from gputriage.status import exit_status
    from gputriage.views.timeline import build_timeline, logs_document, render_logs

    result, events = _judge_scan(scan, window, paths)
    lanes = build_timeline(events, full=full)
    if as_json:
        doc = logs_document(scan, lanes, result, {
            "boot": window.boot, "since": window.since.isoformat() if window.since else None,
            **(result.host.log_window or {})}, full=full)
        env.write_json(doc)
    elif quiet:
        quiet_line(result, who=result.host.hostname or ", ".join(paths))
    else:
        show(lambda console: render_logs(scan, lanes, result, console, verbose=verbose,
                                         full=full), no_pager=no_pager)
    raise CommandExit(int(exit_status(result)))


def xid_code(raw: str) -> int | None:
    """The code ``raw`` names (``79``, ``Xid 79``, ``SXid: 12028``), or None."""
    from gputriage.text.fields import strict_int

    text = raw.strip().lower().removeprefix("sxid").removeprefix("xid").strip(" :,")
    return strict_int(text, signed=False)


def xid_document(numbers: list[int], sxid: bool) -> dict:
    """The ``gputriage/xid/v1`` document of the catalog entries of ``numbers``."""
    from gputriage.views.xidview import xids_json

    return {"schema": "gputriage/xid/v1", "catalog": "sxid" if sxid else "xid",
            "entries": xids_json(numbers, sxid=sxid)}


@click.command("xid")
@click.argument("codes", nargs=-1, required=True)
@click.option("--sxid", is_flag=True, help="Explain NVSwitch SXid codes instead of Xid codes.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the catalog entries as JSON (schema gputriage/xid/v1).")
@list_quiet_option("one line per code: severity, whose fault, meaning, action")
def xid(codes: tuple[str, ...], sxid: bool, as_json: bool, quiet: bool) -> None:
    """Explain Xid (or --sxid SXid) CODEs: meaning, likely origin, node or job, what
    to do, NVIDIA's resolution bucket. A code not in the catalog gets a "not in the
    catalog" line (JSON: "known": false) and the exit status stays 0."""
    numbers = []
    for raw in codes:
        code = xid_code(raw)
        if code is None:
            raise click.BadParameter(f"{raw!r} is not an Xid code (a number such as 79)",
                                     param_hint="CODE")
        numbers.append(code)
    env = current_env()
    if as_json:
        env.write_json(xid_document(numbers, sxid))
    elif quiet:
        from gputriage.views.xidview import xid_lines

        env.stdout.write("".join(line + "\n" for line in xid_lines(numbers, sxid=sxid)))
    else:
        from gputriage.views.console import make_console
        from gputriage.views.xidview import render_xids

        render_xids(numbers, make_console(env.stdout), sxid=sxid)
    raise CommandExit(0)
