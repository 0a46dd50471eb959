"""Read the inputs of ``gputriage nccl``: job logs streamed, host outputs loaded.

Each input is sniffed from its first MiB (decompressed): a snapshot (dir or
tarball) or a text that holds host outputs (nvidia-smi, ibstat, a kernel log,
a bug report...) is loaded as ``analyze`` loads it; every text input is also
streamed, 1 MiB at a time, through the NCCL log reader, while the lines that
may belong to nccl-tests output are set aside (bounded) and parsed at the end.
A file of any size is read with bounded memory; gzip, xz and bzip2 are
decompressed as they stream, and a truncated stream keeps what came out of it.
"""

from __future__ import annotations

import bz2
import lzma
import os
import re
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO

from gputriage.errors import InputError, unreadable
from gputriage.parsers.nccl_model import NcclLog, NcclTestRun

if TYPE_CHECKING:  # pragma: no cover
    from gputriage.snapshot import Snapshot

BLOCK = 1 << 20  # bytes per read, and per decompression step
SNIFF = 1 << 20  # how much of an input decides what it is
TESTS_CAP = 8 << 20  # most bytes of candidate nccl-tests lines kept per input
JOB_SOURCES = ("nccl_log", "nccl_tests")
NOT_NCCL = ("no NCCL record, nccl-tests output or host output in it; expected an "
            "NCCL_DEBUG=INFO log (one per rank or all ranks in one), nccl-tests output "
            "(all_reduce_perf...), or what analyze reads (snapshot, bug report, pasted outputs)")

# Lines that may belong to nccl-tests output: comment / header lines and table rows
# (found by one regex anchored on the newline, fast), and lines naming a *_perf
# binary or a test failure (found with bytes.find). parse_nccl_tests sorts them out.
_ROWISH = re.compile(rb"\n[ \t]*(?:#|\d+[ \t]+\d+[ \t]+[A-Za-z])[^\n]*")
_MARKERS = (b"_perf", b"failure")
_MAGIC = {b"\x1f\x8b": "gzip", b"\xfd7zXZ\x00": "xz", b"BZh": "bzip2"}


@dataclass
class JobInputs:
    """What the inputs gave: the job's NCCL log and nccl-tests runs, the host's
    snapshot (None when no host output was given), and reading problems."""

    log: NcclLog = field(default_factory=NcclLog)
    runs: list[NcclTestRun] = field(default_factory=list)
    snapshot: Snapshot | None = None
    job_origins: dict[str, list[str]] = field(default_factory=dict)  # origin -> sources
    problems: list[str] = field(default_factory=list)
    bytes_read: int = 0

    @property
    def has_log(self) -> bool:
        return bool(self.log.processes or self.log.framework_errors)


