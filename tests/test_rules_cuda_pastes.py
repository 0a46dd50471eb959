"""The job's CUDA and NVML errors as the field pastes them (issue 31): PTX from a newer
toolkit, the CUDA errors that are the GPU's hardware (uncorrectable ECC, NVLink), every
GPU unopened at once (WSL2, a VM), NVML blocked by the operating system, CUDA's unknown
error as it starts, PyTorch's "No CUDA GPUs are available", forward compatibility and
error 803 as the node's software, out of memory with its numbers, and a healthy start
(the GPU the program found, the platform's harmless messages).

Each class is tested on small inputs of its own, in several framings and versions.
``RULE_CASES`` is collected by the conformance test.
"""

from __future__ import annotations

import pytest
from golden import flat
from hostkit import run

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_text
from gputriage.knowledge.job_messages import find
from gputriage.model import DRAINING_ACTIONS, Action, Blame, Severity
from gputriage.parsers.nvsmi import scan_smi_errors

OLLAMA = ('time=2025-02-27T21:01:42.643Z level=INFO source=types.go:130 msg="inference '
          'compute" id=GPU-de03 library=cuda variant=v12 compute=8.7 driver=12.6 name=Orin '
          'total="4.0 GiB" available="3.9 GiB"\n')
TEGRA = ("NvTegraPrivGetProductionMode: Could not read Tegra production mode\n"
         "Expected on kernels without fuse support\n")
RULE_CASES = {
    "cuda.job-notes": [({"job_log": OLLAMA}, "cuda.gpu-found"),
                       ({"job_log": TEGRA + OLLAMA}, "tegra.production-mode")],
    "cuda.job-error": [({"job_log": "RuntimeError: CUDA error: all CUDA-capable devices are "
                                    "busy or unavailable\n"}, "cuda.46")],
}


def _all(text: str) -> dict:
    return {f.id: f for f in flat(run(job_log=text).findings)}


def _paste(text: str):
    return analyze(load_text(text, "paste"))


# --- PTX newer than the driver -------------------------------------------------------------

@pytest.mark.parametrize(("banner", "driver"), [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  460.80  Fri May  7 06:55:54 UTC 2021",
     "460.80"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build",
     "535.104.05"),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  525.85.12  Sat Jan 28 02:10:06 UTC 2023",
     "525.85.12")])
def test_ptx_from_a_newer_toolkit_names_the_driver(banner: str, driver: str) -> None:
    log = (f"[05/23/2021 18:30:06][host][0]:{banner}\n"
           "[05/23/2021 18:30:06][host][0]:ERROR: CUDA error: the provided PTX was compiled "
           "with an unsupported toolchain., line 148, file memtest.cu\n")
    f = _all(log)["cuda.driver-too-old"]
    assert f.title.startswith(f"Driver {driver} (CUDA ") and "PTX" in f.title
    assert "?" not in f.title and f.blame is Blame.JOB_CONFIG
    assert f.action is Action.FIX_SOFTWARE


def test_ptx_without_any_version_says_what_to_check() -> None:
    f = _all("thread 'main' panicked at 'Err(DriverError(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "
             "\"the provided PTX was compiled with an unsupported toolchain.\"))'\n")[
        "cuda.driver-too-old"]
    assert "?" not in f.title and "gputriage check" in f.explanation


# --- CUDA errors that are the GPU's hardware ------------------------------------------------

@pytest.mark.parametrize("line", [
    "F tensorflow/stream_executor/lib/statusor.cc:34] failed initializing StreamExecutor for "
    "CUDA device ordinal 0: Internal: failed call to cuDevicePrimaryCtxRetain: "
    "CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered",
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorECCUncorrectable: "
    "uncorrectable ECC error encountered"])
def test_an_uncorrectable_ecc_error_is_the_nodes_hardware(line: str) -> None:
    result = run(job_log=line + "\n")
    (f,) = result.findings
    assert (f.id, f.severity, f.blame, f.action) == ("cuda.ecc-uncorrectable",
                                                     Severity.CRITICAL, Blame.NODE,
                                                     Action.RESET_GPU)
    assert "ECC,ROW_REMAPPER" in (f.step or "") and result.host.verdict == "critical"


