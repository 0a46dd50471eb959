"""NCCL error rules (completion errors, device open failures, other WARNs) and the
job-level ones (version mismatch, init that never completed, watchdog timeouts), on
the real captures and on synthetic logs."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

from hostkit import MODULES_FULL, run, snap

from gputriage.facts.store import Facts
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.nccl_log import parse_nccl_log
from gputriage.rules.nccl_errors import completions
from gputriage.rules.nccl_ib_advice import roce_path

# A 2-node RoCE job: rank 4 of node-a loses its peer on node-b (retry exceeded), then
# the queue pair's outstanding work is flushed; node-a's rank 5 sees the same peer.
ROCE_RETRY = """\
node-a:5120:5188 [4] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.20.0.11<0>
node-a:5120:5301 [4] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.20.1.12<41876> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.20.1.11 remoteGids::ffff:10.20.1.12 hca mlx5_0
node-a:5120:5301 [4] NCCL INFO transport/net.cc:1298 -> 6
node-a:5120:5301 [4] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.20.1.12<41876> with status=5 opcode=0 len=0 vendor err 249 (Send) localGid ::ffff:10.20.1.11 remoteGids::ffff:10.20.1.12 hca mlx5_0
node-a:5121:5307 [5] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.20.1.12<41880> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.20.1.11 remoteGids::ffff:10.20.1.12 hca mlx5_0
"""

FLUSH_ONLY = """\
gpu-n3:7001:7090 [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.9.0.4<50122> with status=5 opcode=0 len=0 vendor err 249 (Recv) localGid ::ffff:10.9.0.3 remoteGids::ffff:10.9.0.4
"""

VERSIONS = """\
node-a:1201:1201 [0] NCCL INFO Bootstrap : Using ib0:10.1.0.11<0>
node-a:1201:1201 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node-b:2210:2210 [0] NCCL INFO Bootstrap : Using ib0:10.1.0.12<0>
node-b:2210:2210 [0] NCCL INFO NCCL version 2.18.1+cuda12.1
node-c:3302:3302 [0] NCCL INFO Bootstrap : Using ib0:10.1.0.13<0>
node-c:3302:3302 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
"""

CUDA_BUILDS = """\
node-a:1201:1201 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node-b:2210:2210 [0] NCCL INFO NCCL version 2.21.5+cuda12.1
"""

# Rank 0 hangs after choosing its HCAs; rank 1 on the same node completes.
INIT_HANG = """\
node-a:1201:1201 [0] NCCL INFO Bootstrap : Using ib0:10.1.0.11<0>
node-a:1201:1201 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node-a:1201:1250 [0] NCCL INFO ncclCommInitRank comm 0x55d0c0a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1f2e3d4c5b6a7988 - Init START
node-a:1201:1250 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.0.11<0>
node-a:1201:1250 [0] NCCL INFO Using network IB
node-a:1202:1251 [1] NCCL INFO ncclCommInitRank comm 0x56aa1230 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x1f2e3d4c5b6a7988 - Init START
node-a:1202:1251 [1] NCCL INFO ncclCommInitRank comm 0x56aa1230 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x1f2e3d4c5b6a7988 - Init COMPLETE
"""

UVERBS = """\
trainer-0:88:88 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.4.0.5<0>
trainer-0:88:140 [0] misc/ibvwrap.cc:121 NCCL WARN Call to ibv_open_device failed: could not open mlx5_0 (Permission denied, errno 13)
"""

OTHER_WARNS = """\
worker-1:410:410 [0] misc/shmutils.cc:87 NCCL WARN Error: failed to extend /dev/shm/nccl-kx9Q2a to 9637892 bytes
worker-1:410:410 [0] include/alloc.h:112 NCCL WARN Cuda failure 'out of memory'
worker-1:411:411 [1] misc/shmutils.cc:87 NCCL WARN Error: failed to extend /dev/shm/nccl-Lm3pQ8 to 9637892 bytes
worker-2:512:530 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.3.0.2<43211> failed : Connection refused
"""

TIMEOUT_ONLY = """\
[rank3]:[E1104 09:12:44.120837443 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8812, OpType=ALLGATHER, NumelIn=1048576, NumelOut=8388608, Timeout(ms)=1800000) ran for 1800095 milliseconds before timing out.
"""

ILLEGAL = """\
[rank2]:[E1104 09:01:02.556120938 ProcessGroupNCCL.cpp:1595] [PG 0 Rank 2] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered
[rank0]:[E1104 09:31:02.118240552 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=402, OpType=BROADCAST, NumelIn=4096, NumelOut=4096, Timeout(ms)=1800000) ran for 1800013 milliseconds before timing out.
"""

XID79 = "[ 1341.220121] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', GPU has fallen off the bus."

SHARED_MEM = ("n1:11344:11344 [1] NCCL INFO NCCL version 2.25.1+cuda12.2\n"
              "n1:11344:11344 [1] NCCL INFO cudaDriverVersion 12080\n"
              "n1:11344:11344 [1] NCCL INFO ncclMaxSharedMem 82240 exceeds device/fn "
              "maxSharedMem 79856\n")

RULE_CASES = {
    "nccl.shared-mem-exceeded": [({"nccl_log": SHARED_MEM}, "nccl.shared-mem-exceeded")],
    "nccl.ib-completion-error": [({"nccl_log": ROCE_RETRY}, "nccl.ib-completion-error")],
    "nccl.version-mismatch": [({"nccl_log": VERSIONS}, "nccl.version-mismatch")],
    "nccl.init-incomplete": [({"nccl_log": INIT_HANG}, "nccl.init-incomplete")],
    "nccl.device-open-failed": [({"nccl_log": UVERBS}, "nccl.device-open-failed")],
    "nccl.warn": [({"nccl_log": OTHER_WARNS}, "nccl.warn")],
    "nccl.watchdog-timeout": [({"nccl_log": TIMEOUT_ONLY}, "nccl.watchdog-timeout")],
    "nccl.nvls-failed": [({"nccl_log": "h:1:1 [0] transport/nvls.cc:254 NCCL WARN Cuda failure "
                                       "401 'the operation cannot be performed in the present "
                                       "state'\n"}, "nccl.nvls-failed")],
}


def _ours(result, fid: str):
    return [f for f in result.findings if f.id == fid]


# --- nccl.ib-completion-error ------------------------------------------------------------------


# One host of a RoCE job loses three different peers at once: its own link is the suspect.
ONE_HOST_MANY_PEERS = "".join(
    f"node-a:5120:5301 [4] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
    f"10.20.1.{12 + i}<41876> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid "
    f"::ffff:10.20.1.11 remoteGids::ffff:10.20.1.{12 + i}\n" for i in range(3))


def test_retry_exceeded_toward_one_peer(corpus) -> None:
    """A dead peer and a broken path look the same from one side: the node's network
    (the path or the peer) is blamed, as a warning: never a drain of this node."""
    [f] = _ours(run(nccl_log=corpus.sample("nccl1405").text()), "nccl.ib-completion-error")
    assert f.severity is Severity.WARNING
    assert f.blame is Blame.NODE and f.action is Action.RESTART_JOB
    assert f.title == ("3 IB completion errors: status 12 (IBV_WC_RETRY_EXC_ERR, vendor err 129) "
                       "on kp-ddp-worker-0 toward peer 10.216.210.236")
    assert "RoCE path" in f.explanation  # fd00:... GIDs are IPv6 addresses, not IB GIDs
    assert "peer's process or node died" in f.explanation
    assert len(f.evidence[0].lines) == 3 and f.occurrences.count == 3


def test_retry_exceeded_toward_several_peers_blames_this_node() -> None:
    [f] = _ours(run(nccl_log=ONE_HOST_MANY_PEERS), "nccl.ib-completion-error")
    assert (f.blame, f.action) == (Blame.NODE, Action.DRAIN_AND_REPAIR)
    assert "One host lost 3 different peers" in f.explanation


def test_retry_exceeded_with_a_down_port_on_this_host() -> None:
    tree = {"files": {"mlx5_0/hca_type": "MT4129\n", "mlx5_0/ports/1/state": "1: DOWN\n",
                      "mlx5_0/ports/1/phys_state": "2: Polling\n",
                      "mlx5_0/ports/1/link_layer": "Ethernet\n"}, "links": {}, "errors": {}}
    [f] = _ours(run(nccl_log=ROCE_RETRY, infiniband=tree), "nccl.ib-completion-error")
    assert (f.blame, f.action) == (Blame.NODE, Action.DRAIN_AND_REPAIR)
    assert "mlx5_0/1 are not active" in f.explanation
    assert [e.source for e in f.evidence] == ["nccl_log", "infiniband"]
    assert any("1: DOWN" in ln for ln in f.evidence[1].lines)


def test_fabric_is_read_from_gids_devices_and_host() -> None:
    def comps(text: str):
        return completions(parse_nccl_log(text))

    fe80 = ("h1:1:2 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
            "fe80::966d:ae03:8b:df78%ib0<53249> with error 12, opcode 1, len 0, vendor err 129 "
            "(Send)\n")
    assert roce_path(comps(fe80), None) is False  # peer address on an IPoIB interface
    assert roce_path(comps(FLUSH_ONLY), None) is True  # ::ffff: GID
    bare = fe80.replace("%ib0", "")
    assert roce_path(comps(bare), None) is None
    eth = {"files": {"mlx5_0/ports/1/link_layer": "Ethernet\n",
                     "mlx5_0/ports/1/state": "4: ACTIVE\n"}, "links": {}, "errors": {}}
    ports = Facts(snap(infiniband=eth)).get("ib_ports")
    assert roce_path(comps(bare), ports) is True


def test_first_error_is_the_cause_and_flushes_are_secondary(corpus) -> None:
    log = parse_nccl_log(corpus.sample("nccl1814").text())
    assert [(c.status, c.secondary) for c in completions(log)] == [
        (12, False), (5, True), (5, True)]
    assert [c.root for c in completions(log)] == [None, 12, 12]
    [f] = _ours(run(nccl_log=corpus.sample("nccl1814").text()), "nccl.ib-completion-error")
    assert "status 12" in f.title and "then 2x status 5 (flushed, secondary)" in f.title
    assert "toward peer 172.36.143.59" in f.title
    assert "RoCE path" in f.explanation and "PFC/ECN" in f.explanation  # ::ffff: GIDs
    assert (f.blame, f.severity) == (Blame.NODE, Severity.WARNING)  # the path or the peer
    assert "consequences of this first error" in f.explanation
    assert f.occurrences.count == 3


def test_local_protection_on_several_hosts(corpus) -> None:
    [f] = _ours(run(nccl_log=corpus.sample("nccl928").text()), "nccl.ib-completion-error")
    assert f.title == ("3 IB completion errors: status 4 (IBV_WC_LOC_PROT_ERR, vendor err 81) "
                       "on 3 hosts (H100-1, H100-2, H100-5)")
    assert f.blame is Blame.CONFIG and f.action is Action.FIX_CONFIG
    assert "ACS" in f.explanation and "IOMMU" in f.explanation
    assert "Here:" not in f.explanation  # no host facts given


def test_local_protection_with_host_facts(corpus) -> None:
    mods = "\n".join(ln for ln in MODULES_FULL.splitlines() if "peermem" not in ln) + "\n"
    result = run(nccl_log=corpus.sample("nccl928").text(), proc_modules=mods,
                 proc_cmdline="BOOT_IMAGE=/vmlinuz ro intel_iommu=on\n")
    [f] = _ours(result, "nccl.ib-completion-error")
    assert "nvidia_peermem is not loaded on this host" in f.explanation
    assert "no iommu=pt" in f.explanation
    sources = [e.source for e in f.evidence]
    assert sources[0] == "nccl_log" and "proc_modules" in sources
    with_peermem = run(nccl_log=corpus.sample("nccl928").text(), proc_modules=MODULES_FULL)
    [g] = _ours(with_peermem, "nccl.ib-completion-error")
    assert "nvidia_peermem is not loaded" not in g.explanation


def test_synthetic_roce_retry_names_hca_and_counts_flush() -> None:
    [f] = _ours(run(nccl_log=ROCE_RETRY), "nccl.ib-completion-error")
    assert "2 IB completion errors: status 12" in f.title
    assert "on node-a toward peer 10.20.1.12 via mlx5_0" in f.title
    assert f.scope.kind == "nic" and f.scope.name == "mlx5_0"
    assert "then 1x status 5" in f.title and f.occurrences.count == 3


def test_flush_errors_alone_point_elsewhere() -> None:
    [f] = _ours(run(nccl_log=FLUSH_ONLY), "nccl.ib-completion-error")
    assert f.severity is Severity.WARNING and "first error is not in this log" in f.title
    assert f.action is Action.NONE


# --- nccl.version-mismatch ---------------------------------------------------------------------


def test_mixed_releases_are_critical_and_list_hosts() -> None:
    [f] = _ours(run(nccl_log=VERSIONS), "nccl.version-mismatch")
    assert f.severity is Severity.CRITICAL and f.blame is Blame.JOB
    assert f.action is Action.FIX_SOFTWARE
    assert f.title == ("2 NCCL releases in one job: 2.18.1+cuda12.1 on node-b:2210; "
                       "2.21.5+cuda12.4 on node-a:1201, node-c:3302")
    assert f.evidence[0].lines == (
        "node-b:2210:2210 [0] NCCL INFO NCCL version 2.18.1+cuda12.1",
        "node-a:1201:1201 [0] NCCL INFO NCCL version 2.21.5+cuda12.4")


def test_same_release_other_cuda_build_is_a_warning() -> None:
    [f] = _ours(run(nccl_log=CUDA_BUILDS), "nccl.version-mismatch")
    assert f.severity is Severity.WARNING and "different CUDA versions" in f.title


def test_one_version_is_silent(corpus) -> None:
    assert not _ours(run(nccl_log=CUDA_BUILDS.splitlines()[0] + "\n"), "nccl.version-mismatch")
    text = corpus.sample("nccl1637").text()  # two processes, both 2.25.1+cuda12.2
    assert not _ours(run(nccl_log=text), "nccl.version-mismatch")


# --- nccl.init-incomplete ----------------------------------------------------------------------


def test_init_start_without_complete_names_the_last_step() -> None:
    [f] = _ours(run(nccl_log=INIT_HANG), "nccl.init-incomplete")
    assert f.severity is Severity.WARNING
    assert f.title.startswith("NCCL init did not complete for rank 0 (1 of 2 communicator")
    assert "stuck after '" in f.title
    assert "cut short" in f.explanation
    assert any("Init START" in ln for ln in f.evidence[0].lines)


def test_excerpts_and_completed_inits_are_silent(corpus) -> None:
    for part in ("nccl1412", "vllm-k8s", "nccl2345-h200"):
        assert not _ours(run(nccl_log=corpus.sample(part).text()), "nccl.init-incomplete"), part
    # "Init timings" is printed once init is done, even where the COMPLETE line was cut
    head = "swat1-04:2017630:2017630 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    text = head + corpus.sample("nccl1412").text()
    assert not _ours(run(nccl_log=text), "nccl.init-incomplete")


# --- nccl.device-open-failed -------------------------------------------------------------------


def test_erdma_device_open_failure(corpus) -> None:
    result = run(nccl_log=corpus.sample("nccl2428").text())
    [f] = _ours(result, "nccl.device-open-failed")
    assert f.title == ("h20-cherry: NCCL could not open RDMA device erdma_1 "
                       "(errno 2, No such file or directory)")
    assert f.blame is Blame.CONFIG and f.action is Action.FIX_CONFIG
    assert f.severity is Severity.CRITICAL  # NCCL adds that the job may hang
    assert "errno NCCL prints can be clobbered" in f.explanation
    assert f.scope.name == "erdma_1" and len(f.evidence[0].lines) == 2
    assert not _ours(result, "nccl.warn")  # both WARNs belong to this finding


def test_uverbs_permission_denied_on_a_host_that_has_the_hca() -> None:
    tree = {"files": {"mlx5_0/hca_type": "MT4129\n", "mlx5_0/ports/1/state": "4: ACTIVE\n"},
            "links": {}, "errors": {}}
    [f] = _ours(run(nccl_log=UVERBS, infiniband=tree), "nccl.device-open-failed")
    assert f.severity is Severity.WARNING
    assert "trainer-0: NCCL could not open RDMA device mlx5_0 (errno 13" in f.title
    assert "sysfs lists mlx5_0, so the device exists" in f.explanation


# --- nccl.warn ---------------------------------------------------------------------------------


def test_socket_connect_failure(corpus) -> None:
    [f] = _ours(run(nccl_log=corpus.sample("nccl952").text()), "nccl.warn")
    assert f.severity is Severity.WARNING
    assert f.title.startswith("<cluster_name>: NCCL connection failures (3 WARNs)")
    assert f.occurrences.count == 3 and len(f.evidence[0].lines) == 3


def test_other_warns_by_kind_and_host() -> None:
    result = run(nccl_log=OTHER_WARNS)
    warns = _ours(result, "nccl.warn")
    found = {(f.title.split(":")[0], f.severity) for f in warns}
    titles = {f.title for f in warns}
    assert found == {("worker-1", Severity.WARNING)}
    # the /dev/shm WARNs are the catalog's: the job's container, not the node
    [shm] = _ours(result, "nccl.shm-too-small")
    assert (shm.action, shm.blame) == (Action.FIX_CONFIG, Blame.JOB_CONFIG)
    assert shm.title.startswith("worker-1: /dev/shm too small") and shm.occurrences.count == 2
    assert any(t.startswith("worker-1: NCCL CUDA failures (1 WARN): Cuda failure 'out of "
                            "memory'") for t in titles)
    # worker-2's only failed connection goes to one peer: that peer's node, not worker-2
    [peer] = _ours(result, "nccl.peer-connect-failed")
    assert (peer.severity, peer.blame, peer.scope.name) == (Severity.WARNING, Blame.NODE,
                                                            "10.3.0.2")
    assert peer.title.startswith("worker-2: the peer at 10.3.0.2 refused")


def test_completion_errors_are_not_repeated_as_warns(corpus) -> None:
    assert not _ours(run(nccl_log=corpus.sample("nccl1814").text()), "nccl.warn")


def test_setup_warns_are_info_and_left_to_the_transport_rule_on_sockets(corpus) -> None:
    """A plugin or verbs WARN of a process that fell back to sockets is the reason
    nccl.socket-transport gives; alone (the job still found its network) it is info."""
    result = run(nccl_log=corpus.sample("detectron4730").text())
    assert not _ours(result, "nccl.warn")
    assert "libibverbs" in _ours(result, "nccl.socket-transport")[0].title
    # processes known to be on sockets only from their NET/Socket interface list
    ofi = run(nccl_log=corpus.sample("nccl398").text())
    assert not _ours(ofi, "nccl.warn")
    assert "OFI" in _ours(ofi, "nccl.socket-transport")[0].title
    on_ib = ("gpu-a:4100:4190 [0] ib_plugin.c:120 NCCL WARN NET/Plugin : plugin load failed, "
             "using internal implementation\n"
             "gpu-a:4100:4190 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n"
             "gpu-a:4100:4190 [0] NCCL INFO Using network IB\n")
    [f] = _ours(run(nccl_log=on_ib), "nccl.warn")
    assert f.severity is Severity.INFO and "nccl.socket-transport" in f.explanation


# --- nccl.watchdog-timeout ---------------------------------------------------------------------


def test_ecc_on_rank1_makes_rank0_timeout_collateral(corpus) -> None:
    result = run(nccl_log=corpus.sample("rtxpro6000-dbe-rank1").text())
    [f] = _ours(result, "nccl.watchdog-timeout")
    assert f.title == ("rank 1 hit 'CUDA error: uncorrectable ECC error encountered'; the "
                       "timeout on rank 0: ALLREDUCE SeqNum 51753, ran 600.072 s, timeout "
                       "600 s is collateral")
    assert f.severity is Severity.CRITICAL
    assert f.blame is Blame.NODE and f.action is Action.RESET_GPU
    assert len(f.evidence[0].lines) == 2


def test_ecc_with_the_host_kernel_log(corpus) -> None:
    xid48 = "[ 9012.553001] NVRM: Xid (PCI:0000:2a:00): 48, pid=4122, name=python, DBE"
    result = run(nccl_log=corpus.sample("rtxpro6000-dbe-rank1").text(), kernel_log=xid48 + "\n")
    [f] = _ours(result, "nccl.watchdog-timeout")
    assert "This host's kernel log shows Xid 48." in f.explanation
    assert f.scope.kind == "gpu" and f.scope.pci_bus_id == "0000:2a:00.0"
    assert [e.source for e in f.evidence] == ["nccl_log", "kernel_log"]


def test_illegal_address_blames_the_job() -> None:
    [f] = _ours(run(nccl_log=ILLEGAL), "nccl.watchdog-timeout")
    assert f.blame is Blame.JOB and f.action is Action.RESTART_JOB
    assert f.title.startswith("rank 2 hit 'CUDA error: an illegal memory access was "
                              "encountered'; the timeout on rank 0: BROADCAST SeqNum 402")


def test_timeout_without_cause_mentions_xids() -> None:
    [f] = _ours(run(nccl_log=TIMEOUT_ONLY), "nccl.watchdog-timeout")
    assert f.severity is Severity.WARNING and f.blame is Blame.UNKNOWN
    assert f.title == ("collective timed out (rank 3: ALLGATHER SeqNum 8812, ran 1800.1 s, "
                       "timeout 1800 s) with no cause in this log")
    assert "Xid" in f.explanation and "shows" not in f.explanation
    [g] = _ours(run(nccl_log=TIMEOUT_ONLY, kernel_log=XID79 + "\n"), "nccl.watchdog-timeout")
    assert "This host's kernel log shows Xid 79." in g.explanation


def test_healthy_logs_raise_no_error_finding(corpus) -> None:
    ours = ("nccl.ib-completion-error", "nccl.version-mismatch", "nccl.init-incomplete",
            "nccl.device-open-failed", "nccl.warn", "nccl.watchdog-timeout")
    for part in ("nccl1189", "vllm-k8s", "nccl1412", "nccl1817", "nccl-tp-readme-vastai-4xa100-shm"):
        result = run(nccl_log=corpus.sample(part).text())
        assert not [f.id for f in result.findings if f.id in ours], part


def test_status_table_follows_the_verbs_enum() -> None:
    """Codes 0..21 in the order of enum ibv_wc_status (infiniband/verbs.h): a shifted row
    would name the wrong error in every completion finding."""
    from gputriage.knowledge.ib_status import ib_wc_statuses

    names = ["SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
             "WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR",
             "REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR",
             "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR",
             "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR"]
    table = ib_wc_statuses()
    assert [table[code][0] for code in range(22)] == [f"IBV_WC_{n}" for n in names]
    assert table[12][1] == "transport retry counter exceeded"  # ibv_wc_status_str()
    assert table[5][1] == "Work Request Flushed Error"


# --- NVLS / MNNVL ---------------------------------------------------------------------------

NVLS_STATE = ("node7:51:51 [3] transport/nvls.cc:254 NCCL WARN Cuda failure 999 'unknown error'\n"
              "node7:51:51 [3] NCCL INFO transport/nvls.cc:409 -> 1\n")
NVLS_REFUSED = ("node7:51:51 [3] transport/nvls.cc:251 NCCL WARN Cuda failure 1 'invalid "
                "argument'\nnode7:51:51 [3] NCCL INFO init.cc:1138 -> 1\n")
MNNVL = ("tray3:9:9 [0] NCCL WARN MNNVL (cliqueSize 36) is available but not working on this "
         "system.\ntray3:9:9 [0] NCCL WARN Cuda failure 800 'operation not permitted'\n")


def test_nvls_cuda_failure_blames_the_node_fabric() -> None:
    """The node's fabric-manager state, not the job and not a part to replace (issue 31):
    critical, its action the software's, its step the FM/GPU reset order."""
    (f,) = _ours(run(nccl_log=NVLS_STATE), "nccl.nvls-failed")
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.FIX_SOFTWARE,
                                               Blame.CONFIG)
    assert "nvidia-smi -r" in (f.step or "") and "NCCL_NVLS_ENABLE=0" in (f.step or "")
    assert "fabric manager" in f.explanation and "NCCL_NVLS_ENABLE=0" in f.explanation
    assert not _ours(run(nccl_log=NVLS_STATE), "nccl.warn")


