"""What the NVIDIA driver prints when it refuses a GPU at probe time, before any Xid can
happen: a PCI memory region (BAR) the firmware or hypervisor left unmapped, a GPU the
installed kernel module does not drive (the open module on a GPU without GSP, a GPU this
branch moved to a legacy driver), and the probe failures and summaries that follow.

The messages, as the driver's ``nv-pci.c`` / ``nv.c`` print them over one or several
``NVRM:`` lines::

    NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:
    NVRM: BAR1 is 0M @ 0x0 (PCI:0000:14:00.0)
    nvidia: probe of 0000:14:00.0 failed with error -1          (older kernels)
    nvidia 0000:09:00.0: probe with driver nvidia failed with error -1
    NVRM: The NVIDIA probe routine failed for 2 device(s).
    NVRM: None of the NVIDIA devices were initialized.
    NVRM: The NVIDIA GeForce GT 710 GPU installed in this system is
    NVRM:  supported through the NVIDIA 470.xx Legacy drivers. ...  The 535.54.03
    NVRM:  NVIDIA driver will ignore this GPU.  Continuing probe...

The open module's "GPU ... is not supported by open nvidia.ko because it does not
include the required GPU System Processor (GSP)" starts like the fallen-off-the-bus
message (``NVRM: The NVIDIA GPU <bus>``) and is told apart by
:class:`gputriage.parsers.kernel_follow.Message` ``FALLEN_OFF_BUS``, through
:func:`gpu_notice`. Builders for the rows of :data:`gputriage.parsers.kernel_table.EVENTS`;
every pattern is bounded.
"""

from __future__ import annotations

import re

from gputriage.parsers.kernel_model import DriverEvent, LogLine, make_event
from gputriage.parsers.kernel_patterns import PCI_ID, nvrm_text
from gputriage.text.fields import normalize_bus_id
from gputriage.vocabulary import EventKind

__all__ = ["BAR_HEAD", "BAR_REGION", "LEGACY_HEAD", "PROBE_FAILED", "PROBE_SUMMARY",
           "bar_continues", "bar_message", "gpu_notice", "legacy_complete", "legacy_message",
           "probe_failed", "probe_summary"]

Match = re.Match[str]
_BUS = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"

BAR_HEAD = "This PCI I/O region assigned to your NVIDIA device is invalid"
# "BAR1 is 0M @ 0x0 (PCI:0000:14:00.0)"; very old drivers print "(PCI:0002:00.0)"
BAR_REGION = re.compile(r"BAR(?P<bar>[0-9]) is (?P<size>[0-9]{1,9})M @ 0x(?P<addr>[0-9a-fA-F]{1,16}"
                        r")"
                        r"(?: \(PCI:(?P<bus>[0-9a-fA-F:.]{4,20})\))?")
# "nvidia: probe of 0000:14:00.0 failed with error -1" (older kernels) and
# "nvidia 0000:09:00.0: probe with driver nvidia failed with error -1" (newer)
PROBE_FAILED = re.compile(r"^(?:nvidia: probe of (?P<bus>" + _BUS + r")|nvidia (?P<bus2>" + _BUS
                          + r"): probe with driver nvidia) failed with error (?P<err>-?[0-9]{1,5})")
# "NVRM: The NVIDIA probe routine failed for 2 device(s)." and "None of the NVIDIA devices
# were initialized." ("... graphics adapters were initialized!" in older drivers)
PROBE_SUMMARY = re.compile(r"The NVIDIA probe routine failed for (?P<n>[0-9]{1,4}) device|"
                           r"(?P<none>None of the NVIDIA (?:devices|graphics adapters) were "
                           r"initiali[sz]ed)")
LEGACY_HEAD = re.compile(r"NVRM: The NVIDIA (?P<name>.{1,80}?) GPU installed in this system is")
_LEGACY = re.compile(r"supported through the NVIDIA (?P<branch>[\w.\-]{1,16}) Legacy drivers"
                     r".{0,200}?The (?P<ver>[0-9.\-]{3,16}) NVIDIA driver will ignore")
_NO_GSP = re.compile(r"not supported by open\s{1,4}nvidia\.ko|does not include the required "
                     r"GPU\s{1,4}System Processor", re.IGNORECASE)


def _text(texts: list[str]) -> str:
    """The message's lines joined, without their ``NVRM:`` tags and runs of blanks."""
    return " ".join(nvrm_text(texts).split())


def bar_message(head: LogLine, lines: list[str], texts: list[str]) -> DriverEvent:
    """The invalid-region message: which BAR, its size and the GPU's address (the next
    probe line names the GPU where the region line is missing or too old to)."""
    joined = _text(texts)
    details = {}
    m = BAR_REGION.search(joined)
    bus = None
    if m:
        details = {"bar": m.group("bar"), "size_mb": m.group("size")}
        bus = normalize_bus_id(m.group("bus") or "")
    if "64-bit BAR mapped above 4GB" in joined:
        details["above_4g"] = "yes"
    return make_event(EventKind.BAR_INVALID, head, bus, details, "\n".join(lines))


# the lines the driver prints after the invalid-region head (nv-pci.c)
_BAR_MORE = re.compile(r"^NVRM:\s{0,4}(?:BAR[0-9] is|This is a 64-bit BAR|The system BIOS may|BIOS "
                       r"or the|Linux kernel|graphics driver and|system software|do not "
                       r"support|reliably|a matching prefetchable|immediately upstream|This "
                       r"may be due|see the README|information\.)")


def bar_continues(msg: str) -> bool:
    """Whether an ``NVRM:`` line goes on the invalid-region message."""
    return _BAR_MORE.match(msg) is not None


def legacy_message(head: LogLine, lines: list[str], texts: list[str]) -> DriverEvent | None:
    """"The NVIDIA <GPU> GPU installed in this system is supported through the NVIDIA
    <branch> Legacy drivers ... The <version> NVIDIA driver will ignore this GPU"."""
    joined = _text(texts)
    m = _LEGACY.search(joined)
    if m is None:
        return None
    name = LEGACY_HEAD.search(texts[0])
    details = {"reason": "legacy-branch", "legacy_branch": m.group("branch"),
               "driver_version": m.group("ver")}
    if name:
        details["gpu_name"] = name.group("name").removeprefix("NVIDIA ").strip()
    return make_event(EventKind.GPU_UNSUPPORTED, head, None, details, "\n".join(lines))


def legacy_complete(texts: list[str]) -> bool:
    return "Continuing probe" in texts[-1] or "this GPU." in texts[-1]


def gpu_notice(joined: str, head: LogLine, bus: str | None, lines: list[str]
               ) -> DriverEvent | None:
    """A "The NVIDIA GPU <bus> ..." message that is not the fallen-off-the-bus one: the
    open kernel module refusing a GPU without GSP (pre-Turing). None for any other."""
    if not _NO_GSP.search(joined):
        return None
    details = {"reason": "open-module-no-gsp"}
    pci = PCI_ID.search(joined)
    if pci:
        details["pci_id"] = pci.group("id").lower()
    return make_event(EventKind.GPU_UNSUPPORTED, head, bus, details, "\n".join(lines))


def probe_failed(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """The kernel's line for a GPU whose probe the nvidia driver failed."""
    bus = normalize_bus_id(m.group("bus") or m.group("bus2"))
    return make_event(EventKind.PROBE_FAILED, line, bus, {"error": m.group("err")})


def probe_summary(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """The driver's summary: how many GPUs failed, or that none was initialised."""
    details = {"devices": m.group("n")} if m.group("n") else {"none_initialized": "yes"}
    return make_event(EventKind.PROBE_FAILED, line, None, details)
