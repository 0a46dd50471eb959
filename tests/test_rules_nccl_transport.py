"""NCCL transport rules: socket fallback, virtual socket interfaces, nodes split by
NCCL, on synthetic logs with and without the host's own facts, and every category-5
capture through all the transport rules (the data-path rules, GPUDirect RDMA and
SHM, are tested in tests/test_rules_nccl_paths.py)."""

from __future__ import annotations

import random

import pytest
from hostkit import nvml_doc, pci_tree, run, snap
from nccl_kit import (
    DOWN,
    FAR_HCA,
    NO_GDR,
    NO_HCA,
    SHM_ONLY,
    hcas,
    job_log,
    lines_of,
    mine,
    one,
    topo_m,
)

from gputriage.engine.analysis import analyze, analyze_facts
from gputriage.facts.nccl import nccl_bus_id, process_network
from gputriage.facts.store import Facts
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.kernel_host import is_virtual_interface
from gputriage.parsers.nccl_log import parse_nccl_log

RULE_CASES = {
    "nccl.socket-transport": [
        ({"nccl_log": job_log(env=("NCCL_IB_DISABLE=1",))}, "nccl.socket-transport"),
        ({"nccl_log": job_log(no_device=True), "infiniband": hcas()}, "nccl.socket-transport"),
    ],
    "nccl.socket-iface-virtual": [
        ({"nccl_log": job_log(iface="docker0")}, "nccl.socket-iface-virtual"),
    ],
    "nccl.node-split": [
        ({"nccl_log": job_log(net="IB", gpus=4, nnodes=4, local_ranks=2)}, "nccl.node-split"),
    ],
    "nccl.p2p-disabled": [
        ({"nccl_log": job_log(("gpu-a",), env=("NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1"))},
         "nccl.p2p-disabled"),
    ],
}


# --- facts ---------------------------------------------------------------------------


def test_nccl_bus_ids_become_pci_addresses() -> None:
    assert nccl_bus_id("42000") == "0000:42:00.0"
    assert nccl_bus_id("c8000") == "0000:c8:00.0"
    assert nccl_bus_id("100000") == "0001:00:00.0"
    assert nccl_bus_id("2[2]") is None and nccl_bus_id(None) is None


def test_job_summary_counts_nodes_networks_and_channels() -> None:
    facts = Facts(snap(nccl_log=job_log(env=("NCCL_IB_DISABLE=1",))))
    job = facts.get("nccl_job")
    assert job.hosts == ["gpu-a", "gpu-b"] and job.nodes == 2 and job.nodes_basis == "comm"
    assert job.multi_node is True and job.all_ranks_seen
    assert sorted(job.networks) == ["Socket"] and len(job.networks["Socket"]) == 4
    assert len(job.net_channels) == 8
    assert job.describe_nodes() == "2 nodes (nNodes)"


def test_network_is_inferred_without_a_using_network_line(corpus) -> None:
    log = parse_nccl_log(corpus.sample("nccl398").text())
    nets = {p.label: process_network(p) for p in log.processes}
    assert nets["ip-172-31-0-112:8162"] == "Socket"
    assert nets["ip-172-31-0-112:8159"] is None
    job = Facts(snap(nccl_log=corpus.sample("nccl398").text())).get("nccl_job")
    assert (job.nodes, job.nodes_basis, job.multi_node) == (2, "hosts", True)


# --- nccl.socket-transport -------------------------------------------------------------


def test_ib_disabled_on_a_two_node_job_blames_the_job() -> None:
    f = one(run(nccl_log=job_log(env=("NCCL_IB_DISABLE=1",))), "nccl.socket-transport")
    assert f.severity is Severity.WARNING
    assert (f.action, f.blame) == (Action.FIX_CONFIG, Blame.JOB_CONFIG)
    assert f.title.startswith("Inter-node traffic runs over TCP sockets: NCCL_IB_DISABLE=1")
    assert "4 processes on 2 hosts" in f.title and "8 NET/Socket channels" in f.title
    assert any(ln.endswith("NCCL_IB_DISABLE set by environment to 1.") for ln in lines_of(f))
    assert any(ln.endswith("via NET/Socket/0") for ln in lines_of(f))


