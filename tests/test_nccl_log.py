"""NCCL_DEBUG=INFO logs: the real captures of corpus category 5, synthetic multi-rank logs
with every kind of prefix, streaming, bad input, and the verbs status table."""

from __future__ import annotations

import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gputriage.knowledge.ib_status import ib_wc_status, ib_wc_statuses
from gputriage.parsers import nccl_model as m
from gputriage.parsers.nccl_log import is_nccl_line, parse_nccl_log, read_nccl_log


def _one(log: m.NcclLog, host: str | None = None, pid: int | None = None) -> m.NcclProcess:
    hits = [p for p in log.processes if (host is None or p.host == host)
            and (pid is None or p.pid == pid)]
    assert len(hits) == 1, [p.label for p in log.processes]
    return hits[0]


def _corpus_log(corpus, part: str) -> m.NcclLog:
    return parse_nccl_log(corpus.sample(part).text())


# --- every category-5 sample ----------------------------------------------------------

def test_every_category5_sample_parses(corpus):
    """Every sample reads whole; those that are an nccl-tests run alone (its table, its
    failure line: no NCCL record) hold no process, every other sample some."""
    from gputriage.ingest.detect import detect

    samples = corpus.category("5")
    assert len(samples) >= 20
    for s in samples:
        text = s.text()
        log = parse_nccl_log(text)
        assert log.lines_read == len(text.splitlines()), s.name
        if [name for name, _ in detect(text)] == ["nccl_tests"]:
            assert not log.processes and not log.framework_errors, s.name
        else:
            assert log.processes or log.framework_errors, s.name


def test_cloudwatch_prefixed_p2p_cumem_read(corpus):
    log = _corpus_log(corpus, "awsofinccl715")
    assert {p.label for p in log.processes} == {"algo-1:18064", "algo-1:18059"}
    p7 = _one(log, pid=18064)
    assert [c.channel for c in p7.channels] == [2, 4, 5, 6]
    assert {(c.transport, c.family, c.rank, c.peer, c.conn) for c in p7.channels} == {
        ("P2P/CUMEM/read", m.P2P, 7, 6, 0)}
    assert p7.cuda_devs == {7} and p7.ranks == {7}
    # libfabric's own "<warn>" lines are not NCCL records
    assert all(not p.warns for p in log.processes)
    assert log.nccl_lines == 9


def test_libibverbs_missing_socket_network(corpus):
    log = _corpus_log(corpus, "detectron4730")
    assert len(log.processes) == 2
    for p in log.processes:
        assert p.ibverbs_missing and p.network == "Socket"
        assert p.socket_ifaces == ["enp36s0f1"] and p.bootstrap_iface == "enp36s0f1"
        assert p.net_devices == ["enp36s0f1:168.188.129.189"]
        assert [(w.kind, w.source_loc) for w in p.warns] == [("net", "misc/ibvwrap.cc:63")]
        assert p.net_plugin is None
    # the bare version line printed after rank 0's lines belongs to rank 0
    assert log.versions == {"2.10.3"}
    rank0 = _one(log, pid=1379562)
    assert (rank0.nccl_version, rank0.cuda_build) == ("2.10.3", "11.3")
    assert _one(log, pid=1379564).nccl_version is None


def test_author_elided_gke_socket_log(corpus):
    log = _corpus_log(corpus, "gke-gvnic")
    p = _one(log)
    assert p.host is None and p.label == "(no host prefix)"
    assert p.ib_no_device and p.network == "Socket" and p.socket_ifaces == ["eth0"]
    assert p.bootstrap_iface == "eth0"
    assert [(g.enabled, g.hca, g.hca_name, g.net) for g in p.gdr] == [
        (False, "0", "eth0", "Socket")]
    (comm,) = p.comms
    assert (comm.rank, comm.nranks, comm.nnodes, comm.local_ranks, comm.local_rank) == (
        0, 24, 3, 8, 0)
    (ch,) = p.channels
    assert (ch.transport, ch.family, ch.rank, ch.peer, ch.direction, ch.net_dev, ch.gdr) == (
        "NET/Socket/0", m.NET_SOCKET, 17, 0, "receive", 0, False)
    assert ch.own_rank == 0
    assert len(p.rings) == 2 and p.rings[1] == "Ring 00 : 17 -> 0 -> 7"
    assert p.trees and p.trees[0].startswith("Trees [0] 1/16/-1->0->-1")


def test_shm_and_p2p_cumem_mix(corpus):
    log = _corpus_log(corpus, "nccl-tp-readme-vastai-4xa100-shm")
    fams = {(c.rank, c.peer): (c.family, c.transport) for p in log.processes for c in p.channels}
    assert fams[(3, 0)] == (m.SHM, "SHM/direct/direct")
    assert fams[(1, 2)] == (m.SHM, "SHM/direct/direct")
    assert fams[(2, 3)] == (m.P2P, "P2P/CUMEM/read")
    assert fams[(0, 1)] == (m.P2P, "P2P/CUMEM/read")
    # the middle-generation "Channel 02 :" form has no connection index
    assert {c.conn for p in log.processes for c in p.channels if c.family == m.SHM} == {None}


def test_net_ib_gdrdma_and_p2p_cumem(corpus):
    log = _corpus_log(corpus, "nccl1189")
    assert log.hosts == ["H20-GPU-05", "H20-GPU-06"]
    p = _one(log, pid=4015540)
    net = [c for c in p.channels if c.family == m.NET_IB]
    assert len(net) == 8 and all(c.gdr and c.net_dev == 2 for c in net)
    assert {c.direction for c in net} == {"send", "receive"}
    assert {c.own_rank for c in p.channels} == {3} and p.ranks == {3}
    assert [c.transport for c in p.channels if c.family == m.P2P] == ["P2P/CUMEM"]
    other = _one(log, pid=4015539)
    assert [(c.net_dev, c.gdr, c.own_rank) for c in other.channels] == [(3, True, 2)]


