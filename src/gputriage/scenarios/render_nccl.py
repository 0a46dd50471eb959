"""Renderers for the job side of a scenario: an NCCL_DEBUG=INFO log and an
nccl-tests table of a two-node all-reduce.

The job runs one process per GPU (``mpirun -np 16``, ``all_reduce_perf -g 1``)
on the scenario's host and on a twin host next to it (``<name>+1``, same
GPU slots). :class:`NcclJob` says how NCCL was configured; the renderers
write what NCCL 2.21 and nccl-tests 2.13 print for it: every rank's init
lines interleaved as mpirun merges them, and the size table whose busbw
follows ``algbw * 2(n-1)/n`` from a latency + bandwidth time model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.scenarios.model import Host

NCCL_VERSION = "2.21.5"
NCCL_CODE = "22105"  # what nccl-tests prints for the headers / library version
TESTS_VERSION = "2.13.11"
GPU_NAME = "NVIDIA H100 80GB HBM3"


@dataclass(frozen=True)
class NcclJob:
    """How a two-node job's NCCL was set up, and how fast its all-reduce ran."""

    env: tuple[tuple[str, str], ...] = ()  # NCCL_* variables the job exported, in order
    network: str = "IB"  # "IB" | "Socket"
    iface: str = "ens21f0np0"  # the frontend (bootstrap / socket) interface
    subnet: str = "10.12.0"  # the frontend addresses: <subnet>.<host number>
    # Socket network: the interfaces NCCL spreads its sockets over (default: ``iface``);
    # each is addressed <socket_subnet>.<interface index>.<host number>
    socket_ifaces: tuple[str, ...] = ()
    socket_subnet: str = "192.168"
    channels: int = 4
    peak_busbw: float = 368.0  # GB/s reached at the largest sizes
    latency_us: float = 40.0  # time of the smallest all-reduce
    sizes: tuple[int, int] = (8, 8 << 30)  # -b / -e
    extra_hosts: int = 1  # nodes besides the scenario's host
    pids: dict[str, int] = field(default_factory=dict)  # per host: the first rank's pid


def _peer_name(host: Host, k: int) -> str:
    """The ``k``-th host of the job: the scenario's host, then the next numbers."""
    if k == 0:
        return host.hostname
    m = re.search(r"([0-9]+)$", host.hostname)
    if not m:
        return f"{host.hostname}-{k}"
    num = int(m.group(1)) + k
    return host.hostname[:m.start()] + str(num).zfill(len(m.group(1)))


def _host_number(name: str) -> int:
    m = re.search(r"([0-9]+)$", name)
    return (int(m.group(1)) - 1) % 253 + 1 if m else 1


def _affinity(host: Host, numa: int) -> str:
    """NCCL's CPU mask for a NUMA node: 32-bit hex words, most significant first."""
    n, total = host.cpus_per_node, host.cpus_per_node * 2
    mask = 0
    for first in (numa * n, total + numa * n):
        mask |= ((1 << n) - 1) << first
    words = []
    while mask:
        words.append(mask & 0xFFFFFFFF)
        mask >>= 32
    words.reverse()
    return ",".join([f"{words[0]:x}"] + [f"{w:08x}" for w in words[1:]])


@dataclass
class _Rank:
    rank: int
    node: int
    local: int
    host: str
    pid: int
    tid: int
    lines: list[list[str]] = field(default_factory=list)  # per phase

    def prefix(self, init: bool) -> str:
        return f"{self.host}:{self.pid}:{self.tid if init else self.pid} [{self.local}]"


def _ranks(host: Host, job: NcclJob) -> list[_Rank]:
    rng = host.rng("nccl-pids")
    out = []
    per_node = len(host.gpus)
    for node in range(job.extra_hosts + 1):
        name = _peer_name(host, node)
        base = job.pids.get(name) or rng.randint(40_000, 90_000)
        for local in range(per_node):
            pid = base + local
            out.append(_Rank(node * per_node + local, node, local, name, pid,
                             pid + 151 + rng.randint(0, 40)))
    return out


def _net_token(job: NcclJob, channel: int = 0) -> str:
    """The network transport of a channel (NCCL spreads channels over its devices)."""
    if job.network == "Socket":
        return f"NET/Socket/{channel % max(1, len(job.socket_ifaces))}"
    return "NET/IB/0/GDRDMA"


def _socket_devices(job: NcclJob, host_ip: str, host_number: int) -> str:
    if not job.socket_ifaces:
        return f"[0]{job.iface}:{host_ip}<0>"
    return " ".join(f"[{i}]{name}:{job.socket_subnet}.{100 + i}.{host_number}<0>"
                    for i, name in enumerate(job.socket_ifaces))