def test_ib_disabled_while_this_host_has_active_rails_is_critical() -> None:
    f = one(run(nccl_log=job_log(env=("NCCL_IB_DISABLE=1",)), infiniband=hcas(8)),
            "nccl.socket-transport")
    assert f.severity is Severity.CRITICAL and f.blame is Blame.JOB_CONFIG
    assert "8 active HCA ports on this host unused" in f.title
    assert [e.source for e in f.evidence] == ["nccl_log", "infiniband"]


def test_host_without_hcas_makes_sockets_expected() -> None:
    f = one(run(nccl_log=job_log(env=("NCCL_IB_DISABLE=1",)), infiniband=NO_HCA),
            "nccl.socket-transport")
    assert f.severity is Severity.INFO and f.action is Action.NONE
    assert "expected on this network" in f.title


def test_no_device_on_plain_ethernet_is_info() -> None:
    f = one(run(nccl_log=job_log(no_device=True)), "nccl.socket-transport")
    assert f.severity is Severity.INFO and f.blame is Blame.UNKNOWN
    assert "expected on this network; inter-node bandwidth is limited to TCP" in f.title


def test_no_device_while_the_host_has_hcas_points_at_the_container() -> None:
    f = one(run(nccl_log=job_log(no_device=True), infiniband=hcas(4)), "nccl.socket-transport")
    assert f.severity is Severity.CRITICAL
    assert (f.action, f.blame) == (Action.FIX_CONFIG, Blame.CONFIG)
    assert "NET/IB found no device although this host has HCAs" in f.title
    assert "/dev/infiniband" in f.explanation


def test_hcas_present_but_down_is_a_warning_pointing_at_the_ports() -> None:
    f = one(run(nccl_log=job_log(no_device=True), infiniband=hcas(2, DOWN)),
            "nccl.socket-transport")
    assert f.severity is Severity.WARNING and "ib.port-not-active" in f.explanation


def test_other_host_sources_of_hcas() -> None:
    pasted = one(run(nccl_log=job_log(no_device=True),
                     ibstat="mlx5_0 port 1 ==> ib0 (Up)\nmlx5_1 port 1 ==> ib1 (Up)\n"),
                 "nccl.socket-transport")
    assert pasted.severity is Severity.CRITICAL and "2 active HCA ports" in pasted.title
    on_pci = one(run(nccl_log=job_log(no_device=True),
                     pci_devices=pci_tree({"0000:18:00.0": "nvidia"}, nics=("0000:19:00.0",))),
                 "nccl.socket-transport")
    assert on_pci.severity is Severity.WARNING and "not exposed" in on_pci.explanation
    assert "ib.port-not-active" not in on_pci.explanation


def test_forced_socket_net_and_hca_filter() -> None:
    forced = one(run(nccl_log=job_log(env=("NCCL_NET=Socket",))), "nccl.socket-transport")
    assert "NCCL_NET=Socket set by the environment" in forced.title
    assert forced.blame is Blame.JOB_CONFIG
    filtered = one(run(nccl_log=job_log(env=("NCCL_IB_HCA=mlx5_9",), no_device=True)),
                   "nccl.socket-transport")
    assert "NCCL_IB_HCA=mlx5_9 matched no usable device" in filtered.title
    assert filtered.severity is Severity.WARNING


def test_single_node_and_ib_jobs_are_silent() -> None:
    one_node = job_log(hosts=("gpu-a",), gpus=4, no_device=True)
    assert not mine(run(nccl_log=one_node), "nccl.socket-transport")
    ib_job = job_log(net="IB")
    assert not mine(run(nccl_log=ib_job, infiniband=hcas(2)))


