"""Host identity facts: who the host is (name, boot, kernel, OS) and which driver stack
it runs (kernel module, userspace and CUDA versions, container toolkit).

One definition for the engine's host summary, ``gputriage diff`` and the fleet's
attributes: ``host_identity`` (a :class:`~gputriage.model.HostIdentity`) and
``driver_versions`` (a :class:`~gputriage.model.DriverVersions`).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from gputriage.facts.table import FactReader, FactTable
from gputriage.model import DriverVersions, HostIdentity
from gputriage.text.fields import split_lines, strict_float

__all__ = ["FACTS", "TOOLKIT_VERSION", "toolkit_version"]

FACTS = FactTable()

# "NVIDIA Container Toolkit CLI version 1.15.0" (some builds print "v1.15.0")
TOOLKIT_VERSION = re.compile(r"version\s+v?([0-9][\w.+~-]*)", re.IGNORECASE)


def toolkit_version(text: str | None) -> str | None:
    """The container toolkit version ``nvidia-ctk --version`` printed."""
    m = TOOLKIT_VERSION.search(text or "")
    return m.group(1) if m else None


_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_NO_NAME = frozenset({"localhost", "localhost.localdomain"})


def _first_line(text: str | None) -> str | None:
    return split_lines(text.strip())[0] if text and text.strip() else None


def _os_name(text: str | None) -> str | None:
    for line in split_lines(text or ""):
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return None


def _boot_time(created: Any, uptime: str | None) -> str | None:
    """When the host booted: the snapshot's time less its uptime."""
    fields = (uptime or "").split()
    try:
        when = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
        seconds = strict_float(fields[0], lo=0, hi=1e9) if fields else None
        if seconds is None:
            return None
        return (when - timedelta(seconds=seconds)).isoformat(timespec="seconds")
    except (ValueError, OverflowError):  # no such time
        return None


@FACTS.fact("driver_versions")
def driver_versions(facts: FactReader) -> DriverVersions:
    """The driver's versions: the kernel module's, the userspace library's (nvidia-smi,
    then NVML, then the one libnvidia-ml file) and the CUDA version it supports."""
    km = facts.maybe("kernel_module")
    cuda = userspace = None
    for _, report in facts.maybe("smi", []):
        cuda = cuda or report.cuda_version
        userspace = userspace or report.driver_version
    reading = facts.maybe("nvml")
    if reading is not None and reading.available:
        userspace = reading.library_driver_version or userspace
        if reading.cuda_driver_version and not cuda:
            major, minor = divmod(reading.cuda_driver_version, 1000)
            cuda = f"{major}.{minor // 10}"
    libs = sorted({lib.version for lib in facts.maybe("libs", [])
                   if lib.library == "libnvidia-ml" and lib.version})
    if libs and (userspace is None or len(libs) == 1):
        userspace = libs[-1]
    return DriverVersions(km.version if km else None, userspace, cuda)


def _named_elsewhere(facts: FactReader) -> str | None:
    """The one host the other inputs name, when they agree: every framed line of a
    kernel log (``gpu-b12 kernel:``), the one node a Kubernetes input describes, the
    one host an NCCL log's records come from."""
    names = set()
    if (log := facts.maybe("log_host")) is not None:
        names.add(str(log))
    cluster = facts.maybe("cluster")
    if cluster is not None and len(cluster.nodes) == 1:
        names.update(cluster.nodes)
    nccl = facts.maybe("nccl_log")
    hosts = nccl.hosts if nccl is not None else []
    if len(hosts) == 1:
        names.add(hosts[0])
    # not a parser's "?" for none, nor a name every machine answers to
    names = {n for n in names if _HOST_NAME.fullmatch(n) and n.lower() not in _NO_NAME}
    return names.pop() if len(names) == 1 else None


@FACTS.fact("named_host", sources=("hostname",))
def named_host(facts: FactReader) -> str | None:
    """The host's name as the inputs give it: the snapshot manifest's or the hostname
    source, else the one host the other inputs agree on (a pasted journal names its
    machine: steps and the report say that name, not the machine gputriage runs on);
    None when no input names one."""
    manifest = facts.snapshot.manifest or {}
    return (manifest.get("host") or _first_line(facts.text("hostname"))
            or _named_elsewhere(facts))


@FACTS.fact("host_identity", sources=("hostname", "uname", "os_release", "boot_id", "uptime",
                                      "nvidia_ctk_version"))
def host_identity(facts: FactReader) -> HostIdentity:
    """Name, kernel, OS, boot and driver stack of the host; each part None when the
    inputs do not tell (the manifest's host name and boot id first; a name the inputs
    agree on otherwise)."""
    manifest = facts.snapshot.manifest or {}
    uname = (_first_line(facts.text("uname")) or "").split()
    return HostIdentity(
        hostname=facts.get("named_host"),
        kernel=uname[2] if len(uname) > 2 else None,
        os=_os_name(facts.text("os_release")),
        boot_id=manifest.get("boot_id") or _first_line(facts.text("boot_id")),
        boot_time=_boot_time(manifest.get("created"), facts.text("uptime")),
        driver=facts.get("driver_versions"),
        container_toolkit=toolkit_version(facts.text("nvidia_ctk_version")),
    )
