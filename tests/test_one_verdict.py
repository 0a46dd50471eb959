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
DISAGREE: dict[str, str] = {}


def _run(argv: list[str]) -> tuple[int, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err))
    return code, json.loads(out.getvalue())


def _explained(line: str, row_id: str) -> tuple[str, str, str, str | None]:
    _, doc = _run(["explain", "--json", line])
    [found] = [m for i in doc["inputs"] for m in i["messages"] if m["id"] == row_id]
    return found["severity"], found["blame"], found["action"], found["step"]


def _analysed(line: str, row_id: str, tmp_path: Path
              ) -> tuple[str, str, str, str | None] | None:
    paste = tmp_path / "paste.txt"
    paste.write_text(line + "\n")
    _, doc = _run(["analyze", "--json", str(paste)])
    findings = [g for f in doc["findings"] for g in (f, *f.get("consequences", []))]
    quoting = [f for f in findings if f["id"] == row_id] or [
        f for f in findings if any(line.strip() in ln for e in f["evidence"] for ln in e["lines"])]
    if not quoting:
        return None
    f = quoting[0]
    return f["severity"], f["blame"], f["action"], f.get("step")


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


NO_DEVICE = "RuntimeError: CUDA error: no CUDA-capable device is detected"
NVML = "Failed to initialize NVML: Unknown Error"
NO_DRIVER = ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have "
             "an NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx")


# (what the text carries besides the message, the row, whose fault it then is): a
# container's prompt, a `docker run` that asked for no GPU, `kubectl exec` into a pod
@pytest.mark.parametrize(("context", "line", "row_id", "blame"), [
    ("", NO_DEVICE, "cuda.100", "unknown"),
    ("root@7f3a2b1c9d0e:/workspace# python train.py", NO_DEVICE, "cuda.100", "job-config"),
    ('$ docker run --rm nvcr.io/nvidia/pytorch:24.05-py3 python -c "import torch; '
     'torch.zeros(1).cuda()"', NO_DRIVER, "torch.no-driver", "job-config"),
    ("", NVML, "nvml.unknown-error", "unknown"),
    ("$ kubectl exec -it trainer-0 -- nvidia-smi", NVML, "nvml.unknown-error", "config"),
], ids=["no-device-alone", "no-device-in-container", "docker-run-without-gpus",
        "nvml-alone", "nvml-in-pod"])
def test_context_changes_both_verdicts_alike(context, line, row_id, blame, tmp_path):
    text = f"{context}\n{line}" if context else line
    explained = _explained(text, row_id)
    assert explained[1] == blame
    paste = tmp_path / "paste.txt"
    paste.write_text(text + "\n")
    _, doc = _run(["analyze", "--json", str(paste)])
    quoting = [f for f in doc["findings"]
               if any(line in ln for e in f["evidence"] for ln in e["lines"])]
    assert quoting, doc["findings"]
    f = quoting[0]
    assert (f["severity"], f["blame"], f["action"], f.get("step")) == explained


@pytest.mark.parametrize(("text", "severity", "blame", "exit_status"), [
    # alone: on the host the driver initialised no GPU, in a container it was given none
    ("No devices were found", "warning", "unknown", 1),
    ("root@3f2a1b9c8d7e:/# nvidia-smi\nNo devices were found", "warning", "job-config", 1),
])
def test_no_devices_found_drains_only_where_it_is_the_nodes(text, severity, blame,
                                                             exit_status, tmp_path):
    paste = tmp_path / "paste.txt"
    paste.write_text(text + "\n")
    code, doc = _run(["analyze", "--json", str(paste)])
    [f] = [f for f in doc["findings"] if f["id"] == "nvidia-smi.no-devices"]
    assert (f["severity"], f["blame"], code) == (severity, blame, exit_status)
    assert not f["step"].startswith("Drain")


def test_no_devices_found_on_the_host_is_the_nodes():
    """Collected on the host itself (gputriage ran outside any container): the driver is
    loaded and initialised no GPU: drain and reboot."""
    from hostkit import run

    result = run(nvidia_smi="No devices were found\n", proc_self_cgroup="0::/init.scope\n")
    [f] = [f for f in result.findings if f.id == "nvidia-smi.no-devices"]
    assert (f.severity.value, f.blame.value, f.action.value) == ("critical", "node",
                                                                 "reboot-node")


def test_a_message_folded_under_a_cause_takes_the_causes_step(tmp_path):
    """A CUDA launch failure after Xid 79 is its consequence: explain names the cause
    and gives the step that closes both, the one analyze gives the Xid."""
    text = ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the "
            "bus.\nRuntimeError: CUDA error: unspecified launch failure")
    _, doc = _run(["explain", "--json", text])
    [msg] = [m for i in doc["inputs"] for m in i["messages"] if m["id"] == "cuda.719"]
    paste = tmp_path / "paste.txt"
    paste.write_text(text + "\n")
    _, result = _run(["analyze", "--json", str(paste)])
    [xid] = [f for f in result["findings"] if f["id"] == "xid.79"]
    assert msg["blame"] == "node" and msg["step"] == xid["step"]
    assert any(c["id"] == msg["finding"] for c in xid["consequences"])


def test_a_version_mismatch_without_versions_says_so(tmp_path):
    paste = tmp_path / "paste.txt"
    paste.write_text("Failed to initialize NVML: Driver/library version mismatch\n")
    _, doc = _run(["analyze", "--json", str(paste)])
    [f] = [f for f in doc["findings"] if f["id"] == "driver.version-mismatch"]
    assert "unknown" not in f["title"] and "not in this output" in f["title"]


def test_a_cuda_errors_number_alone_is_no_paste_and_its_row_judges_it(monkeypatch) -> None:
    """explain of a bare number skips the analysis (the readers and the engine are not
    even imported): analysing each CUDA error's number as a paste finds nothing, so the
    row's verdict is the one analyze would leave."""
    from gputriage.engine import judged

    codes = sorted({str(m.code) for m in catalog() if m.family == CUDA_FAMILY and m.code})
    assert len(codes) >= 20
    texts = [*codes, " 700 ", "+1", "-1", "0999"]
    assert all(judged._analysed(text) == [] for text in texts)
    monkeypatch.setattr(judged, "_BARE_NUMBER", judged.re.compile("(?!)"))  # read them
    assert all(judged._analysed(text) == [] for text in texts)
    assert judged._BARE_NUMBER.fullmatch("700") is None


def test_explain_of_a_number_imports_no_reader_nor_engine() -> None:
    """Its start-up is what ``explain 700`` costs (benchmarks/check_latency.py)."""
    import os
    import subprocess
    import sys

    child = ("import sys\nfrom gputriage.cli import main\ncode = main(['explain', '700'])\n"
             "print(sorted(m for m in sys.modules if m.startswith(('gputriage.ingest', "
             "'gputriage.engine.analysis'))), code)")
    src = Path(__file__).resolve().parent.parent / "src"
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         timeout=60, check=True, env={**os.environ, "PYTHONPATH": str(src)})
    assert out.stdout.strip().endswith("[] 0"), out.stdout[-300:]
