"""The report of ``gputriage nccl``: what the job's NCCL said, per host; the
nccl-tests runs against what the hardware should give; then the findings.

Both formats render a :class:`~gputriage.nccl.summary.NcclSummary` and compute
nothing: :func:`nccl_document` is the ``nccl`` object added to the result/v1 JSON
(docs/json-schema.md); :func:`render_nccl` the terminal report, its per-host lines
and size tables as rich tables (plain columns piped). rich is imported inside the
renderer only; host text goes through rich ``Text``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from gputriage.model import Result
from gputriage.nccl.summary import JudgedRun, NcclSummary
from gputriage.parsers.nccl_model import NcclTestRow
from gputriage.status import verdict
from gputriage.text.words import counted, human_number

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from gputriage.views.out import Out

ROWS_SHOWN = 6  # largest sizes shown per run outside verbose mode
HOSTS_SHOWN = 16  # host groups shown outside verbose mode
Segments = list[tuple[str, str]]


def ranges(values: Iterable[int]) -> str:
    """``0-7,12`` from a set of integers."""
    from gputriage.parsers.numactl import format_cpulist

    return format_cpulist(sorted(set(values)))


def size_text(n: int) -> str:
    """Bytes the way people say message sizes: ``8 B``, ``64 KiB``, ``8 GiB``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def gdr_text(gdr: dict) -> str:
    """``0 of 16 network channels with GDRDMA; 2 disabled lines``."""
    parts = []
    if gdr["net_channels"]:
        parts.append(f"{gdr['gdrdma_channels']} of {gdr['net_channels']} network channel(s) "
                     "with GDRDMA")
    if gdr["enabled_lines"] or gdr["disabled_lines"]:
        parts.append(f"{gdr['enabled_lines']} enabled / {gdr['disabled_lines']} disabled "
                     "line(s)")
    return "; ".join(parts) or "not logged"


def _side(time: float | None, algbw: float | None, busbw: float | None,
          wrong: int | None) -> dict:
    return {"time_us": time, "algbw_gbs": algbw, "busbw_gbs": busbw, "wrong": wrong}


def _row(r: NcclTestRow) -> dict:
    return {"size": r.size, "count": r.count, "type": r.dtype, "redop": r.redop,
            "root": r.root,
            "out_of_place": _side(r.oop_time_us, r.oop_algbw, r.oop_busbw, r.oop_wrong),
            "in_place": _side(r.ip_time_us, r.ip_algbw, r.ip_busbw, r.ip_wrong)}


def _run(judged: JudgedRun) -> dict[str, Any]:
    run, exp, peak = judged.run, judged.expectation, judged.peak
    doc: dict[str, Any] = {"test": run.test, "operation": run.operation, "ranks": run.nranks,
           "hosts": run.hosts, "params": dict(run.params), "nccl_version": run.nccl_version,
           "avg_busbw_gbs": run.avg_busbw, "out_of_bounds": run.out_of_bounds,
           "wrong": run.wrong, "errors": list(run.errors),
           "peak": None if peak is None else {"busbw_gbs": peak.busbw, "size": peak.row.size,
                                              "placement": peak.placement},
           "rows": [_row(r) for r in run.rows],
           "expectation": None, "no_expectation": judged.why_none or None}
    if exp is not None:
        doc["expectation"] = {
            "busbw_gbs": exp.busbw_gbs, "label": exp.label, "basis": exp.basis,
            "scope": exp.scope, "verified": exp.verified, "inputs": list(exp.inputs),
            "percent": judged.percent, "line": judged.verdict_line}
    return doc


def nccl_document(summary: NcclSummary) -> dict:
    """The ``nccl`` object of ``gputriage nccl --json``."""
    log = summary.log
    return {
        "log": {"origins": list(log.origins), "lines_read": log.lines_read,
                "nccl_lines": log.nccl_lines, "skipped": log.skipped,
                "versions": sorted(log.versions), "hosts": log.hosts,
                "framework_errors": [w.message for w in log.framework_errors]},
        "hosts": summary.hosts,
        "processes": summary.processes,
        "tests": [_run(j) for j in summary.runs],
    }


# --- terminal ---------------------------------------------------------------------------

