"""``gputriage explain TEXT...``: every CUDA error of the table is answered (by number
and by name), a pasted line and stdin work, unknown text says so and exits 3, the JSON
validates against its schema, and piped output is never wrapped."""

from __future__ import annotations

import io
import json
import sys

import pytest

from gputriage import schemas
from gputriage.cli import Environment, main
from gputriage.engine.judged import verdicts
from gputriage.knowledge.job_messages import CUDA_FAMILY, catalog, cuda_error
from gputriage.knowledge.lookup import find_hits
from gputriage.views.explainview import cuda_version, render_explained

CUDA = [m for m in catalog() if m.family == CUDA_FAMILY]
TORCH_OLD = ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040). "
             "Please update your GPU driver")


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["explain", *argv], Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("msg", CUDA, ids=[m.id for m in CUDA])
def test_every_cuda_error_of_the_table_is_explained(msg):
    for key in (str(msg.code), msg.name, msg.cu_name):
        if not key:
            continue
        code, out, err = _run([key])
        assert code == 0 and not err
        head = out.splitlines()[0]
        [verdict] = verdicts(key, find_hits(key))  # the row's, or analyze's of the same text
        assert head.startswith(f"{msg.id}  {verdict.severity.value.upper()}  ")
        assert msg.meaning in out and msg.cause in out
        assert f"  next step      {verdict.step or msg.next}\n" in out
        assert f"{msg.code} {msg.name}" in out
        assert f"{verdict.action.value}: " in out
    # the number alone is the row's verdict, with the step its id takes in a report
    [verdict] = verdicts(str(msg.code), find_hits(str(msg.code)))
    assert (verdict.finding, verdict.severity, verdict.blame, verdict.action) == (
        None, msg.severity, msg.blame, msg.action)


def test_a_pasted_line_with_host_facts_to_decide_says_which():
    code, out, _ = _run(["RuntimeError: CUDA error: an illegal memory access was encountered"])
    assert code == 0 and out.startswith("cuda.700  WARNING")
    assert "the job (the application), not the node" in out
    assert "decided by     the node's kernel log" in out and "gputriage check" in out


def test_captured_cuda_version_is_decoded():
    code, out, _ = _run([TORCH_OLD])
    assert code == 0 and "torch.driver-too-old" in out
    assert "found = 11040 (CUDA 11.4" in out
    assert cuda_version("12020") == "12.2" and cuda_version("9000") == "9.0"
    assert cuda_version("535") is None and cuda_version("v12") is None


def test_unknown_text_says_so_and_exits_3():
    code, out, _ = _run(["the printer is on fire"])
    assert code == 3
    assert out.startswith("not a message gputriage knows: 'the printer is on fire'")
    assert "CUDA runtime and driver API errors" in out and "NVML" in out
    code, out, _ = _run(["79"])
    assert code == 3 and "gputriage xid 79" in out


def test_several_texts_and_an_unquoted_paste():
    code, out, _ = _run(["700", "cudaErrorNoDevice", "nonsense"])
    assert code == 0
    assert [ln.split()[0] for ln in out.splitlines() if ln and not ln.startswith(" ")] \
        == ["cuda.700", "cuda.100", "not"]
    code, out, _ = _run(["RuntimeError:", "CUDA", "error:", "out", "of", "memory"])
    assert code == 0 and out.startswith("cuda.2 ")


def test_stdin(monkeypatch):
    log = ("Traceback (most recent call last):\n  File \"train.py\", line 3\n"
           "RuntimeError: CUDA error: no kernel image is available for execution on the "
           "device\nFailed to initialize NVML: Unknown Error\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(log.encode())))
    code, out, _ = _run(["-"])
    assert code == 0
    heads = [ln.split()[0] for ln in out.splitlines() if ln and not ln.startswith(" ")]
    assert heads[0] == "cuda.209" and "nvml.unknown-error" in heads
    assert "  on the line    RuntimeError: CUDA error: no kernel image" in out


def test_piped_output_is_never_wrapped():
    _, out, _ = _run(["719"])
    msg = cuda_error(719)
    lines = out.splitlines()
    assert f"  likely cause   {msg.cause}" in lines and f"  next step      {msg.next}" in lines
    assert all(ln == ln.rstrip() for ln in lines)


def test_a_terminal_width_wraps_between_words():
    found = [(text, list(zip(hits, verdicts(text, hits), strict=True)))
             for text, hits in (("700", find_hits("700")), (TORCH_OLD, find_hits(TORCH_OLD)))]
    narrow, piped = io.StringIO(), io.StringIO()
    render_explained(found, narrow, width=60)
    render_explained(found, piped)
    assert all(len(ln) <= 60 for ln in narrow.getvalue().splitlines())
    assert max(map(len, piped.getvalue().splitlines())) > 60
    # wrapping only moves line breaks: the same words, none cut
    assert narrow.getvalue().split() == piped.getvalue().split()


def test_help_lists_explain(capsys):
    main(["--help"], Environment(stdout=io.StringIO(), stderr=io.StringIO()))
    assert "gputriage explain 'ERROR TEXT'" in capsys.readouterr().out


def test_json_validates_and_is_closed():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(schemas.bundled("explain"))
    code, out, _ = _run(["700", TORCH_OLD, "not an error", "--json"])
    assert code == 0
    doc = json.loads(out)
    assert not list(validator.iter_errors(doc))
    assert doc["schema"] == "gputriage/explain/v1"
    known, torch, unknown = doc["inputs"]
    assert known["messages"][0]["cuda"] == {
        "code": 700, "enum": "cudaErrorIllegalAddress",
        "cu_name": "CUDA_ERROR_ILLEGAL_ADDRESS",
        "text": "an illegal memory access was encountered"}
    assert known["messages"][0]["needs"]
    assert torch["messages"][0]["fields"] == {"found": "11040"}
    assert unknown == {"text": "not an error", "known": False, "messages": []}
    assert list(validator.iter_errors(dict(doc, surprise=1)))
    bad = json.loads(out)
    bad["inputs"][0]["messages"][0]["blame"] = "cosmic-rays"
    assert list(validator.iter_errors(bad))
    code, out, _ = _run(["nothing known", "--json"])
    assert code == 3 and not list(validator.iter_errors(json.loads(out)))