def _human(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


def _compression(head: bytes) -> str | None:
    return next((kind for magic, kind in _MAGIC.items() if head.startswith(magic)), None)


def _new(kind: str):  # noqa: ANN202 - a decompressor object of the kind
    if kind == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    return lzma.LZMADecompressor() if kind == "xz" else bz2.BZ2Decompressor()


def _inflate(kind: str, first: bytes, fh: BinaryIO, name: str,
             problems: list[str]) -> Iterator[bytes]:
    """Decompressed blocks of at most BLOCK bytes; concatenated members are read on,
    a stream that stops early or breaks ends with a problem noted."""
    dec, data, total = _new(kind), first, 0
    try:
        while True:
            if dec.eof:
                data = dec.unused_data + data
                while not data.strip(b"\0"):
                    data = fh.read(BLOCK)
                    if not data:
                        return
                data = data.lstrip(b"\0")
                if _compression(data) != kind:
                    problems.append(f"{name}: data after the end of the {kind} stream ignored")
                    return
                dec = _new(kind)
            if kind == "gzip" or dec.needs_input:
                if not data:
                    data = fh.read(BLOCK)
                    if not data:
                        problems.append(f"{name}: truncated {kind} data; read the "
                                        f"{_human(total)} that could be decompressed")
                        return
                out = dec.decompress(data, BLOCK)
                data = dec.unconsumed_tail if kind == "gzip" else b""
            else:
                out = dec.decompress(b"", BLOCK)
            if out:
                total += len(out)
                yield out
    except (zlib.error, lzma.LZMAError, OSError, EOFError, ValueError) as exc:
        problems.append(f"{name}: corrupt {kind} data ({exc}); read the {_human(total)} "
                        "that could be decompressed")


def _blocks(fh: BinaryIO, name: str, problems: list[str]) -> Iterator[bytes]:
    """An open input as decompressed blocks."""
    first = fh.read(BLOCK)
    kind = _compression(first)
    if kind is not None:
        yield from _inflate(kind, first, fh, name, problems)
        return
    while first:
        yield first
        first = fh.read(BLOCK)


def _sniff(blocks: Iterator[bytes]) -> tuple[bytes, Iterator[bytes]]:
    """The first SNIFF bytes, and all the blocks again (those read first included)."""
    head: list[bytes] = []
    size = 0
    for block in blocks:
        head.append(block)
        size += len(block)
        if size >= SNIFF:
            break
    joined = b"".join(head)

    def again() -> Iterator[bytes]:
        yield from head
        yield from blocks
    return joined[:SNIFF], again()


class _TestsTap:
    """Passes blocks on to the NCCL log reader and keeps the candidate nccl-tests lines."""

    def __init__(self, name: str, problems: list[str]) -> None:
        self.name, self.problems = name, problems
        self.kept: list[bytes] = []
        self.size = 0
        self.nbytes = 0
        self.full = False

    def tap(self, blocks: Iterable[bytes]) -> Iterator[bytes]:
        carry = b""
        for block in blocks:
            self.nbytes += len(block)
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
        """Keep the candidate lines of ``buf[lo + 1:hi]`` (``buf[lo]`` is a newline)."""
        if self.full or hi <= lo + 1:
            return
        found = {m.start() + 1: m.group()[1:] for m in _ROWISH.finditer(buf, lo, hi)}
        for marker in _MARKERS:
            pos = buf.find(marker, lo, hi)
            while pos >= 0:
                start = buf.rfind(b"\n", lo, pos) + 1
                end = buf.find(b"\n", pos, hi)
                end = hi if end < 0 else end
                found.setdefault(start, buf[start:end])
                pos = buf.find(marker, end, hi)
        for start in sorted(found):
            line = found[start]
            if b"NCCL INFO" in line or b"NCCL WARN" in line:
                continue
            self.size += len(line) + 1
            if self.size > TESTS_CAP:
                self.full = True
                self.problems.append(f"{self.name}: more than {_human(TESTS_CAP)} of "
                                     "nccl-tests-like lines; the rest were not read")
                return
            self.kept.append(line)

    def runs(self) -> list[NcclTestRun]:
        from gputriage.ingest.detect_jobs import tests_line
        from gputriage.parsers.nccl_tests import parse_nccl_tests

        lines = [x.decode("utf-8", errors="replace").rstrip("\r") for x in self.kept]
        text = "\n".join(x for x in lines if tests_line(x))
        return parse_nccl_tests(text + "\n") if text else []


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
        if name != "kernel_log" or any(is_kernel_line(x) for x in body.splitlines()):
            return True
    return False


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
        found.job_origins.setdefault(cap.origin or snap.origin, []).append(name)
    if found.snapshot is None:
        found.snapshot = snap
    else:
        found.snapshot.merge(snap)


def _read_one(path: str, found: JobInputs) -> None:
    """One input into ``found``; InputError when nothing at all could be used."""
    from gputriage.ingest import CAP_BYTES, load_input, load_text, looks_binary
    from gputriage.parsers.nccl_log import read_nccl_log
    from gputriage.snapshot import decode

    if path != "-" and os.path.isdir(path):
        _add_host(found, load_input(path))
        return
    name = "<stdin>" if path == "-" else path
    problems: list[str] = []
    try:
        fh = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise unreadable(path, exc) from None
    try:
        head, blocks = _sniff(_blocks(fh, name, problems))
        if not head.strip():
            raise InputError(f"{name}: empty file" if not problems else problems[-1])
        if head[257:262] == b"ustar" and path != "-":
            _add_host(found, load_input(path))
            return
        if looks_binary(head[:64 * 1024]):
            raise InputError(f"{name}: binary data, not an NCCL log or a text output")
        before = (found.log.nccl_lines, len(found.log.framework_errors), len(found.runs))
        host = _host_pieces(decode(head))
        try:
            if host and path == "-":  # stdin cannot be read twice: keep it (bounded)
                kept = b"".join(_tail(blocks, CAP_BYTES))
                blocks = iter([kept])
                _add_host(found, load_text(decode(kept), name, problems[:]), streamed=True)
            elif host:
                _add_host(found, load_input(path), streamed=True)
        except InputError as exc:
            host = False
            problems.append(str(exc))
        tap = _TestsTap(name, problems)
        read_nccl_log(tap.tap(blocks), name, found.log)
        found.runs.extend(tap.runs())
        found.bytes_read += tap.nbytes
    finally:
        if path != "-":
            fh.close()
    found.problems.extend(problems)
    gave = [src for src, changed in (
        ("nccl_log", (found.log.nccl_lines, len(found.log.framework_errors)) != before[:2]),
        ("nccl_tests", len(found.runs) != before[2])) if changed]
    if gave:
        found.job_origins[name] = gave
    elif not host:
        why = f" ({problems[-1]})" if problems else ""
        raise InputError(f"{name}: {NOT_NCCL}{why}")


def _tail(blocks: Iterable[bytes], cap: int) -> list[bytes]:
    """The last ``cap`` bytes of a stream, as blocks."""
    kept: list[bytes] = []
    size = 0
    for block in blocks:
        kept.append(block)
        size += len(block)
        while kept and size - len(kept[0]) >= cap:
            size -= len(kept.pop(0))
    return kept


def read_inputs(paths: Iterable[str]) -> JobInputs:
    """Every input of ``gputriage nccl`` read into one :class:`JobInputs`; inputs that
    fail are listed in ``problems`` as long as one gave something, else InputError."""
    found = JobInputs()
    failed: list[str] = []
    for path in paths:
        try:
            _read_one(path, found)
        except InputError as exc:
            failed.append(str(exc))
    if not (found.has_log or found.runs or found.snapshot is not None):
        if len(failed) == 1:
            raise InputError(failed[0])
        raise InputError("no input could be used: " + "; ".join(failed))
    found.problems.extend(failed)
    return found
