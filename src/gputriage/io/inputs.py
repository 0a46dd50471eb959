"""One policy for opening what the user names on the command line.

Every command that reads a user-named input (``analyze``, ``triage``, ``check``'s
job outputs, ``logs``, ``nccl``, ``diff``) opens it with :func:`open_input`, and every
small document named by the user (``--expect``, ``k8s lint``'s manifests, ``explain -``,
``weights --config``) is read whole with :func:`read_bytes`, which opens it the same
way. Both look at what the path is before reading a byte of it:

==========  ========================================================================
kind        what happens
==========  ========================================================================
``file``    a regular file: read as it is (its size bounds it); once decompressed,
            a gzip / xz / bzip2 file is a stream for the byte budget
``dir``     a directory (a snapshot): handed back unopened
``stream``  ``-`` (stdin: a pipe, a redirected file or a terminal), a FIFO, a pipe
            named /dev/stdin or /dev/fd/N (``<(...)``): read once, never reopened,
            under the budgets below; a FIFO is opened without waiting for a writer
refused     a character device (/dev/zero, /dev/urandom, a terminal by name), a
            block device, a socket, or stdin that is one of these (a terminal on
            stdin excepted): one-line :class:`InputError`, the path never opened
==========  ========================================================================

The budgets (module constants, gathered in :data:`BUDGETS`, which tests replace):

====================  ========  ====================================================
name                  value     when it is spent
====================  ========  ====================================================
``STREAM_MAX_BYTES``  64 GiB    a stream, or decompressed data, stops there; a
                                problem line says the rest was not read
``IDLE_TIMEOUT_S``    60 s      a stream that gives no byte for this long stops (a
                                problem line); with nothing read at all (a FIFO
                                no writer opened) it is an InputError
``STREAM_MAX_S``      1 h       a stream still giving data after this long stops
                                (a problem line)
``SNIFF_BYTES``       64 KiB    the first bytes of an input's text are tested; binary
                                data (or, on a stream, NULs only) ends the read at
                                once with "binary data" instead of draining it
====================  ========  ====================================================

Memory is each reader's own bound: ``logs`` and ``nccl`` stream blocks, and so does
``analyze`` for a log or pasted text of 16 MiB or more
(:mod:`gputriage.ingest.streamed`); it keeps the last 256 MiB of a bug report
(:data:`gputriage.ingest.CAP_BYTES`).
"""

from __future__ import annotations

import fcntl
import os
import select
import stat
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from gputriage.errors import InputError, unreadable
from gputriage.io.sniff import looks_binary

__all__ = ["BUDGETS", "DIR", "FILE", "IDLE_TIMEOUT_S", "SNIFF_BYTES", "STREAM",
           "STREAM_MAX_BYTES", "STREAM_MAX_S", "Budgets", "Input", "Stream", "file_kind", "human",
           "is_binary", "limit", "open_input", "read_bytes"]

STREAM_MAX_BYTES = 64 << 30
IDLE_TIMEOUT_S = 60.0
STREAM_MAX_S = 3600.0
SNIFF_BYTES = 64 << 10

FILE, DIR, STREAM = "file", "dir", "stream"
_PIECE = 1 << 20  # bytes per read() piece


@dataclass(frozen=True)
class Budgets:
    """The limits one input is read under (see the module docstring)."""

    stream_bytes: int = STREAM_MAX_BYTES
    idle_s: float = IDLE_TIMEOUT_S
    stream_s: float = STREAM_MAX_S
    sniff_bytes: int = SNIFF_BYTES


BUDGETS = Budgets()  # read at each open: tests set a smaller one here


def human(n: float) -> str:
    """A byte count for people: 1.5 GiB, 64.0 KiB, 12 bytes."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


def is_binary(head: bytes | bytearray, stream: bool = True) -> bool:
    """Whether an input's first bytes are binary data rather than text. On a stream a
    head of NULs only counts too (/dev/zero through a pipe); a regular file may start
    with NUL padding (a log written at a crash) and is spared that test."""
    sample = bytes(head[:BUDGETS.sniff_bytes])
    return looks_binary(sample) or (stream and bool(sample) and not sample.strip(b"\0"))


_REFUSED = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
            (stat.S_ISSOCK, "a socket"))
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), *_REFUSED,
          (stat.S_ISLNK, "a symbolic link"))


def _refusal(mode: int) -> str | None:
    return next((what for test, what in _REFUSED if test(mode)), None)


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words ("a FIFO", "a socket"...)."""
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


