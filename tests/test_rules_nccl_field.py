"""NCCL classes read from what the field pastes: WARN lines alone (old NCCL's form without
the word NCCL, any prefix), the known-WARN catalog (no usable IP interface, aws-ofi-nccl's
memory registration on old EFA installers), connections one peer refused, NVLS multicast
failures (the fabric manager's state) from NCCL's WARNs or the framework's "Last error",
IB completion errors between Azure VMs, nccl-tests' internal error on one host of
several, and healthy nccl-tests runs over EFA and RoCE."""

from __future__ import annotations

import pytest
from hostkit import run
from nccl_kit import NDR_ACTIVE, ports_tree

from gputriage.ingest.detect import detect
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.nccl_log import parse_nccl_log

NO_IP_BARE = ("include/socket.h:344 WARN Socket creation failed : Address family not supported "
              "by protocol\n")
NO_IP_OLD = ("e66aa18dc444:3171:3171 [0] misc/ibvwrap.cu:61 WARN Failed to open libibverbs.so[.1]\n"
             "e66aa18dc444:3171:3171 [0] include/socket.h:311 WARN Socket creation failed : "
             "Address family not supported by protocol\n")
NO_IP_MPI = ("[1,4]<stdout>:gpu7:4105:4372 [0] include/socket.h:318 NCCL WARN Net : Socket "
             "creation failed : Address family not supported by protocol\n")
NO_IFACE_ENV = ("trainer3:1958:1958 [3] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth2\n"
                "trainer3:1958:1958 [3] misc/socket.cc:512 NCCL WARN Bootstrap : no socket "
                "interface found\n")
OFI_EINVAL = ("ip-10-1-2-3:4711:4790 [4] register_mr_buffers:544 NCCL WARN NET/OFI Unable to "
              "register memory (type = 2) for device 0. RC: -22, Error: Invalid argument\n")
REFUSED = ("r11i6n2:486514:486651 [1] include/socket.h:403 NCCL WARN Connect to "
           "10.148.3.247<56821> failed : Connection refused\n"
           "r11i6n2:486514:486652 [2] include/socket.h:403 NCCL WARN Connect to "
           "10.148.3.247<56822> failed : Connection refused\n")
TIMED_OUT = ("node7:120:130 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
             "192.168.5.17<40111> failed : Connection timed out\n")
TWO_PEERS = ("node7:120:130 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
             "192.168.5.17<40111> failed : Connection refused\n"
             "node7:120:131 [1] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
             "192.168.5.18<40112> failed : Connection refused\n")
NVLS_401_TORCH = (
    "torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/"
    "c10d/NCCLUtils.cpp:93, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL "
    "version 2.26.2\n"
    "ncclUnhandledCudaError: Call to CUDA function failed.\n"
    "Last error:\n"
    "Failed to bind NVLink SHARP (NVLS) Multicast memory of size 4194304 : CUDA error 401 'the "
    "operation cannot be performed in the present state'.\n")
NVLS_999 = "gpu12:4962:5097 [3] transport/nvls.cc:223 NCCL WARN Cuda failure 999 'unknown error'\n"
NVLS_1 = ("node2:242431:242479 [5] transport/nvls.cc:158 NCCL WARN Cuda failure 1 'invalid "
          "argument'\nnode2:242431:242479 [5] NCCL INFO transport/nvls.cc:330 -> 1\n")
AZURE_IB = (
    "node-2:5776:5898 [0] NCCL INFO NET/IB : Using [0]ibP257p0s0:1/IB [1]rdmaP1111p0s2:1/RoCE "
    "[RO]; OOB eth0:10.2.0.4<0>\n"
    "node-2:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer "
    "10.2.0.5<33092> with error 12, opcode 0, len 0, vendor err 129 (Recv)\n")
