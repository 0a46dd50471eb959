"""InfiniBand / RoCE HCA ports from sysfs and from the RDMA tools' text outputs.

Two entry points, one result type (a list of :class:`IbPort`):

* :func:`parse_ib_tree` reads the ``infiniband`` sysfs tree source
  (``mlx5_0/ports/1/state`` = ``4: ACTIVE``, ``rate`` = ``400 Gb/sec (4X NDR)``,
  ``counters/symbol_error``, ``mlx5_0/fw_ver``, ``hca_type``, ...).
* :func:`parse_ibstat` reads pasted text from ``ibstat``, ``ibstatus``,
  ``ibv_devinfo [-v]``, ``ibdev2netdev [-v]``, ``show_gids``, ``rdma link`` and
  ``perfquery`` (see :mod:`gputriage.parsers.ib_tools`), in any mix; what several
  outputs say about one port is merged into one record, and a port read more than once
  keeps its earlier states (``history``).
* :func:`parse_ib_problems` reads what those tools print when they find no device.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_blocks, gated_by, gated_lines
from gputriage.parsers.driver import split_tree
from gputriage.parsers.ib_tools import (
    PERFQUERY_HEAD,
    PERFQUERY_ROW,
    RDMA_LINK,
    IbToolProblem,
    is_problem_line,
    perfquery_counter,
    problem_of,
    rdma_link_fields,
)
from gputriage.text.fields import (
    normalize_bus_id,
    split_lines,
    strict_float,
    strict_hex,
    strict_int,
)
from gputriage.text.paste import PasteDoc

__all__ = ["IbGid", "IbPort", "claim_ib_tools", "normalize_phys_state", "normalize_state",
           "parse_ib_problems", "parse_ib_tree", "parse_ibstat", "parse_rate"]

_STATES = {1: "Down", 2: "Init", 3: "Armed", 4: "Active", 5: "ActiveDefer"}
_PHYS_STATES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining",
                5: "LinkUp", 6: "LinkErrorRecovery", 7: "PhyTest"}
_STATE_WORDS = {v.lower(): v for v in _STATES.values()}
_STATE_WORDS["initializing"] = "Init"  # ibstat's word for INIT
_PHYS_WORDS = {v.lower(): v for v in _PHYS_STATES.values()}
_PHYS_WORDS.update({"configtraining": "PortConfigurationTraining",
                    "portconfigtraining": "PortConfigurationTraining"})
_WIDTHS = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}

# "400 Gb/sec (4X NDR)", "200", "56", "2.5 Gbps (1)"
_RATE = re.compile(r"^\s*([0-9]{1,5}(?:\.[0-9]{1,4})?)\s*(?:Gb/sec|Gbps|Gb/s)?\s*(?:\("
                   r"(?P<w>[0-9]{1,2}X)"
                   r"\s*(?P<s>[A-Za-z0-9.]+)?\))?", re.IGNORECASE)


@dataclass
class IbGid:
    """One row of ``show_gids`` (or a ``GID[n]`` line of ``ibv_devinfo -v``)."""

    index: int
    gid: str
    ipv4: str | None = None
    version: str | None = None  # "v1" (RoCE v1 / IB) or "v2" (routable RoCE v2)
    netdev: str | None = None


@dataclass
class IbPort:
    """One port of an InfiniBand or RoCE HCA, as far as the inputs tell."""

    device: str  # "mlx5_0", "rocep1s0f0"
    port: int
    state: str | None = None  # Down | Init | Armed | Active | ActiveDefer (or as printed)
    phys_state: str | None = None  # LinkUp | Polling | Disabled | Sleep | ... (or as printed)
    rate_gbps: float | None = None
    width: str | None = None  # "4X"
    speed: str | None = None  # "NDR", "HDR" or a per-lane "50.0 Gbps"
    link_layer: str | None = None  # "InfiniBand" | "Ethernet"
    lid: int | None = None
    sm_lid: int | None = None
    counters: dict[str, int] = field(default_factory=dict)
    fw_ver: str | None = None
    hca_type: str | None = None  # "MT4129"
    node_desc: str | None = None
    netdev: str | None = None  # "ib0", "enp1s0f0np0"
    netdev_state: str | None = None  # "Up" | "Down" (ibdev2netdev)
    pci_address: str | None = None  # "0000:18:00.0"
    gids: list[IbGid] = field(default_factory=list)
    source: str = "ibstat"  # the snapshot source the record came from
    fmt: str = ""  # sysfs | ibstat | ibstatus | ibv_devinfo | ibdev2netdev | show_gids |
    # rdma_link | perfquery
    lines: list[str] = field(default_factory=list)  # the lines that describe the port
    # earlier readings of the port's state in one paste, oldest first: (state, physical
    # state, the reading's first line); the fields above are the latest reading
    history: list[tuple[str | None, str | None, str]] = field(default_factory=list)
    reading_line: str | None = None  # the first line of the latest reading
    counter_lines: dict[str, str] = field(default_factory=dict)  # counter -> line printed

    @property
    def key(self) -> str:
        """``device/port``, e.g. ``mlx5_0/1``."""
        return f"{self.device}/{self.port}"

    @property
    def is_active(self) -> bool:
        """Logical state Active (or ActiveDefer)."""
        return self.state in ("Active", "ActiveDefer")

    @property
    def netdev_kind(self) -> str | None:
        """What the port's network interface is, by its name: ``ipoib`` (``ib0``,
        ``ibp26s0``: IP over InfiniBand, whose state is not the port's), ``ethernet``
        (``enp1s0f0np0``, ``eth2``: a RoCE port, whose state is the link's), ``pod`` (a
        secondary interface a CNI gave a pod, ``net1``: an SR-IOV virtual function)."""
        name = (self.netdev or "").lower()
        if not name:
            return None
        if re.fullmatch(r"net[0-9]{1,3}", name):
            return "pod"
        if name.startswith("ib"):
            return "ipoib"
        if name.startswith(("en", "eth")):
            return "ethernet"
        return None

    @property
    def is_down(self) -> bool:
        """Known not to pass traffic: state Down, Init or Armed, or a Down netdev when the
        port state itself is unknown (``ibdev2netdev`` alone) and the netdev's state is
        the link's: an IPoIB interface is Down whenever IPoIB is not configured, while the
        InfiniBand link may well be Active."""
        if self.state is not None:
            return self.state in ("Down", "Init", "Armed")
        if self.netdev_kind == "ipoib" or (self.link_layer or "").lower() == "infiniband" \
                and self.netdev_kind != "pod":
            return False
        return self.netdev_state is not None and self.netdev_state.lower() == "down"


def _clean(raw: str) -> str:
    """``4: ACTIVE``, ``PORT_ACTIVE (4)``, ``LINK_UP`` -> ``port active`` / ``linkup``."""
    text = re.sub(r"\(\s*[0-9]+\s*\)", "", raw.strip())
    text = re.sub(r"^[0-9]+\s*:\s*", "", text)
    return re.sub(r"[\s_]", "", text).lower()


def _code(raw: str) -> int | None:
    m = re.match(r"^\s*([0-9]{1,2})\s*:", raw) or re.search(r"\(\s*([0-9]{1,2})\s*\)\s*$", raw)
    return strict_int(m.group(1), signed=False) if m else None


def normalize_state(raw: str | None) -> str | None:
    """A port's logical state in any tool's spelling -> ``Active``, ``Down``, ...;
    unknown spellings are kept as printed, empty gives None."""
    if raw is None or not raw.strip():
        return None
    word = _clean(raw).removeprefix("port")
    if word in _STATE_WORDS:
        return _STATE_WORDS[word]
    code = _code(raw)
    return _STATES.get(code, raw.strip()) if code is not None else raw.strip()


def normalize_phys_state(raw: str | None) -> str | None:
    """A port's physical state in any spelling -> ``LinkUp``, ``Polling``, ...;
    unknown spellings are kept as printed, empty gives None."""
    if raw is None or not raw.strip():
        return None
    word = _clean(raw)
    if word in _PHYS_WORDS:
        return _PHYS_WORDS[word]
    code = _code(raw)
    return _PHYS_STATES.get(code, raw.strip()) if code is not None else raw.strip()


def parse_rate(raw: str | None) -> tuple[float | None, str | None, str | None]:
    """``400 Gb/sec (4X NDR)`` -> (400.0, "4X", "NDR"); ``200`` -> (200.0, None, None)."""
    if not raw:
        return None, None, None
    m = _RATE.match(raw)
    if not m:
        return None, None, None
    return strict_float(m.group(1)), m.group("w"), m.group("s")


def _lane_rate(width: str | None, speed: str | None) -> float | None:
    """``ibv_devinfo`` active_width ``4X (2)`` x active_speed ``50.0 Gbps (64)`` -> 200."""
    if not width or not speed:
        return None
    w = re.match(r"^\s*([0-9]{1,2}X)", width)
    s = re.match(r"^\s*([0-9]{1,4}(?:\.[0-9]{1,4})?)\s*Gbps", speed)
    if not (w and s) or w.group(1) not in _WIDTHS:
        return None
    lane = strict_float(s.group(1))
    return None if lane is None else round(_WIDTHS[w.group(1)] * lane, 1)


def _int(raw: str | None) -> int | None:
    """Decimal or 0x-hex integer; None when it is neither."""
    if raw is None:
        return None
    text = raw.strip()
    if text[:2].lower() == "0x":
        return strict_hex(text)
    return strict_int(text, signed=False)


def _text(raw: str | None) -> str | None:
    text = (raw or "").strip()
    return text or None


def _natural(key: str) -> list[object]:
    """``mlx5_10`` after ``mlx5_9``: digit runs compare by value (length, then digits)."""
    return [(len(p.lstrip("0")), p.lstrip("0")) if i % 2 else p
            for i, p in enumerate(re.split(r"([0-9]+)", key))]


def _sorted(ports: dict[tuple[str, int], IbPort]) -> list[IbPort]:
    return sorted(ports.values(), key=lambda p: (_natural(p.device), p.port))


# --- sysfs tree ------------------------------------------------------------------

_TREE_KEY = re.compile(r"^(?P<dev>[^/]+)/(?:ports/(?P<port>[0-9]{1,3})/(?P<attr>.+)|"
                       r"(?P<devattr>fw_ver|hca_type|node_desc|board_id|node_guid))$")
_PCI_IN_PATH = re.compile(r"(?:^|/)((?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
                          r"(?=/|$)")


def _pci_from_link(target: str) -> str | None:
    """The last PCI address in a sysfs link target (``../../../0000:18:00.0``)."""
    found = _PCI_IN_PATH.findall(target)
    return normalize_bus_id(found[-1]) if found else None


def parse_ib_tree(tree: object) -> list[IbPort]:
    """The ``infiniband`` sysfs tree (``/sys/class/infiniband``) -> ports.

    An empty tree gives ``[]``; a tree with files but none laid out as
    ``<hca>/ports/<n>/...`` or ``<hca>/fw_ver`` raises ParseError.
    """
    files, links, _errors = split_tree(tree)
    ports: dict[tuple[str, int], IbPort] = {}
    devattrs: dict[str, dict[str, str]] = {}
    matched = 0
    for rel in sorted(files):
        m = _TREE_KEY.match(rel)
        if not m:
            continue
        matched += 1
        value = files[rel].strip()
        dev = m.group("dev")
        if m.group("devattr"):
            devattrs.setdefault(dev, {})[m.group("devattr")] = value
            continue
        num = strict_int(m.group("port"), signed=False)
        if num is None:
            continue
        port = ports.setdefault((dev, num), IbPort(dev, num, source="infiniband", fmt="sysfs"))
        attr = m.group("attr")
        if value:
            port.lines.append(f"{dev}/ports/{num}/{attr}: {value}")
        _tree_attr(port, attr, value)
    if files and not matched:
        raise ParseError("not an InfiniBand sysfs tree: no <hca>/ports/<n>/... files")
    pci: dict[str, str] = {}
    for rel, target in links.items():
        parts = rel.split("/")
        if len(parts) == 1 or (len(parts) == 2 and parts[1] == "device"):
            addr = _pci_from_link(target)
            if addr:
                pci[parts[0]] = addr
    for (dev, _), port in ports.items():
        port.lines.sort(key=_line_order)
        attrs = devattrs.get(dev, {})
        port.fw_ver = _text(attrs.get("fw_ver"))
        port.hca_type = _text(attrs.get("hca_type"))
        port.node_desc = _text(attrs.get("node_desc"))
        port.pci_address = pci.get(dev)
    return _sorted(ports)


_ATTR_ORDER = ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid")


def _line_order(line: str) -> tuple[int, str]:
    """State lines first, then the other port attributes, then counters."""
    attr = line.split(": ", 1)[0].split("/", 3)[-1]
    return (_ATTR_ORDER.index(attr) if attr in _ATTR_ORDER else len(_ATTR_ORDER), line)


def _tree_attr(port: IbPort, attr: str, value: str) -> None:
    if attr.startswith(("counters/", "hw_counters/")):
        name = attr.split("/", 1)[1]
        number = _int(value)
        if "/" not in name and number is not None:
            port.counters[name] = number
    elif attr == "state":
        port.state = normalize_state(value)
    elif attr == "phys_state":
        port.phys_state = normalize_phys_state(value)
    elif attr == "rate":
        port.rate_gbps, port.width, port.speed = parse_rate(value)
    elif attr == "link_layer":
        port.link_layer = _text(value)
    elif attr == "lid":
        port.lid = _int(value)
    elif attr == "sm_lid":
        port.sm_lid = _int(value)


# --- text outputs ----------------------------------------------------------------

_CA = re.compile(r"^\s*CA '(?P<dev>[^']+)'\s*$")
_IBSTAT_PORT = re.compile(r"^\s*Port (?P<port>[0-9]{1,3}):\s*$")
_IBSTATUS = re.compile(r"^\s*Infiniband device '(?P<dev>[^']+)' port (?P<port>[0-9]{1,3}) status:")
_HCA_ID = re.compile(r"^\s*hca_id:\s*(?P<dev>\S+)\s*$")
_DEVINFO_PORT = re.compile(r"^\s*port:\s*(?P<port>[0-9]{1,3})\s*$")
_NETDEV = re.compile(
    r"^\s*(?:(?P<pci>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+)?"
    r"(?P<dev>[A-Za-z][\w.-]*)\s+(?:\((?P<pci2>[0-9a-fA-F:.]+)\)\s+)?(?P<rest>[^=]*?)"
    r"\bport\s+(?P<port>[0-9]{1,3})(?:\s+\(\s*(?P<state>[A-Z_]+)\s*\))?\s+<?=+>\s+"
    r"(?P<netdev>\S+)\s+\((?P<up>[A-Za-z]+)\)\s*(?:#.{0,200})?$")
_GID_HEAD = re.compile(r"^\s*DEV\s+PORT\s+INDEX\s+GID\b")
_GID_ROW = re.compile(r"^\s*(?P<dev>[A-Za-z][\w.-]*)\s+(?P<port>[0-9]{1,3})\s+"
                      r"(?P<idx>[0-9]{1,5})\s+"
                      r"(?P<gid>[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{0,4}){2,7})\s+"
                      r"(?:(?P<ipv4>[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[0-9a-fA-F:]*:[0-9a-fA-F:]*)\s+)?"
                      r"(?P<ver>v[0-9])(?:\s+(?P<netdev>\S+))?\s*$")
_NO_DEVICES = re.compile(r"No IB devices found|ibpanic:|Failed to get IB devices|"
                         r"can't find any IB device|No such file or directory", re.IGNORECASE)
_KV = re.compile(r"^\s*(?P<key>[A-Za-z][\w ]*?|GID\[\s*[0-9]+\])\s*:\s*(?P<value>.*?)\s*$")
# keys whose lines are kept as evidence
_EVIDENCE_KEYS = {"state", "physical state", "phys state", "phys_state", "rate", "link layer",
                  "link_layer", "active_width", "active_speed", "ca type", "base lid", "sm lid",
                  "sm_lid", "port_lid"}


class _Reader:
    """Line-by-line reader of the RDMA tools' outputs, merging what it learns."""

    def __init__(self) -> None:
        self.ports: dict[tuple[str, int], IbPort] = {}
        self.device: str | None = None
        self.devinfo: dict[str, str] = {}
        self.dev_lines: list[str] = []
        self.port: IbPort | None = None
        self.perf: IbPort | None = None  # the port of the perfquery block being read
        self.fmt = ""
        self.recognised = False

    def get(self, dev: str, num: int, fmt: str) -> IbPort:
        port = self.ports.get((dev, num))
        if port is None:
            port = self.ports[(dev, num)] = IbPort(dev, num, fmt=fmt)
        return port

    def start_device(self, dev: str, fmt: str, line: str) -> None:
        self.recognised = True
        self.device, self.fmt, self.port = dev, fmt, None
        self.devinfo = {}
        self.dev_lines = [line.strip()]

    def start_port(self, num: int | None, line: str) -> None:
        """The port block of ``line``; a port whose number is not one is not read."""
        assert self.device is not None
        if num is None:
            self.port = None
            return
        self.port = self.get(self.device, num, self.fmt)
        _new_reading(self.port, line)
        self.port.lines.extend(ln for ln in self.dev_lines if ln not in self.port.lines)
        self.port.lines.append(line.strip())
        _fill(self.port, self.fmt, self.devinfo)

    def feed(self, line: str) -> None:
        m = _CA.match(line)
        if m:
            self.start_device(m.group("dev"), "ibstat", line)
            return
        m = _IBSTATUS.match(line)
        if m:
            self.start_device(m.group("dev"), "ibstatus", line)
            self.dev_lines = []
            self.start_port(strict_int(m.group("port"), signed=False), line)
            return
        m = _HCA_ID.match(line)
        if m:
            self.start_device(m.group("dev"), "ibv_devinfo", line)
            return
        m = _NETDEV.match(line) if "port" in line and "=>" in line else None
        if m:
            self.netdev(m, line)
            return
        if self.other_tools(line):
            return
        if _GID_HEAD.match(line):
            self.recognised = True
            self.device = self.port = None
            return
        m = _GID_ROW.match(line)
        if m and self.device is None:
            self.gid(m, line)
            return
        if self.device is None:
            return
        if self.fmt == "ibstat":
            pm = _IBSTAT_PORT.match(line)
            if pm:
                self.start_port(strict_int(pm.group(1), signed=False), line)
                return
        elif self.fmt == "ibv_devinfo":
            pm = _DEVINFO_PORT.match(line)
            if pm:
                self.start_port(strict_int(pm.group(1), signed=False), line)
                return
        if line.strip() and not line[:1].isspace():
            self.device = self.port = None  # an unindented line ends the block
            return
        kv = _KV.match(line)
        if not kv:
            return
        key, value = kv.group("key").strip(), kv.group("value")
        if self.port is None:
            self.devinfo[key.lower()] = value
            if key.lower() in _EVIDENCE_KEYS:
                self.dev_lines.append(line.strip())
            return
        if key.lower() in _EVIDENCE_KEYS:
            self.port.lines.append(line.strip())
        _port_field(self.port, self.fmt, key, value)

    def other_tools(self, line: str) -> bool:
        """An ``rdma link`` line, or a ``perfquery`` header or counter row."""
        m = RDMA_LINK.match(line) if "state" in line else None
        if m:
            self.rdma_link(m, line)
            return True
        m = PERFQUERY_HEAD.match(line) if "ounters" in line else None
        if m:
            self.recognised = True
            lid = int(m.group("lid"))
            self.device, self.fmt = None, ""
            self.port = self.get(f"LID {lid}", int(m.group("port")), "perfquery")
            self.port.lid = lid
            self.port.lines.append(line.strip())
            self.perf = self.port
            return True
        m = PERFQUERY_ROW.match(line) if self.perf is not None else None
        if m:
            assert self.perf is not None
            counter = perfquery_counter(m.group("key"), m.group("value"))
            if counter is not None:
                self.perf.counters[counter[0]] = counter[1]
                self.perf.counter_lines[counter[0]] = line.strip()
            return True
        self.perf = None
        return False

    def rdma_link(self, m: re.Match[str], line: str) -> None:
        self.recognised = True
        self.device = self.port = self.perf = None
        port = self.get(m.group("dev"), int(m.group("port")), "rdma_link")
        _new_reading(port, line)
        found = rdma_link_fields(m.group("rest"))
        if "state" in found:
            port.state = normalize_state(found["state"])
        if "physical_state" in found:
            port.phys_state = normalize_phys_state(found["physical_state"])
        port.lid = _int(found.get("lid")) if _int(found.get("lid")) is not None else port.lid
        port.sm_lid = _int(found.get("sm_lid")) if found.get("sm_lid") else port.sm_lid
        port.netdev = found.get("netdev") or port.netdev
        port.lines.append(line.strip())

    def netdev(self, m: re.Match[str], line: str) -> None:
        self.recognised = True
        self.device = self.port = None
        num = strict_int(m.group("port"), signed=False)
        if num is None:
            return
        port = self.get(m.group("dev"), num, "ibdev2netdev")
        port.netdev = port.netdev or m.group("netdev")
        port.netdev_state = m.group("up").capitalize()
        if m.group("state") and port.state is None:
            port.state = normalize_state(m.group("state"))
        pci = normalize_bus_id(m.group("pci") or m.group("pci2"))
        port.pci_address = port.pci_address or pci
        fw = re.search(r"\bfw\s+([0-9]+\.[0-9]+\.[0-9]+)", m.group("rest") or "")
        if fw and port.fw_ver is None:
            port.fw_ver = fw.group(1)
        hca = re.search(r"\((MT[0-9]+)\b", m.group("rest") or "")
        if hca and port.hca_type is None:
            port.hca_type = hca.group(1)
        port.lines.append(line.strip())

    def gid(self, m: re.Match[str], line: str) -> None:
        self.recognised = True
        num, idx = strict_int(m.group("port"), signed=False), strict_int(m.group("idx"))
        if num is None or idx is None:
            return
        port = self.get(m.group("dev"), num, "show_gids")
        ipv4 = m.group("ipv4") if m.group("ipv4") and "." in m.group("ipv4") else None
        port.gids.append(IbGid(idx, m.group("gid"), ipv4, m.group("ver"), m.group("netdev")))
        if m.group("netdev") and port.netdev is None:
            port.netdev = m.group("netdev")
        port.lines.append(line.strip())


