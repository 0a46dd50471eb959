"""InfiniBand / RoCE rules on small simulated hosts and on the real captures.

``RULE_CASES`` holds, for every InfiniBand rule, at least one host that makes it
fire; the conformance test checks that no rule is left without one.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hostkit import ACTIVE, POLLING, ib_tree, pci_tree, rails, run, snap

from gputriage.engine.analysis import analyze, analyze_facts
from gputriage.facts.store import Facts
from gputriage.ingest import load_input
from gputriage.model import Action, Blame, Severity

DISABLED = {**POLLING, "phys_state": "3: Disabled"}


def gpu_host_pci(hca_numa: dict[str, int], gpu_numa: dict[str, int]) -> dict:
    """A PCI tree with GPUs and Mellanox functions on the given NUMA nodes."""
    tree = pci_tree(dict.fromkeys(gpu_numa, "nvidia"), nics=tuple(hca_numa))
    for addr, node in {**gpu_numa, **hca_numa}.items():
        tree["files"][f"{addr}/numa_node"] = f"{node}\n"
    return tree


IBSTAT_DISABLED = """CA 'mlx5_0'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tPort 1:
\t\tState: Down
\t\tPhysical state: Disabled
\t\tRate: 40
\t\tLink layer: Ethernet
"""

SHOW_GIDS = """\
DEV     PORT    INDEX   GID                                     IPv4            VER     DEV
---     ----    -----   ---                                     ------------    ---     ---
mlx5_3  1       0       fe80:0000:0000:0000:b8ce:f6ff:fe10:2a01                 v1      ens3
mlx5_3  1       1       fe80:0000:0000:0000:b8ce:f6ff:fe10:2a01                 v2      ens3
mlx5_3  1       2       0000:0000:0000:0000:0000:ffff:c0a8:0a07 192.168.10.7    v1      ens3
mlx5_3  1       3       0000:0000:0000:0000:0000:ffff:c0a8:0a07 192.168.10.7    v2      ens3
n_gids_found=4
"""

RULE_CASES = {
    "ib.port-not-active": [
        ({"infiniband": ib_tree(rails(4, mlx5_2=POLLING))}, "ib.port-not-active"),
        ({"ibstat": IBSTAT_DISABLED}, "ib.port-not-active"),
    ],
    "ib.rate-below-peers": [
        ({"infiniband": ib_tree(rails(4, mlx5_3={**ACTIVE, "rate": "200 Gb/sec (4X HDR)"}))},
         "ib.rate-below-peers"),
    ],
    "ib.symbol-errors": [
        ({"infiniband": ib_tree(rails(2, mlx5_1={**ACTIVE, "counters/symbol_error": "812"}))},
         "ib.symbol-errors"),
    ],
    "ib.link-downed": [
        ({"infiniband": ib_tree(rails(2, mlx5_0={**ACTIVE, "counters/link_downed": "3"}))},
         "ib.link-downed"),
    ],
    "ib.roce-gid": [({"ibstat": SHOW_GIDS}, "ib.roce-gid")],
}
def _ib(result, fid: str | None = None):
    return [f for f in result.findings if f.id.startswith("ib.") and (fid is None or f.id == fid)]


# --- ib.port-not-active ------------------------------------------------------------


def test_healthy_fabric_is_silent() -> None:
    tree = ib_tree(rails(8, mlx5_0={**ACTIVE, "counters/symbol_error": "3",
                                    "counters/link_downed": "0"}))
    result = run(infiniband=tree)
    assert not _ib(result)
    # every IB rule the tree feeds judged it; only rules over another input (an IB tool's
    # paste) are skipped, whatever IB rules are added later
    assert not [s for s in result.skipped
                if s.rule.startswith("ib.") and not s.reason.endswith(": not in the input")]


def test_no_ib_source_skips_the_rules_with_a_reason() -> None:
    result = run(proc_modules="ext4 1 0 - Live 0x0\n")
    skipped = {s.rule: s.reason for s in result.skipped}
    assert "ib_ports" in skipped["ib.port-not-active"]


def test_polling_port_of_unknown_affinity_is_a_warning_to_repair() -> None:
    [f] = _ib(run(infiniband=ib_tree(rails(4, mlx5_2=POLLING))))
    assert f.severity is Severity.WARNING  # no GPU rail: repaired at the next window
    assert f.action is Action.PLAN_REPAIR and f.blame is Blame.NODE
    assert "next maintenance window" in f.explanation
    assert f.scope.kind == "port" and f.scope.name == "mlx5_2/1"
    assert "mlx5_2 port 1" in f.title and "Down/Polling" in f.title
    assert "10 Gb" not in f.title  # a down port's rate means nothing
    assert f.evidence[0].source == "infiniband"
    assert "mlx5_2/ports/1/phys_state: 2: Polling" in f.evidence[0].lines


def test_port_sharing_numa_with_a_gpu_is_critical() -> None:
    sources = {
        "infiniband": ib_tree(rails(2, mlx5_1=POLLING),
                              pci={"mlx5_0": "0000:19:00.0", "mlx5_1": "0000:9b:00.0"}),
        "pci_devices": gpu_host_pci({"0000:19:00.0": 0, "0000:9b:00.0": 1},
                                    {"0000:18:00.0": 0, "0000:9a:00.0": 1}),
    }
    [f] = _ib(run(**sources))
    assert f.severity is Severity.CRITICAL and f.scope.pci_bus_id == "0000:9b:00.0"
    assert "GPU rail" in f.explanation
    assert "NUMA node 1" in (f.evidence[0].note or "")


def test_port_away_from_the_gpus_is_only_a_warning() -> None:
    sources = {
        "infiniband": ib_tree(rails(2, mlx5_1=POLLING),
                              pci={"mlx5_0": "0000:19:00.0", "mlx5_1": "0000:9b:00.0"}),
        "pci_devices": gpu_host_pci({"0000:19:00.0": 0, "0000:9b:00.0": 1},
                                    {"0000:18:00.0": 0}),
    }
    [f] = _ib(run(**sources))
    assert f.severity is Severity.WARNING


TOPO = """\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tSYS\tPIX\tSYS\t0-23\t0\t\tN/A
GPU1\tSYS\t X \tSYS\tSYS\t24-47\t1\t\tN/A
NIC0\tPIX\tSYS\t X \tSYS
NIC1\tSYS\tSYS\tSYS\t X

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  PIX  = Connection traversing at most a single PCIe bridge

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""


