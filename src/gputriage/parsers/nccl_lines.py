"""The line grammar of ``NCCL_DEBUG=INFO`` output, for :mod:`gputriage.parsers.nccl_log`.

A record is ``[shipper prefixes] host:pid:tid [dev] [file.cc:123] NCCL INFO|WARN|TRACE msg``
(before NCCL 2.4, and in pastes that keep only the message: ``include/socket.h:311 WARN
msg``, a WARN without the word NCCL, taken where the location is NCCL's own source).
Shipper prefixes (CloudWatch ``| ts |``, ISO or syslog times, Ray / kubectl
tags, ``[1,0]<stdout>:`` of Open MPI, ``0:`` of srun) are skipped by finding
the ``NCCL <LEVEL>`` marker first and reading the host prefix right before it,
so any combination works. Two records glued on one line are split apart.
Every pattern has bounded repeats: lines come from arbitrary files.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from functools import lru_cache
from typing import NamedTuple

from gputriage.knowledge.ib_status import ib_wc_status
from gputriage.parsers.nccl_framework import MAX_KEEP, is_framework_line
from gputriage.parsers.nccl_model import (
    COLLNET,
    NET_IB,
    NET_PLUGIN,
    NET_SOCKET,
    NVLS,
    OTHER,
    P2P,
    SHM,
    NcclChannel,
    NcclGdr,
    NcclWarn,
)
from gputriage.text.fields import strict_float

__all__ = ["Record", "bare_version", "classify_warn", "is_nccl_line", "parse_channel",
           "parse_comm", "parse_gdr", "parse_timings", "parse_using", "parse_version",
           "plain_record",
           "split_records", "strip_shippers"]

_MARKER = re.compile(r"NCCL (INFO|WARN|TRACE)\b ?")
_HOST = re.compile(
    r"(?P<host>[^\s:|\[\]()/]{1,255}):(?P<pid>[0-9]{1,10}):(?P<tid>[0-9]{1,10})\s{1,8}"
    # the TRACE level's elapsed time
    r"(?:\[(?P<dev>-?[0-9]{1,5})\]\s{1,8})?(?:[0-9]{1,12}\.[0-9]{1,9}\s{1,8})?"
    r"(?:(?P<loc>[\w./+-]{1,200}:[0-9]{1,7})\s{1,8})?$")
_PLAIN = re.compile(  # the common case, a record with nothing before its host prefix
    r"(?P<host>[^\s:|\[\]()/]{3,255}):(?P<pid>[0-9]{1,10}):[0-9]{1,10} \[(?P<dev>-?[0-9]{1,5})\] "
    r"(?:(?P<loc>[\w./+-]{1,200}:[0-9]{1,7}) )?NCCL (?P<level>INFO|WARN|TRACE)\b ?")
# a time "12:00:00 ", not a host
_NOT_HOST = re.compile(r"[0-9]{1,2}|[0-9]{4}-[0-9]{2}-[0-9]{2}[T ]?[0-9]{2}")
_LOC = re.compile(r"(?:^|\s)(?P<loc>[\w./+-]{1,200}:[0-9]{1,7})\s{1,8}$")
# NCCL before 2.4 printed "host:pid:tid [dev] include/socket.h:311 WARN msg", without the
# word NCCL; pastes often keep only "include/socket.h:344 WARN msg". Taken only where the
# location is one of NCCL's own source files.
_OLD_WARN = re.compile(
    r"^(?:(?P<host>[^\s:|\[\]()/]{1,255}):(?P<pid>[0-9]{1,10}):[0-9]{1,10}\s{1,8}"
    r"(?:\[(?P<dev>-?[0-9]{1,5})\]\s{1,8})?)?"
    r"(?P<loc>(?:(?:include|transport|misc|graph|collectives|device|plugin|register|ras)/"
    r"[\w./+-]{1,150}|(?:init|bootstrap|proxy|enqueue|group|transport|channel|net|debug|"
    r"socket|net_ib|net_socket|ibvwrap|shmutils|nvmlwrap|cudawrap|p2p|shm|nvls|coll_net)"
    r"\.(?:cc|cu|h|cpp)):[0-9]{1,7})\s{1,8}WARN\s{1,4}(?P<msg>\S.{0,4000})$")
# NCCL 2.0-2.3 printed INFO the same way ("host:pid:tid [dev] INFO NET : Using interface
# ..."): taken only with the whole host:pid:tid [dev] prefix
_OLD_INFO = re.compile(
    r"^(?P<host>[^\s:|\[\]()/]{1,255}):(?P<pid>[0-9]{1,10}):[0-9]{1,10}\s{1,8}"
    r"\[(?P<dev>-?[0-9]{1,5})\]\s{1,8}INFO\s{1,4}(?P<msg>\S.{0,4000})$")
# what both hold from the colon before the tid or the line number on, wherever the
# prefixes that shippers add end: tested first, so that the lines of a training log that
# say INFO or WARN are let go without those prefixes stripped (the same shape as
# ``nccl_log.SHAPES_RE``, which reads it in bytes not yet decoded, any of whose
# whitespace bytes may decode to one of these spaces)
_OLD_SHAPE = re.compile(r":[0-9]{1,10}\s{1,8}(?:\[-?[0-9]{1,5}\]\s{1,8}INFO|WARN)\s")
# the NET/IB completion error on its own, as titles and chat messages quote it
_BARE_COMPLETION = re.compile(r"^\W{0,8}(?P<msg>NET/IB\w{0,8}\s{0,4}:\s{0,4}Got completion\b"
                              r".{0,4000})$")
_HEAD_MAX = 700  # how far before a marker a host prefix may start

_SHIPPERS = re.compile("|".join(f"(?:{p})" for p in (
    r"\s{0,40}\|\s{0,8}[^|\s]{1,64}\s{0,8}\|\s?",  # CloudWatch export: "  | <ts> | "
    r"\s{0,8}\[?[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}[0-9.,:+Z-]{0,20}\]?"
    r"\s{1,8}",  # ISO time
    r"[A-Z][a-z]{2}\s{1,3}[0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2}\s{1,4}\S{1,128}\s{1,4}"
    r"[^\s:\[]{1,128}(?:\[[0-9]{1,10}\])?:\s",  # syslog / journal
    r"\s{0,8}\([\w.@-]{1,80}(?: pid=[0-9]{1,10}(?:, ip=[\w.:]{1,64})?)?\)\s{0,8}",  # Ray worker
    r"\[[0-9]{1,7},[0-9]{1,7}\]<std(?:out|err)>:\s?",  # Open MPI --tag-output
    r"\s{0,8}[0-9]{1,7}:\s",  # srun --label
    r"\[pod/[^\]\s]{1,253}\]\s",  # kubectl logs --prefix
)))


class Record(NamedTuple):
    """One NCCL record cut out of a line."""

    host: str | None
    pid: int | None
    dev: int | None
    level: str  # INFO | WARN | TRACE
    loc: str | None  # "transport/net_ib.cc:1295" on WARN lines
    msg: str
    line: str  # the record's own text, prefix included


def strip_shippers(line: str) -> str:
    """The line without the prefixes log shippers and launchers add."""
    for _ in range(8):
        m = _SHIPPERS.match(line)
        if not m or not m.end():
            break
        line = line[m.end():]
    return line


def split_records(line: str, known_hosts: Collection[str] = ()) -> list[Record]:
    """The NCCL records of one line (usually one; torn lines may glue several).

    When a record is glued to the end of the previous one (``...via P2P/IPC/readnode1:12:34``),
    a host already seen (in ``known_hosts`` or earlier on the line) that ends the glued
    word is taken as the host.
    """
    plain = _plain_record(line)
    if plain is not None:
        return [plain]
    first = _MARKER.search(line) if "NCCL " in line else None
    if first is None:
        old = _old_record(line)
        return [old] if old is not None else []
    # one record is the usual case
    marks = [first] if line.find("NCCL ", first.end()) < 0 else list(_MARKER.finditer(line))
    starts = _record_starts(line, marks, known_hosts)
    return [_cut_record(line, start, m, hm, host,
                        starts[j + 1][0] if j + 1 < len(starts) else len(line))
            for j, (start, m, hm, host) in enumerate(starts)]


# The pure parsers below are memoised: a job log repeats its lines (every rank, every
# communicator, every restart) and their results are immutable.
_MEMO = 8192


@lru_cache(maxsize=_MEMO)
def _plain_record(line: str) -> Record | None:
    """The common case: one record with nothing before its host prefix."""
    pm = _PLAIN.match(line)
    if pm is None or line.find("NCCL ", pm.end()) >= 0 or _NOT_HOST.fullmatch(pm.group("host")):
        return None
    return Record(pm.group("host"), int(pm.group("pid")), int(pm.group("dev")),
                  pm.group("level"), pm.group("loc"), line[pm.end():].strip(),
                  line.strip()[:MAX_KEEP])


def plain_record(line: str) -> Record | None:
    """The line's one record when nothing comes before its host prefix (the record
    :func:`split_records` gives such a line, the same object again for the same line
    while it is remembered); None for any other line."""
    return _plain_record(line)


def _old_record(line: str) -> Record | None:
    """An old NCCL's WARN or INFO record, or a bare NET/IB completion error."""
    if "WARN" in line:
        return _old_warn(line)
    info = "INFO" in line and _OLD_SHAPE.search(line) is not None
    if not info and "Got completion" not in line:
        return None  # (a training log's "[rank3] INFO ..." line: its prefixes left on)
    text = strip_shippers(line).strip()
    if info and (m := _OLD_INFO.match(text)) is not None and \
            not _NOT_HOST.fullmatch(m.group("host")):
        return Record(m.group("host"), int(m.group("pid")), int(m.group("dev")), "INFO", None,
                      m.group("msg").strip(), line.strip()[:MAX_KEEP])
    if "Got completion" in line and (b := _BARE_COMPLETION.match(text)) is not None:
        return Record(None, None, None, "WARN", None, b.group("msg").strip(),
                      line.strip()[:MAX_KEEP])
    return None


