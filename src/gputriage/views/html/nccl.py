"""What ``gputriage nccl`` found, for the HTML report: per host the network NCCL
chose, HCAs, GPUDirect RDMA and transports per channel; per nccl-tests run the peak bus
bandwidth against what the hardware should give (a bar), and its largest sizes. Renders
the plain data of :func:`gputriage.views.ncclview.nccl_document`; judges nothing."""

from __future__ import annotations

from typing import Any

from gputriage.text.words import human_number
from gputriage.views.html.markup import definitions, esc, para, section, table, tag
from gputriage.views.ncclview import ROWS_SHOWN, gdr_text, ranges, size_text

HOSTS_CAP = 64


def _env(env: dict) -> str:
    return " ".join(f"{k}={v if isinstance(v, str) else '|'.join(v)}" for k, v in env.items())


def hosts_table(doc: dict) -> str:
    rows = []
    for g in doc["hosts"][:HOSTS_CAP]:
        who = f"{g['processes']} process(es)"
        if g["ranks"]:
            who += f", ranks {ranges(g['ranks'])}"
        if g["cuda_devices"]:
            who += f", GPUs {ranges(g['cuda_devices'])}"
        net = ", ".join(g["networks"]) or "not logged"
        if g["ib_devices"]:
            net += f"; HCAs {' '.join(g['ib_devices'])}"
        if g["socket_ifaces"]:
            net += f"; socket interfaces {' '.join(g['socket_ifaces'])}"
        chans = ", ".join(f"{k} {v}" for k, v in g["channels"].items()) or "none logged"
        rows.append((esc(g["host"] or "(no host prefix)"), esc(who),
                     esc(", ".join(g["nccl_versions"]) or "-"), esc(net),
                     esc(gdr_text(g["gdr"])), esc(chans), esc(_env(g["env"]) or "-")))
    left = len(doc["hosts"]) - HOSTS_CAP
    return table(("host", "processes", "NCCL", "network", "GPUDirect RDMA",
                  "transports (channels)", "NCCL settings"), rows,
                 caption="What NCCL said, per host" + (f" ({left} more not shown)"
                                                       if left > 0 else ""))


def _bar(peak: float | None, expected: float | None, pct: int | None) -> str:
    """Measured peak against the expectation as a bar (figures in words beside it)."""
    if peak is None or not expected:
        return ""
    top = max(peak, expected) * 1.05
    w = 600
    pw, ew = round(peak / top * w, 1), round(expected / top * w, 1)
    sev = "critical" if pct is not None and pct < 50 else (
        "warning" if pct is not None and pct < 80 else "info")
    label = f"peak {human_number(peak)} GB/s of {human_number(expected)} GB/s expected ({pct}%)"
    return (f'<svg class="bar" viewBox="0 0 {w + 10} 34" role="img" '
            f'aria-label="{esc(label)}" xmlns="http://www.w3.org/2000/svg">'
            f'<rect x="0" y="6" width="{pw}" height="16" class="m-{sev}"/>'
            f'<line x1="{ew}" x2="{ew}" y1="1" y2="28" class="boot"/>'
            f'<text x="{min(ew + 4, w - 150)}" y="32" class="tick">expected</text></svg>')


def run_block(run: dict) -> str:
    """One nccl-tests run: figures, the expectation and its basis, largest sizes."""
    name = run["test"] or run["operation"] or "nccl-tests run"
    who = (f"{run['ranks']} ranks on {len(run['hosts'])} host(s): {', '.join(run['hosts'])}"
           if run["ranks"] else "")
    pairs = []
    peak = run["peak"]
    if peak:
        pairs.append(("Peak busbw", esc(f"{human_number(peak['busbw_gbs'])} GB/s at "
                                        f"{size_text(peak['size'])} ({peak['placement']})")))
    if run["avg_busbw_gbs"] is not None:
        pairs.append(("Average busbw", esc(f"{human_number(run['avg_busbw_gbs'])} GB/s")))
    pairs.append(("#wrong", esc(run["wrong"])))
    exp = run["expectation"]
    bar = ""
    if exp is not None:
        pairs.append(("Expected", esc(f"{human_number(exp['busbw_gbs'])} GB/s ({exp['label']}, "
                                      f"{exp['scope']})")))
        if exp["line"]:
            pairs.append(("Verdict", tag("strong", esc(exp["line"]))))
        pairs.append(("Basis", esc(exp["basis"])))
        bar = _bar(peak["busbw_gbs"] if peak else None, exp["busbw_gbs"], exp["percent"])
    elif run["no_expectation"]:
        pairs.append(("No expectation", esc(run["no_expectation"])))
    for err in run["errors"][:8]:
        pairs.append(("Error", esc(err)))
    sizes = sorted(run["rows"], key=lambda r: r["size"])[-ROWS_SHOWN:]
    grid = table(("size", "busbw out-of-place (GB/s)", "busbw in-place (GB/s)", "#wrong"),
                 [(esc(size_text(r["size"])), esc(r["out_of_place"]["busbw_gbs"]),
                   esc(r["in_place"]["busbw_gbs"]),
                   esc((r["out_of_place"]["wrong"] or 0) + (r["in_place"]["wrong"] or 0)))
                  for r in sizes], caption=f"The {len(sizes)} largest sizes") if sizes else ""
    return tag("article", tag("h3", esc(name)) + (para(who, "muted") if who else "")
               + definitions(pairs) + bar + grid, class_="finding")


def nccl_section(summary: Any) -> str:
    """The NCCL section of a ``gputriage nccl`` report."""
    from gputriage.views.ncclview import nccl_document

    doc = nccl_document(summary)
    log = doc["log"]
    head = para(f"Read {log['lines_read']:,} line(s), {log['nccl_lines']:,} NCCL record(s); "
                f"NCCL {', '.join(log['versions']) or 'version not logged'}; hosts: "
                f"{', '.join(log['hosts']) or 'none named'}.")
    errors = "".join(para(f"Framework error: {e}") for e in log["framework_errors"][:8])
    hosts = hosts_table(doc) if doc["hosts"] else para("No NCCL host summary in the logs.")
    runs = "".join(run_block(r) for r in doc["tests"]) or para("No nccl-tests run in the "
                                                               "inputs.", "muted")
    return (section("NCCL", head + errors + hosts, ident="nccl")
            + section("nccl-tests against expectation", runs, ident="nccl-tests"))