def test_an_uncorrectable_nvlink_error_is_the_nodes_hardware() -> None:
    (f,) = run(job_log="RuntimeError: CUDA error: uncorrectable NVLink error detected during "
                       "the execution\n").findings
    assert (f.id, f.blame, f.severity) == ("cuda.nvlink-uncorrectable", Blame.NODE,
                                           Severity.CRITICAL)


def test_the_kernels_xid_is_the_cause_of_cudas_ecc_error() -> None:
    xid = ("Jan 17 15:36:15 gpu-7 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=2211, name=python, "
           "An uncorrectable double bit error (DBE) has been detected on GPU in the "
           "framebuffer at partition 3, subpartition 0.\n")
    result = run(job_log="RuntimeError: CUDA error: uncorrectable ECC error encountered\n",
                 kernel_log=xid)
    top = [f.id for f in result.findings]
    assert "cuda.ecc-uncorrectable" not in top
    assert "cuda.ecc-uncorrectable" in [f.id for f in flat(result.findings)]


# --- every GPU unopened at once -------------------------------------------------------------

TWO_UNKNOWN = ("Unable to determine the device handle for GPU0: 0000:C1:00.0: Unknown Error\n"
               "Unable to determine the device handle for GPU1: 0000:E1:00.0: Unknown Error\n"
               "No devices were found\n")


def test_the_newer_handle_format_is_read() -> None:
    (err,) = scan_smi_errors("Unable to determine the device handle for GPU3: 0000:41:00.0: "
                             "Unknown Error")
    assert (err.kind, err.bus_id, err.reason) == ("device-handle", "0000:41:00.0",
                                                  "Unknown Error")


@pytest.mark.parametrize("text", [TWO_UNKNOWN, "$ nvidia-smi\n" + TWO_UNKNOWN,
                                  TWO_UNKNOWN.replace("GPU0: ", "GPU ").replace("GPU1: ", "GPU")])
def test_every_gpu_unopened_is_one_cause_not_lost_gpus(text: str) -> None:
    result = _paste(text)
    (f,) = result.findings
    assert (f.id, f.severity, f.blame) == ("nvidia-smi.gpus-unreachable", Severity.WARNING,
                                           Blame.UNKNOWN)
    assert "WDDM" in f.explanation and "Xid 79" in f.explanation
    assert result.host.verdict == "warning"


def test_one_gpu_unopened_or_lost_is_still_lost() -> None:
    one = _paste("Unable to determine the device handle for GPU0: 0000:C1:00.0: Unknown Error\n"
                 "No devices were found\n")
    assert "nvidia-smi.gpu-lost" in {f.id for f in one.findings}
    lost = _paste(TWO_UNKNOWN.replace("Unknown Error", "GPU is lost"))
    assert {f.severity for f in lost.findings} == {Severity.CRITICAL}
    assert "nvidia-smi.gpus-unreachable" not in {f.id for f in lost.findings}


# --- NVML blocked by the operating system ---------------------------------------------------

@pytest.mark.parametrize("text", [
    "$ /usr/lib/wsl/lib/nvidia-smi\nFailed to initialize NVML: GPU access blocked by the "
    "operating system\nFailed to properly shut down NVML: GPU access blocked by the operating "
    "system\n",
    "root@9279fc160f42:/# nvidia-smi\nFailed to initialize NVML: GPU access blocked by the "
    "operating system\n",
    "pynvml.NVMLError_OperatingSystem: GPU access blocked by the operating system\n"])
def test_nvml_blocked_by_the_os_is_where_it_ran(text: str) -> None:
    result = _paste(text)
    found = {f.id: f for f in flat(result.findings)}
    assert {f.severity for f in found.values()} == {Severity.WARNING}
    assert {f.blame for f in found.values()} == {Blame.CONFIG}
    assert result.host.verdict != "critical"
    (msg,) = find("Failed to initialize NVML: GPU access blocked by the operating system")
    assert (msg.id, msg.blame, msg.severity) == ("nvml.os-blocked", Blame.CONFIG,
                                                 Severity.WARNING)


