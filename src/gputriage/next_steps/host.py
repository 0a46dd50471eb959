"""What the steps name: the host as its facts show it, and the GPUs, ports and units a
finding is about, with their numbers, bus ids and serials."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gputriage.model import UNNAMED_HOST, DriverVersions, Finding, Scope

__all__ = ["UNNAMED", "Host", "Repair", "bus_ids", "dash_i", "fixed", "gpu_scopes", "gpus",
           "serials", "what"]

UNNAMED = "<node>"  # the host's name in a command when no input names it


@dataclass
class Host:
    """The host as the steps name it, read from the facts once (parts None when
    unknown); ``fact`` reads any other fact and never raises."""

    name: str = "<node>"  # UNNAMED: no input names the host
    os: str | None = None
    kernel: str | None = None
    driver: DriverVersions = field(default_factory=DriverVersions)
    index: dict[str, int] = field(default_factory=dict)  # bus id -> GPU index
    serial: dict[str, str] = field(default_factory=dict)  # bus id -> board serial
    facts: Any = None

    @classmethod
    def of(cls, facts: Any) -> Host:
        host = cls(facts=facts)
        ident = host.fact("host_identity")
        host.name = (getattr(ident, "hostname", None) or host.fact("named_host")
                     or UNNAMED)
        host.os = getattr(ident, "os", None)
        host.kernel = getattr(ident, "kernel", None)
        host.driver = host.fact("driver_versions") or getattr(ident, "driver", None) \
            or DriverVersions()
        host.index, host.serial = _gpu_numbers(host)
        return host

    def fact(self, name: str) -> Any:
        """The fact ``name``, None when absent or unreadable."""
        maybe = getattr(self.facts, "maybe", None)
        if maybe is None:
            return None
        try:
            return maybe(name)
        except Exception:  # a step is advice: an unreadable fact only makes it plainer
            return None

    @property
    def named(self) -> bool:
        """Whether an input names the host."""
        return self.name != UNNAMED

    @property
    def called(self) -> str:
        """The host in a sentence: its name, else the node the outputs came from (the
        placeholder ``<node>`` stays in commands, where the on-call types the name)."""
        return self.name if self.named else UNNAMED_HOST

    @property
    def version(self) -> str | None:
        """The driver's version: the loaded module's, else the userspace's."""
        return self.driver.kernel_module or self.driver.userspace


Repair = Callable[[Finding, Host], "str | None"]
"""What fixes a finding, filled from it and its host (None: nothing it can add)."""


def fixed(text: str) -> Repair:
    """A repair whose words need nothing from the finding."""
    def repair(f: Finding, host: Host) -> str:
        return text
    return repair


def _gpu_numbers(host: Host) -> tuple[dict[str, int], dict[str, str]]:
    """Index and serial by bus id. A GPU the driver lost takes its place in PCI bus
    order when every listed GPU's index is its place in that order."""
    visible = host.fact("visible_gpus")
    listed = [g for g in (visible[1] if visible else ()) if g.bus_id]
    index = {g.bus_id: g.index for g in listed if g.index is not None}
    serial = {g.bus_id: g.serial for g in listed if g.serial}
    on_pci = sorted(fn.address for fn in host.fact("pci_gpus") or () if fn.address)
    if index and all(b in on_pci and on_pci.index(b) == i for b, i in index.items()):
        index.update({b: i for i, b in enumerate(on_pci) if b not in index})
    return index, serial


def gpu_scopes(f: Finding) -> list[Scope]:
    """The GPUs a finding is about."""
    return [s for s in f.scopes if s.kind == "gpu"]


def _gpu_label(scope: Scope, host: Host) -> str:
    bus = scope.pci_bus_id
    index = scope.gpu_index if scope.gpu_index is not None else host.index.get(bus or "")
    if index is None:
        return f"GPU {bus}" if bus else "the GPU"
    return f"GPU {index} ({bus})" if bus else f"GPU {index}"


def what(f: Finding, host: Host) -> str:
    """The GPUs, unit, port or device a finding is about, for a sentence."""
    gpus = gpu_scopes(f)
    if len(gpus) == 1:
        return _gpu_label(gpus[0], host)
    if gpus:
        if len(gpus) <= 3:
            return ", ".join(_gpu_label(s, host) for s in gpus)
        index = [s.gpu_index if s.gpu_index is not None else host.index.get(s.pci_bus_id or "")
                 for s in gpus]
        if all(i is not None for i in index):
            return "GPUs " + ", ".join(str(i) for i in index)
        return f"{len(gpus)} GPUs ({', '.join(s.pci_bus_id or '?' for s in gpus)})"
    scope = f.scope
    if scope.kind == "port" and scope.name and "/" in scope.name:
        dev, port = scope.name.split("/", 1)
        return f"{dev} port {port}"
    if scope.kind == "node":
        return host.called
    return scope.label()


def gpus(f: Finding, host: Host) -> str:
    """The GPUs a finding is about for a sentence, ``the GPUs`` when it names none."""
    return what(f, host) if gpu_scopes(f) else "the GPUs"


def bus_ids(f: Finding) -> list[str]:
    """The bus ids of the GPUs a finding is about, where known."""
    return [s.pci_bus_id for s in gpu_scopes(f) if s.pci_bus_id]


def dash_i(f: Finding) -> str:
    """`` -i BUS`` for a finding of one GPU, else nothing (all GPUs)."""
    buses = bus_ids(f)
    return f" -i {buses[0]}" if len(buses) == 1 else ""


def serials(f: Finding, host: Host) -> str:
    """`` (serial S, ...)`` of the GPUs a finding is about, else nothing."""
    found = [host.serial[b] for b in bus_ids(f) if b in host.serial]
    return f" (serial {', '.join(found)})" if found else ""
