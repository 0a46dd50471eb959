"""Kernel logs read at grep speed: every NVIDIA-relevant event, with its time and boot.

``scan_paths`` reads files (plain, gzip, xz, bzip2, rotated sets) or stdin
(``-``) in 8 MiB blocks and never decodes a line unless it holds one of a few
anchor literals (``NVRM: ``, ``nvidia``, ``mlx5_``, ``PCIe Bus Error``,
``segfault at`` ...; see ``ANCHORS``). Anchors are found through libc
``strstr`` via ctypes (each block's last newline turned into the NUL it needs
while searching; ``memmem`` where a block has no such newline or many NULs)
and through "probes" (a rare-led substring standing for one or more anchors,
checked against them on the line), so a few fast passes cover every anchor.
Large plain files are read in BLOCK-aligned reads by forked worker processes
(Linux), which search and count newlines and send back only candidate lines;
other inputs are searched on threads (the libc calls release the GIL) from
reused read buffers; where libc is unavailable ``bytes.find`` does the work on
one thread. Candidate lines (plus the continuation lines after them, and 30
lines after a hung task or soft lockup for its call trace) are decoded and
parsed by :class:`gputriage.parsers.kernel_events.EventExtractor`.

Formats are recognised line by line: dmesg (raw, ``-T``, ``--time-format
iso``), journalctl ``-k`` (short, short-iso, short-precise, ``-o json``),
/dev/kmsg records, syslog / kern.log, Talos. Boots are separated at
journalctl ``-- Boot <id> --`` / ``-- Reboot --`` markers, ``Linux version``
banners, journal-json ``_BOOT_ID`` changes, /dev/kmsg sequence resets and
dmesg uptimes going backwards. Only candidate lines are looked at, so a
reboot is seen through its markers and banner (both anchors) or through the
uptimes of the candidate lines around it: good enough for kernel logs,
where the banner starts every boot. Boot 0 is the last boot of the input.

Absolute times: ISO and JSON times as printed (naive ones taken as UTC);
syslog ``Mon dd hh:mm:ss`` gets the current year (the previous one when that
would lie in the future) and UTC; dmesg ``-T`` is taken as UTC; dmesg raw
and /dev/kmsg only give ``uptime_s``.

Several inputs make one timeline: they are ordered by their first time when
every input has one, else by rotation number (``kern.log.2.gz`` before
``kern.log.1`` before ``kern.log``); a boot continues across inputs unless a
marker, boot id, uptime or sequence says otherwise. Unreadable, truncated or
corrupt inputs are noted in ``problems``; only when no input can be read at
all is :class:`gputriage.errors.InputError` raised. Memory: blocks are
streamed, a bounded number in flight; only events are kept.
"""

from __future__ import annotations

import bz2
import contextlib
import io
import json
import lzma
import os
import re
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from gputriage.errors import InputError
from gputriage.parsers.kernel_events import (
    MAX_LINE,
    TRACE_WINDOW,
    DriverEvent,
    EventExtractor,
    LogLine,
    split_escaped,
    split_prefix,
)

__all__ = ["ANCHORS", "BootInfo", "LogScan", "scan_paths", "scan_text"]

BLOCK = 8 << 20
LONG_LINE = 4 << 20  # a line without a newline for this long is cut into pieces
MAX_CONT = 8  # whitespace-led continuation lines taken after a candidate
ANCHORS: tuple[bytes, ...] = (
    b"NVRM: ", b"nvidia", b"mlx5_core ", b"error received", b"PCIe Bus Error", b"PCIe bandwidth",
    b"segfault at ", b"soft lockup", b"blocked for more than", b"-- Boot ", b"-- Reboot --",
    b"Linux version ",
)
_TRACE_ANCHORS = frozenset({b"soft lockup", b"blocked for more than"})
_JSON_ANCHOR = b'"MESSAGE":['  # journal JSON prints non-UTF-8 messages as byte arrays


@dataclass
class BootInfo:
    """One boot seen in the input."""

    index: int  # 0 = last/current, -1, -2 ...
    boot_id: str | None  # journal boot id when printed
    first: datetime | None
    last: datetime | None


@dataclass
class LogScan:
    """What a kernel-log scan found, and how much it read."""

    events: list[DriverEvent] = field(default_factory=list)
    boots: list[BootInfo] = field(default_factory=list)  # oldest first
    lines: int = 0  # lines seen
    skipped: int = 0  # candidate lines cut or not cleanly decodable (counted, never fatal)
    bytes: int = 0
    formats: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


# --- finding candidate lines -------------------------------------------------------------

# Each anchor is searched through a "probe": a substring of it whose first two bytes are
# rare in kernel logs (glibc's strstr filters on the first two bytes 16 at a time, so a
# rare pair is what makes a pass fast), and one probe may stand for several anchors; a
# line a probe finds is a candidate only when it holds one of that probe's anchors, so
# the candidate lines are exactly the lines holding an anchor.
_PROBE_OF: dict[bytes, bytes] = {
    b"error received": b"rror received", b"PCIe Bus Error": b"PCIe ",
    b"PCIe bandwidth": b"PCIe ", b"segfault at ": b"gfault at ", b"-- Boot ": b"-- ",
    b"-- Reboot --": b"-- ",
}


