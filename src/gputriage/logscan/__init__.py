"""Kernel logs read at grep speed: every NVIDIA-relevant event, with its time and boot.

``scan_paths`` reads files (plain, gzip, xz, bzip2, rotated sets) or stdin
(``-``) in 8 MiB blocks and never decodes a line unless it holds one of a few
anchor literals (``NVRM:``, ``nvidia``, ``mlx5_core``, ``PCIe Bus Error``,
``segfault at`` ...: those of the rows of
:data:`gputriage.parsers.kernel_table.EVENTS` and the boot markers; see
``ANCHORS``). Anchors are found with Hyperscan where its wheel is installed (one
compiled database of literals; routine lines of a noisy anchor such as
``mlx5_core`` are rejected there, before any decoding), else through ``bytes.find``
of "probes" (a substring standing for one or more anchors, checked against them on the
line) (:mod:`.search`, :mod:`.hsearch`, ``ScanConfig.engine``). Other inputs than large
plain files are searched on threads where Hyperscan searches (it releases the GIL) from
reused read buffers and parsed in this process, on one thread. Candidate lines (plus
the continuation lines after them, and 30 lines after a hung task or soft lockup for
its call trace) are decoded and
parsed by :class:`gputriage.parsers.kernel_extractor.EventExtractor` (a single-line
Xid, the line a storm repeats, by the fast path of :mod:`.fastline`; once its key is
folded, counted into the folded event without being parsed, :mod:`.storm`, the lines
that path must leave to the parser screened by Hyperscan as it searches; in a span
that Xid lines crowd, Hyperscan leaves them out and one pass reads them where they
lie, :mod:`.stormspan`), and the events
folded as they come (:mod:`gputriage.parsers.kernel_fold`: per boot, kind, device and
code the first 64 are kept, the rest counted into one event with its last occurrence,
its processes and its Xid 45 causes), so that what a scan holds is bounded by what is
distinct in the log, not by its lines. Large plain files are read, searched, parsed and
folded task by task (an eighth of the file, 16 to 256 MiB: ``ScanConfig.task_for``;
each searched 16 MiB at a time) in forked worker processes (:mod:`.blocks`), which send
back only folded events. How blocks are read and searched
(block size, workers, engine) is a :class:`ScanConfig`.

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
syslog ``Mon dd hh:mm:ss`` has no year: it takes the year of the input's own
reference time (the previous year when that would put it after the reference),
in UTC. The reference is the latest dated stamp the input prints (an ISO or
``dmesg -T`` stamp leading a line, journalctl's "Logs begin at", a JSON
journal's realtime), else the one the caller gives (``now``: a snapshot's
collection time), else, for a file ``scan_paths`` reads, its modification time;
without any, syslog stamps have no absolute time, never one that depends on the
day gputriage runs. dmesg ``-T`` is taken as UTC; dmesg raw and /dev/kmsg only
give ``uptime_s``.

Several inputs make one timeline: they are ordered by their first time when
every input has one, else by rotation number (``kern.log.2.gz`` before
``kern.log.1`` before ``kern.log``); a boot continues across inputs unless a
marker, boot id, uptime or sequence says otherwise. Unreadable, truncated or
corrupt inputs are noted in ``problems``; only when no input can be read at
all is :class:`gputriage.errors.InputError` raised. Memory: blocks are
streamed, a bounded number in flight; only folded events are kept.

Layout: ``reader`` and ``stream`` (reading and decompressing inputs), ``search``
(anchor search, threads) and ``span`` (what it finds), ``blocks`` (large files read
and parsed by worker processes), ``lines`` (formats, times, boots), ``fastline``,
``storm`` and ``stormspan`` (the Xid line a storm repeats), ``timeline`` (inputs
joined), ``config``.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, BinaryIO, Literal

from gputriage.errors import InputError
from gputriage.io.decompress import compression
from gputriage.io.forkpool import ForkWorkers, WorkerDied
from gputriage.io.inputs import DIR, FILE, Input, is_binary, open_input
from gputriage.logscan.blocks import process_pool, run_blocks
from gputriage.logscan.config import DEFAULT, ScanConfig
from gputriage.logscan.lines import LineSource
from gputriage.logscan.reader import InputSpans, file_chunks
from gputriage.logscan.search import ANCHORS, anchors_for, run_input
from gputriage.logscan.stamps import REFERENCE_BYTES, year_reference
from gputriage.logscan.timeline import BootInfo, InputResult, LogScan, merge
from gputriage.text.fields import split_lines

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["ANCHORS", "BootInfo", "LogScan", "ScanConfig", "ScanProgress", "scan_paths",
           "scan_text"]

# what a scan reports as it reads: (input name, bytes read, its size or None when unknown)
ScanProgress = Callable[[str, int, int | None], None]

_SNIFF = 64 << 10  # a large plain file's first bytes tested for binary data
_SHAPE_BYTES = 256 << 10  # the head whose first lines must be log records (``shape``)


def _thread_pool(workers: int) -> ThreadPoolExecutor:
    """Threads that search spans (imported here: a large plain file, searched by worker
    processes, needs none, and its scan starts sooner without the import)."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(workers)


