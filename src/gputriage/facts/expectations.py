"""What the node should have, and the signs that it once had GPUs.

* ``expectations``: the check's :class:`~gputriage.parsers.expect.Expectations` (``--expect``,
  ``$GPUTRIAGE_EXPECT`` or ``/etc/gputriage/expect.toml``); Missing without a file.
* ``gpu_traces``: :class:`GpuTraces`, what outside the PCI bus shows NVIDIA GPUs on
  this host (kernel-log GPU events and enumeration lines, GPU device nodes, the loaded
  module, the driver's GPU list) and what only shows the driver installed. A host
  whose PCI bus shows no GPU is "not a GPU host" only when there is none of the first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gputriage.facts.table import FactReader, FactTable, Missing
from gputriage.model import Evidence
from gputriage.text.fields import split_lines

if TYPE_CHECKING:
    from gputriage.parsers.expect import Expectations

__all__ = ["FACTS", "GpuTraces"]

FACTS = FactTable()

# kernel-log events only a GPU (or its NVSwitch) on this host prints
GPU_EVENT_KINDS = frozenset({"xid", "sxid", "fallen-off-bus", "rm-init-adapter-failed",
                             "gsp-rpc-timeout", "gsp-error", "gpu-reset-required",
                             "nvlink-error"})
_LINES = 8  # evidence lines kept per kind of trace
# "pci 0000:18:00.0: [10de:2330] type 00 class 0x030200": the kernel enumerating a GPU
_ENUM = re.compile(r"\[10de:[0-9a-f]{4}\] type [0-9]+ class 0x030[02]")
_ANCHORS = ("NVRM: GPU at PCI:", "[10de:")
_BUS = re.compile(r"\b([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\b")
_GPU_NODE = re.compile(r"^/dev/nvidia[0-9]+$")


@dataclass(frozen=True)
class GpuTraces:
    """Signs, besides the PCI bus, that this host has NVIDIA GPUs: ``evidence`` is
    GPU-specific (it had GPUs), ``hints`` show only the driver installed or trying
    to load (a node image shared with CPU hosts shows as much)."""

    evidence: tuple[Evidence, ...] = ()
    hints: tuple[Evidence, ...] = ()
    bus_ids: tuple[str, ...] = ()  # the GPUs the evidence names, by PCI address


@FACTS.fact("expectations")
def expectations(facts: FactReader) -> Expectations:
    """What the node should have (``gputriage.parsers.expect``): the check's expectations file."""
    found = facts.context.expectations
    if found is None or not found.stated():
        raise Missing("no expectations file (--expect FILE, $GPUTRIAGE_EXPECT or "
                      "/etc/gputriage/expect.toml) or nothing stated in it")
    return found


@FACTS.fact("gpu_traces")
def gpu_traces(facts: FactReader) -> GpuTraces:
    """What besides the PCI bus shows this host has (had) NVIDIA GPUs: GPU events and
    enumeration lines in the kernel log (every boot), /dev/nvidiaN nodes, the loaded
    nvidia module, the driver's GPU list; and hints: the driver libraries installed,
    the driver finding no GPU to probe."""
    scan = facts.maybe("log_scan")
    events = list(scan.events) if scan is not None else []
    evidence, buses = _kernel_traces(facts, events)
    evidence += _driver_traces(facts)
    hints: list[Evidence] = []
    probed = [e for e in events if e.kind == "no-adapter-probed"]
    if probed:
        hints.append(Evidence("kernel_log", _first(split_lines(e.line)[0] for e in probed),
                              "the nvidia module tried to load and found no GPU"))
    libs = [lib.path for lib in facts.maybe("libs", []) or []]
    if libs:
        hints.append(Evidence("nvidia_libs", _first(libs), "the NVIDIA driver is installed"))
    return GpuTraces(tuple(evidence), tuple(hints), buses)


def _kernel_traces(facts: FactReader, events: list) -> tuple[list[Evidence], tuple[str, ...]]:
    """The kernel log's GPU events and GPU lines, and the GPUs (bus ids) they name."""
    evidence: list[Evidence] = []
    gpu_events = [e for e in events if e.kind in GPU_EVENT_KINDS]
    buses = {e.bus_id for e in gpu_events if e.bus_id}
    if gpu_events:
        kinds = sorted({str(e.kind) for e in gpu_events})
        evidence.append(Evidence("kernel_log", _first(split_lines(e.line)[0] for e in gpu_events),
                                 f"{sum(e.count for e in gpu_events)} GPU event(s) in the "
                                 f"kernel log: {', '.join(kinds)}"))
    seen = _kernel_lines(facts.text("kernel_log") or "")
    buses.update(m.group(1) for line in seen if (m := _BUS.search(line)))
    if seen:
        evidence.append(Evidence("kernel_log", seen, "the kernel saw NVIDIA GPUs"))
    return evidence, tuple(sorted(buses))


def _driver_traces(facts: FactReader) -> list[Evidence]:
    """GPU device nodes, the loaded nvidia module, the driver's GPU list."""
    evidence: list[Evidence] = []
    nodes = [n.path for n in facts.maybe("devnodes", []) or [] if _GPU_NODE.match(n.path or "")]
    if nodes:
        evidence.append(Evidence("dev_nvidia", _first(sorted(nodes)),
                                 f"{len(nodes)} GPU device node(s) left by the driver"))
    mods = facts.maybe("modules") or {}
    if "nvidia" in mods:
        evidence.append(Evidence("proc_modules", (mods["nvidia"].line,),
                                 "the nvidia kernel module is loaded"))
    listed = facts.maybe("proc_gpus") or []
    if listed:
        evidence.append(Evidence("proc_driver_nvidia_gpus",
                                 _first(f"{g.bus_id}: {g.model}" for g in listed),
                                 "the driver lists GPUs"))
    return evidence


def _first(lines: Iterable[str]) -> tuple[str, ...]:
    """The first :data:`_LINES` distinct lines."""
    out: list[str] = []
    for line in lines:
        if line not in out:
            out.append(line)
            if len(out) == _LINES:
                break
    return tuple(out)


def _kernel_lines(text: str) -> tuple[str, ...]:
    """Kernel-log lines naming an NVIDIA GPU ("NVRM: GPU at PCI:", the PCI enumeration
    of an NVIDIA display or 3D controller), the first few, found by literal search."""
    found: list[tuple[int, str]] = []
    for anchor in _ANCHORS:
        start = 0
        count = 0
        while count < _LINES and (at := text.find(anchor, start)) >= 0:
            begin = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            line = text[begin:end].rstrip("\r")
            start = end + 1
            if anchor == "[10de:" and not _ENUM.search(line):
                continue
            found.append((begin, line))
            count += 1
    return tuple(line for _, line in sorted(found))