def _old_warn(line: str) -> Record | None:
    """A WARN record in NCCL's old form (no "NCCL" before WARN), prefixes stripped."""
    if _OLD_SHAPE.search(line) is None:
        return None
    m = _OLD_WARN.match(strip_shippers(line).strip())
    if m is None or (m.group("host") and _NOT_HOST.fullmatch(m.group("host"))):
        return None
    pid, dev = m.group("pid"), m.group("dev")
    return Record(m.group("host"), int(pid) if pid else None, int(dev) if dev else None, "WARN",
                  m.group("loc"), m.group("msg").strip(), line.strip()[:MAX_KEEP])


# (record start, marker, host prefix match or None, host)
_Start = tuple[int, re.Match[str], re.Match[str] | None, str | None]


def _record_starts(line: str, marks: list[re.Match[str]],
                   known_hosts: Collection[str]) -> list[_Start]:
    """Where each record of the line starts. A marker without a host prefix after the
    first one stays part of the previous record's message."""
    starts: list[_Start] = []
    floor = 0
    seen: set[str] = set()
    for i, m in enumerate(marks):
        lo = max(floor, m.start() - _HEAD_MAX)
        hm = _HOST.search(line[lo:m.start()])
        if hm and _NOT_HOST.fullmatch(hm.group("host")):
            hm = None
        if hm is None and i:
            continue
        start = lo + hm.start() if hm else 0
        host = hm.group("host") if hm else None
        if host is not None and i and host not in seen and host not in known_hosts:
            start, host = _unglue(start, host, (*seen, *known_hosts))
        if host is not None:
            seen.add(host)
        starts.append((start, m, hm, host))
        floor = m.end()
    return starts