def test_plugin_completion_error_status12(corpus):
    log = _corpus_log(corpus, "nccl1405")
    p = _one(log)
    assert len(p.warns) == 3
    for w in p.warns:
        assert w.kind == "ib-completion" and w.source_loc == "ib_plugin.c:1615"
        assert (w.ib_status, w.ib_status_name, w.vendor_err, w.direction) == (
            12, "IBV_WC_RETRY_EXC_ERR", 129, "Recv")
        assert "unreachable" in w.ib_meaning
    assert [w.opcode for w in p.warns] == [0, 32616, 32616]
    assert p.warns[2].peer == "10.216.210.236<49892>"
    assert p.error_traces == 8


def test_init_complete_and_timings(corpus):
    log = _corpus_log(corpus, "nccl1412")
    p = _one(log)
    assert p.cuda_devs == {0, 1, 2, 4, 5, 6} and p.last_step == "Init COMPLETE"
    by_rank = {c.rank: c for c in p.comms}
    assert sorted(by_rank) == [0, 1, 2, 4, 5, 6] and len(p.comms) == 6
    six = by_rank[6]
    assert (six.comm, six.nranks, six.cuda_dev, six.nvml_dev, six.bus_id, six.comm_id) == (
        "0x8ec0ac0", 16, 6, 6, "c8000", "0x49bbd7790311d5eb")
    assert six.init_complete and six.init_total_s == 1.08
    assert six.init_steps_s == {"kernels": 0.5, "bootstrap": 0.22, "allgathers": 0.0,
                                "topo": 0.28, "graphs": 0.04, "connections": 0.02, "rest": 0.0}
    assert by_rank[0].init_total_s == 1.08 and by_rank[0].comm == "0x8d57d40"
    # rank 2's COMPLETE line was cut by the author: its timings stand alone
    assert by_rank[2].comm is None and not by_rank[2].init_complete
    assert by_rank[2].init_steps_s["kernels"] == 0.51
    assert by_rank[4].init_total_s is None and by_rank[4].init_complete


def test_p2p_disabled_socket_only_new_style(corpus):
    log = _corpus_log(corpus, "nccl1637")
    assert log.versions == {"2.25.1"}
    p = _one(log, pid=11344)
    assert (p.nccl_version, p.cuda_build, p.cuda_driver) == ("2.25.1", "12.2", 12080)
    assert p.bootstrap_iface == "eno1" and p.oob_iface == "eno1"
    assert p.ib_no_device and p.ib_devices == [] and p.network == "Socket"
    assert p.socket_ifaces == ["eno1", "CloudflareWARP"]
    assert p.net_devices == ["eno1:10.201.24.89", "CloudflareWARP:172.16.0.2"]
    assert p.last_step == "Using network"
    assert _one(log, pid=11326).last_step == "NCCL version"


def test_gdr_disabled_by_distance(corpus):
    p = _one(_corpus_log(corpus, "nccl1657"))
    (g,) = p.gdr
    assert (g.enabled, g.gpu, g.hca, g.distance, g.max_distance, g.net) == (
        False, "42000", "0", 6, 4, None)
    assert p.lines == 12 and not p.warns


def test_roce_status12_then_flush(corpus):
    p = _one(_corpus_log(corpus, "nccl1814"))
    assert [w.ib_status for w in p.warns] == [12, 5, 5]
    assert [w.vendor_err for w in p.warns] == [129, 249, 249]
    assert p.warns[1].ib_status_name == "IBV_WC_WR_FLUSH_ERR"
    assert "earlier error" in p.warns[1].ib_meaning
    assert p.warns[0].peer == "172.36.143.59<44206>" and p.warns[0].opcode == 129


def test_pcie_p2p_direct_pointer(corpus):
    p = _one(_corpus_log(corpus, "nccl1817"))
    assert {c.transport for c in p.channels} == {"P2P/direct pointer"}
    assert {c.family for c in p.channels} == {m.P2P} and len(p.channels) == 6
    assert p.connected.count("Connected all rings") == 6
    assert p.cuda_devs == {0, 1, 2, 3, 4, 6, 7}


def test_far_nic_channels_without_gdr(corpus):
    p = _one(_corpus_log(corpus, "nccl2345-after"))
    (comm,) = p.comms
    assert (comm.nnodes, comm.local_ranks, comm.nranks) == (2, 4, 8)
    assert [(c.net_dev, c.gdr) for c in p.channels] == [(0, True), (1, False), (0, True),
                                                         (1, False)]
    assert [(c.rank, c.rank_dev, c.peer, c.peer_dev) for c in p.channels][0] == (7, "3", 0, "0")


def test_rail_isolated_comm_nnodes4(corpus):
    p = _one(_corpus_log(corpus, "nccl2345-h200"))
    (comm,) = p.comms
    assert (comm.comm, comm.rank, comm.nranks, comm.nnodes, comm.local_ranks) == (
        "0x55dae9e8f270", 0, 8, 4, 2)
    assert p.last_step == "comm"


def test_patched_warn_could_not_open_erdma(corpus):
    p = _one(_corpus_log(corpus, "nccl2428"))
    assert p.host is None
    first, second = p.warns
    assert (first.kind, first.device, first.rank) == ("net", "erdma_1", 1)
    assert "errno 2" in first.message
    assert second.rank == 1 and "may hang" in second.message


