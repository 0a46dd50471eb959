"""InfiniBand parsers (sysfs tree and the RDMA tools' outputs) and the detection
of those outputs in pasted text."""

from __future__ import annotations

import pytest
from hostkit import ACTIVE, POLLING, ib_tree
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.ingest.detect import detect, source_for_command
from gputriage.parsers.infiniband import (
    merge_ports,
    normalize_phys_state,
    normalize_state,
    parse_ib_problems,
    parse_ib_tree,
    parse_ibstat,
    parse_rate,
)

# --- normalisation -----------------------------------------------------------------


@pytest.mark.parametrize(("raw", "state"), [
    ("4: ACTIVE", "Active"), ("Active", "Active"), ("PORT_ACTIVE (4)", "Active"),
    ("1: DOWN", "Down"), ("PORT_DOWN (1)", "Down"), ("Initializing", "Init"),  # ibstat
    ("2: INIT", "Init"), ("PORT_ARMED (3)", "Armed"), ("9: WHATEVER", "9: WHATEVER"),
    ("", None), (None, None)])
def test_normalize_state(raw, state) -> None:
    assert normalize_state(raw) == state


@pytest.mark.parametrize(("raw", "phys"), [
    ("5: LinkUp", "LinkUp"), ("LINK_UP (5)", "LinkUp"), ("POLLING (2)", "Polling"),
    ("Polling", "Polling"), ("3: Disabled", "Disabled"), ("DISABLED (3)", "Disabled"),
    ("4: PortConfigurationTraining", "PortConfigurationTraining"),
    ("6: LinkErrorRecovery", "LinkErrorRecovery"), ("1: Sleep", "Sleep"), (" ", None)])
def test_normalize_phys_state(raw, phys) -> None:
    assert normalize_phys_state(raw) == phys


def test_parse_rate() -> None:
    assert parse_rate("400 Gb/sec (4X NDR)") == (400.0, "4X", "NDR")
    assert parse_rate("56") == (56.0, None, None)
    assert parse_rate("40 Gb/sec (4X QDR)\n") == (40.0, "4X", "QDR")
    assert parse_rate("N/A") == (None, None, None) and parse_rate(None) == (None, None, None)


# --- sysfs tree --------------------------------------------------------------------


def test_sysfs_tree_ports_counters_and_pci() -> None:
    tree = ib_tree({"mlx5_0/1": {**ACTIVE, "counters/symbol_error": "17",
                                 "counters/link_downed": "1", "counters/port_rcv_errors": "0"},
                    "mlx5_1/1": POLLING}, pci={"mlx5_0": "0000:19:00.0"})
    tree["files"]["mlx5_0/node_desc"] = "gpu-07 HCA-1\n"
    tree["links"]["mlx5_1"] = ("../../devices/pci0000:97/0000:97:01.0/0000:9b:00.0/"
                               "infiniband/mlx5_1")
    p0, p1 = parse_ib_tree(tree)
    assert (p0.device, p0.port, p0.state, p0.phys_state) == ("mlx5_0", 1, "Active", "LinkUp")
    assert (p0.rate_gbps, p0.width, p0.speed, p0.link_layer) == (400.0, "4X", "NDR",
                                                                 "InfiniBand")
    assert (p0.lid, p0.sm_lid, p0.fw_ver, p0.hca_type) == (0x12, 1, "28.39.1002", "MT4129")
    assert p0.counters == {"symbol_error": 17, "link_downed": 1, "port_rcv_errors": 0}
    assert p0.pci_address == "0000:19:00.0" and p0.node_desc == "gpu-07 HCA-1"
    assert p0.source == "infiniband" and p0.fmt == "sysfs" and p0.key == "mlx5_0/1"
    assert "mlx5_0/ports/1/state: 4: ACTIVE" in p0.lines
    assert (p1.state, p1.phys_state, p1.is_down) == ("Down", "Polling", True)
    assert p1.pci_address == "0000:9b:00.0"


