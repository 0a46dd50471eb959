"""Host-side kernel-log events beside the NVIDIA driver's own: PCIe AER details and
the drivers' recovery lines, EDAC / MCE / APEI (GHES) hardware errors, nvidia-peermem
and nv_peer_mem load failures, and network link state (mlx5 netdev and IB port
states, carrier changes, NETDEV WATCHDOG).

The patterns and builders of these kinds' rows in :data:`gputriage.parsers.
kernel_table.EVENTS` (which tries each pattern only after a literal test on the
message), and the helpers that add a report's or record's later lines. Every
pattern is bounded."""

from __future__ import annotations

import re

from gputriage.parsers.base import normalize_bus_id
from gputriage.parsers.kernel_model import DriverEvent, EventKind, LogLine, make_event

Match = re.Match[str]

_BUS = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"

# --- PCIe AER --------------------------------------------------------------------------
# "nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)",
# "nvidia 0000:02:00.0: device has no AER-aware driver"
AER_DRIVER = re.compile(r"^(?P<drv>[\w\-]{1,32}) (?P<bus>" + _BUS + r"): (?:AER: )?"
                         r"(?P<what>can't recover \(no error_detected callback\)|device has no "
                         r"AER-aware driver|AER: driver reported .{0,40}|device recovery failed)")
# "pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=00004020/00000000"
AER_STATUS = re.compile(r"^(?P<key>[\w\-]{1,32} " + _BUS + r":)\s{1,8}device \[(?P<vid>"
                        r"[0-9a-fA-F]{4}):(?P<did>[0-9a-fA-F]{4})\] error status/mask="
                        r"(?P<status>[0-9a-fA-F]{1,8})")
# "pcieport 0000:00:03.0:    [14] CmpltTO                (First)"
AER_BIT = re.compile(r"^(?P<key>[\w\-]{1,32} " + _BUS + r":)\s{1,8}\[\s?(?P<bit>[0-9]{1,2})\]\s"
                     r"(?P<name>[A-Za-z][\w /\-]{0,40}?)\s*(?P<first>\(First\))?\s*$")
AER_KEY = re.compile(r"^[\w\-]{1,32} " + _BUS + ":")


