"""Turn what the user names on the command line into one :class:`Snapshot`.

An input is a snapshot directory or tarball, an nvidia-bug-report.log (plain
or gzip), or a pasted output recognised by its content, or ``-`` for stdin.
Inputs are opened under :mod:`gputriage.io.inputs` (devices refused, pipes and
FIFOs read once under its byte and time budgets, binary data stopped at its
first block). A large log or pasted text (a file, or a stream, of 16 MiB or more)
is streamed, never held (:mod:`gputriage.ingest.streamed`); of any other input at
most :data:`CAP_BYTES` is kept (the tail, where the current boot is), NUL padding
is skipped, and a truncated gzip gives a partial analysis when anything came out
of it.
"""

from __future__ import annotations

import errno
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from gputriage.errors import InputError, InputsConflict, unreadable
from gputriage.ingest.bigtext import DETECT_BYTES, head_tail_pieces
from gputriage.ingest.bugreport import is_bug_report, split_with_headers
from gputriage.ingest.detect import EXPECTED, detect_framed
from gputriage.ingest.sos import read_sosreport
from gputriage.ingest.streamed import LargeLogs
from gputriage.io.decompress import compression, data_of, first_pieces, peek
from gputriage.io.inputs import DIR, STREAM, Input, human, is_binary, limit, open_input
from gputriage.io.sniff import looks_binary
from gputriage.parsers.detect_jobs import nccl_lines
from gputriage.parsers.detect_kernel import kernel_lines
from gputriage.parsers.kernel_patterns import strip_ansi
from gputriage.snapshot.budget import Budget
from gputriage.snapshot.bundle import READ_CAP_BYTES, Captured, Snapshot, decode
from gputriage.text.framing import unframe

__all__ = ["CAP_BYTES", "EXPECTED", "human_size", "load_input", "load_inputs", "load_opened",
           "load_snapshot", "load_text", "looks_binary"]

CAP_BYTES = READ_CAP_BYTES  # most bytes kept per input (the tail)
_SNIFF = 64 * 1024
_CHUNK = 1 << 20


@dataclass
class _Raw:
    """Bytes kept from one input and what happened while reading it."""

    data: bytes
    total: int  # bytes seen (after decompression, NULs included)
    truncated: bool = False
    problems: list[str] = field(default_factory=list)


human_size = human  # a byte count for messages ("1.5 MiB")


def _read_stream(stream: Iterable[bytes], origin: str, cap: int, nuls: bool = True) -> _Raw:
    """Read to the end keeping only the last ``cap`` bytes (NULs dropped); binary data
    in the first block (``nuls``: or NULs only) stops the read at once."""
    chunks: deque[bytes] = deque()
    kept = total = 0
    dropped = False
    head = b""
    for chunk in stream:
        if len(head) < _SNIFF:
            head += chunk[:_SNIFF - len(head)]
            if (len(head) >= _SNIFF or not total) and is_binary(head, nuls):
                raise InputError(f"{origin}: binary data, not a text output")
        total += len(chunk)
        chunk = chunk.replace(b"\0", b"")
        chunks.append(chunk)
        kept += len(chunk)
        while chunks and kept - len(chunks[0]) >= cap:
            kept -= len(chunks.popleft())
            dropped = True
    return _trim(_Raw(b"".join(chunks), total, dropped), cap, origin)


def _trim(raw: _Raw, cap: int, origin: str) -> _Raw:
    if len(raw.data) > cap:
        raw.data = raw.data[-cap:]
        raw.truncated = True
    if raw.truncated:
        raw.problems.append(f"{origin}: {human_size(raw.total)}, only the last "
                            f"{human_size(cap)} read")
    return raw