def _new_reading(port: IbPort, line: str) -> None:
    """A new reading of a port starts: keep the state the last one left."""
    if port.state is not None or port.phys_state is not None:
        first = port.reading_line or line.strip()
        port.history.append((port.state, port.phys_state, first))
    port.reading_line = line.strip()


def _fill(port: IbPort, fmt: str, devinfo: dict[str, str]) -> None:
    """Device-level fields (CA type, firmware) onto a port."""
    if fmt == "ibstat":
        port.hca_type = port.hca_type or _text(devinfo.get("ca type"))
        port.fw_ver = port.fw_ver or _text(devinfo.get("firmware version"))
    elif fmt == "ibv_devinfo":
        port.fw_ver = port.fw_ver or _text(devinfo.get("fw_ver"))
        part = _int(devinfo.get("vendor_part_id"))
        if part is not None and port.hca_type is None:
            port.hca_type = f"MT{part}"


def _set_state(port: IbPort, value: str) -> None:
    port.state = normalize_state(value) or port.state


def _set_phys_state(port: IbPort, value: str) -> None:
    port.phys_state = normalize_phys_state(value) or port.phys_state


def _set_rate(port: IbPort, value: str) -> None:
    rate, width, speed = parse_rate(value)
    port.rate_gbps = rate if rate is not None else port.rate_gbps
    port.width, port.speed = width or port.width, speed or port.speed