BARE_METAL_IB = AZURE_IB.replace("ibP257p0s0", "mlx5_0").replace("rdmaP1111p0s2", "mlx5_1")
TESTS_HEAD = (
    "# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: "
    "20 agg iters: 1 validation: 0 graph: 0\n#\n# Using devices\n"
    "#  Rank  0 Group  0 Pid 3740409 on   ws-a device  0 [0x01] NVIDIA RTX A6000\n"
    "#  Rank  1 Group  0 Pid 3740409 on   ws-a device  1 [0x07] NVIDIA RTX A6000\n"
    "#  Rank  2 Group  0 Pid 3164639 on   ws-b device  0 [0x01] NVIDIA RTX A6000\n"
    "#  Rank  3 Group  0 Pid 3164639 on   ws-b device  1 [0x05] NVIDIA RTX A6000\n")
INTERNAL_ONE_HOST = (TESTS_HEAD + "ws-b: Test NCCL failure common.cu:959 'internal error - please "
                     "report this issue to the NCCL developers / '\n .. ws-b pid 3164639: Test "
                     "failure common.cu:844\n")
INTERNAL_ALL = TESTS_HEAD.replace("ws-b", "ws-a") + (
    "ws-a: Test NCCL failure common.cu:959 'internal error - please report this issue to the "
    "NCCL developers / '\n")

# PyTorch's NCCL errors alone, no WARN line of NCCL's own (older and newer spellings)
FRAMEWORK_ONLY = "RuntimeError: NCCL Error 2: unhandled system error\n"
INVALID_USAGE = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
                 "c10d/NCCLUtils.hpp:317, invalid usage (run with NCCL_DEBUG=WARN for "
                 "details), NCCL version 2.20.5\n")

RULE_CASES = {
    "nccl.framework-error": [({"nccl_log": FRAMEWORK_ONLY}, "nccl.framework-error")],
    "nccl.warn": [({"nccl_log": NO_IP_BARE}, "nccl.no-socket-interface"),
                  ({"nccl_log": OFI_EINVAL}, "nccl.ofi-register-failed"),
                  ({"nccl_log": REFUSED}, "nccl.peer-connect-failed")],
}


def _ours(result, fid):
    return [f for f in result.findings if f.id == fid]


def _loud(result):
    return [(f.id, f.severity.value) for f in result.findings
            if f.severity.rank >= Severity.WARNING.rank]


# --- WARN lines alone --------------------------------------------------------------------

@pytest.mark.parametrize("text", [NO_IP_BARE, NO_IP_OLD, NO_IP_MPI])
def test_a_warn_line_alone_is_an_nccl_log_in_any_form(text):
    assert [name for name, _ in detect(text)] == ["nccl_log"]
    log = parse_nccl_log(text)
    assert log.processes and log.processes[0].warns
    (f,) = _ours(run(nccl_log=text), "nccl.no-socket-interface")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    assert "ip -br addr" in (f.step or "")
    assert not [w for w in _ours(run(nccl_log=text), "nccl.warn") if w.severity is not
                Severity.INFO]


@pytest.mark.parametrize("line", [
    "2024-01-01 12:00:00 WARN foo.py:12 disk almost full",
    "app/main.cc:12 WARN cache miss storm",
    "kafka/net.cc WARN retrying",
    "WARN: socket.h:344 something",
])
def test_other_programs_warn_lines_are_not_nccl(line):
    assert "nccl_log" not in [name for name, _ in detect(line + "\n")]
    assert not parse_nccl_log(line + "\n").processes


def test_an_interface_the_job_named_makes_it_the_jobs_setting():
    (f,) = _ours(run(nccl_log=NO_IFACE_ENV), "nccl.no-socket-interface")
    assert f.blame is Blame.JOB_CONFIG and "NCCL_SOCKET_IFNAME=eth2" in f.explanation


def test_ofi_memory_registration_einval_is_the_efa_installer():
    (f,) = _ours(run(nccl_log=OFI_EINVAL), "nccl.ofi-register-failed")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_SOFTWARE,
                                               Blame.CONFIG)
    assert "1.29.1" in f.explanation and "FI_EFA_SET_CUDA_SYNC_MEMOPS=0" in (f.step or "")
    assert f.title.startswith("ip-10-1-2-3: aws-ofi-nccl could not register GPU memory")


# --- a peer that refused ------------------------------------------------------------------

# older NCCL prints "Connect to ... failed", newer "socketPollConnect: connect
# to ... failed" (lower case), each with the errno's text
NEWER_DOWN = ("node7:120:130 [0] misc/socket.cc:526 NCCL WARN socketPollConnect: connect to "
              "192.168.5.17<40111> failed : Host is down\n")


