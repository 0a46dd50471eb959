"""Rules on the NVIDIA kernel modules: the ones CUDA needs, the one GPUDirect
RDMA needs, and all of them at one version."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from gputriage.model import Action, Blame, Finding, Scope, Severity, evidence
from gputriage.rules.base import finding, rule

if TYPE_CHECKING:
    from gputriage.parsers.driver import ModuleVersions
    from gputriage.parsers.modules import Module

PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")


def _nvidia_lines(mods: dict[str, Module]) -> list[str]:
    return [m.line for name, m in sorted(mods.items()) if name.startswith(("nvidia", "nv_"))]


def loaded_names(mods: dict[str, Module]) -> set[str]:
    """The modules a listing shows loaded: its rows, and every module a row names as its
    user (``nvidia ... gdrdrv,nvidia_uvm``: nvidia_uvm uses nvidia, so it is loaded even
    when the listing was filtered, ``lsmod | grep gdrdrv``, and has no row of its own)."""
    names = set(mods)
    for mod in mods.values():
        names.update(u.replace("-", "_") for u in mod.used_by)
    return names


def loaded_line(mods: dict[str, Module], wanted: tuple[str, ...]) -> str | None:
    """The line that shows one of ``wanted`` loaded: its own row, else a row that names it
    as a user; None when none does."""
    rows = [m.line for name, m in mods.items() if name in wanted]
    users = [m.line for m in mods.values() if set(wanted) & {u.replace("-", "_")
                                                             for u in m.used_by}]
    return next(iter(rows + users), None)


@rule("module.required",
      produces=("module.nvidia-uvm-missing", "module.display-modules-absent",
                "module.peermem-missing"))
def required_modules(modules: dict[str, Module],
                     has_infiniband: bool | None = None) -> Iterator[Finding]:
    """nvidia_uvm is required for CUDA; nvidia_peermem for GPUDirect RDMA when
    InfiniBand/RoCE HCAs are present; nvidia_modeset/nvidia_drm are optional."""
    mods = modules
    if "nvidia" not in mods:
        return  # driver.presence reports a driver that is not loaded
    names = loaded_names(mods)
    loaded = evidence("proc_modules", _nvidia_lines(mods), "NVIDIA modules loaded")
    if "nvidia_uvm" not in names:
        yield finding(
            "module.nvidia-uvm-missing", Severity.CRITICAL,
            "nvidia_uvm is not loaded: CUDA cannot run",
            "CUDA needs the unified memory module: without it every CUDA program fails "
            "(cudaErrorNoDevice / 'no CUDA-capable device') while nvidia-smi looks fine. "
            "Load it (modprobe nvidia-uvm, or nvidia-modprobe -u -c=0) and make it load at "
            "boot.", Action.FIX_CONFIG, Blame.NODE, Scope("module", name="nvidia_uvm"),
            [loaded])
    absent_display = [m for m in ("nvidia_modeset", "nvidia_drm") if m not in names]
    if absent_display:
        yield finding(
            "module.display-modules-absent", Severity.INFO,
            f"{' and '.join(absent_display)} not loaded",
            "Only display, some container setups and GB200/GH200 power management need "
            "them; compute jobs do not.", Action.NONE, Blame.UNKNOWN,
            Scope("module", name=absent_display[0]))
    if has_infiniband and not any(m in names for m in PEERMEM_MODULES):
        ib = [m.line for name, m in sorted(mods.items())
              if name.startswith(("mlx5", "ib_", "rdma"))][:6]
        yield finding(
            "module.peermem-missing", Severity.WARNING,
            "InfiniBand/RoCE HCAs present but nvidia_peermem is not loaded",
            "Without it GPUDirect RDMA is off: NCCL stages every inter-node transfer through "
            "host memory and multi-node jobs run slower. Load nvidia_peermem (and load it "
            "at boot).", Action.FIX_CONFIG, Blame.CONFIG,
            Scope("module", name="nvidia_peermem"),
            [loaded, evidence("proc_modules", ib, "RDMA stack loaded")])


@rule("module.version-skew", produces=("module.version-skew",))
def version_skew(module_versions: ModuleVersions) -> Iterator[Finding]:
    """All loaded nvidia* modules must come from one driver release."""
    versions = module_versions.versions
    if len(set(versions.values())) > 1:
        lines = [f"/sys/module/{m}/version: {v}" for m, v in sorted(versions.items())]
        yield finding(
            "module.version-skew", Severity.CRITICAL,
            "loaded NVIDIA modules come from different driver releases",
            "A partial module reload or upgrade left modules of two releases loaded; they "
            "cannot work together. Drain and reboot the node.", Action.REBOOT_NODE,
            Blame.NODE, evidence=[evidence("sys_module_nvidia", lines)])
