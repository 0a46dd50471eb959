"""Topology and NUMA rules on small simulated hosts and on the real topology captures."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hostkit import ids, nvml_doc, pci_tree, run

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_text
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.topo import parse_topo

BUSES = ["0000:18:00.0", "0000:2a:00.0", "0000:9a:00.0", "0000:ab:00.0"]
NIC_BUSES = ("0000:19:00.0", "0000:2b:00.0")


def topo(gpus: int, nics: int, cell: Callable[[str, str], str],
         cpus: tuple[str, str] = ("0-31", "32-63")) -> str:
    """A tab-separated ``nvidia-smi topo -m`` with the GPUs split over two sockets."""
    names = [f"GPU{i}" for i in range(gpus)] + [f"NIC{i}" for i in range(nics)]
    out = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for a in names:
        cells = [" X " if a == b else cell(a, b) for b in names]
        tail = ""
        if a.startswith("GPU"):
            socket = int(a[3:]) * 2 // gpus
            tail = f"\t{cpus[socket]}\t{socket}\t\tN/A"
        out.append(f"{a}\t" + "\t".join(cells) + tail)
    out += ["", "Legend:", "", "  X    = Self", "", "NIC Legend:", ""]
    out += [f"  NIC{i}: mlx5_{i}" for i in range(nics)]
    return "\n".join(out) + "\n"


def _socket(dev: str, gpus: int = 4) -> int:
    return int(dev[3:]) * 2 // gpus


def _rails(moved: int | None = None) -> Callable[[str, str], str]:
    """A rail-per-GPU host: GPUi and NICi behind one PCIe switch; NIC ``moved``
    sits behind the other socket instead."""

    def socket(dev: str) -> int:
        s = _socket(dev)
        return 1 - s if dev == f"NIC{moved}" else s

    def cell(a: str, b: str) -> str:
        if a.startswith("GPU") and b.startswith("GPU"):
            return "NV18"
        if a[:3] != b[:3] and a[3:] == b[3:] and moved != int(a[3:]):
            return "PIX"
        return "NODE" if socket(a) == socket(b) else "SYS"

    return cell


def _nics_on_socket0(a: str, b: str) -> str:
    if a.startswith("GPU") and b.startswith("GPU"):
        return "NV18"
    side = [0 if d.startswith("NIC") else _socket(d) for d in (a, b)]
    return "NODE" if side[0] == side[1] else "SYS"


TOPO_FAR = topo(4, 4, _rails(moved=0))
TOPO_GOOD = topo(4, 4, _rails())
TOPO_TWO_NICS = topo(4, 2, _nics_on_socket0)
TOPO_NO_NIC = topo(4, 0, lambda a, b: "NV18")
TOPO_ALL_SYS = topo(4, 2, lambda a, b: "SYS")
# GPU3 trained 16 of its 18 links: every cell of its row and column reads NV16
TOPO_UNEVEN = topo(4, 0, lambda a, b: "NV16" if "GPU3" in (a, b) else "NV18")
# P2P read across the sockets is refused by the chipset
TOPO_P2P_CNS = topo(4, 0, lambda a, b: "OK" if _socket(a) == _socket(b) else "CNS")
# a hybrid cube mesh (DGX-1): pairs differ, but every GPU has 6 links
TOPO_CUBE = topo(4, 0, lambda a, b: "NV1" if {a, b} in ({"GPU0", "GPU1"}, {"GPU2", "GPU3"})
                 else ("NV2" if {a, b} in ({"GPU0", "GPU2"}, {"GPU1", "GPU3"}) else "NV3"))

TWO_NODES = """\
available: 2 nodes (0-1)
node 0 cpus: 0 1 2 3
node 0 size: 64000 MB
node 0 free: 60000 MB
node 1 cpus: 4 5 6 7
node 1 size: 64000 MB
node 1 free: 60000 MB
node distances:
node   0   1
  0:  10  21
  1:  21  10