def test_ofi_only_efa_then_socket(corpus):
    log = _corpus_log(corpus, "nccl398")
    assert len(log.processes) == 7 and log.hosts == ["ip-172-31-0-112", "ip-172-31-13-129"]
    ofi = [w for p in log.processes for w in p.warns]
    assert len(ofi) == 2 and {(w.kind, w.source_loc) for w in ofi} == {("net", "ofi_init:700")}
    assert {p.pid for p in log.processes if p.ib_no_device} == {8162, 8164, 8166}
    assert {tuple(p.socket_ifaces) for p in log.processes if p.socket_ifaces} == {("ens5",)}
    assert {p.pid for p in log.processes if p.env == {"NCCL_TREE_THRESHOLD": "0"}} == {
        8159, 8161, 8165, 8537}


def test_old_completion_error4_local_protection(corpus):
    log = _corpus_log(corpus, "nccl928")
    warns = [w for p in log.processes for w in p.warns]
    assert len(warns) == 3 and log.hosts == ["H100-1", "H100-2", "H100-5"]
    for w in warns:
        assert (w.kind, w.ib_status, w.ib_status_name, w.vendor_err, w.direction) == (
            "ib-completion", 4, "IBV_WC_LOC_PROT_ERR", 81, "Send")
        assert w.source_loc == "transport/net_ib.cc:1295" and "%ib0" in w.peer
        assert "GPUDirect" in w.ib_meaning
    assert warns[0].opcode == 32564


def test_p2p_ipc_read_and_socket_failure(corpus):
    log = _corpus_log(corpus, "nccl952")
    assert {p.host for p in log.processes} == {"<cluster_name>"}
    ipc = _one(log, pid=920)
    assert {c.transport for c in ipc.channels} == {"P2P/IPC/read"} and ipc.ranks == {9}
    sock = _one(log, pid=919)
    assert {c.family for c in sock.channels} == {m.NET_SOCKET} and sock.ranks == {8}
    bad = _one(log, pid=922)
    assert [w.kind for w in bad.warns] == ["system", "system", "socket"]
    assert bad.warns[2].source_loc == "misc/socket.cc:49"
    assert bad.error_traces == 5


def test_ib_disable_env_socket_over_ipoib(corpus):
    log = _corpus_log(corpus, "nccltests188")
    # Open MPI help lines are not NCCL records
    assert all(p.host == "user" for p in log.processes)
    p = _one(log, pid=852750)
    assert p.env == {"NCCL_IB_DISABLE": "1"} and p.network == "Socket"
    assert p.socket_ifaces == ["ibs85f0", "ib0"]
    first = _one(log, pid=169131)
    assert first.cuda_driver == 12020 and first.bootstrap_iface == "ibs85f0"
    assert first.net_plugin is None


def test_old_ring_format_gdr_distance(corpus):
    log = _corpus_log(corpus, "nvpeermem56")
    assert log.hosts == ["master_node", "secondary_node"]
    p = _one(log, pid=11717)
    (g,) = p.gdr
    assert (g.enabled, g.gpu, g.hca, g.distance, g.max_distance, g.net) == (
        False, "2[2]", "0", 3, 2, "IB")
    (ch,) = p.channels
    assert (ch.rank, ch.peer, ch.rank_dev, ch.direction, ch.transport, ch.gdr, ch.own_rank) == (
        6, 2, None, "receive", "NET/IB/0", False, 2)
    ipc = [c for q in log.processes for c in q.channels if c.family == m.P2P]
    assert len(ipc) == 6 and {c.transport for c in ipc} == {"P2P/IPC"}
    assert _one(log, pid=11718).channels[1].channel == 1


def test_framework_ecc_error_and_watchdog_timeout(corpus):
    log = _corpus_log(corpus, "rtxpro6000-dbe-rank1-uncorrectable-ecc-rank0-nccl")
    assert not log.processes
    cuda, timeout = log.framework_errors
    assert (cuda.kind, cuda.rank, cuda.time) == ("cuda", 1, "08-10 15:36:05.945860779")
    assert "uncorrectable ECC error" in cuda.message
    assert (timeout.kind, timeout.rank, timeout.op_type, timeout.seq_num) == (
        "timeout", 0, "ALLREDUCE", 51753)
    assert (timeout.timeout_ms, timeout.elapsed_ms) == (600000, 600072)


def test_vllm_ray_interleaved_torn(corpus):
    log = _corpus_log(corpus, "vllm-k8s")
    p = _one(log)
    assert p.network == "IB" and p.dmabuf is True
    assert {c.family for c in p.channels} == {m.NET_IB} and all(c.gdr for c in p.channels)
    assert [c.transport for c in p.channels if c.conn == 1] == [
        "NET/IB/0/GDRDMA/Shared", "NET/IB/1/GDRDMA/Shared"]
    (comm,) = p.comms
    assert (comm.nranks, comm.nnodes, comm.local_ranks, comm.init_complete) == (2, 2, 1, True)
    assert comm.bus_id == "100000" and comm.comm_id == "0xf3e517aa6c3e9c19"
    assert p.connected == ["Connected all rings", "Connected all trees"]
    assert p.channel_counts == {"coll": 2, "collnet": 2, "nvls": 0, "p2p": 2,
                                "p2p per peer": 2}
    assert p.rings == ["Channel 00/02 :    0   1", "Channel 01/02 :    0   1"]
    # a PyTorch warning (level W) is not a framework error
    assert not log.framework_errors