def _set_link_layer(port: IbPort, value: str) -> None:
    port.link_layer = _text(value) or port.link_layer


def _set_lid(port: IbPort, value: str) -> None:
    port.lid = _int(value) if _int(value) is not None else port.lid


def _set_sm_lid(port: IbPort, value: str) -> None:
    port.sm_lid = _int(value) if _int(value) is not None else port.sm_lid


def _set_width(port: IbPort, value: str) -> None:
    wm = re.match(r"^\s*([0-9]{1,2}X)\b", value)
    port.width = wm.group(1) if wm else port.width


def _set_speed(port: IbPort, value: str) -> None:
    port.speed = re.sub(r"\s*\(\s*[0-9]+\s*\)\s*$", "", value).strip() or port.speed


# a port's "key: value" fields (ibstat, ibstatus and ibv_devinfo spellings)
_PORT_FIELDS: dict[str, Callable[[IbPort, str], None]] = {
    "state": _set_state, "physical state": _set_phys_state, "phys state": _set_phys_state,
    "phys_state": _set_phys_state, "rate": _set_rate, "link layer": _set_link_layer,
    "link_layer": _set_link_layer, "base lid": _set_lid, "port_lid": _set_lid,
    "sm lid": _set_sm_lid, "sm_lid": _set_sm_lid, "active_width": _set_width,
    "active_speed": _set_speed,
}