def _ring_lines(r: _Rank, ranks: list[_Rank], job: NcclJob) -> list[str]:
    n = len(ranks)
    prev, nxt = ranks[(r.rank - 1) % n], ranks[(r.rank + 1) % n]
    out = []
    for c in range(job.channels):
        if prev.node != r.node:
            out.append(f"Channel {c:02d}/0 : {prev.rank}[{prev.local}] -> {r.rank}[{r.local}] "
                       f"[receive] via {_net_token(job, c)}")
        if nxt.node != r.node:
            out.append(f"Channel {c:02d}/0 : {r.rank}[{r.local}] -> {nxt.rank}[{nxt.local}] "
                       f"[send] via {_net_token(job, c)}")
        else:
            out.append(f"Channel {c:02d}/0 : {r.rank}[{r.local}] -> {nxt.rank}[{nxt.local}] "
                       "via P2P/CUMEM/read")
    return out


def _trees(r: _Rank, ranks: list[_Rank], job: NcclJob, per_node: int) -> tuple[str, list[str]]:
    """The ``Trees`` line and the tree connection lines of one rank: a chain inside
    each node, the node heads joined across nodes (direction alternating by channel)."""
    heads = [x.rank for x in ranks if x.local == 0]
    parts, conns = [], []
    for c in range(job.channels):
        down = r.rank + 1 if r.local < per_node - 1 else -1
        if r.local:
            parts.append(f"[{c}] {down}/-1/-1->{r.rank}->{r.rank - 1}")
            conns.append(f"Channel {c:02d}/0 : {r.rank}[{r.local}] -> {r.rank - 1}"
                         f"[{r.local - 1}] via P2P/CUMEM/read")
            continue
        others = [h for h in heads if h != r.rank]
        root = heads[c % 2] if len(heads) > 1 else r.rank
        if r.rank == root:
            kids = "/".join(str(k) for k in ([down] + others + [-1, -1])[:3])
            parts.append(f"[{c}] {kids}->{r.rank}->-1")
        else:
            parts.append(f"[{c}] {down}/-1/-1->{r.rank}->{root}")
        for peer in others:
            p = ranks[peer]
            conns.append(f"Channel {c:02d}/0 : {p.rank}[{p.local}] -> {r.rank}[{r.local}] "
                         f"[receive] via {_net_token(job, c)}")
            conns.append(f"Channel {c:02d}/0 : {r.rank}[{r.local}] -> {p.rank}[{p.local}] "
                         f"[send] via {_net_token(job, c)}")
    return "Trees " + " ".join(parts), conns


def _rank_lines(host: Host, job: NcclJob, r: _Rank, ranks: list[_Rank], comm: str,
                comm_id: str) -> list[list[str]]:
    """One process's lines, in three phases (setup, connection, completion)."""
    per_node = len(host.gpus)
    gpu = host.gpus[r.local]
    bus = f"{int(gpu.bus[5:7], 16):x}000"  # NCCL's busId: 0000:18:00.0 -> 18000
    ip = f"{job.subnet}.{_host_number(r.host)}"
    env = dict(job.env)
    main, init = r.prefix(False), r.prefix(True)
    setup = []
    if "NCCL_SOCKET_IFNAME" in env:
        setup.append(f"{main} NCCL INFO NCCL_SOCKET_IFNAME set by environment to "
                     f"{env['NCCL_SOCKET_IFNAME']}")
    setup += [f"{main} NCCL INFO Bootstrap : Using {job.iface}:{ip}<0>",
              f"{main} NCCL INFO cudaDriverVersion {_cuda_int(host.cuda_version)}"]
    if r.rank == 0:
        setup.append(f"{main} NCCL INFO NCCL version {NCCL_VERSION}+cuda{host.cuda_version}")
    setup.append(f"{init} NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared "
                 "object file: No such file or directory No plugin found (libnccl-net.so), "
                 "using internal implementation")
    for key, value in job.env:
        if key != "NCCL_SOCKET_IFNAME":
            setup.append(f"{init} NCCL INFO {key} set by environment to {value}.")
    if job.network == "Socket":
        setup.append(f"{init} NCCL INFO NET/Socket : Using "
                     f"{_socket_devices(job, ip, _host_number(r.host))}")
    else:
        devs = " ".join(f"[{i}]{n.name}:1/IB" for i, n in enumerate(host.nics))
        setup.append(f"{init} NCCL INFO NET/IB : Using {devs} [RO]; OOB {job.iface}:{ip}<0>")
    setup += [f"{init} NCCL INFO Using non-device net plugin version 0",
              f"{init} NCCL INFO Using network {job.network}",
              f"{init} NCCL INFO ncclCommInitRank comm {comm} rank {r.rank} nranks {len(ranks)} "
              f"cudaDev {r.local} nvmlDev {r.local} busId {bus} commId {comm_id} - Init START",
              f"{init} NCCL INFO Setting affinity for GPU {r.local} to "
              f"{_affinity(host, gpu.numa)}",
              f"{init} NCCL INFO comm {comm} rank {r.rank} nRanks {len(ranks)} nNodes "
              f"{job.extra_hosts + 1} localRanks {per_node} localRank {r.local} MNNVL 0"]
    if r.rank == 0:
        order = "".join(f"{x.rank:>4}" for x in ranks)
        setup += [f"{init} NCCL INFO Channel {c:02d}/{job.channels:02d} : {order}"
                  for c in range(job.channels)]
    trees, tree_conns = _trees(r, ranks, job, per_node)
    setup += [f"{init} NCCL INFO {trees}", f"{init} NCCL INFO P2P Chunksize set to 131072"]
    connect = [f"{init} NCCL INFO {x}" for x in _ring_lines(r, ranks, job)]
    connect.append(f"{init} NCCL INFO Connected all rings")
    connect += [f"{init} NCCL INFO {x}" for x in tree_conns]
    connect.append(f"{init} NCCL INFO Connected all trees")
    done = [f"{init} NCCL INFO threadThresholds 8/8/64 | 128/8/64 | 512 | 512",
            f"{init} NCCL INFO {job.channels} coll channels, 0 collnet channels, 0 nvls "
            f"channels, {job.channels} p2p channels, 2 p2p channels per peer",
            f"{init} NCCL INFO ncclCommInitRank comm {comm} rank {r.rank} nranks {len(ranks)} "
            f"cudaDev {r.local} nvmlDev {r.local} busId {bus} commId {comm_id} - Init COMPLETE"]
    return [setup, connect, done]


