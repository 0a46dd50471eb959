"""Content detection of job outputs: NCCL debug logs and nccl-tests results."""

from __future__ import annotations

import pytest
from detect_both import lazy_and_eager_agree  # noqa: F401  (the fixture)
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import InputError
from gputriage.ingest import load_input, load_text
from gputriage.ingest.detect import detect, formats
from gputriage.parsers.detect_jobs import is_tests_prompt, source_for_command
from gputriage.parsers.nccl_log import parse_nccl_log
from gputriage.parsers.nccl_tests import parse_nccl_tests

# every detection of these tests is also made with every detector run (tests/detect_both.py)
pytestmark = pytest.mark.usefixtures("lazy_and_eager_agree")


TESTS_HEAD = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  20417 on   dgx-a07 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  20417 on   dgx-a07 device  1 [0x2a] NVIDIA H100 80GB HBM3
"""  # noqa: E501
NCCL_INIT = """\
dgx-a07:20417:20417 [0] NCCL INFO Bootstrap : Using enp86s0f0:10.20.3.7<0>
dgx-a07:20417:20417 [0] NCCL INFO cudaDriverVersion 12040
dgx-a07:20417:20417 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
dgx-a07:20417:20431 [0] NCCL INFO Using network IB
dgx-a07:20417:20431 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read
"""
TESTS_TABLE = """\
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  4294967296    1073741824     float     sum      -1    23301  184.33  322.58      0    23287  184.44  322.77      0
  8589934592    2147483648     float     sum      -1    46467  184.86  323.51      0    46452  184.92  323.62      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 323.12
