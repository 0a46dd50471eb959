"""Collection reads declared files as root: a FIFO, device or huge file planted where a
file is expected must neither stall a collector thread nor be read without a bound."""

from __future__ import annotations

import json
import os
import time

import pytest

from gputriage.collect import readers
from gputriage.sources import get


def _root_with(tmp_path, rel: str):
    root = tmp_path / "root"
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    return root, path


def test_a_fifo_where_a_config_file_is_expected_is_refused_at_once(tmp_path):
    root, path = _root_with(tmp_path, "etc/nvidia-container-runtime/config.toml")
    os.mkfifo(path)
    start = time.monotonic()
    data, rec = readers.read_file(root, get("container_toolkit_config"))
    assert time.monotonic() - start < 1.0
    assert data is None
    assert rec["error"] == "failed"
    assert "FIFO" in rec["error_detail"]


def test_a_fifo_among_cdi_specs_is_listed_as_an_error_and_the_rest_is_read(tmp_path):
    root, fifo = _root_with(tmp_path, "etc/cdi/planted.json")
    os.mkfifo(fifo)
    (root / "etc/cdi/nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    start = time.monotonic()
    data, _ = readers.read_tree(root, get("cdi_specs"))
    assert time.monotonic() - start < 1.0
    doc = json.loads(data)
    assert doc["errors"] == {"etc/cdi/planted.json": "failed"}
    assert "kind: nvidia.com/gpu" in doc["files"]["etc/cdi/nvidia.yaml"]


def test_a_device_node_where_a_file_is_expected_is_not_read(tmp_path):
    root, path = _root_with(tmp_path, "etc/os-release")
    path.symlink_to("/dev/zero")  # a symlink to a device: followed, then refused
    data, rec = readers.read_file(root, get("os_release"))
    assert data is None
    assert "character device" in rec["error_detail"]


def test_an_os_release_symlink_to_a_regular_file_is_still_read(tmp_path):
    root, path = _root_with(tmp_path, "etc/os-release")
    real = root / "usr/lib/os-release"
    real.parent.mkdir(parents=True)
    real.write_text('NAME="Ubuntu"\n')
    path.symlink_to("../usr/lib/os-release")
    data, rec = readers.read_file(root, get("os_release"))
    assert data == b'NAME="Ubuntu"\n'
    assert rec == {"truncated": False}


@pytest.mark.parametrize("size_mib", [64])
def test_a_huge_file_is_read_from_its_tail_only(tmp_path, size_mib):
    path = tmp_path / "big.log"
    with path.open("wb") as fh:  # sparse: costs no disk, reads as NULs
        fh.truncate(size_mib << 20)
        fh.seek((size_mib << 20) - 6)
        fh.write(b"tail!\n")
    start = time.monotonic()
    data, truncated = readers.read_capped(path, 1024)
    assert time.monotonic() - start < 0.5
    assert truncated
    assert len(data) == 1024 and data.endswith(b"tail!\n")
