"""Kernel and system log records in a paste: the ``kernel_log`` source's detector.

Every common format counts: dmesg (raw, ``-H``, ``-T``, ``-t``, ``--time-format
iso``), /dev/kmsg and /proc/kmsg records, journalctl (short, short-iso, json),
syslog files and Talos' console format. Colour escapes of ``dmesg --color`` and
``journalctl`` are ignored. Records of other programs of the system log are kept
with the kernel's when the text is a log.
"""

from __future__ import annotations

import re

from gputriage.ingest.paste import PasteDoc

__all__ = ["claim_kernel_log", "is_kernel_line", "is_log", "is_system_log_line", "kernel_lines"]

_KERNEL_START = re.compile("|".join(f"(?:{p})" for p in (
    r"\s*(?:>\s*)?(?:<\d{1,3}>)?\[\s*\+?\d+\.\d+\]",  # dmesg raw, /proc/kmsg, dmesg -H delta
    r"\s*(?:>\s*)?\[[A-Z][a-z]{2}\s?\d{1,2} \d\d:\d\d\]",  # dmesg -H minute stamp
    r"\d{1,3},\d{1,20},\d{1,20},[^;]{0,32};",  # /dev/kmsg record
    r"\s*(?:[\w\-]{1,32} [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]:|nv_peer_mem:"
    r"|modprobe: (?:ERROR|FATAL): could not insert)\s",  # dmesg -t device / module messages
    r"\s*(?:>\s*)?\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]",
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d+[+-]\d\d:?\d\d\s",  # dmesg --time-format iso
    r"\s*kernel:\s",
    r"\{.*\"(?:_TRANSPORT|SYSLOG_IDENTIFIER)\"\s*:\s*\"kernel\"",  # journalctl -o json
    r"\s*(?:nvidia(?:-(?:modeset|nvlink|uvm|drm|peermem|nvswitch\d*))?|nvidia_uvm|nvidia_drm)"
    r"(?::|\s+[0-9a-f]{4}:[0-9a-f]{2}:)",
)))
_SYSLOG_KERNEL = re.compile(r"\d\d:\d\d:\d\d\S*\s+\S+\s+kernel(?:\[\d+\])?:\s")
_TALOS_KERNEL = re.compile(r"\bkern:\s*\w+:\s*\[")
_BOOT_MARK = re.compile(r"^-- (?:Boot [0-9a-f]+|Logs begin|Journal begins|No entries|Reboot)")
_ANSI = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")
# a syslog / journal record of any program: "May 31 05:33:40 host prog[123]: ..."
_SYSTEM_LOG = re.compile(
    r"^\s*(?:[A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S*)"
    r"\s+\S+\s+[^\s:\[]+(?:\[\d+\])?:\s")


def is_kernel_line(line: str) -> bool:
    """Whether one line looks like a kernel log record (any common format, colour
    escapes of ``dmesg --color`` / ``journalctl`` ignored)."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "NVRM:" in line or _KERNEL_START.match(line):
        return True
    if "kernel" in line and _SYSLOG_KERNEL.search(line):
        return True
    return "kern:" in line and _TALOS_KERNEL.search(line) is not None


def is_system_log_line(line: str) -> bool:
    """A syslog/journal record of any program (kept with the kernel's: the system log)."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return _SYSTEM_LOG.match(line) is not None


def is_log(lines: list[str]) -> bool:
    """Kernel records present, or mostly system-log records."""
    if any(is_kernel_line(ln) for ln in lines):
        return True
    content = [ln for ln in lines if ln.strip()]
    syslog = sum(1 for ln in content if is_system_log_line(ln))
    return syslog > 0 and syslog * 2 >= len(content)


def _log_record(line: str) -> bool:
    return is_kernel_line(line) or is_system_log_line(line) or _BOOT_MARK.match(line) is not None


def kernel_lines(text: str) -> str:
    """The system log records (kernel first of all, and journal boot markers) of a
    text, in order."""
    lines = text.splitlines()
    if not is_log(lines):
        return ""
    kept = [ln for ln in lines if _log_record(ln)]
    return "\n".join(kept) + "\n" if kept else ""


def claim_kernel_log(doc: PasteDoc) -> None:
    """Claim the log records among the lines left, when those lines are a log."""
    free = [ln for i, ln in enumerate(doc.lines) if doc.owner[i] is None]
    if not is_log(free):
        return
    for i, ln in enumerate(doc.lines):
        if doc.owner[i] is None and _log_record(ln):
            doc.owner[i] = "kernel_log"
