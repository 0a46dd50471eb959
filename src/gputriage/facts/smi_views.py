"""The per-GPU view of nvidia-smi output that the memory, thermal and GPU-state rules
share: each GPU merged from every nvidia-smi output the snapshot has (XML first, then
``-q`` text, then the table), with helpers that quote the exact lines of a section as
evidence."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gputriage.facts.stack import SMI_SOURCES
from gputriage.facts.table import FactReader, FactTable
from gputriage.model import Evidence, Scope, evidence, gpu_scope
from gputriage.parsers.nvsmi import SmiGpu, norm_key, parse_str
from gputriage.text.fields import normalize_bus_id, split_lines

__all__ = ["FACTS", "SmiPart", "SmiView"]

FACTS = FactTable()

_TEXT_GPU = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_XML_GPU = re.compile(r"<gpu\s+id=\"([^\"]*)\"")
_XML_OPEN = re.compile(r"^\s*<([A-Za-z_][\w.-]*)(?:\s[^>]*)?>")
_TABLE_BUS = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")


@dataclass
class SmiPart:
    """One GPU as one nvidia-smi output describes it, with that output's lines."""

    source: str
    format: str
    gpu: SmiGpu
    lines: list[str]
    raw: dict[str, str] = field(default_factory=dict)  # normalised raw key -> value


@dataclass
class SmiView:
    """One GPU merged from every nvidia-smi output, best source first."""

    bus_id: str | None
    index: int | None
    parts: list[SmiPart] = field(default_factory=list)

    def value(self, attr: str) -> Any:
        """The first known value of an :class:`SmiGpu` field."""
        return self.where(attr)[0]

    def where(self, attr: str) -> tuple[Any, SmiPart | None]:
        """The first known value of a field and the output that gave it."""
        for part in self.parts:
            value = getattr(part.gpu, attr)
            if value is not None and value != {}:
                return value, part
        return None, None

    def raw(self, *keys: str) -> str | None:
        """A raw value by normalised key path (first key and output that has it)."""
        for part in self.parts:
            for key in keys:
                value = parse_str(part.raw.get(key))
                if value is not None:
                    return value
        return None

    @property
    def name(self) -> str | None:
        return self.value("name")

    @property
    def scope(self) -> Scope:
        return gpu_scope(self.bus_id, self.index, self.value("uuid"))

    @property
    def label(self) -> str:
        """``GPU 1 0000:55:00.0 (NVIDIA H100 80GB HBM3)`` with what is known."""
        if self.index is None and not self.bus_id and not self.value("uuid"):
            return "a GPU the paste does not name" + (f" ({self.name})" if self.name else "")
        text = f"GPU {self.index}" if self.index is not None else "GPU"
        if self.bus_id:
            text += f" {self.bus_id}"
        return f"{text} ({self.name})" if self.name else text

    @property
    def busy(self) -> bool:
        """Running work: utilisation above 0, processes, or P0 with memory in use."""
        util = self.value("utilization_gpu_pct")
        if util is not None and util > 0:
            return True
        if any(p.gpu.processes for p in self.parts):
            return True
        used = self.value("memory_used_mib")
        return self.value("performance_state") == "P0" and used is not None and used > 1024

    def section(self, names: Iterable[str], keep: Callable[[str], bool] | None = None,
                fallback: Iterable[str] = ()) -> list[Evidence]:
        """Exact lines of the first section called one of ``names`` (XML tag or
        ``-q`` label; inner lines filtered by ``keep``), or ``fallback`` lines."""
        wanted = {norm_key(n) for n in names}
        for part in self.parts:
            if part.format in ("xml", "text"):
                found = _section_lines(_gpu_chunk(part.lines, self.bus_id), wanted, keep)
                if found:
                    return [evidence(part.source, found)]
        fb = [ln for ln in fallback if ln]
        if fb:
            source = self.parts[0].source if self.parts else "nvidia_smi"
            return [evidence(source, [f"{self.label}: {ln}" for ln in fb], "as parsed")]
        return []

    def table_rows(self) -> list[Evidence]:
        """The two table rows of this GPU in plain ``nvidia-smi`` output, if any."""
        for part in self.parts:
            if part.format != "table" or not self.bus_id:
                continue
            for i, line in enumerate(part.lines):
                m = _TABLE_BUS.search(line)
                if m and normalize_bus_id(m.group(0)) == self.bus_id:
                    return [evidence(part.source, part.lines[i:i + 2])]
        return []


