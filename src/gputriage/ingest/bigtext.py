"""Large pasted texts read as a stream: a job's log, a kernel log on stdin.

``analyze`` / ``triage`` / ``check`` of an input too large to hold (a job's log of
several hundred MB with NCCL lines and a framework traceback in it, a kernel log piped
on stdin) read it block by block, once, in memory bounded by what is distinct in it:

* its first and last :data:`DETECT_BYTES` of text are judged by the paste detector,
  as a large paste always was (the job's messages, an nccl-tests table, host outputs);
* its kernel- and system-log records (every line the detector would take for one) are
  passed, as they come, to the streaming kernel-log scanner
  (:func:`gputriage.logscan.scan_paths`, through a pipe: see :class:`Feeder`); a text
  whose head is a kernel log and nothing else passes every line, as ``gputriage logs``
  reads it;
* its NCCL records (:func:`gputriage.parsers.detect_jobs.nccl_lines`: the lines a
  paste's NCCL log is made of; a framework's error around them stays the job log's)
  stream through the NCCL log reader (:func:`gputriage.parsers.nccl_log.read_nccl_log`).

So a large text gives what it gave when its last 256 MiB were held (the same head and
tail, the same kernel and NCCL lines), of all of it.

Feeders run on threads, one input after the other (the scanner reads its inputs in
order, and they share one NCCL log); the scanner runs in the calling thread.
"""

from __future__ import annotations

import os
import select
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gputriage.errors import InputError
from gputriage.ingest.detect import detect_framed
from gputriage.parsers.detect_jobs import nccl_lines
from gputriage.parsers.kernel_log import is_kernel_line, is_log_record, is_other_record
from gputriage.parsers.kernel_patterns import strip_ansi
from gputriage.snapshot.bundle import Captured, decode
from gputriage.text.fields import split_lines
from gputriage.text.framing import unframe
from gputriage.text.hslines import NON_ASCII, Patterns, line_break, literal_pattern
from gputriage.text.newlines import newlines

__all__ = ["ALL_LINES", "DETECT_BYTES", "HOST_TEXT", "KERNEL", "MIXED", "Feeder", "ParsedNccl",
           "check_feeders", "head_tail_pieces", "host_text"]

DETECT_BYTES = 1 << 20  # the detector judges this much of the head and of the tail
ALL_LINES = ("kernel_log", "nccl_log")  # gathered over the whole of a large input
KERNEL, MIXED = "kernel", "mixed"  # a kernel log and nothing else / any other text
_HOLD_BYTES = 16 << 20  # system-log records held until the text is known to be a log
_WAIT_S = 0.1  # a feeder blocked on a full pipe looks this often whether the scan ended
LINE_CAP = 1 << 20  # a longer line is read up to this (the NCCL reader skips it, counted)
# the head of a streamed kernel log's text that the host its lines name is read from (as
# facts.stack.log_host reads a held log's: LOG_HOST_BYTES, which a test holds equal)
HOST_TEXT = 64 << 10


@dataclass
class ParsedNccl(Captured):
    """The ``nccl_log`` capture of logs streamed through the NCCL log reader: ``log``
    is their :class:`gputriage.parsers.nccl_model.NcclLog`; ``text`` is empty."""

    log: Any = None


def head_tail_pieces(head: str, tail: str) -> tuple[dict[str, str], bool]:
    """The sources the paste detector finds in the head and the tail of a large text
    (kernel and NCCL log lines left out: those are gathered over all of it), and
    whether either was framed (its lines quoted or prefixed, to be unframed)."""
    found: dict[str, str] = {}
    framed = False
    for part in (head, tail):
        pieces, originals = detect_framed(part)
        framed = framed or bool(originals)
        for name, body in pieces:
            if name not in ALL_LINES:
                found[name] = found.get(name, "") + body
    return found, framed