class Stream:
    """A pipe, FIFO or stdin read under the budgets. ``read`` and ``readinto`` fill the
    request unless the end, or a budget, comes first; a budget spent adds a problem
    line and reads as the end. Without a file descriptor (an in-memory stdin in
    tests) only the byte budget applies."""

    def __init__(self, name: str, problems: list[str], budgets: Budgets,
                 fd: int | None = None, fh: Any = None, owned: bool = False) -> None:
        self.name, self.problems, self.budgets = name, problems, budgets
        self.fd, self.fh, self.owned = fd, fh, owned
        self.total = 0
        self.done = False
        self.deadline = time.monotonic() + budgets.stream_s
        self._poll = None
        self.nonblocking = fd is not None and not os.get_blocking(fd)
        if fd is not None:
            self._poll = select.poll()
            self._poll.register(fd, select.POLLIN)
            _widen(fd)

    def _stop(self, why: str) -> None:
        self.done = True
        self.problems.append(f"{self.name}: {why}; the rest was not read")

    def _late(self, spent: bool = False) -> bool:
        """Whether the time budget is ``spent`` or past (then the stream is stopped)."""
        if not spent and time.monotonic() < self.deadline:
            return False
        self._stop(f"still open after {self.budgets.stream_s:g} s (the time budget); "
                   f"stopped reading after {human(self.total)}")
        return True

    def _ready(self) -> bool:
        """Wait for data or the end, within the idle and time budgets."""
        b = self.budgets
        wait = min(b.idle_s, self.deadline - time.monotonic())
        assert self._poll is not None
        if wait > 0 and self._poll.poll(int(wait * 1000)):
            return True
        if wait < b.idle_s:
            self._late(spent=True)
        elif self.total == 0:
            self.done = True
            raise InputError(f"{self.name}: no data for {b.idle_s:g} s (the idle budget; "
                             "a FIFO no writer opened?); nothing read")
        else:
            self._stop(f"no data for {b.idle_s:g} s (the idle budget); stopped reading "
                       f"after {human(self.total)}")
        return False

    def _raw_into(self, view: memoryview) -> int:
        """One read into ``view``: 0 at the end or when a budget stopped the stream."""
        try:
            if self.fd is None:
                data = self.fh.read(len(view)) or b""
                view[:len(data)] = data
                return len(data)
            if self.total and self.nonblocking:  # a writer came: read first, wait if empty
                try:
                    return os.readv(self.fd, [view])
                except BlockingIOError:
                    pass
            while self._ready():
                try:
                    return os.readv(self.fd, [view])
                except BlockingIOError:  # a FIFO is open non-blocking: wait again
                    continue
            return 0
        except OSError as exc:
            if self.total == 0:
                raise unreadable(self.name, exc) from None
            self.done = True
            self.problems.append(f"{self.name}: read error ({exc.strerror or exc}); "
                                 f"kept the {human(self.total)} read")
            return 0

    def readinto(self, buf: Any) -> int:
        """Fill ``buf`` (fewer bytes only at the end or when a budget stops the stream)."""
        view = memoryview(buf).cast("B")
        got = 0
        while got < len(view) and not self.done:
            room = self.budgets.stream_bytes - self.total
            if room <= 0:
                self._stop(f"stopped reading at {human(self.budgets.stream_bytes)} "
                           "(the stream budget)")
                break
            if self.fd is not None and self._late():
                break
            n = self._raw_into(view[got:got + room])
            if not n:
                self.done = True
                break
            got += n
            self.total += n
        return got

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all, within the budgets, when negative)."""
        left = self.budgets.stream_bytes + 1 if size is None or size < 0 else size
        parts: list[bytes] = []
        while left > 0:
            buf = bytearray(min(left, _PIECE))
            n = self.readinto(buf)
            if n:
                parts.append(bytes(buf) if n == len(buf) else bytes(memoryview(buf)[:n]))
            if n < len(buf):
                break
            left -= n
        return b"".join(parts)

    def close(self) -> None:
        """Close the descriptor when this stream opened it (never stdin's)."""
        if self.owned and self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _widen(fd: int) -> None:
    """Raise a pipe's buffer to 1 MiB (when allowed): each read then moves up to that
    much, instead of 64 KiB, which keeps the reading thread off the GIL."""
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIECE)
    except (OSError, AttributeError):
        pass  # over the system's limit, or not Linux: the default buffer works