@pytest.mark.parametrize("text, peer, word", [(REFUSED, "10.148.3.247", "refused"),
                                              (TIMED_OUT, "192.168.5.17", "did not answer"),
                                              (NEWER_DOWN, "192.168.5.17", "did not answer")])
def test_connections_that_one_peer_refused_blame_that_peer(text, peer, word):
    result = run(nccl_log=text)
    (f,) = _ours(result, "nccl.peer-connect-failed")
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.NODE, Action.RESTART_JOB)
    assert f.scope.kind == "peer" and f.scope.name == peer and word in f.title
    assert f"without the node at {peer}" in (f.step or "")
    assert not _ours(result, "nccl.warn")


TORCH_LAST_ERROR = (
    "[rank3]: Traceback (most recent call last):\n"
    "[rank3]:   File \"/opt/app/pretrain.py\", line 88, in <module>\n"
    "[rank3]:     torch.distributed.barrier()\n"
    "[rank3]: torch.distributed.DistBackendError: NCCL error in: "
    "/opt/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled system error "
    "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
    "[rank3]: ncclSystemError: System call (e.g. socket, malloc) or external library call "
    "failed or device error.\n"
    "[rank3]: Last error:\n"
    "[rank3]: socketStartConnect: Connect to 172.31.9.40<41875> failed : {why}\n")


@pytest.mark.parametrize("why, word", [("Software caused connection abort", "dropped"),
                                       ("Connection refused", "refused"),
                                       ("Connection reset by peer", "dropped")])
def test_pytorchs_last_error_names_the_peer_it_could_not_reach(why, word):
    """No NCCL WARN line in the log, only PyTorch's DistBackendError carrying NCCL's last
    error: the peer it names is judged as a WARN naming it would be."""
    result = run(nccl_log=TORCH_LAST_ERROR.format(why=why))
    (f,) = _ours(result, "nccl.peer-connect-failed")
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.NODE, Action.RESTART_JOB)
    assert f.scope.name == "172.31.9.40" and word in f.title
    assert not f.title.startswith("this node")


def test_several_peers_refused_stay_connection_warnings():
    result = run(nccl_log=TWO_PEERS)
    assert not _ours(result, "nccl.peer-connect-failed")
    (f,) = _ours(result, "nccl.warn")
    assert "connection failures (2 WARNs)" in f.title


# --- NVLS ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, critical", [(NVLS_401_TORCH, True), (NVLS_999, True),
                                            (NVLS_1, False)])
def test_nvls_failures_are_the_fabric_managers_state_not_hardware(text, critical):
    result = run(nccl_log=text)
    (f,) = _ours(result, "nccl.nvls-failed")
    assert f.blame is Blame.CONFIG and f.action in (Action.FIX_SOFTWARE, Action.FIX_CONFIG)
    assert f.severity is (Severity.CRITICAL if critical else Severity.WARNING)
    assert "fabric manager" in f.explanation and "NCCL_NVLS_ENABLE=0" in (f.step or "")
    assert "nvidia-smi -r" in (f.step or "") and "Unset" not in (f.step or "")
    assert not [x for x in result.findings if x.id.startswith(("xid.", "gpu.", "nvlink."))]


def test_the_frameworks_last_error_is_read_with_its_nccl_error():
    (err,) = parse_nccl_log(NVLS_401_TORCH).framework_errors
    assert "ncclUnhandledCudaError" in err.message and "CUDA error 401" in err.message
    assert "gpu12" in _ours(run(nccl_log=NVLS_999), "nccl.nvls-failed")[0].step


# --- IB completion errors -------------------------------------------------------------------

def test_retry_exceeded_between_azure_vms_is_their_provisioning():
    (f,) = _ours(run(nccl_log=AZURE_IB), "nccl.ib-completion-error")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    assert "scale set" in f.explanation and "ibP257p0s0" in f.explanation
    assert "scale set" in (f.step or "")


def test_retry_exceeded_toward_one_peer_on_bare_metal_does_not_drain():
    (f,) = _ours(run(nccl_log=BARE_METAL_IB), "nccl.ib-completion-error")
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.NODE)
    step = f.step or ""
    assert "10.2.0.5" in step and "port counters" in step and "application's" not in step