def _unglue(start: int, host: str, hosts: tuple[str, ...]) -> tuple[int, str]:
    """(start, host) of a host prefix glued to the previous record's last word: the
    longest known host that ends it."""
    glued = [h for h in hosts if len(h) < len(host) and host.endswith(h)]
    if not glued:
        return start, host
    known = max(glued, key=len)
    return start + len(host) - len(known), known


def _cut_record(line: str, start: int, m: re.Match[str], hm: re.Match[str] | None,
                host: str | None, end: int) -> Record:
    """The record from ``start`` to ``end``; without a host prefix, the source location
    is looked for just before the marker."""
    msg = line[m.end():end].strip()
    if hm:
        dev = hm.group("dev")
        return Record(host, int(hm.group("pid")), int(dev) if dev else None,
                      m.group(1), hm.group("loc"), msg, line[start:end].strip()[:MAX_KEEP])
    lm = _LOC.search(line[max(0, m.start() - 220):m.start()])
    return Record(None, None, None, m.group(1), lm.group("loc") if lm else None, msg,
                  line[:end].strip()[:MAX_KEEP])


_VERSION = re.compile(r"NCCL version ([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,4})[\w.-]{0,20}"
                      r"(?:\+cuda([0-9]{1,3}\.[0-9]{1,3}))?")


