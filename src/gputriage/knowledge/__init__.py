"""Knowledge as data: GPU model profiles here; the Xid and SXid catalogs in ``xid``.

Tables are CSV files in this package, written from the facts in the
project's reference material, loaded once on first use.
"""

from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass
from pathlib import Path

# the tables beside this module, read as files (importlib.resources is slow to import:
# start-up is what a command's latency is mostly made of)
_HERE = Path(__file__).parent


@dataclass(frozen=True)
class GpuProfile:
    """What a GPU model should look like."""

    model: str
    pci_device_ids: frozenset[int]
    name_pattern: re.Pattern[str]
    form: str  # sxm | pcie | superchip
    datacenter: bool
    memory_gb: int | None
    nvlink_gen: int | None
    nvlink_links: int
    pcie_gen: int | None
    baseboard_gpus: tuple[int, ...]  # GPU counts a baseboard of this model carries
    tdp_w: int | None = None  # maximum board power
    mem_bandwidth_tbs: float | None = None  # memory bandwidth, TB/s
    temp_shutdown_c: int | None = None  # limits as nvidia-smi printed them on this model
    temp_slowdown_c: int | None = None
    temp_max_operating_c: int | None = None
    temp_memory_max_c: int | None = None

    @property
    def temperature_limits_known(self) -> bool:
        """Whether the table records this model's slowdown temperature."""
        return self.temp_slowdown_c is not None


def csv_rows(name: str) -> list[dict[str, str]]:
    """The data rows of one CSV table of this package (``#`` lines are comments)."""
    text = (_HERE / name).read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return list(csv.DictReader(lines))


def _int(raw: str | None) -> int | None:
    """A non-negative integer cell; None when empty."""
    raw = (raw or "").strip()
    return int(raw) if raw.isdigit() else None


def _float(raw: str | None) -> float | None:
    """A decimal cell; None when empty or not a number."""
    try:
        return float((raw or "").strip())
    except ValueError:
        return None


@functools.cache
def gpu_profiles() -> tuple[GpuProfile, ...]:
    """Every GPU model profile of ``gpu_models.csv``, in table order."""
    profiles = []
    for row in csv_rows("gpu_models.csv"):
        profiles.append(GpuProfile(
            model=row["model"],
            pci_device_ids=frozenset(int(x, 16) for x in row["pci_device_ids"].split()),
            name_pattern=re.compile(row["name_pattern"], re.IGNORECASE),
            form=row["form"],
            datacenter=row["datacenter"] == "yes",
            memory_gb=_int(row["memory_gb"]),
            nvlink_gen=_int(row["nvlink_gen"]),
            nvlink_links=_int(row["nvlink_links"]) or 0,
            pcie_gen=_int(row["pcie_gen"]),
            baseboard_gpus=tuple(int(x) for x in row["baseboard_gpus"].split()),
            tdp_w=_int(row.get("tdp_w")),
            mem_bandwidth_tbs=_float(row.get("mem_bandwidth_tbs")),
            temp_shutdown_c=_int(row.get("temp_shutdown_c")),
            temp_slowdown_c=_int(row.get("temp_slowdown_c")),
            temp_max_operating_c=_int(row.get("temp_max_operating_c")),
            temp_memory_max_c=_int(row.get("temp_memory_max_c")),
        ))
    return tuple(profiles)


def gpu_profile(name: str | None = None, device_id: int | None = None) -> GpuProfile | None:
    """The profile of a GPU by PCI device id (preferred) or product name."""
    if device_id is not None:
        for p in gpu_profiles():
            if device_id in p.pci_device_ids:
                return p
    if name:
        for p in gpu_profiles():
            if p.name_pattern.search(name):
                return p
    return None


_DATACENTER_NAME = re.compile(
    r"Tesla|\b[ABHLT][0-9]{1,3}[A-Z]?\b|GH200|GB[23]00|B[123]00|RTX PRO 6000|DGX|HGX",
    re.IGNORECASE)


def is_datacenter(name: str | None, device_id: int | None = None) -> bool:
    """A datacenter part (persistence mode expected on), by profile or name."""
    profile = gpu_profile(name, device_id)
    if profile is not None:
        return profile.datacenter
    return bool(name and _DATACENTER_NAME.search(name) and "GeForce" not in name)