@dataclass
class Input:
    """An opened input: ``kind`` is FILE, DIR or STREAM; ``fh`` reads it (None for a
    directory): an unbuffered file for FILE, a :class:`Stream` for STREAM."""

    name: str  # for messages: the path, or <stdin>
    path: str
    kind: str
    fh: Any
    problems: list[str]

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None

    def __enter__(self) -> Input:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stdin(problems: list[str], budgets: Budgets) -> Input:
    name = "<stdin>"
    buf = getattr(sys.stdin, "buffer", sys.stdin)
    if buf is None:
        raise InputError(f"{name}: no standard input")
    try:
        fd = buf.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):  # replaced in memory (tests)
        return Input(name, "-", STREAM, Stream(name, problems, budgets, fh=buf), problems)
    refused = _refusal(mode)
    if refused and not os.isatty(fd):
        raise InputError(f"{name}: {refused}, not a file")
    return Input(name, "-", STREAM, Stream(name, problems, budgets, fd=fd), problems)


def open_input(path: str, problems: list[str] | None = None,
               budgets: Budgets | None = None) -> Input:
    """Open what the user named (``-``: stdin) under the policy of this module.

    A device or socket is refused before it is opened; a FIFO is opened without
    waiting for a writer. Problems met while reading go to ``problems``."""
    problems = [] if problems is None else problems
    budgets = budgets or BUDGETS
    if path == "-":
        return _stdin(problems, budgets)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise unreadable(path, exc) from None
    if refused := _refusal(mode):
        raise InputError(f"{path}: {refused}, not a file")
    if stat.S_ISDIR(mode):
        return Input(path, path, DIR, None, problems)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise unreadable(path, exc) from None
    mode = os.fstat(fd).st_mode  # what was opened, whatever the path names now
    if stat.S_ISREG(mode):
        os.set_blocking(fd, True)
        fh: BinaryIO = os.fdopen(fd, "rb", buffering=0)
        return Input(path, path, FILE, fh, problems)
    if stat.S_ISFIFO(mode):
        return Input(path, path, STREAM, Stream(path, problems, budgets, fd=fd, owned=True),
                     problems)
    os.close(fd)
    what = _refusal(mode)
    raise InputError(f"{path}: {what}, not a file" if what else f"{path}: not a regular file")


def limit(blocks: Iterable[bytes], name: str, problems: list[str],
          budgets: Budgets | None = None) -> Iterator[bytes]:
    """Decompressed ``blocks`` up to the stream budget; past it, a problem line and the
    end (the decompressor is not asked for more)."""
    cap = (budgets or BUDGETS).stream_bytes
    total = 0
    for block in blocks:
        if total + len(block) > cap:
            if cap > total:
                yield block[:cap - total]
            problems.append(f"{name}: stopped decompressing at {human(cap)} (the stream "
                            "budget); the rest was not read")
            return
        total += len(block)
        yield block


def read_bytes(path: str, cap_bytes: int, *, what: str = "input", whole: bool = True,
               budgets: Budgets | None = None) -> bytes:
    """A small document the user named (``-``: stdin), read under the policy of this
    module: a device or socket refused, a FIFO never waited on past the idle budget.

    ``whole`` (a file to parse: TOML, YAML, JSON): more than ``cap_bytes``, or a stream
    that a budget stopped before its end, is an InputError naming the ``what``;
    otherwise (a paste to explain) the first ``cap_bytes`` are enough and a stream
    stopped by a budget gives what came."""
    problems: list[str] = []
    with open_input(path, problems, budgets) as inp:
        if inp.kind == DIR:
            raise InputError(f"{inp.name}: a directory, not {what}")
        parts: list[bytes] = []
        got = 0
        want = cap_bytes + 1 if whole else cap_bytes
        while got < want:
            piece = inp.fh.read(min(want - got, _PIECE))
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
    data = b"".join(parts)
    if whole and len(data) > cap_bytes:
        raise InputError(f"{inp.name}: over {human(cap_bytes)}: not {what}")
    if whole and problems:
        raise InputError(f"{problems[0]}; not read as {what}")
    return data
