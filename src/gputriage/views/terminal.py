"""The terminal report: what a senior SRE wants to read at 3 a.m.

Header (host, kernel, driver, GPU counts, verdict), one line per GPU, the
findings worst first with their evidence, then skipped rules, unreadable
inputs and provenance. rich is imported inside :func:`render_terminal` only,
so importing this module keeps the CLI fast. Every piece of host text goes
into rich ``Text`` objects (never markup), so evidence such as
``[ 1234.5678] NVRM: Xid ...`` is printed verbatim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gputriage.model import DriverVersions, Finding, GpuRow, Occurrences, Result, Severity
from gputriage.parsers.base import normalize_bus_id
from gputriage.views.safe import printable
from gputriage.views.status import verdict

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

EVIDENCE_CAP = 8  # lines per evidence block outside verbose mode

STYLES = {
    "ok": "bold green",
    "info": "bold cyan",
    "warning": "bold yellow",
    "critical": "bold red",
    "unknown": "bold magenta",
    "missing": "bold red",
}

Segment = tuple[str, str]  # (text, rich style; "" for none)


class Out:
    """Turns plain strings into safe rich output on one console (shared by the views
    that print a result's header, findings and tail around their own sections)."""

    def __init__(self, console: Console, verbose: bool) -> None:
        from rich.padding import Padding
        from rich.text import Text

        self.console = console
        self.verbose = verbose
        self._text = Text
        self._padding = Padding
        encoding = (getattr(console, "encoding", None) or "utf-8").lower()
        self.encoding = encoding
        self.unicode = encoding.replace("-", "").startswith("utf")
        self.dot = " · " if self.unicode else " | "

    def clean(self, value: Any) -> str:
        """``value`` as one printable line (:func:`gputriage.views.safe.printable`),
        characters the console cannot encode replaced."""
        text = printable(value)
        if not self.unicode:
            try:
                text = text.encode(self.encoding, errors="replace").decode(self.encoding)
            except LookupError:
                text = text.encode("ascii", errors="replace").decode("ascii")
        return text

    def text(self, *segments: Segment) -> Any:
        """A rich ``Text`` from (string, style) segments (no markup parsing)."""
        out = self._text(overflow="fold")
        for value, style in segments:
            out.append(self.clean(value), style=style or None)
        return out

    def line(self, *segments: Segment, indent: int = 0) -> None:
        """Print one logical line; wrapped continuations keep the indent."""
        body = self.text(*segments)
        if indent:
            self.console.print(self._padding(body, (0, 0, 0, indent), expand=False),
                               highlight=False)
        else:
            self.console.print(body, highlight=False)


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


def print_header(out: Out, result: Result) -> None:
    """The host line (name, kernel, driver, GPU counts, verdict) and the counts line."""
    host = result.host
    word = verdict(result)
    segs: list[Segment] = [(f"{_word(word):<8}", STYLES.get(word, "")), ("  ", ""),
                           (str(host.hostname or "unknown host"), "bold")]
    if host.kernel:
        segs += [(out.dot, ""), (f"kernel {host.kernel}", "")]
    segs += [(out.dot, ""), _driver_segment(host.driver)]
    on_pci, visible = host.gpus_on_pci, host.gpus_visible
    if on_pci is not None or visible is not None:
        bad = on_pci is not None and visible is not None and on_pci != visible
        segs += [(out.dot, ""),
                 (f"GPUs {_or_q(on_pci)} on PCI / {_or_q(visible)} visible",
                  "bold red" if bad else "")]
    out.line(*segs)
    second: list[Segment] = []
    if host.os:
        second.append((str(host.os), "dim"))
    counts = [(f"{n} {sev}", STYLES[sev]) for sev, n in _counts(result)]
    second += counts or [("no findings", "")]
    out.line(*_join(out, second), indent=10)
    if word == "unknown":
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
    order = [Severity.CRITICAL, Severity.WARNING, Severity.INFO, Severity.OK]
    return [(sev.value, n) for sev in order
            if (n := sum(1 for f in result.findings if f.severity is sev))]


def _bus(value: Any) -> str | None:
    if not value:
        return None
    return normalize_bus_id(str(value)) or str(value).strip().lower()


def _gpu_findings(result: Result, gpu: GpuRow) -> list[Finding]:
    """Findings scoped to ``gpu`` (by index, UUID or PCI bus id)."""
    bus, uuid, index = _bus(gpu.pci_bus_id), gpu.uuid, gpu.index
    hits = []
    for f in result.findings:
        s = f.scope
        if s.kind != "gpu":
            continue
        if ((uuid and s.uuid and s.uuid == uuid)
                or (bus and s.pci_bus_id and _bus(s.pci_bus_id) == bus)
                or (index is not None and s.gpu_index is not None and s.gpu_index == index
                    and not (s.uuid and uuid) and not (s.pci_bus_id and bus))):
            hits.append(f)
    return hits


def _gpu_status(result: Result, gpu: GpuRow) -> str:
    if not gpu.visible:
        return "missing"
    ranks = [f.severity.rank for f in _gpu_findings(result, gpu)]
    worst = max([*ranks, gpu.severity.rank])
    return {3: "critical", 2: "warning"}.get(worst, "ok")


def _short_uuid(uuid: Any) -> str:
    if not uuid:
        return "-"
    text = str(uuid)
    head, _, rest = text.partition("-")
    return f"{head}-{rest[:8]}" if rest and head.upper() in ("GPU", "MIG") else text[:12]


def _gpus(out: Out, result: Result) -> None:
    from rich.cells import cell_len

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
    if not rows:
        return
    rows = [[(out.clean(v), style) for v, style in row] for row in rows]
    widths = [max(cell_len(row[i][0]) for row in rows) for i in range(len(rows[0]))]
    out.console.print()
    for row in rows:
        segs: list[Segment] = []
        for i, (value, style) in enumerate(row):
            segs.append((value, style))
            if i < len(row) - 1:
                segs.append((" " * (widths[i] - cell_len(value) + 2), ""))
        out.line(*segs)


def _finding_head(out: Out, f: Finding) -> list[Segment]:
    sev = f.severity.value
    return [(f"{_word(sev):<8}", STYLES[sev]), ("  ", ""), (f.title, "bold"),
            ("  [", "dim"), (f.scope.label(), "cyan"), ("]  ", "dim"), (f.id, "dim")]


def _finding_full(out: Out, f: Finding) -> None:
    out.console.print()
    out.line(*_finding_head(out, f))
    if f.occurrences is not None:
        out.line(*_occurrences(out, f.occurrences), indent=10)
    out.line(("blame: ", "dim"), (f.blame.value, "bold"), (out.dot, "dim"),
             ("action: ", "dim"), (f.action.value, "bold"), indent=10)
    if f.explanation:
        out.line((f.explanation, ""), indent=10)
    for ev in f.evidence:
        head: list[Segment] = [("source: ", "dim"), (ev.source, "bold")]
        if ev.note:
            head += [(out.dot, "dim"), (ev.note, "italic")]
        out.line(*head, indent=10)
        lines = [part for line in ev.lines for part in str(line).splitlines() or [""]]
        shown = lines if out.verbose else lines[:EVIDENCE_CAP]
        for line in shown:
            out.line((line, ""), indent=12)
        if len(lines) > len(shown):
            out.line((f"(+{len(lines) - len(shown)} more lines)", "dim"), indent=12)
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


def print_findings(out: Out, result: Result) -> None:
    """The findings worst first: warnings and worse in full, the rest as one line each
    (in full when verbose)."""
    ordered = result.sorted_findings()
    serious = [f for f in ordered if f.severity.rank >= Severity.WARNING.rank]
    minor = [f for f in ordered if f.severity.rank < Severity.WARNING.rank]
    if not ordered:
        out.console.print()
        out.line(("No findings.", STYLES["ok"] if verdict(result) == "ok" else ""))
        return
    for f in serious:
        _finding_full(out, f)
    if not minor:
        return
    if out.verbose:
        for f in minor:
            _finding_full(out, f)
        return
    out.console.print()
    for f in minor:
        out.line(*_finding_head(out, f))


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
    """The opening line "changed since the last healthy check (when): ..." when
    ``result.host.changed_since_healthy`` says something changed."""
    changed = result.host.changed_since_healthy
    if changed is None or not changed.changes:
        return
    out.line((f"changed since the last healthy check ({changed.when or '?'}): ",
              "bold yellow"), ("; ".join(changed.changes), "yellow"))


def render_terminal(result: Result, console: Console | None = None, *,
                    verbose: bool = False) -> None:
    """Print the report of ``result`` on ``console`` (default: a stdout
    console that drops colour when not a TTY or when ``NO_COLOR`` is set).
    ``verbose`` lists skipped rules, input sources and all evidence lines."""
    if console is None:
        from rich.console import Console

        console = Console(highlight=False)
    out = Out(console, verbose)
    _changed_since_healthy(out, result)
    print_header(out, result)
    _gpus(out, result)
    print_findings(out, result)
    print_tail(out, result)
