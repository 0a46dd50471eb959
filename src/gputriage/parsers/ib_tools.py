"""The RDMA tools' outputs that :mod:`gputriage.parsers.infiniband` reads besides the
port listings: ``perfquery`` (a port's counters by LID), ``rdma link`` (one line per
port, possibly several readings of one port over time), and what the tools print when
they find no device (``ibv_devinfo``'s "No IB devices found" and libibverbs'
warnings, ``ibstatus``' "sys files not found", libibumad's "is ib_umad module loaded?").

These are line grammars and small readers; the port records themselves are
:class:`gputriage.parsers.infiniband.IbPort`, filled by that module's reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gputriage.knowledge.ib_counters import by_perfquery_name
from gputriage.text.fields import strict_hex, strict_int

__all__ = ["PERFQUERY_HEAD", "PERFQUERY_ROW", "RDMA_LINK", "IbToolProblem", "is_problem_line",
           "perfquery_counter", "problem_of", "rdma_link_fields"]

# "# Port extended counters: Lid 133 port 1 (CapMask: 0x5A00 CapMask2: 0x0000000)",
# "# Port counters: Lid 2 port 1 (CapMask: 0x1400)"
PERFQUERY_HEAD = re.compile(r"^\s*#\s*Port (?:extended )?counters:\s*Lid (?P<lid>[0-9]{1,5}) "
                            r"port (?P<port>[0-9]{1,3})\b", re.IGNORECASE)
# "SymbolErrorCounter:..............0", "PortXmitData:....................37108676853855"
PERFQUERY_ROW = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z0-9]{2,48}):\.{2,}\s*(?P<value>\S{1,24})"
                           r"\s*$")
# "link mlx5_7/1 subnet_prefix fe80:... lid 3403 sm_lid 1 lmc 0 state DOWN physical_state
# POLLING", older iproute2: "1/1: mlx5_0/1: state ACTIVE physical_state LINK_UP netdev ib0"
RDMA_LINK = re.compile(r"^\s*(?:link\s+|[0-9]{1,4}/[0-9]{1,3}:\s+)(?P<dev>[A-Za-z][\w.-]{0,40})/"
                       r"(?P<port>[0-9]{1,3}):?\s+(?P<rest>(?:\S+\s+\S+\s*){0,16}?\bstate\s+[A-Z_]+"
                       r"\b.{0,400})$")
_RDMA_KEYS = ("subnet_prefix", "lid", "sm_lid", "lmc", "state", "physical_state", "netdev",
              "netdev_index")


def rdma_link_fields(rest: str) -> dict[str, str]:
    """The ``key value`` pairs after an ``rdma link`` port name."""
    words = rest.split()
    return {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i] in _RDMA_KEYS}


def perfquery_counter(key: str, value: str) -> tuple[str, int] | None:
    """A perfquery row as (sysfs counter name, value); None for other rows (PortSelect,
    CounterSelect) and values that are not numbers."""
    counter = by_perfquery_name(key)
    if counter is None:
        return None
    text = value.strip()
    number = strict_hex(text) if text[:2].lower() == "0x" else strict_int(text, signed=False)
    return None if number is None else (counter.name, number)


@dataclass(frozen=True)
class IbToolProblem:
    """A tool's complaint that it found no RDMA device, and why it says so."""

    kind: str  # no-device | provider-missing | umad-missing | uverbs-missing
    tool: str  # the program that printed it, as far as the message tells
    line: str


# kind, tool, pattern (searched), first match wins
_PROBLEMS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("provider-missing", "libibverbs", re.compile(
        r"libibverbs: Warning: (?:couldn't open config directory|couldn't load driver|"
        r"no userspace device-specific driver found)", re.IGNORECASE)),
    ("umad-missing", "libibumad", re.compile(
        r"umad_init: can't read ABI version|can't init UMAD library|is ib_umad module loaded",
        re.IGNORECASE)),
    ("uverbs-missing", "libibverbs", re.compile(
        r"Failed to get IB devices list: (?:Function not implemented|Unknown error -38)",
        re.IGNORECASE)),
    ("no-device", "ibstatus", re.compile(r"sys files not found", re.IGNORECASE)),
    ("no-device", "ibv_devinfo", re.compile(r"\bNo IB devices? found\b", re.IGNORECASE)),
    ("no-device", "ibstat", re.compile(r"can't find any IB device|Failed to get IB devices "
                                       r"list|ibpanic: .{0,80}stat of IB device",
                                       re.IGNORECASE)),
)
# the fabric manager's NVLink subnet manager uses libibumad too: its lines are its own
_NOT_THE_TOOLS = re.compile(r"\bnvlsm\b|fabric ?manager|nv-fabricmanager", re.IGNORECASE)


def problem_of(line: str) -> IbToolProblem | None:
    """The complaint a line of the RDMA tools makes, if it is one."""
    if len(line) > 1000 or _NOT_THE_TOOLS.search(line):
        return None
    for kind, tool, pattern in _PROBLEMS:
        if pattern.search(line):
            return IbToolProblem(kind, tool, line.strip())
    return None


def is_problem_line(line: str) -> bool:
    return problem_of(line) is not None
