"""Kubernetes, DCGM and CUDA pastes as the field sends them (issue 31, class 4): a cuda
validator's CUDA error, a device plugin that finds no NVML under its driver root, a
sharing config the plugin does not run with, and NCCL without room in the pod's /dev/shm.
Real captures (tests/fixtures/k8s/E-*, tests/fixtures/logs/nccl-shm-*) and variants of
each class: other prefixes, other CUDA errors, other signs on the node."""

from __future__ import annotations

from pathlib import Path

import pytest
from detect_both import lazy_and_eager_agree  # noqa: F401  (the fixture)
from golden import flat

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_text
from gputriage.model import DRAINING_ACTIONS, Action, Blame, Severity

# every detection of these tests is also made with every detector run (tests/detect_both.py)
pytestmark = pytest.mark.usefixtures("lazy_and_eager_agree")


FIXTURES = Path(__file__).parent / "fixtures"
CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: time-slicing-config
  namespace: gpu-operator
data:
  a100: |-
    version: v1
    sharing:
      timeSlicing:
        renameByDefault: {rename}
        resources:
        - name: nvidia.com/gpu
          replicas: 4
"""
NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-1
  labels:
    nvidia.com/gpu.count: "2"
    nvidia.com/gpu.product: NVIDIA-A100-PCIE-40GB
{labels}
status:
  capacity:
{capacity}
  allocatable:
{capacity}
"""


def _findings(text: str) -> dict:
    return {f.id: f for f in flat(analyze(load_text(text, "paste")).findings)}


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def _never_drains(f) -> None:
    assert f.action not in DRAINING_ACTIONS and f.blame is not Blame.NODE


# --- the cuda validator's CUDA error ---------------------------------------------------------

def test_validator_802_is_the_fabric_manager_and_no_hardware_repair():
    f = _findings(_fixture("k8s/E-validator-cuda-802.log"))["k8s.validator-cuda-error"]
    assert (f.severity, f.blame, f.action) == (Severity.CRITICAL, Blame.CONFIG,
                                               Action.FIX_CONFIG)
    assert "CUDA error 802" in f.title and "fabricmanager" in f.explanation
    assert "nothing needs a hardware repair" in f.explanation
    _never_drains(f)


def test_validator_804_is_forward_compatibility_on_a_gpu_without_it():
    found = _findings(_fixture("k8s/E-validator-cuda-804.log"))
    f = found["k8s.validator-cuda-error"]
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)
    assert "CUDA error 804" in f.title and "data-center GPUs" in f.explanation
    assert "k8s.operator-validation-stuck" not in found  # one cause, one finding
    _never_drains(f)


@pytest.mark.parametrize(("line", "code"), [
    ("[pod/nvidia-cuda-validator-x7k/cuda-validation] Failed to allocate device vector A "
     "(error code system not yet initialized)!", 802),
    ('2024-10-15T01:02:03.000000000Z stdout F Failed to copy vector A from host to device '
     "(error code forward compatibility was attempted on non supported HW)!", 804),
    ("Failed to launch vectorAdd kernel (error code CUDA driver version is insufficient for "
     "CUDA runtime version)!", 35),
])
def test_validator_cuda_errors_behind_any_prefix(line, code):
    f = _findings(f"[Vector addition of 50000 elements]\n{line}\n")["k8s.validator-cuda-error"]
    assert f"CUDA error {code}" in f.title and f.blame is Blame.CONFIG
    _never_drains(f)


def test_an_insufficient_driver_in_the_validator_checks_what_the_container_got():
    """The vectorAdd sample is the operator's own: error 35 there is a driver the
    validation container did not get (or one older than the release supports), not a
    build for the user to change."""
    f = _findings("[Vector addition of 50000 elements]\nFailed to allocate device vector A "
                  "(error code CUDA driver version is insufficient for CUDA runtime "
                  "version)!\n")["k8s.validator-cuda-error"]
    assert "validation container gets the node's driver" in (f.step or "")
    assert "use a build" not in (f.step or "")


def test_a_hardware_cuda_error_in_the_validator_stays_the_gpus():
    f = _findings("[Vector addition of 50000 elements]\nFailed to allocate device vector A "
                  "(error code uncorrectable ECC error encountered)!\n")
    found = f["k8s.validator-cuda-error"]
    assert (found.blame, found.action) == (Blame.NODE, Action.RESET_GPU)


# --- the device plugin and NVML --------------------------------------------------------------

def test_plugin_017_nvml_not_detected_names_the_driver_root():
    f = _findings(_fixture("k8s/E-plugin-nvml-not-detected.log"))["k8s.plugin-nvml-missing"]
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.CONFIG,
                                               Action.FIX_CONFIG)
    assert "libnvidia-ml.so.1" in f.title and "nvidiaDriverRoot" in f.explanation


def test_the_driver_root_of_the_plugins_config_dump_is_quoted():
    log = ('I0121 12:04:24.659189       1 main.go:253]\nRunning with config:\n{\n  "version": '
           '"v1",\n  "flags": {\n    "migStrategy": "none",\n    "nvidiaDriverRoot": '
           '"/run/nvidia/driver"\n  }\n}\nI0121 12:04:24.666347       1 factory.go:107] '
           "Detected non-NVML platform: could not load NVML library: libnvidia-ml.so.1: "
           "cannot open shared object file: No such file or directory\n")
    f = _findings(log)["k8s.plugin-nvml-missing"]
    assert "nvidiaDriverRoot is /run/nvidia/driver" in f.explanation


