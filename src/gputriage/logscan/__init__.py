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

import io
import os
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from gputriage.errors import InputError
from gputriage.inputs import DIR, FILE, Input, is_binary, open_input
from gputriage.logscan.forkpool import ForkWorkers, WorkerDied
from gputriage.logscan.lines import _BOOT_MARK as _BOOT_MARK
from gputriage.logscan.lines import _CTIME as _CTIME
from gputriage.logscan.lines import _ISO as _ISO
from gputriage.logscan.lines import _KMSG as _KMSG
from gputriage.logscan.lines import _KMSG_DICT as _KMSG_DICT
from gputriage.logscan.lines import _MONTHS as _MONTHS
from gputriage.logscan.lines import _SYSLOG_NAMES as _SYSLOG_NAMES
from gputriage.logscan.lines import _SYSLOG_TS as _SYSLOG_TS
from gputriage.logscan.lines import _UPTIME as _UPTIME
from gputriage.logscan.lines import _format_of as _format_of
from gputriage.logscan.lines import _Seg, _Source
from gputriage.logscan.lines import _stamp_time as _stamp_time
from gputriage.logscan.lines import _usec as _usec
from gputriage.logscan.reader import _Buffers as _Buffers
from gputriage.logscan.reader import _compression, _file_chunks, _Input
from gputriage.logscan.reader import _decompressed as _decompressed
from gputriage.logscan.reader import _decompressor as _decompressor
from gputriage.logscan.reader import _read_block as _read_block
from gputriage.logscan.search import _BLOCK_BUF as _BLOCK_BUF
from gputriage.logscan.search import _HEAD as _HEAD
from gputriage.logscan.search import (
    _JSON_ANCHOR,
    ANCHORS,
    _load_libc,
    _process_pool,
    _run_blocks,
    _run_input,
)
from gputriage.logscan.search import _MAX_SEGMENTS as _MAX_SEGMENTS
from gputriage.logscan.search import _PROBE_OF as _PROBE_OF
from gputriage.logscan.search import _TRACE_ANCHORS as _TRACE_ANCHORS
from gputriage.logscan.search import MAX_CONT as MAX_CONT
from gputriage.logscan.search import _add_hit as _add_hit
from gputriage.logscan.search import _anchor_hits as _anchor_hits
from gputriage.logscan.search import _Block as _Block
from gputriage.logscan.search import _block_task as _block_task
from gputriage.logscan.search import _context as _context
from gputriage.logscan.search import _line_end as _line_end
from gputriage.logscan.search import _Lines as _Lines
from gputriage.logscan.search import _memmem_hits as _memmem_hits
from gputriage.logscan.search import _nul_pieces as _nul_pieces
from gputriage.logscan.search import _Probe as _Probe
from gputriage.logscan.search import _probes as _probes
from gputriage.logscan.search import _search_span as _search_span
from gputriage.logscan.search import _Span as _Span
from gputriage.logscan.search import _strstr_hits as _strstr_hits
from gputriage.parsers.kernel_events import MAX_LINE as MAX_LINE
from gputriage.parsers.kernel_events import TRACE_WINDOW as TRACE_WINDOW
from gputriage.parsers.kernel_events import DriverEvent
from gputriage.parsers.kernel_events import EventExtractor as EventExtractor
from gputriage.parsers.kernel_events import LogLine as LogLine
from gputriage.parsers.kernel_events import split_escaped as split_escaped
from gputriage.parsers.kernel_events import split_prefix as split_prefix

__all__ = ["ANCHORS", "BootInfo", "LogScan", "scan_paths", "scan_text"]

BLOCK = 8 << 20
LONG_LINE = 4 << 20  # a line without a newline for this long is cut into pieces


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
    lines: int | None = 0  # lines seen (None: a large file whose lines were not counted)
    skipped: int = 0  # candidate lines cut or not cleanly decodable (counted, never fatal)
    bytes: int = 0
    formats: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


# Layout: ``search`` (anchor search, threads, worker processes), ``reader`` (opening
# inputs), ``lines`` (formats, times, boots); every name of the former single module is
# imported above so that it stays reachable here. The tunables below (``BLOCK``,
# ``LONG_LINE``, ``PROCESS_MIN``, ``_workers``, the libc functions) live in this package
# and the submodules read them from it at call time, so setting one here still works.
_MEMMEM, _STRSTR, _STRLEN = _load_libc()