def test_sysfs_tree_sorts_naturally_and_skips_bad_values() -> None:
    tree = ib_tree({f"mlx5_{i}/1": {**ACTIVE, "counters/symbol_error": "lots"}
                    for i in (10, 2, 1)})
    ports = parse_ib_tree(tree)
    assert [p.device for p in ports] == ["mlx5_1", "mlx5_2", "mlx5_10"]
    assert ports[0].counters == {}


def test_sysfs_tree_empty_and_malformed() -> None:
    assert parse_ib_tree({}) == []
    assert parse_ib_tree({"files": {}, "links": {}, "errors": {}}) == []
    with pytest.raises(ParseError):
        parse_ib_tree(["not", "a", "tree"])
    with pytest.raises(ParseError):
        parse_ib_tree({"files": {"0000:18:00.0/vendor": "0x10de"}})


# --- text outputs ------------------------------------------------------------------

IBSTAT = """CA 'mlx5_0'
\tCA type: MT4123
\tNumber of ports: 1
\tFirmware version: 20.31.1014
\tHardware version: 0
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 200
\t\tBase lid: 7
\t\tLMC: 0
\t\tSM lid: 1
\t\tPort GUID: 0x0c42a10300a1b2c3
\t\tLink layer: InfiniBand
"""

IBSTATUS = """Infiniband device 'mlx5_0' port 1 status:
\tdefault gid:\t fe80:0000:0000:0000:0c42:a103:00a1:b2c3
\tbase lid:\t 0x7
\tsm lid:\t\t 0x1
\tstate:\t\t 4: ACTIVE
\tphys state:\t 5: LinkUp
\trate:\t\t 200 Gb/sec (4X HDR)
\tlink_layer:\t InfiniBand

Infiniband device 'mlx5_1' port 1 status:
\tdefault gid:\t unknown
\tbase lid:\t 0x0
\tsm lid:\t\t 0x0
\tstate:\t\t 1: DOWN
\tphys state:\t 3: Disabled
\trate:\t\t 10 Gb/sec (4X SDR)
\tlink_layer:\t InfiniBand
"""

DEVINFO = """hca_id:\tmlx5_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4129
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tsm_lid:\t\t\t1
\t\t\tport_lid:\t\t12
\t\t\tlink_layer:\t\tInfiniBand
\t\t\tactive_width:\t\t4X (2)
\t\t\tactive_speed:\t\t100.0 Gbps (128)
\t\t\tphys_state:\t\tLINK_UP (5)
\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:a088:c203:00ad:eab8

hca_id:\tmlx5_1
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tvendor_part_id:\t\t\t4129
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_INIT (2)
\t\t\tlink_layer:\t\tInfiniBand
\t\t\tactive_width:\t\t4X (2)
\t\t\tactive_speed:\t\t14.0 Gbps (16)
\t\t\tphys_state:\t\tLINK_UP (5)
"""

IBDEV2NETDEV_V = (
    "0000:18:00.0 mlx5_0 (MT4129 - MCX75310AAS-NEAT) NVIDIA ConnectX-7 fw 28.39.1002 port 1 "
    "(ACTIVE) ==> ibp24s0 (Up)\n"
    "0000:2a:00.0 mlx5_1 (MT4129 - MCX75310AAS-NEAT) NVIDIA ConnectX-7 fw 28.39.1002 port 1 "
    "(DOWN  ) ==> ibp42s0 (Down)\n")

SHOW_GIDS = """DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV
---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---
mlx5_2\t1\t0\tfe80:0000:0000:0000:a288:c2ff:fead:eab8\t\t\tv1\tens1np0
mlx5_2\t1\t1\tfe80:0000:0000:0000:a288:c2ff:fead:eab8\t\t\tv2\tens1np0
mlx5_2\t1\t2\t0000:0000:0000:0000:0000:ffff:0a00:0102\t10.0.1.2  \tv1\tens1np0
mlx5_2\t1\t3\t0000:0000:0000:0000:0000:ffff:0a00:0102\t10.0.1.2  \tv2\tens1np0
n_gids_found=4
"""


