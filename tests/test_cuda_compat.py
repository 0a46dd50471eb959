"""CUDA compatibility as arithmetic (knowledge/cuda_compat.py): the driver a CUDA release
needs, the newest CUDA a driver runs, minor-version compatibility and its floors, the
CUDA release that first builds for a GPU, forward compatibility by GPU class."""

from __future__ import annotations

import pytest

from gputriage.knowledge import cuda_compat as cc
from gputriage.knowledge.cuda_compat import Fit


@pytest.mark.parametrize(("driver", "cuda"), [
    ("535.104.05", "12.2"), ("535.54.03", "12.2"), ("535.86.10", "12.2"), ("470.86", "11.4"),
    ("550.144.03", "12.4"), ("570.124.06", "12.8"), ("570.26", "12.8"), ("580.126.09", "13.0"),
    ("525.60.13", "12.0"), ("346.72", "7.0"), ("396.26", "9.2"), ("384.130", "9.0"),
    ("340.29", None), ("", None),
])
def test_the_newest_cuda_a_driver_supports(driver, cuda):
    assert cc.newest_cuda(driver) == cuda


def test_a_release_needs_its_toolkit_driver_and_its_family_floor():
    assert cc.min_driver("12.8") == "570.26"
    assert cc.min_driver("12.8.1") == "570.26"
    assert cc.min_driver("11.8") == "520.61.05"
    assert cc.min_driver("9.2") == "396.26"
    assert cc.family_floor("12.8") == "525.60.13"
    assert cc.family_floor("11.1") == "450.80.02"
    assert cc.family_floor("13.0") == "580"
    assert cc.family_floor("10.2") is None  # no minor-version compatibility before 11


@pytest.mark.parametrize(("cuda", "driver", "fit"), [
    ("12.2", "535.104.05", Fit.YES),
    ("12.8", "535.104.05", Fit.MINOR),  # starts; no PTX JIT
    ("12.8", "525.60.13", Fit.MINOR),
    ("12.8", "520.61.05", Fit.NO),  # an 11.8 driver is below the 12.x floor
    ("13.0", "575.51.03", Fit.NO),  # a new major needs its own floor
    ("11.8", "470.86", Fit.MINOR),
    ("12.1", "470.86", Fit.NO),
    ("10.2", "418.39", Fit.NO),  # no minor-version compatibility for 10.x
    ("9.0", "396.26", Fit.YES),
])
def test_whether_a_build_runs_on_a_driver(cuda, driver, fit):
    assert cc.runs_on(cuda, driver) is fit


def test_unknown_versions_give_no_verdict():
    assert cc.runs_on(None, "535.104.05") is None
    assert cc.runs_on("12.4", None) is None


def test_driver_and_wheel_encodings():
    assert cc.cuda_from_int(11040) == "11.4"
    assert cc.cuda_from_int("9000") == "9.0"
    assert cc.cuda_from_int(12080) == "12.8"
    assert cc.cuda_from_int("x") is None
    assert cc.cuda_from_tag("cu128") == "12.8"
    assert cc.cuda_from_tag("cu92") == "9.2"
    assert cc.cuda_from_tag("cu102") == "10.2"
    assert cc.cuda_from_tag("cpu") is None


def test_the_wheel_to_install_for_a_driver():
    # only builds at or below the driver's CUDA when PTX JIT is the issue
    assert cc.torch_tag_for("12.2") == "cu121"
    # under minor-version compatibility the whole family runs on 470 (>= 450.80.02)
    assert cc.torch_tag_for("11.4", "470.86") == "cu118"
    assert cc.torch_tag_for("9.0") is None


@pytest.mark.parametrize(("name", "capability", "first"), [
    ("NVIDIA GeForce RTX 5090", "12.0", "12.8"),
    ("NVIDIA GeForce RTX 4090", "8.9", "11.8"),
    ("NVIDIA H100 80GB HBM3", "9.0", "11.8"),
    ("NVIDIA B200", "10.0", "12.8"),
    ("NVIDIA A100-SXM4-80GB", "8.0", "11.0"),
    ("Quadro RTX 6000", "7.5", "10.0"),
    ("Tesla K80", "3.7", "6.5"),
    ("GeForce GTX 770", "3.0", "4.2"),
    ("NVIDIA RTX 6000 Ada Generation", "8.9", "11.8"),
])
def test_compute_capability_and_first_release_by_gpu_name(name, capability, first):
    assert cc.capability_of(name) == capability
    assert cc.first_cuda_for(capability) == first
    assert cc.first_cuda_for(cc.sm_name(capability)) == first


def test_architecture_names_and_releases_that_dropped_them():
    assert cc.sm_name("12.0") == "sm_120"
    assert cc.sm_name("sm_89") == "sm_89"
    assert cc.last_cuda_for("3.7") == "11.8"  # Kepler left in CUDA 12.0
    assert cc.last_cuda_for("9.0") is None
    assert cc.capability_of("a mystery accelerator") is None


@pytest.mark.parametrize(("name", "supported"), [
    ("NVIDIA H100 80GB HBM3", True), ("NVIDIA A100-SXM4-40GB", True), ("Tesla K80", True),
    ("NVIDIA L40S", True), ("Quadro RTX 6000", False), ("NVIDIA GeForce RTX 3090", False),
    ("NVIDIA QUADRO RTX 6000", False), ("NVIDIA TITAN V", False), (None, None),
])
def test_forward_compatibility_only_on_data_center_gpus(name, supported):
    assert cc.forward_compat_supported(name) is supported