# --- synthetic logs ---------------------------------------------------------------------

# Two nodes, rank 0 and rank 8 of a 16-rank job, NCCL 2.21.5, HPC-X IB plugin; each line
# shipped through a different launcher or log shipper.
TWO_NODES = """\
gpu-a01:4411:4411 [0] NCCL INFO Bootstrap : Using ib0:10.12.0.11<0>
2025-03-02T10:15:01.204Z gpu-b07:5120:5120 [0] NCCL INFO Bootstrap : Using ib0:10.12.0.27<0>
gpu-a01:4411:4411 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)
gpu-a01:4411:4411 [0] NCCL INFO cudaDriverVersion 12040
gpu-a01:4411:4411 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
[1,8]<stdout>:gpu-b07:5120:5120 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu-a01:4411:4502 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0,mlx5_1.
gpu-a01:4411:4502 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0
gpu-a01:4411:4502 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PHB
gpu-a01:4411:4502 [0] NCCL INFO NET/IBext_v8 : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/RoCE [RO]; \
OOB ib0:10.12.0.11<0>
8: gpu-b07:5120:5187 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.12.0.27<0>
gpu-a01:4411:4502 [0] NCCL INFO Using network IBext_v8
(RayWorkerWrapper pid=5120, ip=10.12.0.27) gpu-b07:5120:5187 [0] NCCL INFO Using network IB
gpu-a01:4411:4502 [0] NCCL INFO DMA-BUF is available on GPU device 0
gpu-a01:4411:4502 [0] NCCL INFO ncclCommInitRank comm 0x55d0c1a2b3c0 rank 0 nranks 16 \
cudaDev 0 nvmlDev 0 busId 18000 commId 0x7a1f00c2d4e5b6a7 - Init START
gpu-a01:4411:4502 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 18000 / HCA 0 (distance 4 <= 5), \
read 1
gpu-b07:5120:5187 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 18000 / HCA 1 (distance 6 > 5)
gpu-a01:4411:4502 [0] NCCL INFO comm 0x55d0c1a2b3c0 rank 0 nRanks 16 nNodes 2 localRanks 8 \
localRank 0 MNNVL 0
gpu-a01:4411:4502 [0] NCCL INFO Channel 00/04 :    0   7   6   5   4   3   2   1   8  15  14  13  \
12  11  10   9
gpu-a01:4411:4502 [0] NCCL INFO Trees [0] 1/8/-1->0->-1 [1] 1/-1/-1->0->8
  | 2025-03-02T10:15:02.880Z | gpu-a01:4411:4502 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via \
P2P/CUMEM/read
gpu-a01:4411:4502 [0] NCCL INFO Channel 01/0 : 9[1] -> 0[0] [receive] via NET/IBext_v8/0/GDRDMA
gpu-a01:4411:4502 [0] NCCL INFO Channel 05/0 : 0[0] -> 8[0] [send] via NET/IB/0(1)/GDRDMA
gpu-a01:4411:4502 [0] NCCL INFO Channel 02/0 : 0[0] -> 3[3] via SHM/direct/direct
gpu-a01:4411:4502 [0] NCCL INFO Channel 03/0 : 0[0] -> 8[0] [send] via NET/Socket/1
gpu-a01:4411:4502 [0] NCCL INFO CollNet 00/0 : 0 [receive] via COLLNET/IBext_v8/0/GDRDMA
gpu-a01:4411:4502 [0] NCCL INFO NVLS multicast support is available on dev 0
gpu-a01:4411:4502 [0] NCCL INFO Connected all rings, use ring PXN 1 GDR 1
gpu-a01:4411:4502 [0] NCCL INFO Connected all trees
gpu-a01:4411:4502 [0] NCCL INFO Connected NVLS
gpu-a01:4411:4502 [0] NCCL INFO ncclCommInitRank comm 0x55d0c1a2b3c0 rank 0 nranks 16 \
cudaDev 0 nvmlDev 0 busId 18000 commId 0x7a1f00c2d4e5b6a7 - Init COMPLETE
gpu-a01:4411:4502 [0] NCCL INFO Init timings - ncclCommInitRank: rank 0 nranks 16 total 0.92 \
(kernels 0.31, alloc 0.02, bootstrap 0.10, allgathers 0.01, topo 0.30, graphs 0.01, \
connections 0.15, rest 0.02)
Mar  2 10:20:44 gpu-b07 python[5120]: gpu-b07:5120:5190 [0] transport/net_ib.cc:2341 NCCL WARN \
NET/IB: Got completion from peer 10.12.0.11<53122> with status=transport retry counter \
exceeded(12) opcode=RECV(128) vendor_err=129  localGid ::ffff:10.12.0.27 remoteGids::ffff:10.12.\
0.11 hca mlx5_1
gpu-b07:5120:5190 [0] NCCL INFO transport/net.cc:1302 -> 6
gpu-b07:5120:5190 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote \
peer gpu-a01<43210>
gpu-b07:5120:5190 [0] enqueue.cc:1510 NCCL WARN Cuda failure 'an illegal memory access was \
encountered'
gpu-b07:5120:5190 [0] init.cc:201 NCCL WARN Error while creating shared memory segment \
/dev/shm/nccl-AbCdEf (size 9637888)
"""


