"""The builders of the rows of :data:`gputriage.parsers.kernel_table.EVENTS` beside those
of :mod:`.kernel_host` and :mod:`.kernel_probe`: the NVIDIA driver's own events (Xid,
SXid, adapter init and probe, GSP firmware and RPC, NVLink, module loads, the driver's
banner), PCIe AER and bandwidth lines, mlx4/mlx5 firmware and link lines, segfaults,
hung tasks and soft lockups; with the patterns whose groups only a builder here reads.

A builder takes the line, its message and its row's match (None for a row without a
regular expression) and returns the event(s), an empty list (the line is the row's but
proves nothing) or None (the next row is tried). Every pattern is bounded.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from gputriage.parsers.kernel_model import DriverEvent, LogLine, make_event
from gputriage.parsers.kernel_patterns import (
    DEV_BUS,
    GPU_LIB,
    LINK,
    RPC_FUNCTION,
    RPC_TIMEOUT,
    SXID_CONT,
    bus_near,
    gpu_details,
    sxid_details,
    xid_details,
)
from gputriage.text.fields import normalize_bus_id
from gputriage.vocabulary import EventKind

__all__ = ["BOUND_ELSEWHERE", "DRIVER_LOAD", "HCA_FIRMWARE", "Builder", "Found", "Match",
           "aer_bus_error", "aer_received", "bandwidth", "bound_elsewhere", "core_dump",
           "driver_load", "firmware_load", "gsp_dump", "gsp_error", "gsp_timeout",
           "hca_firmware", "hung", "lockup", "mlx5_link", "module_load", "no_adapter",
           "no_firmware", "nothing", "nvlink", "on_gpu", "rm_init", "segfault", "sxid",
           "wrap", "xid_event"]

Match = re.Match[str]
Found = DriverEvent | list[DriverEvent] | None
Builder = Callable[[LogLine, str, Match | None], Found]
K = EventKind


# --- the NVIDIA driver's events ------------------------------------------------------------

def sxid(line: LogLine, msg: str, m: Match | None) -> Found:
    """An NVSwitch SXid, with its severity and engine when printed; a lone data dump: []."""
    assert m is not None
    rest = m.group("rest").strip()
    if rest.startswith("Data"):  # a lone data dump proves nothing new
        return []
    details = sxid_details(msg, m)
    cont = SXID_CONT.match(rest)
    if cont and cont.group("lvl"):
        details.update(severity_level=cont.group("lvl"), engine_instance=cont.group("eng"))
    return make_event(K.SXID, line, normalize_bus_id(m.group("bus")), details)


def xid_event(line: LogLine, msg: str, m: Match | None) -> Found:
    """An Xid; an Xid 79 line is also a fallen-off-bus event."""
    assert m is not None
    ev = make_event(K.XID, line, normalize_bus_id(m.group("bus")),
                    xid_details(m.group("code"), m.group("rest")))
    if "fallen off the bus" in msg:
        return [ev, make_event(K.FALLEN_OFF_BUS, line, ev.bus_id)]
    return ev


def on_gpu(kind: EventKind, with_gpu: bool = False) -> Builder:
    """A builder of ``kind`` on the GPU the message (or the line's hint) names; with
    ``with_gpu`` the driver function and GPU index too."""

    def build(line: LogLine, msg: str, m: Match | None) -> Found:
        return make_event(kind, line, bus_near(msg, line.bus_hint),
                          gpu_details(msg) if with_gpu else None)

    return build


def rm_init(line: LogLine, msg: str, m: Match | None) -> Found:
    """RmInitAdapter failed on the GPU named, with its error code when printed."""
    return make_event(K.RM_INIT_ADAPTER_FAILED, line, bus_near(msg, line.bus_hint),
                      {"code": m.group("code")} if m else {})


def no_adapter(line: LogLine, msg: str, m: Match | None) -> Found:
    """The driver probed no GPU (no GPU named)."""
    return make_event(K.NO_ADAPTER_PROBED, line, None)


# "NVRM: GPU 0000:01:00.0 is already bound to NovaCore." (nouveau, nova_core, vfio-pci...)
BOUND_ELSEWHERE = re.compile(r"GPU (?P<bus>[0-9a-fA-F:.]{7,16}) is already bound to "
                             r"(?P<holder>[\w.-]{1,40})")


def bound_elsewhere(line: LogLine, msg: str, m: Match | None) -> Found:
    """The driver found a GPU another kernel driver had taken: why it probed none."""
    assert m is not None
    return make_event(K.NO_ADAPTER_PROBED, line, normalize_bus_id(m.group("bus")),
                      {"holder": m.group("holder").rstrip(".")})


def firmware_load(line: LogLine, msg: str, m: Match | None) -> Found:
    """The GSP firmware file the kernel could not load: file, error, driver version."""
    assert m is not None
    details = {"file": m.group("file"), "error": m.group("err")}
    if m.group("ver"):
        details["driver_version"] = m.group("ver")
    return make_event(K.GSP_FIRMWARE_MISSING, line, bus_near(msg, line.bus_hint), details)


def no_firmware(line: LogLine, msg: str, m: Match | None) -> Found:
    """The driver found no GSP firmware image, with the driver function that says so."""
    fn = msg.removeprefix("NVRM:").strip().partition(":")[0]
    return make_event(K.GSP_FIRMWARE_MISSING, line, bus_near(msg, line.bus_hint),
                      {"function": fn} if fn and " " not in fn else {})


def module_load(line: LogLine, msg: str, m: Match | None) -> Found:
    """An NVIDIA module that would not load, with what the match's groups name."""
    assert m is not None
    return make_event(K.MODULE_LOAD_FAILED, line, None,
                      {k: v.strip() for k, v in m.groupdict().items() if v})


def gsp_dump(line: LogLine, msg: str, m: Match | None) -> Found:
    """The header line of the driver's GSP timeout banner or RPC history dump: one GSP
    RPC timeout on the GPU named, even without the Xid 119 line."""
    return make_event(K.GSP_RPC_TIMEOUT, line, bus_near(msg, line.bus_hint),
                      {**gpu_details(msg), "dump": "yes"})


DRIVER_LOAD = re.compile(r"NVRM: loading NVIDIA UNIX (?P<flavour>[\w ]{0,40}?Kernel Module)"
                         r"(?: for [\w-]{1,16})?\s+(?P<ver>[0-9]{2,4}\.[0-9]{1,4}"
                         r"(?:\.[0-9]{1,4})?)\b")


def driver_load(line: LogLine, msg: str, m: Match | None) -> Found:
    """The module's banner, printed once its probe is done: the driver was (re)loaded."""
    assert m is not None
    details = {"driver_version": m.group("ver"),
               "open": "yes" if "Open" in m.group("flavour") else "no"}
    return make_event(K.DRIVER_LOAD, line, None, details)


def nothing(line: LogLine, msg: str, m: Match | None) -> Found:
    """The line belongs to the row above but proves nothing (no later row applies)."""
    return []


def gsp_timeout(line: LogLine, msg: str, m: Match | None) -> Found:
    """A GSP RPC timeout, with its wait, RPC function and rate limiting when printed."""
    details = gpu_details(msg)
    t = RPC_TIMEOUT.search(msg)
    if t:
        details["timeout_s"] = t.group("secs")
    f = RPC_FUNCTION.search(msg)
    if f:
        details["rpc_function"] = f.group("name")
    if "rate limiting" in msg.lower():
        details["rate_limited"] = "yes"
    return make_event(K.GSP_RPC_TIMEOUT, line, bus_near(msg, line.bus_hint), details)


def core_dump(line: LogLine, msg: str, m: Match | None) -> Found:
    """A GSP falcon core dump, one event per dump."""
    return make_event(K.GSP_ERROR, line, bus_near(msg, line.bus_hint),
                      {**gpu_details(msg), "lines": "1"})


_GSP_CHATTER = ("rpc history", "rpc event history", "rpc buffer contains")


def gsp_error(line: LogLine, msg: str, m: Match | None) -> Found:
    """A GSP firmware error on the GPU named; None for an RPC history dump's lines."""
    if any(c in msg.lower() for c in _GSP_CHATTER):
        return None
    return make_event(K.GSP_ERROR, line, bus_near(msg, line.bus_hint), gpu_details(msg))


def nvlink(line: LogLine, msg: str, m: Match | None) -> Found:
    """An NVLink error on the GPU named, with the link's number when printed."""
    details = gpu_details(msg)
    lk = LINK.search(msg)
    if lk:
        details["link"] = str(int(lk.group("link")))
    return make_event(K.NVLINK_ERROR, line, bus_near(msg, line.bus_hint), details)


# --- PCIe, network links, crashes and hangs ------------------------------------------------

def aer_received(line: LogLine, msg: str, m: Match | None) -> Found:
    """An AER "error received" line: the erring device by address or requester id."""
    assert m is not None
    bus = normalize_bus_id(m.group("bus")) if m.group("bus") else None
    if bus is None and m.group("id"):
        rid = int(m.group("id"), 16)
        bus = f"0000:{rid >> 8:02x}:{(rid >> 3) & 0x1F:02x}.{rid & 7}"
    details = {"severity": m.group("sev")}
    reporter = DEV_BUS.match(msg)
    if reporter:
        details["reported_by"] = normalize_bus_id(reporter.group("bus")) or ""
    return make_event(K.PCIE_AER, line, bus or bus_near(msg, line.bus_hint), details)


def aer_bus_error(line: LogLine, msg: str, m: Match | None) -> Found:
    """An AER "PCIe Bus Error" line: its severity, type and agent when printed."""
    assert m is not None
    details = {"severity": m.group("sev").strip(), "type": m.group("type").strip()}
    if m.group("agent"):
        details["agent"] = m.group("agent").strip()
    return make_event(K.PCIE_AER, line, bus_near(msg, line.bus_hint), details)


def bandwidth(line: LogLine, msg: str, m: Match | None) -> Found:
    """A device's PCIe bandwidth limited, with the speeds and limiting link printed."""
    details = {k: v for k, v in (m.groupdict() if m else {}).items() if v}
    if "at" in details:
        details["limiting_link"] = normalize_bus_id(details.pop("at")) or ""
    return make_event(K.PCIE_BANDWIDTH_LIMITED, line, bus_near(msg, line.bus_hint), details)


# an mlx4/mlx5 driver saying the HCA's firmware is too old for it: "mlx4_en 0000:0d:00.0:
# LSO not supported, please upgrade to later FW version", "mlx4_core 0000:0d:00.0: Installed
# FW has unsupported command interface revision 2"
HCA_FIRMWARE = re.compile(
    r"(?P<driver>mlx[45]_\w{1,8})\s+(?P<bus>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9])"
    r"?:?.{0,160}?(?P<what>upgrade to (?:a )?(?:later|newer) FW version|unsupported command "
    r"interface revision|FW version .{0,40}(?:too old|is not supported|unsupported))",
    re.IGNORECASE)


def hca_firmware(line: LogLine, msg: str, m: Match | None) -> Found:
    """An mlx4/mlx5 driver saying the HCA's firmware is too old for it."""
    assert m is not None
    return make_event(K.HCA_FIRMWARE_OLD, line, normalize_bus_id(m.group("bus") or ""),
                      {"driver": m.group("driver"), "what": m.group("what")})


def mlx5_link(line: LogLine, msg: str, m: Match | None) -> Found:
    """An mlx5 netdev's link going up or down, with the interface when printed."""
    assert m is not None
    details = {"state": m.group("state").lower()}
    if m.group("ifname"):
        details["interface"] = m.group("ifname")
    return make_event(K.MLX5_LINK, line, normalize_bus_id(m.group("bus")), details)


def segfault(line: LogLine, msg: str, m: Match | None) -> Found:
    """A segfault in a GPU library (or of a GPU program); None for any other."""
    assert m is not None
    if not (GPU_LIB.search(m.group("lib") or "") or GPU_LIB.search(m.group("proc"))):
        return None
    details = {"process": m.group("proc"), "pid": m.group("pid"), "address": m.group("addr")}
    if m.group("lib"):
        details["library"] = m.group("lib")
    return make_event(K.SEGFAULT, line, None, details)


def hung(line: LogLine, msg: str, m: Match | None) -> Found:
    """A hung task: the process and how long it was blocked."""
    assert m is not None
    return make_event(K.HUNG_TASK, line, None, {
        "process": m.group("proc"), "pid": m.group("pid"), "seconds": m.group("secs"),
        "in_nvidia": "no"})


def lockup(line: LogLine, msg: str, m: Match | None) -> Found:
    """A soft lockup: the CPU, the process on it and how long it was stuck."""
    assert m is not None
    return make_event(K.SOFT_LOCKUP, line, None, {
        "process": m.group("proc"), "pid": m.group("pid"), "cpu": m.group("cpu"),
        "seconds": m.group("secs"), "in_nvidia": "no"})


def wrap(build: Callable[[LogLine, str, Match], DriverEvent | list[DriverEvent]]) -> Builder:
    """A builder that needs its match (its row has a regular expression)."""

    def wrapped(line: LogLine, msg: str, m: Match | None) -> Found:
        assert m is not None
        return build(line, msg, m)

    wrapped.__doc__ = build.__doc__
    return wrapped
