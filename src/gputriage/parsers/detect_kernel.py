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

import re

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.parsers.kernel_log import is_kernel_line, is_log_record, is_system_log_line
from gputriage.text.fields import split_lines
from gputriage.text.hslines import NON_ASCII, LineFinder, literal_pattern, text_offsets
from gputriage.text.paste import PasteDoc

__all__ = ["claim_kernel_log", "is_kernel_line", "is_log", "is_system_log_line", "kernel_lines",
           "record_starts"]


def is_log(lines: list[str]) -> bool:
    """Kernel records present, or mostly system-log records."""
    if any(is_kernel_line(ln) for ln in lines):
        return True
    content = [ln for ln in lines if ln.strip()]
    syslog = sum(1 for ln in content if is_system_log_line(ln))
    return syslog > 0 and syslog * 2 >= len(content)


def kernel_lines(text: str) -> str:
    """The system log records (kernel first of all, and journal boot markers) of a
    text, in order (none without a kernel or system-log record: ruled out at once
    where no line holds a word or shape of one, see ``_RECORD_GATE``)."""
    if not _RECORD_GATE.anywhere(text):  # (boot markers alone make no log)
        return ""
    lines = split_lines(text)
    if not is_log(lines):
        return ""
    kept = [ln for ln in lines if is_log_record(ln)]
    return "\n".join(kept) + "\n" if kept else ""


def _record(line: str) -> bool:
    return is_kernel_line(line) or is_system_log_line(line)


_SPACE = r"[^\S\n]"  # a space of a line (the paste's lines are searched joined by "\n")
# the same in Hyperscan's syntax, over ASCII bytes (Python's \s also holds \x1c-\x1f),
# but a carriage return: a text that holds one is read in lines cut at it too, and one
# that does not holds none to match
_HS_SPACE = rb"[\t\x0b\x0c\x1c-\x20]"
# The lines left are a log only with a kernel or system-log record among them: each
# prefix of kernel_log's has a word or a shape below somewhere in the line (a coloured
# line is tested whatever it holds: its escapes may cut a shape). Each shape, for
# Python's engine, starts with one character (the rest looked behind) so that the search
# skips to it in C; Hyperscan, which has no look-behind and finds them all in one pass,
# gets each as the same run of characters read forward (tests/test_detect_whole_text_
# gates.py holds that both find the same lines).
_RECORD_SHAPES: tuple[tuple[str, bytes], ...] = (
    (r"\x1b", rb"\x1b"),
    (rf"\[{_SPACE}*\+?[0-9]+\.[0-9]+\]", rb"\[" + _HS_SPACE + rb"*\+?[0-9]+\.[0-9]+\]"),  # dmesg
    (r"\](?<=[0-9]{2}:[0-9]{2}\])", rb"[0-9]{2}:[0-9]{2}\]"),  # dmesg -H minute
    (r"\](?<=[0-9] [0-9]{4}\])", rb"[0-9] [0-9]{4}\]"),  # dmesg -T stamp
    (r",(?<=[0-9],)[0-9]{1,20},[0-9]{1,20},[^;\n]{0,32};",  # /dev/kmsg
     rb"[0-9],[0-9]{1,20},[0-9]{1,20},[^;\n\r]{0,32};"),
    (r"T(?<=[0-9]{2}T)[0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]+[+-]",  # --time-format iso
     rb"[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]+[+-]"),
    (rf":[a-z]{{2,7}}{_SPACE}*:{_SPACE}*(?:\[|[0-9]{{4}}-)",  # dmesg -x
     rb":[a-z]{2,7}" + _HS_SPACE + rb"*:" + _HS_SPACE + rb"*(?:\[|[0-9]{4}-)"),
    # the end of a syslog record's prefix ("prog[123]: "; its time is left to the
    # test, which a search from the time on costs four times as much to rule out), of
    # dmesg -t's device and module messages ("mlx5_core 0000:3b:00.0: ",
    # "nv_peer_mem: ", "modprobe: FATAL: ") and of "kernel: "
    (rf":{_SPACE}(?<=[^\s:\[]:{_SPACE})",
     rb"[^\t\n\x0b\x0c\r\x1c-\x20:\[]:" + _HS_SPACE),
)
_RECORD_GATE = Gate(literals=("kern", "nvrm:", "nvidia"),
                    searches=tuple(re.compile(py) for py, _ in _RECORD_SHAPES), test=_record)
_BOOT_MARKER = "\n-- "  # a journal's boot marker ("-- Boot 1a2b... --") after a line
_BOOT_MARKER_CR = "\r-- "  # ... after a line that ends at a carriage return
# the gate's lines and the boot markers found in one Hyperscan pass (a large text's
# blocks: record_starts), and every line that holds a character that is not ASCII
_RECORD_LINES = LineFinder(
    [*(hs for _, hs in _RECORD_SHAPES), literal_pattern(_BOOT_MARKER.encode()),
     literal_pattern(_BOOT_MARKER_CR.encode())],
    [w.encode() for w in _RECORD_GATE.literals or ()], wide=[NON_ASCII])


def record_starts(text: str, data: bytes | None = None) -> list[int] | None:
    """Where the lines of ``text`` (cut at newlines, and at carriage returns where it
    holds one, as ``split_lines`` cuts them) that may be log records (``is_log_record``)
    start, in order: those holding a word or shape of a kernel or system-log record
    (``_RECORD_GATE``: in one Hyperscan pass where it is installed, and then also each
    line of a text that is not ASCII that holds a character that is not) or starting a
    journal boot marker. None where the gate does not stand for the tests (without
    Hyperscan, a text that is not ASCII or holds a carriage return: every line is
    tested). ``data``: the text encoded as UTF-8, where the caller has it."""
    cr = "\r" in text
    if data is None:
        data = text.encode("utf-8", "surrogatepass")
    found = _RECORD_LINES.starts(data, cr, text.isascii())
    if found is not None:
        found = set(text_offsets(text, data, found))
    else:  # (the gate gives None for a text that is not ASCII)
        found = None if cr else _RECORD_GATE.lines_holding(text)
        if found is None:
            return None
        at = text.find(_BOOT_MARKER)
        while at >= 0:
            found.add(at + 1)
            at = text.find(_BOOT_MARKER, at + 1)
    if text.startswith("-- "):
        found.add(0)
    return sorted(found)


@gated_by(_RECORD_GATE)
def claim_kernel_log(doc: PasteDoc) -> None:
    """Claim the log records among the lines left, when those lines are a log."""
    if not _RECORD_GATE.open(doc):
        return
    free = [ln for i, ln in enumerate(doc.lines) if doc.owner[i] is None]
    if not is_log(free):
        return
    for i, ln in enumerate(doc.lines):
        if doc.owner[i] is None and is_log_record(ln):
            doc.owner[i] = "kernel_log"
