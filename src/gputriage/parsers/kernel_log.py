"""What a kernel-log line looks like: the record prefixes of every common format.

Shared by the paste detector (:mod:`gputriage.parsers.detect_kernel`) and ``gputriage logs``
(:mod:`gputriage.logscan`): a text is judged as a kernel log only when its lines carry
a log record's prefix (dmesg ``[ 12.345678]``, ``Mon DD HH:MM:SS host kernel:``, an
ISO time then ``host kernel:``, ``NVRM:`` / ``nvidia-*:`` lines of ``dmesg -t``...).
A Markdown table row, prose or code that merely mentions ``NVRM: Xid ... 79`` is not
one. Imports nothing heavier than ``re``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["HEAD_LINES", "BOOT_MARK", "is_kernel_line", "is_log_record", "is_other_record",
           "is_system_log_line", "shape_refusal"]

HEAD_LINES = 1000  # the lines of an input's head that the shape check reads

_KERNEL_START = re.compile("|".join(f"(?:{p})" for p in (
    # dmesg raw, /proc/kmsg, dmesg -H delta
    r"\s*(?:>\s*)?(?:<[0-9]{1,3}>)?\[\s*\+?[0-9]+\.[0-9]+\]",
    r"\s*(?:>\s*)?\[[A-Z][a-z]{2}\s?[0-9]{1,2} [0-9]{2}:[0-9]{2}\]",  # dmesg -H minute stamp
    r"[0-9]{1,3},[0-9]{1,20},[0-9]{1,20},[^;]{0,32};",  # /dev/kmsg record
    r"\s*(?:[\w\-]{1,32} [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]:|nv_peer_mem:"
    r"|modprobe: (?:ERROR|FATAL): could not insert)\s",  # dmesg -t device / module messages
    r"\s*(?:>\s*)?\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ 0-9][0-9] "
    r"[0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}\]",
    # dmesg --time-format iso
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]+[+-][0-9]{2}:?[0-9]{2}\s",
    r"\s*kernel:\s",
    r"\{.*\"(?:_TRANSPORT|SYSLOG_IDENTIFIER)\"\s*:\s*\"kernel\"",  # journalctl -o json
    r"\s*(?:nvidia(?:-(?:modeset|nvlink|uvm|drm|peermem|nvswitch[0-9]*))?|nvidia_uvm|nvidia_drm)"
    r"(?::|\s+[0-9a-f]{4}:[0-9a-f]{2}:)",
    r"\s*[a-z]{2,8}\s*:[a-z]{2,7}\s*:\s*\[",  # dmesg -x: "kern  :warn  : [ 12.3]"
    # dmesg -x --time-format iso: "kern  :err   : 2025-01-17T15:36:15,345059+00:00 "
    r"\s*[a-z]{2,8}\s*:[a-z]{2,7}\s*:\s*[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}",
    # busybox / OpenWrt logread: "Wed Mar 13 05:43:31 2024 kern.err kernel: "
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} "
    r"[0-9]{4} [a-z]{2,8}\.[a-z]{2,8} kernel(?:\[[0-9]+\])?:\s",
    r"[0-9]{9,11}\.[0-9]{1,9}\s+\S+\s+kernel:\s",  # journalctl -o short-unix
)))
# NVRM: first on the line, or after a prefix that ends in "]" or ":" and holds none of
# the characters of Markdown, JSON or code ("|", "`", quotes, braces)
_NVRM = re.compile(r"\s*(?:[^|`\"'{}]{0,160}[\]:]\s*)?NVRM:")
_SYSLOG_KERNEL = re.compile(r"[0-9]{2}:[0-9]{2}:[0-9]{2}\S*\s+\S+\s+kernel(?:\[[0-9]+\])?:\s")
_TALOS_KERNEL = re.compile(r"\bkern:\s*\w+:\s*\[")
BOOT_MARK = re.compile(r"^-- (?:Boot [0-9a-f]+|Logs begin|Journal begins|No entries|Reboot)")
# a dmesg -t record of any driver: "usb 1-1: new ...", "EXT4-fs (sda1): mounted ..."
_DMESG_T = re.compile(r"[A-Za-z][\w\-.]{0,31}(?:\[[0-9]+\])?(?: [\w\-.:/]{1,40})?"
                      r"(?: \([\w\-.]{1,40}\))?: \S")
# a dmesg stamp after a few stray characters ("> ", the cut end of a line before it),
# none of them Markdown's or a quote
_LATE_STAMP = re.compile(r"[^|`\"']{0,15}?\[\s*[0-9]+\.[0-9]+\]")
_ANSI = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")
# a syslog / journal record of any program: "May 31 05:33:40 host prog[123]: ..."
_SYSTEM_LOG = re.compile(
    r"^\s*(?:[A-Z][a-z]{2}\s+[0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2}|"
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}\S*)"
    r"\s+\S+\s+[^\s:\[]+(?:\[[0-9]+\])?:\s")


def is_kernel_line(line: str) -> bool:
    """Whether one line is a kernel log record (any common format, colour escapes of
    ``dmesg --color`` / ``journalctl`` ignored)."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if _KERNEL_START.match(line) or ("NVRM:" in line and _NVRM.match(line)):
        return True
    if "kernel" in line and _SYSLOG_KERNEL.search(line):
        return True
    return "kern:" in line and _TALOS_KERNEL.search(line) is not None


# what every _SYSTEM_LOG record holds (the ": " after its program), found faster than a
# training log's "2025-03-02 10:00:00,123 [rank3] INFO ..." lines fail the whole pattern
_PROGRAM_END = re.compile(r":\s")


def is_system_log_line(line: str) -> bool:
    """A syslog/journal record of any program (kept with the kernel's: the system log)."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    return _PROGRAM_END.search(line) is not None and _SYSTEM_LOG.match(line) is not None


def is_log_record(line: str) -> bool:
    """A kernel or system log record, or a journal boot marker."""
    return is_kernel_line(line) or is_other_record(line)


def is_other_record(line: str) -> bool:
    """A log record other than the kernel's: a system log record or a journal boot
    marker (``is_log_record`` of a line already known not to be a kernel record)."""
    return is_system_log_line(line) or BOOT_MARK.match(line) is not None


def shape_refusal(name: str, lines: Iterable[str], limit: int = HEAD_LINES) -> str | None:
    """Why ``name`` is not a kernel log, judged on its first ``limit`` non-blank lines:
    none of them is a log record, or fewer than a quarter are (a document or code that
    quotes a few log lines). None when it is one (or holds nothing to judge)."""
    seen = records = 0
    for line in lines:
        if not line.strip():
            continue
        seen += 1
        records += (is_log_record(line) or _DMESG_T.match(line) is not None
                    or _LATE_STAMP.match(line) is not None)
        if seen >= limit:
            break
    if seen == 0 or records * 4 >= seen:
        return None
    what = f"the first {seen} lines" if seen > 1 else "its only line"
    if records == 0:
        return f"{name}: not a kernel log (no kernel-log lines in {what})"
    return f"{name}: not a kernel log (only {records} kernel-log lines in {what})"