def _add_gid(port: IbPort, key: str, value: str) -> None:
    """A ``GID[ n]: value`` line of ``ibv_devinfo -v``."""
    idx = _int(re.sub(r"[^0-9]", "", key))
    gid = value.strip()
    if idx is not None and gid and not any(g.index == idx for g in port.gids):
        port.gids.append(IbGid(idx, gid))


def _port_field(port: IbPort, fmt: str, key: str, value: str) -> None:
    k = key.lower()
    setter = _PORT_FIELDS.get(k)
    if setter is not None:
        setter(port, value)
    elif k.startswith("gid["):
        _add_gid(port, key, value)
    if fmt == "ibv_devinfo" and k in ("active_width", "active_speed"):
        rate = _lane_rate(port.width, port.speed)
        if rate is not None:
            port.rate_gbps = rate


def parse_ibstat(text: str) -> list[IbPort]:
    """``ibstat``, ``ibstatus``, ``ibv_devinfo [-v]``, ``ibdev2netdev [-v]`` and
    ``show_gids`` outputs (alone or mixed) -> ports, one record per HCA port.

    Empty text, or only a "no devices" complaint, gives ``[]``; text in none of
    these formats raises ParseError. Partial output (``ibstat`` aborting with
    ``ibpanic`` after some HCAs) keeps what was printed.
    """
    if not text or not text.strip():
        return []
    reader = _Reader()
    for line in split_lines(text):
        reader.feed(line.replace("\x00", ""))
    if not reader.recognised:
        if _NO_DEVICES.search(text) or parse_ib_problems(text):
            return []
        raise ParseError("not ibstat, ibstatus, ibv_devinfo, ibdev2netdev, show_gids, rdma link "
                         "or perfquery output")
    return _sorted(reader.ports)


