"""numactl --hardware, lscpu NUMA lines and sysfs node cpulists."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.numactl import (
    format_cpulist,
    parse_cpulist,
    parse_lscpu,
    parse_numactl,
    parse_sysfs_nodes,
)

TWO_SOCKETS = """\
available: 2 nodes (0-1)
node 0 cpus: 0 1 2 3 8 9 10 11
node 0 size: 515743 MB
node 0 free: 498120 MB
node 1 cpus: 4 5 6 7 12 13 14 15
node 1 size: 516061 MB
node 1 free: 501337 MB
node distances:
node   0   1
  0:  10  21
  1:  21  10
"""


def test_power9_gpu_memory_nodes_are_not_sockets(corpus):
    hw = parse_numactl(corpus.sample("legion1338").text())
    assert hw.source == "numactl"
    assert hw.declared_nodes == 6
    assert sorted(hw.nodes) == [0, 8, 252, 253, 254, 255]
    assert hw.cpu_nodes == [0, 8]
    assert hw.nodes[0].cpus == tuple(range(64)) and hw.nodes[0].cpulist == "0-63"
    assert hw.nodes[8].cpulist == "64-127"
    assert hw.nodes[8].size_mb == 261747 and hw.nodes[8].free_mb == 213069
    assert all(hw.nodes[n].cpus == () and hw.nodes[n].size_mb == 16128 for n in range(252, 256))
    assert hw.distances[(0, 8)] == 40 and hw.distances[(252, 0)] == 80
    assert hw.distances[(255, 255)] == 10 and len(hw.distances) == 36
    assert hw.multi_node


def test_gh200_lscpu_nine_nodes_one_with_cpus(corpus):
    hw = parse_numactl(corpus.sample("xpuperf129").text())
    assert hw.source == "lscpu"
    assert hw.declared_nodes == 9 and hw.node_count == 9
    assert hw.cpu_nodes == [0] and hw.nodes[0].cpus == tuple(range(72))
    assert sorted(hw.nodes) == list(range(9))
    assert not hw.multi_node


def test_lscpu_without_numa_section_gives_sockets(corpus):
    hw = parse_numactl(corpus.sample("talos9121").text())
    assert hw.source == "lscpu" and hw.sockets == 2 and hw.nodes == {}
    assert hw.multi_node


def test_two_socket_numactl():
    hw = parse_numactl(TWO_SOCKETS)
    assert hw.cpu_nodes == [0, 1]
    assert hw.nodes[1].cpulist == "4-7,12-15"
    assert hw.distances == {(0, 0): 10, (0, 1): 21, (1, 0): 21, (1, 1): 10}
    assert hw.lines[0] == "available: 2 nodes (0-1)"


def test_lscpu_lines_directly():
    hw = parse_lscpu("NUMA node(s):  2\nNUMA node0 CPU(s):   0-47,96-143\n"
                     "NUMA node1 CPU(s):   48-95,144-191\nSocket(s): 2\n")
    assert hw.cpu_nodes == [0, 1] and len(hw.nodes[1].cpus) == 96 and hw.sockets == 2


def test_no_numa_and_empty_and_malformed():
    hw = parse_numactl("No NUMA available on this system\n")
    assert hw.available is False and not hw.multi_node
    assert parse_numactl("").is_empty() and parse_numactl(" \n").nodes == {}
    assert parse_lscpu("").is_empty()
    with pytest.raises(ParseError):
        parse_numactl("Linux host 6.8.0 x86_64 GNU/Linux\n")
    with pytest.raises(ParseError):
        parse_lscpu("no such thing")


def test_sysfs_cpulists():
    tree = {"files": {"node0/cpulist": "0-15\n", "node1/cpulist": "16-31\n",
                      "node0/hugepages/hugepages-2048kB/nr_hugepages": "0\n"}, "links": {}}
    hw = parse_sysfs_nodes(tree)
    assert hw.source == "sysfs" and hw.cpu_nodes == [0, 1] and hw.multi_node
    assert parse_sysfs_nodes({}).nodes == {}
    with pytest.raises(ParseError):
        parse_sysfs_nodes(["not", "a", "tree"])


def test_cpulist_helpers():
    assert parse_cpulist("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist("0 1 2") == (0, 1, 2)
    assert parse_cpulist("5-1,x,999999999") == ()
    assert format_cpulist((0, 1, 2, 3, 8, 10, 11)) == "0-3,8,10-11"
    assert format_cpulist(()) == ""


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("availbe: nodes()0123456789-,cpusizfrMB\nNUMA"
                                             "CPU(s)Socket")), max_size=300)
       | st.text(max_size=300))
def test_arbitrary_text_gives_result_or_parse_error(text):
    for parser in (parse_numactl, parse_lscpu):
        with contextlib.suppress(ParseError):
            parser(text)
