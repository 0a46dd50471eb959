"""The output of GDRCopy's tests (``gdrcopy_sanity``, ``gdrcopy_copybw``,
``gdrcopy_copylat``, ``gdrcopy_apiperf``; ``sanity`` and ``copybw`` in older releases).

GDRCopy maps GPU memory into the CPU's address space through the ``gdrdrv`` kernel module
and its ``/dev/gdrdrv`` device. What its tests print tells whether that works:
``gdr_open`` failures (the driver or its device file missing), ``gdr_pin_buffer``
failures (the module could not pin GPU memory), the per-test summary, and the copy
bandwidth through the BAR mapping. An old sanity test asserts ``g != NULL`` in every
test when ``gdr_open`` fails and may still print "100%: Checks: N, Failures: 0": the
assertions are believed, not the summary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import ParseError, split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["GdrcopyRun", "claim_gdrcopy", "parse_gdrcopy"]

_ASSERTION = re.compile(r'^\s*Assertion "(?P<expr>.{1,300})" failed at (?P<where>[\w./-]{1,80}'
                        r':[0-9]{1,6})')
_OPEN_ERROR = re.compile(r"gdr_open error|ERR:\s+error opening driver(?: \(errno=(?P<errno>[0-9]{1,"
                         r"4})"
                         r"(?:/(?P<text>[^)]{1,80}))?\))?", re.IGNORECASE)
_NULL_HANDLE = re.compile(r"\(\(\s*(?:\w+\.)?g\s*\)\s*==\s*\(\(void\s*\*\)0\)\)|\bg\s*!=\s*NULL|"
                          r"gdr_open\(")
_PIN = re.compile(r"gdr_pin_buffer", re.IGNORECASE)
_MAP = re.compile(r"\bgdr_map\b", re.IGNORECASE)
_SUMMARY_V2 = re.compile(r"^\s*Total:\s*(?P<total>[0-9]{1,6}),\s*Passed:\s*(?P<passed>[0-9]{1,6}),"
                         r"\s*"
                         r"Failed:\s*(?P<failed>[0-9]{1,6})(?:,\s*Waived:\s*(?P<waived>[0-9]{1,6}))"
                         r"?")
_SUMMARY_CHECK = re.compile(r"^\s*(?P<pct>[0-9]{1,3})%:\s*Checks:\s*(?P<total>[0-9]{1,6}),\s*Failur"
                            r"es:"
                            r"\s*(?P<failed>[0-9]{1,6}),\s*Errors:\s*(?P<errors>[0-9]{1,6})")
_GPU = re.compile(r"^\s*GPU id:\s*(?P<index>[0-9]{1,3});\s*name:\s*(?P<name>[^;]{1,80});\s*Bus id:"
                  r"\s*(?P<bus>[0-9a-fA-F:.]{5,16})")
_BW = re.compile(r"^\s*(?P<dir>write|read) BW:\s*(?P<mbps>[0-9]{1,7}(?:\.[0-9]{1,4})?)\s*MB/s")
_MAPPED = re.compile(r"^\s*info\.(?P<key>mapped|wc_mapping):\s*(?P<value>[0-9])")

# a line only GDRCopy prints: where a block of its output is recognised
_MARK = re.compile(r"\bgdr_(?:open|close|pin_buffer|unpin_buffer|map|unmap|copy_\w{1,20}|"
                   r"get_info\w{0,4})\b|closing gdrdrv|failed at sanity\.cpp:|"
                   r"^\s*GPU id:[0-9]{1,3}; name: .{1,80}; Bus id:|"
                   r"^\s*info\.(?:va|mapped_size|page_size|mapped|wc_mapping):|"
                   r"^\s*map_d_ptr:|^\s*(?:write|read) BW: [0-9]", re.IGNORECASE)
# the other lines of its output
_LINE = re.compile(r"^\s*(?:Running suite\(s\):|(?:ERR|WARN|INFO|DBG):\s+\S|Assertion \"|"
                   r"[0-9]{1,3}%: Checks:|Total: [0-9]|Test: |"
                   r"selecting device|testing size:|rounded size:|gpu alloc fn:|device ptr:|"
                   r"page offset:|user-space pointer:|(?:writing|reading) test, size=|"
                   r"(?:unmapping|unpinning) buffer|closing gdrdrv|Passed|Failed|Waived|"
                   r"buffer size:|size: [0-9]|[0-9]{1,12}\s+[0-9]{1,9}(?:\.[0-9]{1,4})?\s*$)")


@dataclass
class GdrcopyRun:
    """What one or more GDRCopy test runs printed."""

    assertions: list[str] = field(default_factory=list)  # the failed assertion lines
    open_errors: list[str] = field(default_factory=list)  # gdr_open failures
    errno: int | None = None  # the errno of "error opening driver", when printed
    pin_failures: list[str] = field(default_factory=list)
    map_failures: list[str] = field(default_factory=list)
    other_failures: list[str] = field(default_factory=list)
    summary: str | None = None  # the summary line as printed
    failed: int | None = None  # failed tests the summary counts
    gpus: list[tuple[int, str, str]] = field(default_factory=list)  # (index, name, bus id)
    write_mbps: float | None = None
    read_mbps: float | None = None
    mapped: bool | None = None
    wc_mapping: bool | None = None
    bandwidth_lines: list[str] = field(default_factory=list)

    @property
    def open_failed(self) -> bool:
        """gdr_open failed: the library could not open /dev/gdrdrv."""
        return bool(self.open_errors)


def _read_assertion(run: GdrcopyRun, line: str, expr: str) -> None:
    run.assertions.append(line)
    if _NULL_HANDLE.search(expr):
        run.open_errors.append(line)
    elif _PIN.search(expr):
        run.pin_failures.append(line)
    elif _MAP.search(expr):
        run.map_failures.append(line)
    else:
        run.other_failures.append(line)


def _read_line(run: GdrcopyRun, line: str) -> bool:
    """One line into ``run``; whether it was GDRCopy's."""
    text = line.strip()
    if (m := _ASSERTION.match(text)) is not None:
        _read_assertion(run, text, m.group("expr"))
    elif (m := _OPEN_ERROR.search(text)) is not None:
        run.open_errors.append(text)
        if m.group("errno"):
            run.errno = int(m.group("errno"))
    elif _PIN.search(text) and re.search(r"error|fail", text, re.IGNORECASE):
        run.pin_failures.append(text)
    elif (m := _SUMMARY_V2.match(text) or _SUMMARY_CHECK.match(text)) is not None:
        run.summary = text
        run.failed = int(m.group("failed")) + int(m.groupdict().get("errors") or 0)
    elif (m := _GPU.match(text)) is not None:
        run.gpus.append((int(m.group("index")), m.group("name").strip(), m.group("bus")))
    elif (m := _BW.match(text)) is not None:
        setattr(run, f"{m.group('dir')}_mbps", float(m.group("mbps")))
        run.bandwidth_lines.append(text)
    elif (m := _MAPPED.match(text)) is not None:
        setattr(run, m.group("key"), m.group("value") == "1")
    else:
        return bool(_MARK.search(text) or _LINE.match(text))
    return True


