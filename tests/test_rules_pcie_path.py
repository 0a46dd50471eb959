"""The PCIe path hop by hop: lspci -tv, the bridges of lspci -vvv, the sysfs tree, and
the rule pcie.path (a link below both its ends), with the per-device link rules judged
against the port above them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hostkit import run
from smi_kit import smi_q

from gputriage import sources
from gputriage.collect import readers
from gputriage.errors import ParseError
from gputriage.ingest.detect import detect
from gputriage.knowledge import csv_rows
from gputriage.knowledge.pcie_hops import hop_case
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.lspci import parse_lspci
from gputriage.parsers.lspci_tree import parse_lspci_tree
from gputriage.parsers.pci import parse_pci_tree, sysfs_parent
from gputriage.status import ExitStatus, exit_status

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pci"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


GEN3 = fixture("switch-uplink-gen3-tree-and-vvv.txt")
X8 = fixture("switch-uplink-x8-tree-and-vvv.txt")
HEALTHY = fixture("switch-healthy-tree-and-vvv.txt")
ROOT, USP = "0000:15:01.0", "0000:16:00.0"
GPU0, GPU1, NIC = "0000:18:00.0", "0000:19:00.0", "0000:1a:00.0"


def _parts(paste: str) -> dict[str, str]:
    return dict(detect(paste))


def _vvv_only(paste: str) -> str:
    """The same host's lspci -vvv without the tree above it."""
    return paste[paste.index("$ sudo lspci -vvv"):]


# --- sysfs trees -------------------------------------------------------------------------

