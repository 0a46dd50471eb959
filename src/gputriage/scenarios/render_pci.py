"""``lspci -tv -nn`` of a simulated HGX host: each GPU and the HCA beside it below a PCIe
switch (root port, switch upstream port, one downstream port each), the NVSwitches on
the first root bus. The same places as the sysfs tree of
:func:`gputriage.scenarios.render_host.pci_devices`."""

from __future__ import annotations

from dataclasses import dataclass, field

from gputriage.scenarios.model import Host
from gputriage.scenarios.render_host import nic_root_port, switch_path

__all__ = ["lspci_tree"]

GPU_NAME = "NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330]"
NIC_NAME = "Mellanox Technologies MT2910 Family [ConnectX-7] [15b3:1021]"
NVSWITCH_NAME = "NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3]"
ROOT_PORT = "Intel Corporation Device [8086:352a]"


@dataclass
class _Node:
    """A function drawn in the tree: ``dd.f``, its buses when a bridge, its children."""

    slot: str
    description: str = ""
    buses: str | None = None  # "17" or "15-18"
    children: list[_Node] = field(default_factory=list)


def _draw_bus(children: list[_Node], single: str, fork: str) -> list[str]:
    """The functions of one bus, after the bridge (or root) that leads to it."""
    if len(children) == 1:
        first, *rest = _draw(children[0])
        return [single + first] + [" " * len(single) + line for line in rest]
    lines: list[str] = []
    pad = " " * len(fork)
    for i, child in enumerate(children):
        last = i == len(children) - 1
        first, *rest = _draw(child)
        lines.append((fork if i == 0 else pad) + ("\\-" if last else "+-") + first)
        lines += [pad + ("  " if last else "| ") + line for line in rest]
    return lines


def _draw(node: _Node) -> list[str]:
    head = node.slot + (f"-[{node.buses}]" if node.buses else "")
    if not node.children:
        return [head + ("--" if node.buses else f"  {node.description}")]
    first, *rest = _draw_bus(node.children, "----", "--")
    return [head + first] + [" " * len(head) + line for line in rest]


def _bus(address: str) -> str:
    return address[5:7]


def lspci_tree(host: Host) -> str:
    """``lspci -tv -nn``: one root bus per GPU switch, then the NVSwitches' root bus."""
    roots: dict[str, list[_Node]] = {}
    nic_of = {n.switch: n for n in host.nics if n.switch is not None}
    for g in host.gpus:
        root, usp, dsp = switch_path(g.bus)
        nic = nic_of.get(g.index)
        ports = []
        if nic is not None:
            nic_dsp = f"{usp[:5]}{_bus(dsp)}:00.0"
            ports.append(_Node(nic_dsp[8:], buses=_bus(nic.bus),
                               children=[_Node(nic.bus[8:], NIC_NAME)]))
        ports.append(_Node(dsp[8:], buses=_bus(g.bus), children=[_Node(g.bus[8:], GPU_NAME)]))
        last = max([_bus(g.bus)] + ([_bus(nic.bus)] if nic else []))
        switch = _Node(usp[8:], buses=f"{_bus(dsp)}-{last}", children=ports)
        roots[_bus(root)] = [_Node(root[8:], ROOT_PORT, buses=f"{_bus(usp)}-{last}",
                                   children=[switch])]
    for n in host.nics:
        if n.switch is None:  # an HCA in a slot of its own, below a root port
            port = nic_root_port(n.bus)
            roots.setdefault(_bus(port), []).append(
                _Node(port[8:], ROOT_PORT, buses=_bus(n.bus), children=[_Node(n.bus[8:],
                                                                            NIC_NAME)]))
    roots["00"] = [_Node("00.0", "Intel Corporation Device [8086:09a2]")] + [
        _Node(f"{i + 1:02x}.0", ROOT_PORT, buses=_bus(s.bus),
              children=[_Node("00.0", NVSWITCH_NAME)]) for i, s in enumerate(host.switches)]
    ordered = sorted(roots, reverse=True)
    lines: list[str] = []
    for i, bus in enumerate(ordered):
        first, *rest = _draw_bus(roots[bus], "---", "-")
        if len(ordered) == 1:
            lead, cont = "-", " "
        else:
            lead = "-+-" if i == 0 else (" \\-" if i == len(ordered) - 1 else " +-")
            cont = "   " if i == len(ordered) - 1 else " | "
        lines.append(f"{lead}[0000:{bus}]{first}")
        lines += [cont + " " * len(f"[0000:{bus}]") + line for line in rest]
    return "\n".join(lines) + "\n"
