"""Kernel and system log records in a paste: the ``kernel_log`` source's detector.

Every common format counts: dmesg (raw, ``-H``, ``-T``, ``-t``, ``--time-format
iso``), /dev/kmsg and /proc/kmsg records, journalctl (short, short-iso, json),
syslog files and Talos' console format. Colour escapes of ``dmesg --color`` and
``journalctl`` are ignored. Records of other programs of the system log are kept
with the kernel's when the text is a log. A line counts only with a log record's
prefix (:mod:`gputriage.parsers.kernel_log`): a Markdown row, JSON or prose that
quotes ``NVRM: Xid ...`` is not a log line.
"""

from __future__ import annotations

from gputriage.parsers.kernel_log import is_kernel_line, is_log_record, is_system_log_line
from gputriage.text.fields import split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["claim_kernel_log", "is_kernel_line", "is_log", "is_system_log_line", "kernel_lines"]


def is_log(lines: list[str]) -> bool:
    """Kernel records present, or mostly system-log records."""
    if any(is_kernel_line(ln) for ln in lines):
        return True
    content = [ln for ln in lines if ln.strip()]
    syslog = sum(1 for ln in content if is_system_log_line(ln))
    return syslog > 0 and syslog * 2 >= len(content)


def kernel_lines(text: str) -> str:
    """The system log records (kernel first of all, and journal boot markers) of a
    text, in order."""
    lines = split_lines(text)
    if not is_log(lines):
        return ""
    kept = [ln for ln in lines if is_log_record(ln)]
    return "\n".join(kept) + "\n" if kept else ""


def claim_kernel_log(doc: PasteDoc) -> None:
    """Claim the log records among the lines left, when those lines are a log."""
    free = [ln for i, ln in enumerate(doc.lines) if doc.owner[i] is None]
    if not is_log(free):
        return
    for i, ln in enumerate(doc.lines):
        if doc.owner[i] is None and is_log_record(ln):
            doc.owner[i] = "kernel_log"
