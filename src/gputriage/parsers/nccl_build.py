"""Applying parsed NCCL records to an :class:`~gputriage.parsers.nccl_model.NcclLog`.

:class:`Builder` takes the lines that :mod:`gputriage.parsers.nccl_log` picked out of a
file, one at a time: it splits them into records with the grammar of
:mod:`gputriage.parsers.nccl_lines`, files each under its process (host, pid), merges
the communicator lines that describe one communicator, and gathers framework errors
(PyTorch's watchdog, CUDA errors) that wrap over a few lines. Everything it keeps is
bounded by the storage caps below, so a huge or hostile log stays within memory;
what does not fit is counted in the ``dropped`` maps.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar

from gputriage.parsers import nccl_framework as fw
from gputriage.parsers import nccl_lines as g
from gputriage.parsers.nccl_model import COLLNET, NcclComm, NcclLog, NcclProcess
from gputriage.text.fields import strict_int

_T = TypeVar("_T")

__all__ = ["CAPS", "MAX_FRAMEWORK", "MAX_PROCESSES", "MAX_SET", "MAX_STORED", "Builder"]

# storage caps: per-process list lengths, then whole-log budgets
CAPS = {"channels": 4096, "warns": 512, "gdr": 512, "rings": 512, "trees": 512,
        "comms": 1024, "connected": 256, "net_devices": 64, "ib_devices": 64,
        "socket_ifaces": 64}
MAX_PROCESSES = 100_000
MAX_STORED = 2_000_000  # list items kept over all processes (about 1 GB at most)
MAX_SET = 65_536  # ranks / devices of one process, distinct versions
MAX_FRAMEWORK = 512
_NOTES_MAX = 48
MAX_REPLAYS = 4096  # distinct lines whose repeats are applied without parsing them again
_REPLAY_LINE = 1000  # ... each this long at most (a record line is a few hundred)
_SHARED_MEM = re.compile(r"ncclMaxSharedMem ([0-9]{1,12}) exceeds device/fn maxSharedMem "
                         r"([0-9]{1,12})")
_ENV_MAX = 256

_ENV = re.compile(r"(?P<k>[A-Z][A-Z0-9_]{1,80}) set by environment to\s?(?P<v>.{0,500})$")
_POINTER = re.compile(r"0x[0-9a-fA-F]{1,16}")
_TRACE = re.compile(r"[\w./+-]{1,200}:[0-9]{1,7} -> [0-9]{1,4}")
_COUNTS = re.compile(r"([0-9]{1,6}) ([a-z0-9]{1,12}) channels( per peer)?")
_PLUGIN = re.compile(r"Loaded (?:net|collnet|coll) plugin (.{1,120}?)(?:\s\(v[0-9]{1,3}\))?$|"
                     r"(?:Successfully )?[Ll]oaded external plugin (\S{1,200})")
_OFI = re.compile(r"Selected [Pp]rovider is (\S{1,40})|"
                  r"(?:Using|Initializing) (aws-ofi-nccl \S{1,40})")
_BOOTSTRAP = re.compile(r"Using\s{1,4}(?:\[[0-9]{1,4}\])?([^\s:<]{1,64})")
_USING_NETWORK = re.compile(r"Using (?:network|internal Network) (.{1,80}?)\.?$")
# NCCL 2.0-2.3: "NET : Using interface eth0:10.0.0.1<0>", "NET/IB : Using interface eth0
# for sideband communication"
_OLD_IFACE = re.compile(r"NET\s{1,4}:\s{0,4}Using interface\s{1,4}([^\s:<]{1,64})")
_SIDEBAND = re.compile(r"Using interface\s{1,4}([^\s:<]{1,64}) for sideband")
_NET = re.compile(r"NET/(?P<name>[^\s:/]{1,64})\s{0,4}:?\s{0,4}(?P<rest>.{0,4000})$")
_NEGATED = re.compile(r"\bnot\b|unavailable|disabled")
_NEGATED_ANY_CASE = re.compile(_NEGATED.pattern, re.IGNORECASE)


class Builder:
    """Applies lines to an :class:`NcclLog`; holds the state one file's reading needs.

    While ``want`` is non-zero a framework error is being gathered and the reader
    must pass every next line to :meth:`feed`, marker or not.

    A job log repeats its lines (every iteration, every channel, the same WARN from
    every rank): a line of a kind whose repeat has a known effect (a WARN, a channel's
    transport, an INFO line that sets nothing) is parsed once, and each repeat of the
    same text applies that effect (:meth:`_replay_of`); ``replay=False`` parses every
    line, as the reference the tests compare with.
    """

    def __init__(self, log: NcclLog, replay: bool = True) -> None:
        self.log = log
        self.replays: dict[str, Callable[[], None]] | None = {} if replay else None
        self.raw_replays: dict[bytes, Callable[[], None]] = {}  # the same, by the bytes read
        self.index = {(p.host, p.pid): p for p in log.processes}
        self.hosts = {p.host for p in log.processes if p.host}
        self.stored = sum(len(getattr(p, k)) for p in log.processes for k in CAPS)
        # communicator indexes: (host, pid, comm pointer) and (host, pid, rank) -> position
        self.by_ptr: dict[tuple[str | None, int | None, str | None], int] = {}
        self.by_rank: dict[tuple[str | None, int | None, int | None], int] = {}
        for p in log.processes:
            for i, c in enumerate(p.comms):
                self._index_comm(p, i, c)
        self.last_prefixed: NcclProcess | None = None
        self.pending: list[str] = []  # a framework error being gathered over lines
        self.want = 0
        self.fw_seen = {fw.framework_key(w) for w in log.framework_errors}

    # lines ---------------------------------------------------------------------------
    def feed(self, text: str) -> None:
        """One decoded line: NCCL records, a bare version banner or a framework error."""
        if self.want:
            if self._continue(text):
                return
        elif self.replays is not None and (again := self.replays.get(text)) is not None:
            again()
            return
        records = g.split_records(text, self.hosts)
        if records:
            self.log.nccl_lines += 1
            for r in records:
                self.record(r)
            if self.replays is not None and len(self.replays) < MAX_REPLAYS and \
                    len(records) == 1 and len(text) <= _REPLAY_LINE and \
                    (again := self._replay_of(text, records[0])):
                self.replays[text] = again
            return
        version = g.bare_version(text)
        if version:
            self.log.nccl_lines += 1
            _put(self.log.versions, version[0])
            p = self.last_prefixed
            if p is not None and p.nccl_version is None:
                p.nccl_version, p.cuda_build = version
            return
        self._framework(text)

    def feed_raw(self, raw: bytes) -> None:
        """One line as read (NULs dropped, decoded with replacement, its carriage return
        stripped): :meth:`feed`, a repeat of a line replayed without decoding it again
        (the text is a function of the bytes, so its replay is theirs)."""
        if not self.want and (again := self.raw_replays.get(raw)) is not None:
            again()
            return
        text = (raw.replace(b"\x00", b"") if b"\x00" in raw else raw).decode(
            "utf-8", "replace").rstrip("\r")
        self.feed(text)
        if self.replays is not None and len(self.raw_replays) < MAX_REPLAYS and \
                len(raw) <= 4 * _REPLAY_LINE and (again := self.replays.get(text)) is not None:
            self.raw_replays[raw] = again

    def finish(self) -> None:
        """End of the file: close a framework error still being gathered."""
        if self.pending:
            self._fw_done()

    # NCCL records --------------------------------------------------------------------
    def record(self, r: g.Record) -> None:
        p = self.index.get((r.host, r.pid))
        if p is None:
            if len(self.index) >= MAX_PROCESSES:
                self.log.dropped["processes"] = self.log.dropped.get("processes", 0) + 1
                return
            p = self.index[(r.host, r.pid)] = NcclProcess(r.host, r.pid)
            self.log.processes.append(p)
        p.lines += 1
        p.last_line = r.line[:500]
        if r.dev is not None and r.dev >= 0:
            _put(p.cuda_devs, r.dev)
        if r.host is not None:
            self.last_prefixed = p
            self.hosts.add(r.host)
        if r.level == "WARN":
            w = g.classify_warn(r.msg, r.loc, r.line)
            if w.kind == "net" and "libibverbs" in w.message:
                p.ibverbs_missing = True
                _note(p, "ibverbs", r.line)
            self.add(p, "warns", w)
        else:
            self.info(p, r.msg, r.line)

    def _replay_of(self, text: str, r: g.Record) -> Callable[[], None] | None:
        """What a repeat of ``text`` (one record, ``r``, just applied) does, when every
        other effect of applying it again is none: a set or a note it filled the first
        time, a flag it set that nothing clears. None for any other kind of line."""
        p = self.index.get((r.host, r.pid))
        if p is None or r.host is None or g.plain_record(text) is not r:
            return None  # a dropped process; a record read with the hosts seen so far
        if r.level == "WARN":
            w = g.classify_warn(r.msg, r.loc, r.line)
            return functools.partial(self._again, p, r.line[:500], "warns", w, None)
        if r.level != "INFO":
            return None
        route = _route(r.msg)
        if route == "channel" and (ch := g.parse_channel(r.msg, r.line)) is not None:
            return functools.partial(self._again, p, r.line[:500], "channels", ch,
                                     "Channel connect")
        if route == "other" and _sets_nothing(r.msg):
            return functools.partial(self._again, p, r.line[:500], None,
                                     _TRACE.match(r.msg) is not None, None)
        return functools.partial(self._again_info, p, r, route)

    def _again_info(self, p: NcclProcess, r: g.Record, route: str) -> None:
        """A repeat of any other INFO record: what :meth:`record` does for a process that
        exists (its host known, its device kept or its set full the first time), then the
        handler of ``route`` on the state of now, as :meth:`info` runs it."""
        self.log.nccl_lines += 1
        p.lines += 1
        p.last_line = r.line[:500]
        self.last_prefixed = p
        self.dispatch(p, route, r.msg, r.line)

    def _again(self, p: NcclProcess, last_line: str, name: str | None, item: object,
               step: str | None) -> None:
        """A repeat: the counts and last line of :meth:`record`, then the item added to
        ``p``'s list ``name`` (None: an error trace counted when ``item``) and the step."""
        self.log.nccl_lines += 1
        p.lines += 1
        p.last_line = last_line
        self.last_prefixed = p
        if name is not None:
            self.add(p, name, item)
        elif item:
            p.error_traces += 1
        if step is not None:
            p.last_step = step

    def info(self, p: NcclProcess, msg: str, line: str) -> None:
        """An INFO message: dispatched on how it starts (one handler per record kind)."""
        self.dispatch(p, _route(msg), msg, line)

    def dispatch(self, p: NcclProcess, route: str, msg: str, line: str) -> None:
        """The handler of an INFO message's ``route`` (:func:`_route`)."""
        if route == "channel":
            self._channel(p, msg, line, msg[:8])
        elif route == "version":
            self._version(p, msg, line)
        elif route == "shared-mem":
            _shared_mem(p, msg, line)
        elif route == "cuda-driver":
            _cuda_driver(p, msg)
        elif route == "bootstrap":
            _bootstrap(p, msg, line)
        elif route == "gdr":
            self._gdr(p, msg, line)
        elif route == "net":
            self._net(p, msg, line)
        elif route == "old-interface":
            self._old_interface(p, msg, line)
        elif route == "network":
            _network(p, msg, line)
        elif route == "env":
            _env(p, msg, line)
        elif route == "trees":
            self.add(p, "trees", msg[:fw.MAX_KEEP])
            p.last_step = "Trees"
        elif route == "connected":
            self._connected(p, msg)
        elif route == "timings":
            self._timings(p, msg, line)
        elif route == "comm":
            self._comm(p, msg, line)
        else:
            _other_info(p, msg)

    def _channel(self, p: NcclProcess, msg: str, line: str, head: str) -> None:
        """A channel's transport, a ring layout, or NVLS availability."""
        ch = g.parse_channel(msg, line)
        if ch is not None:
            self.add(p, "channels", ch)
            if ch.own_rank is not None:
                _put(p.ranks, ch.own_rank)
            if ch.family == COLLNET:
                p.collnet = True
            p.last_step = "Channel connect"
        elif g.is_layout(msg):
            self.add(p, "rings", msg[:fw.MAX_KEEP])
            p.last_step = "Channel layout"
        elif head.startswith("NVLS "):  # "NVLS multicast support is [not] available"
            p.nvls = _NEGATED.search(msg) is None

    def _version(self, p: NcclProcess, msg: str, line: str) -> None:
        v = g.parse_version(msg)
        if v:
            p.nccl_version, p.cuda_build = v
            _put(self.log.versions, v[0])
            _note(p, "version", line)
            p.last_step = "NCCL version"

    def _gdr(self, p: NcclProcess, msg: str, line: str) -> None:
        gdr = g.parse_gdr(msg, line)
        if gdr is not None:
            self.add(p, "gdr", gdr)
            if gdr.mechanism and "DMA" in gdr.mechanism.upper():
                p.dmabuf = True
            p.last_step = "GPU Direct RDMA"

    def _connected(self, p: NcclProcess, msg: str) -> None:
        """``Connected all rings``, ``Connected NVLS``, ``Connected CollNet``..."""
        self.add(p, "connected", msg[:fw.MAX_KEEP])
        low = msg.lower()
        if "nvls" in low:
            p.nvls = True
        if "collnet" in low:
            p.collnet = True
        p.last_step = msg.split(",")[0][:60]

    def _old_interface(self, p: NcclProcess, msg: str, line: str) -> None:
        """NCCL 2.0-2.3's ``NET : Using interface eth0:10.0.0.1<0>``: one line per socket
        interface NCCL found; the first one is also the bootstrap's."""
        m = _OLD_IFACE.match(msg)
        if not m:
            return
        iface = m.group(1)
        if p.bootstrap_iface is None:
            p.bootstrap_iface = iface
            _note(p, "bootstrap", line)
        self.add_new(p, "socket_ifaces", iface)
        p.last_step = "NET : Using interface"

    def _net(self, p: NcclProcess, msg: str, line: str) -> None:
        m = _NET.match(msg)
        if not m:
            return
        name, rest = m.group("name"), m.group("rest")
        ib_like = name.upper().startswith("IB")
        if name == "Plugin":
            pm = _PLUGIN.search(rest)
            if pm:
                p.net_plugin = (pm.group(1) or pm.group(2)).strip()
            p.last_step = "NET/Plugin"
        elif name == "OFI":
            om = _OFI.search(rest)
            if om and om.group(1):
                p.ofi_provider = om.group(1)
            elif om:
                p.net_plugin = om.group(2)
            p.last_step = "NET/OFI"
        elif (sb := _SIDEBAND.match(rest)) is not None:  # NCCL 2.0-2.3's out-of-band
            p.oob_iface = sb.group(1)
            p.last_step = f"NET/{name} : sideband"
        elif rest.startswith("Using"):
            items, oob = g.parse_using(rest[5:])
            if not items and oob is None:
                return
            for item in items:
                self.add_new(p, "net_devices", item)
                if name == "Socket":
                    self.add_new(p, "socket_ifaces", item.split(":", 1)[0])
                elif ib_like:
                    self.add_new(p, "ib_devices", item)
            if oob:
                p.oob_iface = oob
            p.last_step = f"NET/{name} : Using"
            _note(p, f"net:{name}", line)
        elif rest.startswith("No device found"):
            if ib_like:
                p.ib_no_device = True
            p.last_step = f"NET/{name} : No device found"
            _note(p, f"no-device:{name}", line)

    def _comm(self, p: NcclProcess, msg: str, line: str) -> None:
        parsed = _comm_fields(msg)
        if parsed is None:
            return
        new, rank, nranks, ptr, comm_id, complete = parsed
        if rank is not None:
            _put(p.ranks, rank)
        i = self._find_comm(p, ptr, rank, nranks, comm_id)
        if i is None:
            self._put_comm(p, None, NcclComm(line=line, init_complete=complete, **{
                "comm": None, "rank": None, "nranks": None, **new}))
        else:
            old = p.comms[i]
            keep_line = old.nnodes is not None and "nNodes" not in msg
            line = old.line if keep_line else line
            complete = old.init_complete or complete
            if line != old.line or complete != old.init_complete or any(
                    getattr(old, k) != v for k, v in new.items()):
                old = dataclasses.replace(old, **new, line=line, init_complete=complete)
            self._put_comm(p, i, old)  # the same again (a repeat) is kept as it is
        if complete:
            p.last_step = "Init COMPLETE"
        elif " - Init START" in msg:
            p.last_step = "Init START"
        elif "nNodes" in msg:
            p.last_step = "comm"

    def _timings(self, p: NcclProcess, msg: str, line: str) -> None:
        t = g.parse_timings(msg)
        if t is None:
            return
        rank, nranks, total, steps = t
        _put(p.ranks, rank)
        i = self.by_rank.get((p.host, p.pid, rank))
        c = p.comms[i] if i is not None else None
        if c is not None and c.nranks in (None, nranks) and c.init_total_s is None:
            self._put_comm(p, i, dataclasses.replace(c, nranks=nranks, init_total_s=total,
                                                     init_steps_s=steps))
        else:
            self._put_comm(p, None, NcclComm(None, rank, nranks, line, init_total_s=total,
                                             init_steps_s=steps))
        p.last_step = "Init timings"

    def _find_comm(self, p: NcclProcess, ptr: str | None, rank: int | None,
                   nranks: int | None, comm_id: str | None) -> int | None:
        """The position of the communicator a comm line continues, if any."""
        if ptr is not None:
            i = self.by_ptr.get((p.host, p.pid, ptr))
            if i is not None:
                c = p.comms[i]
                same = comm_id is None or c.comm_id is None or c.comm_id == comm_id
                if (rank is None or c.rank in (None, rank)) and same:
                    return i
        i = self.by_rank.get((p.host, p.pid, rank)) if rank is not None else None
        if i is not None and p.comms[i].comm is None and p.comms[i].nranks in (None, nranks):
            return i
        return None

    def _put_comm(self, p: NcclProcess, i: int | None, c: NcclComm) -> None:
        """Store ``c`` at position ``i`` (None: append, within the cap) and index it."""
        if i is None:
            if len(p.comms) >= CAPS["comms"] or self.stored >= MAX_STORED:
                p.dropped["comms"] = p.dropped.get("comms", 0) + 1
                return
            p.comms.append(c)
            self.stored += 1
            i = len(p.comms) - 1
        else:
            p.comms[i] = c
        self._index_comm(p, i, c)

    def _index_comm(self, p: NcclProcess, i: int, c: NcclComm) -> None:
        if c.comm is not None:
            self.by_ptr[(p.host, p.pid, c.comm)] = i
        if c.rank is not None:
            self.by_rank[(p.host, p.pid, c.rank)] = i

    # bounded storage -----------------------------------------------------------------
    def add(self, p: NcclProcess, name: str, item: object) -> None:
        """Append to one of ``p``'s lists within its cap and the log's budget."""
        items = getattr(p, name)
        if len(items) < CAPS[name] and self.stored < MAX_STORED:
            items.append(item)
            self.stored += 1
        else:
            p.dropped[name] = p.dropped.get(name, 0) + 1

    def add_new(self, p: NcclProcess, name: str, item: str) -> None:
        if item not in getattr(p, name):
            self.add(p, name, item)

    # framework errors ----------------------------------------------------------------
    def _framework(self, text: str) -> None:
        head = fw.FW_HEAD.search(text)
        kind = fw.framework_kind(text)
        if head is None and kind is None:
            return
        if head is not None and head.group("lvl") in "WI" and kind != "timeout":
            return
        self.pending = [text]
        if kind == "timeout" and "ran for" not in text or kind is None:
            self.want = 3
        elif kind == "nccl":
            self.want = 4  # PyTorch's "ncclXError: ...", "Last error:" and NCCL's message
        else:
            self._fw_done()

    def _continue(self, text: str) -> bool:
        """Take ``text`` as the next line of the pending framework error, if it is one."""
        if not text.strip():
            self._fw_done()
            return True
        if "NCCL INFO" in text or "NCCL WARN" in text or fw.FW_HEAD.search(text) or (
                fw.framework_kind(self.pending[0]) == "nccl" and not fw.nccl_detail(
                    text, self.pending[-1])):
            self._fw_done()
            return False
        self.pending.append(text)
        self.want -= 1
        joined = " ".join(self.pending)
        kind = fw.framework_kind(joined)
        if not self.want or kind == "cuda" or kind == "timeout" and "ran for" in joined:
            self._fw_done()
        return True

    def _fw_done(self) -> None:
        lines, self.pending, self.want = self.pending, [], 0
        w = fw.framework_error(lines)
        if w is None:
            return
        key = fw.framework_key(w)
        if key in self.fw_seen:
            return
        if len(self.log.framework_errors) >= MAX_FRAMEWORK:
            self.log.dropped["framework_errors"] = self.log.dropped.get("framework_errors", 0) + 1
            return
        self.fw_seen.add(key)
        self.log.framework_errors.append(w)