def test_two_node_log_with_every_prefix():
    log = parse_nccl_log(TWO_NODES)
    assert log.hosts == ["gpu-a01", "gpu-b07"] and len(log.processes) == 2
    assert log.versions == {"2.21.5"}
    a = _one(log, host="gpu-a01")
    assert (a.nccl_version, a.cuda_build, a.cuda_driver) == ("2.21.5", "12.4", 12040)
    assert a.net_plugin == "NCCL RDMA Plugin v8" and a.network == "IBext_v8"
    assert a.ib_devices == ["mlx5_0:1/IB/SHARP", "mlx5_1:1/RoCE"] and a.oob_iface == "ib0"
    assert a.bootstrap_iface == "ib0" and a.dmabuf is True
    assert a.env == {"NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "ib0",
                     "NCCL_NET_GDR_LEVEL": "PHB"}
    (gdr,) = a.gdr
    assert (gdr.enabled, gdr.gpu, gdr.hca, gdr.distance, gdr.max_distance, gdr.read) == (
        True, "18000", "0", 4, 5, True)
    (comm,) = a.comms
    assert (comm.comm, comm.rank, comm.nranks, comm.nnodes, comm.local_ranks) == (
        "0x55d0c1a2b3c0", 0, 16, 2, 8)
    assert (comm.bus_id, comm.comm_id, comm.init_complete, comm.init_total_s) == (
        "18000", "0x7a1f00c2d4e5b6a7", True, 0.92)
    assert comm.init_steps_s["alloc"] == 0.02 and comm.init_steps_s["connections"] == 0.15
    assert "nNodes 2" in comm.line
    fam = {c.channel: c for c in a.channels if c.family != m.COLLNET}
    assert fam[0].family == m.P2P and fam[0].line.startswith("gpu-a01:4411:4502 [0]")
    assert fam[1].family == m.NET_PLUGIN and fam[1].gdr is True
    assert (fam[1].rank, fam[1].peer, fam[1].own_rank, fam[1].net_dev) == (9, 0, 0, 0)
    assert (fam[2].family, fam[3].family) == (m.SHM, m.NET_SOCKET) and fam[3].gdr is False
    pxn = [c for c in a.channels if c.proxy_rank is not None]
    assert [(c.family, c.net_dev, c.proxy_rank, c.gdr) for c in pxn] == [(m.NET_IB, 0, 1, True)]
    coll = [c for c in a.channels if c.family == m.COLLNET]
    assert [(c.rank, c.peer, c.direction, c.gdr) for c in coll] == [(0, None, "receive", True)]
    assert a.collnet is True and a.nvls is True
    assert a.connected == ["Connected all rings, use ring PXN 1 GDR 1", "Connected all trees",
                           "Connected NVLS"]
    assert len(a.rings) == 1 and a.rings[0].endswith("10   9") and len(a.trees) == 1
    assert a.last_step == "Init timings" and a.ranks == {0}

    b = _one(log, host="gpu-b07")
    assert b.nccl_version == "2.21.5" and b.network == "IB" and b.ib_devices == ["mlx5_0:1/IB"]
    assert [(g.enabled, g.hca, g.distance, g.max_distance) for g in b.gdr] == [
        (False, "1", 6, 5)]
    ib, sock, cuda, shm = b.warns
    assert (ib.kind, ib.ib_status, ib.ib_status_name, ib.opcode, ib.vendor_err, ib.device) == (
        "ib-completion", 12, "IBV_WC_RETRY_EXC_ERR", 128, 129, "mlx5_1")
    assert ib.source_loc == "transport/net_ib.cc:2341" and ib.peer == "10.12.0.11<53122>"
    assert (sock.kind, cuda.kind, shm.kind) == ("socket", "cuda", "system")
    assert b.error_traces == 1 and b.last_step == "GPU Direct RDMA"


TORN = (
    "node1:100:200 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/readnode1:101:201 [1] "
    "NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/IPC/read\n"
    "node1:100:200 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2\n"
    "P/IPC/read\n"
    "node1:101:201 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/I\n"
    "node1:101:201 [1] NCCL INFO comm 0x5 rank 1 nRanks\n"
    "node1:100:200 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via\n"
)


def test_torn_and_glued_lines_give_what_they_hold():
    log = parse_nccl_log(TORN)
    r0, r1 = _one(log, pid=100), _one(log, pid=101)
    assert [(c.channel, c.transport) for c in r1.channels] == [(0, "P2P/IPC/read")]
    # the glued record kept its own text; the cut one keeps the cut transport
    assert r0.channels[0].transport == "P2P/IPC/read"
    assert r0.channels[1].transport == "P2"
    assert r1.ib_devices == ["mlx5_0:1/IB", "mlx5_1:1/I"]
    assert [(c.comm, c.rank, c.nranks) for c in r1.comms] == [("0x5", 1, None)]
    assert log.nccl_lines == 5 and r0.lines == 3 and r1.lines == 3


FRAMEWORK = """\
[rank3]:[E1103 02:11:40.118000000 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective \
operation timeout: WorkNCCL(SeqNum=812, OpType=ALLGATHER, NumelIn=1024, NumelOut=8192, \
Timeout(ms)=1800000) ran for 1800094 milliseconds before timing out.
[rank3]:[E1103 02:11:40.120000000 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective \
operation timeout: WorkNCCL(SeqNum=812, OpType=ALLGATHER, NumelIn=1024, NumelOut=8192, \
Timeout(ms)=1800000) ran for 1800094 milliseconds before timing out.
[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered
[rank2]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/\
c10d/NCCLUtils.hpp:317, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL \
version 2.21.5
[rank1]:[W1103 02:00:01.000000000 ProcessGroupNCCL.cpp:4115] Warning: the barrier uses a guessed \
device
export NCCL_DEBUG=INFO
"""


