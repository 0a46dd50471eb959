"""NCCL transport rules (socket fallback, GPUDirect RDMA, SHM, virtual socket
interfaces, nodes split by NCCL) on synthetic logs, with and without the host's own
facts, and on the real captures of category 5."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

import random

import pytest
from hostkit import MODULES_FULL, nvml_doc, pci_tree, run, snap

from gputriage.engine import analyze, analyze_facts
from gputriage.facts import Facts
from gputriage.hostfacts.nccl import nccl_bus_id, process_network
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.nccl_log import parse_nccl_log

MINE = ("nccl.socket-transport", "nccl.gdr-disabled", "nccl.shm-transport",
        "nccl.socket-iface-virtual", "nccl.node-split")


def _rec(host: str, rank: int, dev: int, msg: str) -> str:
    pid = 4100 + rank
    return f"{host}:{pid}:{pid + 57} [{dev}] NCCL INFO {msg}"


def job_log(hosts: tuple[str, ...] = ("gpu-a", "gpu-b"), gpus: int = 2, *,
            net: str = "Socket", iface: str = "eth0", env: tuple[str, ...] = (),
            no_device: bool = False, gdr: bool = True, nnodes: int | None = None,
            local_ranks: int | None = None, intra: str = "P2P/CUMEM/read") -> str:
    """An NCCL_DEBUG=INFO log of ``len(hosts)`` nodes x ``gpus`` ranks, one process
    per rank: bootstrap, env echoes, network choice, comm line, channels."""
    nranks = len(hosts) * gpus
    out = []
    for h, host in enumerate(hosts):
        for d in range(gpus):
            rank = h * gpus + d
            ip = f"10.0.{h}.{11 + d}"
            rec = [f"Bootstrap : Using {iface}:{ip}<0>"]
            rec += [f"{e} set by environment to {v}." for e, v in
                    (item.split("=", 1) for item in env)]
            if net == "Socket":
                if no_device:
                    rec.append("NET/IB : No device found.")
                rec += [f"NET/Socket : Using [0]{iface}:{ip}<0>", "Using network Socket"]
            else:
                rec += ["NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:" + ip
                        + "<0>", "Using network IB"]
            rec.append(f"comm 0x55d{rank:05x}0 rank {rank} nRanks {nranks} nNodes "
                       f"{nnodes or len(hosts)} localRanks {local_ranks or gpus} localRank {d} "
                       "MNNVL 0")
            if gpus > 1:
                peer = h * gpus + (d + 1) % gpus
                rec.append(f"Channel 00/0 : {rank}[{d}] -> {peer}[{(d + 1) % gpus}] via {intra}")
            if len(hosts) > 1:
                other = ((h + 1) % len(hosts)) * gpus + d
                via = "NET/Socket/0" if net == "Socket" else \
                    f"NET/IB/{d % 2}" + ("/GDRDMA" if gdr else "")
                rec += [f"Channel 00/0 : {other}[{d}] -> {rank}[{d}] [receive] via {via}",
                        f"Channel 00/0 : {rank}[{d}] -> {other}[{d}] [send] via {via}"]
            out += [_rec(host, rank, d, m) for m in rec]
    return "\n".join(out) + "\n"


ACTIVE = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
          "link_layer": "InfiniBand"}
DOWN = {**ACTIVE, "state": "1: DOWN", "phys_state": "2: Polling"}


def hcas(n: int = 8, port: dict[str, str] | None = None,
         pci: dict[str, str] | None = None) -> dict:
    """An ``infiniband`` sysfs tree of ``n`` single-port HCAs mlx5_0.."""
    files: dict[str, str] = {}
    for i in range(n):
        files[f"mlx5_{i}/hca_type"] = "MT4129\n"
        for attr, value in (port or ACTIVE).items():
            files[f"mlx5_{i}/ports/1/{attr}"] = value + "\n"
    links = {f"{dev}/device": f"../../../{addr}" for dev, addr in (pci or {}).items()}
    return {"files": files, "links": links, "errors": {}}


NO_HCA = {"files": {}, "links": {}, "errors": {}}
NO_PEERMEM = "".join(ln + "\n" for ln in MODULES_FULL.splitlines()
                     if not ln.startswith("nvidia_peermem"))

# GPU0 and NIC0 (mlx5_0) share a PCIe switch, GPU1 and NIC1 (mlx5_1) another, on two
# sockets; GPU0-GPU1 are joined by NVLink (``nv``) or not.


def topo_m(nv: str = "NV18") -> str:
    rows = [("GPU0", [" X ", nv, "PIX", "SYS"], "0-31\t0\t\tN/A"),
            ("GPU1", [nv, " X ", "SYS", "PIX"], "32-63\t1\t\tN/A"),
            ("NIC0", ["PIX", "SYS", " X ", "SYS"], ""),
            ("NIC1", ["SYS", "PIX", "SYS", " X "], "")]
    out = ["\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    out += [f"{name}\t" + "\t".join(cells) + (f"\t{tail}" if tail else "")
            for name, cells, tail in rows]
    out += ["", "Legend:", "", "  X    = Self", "  SYS  = Connection traversing PCIe as well "
            "as the SMP interconnect between NUMA nodes", "", "NIC Legend:", "",
            "  NIC0: mlx5_0", "  NIC1: mlx5_1", ""]
    return "\n".join(out)


BUSES = ["0000:18:00.0", "0000:9a:00.0"]

# One rank of an IB job whose GPU0 was given the far HCA mlx5_1.
FAR_HCA = """\
gpu-a:4100:4157 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.0.0.11<0>
gpu-a:4100:4157 [0] NCCL INFO Using network IB
gpu-a:4100:4157 [0] NCCL INFO comm 0x55d000000 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
gpu-a:4100:4160 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 18000 / HCA 1 (distance 7 > 5)
gpu-a:4100:4160 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/1
gpu-a:4100:4160 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/1
"""

# No GPUDirect support at all: NCCL says so per HCA, channels lack /GDRDMA.
NO_GDR = """\
gpu-a:4100:4157 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.11<0>
gpu-a:4100:4157 [0] NCCL INFO Using network IB
gpu-a:4100:4157 [0] NCCL INFO comm 0x55d000000 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
gpu-a:4100:4160 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'
gpu-a:4100:4160 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0
gpu-a:4100:4160 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/0
"""

SHM_ONLY = """\
box:4100:4157 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct
box:4101:4158 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct
"""

SHM_P2P_DISABLED = """\
box:4100:4157 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.
box:4101:4158 [1] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.
""" + SHM_ONLY


RULE_CASES = {
    "nccl.socket-transport": [
        ({"nccl_log": job_log(env=("NCCL_IB_DISABLE=1",))}, "nccl.socket-transport"),
        ({"nccl_log": job_log(no_device=True), "infiniband": hcas()}, "nccl.socket-transport"),
    ],
    "nccl.gdr-disabled": [
        ({"nccl_log": NO_GDR, "proc_modules": NO_PEERMEM}, "nccl.gdr-disabled"),
        ({"nccl_log": FAR_HCA}, "nccl.gdr-disabled"),
    ],
    "nccl.shm-transport": [
        ({"nccl_log": SHM_P2P_DISABLED}, "nccl.shm-transport"),
    ],
    "nccl.socket-iface-virtual": [
        ({"nccl_log": job_log(iface="docker0")}, "nccl.socket-iface-virtual"),
    ],
    "nccl.node-split": [
        ({"nccl_log": job_log(net="IB", gpus=4, nnodes=4, local_ranks=2)}, "nccl.node-split"),
    ],
}


def _mine(result, fid: str | None = None):
    return [f for f in result.findings if f.id in MINE and (fid is None or f.id == fid)]


def _one(result, fid: str):
    found = _mine(result, fid)
    assert len(found) == 1, [(f.id, f.title) for f in _mine(result)]
    return found[0]


def _lines(f) -> list[str]:
    return [ln for e in f.evidence for ln in e.lines]


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
    f = _one(run(nccl_log=job_log(env=("NCCL_IB_DISABLE=1",))), "nccl.socket-transport")
    assert f.severity is Severity.WARNING
    assert (f.action, f.blame) == (Action.FIX_CONFIG, Blame.JOB)
    assert f.title.startswith("Inter-node traffic runs over TCP sockets: NCCL_IB_DISABLE=1")
    assert "4 processes on 2 hosts" in f.title and "8 NET/Socket channels" in f.title
    assert any(ln.endswith("NCCL_IB_DISABLE set by environment to 1.") for ln in _lines(f))
    assert any(ln.endswith("via NET/Socket/0") for ln in _lines(f))


def test_ib_disabled_while_this_host_has_active_rails_is_critical() -> None:
    f = _one(run(nccl_log=job_log(env=("NCCL_IB_DISABLE=1",)), infiniband=hcas(8)),
             "nccl.socket-transport")
    assert f.severity is Severity.CRITICAL and f.blame is Blame.JOB
    assert "8 active HCA ports on this host unused" in f.title
    assert [e.source for e in f.evidence] == ["nccl_log", "infiniband"]


def test_host_without_hcas_makes_sockets_expected() -> None:
    f = _one(run(nccl_log=job_log(env=("NCCL_IB_DISABLE=1",)), infiniband=NO_HCA),
             "nccl.socket-transport")
    assert f.severity is Severity.INFO and f.action is Action.NONE
    assert "expected on this network" in f.title


def test_no_device_on_plain_ethernet_is_info() -> None:
    f = _one(run(nccl_log=job_log(no_device=True)), "nccl.socket-transport")
    assert f.severity is Severity.INFO and f.blame is Blame.UNKNOWN
    assert "expected on this network; inter-node bandwidth is limited to TCP" in f.title


def test_no_device_while_the_host_has_hcas_points_at_the_container() -> None:
    f = _one(run(nccl_log=job_log(no_device=True), infiniband=hcas(4)), "nccl.socket-transport")
    assert f.severity is Severity.CRITICAL
    assert (f.action, f.blame) == (Action.FIX_CONFIG, Blame.CONFIG)
    assert "NET/IB found no device although this host has HCAs" in f.title
    assert "/dev/infiniband" in f.explanation


def test_hcas_present_but_down_is_a_warning_pointing_at_the_ports() -> None:
    f = _one(run(nccl_log=job_log(no_device=True), infiniband=hcas(2, DOWN)),
             "nccl.socket-transport")
    assert f.severity is Severity.WARNING and "ib.port-not-active" in f.explanation


def test_other_host_sources_of_hcas() -> None:
    pasted = _one(run(nccl_log=job_log(no_device=True),
                      ibstat="mlx5_0 port 1 ==> ib0 (Up)\nmlx5_1 port 1 ==> ib1 (Up)\n"),
                  "nccl.socket-transport")
    assert pasted.severity is Severity.CRITICAL and "2 active HCA ports" in pasted.title
    on_pci = _one(run(nccl_log=job_log(no_device=True),
                      pci_devices=pci_tree({"0000:18:00.0": "nvidia"}, nics=("0000:19:00.0",))),
                  "nccl.socket-transport")
    assert on_pci.severity is Severity.WARNING and "not exposed" in on_pci.explanation
    assert "ib.port-not-active" not in on_pci.explanation


def test_forced_socket_net_and_hca_filter() -> None:
    forced = _one(run(nccl_log=job_log(env=("NCCL_NET=Socket",))), "nccl.socket-transport")
    assert "NCCL_NET=Socket set by the environment" in forced.title
    assert forced.blame is Blame.JOB
    filtered = _one(run(nccl_log=job_log(env=("NCCL_IB_HCA=mlx5_9",), no_device=True)),
                    "nccl.socket-transport")
    assert "NCCL_IB_HCA=mlx5_9 matched no usable device" in filtered.title
    assert filtered.severity is Severity.WARNING


def test_single_node_and_ib_jobs_are_silent() -> None:
    one_node = job_log(hosts=("gpu-a",), gpus=4, no_device=True)
    assert not _mine(run(nccl_log=one_node), "nccl.socket-transport")
    ib_job = job_log(net="IB")
    assert not _mine(run(nccl_log=ib_job, infiniband=hcas(2)))


def test_streamed_log_still_gives_evidence() -> None:
    """``gputriage nccl`` pre-fills the log without keeping its text."""
    facts = Facts(snap(infiniband=hcas(2)))
    facts.prefill("nccl_log", parse_nccl_log(job_log(env=("NCCL_IB_DISABLE=1",))))
    f = _one(analyze_facts(facts), "nccl.socket-transport")
    assert any(ln.startswith("gpu-a:4100:") and ln.endswith(
        "NCCL INFO NCCL_IB_DISABLE set by environment to 1.") for ln in _lines(f)), _lines(f)
    assert any("via NET/Socket/0" in ln for ln in _lines(f))


def test_libibverbs_missing(corpus) -> None:
    f = _one(run(nccl_log=corpus.sample("detectron4730").text()), "nccl.socket-transport")
    assert "libibverbs could not be loaded" in f.title
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_SOFTWARE, Blame.JOB)
    assert "rdma-core" in f.explanation and "does not show how many nodes" in f.explanation
    assert any("Failed to open libibverbs.so[.1]" in ln for ln in _lines(f))


def test_ib_disabled_over_ipoib(corpus) -> None:
    f = _one(run(nccl_log=corpus.sample("nccltests188").text()), "nccl.socket-transport")
    assert "NCCL_IB_DISABLE=1 set by the environment" in f.title
    assert "interface ib0, ibs85f0" in f.title
    assert "IPoIB" in f.explanation and f.blame is Blame.JOB


def test_ofi_plugin_without_efa(corpus) -> None:
    f = _one(run(nccl_log=corpus.sample("nccl398").text()), "nccl.socket-transport")
    assert "OFI (libfabric) plugin found no usable provider" in f.title
    assert "job: at least 2 hosts" in f.title and "interface ens5" in f.title
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)
    assert "EFA" in f.explanation
    assert any("NET/OFI Only EFA provider is supported" in ln for ln in _lines(f))


def test_socket_channels_without_reason_then_with_the_hosts_hcas(corpus) -> None:
    text = corpus.sample("nccl952").text()
    alone = _one(run(nccl_log=text), "nccl.socket-transport")
    assert alone.severity is Severity.INFO and "the log does not show why" in alone.title
    assert "4 NET/Socket channels" in alone.title
    host = _one(run(nccl_log=text, infiniband=hcas(8)), "nccl.socket-transport")
    assert host.severity is Severity.CRITICAL and host.blame is Blame.CONFIG
    assert "HCAs go unused" in host.title and "not exposed to the container" in host.explanation


def test_gke_gvnic_is_expected(corpus) -> None:
    f = _one(run(nccl_log=corpus.sample("gke-gvnic").text()), "nccl.socket-transport")
    assert f.severity is Severity.INFO
    assert "job: 3 nodes (nNodes)" in f.title and "interface eth0" in f.title
    assert "expected on this network" in f.title
    assert not _mine(run(nccl_log=corpus.sample("gke-gvnic").text()), "nccl.gdr-disabled")


def test_single_node_socket_selection_is_not_a_transport_problem(corpus) -> None:
    result = run(nccl_log=corpus.sample("nccl1637").text())
    assert not _mine(result, "nccl.socket-transport")


# --- nccl.socket-iface-virtual ---------------------------------------------------------


def test_docker_bridge_as_data_interface() -> None:
    f = _one(run(nccl_log=job_log(iface="docker0")), "nccl.socket-iface-virtual")
    assert f.severity is Severity.WARNING and f.blame is Blame.CONFIG
    assert f.title.startswith("NCCL uses virtual interface(s) docker0 (NET/Socket data/bootstrap)")
    assert "NCCL_SOCKET_IFNAME" in f.explanation
    assert any("NET/Socket : Using [0]docker0:" in ln for ln in _lines(f))


def test_interface_chosen_by_the_job() -> None:
    log = job_log(iface="br-4f2a9c", env=("NCCL_SOCKET_IFNAME=br-",))
    f = _one(run(nccl_log=log), "nccl.socket-iface-virtual")
    assert f.blame is Blame.JOB and "NCCL_SOCKET_IFNAME=br-" in f.explanation


def test_loopback_on_one_node_is_info_and_real_interfaces_are_silent() -> None:
    f = _one(run(nccl_log=job_log(hosts=("box",), iface="lo")), "nccl.socket-iface-virtual")
    assert f.severity is Severity.INFO and "one node" in f.explanation
    for iface in ("eth0", "ens5", "ibs85f0", "enp36s0f1"):
        assert not _mine(run(nccl_log=job_log(iface=iface)), "nccl.socket-iface-virtual")


def test_vpn_interface_in_the_socket_list(corpus) -> None:
    f = _one(run(nccl_log=corpus.sample("nccl1637").text()), "nccl.socket-iface-virtual")
    assert "CloudflareWARP (NET/Socket data)" in f.title and f.severity is Severity.INFO
    assert any("[1]CloudflareWARP:172.16.0.2" in ln for ln in _lines(f))


# --- nccl.gdr-disabled -----------------------------------------------------------------


def test_far_hca_related_to_the_topology() -> None:
    f = _one(run(nccl_log=FAR_HCA, nvidia_smi_topo=topo_m(), nvml=nvml_doc(BUSES)),
             "nccl.gdr-disabled")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    assert "GPU 18000 / HCA 1 (mlx5_1) at distance 7, limit 5" in f.title
    assert "2 network channel(s) without /GDRDMA" in f.title
    assert "topo -m: GPU0 [0000:18:00.0] to mlx5_1 is SYS; its nearest NIC is mlx5_0 (PIX)" \
        in f.explanation
    assert f.scope.kind == "gpu" and f.scope.pci_bus_id == "0000:18:00.0"
    assert [e.source for e in f.evidence] == ["nccl_log", "nvidia_smi_topo"]


def test_far_hca_related_to_numa_nodes() -> None:
    pci = pci_tree({"0000:18:00.0": "nvidia"}, nics=("0000:9b:00.0",))
    pci["files"]["0000:9b:00.0/numa_node"] = "1\n"
    ib = hcas(2, pci={"mlx5_1": "0000:9b:00.0"})
    f = _one(run(nccl_log=FAR_HCA, pci_devices=pci, infiniband=ib), "nccl.gdr-disabled")
    assert ("sysfs: GPU 0000:18:00.0 on NUMA node 0, mlx5_1 (0000:9b:00.0) on NUMA node 1 "
            "(different NUMA nodes)") in f.explanation


def test_no_gdr_support_with_and_without_peermem() -> None:
    missing = _one(run(nccl_log=NO_GDR, proc_modules=NO_PEERMEM), "nccl.gdr-disabled")
    assert (missing.action, missing.blame) == (Action.FIX_SOFTWARE, Blame.NODE)
    assert "nvidia_peermem is not loaded on this host" in missing.title
    assert "HCA 0 'mlx5_0'" in missing.title and "2 network channel(s)" in missing.title
    assert missing.evidence[-1].source == "proc_modules"
    loaded = _one(run(nccl_log=NO_GDR, proc_modules=MODULES_FULL), "nccl.gdr-disabled")
    assert loaded.blame is Blame.CONFIG and "although nvidia_peermem is loaded" in loaded.title
    unknown = _one(run(nccl_log=NO_GDR), "nccl.gdr-disabled")
    assert unknown.blame is Blame.NODE and "nvidia_peermem not loaded?" in unknown.title


def test_gdr_level_set_by_the_job() -> None:
    log = NO_GDR.replace("NCCL INFO Using network IB",
                         "NCCL INFO NCCL_NET_GDR_LEVEL set by environment to LOC.")
    f = _one(run(nccl_log=log, proc_modules=MODULES_FULL), "nccl.gdr-disabled")
    assert f.blame is Blame.JOB and "NCCL_NET_GDR_LEVEL=LOC" in f.title


def test_all_channels_with_gdr_are_silent() -> None:
    assert not _mine(run(nccl_log=job_log(net="IB"), proc_modules=NO_PEERMEM),
                     "nccl.gdr-disabled")
    bare = job_log(net="IB", gdr=False)
    f = _one(run(nccl_log=bare, proc_modules=NO_PEERMEM), "nccl.gdr-disabled")
    assert "8 network channel(s) without /GDRDMA" in f.title


def test_distance_in_the_log(corpus) -> None:
    f = _one(run(nccl_log=corpus.sample("nccl1657").text()), "nccl.gdr-disabled")
    assert "GPU 42000 / HCA 0 at distance 6, limit 4" in f.title
    assert f.scope.pci_bus_id == "0000:42:00.0" and f.blame is Blame.CONFIG
    old = _one(run(nccl_log=corpus.sample("nvpeermem56").text()), "nccl.gdr-disabled")
    assert "3 GPU/HCA pair(s) on 2 hosts" in old.title
    assert "master_node: GPU 3[3] / HCA 0 at distance 3, limit 2" in old.title
    assert "4 network channel(s) without /GDRDMA" in old.title


def test_far_nic_loses_gdr_on_half_the_channels(corpus) -> None:
    f = _one(run(nccl_log=corpus.sample("nccl2345-after").text()), "nccl.gdr-disabled")
    assert f.title == ("2 of 4 network channels lose GPUDirect RDMA (NET/IB/1 without it; "
                       "NET/IB/0 with it)")
    assert "GPU 0 uses GPUDirect on NET/IB/0" in f.explanation
    assert f.action is Action.FIX_CONFIG


# --- nccl.shm-transport ----------------------------------------------------------------


def test_p2p_disabled_by_the_job() -> None:
    f = _one(run(nccl_log=SHM_P2P_DISABLED), "nccl.shm-transport")
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.JOB)
    assert "because NCCL_P2P_DISABLE=1 is set" in f.title and "1 GPU pair(s) via SHM: 0-1" in f.title


def test_p2p_level_limited_by_the_job() -> None:
    log = SHM_ONLY + "box:4100:4157 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to NVL.\n"
    f = _one(run(nccl_log=log, nvidia_smi_topo=topo_m("SYS")), "nccl.shm-transport")
    assert f.blame is Blame.JOB and "because NCCL_P2P_LEVEL=NVL is set" in f.title
    assert any(ln.endswith("NCCL_P2P_LEVEL set by environment to NVL.") for ln in _lines(f))


def test_shm_between_nvlinked_gpus() -> None:
    f = _one(run(nccl_log=SHM_ONLY, nvidia_smi_topo=topo_m("NV18")), "nccl.shm-transport")
    assert f.severity is Severity.WARNING and f.action is Action.FIX_CONFIG
    assert "topo -m: 0-1 NV18" in f.title and "IPC" in f.explanation
    assert f.evidence[-1].lines == ("GPU0-GPU1 NV18",)


def test_shm_only_without_nvlink_is_info() -> None:
    f = _one(run(nccl_log=SHM_ONLY, nvidia_smi_topo=topo_m("SYS")), "nccl.shm-transport")
    assert f.severity is Severity.INFO
    assert not _mine(run(nccl_log=job_log(net="IB")), "nccl.shm-transport")


def test_partial_nvlink_is_the_topology(corpus) -> None:
    f = _one(run(nccl_log=corpus.sample("vastai-4xa100-shm").text()), "nccl.shm-transport")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.NONE, Blame.CONFIG)
    assert "2 GPU pair(s) via SHM: 0-3, 1-2; 2 pair(s) via P2P: 2-3, 0-1" in f.title
    assert "topology" in f.explanation


def test_partial_nvlink_with_the_same_hosts_topology(corpus) -> None:
    result = run(nccl_log=corpus.sample("vastai-4xa100-shm").text(),
                 nvidia_smi_topo=corpus.sample("vastai-4xa100-partial").text())
    f = _one(result, "nccl.shm-transport")
    assert f.severity is Severity.WARNING and f.blame is Blame.CONFIG
    assert "topo -m for the SHM pairs: 0-3 NODE, 1-2 NODE." in f.explanation
    assert set(f.evidence[-1].lines) == {"GPU0-GPU3 NODE", "GPU1-GPU2 NODE", "GPU2-GPU3 NV10",
                                          "GPU0-GPU1 NV12"}


# --- nccl.node-split -------------------------------------------------------------------


def test_all_ranks_on_two_hosts_counted_as_four_nodes() -> None:
    log = job_log(net="IB", gpus=4, nnodes=4, local_ranks=2)
    f = _one(run(nccl_log=log), "nccl.node-split")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    assert f.title == ("NCCL splits hosts into several nodes: 8 ranks as 4 nodes of 2, but all 8 "
                       "ranks are in the log and run on 2 hosts, not 4")
    assert "gpu-a runs 4 ranks of this communicator" in f.explanation
    assert "NCCL_NET_DISABLE_INTRA=1" in f.explanation


def test_lone_comm_line_gives_the_arithmetic(corpus) -> None:
    f = _one(run(nccl_log=corpus.sample("nccl2345-h200").text()), "nccl.node-split")
    assert f.severity is Severity.INFO and f.action is Action.NONE
    assert "8 ranks as 4 nodes of 2" in f.title


def test_host_gpu_count_is_noted() -> None:
    """One rank's log from a host with 8 GPUs where NCCL counts 4 per node."""
    log = ("gpu-a:4100:4157 [0] NCCL INFO comm 0x55d000000 rank 0 nRanks 16 nNodes 4 "
           "localRanks 4 localRank 0 MNNVL 0\n")
    buses = [f"0000:{b}:00.0" for b in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]
    pasted = snap(live=False, nccl_log=log, nvml=nvml_doc(buses), hostname="gpu-a\n")
    f = _one(analyze(pasted), "nccl.node-split")
    assert f.severity is Severity.INFO and "this host has 8 GPUs (nvml)" in f.explanation
    assert "16 ranks as 4 nodes of 4" in f.title
    assert not _mine(run(nccl_log=log, nvml=nvml_doc(buses)), "nccl.node-split")  # testhost
    assert not _mine(run(nccl_log=log), "nccl.node-split")