@dataclass(frozen=True)
class _Probe:
    """One literal searched for, the anchors it stands for, and its context mode."""

    needle: bytes
    anchors: tuple[bytes, ...]  # () when the needle is itself the only anchor

    @property
    def mode(self) -> int:
        return 1 if any(a in _TRACE_ANCHORS for a in self.anchors or (self.needle,)) else 0


def _probes(anchors: Sequence[bytes]) -> tuple[_Probe, ...]:
    """The probes that find every line holding one of ``anchors``."""
    groups: dict[bytes, list[bytes]] = {}
    for a in anchors:
        groups.setdefault(_PROBE_OF.get(a, a), []).append(a)
    out = []
    for needle, group in groups.items():
        exact = group == [needle]
        modes = {a in _TRACE_ANCHORS for a in group}
        if len(modes) > 1:  # a probe must not mix context modes: search these one by one
            out.extend(_Probe(a, ()) for a in group)
        else:
            out.append(_Probe(needle, () if exact else tuple(group)))
    return tuple(out)


def _load_libc() -> tuple[Callable[..., int | None] | None, Callable[..., int | None] | None,
                          Callable[..., int] | None]:
    """libc ``memmem``, ``strstr`` and ``strlen`` (each None when unusable)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        memmem, strstr, strlen = libc.memmem, libc.strstr, libc.strlen
        memmem.restype = strstr.restype = ctypes.c_void_p
        memmem.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)
        strstr.argtypes = (ctypes.c_void_p, ctypes.c_char_p)
        strlen.restype = ctypes.c_size_t
        strlen.argtypes = (ctypes.c_void_p,)
        probe = bytearray(b"abcNVRM: x\x00")
        keep = ctypes.c_char.from_buffer(probe)
        base = ctypes.addressof(keep)
        ok_memmem = memmem(base, 10, b"NVRM: ", 6) == base + 3
        ok_str = strstr(base, b"NVRM: ") == base + 3 and strlen(base) == 10
        del keep
        return (memmem if ok_memmem else None, strstr if ok_str else None,
                strlen if ok_str else None)
    except (OSError, AttributeError, TypeError, ValueError):  # pragma: no cover - no libc
        return None, None, None


_MEMMEM, _STRSTR, _STRLEN = _load_libc()
_MAX_SEGMENTS = 64  # NUL-separated pieces searched with strstr before memmem takes over


def _anchor_hits(buf: bytes | bytearray, lo: int, hi: int,
                 anchors: Sequence[bytes]) -> dict[int, int]:
    """Start offsets of the lines in ``buf[lo:hi]`` holding an anchor -> context mode
    (0: continuation lines, 1: a call trace follows)."""
    starts: dict[int, int] = {}
    if hi <= lo or not anchors:
        return starts
    probes = _probes(anchors)
    if (_STRSTR is not None and _MEMMEM is not None and isinstance(buf, bytearray)
            and buf[hi - 1] == 10):
        import ctypes

        # strstr needs a NUL-terminated haystack: the span's last newline becomes the
        # NUL for the search (no anchor holds a newline) and is put back afterwards;
        # NUL bytes inside the span split it into pieces searched one by one.
        keep = ctypes.c_char.from_buffer(buf)
        base = ctypes.addressof(keep)
        buf[hi - 1] = 0
        try:
            pieces = _nul_pieces(base, lo, hi - 1)
            if pieces is not None:
                for p in probes:
                    _strstr_hits(buf, base, lo, pieces, hi, p, starts)
                return starts
        finally:
            buf[hi - 1] = 10
            del keep
    for p in probes:
        _memmem_hits(buf, lo, hi, p, starts)
    return starts


def _nul_pieces(base: int, lo: int, end: int) -> list[tuple[int, int]] | None:
    """NUL-free pieces of ``[lo, end)`` (a NUL at ``end``); None when there are many."""
    strlen = _STRLEN
    assert strlen is not None
    pieces = []
    pos = lo
    while pos < end:
        n = strlen(base + pos)
        pieces.append((pos, pos + n))
        if len(pieces) > _MAX_SEGMENTS:
            return None
        pos += n + 1
    return pieces


def _add_hit(buf: bytes | bytearray, lo: int, hi: int, pos: int, p: _Probe,
             starts: dict[int, int]) -> int:
    """Record the line holding ``pos`` when it holds one of ``p``'s anchors; returns the
    offset after that line."""
    s = buf.rfind(b"\n", lo, pos) + 1 or lo
    if s < lo:
        s = lo
    e = buf.find(b"\n", pos, hi)
    e = hi if e < 0 else e
    held = not p.anchors or any(buf.find(a, s, e) >= 0 for a in p.anchors)
    if held and starts.get(s, -1) < p.mode:
        starts[s] = p.mode
    return e + 1


def _strstr_hits(buf: bytearray, base: int, lo: int, pieces: list[tuple[int, int]], hi: int,
                 p: _Probe, starts: dict[int, int]) -> None:
    strstr = _STRSTR
    assert strstr is not None
    off = lo
    needle = p.needle
    for start, end in pieces:
        off = max(off, start)
        while off < end:
            r = strstr(base + off, needle)
            if not r:
                break
            off = _add_hit(buf, lo, hi, r - base, p, starts)


def _memmem_hits(buf: bytes | bytearray, lo: int, hi: int, p: _Probe,
                 starts: dict[int, int]) -> None:
    memmem = _MEMMEM
    find = buf.find
    needle = p.needle
    if memmem is not None:
        import ctypes

        if isinstance(buf, bytearray):
            keep: object = ctypes.c_char.from_buffer(buf)
            base = ctypes.addressof(keep)  # type: ignore[arg-type]
        else:
            keep = ctypes.c_char_p(buf)
            base = ctypes.cast(keep, ctypes.c_void_p).value or 0
    off = lo
    try:
        while off < hi:
            if memmem is not None:
                r = memmem(base + off, hi - off, needle, len(needle))
                if not r:
                    break
                pos = r - base
            else:
                pos = find(needle, off, hi)
                if pos < 0:
                    break
            off = _add_hit(buf, lo, hi, pos, p, starts)
    finally:
        if memmem is not None:
            del keep


@dataclass
class _Span:
    """Candidate lines of one block: (newlines before the line, text bytes, cut)."""

    lines: list[tuple[int, bytes | bytearray, bool]]
    newlines: int
    carry: tuple[int, int] = (0, 0)  # (lines wanted from the next block, mode)
    head: list[tuple[int, bytes | bytearray, bool]] = field(default_factory=list)
    head_all: bool = True  # ``head`` holds every line of the block

    def carried(self, carry: tuple[int, int]) -> tuple[list[tuple[int, bytes | bytearray, bool]],
                                                      tuple[int, int]]:
        """The block's first lines that a previous block's context ``carry`` takes, and
        what is still wanted after this block (as :func:`_context` would find them)."""
        limit, mode = carry
        out = []
        for line in self.head:
            if len(out) >= limit:
                return out, (0, 0)
            if mode == 0 and line[1][:1] not in (b" ", b"\t"):
                return out, (0, 0)
            out.append(line)
        left = limit - len(out)
        return out, ((left, mode) if left and self.head_all else (0, 0))


_HEAD = max(TRACE_WINDOW, MAX_CONT)  # lines of a block kept for a previous block's context


def _line_end(buf: bytes, s: int, hi: int) -> int:
    e = buf.find(b"\n", s, hi)
    return hi if e < 0 else e


def _search_span(buf: bytes, lo: int, hi: int, anchors: Sequence[bytes],
                 carry: tuple[int, int] = (0, 0)) -> _Span:
    """Candidate lines of ``buf[lo:hi]``, their context lines, and line numbers."""
    starts = _anchor_hits(buf, lo, hi, anchors)
    want: dict[int, int] = dict.fromkeys(starts, 0)
    need = (0, 0)
    if carry[0]:
        left = _context(buf, lo, hi, carry[1], carry[0], want, include_first=True)
        need = (left, carry[1]) if left else need
    for s, mode in starts.items():
        left = _context(buf, s, hi, mode, TRACE_WINDOW if mode else MAX_CONT, want)
        if left:
            need = max(need, (left, mode))
    out: list[tuple[int, bytes, bool]] = []
    n = 0
    prev = lo
    count = buf.count
    for s in sorted(want):
        n += count(b"\n", prev, s)
        prev = s
        e = _line_end(buf, s, hi)
        cut = e - s > MAX_LINE
        out.append((n, buf[s:min(e, s + MAX_LINE)], cut))
    n += count(b"\n", prev, hi)
    head = []
    pos = lo
    while pos < hi and len(head) < _HEAD:
        e = _line_end(buf, pos, hi)
        head.append((len(head), buf[pos:min(e, pos + MAX_LINE)], e - pos > MAX_LINE))
        pos = e + 1
    return _Span(out, n, need, head, pos >= hi)


def _context(buf: bytes, s: int, hi: int, mode: int, limit: int, want: dict[int, int],
             include_first: bool = False) -> int:
    """Add up to ``limit`` lines after the line at ``s`` (mode 0: only lines that
    start with a blank, mode 1: any); returns how many are still wanted at ``hi``."""
    pos = s if include_first else _line_end(buf, s, hi) + 1
    taken = 0
    while taken < limit:
        if pos >= hi:
            return limit - taken
        if mode == 0 and buf[pos:pos + 1] not in (b" ", b"\t"):
            return 0
        want[pos] = 0
        taken += 1
        pos = _line_end(buf, pos, hi) + 1
    return 0


# --- reading -----------------------------------------------------------------------------

class _Input:
    """One input's bytes as a stream of line-aligned spans (buffer, lo, hi)."""

    def __init__(self, name: str, problems: list[str]) -> None:
        self.name = name
        self.problems = problems
        self.nbytes = 0
        self.last_byte = b"\n"

    def spans(self, chunks: Iterator[bytes | bytearray]
              ) -> Iterator[tuple[bytes | bytearray, int, int]]:
        tail = b""
        for chunk in chunks:
            if not chunk:
                continue
            self.nbytes += len(chunk)
            self.last_byte = chunk[-1:]
            first = chunk.find(b"\n")
            if first < 0:
                tail += chunk
                if len(tail) >= LONG_LINE:
                    yield tail, 0, len(tail)
                    tail = b""
                continue
            start = 0
            if tail:
                head = tail + chunk[:first + 1]
                yield head, 0, len(head)
                start = first + 1
            last = chunk.rfind(b"\n") + 1
            while start < last:  # cut big chunks (one text) into blocks
                stop = last if last - start <= BLOCK else chunk.find(b"\n", start + BLOCK) + 1
                stop = stop if stop > 0 else last
                yield chunk, start, stop
                start = stop
            tail = chunk[last:]
        if tail:
            yield tail, 0, len(tail)


