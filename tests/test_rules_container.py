"""The container stack's and NVML's errors in a job's output (rules/container.py), NVML's
init error printed inside a container (rules/driver.py), and the catalog rows they rest
on (knowledge/messages/container.csv, nvml.csv).

``RULE_CASES`` make the rule fire for the conformance test; the rest checks each cause
unwrapped, blamed and acted on, with and without the host's facts.
"""

from __future__ import annotations

import pytest
from hostkit import run

from gputriage.engine.analysis import analyze
from gputriage.engine.causes import RELATIONS
from gputriage.ingest import load_input
from gputriage.knowledge.job_messages import catalog, scan_line
from gputriage.model import Action, Blame, Severity

HOOK = ("docker: Error response from daemon: failed to create shim: OCI runtime create failed: "
        "container_linux.go:380: starting container process caused: process_linux.go:545: "
        "container init caused: Running hook #0:: error running hook: exit status 1, stdout: , "
        "stderr: {cause}: unknown.")
NOT_LOADED = HOOK.format(cause="nvidia-container-cli: initialization error: nvml error: "
                               "driver not loaded")
MISMATCH = HOOK.format(cause="nvidia-container-cli: initialization error: nvml error: "
                             "driver/library version mismatch")
REQUIRE = ("docker: Error response from daemon: failed to create task for container: failed to "
           "create shim task: OCI runtime create failed: runc create failed: unable to start "
           "container process: error during container init: error running prestart hook #0: "
           "exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
           "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please "
           "update your driver to a newer version, or use an earlier cuda container: unknown\n")
SMI_535 = """\
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.161.07             Driver Version: 535.161.07   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|=========================================+======================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |                    0 |
| N/A   31C    P0              61W / 400W |      4MiB / 81920MiB |      0%      Default |
+-----------------------------------------+----------------------+----------------------+
"""
UNKNOWN = "Failed to initialize NVML: Unknown Error\n"

RULE_CASES = {
    "container.job-errors": [
        ({"job_log": NOT_LOADED + "\n"}, "container.hook-driver-not-loaded"),
        ({"job_log": "root@3f9c2a7b1d04:/# nvidia-smi\n" + UNKNOWN},
         "container.nvml-unknown-error"),
        ({"job_log": REQUIRE, "nvidia_smi": SMI_535}, "container.cuda-requirement"),
    ],
}


def _findings(result):
    out = {}
    for f in result.findings:
        for x in (f, *f.consequences):
            out[x.id] = x
    return out


def _paste(tmp_path, text):
    path = tmp_path / "paste.txt"
    path.write_text(text)
    return _findings(analyze(load_input(str(path))))


def test_catalog_rows_have_patterns_that_compile_and_judge():
    rows = [m for m in catalog() if m.family in ("container", "nvml")]
    assert len(rows) >= 20
    for m in rows:
        assert m.patterns and m.meaning and m.next


def test_a_hook_error_is_judged_by_its_cause(tmp_path):
    found = _paste(tmp_path, NOT_LOADED + "\n")
    f = found["container.hook-driver-not-loaded"]
    assert (f.severity, f.blame, f.action) == (Severity.CRITICAL, Blame.NODE, Action.FIX_SOFTWARE)
    assert "container.hook-failed" not in found
    assert "gputriage check" in f.explanation  # no host facts: says what would confirm it


def test_a_cause_on_the_line_after_the_hook_is_found():
    found = _findings(run(job_log=REQUIRE))
    assert "container.cuda-requirement" in found and "container.hook-failed" not in found
    assert "12.8" in found["container.cuda-requirement"].title


def test_a_hook_error_without_a_known_cause_stays_generic():
    found = _findings(run(job_log=HOOK.format(cause="something odd happened") + "\n"))
    assert found["container.hook-failed"].severity is Severity.WARNING


def test_the_cuda_requirement_against_the_drivers_cuda():
    """The driver is older than the image's CUDA on a GPU that newer drivers serve: the
    node's driver is what to upgrade (the expert's reading of corpus rows 288-289), the
    image older than the driver's CUDA the alternative the step names."""
    f = _findings(run(job_log=REQUIRE, nvidia_smi=SMI_535))["container.cuda-requirement"]
    assert "12.8" in f.title and "12.2" in f.title
    assert (f.blame, f.severity) == (Blame.NODE, Severity.WARNING)
    assert "570.26" in f.explanation and "NVIDIA_DISABLE_REQUIRE" in f.explanation


def test_a_driver_mismatch_in_the_hook_folds_under_the_hosts_mismatch(tmp_path):
    paste = ("$ nvidia-smi\nFailed to initialize NVML: Driver/library version mismatch\n"
             + MISMATCH + "\n")
    path = tmp_path / "p.txt"
    path.write_text(paste)
    top = {f.id: f for f in analyze(load_input(str(path))).findings}
    assert "driver.version-mismatch" in top and "container.hook-driver-mismatch" not in top
    kids = {c.id for c in top["driver.version-mismatch"].consequences}
    assert "container.hook-driver-mismatch" in kids
    assert {(r.cause, r.consequence) for r in RELATIONS} >= {
        ("driver.not-loaded", "container.hook-driver-not-loaded"),
        ("driver.version-mismatch", "container.nvml-version-mismatch")}