GEN = {1: "2.5 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}


def sysfs_switch(uplink: tuple[int, int] = (5, 16), gpu: tuple[int, int] = (5, 16),
                 root_max: int = 5, vendor_root: str = "0x8086") -> dict:
    """A pci_devices tree as collect stores it: root port 00:01.0 -> switch upstream port
    01:00.0 -> downstream ports 02:00.0 / 02:01.0 -> GPU 03:00.0 and ConnectX-7 04:00.0,
    each device's own link naming its place (``uplink``, ``gpu``: generation, width)."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    chain = {"0000:00:01.0": [], "0000:01:00.0": ["0000:00:01.0"],
             "0000:02:00.0": ["0000:00:01.0", "0000:01:00.0"],
             "0000:02:01.0": ["0000:00:01.0", "0000:01:00.0"],
             "0000:03:00.0": ["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"],
             "0000:04:00.0": ["0000:00:01.0", "0000:01:00.0", "0000:02:01.0"]}
    ids = {"0000:00:01.0": (vendor_root, "0x352a", "0x060400"),
           "0000:01:00.0": ("0x1000", "0xc030", "0x060400"),
           "0000:02:00.0": ("0x1000", "0xc030", "0x060400"),
           "0000:02:01.0": ("0x1000", "0xc030", "0x060400"),
           "0000:03:00.0": ("0x10de", "0x2330", "0x030200"),
           "0000:04:00.0": ("0x15b3", "0x1021", "0x020700")}
    state = {"0000:00:01.0": uplink, "0000:01:00.0": uplink, "0000:02:00.0": gpu,
             "0000:03:00.0": gpu, "0000:02:01.0": (5, 16), "0000:04:00.0": (5, 16)}
    for addr, (vendor, device, cls) in ids.items():
        gen, width = state[addr]
        top = root_max if addr == "0000:00:01.0" else 5
        files.update({f"{addr}/vendor": f"{vendor}\n", f"{addr}/device": f"{device}\n",
                      f"{addr}/class": f"{cls}\n", f"{addr}/numa_node": "0\n",
                      f"{addr}/current_link_speed": GEN[gen] + "\n",
                      f"{addr}/max_link_speed": GEN[top] + "\n",
                      f"{addr}/current_link_width": f"{width}\n",
                      f"{addr}/max_link_width": "16\n"})
        links[addr] = "../../../devices/pci0000:00/" + "/".join([*chain[addr], addr])
    links["0000:03:00.0/driver"] = "../../../../bus/pci/drivers/nvidia"
    links["0000:04:00.0/driver"] = "../../../../bus/pci/drivers/mlx5_core"
    return {"files": files, "links": links, "errors": {}}


# the rule fires on these sources (the conformance checks run each case end to end)
RULE_CASES = {
    "pcie.path": [
        (_parts(GEN3), "pcie.hop-degraded"),
        ({"pci_devices": sysfs_switch(uplink=(3, 16))}, "pcie.hop-degraded"),
    ],
}
SOURCE_SAMPLES = {"lspci_tree": ("fixture:pci/switch-uplink-gen3-tree-and-vvv.txt",),
                  "pci_devices": ("fixture:pci/sysfs-switch-uplink-gen3.json",)}
# no real lspci -tv capture in ../shared/corpus yet: say what would be one
NO_SAMPLE_YET = {"lspci_tree": "lspci -tv of a GPU server with its PCIe switches"}


def _hop(result):
    found = [f for f in result.findings if f.id == "pcie.hop-degraded"]
    assert len(found) == 1, [(f.id, f.title) for f in result.findings]
    return found[0]


def _loud(result) -> list[tuple[str, str]]:
    return [(f.id, f.title) for f in result.findings
            if f.current and f.severity.rank >= Severity.WARNING.rank]


# --- lspci -tv -------------------------------------------------------------------------------

def test_the_tree_gives_each_function_its_bridge() -> None:
    nodes = {n.address: n for n in parse_lspci_tree(GEN3)}
    assert nodes[GPU0].parent == "0000:17:00.0" and nodes[GPU1].parent == "0000:17:01.0"
    assert nodes[NIC].parent == "0000:17:02.0"
    assert nodes["0000:17:00.0"].parent == USP and nodes[USP].parent == ROOT
    assert nodes[ROOT].parent is None and nodes[ROOT].secondary == "0000:16"
    assert nodes[ROOT].subordinate == "0000:1a"
    assert (nodes[GPU0].vendor, nodes[GPU0].device) == (0x10DE, 0x2330)
    assert nodes[GPU0].description.startswith("NVIDIA Corporation GH100")
    assert nodes["0000:00:1f.0"].parent is None  # the second root bus


def test_the_tree_without_names_single_children_and_quotes() -> None:
    text = ("> -+-[0000:80]---00.0-[81-82]----01.0-[82]--\n"
            "> \\-[0000:00]-+-00.0\n"
            ">             +-1d.0-[03-3b]----00.0-[04-3b]--+-00.0-[05]----00.0\n"
            ">             |                               \\-04.0-[21]----00.0\n"
            ">             \\-1f.0\n")
    nodes = {n.address: n for n in parse_lspci_tree(text)}
    assert nodes["0000:81:01.0"].parent == "0000:80:00.0"
    assert nodes["0000:05:00.0"].parent == "0000:04:00.0"
    assert nodes["0000:04:04.0"].parent == "0000:03:00.0"
    assert nodes["0000:21:00.0"].parent == "0000:04:04.0"
    assert nodes["0000:00:1f.0"].parent is None and nodes["0000:00:1f.0"].description == ""


def test_the_tree_parser_refuses_other_text_and_takes_empty() -> None:
    assert parse_lspci_tree("") == []
    with pytest.raises(ParseError):
        parse_lspci_tree("0000:18:00.0 3D controller: NVIDIA Corporation GH100\n")
    with pytest.raises(ParseError):
        parse_lspci_tree("-[ garbage ]-\n|||\n")


def test_the_detector_splits_the_tree_from_lspci_vvv() -> None:
    parts = _parts(GEN3)
    assert set(parts) == {"lspci_tree", "lspci_nvidia", "lspci_mellanox"}
    assert parts["lspci_tree"].count("\n") >= 6 and "LnkSta" not in parts["lspci_tree"]
    assert "0000:16:00.0 PCI bridge" in parts["lspci_nvidia"]  # the switch port is kept
    tree = GEN3[:GEN3.index("$ sudo lspci -vvv")]
    for command in ("lspci -nntv", "lspci -t -v", "sudo lspci -tv"):
        assert set(_parts(tree.replace("sudo lspci -tvnn", command))) == {"lspci_tree"}
    assert set(_parts(tree.replace("$ sudo lspci -tvnn\n", ""))) == {"lspci_tree"}


def test_collect_gathers_the_tree() -> None:
    spec = sources.BY_NAME["lspci_tree"]
    assert spec.kind == "command" and spec.argv[:2] == ("lspci", "-tv")


# --- lspci -vvv bridges and the sysfs tree ------------------------------------------------

def test_lspci_keeps_a_bridges_buses_and_port_type() -> None:
    fns = {f.address: f for f in parse_lspci(_vvv_only(GEN3))}
    root, usp = fns[ROOT], fns[USP]
    assert root.is_bridge and root.raw["express_type"] == "Root Port"
    assert (root.raw["secondary_bus"], root.raw["subordinate_bus"]) == ("16", "1a")
    assert usp.raw["express_type"] == "Upstream Port" and usp.link_speed_gts() == 8.0
    assert fns[GPU0].raw["express_type"] == "Endpoint" and "secondary_bus" not in fns[GPU0].raw


def test_sysfs_keeps_each_devices_place_in_the_tree() -> None:
    fns = {f.address: f for f in parse_pci_tree(sysfs_switch())}
    assert sysfs_parent(fns["0000:03:00.0"].raw["sysfs_path"]) == "0000:02:00.0"
    assert sysfs_parent(fns["0000:00:01.0"].raw["sysfs_path"]) is None
    assert sysfs_parent("../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0") == \
        "0000:00:01.0"
    assert sysfs_parent(None) is None and sysfs_parent("garbage") is None


def test_collect_keeps_the_ports_above_gpus_and_nics(tmp_path) -> None:
    """The sysfs reader follows each GPU's real path: its ports are kept with their links
    and the device link itself; a bridge above nothing wanted is left out."""
    devices = tmp_path / "sys" / "devices" / "pci0000:00"
    gpu = devices / "0000:00:01.0" / "0000:01:00.0"
    other = devices / "0000:00:1c.0" / "0000:05:00.0"
    attrs = {devices / "0000:00:01.0": ("0x8086", "0x060400"), gpu: ("0x10de", "0x030200"),
             devices / "0000:00:1c.0": ("0x8086", "0x060400"), other: ("0x8086", "0x010802")}
    for path, (vendor, cls) in attrs.items():
        path.mkdir(parents=True, exist_ok=True)
        (path / "vendor").write_text(vendor + "\n")
        (path / "class").write_text(cls + "\n")
        (path / "current_link_speed").write_text("32.0 GT/s PCIe\n")
    bus = tmp_path / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)
    for path in attrs:
        os.symlink(os.path.relpath(path, bus), bus / path.name)
    data, record = readers.read_tree(tmp_path, sources.BY_NAME["pci_devices"])
    assert data is not None and not record["truncated"]
    fns = {f.address: f for f in parse_pci_tree(json.loads(data))}
    assert set(fns) == {"0000:00:01.0", "0000:01:00.0"}
    assert sysfs_parent(fns["0000:01:00.0"].raw["sysfs_path"]) == "0000:00:01.0"
    assert fns["0000:00:01.0"].link_speed_gts() == 32.0


# --- the rule ------------------------------------------------------------------------------

def test_a_switch_uplink_at_gen3_is_one_finding_naming_the_hop() -> None:
    f = _hop(run(**_parts(GEN3)))
    assert f.severity is Severity.WARNING and f.action is Action.PLAN_REPAIR
    assert f.blame is Blame.NODE
    assert f"root port {ROOT} -> switch upstream port {USP}" in f.title
    assert "8 GT/s x16 where both ends support 32 GT/s x16" in f.title
    assert f.scope.pci_bus_id == USP
    assert {s.pci_bus_id for s in f.also} == {GPU0, GPU1, NIC}  # its blast radius
    lines = [ln for e in f.evidence for ln in e.lines]
    assert any("LnkSta:\tSpeed 8GT/s (downgraded)" in ln for ln in lines)
    assert any(ln.startswith("|") and "01.0-[16-1a]" in ln for ln in lines)
    assert f.step and "lspci -vv -s 0000:16:00.0" in f.step


def test_a_collected_sysfs_tree_names_the_hop_and_folds_the_kernel_note() -> None:
    tree = json.loads(fixture("sysfs-switch-uplink-gen3.json"))
    note = ("[    2.104512] pci 0000:03:00.0: 126.016 Gb/s available PCIe bandwidth, limited "
            "by 8.0 GT/s PCIe x16 link at 0000:01:00.0 (capable of 504.112 Gb/s with 32.0 "
            "GT/s PCIe x16 link)\n")
    f = _hop(run(pci_devices=tree, kernel_log=note))
    assert "root port 0000:00:01.0 -> switch upstream port 0000:01:00.0" in f.title
    assert {s.pci_bus_id for s in f.also} == {"0000:03:00.0", "0000:04:00.0"}
    assert [c.id for c in f.consequences] == ["kernel.pcie-bandwidth-limited"]


def test_the_same_paste_without_the_tree_rebuilds_the_path_from_bus_numbers() -> None:
    f = _hop(run(lspci_nvidia=_vvv_only(GEN3)))
    assert f"root port {ROOT} -> switch upstream port {USP}" in f.title


def test_a_x8_hop_is_a_finding() -> None:
    f = _hop(run(**_parts(X8)))
    assert "32 GT/s x8 where both ends support 32 GT/s x16" in f.title
    assert f.severity is Severity.WARNING and "50%" in f.explanation


def test_a_link_that_is_down_is_not_a_slow_hop() -> None:
    """A port whose link is down (x0) says nothing of the speed it would train at."""
    down = sysfs_switch(uplink=(1, 16))
    down["files"]["0000:00:01.0/current_link_width"] = "0\n"
    for key in [k for k in down["files"] if k.startswith("0000:01:00.0/current")]:
        del down["files"][key]
    assert not [f for f in run(pci_devices=down).findings if f.id == "pcie.hop-degraded"]


def test_a_healthy_switch_path_raises_nothing() -> None:
    result = run(**_parts(HEALTHY))
    assert not _loud(result) and exit_status(result) is ExitStatus.OK


def test_a_gen5_nic_behind_a_gen4_root_port_is_fine() -> None:
    """The lower end decides: a Gen5 NIC at Gen4 below a Gen4 root port is correct; the
    same NIC alone (no port above in the paste) is still judged by its own maximum."""
    nic = ("0000:3b:00.0 Infiniband controller [0207]: Mellanox Technologies MT2910 Family "
           "[ConnectX-7] [15b3:1021]\n"
           "\tCapabilities: [60] Express (v2) Endpoint, MSI 00\n"
           "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported\n"
           "\t\tLnkSta:\tSpeed 16GT/s (downgraded), Width x16 (ok)\n"
           "\tKernel driver in use: mlx5_core\n")
    root = ("0000:3a:02.0 PCI bridge [0604]: Advanced Micro Devices, Inc. [AMD] Starship/"
            "Matisse GPP Bridge [1022:1483] (prog-if 00 [Normal decode])\n"
            "\tBus: primary=3a, secondary=3b, subordinate=3b, sec-latency=0\n"
            "\tCapabilities: [58] Express (v2) Root Port (Slot+), MSI 00\n"
            "\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L1, Exit Latency L1 <64us\n"
            "\t\tLnkSta:\tSpeed 16GT/s (ok), Width x16 (ok)\n"
            "\tKernel driver in use: pcieport\n")
    assert not _loud(run(lspci_mellanox=root + nic))
    assert "pcie.speed-degraded" in {f.id for f in run(lspci_mellanox=nic).findings}


def test_a_gpu_behind_a_x8_root_port_is_a_placement_not_a_fault() -> None:
    tree = sysfs_switch(gpu=(5, 8))
    tree["files"]["0000:02:00.0/max_link_width"] = "8\n"
    result = run(pci_devices=tree)
    (f,) = [f for f in result.findings if f.id == "pcie.width-degraded"]
    assert f.severity is Severity.INFO and f.blame is Blame.CONFIG
    assert "switch downstream port 0000:02:00.0 above it has only x8" in f.title


def test_an_idle_gpu_at_gen1_stays_fine() -> None:
    """Below a healthy switch, an idle GPU's own Gen1 link is power saving, as before."""
    result = run(pci_devices=sysfs_switch(gpu=(1, 16)),
                 nvidia_smi_q=smi_q([{"bus": "0000:03:00.0", "gen": 1, "pstate": "P8"}]))
    assert not _loud(result)
    assert not [f for f in result.findings if f.id == "pcie.hop-degraded"]


def test_a_gen1_uplink_above_idle_gpus_only_is_worth_knowing() -> None:
    tree = sysfs_switch(uplink=(1, 16))
    for key in [k for k in tree["files"] if k.startswith("0000:04:00.0")]:
        del tree["files"][key]  # no NIC on this switch
    tree["links"].pop("0000:04:00.0")
    f = _hop(run(pci_devices=tree, nvidia_smi_q=smi_q([{"bus": "0000:03:00.0", "gen": 1,
                                                         "pstate": "P8"}])))
    assert f.severity is Severity.INFO and f.action is Action.NONE


def test_a_starved_uplink_under_a_busy_gpu_drains() -> None:
    f = _hop(run(pci_devices=sysfs_switch(uplink=(1, 16)),
                 nvidia_smi_q=smi_q([{"bus": "0000:03:00.0", "util": 97}])))
    assert f.severity is Severity.CRITICAL and f.action is Action.DRAIN_AND_REPAIR


def test_the_devices_own_slow_links_fold_under_the_hop() -> None:
    """A switch whose uplink and GPU link both trained down is one fault of the path."""
    result = run(pci_devices=sysfs_switch(uplink=(3, 16), gpu=(3, 16)),
                 nvidia_smi_q=smi_q([{"bus": "0000:03:00.0", "gen": 3, "util": 90}]))
    f = _hop(result)
    assert [c.id for c in f.consequences] == ["pcie.speed-degraded"]
    assert not [x for x in result.findings if x.id == "pcie.speed-degraded"]


def test_inside_a_vm_the_hop_is_only_worth_knowing() -> None:
    f = _hop(run(pci_devices=sysfs_switch(uplink=(3, 16), vendor_root="0x1b36")))
    assert f.severity is Severity.INFO and f.blame is Blame.UNKNOWN


def test_a_tree_alone_says_what_it_cannot_tell() -> None:
    tree = GEN3[:GEN3.index("$ sudo lspci -vvv")]
    result = run(lspci_tree=tree)
    assert not _loud(result)
    (skip,) = [s for s in result.skipped if s.rule == "pcie.path"]
    assert "not the state of its links" in skip.reason


def test_corpus_lspci_captures_keep_their_verdicts(corpus) -> None:
    """No hop finding on the real lspci captures: none holds a degraded port pair."""
    for sample in corpus.category("7"):
        found = dict(detect(sample.text()))
        if not {"lspci_nvidia", "lspci_mellanox"} & set(found):
            continue
        result = run(**found)
        assert not [f for f in result.findings if f.id == "pcie.hop-degraded"], sample.name


def test_every_hop_case_is_consistent_and_names_its_source() -> None:
    from gputriage.vocabulary import inconsistency
    for row in csv_rows("pcie_hops.csv"):
        case = hop_case(row["case"])
        assert not inconsistency(case.severity, case.action, case.blame), case.case
        assert len(case.source.split()) >= 3 and case.meaning, case.case
    assert hop_case("starved").share_at_most == 0.125