# --- nccl-tests -----------------------------------------------------------------------------

def test_internal_error_on_one_host_of_two_is_the_launch_settings():
    (f,) = _ours(run(nccl_tests=INTERNAL_ONE_HOST), "nccl.tests-failed")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG,
                                               Blame.JOB_CONFIG)
    assert "on ws-b only" in f.explanation and "NCCL_SOCKET_IFNAME" in f.explanation
    assert (f.step or "").startswith("Give ws-b an interface setting")


def test_internal_error_everywhere_is_not_known_and_not_a_drain():
    (f,) = _ours(run(nccl_tests=INTERNAL_ALL), "nccl.tests-failed")
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.UNKNOWN)
    assert "NCCL_DEBUG=WARN" in (f.step or "")


EFA_P5 = "".join(
    f"[1,0]<stdout>:{s:>13} {s // 4:>13}     float     sum      -1  {t:>8}  {a:>6}  {b:>6}      0"
    f"  {t:>8}  {a:>6}  {b:>6}      0\n"
    for s, t, a, b in ((8, "12.90", "0.00", "0.00"), (1073741824, "4607.6", "233.04", "436.95"),
                       (17179869184, "62239", "276.03", "483.05")))
ROCE_2X100G = (
    "#       size         count    type   redop     time   algbw   busbw  error     time   "
    "algbw   busbw  error\n"
    "           8             2   float     sum   2193.5    0.00    0.00  2e-07    132.2    0.00"
    "    0.00  2e-07\n"
    "   536870912     134217728   float     sum    43963   12.21   22.90  5e-07    43998   12.20"
    "   22.88  5e-07\n"
    "  2147483648     536870912   float     sum   175667   12.22   22.92  5e-07   176189   12.19"
    "   22.85  5e-07\n"
    "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 7.76739\n")


def test_healthy_runs_over_efa_and_roce_are_not_slow():
    """The tiny sizes and the average are not judged; 2x100G RoCE at ~23 GB/s is line
    rate (the expectation from the host's two RoCE ports)."""
    assert not _loud(run(nccl_tests=EFA_P5))
    roce = {f"mlx5_{i}/1": {**NDR_ACTIVE, "rate": "100 Gb/sec (4X EDR)", "link_layer": "Ethernet"}
            for i in range(2)}
    head = "".join(f"#  Rank {r:>2} Group  0 Pid {100 + r} on dgx{r // 8} device {r % 8} "
                   f"[0x{r:02x}] Tesla V100-SXM2-32GB\n" for r in range(16))
    result = run(nccl_tests="# Using devices\n" + head + ROCE_2X100G, infiniband=ports_tree(roce))
    assert not _loud(result), _loud(result)


def test_a_warn_without_a_host_prefix_names_no_host():
    (f,) = _ours(run(nccl_log="NCCL WARN Cuda failure 'out of memory'\n"), "nccl.warn")
    assert f.title.startswith("NCCL CUDA failures (1 WARN)"), f.title


@pytest.mark.parametrize("text, name, blame", [
    (FRAMEWORK_ONLY, "ncclSystemError", Blame.CONFIG),
    (INVALID_USAGE, "ncclInvalidUsage", Blame.JOB_CONFIG),
    ("RuntimeError: NCCL Error 1: unhandled cuda error\n", "ncclUnhandledCudaError",
     Blame.UNKNOWN),
])
def test_a_framework_nccl_error_alone_names_the_result_and_asks_for_nccl_debug(text, name,
                                                                              blame):
    (f,) = _ours(run(nccl_log=text), "nccl.framework-error")
    assert name in f.title and f.blame is blame and f.severity is Severity.WARNING
    assert "NCCL_DEBUG=WARN" in (f.step or "")


def test_a_framework_error_with_nccls_own_warn_is_left_to_the_warn():
    text = ("gpu-a1:77:91 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
            "10.0.0.9<4444> failed : Connection refused\n" + FRAMEWORK_ONLY)
    assert not _ours(run(nccl_log=text), "nccl.framework-error")