def _route(msg: str) -> str:
    """Which handler an INFO message goes to, by how it starts."""
    head = msg[:8]
    if head.startswith(("Channel", "Ring ", "CollNet", "NVLS ")):
        return "channel"
    if head.startswith("NCCL ver"):
        return "version"
    if head.startswith("ncclMaxS"):
        return "shared-mem"
    if head.startswith("cudaDriv"):
        return "cuda-driver"
    if head.startswith("Bootstra"):
        return "bootstrap"
    if "GPU Direct RDMA" in msg:
        return "gdr"
    if head.startswith("NET/"):
        return "net"
    if head.startswith("NET "):
        return "old-interface"
    if head.startswith(("Using ne", "Using in")):
        return "network"
    if " set by environment to" in msg:
        return "env"
    if head.startswith(("Trees", "Tree ")):
        return "trees"
    if head.startswith("Connecte"):
        return "connected"
    if head.startswith("Init tim"):
        return "timings"
    if "comm " in msg and (head.startswith(("ncclComm", "comm ")) or " - Init " in msg):
        return "comm"
    return "other"


@functools.lru_cache(maxsize=4096)
def _comm_fields(msg: str) -> tuple[dict[str, Any], int | None, int | None, str | None,
                                    str | None, bool] | None:
    """A communicator line's fields (those it gives), rank, nranks, pointer, commId and
    whether it says Init COMPLETE; None when it names neither a rank nor a pointer.
    Memoised (a job repeats its communicator lines): the dict is never changed."""
    kv = g.parse_comm(msg)
    rank, nranks, ptr = _int(kv.get("rank")), _int(kv.get("nranks")), kv.get("comm")
    if ptr is not None and not _POINTER.fullmatch(ptr):
        ptr = None  # "0x…": elided by the author, not an identity
    if rank is None and ptr is None:
        return None
    new: dict[str, Any] = {
        "nnodes": _int(kv.get("nnodes")), "local_ranks": _int(kv.get("localranks")),
        "local_rank": _int(kv.get("localrank")), "cuda_dev": _int(kv.get("cudadev")),
        "nvml_dev": _int(kv.get("nvmldev")), "bus_id": kv.get("busid"),
        "comm_id": kv.get("commid"), "nranks": nranks, "rank": rank, "comm": ptr}
    new = {k: v for k, v in new.items() if v is not None}
    return new, rank, nranks, ptr, kv.get("commid"), " - Init COMPLETE" in msg


