"""Shared result types and helpers for the nvidia-smi parsers.

Four parsers fill the same :class:`SmiReport`: ``nvsmi_xml`` (``nvidia-smi
-q -x``), ``nvsmi_text`` (``nvidia-smi -q`` / ``-a``), ``nvsmi_table``
(plain ``nvidia-smi`` and ``nvidia-smi -L``) and ``nvsmi_csv`` (the
``--query-*`` CSV outputs). When nvidia-smi prints an error
message instead of its output, :func:`scan_smi_errors` recognises it and the
parsers report it in ``SmiReport.errors`` rather than raising.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gputriage.text.fields import (
    normalize_bus_id,
    parse_bool,
    parse_int,
    split_lines,
    strict_float,
    strict_int,
)

__all__ = [
    "MigDevice",
    "SmiError",
    "SmiGpu",
    "SmiProcess",
    "SmiReport",
    "FieldSpec",
    "clock_reason_key",
    "ecc_counts",
    "finish_gpu",
    "norm_key",
    "parse_str",
    "parse_active",
    "parse_float",
    "parse_int",
    "parse_link_width",
    "scan_smi_errors",
]


@dataclass
class SmiError:
    """An nvidia-smi / NVML error message found in place of (or among) the output.

    ``kind`` is one of: driver-communication, no-devices, device-handle,
    version-mismatch, nvml-init, gpu-lost, insufficient-permissions, inforom-corrupted
    (nvidia-smi's warning, with which it exits 14), other.
    """

    kind: str
    line: str
    bus_id: str | None = None
    reason: str | None = None
    nvml_library_version: str | None = None


@dataclass
class SmiProcess:
    """A process using a GPU, as nvidia-smi lists it."""

    gpu_index: int | None
    pid: int | None
    type: str | None
    name: str | None
    used_memory_mib: int | None
    gpu_instance_id: str | None = None
    compute_instance_id: str | None = None
    gpu_uuid: str | None = None  # the GPU as a CSV query names it (no index there)
    gpu_bus_id: str | None = None


@dataclass
class SmiGpu:
    """One GPU as reported by nvidia-smi; every field but ``index`` may be unknown."""

    index: int
    pci_bus_id: str | None
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    vbios: str | None = None
    minor_number: int | None = None
    persistence_mode: bool | None = None
    product_brand: str | None = None
    architecture: str | None = None
    virtualization_mode: str | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None
    ecc_mode: bool | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    ecc_volatile_corrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remapping_pending: bool | None = None
    remapping_failure: bool | None = None
    remap_histogram: dict[str, int] = field(default_factory=dict)  # max/high/partial/low/none
    temperature_c: int | None = None
    temp_slowdown_c: int | None = None
    temp_shutdown_c: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    utilization_gpu_pct: int | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    performance_state: str | None = None
    clock_event_reasons: dict[str, bool] = field(default_factory=dict)
    fabric_state: str | None = None
    fabric_status: str | None = None
    fabric_clique_id: str | None = None  # the NVLink partition ("0" outside multi-node NVLink)
    fabric_cluster_uuid: str | None = None
    mig_mode_current: str | None = None
    recovery_action: str | None = None
    processes: list[SmiProcess] = field(default_factory=list)
    raw: dict[str, str] = field(default_factory=dict)


@dataclass
class MigDevice:
    """One MIG instance as an nvidia-smi listing shows it: a row of the table's MIG
    devices box, an ``nvidia-smi -L`` MIG line, or a row of ``nvidia-smi mig -lgi`` /
    ``-lci``; each field None where that listing does not print it."""

    gpu_index: int | None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    device: int | None = None  # the MIG device number (the table's "MIG Dev", -L's "Device N")
    profile: str | None = None  # "1g.10gb"
    profile_id: int | None = None
    placement: str | None = None  # "start:size" in memory slices
    uuid: str | None = None
    line: str = ""  # the row as printed


@dataclass
class SmiReport:
    """What one nvidia-smi output says: header facts, GPUs, processes and errors.

    ``format`` is "xml", "text", "table", "list" (``-L``), "csv" (``--query-*``)
    or "error" (only an error message was printed). ``processes`` holds the table's Processes box;
    the XML and text parsers attach processes to each GPU instead.
    """

    format: str
    driver_version: str | None = None
    cuda_version: str | None = None
    kmd_version: str | None = None
    attached_gpus: int | None = None
    timestamp: str | None = None
    gpus: list[SmiGpu] = field(default_factory=list)
    errors: list[SmiError] = field(default_factory=list)
    processes: list[SmiProcess] = field(default_factory=list)
    #: the MIG instances a listing shows (the table's MIG devices box, -L, mig -lgi/-lci);
    #: None when the output lists none ([] when it says there are none)
    mig_devices: list[MigDevice] | None = None
    mig_listing: str | None = None  # "table", "list", "gpu-instances", "compute-instances"
    mig_enabled: bool | None = None  # False: "No MIG-enabled devices found"
    mig_notes: list[str] = field(default_factory=list)  # MIG messages as printed
    #: sections of ``-q`` text pasted without their ``GPU <bus id>`` header: what they
    #: say is read, but not which GPU they describe
    headerless: bool = False


# --- value helpers -------------------------------------------------------------------------

_FLOAT_RE = re.compile(r"^\s*(-?[0-9]{1,18}(?![0-9])(?:\.[0-9]{1,18})?)")


def parse_float(raw: str | None) -> float | None:
    """A leading decimal number (``"74.58 W"`` -> 74.58), or None for N/A / garbage."""
    m = _FLOAT_RE.match(raw) if raw is not None else None
    return strict_float(m.group(1)) if m else None


def parse_link_width(raw: str | None) -> int | None:
    """PCIe link width ``"16x"`` / ``"x16"`` -> 16; None when unknown."""
    if raw is None:
        return None
    m = re.match(r"^\s*x?([0-9]{1,6})\s*x?\s*$", raw, re.IGNORECASE)
    return strict_int(m.group(1)) if m else None


def parse_active(raw: str | None) -> bool | None:
    """``Active`` -> True, ``Not Active`` -> False, anything else -> None."""
    if raw is None:
        return None
    v = " ".join(raw.lower().split())
    if v == "active":
        return True
    if v in {"not active", "inactive"}:
        return False
    return None


_REASON_ALIASES = {
    "idle": "gpu_idle",
    "display_clocks_setting": "display_clock_setting",
    "applications_clock_setting": "applications_clocks_setting",
}


def clock_reason_key(name: str) -> str:
    """Normalise a clock event/throttle reason name to snake_case.

    ``"Idle"``, ``clocks_throttle_reason_gpu_idle`` and
    ``clocks_event_reason_gpu_idle`` all give ``"gpu_idle"``.
    """
    key = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    for prefix in ("clocks_throttle_reason_", "clocks_event_reason_", "clocks_event_reasons_"):
        if key.startswith(prefix):
            key = key[len(prefix):]
            break
    return _REASON_ALIASES.get(key, key)


def norm_key(key: str) -> str:
    """Lower-case a key or ``a/b`` path and turn ``_``/``-`` runs into single spaces."""
    return "/".join(" ".join(re.sub(r"[_\-]+", " ", part.lower()).split())
                    for part in key.split("/"))


def parse_str(raw: str | None) -> str | None:
    """A stripped string; None for empty, ``N/A`` or ``[N/A]``."""
    if raw is None:
        return None
    v = raw.strip()
    return None if v in {"", "N/A", "[N/A]", "n/a"} else v


def ecc_counts(values: Mapping[str, str]) -> tuple[int | None, int | None]:
    """(corrected, uncorrected) from the counters of one ECC scope (volatile/aggregate).

    ``values`` maps the key path below the scope to its value. Both schemas
    are understood: the old per-unit ``single bit``/``double bit`` blocks
    (their ``total`` is used) and the newer SRAM/DRAM counters, which are
    summed. A side is None when no counter of that side is a number.
    """
    norm = {norm_key(k): v for k, v in values.items()}
    corrected: int | None = None
    uncorrected: int | None = None
    for side in ("single bit", "double bit"):
        total = norm.get(f"{side}/total")
        if total is None:
            continue
        n = parse_int(total)
        if side == "single bit":
            corrected = n
        else:
            uncorrected = n
    if corrected is None and uncorrected is None:
        for key, raw in norm.items():
            last = key.rsplit("/", 1)[-1]
            n = parse_int(raw)
            if n is None or "/" in key:
                continue
            if "uncorrectable" in last:
                uncorrected = (uncorrected or 0) + n
            elif "correctable" in last:
                corrected = (corrected or 0) + n
    return corrected, uncorrected


#: (field name, converter, candidate normalised paths; the first usable one wins)
FieldSpec = tuple[str, Callable[[str], object], tuple[str, ...]]


def finish_gpu(gpu: SmiGpu, values: Mapping[str, str], specs: Iterable[FieldSpec]) -> int:
    """Fill ``gpu`` from normalised ``path -> value`` pairs; return how many fields were set.

    Besides the plain ``specs``, this derives the ECC counters (both schemas),
    the retired-pages pending flag and the clock event / throttle reasons.
    """
    count = 0
    for name, conv, paths in specs:
        for path in paths:
            if path in values:
                value = conv(values[path])
                if value is not None:
                    setattr(gpu, name, value)
                    count += 1
                    break
    for scope in ("volatile", "aggregate"):
        prefix = f"ecc errors/{scope}/"
        sub = {k[len(prefix):]: v for k, v in values.items() if k.startswith(prefix)}
        if not sub:
            continue
        corrected, uncorrected = ecc_counts(sub)
        setattr(gpu, f"ecc_{scope}_corrected", corrected)
        setattr(gpu, f"ecc_{scope}_uncorrected", uncorrected)
        count += 1
    pending = [parse_bool(values.get(f"retired pages/{k}"))
               for k in ("pending page blacklist", "pending page retirement", "pending blacklist",
                         "pending retirement", "pending")]
    if any(p is not None for p in pending):
        gpu.retired_pages_pending = any(p for p in pending)
        count += 1
    count += _remap_histogram(gpu, values)
    for key, raw in values.items():
        section, _, rest = key.partition("/")
        if section in {"clocks event reasons", "clocks throttle reasons"} and rest:
            active = parse_active(raw)
            if active is not None:
                gpu.clock_event_reasons[clock_reason_key(rest.rsplit("/", 1)[-1])] = active
                count += 1
    return count


_HISTOGRAM_BINS = ("max", "high", "partial", "low", "none")


def _remap_histogram(gpu: SmiGpu, values: Mapping[str, str]) -> int:
    """Banks per remap-availability bin (``-q``: ``Bank Remap Availability Histogram/Low``,
    XML: ``remapped_row_histogram/row_remap_histogram_low``); how many bins were read."""
    found = 0
    for key, raw in values.items():
        if not key.startswith("remapped rows/") or "histogram/" not in key:
            continue
        words = key.rsplit("/", 1)[-1].split()
        n = parse_int(raw)
        if words and words[-1] in _HISTOGRAM_BINS and n is not None:
            gpu.remap_histogram[words[-1]] = n
            found += 1
    return found


# --- error messages ------------------------------------------------------------------------

_BUS = r"(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
# "for GPU 0000:0B:00.0:", "for GPU0000:07:00.0:", and (newer) "for GPU0: 0000:C1:00.0:"
_HANDLE_RE = re.compile(
    rf"Unable to determine the device handle for (?:GPU|gpu)\s*(?:[0-9]{{1,3}}:\s+)?(?P<bus>{_BUS})"
    r"\s*:\s*(?P<reason>.*)$"
)
_NVML_INIT_RE = re.compile(r"Failed to initialize NVML:\s*(?P<reason>.*)$")
_LIBVERSION_RE = re.compile(r"NVML library version:\s*(?P<ver>\S+)")
_GPU_BUS_RE = re.compile(rf"GPU\s*(?P<bus>{_BUS})")
# printed above (nvidia-smi -q) or below (the table) the output; nvidia-smi then exits 14
_INFOROM_RE = re.compile(rf"infoROM is corrupted at gpu\s*(?P<bus>{_BUS})?", re.IGNORECASE)


def _clean_reason(reason: str) -> str | None:
    """The reason text without trailing dots; None when empty."""
    text = reason.strip().rstrip(".").strip()
    return text or None


def _kind_for_reason(reason: str | None, default: str) -> str:
    """A more specific error kind implied by the reason text, else ``default``."""
    low = (reason or "").lower()
    if "gpu is lost" in low:
        return "gpu-lost"
    if "insufficient permissions" in low:
        return "insufficient-permissions"
    if "version mismatch" in low:
        return "version-mismatch"
    return default


def _match_line(line: str) -> SmiError | None:
    """The error one line reports, or None."""
    stripped = line.strip()
    m = _HANDLE_RE.search(stripped)
    if m:
        reason = _clean_reason(m.group("reason"))
        if reason and "gpu is lost" in reason.lower():
            reason = "GPU is lost"
        return SmiError(_kind_for_reason(reason, "device-handle"), stripped,
                        normalize_bus_id(m.group("bus")), reason)
    m = _NVML_INIT_RE.search(stripped)
    if m:
        reason = _clean_reason(m.group("reason"))
        return SmiError(_kind_for_reason(reason, "nvml-init"), stripped, None, reason)
    m = _INFOROM_RE.search(stripped)
    if m:
        return SmiError("inforom-corrupted", stripped,
                        normalize_bus_id(m.group("bus")) if m.group("bus") else None,
                        "infoROM is corrupted")
    low = stripped.lower()
    if "nvidia-smi has failed because it couldn't communicate with the nvidia driver" in low:
        return SmiError("driver-communication", stripped, None,
                        "couldn't communicate with the NVIDIA driver")
    if "nvidia-smi has failed because" in low:
        idx = low.index("because")
        return SmiError("other", stripped, None, _clean_reason(stripped[idx + 7:]))
    if re.search(r"\bno devices (?:were )?found\b", low):
        return SmiError("no-devices", stripped, None, "No devices were found")
    if "couldn't find libnvidia-ml.so" in low:
        return SmiError("nvml-init", stripped, None, "could not load NVML library")
    if "gpu is lost" in low:
        bm = _GPU_BUS_RE.search(stripped)
        return SmiError("gpu-lost", stripped, normalize_bus_id(bm.group("bus")) if bm else None,
                        "GPU is lost")
    return None


def scan_smi_errors(text: str | Iterable[str]) -> list[SmiError]:
    """Every nvidia-smi / NVML error message in ``text``, in order of appearance.

    Recognises the driver-communication failure, "No devices were found",
    "Unable to determine the device handle for GPU ...: <reason>" (with or
    without a space before the bus id), "Failed to initialize NVML: <reason>"
    (a following "NVML library version: X" line is folded into a version
    mismatch) and "GPU is lost". Never raises.
    """
    lines = split_lines(text) if isinstance(text, str) else list(text)
    errors: list[SmiError] = []
    for raw in lines:
        line = raw.replace("\r", "")
        m = _LIBVERSION_RE.search(line)
        if m and errors and errors[-1].kind == "version-mismatch" \
                and errors[-1].nvml_library_version is None:
            prev = errors[-1]
            prev.nvml_library_version = m.group("ver")
            prev.line = f"{prev.line}\n{line.strip()}"
            continue
        err = _match_line(line)
        if err is not None:
            errors.append(err)
    return errors
