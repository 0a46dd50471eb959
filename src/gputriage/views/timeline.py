"""The per-GPU timeline of ``gputriage logs``: each GPU (or switch, or device) with
its kernel events in time order as bursts (runs of one code, counted by weight: a storm
the scan folded counts every occurrence), the first :data:`HEAD` and last :data:`TAIL`
of each lane shown with what was left out (``--full``: every event the scan kept),
earlier boots marked; plus the ``gputriage/logs/v1`` JSON document, bounded the same way.

rich is imported only inside :func:`render_logs`; host text goes through
rich ``Text`` objects (never markup), so raw kernel lines print verbatim.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from gputriage import __version__
from gputriage.model import Result
from gputriage.parsers.kernel_fold import seconds, weight
from gputriage.parsers.kernel_model import DriverEvent
from gputriage.rules.kernel_common import code_of
from gputriage.status import exit_status, verdict
from gputriage.text.fields import strict_int

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

SCHEMA = "gputriage/logs/v1"
# Bursts shown per lane (terminal and JSON) unless --full: the first HEAD, how the trouble
# began (the rules read which code came first: 79 first, 48 then 63/64, 13 then 45), and the
# last TAIL, how it stands at the end of the log. 10 rows keep a storm over 8 GPUs, with
# its findings, under 200 lines, and a quiet log (a handful of events per GPU) whole.
HEAD = 6
TAIL = 4
CODES_NAMED = 4  # codes named in a lane's "... N more bursts" line, most frequent first
# Evidence lines per finding (outside verbose mode) after which its further blocks are
# left out: the timeline above already lists each device's events, so in a storm over 8
# GPUs one block (the first GPU's) is the example; a quiet log's few blocks all fit.
EVIDENCE_LINES = 10

KIND_MEANING = {
    "fallen-off-bus": "GPU has fallen off the bus",
    "rm-init-adapter-failed": "driver failed to initialise the GPU (RmInitAdapter)",
    "no-adapter-probed": "nvidia module probed no GPU",
    "gsp-firmware-missing": "GSP firmware file missing",
    "module-load-failed": "NVIDIA kernel module failed to load",
    "api-mismatch": "kernel module / userspace driver version mismatch",
    "gsp-rpc-timeout": "GSP firmware RPC timeout",
    "gsp-error": "GSP firmware error",
    "peermem-invalid-context": "nvidia-peermem invalid context",
    "nvlink-error": "NVLink error",
    "pcie-aer": "PCIe AER error",
    "pcie-bandwidth-limited": "PCIe link below capability",
    "mlx5-link": "mlx5 link state change",
    "segfault": "process segfault",
    "hung-task": "hung task",
    "soft-lockup": "CPU soft lockup",
    "gpu-reset-required": "GPU reset required",
    "driver-load": "NVIDIA driver loaded (every GPU re-initialised)",
}


@dataclass
class Row:
    """A burst: a run of one event (kind and code) on a lane, consecutive there and in
    one boot; or, under ``--full``, one event as the scan kept it (a folded storm is one
    event standing for ``count`` occurrences). Its times and example line are read off
    its first and last event when shown: a long lane shows few of its rows."""

    kind: str
    code: int | None
    meaning: str
    boot: int
    first_event: DriverEvent = field(repr=False)
    last_event: DriverEvent = field(repr=False)  # the run's latest occurrence
    count: int  # occurrences, by weight: a folded event counts all it stands for
    last_at: float | None = field(default=None, repr=False, compare=False)

    @property
    def first(self) -> str | None:
        """When the run began (ISO 8601 when known, else as printed)."""
        return _when(self.first_event)

    @property
    def last(self) -> str | None:
        """When its latest occurrence was logged."""
        return _when(self.last_event)

    @property
    def line(self) -> str:
        """An example: the first line of the run's first event."""
        text = self.first_event.line
        return text.splitlines()[0] if text else ""

    def to_json(self) -> dict:
        """The row as plain JSON data."""
        return {"kind": self.kind, "code": self.code, "meaning": self.meaning,
                "boot": self.boot, "first": self.first, "last": self.last,
                "count": self.count, "line": self.line}

    def take(self, ev: DriverEvent) -> None:
        """Extend the burst with the next event of its run: the count by weight, the
        last time that of the latest occurrence (a folded event's ``latest``)."""
        self.count += ev.count
        latest = ev.latest
        at = seconds(latest)
        if at is None or self.last_at is None or at >= self.last_at:
            self.last_event, self.last_at = latest, at


