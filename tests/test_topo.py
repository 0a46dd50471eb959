"""nvidia-smi topo -m / topo -p2p parser: real captures cell by cell, hand-written
shapes, and arbitrary text."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.topo import UNKNOWN_DISTANCE, distance, nvlink_count, parse_topo


def _check_cells(matrix, expected) -> None:
    """Every cell of the matrix equals ``expected(row, column)``."""
    for a in matrix.devices:
        for b in matrix.devices:
            assert matrix.links.get((a, b)) == expected(a, b), (a, b)


def _num(device: str) -> int:
    return int(device[3:])


# -- real captures, cell by cell -------------------------------------------------------

def test_every_topology_sample_parses(corpus):
    samples = corpus.category("3")
    assert samples
    for s in samples:
        m = parse_topo(s.text())
        assert m.gpus and m.links, s.name
        assert all(m.links[(g, g)] == "X" for g in m.gpus), s.name


def test_dgx_a100_nv12_ten_nics_tab_separated(corpus):
    m = parse_topo(corpus.sample("oyanghd-dgx-a100").text())
    assert m.kind == "matrix"
    assert m.gpus == [f"GPU{i}" for i in range(8)]
    assert m.nics == [f"NIC{i}" for i in range(10)]
    assert m.nic_names == {f"NIC{i}": f"mlx5_{i}" for i in range(10)}
    assert m.columns == ["CPU Affinity", "NUMA Affinity"]

    def expected(a: str, b: str) -> str:
        if a == b:
            return "X"
        ga, gb = a.startswith("GPU"), b.startswith("GPU")
        if ga and gb:
            return "NV12"
        if ga or gb:  # GPU pair k shares NICs 2k and 2k+1 behind a PCIe switch
            gpu, nic = (a, b) if ga else (b, a)
            return "PXB" if _num(gpu) // 2 == _num(nic) // 2 and _num(nic) < 8 else "SYS"
        if {_num(a), _num(b)} == {8, 9}:
            return "PIX"
        return "PXB" if _num(a) // 2 == _num(b) // 2 else "SYS"

    _check_cells(m, expected)
    cpus = {0: "48-63,176-191", 1: "16-31,144-159", 2: "112-127,240-255", 3: "80-95,208-223"}
    numa = {0: "3", 1: "1", 2: "7", 3: "5"}
    for g in m.gpus:
        assert m.cpu_affinity[g] == cpus[_num(g) // 2]
        assert m.numa_affinity[g] == numa[_num(g) // 2]
    assert not any(n in m.cpu_affinity for n in m.nics)  # NIC rows have empty cells
    assert m.gpu_numa_id == {}


def test_hgx_h100_pix_nic_per_gpu_space_aligned_after_other_text(corpus):
    m = parse_topo(corpus.sample("sglang30401").text())
    assert m.gpus == [f"GPU{i}" for i in range(8)]
    assert m.nic_names == {f"NIC{i}": f"mlx5_{i}" for i in range(8)}

    def expected(a: str, b: str) -> str:
        if a == b:
            return "X"
        if a.startswith("GPU") and b.startswith("GPU"):
            return "NV18"
        if a.startswith("GPU") != b.startswith("GPU") and _num(a) == _num(b):
            return "PIX"
        return "NODE" if _num(a) // 4 == _num(b) // 4 else "SYS"

    _check_cells(m, expected)
    for g in m.gpus:
        half = _num(g) // 4
        assert m.cpu_affinity[g] == ("0-47,96-143", "48-95,144-191")[half]
        assert m.numa_affinity[g] == str(half)
        assert m.gpu_numa_id[g] == "N/A"
    assert "PIX" in m.legend and "NV#" in m.legend


def test_b300_seven_gpus_nv18_without_nic_columns(corpus):
    m = parse_topo(corpus.sample("xe9780-b300-7gpu-nv18").text())
    assert m.devices == [f"GPU{i}" for i in range(7)]
    assert m.nics == [] and m.nic_names == {}
    _check_cells(m, lambda a, b: "X" if a == b else "NV18")
    for g in m.gpus:
        socket = 0 if _num(g) < 3 else 1
        assert m.cpu_affinity[g] == ("0,2,4,6,8,10", "1,3,5,7,9,11")[socket]
        assert m.numa_affinity[g] == str(socket)
        assert m.gpu_numa_id[g] == "N/A"


def test_partial_nvlink_minimal_matrix(corpus):
    m = parse_topo(corpus.sample("nccl-tp-readme-vastai-4xa100-partial").text())
    pairs = {frozenset({"GPU0", "GPU1"}): "NV12", frozenset({"GPU2", "GPU3"}): "NV10"}
    _check_cells(m, lambda a, b: "X" if a == b else pairs.get(frozenset({a, b}), "NODE"))
    assert m.columns == [] and m.cpu_affinity == {}


def test_gb200_tray_legend_cut(corpus):
    m = parse_topo(corpus.sample("k8stestinfra371-gb200").text())
    _check_cells(m, lambda a, b: "X" if a == b else "NV18")
    assert [m.numa_affinity[g] for g in m.gpus] == ["0", "0", "1", "1"]
    assert m.cpu_affinity["GPU3"] == "72-143"
    assert set(m.legend) == {"X", "SYS"}


def test_trimmed_numa_header(corpus):
    m = parse_topo(corpus.sample("sm120-6gpu").text())
    assert m.columns == ["CPU Affinity", "NUMA Affinity"]
    assert m.link("GPU0", "GPU1") == "PIX" and m.link("GPU1", "GPU4") == "SYS"
    assert m.numa_affinity["GPU5"] == "1"


def test_p2p_read_matrix_all_ok(corpus):
    m = parse_topo(corpus.sample("topo-p2p-r-all-ok").text())
    assert m.kind == "p2p"
    assert m.gpus == [f"GPU{i}" for i in range(8)]
    _check_cells(m, lambda a, b: "X" if a == b else "OK")
    assert {"OK", "CNS", "GNS", "TNS", "NS", "U"} <= set(m.legend)


# -- hand-written shapes ------------------------------------------------------------

OLD_DRIVER = """\
\tGPU0\tGPU1\tmlx5_0\tCPU Affinity
GPU0\t X \tSOC\tPHB\t0-11
GPU1\tSOC\t X \tSOC\t12-23
mlx5_0\tPHB\tSOC\t X \t