# --- driving -------------------------------------------------------------------------------

def _workers() -> int:
    if _MEMMEM is None:
        return 1
    return max(1, min(8, os.cpu_count() or 1))


PROCESS_MIN = 64 << 20  # files at least this big are searched in worker processes


def _anchors_for(head: bytes | bytearray) -> tuple[bytes, ...]:
    return ANCHORS + ((_JSON_ANCHOR,) if head.lstrip()[:1] == b"{" else ())


@dataclass
class _Result:
    name: str
    order: int
    src: _Source
    lines: int | None
    nbytes: int
    problems: list[str]

    @property
    def first_time(self) -> datetime | None:
        return next((s.first for s in self.src.segs if s.first), None)

    @property
    def rotation(self) -> int:
        m = re.search(r"\.(\d{1,4})(?:\.(?:gz|xz|bz2|lzma))?$", self.name)
        return int(m.group(1)) if m else 0


def _scan_one(name: str, chunks: Iterator[bytes | bytearray], order: int, now: datetime,
              pool: ThreadPoolExecutor | None, problems: list[str]) -> _Result:
    src = _Source(name, now)
    inp = _Input(name, problems)
    first = next(chunks, b"")
    anchors = _anchors_for(first[:4096])

    def all_chunks() -> Iterator[bytes | bytearray]:
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
                 procs: ForkWorkers, problems: list[str]) -> _Result:
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
        scan.lines = None if scan.lines is None or r.lines is None else scan.lines + r.lines
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
    if scan.lines == 0 and not scan.events:
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


_SNIFF = 64 << 10  # a large plain file's first bytes tested for binary data


def _not_text(name: str) -> InputError:
    return InputError(f"{name}: binary data, not a text log")


def _checked(inp: Input, chunks: Iterator[bytes | bytearray]) -> Iterator[bytes | bytearray]:
    """``chunks`` again, once the first (decompressed) one was found to be text."""
    first = next(chunks, b"")
    if is_binary(first, stream=inp.kind != FILE):
        raise _not_text(inp.name)
    yield first
    del first  # let the buffer pool reuse it
    yield from chunks


def scan_paths(paths: Sequence[str], *, now: datetime | None = None) -> LogScan:
    """Scan kernel-log files (plain, .gz, .xz, .bz2; ``-`` = stdin, pipes, FIFOs) as one
    timeline. Inputs are opened by :func:`gputriage.inputs.open_input` (devices refused,
    streams read under its budgets); one whose first block is binary is not read on.

    Raises :class:`InputError` only when no input could be read at all."""
    now = now or datetime.now(timezone.utc)
    results: list[_Result] = []
    problems: list[str] = []
    failures: list[str] = []
    workers = _workers()
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    procs: ForkWorkers | Literal[False] | None = None  # made when a large plain file comes
    try:
        for order, path in enumerate(paths):
            name = "<stdin>" if path == "-" else str(path)
            try:
                inp = open_input(path, problems)
            except InputError as exc:
                failures.append(str(exc))
                continue
            try:
                if inp.kind == DIR:
                    raise InputError(f"{name}: a directory, not a log file")
                fh = inp.fh
                size = _plain_size(fh) if inp.kind == FILE else -1
                if size >= PROCESS_MIN and is_binary(os.pread(fh.fileno(), _SNIFF, 0), False):
                    raise _not_text(name)
                if size >= PROCESS_MIN and procs is None:
                    procs = _process_pool() or False
                if size >= PROCESS_MIN and procs:
                    try:
                        results.append(_scan_blocks(name, fh, size, order, now, procs,
                                                    problems))
                        continue
                    except WorkerDied:  # a worker died: read this one here
                        procs = False
                chunks = _checked(inp, _file_chunks(fh, name, problems))
                results.append(_scan_one(name, chunks, order, now, pool, problems))
            except OSError as exc:
                failures.append(f"{name}: cannot read ({exc.strerror or exc})")
            except InputError as exc:
                failures.append(str(exc))
            finally:
                inp.close()
    finally:
        if pool is not None:
            pool.shutdown()
    if not results:
        raise InputError("; ".join(failures) or "no input to scan")
    scan = _merge(results)
    scan.problems = failures + scan.problems
    return scan