def parse_gdrcopy(text: str) -> GdrcopyRun:
    """GDRCopy's test output; ParseError when no line of it is GDRCopy's own."""
    run = GdrcopyRun()
    lines = split_lines(text)
    if not any(_MARK.search(line) for line in lines):
        raise ParseError("not GDRCopy test output: no gdr_* call, sanity.cpp assertion or "
                         "copybw line")
    for line in lines:
        if line.strip():
            _read_line(run, line)
    return run


# literals one of which a line only GDRCopy prints holds (a cheap test before _MARK)
_MARK_WORDS = ("gdr", "sanity.cpp", "GPU id:", "info.", "map_d_ptr", " BW: ")


_MARK_GATE = Gate(literals=_MARK_WORDS)  # a claim starts at a free line holding one


@gated_by(_MARK_GATE)
def claim_gdrcopy(doc: PasteDoc) -> None:
    """Each run of GDRCopy output lines around a line only GDRCopy prints."""
    if not _MARK_GATE.open(doc):
        return
    for i in doc.lines_with(_MARK_WORDS):
        if not (doc.free(i) and _ours(doc.lines[i]) and _MARK.search(doc.lines[i])):
            continue
        first = i
        while doc.free(first - 1) and _ours(doc.lines[first - 1]):
            first -= 1
        doc.claim("gdrcopy", first, doc.extend(i, _ours))


# a row of lsmod or /proc/modules ("gdrdrv  17384  0"): the module listing's, not ours
_MODULE_ROW = re.compile(r"^\s*[\w-]{1,64}\s+[0-9]{1,12}\s+[0-9]{1,6}(?:\s|$)")


def _ours(line: str) -> bool:
    if _MODULE_ROW.match(line):
        return False
    return bool(_MARK.search(line) or _LINE.match(line))