class _Buffers:
    """Reusable read buffers: a fresh 8 MiB object per read costs page faults (and an
    allocation) that reusing one avoids. A buffer is reused only when nothing but the
    pool refers to it any more (CPython reference counts); else a new one is made."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.ring: list[bytearray] = []
        self.next = 0

    def get(self) -> bytearray:
        ring = self.ring
        counted = hasattr(sys, "getrefcount")
        for i in range(len(ring)):
            j = (self.next + i) % len(ring)
            if counted and sys.getrefcount(ring[j]) <= 2 and len(ring[j]) == self.size:
                self.next = j + 1
                return ring[j]
        buf = bytearray(self.size)
        if len(ring) < 2 * _workers() + 4:
            ring.append(buf)
        else:
            ring[self.next % len(ring)] = buf
            self.next += 1
        return buf


def _read_block(fh, bufs: _Buffers) -> bytearray:  # noqa: ANN001
    """One ``fh.read(BLOCK)``'s bytes, read into a reused buffer."""
    buf = bufs.get()
    n = fh.readinto(buf) or 0
    if n < len(buf):
        return bytearray(memoryview(buf)[:n])
    return buf


def _file_chunks(fh, name: str, problems: list[str]) -> Iterator[bytes | bytearray]:  # noqa: ANN001
    bufs = _Buffers(BLOCK)
    head = _read_block(fh, bufs)
    kind = _compression(head)
    if kind is None:
        chunk = head
        while chunk:
            yield chunk
            del chunk  # let the pool see the buffer free again once its spans are done
            try:
                chunk = _read_block(fh, bufs)
            except OSError as exc:
                problems.append(f"{name}: read error ({exc.strerror or exc}); kept what was read")
                return
        return
    yield from _decompressed(kind, bytes(head), fh, name, problems)


