"""Large logs named to ``analyze`` / ``triage`` / ``check``: scanned whole, never held.

A regular file (plain, gzip, xz or bzip2) of at least :data:`STREAM_MIN_BYTES` of text
whose head is a kernel log (the paste detector finds nothing else in it, and its first
lines are log records) is read through the streaming scanner ``gputriage logs`` uses
(:func:`gputriage.logscan.scan_paths`), all of it, in memory bounded by the events it
holds. Any other large text (a job's log with NCCL lines and a traceback, a kernel log
or a job's log on stdin or a pipe) is read once by a :class:`gputriage.ingest.bigtext.
Feeder`: its log records go to the same scan, its NCCL records to the NCCL log reader,
its head and tail to the paste detector. The scan is handed to the ``log_scan`` fact
on the snapshot's ``kernel_log`` capture (a :class:`ScannedLog`), the NCCL log to the
``nccl_log`` fact (a :class:`gputriage.ingest.bigtext.ParsedNccl`); kernel-log and NCCL
text of the other inputs joins them. Smaller inputs, bug reports, tarballs and binary
data are read as before (:mod:`gputriage.ingest`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from gputriage.errors import InputError
from gputriage.io.inputs import FILE, open_input
from gputriage.snapshot.bundle import Captured, Snapshot, decode
from gputriage.text.fields import split_lines

__all__ = ["STREAM_MIN_BYTES", "LargeLogs", "ScannedLog", "file_blocks", "is_large_kernel_log",
           "kind_of", "large_kind"]

STREAM_MIN_BYTES = 16 << 20  # a kernel log with this much text is scanned, not held
_HEAD = 128 << 10  # the text the detector judges the file on
_BLOCK = 1 << 20  # bytes per read of a streamed input


@dataclass
class ScannedLog(Captured):
    """The ``kernel_log`` capture of logs scanned whole: ``scan`` is their
    :class:`gputriage.logscan.LogScan`; ``text`` holds only the kernel-log text of other
    inputs (already part of ``scan``); ``head`` the first ``bigtext.HOST_TEXT`` bytes of
    the scanned logs' own kernel-log text, in input order (the host their lines name is
    read from it, as from a held log's text)."""

    scan: Any = None
    head: str = ""


def _kind(path: str) -> tuple[str | None, bytes]:
    """:func:`kind_of` the first :data:`_HEAD` bytes of text of a regular file
    (decompressed) when it holds at least :data:`STREAM_MIN_BYTES` of text, else None;
    and those bytes. A compressed file is decompressed only as far as it keeps looking
    like text that may be streamed. The head is judged once: the detector is the costly
    part."""
    from gputriage.io.decompress import compression, decompressed

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None, b""  # never open a FIFO or a device here: its data is read once
    except OSError:
        return None, b""  # stdin ("-"), or unreadable: the ordinary reader says why
    inp = open_input(path)
    with inp:
        if inp.kind != FILE:
            return None, b""
        fd = inp.fh.fileno()
        first = os.pread(fd, 1 << 20, 0)
        compressed = compression(first)
        if compressed is None:
            if os.fstat(fd).st_size < STREAM_MIN_BYTES:
                return None, b""
            return kind_of(path, first[:_HEAD]), first[:_HEAD]
        pos = len(first)

        def more(n: int) -> bytes:
            nonlocal pos
            data = os.pread(fd, n, pos)
            pos += len(data)
            return data

        got, parts, kind, head = 0, [], None, b""
        for piece in decompressed(compressed, first, more, path, [], 1 << 20):
            if kind is None:
                parts.append(piece)
                if sum(map(len, parts)) >= _HEAD or piece[257:262] == b"ustar":
                    head = b"".join(parts)[:_HEAD]
                    kind = kind_of(path, head)
                    if kind is None:
                        return None, b""
            got += len(piece)
            if got >= STREAM_MIN_BYTES:
                return kind, head
        return None, b""


def kind_of(name: str, head: bytes) -> str | None:
    """How a large input whose text starts with ``head`` is streamed: ``KERNEL`` (a
    kernel log and nothing else: no tarball, no bug report, no other output the detector
    recognises, log records first), ``MIXED`` (any other text), or None: binary data,
    a tarball or a bug report, which the ordinary reader takes."""
    from gputriage.ingest.bigtext import KERNEL, MIXED
    from gputriage.ingest.bugreport import is_bug_report
    from gputriage.ingest.detect import detect
    from gputriage.io.sniff import looks_binary
    from gputriage.parsers.kernel_log import shape_refusal

    if looks_binary(head[:64 << 10]) or head[257:262] == b"ustar":
        return None
    text = decode(head[:_HEAD])
    text = text[:text.rfind("\n") + 1] or text
    if is_bug_report(text):
        return None
    if (not shape_refusal(name, split_lines(text))
            and [name for name, _ in detect(text)] == ["kernel_log"]):
        return KERNEL
    return MIXED


