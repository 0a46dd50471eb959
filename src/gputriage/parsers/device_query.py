"""The CUDA sample ``deviceQuery``: the devices the CUDA runtime enumerates, or
the error it stopped on.

A passing run prints ``Detected N CUDA Capable device(s)`` and a block per
device (``Device 0: "NAME"``, ``CUDA Driver Version / Runtime Version  12.2 /
12.1``, ``CUDA Capability Major/Minor version number:  9.0``) and ends with
``Result = PASS``; a failing one prints ``cudaGetDeviceCount returned 802``,
``-> system not yet initialized`` and ``Result = FAIL``. Excerpts (without
the banner or the result line) are read too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import split_lines, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["DeviceQuery", "DqDevice", "claim_device_query", "is_device_query_line",
           "parse_device_query"]

_BANNER = re.compile(r"CUDA Device Query \(Runtime API\)|^\s*\S*(?:deviceQuery|sample) "
                     r"Starting\.\.\.", re.IGNORECASE)
_RETURNED = re.compile(r"cuda\w+ returned (?P<code>[0-9]{1,5})")
_ARROW = re.compile(r"^\s*->\s*(?P<text>\S.*)$")
_RESULT = re.compile(r"^\s*Result = (?P<result>PASS|FAIL|WAIVED)\b")
_DETECTED = re.compile(r"^\s*Detected (?P<n>[0-9]{1,4}) CUDA Capable device")
_NO_DEVICE = re.compile(r"There (?:is|are) no (?:available )?device\(?s?\)? supporting CUDA",
                        re.IGNORECASE)
_DEVICE = re.compile(r"^\s*Device (?P<index>[0-9]{1,4}): \"(?P<name>[^\"]{1,120})\"")
_VERSIONS = re.compile(r"CUDA Driver Version / Runtime Version\s+(?P<driver>[0-9]+\.[0-9]+)\s*/\s*"
                       r"(?P<runtime>[0-9]+\.[0-9]+)")
_CAPABILITY = re.compile(r"CUDA Capability Major/Minor version number:\s+(?P<cc>[0-9]+\.[0-9]+)")
_SUMMARY = re.compile(r"deviceQuery, CUDA Driver = CUDART, CUDA Driver Version = "
                      r"(?P<driver>[0-9]+\.[0-9]+), CUDA Runtime Version = "
                      r"(?P<runtime>[0-9]+\.[0-9]+)")


@dataclass
class DqDevice:
    """One device as deviceQuery describes it."""

    index: int
    name: str
    driver_version: str | None = None  # CUDA version the driver supports ("12.2")
    runtime_version: str | None = None  # CUDA runtime the sample was built with
    capability: str | None = None  # compute capability ("9.0")


@dataclass
class DeviceQuery:
    """A deviceQuery run: its result, its error, its devices and the lines that show them."""

    result: str | None = None  # PASS | FAIL | WAIVED (None: not in the excerpt)
    error_code: int | None = None  # the cudaError_t number it returned
    error_text: str | None = None  # the runtime's words for it
    detected: int | None = None
    devices: list[DqDevice] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.result == "FAIL" or self.error_code is not None or self.detected == 0


def is_device_query_line(line: str) -> bool:
    """A line only deviceQuery prints (its banner, its error or its result)."""
    return bool(_BANNER.search(line) or _RETURNED.search(line) and "cudaGetDevice" in line
                or _SUMMARY.search(line) or _DETECTED.match(line))


def _read(dq: DeviceQuery, line: str) -> bool:
    """Apply one line; False when it is not deviceQuery's."""
    if m := _RETURNED.search(line):
        dq.error_code = strict_int(m.group("code"), signed=False)
    elif (m := _ARROW.match(line)) and dq.error_code is not None and dq.error_text is None:
        dq.error_text = m.group("text").strip()
    elif m := _RESULT.match(line):
        dq.result = m.group("result")
    elif m := _DETECTED.match(line):
        dq.detected = strict_int(m.group("n"), signed=False)
    elif _NO_DEVICE.search(line):
        dq.detected = 0
    elif (m := _DEVICE.match(line)) and (index := strict_int(m.group("index"))) is not None:
        dq.devices.append(DqDevice(index, m.group("name").strip()))
    elif (m := _VERSIONS.search(line) or _SUMMARY.search(line)) and dq.devices:
        dq.devices[-1].driver_version = m.group("driver")
        dq.devices[-1].runtime_version = m.group("runtime")
    elif (m := _CAPABILITY.search(line)) and dq.devices:
        dq.devices[-1].capability = m.group("cc")
    else:
        return bool(_BANNER.search(line))
    return True


def parse_device_query(text: str) -> DeviceQuery:
    """Parse deviceQuery output into a :class:`DeviceQuery`.

    Empty text gives an empty result; text with no line of deviceQuery's
    (banner, error, device block or result) raises :class:`ParseError`.
    """
    dq = DeviceQuery()
    if not text or not text.strip():
        return dq
    for raw in split_lines(text):
        if _read(dq, raw):
            dq.lines.append(raw.strip())
    if not dq.lines:
        raise ParseError("not deviceQuery output: no banner, cudaGetDeviceCount error, device "
                         "or Result line")
    return dq


# --- recognising it in a paste -------------------------------------------------------
_DQ_CONT = re.compile(r"^\s*$|^\s|^(?:cuda\w+ returned|->|Result = |Detected [0-9]+ CUDA|"
                      r"Device [0-9]+: "
                      r"\"|There (?:is|are) no|deviceQuery, CUDA Driver|> )")


_GATE = Gate(_BANNER, _SUMMARY, _DETECTED, literals=("cudaGetDevice",))  # is_device_query_line


@gated_by(_GATE)
def claim_device_query(doc: PasteDoc) -> None:
    """deviceQuery output: from its banner (or its error) to its Result line."""
    if not _GATE.open(doc):
        return
    i = 0
    while i < len(doc.lines):
        if not (doc.free(i) and is_device_query_line(doc.lines[i])):
            i += 1
            continue
        end = i + 1
        while doc.free(end) and _DQ_CONT.match(doc.lines[end]):
            end += 1
            if doc.lines[end - 1].startswith("Result = "):
                break
        doc.claim("device_query", i, end)
        i = end