def test_framework_errors_one_line_forms_deduplicated():
    log = parse_nccl_log(FRAMEWORK)
    assert not log.processes
    kinds = [(w.kind, w.rank) for w in log.framework_errors]
    assert kinds == [("timeout", 3), ("cuda", 5), ("nccl", 2)]
    t = log.framework_errors[0]
    assert (t.op_type, t.seq_num, t.timeout_ms, t.elapsed_ms, t.time) == (
        "ALLGATHER", 812, 1800000, 1800094, "11-03 02:11:40.118000000")
    assert "unhandled system error" in log.framework_errors[2].message


def test_hang_reports_last_init_step():
    text = ("h1:7:7 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
            "h1:7:9 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n"
            "h2:8:8 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n")
    log = parse_nccl_log(text)
    assert _one(log, host="h1").last_step == "NET/IB : Using"
    assert _one(log, host="h2").last_step == "Bootstrap"
    assert _one(log, host="h1").ib_devices == ["mlx5_0:1/RoCE"]


def _chunks(data: bytes, size: int):
    for i in range(0, len(data), size):
        yield data[i:i + size]


def _summary(log: m.NcclLog) -> tuple:
    return (log.processes, log.framework_errors, log.versions, log.lines_read, log.nccl_lines,
            log.skipped)


@pytest.mark.parametrize("size", [1, 7, 64, 4096, 1 << 20])
def test_streaming_equals_parse(size):
    text = TWO_NODES + TORN + FRAMEWORK + "\n\nno newline at the end NCCL INFO x"
    whole = parse_nccl_log(text)
    streamed = read_nccl_log(_chunks(text.encode(), size), "job.log")
    assert _summary(streamed) == _summary(whole)
    assert streamed.origins == ["job.log"] and whole.origins == []
    assert whole.lines_read == text.count("\n") + 1


def test_streaming_several_files_into_one_log():
    log = read_nccl_log([TWO_NODES.encode()[:3000], TWO_NODES.encode()[3000:]], "a.log")
    read_nccl_log(iter([b"gpu-c02:9:9 [3] NCCL INFO Using network Socket\n"]), "b.log", log)
    assert log.origins == ["a.log", "b.log"] and log.hosts == ["gpu-a01", "gpu-b07", "gpu-c02"]


def test_overlong_lines_are_skipped_and_counted():
    big = "x" * 70_000
    text = (f"h:1:1 [0] NCCL INFO {big}\n"          # over 64 KiB, an NCCL record
            f"{big}\n"                               # over 64 KiB, nothing of ours
            "h:1:1 [0] NCCL INFO Using network IB\n")
    for log in (parse_nccl_log(text), read_nccl_log(_chunks(text.encode(), 1000), "f")):
        assert log.skipped == 1 and log.lines_read == 3
        assert _one(log).network == "IB" and _one(log).lines == 1


def test_binary_garbage_and_other_programs_give_an_empty_log():
    rnd = random.Random(6)
    noise = bytes(rnd.randrange(256) for _ in range(200_000)) + b"NCCL\x00INFO\xff\n"
    log = read_nccl_log([noise], "core.bin")
    assert not log.processes and not log.framework_errors and log.lines_read > 0
    crashed = b"\x00" * 5000 + b"h9:1:1 [0] NCCL INFO Using network IB\n" + b"\x00" * 300
    assert _one(read_nccl_log([crashed], "rank0.log")).network == "IB"
    others = ("[  12.345678] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n"
              "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 |\n"
              "Epoch 3: loss=0.1123 (using NCCL backend)\n")
    assert not parse_nccl_log(others).processes
    assert parse_nccl_log("").processes == [] and parse_nccl_log("\x00\x01").processes == []


def test_per_process_caps_count_the_rest():
    lines = [f"h:1:1 [0] NCCL INFO Channel {i % 32:02d}/0 : 0[0] -> 1[1] via P2P/IPC\n"
             for i in range(5000)]
    p = _one(parse_nccl_log("".join(lines)))
    assert len(p.channels) == 4096 and p.dropped == {"channels": 904} and p.lines == 5000


def test_is_nccl_line():
    yes = ["host:1:2 [0] NCCL INFO Using network IB",
           "  | 2024-12-04T05:27:44.080Z | algo-1:1:2 [7] NCCL INFO Channel 02/0 : 7[7] -> 6[6]",
           "NCCL WARN Rank 1 on h could not open erdma_1",
           "NCCL version 2.10.3+cuda11.3",
           "[rank0]:[E810 15:46:05.7 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught "
           "collective operation timeout:",
           "h:1:2 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion"]
    no = ["[ 1234.5678] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
          "May 31 05:33:40 node kernel: nvidia-nvlink: NCCL is not a kernel thing",
          "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |",
          "export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET",
          "#  Rank  0 Group  0 Pid   1234 on  node1 device  0 [0x18] NVIDIA H100 80GB HBM3",
          ""]
    assert all(is_nccl_line(x) for x in yes)
    assert not any(is_nccl_line(x) for x in no)


