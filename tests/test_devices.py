"""Tests for gputriage.parsers.devices."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.devices import parse_devnodes, parse_proc_devices

PROC_DEVICES = """\
Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
 10 misc
195 nvidia-frontend
226 drm
234 nvidia-nvswitch
235 nvidia-caps
236 nvidia-caps-imex-channels
237 nvidia-nvlink
511 nvidia-uvm

Block devices:
  7 loop
  8 sd
259 blkext
"""


def test_proc_devices():
    majors = parse_proc_devices(PROC_DEVICES)
    assert majors["nvidia-frontend"] == 195
    assert majors["nvidia-uvm"] == 511
    assert majors["nvidia-caps"] == 235
    assert majors["tty"] == 4
    assert "sd" not in majors and "loop" not in majors


def test_proc_devices_empty_fragment_and_malformed():
    assert parse_proc_devices("") == {}
    assert parse_proc_devices("195 nvidia-frontend\n") == {"nvidia-frontend": 195}
    with pytest.raises(ParseError):
        parse_proc_devices("this is not /proc/devices\n")


DEVNODES = [
    {"path": "/dev/nvidia0", "major": 195, "minor": 0, "mode": "crw-rw-rw-", "kind": "char"},
    {"path": "/dev/nvidiactl", "major": 195, "minor": 255, "mode": "crw-rw-rw-"},
    {"path": "/dev/nvidia-uvm", "major": "510", "minor": "0", "mode": "crw-rw-rw-"},
    {"path": "/dev/nvidia-caps", "mode": "drwxr-xr-x"},
    {"path": "/dev/sda", "major": 8, "minor": 0, "mode": "brw-rw----"},
    "junk",
    {"major": 1},
]


def test_devnodes():
    nodes = {n.path: n for n in parse_devnodes(DEVNODES)}
    assert set(nodes) == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm",
                          "/dev/nvidia-caps", "/dev/sda"}
    assert (nodes["/dev/nvidia0"].major, nodes["/dev/nvidia0"].minor) == (195, 0)
    assert nodes["/dev/nvidiactl"].kind == "char"
    assert nodes["/dev/nvidia-uvm"].major == 510
    assert nodes["/dev/nvidia-caps"].kind == "other" and nodes["/dev/nvidia-caps"].major is None
    assert nodes["/dev/sda"].kind == "block"


def test_devnodes_stale_uvm_major_visible():
    majors = parse_proc_devices(PROC_DEVICES)
    uvm = next(n for n in parse_devnodes(DEVNODES) if n.path == "/dev/nvidia-uvm")
    assert uvm.major != majors["nvidia-uvm"]


@pytest.mark.parametrize("bad", [{}, "x", None, 3])
def test_devnodes_wrong_shape(bad):
    with pytest.raises(ParseError):
        parse_devnodes(bad)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda kids: st.lists(kids, max_size=4)
                     | st.dictionaries(st.text(max_size=10), kids, max_size=4), max_leaves=12)
_node = st.fixed_dictionaries({}, optional={"path": _json | st.text(), "major": _json,
                                            "minor": _json, "mode": _json | st.text(),
                                            "kind": _json})


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_proc_devices_property(data):
    with contextlib.suppress(ParseError):
        parse_proc_devices(data.decode("utf-8", errors="replace"))


@settings(max_examples=200, deadline=None)
@given(st.lists(_node | _json, max_size=6) | _json)
def test_devnodes_property(doc):
    with contextlib.suppress(ParseError):
        parse_devnodes(doc)