def _compression(head: bytes) -> str | None:
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if head[:3] == b"BZh" and head[3:4].isdigit():
        return "bzip2"
    return None


def _decompressor(kind: str):  # noqa: ANN202
    if kind == "gzip":
        return zlib.decompressobj(wbits=31)
    if kind == "xz":
        return lzma.LZMADecompressor()
    return bz2.BZ2Decompressor()


def _decompressed(kind: str, head: bytes, fh, name: str,  # noqa: ANN001
                  problems: list[str]) -> Iterator[bytes]:
    """Decompressed blocks; a truncated or corrupt stream ends with a problem noted."""
    d = _decompressor(kind)
    data = head
    total = 0
    pending: list[bytes] = []
    size = 0
    try:
        while True:
            if d.eof:  # a member ended: another may follow (concatenated gzip / xz)
                data = (d.unused_data + data).lstrip(b"\x00") or fh.read(1 << 20)
                if not data:
                    break
                d = _decompressor(kind)
            if kind != "gzip" and not d.needs_input:
                out = d.decompress(b"", BLOCK)
            else:
                if not data:
                    data = fh.read(1 << 20)
                    if not data:
                        break
                out = d.decompress(data, BLOCK)
                data = d.unconsumed_tail if kind == "gzip" else b""
            if out:
                pending.append(out)
                size += len(out)
                total += len(out)
                if size >= BLOCK:
                    yield b"".join(pending)
                    pending, size = [], 0
        if not d.eof:
            problems.append(f"{name}: truncated {kind} data; read the first "
                            f"{total / (1 << 20):.1f} MiB")
    except (zlib.error, lzma.LZMAError, OSError, EOFError, ValueError) as exc:
        problems.append(f"{name}: corrupt {kind} data ({exc}); read the first "
                        f"{total / (1 << 20):.1f} MiB")
    if pending:
        yield b"".join(pending)


# --- lines: formats, times -----------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug",
                                       "Sep", "Oct", "Nov", "Dec"), 1)}
_ISO = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
                  r"(Z|[+-]\d\d:?\d\d)?$")
_CTIME = re.compile(r"^[A-Z][a-z]{2} ([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})$")
_SYSLOG_TS = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?$")
_UPTIME = re.compile(r"^\s*(\d{1,12}\.\d{1,9})$")
_KMSG = re.compile(r"^(?P<pri>\d{1,4}),(?P<seq>\d{1,20}),(?P<usec>\d{1,20}),[^;]{0,32};")
_KMSG_DICT = re.compile(r"^ [A-Z_]{1,32}=")
_BOOT_MARK = re.compile(r"^-- (?:Boot (?P<id>[0-9a-fA-F\-]{8,40}) --|Reboot --)\s*$")
_SYSLOG_NAMES = ("syslog", "kern.log", "messages")


def _usec(frac: str | None) -> int:
    return int((frac or "0")[:6].ljust(6, "0"))


