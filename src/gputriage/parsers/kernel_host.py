"""Host-side kernel-log events beside the NVIDIA driver's own: PCIe AER details and
the drivers' recovery lines, EDAC / MCE / APEI (GHES) hardware errors, nvidia-peermem
and nv_peer_mem load failures, network link state (mlx5 netdev and IB port states,
carrier changes, NETDEV WATCHDOG) and storage failures (block-device I/O errors, NVMe
controller resets, md disk failures, XFS / ext4 errors).

The patterns and builders of these kinds' rows in :data:`gputriage.parsers.
kernel_table.EVENTS` (which tries each pattern only after a literal test on the
message), and the helpers that add a report's or record's later lines. Every
pattern is bounded."""

from __future__ import annotations

import re

from gputriage.parsers.kernel_model import DriverEvent, LogLine, make_event
from gputriage.text.fields import normalize_bus_id
from gputriage.vocabulary import EventKind

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


# Interface name prefixes of what containers, bridges, overlays, tunnels and VPNs create
# and remove as they come and go (veth pairs, docker/podman/CNI/LXC bridges, Calico,
# Flannel, Cilium, Weave, VXLAN/Geneve, tun/tap, GRE/IPIP/SIT, WireGuard, Tailscale,
# ZeroTier, Cloudflare WARP, libvirt, dummy, loopback and its aliases): their carrier
# changes are churn, not a cable, and traffic between nodes over them is not the fabric's.
VIRTUAL_IFNAME = re.compile(
    r"(?:lo(?::.*)?$|veth|docker|podman|br-|virbr|cni|cali|flannel|vxlan|genev|tunl|tun|tap|"
    r"lxc|lxdbr|cilium|kube-|weave|wg|tailscale|cloudflarewarp|vnet|dummy|nodelocaldns|gre|"
    r"ipip|sit|zt)", re.IGNORECASE)


def is_virtual_interface(name: str) -> bool:
    """Whether ``name`` is a virtual interface (container, bridge, overlay, tunnel, VPN,
    loopback)."""
    return VIRTUAL_IFNAME.match(name) is not None


def carrier_change(line: LogLine, msg: str, m: Match) -> DriverEvent | list[DriverEvent]:
    """A network interface lost or gained its carrier (none for a virtual interface:
    a container's veth coming and going is not a link)."""
    if is_virtual_interface(m.group("ifname")):
        return []
    return make_event(EventKind.LINK_STATE, line, None, {
        "interface": m.group("ifname"), "state": "up" if m.group("state") == "Gained" else "down"})


# --- storage ---------------------------------------------------------------------------
# The block layer's request errors: "blk_update_request: I/O error, dev nvme2n1, sector
# 264192 op 0x1:(WRITE) flags ..." (before 5.14: print_req_error / end_request / blk_
# update_request prefixes; after: the line alone), "critical medium error, dev sdb, ..."
BLOCK_ERROR = re.compile(r"(?:^|: )(?P<what>I/O|critical medium|critical target|critical "
                         r"nexus|critical space allocation|timeout|protection) error, dev "
                         r"(?P<dev>[\w.\-]{1,32}), sector (?P<sector>[0-9]{1,20})"
                         r"(?: op 0x[0-9a-fA-F]{1,4}:\((?P<op>[A-Z_]{1,24})\))?")
BUFFER_ERROR = re.compile(r"Buffer I/O error on dev(?:ice)? (?P<dev>[\w.\-]{1,32}), logical "
                          r"block [0-9]{1,20}(?:, (?P<op>lost async page write|async page read|"
                          r"lost sync page write))?")
# XFS and ext4 failures that stop or cripple a filesystem
FS_ERROR = re.compile(
    r"^(?:XFS \((?P<xfs>[\w.\-]{1,32})\): (?P<xmsg>(?:log|metadata) I/O error.{0,80}|"
    r"Log I/O Error Detected.{0,60}|.{0,60}[Ss]hutting down filesystem.{0,20}|Filesystem has "
    r"been shut down.{0,60}|Corruption .{0,80}detected.{0,60})"
    r"|EXT4-fs error \(device (?P<ext>[\w.\-]{1,32})\): (?P<emsg>.{0,120})"
    r"|EXT4-fs \((?P<ro>[\w.\-]{1,32})\): (?P<rmsg>Remounting filesystem read-only)"
    r"|Aborting journal on device (?P<jdev>[\w.\-]{1,32}))")