def large_kind(path: str) -> str | None:
    """How ``path`` is streamed when it is a large regular file (see :func:`kind_of`);
    None for anything else, and never raises for an input the ordinary reader can
    report on."""
    return _sniffed(path)[0]


def _sniffed(path: str) -> tuple[str | None, bytes]:
    """:func:`large_kind` and the head it was judged on."""
    if path == "-":
        return None, b""
    try:
        return _kind(path)
    except (InputError, OSError):
        return None, b""


def is_large_kernel_log(path: str) -> bool:
    """Whether ``path`` is a large regular file holding a kernel log only."""
    from gputriage.ingest.bigtext import KERNEL

    return large_kind(path) == KERNEL


def file_blocks(path: str, problems: list[str]) -> Callable[[], Iterator[bytes]]:
    """The data of a regular file (decompressed up to the stream budget), a block at a
    time, opened when called."""
    from gputriage.io.decompress import compression, data_of
    from gputriage.io.inputs import limit

    def blocks() -> Iterator[bytes]:
        with open_input(path, problems) as inp:
            first = inp.fh.read(_BLOCK)
            data = data_of(first, inp.fh.read, path, problems, _BLOCK)
            yield from limit(data, path, problems) if compression(first) else data
    return blocks


class LargeLogs:
    """The large logs among one command's inputs, scanned together at the end: kernel
    log files by path, other large texts through a feeder each (see the module
    docstring)."""

    def __init__(self) -> None:
        from gputriage.parsers.nccl_model import NcclLog

        self.paths: list[str] = []  # what the scanner reads: files and feeders' pipes
        self.feeders: list[Any] = []
        self.heads: dict[str, str] = {}  # a kernel log file's head text (HOST_TEXT)
        self.nccl = NcclLog()

    def take(self, path: str) -> bool:
        """Keep ``path`` for the scan when it is a large regular file of text other
        than a bug report."""
        from gputriage.ingest.bigtext import KERNEL, host_text

        kind, head = _sniffed(path)
        if kind is None:
            return False
        if kind == KERNEL:
            self.paths.append(path)
            self.heads[path] = host_text(head)
        else:
            problems: list[str] = []
            self.feed(path, kind, file_blocks(path, problems), problems)
        return True

    def feed(self, origin: str, kind: str, blocks: Callable[[], Iterable[bytes]],
             problems: list[str]) -> None:
        """Stream ``blocks`` (``kind``: see :func:`kind_of`) when the logs are scanned;
        what reading them meets is added to ``problems``."""
        from gputriage.ingest.bigtext import Feeder

        feeder = Feeder(origin, kind, blocks, self.nccl,
                        self.feeders[-1] if self.feeders else None, problems)
        self.feeders.append(feeder)
        self.paths.append(feeder.path)

    def snapshot(self, other: Snapshot | None,
                 progress: Callable[..., None] | None = None,
                 meanwhile: Callable[[], None] | None = None) -> Snapshot | None:
        """``other`` (the rest of the inputs, or None) with the logs scanned into its
        ``kernel_log`` (and the feeders' NCCL log and detected pieces); None when no
        path was kept. InputError when nothing could be read and there is nothing else.
        ``progress`` is told the bytes read of each; ``meanwhile`` is called while worker
        processes scan a large file, if they do."""
        if not self.paths:
            return other
        from gputriage.ingest.bigtext import HOST_TEXT, check_feeders
        from gputriage.ingest.detect import EXPECTED
        from gputriage.logscan import scan_paths
        from gputriage.logscan.config import DEFAULT

        cap = other.get("kernel_log") if other is not None else None
        texts = [(cap.origin or "kernel_log", cap.text or "")] if cap is not None else []
        names = {f.path: f.origin for f in self.feeders}
        for feeder in self.feeders:
            feeder.start()
        scan = failed = None
        config = DEFAULT
        if self.feeders:  # no worker process is forked while feeders' threads run
            config = replace(DEFAULT, process_min=1 << 62)
        try:
            scan = scan_paths(self.paths, shape=True, texts=texts, config=config,
                              progress=_renamed(progress, names), meanwhile=meanwhile)
        except InputError as exc:
            failed = exc
        finally:
            for feeder in self.feeders:
                feeder.finish()
        check_feeders(self.feeders)
        snap = other
        unread: list[str] = []  # a large text with nothing known in it, as a small one
        for feeder in self.feeders:
            if feeder.pieces or feeder.kernel_lines or feeder.nccl_lines:
                if (note := feeder.cut_note()) is not None:
                    feeder.problems.append(note)
                snap = _with_pieces(snap, feeder)
            else:  # (as a small input is refused)
                unread.append(feeder.problems[-1] if feeder.problems else
                              f"{feeder.origin}: empty file" if feeder.empty else
                              f"{feeder.origin}: unrecognised content; {EXPECTED}")
        if scan is not None and self._has_kernel_log(texts):
            heads = {f.path: f.head for f in self.feeders} | self.heads
            head = "".join(heads.get(p, "") for p in self.paths)[:HOST_TEXT]
            snap = _with_scan(snap, scan, self.paths, names, texts, cap, head)
        elif snap is None:
            reasons = unread + ([str(failed)] if failed is not None else [])
            raise InputError(reasons[0] if len(reasons) == 1 else
                             "no input could be read: " + "; ".join(reasons))
        snap.problems.extend(unread)
        return self._with_nccl(snap)

    def _has_kernel_log(self, texts: list[tuple[str, str]]) -> bool:
        """Whether the scan read a kernel log: a kernel log file, another input's kernel
        log text, or a feeder's log records."""
        fed = {f.path for f in self.feeders}
        return (bool(texts) or any(p not in fed for p in self.paths)
                or any(f.kernel_lines for f in self.feeders))

    def _with_nccl(self, snap: Snapshot | None) -> Snapshot | None:
        """``snap`` with the feeders' NCCL log (the other inputs' NCCL text read into it)."""
        from gputriage.ingest.bigtext import ParsedNccl
        from gputriage.parsers.nccl_log import read_nccl_log

        fed = [f.origin for f in self.feeders if f.nccl_lines]
        if not fed:
            return snap
        assert snap is not None
        cap = snap.captures.get("nccl_log")
        if cap is not None and cap.text:
            read_nccl_log([cap.text.encode("utf-8", "surrogatepass")],
                          cap.origin or "nccl_log", self.nccl)
            fed.append(cap.origin or "nccl_log")
        origin = ", ".join(fed)
        snap.captures["nccl_log"] = ParsedNccl("nccl_log", "", _record(origin, 0), origin,
                                               log=self.nccl)
        return snap


