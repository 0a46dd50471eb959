"""Tests for gputriage.parsers.memory: /proc/meminfo and the sysfs hugepage trees
(hand-written fixtures)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.memory import (
    parse_hugepages,
    parse_hugepages_per_node,
    parse_meminfo,
    pool_size_kb,
)

MEMINFO = """MemTotal:       2113537420 kB
MemFree:        1987654321 kB
MemAvailable:   2001234567 kB
HugePages_Total:    1024
HugePages_Free:      900
HugePages_Rsvd:       12
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:         2097152 kB
DirectMap1G:    1234567 MB
"""


def test_meminfo_fields():
    info = parse_meminfo(MEMINFO)
    assert info.mem_total_kb == 2113537420
    assert (info.hugepages_total, info.hugepages_free, info.hugepages_rsvd,
            info.hugepages_surp) == (1024, 900, 12, 0)
    assert info.hugepagesize_kb == 2048 and info.hugetlb_kb == 2097152
    assert info.values["DirectMap1G"] == 1234567 * 1024
    assert info.lines["HugePages_Total"] == "HugePages_Total:    1024"


def test_meminfo_per_node_prefix_and_bad_lines():
    info = parse_meminfo("Node 1 MemTotal:  1000 kB\ngarbage line\nNode 1 HugePages_Total: 4\n")
    assert info.mem_total_kb == 1000 and info.hugepages_total == 4


def test_meminfo_active_file_key():
    assert parse_meminfo("Active(file):  12 kB\n").values["Active(file)"] == 12


def test_meminfo_empty_and_foreign():
    assert parse_meminfo("  \n").values == {}
    with pytest.raises(ParseError):
        parse_meminfo("this is not meminfo\nat all\n")


HUGE_TREE = {"files": {
    "hugepages-2048kB/nr_hugepages": "1024\n",
    "hugepages-2048kB/free_hugepages": "900\n",
    "hugepages-2048kB/resv_hugepages": "12\n",
    "hugepages-2048kB/surplus_hugepages": "0\n",
    "hugepages-2048kB/nr_overcommit_hugepages": "0\n",
    "hugepages-1048576kB/nr_hugepages": "8\n",
    "hugepages-1048576kB/free_hugepages": "?\n",
    "hugepages-1048576kB/unknown_attr": "5\n",
}, "links": {}, "errors": {}}


def test_hugepages_tree():
    pools = parse_hugepages(HUGE_TREE)
    assert [p.size_kb for p in pools] == [2048, 1048576]
    small, big = pools
    assert (small.nr, small.free, small.resv, small.surplus, small.overcommit) == (
        1024, 900, 12, 0, 0)
    assert big.nr == 8 and big.free is None


def test_hugepages_tree_empty_and_foreign():
    assert parse_hugepages({}) == []
    assert parse_hugepages({"files": {}, "errors": {"hugepages-2048kB/nr_hugepages":
                                                    "permission"}}) == []
    with pytest.raises(ParseError):
        parse_hugepages({"files": {"0000:18:00.0/vendor": "0x10de"}})
    with pytest.raises(ParseError):
        parse_hugepages(["not", "a", "tree"])


NODE_TREE = {"files": {
    "node0/cpulist": "0-47,96-143\n",
    "node1/cpulist": "48-95,144-191\n",
    "node2/cpulist": "\n",
    "node0/hugepages/hugepages-2048kB/nr_hugepages": "1000\n",
    "node0/hugepages/hugepages-2048kB/free_hugepages": "990\n",
    "node1/hugepages/hugepages-2048kB/nr_hugepages": "24\n",
    "node1/hugepages/hugepages-1048576kB/nr_hugepages": "4\n",
    "node1/meminfo": "ignored\n",
}}


def test_hugepages_per_node():
    nodes = parse_hugepages_per_node(NODE_TREE)
    assert [n.node for n in nodes] == [0, 1, 2]
    n0, n1, n2 = nodes
    assert n0.cpulist == "0-47,96-143" and n0.has_cpus
    assert n0.pools[2048].nr == 1000 and n0.pools[2048].free == 990
    assert n1.pools[2048].nr == 24 and n1.pools[1048576].nr == 4
    assert not n2.has_cpus and n2.pools == {}


def test_hugepages_per_node_empty_and_foreign():
    assert parse_hugepages_per_node({"files": {}, "links": {}}) == []
    with pytest.raises(ParseError):
        parse_hugepages_per_node({"files": {"cpu0/online": "1"}})


def test_pool_size_kb():
    assert pool_size_kb("hugepages-2048kB") == 2048
    assert pool_size_kb("hugepages-2MB") is None


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400))
def test_meminfo_any_text(text):
    with contextlib.suppress(ParseError):
        parse_meminfo(text)


TREE_KEYS = st.sampled_from(["hugepages-2048kB/nr_hugepages", "node0/cpulist", "x",
                             "node1/hugepages/hugepages-1048576kB/free_hugepages",
                             "hugepages-kB/nr", "node/hugepages"]) | st.text(max_size=40)
TREES = st.dictionaries(st.sampled_from(["files", "links", "errors", "other"]),
                        st.dictionaries(TREE_KEYS, st.text(max_size=20) | st.none()
                                        | st.integers(), max_size=6)
                        | st.text(max_size=5) | st.none(), max_size=4)


@settings(max_examples=150, deadline=None)
@given(TREES)
def test_hugepage_trees_any_document(tree):
    for parser in (parse_hugepages, parse_hugepages_per_node):
        with contextlib.suppress(ParseError):
            parser(tree)
