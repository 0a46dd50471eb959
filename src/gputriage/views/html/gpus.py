"""The host's identity and the GPU table: index, bus id, name, UUID, state and the
worst severity of its findings (in words)."""

from __future__ import annotations

from gputriage.model import GpuRow, HostSummary, Result
from gputriage.views.html.markup import badge, definitions, esc, para, section, table


def host_section(result: Result) -> str:
    """Host name, kernel, OS, driver, CUDA, GPU counts, boot."""
    h: HostSummary = result.host
    d = h.driver
    driver = d.kernel_module or d.userspace
    if d.kernel_module and d.userspace and d.kernel_module != d.userspace:
        driver = f"kernel module {d.kernel_module}, userspace {d.userspace}"
    pairs = [("Host", h.hostname), ("Kernel", h.kernel), ("OS", h.os), ("Driver", driver),
             ("CUDA (driver)", d.cuda), ("Container toolkit", h.container_toolkit),
             ("GPUs", None if h.gpus_on_pci is None and h.gpus_visible is None else
              f"{h.gpus_on_pci if h.gpus_on_pci is not None else '?'} on PCI, "
              f"{h.gpus_visible if h.gpus_visible is not None else '?'} visible"),
             ("Boot", h.boot_time), ("Boot id", h.boot_id)]
    shown = [(k, esc(v)) for k, v in pairs if v]
    if h.changed_since_healthy is not None:
        c = h.changed_since_healthy
        shown.append(("Changed since healthy", esc(f"{c.when}: " + "; ".join(c.changes))))
    return section("Host", definitions(shown) if shown else para("Not known."), ident="host")


def _state(g: GpuRow) -> str:
    if g.unknown:
        return "unknown (the driver could not be asked)"
    if not g.visible:
        return "not visible to the driver" + ("" if g.listed else " (on PCI only)")
    if g.persistence_mode is None:
        return "visible"
    return f"visible, persistence {'on' if g.persistence_mode else 'off'}"


def gpu_section(result: Result) -> str:
    """One row per GPU; a GPU's severity is the worst of its current findings."""
    if not result.gpus:
        return section("GPUs", para("No GPU listed in the inputs."), ident="gpus")
    rows = [(esc(g.index if g.index is not None else "-"), esc(g.pci_bus_id or "-"),
             esc(g.name or "-"), tag_mono(g.uuid), esc(_state(g)),
             badge(g.severity.value)) for g in result.gpus]
    return section("GPUs", table(("GPU", "bus id", "name", "UUID", "state", "severity"), rows,
                                 caption=f"{len(result.gpus)} GPU(s)"), ident="gpus")


def tag_mono(value: str | None) -> str:
    from gputriage.views.html.markup import tag

    return tag("span", esc(value), class_="mono") if value else "-"
