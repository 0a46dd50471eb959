"""The kernel-log timeline per GPU as an inline SVG plot: one lane per GPU (switch,
device, the node), each burst of events a mark at its time (a bar when it lasted),
boots as dashed lines; under it the same bursts as tables (what the terminal's
``gputriage logs`` lists, from :func:`gputriage.views.timeline.build_timeline`).

Times: wall-clock when every burst has one; else seconds since boot when the log holds
one boot with uptimes; else the events' order across the lanes, by boot and then by time
(wall-clock or uptime), the boots marked where they change (said on the axis)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from gputriage.model import Result
from gputriage.views.html.markup import esc, para, section, table, tag
from gputriage.views.timeline import Lane, Row, build_timeline

LANES_CAP = 48  # lanes plotted
MARKS_CAP = 300  # bursts plotted per lane: the first and last half of that
WIDTH, LABEL_W, RIGHT, LANE_H, TOP, BOTTOM = 1000, 190, 24, 30, 26, 34
_CRITICAL_KINDS = frozenset({"fallen-off-bus", "rm-init-adapter-failed", "module-load-failed",
                             "gsp-rpc-timeout", "api-mismatch", "gpu-reset-required"})
_QUIET_KINDS = frozenset({"driver-load", "mlx5-link"})


def _stamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return at.timestamp()


def _uptime(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _plotted(lane: Lane) -> list[Row]:
    rows = lane.rows
    if len(rows) <= MARKS_CAP:
        return rows
    half = MARKS_CAP // 2
    return rows[:half] + rows[-half:]


def _boot_label(index: int) -> str:
    return f"boot {index}" if index else "boot 0 (current)"


def _in_order(lanes: list[Lane]) -> list[Row]:
    """The plotted rows of all lanes in time order: by boot (earlier boots are below 0),
    then by time (wall-clock or uptime); a row without one follows its lane's previous
    row of that boot."""
    keyed = []
    for li, lane in enumerate(lanes):
        at, boot = float("-inf"), None
        for ri, r in enumerate(_plotted(lane)):
            if r.boot != boot:
                at, boot = float("-inf"), r.boot
            t = _stamp(r.first)
            t = _uptime(r.first) if t is None else t
            at = at if t is None else t
            keyed.append(((r.boot, at, li, ri), r))
    return [r for _, r in sorted(keyed, key=lambda kr: kr[0])]


def _mode(lanes: list[Lane], boots: list[Any]) -> tuple[str, Any, list[tuple[float, str]]]:
    """("time" | "uptime" | "order", the function from a row to its (start, end), the
    boot marks as (position, label))."""
    rows = [r for lane in lanes for r in _plotted(lane)]
    if rows and all(_stamp(r.first) is not None for r in rows):
        marks = [(b.first.timestamp(), _boot_label(b.index)) for b in boots
                 if b.first is not None]
        return ("time", lambda r: (_stamp(r.first), _stamp(r.last) or _stamp(r.first)),
                marks)
    if rows and len(boots) <= 1 and all(_uptime(r.first) is not None for r in rows):
        return ("uptime", lambda r: (_uptime(r.first), _uptime(r.last) or _uptime(r.first)),
                [])
    ordered = _in_order(lanes)
    order = {id(r): float(i) for i, r in enumerate(ordered)}
    marks = [(i - 0.5, _boot_label(r.boot)) for i, r in enumerate(ordered)
             if i and r.boot != ordered[i - 1].boot]  # between the boots' events
    return "order", lambda r: (order[id(r)], order[id(r)]), marks


def _severity(row: Row) -> str:
    """The colour of a mark (its meaning is in words in its title and the tables)."""
    from gputriage.knowledge import xid as catalog

    if row.code is not None and row.kind in ("xid", "sxid"):
        info = catalog.xid_info(row.code) if row.kind == "xid" else catalog.sxid_info(row.code)
        return info.severity.value if info is not None else "warning"
    if row.kind in _CRITICAL_KINDS:
        return "critical"
    return "info" if row.kind in _QUIET_KINDS else "warning"


def _what(row: Row) -> str:
    if row.kind in ("xid", "sxid"):
        return f"{'Xid' if row.kind == 'xid' else 'SXid'} {row.code}"
    return row.kind


def _tick(mode: str, value: float, span: float) -> str:
    if mode == "time":
        at = datetime.fromtimestamp(value, timezone.utc)
        return at.strftime("%m-%d %H:%M" if span > 3600 * 20 else "%H:%M:%S")
    if mode == "uptime":
        return f"{value:.0f} s"
    return f"#{value + 1:.0f}"


def plot(lanes: list[Lane], boots: list[Any]) -> str:
    """The SVG: lanes, marks with their titles, boots, a time axis."""
    lanes = lanes[:LANES_CAP]
    mode, span_of, marks = _mode(lanes, boots)
    points = [v for lane in lanes for r in _plotted(lane) for v in span_of(r)]
    starts = [at for at, _ in marks]
    lo, hi = min(points + starts), max(points + starts)
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1
    pw = WIDTH - LABEL_W - RIGHT
    height = TOP + LANE_H * len(lanes) + BOTTOM

    def x(v: float) -> float:
        return round(LABEL_W + (v - lo) / (hi - lo) * pw, 1)

    out = [f'<rect x="{LABEL_W}" y="{TOP - 6}" width="{pw}" '
           f'height="{LANE_H * len(lanes) + 6}" fill="none" class="axis"/>']
    for i, lane in enumerate(lanes):
        y = TOP + LANE_H * i + LANE_H / 2
        out.append(f'<line x1="{LABEL_W}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}" '
                   'class="grid"/>')
        out.append(f'<text x="{LABEL_W - 8}" y="{y + 4}" text-anchor="end" '
                   f'class="lane-label">{esc(lane.label, 40)}</text>')
        for r in _plotted(lane):
            a, b = span_of(r)
            sev = _severity(r)
            when = r.first or "?" if r.last in (None, r.first) else f"{r.first} .. {r.last}"
            title = tag("title", esc(f"{lane.label}: {_what(r)} ({r.meaning}) x{r.count}, "
                                     f"{when}" + (f", boot {r.boot}" if r.boot else "")))
            mark = (f'<line x1="{x(a)}" x2="{x(b)}" y1="{y}" y2="{y}" class="span m-{sev}"/>'
                    if x(b) - x(a) >= 2 else "")
            out.append(f'<g>{title}{mark}<circle cx="{x(a)}" cy="{y}" r="5" class="m-{sev}"/>'
                       "</g>")
    for at, label in marks:
        bx = x(at)
        out.append(f'<line x1="{bx}" x2="{bx}" y1="{TOP - 14}" '
                   f'y2="{TOP + LANE_H * len(lanes)}" class="boot"/>'
                   f'<text x="{bx + 3}" y="{TOP - 9}" class="boot-label">{esc(label)}</text>')
    axis_y = TOP + LANE_H * len(lanes) + 16
    ticks: list[str] = []
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        if mode == "order":  # at an event, not between two or past the ends
            v = min(max(float(round(v)), min(points)), max(points))
        anchor = "start" if v <= lo else "end" if v >= hi else "middle"
        if _tick(mode, v, hi - lo) in ticks:
            continue  # few events in order: "#2" once, not three times
        ticks.append(_tick(mode, v, hi - lo))
        out.append(f'<text x="{x(v)}" y="{axis_y}" text-anchor="{anchor}" class="tick">'
                   f"{esc(ticks[-1])}</text>")
    axis = {"time": "time (UTC)", "uptime": "seconds since boot",
            "order": "order of the events, boot by boot (the log has no common clock)"}[mode]
    out.append(f'<text x="{LABEL_W + pw / 2}" y="{axis_y + 15}" text-anchor="middle" '
               f'class="tick">{esc(axis)}</text>')
    desc = f"Kernel-log events per GPU over {axis}: {len(lanes)} lane(s)"
    return (f'<svg class="timeline" viewBox="0 0 {WIDTH} {height}" role="img" '
            f'aria-labelledby="tl-title" xmlns="http://www.w3.org/2000/svg">'
            f'<title id="tl-title">{esc(desc)}</title>{"".join(out)}</svg>')


def _lane_table(lane: Lane) -> str:
    head, cut, tail = lane.shown()
    rows = [(esc(r.first or "-") + (esc(f" .. {r.last}") if r.count > 1 and r.last
                                     and r.last != r.first else ""),
             esc(_what(r)), esc(r.meaning), esc(r.count),
             esc("current" if r.boot == 0 else f"earlier ({r.boot})")) for r in head]
    if cut:
        n = sum(r.count for r in cut)
        rows.append((esc("\u2026"), esc(f"{len(cut)} more bursts"),
                     esc(f"{n} events left out (gputriage logs --full lists them)"), "", ""))
        rows += [(esc(r.first or "-"), esc(_what(r)), esc(r.meaning), esc(r.count),
                  esc("current" if r.boot == 0 else f"earlier ({r.boot})")) for r in tail]
    return table(("time", "event", "meaning", "count", "boot"), rows,
                 caption=f"{lane.label}: {lane.weight} event(s) in {len(lane.rows)} burst(s)")


def timeline_section(result: Result, facts: Any) -> str:
    """The section; a line saying so when the inputs have no kernel log or no event."""
    events = facts.maybe("log_events") if facts is not None else None
    if events is None:
        return section("Kernel-log timeline", para("The inputs hold no kernel log.", "muted"),
                       ident="timeline")
    gpus = {g.pci_bus_id: (g.index, g.name) for g in result.gpus if g.pci_bus_id}
    lanes = build_timeline(events, gpus)
    if not lanes:
        return section("Kernel-log timeline", para(
            "No NVIDIA-relevant event in the kernel log.", "muted"), ident="timeline")
    scan = facts.maybe("log_scan")
    boots = list(getattr(scan, "boots", None) or [])
    more = len(lanes) - LANES_CAP
    note = "" if more <= 0 else para(f"{more} more lane(s) not plotted.", "muted")
    plotted = tag("div", plot(lanes, boots), class_="plot", tabindex="0", role="region",
                  aria_label="timeline plot (scrolls sideways on a narrow screen)")
    figure = tag("figure", plotted + tag("figcaption", esc(
        "Each mark is a burst of one event on one GPU (a bar: how long it lasted); "
        "red marks are critical, yellow warnings, blue information; dashed lines are "
        "boots. The tables below list the same bursts.")))
    listed = lanes[:LANES_CAP]
    left = "" if more <= 0 else para(
        f"{more} more lane(s) not listed here (gputriage logs --json lists them all).", "muted")
    of = f" (of {len(lanes)})" if more > 0 else ""
    tables = tag("details", tag("summary", esc(f"The bursts of {len(listed)} lane(s){of} as "
                                               "tables")) + "".join(map(_lane_table, listed))
                 + left)
    return section("Kernel-log timeline", figure + note + tables, ident="timeline")
