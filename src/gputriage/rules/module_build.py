"""A kernel module that did not build or install: the NVIDIA driver (DKMS, the .run
installer) or a module built on it (nv_peer_mem, gdrdrv, nvidia-fs). Software of the
node, never the GPU: the driver's own module failing leaves the node without GPUs on the
kernel it was built for, the others leave out what they add (GPUDirect RDMA, GDRCopy,
GPUDirect Storage)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from gputriage.logscan.events import DriverEvent
from gputriage.model import Action, Blame, Finding, HostIdentity, Scope, Severity, evidence
from gputriage.parsers.module_build import ModuleBuild, is_driver_module
from gputriage.parsers.nvsmi import SmiReport
from gputriage.rules.base import finding, rule

# what each kind of failure means and what fixes it ({kernel}: the kernel it names)
_CAUSES = {
    "headers-missing": ("the kernel headers for {kernel} are not installed",
                        "Install the headers of every installed kernel (linux-headers-<kernel>, "
                        "kernel-devel-<kernel>, or the flavour's headers package such as "
                        "linux-zen-headers), then rebuild: dkms autoinstall (or dkms install "
                        "<module>/<version> -k <kernel>)."),
    "symvers": ("modpost cannot read the symbol versions the build fed it",
                "The module's build script wrote a symbol file (Module.symvers / nv.symvers) in "
                "a format this kernel's modpost does not read: use a release of the module "
                "that supports this kernel; for nv_peer_mem, the driver's own nvidia-peermem "
                "(R470 and later) replaces it."),
    "undefined-symbol": ("the module uses symbols this kernel build does not export ({detail})",
                         "Build it against the installed NVIDIA driver and RDMA stack (their "
                         "Module.symvers), or install a release built for them."),
    "compile-error": ("its sources do not compile against kernel {kernel}",
                      "A kernel newer than this release supports, or a compiler other than the "
                      "kernel's: install a driver or module release that supports the kernel, "
                      "or boot the previous kernel."),
    "build-failed": ("the build failed on kernel {kernel}",
                     "Read the build log (DKMS keeps it in /var/lib/dkms/<module>/<version>/"
                     "build/make.log) for the first error."),
}


def _lines(build: ModuleBuild, limit: int = 8) -> list[str]:
    return list(dict.fromkeys(f.line for f in build.failures))[:limit]


@rule("driver.module-build", produces=("driver.module-build-failed", "driver.install-failed"))
def module_build(module_build: ModuleBuild,
                 smi: Sequence[tuple[str, SmiReport]] = (),
                 driver_events: Sequence[DriverEvent] = (),
                 host_identity: HostIdentity | None = None,
                 driver_loaded: bool | None = None) -> Iterator[Finding]:
    """A kernel module build (DKMS, make) or the NVIDIA installer that failed. The
    driver's own module is critical where the input shows the node without a driver now
    (nvidia-smi cannot reach it, the module is not loaded or would not load, the build was
    for the running kernel), a warning otherwise: the next boot into that kernel has no
    driver."""
    build = module_build
    kinds = build.kinds()
    if not kinds:
        return
    name = build.module or "a kernel module"
    driver = is_driver_module(build.module) or (build.installer
                                                 and build.module in (None, "nvidia"))
    where = f"{name}" + (f" {build.version}" if build.version else "")
    if "load-failed" in kinds:
        yield _install_failed(build, where)
        return
    cause = next(k for k in _CAUSES if k in kinds)
    kernel = ", ".join(build.kernels) or "this kernel"
    detail = next((f.detail for f in build.failures if f.kind == cause and f.detail), "")
    what, fix = _CAUSES[cause]
    what = what.format(kernel=kernel, detail=detail)
    running = host_identity.kernel if host_identity is not None else None
    severity, action, blame = Severity.WARNING, Action.FIX_SOFTWARE, Blame.NODE
    if driver and (build.installer or driver_loaded is False or _no_driver(smi, driver_events)
                   or (running is not None and running in build.kernels)):
        severity, impact = Severity.CRITICAL, (
            "Without it the nvidia module cannot load: the node has no usable GPU now "
            "(nvidia-smi cannot talk to the driver).")
    elif driver:
        impact = (f"Without it the nvidia module is missing for {kernel}: the next boot into "
                  "that kernel has no GPU driver, so fix it before the node reboots.")
    elif build.module is None:
        severity, action, blame = Severity.INFO, Action.NONE, Blame.UNKNOWN
        impact = ("The lines do not say which module: dkms status lists each module and "
                  "whether it is installed for each kernel.")
    else:
        impact = ("Without it what the module adds is off (nv_peer_mem: GPUDirect RDMA, "
                  "multi-node jobs stage through host memory; gdrdrv: GDRCopy; nvidia-fs: "
                  "GPUDirect Storage); the GPUs still work.")
    yield finding(
        "driver.module-build-failed", severity, f"{where} did not build: {what}",
        f"{impact} The node's software is at fault, not the GPU. {fix}",
        action, blame, Scope("module", name=build.module or "module"),
        [evidence("module_build", _lines(build))])


def _no_driver(smi: Sequence[tuple[str, SmiReport]],
               events: Sequence[DriverEvent]) -> bool:
    """The input shows the node without a working NVIDIA driver."""
    return (any(e.kind == "module-load-failed" for e in events)
            or any(err.kind == "driver-communication" for _, r in smi for err in r.errors))


def _install_failed(build: ModuleBuild, where: str) -> Finding:
    reason = next((f.detail for f in build.failures if f.kind == "load-failed" and f.detail),
                  None)
    low = (reason or "").lower()
    if "no such device" in low:
        why = ("no GPU was free for it: another kernel driver holds the GPU (nouveau, "
               "nova_core, vfio-pci; the kernel log names it) or the GPU is not on the bus")
    elif "key" in low:
        why = "Secure Boot refused the unsigned module: sign it (MOK) or disable Secure Boot"
    elif "format" in low or "symbol" in low:
        why = "the module was built for another kernel: rebuild it for the running one"
    else:
        why = "the kernel log says why (dmesg | grep -i -e NVRM -e nvidia)"
    return finding(
        "driver.install-failed", Severity.CRITICAL,
        f"the NVIDIA installer could not load {where}" + (f": {reason}" if reason else ""),
        f"The driver installed but its module would not load, so the node has no usable GPU: "
        f"{why}. Fix that, then run the installer again (or modprobe nvidia).",
        Action.FIX_SOFTWARE, Blame.NODE, Scope("module", name="nvidia"),
        [evidence("module_build", _lines(build))])
