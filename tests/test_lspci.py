"""Tests for gputriage.parsers.lspci: real captures (corpus category 7) and
hand-written fixtures for each output shape."""

from __future__ import annotations

import contextlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.lspci import parse_lspci

# Content that marks a sample as holding lspci output: a device header line or
# a link/AER register line that only lspci prints.
_LSPCI_CONTENT = re.compile(
    r"^\s*(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] [^:\n]+:|^\s*(?:LnkSta|LnkCap|UESta):",
    re.M)


def _one(text: str):
    fns = parse_lspci(text)
    assert len(fns) == 1, fns
    return fns[0]


# --- real captures --------------------------------------------------------------------------


def test_corpus_category_7_lspci_samples_parse(corpus) -> None:
    with_lspci = 0
    for sample in corpus.category("7"):
        text = sample.text()
        if _LSPCI_CONTENT.search(text):
            with_lspci += 1
            fns = parse_lspci(text)
            assert fns, sample.name
        else:  # lscpu / numactl / dmidecode only
            with contextlib.suppress(ParseError):
                parse_lspci(text)
    assert with_lspci >= 6


def test_corpus_non_lspci_samples_raise(corpus) -> None:
    for part in ("cn-notes-connectx6-dmidecode", "legion1338", "xpuperf129"):
        with pytest.raises(ParseError):
            parse_lspci(corpus.sample(part).text())


def test_geerlingguy_quadro_x1_gen2_downgraded_with_aer(corpus) -> None:
    fn = _one(corpus.sample("geerlingguy480").text())
    assert fn.address == "" and fn.raw["headerless"] == "true"  # excerpt starts mid-block
    assert fn.current_link_speed == "5.0 GT/s PCIe" and fn.link_speed_gts() == 5.0
    assert fn.current_link_width == 1
    assert fn.raw["lnksta_downgraded"] == "speed,width"
    assert fn.max_link_speed is None  # its LnkCap line was cut off
    assert "AdvNonFatalErr+" in fn.raw["cesta"] and fn.raw["cesta_set"] == "AdvNonFatalErr"
    assert fn.raw["uesta"].startswith("DLP- SDES-") and fn.raw["uesta_set"] == ""


def test_jan183_rtx4090_riser_gen1(corpus) -> None:
    fn = _one(corpus.sample("jan183").text())
    assert fn.link_speed_gts("max") == 16.0 and fn.max_link_width == 16
    assert fn.link_speed_gts("current") == 2.5 and fn.current_link_width == 16
    assert fn.raw["lnksta_downgraded"] == "speed"  # "Width x16 (ok)"


def test_gtx1650super_full_vvv_block(corpus) -> None:
    fn = _one(corpus.sample("lspci-vvv-gtx1650super").text())
    assert fn.address == "0000:01:00.0"
    assert fn.is_gpu and fn.vendor == 0x10DE and fn.device is None  # no -nn, named device
    assert fn.class_code == 0x030000 and fn.raw["prog_if"] == "00"
    assert fn.raw["revision"] == "a1"
    assert (fn.subsystem_vendor, fn.subsystem_device) == (0x103C, 0x87A5)
    assert fn.max_link_speed == "8.0 GT/s PCIe" and fn.max_link_width == 16
    assert fn.current_link_speed == "2.5 GT/s PCIe" and fn.current_link_width == 16
    assert fn.raw["lnksta_downgraded"] == "speed"
    assert fn.driver == "nvidia" and fn.raw["kernel_modules"] == "nvidia_drm, nvidia"
    assert fn.numa_node is None
    # AER status wraps over continuation lines
    assert "TLPXlatBlocked-" in fn.raw["uesta"] and fn.raw["cesta_set"] == "AdvNonFatalErr"
    assert "DLActive-" in fn.raw["lnksta"]


def test_hwloc653_a100_sxm4_header(corpus) -> None:
    fn = _one(corpus.sample("hwloc653").text())
    assert fn.address == "0000:da:00.0"
    assert (fn.vendor, fn.device, fn.class_code) == (0x10DE, 0x20B0, 0x030200)
    assert (fn.subsystem_vendor, fn.subsystem_device) == (0x10DE, 0x134F)
    assert fn.numa_node == 5 and fn.is_gpu and not fn.is_nvswitch
    assert fn.raw["description"] == "NVIDIA Corporation GA100 [A100 SXM4 40GB]"
    assert fn.current_link_speed is None and "lnksta_downgraded" not in fn.raw  # cut before