def _scan_one(name: str, chunks: Iterator[bytes | bytearray], order: int,
              now: datetime | None, pool: ThreadPoolExecutor | None, problems: list[str],
              config: ScanConfig) -> InputResult:
    """One input read chunk by chunk; ``now``: its reference time when its own first
    chunk prints no dated stamp (see the module docstring)."""
    inp = InputSpans(name, problems, config)
    first = next(chunks, b"")
    src = LineSource(name, year_reference(first) or now)
    anchors = anchors_for(first[:4096])

    def all_chunks() -> Iterator[bytes | bytearray]:
        yield first
        yield from chunks

    lines = run_input(src, inp, all_chunks(), pool, anchors, config.parallel())
    src.finish()
    return InputResult(name, order, src, lines, inp.nbytes, problems)


def _modified(fh: BinaryIO) -> datetime | None:
    """A file's modification time: the reference of a log file's year-less stamps."""
    try:
        return datetime.fromtimestamp(os.fstat(fh.fileno()).st_mtime, timezone.utc)
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation, OverflowError):
        return None


def _plain_size(fh: BinaryIO) -> int:
    """The size of ``fh`` when it is a regular, uncompressed file (else -1)."""
    try:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            return -1
        head = os.pread(fh.fileno(), 8, 0)
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return -1
    return st.st_size if compression(head) is None else -1


def _scan_blocks(name: str, fh: BinaryIO, size: int, order: int, now: datetime | None,
                 procs: ForkWorkers, problems: list[str], config: ScanConfig,
                 progress: ScanProgress | None = None,
                 meanwhile: Callable[[], None] | None = None) -> InputResult:
    """:func:`_scan_one` for a large plain file, its blocks searched by ``procs``."""
    head = os.pread(fh.fileno(), REFERENCE_BYTES, 0)
    tail = os.pread(fh.fileno(), REFERENCE_BYTES, max(0, size - REFERENCE_BYTES))
    src = LineSource(name, year_reference(head, tail) or now)
    inp = InputSpans(name, problems, config)
    if progress is not None:
        inp.report = lambda done: progress(name, done, size)
    anchors = anchors_for(os.pread(fh.fileno(), min(4096, config.block), 0))
    # the workers open the file this process has open, even if it was renamed (rotated)
    # or removed since
    opened = f"/proc/{os.getpid()}/fd/{fh.fileno()}"
    lines = run_blocks(src, inp, opened if os.path.exists(opened) else name, size, procs,
                       anchors, meanwhile)
    src.finish()
    return InputResult(name, order, src, lines, inp.nbytes, problems)


def _text_chunks(data: bytes) -> Iterator[bytes]:
    yield data


def scan_text(text: str, origin: str = "<text>", *, now: datetime | None = None,
              config: ScanConfig = DEFAULT) -> LogScan:
    """Scan a kernel log held in memory (same rules as :func:`scan_paths`); never raises.
    ``now``: the text's reference time when it prints no dated stamp of its own (a
    snapshot's collection time); without one, its syslog stamps have no absolute time."""
    data = text.encode("utf-8", errors="surrogatepass")
    problems: list[str] = []
    workers = config.parallel()
    pool = _thread_pool(workers) if len(data) > 2 * config.block and workers > 1 else None
    try:
        result = _scan_one(origin, _text_chunks(data), 0, now, pool, problems, config)
    finally:
        if pool is not None:
            pool.shutdown()
    return merge([result])


def _reported(chunks: Iterator[bytes | bytearray], fh: BinaryIO, name: str,
              progress: ScanProgress) -> Iterator[bytes | bytearray]:
    """``chunks``, reporting after each what was read of the input: its file position
    against its size for a regular file (compressed bytes for a compressed one), else
    the bytes passed on."""
    try:
        st = os.fstat(fh.fileno())
        total: int | None = st.st_size if stat.S_ISREG(st.st_mode) else None
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        total = None
    done = 0
    for chunk in chunks:
        done += len(chunk)
        yield chunk
        del chunk
        if total is not None:
            try:
                progress(name, min(fh.tell(), total), total)
                continue
            except (OSError, ValueError):
                total = None
        progress(name, done, None)


def _not_text(name: str) -> InputError:
    return InputError(f"{name}: binary data, not a text log")


def _shape_check(name: str, head: bytes | bytearray) -> None:
    """InputError unless the first lines of ``head`` are kernel-log records (a document,
    a table or code that quotes an Xid is not judged as a log)."""
    from gputriage.parsers.kernel_log import shape_refusal

    lines = split_lines(bytes(head[:_SHAPE_BYTES]).decode("utf-8", errors="replace"))
    if len(head) > _SHAPE_BYTES and len(lines) > 1:
        lines.pop()  # cut in the middle
    why = shape_refusal(name, lines)
    if why:
        raise InputError(why)


