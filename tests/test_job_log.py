"""The job's output read for the GPU stack's failures (parsers/job_log.py)."""

from __future__ import annotations

import pytest

from gputriage.errors import ParseError
from gputriage.parsers.job_log import parse_job_log

SOURCE_SAMPLES = {"job_log": ("corpus:torch-driver-too-old-9000-assert",
                              "corpus:torch-driver-too-old-11040-rtx3050")}


def test_a_traceback_gives_its_messages_and_lines():
    log = parse_job_log("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                        "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert log.ids() == {"cuda.700"}
    assert log.lines == ["RuntimeError: CUDA error: an illegal memory access was encountered"]


def test_text_without_a_message_is_not_a_job_log():
    with pytest.raises(ParseError):
        parse_job_log("epoch 1 loss 0.25\nepoch 2 loss 0.20\n")
    assert not parse_job_log("").hits