def test_ibstat() -> None:
    [p] = parse_ibstat(IBSTAT)
    assert (p.device, p.port, p.state, p.phys_state, p.rate_gbps) == (
        "mlx5_0", 1, "Active", "LinkUp", 200.0)
    assert (p.lid, p.sm_lid, p.link_layer, p.hca_type, p.fw_ver) == (
        7, 1, "InfiniBand", "MT4123", "20.31.1014")
    assert p.fmt == "ibstat" and p.source == "ibstat"
    assert p.lines[:2] == ["CA 'mlx5_0'", "CA type: MT4123"] and "State: Active" in p.lines


def test_ibstatus() -> None:
    p0, p1 = parse_ibstatus = parse_ibstat(IBSTATUS)
    assert (p0.state, p0.phys_state, p0.rate_gbps, p0.width, p0.speed) == (
        "Active", "LinkUp", 200.0, "4X", "HDR")
    assert (p0.lid, p0.sm_lid) == (7, 1) and p0.fmt == "ibstatus"
    assert (p1.device, p1.state, p1.phys_state) == ("mlx5_1", "Down", "Disabled")
    assert p1.lines[0] == "Infiniband device 'mlx5_1' port 1 status:"
    assert len(parse_ibstatus) == 2


def test_ibv_devinfo() -> None:
    p0, p1 = parse_ibstat(DEVINFO)
    assert (p0.state, p0.phys_state, p0.width, p0.speed, p0.rate_gbps) == (
        "Active", "LinkUp", "4X", "100.0 Gbps", 400.0)
    assert (p0.hca_type, p0.fw_ver, p0.lid, p0.sm_lid) == ("MT4129", "28.39.1002", 12, 1)
    assert [(g.index, g.gid) for g in p0.gids] == [(0, "fe80:0000:0000:0000:a088:c203:00ad:eab8")]
    assert (p1.state, p1.phys_state, p1.rate_gbps) == ("Init", "LinkUp", 56.0)
    assert p1.is_down and not p0.is_down


def test_ibdev2netdev_verbose() -> None:
    p0, p1 = parse_ibstat(IBDEV2NETDEV_V)
    assert (p0.device, p0.netdev, p0.netdev_state, p0.state) == ("mlx5_0", "ibp24s0", "Up",
                                                                 "Active")
    assert (p0.pci_address, p0.hca_type, p0.fw_ver) == ("0000:18:00.0", "MT4129", "28.39.1002")
    assert (p1.state, p1.netdev_state, p1.is_down) == ("Down", "Down", True)


def test_show_gids() -> None:
    [p] = parse_ibstat(SHOW_GIDS)
    assert (p.device, p.port, p.netdev, p.state, p.is_down) == ("mlx5_2", 1, "ens1np0", None,
                                                               False)
    assert [(g.index, g.version, g.ipv4) for g in p.gids] == [
        (0, "v1", None), (1, "v2", None), (2, "v1", "10.0.1.2"), (3, "v2", "10.0.1.2")]


def test_mixed_outputs_merge_per_port() -> None:
    ports = parse_ibstat(IBSTAT + "mlx5_0 port 1 ==> ib0 (Up)\n")
    assert len(ports) == 1 and (ports[0].netdev, ports[0].state) == ("ib0", "Active")


def test_merge_ports_fills_only_what_is_missing() -> None:
    [sys_port] = parse_ib_tree(ib_tree({"mlx5_0/1": ACTIVE}))
    extra = parse_ibstat("mlx5_0 port 1 ==> ib0 (Down)\nmlx5_9 port 1 ==> ib9 (Up)\n")
    [merged] = merge_ports([sys_port], extra)
    assert (merged.netdev, merged.state, merged.source) == ("ib0", "Active", "infiniband")