def _read_file(path: str, fh: BinaryIO, size: int, cap: int) -> _Raw:
    """A regular file: seek to its last ``cap`` bytes instead of reading it all. Binary
    data is refused by the sample :func:`_snapshot_of` judges, before the rest is read."""
    start = max(0, size - cap)
    sample = os.pread(fh.fileno(), _CHUNK, start).replace(b"\0", b"")[:_SNIFF]
    if (len(sample) == _SNIFF or size - start <= _CHUNK) and looks_binary(sample):
        raise InputError(f"{path}: binary data, not a text output")
    parts: list[bytes] = []
    left = cap
    here = start
    fd = fh.fileno()
    while left > 0:
        data_at = _next_data(fh, here)
        if data_at is None:
            break
        left -= data_at - here  # a hole (sparse file) reads as NULs: skip it
        # pread: positioned reads, immune to the buffered reader's idea of the offset
        chunk = os.pread(fd, max(0, min(_CHUNK, left)), data_at)
        if not chunk:
            break
        here = data_at + len(chunk)
        left -= len(chunk)
        parts.append(chunk.replace(b"\0", b""))
    raw = _Raw(b"".join(parts), size, truncated=start > 0)
    if start:
        raw.problems.append(f"{path}: {human_size(size)}, only the last {human_size(cap)} read")
    return raw


def _next_data(fh: BinaryIO, pos: int) -> int | None:
    """Where data resumes at or after ``pos`` (None: only a hole is left)."""
    try:
        return os.lseek(fh.fileno(), pos, os.SEEK_DATA)
    except OSError as exc:
        return None if exc.errno == errno.ENXIO else pos
    except (AttributeError, ValueError):
        return pos


def load_snapshot(path: str) -> Snapshot:
    """A snapshot directory or tarball, or a sosreport (its tarball or unpacked folder:
    :mod:`gputriage.ingest.sos`), under the snapshot load budgets."""
    return Snapshot.load(path, other=_sosreport)


def _sosreport(reader: object, budget: Budget) -> Snapshot:
    return read_sosreport(reader, budget, _pieces)


def _read_path(path: str) -> _Raw | Snapshot:
    """Read one named input (``-``: stdin); a snapshot directory or tarball, or a
    sosreport, loads directly."""
    inp = open_input(path)
    if inp.kind == DIR:
        return load_snapshot(path)
    with inp:
        if inp.kind == STREAM:
            return _read_opened(inp)
        fh = inp.fh
        if _is_tar(fh):
            return load_snapshot(path)
        try:
            fh.seek(0)
            first = fh.read(_CHUNK)
            if compression(first) is not None:
                broken: list[str] = []
                data = data_of(first, fh.read, path, broken, _CHUNK)
                raw = _read_stream(limit(data, path, inp.problems), path, CAP_BYTES, nuls=False)
                raw = _decompress_problems(raw, broken, path)
                raw.problems[:0] = inp.problems
                return raw
            return _read_file(path, fh, os.fstat(fh.fileno()).st_size, CAP_BYTES)
        except OSError as exc:
            raise unreadable(path, exc) from None


def _read_opened(inp: Input, head: bytes = b"") -> _Raw:
    """A stream read once (``head``: its bytes already read); gzip, xz and bzip2 are
    decompressed."""
    first = head + inp.fh.read(_CHUNK) if len(head) < 6 else head
    broken: list[str] = []
    data = data_of(first, inp.fh.read, inp.name, broken, _CHUNK)
    if compression(first) is not None:
        data = limit(data, inp.name, inp.problems)
    raw = _decompress_problems(_read_stream(data, inp.name, CAP_BYTES), broken, inp.name)
    raw.problems[:0] = inp.problems
    return raw


def _decompress_problems(raw: _Raw, problems: list[str], origin: str) -> _Raw:
    """A compressed input that gave nothing is an input error; otherwise what went
    wrong decompressing it is noted with the partial analysis."""
    if problems and not raw.data.strip():
        kind = next((k for k in ("gzip", "xz", "bzip2") if k in problems[0]), "compressed")
        raise InputError(f"{origin}: truncated or corrupt {kind}: nothing could be decompressed")
    raw.problems.extend(problems)
    return raw