def aer_driver(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """A device driver's answer to an AER error (it cannot recover, or has no handler)."""
    return make_event(EventKind.PCIE_AER, line, normalize_bus_id(m.group("bus")), {
        "driver": m.group("drv"), "recovery": m.group("what").removeprefix("AER: ")})


def aer_detail(msg: str, details: dict[str, str]) -> bool:
    """Add a status/mask or error-bit line of an AER report to ``details``; False when
    the line is neither."""
    m = AER_STATUS.match(msg)
    if m:
        details["vendor_device"] = f"{m.group('vid')}:{m.group('did')}".lower()
        details["status"] = m.group("status").lower()
        return True
    m = AER_BIT.match(msg)
    if not m:
        return False
    name = " ".join(m.group("name").split())
    errors = [e for e in details.get("errors", "").split(", ") if e]
    if name not in errors:
        details["errors"] = ", ".join([*errors, name])
    if m.group("first"):
        details["first_error"] = name
    return True


def pci_class(vendor_device: str | None, driver: str | None) -> str:
    """``gpu`` / ``hca`` / ``port`` / ``device`` from the PCI vendor id and the driver."""
    vid = (vendor_device or "")[:4]
    if vid == "10de" or driver in ("nvidia", "nvidia-nvswitch"):
        return "gpu"
    if vid == "15b3" or (driver or "").startswith("mlx"):
        return "hca"
    if driver == "pcieport":
        return "port"
    return "device"


# --- EDAC / MCE / APEI -----------------------------------------------------------------
EDAC = re.compile(r"EDAC (?P<mc>[\w ]{0,24}?MC[0-9]{1,3}): (?:(?P<n>[0-9]{1,9}) )?(?P<kind>CE|UE)\b"
                   r"(?P<rest>.{0,400})")
_DIMM = re.compile(r"label \"(?P<label>[^\"]{1,64})\"|\bon (?P<loc>[\w#]{0,64}DIMM[\w#]{0,24})"
                   r"|DIMM location: (?P<ghes>[^\n]{1,120})|\b(?P<name>DIMM[_ #-]?[\w#]{1,16})")
_MCE_BANK = re.compile(r"Bank (?P<bank>[0-9]{1,3}): (?P<status>[0-9a-fA-F]{16})")
_GHES_SEV = re.compile(r"event severity: (?P<sev>\w{1,16})")
_GHES_SECTION = re.compile(r"section_type: (?P<section>[\w /\-]{1,40})")
_HWERR_KEY = re.compile(r"^(?:\{[0-9]{1,6}\})?\[Hardware Error\]:|^mce: \[Hardware Error\]:")


def _dimm(text: str) -> str | None:
    m = _DIMM.search(text)
    if not m:
        return None
    return next(g for g in m.groups() if g).strip()


MEMORY_FAILURE = re.compile(r"^Memory failure:|Uncorrected hardware memory error")
HW_RECORD = re.compile(r"\[Hardware Error\]")


def edac_error(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """An EDAC CE/UE count."""
    details = {"source": "edac", "controller": m.group("mc").strip(),
               "severity": "uncorrected" if m.group("kind") == "UE" else "corrected",
               "count": m.group("n") or "1", "memory": "yes"}
    dimm = _dimm(m.group("rest"))
    if dimm:
        details["dimm"] = dimm
    return make_event(EventKind.HW_ERROR, line, None, details)


def memory_failure(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """A memory failure (hwpoison) or an uncorrected memory error the kernel handled."""
    return make_event(EventKind.HW_ERROR, line, None,
                      {"source": "mce", "severity": "uncorrected", "memory": "yes"})


def hw_record(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """The first line of a machine check or APEI/GHES hardware error record; ``key``
    (the record's line prefix) lets the extractor join the record's later lines."""
    details = {"source": "ghes" if msg.startswith("{") else "mce"}
    key = _HWERR_KEY.match(msg)
    if key:
        details["key"] = key.group(0)
    hw_detail(msg, details)
    return make_event(EventKind.HW_ERROR, line, None, details)


def hw_detail(msg: str, details: dict[str, str]) -> None:
    """What one line of a hardware error record adds (severity, section, DIMM, bank)."""
    low = msg.lower()
    s = _GHES_SEV.search(msg)
    if s:
        sev = s.group("sev").lower()
        details["severity"] = "corrected" if sev in ("corrected", "info") else "uncorrected"
    s = _GHES_SECTION.search(msg)
    if s:
        details["section"] = s.group("section").strip()
        if "memory" in details["section"].lower():
            details["memory"] = "yes"
    b = _MCE_BANK.search(msg)
    if b:
        uncorrected = (int(b.group("status")[0], 16) >> 1) & 1  # MCi_STATUS bit 61 (UC)
        if uncorrected or details.get("severity") != "uncorrected":
            details["severity"] = "uncorrected" if uncorrected else "corrected"
        details["bank"] = b.group("bank")
    if "machine check exception" in low or "fatal machine check" in low:
        details["severity"] = "uncorrected"
    elif "machine check events logged" in low and "severity" not in details:
        details["severity"] = "corrected"
    if "memory" in low and ("memory error" in low or "memory read error" in low):
        details["memory"] = "yes"
    dimm = _dimm(msg)
    if dimm and "dimm" not in details:
        details["dimm"] = dimm


# --- nvidia-peermem / nv_peer_mem --------------------------------------------------------
_PEERMEM = r"(?P<module>nv_peer_mem|nvidia[_\-]peermem)"
PEERMEM_SYMBOL = re.compile(r"^" + _PEERMEM + r": (?P<reason>Unknown symbol [\w]{1,64}"
                            r"(?: \(err -?[0-9]{1,4}\))?|disagrees about version of symbol "
                            r"[\w]{1,64})")
PEERMEM_INSERT = re.compile(r"could not insert '" + _PEERMEM + r"': ?(?P<reason>.{0,160})")
PEERMEM_REGISTER = re.compile(r"^" + _PEERMEM + r":? (?P<reason>.{0,80}?(?:register\w{0,16}|"
                              r"registration)\b.{0,80}?\b(?:fail\w{0,4}|error)\b.{0,60})",
                              re.IGNORECASE)


def peermem_failed(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """nvidia-peermem / nv_peer_mem could not load or register with ib_core."""
    return make_event(EventKind.PEERMEM_LOAD_FAILED, line, None,
                      {"module": m.group("module"), "reason": m.group("reason").strip()})


# --- network links ---------------------------------------------------------------------
MLX5_PORT = re.compile(r"mlx5_core (?P<bus>" + _BUS + r") (?P<dev>[\w\-]{1,32}): Port: "
                       r"(?P<port>[0-9]{1,2}) Link (?P<state>ACTIVE|DOWN)\b")
CARRIER = re.compile(r"(?:^|\s)(?P<ifname>[\w.\-]{1,32}): (?P<state>Lost|Gained) carrier\b")
WATCHDOG = re.compile(r"NETDEV WATCHDOG: (?P<ifname>[\w.\-]{1,32})(?: \((?P<drv>[\w\-]{1,32})"
                      r"\))?: transmit queue (?P<queue>[0-9]{1,5}) timed out")


def tx_timeout(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """A transmit queue timed out (NETDEV WATCHDOG)."""
    details = {"interface": m.group("ifname"), "queue": m.group("queue"),
               "state": "tx-timeout"}
    if m.group("drv"):
        details["driver"] = m.group("drv")
    return make_event(EventKind.LINK_STATE, line, None, details)


def ib_port_state(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """An mlx5 IB port's state change."""
    return make_event(EventKind.MLX5_LINK, line, normalize_bus_id(m.group("bus")), {
        "state": "up" if m.group("state") == "ACTIVE" else "down",
        "device": m.group("dev"), "port": m.group("port")})


def carrier_change(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """A network interface lost or gained its carrier."""
    return make_event(EventKind.LINK_STATE, line, None, {
        "interface": m.group("ifname"), "state": "up" if m.group("state") == "Gained" else "down"})