def test_empty_no_devices_and_garbage() -> None:
    assert parse_ibstat("") == [] and parse_ibstat("  \n\t\n") == []
    assert parse_ibstat("No IB devices found\n") == []
    assert parse_ibstat("ibpanic: [1] main: stat of IB device 'mlx5_8' failed: No such file "
                        "or directory\n") == []
    with pytest.raises(ParseError):
        parse_ibstat("hello\nthis is not an RDMA tool output\n")
    with pytest.raises(ParseError):
        parse_ibstat("State: Active\nRate: 200\n")  # no CA header: which HCA?


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_parse_ibstat_never_raises_anything_but_parse_error(text: str) -> None:
    try:
        result = parse_ibstat(text)
    except ParseError:
        return
    assert isinstance(result, list)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([
    "CA 'mlx5_0'", "\tCA type: MT4129", "\tPort 1:", "\tPort 99999999999:", "\t\tState: Down",
    "\t\tPhysical state: Polling", "\t\tRate: 400 Gb/sec (4X NDR)", "\t\tRate: x",
    "Infiniband device 'a' port 2 status:", "\tstate: 4: ACTIVE", "hca_id:\tmlx5_3",
    "\t\tport:\t1", "\t\t\tactive_width:\t4X (2)", "\t\t\tactive_speed:\t25.0 Gbps (32)",
    "\t\t\tGID[  1]:\tfe80::1", "mlx5_0 port 1 ==> ib0 (Up)", "DEV PORT INDEX GID IPv4 VER DEV",
    "mlx5_0 1 3 fe80:0:0:0:0:0:0:1 v2 eth0", "", "   ", "\x00", "garbage: line"]),
    max_size=40))
def test_parse_ibstat_on_shuffled_real_lines(lines: list[str]) -> None:
    try:
        ports = parse_ibstat("\n".join(lines))
    except ParseError:
        return
    assert all(p.device and isinstance(p.port, int) for p in ports)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=30), inner,
                                                                max_size=4), max_leaves=20)
TREE_KEYS = st.sampled_from(["mlx5_0/ports/1/state", "mlx5_0/ports/1/rate", "mlx5_0/fw_ver",
                             "mlx5_0/ports/1/counters/link_downed", "mlx5_0/ports/x/state",
                             "mlx5_1/ports/2/phys_state", "a/b", "mlx5_0/device", "mlx5_0"])


@settings(max_examples=200, deadline=None)
@given(st.one_of(JSON, st.fixed_dictionaries({
    "files": st.dictionaries(TREE_KEYS, st.one_of(st.text(max_size=30), st.none())),
    "links": st.dictionaries(TREE_KEYS, st.text(max_size=60))})))
def test_parse_ib_tree_never_raises_anything_but_parse_error(doc) -> None:
    try:
        result = parse_ib_tree(doc)
    except ParseError:
        return
    assert isinstance(result, list)


# --- real captures -----------------------------------------------------------------


def test_every_category_6_sample_parses(corpus) -> None:
    # a tool that found no device at all (ibv_devinfo's "No IB devices found", ibstatus'
    # "sys files not found") prints no port: what it read is its complaint
    for sample in corpus.category("6"):
        ports = parse_ibstat(sample.text())
        assert ports or parse_ib_problems(sample.text()), sample.name


