"""The PCIe path of each GPU and NIC, hop by hop, from the root port down.

A PCIe link joins a downstream-facing port (a root port, or a switch's downstream port)
to the upstream-facing port of what sits below it (a switch's upstream port, or the
device itself); inside a switch the upstream and downstream ports share a virtual bus,
not a link. Each link runs at the speed and width both its ends can do, so it is judged
against the lower of its two ends' capabilities (LnkCap), never against one end alone:
a Gen5 NIC behind a Gen4 root port runs, correctly, at Gen4.

Parentage comes from ``lspci -tv`` (the tree), from sysfs (a device's real path under
``/sys/devices/pci0000:00/...``), or from a pasted ``lspci -vvv`` alone (a bridge's
``Bus: secondary=`` number is the bus of what hangs below it). Link states come from
sysfs or ``lspci -vvv``. Registers the fact ``pcie_paths``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputriage.facts.pcie import PcieLink, link_lines
from gputriage.facts.table import FactReader, FactTable, Missing
from gputriage.parsers.lspci_tree import TreeNode
from gputriage.parsers.pci import PciFunction, sysfs_parent
from gputriage.text.fields import split_lines

FACTS = FactTable()

__all__ = ["Hop", "PciePaths", "PortEnd", "pcie_paths"]

_DOWNSTREAM_FACING = ("Root Port", "Downstream Port")
_UPSTREAM_FACING = ("Upstream Port", "Endpoint", "Legacy Endpoint")
#: vendors of the virtual ports a hypervisor gives its guests (QEMU/Red Hat, VMware,
#: Microsoft Hyper-V): their links are emulated
_VIRTUAL_VENDORS = frozenset({0x1B36, 0x1AF4, 0x15AD, 0x1414})
_MAX_DEPTH = 16  # deeper than any real PCIe hierarchy: a loop guard


@dataclass(frozen=True)
class PortEnd:
    """One end of a link: its address, role, capability and state, and the lines that
    show them."""

    address: str
    role: str  # "root port", "switch downstream port", "switch upstream port", "GPU", ...
    name: str = ""
    cur_gts: float | None = None
    max_gts: float | None = None
    cur_width: int | None = None
    max_width: int | None = None
    source: str | None = None
    lines: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``switch upstream port 0000:01:00.0``."""
        return f"{self.role} {self.address}"


def _lower(a: float | None, b: float | None) -> float | None:
    return min(a, b) if a is not None and b is not None else None


