"""Large kernel logs named to ``analyze`` / ``triage`` / ``check``: scanned whole.

A regular file (plain, gzip, xz or bzip2) of at least :data:`STREAM_MIN_BYTES` of text
whose head is a kernel log (the paste detector finds nothing else in it, and its first
lines are log records) is never held in memory: it is read through the streaming
scanner ``gputriage logs`` uses (:func:`gputriage.logscan.scan_paths`), all of it, in
memory bounded by the events it holds. The scan is handed to the ``log_scan`` fact on
the snapshot's ``kernel_log`` capture (a :class:`ScannedLog`); kernel-log text of the
other inputs joins the same timeline. Smaller inputs, streams and anything that is not
a plain kernel log are read as before (:mod:`gputriage.ingest`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gputriage.errors import InputError
from gputriage.io.inputs import FILE, open_input
from gputriage.snapshot.bundle import Captured, Snapshot, decode
from gputriage.text.fields import split_lines

__all__ = ["STREAM_MIN_BYTES", "LargeLogs", "ScannedLog"]

STREAM_MIN_BYTES = 16 << 20  # a kernel log with this much text is scanned, not held
_HEAD = 128 << 10  # the text the detector judges the file on


@dataclass
class ScannedLog(Captured):
    """The ``kernel_log`` capture of logs scanned whole: ``scan`` is their
    :class:`gputriage.logscan.LogScan`; ``text`` holds only the kernel-log text of other
    inputs (already part of ``scan``)."""

    scan: Any = None


def _head(path: str) -> bytes | None:
    """The first :data:`_HEAD` bytes of text of a regular file (decompressed) when it
    holds at least :data:`STREAM_MIN_BYTES` of text and its head is a kernel log; else
    None. A compressed file is decompressed only as far as it keeps looking like one."""
    from gputriage.io.decompress import compression, decompressed

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # never open a FIFO or a device here: its data is read once
    except OSError:
        return None  # stdin ("-"), or unreadable: the ordinary reader says why
    inp = open_input(path)
    with inp:
        if inp.kind != FILE:
            return None
        fd = inp.fh.fileno()
        first = os.pread(fd, 1 << 20, 0)
        kind = compression(first)
        if kind is None:
            if os.fstat(fd).st_size < STREAM_MIN_BYTES:
                return None
            head = first[:_HEAD]
            return head if _is_kernel_log(path, head) else None
        pos = len(first)

        def more(n: int) -> bytes:
            nonlocal pos
            data = os.pread(fd, n, pos)
            pos += len(data)
            return data

        got, parts, head = 0, [], b""
        for piece in decompressed(kind, first, more, path, [], 1 << 20):
            if not head:
                parts.append(piece)
                if sum(map(len, parts)) >= _HEAD or piece[257:262] == b"ustar":
                    head = b"".join(parts)[:_HEAD]
                    if not _is_kernel_log(path, head):
                        return None
            got += len(piece)
            if got >= STREAM_MIN_BYTES:
                return head
        return None


def _is_kernel_log(path: str, head: bytes) -> bool:
    """Whether the first bytes of a file are a kernel log and nothing else (no tarball,
    no bug report, no other output the detector recognises)."""
    from gputriage.ingest.bugreport import is_bug_report
    from gputriage.ingest.detect import detect
    from gputriage.io.sniff import looks_binary
    from gputriage.parsers.kernel_log import shape_refusal

    if looks_binary(head[:64 << 10]) or head[257:262] == b"ustar":
        return False
    text = decode(head)
    text = text[:text.rfind("\n") + 1] or text
    if is_bug_report(text) or shape_refusal(path, split_lines(text)):
        return False
    return [name for name, _ in detect(text)] == ["kernel_log"]


def is_large_kernel_log(path: str) -> bool:
    """Whether ``path`` is a large kernel log (see the module docstring); never raises
    for an input the ordinary reader can report on."""
    if path == "-":
        return False
    try:
        return _head(path) is not None
    except (InputError, OSError):
        return False


class LargeLogs:
    """The large kernel logs among one command's inputs, scanned together at the end."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def take(self, path: str) -> bool:
        """Keep ``path`` for the scan when it is a large kernel log."""
        if is_large_kernel_log(path):
            self.paths.append(path)
            return True
        return False

    def snapshot(self, other: Snapshot | None,
                 progress: Callable[..., None] | None = None) -> Snapshot | None:
        """``other`` (the rest of the inputs, or None) with the logs scanned into its
        ``kernel_log``; None when no path was kept. InputError when no log could be
        read and there is nothing else. ``progress`` is told the bytes read of each."""
        if not self.paths:
            return other
        from gputriage.logscan import scan_paths

        cap = other.get("kernel_log") if other is not None else None
        texts = [(cap.origin or "kernel_log", cap.text or "")] if cap is not None else []
        try:
            scan = scan_paths(self.paths, shape=True, texts=texts, progress=progress)
        except InputError:
            if other is None:
                raise
            return other
        origin = ", ".join([*self.paths, *(t[0] for t in texts)])
        record = {"kind": "streamed", "origin": origin, "target": None, "rc": None,
                  "duration_s": None, "bytes": scan.bytes, "truncated": False,
                  "error": None, "error_detail": None, "file": None}
        snap = other if other is not None else Snapshot({}, None, ", ".join(self.paths))
        if other is not None:
            snap.origin = f"{snap.origin}, {', '.join(self.paths)}"
        snap.captures["kernel_log"] = ScannedLog("kernel_log", cap.text if cap else "", record,
                                                 origin, scan)
        snap.problems.extend(p for p in scan.problems if p not in snap.problems)
        return snap