def _sets_nothing(msg: str) -> bool:
    """An INFO message :func:`_other_info` takes that sets no field (an error trace line
    only counts): neither DMA-BUF support nor channel counts."""
    return not ("DMA-BUF" in msg or "DMABUF" in msg or " channels, " in msg)


# INFO records that only set a field of their process ------------------------------

def _shared_mem(p: NcclProcess, msg: str, line: str) -> None:
    """``ncclMaxSharedMem N exceeds device/fn maxSharedMem M``."""
    m = _SHARED_MEM.match(msg)
    if m and (want := strict_int(m.group(1))) is not None and (
            have := strict_int(m.group(2))) is not None:
        p.shared_mem = (want, have)
        _note(p, "shared-mem", line)


def _cuda_driver(p: NcclProcess, msg: str) -> None:
    num = strict_int(msg[len("cudaDriverVersion"):].strip())
    if num is not None and 0 <= num < 10**9:
        p.cuda_driver = num


def _bootstrap(p: NcclProcess, msg: str, line: str) -> None:
    m = _BOOTSTRAP.search(msg)
    if m:
        p.bootstrap_iface = m.group(1)
        p.last_step = "Bootstrap"
        _note(p, "bootstrap", line)


def _network(p: NcclProcess, msg: str, line: str) -> None:
    """``Using network IB``."""
    m = _USING_NETWORK.match(msg)
    if m:
        p.network = m.group(1).strip()
        p.last_step = "Using network"
        _note(p, "network", line)