def _checked(inp: Input, chunks: Iterator[bytes | bytearray], shape: bool = False
             ) -> Iterator[bytes | bytearray]:
    """``chunks`` again, once the first (decompressed) one was found to be text (and,
    with ``shape``, a kernel log)."""
    first = next(chunks, b"")
    if is_binary(first, stream=inp.kind != FILE):
        raise _not_text(inp.name)
    if shape:
        _shape_check(inp.name, first)
    yield first
    del first  # let the buffer pool reuse it
    yield from chunks


class _Scanner:
    """Scans the inputs of one :func:`scan_paths` call, each into an
    :class:`InputResult`; worker processes are started when a large plain file comes."""

    def __init__(self, now: datetime | None, config: ScanConfig, shape: bool = False,
                 progress: ScanProgress | None = None,
                 meanwhile: Callable[[], None] | None = None) -> None:
        self.now = now
        self.progress = progress
        self.meanwhile = meanwhile
        self.shape = shape
        self.config = config
        self.workers = config.parallel()
        self._pool: ThreadPoolExecutor | None = None
        self.procs: ForkWorkers | Literal[False] | None = None
        self.problems: list[str] = []

    @property
    def pool(self) -> ThreadPoolExecutor | None:
        """The search threads, started when an input first needs them."""
        if self._pool is None and self.workers > 1:
            self._pool = _thread_pool(self.workers)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def scan(self, inp: Input, name: str, order: int) -> InputResult:
        if inp.kind == DIR:
            raise InputError(f"{name}: a directory, not a log file")
        fh = inp.fh
        size = _plain_size(fh) if inp.kind == FILE else -1
        now = self.now or (_modified(fh) if inp.kind == FILE else None)
        if size >= self.config.process_min:
            if is_binary(os.pread(fh.fileno(), _SNIFF, 0), False):
                raise _not_text(name)
            if self.shape:
                _shape_check(name, os.pread(fh.fileno(), _SHAPE_BYTES + 1, 0))
            if self.procs is None:
                self.procs = process_pool(self.config.parallel(processes=True)) or False
            if self.procs:
                try:
                    meanwhile, self.meanwhile = self.meanwhile, None
                    return _scan_blocks(name, fh, size, order, now, self.procs,
                                        self.problems, self.config, self.progress, meanwhile)
                except WorkerDied:  # a worker died: read this one here
                    self.procs = False
        workers = self.config.parallel()
        read = file_chunks(fh, name, self.problems, self.config, workers)
        if self.progress is not None:
            read = _reported(read, fh, name, self.progress)
        chunks = _checked(inp, read, self.shape)
        return _scan_one(name, chunks, order, now, self.pool, self.problems, self.config)


def scan_paths(paths: Sequence[str], *, now: datetime | None = None,
               config: ScanConfig = DEFAULT, shape: bool = False,
               texts: Sequence[tuple[str, str]] = (),
               progress: ScanProgress | None = None,
               meanwhile: Callable[[], None] | None = None) -> LogScan:
    """Scan kernel-log files (plain, .gz, .xz, .bz2; ``-`` = stdin, pipes, FIFOs) as one
    timeline. Inputs are opened by :func:`gputriage.io.inputs.open_input` (devices refused,
    streams read under its budgets); one whose first block is binary is not read on,
    nor (with ``shape``) one whose first lines are not log records
    (:func:`gputriage.parsers.kernel_log.shape_refusal`). ``texts``: ``(origin, text)``
    kernel logs already in memory, joined to the same timeline. ``progress`` is told
    what was read of each input as the scan goes. ``meanwhile`` is called once while
    worker processes search a large file (what the caller can do in the meantime: its
    own imports), else not at all.

    Raises :class:`InputError` only when no input could be read at all."""
    results: list[InputResult] = []
    failures: list[str] = []
    scanner = _Scanner(now, config, shape, progress, meanwhile)
    try:
        for order, path in enumerate(paths):
            name = "<stdin>" if path == "-" else str(path)
            try:
                inp = open_input(path, scanner.problems)
            except InputError as exc:
                failures.append(str(exc))
                continue
            try:
                results.append(scanner.scan(inp, name, order))
            except OSError as exc:
                failures.append(f"{name}: cannot read ({exc.strerror or exc})")
            except InputError as exc:
                failures.append(str(exc))
            finally:
                inp.close()
        for order, (origin, text) in enumerate(texts, len(paths)):
            data = text.encode("utf-8", errors="surrogatepass")
            results.append(_scan_one(origin, _text_chunks(data), order, scanner.now,
                                     scanner.pool, scanner.problems, config))
    finally:
        scanner.close()
    if not results:
        raise InputError("; ".join(failures) or "no input to scan")
    scan = merge(results)
    scan.problems = failures + scan.problems
    return scan