def _whole_lines(blocks: Iterable[bytes], cut: list[int] | None = None) -> Iterator[bytes]:
    """``blocks`` re-cut after their last newline (a line is never split between two),
    NUL padding dropped. A line longer than :data:`LINE_CAP` is read up to it, the rest
    dropped (each one counted in ``cut[0]``): memory stays bounded whatever the input."""
    carry: list[bytes] = []  # the pieces of the line that goes on
    held = 0
    skipping = False  # the rest of a line cut at LINE_CAP
    for block in blocks:
        block = block.replace(b"\0", b"")
        if skipping:
            first = block.find(b"\n")
            if first < 0:
                continue
            block, skipping = block[first + 1:], False
        last = block.rfind(b"\n")
        if last < 0:
            carry.append(block)
            held += len(block)
            if held > LINE_CAP:
                yield b"".join(carry)[:LINE_CAP] + b"\n"
                carry, held, skipping = [], 0, True
                if cut is not None:
                    cut[0] += 1
            continue
        yield b"".join([*carry, block[:last + 1]])
        carry, held = [block[last + 1:]], len(block) - last - 1
    if carry and held:
        yield b"".join(carry)


def _content(text: str, start: int, end: int) -> int:
    """The lines of ``text[start:end]`` that are not blank (cut at newlines)."""
    return len(list(filter(str.strip, text[start:end].split("\n"))))


def _content_lines(text: str) -> int:
    """The lines of ``text`` that are not blank, cut as ``split_lines`` cuts them."""
    return len(list(filter(str.strip, split_lines(text))))


# a newline, then a newline, a blank or a character that is not ASCII: where a blank
# line may start (each match is one line: a line starts with one character). Literals
# but one: this Hyperscan build was seen to miss matches of "\n[ \t]*\n" past the first
# 16 bytes of a text.
_BLANK_STARTS = Patterns([literal_pattern(b"\n" + bytes([c]))
                          for c in b"\n\t\x0b\x0c\r\x1c\x1d\x1e\x1f "], wide=[rb"\n" + NON_ASCII])


def _content_of(text: str, data: bytes | None = None) -> int | None:
    """``_content`` of the whole of ``text`` (its lines less the blank ones, as
    ``str.strip`` has them), its blank lines found in one Hyperscan pass (None without
    it). ``data``: the text encoded as UTF-8, where the caller has it."""
    if data is None:
        data = text.encode("utf-8", "surrogatepass")
    ends = _BLANK_STARTS.ends(data, text.isascii())
    if ends is None:
        return None
    first, last = text.find("\n"), text.rfind("\n")
    if first < 0:
        return 1 if text.strip() else 0
    blank = (not text[:first].strip()) + (last == len(text) - 1)  # the first, an empty last
    for end in ends:  # the line at end - 1: empty (a second newline) or starting blank
        if data[end - 1] != 10:
            stop = data.find(b"\n", end)
            line = data[end - 1:stop if stop >= 0 else len(data)]
            if line.decode("utf-8", "surrogatepass").strip():
                continue
        blank += 1
    return newlines(data) + 1 - blank


class _LogLines:
    """The system-log records of a text (as :func:`gputriage.parsers.detect_kernel.
    kernel_lines` takes them), bounded: until a kernel record shows that the text is a
    log, other records are held (up to :data:`_HOLD_BYTES`; past it they are passed
    on when at least half of the lines so far were records, else dropped)."""

    def __init__(self) -> None:
        self.is_log = False
        self.held: list[str] = []
        self.held_bytes = 0
        self.records = self.content = 0

    def take(self, text: str, data: bytes | None = None) -> str:
        """The records of ``text`` (whole lines) to pass on now: only the lines that may
        be records are tested (``record_starts``), the others counted (while it is not
        known whether the text is a log). ``data``: the text encoded as UTF-8, where the
        caller has it."""
        from gputriage.parsers.detect_kernel import record_starts

        out: list[str] = []
        starts = record_starts(text, data)
        if starts is None:
            for line in filter(str.strip, split_lines(text)):  # (a blank line is no record)
                self._line(line, out)
        else:
            # (``content`` matters only while the text is not known to be a log: counted
            # at once where Hyperscan can, else piece by piece between the lines tested;
            # a text with a carriage return, found by Hyperscan only, line by line)
            cr = "\r" in text
            whole = None
            if not self.is_log:
                whole = _content_lines(text) if cr else _content_of(text, data)
            counted = 0  # the text up to here is counted in ``content``
            for start in starts:
                end = line_break(text, start) if cr else text.find("\n", start)
                end = len(text) if end < 0 else end
                line = text[start:end]
                if not line.strip():
                    continue
                if self.is_log:
                    self._line(line, out)
                    continue
                if whole is None:
                    self.content += _content(text, counted, start)
                    counted = end
                self._line(line, out, whole is None)
                if self.is_log and whole is not None:  # known a log at this line, once:
                    self.content += (_content_lines(text[:end]) if cr  # what the pieces
                                     else _content(text, 0, end))  # counted
            if not self.is_log:
                self.content += _content(text, counted, len(text)) if whole is None else whole
        if not self.is_log and self.held_bytes > _HOLD_BYTES:
            if self.records * 2 >= self.content:
                self.is_log = True
                out.extend(self.held)
            self.held.clear()
            self.held_bytes = 0
        return "\n".join(out) + "\n" if out else ""

    def _line(self, line: str, out: list[str], count: bool = True) -> None:
        """One line that is not blank: passed on or held when it is a record (counted in
        ``content`` unless the caller counts it)."""
        if self.is_log:
            record = is_log_record(line)
        else:
            self.content += count
            kernel = is_kernel_line(line)  # (is_log_record's first test, made once)
            if kernel:
                self.is_log = True
                out.extend(self.held)
                self.held.clear()
            record = kernel or is_other_record(line)
        if record:
            if self.is_log:
                out.append(line)
            else:
                self.records += 1
                self.held.append(line)
                self.held_bytes += len(line) + 1

    def finish(self) -> str:
        """What is still held, when the text as a whole reads as a log."""
        if self.is_log or not self.held or self.records * 2 < self.content:
            return ""
        self.is_log = True
        return "\n".join(self.held) + "\n"


