"""The kernel-log events as one table, and the matching of a line against it: each row
is a pattern with its kind, the literal(s) that make a line a candidate for the
scanner, the cheap literal test a message must pass, its regular expression, the
builder of its event (from :mod:`.kernel_builders`, :mod:`.kernel_host` or
:mod:`.kernel_probe`), what later lines add to it, and a real sample line.

A message is tried against the rows in order; the first row whose literal test
holds (one of its ``needles`` in the message, or of its ``lower`` in the lower-cased
message) and whose regular expression matches (when it has one) decides: its builder returns the
event(s), an empty list (the line is this row's but proves nothing), or None (try
the next row). A row that ``joins`` starts a message printed over several lines.
:data:`ANCHORS` (the scanner's literals) and :data:`CONTEXT_ANCHORS` (those after
which the scanner hands over the following lines too) are derived from the rows;
:func:`match_line` tries only the rows whose literal test a message passes (an index of
each literal to the rows that test it: each literal looked for once).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gputriage.parsers import kernel_host as host
from gputriage.parsers import kernel_probe as probe
from gputriage.parsers.kernel_builders import (
    BOUND_ELSEWHERE,
    DRIVER_LOAD,
    HCA_FIRMWARE,
    Builder,
    aer_bus_error,
    aer_received,
    bandwidth,
    bound_elsewhere,
    core_dump,
    driver_load,
    firmware_load,
    gsp_dump,
    gsp_error,
    gsp_timeout,
    hca_firmware,
    hung,
    lockup,
    mlx5_link,
    module_load,
    no_adapter,
    no_firmware,
    nothing,
    nvlink,
    on_gpu,
    rm_init,
    segfault,
    sxid,
    wrap,
    xid_event,
)
from gputriage.parsers.kernel_follow import (
    AER_REPORT,
    API_MISMATCH,
    BAR_INVALID,
    CALL_TRACE,
    CORE_DUMP,
    FALLEN_OFF_BUS,
    HW_RECORD,
    LEGACY_GPU,
    SXID_LINES,
    Follow,
    Message,
)
from gputriage.parsers.kernel_model import DriverEvent, LogLine
from gputriage.parsers.kernel_patterns import (
    AER_BUS_ERROR,
    AER_RECEIVED,
    BANDWIDTH,
    FALLEN_HEAD,
    FW_LOAD,
    GSP_FAILURE,
    HUNG,
    LOCKUP,
    MLX5_LINK,
    MODPROBE,
    NVLINK_FAILURE,
    RMINIT,
    SEGFAULT,
    SXID,
    SYMBOL,
    UDEV_MODPROBE,
    XID,
)
from gputriage.vocabulary import EventKind

__all__ = ["ANCHORS", "CONTEXT_ANCHORS", "EVENTS", "EventPattern", "match_line"]

K = EventKind


@dataclass(frozen=True)
class EventPattern:
    """One row of :data:`EVENTS`."""

    kind: EventKind
    anchors: tuple[str, ...]  # a candidate line holds one of these (the scanner's literals)
    needles: tuple[str, ...]  # the message holds one of these (or of ``lower``) ...
    build: Builder | None  # (line, message, match) -> event(s); None for a row that joins
    sample: str  # a line as a real log prints it (a row that joins: the message's lines)
    regex: re.Pattern[str] | None = None  # ... and this matches it (searched)
    lower: tuple[str, ...] = ()  # ... or its lower-cased text holds one of these
    follow: Follow | None = None  # what later lines add to the event
    joins: Message | None = None  # the line starts a message printed over several lines
    # a line whose anchors are all routine ones (busy ones: mlx5_core) is a candidate only
    # when it holds one of these, case ignored (where every row of such an anchor says)
    requires: tuple[str, ...] = ()


_GSP_TIMEOUT = re.compile(r"Timeout after [0-9]{1,6}s of waiting for RPC response|(?i:gsp rpc "
                          r"timeout|_kgsprpcrecvpoll|timeout waiting for rpc from gsp|rate "
                          r"limiting gsp rpc)")
_RESET_REQUIRED = re.compile(r"NV_ERR_RESET_REQUIRED|(?i:gpu reset required)")
_GSP_DUMP = ("_kgspLogXid119", "RPC history (CPU -> GSP)")
_AER_LINE = ("error received", "PCIe Bus Error")
_PEER = ("nv_peer_mem", "nvidia")
# host.AER_DRIVER's alternatives
_AER_DRIVER = ("can't recover", "has no AER-aware", "driver reported", "recovery failed")

P = EventPattern
# In order: the first row that applies decides (see the module docstring).
EVENTS: tuple[EventPattern, ...] = (
    # messages over several lines
    P(K.API_MISMATCH, ("NVRM:",), ("NVRM: API mismatch",), None,
      "[ 7386.259769] NVRM: API mismatch: the client has the version 550.90.07, but",
      joins=API_MISMATCH),
    P(K.FALLEN_OFF_BUS, ("NVRM:",), ("NVRM: The NVIDIA GPU ",), None,
      "[17257.355375] NVRM: The NVIDIA GPU 0000:5d:00.0\n"
      "[17257.355377] NVRM: (PCI ID: 10de:20b5) installed in this system has\n"
      "[17257.355378] NVRM: fallen off the bus and is not responding to commands.",
      regex=FALLEN_HEAD, joins=FALLEN_OFF_BUS),
    P(K.BAR_INVALID, ("NVRM:",), (probe.BAR_HEAD,), None,
      "[83260.063553] NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:\n"
      "               NVRM: BAR1 is 0M @ 0x0 (PCI:0000:14:00.0)", joins=BAR_INVALID),
    P(K.GPU_UNSUPPORTED, ("NVRM:",), ("GPU installed in this system is",), None,
      "[   11.737433] NVRM: The NVIDIA GeForce GT 710 GPU installed in this system is\n"
      "[   11.737435] NVRM:  supported through the NVIDIA 470.xx Legacy drivers. Please\n"
      "[   11.737437] NVRM:  visit http://www.nvidia.com/object/unix.html for more\n"
      "[   11.737438] NVRM:  information.  The 535.54.03 NVIDIA driver will ignore\n"
      "[   11.737440] NVRM:  this GPU.  Continuing probe...",
      regex=probe.LEGACY_HEAD, joins=LEGACY_GPU),
    # Xid and SXid
    P(K.SXID, ("nvidia",), ("SXid",), sxid,
      "[ 1843.220691] nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 30 "
      "LTSSM Fault Up", regex=SXID, follow=SXID_LINES),
    P(K.XID, ("NVRM:",), ("Xid",), xid_event,
      "[74889.644138] NVRM: Xid (PCI:0000:02:00): 79, pid='<unknown>', name=<unknown>, "
      "GPU has fallen off the bus.", regex=XID),
    # the driver stack
    P(K.FALLEN_OFF_BUS, ("NVRM:",), ("fallen off the bus",), on_gpu(K.FALLEN_OFF_BUS),
      "[ 4254.197871] NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus."),
    P(K.RM_INIT_ADAPTER_FAILED, ("NVRM:",), ("RmInitAdapter failed!",), rm_init,
      "[   23.991672] NVRM: GPU 0000:07:00.0: RmInitAdapter failed! (0x61:0x56:1770)",
      regex=RMINIT),
    P(K.RM_INIT_ADAPTER_FAILED, ("NVRM:",), ("RmInitAdapter failed!",), rm_init,
      "[    9.804214] NVRM: GPU 0000:41:00.0: RmInitAdapter failed!"),
    P(K.NO_ADAPTER_PROBED, ("NVRM:",), ("No NVIDIA graphics adapter probed",), no_adapter,
      "[188497.595099] NVRM: No NVIDIA graphics adapter probed!"),
    P(K.NO_ADAPTER_PROBED, ("NVRM:",), ("No NVIDIA devices probed",), no_adapter,
      "[  201.913648] NVRM: No NVIDIA devices probed."),
    P(K.NO_ADAPTER_PROBED, ("NVRM:",), ("is already bound to",), bound_elsewhere,
      "[  201.910514] NVRM: GPU 0000:01:00.0 is already bound to NovaCore.",
      regex=BOUND_ELSEWHERE),
    P(K.GSP_FIRMWARE_MISSING, ("nvidia",), ("Direct firmware load for nvidia/",),
      firmware_load, "[   23.991660] nvidia 0000:07:00.0: Direct firmware load for "
      "nvidia/570.144/gsp_ga10x.bin failed with error -2", regex=FW_LOAD),
    P(K.GSP_FIRMWARE_MISSING, ("NVRM:",), ("No firmware image found",), no_firmware,
      "[   23.991667] NVRM: RmFetchGspRmImages: No firmware image found"),
    P(K.PROBE_FAILED, ("nvidia",), ("failed with error",), wrap(probe.probe_failed),
      "[83260.063557] nvidia: probe of 0000:14:00.0 failed with error -1",
      regex=probe.PROBE_FAILED),
    P(K.PROBE_FAILED, ("NVRM:",), ("probe routine failed", "were initiali"),
      wrap(probe.probe_summary),
      "[83260.106438] NVRM: The NVIDIA probe routine failed for 2 device(s).",
      regex=probe.PROBE_SUMMARY),
    P(K.PEERMEM_LOAD_FAILED, _PEER, ("peer",), wrap(host.peermem_failed),
      "[Tue Sep  8 17:16:02 2026] nvidia_peermem: Unknown symbol "
      "ib_register_peer_memory_client (err -22)", regex=host.PEERMEM_SYMBOL),
    P(K.PEERMEM_LOAD_FAILED, _PEER, ("peer",), wrap(host.peermem_failed),
      "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument",
      regex=host.PEERMEM_INSERT),
    P(K.PEERMEM_LOAD_FAILED, _PEER, ("peer",), wrap(host.peermem_failed),
      "[   31.402118] nv_peer_mem: ib_register_peer_memory_client registration failed: -22",
      regex=host.PEERMEM_REGISTER),
    P(K.MODULE_LOAD_FAILED, ("nvidia",), ("nvidia",), module_load,
      "modprobe: ERROR: could not insert 'nvidia': No such device", regex=MODPROBE),
    P(K.MODULE_LOAD_FAILED, ("nvidia",), ("nvidia",), module_load,
      "2025-08-16T00:03:04.070671-04:00 localhost (udev-worker)[106246]: nvidia: Process "
      "'/sbin/modprobe nvidia-drm' failed with exit code 1.", regex=UDEV_MODPROBE),
    P(K.MODULE_LOAD_FAILED, ("nvidia",), ("nvidia",), module_load,
      "[    5.120311] nvidia: Unknown symbol drm_gem_object_free (err -2)", regex=SYMBOL),
    P(K.DRIVER_LOAD, ("NVRM:",), ("NVRM: loading NVIDIA UNIX",), driver_load,
      "[    6.060263] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 "
      "18:56:32 UTC 2023", regex=DRIVER_LOAD),
    # GSP firmware
    P(K.GSP_RPC_TIMEOUT, ("NVRM:",), _GSP_DUMP, gsp_dump,
      "[349507.527722] NVRM: GPU0 RPC history (CPU -> GSP):",
      regex=re.compile("GSP Timeout|RPC history")),
    P(K.GSP_RPC_TIMEOUT, ("NVRM:",), _GSP_DUMP, nothing,
      "[Sun Apr 26 23:12:26 2026] NVRM: _kgspLogXid119: Note: Please also check logs above."),
    P(K.GSP_RPC_TIMEOUT, ("NVRM:",), (), gsp_timeout,
      "[349525.895155] NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:07:00 "
      "(printing 1 of every 30).  The GPU likely needs to be reset.",
      regex=_GSP_TIMEOUT, lower=("rpc",)),
    P(K.GSP_ERROR, ("NVRM:",), (), core_dump,
      "[ 2211.480193] NVRM: kflcnCoreDumpNondestructive_IMPL: TRACE: 08 = 0x0000000004d4b1a0",
      lower=("kflcncoredump",), follow=CORE_DUMP),
    P(K.GSP_ERROR, ("NVRM:",), (), gsp_error,
      "[  903.609564] NVRM: RmInitAdapter: Cannot initialize GSP firmware RM",
      regex=GSP_FAILURE, lower=("gsp",)),
    P(K.GPU_RESET_REQUIRED, ("NVRM:",), ("NV_ERR_RESET_REQUIRED",),
      on_gpu(K.GPU_RESET_REQUIRED, True),
      "[ 3312.004417] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required "
      "[NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874",
      regex=_RESET_REQUIRED, lower=("gpu reset required",)),
    P(K.PEERMEM_INVALID_CONTEXT, ("nvidia",), ("peermem",),
      on_gpu(K.PEERMEM_INVALID_CONTEXT, True),
      "[Fri Aug 30 11:11:22 2024] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected "
      "invalid context, skipping further processing", regex=re.compile("invalid context")),
    P(K.NVLINK_ERROR, ("NVRM:",), (), nvlink,
      "[ 5120.338201] NVRM: GPU 0000:3b:00.0: NVLink: link 5 is down",
      regex=NVLINK_FAILURE, lower=("nvlink",)),
    # PCIe
    P(K.PCIE_AER, ("error received",), ("error received",), aer_received,
      "[74785.660366] pcieport 0000:00:02.0: AER: Corrected error received: id=0010",
      regex=AER_RECEIVED, follow=AER_REPORT),
    P(K.PCIE_AER, ("PCIe Bus Error",), _AER_LINE, aer_bus_error,
      "[74785.660380] pcieport 0000:00:02.0: PCIe Bus Error: severity=Corrected, type=Data "
      "Link Layer, (Transmitter ID)", regex=AER_BUS_ERROR, follow=AER_REPORT),
    P(K.PCIE_AER, (), _AER_LINE, nothing,  # cut short, as consoles and pastes cut lines
      "[74785.660380] pcieport 0000:00:02.0: PCIe Bus Error: severity=Uncorrected (Fatal)"),
    P(K.PCIE_AER, ("nvidia", "mlx5_core "), ("AER",), wrap(host.aer_driver),
      "[74889.644201] nvidia 0000:02:00.0: AER: can't recover (no error_detected callback)",
      regex=host.AER_DRIVER, requires=_AER_DRIVER),
    P(K.PCIE_BANDWIDTH_LIMITED, ("PCIe bandwidth",), ("PCIe bandwidth",), bandwidth,
      "[    1.445026] mlx5_core 0000:01:00.0: 126.016 Gb/s available PCIe bandwidth, limited "
      "by 8.0 GT/s PCIe x16 link at 0000:00:01.0 (capable of 252.048 Gb/s with 16.0 GT/s "
      "PCIe x16 link)", regex=BANDWIDTH),
    P(K.PCIE_BANDWIDTH_LIMITED, ("PCIe bandwidth",), ("PCIe bandwidth limited",), bandwidth,
      "[    2.113040] nvidia 0000:3b:00.0: PCIe bandwidth limited by the slot"),
    # network links
    P(K.HCA_FIRMWARE_OLD, ("FW version", "command interface revision"),
      ("FW version", "command interface revision"), hca_firmware,
      "[  939.318810] mlx4_en 0000:0d:00.0: LSO not supported, please upgrade to later FW "
      "version to enable LSO", regex=HCA_FIRMWARE),
    P(K.MLX5_LINK, ("mlx5_core ",), ("mlx5_core",), mlx5_link,
      "[ 4435.115811] mlx5_core 0000:53:00.0 enp83s0f0np0: Link down", regex=MLX5_LINK,
      requires=("Link up", "Link down")),
    P(K.LINK_STATE, ("NETDEV WATCHDOG",), ("NETDEV WATCHDOG",), wrap(host.tx_timeout),
      "[ 8812.301004] NETDEV WATCHDOG: enp83s0f0np0 (mlx5_core): transmit queue 7 timed out",
      regex=host.WATCHDOG),
    P(K.MLX5_LINK, ("mlx5_core ",), ("mlx5_core",), wrap(host.ib_port_state),
      "[ 4441.769587] mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link ACTIVE",
      regex=host.MLX5_PORT, requires=("Link ACTIVE", "Link DOWN")),
    P(K.LINK_STATE, ("Lost carrier", "Gained carrier"), ("carrier",),
      wrap(host.carrier_change),
      "Dec  6 19:25:33 at7tj000004 systemd-networkd[2385]: ib1: Lost carrier",
      regex=host.CARRIER),
    # host hardware errors
    P(K.HW_ERROR, ("EDAC ",), ("EDAC",), wrap(host.edac_error),
      "[ 9021.551230] EDAC MC1: 1 CE memory read error on CPU_SrcID#1_Ha#0_Chan#2_DIMM#0 "
      "(channel:2 slot:0 page:0x5d7e4a offset:0x0 grain:32 syndrome:0x0)",
      regex=host.EDAC),
    P(K.HW_ERROR, ("Memory failure", "hardware memory error"),
      ("Memory failure", "hardware memory error"), wrap(host.memory_failure),
      "[ 9102.004410] Memory failure: 0x5d7e4a: recovery action for dirty LRU page: Recovered",
      regex=host.MEMORY_FAILURE),
    P(K.HW_ERROR, ("Hardware Error",), ("Hardware Error",), wrap(host.hw_record),
      "[ 9300.120045] {1}[Hardware Error]: Hardware error from APEI Generic Hardware Error "
      "Source: 0", regex=host.HW_RECORD, follow=HW_RECORD),
    # storage
    P(K.STORAGE_ERROR, ("XFS (", "EXT4-fs error", "Remounting filesystem read-only",
                        "Aborting journal"),
      ("XFS (", "EXT4-fs", "Aborting journal"), wrap(host.fs_error),
      "[470911.895805] XFS (md127): log I/O error -5", regex=host.FS_ERROR,
      requires=("error", "shut", "corrupt", "read-only", "journal")),
    P(K.STORAGE_ERROR, ("error, dev ",), ("error, dev ",), wrap(host.block_error),
      "[470907.282230] blk_update_request: I/O error, dev nvme2n1, sector 6442712256 op "
      "0x1:(WRITE) flags 0x1000 phys_seg 8 prio class 0", regex=host.BLOCK_ERROR),
    P(K.STORAGE_ERROR, ("Buffer I/O error",), ("Buffer I/O error",), wrap(host.buffer_error),
      "[ 8113.901245] Buffer I/O error on dev nvme0n1p1, logical block 0, async page read",
      regex=host.BUFFER_ERROR),
    P(K.STORAGE_ERROR, ("nvme nvme",), ("nvme nvme",), wrap(host.nvme_error),
      "[91222.015566] nvme nvme0: controller is down; will reset: CSTS=0xffffffff, "
      "PCI_STATUS=0xffff", regex=host.NVME_ERROR),
    P(K.STORAGE_ERROR, ("Disk failure on",), ("Disk failure on",), wrap(host.md_failure),
      "[470912.100431] md/raid1:md127: Disk failure on nvme2n1p1, disabling device.",
      regex=host.MD_FAILURE),
    # crashes and hangs
    P(K.SEGFAULT, ("segfault at ",), ("segfault at",), segfault,
      "[ 5022.930157] llama-server[16980]: segfault at 20d803fdc ip 00007dbe270a3e47 sp "
      "00007ffff184bf00 error 4 in libcuda.so.570.133.20[7dbe26d79000+d1c000]",
      regex=SEGFAULT),
    P(K.HUNG_TASK, ("blocked for more than",), ("blocked for more than",), hung,
      "[ 7382.118250] INFO: task python3:48211 blocked for more than 122 seconds.",
      regex=HUNG, follow=CALL_TRACE),
    P(K.SOFT_LOCKUP, ("soft lockup",), ("soft lockup",), lockup,
      "[ 6120.447912] watchdog: BUG: soft lockup - CPU#17 stuck for 23s! [nvidia-smi:9321]",
      regex=LOCKUP, follow=CALL_TRACE),
)


def _context_anchors(p: EventPattern) -> tuple[str, ...]:
    """The anchors of ``p`` after which the scanner hands over the following lines."""
    if p.follow is None or not p.follow.context:
        return ()
    return (p.follow.starts,) if p.follow.starts else p.anchors


ANCHORS: tuple[str, ...] = tuple(dict.fromkeys(a for p in EVENTS for a in p.anchors))
CONTEXT_ANCHORS: frozenset[str] = frozenset(a for p in EVENTS for a in _context_anchors(p))


def _index(field: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Each literal of ``field`` (``needles`` or ``lower``) with the rows that test it."""
    rows: dict[str, list[int]] = {}
    for i, p in enumerate(EVENTS):
        if not (p.needles or p.lower):
            raise ValueError(f"row {i} ({p.kind}) has no literal test")
        for n in getattr(p, field):
            rows.setdefault(n, []).append(i)
    return tuple((n, tuple(r)) for n, r in rows.items())