def test_nolebase_grep_4_nvswitch_4_h100(corpus) -> None:
    fns = parse_lspci(corpus.sample("nolebase-lspci").text())
    assert len(fns) == 8
    switches = [f for f in fns if f.is_nvswitch]
    gpus = [f for f in fns if f.is_gpu]
    assert len(switches) == 4 and len(gpus) == 4
    assert {f.device for f in switches} == {0x22A3} and {f.device for f in gpus} == {0x2330}
    assert [f.address for f in switches] == [f"0000:0{i}:00.0" for i in (5, 6, 7, 8)]
    assert switches[0].class_code == 0x068000 and gpus[0].class_code == 0x030200


def test_talos9121_4_h100_then_lscpu(corpus) -> None:
    fns = parse_lspci(corpus.sample("talos9121").text())
    gpus = [f for f in fns if f.is_gpu]
    assert [f.address for f in gpus] == [f"0000:1{c}:00.0" for c in "abcd"]
    assert all(f.device == 0x2330 for f in gpus)
    assert len(fns) == 13  # the lscpu text after "# lscpu" adds nothing
    assert fns[-1].address == "0000:26:00.0" and fns[-1].vendor is None
    assert fns[-1].device == 0x4128 and fns[-1].class_code == 0x058000
    broadcom = [f for f in fns if f.vendor == 0x1000]
    assert len(broadcom) == 4 and all(f.class_code == 0x088000 for f in broadcom)


# --- hand-written fixtures ------------------------------------------------------------------

COLLECTOR = """\
0000:05:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)
\tSubsystem: NVIDIA Corporation Device [10de:1796]
\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr+ Stepping- SERR+
\tNUMA node: 0
\tCapabilities: [78] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x2, ASPM not supported
\t\t\tClockPM- Surprise- LLActRep- BwNot- ASPMOptComp+
\t\tLnkSta:\tSpeed 16GT/s (ok), Width x2 (ok)
\t\t\tTrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-
\tKernel driver in use: nvidia-nvswitch
\tKernel modules: nvidia

0000:18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
\tSubsystem: NVIDIA Corporation Device [10de:16c1]
\tNUMA node: 1
\tCapabilities: [78] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x8 (downgraded)
\tCapabilities: [100 v2] Advanced Error Reporting
\t\tUESta:\tDLP- SDES- TLP- FCP- CmpltTO+ CmpltAbrt- UnxCmplt- RxOF- MalfTLP-
\t\t\tECRC- UnsupReq+ ACSViol-
\t\tCESta:\tRxErr+ BadTLP- BadDLLP- Rollover- Timeout- AdvNonFatalErr-
\tKernel driver in use: nvidia
\tKernel modules: nvidiafb, nouveau, nvidia_drm, nvidia

0000:18:00.1 Audio device [0403]: NVIDIA Corporation Device [10de:22ba] (rev a1)
\tSubsystem: NVIDIA Corporation Device [10de:16c1]
\tKernel driver in use: snd_hda_intel

0000:c1:00.0 Infiniband controller [0207]: Mellanox Technologies MT2910 Family [ConnectX-7] \
[15b3:1021]
\tSubsystem: Mellanox Technologies Device [15b3:0041]
\tNUMA node: 1
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16
\t\tLnkSta:\tSpeed 32GT/s (ok), Width x16 (ok)
\tKernel driver in use: mlx5_core
"""


def test_collector_form() -> None:
    fns = {f.address: f for f in parse_lspci(COLLECTOR)}
    assert list(fns) == ["0000:05:00.0", "0000:18:00.0", "0000:18:00.1", "0000:c1:00.0"]
    sw = fns["0000:05:00.0"]
    assert sw.is_nvswitch and sw.driver == "nvidia-nvswitch" and sw.numa_node == 0
    assert sw.current_link_speed == sw.max_link_speed == "16.0 GT/s PCIe"
    assert (sw.current_link_width, sw.max_link_width) == (2, 2)
    assert "lnksta_downgraded" not in sw.raw
    g = fns["0000:18:00.0"]
    assert g.is_gpu and (g.vendor, g.device, g.class_code) == (0x10DE, 0x2330, 0x030200)
    assert (g.subsystem_vendor, g.subsystem_device) == (0x10DE, 0x16C1)
    assert g.numa_node == 1 and g.driver == "nvidia"
    assert g.link_speed_gts("max") == 32.0 and g.link_speed_gts() == 2.5
    assert (g.current_link_width, g.max_link_width) == (8, 16)
    assert g.raw["lnksta_downgraded"] == "speed,width"
    assert g.raw["uesta_set"] == "CmpltTO,UnsupReq" and g.raw["cesta_set"] == "RxErr"
    audio = fns["0000:18:00.1"]
    assert audio.is_nvidia and not audio.is_gpu and audio.class_code == 0x040300
    ib = fns["0000:c1:00.0"]
    assert ib.is_infiniband and ib.vendor == 0x15B3 and ib.device == 0x1021
    assert ib.subsystem_device == 0x0041 and ib.driver == "mlx5_core"


