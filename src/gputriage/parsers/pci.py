"""PCI functions from the ``pci_devices`` sysfs tree (``/sys/bus/pci/devices``).

The tree holds ``<address>/<attribute>`` files (``vendor``, ``class``,
``numa_node``, link speed and width, AER counters), ``<address>/driver``
links whose target's basename is the bound driver, and ``<address>`` links
themselves: ``../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0``, the
device's place in the tree (its parents are the addresses before it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.parsers.driver import split_tree
from gputriage.text.fields import (
    normalize_bus_id,
    split_lines,
    strict_float,
    strict_hex,
    strict_int,
)

__all__ = ["PciFunction", "parse_aer", "parse_link_speed", "parse_pci_tree", "sysfs_parent"]

NVIDIA_VENDOR = 0x10DE
MELLANOX_VENDOR = 0x15B3
_GPU_CLASSES = (0x0300, 0x0302)  # VGA compatible, 3D controller
_BRIDGE_OTHER = 0x0680  # NVSwitch
_PCI_BRIDGE = 0x0604  # PCI-to-PCI bridge: a root port or a switch port
_INFINIBAND = 0x0207
_NETWORK_BASE = 0x02

_ADDRESS = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_SPEED = re.compile(r"^\s*([0-9]{1,4}(?:\.[0-9]{1,4})?)\s*GT/s")


def parse_link_speed(text: str | None) -> float | None:
    """``"32.0 GT/s PCIe"`` or ``"8 GT/s"`` -> GT/s as float; None when unknown."""
    if not text:
        return None
    m = _SPEED.match(text)
    return strict_float(m.group(1)) if m else None


def sysfs_parent(path: str | None) -> str | None:
    """The address of the bridge above a device, from its sysfs path
    (``.../pci0000:00/0000:00:01.0/0000:01:00.0`` -> ``0000:00:01.0``); None for a
    device on a root bus or an unknown path."""
    parts = [p for p in (path or "").strip().rstrip("/").split("/") if _ADDRESS.match(p)]
    return normalize_bus_id(parts[-2]) if len(parts) >= 2 else None


def parse_aer(text: str) -> dict[str, int]:
    """An ``aer_dev_*`` file (``Name count`` lines) -> {name: count}; bad lines skipped."""
    out: dict[str, int] = {}
    for line in split_lines(text):
        parts = line.split()
        count = strict_int(parts[1], signed=False) if len(parts) == 2 else None
        if count is not None:
            out[parts[0]] = count
    return out


@dataclass
class PciFunction:
    """One PCI function and the sysfs attributes gputriage reads."""

    address: str  # normalised, e.g. "0000:18:00.0"
    vendor: int | None = None
    device: int | None = None
    class_code: int | None = None  # 24-bit, e.g. 0x030200
    subsystem_vendor: int | None = None
    subsystem_device: int | None = None
    numa_node: int | None = None  # -1 as printed when the platform gives no affinity
    local_cpulist: str | None = None
    current_link_speed: str | None = None  # "32.0 GT/s PCIe"
    max_link_speed: str | None = None
    current_link_width: int | None = None
    max_link_width: int | None = None
    driver: str | None = None  # "nvidia", "mlx5_core", "vfio-pci", "nouveau"
    aer: dict[str, dict[str, int]] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)  # every attribute text / link target

    @property
    def is_nvidia(self) -> bool:
        """Vendor is NVIDIA (0x10de)."""
        return self.vendor == NVIDIA_VENDOR

    @property
    def is_gpu(self) -> bool:
        """An NVIDIA VGA or 3D controller (not its audio function, not an NVSwitch)."""
        return self.is_nvidia and self.class_code is not None and (
            self.class_code >> 8) in _GPU_CLASSES

    @property
    def is_nvswitch(self) -> bool:
        """An NVIDIA 'other bridge' function: an NVSwitch."""
        return self.is_nvidia and self.class_code is not None and (
            self.class_code >> 8) == _BRIDGE_OTHER

    @property
    def is_bridge(self) -> bool:
        """A PCI-to-PCI bridge (a PCIe root port or switch port)."""
        return self.class_code is not None and (self.class_code >> 8) == _PCI_BRIDGE

    @property
    def is_network(self) -> bool:
        """Any network controller (Ethernet, InfiniBand, ...)."""
        return self.class_code is not None and (self.class_code >> 16) == _NETWORK_BASE

    @property
    def is_infiniband(self) -> bool:
        """An InfiniBand controller, or a Mellanox network function."""
        if self.class_code is None:
            return False
        return (self.class_code >> 8) == _INFINIBAND or (
            self.vendor == MELLANOX_VENDOR and self.is_network)

    def link_speed_gts(self, which: str = "current") -> float | None:
        """Link speed in GT/s: ``which`` is "current" or "max"."""
        if which not in ("current", "max"):
            raise ValueError(f"which must be 'current' or 'max', not {which!r}")
        return parse_link_speed(self.current_link_speed if which == "current"
                                else self.max_link_speed)


def _hex(text: str | None) -> int | None:
    if not text:
        return None
    v = text.strip()
    return strict_hex(v) if len(v.lower().removeprefix("0x")) <= 8 else None


def _dec(text: str | None) -> int | None:
    if text is None:
        return None
    v = text.strip()
    return strict_int(v, lo=-999_999_999, hi=999_999_999) if not v.startswith("+") else None


def _text(text: str | None) -> str | None:
    if text is None:
        return None
    v = text.strip()
    return v or None


def _build(address: str, attrs: dict[str, str], links: dict[str, str]) -> PciFunction:
    fn = PciFunction(address=address, raw={k: v.strip() for k, v in {**attrs, **links}.items()})
    fn.vendor = _hex(attrs.get("vendor"))
    fn.device = _hex(attrs.get("device"))
    fn.class_code = _hex(attrs.get("class"))
    fn.subsystem_vendor = _hex(attrs.get("subsystem_vendor"))
    fn.subsystem_device = _hex(attrs.get("subsystem_device"))
    fn.numa_node = _dec(attrs.get("numa_node"))
    fn.local_cpulist = _text(attrs.get("local_cpulist"))
    fn.current_link_speed = _text(attrs.get("current_link_speed"))
    fn.max_link_speed = _text(attrs.get("max_link_speed"))
    fn.current_link_width = _dec(attrs.get("current_link_width"))
    fn.max_link_width = _dec(attrs.get("max_link_width"))
    target = links.get("driver")
    if target is not None:
        fn.driver = target.rstrip("/").rpartition("/")[2] or None
    for name, text in attrs.items():
        if name.startswith("aer_dev_"):
            fn.aer[name] = parse_aer(text)
    return fn


def parse_pci_tree(tree: object) -> list[PciFunction]:
    """Parse the ``pci_devices`` tree into functions sorted by address.

    Entries whose first path component is not a full sysfs PCI address
    (``dddd:bb:dd.f``) are ignored; a device's own link is kept as
    ``raw["sysfs_path"]``;
    raises ParseError only when the document is not a tree.
    """
    files, links, _errors = split_tree(tree)
    attrs: dict[str, dict[str, str]] = {}
    link_attrs: dict[str, dict[str, str]] = {}
    for source, dest in ((files, attrs), (links, link_attrs)):
        for rel, value in source.items():
            head, sep, attr = rel.strip("/").partition("/")
            if not sep and source is links and _ADDRESS.match(head):
                sep, attr = "/", "sysfs_path"  # the device's own link: its place in the tree
            address = normalize_bus_id(head) if sep and attr and _ADDRESS.match(head) else None
            if address is None:
                continue
            dest.setdefault(address, {})[attr] = value
    addresses = sorted(set(attrs) | set(link_attrs))
    return [_build(a, attrs.get(a, {}), link_attrs.get(a, {})) for a in addresses]