def parse_ib_problems(text: str) -> list[IbToolProblem]:
    """What the RDMA tools said when they found no device (each line once, in order)."""
    found = (problem_of(line) for line in split_lines(text) if line.strip())
    return list({p.line: p for p in found if p is not None}.values())


def merge_ports(primary: list[IbPort], extra: list[IbPort]) -> list[IbPort]:
    """Fill fields ``primary`` lacks from ``extra`` (same device and port); ports only
    ``extra`` knows are not added (the primary source is authoritative)."""
    by_key = {(p.device, p.port): p for p in extra}
    for port in primary:
        other = by_key.get((port.device, port.port))
        if other is None:
            continue
        for f in fields(IbPort):
            if f.name in ("device", "port", "source", "fmt", "lines"):
                continue
            mine = getattr(port, f.name)
            if mine is None or mine == [] or mine == {}:
                setattr(port, f.name, getattr(other, f.name))
    return primary


# --- recognising it in a paste -------------------------------------------------------
_CA_START = re.compile(r"^CA '[^']+'\s*$")
_IBSTATUS_START = re.compile(r"^Infiniband device '[^']+' port [0-9]+ status:\s*$")
_HCA_START = re.compile(r"^hca_id:\s*\S+\s*$")
_IBDEV2NETDEV = re.compile(
    r"^\s*(?:(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\s+)?[A-Za-z][\w.-]*\s"
    r"[^=]*?\bport\s+[0-9]+(?:\s+\(\s*[A-Z_]+\s*\))?\s+<?=+>\s+\S+\s+"
    r"\((?:Up|Down|up|down|UP|DOWN)\)\s*(?:#.{0,200})?$")