def test_without_domain_and_without_nn() -> None:
    text = ("18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n"
            "\tSubsystem: NVIDIA Corporation Device 16c1\n"
            "\tNUMA node: 0\n"
            "\tCapabilities: <access denied>\n"
            "\tKernel driver in use: nvidia\n"
            "\n"
            "c1:00.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"
            "\tKernel driver in use: mlx5_core\n")
    g, eth = parse_lspci(text)
    assert g.address == "0000:18:00.0" and g.is_gpu and g.device is None
    assert (g.subsystem_vendor, g.subsystem_device) == (0x10DE, 0x16C1)
    assert g.raw["capabilities"] == "access denied" and g.current_link_speed is None
    assert eth.vendor == 0x15B3 and eth.class_code == 0x020000
    assert eth.is_network and eth.is_infiniband  # a Mellanox network function


@pytest.mark.parametrize(("name", "code"), [
    ("VGA compatible controller", 0x030000), ("3D controller", 0x030200),
    ("Audio device", 0x040300), ("Bridge", 0x068000), ("Ethernet controller", 0x020000),
    ("Infiniband controller", 0x020700), ("Network controller", 0x028000),
])
def test_class_from_name(name: str, code: int) -> None:
    fn = _one(f"3b:00.0 {name}: NVIDIA Corporation Device 1234 (rev a1)\n")
    assert fn.class_code == code and fn.vendor == 0x10DE and fn.device == 0x1234


def test_unknown_class_and_vendor_name() -> None:
    fn = _one("00:1f.4 Frobnicator: Acme Widgets Ltd. Thing 9000\n")
    assert fn.class_code is None and fn.vendor is None and fn.device is None
    assert fn.raw["class_name"] == "Frobnicator"


def test_v_xxx_hex_dump_ignored_but_fills_missing_ids() -> None:
    text = ("/usr/bin/lspci -d \"10de:*\" -v -xxx\n\n"
            "0000:18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n"
            "\tSubsystem: NVIDIA Corporation Device 16c1\n"
            "\tFlags: bus master, fast devsel, latency 0, IRQ 18, NUMA node 1, IOMMU group 7\n"
            "\tMemory at e2000000 (32-bit, non-prefetchable) [size=16M]\n"
            "\tKernel driver in use: nvidia\n"
            "00: de 10 30 23 06 04 10 00 a1 00 02 03 00 00 00 00\n"
            "10: 00 00 00 e2 0c 00 00 00 00 00 00 a0 00 00 00 00\n"
            "20: 0c 00 00 00 00 00 00 00 00 00 00 00 de 10 c1 16\n"
            "\n")
    fn = _one(text)
    assert fn.device == 0x2330 and fn.class_code == 0x030200
    assert (fn.subsystem_vendor, fn.subsystem_device) == (0x10DE, 0x16C1)
    assert fn.numa_node == 1 and fn.raw["iommu_group"] == "7" and fn.driver == "nvidia"


def test_grep_one_liners_with_prompt_and_fence() -> None:
    text = ("Here is what I see:\n```\n"
            "user@gpu01:~$ lspci | grep -i nvidia\n"
            "17:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev a1)\n"
            "31:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev a1)\n"
            "user@gpu01:~$ nvidia-smi -L\n"
            "No devices were found\n```\n")
    fns = parse_lspci(text)
    assert [f.address for f in fns] == ["0000:17:00.0", "0000:31:00.0"]
    assert all(f.is_gpu and f.device is None for f in fns)


