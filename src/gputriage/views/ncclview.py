"""The report of ``gputriage nccl``: what the job's NCCL said, per host; the
nccl-tests runs against what the hardware should give; then the findings.

:func:`nccl_document` is the ``nccl`` object added to the result/v1 JSON
(docs/json-schema.md); :func:`render_nccl` the terminal report. rich is
imported inside the renderer only; host text goes through rich ``Text``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from gputriage.model import Result
from gputriage.parsers.nccl_model import NcclLog, NcclProcess, NcclTestRow, NcclTestRun
from gputriage.views.status import verdict

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

ROWS_SHOWN = 6  # largest sizes shown per run outside verbose mode
Judged = tuple[NcclTestRun, Any, str]  # (run, Expectation | None, why none)


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


def _version(p: NcclProcess) -> str | None:
    if not p.nccl_version:
        return None
    return p.nccl_version + (f"+cuda{p.cuda_build}" if p.cuda_build else "")


def _driver(p: NcclProcess) -> str | None:
    if p.cuda_driver is None:
        return None
    major, rest = divmod(p.cuda_driver, 1000)
    return f"{major}.{rest // 10}"


def _gdr(procs: Sequence[NcclProcess]) -> dict:
    """GDR state: the GDR lines, and the network channels with and without /GDRDMA."""
    nets = [c for p in procs for c in p.channels if c.gdr is not None]
    return {"enabled_lines": sum(1 for p in procs for g in p.gdr if g.enabled),
            "disabled_lines": sum(1 for p in procs for g in p.gdr if not g.enabled),
            "net_channels": len(nets), "gdrdma_channels": sum(1 for c in nets if c.gdr)}


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


def host_groups(log: NcclLog) -> list[dict]:
    """One summary per host (processes without a host prefix form one group)."""
    by_host: dict[str | None, list[NcclProcess]] = {}
    for p in log.processes:
        by_host.setdefault(p.host, []).append(p)
    groups = [_group(host, procs) for host, procs in by_host.items()]
    return sorted(groups, key=lambda g: (g["ranks"][0] if g["ranks"] else 1 << 62,
                                         g["host"] or ""))


def _group(host: str | None, procs: list[NcclProcess]) -> dict:
    env: dict[str, list[str]] = {}
    for p in procs:
        for k, v in p.env.items():
            if v not in env.setdefault(k, []):
                env[k].append(v)
    families = Counter(c.family for p in procs for c in p.channels)
    return {
        "host": host,
        "processes": len(procs),
        "pids": sorted(p.pid for p in procs if p.pid is not None),
        "ranks": sorted({r for p in procs for r in p.ranks}),
        "cuda_devices": sorted({d for p in procs for d in p.cuda_devs}),
        "nccl_versions": sorted({ver for p in procs if (ver := _version(p))}),
        "cuda_driver": sorted({drv for p in procs if (drv := _driver(p))}),
        "networks": sorted({p.network for p in procs if p.network}),
        "net_plugins": sorted({p.net_plugin for p in procs if p.net_plugin}),
        "ib_devices": sorted({d for p in procs for d in p.ib_devices}),
        "socket_ifaces": sorted({d for p in procs for d in p.socket_ifaces}),
        "bootstrap_ifaces": sorted({p.bootstrap_iface for p in procs if p.bootstrap_iface}),
        "gdr": _gdr(procs),
        "channels": dict(sorted(families.items())),
        "env": {k: v[0] if len(v) == 1 else v for k, v in sorted(env.items())},
        "warns": sum(len(p.warns) for p in procs),
        "init_complete": len({(p.pid, c.comm, c.rank) for p in procs for c in p.comms
                              if c.init_complete}),
        "comms": len({(p.pid, c.comm, c.rank) for p in procs for c in p.comms}),
    }


def _process(p: NcclProcess) -> dict:
    return {"label": p.label, "host": p.host, "pid": p.pid, "ranks": sorted(p.ranks),
            "cuda_devices": sorted(p.cuda_devs), "nccl_version": _version(p),
            "cuda_driver": _driver(p), "network": p.network, "net_plugin": p.net_plugin,
            "ib_devices": list(p.ib_devices), "socket_ifaces": list(p.socket_ifaces),
            "channels": dict(sorted(Counter(c.family for c in p.channels).items())),
            "env": dict(p.env), "warns": len(p.warns), "last_step": p.last_step,
            "lines": p.lines}


def _side(time: float | None, algbw: float | None, busbw: float | None,
          wrong: int | None) -> dict:
    return {"time_us": time, "algbw_gbs": algbw, "busbw_gbs": busbw, "wrong": wrong}


def _row(r: NcclTestRow) -> dict:
    return {"size": r.size, "count": r.count, "type": r.dtype, "redop": r.redop,
            "root": r.root,
            "out_of_place": _side(r.oop_time_us, r.oop_algbw, r.oop_busbw, r.oop_wrong),
            "in_place": _side(r.ip_time_us, r.ip_algbw, r.ip_busbw, r.ip_wrong)}


def peak_busbw(run: NcclTestRun) -> tuple[float, NcclTestRow, str] | None:
    """(busbw, row, "out-of-place" | "in-place") of the run's best row."""
    row = run.peak
    if row is None:
        return None
    oop, ip = row.oop_busbw or 0.0, row.ip_busbw or 0.0
    return (oop, row, "out-of-place") if oop >= ip else (ip, row, "in-place")