@dataclass
class Lane:
    """The events of one GPU, switch, device, or of the node (no PCI address), as rows:
    bursts, or (``--full``) every event the scan kept."""

    label: str
    pci_bus_id: str | None = None
    gpu_index: int | None = None
    rows: list[Row] = field(default_factory=list)

    @property
    def weight(self) -> int:
        """The occurrences the lane's rows stand for."""
        return sum(r.count for r in self.rows)

    def shown(self, full: bool = False) -> tuple[list[Row], list[Row], list[Row]]:
        """(head, left out, tail): the rows shown are the first :data:`HEAD` and the last
        :data:`TAIL`; all of them under ``full`` or when there are no more than that."""
        if full or len(self.rows) <= HEAD + TAIL:
            return list(self.rows), [], []
        return (self.rows[:HEAD], self.rows[HEAD:len(self.rows) - TAIL],
                self.rows[len(self.rows) - TAIL:])

    def to_json(self, full: bool = False) -> dict:
        """The lane as plain JSON data: its rows shown (bounded unless ``full``), where
        the rows left out were, and its totals."""
        head, cut, tail = self.shown(full)
        return {"label": self.label, "pci_bus_id": self.pci_bus_id,
                "gpu_index": self.gpu_index,
                "events": [r.to_json() for r in (*head, *tail)],
                "left_out_after": len(head) if cut else None,
                "totals": {"events": self.weight, "bursts": len(self.rows),
                           "bursts_left_out": len(cut),
                           "events_left_out": sum(r.count for r in cut)}}


_CODED = ("xid", "sxid")  # the kinds whose events carry a code


@lru_cache(maxsize=1024)
def _meaning(kind: str, code: int | None) -> str:
    """What an event of ``kind`` (an Xid / SXid of ``code``) means, as the catalog says."""
    from gputriage.knowledge import xid as catalog

    if code is not None and kind in _CODED:
        info = catalog.xid_info(code) if kind == "xid" else catalog.sxid_info(code)
        if info is not None:
            return info.meaning
        return "not in the catalog"
    return KIND_MEANING.get(kind, kind)



def _code(ev: DriverEvent) -> int | None:
    return code_of(ev.details.get("code", "")) if ev.kind in _CODED else None


def _when(ev: DriverEvent) -> str | None:
    t = getattr(ev, "time", None)
    return t.isoformat() if t is not None else ev.timestamp


def _row(ev: DriverEvent, code: int | None) -> Row:
    """A row of one event (a folded one: its first and latest occurrence, its count)."""
    latest = ev.latest
    return Row(ev.kind, code, _meaning(ev.kind, code), ev.boot, ev, latest, ev.count,
               seconds(latest))


def build_timeline(events: Iterable[DriverEvent],
                   gpus: dict[str, tuple[int | None, str | None]] | None = None, *,
                   full: bool = False) -> list[Lane]:
    """Lanes of events by PCI address, GPUs first (by index, then address), then
    other devices, then the node. Consecutive events of one kind and code (in one boot)
    make one burst; with ``full``, every event is a row of its own."""
    gpus = gpus or {}
    lanes: dict[str | None, Lane] = {}
    before: dict[str | None, DriverEvent] = {}  # each lane's previous event
    for ev in events:
        bus = ev.bus_id
        lane = lanes.get(bus)
        if lane is None:
            lane = Lane(_label(ev, gpus), bus, gpus.get(bus or "", (None, None))[0])
            lanes[bus] = lane
        prev, before[bus] = before.get(bus), ev
        if not full and prev is not None and _same_line(prev, ev):
            continue  # an Xid 79 line is also a fallen-off-bus event: one burst, not two
        code = _code(ev)
        rows = lane.rows
        if not full and rows:
            last = rows[-1]
            if last.kind == ev.kind and last.code == code and last.boot == ev.boot:
                last.take(ev)
                continue
        rows.append(_row(ev, code))

    def order(lane: Lane) -> tuple:
        known_gpu = lane.pci_bus_id in gpus or any(r.kind == "xid" for r in lane.rows)
        rank = 0 if known_gpu else (2 if lane.pci_bus_id is None else 1)
        index = lane.gpu_index if lane.gpu_index is not None else 1 << 16
        return (rank, index, lane.pci_bus_id or "")

    return sorted(lanes.values(), key=order)


