"""A repeated NCCL line is parsed once (gputriage.parsers.nccl_build.Builder's replays):
the log read from storms of repeats (WARNs from every rank, per-channel and
per-iteration INFO lines) is the one every line parsed gives, to the last counter, past
the storage caps and the whole-log budget, around framework errors and glued records."""

from __future__ import annotations

import dataclasses
import random

import pytest

from gputriage.parsers import nccl_build
from gputriage.parsers import nccl_log as reader
from gputriage.parsers.nccl_build import Builder
from gputriage.parsers.nccl_model import NcclLog

HOSTS = ("gpu-a01", "gpu-a02")


def _line(rng: random.Random, rank: int) -> str:
    host = HOSTS[rank // 4]
    dev = rank % 4
    pre = f"{host}:{5000 + rank}:{5100 + rank} [{dev}] "
    peer = (rank + 1) % 8
    return pre + rng.choice([
        f"NCCL INFO Channel 0{rank % 2}/0 : {rank}[{dev}] -> {peer}[{peer % 4}] via P2P/IPC",
        f"NCCL INFO Channel 01/0 : {rank}[{dev}] -> {peer}[{peer % 4}] [send] via "
        "NET/IB/0/GDRDMA",
        f"NCCL INFO Channel 02/0 : {rank}[{dev}] -> {peer}[{peer % 4}] via NET/Socket/0 comm "
        "0x55aa",
        "NCCL INFO Channel 00/02 :    0   1   2   3   4   5   6   7",  # a layout
        "NCCL INFO NVLS multicast support is not available on dev 0",
        "NCCL INFO Connected NVLS",
        "NCCL INFO Connected all rings",
        "NCCL INFO AllReduce: opCount 1f sendbuff 0x7f recvbuff 0x7f count 1 datatype 7",
        "NCCL INFO DMA-BUF is available on GPU device 0",
        "NCCL INFO 32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, "
        "32 p2p channels per peer",
        "NCCL INFO 16 coll channels, 0 nvls channels, 16 p2p channels, 2 p2p channels per peer",
        "NCCL INFO transport/net_ib.cc:1200 -> 6",  # an error trace
        "NCCL INFO init.cc:1500 -> 6",
        "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>",
        "NCCL INFO Using network IB",
        "NCCL INFO NCCL_IB_HCA set by environment to mlx5_0",
        "NCCL INFO NCCL_IB_HCA set by environment to mlx5_1",
        f"NCCL INFO comm 0x55aa rank {rank} nranks 8 cudaDev {dev} busId 18000 - Init COMPLETE",
        f"NCCL INFO Init timings - ncclCommInitRank: rank {rank} nranks 8 total 1.20 (kernels "
        "0.10, alloc 0.20)",
        "NCCL TRACE 12.5 NET/IB: Got completion from peer",
        "transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<42> "
        "with status=12 opcode=0 len=0 vendor err 129 (Send)",
        "misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer",
        "misc/ibvwrap.cc:90 NCCL WARN Failed to open libibverbs.so[.1]",
        "NCCL WARN Cuda failure 'out of memory'",
    ])


def _storm(seed: int, lines: int = 8000) -> str:
    """Storms of one line, lines repeated across ranks, framework errors in between,
    records glued to the one before, lines past the warn cap of one process."""
    rng = random.Random(seed)
    out: list[str] = []
    pool = [_line(rng, rng.randrange(8)) for _ in range(60)]
    warn = next(x for x in pool if "NCCL WARN" in x)
    while len(out) < lines:
        if len(out) > lines // 3 and warn:  # one process's WARNs past its cap, interleaved
            out.extend(x for _ in range(520) for x in (warn, rng.choice(pool)))
            warn = ""
        pick = rng.random()
        if pick < 0.05:
            out.extend([rng.choice(pool)] * rng.randint(50, 700))
        elif pick < 0.07:
            out.append("[E ProcessGroupNCCL.cpp:828] [Rank 3] Watchdog caught collective "
                       f"operation timeout: WorkNCCL(SeqNum={rng.randint(1, 99)}, "
                       "OpType=ALLREDUCE, Timeout(ms)=1800000)")
            out.append(rng.choice(pool))  # read as the error's next line, not as a repeat
        elif pick < 0.08:
            out.append(rng.choice(pool) + rng.choice(pool))  # two records glued
        elif pick < 0.09:
            out.append("NCCL version 2.21.5+cuda12.4")
        else:
            out.append(rng.choice(pool))
    return "\n".join(out) + "\n"


def _read(text: str, replay: bool) -> NcclLog:
    b = Builder(NcclLog(), replay=replay)
    reader._scan([text.encode()], b)
    return b.log


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_repeats_read_as_every_line_parsed(seed):
    text = _storm(seed)
    ref = _read(text, replay=False)
    assert dataclasses.asdict(_read(text, replay=True)) == dataclasses.asdict(ref)
    # the storms are what the test is about: caps reached, every kind of repeat
    assert any(p.dropped.get("warns") for p in ref.processes)
    assert any(p.error_traces > 1 for p in ref.processes)
    assert ref.framework_errors and ref.versions


def test_repeats_past_the_whole_log_budget_and_the_replay_bound(monkeypatch):
    text = _storm(4, 6000)
    monkeypatch.setattr(nccl_build, "MAX_STORED", 700)
    monkeypatch.setattr(nccl_build, "MAX_REPLAYS", 7)
    ref = _read(text, replay=False)
    assert sum(sum(p.dropped.values()) for p in ref.processes) > 1000
    assert dataclasses.asdict(_read(text, replay=True)) == dataclasses.asdict(ref)


def test_a_repeat_read_as_bytes_is_not_decoded_again(monkeypatch):
    """The large-file reader's lines come as bytes: a repeat of the same bytes replays
    without reaching :meth:`Builder.feed` (no decoding, no lookup by text), and bytes
    that decode to the same text (a NUL run, a carriage return) give what that text
    gives."""
    line = b"gpu-a01:5000:5100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"
    fed: list[str] = []
    real = Builder.feed

    def spy(self, text):
        fed.append(text)
        real(self, text)

    monkeypatch.setattr(Builder, "feed", spy)
    b = Builder(NcclLog())
    for raw in (line, line, line + b"\r", b"\0\0" + line, line, line + b"\r"):
        b.feed_raw(raw)
    assert fed == [line.decode()] * 3  # (each distinct run of bytes decoded once)
    monkeypatch.setattr(Builder, "feed", real)
    ref = Builder(NcclLog(), replay=False)
    for _ in range(6):
        ref.feed(line.decode())
    assert dataclasses.asdict(b.log) == dataclasses.asdict(ref.log)


def test_a_repeat_is_not_parsed_again(monkeypatch):
    """The point of it: the second time, the line is not split into records."""
    line = "gpu-a01:5000:5100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"
    calls: list[str] = []
    real = nccl_build.g.split_records

    def spy(text, hosts=()):
        calls.append(text)
        return real(text, hosts)

    monkeypatch.setattr(nccl_build.g, "split_records", spy)
    b = Builder(NcclLog())
    for _ in range(5):
        b.feed(line)
    assert len(calls) == 1
    p = b.log.processes[0]
    assert (b.log.nccl_lines, p.lines, len(p.channels)) == (5, 5, 5)


def _every_kind(rng: random.Random, rank: int) -> str:
    """A line of each kind of INFO record, communicators re-created (a rank on a new
    pointer, lines with and without nNodes, START then COMPLETE) and settings that
    change back and forth."""
    host = HOSTS[rank // 4]
    dev = rank % 4
    pre = f"{host}:{5000 + rank}:{5100 + rank} [{dev}] NCCL INFO "
    ptr = rng.choice(("0x55aa", "0x66bb", "0x77cc"))
    return pre + rng.choice([
        f"comm {ptr} rank {rank} nranks 8 cudaDev {dev} nvmlDev {dev} busId 18000 commId "
        f"0x{rng.choice('12')}f - Init START",
        f"comm {ptr} rank {rank} nranks 8 cudaDev {dev} busId 18000 - Init COMPLETE",
        f"ncclCommInitRank comm {ptr} rank {rank} nRanks 8 nNodes 2 localRanks 4 localRank "
        f"{dev} MNNVL 0",
        f"comm {ptr} rank {rank} nRanks 8 nNodes {rng.choice('12')} localRanks 4 localRank "
        f"{dev} MNNVL 0",  # and its twin with MNNVL 1 (not read): the same fields, another line
        f"ncclCommInitRank comm 0x… rank {rank} nranks 8 - Init COMPLETE",
        f"Init timings - ncclCommInitRank: rank {rank} nranks 8 total {rng.choice('12')}.20 "
        "(kernels 0.10, alloc 0.20)",
        f"Bootstrap : Using ib{rng.choice('01')}:10.0.0.{rank}<0>",
        f"cudaDriverVersion 1204{rng.choice('05')}",
        f"NCCL version 2.{rng.choice(('21.5', '19.3'))}+cuda12.4",
        f"NCCL_SOCKET_IFNAME set by environment to ib{rng.choice('01')}",
        "NET/Socket : Using [0]ib0:10.0.0.1<0> [1]ib1:10.0.1.1<0>",
        "NET/IB : No device found.",
        "NET/Plugin : Loaded net plugin NCCL RDMA Plugin (v6)",
        f"Using network {rng.choice(('IB', 'Socket'))}",
        "Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1",
        "Connected all trees",
        f"GPU Direct RDMA {rng.choice(('Enabled', 'Disabled'))} for HCA 0 'mlx5_0'",
        "ncclMaxSharedMem 20000 exceeds device/fn maxSharedMem 10000",
        "DMA-BUF is not available on GPU device 0",
        "Setting affinity for GPU 0 to ffff",
    ])


@pytest.mark.parametrize("seed", [5, 6])
def test_every_kind_of_info_repeat_read_as_every_line_parsed(seed):
    """Every INFO record kind is replayed when it repeats (the handler run again on the
    state of then, a communicator's fields memoised): the same log as every line parsed,
    with communicators re-created and settings changed between repeats."""
    rng = random.Random(seed)
    pool = [_every_kind(rng, rng.randrange(8)) for _ in range(120)]
    pool += [x.replace("MNNVL 0", "MNNVL 1") for x in pool if "MNNVL 0" in x]
    out: list[str] = []
    while len(out) < 6000:
        out.extend([rng.choice(pool)] * (rng.randint(2, 40) if rng.random() < 0.05 else 1))
    text = "\n".join(out) + "\n"
    ref = _read(text, replay=False)
    assert dataclasses.asdict(_read(text, replay=True)) == dataclasses.asdict(ref)
    assert sum(len(p.comms) for p in ref.processes) > 16  # communicators re-created
    assert any(p.env for p in ref.processes) and any(p.bootstrap_iface for p in ref.processes)


def test_a_communicator_line_with_the_same_fields_is_the_line_kept():
    """A communicator line is not copied when a repeat changes nothing; one with the same
    fields in another text (MNNVL is not read) is the line its communicator keeps."""
    pre = "gpu-a01:5000:5100 [0] NCCL INFO comm 0x55aa rank 0 nRanks 8 nNodes 2 localRanks 4 "
    lines = [pre + "localRank 0 MNNVL 0", pre + "localRank 0 MNNVL 0", pre + "localRank 0 MNNVL 1"]
    for replay in (False, True):
        b = Builder(NcclLog(), replay=replay)
        for line in lines:
            b.feed(line)
        (comm,) = b.log.processes[0].comms
        assert (comm.line, comm.nnodes, comm.rank) == (lines[2], 2, 0)