def test_topology_decides_the_rail_when_it_names_the_hca() -> None:
    facts = Facts(snap(infiniband=ib_tree(rails(2, mlx5_0=POLLING, mlx5_1=POLLING)),
                       nvidia_smi_topo=TOPO))
    affinity = facts.get("ib_gpu_affinity")
    assert affinity["mlx5_0"].rail is True and affinity["mlx5_0"].gpus == ("GPU0",)
    assert affinity["mlx5_0"].link == "PIX" and affinity["mlx5_0"].basis == "topology"
    assert affinity["mlx5_1"].rail is False
    found = {f.scope.name: f.severity for f in _ib(analyze_facts(facts))}
    assert found == {"mlx5_0/1": Severity.CRITICAL, "mlx5_1/1": Severity.WARNING}


def test_topology_with_hca_columns_named_directly() -> None:
    """Older topo -m prints HCA names as column heads; any object with devices,
    nic_names and links will do."""
    topo = SimpleNamespace(devices=["GPU0", "mlx5_0"], nic_names={},
                           links={("GPU0", "mlx5_0"): "NODE"})
    facts = Facts(snap(infiniband=ib_tree(rails(1))))
    facts.prefill("topology", topo)
    aff = facts.get("ib_gpu_affinity")["mlx5_0"]
    assert (aff.rail, aff.gpus, aff.link) == (True, ("GPU0",), "NODE")
    assert "GPU0" in aff.describe()


def test_disabled_port_is_a_configuration_matter() -> None:
    [f] = _ib(run(ibstat=IBSTAT_DISABLED))
    assert f.action is Action.FIX_CONFIG and f.blame is Blame.CONFIG
    assert "Down/Disabled" in f.title and "MT4129, Ethernet" in f.title
    assert f.evidence[0].source == "ibstat"


def test_init_port_with_link_up_blames_the_subnet_manager() -> None:
    tree = ib_tree(rails(2, mlx5_1={**ACTIVE, "state": "2: INIT"}))
    [f] = _ib(run(infiniband=tree))
    assert f.action is Action.FIX_CONFIG and "subnet manager" in f.explanation
    assert "Init/LinkUp" in f.title


def test_down_netdev_from_ibdev2netdev() -> None:
    # a RoCE port's netdev is its link; an IPoIB netdev is only the IP side of the port
    [f] = _ib(run(ibstat="mlx5_0 port 1 ==> ens1f0np0 (Up)\nmlx5_1 port 1 ==> ens2f0np0 (Down)\n"))
    assert f.scope.name == "mlx5_1/1" and "netdev ens2f0np0 is Down" in f.title
    [f] = _ib(run(ibstat="mlx5_0 port 1 ==> ib0 (Up)\nmlx5_1 port 1 ==> ib1 (Down)\n"))
    assert f.id == "ib.link-state-unshown" and f.severity is Severity.INFO