def test_streamed_log_still_gives_evidence() -> None:
    """``gputriage nccl`` pre-fills the log without keeping its text."""
    facts = Facts(snap(infiniband=hcas(2)))
    facts.prefill("nccl_log", parse_nccl_log(job_log(env=("NCCL_IB_DISABLE=1",))))
    f = one(analyze_facts(facts), "nccl.socket-transport")
    assert any(ln.startswith("gpu-a:4100:") and ln.endswith(
        "NCCL INFO NCCL_IB_DISABLE set by environment to 1.") for ln in lines_of(f)), lines_of(f)
    assert any("via NET/Socket/0" in ln for ln in lines_of(f))


def test_libibverbs_missing(corpus) -> None:
    f = one(run(nccl_log=corpus.sample("detectron4730").text()), "nccl.socket-transport")
    assert "libibverbs could not be loaded" in f.title
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_SOFTWARE, Blame.JOB)
    assert "rdma-core" in f.explanation and "does not show how many nodes" in f.explanation
    assert any("Failed to open libibverbs.so[.1]" in ln for ln in lines_of(f))


def test_ib_disabled_over_ipoib(corpus) -> None:
    f = one(run(nccl_log=corpus.sample("nccltests188").text()), "nccl.socket-transport")
    assert "NCCL_IB_DISABLE=1 set by the environment" in f.title
    assert "interface ib0, ibs85f0" in f.title
    assert "IPoIB" in f.explanation and f.blame is Blame.JOB_CONFIG


def test_ofi_plugin_without_efa(corpus) -> None:
    f = one(run(nccl_log=corpus.sample("nccl398").text()), "nccl.socket-transport")
    assert "OFI (libfabric) plugin found no usable provider" in f.title
    assert "job: at least 2 hosts" in f.title and "interface ens5" in f.title
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)
    assert "EFA" in f.explanation
    assert any("NET/OFI Only EFA provider is supported" in ln for ln in lines_of(f))


def test_socket_channels_without_reason_then_with_the_hosts_hcas(corpus) -> None:
    text = corpus.sample("nccl952").text()
    alone = one(run(nccl_log=text), "nccl.socket-transport")
    assert alone.severity is Severity.INFO and "the log does not show why" in alone.title
    assert "4 NET/Socket channels" in alone.title
    host = one(run(nccl_log=text, infiniband=hcas(8)), "nccl.socket-transport")
    assert host.severity is Severity.CRITICAL and host.blame is Blame.CONFIG
    assert "HCAs go unused" in host.title and "not exposed to the container" in host.explanation


def test_gke_gvnic_is_expected(corpus) -> None:
    f = one(run(nccl_log=corpus.sample("gke-gvnic").text()), "nccl.socket-transport")
    assert f.severity is Severity.INFO
    assert "job: 3 nodes (nNodes)" in f.title and "interface eth0" in f.title
    assert "expected on this network" in f.title
    assert not mine(run(nccl_log=corpus.sample("gke-gvnic").text()), "nccl.gdr-disabled")


def test_single_node_socket_selection_is_not_a_transport_problem(corpus) -> None:
    result = run(nccl_log=corpus.sample("nccl1637").text())
    assert not mine(result, "nccl.socket-transport")


# --- nccl.socket-iface-virtual ---------------------------------------------------------


def test_docker_bridge_as_data_interface() -> None:
    f = one(run(nccl_log=job_log(iface="docker0")), "nccl.socket-iface-virtual")
    assert f.severity is Severity.WARNING and f.blame is Blame.CONFIG
    assert f.title.startswith("NCCL uses virtual interface(s) docker0 (NET/Socket data/bootstrap)")
    assert "NCCL_SOCKET_IFNAME" in f.explanation
    assert any("NET/Socket : Using [0]docker0:" in ln for ln in lines_of(f))


def test_interface_chosen_by_the_job() -> None:
    log = job_log(iface="br-4f2a9c", env=("NCCL_SOCKET_IFNAME=br-",))
    f = one(run(nccl_log=log), "nccl.socket-iface-virtual")
    assert f.blame is Blame.JOB_CONFIG and "NCCL_SOCKET_IFNAME=br-" in f.explanation