def _run(run: NcclTestRun, exp: Any, why: str) -> dict:
    peak = peak_busbw(run)
    doc = {"test": run.test, "operation": run.operation, "ranks": run.nranks,
           "hosts": run.hosts, "params": dict(run.params), "nccl_version": run.nccl_version,
           "avg_busbw_gbs": run.avg_busbw, "out_of_bounds": run.out_of_bounds,
           "wrong": run.wrong, "errors": list(run.errors),
           "peak": None if peak is None else {"busbw_gbs": peak[0], "size": peak[1].size,
                                              "placement": peak[2]},
           "rows": [_row(r) for r in run.rows],
           "expectation": None, "no_expectation": why or None}
    if exp is not None:
        doc["expectation"] = {
            "busbw_gbs": exp.busbw_gbs, "label": exp.label, "basis": exp.basis,
            "scope": exp.scope, "verified": exp.verified, "inputs": list(exp.inputs),
            "percent": exp.percent(peak[0]) if peak else None,
            "line": exp.line(peak[0]) if peak else None}
    return doc


def nccl_document(log: NcclLog, judged: Sequence[Judged]) -> dict:
    """The ``nccl`` object of ``gputriage nccl --json``."""
    return {
        "log": {"origins": list(log.origins), "lines_read": log.lines_read,
                "nccl_lines": log.nccl_lines, "skipped": log.skipped,
                "versions": sorted(log.versions), "hosts": log.hosts,
                "framework_errors": [w.message for w in log.framework_errors]},
        "hosts": host_groups(log),
        "processes": [_process(p) for p in log.processes],
        "tests": [_run(run, exp, why) for run, exp, why in judged],
    }


# --- terminal ---------------------------------------------------------------------------

def _host_lines(g: dict, versions: Sequence[str] = ()) -> list[list[tuple[str, str]]]:
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