def test_down_second_port_beside_an_active_one_is_an_unused_port() -> None:
    two = {"mlx5_0/1": dict(ACTIVE), "mlx5_0/2": dict(POLLING)}
    [f] = _ib(run(infiniband=ib_tree(two)))
    assert f.severity is Severity.INFO and f.action is Action.NONE
    assert "mlx5_0/1 on the same adapter is up" in f.title


def test_down_function_of_a_card_whose_other_function_is_up_is_informational() -> None:
    paste = ("rocep3s0f0 port 1 ==> enp3s0f0np0 (Up)\nrocep3s0f1 port 1 ==> enp3s0f1np1 (Down)\n"
             "rocep4s0f0 port 1 ==> enp4s0f0np0 (Down)\n")
    found = {f.scope.name: f.severity for f in _ib(run(ibstat=paste))}
    assert found == {"rocep3s0f1/1": Severity.INFO, "rocep4s0f0/1": Severity.WARNING}


def test_roce_gid_names_the_v2_index_of_the_ip_address() -> None:
    [f] = _ib(run(ibstat=SHOW_GIDS))
    assert f.id == "ib.roce-gid" and f.severity is Severity.INFO
    assert "RoCE v2 GID index 3 for 192.168.10.7 (index 2 is RoCE v1" in f.title


def test_roce_port_without_an_address_has_no_routable_gid() -> None:
    lines = SHOW_GIDS.splitlines()
    [f] = _ib(run(ibstat="\n".join(lines[:4]) + "\n"))
    assert f.severity is Severity.WARNING and f.blame is Blame.CONFIG
    assert "no routable RoCE v2 GID" in f.title


def test_sysfs_wins_over_a_stale_paste_but_takes_its_netdev_names() -> None:
    tree = ib_tree(rails(2))
    result = run(infiniband=tree, ibstat="mlx5_0 port 1 ==> ib0 (Up)\n"
                                          "mlx5_1 port 1 ==> ib1 (Down)\n")
    assert not _ib(result)
    ports = Facts(snap(infiniband=tree, ibstat="mlx5_1 port 1 ==> ib1 (Down)\n")).get("ib_ports")
    assert [p.netdev for p in ports] == [None, "ib1"]


# --- ib.rate-below-peers -----------------------------------------------------------


def test_slow_port_among_identical_peers() -> None:
    slow = {**ACTIVE, "rate": "200 Gb/sec (4X HDR)"}
    [f] = _ib(run(infiniband=ib_tree(rails(8, mlx5_5=slow))), "ib.rate-below-peers")
    assert f.severity is Severity.WARNING and f.scope.name == "mlx5_5/1"
    assert "200 Gb/s" in f.title and "7 other MT4129 InfiniBand ports run at 400 Gb/s" in f.title
    assert len(f.evidence) == 1 and "mlx5_5/ports/1/rate: 200 Gb/sec (4X HDR)" in \
        f.evidence[0].lines


def test_different_models_and_link_layers_are_not_peers() -> None:
    ports = rails(4)
    ports["mlx5_4/1"] = {**ACTIVE, "rate": "100 Gb/sec (4X EDR)", "link_layer": "Ethernet"}
    ports["mlx5_5/1"] = {**ACTIVE, "rate": "100 Gb/sec (4X EDR)", "link_layer": "Ethernet"}
    assert not _ib(run(infiniband=ib_tree(ports)), "ib.rate-below-peers")
    slower_model = ib_tree({"mlx5_6/1": {**ACTIVE, "rate": "200 Gb/sec (4X HDR)"}},
                           hca_type="MT4123")
    tree = ib_tree(rails(4))
    tree["files"].update(slower_model["files"])
    assert not _ib(run(infiniband=tree), "ib.rate-below-peers")


def test_no_majority_no_alarm() -> None:
    ports = rails(2)
    ports["mlx5_2/1"] = ports["mlx5_3/1"] = {**ACTIVE, "rate": "200 Gb/sec (4X HDR)"}
    assert not _ib(run(infiniband=ib_tree(ports)), "ib.rate-below-peers")


# --- counters ----------------------------------------------------------------------


def test_symbol_errors_threshold_and_saturation() -> None:
    low = ib_tree(rails(2, mlx5_1={**ACTIVE, "counters/symbol_error": "9"}))
    assert not _ib(run(infiniband=low))
    high = ib_tree(rails(2, mlx5_1={**ACTIVE, "counters/symbol_error": "65535",
                                    "counters/link_error_recovery": "4"}))
    [f] = _ib(run(infiniband=high))
    assert f.id == "ib.symbol-errors" and f.severity is Severity.WARNING
    assert "65535+ (saturated) symbol errors and 4 link error recoveries" in f.title
    assert "mlx5_1/ports/1/counters/symbol_error: 65535" in f.evidence[0].lines