@FACTS.fact("smi_views", sources=SMI_SOURCES)
def smi_views(facts: FactReader) -> list[SmiView]:
    """Every GPU nvidia-smi reports, merged across its outputs (best first): the
    per-GPU views several rules share (Missing without any nvidia-smi output)."""
    nvml_index = {}
    visible = facts.maybe("visible_gpus")
    if visible and visible[0] == "nvml":
        nvml_index = {g.bus_id: g.index for g in visible[1] if g.bus_id}
    views: list[SmiView] = []
    by_bus: dict[str, SmiView] = {}
    for source, report in facts.get("smi"):
        if not report.gpus:
            continue
        lines = split_lines(facts.text(source) or "")
        trusted = (report.attached_gpus == len(report.gpus) if report.attached_gpus is not None
                   else len(report.gpus) > 1)
        for gpu in report.gpus:
            index = nvml_index.get(gpu.pci_bus_id, gpu.index if trusted else None)
            view = by_bus.get(gpu.pci_bus_id or "")
            if view is None and gpu.pci_bus_id is None:
                view = next((v for v in views if v.index is not None and v.index == index),
                            None)
            if view is None:
                view = SmiView(gpu.pci_bus_id, index)
                views.append(view)
                if gpu.pci_bus_id:
                    by_bus[gpu.pci_bus_id] = view
            if view.index is None:
                view.index = index
            view.parts.append(SmiPart(source, report.format, gpu, lines,
                                      {norm_key(k): v for k, v in gpu.raw.items()}))
    return views


def _gpu_chunk(lines: list[str], bus_id: str | None) -> list[str]:
    """The lines of one GPU's section of ``-q`` text or XML (all lines if unsure)."""
    starts: list[tuple[int, str | None]] = []
    for i, line in enumerate(lines):
        m = _TEXT_GPU.match(line) or _XML_GPU.search(line)
        if m:
            starts.append((i, normalize_bus_id(m.group(1))))
    for n, (start, bus) in enumerate(starts):
        if bus_id and bus == bus_id:
            end = starts[n + 1][0] if n + 1 < len(starts) else len(lines)
            return lines[start:end]
    return lines


def _section_lines(lines: list[str], wanted: set[str],
                   keep: Callable[[str], bool] | None) -> list[str]:
    """A section's header line and its inner lines, or []. With ``keep``, only
    the value lines it accepts stay, with the sub-headers above them."""
    for i, line in enumerate(lines):
        m = _XML_OPEN.match(line)
        if m:
            tag = m.group(1)
            if norm_key(tag) not in wanted:
                continue
            if f"</{tag}>" in line:
                return [line.rstrip()]
            body = []
            for inner in lines[i + 1:]:
                if f"</{tag}>" in inner:
                    break
                body.append(inner.rstrip())
        else:
            key = line.split(":", 1)[0].strip()
            nested = line[:1] in (" ", "\t") or ":" not in line  # or a headerless excerpt's
            if not key or norm_key(key) not in wanted or not nested:
                continue
            indent = _indent(line)
            body = []
            for inner in lines[i + 1:]:
                if not inner.strip():
                    continue
                if _indent(inner) <= indent:
                    break
                body.append(inner.rstrip())
        kept = [line.rstrip()] + (body if keep is None else _filtered(body, keep))
        return _dedented(kept) if len(set(kept)) == len(kept) else _qualified(kept)
    return []


def _dedented(lines: list[str]) -> list[str]:
    """The lines with tabs expanded and the header's indentation removed."""
    expanded = [ln.expandtabs(4) for ln in lines]
    base = _indent(expanded[0])
    return [ln[min(base, _indent(ln)):] for ln in expanded]


def _qualified(lines: list[str]) -> list[str]:
    """Value lines prefixed with the headers above them (``Aggregate / Double Bit /
    Total : 2``), for sections whose lines repeat and would otherwise merge."""
    stack: list[tuple[int, str]] = []
    out = []
    for line in lines:
        indent, text = _indent(line), line.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if ":" not in text and "</" not in text:
            stack.append((indent, text.strip("<>")))
        elif not text.startswith("</"):
            out.append(" / ".join([name for _, name in stack] + [" ".join(text.split())]))
    return out


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _filtered(body: list[str], keep: Callable[[str], bool]) -> list[str]:
    """Value lines ``keep`` accepts, plus the sub-headers that lead to them."""
    headers = [":" not in ln and not re.search(r"</", ln) for ln in body]
    chosen = [not h and keep(ln) for ln, h in zip(body, headers, strict=True)]
    for i in range(len(body) - 1, -1, -1):
        if not headers[i]:
            continue
        for j in range(i + 1, len(body)):
            if _indent(body[j]) <= _indent(body[i]):
                break
            if chosen[j]:
                chosen[i] = True
                break
    return [ln for ln, c in zip(body, chosen, strict=True) if c]