_GIDS_HEAD = re.compile(r"^\s*DEV\s+PORT\s+INDEX\s+GID\b")
_GIDS_ROW = re.compile(r"^\s*(?:-{2,}\s+)+-{2,}\s*$|^\s*[A-Za-z][\w.-]*\s+[0-9]+\s+[0-9]+\s+"
                       r"[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{0,4}){2,7}\s|^n_gids_found=[0-9]+")
_INDENTED = re.compile(r"^(?:\s*$|\s)")
# literals one of which a tool's "no device" complaint holds (a cheap test first)
_PROBLEM_WORDS = ("libibverbs", "umad", "IB device", "sys files", "ibpanic")


def _indented(line: str) -> bool:
    return bool(_INDENTED.match(line))


# what the rdma link and problem lines are looked for by (doc.lines_with)
_RDMA_LINK_GATE, _PROBLEM_GATE = Gate(literals=("state ",)), Gate(literals=_PROBLEM_WORDS)


@gated_by(_CA_START, _IBSTATUS_START, _HCA_START, _IBDEV2NETDEV, _GIDS_HEAD, PERFQUERY_HEAD,
          _RDMA_LINK_GATE, _PROBLEM_GATE)
def claim_ib_tools(doc: PasteDoc) -> None:
    """ibstat, ibstatus, ibv_devinfo, ibdev2netdev, show_gids, rdma link and perfquery
    outputs, and the tools' "no device" complaints: the ``ibstat`` source."""
    gated_blocks(doc, "ibstat", _CA_START, _indented)
    gated_blocks(doc, "ibstat", _IBSTATUS_START, _indented)
    gated_blocks(doc, "ibstat", _HCA_START, _indented)
    gated_lines(doc, "ibstat", _IBDEV2NETDEV)
    gated_blocks(doc, "ibstat", _GIDS_HEAD, lambda s: bool(_GIDS_ROW.match(s)))
    gated_blocks(doc, "ibstat", PERFQUERY_HEAD, lambda s: bool(PERFQUERY_ROW.match(s)))
    for i in doc.lines_with(("state ",)):
        if doc.free(i) and "/" in doc.lines[i] and RDMA_LINK.match(doc.lines[i]):
            doc.claim("ibstat", i, i + 1)
    for i in doc.lines_with(_PROBLEM_WORDS):
        if doc.free(i) and is_problem_line(doc.lines[i]):
            doc.claim("ibstat", i, i + 1)