def _same_line(prev: DriverEvent, ev: DriverEvent) -> bool:
    """``ev`` is the fallen-off-bus event of the Xid line ``prev`` (both made by it)."""
    return (ev.kind == "fallen-off-bus" and prev.kind == "xid" and _code(prev) == 79
            and (prev.lineno, prev.origin, prev.count) == (ev.lineno, ev.origin, ev.count))


def _label(ev: DriverEvent, gpus: dict[str, tuple[int | None, str | None]]) -> str:
    bus = ev.bus_id
    if bus is None:
        return "node (no PCI address)"
    if ev.kind == "sxid":
        switch = ev.details.get("switch") or ""
        numbered = strict_int(switch, signed=False) is not None
        switch = f"nvidia-nvswitch{switch}" if numbered else switch
        return f"NVSwitch {switch} {bus}".replace("  ", " ")
    index = gpus.get(bus, (None, None))[0]
    if index is not None:
        return f"GPU {index} {bus}"
    if ev.kind in ("mlx5-link", "pcie-aer", "pcie-bandwidth-limited"):
        return f"device {bus}"
    return f"GPU {bus}"


def scan_summary(scan: Any) -> dict:
    """The scan's counters as plain JSON data: ``events`` the occurrences found (by
    weight), ``kept`` the events the scan kept (storms folded)."""
    boots = []
    for b in getattr(scan, "boots", []) or []:
        boots.append({"index": b.index, "boot_id": b.boot_id,
                      "first": b.first.isoformat() if b.first else None,
                      "last": b.last.isoformat() if b.last else None})
    return {"lines": scan.lines, "skipped": scan.skipped, "bytes": scan.bytes,
            "formats": list(scan.formats), "problems": list(scan.problems),
            "events": weight(scan.events), "kept": len(scan.events), "boots": boots}


def totals(lanes: list[Lane], full: bool = False) -> dict:
    """The timeline's totals: occurrences (by weight), rows (bursts, or under ``full``
    events kept), and what the bounded listing leaves out."""
    cuts = [lane.shown(full)[1] for lane in lanes]
    return {"events": sum(lane.weight for lane in lanes),
            "bursts": sum(len(lane.rows) for lane in lanes),
            "bursts_left_out": sum(len(c) for c in cuts),
            "events_left_out": sum(r.count for c in cuts for r in c),
            "full": full}


def logs_document(scan: Any, lanes: list[Lane], result: Result,
                  window: dict | None = None, *, full: bool = False) -> dict:
    """The ``gputriage/logs/v1`` document: scan counters, window, timeline (bounded
    unless ``full``) and its totals, findings."""
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "verdict": verdict(result),
        "exit_status": int(exit_status(result)),
        "scan": scan_summary(scan),
        "window": window or {"boot": None, "since": None},
        "timeline": [lane.to_json(full) for lane in lanes],
        "totals": totals(lanes, full),
        "findings": [f.to_json() for f in result.sorted_findings()],
    }


def _what(row: Row) -> str:
    if row.kind in ("xid", "sxid"):
        return f"{'Xid' if row.kind == 'xid' else 'SXid'} {row.code}"
    return row.kind


def _left_out(cut: list[Row]) -> str:
    """``... N more bursts (M events: Xid 13 x6102, ...; --full lists them)``."""
    by_code: dict[str, int] = {}
    for row in cut:
        by_code[_what(row)] = by_code.get(_what(row), 0) + row.count
    ranked = sorted(by_code.items(), key=lambda kv: -kv[1])
    named = ", ".join(f"{what} x{n}" for what, n in ranked[:CODES_NAMED])
    if len(ranked) > CODES_NAMED:
        named += ", ..."
    n, m = len(cut), sum(r.count for r in cut)
    return (f"\u2026 {n} more burst{'s' if n != 1 else ''} ({m} event{'s' if m != 1 else ''}: "
            f"{named}; --full lists every event kept)")


def _print_lane(out: Any, lane: Lane, verbose: bool, full: bool) -> None:
    """A lane's rows as a table: time (or first .. last), event, then what it means,
    the count of a burst, an earlier boot, and (verbose) the kernel line under it.
    Unless ``full``, a long lane shows its first and last bursts around a note of what
    it leaves out."""
    head, cut, tail = lane.shown(full)
    _print_rows(out, head, verbose)
    if cut:
        text = _left_out(cut)
        out.line((text if out.unicode else "..." + text[1:], "dim"), indent=2)
        _print_rows(out, tail, verbose)