def test_loopback_on_one_node_is_info_and_real_interfaces_are_silent() -> None:
    f = one(run(nccl_log=job_log(hosts=("box",), iface="lo")), "nccl.socket-iface-virtual")
    assert f.severity is Severity.INFO and "one node" in f.explanation
    for iface in ("eth0", "ens5", "ibs85f0", "enp36s0f1"):
        assert not mine(run(nccl_log=job_log(iface=iface)), "nccl.socket-iface-virtual")


@pytest.mark.parametrize("iface", ["gre1", "dummy0", "genev_sys_6081", "vnet3", "podman0"])
def test_tunnels_and_container_bridges_are_virtual_too(iface: str) -> None:
    """One list of virtual interface names serves NCCL and the kernel log's carrier
    changes (parsers.kernel_host.is_virtual_interface)."""
    assert one(run(nccl_log=job_log(iface=iface)), "nccl.socket-iface-virtual")
    assert is_virtual_interface(iface)
    for real in ("eth0", "eno1", "ens5", "enp36s0f1", "ibs85f0", "ib0", "bond0", "team0"):
        assert not is_virtual_interface(real)


def test_vpn_interface_in_the_socket_list(corpus) -> None:
    f = one(run(nccl_log=corpus.sample("nccl1637").text()), "nccl.socket-iface-virtual")
    assert "CloudflareWARP (NET/Socket data)" in f.title and f.severity is Severity.INFO
    assert any("[1]CloudflareWARP:172.16.0.2" in ln for ln in lines_of(f))


# --- nccl.node-split -------------------------------------------------------------------


def test_all_ranks_on_two_hosts_counted_as_four_nodes() -> None:
    log = job_log(net="IB", gpus=4, nnodes=4, local_ranks=2)
    f = one(run(nccl_log=log), "nccl.node-split")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    assert f.title == ("NCCL splits hosts into several nodes: 8 ranks as 4 nodes of 2, but all 8 "
                       "ranks are in the log and run on 2 hosts, not 4")
    assert "gpu-a runs 4 ranks of this communicator" in f.explanation
    assert "NCCL_NET_DISABLE_INTRA=1" in f.explanation


def test_lone_comm_line_gives_the_arithmetic(corpus) -> None:
    f = one(run(nccl_log=corpus.sample("nccl2345-h200").text()), "nccl.node-split")
    assert f.severity is Severity.INFO and f.action is Action.NONE
    assert "8 ranks as 4 nodes of 2" in f.title


def test_host_gpu_count_is_noted() -> None:
    """One rank's log from a host with 8 GPUs where NCCL counts 4 per node."""
    log = ("gpu-a:4100:4157 [0] NCCL INFO comm 0x55d000000 rank 0 nRanks 16 nNodes 4 "
           "localRanks 4 localRank 0 MNNVL 0\n")
    buses = [f"0000:{b}:00.0" for b in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]
    pasted = snap(live=False, nccl_log=log, nvml=nvml_doc(buses), hostname="gpu-a\n")
    f = one(analyze(pasted), "nccl.node-split")
    assert f.severity is Severity.INFO and "this host has 8 GPUs (nvml)" in f.explanation
    assert "16 ranks as 4 nodes of 4" in f.title
    assert not mine(run(nccl_log=log, nvml=nvml_doc(buses)), "nccl.node-split")  # testhost
    assert not mine(run(nccl_log=log), "nccl.node-split")


def test_verified_layouts_are_silent(corpus) -> None:
    two_by_two = job_log(net="IB")  # 4 ranks, 2 hosts, nNodes 2 localRanks 2: all in the log
    assert not mine(run(nccl_log=two_by_two), "nccl.node-split")
    for part in ("nccl2345-after", "vllm-k8s", "gke-gvnic"):
        assert not mine(run(nccl_log=corpus.sample(part).text()), "nccl.node-split")


def test_mangled_logs_never_break_the_rules() -> None:
    """Cut, shuffled and number-bloated logs: findings or silence, never a traceback."""
    rng = random.Random(6)
    base = (job_log(env=("NCCL_IB_DISABLE=1",)) + FAR_HCA + NO_GDR + SHM_ONLY).splitlines()
    for _ in range(40):
        lines = rng.sample(base, rng.randint(1, len(base)))
        lines = [ln[: rng.randint(0, len(ln))] if rng.random() < 0.2 else ln for ln in lines]
        lines = [ln.replace("nRanks 4", "nRanks 999999999") for ln in lines]
        result = run(nccl_log="\n".join(lines), nvidia_smi_topo=topo_m(), infiniband=hcas(2))
        assert all(f.title for f in mine(result))


