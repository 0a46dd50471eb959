"""Tests for gputriage.parsers.driver."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.driver import (
    KernelModuleVersion,
    parse_gpus_information,
    parse_nvidia_libs,
    parse_proc_driver_version,
    parse_sys_module_versions,
    split_tree,
)

OPEN_VERSION = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Thu Feb 22 01:25:25 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
AARCH64_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  560.35.03  Release Build  "
    "(dvs-builder@U16-I3-B08-3-3)  Fri Aug 16 21:42:42 UTC 2024\n"
)
OLD_PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.07  Sat Feb 17 22:55:48 UTC 2024\n"

INFO_18 = """Model: \t\t NVIDIA H100 80GB HBM3
IRQ:   \t\t 1085
GPU UUID: \t GPU-3a1b2c3d-0000-1111-2222-333344445555
Video BIOS: \t 96.00.99.00.01
Bus Type: \t PCIe
DMA Size: \t 52 bits
DMA Mask: \t 0xfffffffffffff
Bus Location: \t 0000:18:00.0
Device Minor: \t 0
GPU Firmware: \t 550.54.14
GPU Excluded:\t No
"""
INFO_2A = INFO_18.replace("0000:18:00.0", "0000:2a:00.0").replace("Device Minor: \t 0",
                                                                   "Device Minor: \t 1")


def test_proc_version_proprietary_from_corpus(corpus):
    v = parse_proc_driver_version(
        corpus.sample("proc-driver-nvidia-version-proprietary-570.181").text())
    assert isinstance(v, KernelModuleVersion)
    assert v.version == "570.181"
    assert v.flavor == "proprietary"
    assert v.gcc == "12.3.0"
    assert v.line.startswith("NVRM version:")


def test_proc_version_open_module():
    v = parse_proc_driver_version(OPEN_VERSION)
    assert v is not None
    assert (v.version, v.flavor, v.gcc) == ("550.54.14", "open", "12.3.0")
    assert "Open Kernel Module" in v.line


def test_proc_version_aarch64_and_old_format():
    a = parse_proc_driver_version(AARCH64_OPEN)
    assert a is not None and (a.version, a.flavor, a.gcc) == ("560.35.03", "open", None)
    b = parse_proc_driver_version(OLD_PROPRIETARY)
    assert b is not None and (b.version, b.flavor) == ("535.161.07", "proprietary")


def test_proc_version_empty_and_malformed():
    assert parse_proc_driver_version("") is None
    assert parse_proc_driver_version("  \n\n") is None
    with pytest.raises(ParseError):
        parse_proc_driver_version("cat: /proc/driver/nvidia/version: No such file or directory\n")


def test_sys_module_versions():
    tree = {"files": {"nvidia/version": "550.54.14\n", "nvidia_uvm/version": "550.54.14\n",
                      "nvidia_modeset/version": "550.54.14\n", "nvidia/initstate": "live\n",
                      "nvidia_drm/initstate": "live\n", "nvidia_drm/version": ""},
             "links": {}, "errors": {"nvidia_peermem/version": "absent"}}
    mv = parse_sys_module_versions(tree)
    assert mv.versions == {"nvidia": "550.54.14", "nvidia_modeset": "550.54.14",
                           "nvidia_uvm": "550.54.14"}
    assert mv.initstate == {"nvidia": "live", "nvidia_drm": "live"}
    assert parse_sys_module_versions({}).versions == {}


def test_gpus_information():
    tree = {"files": {"0000:2a:00.0/information": INFO_2A, "0000:18:00.0/information": INFO_18,
                      "0000:18:00.0/registry": "Binary: \"\"\n"}}
    gpus = parse_gpus_information(tree)
    assert [g.bus_id for g in gpus] == ["0000:18:00.0", "0000:2a:00.0"]
    g = gpus[0]
    assert g.model == "NVIDIA H100 80GB HBM3"
    assert g.irq == 1085
    assert g.uuid == "GPU-3a1b2c3d-0000-1111-2222-333344445555"
    assert g.vbios == "96.00.99.00.01"
    assert g.bus_type == "PCIe"
    assert g.device_minor == 0 and gpus[1].device_minor == 1
    assert g.firmware == "550.54.14"
    assert g.raw["GPU Excluded"] == "No"


def test_gpus_information_bus_from_directory_and_na():
    info = "Model: \t\t Tesla V100-SXM2-16GB\nIRQ: \t\t 64\nVideo BIOS: \t ??.??.??.??.??\n"
    gpus = parse_gpus_information({"files": {"0000:3B:00.0/information": info}})
    assert gpus[0].bus_id == "0000:3b:00.0"
    assert gpus[0].vbios is None and gpus[0].firmware is None and gpus[0].uuid is None


def test_nvidia_libs():
    tree = {"files": {"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.14": "",
                      "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14": None,
                      "usr/lib64/libcuda.so.535.161.07": ""},
            "links": {"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": "libnvidia-ml.so.550.54.14",
                      "usr/lib/x86_64-linux-gnu/libcuda.so.1": "libcuda.so.550.54.14",
                      "usr/lib/x86_64-linux-gnu/libcuda.so": "libcuda.so.1"}}
    libs = parse_nvidia_libs(tree)
    by_path = {lib.path: lib for lib in libs}
    assert [lib.path for lib in libs] == sorted(by_path)
    assert by_path["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.14"].version == "550.54.14"
    assert by_path["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"].version is None
    assert by_path["/usr/lib/x86_64-linux-gnu/libcuda.so"].version is None
    assert by_path["/usr/lib64/libcuda.so.535.161.07"].library == "libcuda"
    assert {lib.library for lib in libs} == {"libcuda", "libnvidia-ml"}


@pytest.mark.parametrize("bad", [[], "files", 3, None, {"other": 1}, {"files": []},
                                 {"files": {}, "links": "x"}])
def test_tree_wrong_shape(bad):
    for parser in (parse_sys_module_versions, parse_gpus_information, parse_nvidia_libs):
        with pytest.raises(ParseError):
            parser(bad)
    with pytest.raises(ParseError):
        split_tree(bad)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda kids: st.lists(kids, max_size=4)
                     | st.dictionaries(st.text(max_size=10), kids, max_size=4), max_leaves=12)
_tree = st.fixed_dictionaries({}, optional={
    "files": st.dictionaries(st.text(max_size=30), st.text(max_size=200) | st.none(), max_size=6),
    "links": st.dictionaries(st.text(max_size=30), st.text(max_size=40), max_size=4),
    "errors": st.dictionaries(st.text(max_size=30), st.text(max_size=10), max_size=3),
})


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_proc_version_property(data):
    text = data.decode("utf-8", errors="replace")
    with contextlib.suppress(ParseError):
        parse_proc_driver_version(text)
        parse_proc_driver_version("NVRM version: " + text)


@settings(max_examples=200, deadline=None)
@given(_tree | _json)
def test_tree_parsers_property(doc):
    for parser in (parse_sys_module_versions, parse_gpus_information, parse_nvidia_libs):
        with contextlib.suppress(ParseError):
            parser(doc)
