"""The terminal report: what a senior SRE wants to read at 3 a.m.

In order: the opening lines (the one-line verdict an on-call pastes into a ticket, the
next step, the other side, what was not read: :mod:`gputriage.views.opening`), the
causes (the current findings of warning or worse, worst first, with their evidence,
next step and what they explain), then the details: the host line (host, kernel,
driver, GPU counts), the GPU table, the minor findings, the acknowledged and past
findings one line each, skipped rules, unreadable inputs and provenance.

On a terminal, long lines wrap between words and hang under their text. Anywhere else
(a pipe, a file, a ticket) nothing is wrapped or padded: a finding's header is one line
and evidence lines are printed verbatim, indented (control characters escaped). rich is
imported inside the functions only, so importing this module keeps the CLI fast. Every
piece of host text goes into rich ``Text`` objects (never markup), so evidence such as
``[ 1234.5678] NVRM: Xid ...`` is printed verbatim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gputriage.model import (
    DriverVersions,
    Finding,
    GpuRow,
    Occurrences,
    Result,
    Severity,
    Status,
)
from gputriage.status import counted_severity, severity_counts, verdict
from gputriage.text.fields import normalize_bus_id
from gputriage.views.opening import print_opening
from gputriage.views.out import Out, Segment
from gputriage.views.scopes import also_text, scope_word
from gputriage.views.styles import STYLES

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

EVIDENCE_CAP = 8  # lines per evidence block outside verbose mode

# The sections of findings that no longer count, in report order.
SECTIONS = ((Status.ACKNOWLEDGED, "Acknowledged"),
            (Status.PAST, "History (ended by a reset or a reboot)"))

def _word(severity: str) -> str:
    return severity.upper()


def _driver_segment(driver: DriverVersions) -> Segment:
    module = driver.kernel_module or "?"
    user = driver.userspace or "?"
    cuda = driver.cuda or "?"
    if module == user:  # the usual case: say it once
        return (f"driver {module} / CUDA {cuda}", "")
    # a module / userspace mismatch breaks NVML: make it stand out
    style = "bold red" if "?" not in (module, user) else ""
    return (f"driver {module} module / {user} userspace / CUDA {cuda}", style)


def print_header(out: Out, result: Result, *, label: str | None = None) -> None:
    """The host line (name, kernel, driver, GPU counts) and the counts line. The line
    starts with ``label`` when given (the report's opening lines carry the verdict),
    else with the verdict word."""
    host = result.host
    word = verdict(result)
    first: Segment = ((label, "dim") if label is not None
                      else (_word(word), STYLES.get(word, "")))
    segs: list[Segment] = [(host.called, "bold")]
    if host.kernel:
        segs += [(out.dot, ""), (f"kernel {host.kernel}", "")]
    segs += [(out.dot, ""), _driver_segment(host.driver)]
    on_pci, visible = host.gpus_on_pci, host.gpus_visible
    if on_pci is not None or visible is not None:
        bad = on_pci is not None and visible is not None and on_pci != visible
        segs += [(out.dot, ""),
                 (f"GPUs {_or_q(on_pci)} on PCI / {_or_q(visible)} visible",
                  "bold red" if bad else "")]
    out.labelled(first, *segs)
    second: list[Segment] = []
    if host.os:
        second.append((str(host.os), "dim"))
    counts = [(f"{n} {sev}", STYLES[sev]) for sev, n in _counts(result)]
    second += counts or [("no current findings" if result.findings else "no findings", "")]
    second += [(f"{n} {what}", "dim") for what, n in _counts_not_current(result)]
    out.labelled(("", ""), *_join(out, second))
    from gputriage.views.oneline import window_unread

    if word == "unknown" and label is None and window_unread(result) is None:
        out.line(("could not tell: no rule could decide; see skipped rules and "
                  "unreadable inputs below", STYLES["unknown"]), indent=10)


def _or_q(value: Any) -> str:
    return "?" if value is None else str(value)


def _join(out: Out, segs: list[Segment]) -> list[Segment]:
    joined: list[Segment] = []
    for i, seg in enumerate(segs):
        if i:
            joined.append((out.dot, ""))
        joined.append(seg)
    return joined


def _counts(result: Result) -> list[tuple[str, int]]:
    """Current findings per severity, worst first (those that are not: elsewhere)."""
    return [(sev.value, n) for sev, n in severity_counts(result).items()]


def _counts_not_current(result: Result) -> list[tuple[str, int]]:
    """``acknowledged`` and ``history`` counts, when any."""
    words = {Status.ACKNOWLEDGED: "acknowledged", Status.PAST: "history"}
    return [(word, n) for status, word in words.items()
            if (n := sum(1 for f in result.findings if f.status is status))]


def _bus(value: Any) -> str | None:
    if not value:
        return None
    return normalize_bus_id(str(value)) or str(value).strip().lower()


def _gpu_findings(result: Result, gpu: GpuRow) -> list[Finding]:
    """Current findings scoped to ``gpu`` (by index, UUID or PCI bus id), a per-GPU
    repeat's other GPUs included."""
    bus, uuid, index = _bus(gpu.pci_bus_id), gpu.uuid, gpu.index
    hits = []
    for f in result.findings:
        if not f.current:
            continue
        for s in f.scopes:
            if s.kind == "gpu" and (
                    (uuid and s.uuid and s.uuid == uuid)
                    or (bus and s.pci_bus_id and _bus(s.pci_bus_id) == bus)
                    or (index is not None and s.gpu_index is not None and s.gpu_index == index
                        and not (s.uuid and uuid) and not (s.pci_bus_id and bus))):
                hits.append(f)
                break
    return hits


def _gpu_status(result: Result, gpu: GpuRow) -> str:
    if not gpu.visible:
        return "missing"
    ranks = [counted_severity(result, f).rank for f in _gpu_findings(result, gpu)]
    worst = max([*ranks, gpu.severity.rank])
    if gpu.unknown and worst < 2:  # the driver could not be asked: not "ok"
        return "unknown"
    return {3: "critical", 2: "warning"}.get(worst, "ok")


def _short_uuid(uuid: Any) -> str:
    if not uuid:
        return "-"
    text = str(uuid)
    head, _, rest = text.partition("-")
    return f"{head}-{rest[:8]}" if rest and head.upper() in ("GPU", "MIG") else text[:12]


def _gpu_rows(out: Out, result: Result) -> list[list[Segment]]:
    """One row per GPU: index, bus id, name, short UUID, persistence mode, state."""
    rows: list[list[Segment]] = []
    for gpu in result.gpus:
        status = _gpu_status(result, gpu)
        pm = gpu.persistence_mode
        persistence = "persistence ?" if pm is None else f"persistence {'on' if pm else 'off'}"
        index = gpu.index
        rows.append([
            (f"GPU {'?' if index is None else index}", "bold"),
            (str(gpu.pci_bus_id or "-"), ""),
            (str(gpu.name or "-"), ""),
            (_short_uuid(gpu.uuid), "dim"),
            (persistence, "yellow" if pm is False else ""),
            (_word(status), STYLES[status]),
        ])
    return [[(out.clean(v), style) for v, style in row] for row in rows]


def _gpus(out: Out, result: Result) -> None:
    """The GPU table: a rich table on a terminal (the short UUID goes when the terminal
    is too narrow for it), plain aligned columns when piped."""
    from rich.cells import cell_len

    from gputriage.views.tables import new_table, print_table

    rows = _gpu_rows(out, result)
    if not rows:
        return
    widths = [max(cell_len(row[i][0]) for row in rows) for i in range(len(rows[0]))]
    if (out.wraps and not out.verbose
            and sum(widths) + 2 * (len(widths) - 1) > out.console.width):
        rows = [row[:3] + row[4:] for row in rows]
    table = new_table(out.console, header=False)
    for _ in rows[0]:
        table.add_column(no_wrap=False, overflow="fold")
    for row in rows:
        table.add_row(*(out.text(cell) for cell in row))
    out.console.print()
    print_table(out.console, table)


def _finding_head(out: Out, f: Finding, result: Result) -> tuple[Segment, list[Segment]]:
    """The severity label (the one it counts with: a job's fault is a WARNING at most
    unless --job-faults-fail), and the title, scope and id."""
    sev = counted_severity(result, f).value
    return ((_word(sev), STYLES[sev]),
            [(f.title, "bold"), ("  [", "dim"), (scope_word(f), "cyan"), ("]  ", "dim"),
             (f.id, "dim")])



def _status_words(f: Finding) -> str:
    return {Status.ACKNOWLEDGED: "acknowledged", Status.PAST: "history"}.get(
        f.status, "note")


def _evidence(out: Out, f: Finding, indent: int) -> None:
    """Each evidence block: its source line, then its lines (capped unless verbose); with
    ``out.evidence_lines``, no further block once that many lines were printed."""
    budget, used = None if out.verbose else out.evidence_lines, 0
    for i, ev in enumerate(f.evidence):
        if budget is not None and used >= budget:
            n = len(f.evidence) - i
            out.line((f"(+{n} more evidence block{'s' if n != 1 else ''}; -v shows all)",
                      "dim"), indent=indent)
            return
        head: list[Segment] = [("source: ", "dim"), (ev.source, "bold")]
        if ev.note:
            head += [(out.dot, "dim"), (ev.note, "italic")]
        out.line(*head, indent=indent)
        lines = [part for line in ev.lines for part in str(line).splitlines() or [""]]
        shown = lines if out.verbose else lines[:EVIDENCE_CAP]
        for line in shown:
            out.verbatim(line, indent=indent + 2)
        if len(lines) > len(shown):
            out.line((f"(+{len(lines) - len(shown)} more lines)", "dim"), indent=indent + 2)
        used += 1 + len(shown) + (len(lines) > len(shown))


def _consequences(out: Out, f: Finding) -> None:
    """``explains: <id>  <title>`` for each finding folded into this cause; their scope
    and evidence in verbose mode."""
    for c in f.consequences:
        segs: list[Segment] = [("explains: ", "dim"), (c.id, "bold"), ("  ", ""),
                               (c.title, "")]
        if out.verbose:
            segs += [("  [", "dim"), (c.scope.label(), "cyan"), ("]", "dim")]
        out.line(*segs, indent=10)
        if out.verbose:
            _evidence(out, c, 12)


def _finding_full(out: Out, f: Finding, result: Result) -> None:
    out.console.print()
    label, head = _finding_head(out, f, result)
    out.labelled(label, *head)
    if f.status_note or not f.current:
        out.line((f"{_status_words(f)}: ", "bold magenta"),
                 (f.status_note or "no reason recorded", "magenta"), indent=10)
    if f.occurrences is not None:
        out.line(*_occurrences(out, f.occurrences), indent=10)
    if (where := also_text(f, full=out.verbose)) is not None:
        out.line((where, "cyan"), indent=10)
    out.line(("blame: ", "dim"), (f.blame.value, "bold"), (out.dot, "dim"),
             ("action: ", "dim"), (f.action.value, "bold"), indent=10)
    if f.step:
        out.line(("next: ", "bold"), (f.step, "bold"), indent=10)
    if f.explanation:
        out.line((f.explanation, ""), indent=10)
    _evidence(out, f, 10)
    _consequences(out, f)
    if f.references:
        out.line(("refs: ", "dim"), (", ".join(map(str, f.references)), "dim"), indent=10)


def _occurrences(out: Out, occ: Occurrences) -> list[Segment]:
    """``3 events · first … · last …`` and, for history, ``earlier boot``."""
    segs: list[Segment] = [(f"{occ.count} event{'s' if occ.count != 1 else ''}", "bold")]
    if occ.first:
        segs += [(out.dot, "dim"), ("first ", "dim"), (occ.first, "")]
    if occ.last and (occ.last != occ.first or occ.count > 1):
        segs += [(out.dot, "dim"), ("last ", "dim"), (occ.last, "")]
    if not occ.current_boot:
        segs += [(out.dot, "dim"), ("earlier boot (history, not a current failure)",
                                    "magenta")]
    return segs


def _current(result: Result) -> tuple[list[Finding], list[Finding]]:
    """The current findings in report order: (warning or worse, the others)."""
    current = [f for f in result.sorted_findings() if f.current]
    return ([f for f in current if f.severity.rank >= Severity.WARNING.rank],
            [f for f in current if f.severity.rank < Severity.WARNING.rank])


def print_causes(out: Out, result: Result) -> None:
    """The current findings of warning or worse, worst first, in full (or a line
    saying there are none)."""
    serious, minor = _current(result)
    if not serious and not minor:
        out.console.print()
        word = "No current findings." if result.findings else "No findings."
        out.line((word, STYLES["ok"] if verdict(result) == "ok" else ""))
    for f in serious:
        _finding_full(out, f, result)


def print_minor(out: Out, result: Result) -> None:
    """The current findings under warning, one line each (in full when verbose); then
    the acknowledged and past ones."""
    _, minor = _current(result)
    if minor and out.verbose:
        for f in minor:
            _finding_full(out, f, result)
    elif minor:
        out.console.print()
        for f in minor:
            label, head = _finding_head(out, f, result)
            out.labelled(label, *head)
    ordered = result.sorted_findings()
    for status, heading in SECTIONS:
        _print_section(out, [f for f in ordered if f.status is status], heading, result)


def print_findings(out: Out, result: Result) -> None:
    """The current findings worst first: warnings and worse in full, the rest one line
    each (in full when verbose); then the acknowledged and past ones."""
    print_causes(out, result)
    print_minor(out, result)


def _print_section(out: Out, findings: list[Finding], heading: str, result: Result) -> None:
    """Findings that no longer count: one line each with why (in full when verbose)."""
    if not findings:
        return
    out.console.print()
    out.line((f"{heading} ({len(findings)})", "bold magenta"))
    for f in findings:
        if out.verbose:
            _finding_full(out, f, result)
            continue
        label, segs = _finding_head(out, f, result)
        if f.status_note:
            segs += [(out.dot, "dim"), (f.status_note, "magenta")]
        out.labelled(label, *segs)


def print_tail(out: Out, result: Result) -> None:
    """Skipped rules, unreadable inputs and where the inputs came from."""
    if result.skipped or result.unreadable or result.inputs:
        out.console.print()
    if result.skipped:
        n = len(result.skipped)
        hint = "" if out.verbose else "; verbose mode lists them"
        out.line((f"{n} rule{'s' if n != 1 else ''} skipped (missing inputs){hint}", "dim"))
        if out.verbose:
            for s in result.skipped:
                out.line((s.rule, "bold"), (": ", "dim"), (s.reason, "dim"), indent=2)
    if result.unreadable:
        out.line(("Unreadable inputs:", STYLES["warning"]))
        for problem in result.unreadable:
            out.line((problem, "yellow"), indent=2)
    for item in result.inputs:
        if not isinstance(item, dict):
            continue
        names = [str(n) for n in item.get("sources") or []]
        segs: list[Segment] = [("input: ", "dim"), (str(item.get("origin") or "?"), ""),
                               (f" ({len(names)} source{'s' if len(names) != 1 else ''})",
                                "dim")]
        if out.verbose and names:
            segs.append((": " + ", ".join(names), "dim"))
        out.line(*segs)


def _changed_since_healthy(out: Out, result: Result) -> None:
    """The line "changed since the last healthy check (when): ..." under the opening
    lines, when ``result.host.changed_since_healthy`` says something changed."""
    changed = result.host.changed_since_healthy
    if changed is None or not changed.changes:
        return
    out.line((f"changed since the last healthy check ({changed.when or '?'}): ",
              "bold yellow"), ("; ".join(changed.changes), "yellow"))


def render_terminal(result: Result, console: Console | None = None, *,
                    verbose: bool = False) -> None:
    """Print the report of ``result`` on ``console`` (default: stdout's, from
    :func:`gputriage.views.console.make_console`): the opening lines, the causes, then
    the details. ``verbose`` lists skipped rules, input sources and all evidence lines."""
    if console is None:
        from gputriage.views.console import make_console

        console = make_console()
    out = Out(console, verbose)
    print_opening(out, result)
    _changed_since_healthy(out, result)
    print_causes(out, result)
    out.console.print()
    print_header(out, result, label="host")
    _gpus(out, result)
    print_minor(out, result)
    print_tail(out, result)
