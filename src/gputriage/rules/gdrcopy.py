"""GDRCopy's tests judged: ``gdr_open`` failing (gdrdrv not loaded, or its /dev/gdrdrv
device file missing), ``gdr_pin_buffer`` failing (gdrdrv and the NVIDIA driver not
getting on: GDRCopy before 2.4.2 under driver R560 and later), and the copy bandwidth
through the BAR mapping (reads through a write-combined mapping are slow by nature)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from gputriage.model import Action, Blame, DriverVersions, Finding, Scope, Severity, evidence
from gputriage.parsers.gdrcopy import GdrcopyRun
from gputriage.parsers.modules import Module
from gputriage.rules.base import finding, rule
from gputriage.rules.modules import loaded_names

# the first driver branch whose nvidia_p2p_get_pages wants 64 KB aligned lengths, and the
# GDRCopy release whose gdrdrv pins them so (NVIDIA/gdrcopy#305, fixed in 2.4.2)
P2P_ALIGNED_BRANCH = 560
GDRCOPY_FIXED = "2.4.2"
_ERRNO = {2: "the device file /dev/gdrdrv does not exist",
          13: "permission to open /dev/gdrdrv is denied",
          6: "/dev/gdrdrv exists but no gdrdrv module serves it",
          19: "/dev/gdrdrv exists but no gdrdrv module serves it"}


def _scope() -> Scope:
    return Scope("module", name="gdrdrv")


def _lines(lines: list[str], limit: int = 6) -> list[str]:
    return list(dict.fromkeys(lines))[:limit]


@rule("gdrcopy.tests", produces=("gdrcopy.open-failed", "gdrcopy.pin-failed",
                                 "gdrcopy.tests-failed", "gdrcopy.bandwidth"))
def gdrcopy_tests(gdrcopy: GdrcopyRun, modules: dict[str, Module] | None = None,
                  driver_versions: DriverVersions | None = None) -> Iterator[Finding]:
    """What GDRCopy's tests say of the node's gdrdrv setup."""
    run = gdrcopy
    if run.open_failed:
        yield _open_failed(run, modules)
    elif run.pin_failures:
        yield _pin_failed(run, driver_versions)
    elif run.map_failures or run.other_failures or run.failed:
        lines = run.map_failures + run.other_failures + ([run.summary] if run.summary else [])
        yield finding(
            "gdrcopy.tests-failed", Severity.WARNING,
            f"GDRCopy's tests failed ({run.summary or f'{len(run.assertions)} assertion(s)'})",
            "Some of GDRCopy's checks failed although gdrdrv opened and pinned memory: read "
            "the failing assertions, and compare the GDRCopy release (gdrdrv module and "
            "libgdrapi) with the driver's; rebuild gdrdrv for the running driver.",
            Action.NONE, Blame.UNKNOWN, _scope(), [evidence("gdrcopy", _lines(lines))])
    if run.write_mbps is not None or run.read_mbps is not None:
        yield _bandwidth(run)


def _open_failed(run: GdrcopyRun, modules: dict[str, Module] | None) -> Finding:
    names = loaded_names(modules) if modules else set()
    why = _ERRNO.get(run.errno or -1)
    if why is None and "gdrdrv" in names:
        why = ("gdrdrv is loaded, so its device file /dev/gdrdrv is missing or not "
               "accessible: a plain modprobe of older gdrdrv packages does not create it")
    elif why is None and modules and "nvidia" in names:
        why = "the gdrdrv kernel module is not loaded"
    title = "GDRCopy cannot open gdrdrv" + (f": {why}" if why else "")
    summary = (" The test's own summary line does not count these failures: believe the "
               "assertions." if run.failed == 0 else "")
    ev = [evidence("gdrcopy", _lines(run.open_errors + ([run.summary] if run.summary else [])),
                   f"{len(run.open_errors)} failed gdr_open call(s)")]
    if modules and "gdrdrv" in modules:
        ev.append(evidence("proc_modules", [modules["gdrdrv"].line], "gdrdrv is loaded"))
    return finding(
        "gdrcopy.open-failed", Severity.WARNING, title,
        "gdr_open() opens /dev/gdrdrv; when that fails every GDRCopy user (its tests, UCX, "
        "NVSHMEM, NCCL's GDRCopy option) falls back or fails. Load gdrdrv with GDRCopy's "
        "insmod.sh (or its packaged service), which creates /dev/gdrdrv with the module's "
        "major number, make it load at boot, and in a container pass /dev/gdrdrv. The GPU "
        "and its driver are not at fault." + summary,
        Action.FIX_CONFIG, Blame.CONFIG, _scope(), ev)


def _branch(versions: DriverVersions | None) -> int | None:
    for version in (versions.kernel_module, versions.userspace) if versions else ():
        m = re.match(r"([0-9]{3,4})\.", version or "")
        if m:
            return int(m.group(1))
    return None


def _pin_failed(run: GdrcopyRun, versions: DriverVersions | None) -> Finding:
    branch = _branch(versions)
    if branch is not None and branch >= P2P_ALIGNED_BRANCH:
        known = (f" This driver is R{branch}: since R{P2P_ALIGNED_BRANCH} the driver wants "
                 "64 KB-aligned lengths, which gdrdrv before "
                 f"{GDRCOPY_FIXED} does not ask for.")
    else:
        known = (f" The known cause is GDRCopy before {GDRCOPY_FIXED} under driver R"
                 f"{P2P_ALIGNED_BRANCH} or later (the driver wants 64 KB-aligned lengths); "
                 "GeForce GPUs, which do not support pinning, fail the same way.")
    return finding(
        "gdrcopy.pin-failed", Severity.WARNING,
        f"gdrdrv cannot pin GPU memory ({len(run.pin_failures)} gdr_pin_buffer failure(s))",
        "gdrdrv opened but the NVIDIA driver refused to pin GPU memory for it, so GDRCopy's "
        "mappings fail: a software incompatibility between gdrdrv and the driver, not a GPU "
        f"fault.{known} Install GDRCopy {GDRCOPY_FIXED} or later (rebuild and reload "
        "gdrdrv) and run gdrcopy_sanity again.",
        Action.FIX_SOFTWARE, Blame.NODE, _scope(),
        [evidence("gdrcopy", _lines(run.pin_failures + ([run.summary] if run.summary else [])))])


def _bandwidth(run: GdrcopyRun) -> Finding:
    gpu = f" on GPU {run.gpus[0][0]} ({run.gpus[0][1]})" if run.gpus else ""
    parts = [f"{d} {v:g} MB/s" for d, v in (("write", run.write_mbps), ("read", run.read_mbps))
             if v is not None]
    wc = " through a write-combined mapping" if run.wc_mapping else ""
    return finding(
        "gdrcopy.bandwidth", Severity.INFO,
        f"GDRCopy copy bandwidth{gpu}: {', '.join(parts)}",
        f"The CPU copied to and from GPU memory mapped through BAR1{wc}. Writes stream at "
        "PCIe speed; reads through such a mapping are uncached and are expected to be an "
        "order of magnitude slower, which is not a PCIe or gdrdrv fault. Compare with "
        "identical nodes before suspecting a link.",
        Action.NONE, Blame.UNKNOWN, _scope(), [evidence("gdrcopy", run.bandwidth_lines)])
