"""Synthetic NCCL logs and host inputs shared by the NCCL rule tests
(tests/test_rules_nccl_*.py): jobs' NCCL_DEBUG=INFO logs, and the InfiniBand ports the
bandwidth expectation reads (bare NDR ports, without the LIDs and firmware of
hostkit's ``ib_tree``); and a large file read as ``gputriage nccl`` reads one."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

from pathlib import Path

from hostkit import MODULES_FULL

from gputriage.parsers.nccl_model import NcclLog

MINE = ("nccl.socket-transport", "nccl.gdr-disabled", "nccl.shm-transport",
        "nccl.socket-iface-virtual", "nccl.node-split", "nccl.p2p-disabled")


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
# without the module: no row of its own, and no other row names it as a user
NO_PEERMEM = "".join(ln.replace("nvidia_peermem,", "") + "\n"
                     for ln in MODULES_FULL.splitlines() if not ln.startswith("nvidia_peermem"))

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

def mine(result, fid: str | None = None):
    return [f for f in result.findings if f.id in MINE and (fid is None or f.id == fid)]


def one(result, fid: str):
    found = mine(result, fid)
    assert len(found) == 1, [(f.id, f.title) for f in mine(result)]
    return found[0]


def lines_of(f) -> list[str]:
    return [ln for e in f.evidence for ln in e.lines]


# -- InfiniBand ports for the bus bandwidth expectation ------------------------------------

NDR_ACTIVE = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
              "link_layer": "InfiniBand"}
NDR_POLLING = {**NDR_ACTIVE, "state": "1: DOWN", "phys_state": "2: Polling",
               "rate": "10 Gb/sec (4X SDR)"}


def ndr_ports(n: int, **changes: dict[str, str]) -> dict[str, dict[str, str]]:
    """``n`` single-port HCAs mlx5_0.. (NDR, active unless ``changes`` says otherwise)."""
    ports = {f"mlx5_{i}/1": dict(NDR_ACTIVE) for i in range(n)}
    ports.update({f"{dev}/1": attrs for dev, attrs in changes.items()})
    return ports


def ports_tree(ports: dict[str, dict[str, str]]) -> dict:
    """The ``infiniband`` sysfs tree source of some ports (``{"mlx5_0/1": {attr: text}}``)."""
    files = {}
    for key, attrs in ports.items():
        dev, num = key.split("/")
        files[f"{dev}/hca_type"] = "MT4129\n"
        files.update({f"{dev}/ports/{num}/{a}": f"{v}\n" for a, v in attrs.items()})
    return {"files": files, "links": {}, "errors": {}}


def ndr_tree(n: int, **changes: dict[str, str]) -> dict:
    """The ``infiniband`` tree of :func:`ndr_ports`."""
    return ports_tree(ndr_ports(n, **changes))


def scan_large(path: Path, region: int, workers: int, engine: str,
               cap: int | None = None) -> tuple[NcclLog, list[str], bool, int]:
    """A file read as ``gputriage nccl`` reads a large one (nccl/scan.py's regions and
    workers): the log, the nccl-tests lines kept and whether all were, and where the read
    ended; no problem may be reported."""
    import os

    from gputriage.nccl import scan as nccl_scan
    from gputriage.nccl.inputs import TESTS_CAP

    log = NcclLog()
    problems: list[str] = []
    with path.open("rb") as fh:
        fd = fh.fileno()
        tap = nccl_scan.LargeTap(fd, TESTS_CAP if cap is None else cap)
        end = nccl_scan.read_large(fd, os.fstat(fd).st_size, path.name, log, tap, problems,
                                   workers=workers, region=region, engine=engine)
        kept, full = tap.kept(end)
    assert not problems, problems
    return log, kept, full, end