def _env(p: NcclProcess, msg: str, line: str) -> None:
    """``NCCL_X set by environment to V`` (bounded number of variables)."""
    m = _ENV.search(msg)
    if m and (m.group("k") in p.env or len(p.env) < _ENV_MAX):
        p.env[m.group("k")] = m.group("v").strip().removesuffix(".").strip()
        _note(p, f"env:{m.group('k')}", line)


def _other_info(p: NcclProcess, msg: str) -> None:
    """DMA-BUF support, channel counts, error trace lines."""
    if "DMA-BUF" in msg or "DMABUF" in msg:
        p.dmabuf = _NEGATED_ANY_CASE.search(msg) is None
    elif " channels, " in msg:
        for n, name, per_peer in _COUNTS.findall(msg):
            if len(p.channel_counts) < 32:
                p.channel_counts[name + (" per peer" if per_peer else "")] = int(n)
    elif _TRACE.match(msg):
        p.error_traces += 1


def _note(p: NcclProcess, key: str, line: str) -> None:
    """Keep the first raw line of a setting (bounded: a few dozen keys per process)."""
    if key not in p.notes and len(p.notes) < _NOTES_MAX:
        p.notes[key] = line[:fw.MAX_KEEP]


def _put(items: set[_T], item: _T) -> None:
    if len(items) < MAX_SET:
        items.add(item)


def _int(raw: str | None) -> int | None:
    return strict_int(raw.strip()) if raw is not None else None