# --- CUDA's unknown error -------------------------------------------------------------------

@pytest.mark.parametrize("line", [
    "ggml_cuda_init: failed to initialize CUDA: unknown error",
    "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run "
    "some cuda functions before calling NumCudaDevices() that might have already set an error? "
    "Error 999: unknown error",
    "cuInit returned CUDA_ERROR_UNKNOWN"])
def test_unknown_error_as_cuda_starts_is_the_nodes_software(line: str) -> None:
    f = _all(line + "\n")["cuda.unknown-error"]
    assert (f.blame, f.action) == (Blame.NODE, Action.FIX_SOFTWARE)
    assert "nvidia_uvm" in f.explanation and "modprobe nvidia-uvm" in (f.step or "")


def test_unknown_error_later_is_not_told() -> None:
    f = _all("RuntimeError: CUDA error: unknown error\n")["cuda.unknown-error"]
    assert f.blame is Blame.UNKNOWN


# --- the node's software: 803 and 804 -------------------------------------------------------

def test_804_without_a_compat_library_is_the_nodes_driver() -> None:
    f = _all("RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 804: forward "
             "compatibility was attempted on non supported HW\n")["cuda.forward-compat-unsupported"]
    assert (f.blame, f.action, f.severity) == (Blame.NODE, Action.FIX_SOFTWARE,
                                               Severity.WARNING)
    assert (f.step or "").startswith("Upgrade the node's driver")


def test_803_never_asks_for_a_hardware_drain() -> None:
    result = run(job_log="UserWarning: CUDA initialization: Unexpected error from "
                         "cudaGetDeviceCount(). Error 803: system has unsupported display "
                         "driver / cuda driver combination\n")
    (f,) = result.findings
    assert (f.action, f.blame) == (Action.FIX_SOFTWARE, Blame.CONFIG)
    assert "not at fault" in f.explanation


# --- out of memory, with its numbers --------------------------------------------------------

@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 14.76 GiB total "
    "capacity; 4.37 GiB already allocated; 14.75 MiB free; 4.43 GiB reserved in total by "
    "PyTorch)",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
    "capacity of 23.64 GiB of which 18.00 MiB is free. Process 4242 has 6.20 GiB memory in use. "
    "Including non-PyTorch memory, this process has 6.20 GiB memory in use."])
def test_oom_with_others_holding_the_memory_is_the_sharing(line: str) -> None:
    f = _all(line + "\n")["cuda.out-of-memory"]
    assert "other processes hold" in f.title
    assert (f.blame, f.action) == (Blame.JOB_CONFIG, Action.FIX_CONFIG)
    assert "set_per_process_memory_fraction" in (f.step or "")


def test_oom_of_a_job_that_fills_the_gpu_itself_is_its_size() -> None:
    f = _all("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB "
             "total capacity; 76.80 GiB already allocated; 1.10 GiB free; 77.90 GiB reserved in "
             "total by PyTorch)\n")["cuda.out-of-memory"]
    assert (f.title, f.blame) == ("CUDA out of memory", Blame.JOB)


def test_xla_says_what_the_program_needs() -> None:
    log = ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
           "trying to allocate 9126805504 bytes.\nBufferAssignment OOM Debugging.\n"
           "BufferAssignment stats:\n     parameter allocation:    1.20GiB\n"
           "         total allocation:   30.51GiB\n")
    f = _all(log)["cuda.out-of-memory"]
    assert "30.51GiB" in f.title and f.blame is Blame.JOB
    assert any("total allocation" in ln for e in f.evidence for ln in e.lines)


