"""Tests for gputriage.parsers.modules."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.modules import parse_modules

PROC_MODULES = """\
nvidia_uvm 1437696 0 - Live 0x0000000000000000 (POE)
nvidia_drm 69632 2 - Live 0x0000000000000000 (POE)
nvidia_modeset 1241088 1 nvidia_drm, Live 0x0000000000000000 (POE)
nvidia 56463360 1208 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)
nvidia_peermem 16384 0 - Loading 0x0000000000000000 (OE)
mlx5_ib 450560 0 - Live 0x0000000000000000
ib_core 434176 8 rdma_cm,ib_ipoib,nvidia_peermem,iw_cm,ib_umad,rdma_ucm,ib_uverbs,mlx5_ib, Live 0x0000000000000000
crc32_pclmul 16384 - - Live 0x0000000000000000
"""

LSMOD = """\
Module                  Size  Used by
nvidia_uvm           1437696  0
nvidia_drm             69632  2
nvidia_modeset       1241088  1 nvidia_drm
nvidia              56463360  1208 nvidia_uvm,nvidia_modeset
drm_kms_helper        274432  1 nvidia_drm
video                  65536  1 nvidia_modeset
ip_tables              32768  0 [permanent]
"""


def test_proc_modules():
    mods = {m.name: m for m in parse_modules(PROC_MODULES)}
    nv = mods["nvidia"]
    assert (nv.size, nv.refcount, nv.state) == (56463360, 1208, "Live")
    assert nv.used_by == ("nvidia_uvm", "nvidia_modeset")
    assert mods["nvidia_uvm"].used_by == ()
    assert mods["nvidia_peermem"].state == "Loading"
    assert "nvidia_peermem" in mods["ib_core"].used_by
    assert mods["crc32_pclmul"].refcount is None
    assert nv.line.startswith("nvidia 56463360")


def test_lsmod():
    mods = parse_modules(LSMOD)
    assert [m.name for m in mods][:4] == ["nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia"]
    by = {m.name: m for m in mods}
    assert by["nvidia"].used_by == ("nvidia_uvm", "nvidia_modeset")
    assert by["nvidia"].refcount == 1208 and by["nvidia"].state is None
    assert by["nvidia_drm"].used_by == ()
    assert by["ip_tables"].used_by == ()


def test_empty_and_header_only():
    assert parse_modules("") == []
    assert parse_modules("   \n") == []
    assert parse_modules("Module                  Size  Used by\n") == []


def test_not_modules():
    with pytest.raises(ParseError):
        parse_modules("lsmod: command not found\n")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_property(data):
    text = data.decode("utf-8", errors="replace")
    for candidate in (text, PROC_MODULES + text):
        with contextlib.suppress(ParseError):
            parse_modules(candidate)


def test_a_module_named_as_a_user_is_loaded_even_without_its_row():
    """``lsmod | grep gdrdrv`` shows two rows; nvidia's users name nvidia_uvm, so it is
    loaded and the rule must not call it missing (nor peermem, named the same way)."""
    from gputriage.rules.modules import loaded_names, required_modules

    grepped = ("gdrdrv                 17384  0\n"
               "nvidia              34654122  221 gdrdrv,nvidia_modeset,nvidia_uvm\n")
    mods = {m.name: m for m in parse_modules(grepped)}
    assert {"nvidia_uvm", "nvidia_modeset", "gdrdrv"} <= loaded_names(mods)
    ids = {f.id for f in required_modules(mods, has_infiniband=False)}
    assert "module.nvidia-uvm-missing" not in ids
    alone = {m.name: m for m in parse_modules("nvidia 56463360 3 nvidia_modeset\n")}
    assert "module.nvidia-uvm-missing" in {f.id for f in required_modules(alone)}