@dataclass
class Feeder:
    """One large input read on a thread: its kernel-log records written to a pipe
    that the scanner reads as ``path``, its text streamed into the NCCL log ``nccl``
    (``mode`` :data:`MIXED`), its head and tail judged by the paste detector.

    ``blocks`` gives the input's data (decompressed) when called; ``after`` is the
    feeder that must be done first. Whatever happens, the pipe is closed at the end
    and ``done`` set; an exception is kept in ``error`` for the caller."""

    origin: str
    mode: str
    blocks: Callable[[], Iterable[bytes]]
    nccl: Any = None  # the NcclLog every MIXED feeder adds to
    after: Feeder | None = None
    problems: list[str] = field(default_factory=list)
    pieces: dict[str, str] = field(default_factory=dict)
    kernel_lines: bool = False  # whether any kernel-log record was passed on
    head: str = ""  # the first HOST_TEXT of the kernel-log text passed on (whole lines)
    nccl_lines: bool = False  # whether it held NCCL records
    empty: bool = True  # whether it held blank lines only (MIXED)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._read_end, self._write_end = os.pipe()
        self.path = f"/dev/fd/{self._read_end}"
        self.done = threading.Event()
        self.scan_over = threading.Event()  # set by the caller once the scanner returned
        self._broken = False
        self._head = b""
        self._cut = [0]  # lines over LINE_CAP (see cut_note)
        self._thread = threading.Thread(target=self._run, name=f"feed {self.origin}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cut_note(self) -> str | None:
        """What was left out of lines too long to hold (None: nothing)."""
        if not self._cut[0]:
            return None
        from gputriage.io.inputs import human

        return (f"{self.origin}: {self._cut[0]} line(s) longer than {human(LINE_CAP)}; "
                "the rest of each was not read")

    def finish(self) -> None:
        """Once the scanner returned: stop writing, wait for the end of the input."""
        self.scan_over.set()
        self._thread.join()
        os.close(self._read_end)

    # --- the thread ----------------------------------------------------------------
    def _run(self) -> None:
        try:
            if self.after is not None:
                self.after.done.wait()
            os.set_blocking(self._write_end, False)
            if self.mode == KERNEL:  # a kernel log and nothing else: every line passed
                for block in _whole_lines(self.blocks(), self._cut):
                    self.kernel_lines = True
                    self._pass(block)
            else:
                from gputriage.parsers.nccl_log import read_nccl_log

                before = (len(self.nccl.processes), len(self.nccl.framework_errors))
                read_nccl_log(self._mixed(), self.origin, self.nccl)
                self.nccl_lines = before != (len(self.nccl.processes),
                                             len(self.nccl.framework_errors))
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc
        finally:
            self.head = host_text(self._head)
            os.close(self._write_end)
            self.done.set()

    def _mixed(self) -> Iterator[bytes]:
        """The text's blocks as the NCCL reader gets them (unframed, without colour
        escapes), its log records passed to the scanner, its head and tail judged."""
        head: list[bytes] = []
        got = 0
        # (a block of blank lines, b"" here, holds no record and nothing to judge)
        chunks = map(self._unless_blank, _whole_lines(self.blocks(), self._cut))
        for block in chunks:  # the head first: it says whether lines are framed
            head.append(block)
            got += len(block)
            if got >= DETECT_BYTES:
                break
        found, framed = head_tail_pieces(_cut_head(_plain(decode(b"".join(head)))), "")
        logs = _LogLines()
        tail: deque[str] = deque()
        kept = 0

        def again() -> Iterator[bytes]:
            yield from head
            yield from chunks
        for block in again():
            if not block:  # blank lines: no record, nothing to judge
                self._write(b"\n")
                continue
            pasted = _plain(decode(block))  # what the detector judges the tail on
            tail.append(pasted)
            kept += len(pasted)
            while kept - len(tail[0]) >= DETECT_BYTES:
                kept -= len(tail.popleft())
            text = unframe(pasted) if framed else pasted  # each line's payload
            # a block without log records still writes a blank line: the scanner's idle
            # budget counts from the last byte it got
            data = text.encode("utf-8", "surrogatepass")  # (once for each search)
            self._pass(logs.take(text, data).encode("utf-8", "surrogatepass") or b"\n")
            records = nccl_lines(text, data)  # as a paste's: no framework error the job log holds
            if records:
                yield records.encode("utf-8", "surrogatepass")
        self._pass(logs.finish().encode("utf-8", "surrogatepass"))
        self.kernel_lines = logs.is_log
        whole_tail = "".join(tail)
        start = whole_tail.find("\n", max(0, len(whole_tail) - DETECT_BYTES)) + 1
        at_end, _ = head_tail_pieces("", whole_tail[start:])
        for name, body in at_end.items():
            found[name] = found.get(name, "") + body
        self.pieces = found

    def _unless_blank(self, block: bytes) -> bytes:
        """``block``, or b"" when it holds blank lines only."""
        if block and not block.isspace():  # (as block.strip(), without its copy)
            self.empty = False
            return block
        return b""

    def _pass(self, data: bytes) -> None:
        """Pass kernel-log text on to the scanner, its head kept (``head``)."""
        if len(self._head) < HOST_TEXT and data.strip():
            self._head += data[:HOST_TEXT - len(self._head)]
        self._write(data)

    def _write(self, data: bytes) -> None:
        """Write to the scanner's pipe; once the scanner has returned (it stopped
        reading this input, or never got to it) the rest is not written."""
        view = memoryview(data)
        poll = select.poll()
        poll.register(self._write_end, select.POLLOUT)
        while view and not self._broken:
            if not poll.poll(_WAIT_S * 1000):
                if self.scan_over.is_set():
                    self._broken = True
                continue
            try:
                view = view[os.write(self._write_end, view):]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                self._broken = True


def _plain(text: str) -> str:
    """``text`` without colour escapes (a paste from a colour terminal)."""
    return strip_ansi(text) if "\x1b" in text else text


def _cut_head(text: str) -> str:
    """The head of a text for the detector: up to its last newline within
    :data:`DETECT_BYTES`."""
    if len(text) <= DETECT_BYTES:
        return text
    cut = text.rfind("\n", 0, DETECT_BYTES)
    return text[: cut if cut > 0 else DETECT_BYTES]


def check_feeders(feeders: Iterable[Feeder]) -> None:
    """Raise what went wrong on a feeder's thread: an input error as itself, anything
    else (a bug) as it was."""
    for feeder in feeders:
        if feeder.error is not None:
            if isinstance(feeder.error, InputError):
                feeder.problems.append(str(feeder.error))
                continue
            raise feeder.error


def host_text(data: bytes) -> str:
    """The first :data:`HOST_TEXT` of ``data`` as text, in whole lines."""
    text = decode(data[:HOST_TEXT])
    cut = text.rfind("\n") + 1
    return text[:cut] if cut else text