@pytest.mark.parametrize(("log", "severity", "blame"), [
    ("root@3f9c2a7b1d04:/# nvidia-smi\n" + UNKNOWN, Severity.WARNING, Blame.CONFIG),
    ("(host) # nvidia-smi\n" + UNKNOWN, Severity.CRITICAL, Blame.NODE),
    (UNKNOWN, Severity.WARNING, Blame.UNKNOWN),
])
def test_nvml_unknown_error_in_a_job_log_by_where_it_was_printed(log, severity, blame):
    f = _findings(run(job_log=log))["container.nvml-unknown-error"]
    assert (f.severity, f.blame) == (severity, blame)
    assert "daemon-reload" in f.explanation or severity is Severity.CRITICAL


def test_nvml_unknown_error_with_the_host_healthy_is_the_containers():
    f = _findings(run(job_log=UNKNOWN, nvidia_smi=SMI_535))["container.nvml-unknown-error"]
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.CONFIG, Action.FIX_CONFIG)
    assert {e.source for e in f.evidence} == {"job_log", "nvidia_smi"}


def test_nvidia_smi_nvml_error_under_a_container_prompt_is_not_the_nodes(tmp_path):
    inside = _paste(tmp_path, "(container) $ nvidia-smi -L\n" + UNKNOWN
                    + "(host) # nvidia-smi -L\nGPU 0: NVIDIA A10 (UUID: GPU-f15ae561-21b1-6003-"
                    "c768-861fc285203b)\n")["nvidia-smi.nvml-init-failed"]
    assert (inside.severity, inside.blame) == (Severity.WARNING, Blame.CONFIG)
    assert "1 GPU(s)" in inside.explanation
    assert "job_log" in {e.source for e in inside.evidence}
    host = _paste(tmp_path, "(host) # nvidia-smi\n" + UNKNOWN)["nvidia-smi.nvml-init-failed"]
    assert host.severity is Severity.CRITICAL
    # a bare prompt does not tell where it ran: the NVML catalog's row, as explain says
    bare = _paste(tmp_path, "$ nvidia-smi\n" + UNKNOWN)["nvidia-smi.nvml-init-failed"]
    assert (bare.severity, bare.blame) == (Severity.WARNING, Blame.UNKNOWN)


def test_no_nvidia_gpu_on_the_machine(tmp_path):
    found = _paste(tmp_path, 'docker: Error response from daemon: could not select device '
                   'driver "" with capabilities: [[gpu]].\nGraphics Mesa Intel® Xe Graphics\n')
    f = found["container.no-nvidia-gpu"]
    assert (f.blame, f.action) == (Blame.JOB_CONFIG, Action.FIX_CONFIG)
    assert "container.no-gpu-driver" not in found
    plain = _findings(run(job_log='could not select device driver "" with capabilities: '
                                  '[[gpu]]\n'))
    assert plain["container.no-gpu-driver"].blame is Blame.CONFIG


def test_capabilities_without_compute():
    log = ("NVIDIA_DRIVER_CAPABILITIES=utility\n"
           "RuntimeError: Found no NVIDIA driver on your system.\n")
    f = _findings(run(job_log=log))["container.no-compute-capability"]
    assert f.blame is Blame.JOB_CONFIG


@pytest.mark.parametrize(("line", "mid"), [
    ("Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all",
     "container.cdi-unresolvable"),
    ('Error: setting up CDI devices: failed to inject devices: failed to stat CDI host device '
     '"/dev/nvidia3": no such file or directory', "container.cdi-host-device-missing"),
    ("nvidia-container-cli: mount error: stat failed: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so."
     "550.54.15: no such file or directory: unknown", "container.mount-missing-file"),
    ("stderr: nvidia-container-cli: mount error: file creation failed: /var/lib/docker/overlay2/"
     "706b/merged/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1: file exists: unknown.",
     "container.mount-file-exists"),
    ("nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot "
     "open shared object file: no such file or directory: unknown",
     "container.hook-library-missing"),
    ('failed to get sandbox runtime: no runtime for "nvidia" is configured',
     "container.unknown-runtime"),
    ("Failed to initialize NVML: Insufficient Permissions",
     "container.nvml-insufficient-permissions"),
    ("Error: Failed to initialize NVML", "container.nvml-init-failed"),
])
def test_each_message_gives_its_finding(line, mid):
    assert mid in _findings(run(job_log=line + "\n"))


def test_a_hook_line_names_one_cause():
    hits = [h.message.id for h in scan_line(MISMATCH)]
    assert "container.hook-driver-mismatch" in hits and "container.hook-nvml-error" not in hits