@dataclass
class Hop:
    """The link between a downstream-facing port (``upper``) and what sits below it
    (``lower``), with the GPUs and NICs whose traffic crosses it."""

    upper: PortEnd
    lower: PortEnd
    below: list[PcieLink] = field(default_factory=list)
    tree_lines: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``root port 0000:00:01.0 -> switch upstream port 0000:01:00.0``."""
        return f"{self.upper.label} -> {self.lower.label}"

    @property
    def cur_gts(self) -> float | None:
        """The link's speed: both ends report it; the lower end's first."""
        return self.lower.cur_gts if self.lower.cur_gts is not None else self.upper.cur_gts

    @property
    def cur_width(self) -> int | None:
        return self.lower.cur_width if self.lower.cur_width is not None else self.upper.cur_width

    @property
    def cap_gts(self) -> float | None:
        """The fastest both ends can do; None unless both capabilities are known."""
        return _lower(self.upper.max_gts, self.lower.max_gts)

    @property
    def cap_width(self) -> int | None:
        cap = _lower(self.upper.max_width, self.lower.max_width)
        return int(cap) if cap is not None else None

    @property
    def endpoint(self) -> bool:
        """The last hop of a path: the link of a GPU or NIC itself."""
        return any(link.bus_id == self.lower.address for link in self.below)

    @property
    def slow(self) -> bool:
        """Trained below the speed both ends support (a link at x0 is down, not slow)."""
        cur, cap = self.cur_gts, self.cap_gts
        return cur is not None and cap is not None and cur < cap and self.cur_width != 0

    @property
    def narrow(self) -> bool:
        """Trained with fewer lanes than both ends support (x0: a link that is down,
        not a narrow one)."""
        cur, cap = self.cur_width, self.cap_width
        return cur is not None and cap is not None and 0 < cur < cap


@dataclass
class PciePaths:
    """Every hop on the paths of the GPUs and NICs, each once, from the root down;
    ``paths`` maps a GPU's or NIC's bus id to its hops, top first."""

    hops: list[Hop]
    paths: dict[str, list[Hop]]
    virtual: bool = False  # behind a hypervisor's emulated ports
    topology: str = ""  # where parentage came from: "lspci_tree", "pci_devices", "lspci"

    def port_above(self, bus_id: str) -> Hop | None:
        """The hop that ends at a GPU or NIC (its own link), when known."""
        hops = self.paths.get(bus_id) or []
        return hops[-1] if hops and hops[-1].lower.address == bus_id else None


# --- parentage ---------------------------------------------------------------------

def _parents_from_buses(functions: list[PciFunction]) -> dict[str, str]:
    """A pasted ``lspci -vvv`` alone: the bridge whose secondary bus a function sits on."""
    bridge_of_bus: dict[str, str] = {}
    for f in functions:
        sec = f.raw.get("secondary_bus")
        if sec and f.address:
            bridge_of_bus[f"{f.address[:4]}:{sec}"] = f.address
    parents: dict[str, str] = {}
    for f in functions:
        bridge = bridge_of_bus.get(f.address[:7]) if f.address else None
        if bridge and bridge != f.address:
            parents[f.address] = bridge
    return parents


def _parentage(functions: list[PciFunction], tree: list[TreeNode]) -> tuple[dict[str, str],
                                                                             str]:
    """(address -> bridge above it, where that came from): the tree first, then sysfs
    paths, then the bus numbers of a pasted lspci -vvv, each filling what the one before
    did not place."""
    found = [("lspci_tree", {n.address: n.parent for n in tree if n.parent}),
             ("pci_devices", {f.address: p for f in functions
                              if (p := sysfs_parent(f.raw.get("sysfs_path")))}),
             ("lspci", _parents_from_buses(functions))]
    parents: dict[str, str] = {}
    for _, placed in reversed(found):
        parents.update(placed)
    return parents, next((name for name, placed in found if placed), "")


def _downstream_facing(address: str, functions: dict[str, PciFunction],
                       parents: dict[str, str], depth: int = 0) -> bool:
    """Whether a bridge faces down (a root port or a switch's downstream port): said by
    its PCI Express capability when lspci printed it, else by its place: a bridge on a
    root bus is a root port, below a downstream-facing port sits an upstream port, and
    below that the switch's downstream ports."""
    f = functions.get(address)
    kind = f.raw.get("express_type") if f is not None else None
    if kind in _DOWNSTREAM_FACING:
        return True
    if kind in _UPSTREAM_FACING:
        return False
    parent = parents.get(address)
    if parent is None or depth > _MAX_DEPTH:
        return True
    return not _downstream_facing(parent, functions, parents, depth + 1)


# --- the ends of a link --------------------------------------------------------------

def _role(f: PciFunction | None, downstream: bool, top: bool, link: PcieLink | None) -> str:
    if link is not None:
        return {"gpu": "GPU", "nic": "NIC"}.get(link.kind, "device")
    if f is not None and not f.is_bridge and f.class_code is not None:
        return "device"
    if downstream:
        return "root port" if top else "switch downstream port"
    return "switch upstream port"


def _end(address: str, f: PciFunction | None, role: str, source: str, text: list[str],
         link: PcieLink | None) -> PortEnd:
    name = (f.raw.get("description") if f is not None else None) or (link.name if link else "")
    if link is not None and link.cur_gts is not None:
        # a GPU's own link: nvidia-smi's reading when it has one (the load is judged there)
        return PortEnd(address, role, name or "", link.cur_gts, link.max_gts, link.cur_width,
                       link.max_width, source,
                       tuple(ln for lines in link.evidence.values() for ln in lines))
    if f is None:
        return PortEnd(address, role, name or "")
    return PortEnd(address, role, name or "", f.link_speed_gts("current"),
                   f.link_speed_gts("max"), f.current_link_width, f.max_link_width, source,
                   tuple(link_lines(f, source, text)))


def _tree_lines(tree: dict[str, TreeNode], *addresses: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(tree[a].line for a in addresses if a in tree and tree[a].line))


def _virtual(functions: dict[str, PciFunction], tree: list[TreeNode],
             links: list[PcieLink]) -> bool:
    if any(link.is_virtualized for link in links):
        return True
    vendors = {f.vendor for f in functions.values() if f.is_bridge} | {
        n.vendor for n in tree if n.is_bridge}
    names = " ".join(n.description for n in tree if n.is_bridge) + " ".join(
        f.raw.get("description", "") for f in functions.values() if f.is_bridge)
    return bool(vendors & _VIRTUAL_VENDORS) or "QEMU" in names


@FACTS.fact("pcie_paths", sources=("lspci_tree",))
def pcie_paths(facts: FactReader) -> PciePaths:
    """The hops on each GPU's and NIC's PCIe path, each with both ends' capabilities
    and the link's state (no hop when the inputs give no parentage)."""
    all_links: list[PcieLink] | None = facts.maybe("pcie_links")
    links = [x for x in all_links or [] if x.bus_id]
    functions: list[PciFunction] = facts.maybe("pci", []) or []
    source: str = facts.maybe("pci_source", "pci_devices")
    try:
        tree: list[TreeNode] = facts.get("lspci_tree") or []
    except Missing:
        tree = []
    if all_links is None and not tree:
        raise Missing("no GPU or NIC PCIe link to walk a path from (sysfs pci_devices, "
                      "lspci or nvidia-smi)")
    by_address = {f.address: f for f in functions if f.address}
    parents, topology = _parentage(functions, tree)
    tree_by_address = {n.address: n for n in tree}
    text = [] if source == "pci_devices" else split_lines(
        "\n".join(facts.text(s) or "" for s in ("lspci_nvidia", "lspci_mellanox")))
    hops: dict[tuple[str, str], Hop] = {}
    paths: dict[str, list[Hop]] = {}
    link_at = {x.bus_id: x for x in links}
    for link in links:
        path: list[Hop] = []
        lower, seen = link.bus_id, {link.bus_id}
        while (upper := parents.get(lower)) is not None and upper not in seen:
            seen.add(upper)
            if _downstream_facing(upper, by_address, parents) and not (
                    lower in by_address and by_address[lower].is_bridge
                    and _downstream_facing(lower, by_address, parents)):
                key = (upper, lower)
                if key not in hops:
                    top = parents.get(upper) is None
                    lo = by_address.get(lower)
                    hops[key] = Hop(
                        _end(upper, by_address.get(upper),
                             _role(by_address.get(upper), True, top, None), source, text, None),
                        _end(lower, lo, _role(lo, False, False, link_at.get(lower)), source,
                             text, link_at.get(lower)),
                        tree_lines=_tree_lines(tree_by_address, upper, lower))
                hops[key].below.append(link)
                path.append(hops[key])
            lower = upper
        if path:
            paths[link.bus_id] = path[::-1]
    if tree and not any(h.upper.max_gts or h.lower.max_gts or h.cur_gts for h in hops.values()):
        raise Missing("the lspci -tv tree gives each device's path but not the state of its "
                      "links: add lspci -vvv (as root) or the sysfs pci_devices tree")
    return PciePaths(list(hops.values()), paths, _virtual(by_address, tree, links), topology)
