"""Anchor search for :mod:`gputriage.logscan`: candidate lines found through libc
``strstr`` / ``memmem`` (via ctypes) or ``bytes.find``, their context lines, and the
threads and forked worker processes that search blocks in parallel."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from gputriage import logscan as _pkg
from gputriage.logscan.forkpool import ForkWorkers
from gputriage.logscan.lines import _Source
from gputriage.logscan.reader import _Input
from gputriage.parsers.kernel_events import MAX_LINE, TRACE_WINDOW

# The tunables (``BLOCK``, ``LONG_LINE``, ``_workers``, the libc functions) are read
# through the package at call time, so that setting them on ``gputriage.logscan``
# (the tests do) takes effect here as it did when this was one module.

MAX_CONT = 8  # whitespace-led continuation lines taken after a candidate
ANCHORS: tuple[bytes, ...] = (
    b"NVRM:", b"nvidia", b"mlx5_core ", b"error received", b"PCIe Bus Error", b"PCIe bandwidth",
    b"segfault at ", b"soft lockup", b"blocked for more than", b"-- Boot ", b"-- Reboot --",
    b"Linux version ", b"nv_peer_mem", b"EDAC ", b"Hardware Error", b"Memory failure",
    b"hardware memory error", b"Lost carrier", b"Gained carrier", b"NETDEV WATCHDOG",
)
# anchors whose following lines are all taken (call traces; an AER report's error bits)
_TRACE_ANCHORS = frozenset({b"soft lockup", b"blocked for more than", b"PCIe Bus Error"})
_JSON_ANCHOR = b'"MESSAGE":['  # journal JSON prints non-UTF-8 messages as byte arrays


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
    b"nv_peer_mem": b"_peer_mem", b"Hardware Error": b"dware ",
    b"hardware memory error": b"dware ", b"Memory failure": b"ry failure",
    b"Lost carrier": b" carrier", b"Gained carrier": b" carrier",
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
    out: list[_Probe] = []
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


_MAX_SEGMENTS = 64  # NUL-separated pieces searched with strstr before memmem takes over


def _anchor_hits(buf: bytes | bytearray, lo: int, hi: int,
                 anchors: Sequence[bytes]) -> dict[int, int]:
    """Start offsets of the lines in ``buf[lo:hi]`` holding an anchor -> context mode
    (0: continuation lines, 1: a call trace follows)."""
    starts: dict[int, int] = {}
    if hi <= lo or not anchors:
        return starts
    probes = _probes(anchors)
    if (_pkg._STRSTR is not None and _pkg._MEMMEM is not None
            and not isinstance(buf, bytes) and buf[hi - 1] == 10):
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
    strlen = _pkg._STRLEN
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
    strstr = _pkg._STRSTR
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
    memmem = _pkg._MEMMEM
    find = buf.find
    needle = p.needle
    if memmem is not None:
        import ctypes

        if not isinstance(buf, bytes):  # a bytearray or a writable mapping
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
    newlines: int  # exact count, or (``exact`` False) an upper bound from long gaps' sizes
    exact: bool = True
    carry: tuple[int, int] = (0, 0)  # (lines wanted from the next block, mode)
    head: list[tuple[int, bytes | bytearray, bool]] = field(default_factory=list)
    head_all: bool = True  # ``head`` holds every line of the block

    def carried(self, carry: tuple[int, int]) -> tuple[list[tuple[int, bytes | bytearray, bool]],
                                                      tuple[int, int]]:
        """The block's first lines that a previous block's context ``carry`` takes, and
        what is still wanted after this block (as :func:`_context` would find them)."""
        limit, mode = carry
        out: list[tuple[int, bytes | bytearray, bool]] = []
        for line in self.head:
            if len(out) >= limit:
                return out, (0, 0)
            if mode == 0 and line[1][:1] not in (b" ", b"\t"):
                return out, (0, 0)
            out.append(line)
        left = limit - len(out)
        return out, ((left, mode) if left and self.head_all else (0, 0))


_HEAD = max(TRACE_WINDOW, MAX_CONT)  # lines of a block kept for a previous block's context


def _line_end(buf: bytes | bytearray, s: int, hi: int) -> int:
    e = buf.find(b"\n", s, hi)
    return hi if e < 0 else e


# Line positions without counting every newline (worker blocks): a gap between wanted
# lines up to this long is counted, a longer one advances the position by its size in
# bytes, an upper bound of its lines. Positions then stay exact between nearby lines (all
# that continuation lines and trace windows need; a gap holds the line before it, so
# lines longer than this lose their adjacency), and counting, which takes about 40 % of
# a block's search time, is skipped where it tells nothing.
GAP_EXACT = 64 << 10


def _gap(buf: bytes | bytearray, a: int, b: int, exact: bool) -> int:
    if exact or b - a <= GAP_EXACT:
        if isinstance(buf, (bytes, bytearray)):
            return buf.count(b"\n", a, b)
        return buf[a:b].count(b"\n")  # a mapping: no count() of its own
    return b - a


def _search_span(buf: bytes | bytearray, lo: int, hi: int, anchors: Sequence[bytes],
                 carry: tuple[int, int] = (0, 0), exact: bool = True) -> _Span:
    """Candidate lines of ``buf[lo:hi]``, their context lines, and line positions
    (line numbers when ``exact``, see :data:`GAP_EXACT` otherwise)."""
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
    out: list[tuple[int, bytes | bytearray, bool]] = []
    n = 0
    prev = lo
    approx = False
    for s in sorted(want):
        approx = approx or (not exact and s - prev > GAP_EXACT)
        n += _gap(buf, prev, s, exact)
        prev = s
        e = _line_end(buf, s, hi)
        cut = e - s > MAX_LINE
        out.append((n, buf[s:min(e, s + MAX_LINE)], cut))
    approx = approx or (not exact and hi - prev > GAP_EXACT)
    n += _gap(buf, prev, hi, exact)
    head: list[tuple[int, bytes | bytearray, bool]] = []
    pos = lo
    while pos < hi and len(head) < _HEAD:
        e = _line_end(buf, pos, hi)
        head.append((len(head), buf[pos:min(e, pos + MAX_LINE)], e - pos > MAX_LINE))
        pos = e + 1
    return _Span(out, n, not approx, need, head, pos >= hi)


def _context(buf: bytes | bytearray, s: int, hi: int, mode: int, limit: int,
             want: dict[int, int], include_first: bool = False) -> int:
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


# --- driving -------------------------------------------------------------------------------

class _Lines:
    """Feeds the candidate lines of consecutive blocks to a source, in order, with line
    numbers and the context lines that run on into the next block."""

    def __init__(self, src: _Source) -> None:
        self.src = src
        self.base = 0
        self.carry = (0, 0)
        self.exact = True  # ``base`` is the number of lines, not an upper bound

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
        self.exact = self.exact and span.exact
        self.carry = span.carry

    def total(self, inp: _Input) -> int | None:
        """Lines of the input (None when only positions were kept)."""
        if not self.exact:
            return None
        return self.base + (1 if inp.nbytes and inp.last_byte != b"\n" else 0)


def _run_input(src: _Source, inp: _Input, chunks: Iterator[bytes | bytearray],
               pool: ThreadPoolExecutor | None, anchors: Sequence[bytes]) -> int | None:
    """Search all spans of one input (in parallel when a pool is given); returns lines."""
    out = _Lines(src)
    inflight: list[Future[_Span]] = []
    limit = _pkg._workers() + 2
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
    return out.total(inp)


# --- large plain files: blocks searched in worker processes ---------------------------------
#
# Counting newlines (for line numbers) holds the GIL, so threads cannot share that work;
# and workers count only the short gaps between wanted lines (GAP_EXACT).
# For a large uncompressed file each worker process reads and searches whole blocks
# (the same BLOCK-aligned reads as the sequential reader, so long lines are cut at the
# same places) and sends back only candidate lines, counts and the block's first and
# last partial lines; the main process stitches those and parses, in file order.


@dataclass
class _Block:
    """What a worker found in one BLOCK-aligned read of a file."""

    size: int
    raw: bytes | None = None  # the whole block when it holds no newline
    head: bytes = b""  # up to and with the first newline
    tail: bytes = b""  # after the last newline
    inner: _Span | None = None  # the lines between


_BLOCK_BUF: list[bytearray] = []


def _block_task(path: str, index: int, *, block: int,
                anchors: tuple[bytes, ...]) -> _Block:
    """Read block ``index`` of ``path`` and search it (runs in a worker process)."""
    with open(path, "rb", buffering=0) as fh:
        mapped = _map_block(fh, index * block, block)
        if mapped is not None:
            mm, lo, n = mapped
            try:
                return _search_block(mm, lo, lo + n, anchors)
            finally:
                mm.close()
        if not _BLOCK_BUF or len(_BLOCK_BUF[0]) != block:
            _BLOCK_BUF[:] = [bytearray(block)]
        buf = _BLOCK_BUF[0]
        fh.seek(index * block)
        n = fh.readinto(buf) or 0
    return _search_block(buf, 0, n, anchors)


def _map_block(fh, start: int, block: int):  # noqa: ANN001, ANN202
    """A private, writable mapping of ``block`` bytes at ``start`` (from the page cache,
    without the copy a read makes; the search writes its NULs into private pages):
    ``(mmap, offset of start in it, length)``, or None where mapping is not possible."""
    import mmap
    import os

    try:
        size = os.fstat(fh.fileno()).st_size
        n = min(block, size - start)
        if n <= 0:
            return None
        base = start - start % mmap.ALLOCATIONGRANULARITY
        mm = mmap.mmap(fh.fileno(), start - base + n, flags=mmap.MAP_PRIVATE,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=base)
    except (OSError, ValueError, AttributeError):
        return None
    return mm, start - base, n


def _search_block(buf: bytearray, lo: int, hi: int, anchors: tuple[bytes, ...]) -> _Block:
    """Search the block ``buf[lo:hi]`` (a read buffer or a mapping)."""
    first = buf.find(b"\n", lo, hi)
    if first < 0:
        return _Block(hi - lo, raw=bytes(buf[lo:hi]))
    last = buf.rfind(b"\n", lo, hi) + 1
    inner = _search_span(buf, first + 1, last, anchors, exact=False) if first + 1 < last \
        else None
    return _Block(hi - lo, head=bytes(buf[lo:first + 1]), tail=bytes(buf[last:hi]),
                  inner=inner)


def _process_pool() -> ForkWorkers | None:
    """Forked worker processes, or None where that is not safe or useful (forking a
    process that runs threads is not)."""
    import threading

    if (_pkg._workers() < 2 or not sys.platform.startswith("linux")
            or threading.active_count() > 1 or not hasattr(os, "fork")):
        return None
    return ForkWorkers(_pkg._workers())


def _run_blocks(src: _Source, inp: _Input, path: str, size: int, procs: ForkWorkers,
                anchors: tuple[bytes, ...]) -> int | None:
    """Like :func:`_run_input` for a plain file whose blocks workers search; the line
    count is None when long gaps were not counted (see :data:`GAP_EXACT`)."""
    out = _Lines(src)
    block = _pkg.BLOCK
    tail = b""

    def own(data: bytes) -> None:
        out.feed(_search_span(data, 0, len(data), anchors))

    blocks = procs.run(functools.partial(_block_task, path, block=block, anchors=anchors),
                       size // block + 1)
    try:
        while True:
            try:
                r = next(blocks, None)
            except OSError as exc:
                inp.problems.append(f"{inp.name}: read error ({exc.strerror or exc}); "
                                    "kept what was read")
                break
            if r is None:
                break
            if r.size:
                inp.nbytes += r.size
                inp.last_byte = (r.raw or r.tail or r.head)[-1:]
            if r.raw is not None:
                tail += r.raw
                if len(tail) >= _pkg.LONG_LINE:
                    own(tail)
                    tail = b""
            else:
                own(tail + r.head)
                if r.inner is not None:
                    out.feed(r.inner)
                tail = r.tail
            if r.size < block:
                break
    finally:
        blocks.close()
    if tail:
        own(tail)
    return out.total(inp)


