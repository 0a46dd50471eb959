"""Tests for gputriage.parsers.hostcfg: kernel command line, THP mode,
numa_balancing, cgroup controllers and /proc/self/cgroup (hand-written fixtures)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.hostcfg import (
    parse_cgroup_controllers,
    parse_cmdline,
    parse_numa_balancing,
    parse_self_cgroup,
    parse_size_kb,
    parse_thp,
)

CMDLINE = ('BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=1b2c ro quiet splash '
           'intel_iommu=on iommu=pt default_hugepagesz=1G hugepagesz=1G hugepages=16 '
           'hugepagesz=2M hugepages=1024 hugepages=8 isolcpus=2-15 nohz_full=2-15 '
           'pci=realloc=off transparent_hugepage=madvise numa_balancing=disable '
           'dyndbg="module nvidia +p" -- single\n')


def test_cmdline_pairs_in_order():
    cmd = parse_cmdline(CMDLINE)
    assert cmd.params[0] == ("BOOT_IMAGE", "/vmlinuz-6.8.0-45-generic")
    assert ("quiet", None) in cmd.params
    assert cmd.get("intel_iommu") == "on" and cmd.get("iommu") == "pt"
    assert cmd.values("hugepagesz") == ["1G", "2M"]
    assert cmd.get("pci") == "realloc=off"
    assert cmd.get("isolcpus") == "2-15" and cmd.get("nohz_full") == "2-15"
    assert cmd.get("transparent_hugepage") == "madvise"
    assert cmd.get("numa_balancing") == "disable"
    assert cmd.get("dyndbg") == "module nvidia +p"
    assert not cmd.has("single")  # after "--": init's arguments
    assert cmd.token("intel_iommu") == "intel_iommu=on" and cmd.token("quiet") == "quiet"
    assert cmd.token("absent") is None and cmd.text.startswith("BOOT_IMAGE")


def test_hugepage_requests_follow_their_size():
    reqs = parse_cmdline(CMDLINE).hugepage_requests()
    assert [(r.size_kb, r.count) for r in reqs] == [
        (1024 * 1024, 16), (2048, 1024), (1024 * 1024, 8)]
    assert reqs[0].text == "hugepagesz=1G hugepages=16"
    assert reqs[2].text == "hugepages=8"  # no hugepagesz before it: the default size


def test_hugepage_requests_without_sizes_and_per_node():
    reqs = parse_cmdline("ro hugepages=512 hugepagesz=1G hugepages=0:2,1:6 hugepages=x\n"
                         ).hugepage_requests()
    assert (reqs[0].size_kb, reqs[0].count) == (None, 512)
    assert (reqs[1].size_kb, reqs[1].count, reqs[1].per_node) == (1048576, 8, {0: 2, 1: 6})
    assert len(reqs) == 2


def test_cmdline_prompt_empty_and_multiline():
    assert parse_cmdline("$ cat /proc/cmdline\nro quiet\n").get("ro") is None
    assert parse_cmdline("$ cat /proc/cmdline\nro quiet\n").has("quiet")
    assert parse_cmdline("").params == [] and parse_cmdline(" \n").text == ""
    with pytest.raises(ParseError):
        parse_cmdline("MemTotal: 1 kB\nMemFree: 1 kB\n")


def test_size_kb():
    assert parse_size_kb("1G") == 1048576 and parse_size_kb("2M") == 2048
    assert parse_size_kb("2048k") == 2048 and parse_size_kb("1GB") == 1048576
    assert parse_size_kb("2097152") == 2048
    assert parse_size_kb("big") is None and parse_size_kb(None) is None
    assert parse_size_kb("10") is None  # bytes below one kB


def test_thp():
    assert parse_thp("always [madvise] never\n") == "madvise"
    assert parse_thp("[always] madvise never") == "always"
    assert parse_thp("always defer defer+madvise [madvise] never") == "madvise"
    assert parse_thp("") is None
    for bad in ("always madvise never", "[always] [never]", "hello: world [x]"):
        with pytest.raises(ParseError):
            parse_thp(bad)


def test_numa_balancing():
    assert parse_numa_balancing("1\n") == 1 and parse_numa_balancing("0") == 0
    assert parse_numa_balancing("") is None
    with pytest.raises(ParseError):
        parse_numa_balancing("enabled")


def test_cgroup_controllers():
    assert parse_cgroup_controllers("cpuset cpu io memory hugetlb pids rdma misc\n") == [
        "cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"]
    assert parse_cgroup_controllers("\n") == []
    with pytest.raises(ParseError):
        parse_cgroup_controllers("12:memory:/docker/abc")


def test_self_cgroup():
    v1 = parse_self_cgroup("12:memory:/kubepods/pod1\n11:cpu,cpuacct:/kubepods/pod1\n"
                           "1:name=systemd:/init.scope\n0::/init.scope\n")
    assert [x.hierarchy for x in v1] == [12, 11, 1, 0]
    assert v1[1].controllers == ("cpu", "cpuacct") and v1[0].is_v1 and not v1[3].is_v1
    v2 = parse_self_cgroup("0::/system.slice/ssh.service\n")
    assert v2[0].path == "/system.slice/ssh.service" and not v2[0].is_v1
    assert parse_self_cgroup("") == []
    with pytest.raises(ParseError):
        parse_self_cgroup("no cgroup here\n")


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_any_text_gives_result_or_parse_error(text):
    for parser in (parse_cmdline, parse_thp, parse_numa_balancing, parse_cgroup_controllers,
                   parse_self_cgroup):
        with contextlib.suppress(ParseError):
            parser(text)
    with contextlib.suppress(ParseError):
        parse_cmdline(text).hugepage_requests()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["hugepages=", "hugepagesz=", "default_hugepagesz=", "1G",
                                 "2M", "0:1,1:2", "16", " ", "x", "=", '"']), max_size=20))
def test_hugepage_requests_never_fail(parts):
    with contextlib.suppress(ParseError):
        for req in parse_cmdline("".join(parts)).hugepage_requests():
            assert req.count >= 0