def parse_version(msg: str) -> tuple[str, str | None] | None:
    """("2.21.5", "12.4") from ``NCCL version 2.21.5+cuda12.4``."""
    m = _VERSION.match(msg)
    return (m.group(1), m.group(2)) if m else None


def bare_version(line: str) -> tuple[str, str | None] | None:
    """The version of a prefix-less ``NCCL version 2.10.3+cuda11.3`` line (rank 0, old NCCL)."""
    rest = strip_shippers(line).strip()
    if not rest.startswith("NCCL version "):
        return None
    found = parse_version(rest)
    return found if found and len(rest) < 80 else None


# --- channels ---------------------------------------------------------------------

_CHANNEL = re.compile(
    r"(?P<kind>Channel|Ring|CollNet|NVLS)\s{1,4}(?P<ch>[0-9]{1,5})(?:/(?P<conn>[0-9]{1,5}))?\s{0,8}"
    r":"
    r"\s{0,8}(?P<r>[0-9]{1,7})(?:\[(?P<rd>[0-9a-fA-F]{1,16})\])?"
    r"(?:\s{0,4}->\s{0,4}(?P<p>[0-9]{1,7})(?:\[(?P<pd>[0-9a-fA-F]{1,16})\])?)?"
    r"(?:\s{0,4}\[(?P<dir>send|receive)\])?\s{1,8}via\s{1,8}(?P<t>\S.{0,300}?)\s*$")
_NET = re.compile(r"(?:NET|COLLNET)/(?P<name>[^/(]{1,64}?)/(?P<dev>[0-9]{1,4})"
                  r"(?:\((?P<proxy>[0-9]{1,7})\))?(?P<rest>/.{0,200})?$")
_LAYOUT = re.compile(r"(?:Channel|Ring)\s{1,4}[0-9]{1,5}(?:/[0-9]{1,5})?\s{0,8}:\s")


def family_of(transport: str, kind: str = "Channel") -> str:
    """The transport family of the text after ``via``."""
    t = transport.upper()
    if kind == "CollNet" or t.startswith("COLLNET"):
        return COLLNET
    if kind == "NVLS" or t.startswith("NVLS"):
        return NVLS
    if t.startswith("P2P"):
        return P2P
    if t.startswith("SHM"):
        return SHM
    if t.startswith("NET/IB/") or t == "NET/IB":
        return NET_IB
    if t.startswith("NET/SOCKET"):
        return NET_SOCKET
    if t.startswith("NET/"):
        return NET_PLUGIN
    return OTHER


@lru_cache(maxsize=_MEMO)
def parse_channel(msg: str, line: str) -> NcclChannel | None:
    """A ``Channel NN/x : a[d] -> b[d] [send|receive] via T`` (or ``Ring``/``CollNet``) line."""
    m = _CHANNEL.match(msg)
    if not m:
        return None
    transport = re.sub(r"\s{1,4}comm\s{1,4}0x[0-9a-fA-F]{1,16}.{0,100}$", "", m.group("t"))
    family = family_of(transport, m.group("kind"))
    net_dev = proxy = gdr = None
    nm = _NET.match(transport)
    if nm:
        net_dev = int(nm.group("dev"))
        proxy = int(nm.group("proxy")) if nm.group("proxy") else None
        gdr = "GDRDMA" in (nm.group("rest") or "").upper()
    elif family in (NET_IB, NET_SOCKET, NET_PLUGIN, COLLNET):
        gdr = "GDRDMA" in transport.upper()
    return NcclChannel(
        channel=int(m.group("ch")), rank=int(m.group("r")),
        peer=int(m.group("p")) if m.group("p") else None, transport=transport, family=family,
        line=line, conn=int(m.group("conn")) if m.group("conn") else None,
        rank_dev=m.group("rd"), peer_dev=m.group("pd"), direction=m.group("dir"),
        net_dev=net_dev, gdr=gdr, proxy_rank=proxy)


def is_layout(msg: str) -> bool:
    """A ring layout line: ``Channel 00/02 :    0   1`` or ``Ring 00 : 17 -> 0 -> 7``."""
    return _LAYOUT.match(msg) is not None and " via " not in msg


# --- GPU Direct RDMA -----------------------------------------------------------------