_BY_NEEDLE = _index("needles")
_BY_LOWER = _index("lower")


_DIGITS = bytes.maketrans(b"123456789", b"000000000")  # every digit read as 0
# The literals without a digit: one of them is in an ASCII message exactly when it is in
# the message with its digits read as 0 (nor does lower-casing make or unmake a digit), so
# what they find is kept per such message: a log repeats its messages but for their numbers
_PLAIN = tuple(x for x in _BY_NEEDLE if not any(c.isdigit() for c in x[0]))
_PLAIN_LOWER = tuple(x for x in _BY_LOWER if not any(c.isdigit() for c in x[0]))
_NUMBERED = tuple(x for x in _BY_NEEDLE if x not in _PLAIN)  # looked for in every message
_NUMBERED_LOWER = tuple(x for x in _BY_LOWER if x not in _PLAIN_LOWER)
_FOUND: dict[bytes, Sequence[int]] = {}  # message, digits as 0 -> the rows its literals hold
_FOUND_KEPT = 4096
_FOUND_LONGEST = 512  # longer messages are not kept


def _rows(msg: str, needles: tuple[tuple[str, tuple[int, ...]], ...],
          lower: tuple[tuple[str, tuple[int, ...]], ...]) -> list[tuple[int, ...]]:
    """The rows of each literal of ``needles`` in ``msg``, of ``lower`` in it lower-cased."""
    hits = [rows for n, rows in needles if n in msg]
    if lower:
        low = msg.lower()
        hits += [rows for n, rows in lower if n in low]
    return hits


