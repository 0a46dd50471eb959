"""The topology: the ``nvidia-smi topo -m`` matrix (GPU <-> GPU / NIC paths, CPU and
NUMA affinity) with the paths that findings call bad marked, and each GPU's NUMA node,
nearest NIC and rail NIC (the ``gpu_nic_map`` fact the topology rules read).

Which paths are bad is the findings' word, never judged here: a ``topology.nic-far``
finding marks its GPU's rail-NIC cell, a ``topology.p2p`` warning the pairs that are not
``OK``, a ``topology.nvlink-uneven`` finding the GPUs its evidence counts fewer links on."""

from __future__ import annotations

import re
from typing import Any

from gputriage.model import Finding, Result, Severity
from gputriage.parsers.topo import TopoMatrix, distance, nvlink_count
from gputriage.views.html.markup import esc, para, section, table, tag

DEVICES_CAP = 72  # matrix rows and columns shown
# the nvlink-uneven evidence line: "NVLink links per GPU: GPU0 12, GPU1 8, ..."
NVLINK_TOTALS = "NVLink links per GPU: "
_TOTAL = re.compile(r"(\S+) ([0-9]+)")
_KIND = {1: "l-nv", 2: "l-pix", 3: "l-pix", 4: "l-node", 5: "l-node", 6: "l-sys"}
LEGEND = (("l-nv", "NV# / C2C: NVLink"), ("l-pix", "PIX / PXB: PCIe switch"),
          ("l-node", "PHB / NODE: host bridge, same socket"),
          ("l-sys", "SYS: across the CPU sockets"))


def bad_paths(result: Result, matrix: TopoMatrix, placements: list[Any]) -> tuple[
        set[frozenset[str]], dict[str, str]]:
    """(device pairs whose cell a current finding calls bad, devices a finding names
    with why) from the topology findings."""
    pairs: set[frozenset[str]] = set()
    named: dict[str, str] = {}
    for f in result.findings:
        if not f.current or f.severity.rank < Severity.WARNING.rank:
            continue
        if f.id == "topology.nic-far":
            for p in placements:
                if _same_gpu(f, p) and p.rail_nic:
                    pairs.add(frozenset((p.gpu, p.rail_nic)))
        elif f.id == "topology.p2p" and matrix.kind == "p2p":
            gpus = matrix.gpus
            pairs.update(frozenset((a, b)) for i, a in enumerate(gpus) for b in gpus[i + 1:]
                         if (c := matrix.link(a, b)) and c.upper() != "OK")
        elif f.id == "topology.nvlink-uneven":
            totals = _nvlink_totals(f)
            most = max(totals.values(), default=0)
            named.update({gpu: f"{n} NVLink links, fewer than {most}"
                          for gpu, n in totals.items() if n < most})
    return pairs, named


def _nvlink_totals(f: Finding) -> dict[str, int]:
    """The links per GPU an nvlink-uneven finding's evidence counts."""
    for e in f.evidence:
        for line in e.lines:
            if line.startswith(NVLINK_TOTALS):
                items = line[len(NVLINK_TOTALS):].split(", ")
                return {m[1]: int(m[2]) for i in items if (m := _TOTAL.fullmatch(i))}
    return {}


def _same_gpu(f: Finding, p: Any) -> bool:
    s = f.scope
    return bool((s.pci_bus_id and s.pci_bus_id == p.bus_id)
                or (s.gpu_index is not None and s.gpu_index == p.index))


def _cell(value: str | None, bad: bool) -> tuple[str, str | None]:
    """A cell's markup and class: coloured by the kind of path, a bad one marked in
    words for screen readers too."""
    if not value:
        return "", None
    kind = _KIND.get(distance(value))
    if bad:
        return (esc(value) + " \u26a0" + tag("span", " (bad path)", class_="sr"),
                f"bad {kind or ''}".strip())
    return esc(value), kind


def matrix_table(matrix: TopoMatrix, pairs: set[frozenset[str]], named: dict[str, str]) -> str:
    """The matrix as a table: one row per device row printed, one column per device,
    then the affinity columns; bad cells marked (in words for screen readers too)."""
    devices = matrix.devices[:DEVICES_CAP]
    rows_of = [d for d in devices if d in matrix.rows or any((d, c) in matrix.links
                                                             for c in devices)]
    affinity = [("CPU Affinity", matrix.cpu_affinity), ("NUMA Affinity", matrix.numa_affinity),
                ("GPU NUMA ID", matrix.gpu_numa_id)]
    affinity = [(name, values) for name, values in affinity if values]
    head = [""] + [d + (f" ({matrix.nic_name(d)})" if d in matrix.nic_names else "")
                   for d in devices] + [name for name, _ in affinity]
    body = []
    for r in rows_of:
        label = esc(r + (f" ({matrix.nic_name(r)})" if r in matrix.nic_names else ""))
        if r in named:
            label += esc(f" \u26a0 {named[r]}")
        cells: list[Any] = [(label, "bad" if r in named else None)]
        for c in devices:
            value = matrix.links.get((r, c))
            cells.append(_cell(value, frozenset((r, c)) in pairs))
        cells += [esc(values.get(r, "")) for _, values in affinity]
        body.append(cells)
    return table(head, body, caption="nvidia-smi topo -m: the path between each pair of "
                 "devices", class_="topo")


def placement_table(placements: list[Any], pairs: set[frozenset[str]]) -> str:
    """GPU <-> NIC <-> NUMA: each GPU's NUMA node, CPUs, nearest NIC and rail NIC."""
    rows = []
    for p in placements[:DEVICES_CAP]:
        nearest = (f"{', '.join(p.nearest_names)} ({p.nearest_link})" if p.nearest_link
                   else "no NIC in the matrix")
        rail = "-"
        if p.rail_nic:
            rail = f"{p.rail_name or p.rail_nic} ({p.rail_link or '?'})"
            if frozenset((p.gpu, p.rail_nic)) in pairs:
                rail += " \u26a0 across the CPU socket: bad path"
        rows.append((esc(p.gpu), esc(p.bus_id or "-"),
                     esc(p.numa_node if p.numa_node is not None else "unknown"),
                     esc(p.cpu_affinity or "-"), esc(nearest), esc(rail)))
    return table(("GPU", "bus id", "NUMA node", "CPUs", "nearest NIC (path)",
                  "rail NIC (path)"), rows, caption="GPU \u2194 NIC \u2194 NUMA")


def topology_section(result: Result, facts: Any) -> str:
    """The section, or a line saying the input has no topology matrix."""
    matrix = facts.maybe("topology") if facts is not None else None
    if matrix is None:
        return section("Topology", para("The inputs hold no nvidia-smi topo -m matrix.",
                                        "muted"), ident="topology")
    placements = facts.maybe("gpu_nic_map") or []
    pairs, named = bad_paths(result, matrix, placements)
    legend = tag("p", "".join(tag("span", tag("span", "", class_=f"sw {k}") + esc(text))
                              for k, text in LEGEND)
                 + tag("span", "\u26a0 a path a finding calls bad"), class_="legend muted")
    parts = [legend, matrix_table(matrix, pairs, named)]
    if placements:
        parts.append(placement_table(placements, pairs))
    nv = {nvlink_count(v) for v in matrix.links.values() if nvlink_count(v)}
    if len(nv) > 1:
        parts.append(para("GPU pairs differ in NVLink link count: " + ", ".join(
            f"NV{n}" for n in sorted(nv, key=lambda n: -(n or 0))), "muted"))
    return section("Topology", "".join(parts), ident="topology")