"""
ONE_NODE = "available: 1 nodes (0)\nnode 0 cpus: 0 1 2 3\nnode 0 size: 64000 MB\n"


def unknown_numa_tree(*addresses: str) -> dict:
    tree = pci_tree(dict.fromkeys(BUSES, "nvidia"), nics=NIC_BUSES)
    for addr in addresses:
        tree["files"][f"{addr}/numa_node"] = "-1\n"
    return tree


GPU_HOST = {"pci_devices": pci_tree(dict.fromkeys(BUSES, "nvidia"), nics=NIC_BUSES)}

RULE_CASES = {
    "topology.map": [({"nvidia_smi_topo": TOPO_GOOD}, "topology.map"),
                     ({"nvidia_smi_topo": TOPO_NO_NIC}, "topology.map")],
    "topology.nic-far": [({"nvidia_smi_topo": TOPO_FAR}, "topology.nic-far")],
    "topology.nvlink-uneven": [({"nvidia_smi_topo": TOPO_UNEVEN}, "topology.nvlink-uneven")],
    "topology.p2p": [({"nvidia_smi_topo": TOPO_P2P_CNS}, "topology.p2p")],
    "topology.numa-unknown": [
        ({"pci_devices": unknown_numa_tree(BUSES[2]), "numactl": TWO_NODES},
         "topology.numa-unknown"),
        ({"pci_devices": unknown_numa_tree(NIC_BUSES[0]), "nvidia_smi_topo": TOPO_GOOD},
         "topology.numa-unknown"),
    ],
    "topology.numa-balancing": [
        ({**GPU_HOST, "numa_balancing": "1\n"}, "topology.numa-balancing"),
        ({**GPU_HOST, "numa_balancing": "1\n", "numactl": TWO_NODES},
         "topology.numa-balancing"),
    ],
    "topology.numa-layout": [({"numactl": TWO_NODES}, "topology.numa-layout")],
}

# a Grace Hopper superchip: the Grace CPUs' node, the H100's memory as a CPU-less node,
# and empty nodes reserved for GPU memory partitions, 255 between the CPU-less ones
GH200 = ("available: 4 nodes (0-3)\nnode 0 cpus: " + " ".join(map(str, range(72)))
         + "\nnode 0 size: 490029 MB\nnode 0 free: 463853 MB\nnode 1 cpus:\n"
         "node 1 size: 97280 MB\nnode 1 free: 97279 MB\nnode 2 cpus:\nnode 2 size: 0 MB\n"
         "node 2 free: 0 MB\nnode 3 cpus:\nnode 3 size: 0 MB\nnode 3 free: 0 MB\n"
         "node distances:\nnode   0   1   2   3\n  0:  10  80  80  80\n"
         "  1:  80  10  255  255\n  2:  80  255  10  255\n  3:  80  255  255  10\n")
EPYC_NPS1 = TWO_NODES.replace("21", "32").replace("0 1 2 3", "0-15 (16)").replace(
    "4 5 6 7", "16-31 (16)")

def _topology(result) -> list:
    return [f for f in result.findings if f.id.startswith("topology.")]


def _by_id(result, fid: str) -> list:
    return [f for f in result.findings if f.id == fid]


# -- topology.nic-far ------------------------------------------------------------------

def test_nic_far_names_the_gpu_its_rail_nic_and_the_closer_one():
    result = run(nvidia_smi_topo=TOPO_FAR, nvml=nvml_doc(BUSES))
    [f] = _by_id(result, "topology.nic-far")
    assert f.scope.gpu_index == 0 and f.scope.pci_bus_id == BUSES[0]
    assert f.severity is Severity.WARNING and f.action is Action.FIX_CONFIG
    assert f.blame is Blame.CONFIG
    assert f.title == ("GPU0: its rail NIC NIC0 (mlx5_0) is across the CPU socket (SYS) "
                       "while mlx5_1 is NODE")
    lines = f.evidence[0].lines
    assert f.evidence[0].source == "nvidia_smi_topo"
    assert lines[0].startswith("\tGPU0") and lines[1].startswith("GPU0\t")
    assert lines[2].startswith("NIC0\t") and "NIC0: mlx5_0" in lines


@pytest.mark.parametrize("text", [TOPO_GOOD, TOPO_NO_NIC, TOPO_ALL_SYS, TOPO_TWO_NICS],
                         ids=["nic-per-gpu", "no-nic-columns", "flattened-all-sys",
                              "fewer-nics-than-gpus"])
def test_nic_far_silent(text):
    assert "topology.nic-far" not in ids(run(nvidia_smi_topo=text))


# -- topology.map ------------------------------------------------------------------------

def test_map_lists_each_gpu_nic_and_numa_node():
    result = run(nvidia_smi_topo=TOPO_GOOD, pci_devices=GPU_HOST["pci_devices"])
    [f] = _by_id(result, "topology.map")
    assert f.severity is Severity.INFO and f.action is Action.NONE
    assert "4 GPU(s), 4 NIC(s), 2 NUMA node(s)" in f.title
    lines = f.evidence[0].lines
    assert lines[0] == f"GPU0 [{BUSES[0]}]: NUMA 0, CPUs 0-31; nearest NIC mlx5_0 (PIX)"
    assert lines[3].startswith(f"GPU3 [{BUSES[3]}]: NUMA 1") and "mlx5_3 (PIX)" in lines[3]
    assert lines[-1] == "GPU-GPU links: NV18 x6"


def test_map_says_partial_nvlink_and_differing_link_counts():
    pairs = {frozenset({"GPU0", "GPU1"}): "NV12", frozenset({"GPU2", "GPU3"}): "NV10"}
    text = topo(4, 0, lambda a, b: pairs.get(frozenset({a, b}), "NODE"))
    [f] = _by_id(run(nvidia_smi_topo=text), "topology.map")
    assert "NV12 x1, NV10 x1, NODE x4" in f.title
    assert "Only some GPU pairs" in f.explanation and "NV12, NV10" in f.explanation
    assert "NVLink pairs: GPU0-GPU1 NV12, GPU2-GPU3 NV10" in f.evidence[0].lines


def test_p2p_matrix_gives_only_its_p2p_verdict():
    text = "\tGPU0\tGPU1\nGPU0\tX\tOK\nGPU1\tOK\tX\n"
    assert [f.id for f in _topology(run(nvidia_smi_topo=text))] == ["topology.p2p"]


# -- topology.numa-unknown --------------------------------------------------------------

def test_numa_unknown_only_on_multi_node_hosts_and_only_for_minus_one():
    tree = unknown_numa_tree(BUSES[1], NIC_BUSES[1])
    result = run(pci_devices=tree, numactl=TWO_NODES)
    found = _by_id(result, "topology.numa-unknown")
    assert [f.scope.kind for f in found] == ["gpu", "nic"]
    assert found[0].scope.pci_bus_id == BUSES[1]
    assert found[1].scope.pci_bus_id == NIC_BUSES[1] and "mlx5_core" in found[1].title
    assert found[0].evidence[0].lines == (f"{BUSES[1]}/numa_node: -1",)
    assert any(e.source == "numactl" for e in found[0].evidence)
    assert not _by_id(run(pci_devices=tree, numactl=ONE_NODE), "topology.numa-unknown")
    single_socket_topo = topo(4, 0, lambda a, b: "NODE", cpus=("0-31", "0-31"))
    single = single_socket_topo.replace("\t1\t\tN/A", "\t0\t\tN/A")
    assert not _by_id(run(pci_devices=tree, nvidia_smi_topo=single), "topology.numa-unknown")
    assert not _by_id(run(**GPU_HOST, numactl=TWO_NODES), "topology.numa-unknown")


def test_numa_unknown_skipped_without_any_numa_source():
    result = run(pci_devices=unknown_numa_tree(BUSES[0]))
    assert any(s.rule == "topology.numa-unknown" for s in result.skipped)


def test_numa_from_sysfs_cpulists_when_numactl_is_absent():
    nodes = {"files": {"node0/cpulist": "0-15\n", "node1/cpulist": "16-31\n"}, "links": {}}
    result = run(pci_devices=unknown_numa_tree(BUSES[0]), hugepages_per_node=nodes)
    [f] = _by_id(result, "topology.numa-unknown")
    assert any(e.source == "hugepages_per_node" for e in f.evidence)


def test_numa_unknown_with_real_power9_numactl(corpus):
    text = corpus.sample("legion1338").text()
    assert _by_id(run(pci_devices=unknown_numa_tree(BUSES[0]), numactl=text),
                  "topology.numa-unknown")


def test_gh200_lscpu_is_single_node_for_cpus(corpus):
    text = corpus.sample("xpuperf129").text()
    assert not _by_id(run(pci_devices=unknown_numa_tree(BUSES[0]), numactl=text),
                      "topology.numa-unknown")


# -- topology.numa-balancing ---------------------------------------------------------------

def test_numa_balancing_evidence_and_silences():
    [f] = _by_id(run(**GPU_HOST, numa_balancing="1\n"), "topology.numa-balancing")
    assert f.severity is Severity.WARNING and f.action is Action.FIX_CONFIG
    assert f.evidence[0].source == "numa_balancing"
    assert f.evidence[0].lines == ("kernel.numa_balancing = 1",)
    assert not _by_id(run(**GPU_HOST, numa_balancing="0\n"), "topology.numa-balancing")
    assert not _by_id(run(**GPU_HOST, numa_balancing="1\n", numactl=ONE_NODE),
                      "topology.numa-balancing")
    no_gpus = {"pci_devices": pci_tree({}, nics=NIC_BUSES), "numa_balancing": "1\n"}
    assert not _by_id(run(**no_gpus), "topology.numa-balancing")


def test_numa_balancing_with_gpus_only_in_topology():
    result = run(nvidia_smi_topo=TOPO_GOOD, numa_balancing="1\n")
    assert _by_id(result, "topology.numa-balancing")


def test_malformed_numa_balancing_is_reported_not_raised():
    result = run(**GPU_HOST, numa_balancing="always\n")
    assert not _by_id(result, "topology.numa-balancing")
    assert any("numa_balancing" in p for p in result.unreadable)


# -- topology.numa-layout ---------------------------------------------------------------------

@pytest.mark.parametrize(("text", "says"), [
    (GH200, "1 node(s) with CPUs (0: CPUs 0-71, 479 GB); 3 without CPUs (1: 95 GB)"),
    (EPYC_NPS1, "2 node(s) with CPUs (0: CPUs 0-15, 62 GB; 1: CPUs 16-31, 62 GB)"),
])
def test_numa_layout_of_a_lone_numactl_is_information(text, says):
    result = run(numactl=text)
    [f] = _by_id(result, "topology.numa-layout")
    assert f.severity is Severity.INFO and says in f.title
    assert not [x for x in result.findings if x.severity.rank >= Severity.WARNING.rank]


def test_numa_layout_leaves_a_hosts_report_to_the_topology_map():
    assert not _by_id(run(numactl=TWO_NODES, nvidia_smi_topo=TOPO_GOOD), "topology.numa-layout")
    assert not _by_id(run(numactl=TWO_NODES, **GPU_HOST), "topology.numa-layout")


# -- topology.nvlink-uneven ----------------------------------------------------------------

def test_gpu_with_fewer_nvlinks_than_its_peers():
    [f] = _by_id(run(nvidia_smi_topo=TOPO_UNEVEN), "topology.nvlink-uneven")
    assert f.title == "GPU3 (48): fewer NVLink links than GPU0, GPU1, GPU2 (52)"
    assert f.severity is Severity.WARNING and f.blame is Blame.NODE


def test_pairs_that_differ_by_design_keep_equal_totals():
    assert not _by_id(run(nvidia_smi_topo=TOPO_CUBE), "topology.nvlink-uneven")
    assert not _by_id(run(nvidia_smi_topo=TOPO_GOOD), "topology.nvlink-uneven")
    assert not _by_id(run(nvidia_smi_topo=TOPO_ALL_SYS), "topology.nvlink-uneven")


# -- topology.p2p --------------------------------------------------------------------------

def test_p2p_matrix_names_the_pairs_without_peer_access():
    [f] = _by_id(run(nvidia_smi_topo=TOPO_P2P_CNS), "topology.p2p")
    assert f.title == ("peer-to-peer unavailable for 4 of 6 GPU pairs: "
                       "CNS (chipset not supported) x4")
    assert f.severity is Severity.WARNING and f.blame is Blame.CONFIG
    ok = _by_id(run(nvidia_smi_topo=topo(4, 0, lambda a, b: "OK")), "topology.p2p")
    assert [f.severity for f in ok] == [Severity.INFO]
    assert not _by_id(run(nvidia_smi_topo=TOPO_GOOD), "topology.p2p")


P2P_LEGEND = ("\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"
              "  GNS  = GPU not supported\n")


@pytest.mark.parametrize("gpus", [2, 4])
def test_gns_is_the_gpus_own_answer_not_a_platform_fault(gpus):
    # GeForce / workstation cards without PCIe peer-to-peer: by design, nothing to fix
    p2p = topo(gpus, 0, lambda a, b: "GNS").split("\n\nLegend")[0] + P2P_LEGEND
    [f] = _by_id(run(nvidia_smi_topo=p2p), "topology.p2p")
    assert f.severity is Severity.INFO and f.action is Action.NONE and "GNS" in f.title


def test_gns_beside_a_platform_code_still_warns_for_the_platform():
    p2p = topo(4, 0, lambda a, b: "CNS" if "GPU3" in (a, b) else "GNS")
    [f] = _by_id(run(nvidia_smi_topo=p2p), "topology.p2p")
    assert f.severity is Severity.WARNING and "CNS" in f.title


@pytest.mark.parametrize("order", ["topo first", "p2p first"])
def test_topo_and_p2p_matrices_pasted_together_are_both_read(order):
    matrix = topo(2, 0, lambda a, b: "PHB")
    p2p = "\tGPU0\tGPU1\t\nGPU0\tX\tGNS\t\nGPU1\tGNS\tX\t\n" + P2P_LEGEND
    text = matrix + "\n" + p2p if order == "topo first" else p2p + "\n" + matrix
    result = run(nvidia_smi_topo=text)
    assert [f.id for f in _topology(result)] == ["topology.map", "topology.p2p"]
    assert all(f.severity is Severity.INFO for f in _topology(result))
    assert "topo -p2p" not in _by_id(result, "topology.map")[0].explanation


def test_map_says_what_a_pcie_matrix_cannot_tell():
    [f] = _by_id(run(nvidia_smi_topo=topo(4, 0, lambda a, b: "PXB")), "topology.map")
    assert "ACSCtl" in f.explanation and "topo -p2p" in f.explanation
    [f] = _by_id(run(nvidia_smi_topo=topo(2, 0, lambda a, b: "NV3")), "topology.map")
    assert "nvlink -s" in f.explanation and "ACSCtl" not in f.explanation


# -- pastes from a colour terminal ----------------------------------------------------------

def test_topo_paste_with_colour_escapes_reads_like_the_plain_one(corpus):
    plain = corpus.sample("sglang30401").text()
    coloured = "\x1b[1mGPU topology:\x1b[0m\n" + re.sub(
        r"\b(NV18|PIX|NODE|SYS|X)\b", lambda m: f"\x1b[1;32m{m.group(1)}\x1b[0m", plain)
    titles = [[(f.id, f.title) for f in analyze(load_text(text, "paste")).findings]
              for text in (plain, coloured)]
    assert titles[0] == titles[1]
    assert any(fid == "topology.map" for fid, _ in titles[1])


# -- real captures -------------------------------------------------------------------------

UNEVEN_NVLINK = "vastai-4xa100-partial-nvlink"  # GPU2/3 show NV10 where GPU0/1 show NV12


def test_topology_samples_raise_no_warning(corpus):
    for sample in corpus.category("3"):
        result = run(nvidia_smi_topo=sample.text())
        bad = [f for f in _topology(result) if f.severity.rank >= Severity.WARNING.rank]
        if UNEVEN_NVLINK in sample.name:
            assert [f.id for f in bad] == ["topology.nvlink-uneven"]
            continue
        assert not bad, (sample.name, [(f.id, f.title) for f in bad])
        if parse_topo(sample.text()).kind == "matrix":
            assert len(_by_id(result, "topology.map")) == 1, sample.name


def test_dgx_a100_map_pairs_each_gpu_with_two_pxb_nics(corpus):
    result = run(nvidia_smi_topo=corpus.sample("oyanghd-dgx-a100").text())
    [f] = _by_id(result, "topology.map")
    assert "8 GPU(s), 10 NIC(s), 4 NUMA node(s)" in f.title
    assert f.evidence[0].lines[0] == ("GPU0: NUMA 3, CPUs 48-63,176-191; nearest NIC "
                                      "mlx5_0, mlx5_1 (PXB)")


def test_partial_nvlink_sample_is_described(corpus):
    text = corpus.sample("nccl-tp-readme-vastai-4xa100-partial").text()
    [f] = _by_id(run(nvidia_smi_topo=text), "topology.map")
    assert "Only some GPU pairs" in f.explanation