def test_corpus_port_details(corpus) -> None:
    h100 = {p.device: p for p in parse_ibstat(corpus.sample("gpud-ibstat-h100").text())}
    assert len(h100) == 12
    assert (h100["mlx5_11"].state, h100["mlx5_11"].phys_state) == ("Down", "Polling")
    assert (h100["mlx5_5"].state, h100["mlx5_5"].phys_state) == ("Down", "Disabled")
    assert h100["mlx5_0"].link_layer == "Ethernet" and h100["mlx5_1"].hca_type == "MT4125"
    azure = parse_ibstat(corpus.sample("gpud-ibstat-azure").text())
    assert [p.device for p in azure] == [f"mlx5_{i}" for i in range(8)]  # mlx5_8 vanished
    assert {p.rate_gbps for p in azure} == {200.0}
    status = parse_ibstat(corpus.sample("gpud-ibstatus-a100").text())
    assert len(status) == 9 and status[-1].link_layer == "Ethernet"
    assert status[0].lid == 0x33BF and status[0].speed == "HDR"
    [polling] = parse_ibstat(corpus.sample("cn-doc-ibv-devinfo").text())
    assert (polling.key, polling.state, polling.phys_state) == ("mlx4_1/2", "Down", "Polling")
    [bernie] = parse_ibstat(corpus.sample("bernie-connectx6").text())
    assert (bernie.state, bernie.lid, bernie.sm_lid, bernie.hca_type) == ("Active", 35, 35,
                                                                         "MT4123")
    netdevs = parse_ibstat(corpus.sample("cx7-roce-ibdev2netdev").text())
    assert sorted((p.device, p.netdev_state) for p in netdevs) == [
        ("roceP2p1s0f0", "Up"), ("roceP2p1s0f1", "Down"), ("rocep1s0f0", "Up"),
        ("rocep1s0f1", "Down")]
    [gids] = parse_ibstat(corpus.sample("nccl1510-show-gids").text())
    assert [(g.index, g.version) for g in gids.gids] == [(4, "v1"), (5, "v2"), (6, "v1"),
                                                         (7, "v2")]
    assert gids.gids[1].ipv4 == "10.12.0.21" and gids.netdev == "net1"
    [fdr] = parse_ibstat(corpus.sample("oyanghd-ibstat").text())
    assert fdr.rate_gbps == 56.0 and fdr.hca_type == "MT4099"


# --- detection of pasted outputs ---------------------------------------------------


def names(text: str) -> list[str]:
    return [n for n, _ in detect(text)]


@pytest.mark.parametrize("text", [IBSTAT, IBSTATUS, DEVINFO, IBDEV2NETDEV_V, SHOW_GIDS])
def test_rdma_tool_outputs_are_the_ibstat_source(text: str) -> None:
    [(name, body)] = detect(text)
    assert name == "ibstat" and parse_ibstat(body)


def test_rdma_session_is_split_at_prompts() -> None:
    paste = (f"$ ibstat\n{IBSTAT}$ ibdev2netdev\nmlx5_0 port 1 ==> ib0 (Up)\n"
             "$ show_gids\n" + SHOW_GIDS)
    [(name, body)] = detect(paste)
    assert name == "ibstat" and "$" not in body
    assert {p.device for p in parse_ibstat(body)} == {"mlx5_0", "mlx5_2"}


def test_every_category_6_sample_is_detected(corpus) -> None:
    # a capture may join the node's kernel log to the tool's output (trinity219: ibstatus
    # and the mlx4 driver's dmesg lines that say why it found no device)
    for sample in corpus.category("6"):
        found = names(sample.text())
        assert found[0] == "ibstat" and set(found) <= {"ibstat", "kernel_log"}, sample.name


LSCPU = """Architecture:                    x86_64
CPU op-mode(s):                  32-bit, 64-bit
CPU(s):                          96
On-line CPU(s) list:             0-95
Model name:                      Intel(R) Xeon(R) Platinum 8468
Socket(s):                       2
NUMA node(s):                    2
NUMA node0 CPU(s):               0-47
NUMA node1 CPU(s):               48-95
"""


def test_lscpu_is_the_numactl_source(corpus) -> None:
    assert detect(LSCPU) == [("numactl", LSCPU)]
    assert names("$ lscpu | grep NUMA\nNUMA node(s): 2\nNUMA node0 CPU(s): 0-47\n"
                 "NUMA node1 CPU(s): 48-95\n") == ["numactl"]
    assert names(corpus.sample("xpuperf129").text()) == ["numactl"]
    assert "numactl" in names(corpus.sample("talos9121").text())


def test_lscpu_detection_leaves_other_text_alone() -> None:
    assert names("Architecture: the art of building\nnothing else here\n") == []
    assert names("Note: see below\nAuthor: me\n") == []


def test_source_for_rdma_commands() -> None:
    for cmd in ("ibstatus", "ibv_devinfo -v", "sudo ibdev2netdev -v", "show_gids mlx5_0",
                "ibstat mlx5_0"):
        assert source_for_command(cmd) == "ibstat", cmd
    assert source_for_command("lscpu") == "numactl"
