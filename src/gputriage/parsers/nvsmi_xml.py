"""Parser for ``nvidia-smi -q -x`` XML output.

Uses :mod:`xml.etree.ElementTree` defensively: the ``<!DOCTYPE>`` line is
removed before parsing, any ``<!ENTITY`` declaration is refused (so entity
expansion attacks such as "billion laughs" cannot run) and external DTDs are
never fetched. Both ECC schemas (Pascal ``single_bit``/``double_bit`` and the
newer SRAM/DRAM counters) and both clock-reason sections
(``clocks_throttle_reasons`` and ``clocks_event_reasons``) are understood.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.parsers.nvsmi import (
    FieldSpec,
    SmiGpu,
    SmiProcess,
    SmiReport,
    finish_gpu,
    norm_key,
    parse_float,
    parse_int,
    parse_link_width,
    parse_str,
    scan_smi_errors,
)
from gputriage.text.fields import normalize_bus_id, parse_bool
from gputriage.text.paste import PasteDoc

__all__ = ["claim_nvsmi_xml", "parse_nvsmi_xml"]

_ROOT_TAG = "nvidia_smi_log"
_DOCTYPE_RE = re.compile(r"<!DOCTYPE\b[^>\[]*(?:\[.*?\])?\s*>", re.IGNORECASE | re.DOTALL)
_ENTITY_RE = re.compile(r"<!ENTITY", re.IGNORECASE)
_START_RE = re.compile(r"<\?xml\b|<nvidia_smi_log\b")
_SKIP_RAW = {"processes", "accounted_processes", "supported_clocks"}
_LINK = "pci/pci gpu link info"

_SPECS: tuple[FieldSpec, ...] = (
    ("name", parse_str, ("product name",)),
    ("product_brand", parse_str, ("product brand",)),
    ("architecture", parse_str, ("product architecture",)),
    ("persistence_mode", parse_bool, ("persistence mode",)),
    ("mig_mode_current", parse_str, ("mig mode/current mig",)),
    ("serial", parse_str, ("serial",)),
    ("uuid", parse_str, ("uuid",)),
    ("minor_number", parse_int, ("minor number",)),
    ("vbios", parse_str, ("vbios version",)),
    ("virtualization_mode", parse_str, ("gpu virtualization mode/virtualization mode",)),
    ("recovery_action", parse_str, ("gpu recovery action",)),
    ("pcie_gen_max", parse_int, (f"{_LINK}/pcie gen/max link gen",)),
    ("pcie_gen_current", parse_int, (f"{_LINK}/pcie gen/current link gen",)),
    ("pcie_width_max", parse_link_width, (f"{_LINK}/link widths/max link width",)),
    ("pcie_width_current", parse_link_width, (f"{_LINK}/link widths/current link width",)),
    ("pcie_replays", parse_int, ("pci/replay counter",)),
    ("ecc_mode", parse_bool, ("ecc mode/current ecc",)),
    ("retired_pages_sbe", parse_int,
     ("retired pages/multiple single bit retirement/retired count",)),
    ("retired_pages_dbe", parse_int, ("retired pages/double bit retirement/retired count",)),
    ("remapped_correctable", parse_int, ("remapped rows/remapped row corr",)),
    ("remapped_uncorrectable", parse_int, ("remapped rows/remapped row unc",)),
    ("remapping_pending", parse_bool, ("remapped rows/remapped row pending",)),
    ("remapping_failure", parse_bool, ("remapped rows/remapped row failure",)),
    ("temperature_c", parse_int, ("temperature/gpu temp",)),
    ("temp_shutdown_c", parse_int, ("temperature/gpu temp max threshold",)),
    ("temp_slowdown_c", parse_int, ("temperature/gpu temp slow threshold",)),
    ("power_draw_w", parse_float, (
        "gpu power readings/power draw", "power readings/power draw",
        "gpu power readings/instant power draw", "gpu power readings/average power draw",
    )),
    ("power_limit_w", parse_float, (
        "gpu power readings/current power limit", "power readings/current power limit",
        "gpu power readings/enforced power limit", "power readings/enforced power limit",
        "power readings/power limit",
    )),
    ("utilization_gpu_pct", parse_int, ("utilization/gpu util",)),
    ("memory_total_mib", parse_int, ("fb memory usage/total",)),
    ("memory_used_mib", parse_int, ("fb memory usage/used",)),
    ("performance_state", parse_str, ("performance state",)),
    ("fabric_state", parse_str, ("fabric/state",)),
    ("fabric_status", parse_str, ("fabric/status",)),
    ("fabric_clique_id", parse_str, ("fabric/cliqueid",)),
    ("fabric_cluster_uuid", parse_str, ("fabric/clusteruuid",)),
)


def parse_nvsmi_xml(text: str) -> SmiReport:
    """Parse ``nvidia-smi -q -x`` output into an :class:`SmiReport`.

    Empty input gives an empty report. An nvidia-smi error message printed
    instead of XML gives ``format="error"``. Truncated or malformed XML, XML
    of another program and entity declarations raise :class:`ParseError`.
    """
    if not text or not text.strip():
        return SmiReport(format="xml")
    errors = scan_smi_errors(text)
    start = _START_RE.search(text)
    if start is None:
        if errors:
            return SmiReport(format="error", errors=errors)
        raise ParseError("not nvidia-smi XML: no <nvidia_smi_log> document found")
    body = text[start.start():]
    if _ENTITY_RE.search(body):
        raise ParseError("refusing nvidia-smi XML with <!ENTITY> declarations")
    body = _DOCTYPE_RE.sub("", body, count=1)
    end = body.rfind(f"</{_ROOT_TAG}>")
    if end >= 0:
        body = body[: end + len(_ROOT_TAG) + 3]
    try:
        root = ET.fromstring(body, parser=ET.XMLParser())
    except (ET.ParseError, ValueError, UnicodeError) as exc:
        if errors:
            return SmiReport(format="error", errors=errors)
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise ParseError(f"truncated or malformed nvidia-smi XML: {detail}") from None
    if root.tag != _ROOT_TAG:
        raise ParseError(f"not nvidia-smi XML: root element is <{str(root.tag)[:40]}>")
    report = SmiReport(
        format="xml",
        driver_version=parse_str(root.findtext("driver_version")),
        cuda_version=parse_str(root.findtext("cuda_version")),
        kmd_version=parse_str(root.findtext("kmd_version")),
        attached_gpus=parse_int(root.findtext("attached_gpus")),
        timestamp=parse_str(root.findtext("timestamp")),
        errors=errors,
    )
    if report.cuda_version is None:
        report.cuda_version = parse_str(root.findtext("cuda_umd_version"))
    for index, elem in enumerate(root.findall("gpu")):
        report.gpus.append(_parse_gpu(index, elem))
    return report


def _parse_gpu(index: int, elem: ET.Element) -> SmiGpu:
    """One ``<gpu>`` element."""
    gpu = SmiGpu(index=index, pci_bus_id=normalize_bus_id(elem.get("id")))
    values: dict[str, str] = {}
    for path, value in _flatten(elem):
        values[norm_key(path)] = value
        gpu.raw[path] = value
    finish_gpu(gpu, values, _SPECS)
    if gpu.pci_bus_id is None:
        gpu.pci_bus_id = normalize_bus_id(parse_str(values.get("pci/pci bus id")))
    for proc in elem.iterfind("processes/process_info"):
        gpu.processes.append(SmiProcess(
            gpu_index=index,
            pid=parse_int(proc.findtext("pid")),
            type=parse_str(proc.findtext("type")),
            name=parse_str(proc.findtext("process_name")),
            used_memory_mib=parse_int(proc.findtext("used_memory")),
            gpu_instance_id=parse_str(proc.findtext("gpu_instance_id")),
            compute_instance_id=parse_str(proc.findtext("compute_instance_id")),
        ))
    return gpu


def _flatten(elem: ET.Element) -> list[tuple[str, str]]:
    """Leaf elements below ``elem`` as ``("a/b/c", text)`` pairs, iteratively (no recursion)."""
    out: list[tuple[str, str]] = []
    todo: list[tuple[str, ET.Element]] = [(str(c.tag), c) for c in reversed(list(elem))]
    while todo:
        path, node = todo.pop()
        if path.split("/", 1)[0] in _SKIP_RAW:
            continue
        children = list(node)
        if children:
            todo.extend((f"{path}/{c.tag}", c) for c in reversed(children))
        else:
            out.append((path, (node.text or "").strip()))
    return out


# --- recognising it in a paste -------------------------------------------------------
_XML_END = re.compile(r"</nvidia_smi_log>")


_START_GATE = Gate(literals=("<nvidia_smi_log", "<?xml"))  # what the start line holds


@gated_by(_START_GATE)
def claim_nvsmi_xml(doc: PasteDoc) -> None:
    """The first ``nvidia_smi_log`` document (from its ``<?xml`` line when there is one)."""
    if not _START_GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if doc.free(i) and ("<nvidia_smi_log" in ln or (
                "<?xml" in ln and any("nvidia_smi_log" in x for x in doc.lines[i + 1:i + 4]))):
            end = doc.extend(i, lambda s: not _XML_END.search(s))
            doc.claim("nvidia_smi_q_xml", i, min(end + 1, len(doc.lines)))
            return
