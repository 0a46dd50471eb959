"""The job's output read for the GPU stack's failures (parsers/job_log.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# --- versions --------------------------------------------------------------------------

COLLECT_ENV = """\
PyTorch version: 2.7.0+cu128
Is debug build: False
CUDA used to build PyTorch: 12.8
OS: Ubuntu 22.04.5 LTS (x86_64)
Is CUDA available: True
CUDA runtime version: 12.4.131
GPU models and configuration: GPU 0: NVIDIA GeForce RTX 5090
Nvidia driver version: 570.124.06
cuDNN version: Probably one of the following: /usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0
"""


def test_collect_env_gives_framework_runtime_driver_and_gpu():
    v = parse_job_log(COLLECT_ENV).versions
    assert (v.torch, v.torch_cuda, v.cuda_available) == ("2.7.0+cu128", "12.8", True)
    assert (v.nvcc, v.gpu_name, v.driver_version, v.cudnn) == (
        "12.4", "NVIDIA GeForce RTX 5090", "570.124.06", "9.1.0")
    assert v.app_cuda == "12.8"
    assert v.lines["driver_version"] == "Nvidia driver version: 570.124.06"


def test_an_interactive_session_gives_the_value_lines():
    text = (">>> import torch\n>>> torch.__version__\n'2.1.0+cu121'\n>>> torch.version.cuda\n"
            "'12.1'\n>>> torch.cuda.is_available()\nFalse\n")
    v = parse_job_log(text).versions
    assert (v.torch, v.torch_cuda, v.cuda_available) == ("2.1.0+cu121", "12.1", False)


def test_the_wheel_tag_gives_the_cuda_when_torch_version_cuda_is_not_printed():
    v = parse_job_log("torch: 2.4.1+cu118\n").versions
    assert v.torch_cuda == "11.8"


def test_nvcc_and_the_drivers_cuda_as_an_integer():
    text = ("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4, "
            "V12.4.131\ngpu-a:1:1 [0] NCCL INFO cudaDriverVersion 12020\n")
    v = parse_job_log(text).versions
    assert (v.nvcc, v.driver_cuda) == ("12.4", "12.2")


def test_pytorchs_arch_warning_gives_gpu_capability_and_compiled_archs():
    text = ("NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the "
            "current PyTorch installation.\nThe current PyTorch install supports CUDA "
            "capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\n")
    log = parse_job_log(text)
    v = log.versions
    assert (v.gpu_name, v.capability) == ("NVIDIA GeForce RTX 5090", "12.0")
    assert v.archs == ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
    assert "torch.arch-unsupported" in log.ids()


def test_an_ngc_banner_gives_the_images_cuda_and_the_driver_it_wants():
    text = ("== PyTorch ==\nNVIDIA Release 25.01 (build 134983853)\nCUDA Version 12.8.0\n"
            "ERROR: This container was built for NVIDIA Driver Release 570.86 or later, but "
            "version 535.104.05 was detected and compatibility mode is UNAVAILABLE.\n")
    log = parse_job_log(text)
    v = log.versions
    assert (v.image_cuda, v.driver_required, v.driver_version, v.compat_mode) == (
        "12.8", "570.86", "535.104.05", False)
    assert "ngc.driver-too-old" in log.ids()


def test_ldconfig_lists_each_libcuda_once():
    text = ("\tlibcuda.so.1 (libc6,x86-64) => /usr/local/cuda-12.8/compat/libcuda.so.1\n"
            "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
            "\tlibcuda.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so\n")
    v = parse_job_log(text).versions
    assert v.libcuda == ("/usr/local/cuda-12.8/compat/libcuda.so.1",
                         "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                         "/usr/lib/x86_64-linux-gnu/libcuda.so")


def test_image_names_give_their_cuda():
    for image, cuda in (("nvidia/cuda:12.8.0-cudnn-devel-ubuntu22.04", "12.8"),
                        ("pytorch/pytorch:2.7.0-cuda12.8-cudnn9-runtime", "12.8"),
                        ("nvcr.io/nvidia/pytorch:25.01-py3", None)):
        v = parse_job_log(f"$ docker run --gpus all {image} nvidia-smi\ntorch 2.7.0\n").versions
        assert (v.image, v.image_cuda) == (image, cuda)


def test_an_image_name_alone_is_not_a_job_log():
    with pytest.raises(ParseError):
        parse_job_log("    image: nvidia/cuda:9.0-devel\n")


def test_tensorflow_device_lines_give_name_and_capability():
    tf1 = ("2017-09-23 14:37:51.072588: I tensorflow/core/common_runtime/gpu/gpu_device.cc:955]"
           " Found device 0 with properties: \nname: Quadro P6000\nmajor: 6 minor: 1 "
           "memoryClockRate (GHz) 1.645\n")
    v = parse_job_log(tf1).versions
    assert (v.gpu_name, v.capability) == ("Quadro P6000", "6.1")
    tf2 = ("I0000 gpu_device.cc:2019] Created device /job:localhost/replica:0/task:0/device:"
           "GPU:0 with 14792 MB memory:  -> device: 0, name: Tesla T4, pci bus id: "
           "0000:00:04.0, compute capability: 7.5\n")
    v = parse_job_log(tf2).versions
    assert (v.gpu_name, v.capability) == ("Tesla T4", "7.5")


def test_the_corpus_version_lines(corpus):
    v = parse_job_log(corpus.sample("torch-no-kernel-image-rtx5090").text()).versions
    assert (v.torch, v.torch_cuda, v.capability) == ("2.7.0.dev20250310+cu124", "12.4", "12.0")
    v = parse_job_log(corpus.sample("torch-driver-too-old-11040").text()).versions
    assert (v.driver_cuda, v.driver_version) == ("11.4", "470.86")
    v = parse_job_log(corpus.sample("cupy-804-quadro-rtx6000").text()).versions
    assert (v.gpu_name, v.runtime_cuda) == ("NVIDIA QUADRO RTX 6000", "11.0")


def test_a_long_line_of_spaces_after_name_does_not_hang() -> None:
    """A table row of blanks after "Name:" backtracked cubically in the TensorFlow
    device pattern (a minute for 3,000 spaces); the alarm is a hang guard only."""
    import signal

    from gputriage.ingest.detect import detect

    def hung(*_: object) -> None:
        raise AssertionError("the job-log version readers hung")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        detect("|  | Name:" + " " * 10_000 + "\n")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


_VERSION_LINES = [*COLLECT_ENV.splitlines(), "torch: 2.4.1+cu118", "torch.version.cuda -> 12.1",
                  "Cuda compilation tools, release 12.4, V12.4.131",
                  "gpu-a:1:1 [0] NCCL INFO cudaDriverVersion 12020",
                  "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with "
                  "the current PyTorch installation.",
                  "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_90.",
                  "tensorflow version: 2.15.0", "jax: 0.4.30", "pip install torch==2.3.1",
                  "name: Tesla V100-SXM2-16GB major: 7 minor: 0 memoryClockRate(GHz): 1.53",
                  "torch.cuda.get_device_name(0) 'NVIDIA A100-SXM4-80GB'",
                  "found version 11040", "libcuda.so.535.104.05"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_VERSION_LINES), st.sampled_from(["", "upper", "swap", "title"]),
       st.text(max_size=12), st.text(max_size=12))
def test_version_readers_searched_only_on_lines_with_their_literals_read_the_same(
        line, case, before, after):
    """A version reader is searched on an ASCII line only when it holds one of the
    literals its matches need (in lower case): what a line gives is what searching every
    reader gives, in any case, with any text around it, on a GPU node's host line."""
    from dataclasses import asdict
    from unittest import mock

    from gputriage.parsers import job_log

    line = {"": line, "upper": line.upper(), "swap": line.swapcase(),
            "title": line.title()}[case]
    ungated = tuple(None for _ in job_log._READERS)
    for text in (before + line + after, f"gpu-b12 kernel: {line}"):
        gated, every = job_log.JobVersions(), job_log.JobVersions()
        said = job_log._read(gated, text)
        with mock.patch.object(job_log, "_reader_needs", lambda: ungated):
            assert job_log._read(every, text) == said
        assert asdict(gated) == asdict(every)
