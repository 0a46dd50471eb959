"""One verdict per text (issue 32): every row of the message catalogs -- the job's
messages (CUDA errors by their runtime text, NVML, the container stack, the frameworks,
the platform), NCCL's WARNs and the node tools' messages -- is judged alike by
``gputriage explain --json LINE`` and ``gputriage analyze --json`` of the same line: the
same severity, blame and action (the finding of ``analyze`` that quotes the line may
have a broader id: ``cuda.kernel-fault`` for cudaErrorIllegalAddress)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from message_samples import SAMPLES

from gputriage.cli import Environment, main
from gputriage.knowledge.job_messages import CUDA_FAMILY, catalog

# (row id, sample line): the family rows' own sample, the NCCL and node catalogs' sample
# lines, a CUDA error as PyTorch prints its runtime text
ROWS = sorted([*((m.id, m.sample) for m in catalog() if m.family != CUDA_FAMILY),
               *SAMPLES.items(),
               *((m.id, f"RuntimeError: CUDA error: {m.text}") for m in catalog()
                 if m.family == CUDA_FAMILY and m.text)])
# rows whose two verdicts still differ, each with why (to be fixed at the source)
DISAGREE = {
    "jax.backend-failed": "analyze has no rule that reads JAX's backend error",
    "cuda.35": "explain: the job's settings; analyze: unknown until the driver is read",
    "cuda.100": "explain: the node's configuration; analyze: unknown until the host is read",
    "cuda.221": "explain fix-config, analyze's cuda.driver-too-old fix-software",
    "cuda.999": "explain action none, analyze's cuda.unknown-error fix-config",
}


def _run(argv: list[str]) -> tuple[int, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err))
    return code, json.loads(out.getvalue())


def _explained(line: str, row_id: str) -> tuple[str, str, str]:
    _, doc = _run(["explain", "--json", line])
    [found] = [m for i in doc["inputs"] for m in i["messages"] if m["id"] == row_id]
    return found["severity"], found["blame"], found["action"]


def _analysed(line: str, row_id: str, tmp_path: Path) -> tuple[str, str, str] | None:
    paste = tmp_path / "paste.txt"
    paste.write_text(line + "\n")
    _, doc = _run(["analyze", "--json", str(paste)])
    findings = [g for f in doc["findings"] for g in (f, *f.get("consequences", []))]
    quoting = [f for f in findings if f["id"] == row_id] or [
        f for f in findings if any(line.strip() in ln for e in f["evidence"] for ln in e["lines"])]
    return (quoting[0]["severity"], quoting[0]["blame"], quoting[0]["action"]) if quoting \
        else None


def test_every_catalog_row_has_a_sample_line():
    assert all(line for _, line in ROWS)
    assert not set(DISAGREE) - {rid for rid, _ in ROWS}


@pytest.mark.parametrize(("row_id", "line"), [
    pytest.param(rid, line, marks=pytest.mark.xfail(reason=DISAGREE[rid], strict=True))
    if rid in DISAGREE else (rid, line) for rid, line in ROWS], ids=[rid for rid, _ in ROWS])
def test_explain_and_analyze_give_one_verdict(row_id, line, tmp_path):
    assert _analysed(line, row_id, tmp_path) == _explained(line, row_id)


def test_a_ptx_jit_compilation_failure_is_not_the_operators_driver_build() -> None:
    """CUDA's "a PTX JIT compilation failed" is the job's binary, not the GPU operator's
    driver container failing to compile the kernel modules (its "Compilation failed")."""
    from gputriage.engine.analysis import analyze
    from gputriage.ingest import load_text

    result = analyze(load_text("RuntimeError: CUDA error: a PTX JIT compilation failed\n",
                               "paste"))
    assert "k8s.operator-driver-failed" not in {f.id for f in result.findings}
