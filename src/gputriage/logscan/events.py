"""NVIDIA-relevant events in kernel log lines: Xid and SXid, the driver stack
(API mismatch, fallen off the bus, RmInitAdapter, no adapter probed, GSP
firmware, GSP RPC timeouts and errors, reset required, module load failures),
NVLink, nvidia-peermem, PCIe AER and bandwidth, mlx5 link state, segfaults in
GPU libraries, hung tasks and soft lockups, host hardware errors and link flaps.

Accepted line shapes (each prefix optional, stripped in this order): a
markdown ``> `` quote; a ``<6>`` printk level; Talos ``<ip>: kern: <level>:
[ts]: ``; dmesg -x ``kern  :warn  : ``; syslog ``Mon dd hh:mm:ss[.us] host
kernel: `` or ISO ``2024-05-01T10:00:00+0000 host kernel: ``; a bare
``kernel: ``; dmesg ``[ 1234.567890] `` or dmesg -T ``[Fri Aug 30 11:11:22
2024] `` (optionally followed by ``host kernel: ``). rsyslog ``#012`` escapes
are split into lines. Multi-line messages (API mismatch, "The NVIDIA GPU ...
has fallen off the bus") are joined from their continuation lines; SXid
"Severity ... Engine instance" / "Data" lines join their SXid; a GSP falcon
core dump is one event; a hung task or soft lockup is marked
``in_nvidia="yes"`` when a call-trace line within 30 lines names nvidia code.

Where each part lives: the event kinds and the event (:mod:`.kernel_model`), the
table of patterns (:mod:`.kernel_table`, one row per pattern with a real sample
line), what later lines add (:mod:`.kernel_follow`), the line prefixes and message
regexes (:mod:`.kernel_patterns`, :mod:`.kernel_host`) and the streaming extractor
(:mod:`.kernel_extractor`). This module is the entry point: reading files,
formats, absolute times and boots are :mod:`gputriage.logscan`'s job, and
:func:`scan_driver_events` delegates to it.
"""

from __future__ import annotations

from gputriage.parsers.kernel_extractor import (
    MAX_LINE,
    EventExtractor,
    iter_driver_events,
    split_escaped,
)
from gputriage.parsers.kernel_model import DriverEvent, LogLine
from gputriage.parsers.kernel_patterns import split_prefix

__all__ = ["MAX_LINE", "DriverEvent", "EventExtractor", "LogLine",
           "iter_driver_events", "scan_driver_events", "split_escaped", "split_prefix"]


def scan_driver_events(text: str) -> list[DriverEvent]:
    """All events in a kernel log's text, in log order, with times and boots;
    never raises (same as ``gputriage.logscan.scan_text(text).events``)."""
    if not text:
        return []
    from gputriage.logscan import scan_text

    return scan_text(text).events
