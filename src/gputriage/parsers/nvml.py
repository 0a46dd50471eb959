"""Parse the NVML readings document written by ``collect.nvml_probe``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from gputriage.errors import ParseError

_T = TypeVar("_T")

# NVML_ERROR_LIB_RM_VERSION_MISMATCH: the library and the kernel module differ.
NVML_VERSION_MISMATCH = 18


@dataclass
class NvmlDevice:
    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    serial: str | None = None
    minor_number: int | None = None
    persistence_mode: bool | None = None
    error: str | None = None


@dataclass
class NvmlReading:
    available: bool
    error: str | None = None
    error_code: int | None = None
    library_version: str | None = None  # "12.550.54.15"
    driver_version: str | None = None
    cuda_driver_version: int | None = None  # 12040
    device_count: int | None = None
    devices: list[NvmlDevice] = field(default_factory=list)

    @property
    def library_driver_version(self) -> str | None:
        """The driver release in the NVML library version ("12.550.54.15" -> "550.54.15")."""
        if not self.library_version:
            return None
        head, _, rest = self.library_version.partition(".")
        return rest if head.isdigit() and len(head) <= 2 and rest else self.library_version

    @property
    def version_mismatch(self) -> bool:
        text = (self.error or "").lower()
        return self.error_code == NVML_VERSION_MISMATCH or "version mismatch" in text


def _opt(doc: dict[str, object], key: str, kind: type[_T]) -> _T | None:
    """``doc[key]`` when it is a ``kind`` (JSON true is not an int here), else None."""
    value = doc.get(key)
    if isinstance(value, bool) and kind is not bool:
        return None
    return value if isinstance(value, kind) else None


def parse_nvml(doc: Any) -> NvmlReading:
    """The NVML JSON document (already decoded) -> NvmlReading."""
    if not isinstance(doc, dict) or "available" not in doc:
        raise ParseError("not a gputriage NVML readings document")
    devices = []
    for i, raw in enumerate(doc.get("devices") or []):
        if not isinstance(raw, dict):
            continue
        index = raw.get("index")
        devices.append(NvmlDevice(
            index=index if isinstance(index, int) else i,
            name=_opt(raw, "name", str), uuid=_opt(raw, "uuid", str),
            pci_bus_id=_opt(raw, "pci_bus_id", str), serial=_opt(raw, "serial", str),
            minor_number=_opt(raw, "minor_number", int),
            persistence_mode=_opt(raw, "persistence_mode", bool),
            error=_opt(raw, "error", str)))
    return NvmlReading(
        available=bool(doc.get("available")), error=_opt(doc, "error", str),
        error_code=_opt(doc, "error_code", int),
        library_version=_opt(doc, "library_version", str),
        driver_version=_opt(doc, "driver_version", str),
        cuda_driver_version=_opt(doc, "cuda_driver_version", int),
        device_count=_opt(doc, "device_count", int), devices=devices)