# --- a healthy start ------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "gpu"), [
    (OLLAMA, "Orin"),
    ('time=2024-05-01T10:00:00.000Z level=INFO source=types.go:71 msg="inference compute" '
     'id=GPU-5a1 library=cuda compute=8.9 driver=12.4 name="NVIDIA GeForce RTX 4090" '
     'total="23.6 GiB" available="22.1 GiB"\n', "NVIDIA GeForce RTX 4090"),
    ("ggml_cuda_init: found 2 CUDA devices:\n", "a GPU")])
def test_the_gpu_a_program_found_is_said(text: str, gpu: str) -> None:
    result = _paste(text)
    (f,) = [f for f in result.findings if f.id == "cuda.gpu-found"]
    assert f.severity is Severity.OK and gpu in f.title
    assert result.host.verdict == "ok"


def test_tegra_production_mode_is_harmless_and_an_error_is_not_hidden() -> None:
    healthy = _paste(TEGRA + OLLAMA)
    assert {f.id: f.severity for f in healthy.findings} == {
        "tegra.production-mode": Severity.INFO, "cuda.gpu-found": Severity.OK}
    failed = _all("ggml_cuda_init: found 1 CUDA devices:\nCUDA error: out of memory\n")
    assert "cuda.gpu-found" not in failed and "cuda.out-of-memory" in failed


# one line of each message the catalog gained for issue 31 (and CUDA errors no rule judges
# with the host's facts), as a job prints it alone: nothing around it to refine the verdict
ALONE = {
    "container.mount-proc-driver": "nvidia-container-cli: mount error: mount operation failed: "
    "/var/lib/docker/overlay2/9c1e/merged/proc/driver/nvidia/params/version/registry: no such "
    "file or directory",
    "container.selinux-denied": "SELinux is preventing /usr/bin/docker from entrypoint access "
    "on the file /usr/bin/docker.",
    "container.group-name-missing": "groups: cannot find name for group ID 107",
    "container.cuda-requirement": "nvidia-container-cli: requirement error: unsatisfied "
    "condition: cuda>=12.4, please update your driver to a newer version, or use an earlier "
    "cuda container",
    "nvml.symbol-missing": "nvidia-ctk: symbol lookup error: nvidia-ctk: undefined symbol: "
    "nvmlDeviceGetMigMode",
    "nvml.os-blocked": "Failed to initialize NVML: GPU access blocked by the operating system",
    "app.no-gpu-found": "[worker] No GPUs detected, falling back to CPU",
    "tegra.production-mode": "NvTegraPrivGetProductionMode: Could not read Tegra production "
    "mode",
    "cuda.401": "RuntimeError: CUDA error: the operation cannot be performed in the present "
    "state",
    "cuda.46": "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable",
    "cuda.217": "cudaErrorPeerAccessUnsupported: peer access is not supported between these "
    "two devices",
    "cuda.803": "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 803: system has "
    "unsupported display driver / cuda driver combination",
    "cuda.804": "cudaErrorCompatNotSupportedOnDevice: forward compatibility was attempted on "
    "non supported HW",
}


@pytest.mark.parametrize("mid", sorted(ALONE))
def test_explain_and_analyze_give_one_verdict_for_a_line(mid):
    """Issue 32: ``gputriage explain LINE`` and ``analyze`` of the same line alone say one
    message with the same severity, blame and action; where the finding is the message
    itself, analyze's step is the row's next step (a draining one is put in its frame)."""
    line = ALONE[mid]
    (msg,) = find(line)
    assert msg.id == mid
    quoted = [f for f in flat(_paste(line + "\n").findings)
              if any(line in ln for e in f.evidence for ln in e.lines)]
    assert quoted, f"analyze says nothing of {mid}"
    assert {(f.severity, f.blame, f.action) for f in quoted} == {
        (msg.severity, msg.blame, msg.action)}, [f.id for f in quoted]
    same = [f for f in quoted if f.id == msg.id.replace("nvml.", "container.nvml-")]
    if same and msg.action is not Action.NONE:
        step = same[0].step or ""
        if msg.action in DRAINING_ACTIONS:
            assert step.startswith("Drain ") and "resume it" in step
        else:
            assert step.rstrip(".").lower() == msg.next.rstrip(".").lower()