def _stamp_time(stamp: str, now: datetime) -> tuple[datetime | None, float | None]:
    """(absolute time, uptime seconds) of one printed timestamp."""
    try:
        m = _UPTIME.match(stamp)
        if m:
            return None, float(m.group(1))
        m = _ISO.match(stamp)
        if m:
            tz = timezone.utc
            off = m.group(8)
            if off and off != "Z":
                sign = -1 if off[0] == "-" else 1
                hh, mm = int(off[1:3]), int(off[-2:])
                tz = timezone(sign * timedelta(hours=hh, minutes=mm))
            y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
            return datetime(y, mo, d, h, mi, s, _usec(m.group(7)), tzinfo=tz), None
        m = _CTIME.match(stamp)
        if m and m.group(1) in _MONTHS:
            return datetime(int(m.group(6)), _MONTHS[m.group(1)], int(m.group(2)),
                            int(m.group(3)), int(m.group(4)), int(m.group(5)),
                            tzinfo=timezone.utc), None
        m = _SYSLOG_TS.match(stamp)
        if m and m.group(1) in _MONTHS:
            args = (_MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)),
                    int(m.group(5)), _usec(m.group(6)))
            t = datetime(now.year, *args, tzinfo=timezone.utc)
            if t > now + timedelta(days=2):
                t = datetime(now.year - 1, *args, tzinfo=timezone.utc)
            return t, None
    except (ValueError, OverflowError):
        return None, None
    return None, None


def _format_of(tags: tuple[str, ...], stamps: tuple[str, ...], syslog_name: bool) -> str:
    if "talos" in tags:
        return "talos"
    if "syslog" in tags:
        first = stamps[0] if stamps else ""
        if first[:4].isdigit():
            if "host" not in tags and "kernel" not in tags:
                return "dmesg-iso"
            return "journalctl-short-iso"
        if syslog_name or "bracket" in tags:
            return "syslog"
        return "journalctl-short-precise" if "." in first else "journalctl-short"
    if "bracket" in tags:
        return "dmesg-raw" if stamps and _UPTIME.match(stamps[-1]) else "dmesg-ctime"
    return "plain"


@dataclass
class _Seg:
    """One boot as seen within one input."""

    boot_id: str | None = None
    marked: bool = False  # started by a marker, banner, id change or reset
    first: datetime | None = None
    last: datetime | None = None
    first_up: float | None = None
    last_up: float | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    seen: bool = False


