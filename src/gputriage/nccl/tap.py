"""What the nccl-tests collector of ``gputriage nccl`` looks for in a block: shared by
the streamed reader (:mod:`gputriage.nccl.inputs`) and the large-file reader
(:mod:`gputriage.nccl.scan`)."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MARKERS", "ROWISH", "TYPES", "lines_with"]

# Lines that may belong to nccl-tests output: comment / header lines and table rows at
# the start of a line (one regex anchored on the newline, fast), and, found with
# bytes.find, lines naming a *_perf binary or a test failure and comment lines behind a
# launcher's or log shipper's prefix ("[1,0]<stdout>:", "0: ", "| <ts> |"). Once such a
# prefixed comment line was an nccl-tests one, rows are also found by their data type.
# The nccl-tests line test sorts them out.
ROWISH = re.compile(rb"\n[ \t]*(?:#|[0-9]+[ \t]+[0-9]+[ \t]+[A-Za-z])[^\n]*")
MARKERS = (b"_perf", b"failure", b"#")
TYPES = tuple(f" {t} ".encode() for t in (
    "float", "half", "double", "bfloat16", "int8", "uint8", "int32", "uint32", "int64", "uint64",
    "f8e4m3", "f8e5m2"))


def lines_with(buf: bytes, lo: int, hi: int, markers: Iterable[bytes],
               found: dict[int, bytes]) -> None:
    """Add the lines of ``buf[lo:hi]`` that hold one of ``markers`` to ``found`` (by start)."""
    for marker in markers:
        pos = buf.find(marker, lo, hi)
        while pos >= 0:
            start = buf.rfind(b"\n", lo, pos) + 1
            end = buf.find(b"\n", pos, hi)
            end = hi if end < 0 else end
            found.setdefault(start, buf[start:end])
            pos = buf.find(marker, end, hi)
