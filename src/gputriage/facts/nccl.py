"""NCCL facts: the job's own view of the fabric, from its logs.

* ``nccl_log``: :class:`~gputriage.parsers.nccl_model.NcclLog` from the
  ``nccl_log`` source (``gputriage nccl`` streams large files itself and
  pre-fills this fact).
* ``nccl_tests``: list of :class:`~gputriage.parsers.nccl_model.NcclTestRun`
  from the ``nccl_tests`` source (or pre-filled).
* ``nccl_job``: :class:`NcclJob`, a summary of the log: hosts, how many nodes
  the job spans and how that is known, which processes use which network, and
  the network channels.
* ``nccl_log_text``: :class:`NcclLogText`, the log's raw text for quoting its lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gputriage.facts.table import FactReader, FactTable, Missing
from gputriage.text.fields import strict_hex

if TYPE_CHECKING:  # the model is imported where a log is read: most hosts have none
    from gputriage.parsers.nccl_model import (
        NcclChannel,
        NcclComm,
        NcclLog,
        NcclProcess,
        NcclTestRun,
    )

FACTS = FactTable()

__all__ = ["NcclJob", "NcclLogText", "env_value", "nccl_bus_id", "nccl_job", "nccl_log",
           "nccl_log_text", "nccl_tests", "on_sockets", "process_network"]


@FACTS.fact("nccl_log")
def nccl_log(facts: FactReader) -> NcclLog:
    cap = facts.snapshot.get("nccl_log")
    streamed = getattr(cap, "log", None)  # a large text streamed whole (ingest.bigtext)
    log = streamed if streamed is not None else facts.parse("nccl_log", _parse_nccl_log)
    if not log.processes and not log.framework_errors:
        raise Missing("nccl_log: no NCCL record in it")
    return log


def _parse_nccl_log(text: str) -> NcclLog:
    """The NCCL log parser, imported only when there is a log to parse (the kernel-log
    path asks for this fact of every host and has none)."""
    from gputriage.parsers.nccl_log import parse_nccl_log

    return parse_nccl_log(text)


@FACTS.fact("nccl_tests")
def nccl_tests(facts: FactReader) -> list[NcclTestRun]:
    from gputriage.parsers.nccl_tests import parse_nccl_tests

    runs = facts.parse("nccl_tests", parse_nccl_tests)
    if not runs:
        raise Missing("nccl_tests: no nccl-tests run in it")
    return runs


def env_value(proc: NcclProcess, name: str) -> str | None:
    """An ``NCCL_X set by environment to V`` value as echoed (trailing dot dropped)."""
    value = proc.env.get(name)
    return value.strip().rstrip(".").strip() if value is not None else None


def process_network(proc: NcclProcess) -> str | None:
    """The network a process uses: what ``Using network X`` said, else what its
    channels or its ``NET/...: Using`` lines show (NCCL tries the plugin, then
    IB, then sockets, and only enumerates socket interfaces when the ones before
    found nothing)."""
    from gputriage.parsers.nccl_model import NET_IB, NET_PLUGIN, NET_SOCKET

    if proc.network:
        return proc.network
    families = {c.family for c in proc.channels}
    if NET_IB in families:
        return "IB"
    if NET_PLUGIN in families:
        return next((c.transport.split("/")[1] for c in proc.channels
                     if c.family == NET_PLUGIN and c.transport.count("/") >= 1), "plugin")
    if NET_SOCKET in families:
        return "Socket"
    if proc.ib_devices and not proc.ib_no_device:
        return "IB"
    if proc.socket_ifaces:
        return "Socket"
    return None


def on_sockets(proc: NcclProcess) -> bool:
    """Whether a process ended up on NCCL's TCP socket transport (its network, or any
    NET/Socket channel of it)."""
    from gputriage.parsers.nccl_model import NET_SOCKET

    return process_network(proc) == "Socket" or any(c.family == NET_SOCKET
                                                    for c in proc.channels)


def nccl_bus_id(value: str | None) -> str | None:
    """NCCL's compact bus id (``42000``, ``c8000``, ``100000``: the PCI address's hex
    digits run together) as ``0000:42:00.0``; None for anything else (``2[2]``)."""
    text = (value or "").strip().lower()
    num = strict_hex(text) if 4 <= len(text) <= 12 and not text.startswith("0x") else None
    if num is None:
        return None
    fn, dev, bus, dom = num & 0xF, (num >> 4) & 0xFF, (num >> 12) & 0xFF, num >> 20
    if dev > 0x1F or fn > 7:
        return None
    return f"{dom:04x}:{bus:02x}:{dev:02x}.{fn}"


@dataclass(frozen=True)
class NcclLogText:
    """The NCCL log's own text, to quote its lines as evidence. When the log was
    streamed in rather than held in the snapshot the text is empty and the first raw
    line of each setting the parser kept (``NcclProcess.notes``) stands in."""

    text: str
    log: NcclLog | None = None

    def find(self, needle: str, limit: int = 3) -> list[str]:
        """Up to ``limit`` distinct lines that contain ``needle``."""
        if not self.text:
            return self._noted(needle, limit)
        out: list[str] = []
        text = self.text
        pos = text.find(needle)
        while pos >= 0 and len(out) < limit:
            start = text.rfind("\n", 0, pos) + 1
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            line = text[start:end].rstrip("\r")
            if line not in out and len(line) <= 2000:
                out.append(line)
            pos = text.find(needle, end)
        return out

    def quote(self, needle: str, fallback: list[str], limit: int = 3) -> list[str]:
        """Lines containing ``needle``, else ``fallback`` (lines rebuilt from the parsed
        records when the text itself is not at hand)."""
        return self.find(needle, limit) or fallback[:limit]

    def _noted(self, needle: str, limit: int) -> list[str]:
        out: list[str] = []
        for proc in self.log.processes if self.log is not None else ():
            for line in proc.notes.values():
                if needle in line and line not in out and len(out) < limit:
                    out.append(line)
        return out


@FACTS.fact("nccl_log_text", sources=("nccl_log",))
def nccl_log_text(facts: FactReader) -> NcclLogText:
    """The NCCL log's raw text (empty when it was streamed in), with the parsed log for
    the lines its records kept."""
    log = facts.maybe("nccl_log")
    text = facts.text("nccl_log") or ""
    if log is None and not text:
        raise Missing("nccl_log: absent")
    return NcclLogText(text, log)


@dataclass
class NcclJob:
    """What an NCCL log says about the job as a whole."""

    log: NcclLog
    hosts: list[str]  # host names seen in prefixes
    nodes: int | None  # how many nodes NCCL (or the hosts) say the job spans
    nodes_basis: str  # "comm" (nNodes printed), "hosts" (at least), "" (unknown)
    nodes_line: str | None  # the comm line that gave the largest nNodes
    multi_node: bool | None  # None: the log cannot tell
    networks: dict[str, list[NcclProcess]] = field(default_factory=dict)
    net_channels: list[tuple[NcclProcess, NcclChannel]] = field(default_factory=list)
    nranks: int | None = None  # the largest nRanks printed
    ranks_seen: set[int] = field(default_factory=set)

    @property
    def all_ranks_seen(self) -> bool:
        """Whether the log holds every rank of its largest communicator."""
        n = self.nranks or 0
        return 0 < n <= len(self.ranks_seen) and self.ranks_seen.issuperset(range(n))

    def comms(self) -> list[tuple[NcclProcess, NcclComm]]:
        return [(p, c) for p in self.log.processes for c in p.comms]

    def describe_nodes(self) -> str:
        """``3 nodes (comm nNodes)`` / ``at least 2 hosts`` / ``node count unknown``."""
        if self.nodes_basis == "comm":
            return f"{self.nodes} node{'s' if self.nodes != 1 else ''} (nNodes)"
        if self.nodes_basis == "hosts":
            return f"at least {self.nodes} hosts"
        return "node count unknown"


@FACTS.fact("nccl_job")
def nccl_job(facts: FactReader) -> NcclJob:
    """A summary of the NCCL log: hosts, node count, networks and net channels."""
    from gputriage.parsers.nccl_model import NET_IB, NET_PLUGIN, NET_SOCKET

    log: NcclLog = facts.get("nccl_log")
    if not log.processes:
        raise Missing("nccl_log: no NCCL process records (framework errors only)")
    hosts = log.hosts
    networks: dict[str, list[NcclProcess]] = {}
    net_channels: list[tuple[NcclProcess, NcclChannel]] = []
    ranks: set[int] = set()
    for p in log.processes:
        net = process_network(p)
        if net:
            networks.setdefault(net, []).append(p)
        net_channels += [(p, c) for c in p.channels
                         if c.family in (NET_IB, NET_PLUGIN, NET_SOCKET)]
        ranks |= p.ranks
        ranks |= {c.rank for c in p.comms if c.rank is not None}
    comms = [c for p in log.processes for c in p.comms]
    with_nodes = [c for c in comms if c.nnodes is not None]
    nranks = max((c.nranks for c in comms if c.nranks), default=None)
    nodes: int | None = None
    basis, line = "", None
    if with_nodes:
        top = max(with_nodes, key=lambda c: c.nnodes or 0)
        nodes, basis, line = top.nnodes, "comm", top.line
    elif len(hosts) > 1:
        nodes, basis = len(hosts), "hosts"
    multi: bool | None = None
    if (nodes or 0) > 1 or len(hosts) > 1 or net_channels:
        multi = True
    elif basis == "comm":
        multi = False
    return NcclJob(log, hosts, nodes, basis, line, multi, networks, net_channels, nranks,
                   ranks)