def _is_tar(fh: BinaryIO) -> bool:
    """A tarball (plain, gzip, bzip2 or xz), recognised from its first bytes only."""
    try:
        first = os.pread(fh.fileno(), 4096, 0)
        if compression(first) == "bzip2":  # nothing comes out before a whole block
            first = os.pread(fh.fileno(), 1 << 20, 0)
        head = peek(first, 512)
    except OSError:
        return False
    return head[257:262] == b"ustar"


def _record(origin: str, text: str, kind: str, truncated: bool) -> dict:
    return {"kind": kind, "origin": origin, "target": None, "rc": None, "duration_s": None,
            "bytes": len(text.encode("utf-8", errors="replace")), "truncated": truncated,
            "error": None, "error_detail": None, "file": None}


def _pieces(text: str) -> tuple[list[tuple[str, str]], dict[str, dict[str, str]]]:
    """Detected pieces (and the lines as pasted of framed ones: see
    :func:`gputriage.ingest.detect.detect_framed`); a large input is classified on its
    head and its tail (where a job prints its nccl-tests table), its kernel and NCCL log
    lines on all of it."""
    if len(text) <= DETECT_BYTES:
        return detect_framed(text)
    cut = text.rfind("\n", 0, DETECT_BYTES)
    head = text[: cut if cut > 0 else DETECT_BYTES]
    start = max(len(head), text.find("\n", len(text) - DETECT_BYTES) + 1)
    found, framed = head_tail_pieces(head, text[start:])
    whole = unframe(text) if framed else text  # (a framed log: every line unwrapped)
    for name, body in (("kernel_log", kernel_lines(whole)), ("nccl_log", nccl_lines(whole))):
        if body:
            found[name] = body
    return list(found.items()), {}


def _from_bug_report(text: str, origin: str, problems: list[str], truncated: bool) -> Snapshot:
    caps: dict[str, Captured] = {}
    for name, (header, body, error) in split_with_headers(text).items():
        rec = _record(origin, body or "", "bug-report", truncated)
        if error:
            rec.update(error=error, error_detail=f"{header}: {error} on the reporting host")
        caps[name] = Captured(name, body, rec, f"{origin}#{header}")
    if not any(c.text is not None for c in caps.values()):
        problems.append(f"{origin}: an nvidia-bug-report log with no section gputriage reads")
    return Snapshot(caps, None, origin, problems)


def load_text(text: str, origin: str, problems: Sequence[str] = (),
              truncated: bool = False) -> Snapshot:
    """A snapshot from already-decoded text: a bug report or a pasted output."""
    probs = list(problems)
    if is_bug_report(text):
        return _from_bug_report(text, origin, probs, truncated)
    if "\x1b" in text:  # a paste from a colour terminal: the escapes carry no content
        text = strip_ansi(text)
    pieces, framed = _pieces(text)
    if not pieces:
        raise InputError(f"{origin}: unrecognised content; {EXPECTED}")
    caps = {name: Captured(name, body, _record(origin, body, "pasted", truncated), origin,
                           framed=framed.get(name, {}))
            for name, body in pieces}
    return Snapshot(caps, None, origin, probs)


def load_input(path: str) -> Snapshot:
    """One input (a path, or ``-`` for stdin) as a snapshot; InputError with one line if not."""
    raw = _read_path(path)
    if isinstance(raw, Snapshot):
        return raw
    return _snapshot_of(raw, "<stdin>" if path == "-" else path)


def load_opened(inp: Input, head: bytes = b"") -> Snapshot:
    """A stream already opened by :func:`gputriage.io.inputs.open_input` as a snapshot;
    ``head`` holds the bytes a caller read from it first (never read twice)."""
    return _snapshot_of(_read_opened(inp, head), inp.name)


def _snapshot_of(raw: _Raw, origin: str) -> Snapshot:
    """The snapshot of the text read from one input."""
    if raw.total == 0:
        raise InputError(f"{origin}: empty file")
    if looks_binary(raw.data[:_SNIFF]) or not raw.data:
        raise InputError(f"{origin}: binary data, not a text output")
    text = decode(raw.data)
    if raw.truncated and "\n" in text:
        text = text[text.index("\n") + 1:]  # the first line was cut in the middle
    if not text.strip():
        raise InputError(f"{origin}: empty file")
    return load_text(text, origin, raw.problems, raw.truncated)


