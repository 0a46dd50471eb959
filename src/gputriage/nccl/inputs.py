"""Read the inputs of ``gputriage nccl``: job logs streamed, host outputs loaded.

Each input is sniffed from its first MiB (decompressed): a snapshot (dir or
tarball) or a text that holds host outputs (nvidia-smi, ibstat, a kernel log,
a bug report...) is loaded as ``analyze`` loads it; every text input is also
streamed, 1 MiB at a time, through the NCCL log reader, while the lines that
may belong to nccl-tests output are set aside (bounded) and parsed at the end.
A file of any size is read with bounded memory; gzip, xz and bzip2 are
decompressed as they stream (up to the stream budget) by
:mod:`gputriage.io.decompress`, as ``gputriage logs`` decompresses them, and a
truncated stream keeps what came out of it. A plain file of a MiB or more is read by
worker processes instead (:mod:`gputriage.nccl.scan`, to the same effect). Another
process looks for host outputs in the first MiB meanwhile (where that MiB is long enough
for a fork to pay), while the input is read. Inputs are opened by
:func:`gputriage.io.inputs.open_input`: devices are refused, stdin, pipes and FIFOs are
read once under its budgets.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from gputriage.errors import InputError
from gputriage.io.decompress import compression, data_of, first_pieces
from gputriage.io.inputs import DIR, STREAM, human, is_binary, limit, open_input
from gputriage.nccl.hoststream import HostStream
from gputriage.nccl.tap import ROWISH as _ROWISH
from gputriage.nccl.tap import TYPES as _TYPES
from gputriage.nccl.tap import candidates as _candidates
from gputriage.nccl.tap import lines_with as _lines_with
from gputriage.parsers.nccl_log import LONG_LINE
from gputriage.parsers.nccl_model import NcclLog, NcclTestRun
from gputriage.text.fields import split_lines

if TYPE_CHECKING:  # pragma: no cover
    from gputriage.nccl.scan import Answer
    from gputriage.snapshot.bundle import Snapshot

BLOCK = 1 << 20  # bytes per read, and per decompression step
SNIFF = 1 << 20  # how much of an input decides what it is
TESTS_CAP = 8 << 20  # most bytes of candidate nccl-tests lines kept per input
JOB_SOURCES = ("nccl_log", "nccl_tests")
NOT_NCCL = ("no NCCL record, nccl-tests output or host output in it; expected an "
            "NCCL_DEBUG=INFO log (one per rank or all ranks in one), nccl-tests output "
            "(all_reduce_perf...), or what analyze reads (snapshot, bug report, pasted outputs)")

@dataclass
class JobInputs:
    """What the inputs gave: the job's NCCL log and nccl-tests runs, the host's
    snapshot (None when no host output was given), and reading problems."""

    log: NcclLog = field(default_factory=NcclLog)
    runs: list[NcclTestRun] = field(default_factory=list)
    snapshot: Snapshot | None = None
    job_origins: dict[str, list[str]] = field(default_factory=dict)  # origin -> sources
    problems: list[str] = field(default_factory=list)

    @property
    def has_log(self) -> bool:
        return bool(self.log.processes or self.log.framework_errors)


class _Reader:
    """Blocks of an open input; a read error (EIO on a bad disk, a vanished mount) ends
    the input with a problem noted instead of an exception."""

    def __init__(self, fh: BinaryIO, name: str, problems: list[str]) -> None:
        self.fh, self.name, self.problems = fh, name, problems

    def read(self, size: int) -> bytes:
        try:
            return self.fh.read(size)
        except OSError as exc:
            self.problems.append(f"{self.name}: cannot read ({exc.strerror or exc})")
            return b""


def _blocks(fh: BinaryIO, name: str, problems: list[str],
            progress: Callable[[str, int, int | None], None] | None = None) -> Iterator[bytes]:
    """An open input as decompressed blocks (``progress`` told the bytes read of it)."""
    reader = _Reader(fh, name, problems)
    if progress is not None:
        reader = _Counted(reader, name, progress)
    first = reader.read(BLOCK)
    data = data_of(first, reader.read, name, problems, BLOCK)
    yield from limit(data, name, problems) if compression(first) else data


class _Counted(_Reader):
    """A reader that tells ``progress`` the bytes read so far (of the file's size when it
    is a regular file)."""

    def __init__(self, reader: _Reader, name: str,
                 progress: Callable[[str, int, int | None], None]) -> None:
        super().__init__(reader.fh, reader.name, reader.problems)
        import stat

        try:
            st = os.fstat(self.fh.fileno())
            self.total: int | None = st.st_size if stat.S_ISREG(st.st_mode) else None
        except (OSError, AttributeError, ValueError):
            self.total = None
        self.done = 0
        self.progress = progress

    def read(self, size: int) -> bytes:
        data = super().read(size)
        self.done += len(data)
        self.progress(self.name, self.done, self.total)
        return data


def _sniff(blocks: Iterator[bytes]) -> tuple[bytes, Iterator[bytes]]:
    """The first SNIFF bytes, and all the blocks again (those read first included)."""
    head, _ = first_pieces(blocks, SNIFF)
    joined = b"".join(head)

    def again() -> Iterator[bytes]:
        yield from head
        yield from blocks
    return joined[:SNIFF], again()


class _TestsTap:
    """Passes blocks on to the NCCL log reader and keeps the candidate nccl-tests lines."""

    def __init__(self, name: str, problems: list[str]) -> None:
        self.name, self.problems = name, problems
        self.kept: list[str] = []
        self.size = 0
        self.full = False
        self.shipped = False  # nccl-tests lines seen behind a launcher's or shipper's prefix

    def tap(self, blocks: Iterable[bytes]) -> Iterator[bytes]:
        carry = b""
        for block in blocks:
            first = block.find(b"\n")
            if first < 0:
                carry = carry + block if len(carry) < BLOCK else b""  # over-long: no table
            else:
                last = block.rfind(b"\n")
                self._scan(b"\n" + carry + block[:first], 0, len(carry) + first + 1)
                self._scan(block, first, last)  # in place: no copy of the block
                carry = block[last + 1:]
            yield block
        self._scan(b"\n" + carry, 0, len(carry) + 1)

    def _scan(self, buf: bytes, lo: int, hi: int) -> None:
        """Keep the nccl-tests lines of ``buf[lo + 1:hi]`` (``buf[lo]`` is a newline)."""
        from gputriage.parsers.nccl_tests import tests_line

        if self.full or hi <= lo + 1:
            return
        found = _candidates(buf, lo, hi)
        lines = {}
        for start, raw in found.items():
            if b"NCCL INFO" not in raw and b"NCCL WARN" not in raw:
                line = raw.decode("utf-8", errors="replace").rstrip("\r")
                if tests_line(line):
                    lines[start] = line
        if not self.shipped and any(not _ROWISH.match(b"\n" + found[k]) for k in lines):
            self.shipped = True  # a table behind a prefix: its rows are found by data type
        if self.shipped:
            rows: dict[int, bytes] = {}
            _lines_with(buf, lo, hi, _TYPES, rows)
            for start, raw in rows.items():
                line = raw.decode("utf-8", errors="replace").rstrip("\r")
                if start not in lines and tests_line(line):
                    lines[start] = line
        for start in sorted(lines):
            self.size += len(lines[start]) + 1
            if self.size > TESTS_CAP:
                self.full = True
                self.problems.append(f"{self.name}: more than {human(TESTS_CAP)} of "
                                     "nccl-tests lines; the rest were not read")
                return
            self.kept.append(lines[start])

    def take(self, lines: list[str], full: bool) -> None:
        """Keep ``lines``, found elsewhere under the same rules (``full``: the cap cut
        them)."""
        self.kept = lines
        if full:
            self.full = True
            self.problems.append(f"{self.name}: more than {human(TESTS_CAP)} of "
                                 "nccl-tests lines; the rest were not read")

    def runs(self) -> list[NcclTestRun]:
        from gputriage.parsers.nccl_tests import parse_nccl_tests

        return parse_nccl_tests("\n".join(self.kept) + "\n") if self.kept else []


def _large_plain(fh: BinaryIO) -> int | None:
    """The size of an open plain (uncompressed) regular file that worker processes may
    read (:mod:`gputriage.nccl.scan`); None for any other input."""
    import stat

    from gputriage.nccl.scan import usable

    try:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or not usable(st.st_size):
            return None
        return None if compression(os.pread(fh.fileno(), 16, 0)) else st.st_size
    except (OSError, AttributeError, ValueError):
        return None


def _read_large(fd: int, size: int, name: str, log: NcclLog, tap: _TestsTap,
                problems: list[str],
                progress: Callable[[str, int, int | None], None] | None,
                meanwhile: Callable[[], object] | None = None) -> None:
    from gputriage.nccl.scan import LargeTap, read_large

    big = LargeTap(fd, TESTS_CAP)
    end = read_large(fd, size, name, log, big, problems, progress, meanwhile=meanwhile)
    tap.take(*big.kept(end))


def _host_pieces(text: str) -> bool:
    """Whether a text holds host outputs (a kernel log only if it has kernel records:
    another program's syslog is not a fact about the GPUs)."""
    from gputriage.ingest.bugreport import is_bug_report
    from gputriage.ingest.detect import detect, is_kernel_line

    if is_bug_report(text):
        return True
    cut = text.rfind("\n")
    for name, body in detect(text[:cut] if cut > 0 else text):
        if name in JOB_SOURCES:
            continue
        if name != "kernel_log" or any(is_kernel_line(x) for x in split_lines(body)):
            return True
    return False


_FORK_FROM = 256 << 10  # a shorter head is looked at here: the look costs less than a fork


def _looked_for(text: str) -> Answer:
    """Whether ``text`` holds host outputs (:func:`_host_pieces`), worked out in a forked
    process while the caller reads on, where the text is long enough for that to pay."""
    from gputriage.nccl.scan import Answer, in_child

    def look() -> bool:
        return _host_pieces(text)

    return in_child(look) if len(text) >= _FORK_FROM else Answer(look)


def _add_host(found: JobInputs, snap: Snapshot, streamed: bool = False) -> None:
    """Merge a host snapshot. Its job sources go to the job's log and runs instead
    (dropped when ``streamed``: the whole input is streamed through them anyway)."""
    from gputriage.parsers.nccl_log import read_nccl_log
    from gputriage.parsers.nccl_tests import parse_nccl_tests

    for name in JOB_SOURCES:
        cap = snap.captures.pop(name, None)
        if streamed or cap is None or cap.text is None:
            continue
        if name == "nccl_log":
            read_nccl_log([cap.text.encode()], cap.origin or snap.origin, found.log)
        else:
            found.runs.extend(parse_nccl_tests(cap.text))
        found.job_origins.setdefault(snap.origin, []).append(name)
    if found.snapshot is None:
        found.snapshot = snap
    else:
        found.snapshot.merge(snap)


def _load_host(path: str) -> Snapshot:
    """A host input loaded as ``analyze`` loads it: a large log scanned whole, in memory
    bounded by what it holds, not its tail held (the loader imported only then: a job's
    log alone never needs it)."""
    from gputriage.ingest import load_inputs

    return load_inputs([path])


def _read_one(path: str, found: JobInputs,
              progress: Callable[[str, int, int | None], None] | None = None,
              meanwhile: Callable[[], object] | None = None) -> None:
    """One input into ``found``; InputError when nothing at all could be used.
    ``meanwhile`` runs while other processes still look for host outputs and read a
    large file."""
    from gputriage.parsers.nccl_log import read_nccl_log
    from gputriage.snapshot.bundle import decode

    reading: list[str] = []  # what reading the bytes met (a truncated stream, a budget, EIO)
    problems: list[str] = []
    inp = open_input(path, reading)
    name = inp.name
    if inp.kind == DIR:
        _add_host(found, _load_host(path))
        return
    once = inp.kind == STREAM  # stdin, a pipe or a FIFO: read once, never opened again
    try:
        head, blocks = _sniff(_blocks(inp.fh, name, reading, progress))
        if not head.strip():
            raise InputError(f"{name}: empty file" if not reading else reading[-1])
        if head[257:262] == b"ustar":
            if once:
                raise InputError(f"{name}: a tarball on a pipe; give a snapshot tarball as "
                                 "a file path")
            _add_host(found, _load_host(path))
            return
        if is_binary(head, stream=once):
            raise InputError(f"{name}: binary data, not an NCCL log or a text output")
        before = (found.log.nccl_lines, len(found.log.framework_errors), len(found.runs),
                  found.log.skipped)
        tap = _TestsTap(name, problems)
        size = None if once else _large_plain(inp.fh)
        if size is not None:  # read by worker processes, to the same effect
            from gputriage.nccl.scan import in_child

            text = decode(head)
            has_host = in_child(lambda: _host_pieces(text))  # meanwhile, in its own process
            _read_large(inp.fh.fileno(), size, name, found.log, tap, reading, progress,
                        meanwhile)  # (run once the worker processes read the file)
            host = has_host()
            tail = None
        else:  # (host outputs looked for meanwhile where the head is long: _looked_for)
            has_host = _looked_for(decode(head))
            tail = HostStream(name, has_host) if once else None  # what the host loader gets
            read_nccl_log(tap.tap(tail.keep(blocks) if tail else blocks), name, found.log)
            if meanwhile is not None and not has_host.ready():
                meanwhile()  # (what this process can do while it waits)
            host = tail.has_host() if tail else has_host()
        found.runs.extend(tap.runs())
        if host:
            try:
                _add_host(found, tail.load() if tail else _load_host(path), streamed=True)
                if tail is None:
                    reading = []  # the host loader read the same bytes and said so
            except InputError as exc:
                host = False
                problems.append(str(exc))
    finally:
        inp.close()
    problems = reading + problems
    found.problems.extend(problems)
    gave = [src for src, changed in (
        ("nccl_log", (found.log.nccl_lines, len(found.log.framework_errors)) != before[:2]),
        ("nccl_tests", len(found.runs) != before[2])) if changed]
    if gave:
        found.job_origins[name] = gave
    elif not host:
        skipped = found.log.skipped - before[3]
        why = [f"{skipped} NCCL line(s) over {LONG_LINE // 1024} KiB skipped"] if skipped else []
        why += problems[-1:]
        raise InputError(f"{name}: {NOT_NCCL}" + (f" ({'; '.join(why)})" if why else ""))


def read_inputs(paths: Iterable[str],
                progress: Callable[[str, int, int | None], None] | None = None,
                meanwhile: Callable[[], object] | None = None) -> JobInputs:
    """Every input of ``gputriage nccl`` read into one :class:`JobInputs`; inputs that
    fail are listed in ``problems`` as long as one gave something, else InputError.
    An input named twice (``-`` included) is read once: its lines would count twice.
    ``meanwhile`` (what the caller does next, started early) runs at most once, while an
    input's host outputs are looked for in another process."""
    found = JobInputs()
    failed: list[str] = []
    seen: set[str] = set()
    ran: list[bool] = []

    def once() -> None:
        if meanwhile is not None and not ran:
            ran.append(True)
            meanwhile()
    for path in paths:
        key = path if path == "-" else os.path.realpath(path)
        if key in seen:
            continue
        seen.add(key)
        try:
            _read_one(path, found, progress, once)
        except InputError as exc:
            failed.append(str(exc))
    if not (found.has_log or found.runs or found.snapshot is not None):
        if len(failed) == 1:
            raise InputError(failed[0])
        raise InputError("no input could be used: " + "; ".join(failed))
    found.problems.extend(failed)
    return found
