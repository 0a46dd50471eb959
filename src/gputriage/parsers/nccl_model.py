"""What an NCCL debug log and an nccl-tests run say, as plain dataclasses.

Filled by :mod:`gputriage.parsers.nccl_log` and
:mod:`gputriage.parsers.nccl_tests`; read by the NCCL facts, rules and views.
A *process* is one ``host:pid`` prefix of an ``NCCL_DEBUG=INFO`` log (one
rank per process under MPI/Slurm, several ranks for a single-process
multi-GPU job); lines without that prefix (shipper-stripped, author-elided)
go to a process with ``host`` and ``pid`` None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Transport families of a channel line (``via ...``).
P2P = "p2p"  # P2P/IPC, P2P/CUMEM, P2P/direct pointer (NVLink or PCIe)
SHM = "shm"  # host shared memory
NET_IB = "net-ib"  # built-in verbs transport (InfiniBand or RoCE)
NET_SOCKET = "net-socket"  # TCP sockets
NET_PLUGIN = "net-plugin"  # external net plugin (IBext, OFI / AWS Libfabric, ...)
COLLNET = "collnet"  # in-network reduction (SHARP)
NVLS = "nvls"  # NVLink SHARP
OTHER = "other"  # a transport this parser does not know
NET_FAMILIES = frozenset({NET_IB, NET_SOCKET, NET_PLUGIN, COLLNET})


@dataclass(frozen=True)
class NcclChannel:
    """One ``Channel NN/x : a[d] -> b[d] [send|receive] via T`` (or old ``Ring NN``) line."""

    channel: int
    rank: int | None  # None when the old ``Ring`` form omits the device: ``6 -> 2``
    peer: int | None
    transport: str  # as printed after "via": "NET/IB/0/GDRDMA", "P2P/CUMEM/read"
    family: str  # one of the family constants above
    line: str
    conn: int | None = None  # the "/x" connection index
    rank_dev: str | None = None  # what is in the brackets: "0" or a bus id "c7000"
    peer_dev: str | None = None
    direction: str | None = None  # "send" | "receive" | None (intra-node)
    net_dev: int | None = None  # NET/<name>/<n>: the net device index
    gdr: bool | None = None  # NET: /GDRDMA present; None for non-network families
    proxy_rank: int | None = None  # PXN: NET/IB/0(8)/GDRDMA relays through rank 8

    @property
    def own_rank(self) -> int | None:
        """The rank of the process that printed the line (the receiver of a [receive] line)."""
        return self.peer if self.direction == "receive" else self.rank


@dataclass(frozen=True)
class NcclGdr:
    """A ``GPU Direct RDMA Enabled|Disabled for [GPU g /] HCA n ...`` line."""

    enabled: bool
    line: str
    hca: str | None = None  # index as printed ("0") or name ("mlx5_0", "eth0")
    hca_name: str | None = None  # name in quotes, when printed
    gpu: str | None = None  # as printed: "42000", "2[2]"
    distance: int | None = None
    max_distance: int | None = None
    net: str | None = None  # "IB" | "Socket" | plugin name, from the NET/<x> prefix
    read: bool | None = None  # ", read 1": the NIC also reads GPU memory for sends
    mechanism: str | None = None  # "(nvidia-peermem)" / "(DMABUF)" when printed


@dataclass(frozen=True)
class NcclWarn:
    """One ``NCCL WARN`` line (or an error line of the surrounding framework)."""

    message: str  # the text after "NCCL WARN" (whole line for other errors)
    line: str
    kind: str  # "ib-completion" | "net" | "socket" | "cuda" | "system" | "init" | "other"
    source_loc: str | None = None  # "transport/net_ib.cc:1295"
    ib_status: int | None = None  # status=N / "with error N": an ibv_wc_status code
    ib_status_name: str | None = None  # "IBV_WC_RETRY_EXC_ERR"
    ib_meaning: str | None = None  # project wording of the status
    vendor_err: int | None = None
    opcode: int | None = None
    peer: str | None = None  # remote address of a completion error
    device: str | None = None  # HCA / interface the message names, when it does
    direction: str | None = None  # "Send" | "Recv" in completion errors
    rank: int | None = None  # "[rank1]:", "Rank 1 on host ...", "[Rank 0]"
    time: str | None = None  # glog time of a framework line: "08-10 15:36:05.945860779"
    op_type: str | None = None  # watchdog timeout: "ALLREDUCE"
    seq_num: int | None = None
    timeout_ms: int | None = None
    elapsed_ms: int | None = None  # "ran for N milliseconds"


@dataclass(frozen=True)
class NcclComm:
    """One communicator as seen from one rank (``ncclCommInitRank`` / ``comm 0x... rank``)."""

    comm: str | None  # "0x8ec0ac0"
    rank: int | None
    nranks: int | None
    line: str
    nnodes: int | None = None
    local_ranks: int | None = None
    local_rank: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None  # as printed: "c8000"
    comm_id: str | None = None  # "0x49bbd7790311d5eb"
    init_complete: bool = False
    init_total_s: float | None = None  # "Init timings: ... total 1.08"
    init_steps_s: dict[str, float] = field(default_factory=dict)  # kernels, bootstrap, ...


@dataclass
class NcclProcess:
    """Everything one ``host:pid`` said."""

    host: str | None
    pid: int | None
    cuda_devs: set[int] = field(default_factory=set)  # the "[d]" of its lines
    ranks: set[int] = field(default_factory=set)  # global ranks it owns (comm / channel lines)
    nccl_version: str | None = None  # "2.21.5"
    cuda_build: str | None = None  # "12.4", from "+cuda12.4"
    cuda_driver: int | None = None  # cudaDriverVersion 12040
    network: str | None = None  # "IB" | "Socket" | "IBext_v8" | "AWS Libfabric" ...
    net_plugin: str | None = None  # plugin library or name when one was loaded
    net_devices: list[str] = field(default_factory=list)  # "mlx5_0:1/IB", "eth0:10.0.0.1"
    ib_devices: list[str] = field(default_factory=list)  # "mlx5_0:1/RoCE" from NET/IB : Using
    socket_ifaces: list[str] = field(default_factory=list)  # "eth0" from NET/Socket : Using
    bootstrap_iface: str | None = None  # "enp36s0f1" from "Bootstrap : Using"
    oob_iface: str | None = None  # "ib0" from "; OOB ib0:..."
    ib_no_device: bool = False  # "NET/IB : No device found."
    ibverbs_missing: bool = False  # "Failed to open libibverbs.so"
    dmabuf: bool | None = None  # "DMA-BUF is available on GPU device N"
    # "ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem 79856": (wanted, offered)
    shared_mem: tuple[int, int] | None = None
    env: dict[str, str] = field(default_factory=dict)  # "NCCL_X set by environment to v"
    gdr: list[NcclGdr] = field(default_factory=list)
    channels: list[NcclChannel] = field(default_factory=list)
    rings: list[str] = field(default_factory=list)  # "Channel 00/02 :    0   1" layouts
    trees: list[str] = field(default_factory=list)  # "Trees [0] 1/-1/-1->0->-1 ..."
    comms: list[NcclComm] = field(default_factory=list)
    warns: list[NcclWarn] = field(default_factory=list)
    connected: list[str] = field(default_factory=list)  # "Connected all rings ..." lines
    ofi_provider: str | None = None  # "NET/OFI Selected Provider is efa"
    nvls: bool | None = None  # NVLS multicast available / NVLS comm / Connected NVLS
    collnet: bool | None = None  # CollNet channels or "Connected ... collnet" seen
    channel_counts: dict[str, int] = field(default_factory=dict)  # "2 coll channels, ..."
    error_traces: int = 0  # INFO "file.cc:123 -> 6" error-propagation lines
    dropped: dict[str, int] = field(default_factory=dict)  # over the per-process caps
    # the first raw line of each setting it logged ("network", "env:NCCL_IB_DISABLE",
    # "net:Socket", "no-device:IB", "version", "bootstrap", "ibverbs"): evidence that
    # survives when a log is streamed in rather than kept as text
    notes: dict[str, str] = field(default_factory=dict)
    last_step: str | None = None  # the last init step it logged (for hangs)
    last_line: str | None = None
    lines: int = 0

    @property
    def label(self) -> str:
        if self.host is None:
            return "(no host prefix)"
        return f"{self.host}:{self.pid}" if self.pid is not None else self.host


@dataclass
class NcclLog:
    """One or more NCCL logs read together (several files, or ranks interleaved)."""

    processes: list[NcclProcess] = field(default_factory=list)
    versions: set[str] = field(default_factory=set)  # every "NCCL version" printed
    framework_errors: list[NcclWarn] = field(default_factory=list)  # PyTorch watchdog, CUDA
    lines_read: int = 0
    nccl_lines: int = 0  # lines that carried an NCCL record
    skipped: int = 0  # lines dropped as unreadable (binary, over-long)
    origins: list[str] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)  # framework errors, processes

    @property
    def hosts(self) -> list[str]:
        return sorted({p.host for p in self.processes if p.host})

    def process(self, host: str | None, pid: int | None) -> NcclProcess:
        """The process record for ``host:pid``, created on first sight."""
        for p in self.processes:
            if p.host == host and p.pid == pid:
                return p
        p = NcclProcess(host, pid)
        self.processes.append(p)
        return p


@dataclass(frozen=True)
class NcclTestRow:
    """One size row of an nccl-tests table (out-of-place then in-place)."""

    size: int  # bytes
    count: int
    dtype: str
    redop: str  # "sum", "none"
    root: int
    line: str
    oop_time_us: float | None = None
    oop_algbw: float | None = None  # GB/s
    oop_busbw: float | None = None
    oop_wrong: int | None = None  # None when printed as "N/A"
    ip_time_us: float | None = None
    ip_algbw: float | None = None
    ip_busbw: float | None = None
    ip_wrong: int | None = None


@dataclass(frozen=True)
class NcclTestDevice:
    """``#  Rank  0 Group  0 Pid  1234 on  node1 device  0 [0x18] NVIDIA H100 80GB HBM3``."""

    rank: int
    host: str
    pid: int | None
    device: int
    bus: str | None  # "0x18"
    name: str
    line: str