def _host_lines(g: dict, versions: Sequence[str] = ()) -> list[Segments]:
    """The lines of one host group: who, versions, network, GDR, channels, env, warns."""
    who = [(g["host"] or "(no host prefix)", "bold cyan"),
           (f"  {g['processes']} process{'es' if g['processes'] != 1 else ''}", "")]
    if g["ranks"]:
        who.append((f", ranks {ranges(g['ranks'])}", ""))
    if g["cuda_devices"]:
        who.append((f", GPUs {ranges(g['cuda_devices'])}", ""))
    lines = [who]
    nccl = ", ".join(g["nccl_versions"]) or (
        f"not printed here (log: {', '.join(versions)})" if versions else "not logged")
    drv = ", ".join(g["cuda_driver"]) or "not logged"
    lines.append([("NCCL ", "dim"), (nccl, "bold" if len(g["nccl_versions"]) > 1 else ""),
                  ("  CUDA driver ", "dim"), (drv, "")])
    net = ", ".join(g["networks"]) or "not logged"
    seg = [("network ", "dim"), (net, "bold red" if g["channels"].get("net-socket") else "bold")]
    if g["net_plugins"]:
        seg.append((f" (plugin {', '.join(g['net_plugins'])})", ""))
    if g["ib_devices"]:
        seg += [("  HCAs ", "dim"), (" ".join(g["ib_devices"]), "")]
    if g["socket_ifaces"]:
        seg += [("  socket ifaces ", "dim"), (" ".join(g["socket_ifaces"]), "")]
    if g["bootstrap_ifaces"]:
        seg += [("  bootstrap ", "dim"), (" ".join(g["bootstrap_ifaces"]), "")]
    lines.append(seg)
    chans = ", ".join(f"{k} {v}" for k, v in g["channels"].items()) or "none logged"
    lines.append([("GDR ", "dim"), (gdr_text(g["gdr"]), ""), ("  channels ", "dim"),
                  (chans, "")])
    if g["env"]:
        env = " ".join(f"{k}={v if isinstance(v, str) else '|'.join(v)}"
                       for k, v in g["env"].items())
        lines.append([("env ", "dim"), (env, "yellow")])
    tail = [("warns ", "dim"), (str(g["warns"]), "bold yellow" if g["warns"] else "")]
    if g["comms"]:
        tail += [("  communicators ", "dim"),
                 (f"{g['init_complete']} of {g['comms']} init complete", "")]
    lines.append(tail)
    return lines