def test_nn_one_liners_with_domain() -> None:
    text = ("0000:4b:00.0 3D controller [0302]: NVIDIA Corporation AD102GL [L40S] [10de:26b9] "
            "(rev a1)\n"
            "0000:4b:00.1 Audio device [0403]: NVIDIA Corporation Device [10de:22ba] (rev a1)\n"
            "0001:00:00.0 Unassigned class [ff00]: Acme Device [abcd:0001]\n")
    gpu, audio, odd = parse_lspci(text)
    assert (gpu.device, gpu.class_code, gpu.raw["revision"]) == (0x26B9, 0x030200, "a1")
    assert audio.device == 0x22BA and not audio.is_gpu
    assert odd.address == "0001:00:00.0" and odd.class_code == 0xFF0000 and odd.vendor == 0xABCD


def test_markdown_quote_and_bug_report_headers() -> None:
    text = ("> I ran lspci -vvv:\n"
            ">\n"
            "> 65:00.0 VGA compatible controller [0300]: NVIDIA Corporation GA102 [GeForce RTX "
            "3090] [10de:2204] (rev a1) (prog-if 00 [VGA controller])\n"
            "> \tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L0s L1\n"
            "> \tLnkSta:\tSpeed 8GT/s (downgraded), Width x4 (downgraded)\n"
            "____________________________________________\n\n"
            "*** /proc/cmdline\n"
            "BOOT_IMAGE=/vmlinuz root=/dev/sda1\n")
    fn = _one(text)
    assert fn.address == "0000:65:00.0" and fn.class_code == 0x030000
    assert fn.link_speed_gts() == 8.0 and fn.current_link_width == 4
    assert fn.raw["lnksta_downgraded"] == "speed,width"


def test_width_only_downgrade_and_unindented_paste() -> None:
    text = ("18:00.0 3D controller: NVIDIA Corporation Device 2330 (rev a1)\n"
            "LnkCap: Port #0, Speed 32GT/s, Width x16\n"
            "LnkSta: Speed 32GT/s (ok), Width x8 (downgraded)\n"
            "Kernel driver in use: nvidia\n")
    fn = _one(text)
    assert fn.raw["lnksta_downgraded"] == "width" and fn.driver == "nvidia"


def test_same_address_twice_is_merged() -> None:
    text = ("$ lspci -nn | grep 18:00\n"
            "18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [10de:2330] (rev a1)\n"
            "$ lspci -vvv -s 18:00.0\n"
            "18:00.0 3D controller: NVIDIA Corporation GH100 (rev a1)\n"
            "\tNUMA node: 1\n"
            "\tKernel driver in use: nvidia\n")
    fn = _one(text)
    assert fn.device == 0x2330 and fn.numa_node == 1 and fn.driver == "nvidia"


def test_empty_and_not_lspci() -> None:
    assert parse_lspci("") == []
    assert parse_lspci("  \n\t\n") == []
    for text in ("hello world\n", "Bus Address: 0000:31:00.0\n",
                 "Architecture: x86_64\nNUMA node(s): 2\n", "$ lspci\n",
                 "-+-[0000:00]-+-00.0\n"):
        with pytest.raises(ParseError):
            parse_lspci(text)


# --- property tests -------------------------------------------------------------------------

_PIECES = st.sampled_from([
    "0000:18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [10de:2330] (rev a1)",
    "18:00.0 Bridge: NVIDIA Corporation Device 22a3 (rev a1)", "\tLnkSta:\tSpeed 2.5GT/s",
    "\t\tLnkCap:\tPort #0, Speed 99999GT/s, Width x999", "\tNUMA node: -1",
    "\tSubsystem: Device [zzzz:0000]", "00: ff ff ff ff", "10: de 10", "> ", "$ lspci",
    "\tCapabilities: <access denied>", "\t\tUESta:\t", "\t\t\tMore+", "```", "",
    "ff:1f.7 : x", "0:0.0 a:", "\tFlags: NUMA node 99999999",
])


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_result_or_parse_error(text: str) -> None:
    with contextlib.suppress(ParseError):
        assert isinstance(parse_lspci(text), list)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=30)), max_size=25))
def test_lspci_like_text_result_or_parse_error(lines: list[str]) -> None:
    with contextlib.suppress(ParseError):
        assert isinstance(parse_lspci("\n".join(lines)), list)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_result_or_parse_error(data: bytes) -> None:
    with contextlib.suppress(ParseError):
        parse_lspci(data.decode("utf-8", errors="replace"))
