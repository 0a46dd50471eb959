"""Gates that rule a paste out at once (one search of its text) instead of a test per
line: the kernel-record gate before ``kernel_lines`` and for the records of a large text
streamed (``record_starts``: only the lines it finds are tested), and the hard-wrap gate
of the job-log detector. Each must give what the per-line tests give, on real captures,
on the record prefixes the kernel gate knows, and on pastes built to be on either side
of them; and a paste of many short lines must cost a search, not a test per line."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from record_prefixes import RECORDS as _RECORDS
from training_kit import training_log

from gputriage.ingest.detect import detect
from gputriage.parsers import detect_kernel, job_log
from gputriage.parsers.detect_gate import Gate
from gputriage.parsers.detect_kernel import kernel_lines
from gputriage.text.paste import PasteDoc

_NCCL = "gpu-node-018:43782:43782 [6] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"


def _ungated_kernel_lines(text: str) -> str:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Gate, "anywhere", lambda self, text: True)
        return kernel_lines(text)


@pytest.mark.parametrize("record", _RECORDS)
def test_the_record_gate_finds_every_record_prefix_anywhere(record: str) -> None:
    gate = detect_kernel._RECORD_GATE
    job = training_log(50, _NCCL)
    for text in (record + "\n", job + record + "\n" + job, record):
        assert gate.anywhere(text)
        assert kernel_lines(text) == _ungated_kernel_lines(text)
    assert not gate.anywhere(job)
    assert kernel_lines(job) == _ungated_kernel_lines(job) == ""


def test_kernel_lines_of_every_corpus_sample_are_those_of_the_per_line_test(corpus) -> None:
    differing = [s.name for s in corpus.samples
                 if kernel_lines(s.text()) != _ungated_kernel_lines(s.text())]
    assert not differing


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_RECORDS + ["x", "hello: world", "a b c", "", "  kern",
                                            "[1.5] x", "Mar  2 10:11:12 host"]),
                max_size=12))
def test_property_kernel_lines_gated_and_not_agree(lines) -> None:
    text = "\n".join(lines) + "\n"
    assert kernel_lines(text) == _ungated_kernel_lines(text)


# the wrap gate's search as it was: every newline before a piece that goes on
_WRAP_EVERY = re.compile(r"\n(?=" + job_log._WRAP_NEXT.pattern.removeprefix("^") + ")")


def _wrap_pastes() -> list[str]:
    long = "RuntimeError: CUDA error: an illegal memory access was encountered, compile " \
           "with TORCH_USE_CUDA_DSA to enable device-side assertions and more"
    assert len(long) >= job_log._WRAP_MIN
    cut = "Error:" + "e" * (job_log._WRAP_MIN - 6)  # the shortest line a piece may follow
    short = cut[1:]
    return [f"{long}\nwith more text on the next line\n",
            f"{short}\nwith more text on the next line\n",
            f"{cut}\nand the rest\n", f"{cut} \nand the rest\n",
            f"x\n{long}\n:rest\n", f"{long}\n{long}\n", "x\n" * 50 + f"{long}\ny\n",
            f"{long}\n1 not a piece\n", "\n".join([long] * 3 + ["the end"]) + "\n"]


@pytest.mark.parametrize("paste", _wrap_pastes())
def test_the_wrap_gate_opens_where_its_per_line_search_did(monkeypatch, paste: str) -> None:
    now = job_log._WRAP_GATE.open(PasteDoc(paste))
    every = Gate(searches=(_WRAP_EVERY,), test_at=job_log._wraps_on)
    assert now == every.open(PasteDoc(paste))
    gated = detect(paste)
    monkeypatch.setattr(job_log, "_WRAP_GATE", every)
    assert gated == detect(paste)


def test_wrap_gate_agrees_on_every_corpus_job_log(corpus) -> None:
    every = Gate(searches=(_WRAP_EVERY,), test_at=job_log._wraps_on)
    differing = [s.name for s in corpus.samples
                 if job_log._WRAP_GATE.open(PasteDoc(s.text())) != every.open(PasteDoc(s.text()))]
    assert not differing


def test_a_paste_of_short_lines_costs_a_search_not_a_test_per_line(monkeypatch) -> None:
    """512k lines of "x": no line is long enough to be a wrapped piece's first, none is a
    record; each gate rules the paste out without testing a line."""
    paste = "x\n" * (512 << 10)
    tested: list[int] = []
    monkeypatch.setattr(job_log, "_goes_on", lambda *a: tested.append(1) or False)
    start = time.process_time()
    assert not job_log._WRAP_GATE.open(PasteDoc(paste))
    assert not detect_kernel._RECORD_GATE.anywhere(paste)
    assert kernel_lines(paste) == ""
    assert not tested
    assert time.process_time() - start < 2.0  # (a search each: tens of milliseconds)
    # a text that is not ASCII is left to the per-line tests, as Gate.open leaves it
    assert detect_kernel._RECORD_GATE.anywhere(paste + "d\u00e9j\u00e0\n")


# --- the system-log records of a large text, streamed (ingest.bigtext._LogLines) --------

def _log_lines(text: str, pieces: int, gated: bool = True) -> tuple:
    """What ``_LogLines`` passes on of ``text`` fed in ``pieces`` runs of whole lines
    (``gated`` False: every line tested), and what it counted."""
    from gputriage.ingest import bigtext

    lines = text.splitlines(keepends=True)
    step = max(1, len(lines) // pieces)
    with pytest.MonkeyPatch.context() as m:
        if not gated:
            m.setattr(detect_kernel, "record_starts", lambda text, data=None: None)
        logs = bigtext._LogLines()
        out = [logs.take("".join(lines[k:k + step])) for k in range(0, len(lines), step)]
        out.append(logs.finish())
    return out, logs.is_log, logs.records, logs.content


def _mixed_texts() -> list[str]:
    job = training_log(40, _NCCL)
    boot = "-- Boot 0123456789abcdef --\n"
    return [job, job + "".join(r + "\n" for r in _RECORDS) + job,
            "".join(r + "\n\n  \n" for r in _RECORDS[20:]) + job,  # other programs first
            boot + job + boot + _RECORDS[0] + "\n" + job,
            job + "-- not a marker\n -- nor this\n" + job, "x\n" * 500, "\n\n",
            # carriage returns: CRLF lines, a progress bar's redraws, a record after one
            job.replace("\n", "\r\n") + boot.replace("\n", "\r") + _RECORDS[0] + "\r\n",
            "10%|#\r20%|##\r" + _RECORDS[1] + "\r\r\n \r" + job]


@pytest.mark.parametrize("pieces", [1, 3, 17])
@pytest.mark.parametrize("text", _mixed_texts())
def test_streamed_records_gated_are_those_of_every_line(text: str, pieces: int) -> None:
    assert _log_lines(text, pieces) == _log_lines(text, pieces, gated=False)


def test_streamed_records_of_every_corpus_sample(corpus) -> None:
    differing = [s.name for s in corpus.samples
                 if _log_lines(s.text(), 5) != _log_lines(s.text(), 5, gated=False)]
    assert not differing


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_RECORDS + ["x", "", "  ", "hello: world", "-- Reboot --",
                                            "--  Reboot", "[rank3] INFO step 1", "\u00e9t\u00e9",
                                            "10%|#\r20%"]),
                max_size=16), st.integers(1, 5), st.sampled_from(["\n", "\r\n", "\r"]))
def test_property_streamed_records_gated_and_not_agree(lines, pieces, end) -> None:
    text = "".join(line + end for line in lines)
    assert _log_lines(text, pieces) == _log_lines(text, pieces, gated=False)


def test_a_streamed_block_of_short_lines_tests_no_line(monkeypatch) -> None:
    from gputriage.ingest import bigtext

    tested: list[int] = []
    monkeypatch.setattr(bigtext, "is_other_record", lambda line: tested.append(1) or False)
    logs = bigtext._LogLines()
    assert logs.take("x\n" * (256 << 10)) == ""
    assert not tested and logs.content == 256 << 10 and not logs.is_log