def _renamed(progress: Callable[..., None] | None, names: dict[str, str]
             ) -> Callable[..., None] | None:
    """``progress`` told a feeder's input name instead of its pipe's."""
    if progress is None:
        return None

    def told(name: str, done: int, total: int | None) -> None:
        progress(names.get(name, name), done, total)
    return told


def _record(origin: str, size: int) -> dict:
    return {"kind": "streamed", "origin": origin, "target": None, "rc": None,
            "duration_s": None, "bytes": size, "truncated": False,
            "error": None, "error_detail": None, "file": None}


def _with_pieces(snap: Snapshot | None, feeder: Any) -> Snapshot:
    """``snap`` (a new one when None) with what the detector found in the feeder's head
    and tail, and its reading problems."""
    captures = {name: Captured(name, body, _record(feeder.origin, len(body)), feeder.origin)
                for name, body in feeder.pieces.items()}
    mine = Snapshot(captures, None, feeder.origin, list(feeder.problems))
    if snap is None:
        return mine
    snap.merge(mine)
    return snap


def _with_scan(snap: Snapshot | None, scan: Any, paths: list[str], names: dict[str, str],
               texts: list[tuple[str, str]], cap: Captured | None, head: str) -> Snapshot:
    """``snap`` (a new one when None) with the scan of ``paths`` (feeders' pipes named
    by ``names``; ``head``: their kernel-log text's first bytes) as its ``kernel_log``."""
    for pipe, origin in names.items():
        scan.problems = [p.replace(pipe, origin) for p in scan.problems]
    files = [p for p in paths if p not in names]
    origin = ", ".join([*(names.get(p, p) for p in paths), *(t[0] for t in texts)])
    if snap is None:
        snap = Snapshot({}, None, origin)
    elif files:
        snap.origin = f"{snap.origin}, {', '.join(files)}" if snap.origin else ", ".join(files)
    snap.captures["kernel_log"] = ScannedLog("kernel_log", cap.text if cap else "",
                                             _record(origin, scan.bytes), origin, scan, head)
    snap.problems.extend(p for p in scan.problems if p not in snap.problems)
    return snap