# --- the real captures -------------------------------------------------------------------

# sample -> {rule id: severity} over this module's rules; every other sample: none of them
EXPECTED = {
    "detectron4730": {"nccl.socket-transport": Severity.WARNING},
    "nccltests188": {"nccl.socket-transport": Severity.WARNING},
    "nccl398": {"nccl.socket-transport": Severity.WARNING},
    "nccl952": {"nccl.socket-transport": Severity.INFO},
    "gke-gvnic": {"nccl.socket-transport": Severity.INFO},
    "nccl1637": {"nccl.socket-iface-virtual": Severity.INFO},
    "nccl1657": {"nccl.gdr-disabled": Severity.WARNING},
    "nvpeermem56": {"nccl.gdr-disabled": Severity.WARNING},
    "nccl2345-after": {"nccl.gdr-disabled": Severity.WARNING},
    "nccl2345-h200": {"nccl.node-split": Severity.INFO},
    "vastai-4xa100-shm": {"nccl.shm-transport": Severity.WARNING},
    # one host, P2P and SHM off: the environment is the story, not a missing RDMA stack
    "nccl2057": {"nccl.p2p-disabled": Severity.WARNING},
}


def test_every_category_5_sample_has_an_expectation(corpus) -> None:
    named = {corpus.sample(part).name for part in EXPECTED}
    assert named <= {s.name for s in corpus.category("5")}
    assert len(named) == len(EXPECTED)


def test_corpus_sample_transport_findings(corpus) -> None:
    """Every category-5 capture (new ones included): exactly the expected findings."""
    expected = {corpus.sample(part).name: want for part, want in EXPECTED.items()}
    samples = corpus.category("5")
    assert len(samples) >= 22
    for sample in samples:
        found = {f.id: f.severity for f in mine(run(nccl_log=sample.text()))}
        assert found == expected.get(sample.name, {}), sample.name


# --- P2P / SHM disabled by the environment ------------------------------------------------


def test_p2p_and_shm_disabled_on_one_host_is_the_story_not_sockets() -> None:
    log = job_log(("gpu-a",), env=("NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1"))
    result = run(nccl_log=log, infiniband=hcas(2))
    f = one(result, "nccl.p2p-disabled")
    # the job's own environment: its side, not the node's configuration
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG,
                                               Blame.JOB_CONFIG)
    assert "NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1" in f.title
    assert "drop these variables" in f.explanation
    assert not mine(result, "nccl.socket-transport")


def test_p2p_level_loc_alone_is_named() -> None:
    f = one(run(nccl_log=job_log(("gpu-a",), env=("NCCL_P2P_LEVEL=LOC",), intra="NET/IB/0")),
            "nccl.p2p-disabled")
    assert "NCCL_P2P_LEVEL=LOC" in f.title and "shared memory" in f.explanation


def test_p2p_disabled_across_nodes_keeps_the_socket_finding() -> None:
    """Two hosts on sockets with P2P+SHM off: the inter-node socket fallback stays a
    finding of its own beside the environment's."""
    log = job_log(env=("NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_IB_DISABLE=1"))
    result = run(nccl_log=log)
    assert mine(result, "nccl.p2p-disabled") and mine(result, "nccl.socket-transport")


def test_p2p_disabled_with_shm_channels_is_left_to_shm_transport() -> None:
    log = job_log(("gpu-a",), env=("NCCL_P2P_DISABLE=1",), intra="SHM/direct/direct")
    result = run(nccl_log=log)
    assert mine(result, "nccl.shm-transport") and not mine(result, "nccl.p2p-disabled")
    assert not mine(run(nccl_log=job_log(("gpu-a",))), "nccl.p2p-disabled")
