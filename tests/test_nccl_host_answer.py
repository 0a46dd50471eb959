"""``gputriage nccl`` looks for host outputs in an input's head in a process of its own
while it reads the input (gputriage.nccl.scan.in_child): a stream's first blocks are held
(gputriage.nccl.hoststream.HostStream) until the answer comes, and let go once it is no."""

from __future__ import annotations

import io
import json
import sys

import pytest

from gputriage.cli import main
from gputriage.nccl import inputs, scan
from gputriage.nccl.hoststream import HostStream
from gputriage.scenarios.catalog import SOCKET_JOB
from gputriage.scenarios.model import healthy_hgx_h100
from gputriage.scenarios.render_nccl import nccl_log


class Late(scan.Answer):
    """An answer that is there only after ``after`` looks (then ``value``)."""

    def __init__(self, value: bool, after: int) -> None:
        super().__init__(lambda: value)
        self.after = after
        self.waited = False

    def ready(self) -> bool:
        self.after -= 1
        return self.after < 0

    def __call__(self) -> bool:
        self.waited = self.after >= 0
        return super().__call__()


def _blocks(n: int) -> list[bytes]:
    return [f"line {i}\n".encode() * 100 for i in range(n)]


def test_a_stream_without_host_outputs_is_held_until_the_answer_then_let_go():
    answer = Late(False, 2)
    stream = HostStream("<stdin>", answer)
    blocks = _blocks(6)
    passed = []
    for block in stream.keep(blocks):
        passed.append(block)
        if len(passed) == 2:  # (not known yet: held)
            assert list(stream.kept) == blocks[:2]
    assert passed == blocks  # every block passed on, unchanged
    assert not stream.kept and stream.size == 0 and not answer.waited
    assert stream.has_host() is False


def test_a_stream_with_host_outputs_keeps_every_block_when_the_answer_comes_late():
    answer = Late(True, 3)
    stream = HostStream("<stdin>", answer)
    blocks = _blocks(5)
    assert list(stream.keep(blocks)) == blocks
    assert list(stream.kept) == blocks and stream.has_host() is True
    assert not answer.waited  # (it came while the blocks passed)


def test_a_short_stream_waits_for_the_answer_at_its_end():
    answer = Late(False, 99)
    stream = HostStream("<stdin>", answer)
    assert list(stream.keep(_blocks(2))) == _blocks(2)
    assert stream.wanted is None and len(stream.kept) == 2
    assert stream.has_host() is False and answer.waited and not stream.kept


def test_the_answer_is_waited_for_before_a_stream_would_be_held_whole():
    """A stream as large as one the host loader streams is not held past that without
    the answer: it is waited for there."""
    answer = Late(False, 99)
    stream = HostStream("<stdin>", answer)
    stream.large_at = 3 * len(_blocks(1)[0])
    held = []
    for _block in stream.keep(_blocks(8)):
        held.append(len(stream.kept))
    assert answer.waited and held == [1, 2, 0, 0, 0, 0, 0, 0]


def test_an_answer_worked_out_here_is_ready_and_kept():
    calls = []

    def look() -> bool:
        calls.append(1)
        return True

    answer = scan.Answer(look)
    assert answer.ready() and answer() and answer() and calls == [1]


def test_an_answer_from_a_forked_process(monkeypatch):
    # (forked even where another test left a thread running: the child only answers)
    monkeypatch.setattr(scan, "_can_fork", lambda: True)
    answer = scan.in_child(lambda: True)
    assert answer.pid is not None and answer() is True and answer.fd is None
    assert scan.in_child(lambda: False)() is False


@pytest.mark.parametrize("fork", [True, False])
def test_stdin_job_log_with_host_output_read_either_way(monkeypatch, fork):
    """The look in its own process (the head long enough: a fork pays) or here: the
    same report, the nvidia-smi table a host fact, the job's lines read once."""
    looked: list[int] = []
    real = inputs._looked_for

    def spy(text: str) -> scan.Answer:
        answer = real(text)
        looked.append(answer.pid or 0)
        return answer

    monkeypatch.setattr(inputs, "_looked_for", spy)
    monkeypatch.setattr(inputs, "_FORK_FROM", 1 if fork else 1 << 30)
    table = ("+-----------------------------------------------------------------------------+\n"
             "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |\n"
             "+-----------------------------------------------------------------------------+\n")
    log = nccl_log(healthy_hgx_h100(), SOCKET_JOB)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((table + log).encode())))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    main(["nccl", "--json", "-"])
    doc = json.loads(out.getvalue())
    assert doc["host"]["driver"]["cuda"] == "12.4"
    assert doc["nccl"]["log"]["nccl_lines"] == sum("NCCL" in x for x in log.splitlines())
    assert len(looked) == 1 and (looked[0] > 0) == (fork and scan._can_fork())