Legend:

  X   = Self
  SOC  = Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)
"""

QUOTED_TABS = """\
> \tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
> GPU0\t X \tPHB\tSYS\t0-63\t0\t\tN/A
> GPU1\tPHB\t X \tPIX\t64-127\t1\t\tN/A
> NIC0\tSYS\tPIX\t X \t\t\t
>
> NIC Legend:
>
>   NIC0: mlx5_bond_0
"""

P2P_MIXED = """\
 \tGPU0\tGPU1\t
 GPU0\tX\tGNS\t
 GPU1\tCNS\tX\t

Legend:

  X    = Self
  OK   = Status Ok
  GNS  = GPU not supported
"""


def test_older_driver_names_hca_columns_and_soc():
    m = parse_topo(OLD_DRIVER)
    assert m.devices == ["GPU0", "GPU1", "mlx5_0"]
    assert m.nics == ["mlx5_0"] and m.nic_name("mlx5_0") == "mlx5_0"
    assert m.link("GPU0", "mlx5_0") == "PHB" and m.link("GPU1", "GPU0") == "SOC"
    assert distance("SOC") == distance("SYS")
    assert m.cpu_affinity == {"GPU0": "0-11", "GPU1": "12-23"}


def test_markdown_quote_and_empty_cell_before_gpu_numa_id():
    m = parse_topo(QUOTED_TABS)
    assert m.numa_affinity == {"GPU0": "0", "GPU1": "1"}
    assert m.gpu_numa_id == {"GPU0": "N/A", "GPU1": "N/A"}
    assert m.nic_names == {"NIC0": "mlx5_bond_0"}
    assert m.link("GPU1", "NIC0") == "PIX"
    assert m.rows["GPU0"].startswith("GPU0")


def test_p2p_failure_codes():
    m = parse_topo(P2P_MIXED)
    assert m.kind == "p2p"
    assert m.links[("GPU0", "GPU1")] == "GNS" and m.links[("GPU1", "GPU0")] == "CNS"


def test_single_gpu_and_cut_rows():
    single = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7\tN/A\n"
    m = parse_topo(single)
    assert m.devices == ["GPU0"] and m.numa_affinity == {"GPU0": "N/A"}
    cut = "        GPU0    GPU1    GPU2\nGPU0     X      NV4     NV4\n"
    m = parse_topo(cut)
    assert list(m.rows) == ["GPU0"] and m.link("GPU2", "GPU0") == "NV4"
    # a second header whose rows the paste lost does not cost the matrix above it
    m = parse_topo(single + "\n\tGPU0\tCPU Affinity\tNUMA Affinity\n")
    assert m.devices == ["GPU0"] and m.p2p is None


def test_empty_and_malformed():
    assert parse_topo("").is_empty()
    assert parse_topo("  \n\t\n").devices == []
    for text in ("NVIDIA-SMI has failed because it couldn't communicate with the driver",
                 "hello world", "        GPU0    GPU1\n\n"):
        with pytest.raises(ParseError):
            parse_topo(text)


def test_distance_ranking():
    order = ["X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"]
    assert [distance(c) for c in order] == sorted(distance(c) for c in order)
    assert len({distance(c) for c in order}) == len(order)
    assert distance("NV4") == distance("NV18")
    assert distance("N/A") == distance(None) == distance("OK") == UNKNOWN_DISTANCE
    assert nvlink_count("NV12") == 12 and nvlink_count("PIX") is None


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("GPUNIC0123 \tX\n>:=SYOKPHBNODEmlx5_-")),
               max_size=300) | st.text(max_size=300))
def test_arbitrary_text_gives_result_or_parse_error(text):
    with contextlib.suppress(ParseError):
        parse_topo(text)