_GDR = re.compile(
    r"(?:NET/(?P<net>[^\s:/]{1,64})\s{0,4}:\s{0,4})?GPU Direct RDMA"
    r"(?:\s{1,4}\((?P<mech>[^)]{1,40})\))?\s{1,4}(?P<state>Enabled|Disabled)\s{1,4}for"
    r"(?:\s{1,4}GPU\s{1,4}(?P<gpu>[0-9a-fA-F]{1,16}(?:\[[0-9]{1,5}\])?)\s{0,4}/)?"
    r"\s{1,4}HCA\s{1,4}(?P<hca>[\w.:-]{1,64})(?:\s{1,4}'(?P<name>[^']{0,64})'?)?"
    r"(?:\s{1,4}\(distance\s{1,4}(?P<d>-?[0-9]{1,4})\s{0,4}[<>]=?\s{0,4}(?P<max>-?[0-9]{1,4})\))?"
    r"(?:,?\s{0,4}read\s{1,4}(?P<read>[01]))?", re.IGNORECASE)


@lru_cache(maxsize=_MEMO)
def parse_gdr(msg: str, line: str) -> NcclGdr | None:
    """Both forms of the ``GPU Direct RDMA Enabled|Disabled for ...`` line."""
    m = _GDR.search(msg)
    if not m:
        return None
    dist, top, read = m.group("d"), m.group("max"), m.group("read")
    return NcclGdr(
        enabled=m.group("state").lower() == "enabled", line=line, hca=m.group("hca"),
        hca_name=m.group("name"), gpu=m.group("gpu"), distance=int(dist) if dist else None,
        max_distance=int(top) if top else None, net=m.group("net"),
        read=(read == "1") if read else None, mechanism=m.group("mech"))


# --- interfaces, comms, timings --------------------------------------------------------

_ITEM = re.compile(r"\[(?P<i>[0-9]{1,4})\](?P<v>[^\s\[;]{1,200})")
_OOB = re.compile(r"OOB\s{1,4}(?P<iface>[^\s:]{1,64}):")


def parse_using(rest: str) -> tuple[list[str], str | None]:
    """Devices of ``[0]mlx5_0:1/IB [1]eth0:10.0.0.1<0> [RO]; OOB ib0:...`` and the OOB iface."""
    items, oob = _using(rest)
    return list(items), oob


@lru_cache(maxsize=_MEMO)
def _using(rest: str) -> tuple[tuple[str, ...], str | None]:
    body, _, oob = rest.partition(";")
    items = tuple(re.sub(r"<[0-9]{1,4}>$", "", m.group("v")) for m in _ITEM.finditer(body))
    om = _OOB.search(oob)
    return items, om.group("iface") if om else None


_KV = re.compile(r"\b(rank|nranks|nRanks|nNodes|localRanks|localRank|cudaDev|nvmlDev|busId|"
                 r"commId|comm)\s{1,8}(\S{1,40})")


def parse_comm(msg: str) -> dict[str, str]:
    """The ``key value`` pairs of a communicator line, keys lower-cased."""
    return dict(_comm_pairs(msg))


@lru_cache(maxsize=_MEMO)
def _comm_pairs(msg: str) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for k, v in _KV.findall(msg):
        out.setdefault(k.lower(), v)
    return tuple(out.items())


_TIMINGS = re.compile(r"Init timings\b[^:]{0,60}:\s{0,4}rank\s{1,4}(?P<rank>[0-9]{1,7})\s{1,4}"
                      r"nranks\s{1,4}(?P<n>[0-9]{1,7})\s{1,4}total\s{1,4}(?P<total>[0-9.]{1,12})"
                      r"(?:\s{1,4}\((?P<steps>[^)]{0,400})\))?")
_STEP = re.compile(r"([A-Za-z][\w ]{0,30}?)\s{1,4}([0-9.]{1,12})(?:,|$)")


def parse_timings(msg: str) -> tuple[int, int, float, dict[str, float]] | None:
    """(rank, nranks, total s, {step: s}) of an ``Init timings`` line."""
    m = _TIMINGS.match(msg)
    if not m:
        return None
    steps = {k.strip(): v for k, raw in _STEP.findall(m.group("steps") or "")
             if (v := strict_float(raw)) is not None}
    total = strict_float(m.group("total"))
    if total is None:
        return None
    return int(m.group("rank")), int(m.group("n")), total, steps


# --- WARN ----------------------------------------------------------------------------