def _print_rows(out: Any, rows: list[Row], verbose: bool) -> None:
    """Rows as one table; verbose, one table per row at the same column widths, each
    followed by its kernel line, verbatim and indented, across the whole width."""
    from rich.cells import cell_len

    from gputriage.views.tables import piped, print_lines, table_lines

    cells = [_cells(out, row) for row in rows]
    if not verbose:
        _print_table(out, _table(out, cells, (0, 0)))
        return
    if piped(out.console):  # one row, one line: render once, put each kernel line under
        lines = table_lines(out.console, _table(out, cells, (0, 0)), indent=2)
        if len(lines) == len(rows):
            for line, row in zip(lines, rows, strict=True):
                print_lines(out.console, [line])
                out.line((row.line, "dim"), indent=6)
            return
    widths = (max((cell_len(c[0].plain) for c in cells), default=0),
              max((cell_len(c[1].plain) for c in cells), default=0))
    for row, row_cells in zip(rows, cells, strict=True):
        _print_table(out, _table(out, [row_cells], widths))
        out.line((row.line, "dim"), indent=6)


def _cells(out: Any, row: Row) -> tuple[Any, Any, Any]:
    """Time (or first .. last), event, then what it means, the count of a burst and
    an earlier boot."""
    what = _what(row)
    stamp = row.first or "-"
    if row.count > 1 and row.last and row.last != row.first:
        stamp += f" .. {row.last}"
    segs: list[tuple[str, str]] = [(row.meaning, "")]
    if row.count > 1:
        segs.append((f"  x{row.count}", "bold"))
    if row.boot != 0:
        segs.append((f"  [earlier boot {row.boot}]", "magenta"))
    return out.text((stamp, "dim")), out.text((what, "bold")), out.text(*segs)


def _table(out: Any, rows: list[tuple[Any, Any, Any]], widths: tuple[int, int]) -> Any:
    from gputriage.views.tables import new_table

    table = new_table(out.console, header=False)
    table.add_column(no_wrap=True, min_width=widths[0])
    table.add_column(no_wrap=True, min_width=widths[1])
    table.add_column(overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _print_table(out: Any, table: Any) -> None:
    from gputriage.views.tables import print_table

    if table.rows:
        print_table(out.console, table, indent=2)


def _headline(scan: Any, lanes: list[Lane]) -> str:
    """``N events on K GPU(s)/device(s)``, with the events kept when storms were folded."""
    n, kept = weight(scan.events), len(scan.events)
    folded = f" ({kept} kept, storms folded)" if kept != n else ""
    return f"{n} events{folded} on {len(lanes)} GPU(s)/device(s)"


def render_logs(scan: Any, lanes: list[Lane], result: Result, console: Console | None = None,
                *, verbose: bool = False, full: bool = False) -> None:
    """Print the timeline (bursts, bounded per lane unless ``full``), then the findings
    (the terminal report's own layout, evidence blocks bounded unless verbose), then one
    line of scan counters."""
    from rich.console import Console as RichConsole

    from gputriage.views import terminal
    from gputriage.views.out import Out
    from gputriage.views.styles import STYLES

    console = console or RichConsole(highlight=False)
    out = Out(console, verbose)
    out.evidence_lines = EVIDENCE_LINES
    word = verdict(result)
    out.line((f"{word.upper():<8}", STYLES.get(word, "")), ("  ", ""),
             ("kernel log timeline", "bold"), (out.dot, ""), (_headline(scan, lanes), ""))
    for item in result.not_read:  # the window's exclusions first: they change the answer
        out.line(("not read: ", "bold yellow"), (str(item), "yellow"), indent=10)
    window = result.host.log_window or {}
    if not lanes:
        where = "the window" if window.get("since") or window.get("boot") is not None else \
            "the log"
        out.line((f"No NVIDIA-relevant events in {where}.", "dim"), indent=10)
    for lane in lanes:
        console.print()
        out.line((lane.label, "bold cyan"))
        _print_lane(out, lane, verbose, full)
    terminal.print_findings(out, result)
    console.print()
    if scan.lines is not None:
        read = f"read {scan.lines} lines ({scan.skipped} skipped), {scan.bytes} bytes; "
    else:
        read = (f"read {scan.bytes} bytes (lines not counted: searched in parallel), "
                f"{scan.skipped} lines skipped; ")
    summary = (read + f"formats: {', '.join(scan.formats) or 'none recognised'}; "
               f"boots: {len(getattr(scan, 'boots', []) or []) or 1}")
    out.line((summary, "dim"))
    for problem in scan.problems:
        out.line((problem, "yellow"), indent=2)