def test_nvls_refused_by_cuda_is_the_container() -> None:
    (f,) = _ours(run(nccl_log=NVLS_REFUSED), "nccl.nvls-failed")
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)
    assert "/dev/nvidia-caps" in f.explanation


def test_mnnvl_failure_names_the_imex_channel() -> None:
    result = run(nccl_log=MNNVL)
    (f,) = _ours(result, "nccl.nvls-failed")
    assert f.action is Action.FIX_CONFIG and "imex-channels" in f.explanation
    assert len(f.evidence[0].lines) == 2 and not _ours(result, "nccl.warn")


def test_shared_memory_line_names_the_build_and_blames_the_library():
    result = run(nccl_log=SHARED_MEM)
    hit = next(f for f in result.findings if f.id == "nccl.shared-mem-exceeded")
    assert "NCCL 2.25.1 (built with CUDA 12.2)" in hit.title
    assert "82240" in hit.title and "79856" in hit.title and "CUDA 12.8" in hit.title
    # the job's library (its image or wheel), not the node: the job's side
    assert hit.blame.value == "job-config" and hit.severity.value == "warning"
    assert not [f for f in run(nccl_log=VERSIONS).findings if f.id == hit.id]


def test_a_malformed_shared_memory_line_is_ignored():
    bad = SHARED_MEM.replace("82240", "8²240")
    assert not [f for f in run(nccl_log=bad).findings if f.id == "nccl.shared-mem-exceeded"]