def _print_labelled(out: Out, lines: list[Segments]) -> None:
    """Lines that open with a label ("network ", "GDR "...) as a two-column table:
    the labels, then what follows each, aligned."""
    from gputriage.views.tables import new_table, print_table

    table = new_table(out.console, header=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    for (label, style), *rest in lines:
        table.add_row(out.text((label.strip(), style)), out.text(*rest))
    print_table(out.console, table, indent=2)


def _run_head(judged: JudgedRun) -> Segments:
    run = judged.run
    head = [(run.test or run.operation or "nccl-tests run", "bold")]
    if run.nranks:
        hosts = run.hosts
        head.append((f"  {counted(run.nranks, 'rank')} on {counted(len(hosts), 'host')} "
                     f"({', '.join(hosts)})", ""))
    return head


def _run_figures(judged: JudgedRun) -> Segments:
    """Peak and average busbw, #wrong, out-of-bounds values."""
    run, peak = judged.run, judged.peak
    figures: Segments = []
    if peak:
        figures += [("peak busbw ", "dim"), (f"{human_number(peak.busbw)} GB/s", "bold"),
                    (f" at {size_text(peak.row.size)} ({peak.placement})", "")]
    if run.avg_busbw is not None:
        figures += [("  avg busbw ", "dim"), (f"{human_number(run.avg_busbw)} GB/s", "")]
    if run.rows:
        figures += [("  #wrong ", "dim"), (str(run.wrong), "bold red" if run.wrong else "")]
    if run.out_of_bounds:
        figures += [("  out of bounds ", "dim"), (str(run.out_of_bounds), "bold red")]
    return figures


def _expectation_lines(judged: JudgedRun) -> list[tuple[Segments, int]]:
    """The peak against the expectation and its basis, or why there is none."""
    pct, line = judged.percent, judged.verdict_line
    if judged.expectation is not None and pct is not None and line is not None:
        style = "bold red" if pct < 50 else "bold yellow" if pct < 80 else "bold green"
        return [([(line, style)], 2),
                ([("basis: ", "dim"), (judged.expectation.basis, "dim")], 4)]
    if judged.why_none and judged.run.rows:
        return [([("no expectation: ", "dim"), (judged.why_none, "dim")], 2)]
    return []


def _print_sizes(out: Out, rows: Sequence[NcclTestRow], total: int) -> None:
    """The size table: busbw per size, out-of-place and in-place, and #wrong."""
    from gputriage.views.tables import new_table, print_table

    if rows:
        table = new_table(out.console)
        for name in ("size", "oop busbw", "ip busbw", "#wrong"):
            table.add_column(name, justify="right", no_wrap=True)
        for r in rows:
            wrong = (r.oop_wrong or 0) + (r.ip_wrong or 0)
            style = "bold red" if wrong else ""
            table.add_row(*(out.text((cell, style)) for cell in (
                size_text(r.size), _num(r.oop_busbw), _num(r.ip_busbw), str(wrong))))
        print_table(out.console, table, indent=2)
    if len(rows) < total:
        out.line((f"({total - len(rows)} smaller sizes; -v shows all)", "dim"), indent=2)


def _run_lines(judged: JudgedRun) -> list[tuple[Segments, int]]:
    """One nccl-tests run: head, figures, errors, expectation (the size table follows)."""
    run = judged.run
    out: list[tuple[Segments, int]] = [(_run_head(judged), 0)]
    figures = _run_figures(judged)
    if figures:
        out.append((figures, 2))
    out += [([(err, "bold red")], 2) for err in run.errors]
    return out + _expectation_lines(judged)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _job_line(out: Out, result: Result, summary: NcclSummary, host_given: bool) -> None:
    """The verdict line (or the host header) and what the job's inputs hold."""
    from gputriage.views import terminal
    from gputriage.views.styles import STYLES

    procs, hosts, runs = len(summary.log.processes), summary.host_count, len(summary.runs)
    what = [f"{procs} process{'es' if procs != 1 else ''} on {hosts} host"
            f"{'s' if hosts != 1 else ''}" if procs else "no NCCL log records"]
    what.append(f"{runs} nccl-tests run{'s' if runs != 1 else ''}")
    if host_given:  # the host's own header carries the verdict
        terminal.print_header(out, result)
        out.line(("NCCL job: ", "bold"), (out.dot.join(what), ""), indent=10)
    else:
        word = verdict(result)
        out.line((f"{word.upper():<8}", STYLES.get(word, "")), ("  ", ""),
                 ("NCCL job", "bold"), (out.dot, ""), (out.dot.join(what), ""))


def _hosts(out: Out, summary: NcclSummary, verbose: bool) -> None:
    groups = summary.hosts
    shown = groups if verbose or len(groups) <= HOSTS_SHOWN else groups[:HOSTS_SHOWN]
    versions = sorted(summary.log.versions)
    for g in shown:
        out.console.print()
        who, *rest = _host_lines(g, versions)
        out.line(*who)
        _print_labelled(out, rest)
    if len(shown) < len(groups):
        out.line((f"... {len(groups) - len(shown)} more hosts (-v shows all)", "dim"))


def render_nccl(result: Result, summary: NcclSummary, host_given: bool,
                console: Console | None = None, *, verbose: bool = False) -> None:
    """Print the NCCL summary, the nccl-tests runs, then the findings and the inputs."""
    from rich.console import Console as RichConsole

    from gputriage.views import terminal
    from gputriage.views.out import Out

    console = console or RichConsole(highlight=False)
    out = Out(console, verbose)
    log = summary.log
    _job_line(out, result, summary, host_given)
    _hosts(out, summary, verbose)
    if log.framework_errors:
        console.print()
        out.line((f"{len(log.framework_errors)} framework error(s)", "bold yellow"),
                 (" (PyTorch / CUDA around NCCL)", "dim"))
    for judged in summary.runs:
        console.print()
        for segs, indent in _run_lines(judged):
            out.line(*segs, indent=indent)
        rows = judged.run.rows if verbose else judged.run.rows[-ROWS_SHOWN:]
        _print_sizes(out, rows, len(judged.run.rows))
    terminal.print_findings(out, result)
    terminal.print_tail(out, result)
    if log.lines_read:
        console.print()
        out.line((f"read {log.lines_read} lines, {log.nccl_lines} NCCL records"
                  f" ({log.skipped} skipped)", "dim"))