_COMPLETION = re.compile(
    r"Got completion from peer\s{1,4}(?P<peer>\S{1,200})\s{1,4}with\s{1,4}"
    r"(?:status=(?:[^()=]{0,80}\()?(?P<st>[0-9]{1,4})\)?|error\s{1,4}(?P<err>[0-9]{1,4}))"
    r"[,\s]{0,4}(?:opcode[=\s]{1,2}(?:[^()=\s]{0,40}\()?(?P<op>[0-9]{1,10})\)?)?"
    r".{0,80}?vendor[ _]err[=\s]{1,2}(?P<vendor>[0-9]{1,10})"
    r"(?:\s{0,4}\((?P<dir>[A-Za-z ]{1,20})\)|\s{1,4}req_type=(?P<req>[A-Za-z]{1,20}))?")
_HCA = re.compile(r"\bhca\s{1,4}([\w.-]{1,64})|\bcould not open\s{1,4}([\w.-]{1,64})|"
                  r"\b((?:mlx[45]|erdma|bnxt_re|ionic|hns|qedr|rxe|siw|efa|irdma)_?[0-9]{1,4})\b")
_RANK = re.compile(r"^\[?Rank\s{1,4}([0-9]{1,7})\b", re.IGNORECASE)
_SOCKET = re.compile(r"socketProgress|Connection closed|Connection refused|Connection reset|"
                     r"[Ss]ocket|connect to .{0,200} failed|Net : ", re.IGNORECASE)
_CUDA = re.compile(r"Cuda failure|CUDA error|cuda\w{0,20} failed|cudaError|CUDA driver",
                   re.IGNORECASE)
_NET_WORDS = re.compile(r"NET/|ibv_|\bHCA\b|could not open \w|verbs|\bmlx5|\bEFA\b|\bOFI\b|"
                        r"RDMA|\bGID\b|\bIB\b|NCCL_IB_HCA|NCCL_NET\b")
_SYSTEM = re.compile(r"system error|/dev/shm|shared memory|No space left|errno|"
                     r"Cannot allocate|\bmmap\b|fallocate|ftruncate|res=2\b|retcode 2\b",
                     re.IGNORECASE)
_INIT = re.compile(r"[Bb]ootstrap|\binit|Duplicate GPU|invalid usage|version mismatch|"
                   r"NCCL_\w{2,40}", re.IGNORECASE)
_IBVERBS = re.compile(r"(?:Failed to|Unable to|Could not) open libibverbs", re.IGNORECASE)


@lru_cache(maxsize=_MEMO)
def classify_warn(msg: str, loc: str | None, line: str) -> NcclWarn:
    """One WARN message as an :class:`NcclWarn`, its kind and decoded fields set."""
    msg = msg[:MAX_KEEP]
    rm = _RANK.match(msg)
    rank = int(rm.group(1)) if rm else None
    dm = _HCA.search(msg)
    device = next((g for g in dm.groups() if g), None) if dm else None
    m = _COMPLETION.search(msg)
    if m:
        code = int(m.group("st") or m.group("err"))
        info = ib_wc_status(code)
        return NcclWarn(
            msg, line, "ib-completion", loc, ib_status=code,
            ib_status_name=info[0] if info else None, ib_meaning=info[1] if info else None,
            vendor_err=int(m.group("vendor")),
            opcode=int(m.group("op")) if m.group("op") else None, peer=m.group("peer"),
            device=device, direction=(m.group("dir") or m.group("req") or "").strip() or None,
            rank=rank)
    base = (loc or "").rsplit("/", 1)[-1]
    if _IBVERBS.search(msg):
        kind = "net"
    elif base.startswith(("socket.", "net_socket.")) or _SOCKET.search(msg):
        kind = "socket"
    elif _CUDA.search(msg):
        kind = "cuda"
    elif _NET_WORDS.search(msg) or base.startswith(("net_ib", "ibvwrap", "ib_plugin", "ofi")):
        kind = "net"
    elif _SYSTEM.search(msg):
        kind = "system"
    elif _INIT.search(msg):
        kind = "init"
    else:
        kind = "other"
    return NcclWarn(msg, line, kind, loc, device=device, rank=rank)

# --- detection -----------------------------------------------------------------------

_IS_RECORD = re.compile(r"(?:^|[\s\]>|:])NCCL (?:INFO|WARN|TRACE)(?:\s|$)")


def is_nccl_line(line: str) -> bool:
    """Whether a line is an NCCL debug record or a framework's NCCL error line."""
    if len(line) > 65536:
        return False
    if "NCCL" not in line and "Error: nccl" not in line:
        return _old_record(line) is not None
    if _IS_RECORD.search(line):
        return True
    if bare_version(line):
        return True
    return is_framework_line(line)