@dataclass
class NcclTestRun:
    """One nccl-tests binary run (all_reduce_perf, all_gather_perf, ...)."""

    test: str | None  # "all_reduce_perf" when the command line or header names it
    line: str  # the first line of the run (for evidence)
    operation: str | None = None  # "allreduce", "allgather", ... (from the test name)
    params: dict[str, str] = field(default_factory=dict)  # nThread, nGpus, minBytes, ...
    devices: list[NcclTestDevice] = field(default_factory=list)
    rows: list[NcclTestRow] = field(default_factory=list)
    avg_busbw: float | None = None  # "# Avg bus bandwidth : 48.1"
    avg_line: str | None = None
    out_of_bounds: int | None = None  # "# Out of bounds values : 0 OK"
    errors: list[str] = field(default_factory=list)  # "Test CUDA failure ...", "Test NCCL failure"
    nccl_version: str | None = None

    @property
    def nranks(self) -> int | None:
        return len(self.devices) or None

    @property
    def hosts(self) -> list[str]:
        return sorted({d.host for d in self.devices})

    @property
    def peak(self) -> NcclTestRow | None:
        """The row with the highest bus bandwidth (out-of-place or in-place)."""
        rows = [r for r in self.rows if r.oop_busbw is not None or r.ip_busbw is not None]
        return max(rows, key=lambda r: max(r.oop_busbw or 0.0, r.ip_busbw or 0.0), default=None)

    @property
    def wrong(self) -> int:
        return sum((r.oop_wrong or 0) + (r.ip_wrong or 0) for r in self.rows)