def _load_or_stream(path: str, large: LargeLogs) -> Snapshot | None:
    """One input, loaded; or, when it is a stream (stdin, a pipe, a FIFO) with at least
    :data:`gputriage.ingest.streamed.STREAM_MIN_BYTES` of text that is not a bug report,
    handed to ``large`` to be streamed (None)."""
    from gputriage.ingest.streamed import STREAM_MIN_BYTES, kind_of

    inp = open_input(path)
    if inp.kind != STREAM:
        inp.close()
        return load_input(path)
    name = "<stdin>" if path == "-" else inp.name
    streaming = False
    try:
        first = inp.fh.read(_CHUNK)
        broken: list[str] = []
        data = data_of(first, inp.fh.read, name, broken, _CHUNK)
        if compression(first) is not None:
            data = limit(data, name, inp.problems)
        head, got = first_pieces(data, STREAM_MIN_BYTES)
        kind = kind_of(name, b"".join(head)[:_SNIFF * 2]) if got >= STREAM_MIN_BYTES else None
        if kind is None:
            raw = _decompress_problems(_read_stream(_chained(head, data), name, CAP_BYTES),
                                       broken, name)
            raw.problems[:0] = inp.problems
            return _snapshot_of(raw, name)
        problems = inp.problems

        def blocks() -> Iterator[bytes]:
            try:
                yield from _chained(head, data)
            finally:
                inp.close()
                problems.extend(broken)
        large.feed(name, kind, blocks, problems)
        streaming = True
        return None
    finally:
        if not streaming:
            inp.close()


def _chained(first: list[bytes], rest: Iterator[bytes]) -> Iterator[bytes]:
    yield from first
    first.clear()
    yield from rest


def _one_host(snapshots: Sequence[Snapshot]) -> None:
    """InputsConflict when the inputs name more than one host: one view of two hosts
    would mix their GPUs and logs (``fleet`` compares hosts)."""
    hosts: dict[str, str] = {}
    for snap in snapshots:
        name = snap.host_name()
        if name:
            hosts.setdefault(name.lower(), f"{name} ({snap.origin})")
    if len(hosts) > 1:
        named = list(hosts.values())
        shown = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
        raise InputsConflict(f"the inputs are of {len(hosts)} hosts: {shown}; several "
                             "paths combine into one host's view: give one host's inputs, "
                             "or compare hosts with gputriage fleet PATH...")


def load_inputs(paths: Sequence[str], progress: Callable[..., None] | None = None,
                meanwhile: Callable[[], None] | None = None) -> Snapshot:
    """All inputs combined into one host view.

    Inputs that fail are reported in ``problems`` as long as one succeeds; when
    none can be read, one InputError says why. ``meanwhile`` is called once while worker
    processes scan a large log, if they do (what the caller needs next, started early).
    """
    if not paths:
        raise InputError(f"no input given; {EXPECTED}")
    large = LargeLogs()  # large kernel logs: scanned whole, never held (ingest.streamed)
    good: list[Snapshot] = []
    failed: list[str] = []
    for done, path in enumerate(paths):
        if progress is not None:  # (name, done, total, unit): see commands.progress
            progress("inputs read", done, len(paths), "inputs")
        try:
            if not large.take(path):
                snap = _load_or_stream(path, large)
                if snap is not None:
                    good.append(snap)
        except InputError as exc:
            failed.append(str(exc))
    if not good and not large.paths:
        if len(failed) == 1:
            raise InputError(failed[0])
        raise InputError("no input could be read: " + "; ".join(failed))
    _one_host(good)
    snap = good[0] if good else None
    for other in good[1:]:
        assert snap is not None
        snap.merge(other)
    if progress is not None:
        progress("inputs read", len(paths), len(paths), "inputs")
    snap = large.snapshot(snap, progress, meanwhile)
    assert snap is not None
    snap.problems.extend(failed)
    return snap