def _union(hits: list[tuple[int, ...]]) -> Sequence[int]:
    if len(hits) < 2:
        return hits[0] if hits else ()
    return sorted(set().union(*hits))


def _candidates(msg: str) -> Sequence[int]:
    """The rows whose literal test ``msg`` passes, in table order (each distinct literal
    is looked for once)."""
    if not msg.isascii():
        return _union(_rows(msg, _BY_NEEDLE, _BY_LOWER))
    key = msg.encode("ascii").translate(_DIGITS)
    plain = _FOUND.get(key)
    if plain is None:
        plain = _union(_rows(key.decode("ascii"), _PLAIN, _PLAIN_LOWER))
        if len(key) <= _FOUND_LONGEST:
            if len(_FOUND) >= _FOUND_KEPT:
                _FOUND.clear()
            _FOUND[key] = plain
    numbered = _rows(msg, _NUMBERED, _NUMBERED_LOWER)
    if not numbered:
        return plain
    return _union([tuple(plain), *numbered])


def match_line(line: LogLine) -> tuple[EventPattern, list[DriverEvent]] | None:
    """The row that decides ``line`` and the events it builds (a row that joins
    builds none: the extractor assembles its message); None when no row applies."""
    msg = line.msg
    for i in _candidates(msg):
        p = EVENTS[i]
        m = p.regex.search(msg) if p.regex is not None else None
        if p.regex is not None and m is None:
            continue
        if p.build is None:
            return p, []
        found = p.build(line, msg, m)
        if found is not None:
            return p, found if isinstance(found, list) else [found]
    return None