class _Source:
    """Turns one input's candidate lines into events, boots and formats."""

    def __init__(self, name: str, now: datetime) -> None:
        self.name = name
        self.now = now
        self.syslog_name = any(k in Path(name).name for k in _SYSLOG_NAMES)
        self.ex = EventExtractor()
        self.events: list[DriverEvent] = []
        self.segs: list[_Seg] = [_Seg()]
        self.formats: dict[str, None] = {}
        self.skipped = 0
        self.held: LogLine | None = None
        self.stamps: dict[str, tuple[datetime | None, float | None]] = {}  # parsed stamps

    # -- boots --------------------------------------------------------------------------
    def _new_boot(self, boot_id: str | None = None) -> None:
        cur = self.segs[-1]
        if not cur.seen:
            cur.marked = True
            cur.boot_id = boot_id or cur.boot_id
            return
        self.segs.append(_Seg(boot_id=boot_id, marked=True))

    def _note(self, line: LogLine, seq: int | None, boot_id: str | None) -> None:
        cur = self.segs[-1]
        if boot_id and cur.boot_id and boot_id != cur.boot_id:
            self._new_boot(boot_id)
        elif ((seq is not None and cur.last_seq is not None and seq < cur.last_seq)
              or (line.uptime_s is not None and cur.last_up is not None
                  and line.uptime_s < cur.last_up - 1.0)
              or line.msg.startswith("Linux version ")):
            self._new_boot()
        cur = self.segs[-1]
        if boot_id and not cur.boot_id:
            cur.boot_id = boot_id
        cur.seen = True
        if line.time is not None:
            cur.first = cur.first or line.time
            cur.last = line.time
        if line.uptime_s is not None:
            cur.first_up = cur.first_up if cur.first_up is not None else line.uptime_s
            cur.last_up = line.uptime_s
        if seq is not None:
            cur.first_seq = cur.first_seq if cur.first_seq is not None else seq
            cur.last_seq = seq
        line.boot = len(self.segs) - 1

    # -- lines --------------------------------------------------------------------------
    def line(self, lineno: int, raw: bytes, cut: bool) -> None:
        """Process one candidate or context line."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", errors="replace")
            self.skipped += 1
        if cut:
            self.skipped += 1
        text = text.rstrip("\r")
        if self.held is not None:
            if _KMSG_DICT.match(text):
                if text.startswith(" DEVICE=+pci:"):
                    from gputriage.parsers.base import normalize_bus_id

                    self.held.bus_hint = normalize_bus_id(text[13:].strip())
                return
            held, self.held = self.held, None
            self._feed(held)
        stripped = text.lstrip()
        if stripped.startswith("{") and self._json_line(lineno, stripped):
            return
        m = _KMSG.match(text)
        if m:
            self._kmsg_line(lineno, text, m)
            return
        mark = _BOOT_MARK.match(stripped)
        if mark:
            self._new_boot(mark.group("id"))
            return
        for piece, escaped in split_escaped(text):
            stamps, msg, tags = split_prefix(piece)
            if escaped:
                stamps = ()
            elif stamps:
                self.formats.setdefault(_format_of(tags, stamps, self.syslog_name))
            elif piece[:1] not in (" ", "\t") and msg:
                self.formats.setdefault("plain")
            t = up = None
            for st in stamps:
                known = self.stamps.get(st)
                if known is None:
                    if len(self.stamps) >= 4096:
                        self.stamps.clear()
                    known = self.stamps[st] = _stamp_time(st, self.now)
                a, b = known
                t = t or a
                up = up if up is not None else b
            ll = LogLine(piece, msg, stamps, lineno, t, up, origin=self.name, escaped=escaped)
            self._note(ll, None, None)
            self._feed(ll)

    def _feed(self, ll: LogLine) -> None:
        self.events.extend(self.ex.feed(ll))

    def _kmsg_line(self, lineno: int, text: str, m: re.Match[str]) -> None:
        self.formats.setdefault("kmsg")
        up = int(m.group("usec")) / 1e6
        msg = text[m.end():][:MAX_LINE]
        ll = LogLine(text, msg.strip(), (f"{up:.6f}",), lineno, None, up, origin=self.name)
        self._note(ll, int(m.group("seq")), None)
        self.held = ll

    def _json_line(self, lineno: int, text: str) -> bool:
        """A journal JSON record; False when the line is not one."""
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            return False
        if not isinstance(obj, dict) or "MESSAGE" not in obj:
            return False
        self.formats.setdefault("journal-json")
        msg = obj.get("MESSAGE")
        if isinstance(msg, list):
            try:
                msg = bytes(msg).decode("utf-8", errors="replace")
            except (TypeError, ValueError):
                return True
        if not isinstance(msg, str):
            return True
        t = up = None
        with contextlib.suppress(KeyError, TypeError, ValueError, OverflowError, OSError):
            t = datetime.fromtimestamp(int(obj["__REALTIME_TIMESTAMP"]) / 1e6, tz=timezone.utc)
        with contextlib.suppress(KeyError, TypeError, ValueError, OverflowError):
            up = int(obj["__MONOTONIC_TIMESTAMP"]) / 1e6
        boot_id = obj.get("_BOOT_ID") if isinstance(obj.get("_BOOT_ID"), str) else None
        ident = str(obj.get("SYSLOG_IDENTIFIER") or obj.get("_TRANSPORT") or "kernel")
        stamp = t.isoformat() if t else ""
        host = str(obj.get("_HOSTNAME") or "-")
        for piece in msg[:MAX_LINE].splitlines() or [""]:
            ll = LogLine(f"{stamp} {host} {ident}: {piece}".strip(), piece.strip(),
                         (stamp,) if stamp else (), lineno, t, up, origin=self.name)
            self._note(ll, None, boot_id)
            self._feed(ll)
        return True

    def finish(self) -> None:
        if self.held is not None:
            self._feed(self.held)
            self.held = None
        self.events.extend(self.ex.finish())


# --- driving -------------------------------------------------------------------------------

def _workers() -> int:
    if _MEMMEM is None:
        return 1
    return max(1, min(8, os.cpu_count() or 1))


class _Lines:
    """Feeds the candidate lines of consecutive blocks to a source, in order, with line
    numbers and the context lines that run on into the next block."""

    def __init__(self, src: _Source) -> None:
        self.src = src
        self.base = 0
        self.carry = (0, 0)

    def feed(self, span: _Span) -> None:
        if self.carry[0]:
            extra, more = span.carried(self.carry)
            seen = {n for n, _, _ in span.lines}
            span.lines = sorted(span.lines + [x for x in extra if x[0] not in seen],
                                key=lambda x: x[0])
            if more[0]:
                span.carry = max(span.carry, more)
        line = self.src.line
        for n, raw, cut in span.lines:
            line(self.base + n + 1, raw, cut)
        self.base += span.newlines
        self.carry = span.carry


def _run_input(src: _Source, inp: _Input, chunks: Iterator[bytes | bytearray],
               pool: ThreadPoolExecutor | None, anchors: Sequence[bytes]) -> int:
    """Search all spans of one input (in parallel when a pool is given); returns lines."""
    out = _Lines(src)
    inflight: list[Future[_Span]] = []
    limit = _workers() + 2
    for buf, lo, hi in inp.spans(chunks):
        if pool is None:
            out.feed(_search_span(buf, lo, hi, anchors))
            continue
        inflight.append(pool.submit(_search_span, buf, lo, hi, anchors))
        del buf  # the read-buffer pool reuses a buffer once no span refers to it
        if len(inflight) >= limit:
            out.feed(inflight.pop(0).result())
    for fut in inflight:
        out.feed(fut.result())
    return out.base + (1 if inp.nbytes and inp.last_byte != b"\n" else 0)


# --- large plain files: blocks searched in worker processes ---------------------------------
#
# Counting newlines (for line numbers) holds the GIL, so threads cannot share that work;
# for a large uncompressed file each worker process reads and searches whole blocks
# (the same BLOCK-aligned reads as the sequential reader, so long lines are cut at the
# same places) and sends back only candidate lines, counts and the block's first and
# last partial lines; the main process stitches those and parses, in file order.

PROCESS_MIN = 64 << 20  # files at least this big are searched in worker processes


@dataclass
class _Block:
    """What a worker found in one BLOCK-aligned read of a file."""

    size: int
    raw: bytes | None = None  # the whole block when it holds no newline
    head: bytes = b""  # up to and with the first newline
    tail: bytes = b""  # after the last newline
    inner: _Span | None = None  # the lines between


_BLOCK_BUF: list[bytearray] = []


def _block_task(path: str, index: int, block: int, anchors: tuple[bytes, ...]) -> _Block:
    """Read block ``index`` of ``path`` and search it (runs in a worker process)."""
    if not _BLOCK_BUF or len(_BLOCK_BUF[0]) != block:
        _BLOCK_BUF[:] = [bytearray(block)]
    buf = _BLOCK_BUF[0]
    with open(path, "rb", buffering=0) as fh:
        fh.seek(index * block)
        n = fh.readinto(buf) or 0
    first = buf.find(b"\n", 0, n)
    if first < 0:
        return _Block(n, raw=bytes(buf[:n]))
    last = buf.rfind(b"\n", 0, n) + 1
    inner = _search_span(buf, first + 1, last, anchors) if first + 1 < last else None
    return _Block(n, head=bytes(buf[:first + 1]), tail=bytes(buf[last:n]), inner=inner)


def _process_pool() -> Executor | None:
    """A pool of forked worker processes, or None where that is not safe or useful."""
    import threading

    if _workers() < 2 or not sys.platform.startswith("linux") or threading.active_count() > 1:
        return None
    try:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if multiprocessing.current_process().daemon:  # may not have children
            return None
        return ProcessPoolExecutor(_workers(), mp_context=multiprocessing.get_context("fork"))
    except (ImportError, OSError, ValueError):  # pragma: no cover - no fork / semaphores
        return None


def _run_blocks(src: _Source, inp: _Input, path: str, size: int, procs: Executor,
                anchors: tuple[bytes, ...]) -> int:
    """Like :func:`_run_input` for a plain file whose blocks workers search."""
    out = _Lines(src)
    limit = _workers() + 2
    block = BLOCK
    inflight: list[Future[_Block]] = []
    nxt = 0
    tail = b""

    def own(data: bytes) -> None:
        out.feed(_search_span(data, 0, len(data), anchors))

    while True:
        while len(inflight) < limit and (nxt * block <= size or not inflight):
            inflight.append(procs.submit(_block_task, path, nxt, block, anchors))
            nxt += 1
        try:
            r = inflight.pop(0).result()
        except OSError as exc:
            inp.problems.append(f"{inp.name}: read error ({exc.strerror or exc}); "
                                "kept what was read")
            break
        if r.size:
            inp.nbytes += r.size
            inp.last_byte = (r.raw or r.tail or r.head)[-1:]
        if r.raw is not None:
            tail += r.raw
            if len(tail) >= LONG_LINE:
                own(tail)
                tail = b""
        else:
            own(tail + r.head)
            if r.inner is not None:
                out.feed(r.inner)
            tail = r.tail
        if r.size < block:
            break
    for fut in inflight:
        fut.cancel()
    if tail:
        own(tail)
    return out.base + (1 if inp.nbytes and inp.last_byte != b"\n" else 0)


def _anchors_for(head: bytes) -> tuple[bytes, ...]:
    return ANCHORS + ((_JSON_ANCHOR,) if head.lstrip()[:1] == b"{" else ())


@dataclass
class _Result:
    name: str
    order: int
    src: _Source
    lines: int
    nbytes: int
    problems: list[str]

    @property
    def first_time(self) -> datetime | None:
        return next((s.first for s in self.src.segs if s.first), None)

    @property
    def rotation(self) -> int:
        m = re.search(r"\.(\d{1,4})(?:\.(?:gz|xz|bz2|lzma))?$", self.name)
        return int(m.group(1)) if m else 0


def _scan_one(name: str, chunks: Iterator[bytes], order: int, now: datetime,
              pool: ThreadPoolExecutor | None, problems: list[str]) -> _Result:
    src = _Source(name, now)
    inp = _Input(name, problems)
    first = next(chunks, b"")
    anchors = _anchors_for(first[:4096])

    def all_chunks() -> Iterator[bytes]:
        yield first
        yield from chunks

    lines = _run_input(src, inp, all_chunks(), pool, anchors)
    src.finish()
    return _Result(name, order, src, lines, inp.nbytes, problems)


def _plain_size(fh) -> int:  # noqa: ANN001
    """The size of ``fh`` when it is a regular, uncompressed file (else -1)."""
    try:
        st = os.fstat(fh.fileno())
        import stat

        if not stat.S_ISREG(st.st_mode):
            return -1
        head = os.pread(fh.fileno(), 8, 0)
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return -1
    return st.st_size if _compression(head) is None else -1


def _scan_blocks(name: str, fh, size: int, order: int, now: datetime,  # noqa: ANN001
                 procs: Executor, problems: list[str]) -> _Result:
    """:func:`_scan_one` for a large plain file, its blocks searched by ``procs``."""
    src = _Source(name, now)
    inp = _Input(name, problems)
    anchors = _anchors_for(os.pread(fh.fileno(), min(4096, BLOCK), 0))
    # the workers open the file this process has open, even if it was renamed (rotated)
    # or removed since
    opened = f"/proc/{os.getpid()}/fd/{fh.fileno()}"
    lines = _run_blocks(src, inp, opened if os.path.exists(opened) else name, size, procs,
                        anchors)
    src.finish()
    return _Result(name, order, src, lines, inp.nbytes, problems)


def _merge(results: list[_Result]) -> LogScan:
    """One timeline from several inputs (see the module docstring)."""
    if all(r.first_time for r in results):
        results.sort(key=lambda r: (r.first_time, r.order))
    else:
        results.sort(key=lambda r: (-r.rotation, r.order))
    scan = LogScan()
    boots: list[_Seg] = []
    for r in results:
        mapping: list[int] = []
        for i, seg in enumerate(r.src.segs):
            prev = boots[-1] if boots else None
            same = prev is not None and i == 0 and not seg.marked and not (
                seg.boot_id and prev.boot_id and seg.boot_id != prev.boot_id) and not (
                seg.first_up is not None and prev.last_up is not None
                and seg.first_up < prev.last_up - 1.0) and not (
                seg.first_seq is not None and prev.last_seq is not None
                and seg.first_seq < prev.last_seq)
            if same and prev is not None:
                prev.boot_id = prev.boot_id or seg.boot_id
                prev.first = prev.first or seg.first
                prev.last = seg.last or prev.last
                prev.last_up = seg.last_up if seg.last_up is not None else prev.last_up
                prev.last_seq = seg.last_seq if seg.last_seq is not None else prev.last_seq
                prev.seen = prev.seen or seg.seen
            elif seg.seen or seg.boot_id or seg.marked or not boots:
                boots.append(seg)
            mapping.append(len(boots) - 1)
        for ev in r.src.events:
            ev.boot = mapping[ev.boot] if 0 <= ev.boot < len(mapping) else len(boots) - 1
            scan.events.append(ev)
        scan.lines += r.lines
        scan.bytes += r.nbytes
        scan.skipped += r.src.skipped
        for f in r.src.formats:
            if f not in scan.formats:
                scan.formats.append(f)
    if len(scan.formats) > 1 and "plain" in scan.formats:  # unprefixed continuation text
        scan.formats.remove("plain")
    for r in results:
        for p in r.problems:
            if p not in scan.problems:
                scan.problems.append(p)
    if not scan.lines and not scan.events:
        boots = [b for b in boots if b.seen or b.boot_id]
    last = len(boots) - 1
    for ev in scan.events:
        ev.boot -= last
    scan.boots = [BootInfo(i - last, b.boot_id, b.first, b.last) for i, b in enumerate(boots)]
    if len(results) > 1 and scan.events and all(e.time for e in scan.events):
        scan.events.sort(key=lambda e: e.time)  # type: ignore[arg-type, return-value]
    return scan


def _text_chunks(data: bytes) -> Iterator[bytes]:
    yield data


def scan_text(text: str, origin: str = "<text>", *, now: datetime | None = None) -> LogScan:
    """Scan a kernel log held in memory (same rules as :func:`scan_paths`); never raises."""
    now = now or datetime.now(timezone.utc)
    data = text.encode("utf-8", errors="surrogatepass")
    problems: list[str] = []
    pool = ThreadPoolExecutor(_workers()) if len(data) > 2 * BLOCK and _workers() > 1 else None
    try:
        result = _scan_one(origin, _text_chunks(data), 0, now, pool, problems)
    finally:
        if pool is not None:
            pool.shutdown()
    return _merge([result])


def scan_paths(paths: Sequence[str], *, now: datetime | None = None) -> LogScan:
    """Scan kernel-log files (plain, .gz, .xz, .bz2; ``-`` = stdin) as one timeline.

    Raises :class:`InputError` only when no input could be read at all."""
    now = now or datetime.now(timezone.utc)
    results: list[_Result] = []
    problems: list[str] = []
    failures: list[str] = []
    workers = _workers()
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    procs: Executor | bool | None = None  # made when a large plain file comes
    try:
        for order, path in enumerate(paths):
            name = "<stdin>" if path == "-" else str(path)
            try:
                fh = sys.stdin.buffer if path == "-" else open(path, "rb", buffering=0)  # noqa: SIM115
            except OSError as exc:
                failures.append(f"{name}: cannot read ({exc.strerror or exc})")
                continue
            try:
                size = _plain_size(fh) if path != "-" else -1
                if size >= PROCESS_MIN and procs is None:
                    procs = _process_pool() or False
                if size >= PROCESS_MIN and procs:
                    try:
                        results.append(_scan_blocks(name, fh, size, order, now, procs,
                                                    problems))
                        continue
                    except BrokenProcessPool:  # a worker died: read this one here
                        procs.shutdown(wait=False)
                        procs = False
                chunks = _file_chunks(fh, name, problems)
                results.append(_scan_one(name, chunks, order, now, pool, problems))
            except OSError as exc:
                failures.append(f"{name}: cannot read ({exc.strerror or exc})")
            finally:
                if path != "-":
                    fh.close()
    finally:
        if pool is not None:
            pool.shutdown()
        if isinstance(procs, Executor):
            procs.shutdown(cancel_futures=True)
    if not results:
        raise InputError("; ".join(failures) or "no input to scan")
    scan = _merge(results)
    scan.problems = failures + scan.problems
    return scan
