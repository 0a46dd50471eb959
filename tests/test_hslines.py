"""Lines of a large text found in one Hyperscan pass (``gputriage.text.hslines``): the
kernel-record gate of a streamed text (``record_starts``) and the NCCL record words and
shape (``nccl_lines``) must find, through Hyperscan, exactly the lines that Python's
searches find, on real captures, on every record prefix the gate knows, and on lines
built of the characters the shapes turn on; without Hyperscan the searches run as
before."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from record_prefixes import RECORDS
from training_kit import training_log

from gputriage.ingest import bigtext
from gputriage.parsers import detect_jobs, detect_kernel
from gputriage.text import hslines
from gputriage.text.hslines import LineFinder, line_break, text_offsets

HAVE_HS = hslines.hyperscan_module() is not None
needs_hs = pytest.mark.skipif(not HAVE_HS, reason="hyperscan is not installed here")

_NCCL = "gpu-node-018:43782:43782 [6] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
# what the shapes turn on: digits, colons, brackets, commas, a T, every blank a line may
# hold (Python's \s has \x1c-\x1f too), the words
_PIECES = ["0", "12", "1234", ":", "[", "]", "[-3]", ",", ";", "T", ".", "+", "-", " ", "\t",
           "\x0b", "\x0c", "\x1c", "\x1f", "a", "kern", "NVRM:", "nvidia", "INFO", "WARN",
           "NCCL", "nccl", "Got completion", "DistBackendError", "x.cc", "/", "\x1b", "-- "]


def _record_lines_by_python(text: str) -> set[int] | None:
    """The gate's lines, and those after a newline that start a journal's boot marker."""
    found = detect_kernel._RECORD_GATE.lines_holding(text)
    if found is not None:
        found.update(i + 1 for i in range(len(text)) if text.startswith("\n-- ", i))
    return found


def _nccl_lines_by_python(text: str) -> list[str]:
    return detect_jobs._lines_at(text, [m.start() for m in
                                        detect_jobs._OLD_SHAPE_IN_TEXT.finditer(text)])


def _agree(text: str) -> None:
    data = text.encode("ascii")
    assert detect_kernel._RECORD_LINES.starts(data) == _record_lines_by_python(text), text
    found = detect_jobs._MAYBE_LINES.starts(data)
    assert found is not None
    assert detect_jobs._lines_from(text, sorted(found)) == _nccl_lines_by_python(text), text


@needs_hs
def test_line_finder_gives_each_line_once_wherever_its_matches_are() -> None:
    finder = LineFinder([rb"[0-9]{2}:[0-9]{2}\]"], [b"kern"])
    text = b"a 10:11] b 12:13]\nnothing\nKERN x\nlast 00:00]"
    assert finder.starts(text) == {0, 26, 33}  # (not "nothing", at 18)
    assert finder.starts(b"") == set()
    assert finder.starts(bytearray(b"x\nkErN")) == {2}


@needs_hs
@pytest.mark.parametrize("record", RECORDS)
def test_every_record_prefix_is_found_as_python_finds_it(record: str) -> None:
    job = training_log(30, _NCCL)
    for text in (record + "\n", job + record + "\n" + job, record):
        if text.isascii():
            _agree(text)


@needs_hs
def test_every_corpus_sample_gives_the_same_lines(corpus) -> None:
    checked = 0
    for sample in corpus.samples:
        text = sample.text()
        if "\r" not in text and text.isascii():
            _agree(text)
            checked += 1
    assert checked > 100


# lines built to sit on either side of the shapes: a character short, a blank of each
# kind, the words in other cases
_BUILT = [
    "Mar  2 10:11:12 host kernel: x", "[  12.5] x", "[+1.5]", "[1.]", "10:11]", "1:11]",
    "Fri Aug 30 11:11:22 2024] x", "0 2024]", "6,1234,5678,-;msg", "6,1,2,;", "1,2,3",
    "2024-08-30T03:53:20,123456+00:00 h", "30T03:53:20,1+", "0T03:53:20,1+",
    "kern  :warn  : [1.0] x", ":kern:2024-", ":k:[", "prog[12]: x", "a:\x1cb", "a:\x1fb",
    "a:\x0bb", " : x", "[: x", ":: x", "h:1:2 [0] INFO x", "h:1:2 [-1]\x1cINFO", "x.cc:31 WARN",
    "h:12345678901 [0] INFO", "h:1 [123456] INFO", "nccl", "NcCl", "Got  completion",
    "\x1b[0m", "KERN", "NVRM:", "nvrm :", "-- Boot 1a2b --", "-- No entries --", "--x", " -- ",
]


@needs_hs
@pytest.mark.parametrize("line", _BUILT)
def test_lines_built_on_either_side_of_the_shapes(line: str) -> None:
    for text in (line, line + "\n", "x\n" + line + "\nlast", line + "\n" + line):
        _agree(text)


@needs_hs
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PIECES), max_size=10).map("".join), max_size=8))
def test_property_built_lines_agree(lines: list[str]) -> None:
    _agree("\n".join(lines))


def test_without_hyperscan_the_python_searches_run(monkeypatch) -> None:
    """The finders give None, and the callers find the same lines by their searches."""
    text = training_log(40, _NCCL) + "Mar  2 10:11:12 host kernel: NVRM: Xid 79\n-- Boot x --\n"
    with_hs = detect_kernel.record_starts(text), detect_jobs.nccl_lines(text)
    monkeypatch.setattr(hslines, "_MODULE", [None])
    monkeypatch.setattr(detect_kernel, "_RECORD_LINES", LineFinder([b"x"]))
    monkeypatch.setattr(detect_jobs, "_MAYBE_LINES", LineFinder([b"x"]))
    assert detect_kernel._RECORD_LINES.starts(b"x") is None
    assert not detect_jobs._MAYBE_LINES.available()
    assert (detect_kernel.record_starts(text), detect_jobs.nccl_lines(text)) == with_hs
    by_python = _record_lines_by_python(text)
    assert by_python is not None
    assert detect_kernel.record_starts(text) == sorted(by_python)
    assert text.index("-- Boot") in by_python


@needs_hs
@pytest.mark.parametrize("text", ["", "x", " ", "\n", "x\n", "\nx", "\n\n\n", " \n\t\n\x1c\nx\n",
                                  "a\n \n\n\x0bb\n\x1f", "a\r\n\r\n", "  x  \n\n  ",
                                  # (past 16 bytes: where "\n[ \t]*\n" was seen missed)
                                  "x" * 100 + "\n\ny", " " * 11 + ": No\n\n", "x\n  \n" * 40,
                                  # (not ASCII: Unicode blanks, a line that starts with é)
                                  "a\n\u00a0\n\u2003 \n\u00e9t\u00e9\n", "\u00a0", "x\n\u3000"])
def test_the_lines_of_a_block_less_its_blank_ones_counted_at_once(text: str) -> None:
    assert bigtext._content_of(text) == bigtext._content(text, 0, len(text))
    assert bigtext._content_of(text, text.encode()) == bigtext._content(text, 0, len(text))


def test_without_hyperscan_a_streamed_text_counts_its_lines_piece_by_piece(monkeypatch) -> None:
    text = training_log(40, _NCCL) + "\n  \nprog[1]: x\n\n" + training_log(10, _NCCL)

    def streamed() -> tuple:
        logs = bigtext._LogLines()
        out = [logs.take(text), logs.take(text), logs.finish()]
        return out, logs.records, logs.content, logs.is_log
    with_hs = streamed()
    monkeypatch.setattr(bigtext, "_BLANK_STARTS", bigtext.Patterns([b"x"]))
    monkeypatch.setattr(hslines, "_MODULE", [None])
    assert bigtext._content_of(text) is None
    assert streamed() == with_hs
    assert with_hs[2] == 2 * bigtext._content(text, 0, len(text))


def test_offsets_in_the_encoded_text_are_offsets_in_the_text() -> None:
    text = "a\u00e9\nb\u20ac\u00a0\nc\n\U0001f600\nd"
    data = text.encode()
    starts = [0, data.index(b"b"), data.index(b"c"), data.index(b"\xf0"), data.index(b"d")]
    assert text_offsets(text, data, reversed(starts)) == [0, 3, 7, 9, 11]
    assert text_offsets("abc", b"abc", [2, 0]) == [0, 2]


# lines that are not ASCII: a Unicode blank where the shapes have one, other scripts, an
# NCCL record with a name in them, a kernel record after a line that is not ASCII
_NOT_ASCII = [
    "h:1:2\u00a0[0]\u00a0INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    "gpu-n\u00f6de:43782:43782 [6] NCCL INFO Using network IB",
    "\u8bad\u7ec3 step 3 \u2713", "prog[1]:\u00a0started", "\u212aernel: x",
    "Mar  2 10:11:12 h\u00f6st kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=p",
    "x.cc:31\u2003WARN NET/IB : Got completion with error 12", "-- Boot \u00e9 --",
]


@needs_hs
@pytest.mark.parametrize("line", _NOT_ASCII)
def test_a_text_that_is_not_ascii_gives_what_the_per_line_reading_gives(monkeypatch,
                                                                         line: str) -> None:
    """Its lines that hold a character that is not ASCII are all taken (then tested),
    so the records kept, the counts and the NCCL lines are those of the searches without
    Hyperscan (every line tested, the NCCL shape searched by Python's engine)."""
    job = training_log(20, _NCCL)
    text = job + line + "\n" + job + "\u00e9\n" + line + "\n"

    def streamed() -> tuple:
        logs = bigtext._LogLines()
        out = [logs.take(text), logs.take(job), logs.finish()]
        return out, logs.records, logs.content, logs.is_log, detect_jobs.nccl_lines(text)
    starts = detect_kernel.record_starts(text)
    assert starts is not None and text.index(line) in starts
    with_hs = streamed()
    monkeypatch.setattr(hslines, "_MODULE", [None])
    for module, name in ((detect_kernel, "_RECORD_LINES"), (detect_jobs, "_MAYBE_LINES"),
                         (bigtext, "_BLANK_STARTS")):
        monkeypatch.setattr(module, name, LineFinder([b"x"]))
    assert detect_kernel.record_starts(text) is None  # (every line tested)
    assert streamed() == with_hs


def test_a_line_ends_at_its_first_newline_or_carriage_return() -> None:
    for text in ("ab\r\ncd", b"ab\r\ncd"):
        assert line_break(text, 0) == 2 and line_break(text, 3) == 3 and line_break(text, 4) == -1
    assert line_break("a\nb\rc", 0) == 1 and line_break("a\nb\rc", 2) == 3


# texts with carriage returns: a progress bar's redraws, CRLF lines, a record after a CR
_WITH_CR = [
    "epoch 1:  10%|#   | 1/10\r epoch 1:  20%|##  | 2/10\r" + _NCCL,
    _NCCL.replace("\n", "\r\n") * 3 + "Mar  2 10:11:12 host kernel: NVRM: Xid 79\r\n",
    "step\rMar  2 10:11:12 host kernel: NVRM: Xid 79\rprog[1]: x\r\r\n \r\n-- Boot x --\r",
    "h:1:2 [0] INFO x\rx.cc:31 WARN NET/IB : Got completion\r\u00e9\r\nkern\r\x1c\n",
    "a\r\r\n\n-- No entries --\r\n[ 12.5] x\r" + "\u2588" * 5 + "\r",
]


@needs_hs
@pytest.mark.parametrize("tail", _WITH_CR)
def test_a_text_with_carriage_returns_gives_what_the_per_line_reading_gives(
        monkeypatch, tail: str) -> None:
    """Cut at carriage returns too, as split_lines cuts it: the records kept, the counts
    and the NCCL lines are those of the reading without Hyperscan (every line tested)."""
    job = training_log(20, _NCCL)
    text = job + tail + "\n" + job

    def streamed() -> tuple:
        logs = bigtext._LogLines()
        out = [logs.take(text), logs.take(tail + "\n"), logs.finish()]
        return out, logs.records, logs.content, logs.is_log, detect_jobs.nccl_lines(text)
    assert detect_kernel.record_starts(text) is not None
    with_hs = streamed()
    monkeypatch.setattr(hslines, "_MODULE", [None])
    for module, name in ((detect_kernel, "_RECORD_LINES"), (detect_jobs, "_MAYBE_LINES"),
                         (bigtext, "_BLANK_STARTS")):
        monkeypatch.setattr(module, name, LineFinder([b"x"]))
    assert detect_kernel.record_starts(text) is None
    assert streamed() == with_hs


@needs_hs
def test_a_scan_that_fails_leaves_the_search_to_python(monkeypatch) -> None:
    """Hyperscan refusing a scan (its scratch space in use on another thread, say): the
    finder gives None and the callers search as they do without it."""
    text = training_log(30, _NCCL) + "Mar  2 10:11:12 host kernel: NVRM: Xid 79\n"
    want = detect_kernel.record_starts(text), detect_jobs.nccl_lines(text)
    finder = LineFinder([b"x"])

    class Refusing:
        def scan(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("scratch in use")
    finder._db[True] = Refusing()
    assert finder.starts(b"x\n") is None
    monkeypatch.setattr(detect_kernel, "_RECORD_LINES", finder)
    monkeypatch.setattr(detect_jobs, "_MAYBE_LINES", finder)
    assert (detect_kernel.record_starts(text), detect_jobs.nccl_lines(text)) == want
