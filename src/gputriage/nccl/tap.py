"""What the nccl-tests collector of ``gputriage nccl`` looks for in a block: shared by
the streamed reader (:mod:`gputriage.nccl.inputs`) and the large-file reader
(:mod:`gputriage.nccl.scan`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable

from gputriage.parsers.nccl_log import FINDER_MIN, line_starts

__all__ = ["MARKERS", "ROWISH", "ROW_DIGITS", "TYPES", "candidates", "lines_with"]

# Lines that may belong to nccl-tests output: comment / header lines and table rows at
# the start of a line (one regex anchored on the newline), and lines naming a *_perf
# binary or a test failure and comment lines behind a launcher's or log shipper's prefix
# ("[1,0]<stdout>:", "0: ", "| <ts> |"), found with bytes.find; or all of them by one
# Hyperscan pass (:func:`candidates`). Once such a prefixed comment line was an
# nccl-tests one, rows are also found by their data type. The nccl-tests line test sorts
# them out.
ROWISH = re.compile(rb"\n[ \t]*(?:#|[0-9]+[ \t]+[0-9]+[ \t]+[A-Za-z])[^\n]*")
ROW_DIGITS = rb"[ \t]*[0-9]+[ \t]+[0-9]+[ \t]+[A-Za-z]"  # ROWISH's row ('#' is a marker)
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


def candidates(buf: bytes, lo: int, hi: int) -> dict[int, bytes]:
    """The lines of ``buf[lo + 1:hi]`` (``buf[lo]`` is a newline) that ROWISH matches or
    that hold a marker, by start: by one Hyperscan pass where its wheel is installed and
    the piece is at least FINDER_MIN long, else by the regex and ``bytes.find``."""
    find = _finder() if hi - lo >= FINDER_MIN else None
    if find is None:
        found = {m.start() + 1: m.group()[1:] for m in ROWISH.finditer(buf, lo, hi)}
        lines_with(buf, lo, hi, MARKERS, found)
        return found
    out: dict[int, bytes] = {}
    for start in find(buf, lo, hi):
        end = buf.find(b"\n", start, hi)
        out[start] = buf[start:hi if end < 0 else end]
    return out


@functools.lru_cache(maxsize=1)
def _finder() -> Callable[[bytes, int, int], list[int]] | None:
    """The starts of the lines of ``buf[lo:hi]`` holding a marker or a row (its newline
    in the piece), by one Hyperscan pass; None without the wheel."""
    from gputriage.text.hslines import group_ends

    exprs = [*(re.escape(m) for m in MARKERS), rb"\n" + ROW_DIGITS]
    ends_in = group_ends(exprs, [0] * len(exprs))
    if ends_in is None:
        return None

    def find(buf: bytes, lo: int, hi: int) -> list[int]:
        return line_starts(buf, lo, hi, ends_in(buf, lo, hi)[0])

    return find