#
"""  # noqa: E501


def names(text: str) -> list[str]:
    return [n for n, _ in detect(text)]


# --- corpus ------------------------------------------------------------------------


def test_every_nccl_sample_is_a_job_output(corpus) -> None:
    samples = corpus.category("5")
    assert len(samples) >= 20
    for s in samples:
        got = names(s.text())
        assert got and set(got) <= {"nccl_log", "nccl_tests"}, (s.name, got)
        snap = load_input(str(s.path))
        assert set(snap.names()) <= {"nccl_log", "nccl_tests"}, s.name
        assert snap.names(), s.name


def test_corpus_pieces_hold_what_the_parsers_need(corpus) -> None:
    tests = dict(detect(corpus.sample("nccltests264-all-reduce").text()))
    assert list(tests) == ["nccl_tests"]
    # the prompt line naming the binary stays with its run; the "# " header lines
    # are nccl-tests output, not root prompts
    assert tests["nccl_tests"].startswith("[root@test nccl-tests-master]# ./build/all_reduce_perf")
    runs = parse_nccl_tests(tests["nccl_tests"])
    assert [(r.test, r.params["nGpus"]) for r in runs] == [("all_reduce_perf", "8")]
    assert "system not yet initialized" in runs[0].errors[0]

    watchdog = dict(detect(corpus.sample("rtxpro6000-dbe-rank1").text()))["nccl_log"]
    assert "ran for 600072 milliseconds before timing out." in watchdog
    assert "Process group watchdog thread terminated" in watchdog
    assert "so the stacktrace below might be incorrect." in watchdog

    cloudwatch = corpus.sample("awsofinccl715").text()
    piece = dict(detect(cloudwatch))["nccl_log"]
    assert piece.count("NCCL INFO") == 9 and "libfabric" not in piece

    ompi = dict(detect(corpus.sample("nccltests188").text()))["nccl_log"]
    assert "help-mpi-btl-openib" not in ompi and ompi.count("NCCL INFO") == 11


# --- synthetic pastes ------------------------------------------------------------------


def test_nccl_tests_with_interleaved_nccl_lines_splits_into_both() -> None:
    paste = TESTS_HEAD + NCCL_INIT + TESTS_TABLE
    got = dict(detect(paste))
    assert list(got) == ["nccl_tests", "nccl_log"]
    assert got["nccl_log"] == NCCL_INIT
    assert "NCCL INFO" not in got["nccl_tests"]
    assert got["nccl_tests"].startswith("# nThread 1 nGpus 8")
    assert "# Avg bus bandwidth    : 323.12" in got["nccl_tests"]
    run, = parse_nccl_tests(got["nccl_tests"])
    assert [r.size for r in run.rows] == [4294967296, 8589934592]
    assert run.avg_busbw == 323.12 and len(run.devices) == 2
    log = parse_nccl_log(got["nccl_log"])
    assert [p.network for p in log.processes] == ["IB"]


def test_launcher_prompt_names_the_test() -> None:
    paste = ("alice@login-1:~/nccl-tests$ mpirun -np 2 -H dgx-a07:2 -x NCCL_DEBUG=INFO \\\n"
             "    ./build/all_gather_perf -b 8 -e 8G -f 2 -g 1\n" + TESTS_HEAD + TESTS_TABLE)
    got = dict(detect(paste))
    assert list(got) == ["nccl_tests"]
    assert got["nccl_tests"].splitlines()[1].strip().startswith("./build/all_gather_perf")
    run, = parse_nccl_tests(got["nccl_tests"])
    assert (run.test, run.operation) == ("all_gather_perf", "allgather")


def test_root_prompts_still_split_a_session() -> None:
    table = ("+-----------------------------------------------------------------------------+\n"
             "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |\n"
             "+-----------------------------------------------------------------------------+\n")
    paste = "# nvidia-smi\n" + table + "# ./build/all_reduce_perf -g 8\n" + TESTS_HEAD
    got = dict(detect(paste))
    assert list(got) == ["nvidia_smi", "nccl_tests"]
    assert got["nvidia_smi"] == table
    assert got["nccl_tests"].startswith("# ./build/all_reduce_perf -g 8\n# nThread 1")
    lines = paste.splitlines()
    assert not is_tests_prompt(lines, 0) and is_tests_prompt(lines, len(lines) - 4)


def test_session_with_host_output_and_job_log() -> None:
    paste = ("$ ibstat mlx5_0\nCA 'mlx5_0'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n"
             "$ NCCL_DEBUG=INFO torchrun --nproc-per-node 8 train.py\n" + NCCL_INIT
             + "epoch 0 step 10 loss 2.3131\n")
    got = dict(detect(paste))
    assert list(got) == ["ibstat", "nccl_log"]
    assert got["nccl_log"] == NCCL_INIT


def test_shipped_nccl_lines_are_not_taken_for_the_system_log() -> None:
    nccl = ("May 31 05:33:40 dgx-a07 python3[20417]: dgx-a07:20417:20431 [0] NCCL INFO "
            "Using network Socket\n")
    kern = ("May 31 05:33:41 dgx-a07 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', "
            "name=<unknown>, GPU has fallen off the bus.\n")
    got = dict(detect(nccl + kern))
    assert got == {"nccl_log": nccl, "kernel_log": kern}


def test_watchdog_continuation_stops_at_blank_line_and_kernel_record() -> None:
    torch = ("[rank3]:[E531 05:40:11.104223612 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog "
             "caught collective operation timeout:\n"
             "WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)\n"
             "ran for 600028 milliseconds before timing out.\n")
    kern = "[ 8123.441201] NVRM: Xid (PCI:0000:2a:00): 79, GPU has fallen off the bus.\n"
    got = dict(detect(torch + kern + "\nTraceback (most recent call last):\n"))
    assert got == {"nccl_log": torch, "kernel_log": kern}


def test_a_framework_warning_takes_no_continuation_lines() -> None:
    warn = ("[rank10]:[W420 17:17:49.001266022 ProcessGroupNCCL.cpp:3436] Warning: "
            "TORCH_NCCL_AVOID_RECORD_STREAMS=1 has no effect for point-to-point collectives.\n")
    table = ("+-----------------------------------------------------------------------------+\n"
             "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |\n"
             "+-----------------------------------------------------------------------------+\n")
    got = dict(detect(warn + "epoch 3 step 120 loss 1.982\n" + table))
    assert got == {"nccl_log": warn, "nvidia_smi": table}
    error = ("[rank0]:[E531 05:40:11.104223612 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog "
             "caught collective operation timeout:\n")
    assert dict(detect(error + table)) == {"nccl_log": error, "nvidia_smi": table}


def test_lone_numbers_or_hash_lines_are_not_nccl_tests() -> None:
    assert names("#\n# a shell comment\n   12   34  apples   56\n") == []
    assert names("# Avg bus bandwidth    : 48.1\n") == ["nccl_tests"]


@pytest.mark.parametrize(("cmd", "source"), [
    ("./build/all_reduce_perf -b 8 -e 8G -f 2 -g 8", "nccl_tests"),
    ("mpirun -np 16 -H a:8,b:8 -x NCCL_DEBUG=INFO /opt/nccl-tests/build/all_gather_perf -g 1",
     "nccl_tests"),
    ("srun --mpi=pmix -N 2 all_reduce_perf_mpi -b 1G -e 8G", "nccl_tests"),
    ("NCCL_DEBUG=INFO ./sendrecv_perf -g 2", "nccl_tests"),
    ("mpirun -np 2 python train.py", None),
    ("sudo nvidia-smi topo -m", "nvidia_smi_topo"),
    ("cat /proc/modules", "proc_modules"),
])
def test_source_for_command(cmd: str, source: str | None) -> None:
    assert source_for_command(cmd) == source


def test_expected_names_the_job_outputs() -> None:
    listed = "\n".join(formats())
    assert "NCCL_DEBUG=INFO log" in listed and "nccl-tests" in listed
    with pytest.raises(InputError, match="^paste: unrecognised content; "):
        load_text("just some words\n", "paste")


@pytest.mark.slow  # a 4.6 MB job log
def test_a_large_job_log_keeps_nccl_lines_from_all_of_it_and_the_table_at_its_end(tmp_path):
    """Past the detector's first MiB: NCCL records come from the whole input, the
    nccl-tests table from its end (where a job prints it)."""
    step = "2025-03-02 10:00:00,123 [rank0] INFO train.py:412 step {} loss 0.51 lr 3e-4\n"
    filler = "".join(step.format(i) for i in range(30000))  # about 2.3 MB
    late = "dgx-a07:20417:20431 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4> " \
           "with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
    path = tmp_path / "job.log"
    path.write_text(TESTS_HEAD + NCCL_INIT + filler + late + filler + TESTS_TABLE)
    assert path.stat().st_size > 4 << 20
    snap = load_input(str(path))
    log = parse_nccl_log(snap.text("nccl_log"))
    assert log.nccl_lines == 6 and "status=12" in snap.text("nccl_log")
    (run,) = parse_nccl_tests(snap.text("nccl_tests"))
    assert run.avg_busbw == 323.12 and len(run.rows) == 2
    assert "step 1234" not in snap.text("nccl_log") + snap.text("nccl_tests")


# -- nccl_lines: the record grammar tried only on lines that may hold a record -----------
def _nccl_lines_every_line(text: str) -> str:
    """The reference: nccl_lines as it was, the record test on every line with a word."""
    from gputriage.parsers.detect_jobs import nccl_record
    from gputriage.text.fields import split_lines

    kept = [ln for ln in split_lines(text)
            if ("NCCL" in ln or "nccl" in ln or "DistBackendError" in ln or "WARN" in ln
                or "INFO" in ln or "Got completion" in ln)
            and nccl_record(ln)]
    return "\n".join(kept) + "\n" if kept else ""


_PIECES = (
    "dgx-b01:30001:30001 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
    "dgx-b01:30001:30001 [0] INFO NET : Using interface eth0:10.0.0.1<0>",  # NCCL 2.0-2.3
    "dgx-b01:30001:30001\t[-1]  INFO Ring 00 : 0 1",
    "misc/ibvwrap.cc:252 WARN Call to ibv_open_device failed",
    "dgx-b01:30001:30001 [0] transport/net_ib.cc:1295 WARN NET/IB : Got completion from peer",
    "NET/IB : Got completion from peer 10.1.1.2<4711> with status=12 opcode=0",
    "2025-03-02 10:00:00,000 [rank3] INFO train.py:412 step 7 loss 1.2",
    "2025-03-02 10:00:00,000 [rank3] WARN train.py:412 slow step",
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed",
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970",
    "[1,0]<stdout>:dgx-b01:30001:30001 [0] INFO NET : Using interface ib0",
    "  | 2025-03-02T10:15:01.204Z | dgx-b01:3:3 [0] INFO Channel 00 : 0 1",
    "x:12 \u2003[3]\u2003INFO unicode spaces", "a:1\u00a0WARN nbsp", "", "   ",
)


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_nccl_lines_takes_what_the_record_test_on_every_line_took_of_every_pair(newline):
    from gputriage.parsers.detect_jobs import nccl_lines

    for a in _PIECES:
        for b in _PIECES:
            for text in (a + newline + b + newline, a + " " + b, a + newline + b):
                assert nccl_lines(text) == _nccl_lines_every_line(text), repr(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=60)), max_size=20),
       st.sampled_from(["\n", "\r\n", "\r"]))
def test_nccl_lines_takes_what_the_record_test_on_every_line_took(pieces, newline) -> None:
    from gputriage.parsers.detect_jobs import nccl_lines

    text = newline.join(pieces) + newline
    assert nccl_lines(text) == _nccl_lines_every_line(text)
