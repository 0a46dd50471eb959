"""Tests for gputriage.parsers.pci (hand-written sysfs tree fixtures)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.pci import parse_link_speed, parse_pci_tree

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pci"
HGX = "hgx-h100-8gpu-nvswitch-cx7.json"


@pytest.fixture(scope="module")
def hgx():
    doc = json.loads((FIXTURES / HGX).read_text(encoding="utf-8"))
    return {f.address: f for f in parse_pci_tree(doc)}


def test_sorted_and_complete(hgx):
    assert list(hgx) == sorted(hgx)
    assert len(hgx) == 8 + 4 + 8 + 2 + 2


def test_gpus(hgx):
    gpus = [f for f in hgx.values() if f.is_gpu]
    h100 = [f for f in gpus if f.device == 0x2330]
    assert len(h100) == 8
    g = hgx["0000:18:00.0"]
    assert (g.vendor, g.class_code, g.subsystem_vendor, g.subsystem_device) == (
        0x10DE, 0x030200, 0x10DE, 0x16C1)
    assert g.driver == "nvidia"
    assert g.numa_node == 0 and g.local_cpulist == "0-47,96-143"
    assert g.current_link_speed == "32.0 GT/s PCIe"
    assert g.link_speed_gts("current") == 32.0 and g.link_speed_gts("max") == 32.0
    assert (g.current_link_width, g.max_link_width) == (16, 16)
    assert hgx["0000:db:00.0"].numa_node == 1
    assert g.raw["power_state"] == "D0"


def test_degraded_links_and_aer(hgx):
    slow = hgx["0000:5d:00.0"]
    assert slow.link_speed_gts() == 16.0 < slow.link_speed_gts("max")
    assert slow.aer["aer_dev_correctable"]["RxErr"] == 12
    assert slow.aer["aer_dev_correctable"]["TOTAL_ERR_COR"] == 16
    assert slow.aer["aer_dev_fatal"]["TOTAL_ERR_FATAL"] == 0
    narrow = hgx["0000:ab:00.0"]
    assert narrow.current_link_width == 8 < narrow.max_link_width


def test_nvswitch_audio_and_vga(hgx):
    switches = [f for f in hgx.values() if f.is_nvswitch]
    assert [f.address for f in switches] == [f"0000:0{i}:00.0" for i in (5, 6, 7, 8)]
    assert all(not f.is_gpu and f.driver == "nvidia-nvswitch" for f in switches)
    audio = hgx["0000:e1:00.1"]
    assert audio.is_nvidia and not audio.is_gpu and not audio.is_nvswitch
    assert audio.driver == "snd_hda_intel"
    vga = hgx["0000:e1:00.0"]
    assert vga.is_gpu and vga.driver is None


def test_network(hgx):
    ib = [f for f in hgx.values() if f.is_infiniband]
    assert len(ib) == 10  # 8 CX-7 IB, plus the 2 Mellanox Ethernet functions
    assert all(f.is_network and f.driver == "mlx5_core" for f in ib)
    eth = hgx["0000:c1:00.1"]
    assert eth.is_network and eth.class_code == 0x020000 and not eth.is_gpu
    assert not hgx["0000:18:00.0"].is_network


def test_other_drivers_and_odd_values():
    tree = {
        "files": {"0000:3b:00.0/vendor": "0x10de\n", "0000:3b:00.0/class": "0x030000\n",
                  "0000:3b:00.0/numa_node": "-1\n", "0000:3b:00.0/current_link_speed": "Unknown\n",
                  "0000:3b:00.0/current_link_width": "garbage\n",
                  "0000:86:00.0/vendor": "0x10de\n", "0000:86:00.0/class": "0x030200\n",
                  "0000:86:00.0/max_link_speed": "8 GT/s\n",
                  "3b:00.0/vendor": "0x8086\n", "not-an-address/vendor": "0x1\n",
                  "0000:af:00.0/vendor": "0x8086\n", "0000:af:00.0/class": "0x020000\n"},
        "links": {"0000:3b:00.0/driver": "../../../bus/pci/drivers/nouveau",
                  "0000:86:00.0/driver": "../../../../bus/pci/drivers/vfio-pci/"},
    }
    fns = {f.address: f for f in parse_pci_tree(tree)}
    assert list(fns) == ["0000:3b:00.0", "0000:86:00.0", "0000:af:00.0"]
    a = fns["0000:3b:00.0"]
    assert a.driver == "nouveau" and a.numa_node == -1 and a.current_link_width is None
    assert a.link_speed_gts() is None and a.is_gpu and a.vendor == 0x10DE  # not 0x8086
    b = fns["0000:86:00.0"]
    assert b.driver == "vfio-pci" and b.link_speed_gts("max") == 8.0
    intel = fns["0000:af:00.0"]
    assert intel.is_network and not intel.is_infiniband and not intel.is_nvidia
    with pytest.raises(ValueError):
        a.link_speed_gts("min")


def test_link_speed_parser():
    assert parse_link_speed("2.5 GT/s PCIe") == 2.5
    assert parse_link_speed("64.0 GT/s PCIe") == 64.0
    assert parse_link_speed("Unknown") is None and parse_link_speed(None) is None


def test_empty_and_wrong_shape():
    assert parse_pci_tree({}) == []
    assert parse_pci_tree({"files": {}, "links": {}, "errors": {}}) == []
    for bad in ([], "x", {"files": "x"}, {"0000:18:00.0/vendor": "0x10de"}):
        with pytest.raises(ParseError):
            parse_pci_tree(bad)


_attr = st.sampled_from(["vendor", "device", "class", "numa_node", "current_link_speed",
                         "max_link_width", "aer_dev_fatal", "local_cpulist", "x"])
_key = st.builds(lambda a, b: f"{a}/{b}", st.sampled_from(["0000:18:00.0", "18:00.0", "zz", ""])
                 | st.text(max_size=12), _attr | st.text(max_size=8))
_tree = st.fixed_dictionaries({}, optional={
    "files": st.dictionaries(_key | st.text(max_size=20), st.text(max_size=80) | st.none(),
                             max_size=8),
    "links": st.dictionaries(_key, st.text(max_size=40), max_size=3),
    "errors": st.dictionaries(st.text(max_size=20), st.text(max_size=5), max_size=2),
})
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda kids: st.lists(kids, max_size=4)
                     | st.dictionaries(st.text(max_size=10), kids, max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(_tree | _json)
def test_property(doc):
    with contextlib.suppress(ParseError):
        for f in parse_pci_tree(doc):
            _ = (f.is_gpu, f.is_nvswitch, f.is_network, f.is_infiniband, f.link_speed_gts(),
                 f.link_speed_gts("max"))