def test_link_downed_once_is_watched_many_times_repaired() -> None:
    once = _ib(run(infiniband=ib_tree(rails(1, mlx5_0={**ACTIVE, "counters/link_downed": "1"}))))
    assert [(f.id, f.action) for f in once] == [("ib.link-downed", Action.NONE)]
    many = _ib(run(infiniband=ib_tree(rails(1, mlx5_0={**ACTIVE,
                                                       "counters/link_downed": "12"}))))
    assert many[0].action is Action.PLAN_REPAIR and "12 time(s)" in many[0].title


# --- real captures -----------------------------------------------------------------

# sample -> {port: (severity, action)} of ib.port-not-active; other ib.* findings: none
EXPECTED = {
    "doc-ibstat-mt25418": {"mlx4_0/2": (Severity.INFO, Action.NONE)},  # port 1 is up
    "cn-doc-ibv-devinfo": {"mlx4_1/2": (Severity.WARNING, Action.PLAN_REPAIR)},
    "gpud-ibstat-h100-some-down": {"mlx5_11/1": (Severity.WARNING, Action.PLAN_REPAIR),
                                   "mlx5_5/1": (Severity.WARNING, Action.FIX_CONFIG)},
    # the second function of each card is down while the first is up: unused ports
    "cx7-roce-ibdev2netdev": {"rocep1s0f1/1": (Severity.INFO, Action.NONE),
                              "roceP2p1s0f1/1": (Severity.INFO, Action.NONE)},
    "gpud-ibstatus-a100-all-active": {},
    "gpud-ibstat-azure": {},
    "bernie-connectx6": {},
    "oyanghd-ibstat-connectx3": {},
    "nccl1510-show-gids": {"mlx5_0/1": (Severity.INFO, Action.NONE)},  # ib.roce-gid: use 5
    # IPoIB netdevs Down say nothing of the links (said once, at the first); the CX-6
    # cards' second Ethernet ports are down beside an up first port: unused
    "imbue-h100-ibdev2netdev": {"mlx5_0/1": (Severity.INFO, Action.NONE),
                                "mlx5_2/1": (Severity.INFO, Action.NONE),
                                "mlx5_8/1": (Severity.INFO, Action.NONE)},
    "sriovop382-pod-ib-vf": {"mlx5_3/1": (Severity.WARNING, Action.FIX_CONFIG)},
    "treydock-perfquery": {},
    "rccl1423-rdma-link": {"mlx5_7/1": (Severity.WARNING, Action.PLAN_REPAIR)},  # unstable
    # no device at all: ib.no-devices, about the node
    "dsxinfra5251-ibv-devinfo": {None: (Severity.WARNING, Action.FIX_CONFIG)},
    "trinity219-ibstatus": {None: (Severity.WARNING, Action.FIX_SOFTWARE)},
}


def test_every_category_6_sample_is_covered(corpus) -> None:
    names = {s.name for s in corpus.category("6")}
    covered = {corpus.sample(part).name for part in EXPECTED}
    assert names == covered


@pytest.mark.parametrize("part", sorted(EXPECTED))
def test_corpus_sample_gets_its_diagnosis(corpus, part: str) -> None:
    result = analyze(load_input(str(corpus.sample(part).path)))
    found = {f.scope.name: (f.severity, f.action) for f in _ib(result)}
    assert found == EXPECTED[part]
    serious = [f.id for f in result.findings if f.severity.rank >= Severity.WARNING.rank
               and not f.id.startswith("ib.")]
    assert not serious


def test_h100_rails_down_are_critical_once_the_host_has_gpus(corpus) -> None:
    """The same capture on a host whose PCI tree shows GPUs: the eight 400G MT4129
    HCAs are the GPU rails (the fastest set of identical HCAs); the 100G MT4125s
    are not."""
    text = corpus.sample("gpud-ibstat-h100-some-down").text()
    gpus = [f"0000:{b}:00.0" for b in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]
    facts = Facts(snap(ibstat=text, pci_devices=pci_tree(dict.fromkeys(gpus, "nvidia"))))
    affinity = facts.get("ib_gpu_affinity")
    assert affinity["mlx5_11"].rail is True and affinity["mlx5_11"].basis == "peer-group"
    assert affinity["mlx5_1"].rail is False
    found = {f.scope.name: f.severity for f in _ib(analyze_facts(facts))}
    assert found == {"mlx5_11/1": Severity.CRITICAL, "mlx5_5/1": Severity.CRITICAL}