# --- a sharing config the plugin does not run with ------------------------------------------

def test_capacity_one_under_four_replicas_is_a_config_not_in_effect():
    result = analyze(load_text(_fixture("k8s/E-timeslicing-capacity-1.txt"), "paste"))
    [f] = [f for f in result.findings if f.severity is not Severity.OK]
    assert f.id == "k8s.sharing-not-applied"
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.CONFIG,
                                               Action.FIX_CONFIG)
    assert "x4" in f.title and "config.name" in f.explanation
    # the config shares no GPU while it is not in effect: folded under this finding
    assert [c.id for c in f.consequences] == ["k8s.sharing-time-sliced"]
    _never_drains(f)


@pytest.mark.parametrize(("labels", "capacity", "rename", "sign"), [
    ('    nvidia.com/gpu.replicas: "1"', '    nvidia.com/gpu: "2"', "false",
     "gpu.replicas=1"),
    ("    nvidia.com/gpu.sharing-strategy: none", '    nvidia.com/gpu: "8"', "false",
     "sharing-strategy=none"),
    ("    nvidia.com/device-plugin.config: a100", '    nvidia.com/gpu: "2"', "true",
     "no nvidia.com/gpu.shared"),
    ("", '    nvidia.com/gpu: "6"', "false", "not a multiple of 4"),
])
def test_each_sign_of_a_sharing_config_not_in_effect(labels, capacity, rename, sign):
    text = NODE.format(labels=labels, capacity=capacity) + "---\n" + CONFIGMAP.format(
        rename=rename)
    f = _findings(text)["k8s.sharing-not-applied"]
    assert sign in f.title and "gpu-node-1" in f.title


@pytest.mark.parametrize(("capacity", "rename", "labels"), [
    ('    nvidia.com/gpu: "8"', "false", '    nvidia.com/gpu.replicas: "4"'),
    ('    nvidia.com/gpu.shared: "8"', "true", ""),
    ('    nvidia.com/gpu: "2"', "false", "    nvidia.com/device-plugin.config: other"),
])
def test_a_sharing_config_in_effect_or_not_meant_for_the_node_is_quiet(capacity, rename,
                                                                        labels):
    text = NODE.format(labels=labels, capacity=capacity) + "---\n" + CONFIGMAP.format(
        rename=rename)
    assert "k8s.sharing-not-applied" not in _findings(text)


# --- NCCL and the pod's /dev/shm -------------------------------------------------------------

def test_nccl_shm_exhaustion_is_the_jobs_container_never_a_drain():
    f = _findings(_fixture("logs/nccl-shm-posix-fallocate-kubeflow.log"))["nccl.shm-too-small"]
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.JOB_CONFIG,
                                               Action.FIX_CONFIG)
    assert "medium: Memory" in f.explanation or "emptyDir" in f.explanation
    _never_drains(f)


@pytest.mark.parametrize("warn", [
    "ubuntu:9621:9691 [6] misc/shmutils.cc:71 NCCL WARN Error: failed to extend "
    "/dev/shm/nccl-fjwOOB to 5967876 bytes",
    "[2026-04-22 21:34:20] host-0:202016:202235 [0] misc/shmutils.cc:132 NCCL WARN Error "
    "while creating shared memory segment /dev/shm/nccl-WU88OE (size 9637888), error: No "
    "space left on device (28)",
])
def test_nccl_shm_wordings_of_other_releases(warn):
    f = _findings(warn + "\n")["nccl.shm-too-small"]
    assert f.blame is Blame.JOB_CONFIG


def test_nccl_shm_exhaustion_in_a_frameworks_last_error():
    text = ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error, "
            "NCCL version 2.18.1\nncclSystemError: System call (e.g. socket, malloc) or "
            "external library call failed or device error.\nLast error:\nError while creating "
            "shared memory segment /dev/shm/nccl-a1B2c3 (size 5967872)\n")
    f = _findings(text)["nccl.shm-too-small"]
    assert f.blame is Blame.JOB_CONFIG
    _never_drains(f)


def test_a_runtime_handler_not_supported_and_an_unhealthy_device_at_admission():
    """CRI-O's 'RuntimeHandler "nvidia" not supported' is the engine without the nvidia
    runtime; the kubelet refusing a device the plugin calls unhealthy is that, not NVML."""
    f = _findings('  Warning  FailedCreatePodSandBox  2m  kubelet  Failed to create pod '
                  'sandbox: rpc error: code = Unknown desc = RuntimeHandler "nvidia" not '
                  'supported\n')
    assert "container.unknown-runtime" in f
    g = _findings("  Warning  UnexpectedAdmissionError  12s  kubelet  Allocate failed due to "
                  "rpc error: code = Unknown desc = failed to get allocate response: unable "
                  "to allocate devices: GPU-0a1b2c3d is unhealthy, which is unexpected\n")
    assert "k8s.allocate-unhealthy-devices" in g and "k8s.allocate-nvml-failed" not in g