def _cuda_int(version: str) -> int:
    major, _, minor = version.partition(".")
    return int(major) * 1000 + int(minor or 0) * 10


def nccl_log(host: Host, job: NcclJob) -> str:
    """The job's NCCL_DEBUG=INFO output, all ranks merged as mpirun prints them."""
    rng = host.rng("nccl-log")
    ranks = _ranks(host, job)
    comm_id = f"0x{rng.getrandbits(64):016x}"
    for r in ranks:
        comm = f"0x{0x55d500000000 + rng.getrandbits(28):x}"
        r.lines = _rank_lines(host, job, r, ranks, comm, comm_id)
    out: list[str] = []
    for phase in range(3):
        queues = [list(r.lines[phase]) for r in ranks]
        while any(queues):
            live = [q for q in queues if q]
            q = live[rng.randrange(len(live))]
            out.append(q.pop(0))
    return "\n".join(out) + "\n"


def _sizes(job: NcclJob) -> list[int]:
    size, out = job.sizes[0], []
    while size <= job.sizes[1]:
        out.append(size)
        size *= 2
    return out


def _time_str(us: float) -> str:
    """nccl-tests' time column: fewer decimals as the figure grows."""
    if us >= 10_000:
        return f"{us:7.0f}"
    return f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def nccl_tests(host: Host, job: NcclJob) -> str:
    """``all_reduce_perf -b 8 -e 8G -f 2 -g 1`` under mpirun, one rank per GPU."""
    rng = host.rng("nccl-tests")
    ranks = _ranks(host, job)
    n = len(ranks)
    factor = 2 * (n - 1) / n
    algbw_peak = job.peak_busbw / factor  # GB/s
    lo, hi = job.sizes
    out = [f"# nccl-tests version {TESTS_VERSION} nccl-headers={NCCL_CODE} "
           f"nccl-library={NCCL_CODE}",
           "# Collective test starting: all_reduce_perf",
           f"# nThread 1 nGpus 1 minBytes {lo} maxBytes {hi} step: 2(factor) warmup iters: 5 "
           "iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    for r in ranks:
        g = host.gpus[r.local]
        out.append(f"#  Rank {r.rank:2d} Group  0 Pid {r.pid:6d} on {r.host:>10} device "
                   f"{r.local:2d} [0x{g.bus[5:7]}] {GPU_NAME}")
    out += ["#",
            f"#{'out-of-place':>74}{'in-place':>31}          ",
            "#       size         count      type   redop    root     time   algbw   busbw "
            "#wrong     time   algbw   busbw #wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)      "
            "      (us)  (GB/s)  (GB/s)       "]
    total, count = 0.0, 0
    for size in _sizes(job):
        cols = []
        for _ in ("out-of-place", "in-place"):
            us = (job.latency_us + size / (algbw_peak * 1e3)) * rng.uniform(0.992, 1.008)
            text = _time_str(us)
            algbw = size / (float(text) * 1e3)
            busbw = algbw * factor
            total += busbw
            count += 1
            cols.append(f"  {text}  {algbw:6.2f}  {busbw:6.2f}  {0:5d}")
        out.append(f"{size:12d}  {size // 4:12d}  {'float':>8}  {'sum':>6}  {-1:6d}"
                   + "".join(cols))
    out += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {total / count:g} ",
            "#", "# Collective test concluded: all_reduce_perf", ""]
    return "\n".join(out) + "\n"