def _run_lines(run: NcclTestRun, exp: Any, why: str, verbose: bool
               ) -> list[tuple[list[tuple[str, str]], int]]:
    name = run.test or run.operation or "nccl-tests run"
    head = [(name, "bold")]
    if run.nranks:
        hosts = run.hosts
        head.append((f"  {run.nranks} ranks on {len(hosts)} host"
                     f"{'s' if len(hosts) != 1 else ''} ({', '.join(hosts)})", ""))
    out: list[tuple[list[tuple[str, str]], int]] = [(head, 0)]
    peak = peak_busbw(run)
    figures: list[tuple[str, str]] = []
    if peak:
        figures += [("peak busbw ", "dim"), (f"{peak[0]:g} GB/s", "bold"),
                    (f" at {size_text(peak[1].size)} ({peak[2]})", "")]
    if run.avg_busbw is not None:
        figures += [("  avg busbw ", "dim"), (f"{run.avg_busbw:g} GB/s", "")]
    if run.rows:
        figures += [("  #wrong ", "dim"), (str(run.wrong), "bold red" if run.wrong else "")]
    if run.out_of_bounds:
        figures += [("  out of bounds ", "dim"), (str(run.out_of_bounds), "bold red")]
    if figures:
        out.append((figures, 2))
    for err in run.errors:
        out.append(([(err, "bold red")], 2))
    if exp is not None and peak:
        pct = exp.percent(peak[0])
        style = "bold red" if pct < 50 else "bold yellow" if pct < 80 else "bold green"
        out.append(([(exp.line(peak[0]), style)], 2))
        out.append(([("basis: ", "dim"), (exp.basis, "dim")], 4))
    elif why and run.rows:
        out.append(([("no expectation: ", "dim"), (why, "dim")], 2))
    rows = run.rows if verbose else run.rows[-ROWS_SHOWN:]
    if rows:
        out.append(([(f"{'size':>10}  {'oop busbw':>10}  {'ip busbw':>10}  {'#wrong':>6}",
                      "dim")], 2))
    for r in rows:
        wrong = (r.oop_wrong or 0) + (r.ip_wrong or 0)
        out.append(([(f"{size_text(r.size):>10}  {_num(r.oop_busbw):>10}  "
                      f"{_num(r.ip_busbw):>10}  {wrong:>6}", "bold red" if wrong else "")], 2))
    if len(rows) < len(run.rows):
        out.append(([(f"({len(run.rows) - len(rows)} smaller sizes; -v shows all)", "dim")], 2))
    return out


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def render_nccl(result: Result, log: NcclLog, judged: Sequence[Judged], host_given: bool,
                console: Console | None = None, *, verbose: bool = False) -> None:
    """Print the NCCL summary, the nccl-tests runs, then the findings and the inputs."""
    from rich.console import Console as RichConsole

    from gputriage.views import terminal

    console = console or RichConsole(highlight=False)
    out = terminal._Out(console, verbose)
    word = verdict(result)
    procs, hosts = len(log.processes), len(log.hosts)
    what = [f"{procs} process{'es' if procs != 1 else ''} on {hosts} host"
            f"{'s' if hosts != 1 else ''}" if procs else "no NCCL log records"]
    what.append(f"{len(judged)} nccl-tests run{'s' if len(judged) != 1 else ''}")
    if host_given:  # the host's own header carries the verdict
        terminal._header(out, result)
        out.line(("NCCL job: ", "bold"), (out.dot.join(what), ""), indent=10)
    else:
        out.line((f"{word.upper():<8}", terminal.STYLES.get(word, "")), ("  ", ""),
                 ("NCCL job", "bold"), (out.dot, ""), (out.dot.join(what), ""))
    groups = host_groups(log)
    shown = groups if verbose or len(groups) <= 16 else groups[:16]
    for g in shown:
        console.print()
        for i, segs in enumerate(_host_lines(g, sorted(log.versions))):
            out.line(*segs, indent=0 if i == 0 else 2)
    if len(shown) < len(groups):
        out.line((f"... {len(groups) - len(shown)} more hosts (-v shows all)", "dim"))
    if log.framework_errors:
        console.print()
        out.line((f"{len(log.framework_errors)} framework error(s)", "bold yellow"),
                 (" (PyTorch / CUDA around NCCL)", "dim"))
    for run, exp, why in judged:
        console.print()
        for segs, indent in _run_lines(run, exp, why, verbose):
            out.line(*segs, indent=indent)
    terminal._findings(out, result)
    terminal._tail(out, result)
    if log.lines_read:
        console.print()
        out.line((f"read {log.lines_read} lines, {log.nccl_lines} NCCL records"
                  f" ({log.skipped} skipped)", "dim"))