NVME_ERROR = re.compile(
    r"^nvme (?P<ctrl>nvme[0-9]{1,4}): (?P<what>controller is down; will reset|Device not ready; "
    r"aborting (?:reset|initialisation)|Removing after probe failure|I/O [0-9]{1,8} QID [0-9]{1,4} "
    r"timeout, (?:aborting|reset controller)|Abort status: 0x[0-9a-fA-F]{1,4}|Disabling device "
    r"after reset failure)")
MD_FAILURE = re.compile(r"^md/raid[0-9]{1,2}:(?P<md>md[\w]{1,16}): Disk failure on (?P<dev>[\w.\-]"
                        r"{1,32}), disabling device")
_DISK = re.compile(r"(?:(?P<nvme>nvme[0-9]{1,4}n[0-9]{1,4}|mmcblk[0-9]{1,4}|nbd[0-9]{1,4}|loop[0-9]"
                   r"{1,4})"
                   r"(?:p[0-9]{1,3})?|(?P<sd>(?:[shv]|xv)d[a-z]{1,3})[0-9]{0,3})(?:-[0-9]{1,3})?")


# floppy and optical drives (a VM's empty virtual floppy or CD-ROM fails every probe of
# it: "I/O error, dev fd0, sector 0", "Buffer I/O error on dev sr0"): not the node's disks
_REMOVABLE = re.compile(r"(?:fd|sr|scd)[0-9]{1,3}")


def _disk(dev: str) -> str:
    """The disk a partition or journal device is on: nvme2n1p1 -> nvme2n1, sda1-8 -> sda."""
    m = _DISK.fullmatch(dev)
    return (m.group("nvme") or m.group("sd")) if m else dev


def _storage(line: LogLine, details: dict[str, str]) -> DriverEvent:
    return make_event(EventKind.STORAGE_ERROR, line, None,
                      {k: v for k, v in details.items() if v})


def block_error(line: LogLine, msg: str, m: Match) -> DriverEvent | list[DriverEvent]:
    """A block request that failed on a disk: read or write, and what kind of error (none
    for a floppy or optical drive)."""
    if _REMOVABLE.fullmatch(m.group("dev")):
        return []
    op = (m.group("op") or "").lower()
    return _storage(line, {"layer": "block", "device": _disk(m.group("dev")),
                           "error": m.group("what").lower(),
                           "op": "write" if "write" in op else "read" if "read" in op else ""})


def buffer_error(line: LogLine, msg: str, m: Match) -> DriverEvent | list[DriverEvent]:
    """A page-cache buffer that could not be read or written back (none for a floppy or
    optical drive)."""
    if _REMOVABLE.fullmatch(m.group("dev")):
        return []
    op = m.group("op") or ""
    return _storage(line, {"layer": "block", "device": _disk(m.group("dev")), "error": "i/o",
                           "op": "write" if "write" in op else "read" if "read" in op else ""})


def fs_error(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """An XFS or ext4 failure: I/O errors on its log or metadata, a shutdown, a journal
    aborted, a remount read-only."""
    g = m.groupdict()
    dev = g["xfs"] or g["ext"] or g["ro"] or _disk(g["jdev"] or "")
    text = g["xmsg"] or g["emsg"] or g["rmsg"] or "journal aborted"
    return _storage(line, {"layer": "fs", "device": dev, "fs": "xfs" if g["xfs"] else "ext4",
                           "error": " ".join(text.split())[:80]})


def nvme_error(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """An NVMe controller that went down, timed out, or was removed."""
    what = m.group("what")
    return _storage(line, {"layer": "nvme", "device": m.group("ctrl"),
                           "error": "timeout" if "timeout" in what or "Abort" in what
                           else "controller"})


def md_failure(line: LogLine, msg: str, m: Match) -> DriverEvent:
    """An md array that dropped a failed member disk."""
    return _storage(line, {"layer": "md", "device": m.group("md"),
                           "failed": _disk(m.group("dev")), "error": "disk failure"})