def test_verified_layouts_are_silent(corpus) -> None:
    two_by_two = job_log(net="IB")  # 4 ranks, 2 hosts, nNodes 2 localRanks 2: all in the log
    assert not _mine(run(nccl_log=two_by_two), "nccl.node-split")
    for part in ("nccl2345-after", "vllm-k8s", "gke-gvnic"):
        assert not _mine(run(nccl_log=corpus.sample(part).text()), "nccl.node-split")


def test_mangled_logs_never_break_the_rules() -> None:
    """Cut, shuffled and number-bloated logs: findings or silence, never a traceback."""
    rng = random.Random(6)
    base = (job_log(env=("NCCL_IB_DISABLE=1",)) + FAR_HCA + NO_GDR + SHM_ONLY).splitlines()
    for _ in range(40):
        lines = rng.sample(base, rng.randint(1, len(base)))
        lines = [ln[: rng.randint(0, len(ln))] if rng.random() < 0.2 else ln for ln in lines]
        lines = [ln.replace("nRanks 4", "nRanks 999999999") for ln in lines]
        result = run(nccl_log="\n".join(lines), nvidia_smi_topo=topo_m(), infiniband=hcas(2))
        assert all(f.title for f in _mine(result))


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
}


def test_every_category_5_sample_has_an_expectation(corpus) -> None:
    named = {corpus.sample(part).name for part in EXPECTED}
    assert named <= {s.name for s in corpus.category("5")}
    assert len(named) == len(EXPECTED)


@pytest.mark.parametrize("name", sorted(
    ["awsofinccl715", "detectron4730", "gke-gvnic", "vastai-4xa100-shm", "nccl1189", "nccl1405",
     "nccl1412", "nccl1637", "nccl1657", "nccl1814", "nccl1817", "nccl2345-after",
     "nccl2345-h200", "nccl2428", "nccl398", "nccl928", "nccl952", "nccltests188",
     "nvpeermem56", "rtxpro6000-dbe", "vllm-k8s"]))
def test_corpus_sample_transport_findings(corpus, name: str) -> None:
    found = {f.id: f.severity for f in _mine(run(nccl_log=corpus.sample(name).text()))}
    assert found == EXPECTED.get(name, {})