def test_streaming_many_blocks_of_mostly_other_lines():
    """Blocks of other programs' lines with NCCL records among them: every record is
    read, block after block (speed is measured in benchmarks/nccl_scan.py)."""
    filler = b"2025-03-02 10:00:00 step 1234 loss 0.5123 lr 3e-4 tokens/s 81234.5 mem 71.2G\n"
    block = filler * ((1 << 20) // len(filler)) + TWO_NODES.encode()
    once = parse_nccl_log(TWO_NODES)
    n = 8
    log = read_nccl_log((block for _ in range(n)), "big.log")
    assert len(log.processes) == 2 and log.nccl_lines == once.nccl_lines * n
    assert _one(log, host="gpu-a01").lines == _one(once, host="gpu-a01").lines * n
    assert len(_one(log, host="gpu-a01").comms) == n


# --- the verbs status table -------------------------------------------------------------

def test_ib_wc_status_table():
    table = ib_wc_statuses()
    assert sorted(table) == list(range(22))
    assert ib_wc_status(0)[0] == "IBV_WC_SUCCESS"
    assert ib_wc_status(21)[0] == "IBV_WC_GENERAL_ERR"
    assert ib_wc_status(12)[0] == "IBV_WC_RETRY_EXC_ERR"
    assert "flap" in ib_wc_status(12)[1] and "congestion" in ib_wc_status(12)[1]
    assert ib_wc_status(5)[0] == "IBV_WC_WR_FLUSH_ERR" and "secondary" in ib_wc_status(5)[1]
    assert ib_wc_status(4)[0] == "IBV_WC_LOC_PROT_ERR"
    assert all(w in ib_wc_status(4)[1] for w in ("ACS", "IOMMU", "peermem", "DMA-BUF"))
    assert ib_wc_status(13)[0] == "IBV_WC_RNR_RETRY_EXC_ERR"
    assert ib_wc_status(10)[0] == "IBV_WC_REM_ACCESS_ERR"
    assert table[12][1] == "transport retry counter exceeded"
    assert ib_wc_status(22) is None and ib_wc_status(-1) is None
    assert len({name for name, _, _ in table.values()}) == 22


def test_cloud_plugin_dmabuf_nvls_and_trace_lines():
    text = """\
ip-10-1-2-3:900:900 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.7.4-aws
ip-10-1-2-3:900:900 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)
ip-10-1-2-3:900:900 [0] NCCL INFO Using network AWS Libfabric
ip-10-1-2-3:900:950 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/AWS \
Libfabric/0/GDRDMA
ip-10-1-2-3:900:950 [0] NCCL INFO NET/IB : GPU Direct RDMA (DMABUF) enabled for HCA 0 'mlx5_0'
ip-10-1-2-3:900:950 [0] NCCL INFO NVLS multicast support is not available on dev 0
ip-10-1-2-3:900:950 [0] 1234.567890 transport.cc:12 NCCL TRACE Connected all rings
"""
    p = _one(parse_nccl_log(text))
    assert (p.net_plugin, p.ofi_provider, p.network) == ("aws-ofi-nccl 1.7.4-aws", "efa",
                                                         "AWS Libfabric")
    (ch,) = p.channels
    assert (ch.family, ch.net_dev, ch.gdr, ch.own_rank) == (m.NET_PLUGIN, 0, True, 0)
    (g,) = p.gdr
    assert (g.enabled, g.mechanism, g.hca_name, g.net) == (True, "DMABUF", "mlx5_0", "IB")
    assert p.dmabuf is True and p.nvls is False
    assert p.connected == ["Connected all rings"] and p.last_step == "Connected all rings"


@pytest.mark.parametrize(("msg", "want"), [
    ("Ring 00 : 3[3] -> 1[1] via P2P/IPC", (0, None, 3, "3", 1, None, m.P2P, None, None, None)),
    ("Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA",
     (1, None, 2, "c7000", 0, "receive", m.NET_IB, 5, True, None)),
    ("Ring 00 : 3[b01000] -> 4[201000] [send] via NET/Socket/0",
     (0, None, 3, "b01000", 4, "send", m.NET_SOCKET, 0, False, None)),
    ("Channel 03/0 : 47[7] -> 39[7] [receive] via NET/IBext_v8/2",
     (3, 0, 47, "7", 39, "receive", m.NET_PLUGIN, 2, False, None)),
    ("Channel 02/1 : 0[0] -> 9[1] [send] via NET/IB/0(8)/GDRDMA",
     (2, 1, 0, "0", 9, "send", m.NET_IB, 0, True, 8)),
    ("Channel 05/0 : 4[4] -> 5[5] via P2P/direct pointer/read",
     (5, 0, 4, "4", 5, None, m.P2P, None, None, None)),
    ("Channel 06/0 : 1[1] -> 2[2] via SHM/direct/direct",
     (6, 0, 1, "1", 2, None, m.SHM, None, None, None)),
    ("Channel 07/0 : 1[1] -> 2[2] via XYZ/new", (7, 0, 1, "1", 2, None, m.OTHER, None, None,
                                                  None)),
])
def test_channel_line_generations(msg, want):
    p = _one(parse_nccl_log(f"n1:5:6 [3] NCCL INFO {msg}\n"))
    (c,) = p.channels
    assert (c.channel, c.conn, c.rank, c.rank_dev, c.peer, c.direction, c.family, c.net_dev,
            c.gdr, c.proxy_rank) == want
    assert c.transport == msg.split(" via ", 1)[1] and c.line.endswith(msg)


def test_first_raw_line_of_each_setting_is_kept_per_process() -> None:
    text = (
        "gpu-a:4100:4100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "gpu-a:4100:4100 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
        "gpu-a:4100:4190 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
        "gpu-a:4100:4190 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
        "gpu-a:4100:4190 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
        "gpu-a:4100:4190 [0] NCCL INFO Using network Socket\n")
    (proc,) = parse_nccl_log(text).processes
    lines = text.splitlines()
    assert proc.notes == {"bootstrap": lines[0], "version": lines[1],
                          "env:NCCL_IB_DISABLE": lines[2], "net:Socket": lines[4],
                          "network": lines[5]}


# --- review fixes ---------------------------------------------------------------------------

def test_newest_completion_warn_names_its_direction_in_req_type():
    text = ("gpu-b07:5120:5190 [2] transport/net_ib.cc:2401 NCCL WARN NET/IB: Got completion "
            "from peer 10.12.0.11<53122> with status=transport retry counter exceeded(12) "
            "opcode=RECV(128) reqSize=0 vendor_err=129 req_type=Recv localGid ::ffff:10.12.0.27 "
            "remoteGids::ffff:10.12.0.11 hca mlx5_2\n")
    (w,) = _one(parse_nccl_log(text)).warns
    assert (w.kind, w.ib_status, w.opcode, w.vendor_err, w.direction, w.device) == (
        "ib-completion", 12, 128, 129, "Recv", "mlx5_2")


def test_elided_comm_pointers_do_not_merge_communicators():
    """An author's "0x…" is not a pointer: two communicators of one rank stay two."""
    text = ("NCCL INFO comm 0x… rank 0 nRanks 24 nNodes 3 localRanks 8 localRank 0 MNNVL 0\n"
            "NCCL INFO comm 0x… rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0\n")
    p = _one(parse_nccl_log(text))
    assert [(c.comm, c.rank, c.nranks, c.nnodes) for c in p.comms] == [
        (None, 0, 24, 3), (None, 0, 2, 2)]


def test_pytorch_nccl_error_names_without_nccl_error_words():
    """PyTorch raises "DistBackendError: ncclSystemError: ..." and "NCCL communicator was
    aborted": both are framework errors, streamed or not."""
    text = ("[rank3]: RuntimeError: NCCL communicator was aborted on rank 3. Original reason for "
            "failure was: NCCL error: remote process exited or there was a network error\n"
            "[rank5]: torch.distributed.DistBackendError: ncclSystemError: System call (e.g. "
            "socket, malloc) or external library call failed or device error.\n")
    for log in (parse_nccl_log(text), read_nccl_log([text.encode()], "train.log")):
        assert [(w.kind, w.rank) for w in log.framework_errors] == [("nccl", 3), ("nccl", 5)]
        assert "ncclSystemError" in log.framework_errors[1].message
    assert is_nccl_line(text.splitlines()[1])


# --- old records: the shape tested before the shippers' prefixes are stripped ---------

_SHIPPER = st.sampled_from(["", "  | 2025-03-02T10:00:01Z | ", "2025-03-02 10:00:01,946 ",
                            "[2025-03-02T10:00:01.5+00:00] ", "(worker pid=77, ip=10.0.0.1) ",
                            "[1,3]<stdout>: ", "3: ", "Mar  2 10:00:01 node-a python[77]: ",
                            "[rank3] ", "x: "])
_SPACE = st.sampled_from([" ", "  ", "\t", "\u3000", "\u00a0", "", " \u2003"])
_HEAD = st.tuples(st.sampled_from(["gpu-a01", "h", "a b", "(x)", ""]),
                  st.sampled_from([":77:88", ":77", ":12345678901:1", ":x:1"]), _SPACE,
                  st.sampled_from(["[0]", "[-1]", "[123456]", "[rank3]", ""]), _SPACE
                  ).map("".join)
_BODY = st.sampled_from(["INFO NET : Using interface eth0", "INFO", "INFO  x",
                         "misc/ibvwrap.cc:252 WARN Call to ibv_create_qp failed",
                         "include/socket.h:311 WARN Net : refused", "init.cc:90 WARN\tx",
                         "train.py:412 INFO step 3", "WARN x", "socket.cc:1 WARN",
                         "NET/IB : Got completion from peer 10.0.0.3<1> with error 12",
                         "INFO Got completion"])


@settings(max_examples=500, deadline=None)
@given(st.tuples(_SHIPPER, _HEAD, _BODY, st.sampled_from(["", " ", "\r", " tail"])
                 ).map("".join))
@example("2025-03-02 10:35:54,946 [rank14] INFO train.py:412 step 59223 loss 1.5235")
@example("  | 2025-03-02T10:00:01Z | gpu-a01:77:88 [0] INFO NET : Using interface eth0")
def test_an_old_record_is_read_as_when_its_prefixes_are_stripped_first(line):
    """An old NCCL record (INFO or WARN with no "NCCL" before it, or a bare completion
    error) is found by its shape before any shipper's prefix is stripped: the same record
    as stripping every line first, and none where that finds none."""
    from gputriage.parsers import nccl_lines as nl

    def stripped_first(text: str) -> object:
        bare = nl.strip_shippers(text).strip()
        if "WARN" in text:
            m = nl._OLD_WARN.match(bare)
            return None if m is None or (m["host"] and nl._NOT_HOST.fullmatch(m["host"])) \
                else (m["host"], m["pid"], m["dev"], m["loc"], m["msg"].strip())
        if "INFO" in text and (m := nl._OLD_INFO.match(bare)) is not None and \
                not nl._NOT_HOST.fullmatch(m["host"]):
            return m["host"], m["pid"], m["dev"], None, m["msg"].strip()
        if "Got completion" in text and (b := nl._BARE_COMPLETION.match(bare)) is not None:
            return None, None, None, None, b["msg"].strip()
        return None

    got = nl._old_record(line)
    want = stripped_first(line)
    if want is None:
        assert got is None
    else:
        assert got is not None
        assert (got.host, None if got.pid is None else str(got.pid),
                None if got.dev is None else str(got.dev), got.loc, got.msg) == want
