"""The compiled regular expressions behind :mod:`gputriage.logscan.events`:
kernel-log line prefixes (timestamps, hosts, levels) and NVIDIA-relevant message
shapes, with the small pure helpers that only apply them."""

from __future__ import annotations

import re
from collections.abc import Callable

from gputriage.text.fields import normalize_bus_id

# --- line prefixes ----------------------------------------------------------------------

QUOTE = re.compile(r"^\s{0,8}(?:>\s?){1,8}")
_LEVEL = re.compile(r"^<[0-9]{1,3}>")
_TALOS = re.compile(r"^\S{1,255}: kern:\s{1,4}[a-z]{1,10}: \[(?P<ts>[^\]]{1,64})\]:?\s?")
_FACILITY = re.compile(r"^[a-z]{2,8}\s{0,3}:[a-z]{2,7}\s{0,3}: ")  # dmesg -x
_SYSLOG = re.compile(
    r"^(?P<ts>(?:[A-Z][a-z]{2} [ 0-9]?[0-9]|"
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ])\s?[0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(?:[.,][0-9]{1,9})?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)\s{1,4}")
_LOGREAD = re.compile(r"^(?P<ts>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ 0-9]?[0-9] "
                      r"[0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}) [a-z]{2,8}\.[a-z]{2,8} ")  # logread
_HOST_KERNEL = re.compile(r"^\S{1,255} kernel: ?")
_KERNEL_TAG = re.compile(r"^kernel: ?")
_BRACKET = re.compile(r"^\[(?P<ts>\s{0,12}\+?[0-9]{1,12}\.[0-9]{1,9}|[A-Z][a-z]{2} [A-Z][a-z]{2}"
                      r" [ 0-9]?[0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}|"
                      r"[A-Z][a-z]{2}\s?[0-9]{1,2} [0-9]{2}:[0-9]{2})"
                      r"\]\s?")  # dmesg, dmesg -T, dmesg -H ("[Feb12 11:47]", "[  +0.000844]")
_ANSI = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")

# (name, pattern, a cheap test a line must pass for the pattern to be tried at all)
PREFIXES: tuple[tuple[str, re.Pattern[str], Callable[[str], bool]], ...] = (
    ("level", _LEVEL, lambda t: t[:1] == "<"),
    ("talos", _TALOS, lambda t: "kern:" in t),
    ("facility", _FACILITY, lambda t: t[:1].islower() and ":" in t[2:12]),
    ("logread", _LOGREAD, lambda t: t[:1].isupper() and t[19:24].strip().isdigit()),
    ("syslog", _SYSLOG, lambda t: t[:1].isupper() or t[:1].isdigit()),
    ("host", _HOST_KERNEL, lambda t: "kernel:" in t),
    ("kernel", _KERNEL_TAG, lambda t: t[:7] == "kernel:"),
    ("bracket", _BRACKET, lambda t: t[:1] == "["),
    ("host", _HOST_KERNEL, lambda t: "kernel:" in t))


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour escapes."""
    return _ANSI.sub("", text)


# (pattern, whether it has a ``ts`` group) per row of PREFIXES
_TRIES = tuple((name, pattern, may, "ts" in pattern.groupindex) for name, pattern, may in PREFIXES)
_AFTER_HOST = _TRIES[[name for name, _, _ in PREFIXES].index("host") + 1:]
# The usual journalctl / syslog line: PREFIXES' syslog row, then its host row, as one
# pattern (the same spans: a stamp that ``\s{1,4}`` and a host's ``\S`` follow ends in one
# place only). Rows before them never match a line it applies to (see _syslog_host).
_SYSLOG_HOST = re.compile(_SYSLOG.pattern + _HOST_KERNEL.pattern.removeprefix("^"))
_WEEKDAYS = frozenset(("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"))


def _syslog_host(text: str) -> re.Match[str] | None:
    """The syslog and host rows' match of ``text`` when no row before them applies (the
    level, talos, facility and logread rows need a "<", "kern:", a lower-case first
    letter and a weekday first) and both match; None: try every row."""
    first = text[:1]
    if not (first.isdigit() or (first.isupper() and text[:3] not in _WEEKDAYS)):
        return None
    if "kern:" in text:
        return None
    return _SYSLOG_HOST.match(text)


def split_prefix(raw: str) -> tuple[tuple[str, ...], str, tuple[str, ...]]:
    """A line's printed timestamps (outermost first), its message text, and the
    names of the prefixes found (``talos``, ``syslog``, ``host``, ``bracket`` ...)."""
    text = raw.strip()
    if "\x1b" in text:  # dmesg --color / journalctl colour escapes
        text = strip_ansi(text)
    m = QUOTE.match(text) if text[:1] == ">" else None  # stripped: only ">" can lead
    if m:
        text = text[m.end():].lstrip()
    m = _syslog_host(text)
    if m is not None:
        stamps = [m.group("ts").strip()]
        tags = ["syslog", "host"]
        text = text[m.end():]
        tries = _AFTER_HOST
    else:
        stamps = []
        tags = []
        tries = _TRIES
    for name, pattern, may, stamped in tries:
        if not may(text):
            continue
        m = pattern.match(text)
        if m:
            if stamped:
                ts = m.group("ts")
                if ts:
                    stamps.append(ts.strip())
            tags.append(name)
            text = text[m.end():]
    return tuple(stamps), text.strip(), tuple(tags)


# --- event patterns ---------------------------------------------------------------------

_BUS = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
XID = re.compile(r"(?<![A-Za-z])Xid\s{0,4}\((?:PCI:)?(?P<bus>[^)]{0,40})\):\s{0,4}"
                  r"(?P<code>[0-9]{1,5})\b,?\s{0,4}(?P<rest>.*)")
SXID = re.compile(r"SXid\s{0,4}\((?:PCI:)?(?P<bus>[^)]{0,40})\):\s{0,4}(?P<code>[0-9]{1,6})\b,?"
                   r"\s{0,4}(?P<rest>.*)")
_SWITCH = re.compile(r"(?P<sw>nvidia-nvswitch(?P<num>[0-9]{1,3}))")
_SXID_SEV = re.compile(r"^(?P<sev>Fatal|Non-?fatal|NonFatal)\b,?\s{0,4}(?:Link\s{1,4}"
                       r"(?P<link>[0-9]{1,4}))?", re.IGNORECASE)
SXID_CONT = re.compile(r"^(?:Severity\s{1,4}(?P<lvl>[0-9]{1,3})\s{1,4}Engine instance\s{1,4}"
                        r"(?P<eng>[0-9]{1,4})(?:\s{1,4}Sub-engine instance\s{1,4}"
                        r"(?P<sub>[0-9]{1,4}))?"
                        r"|Data\s{0,4}(?P<data>\{[^}]{0,400}\}?))")
_XID_PID = re.compile(r"^pid=(?P<pid>'?[^,']{0,32}'?),\s?")
_XID_NAME = re.compile(r"^name=(?P<name>[^,]{0,64}),\s?")
_CHANNEL = re.compile(r"(?:\bChId|\bCh|\bchannel|\bChannel ID)\s{1,4}(?P<ch>0x[0-9a-fA-F]{1,8}"
                      r"|[0-9a-fA-F]{4,8})\b")
_CAUSED_BY = re.compile(r"caused by previous Xid\s{0,4}(?P<code>[0-9]{1,5})")
_RECOVERY = re.compile(r"recovery action changed from\s{0,4}(?P<from_code>0x[0-9a-fA-F]{1,8})"
                       r"\s{0,4}\((?P<from>[^)]{0,64})\)\s{0,4}to\s{0,4}"
                       r"(?P<to_code>0x[0-9a-fA-F]{1,8})\s{0,4}\((?P<to>[^)]{0,64})\)")
_NVLINK5 = re.compile(r"^(?P<unit>[A-Z][A-Z0-9_]{1,40})\s{1,8}(?P<sev>Fatal|Non-?fatal|NonFatal)"
                      r"\s{1,8}(?P<xc>XC[0-9]{1,3})\s{1,8}(?P<inst>i[0-9]{1,3})\s{1,8}Link\s{1,8}"
                      r"(?P<link>-?[0-9]{1,4})\s{0,8}\((?P<intr>0x[0-9a-fA-F]{1,8})?",
                      re.IGNORECASE)
LINK = re.compile(r"\b[Ll]ink\s{1,4}(?P<link>-?[0-9]{1,4})\b")
_GPU_INDEX = re.compile(r"\bGPU(?P<idx>[0-9]{1,3})\b")
_GPU_BUS = re.compile(r"\bGPU (?:at (?:PCI:)?)?(?P<bus>" + _BUS + ")")
_AT_PCI = re.compile(r"\bat PCI:(?P<bus>" + _BUS + ")")
DEV_BUS = re.compile(r"^[\w\-]{1,32} (?P<bus>" + _BUS + r")(?::| [\w.\-]{1,32}:) ")
RMINIT = re.compile(r"RmInitAdapter failed! \((?P<code>0x[0-9a-fA-F]{1,8}:0x[0-9a-fA-F]{1,8}"
                     r":[0-9]{1,6})\)")
FW_LOAD = re.compile(r"Direct firmware load for (?P<file>nvidia/(?:(?P<ver>[0-9.]{1,20})/)?"
                      r"[\w.\-]{1,64}) failed with error (?P<err>-?[0-9]{1,5})")
_VER = r"([0-9]{1,4}(?:\.[0-9]{1,4}){0,3})"
_MISMATCH_CLIENT = re.compile(r"API mismatch: the client '([^']{0,64})'(?: \(pid ([0-9]{1,10})\))?")
_MISMATCH_CLIENT_VERSION = re.compile(r"has the version " + _VER + r",? but")
_MISMATCH_KERNEL_VERSION = re.compile(r"kernel module has the version " + _VER)
FALLEN_HEAD = re.compile(r"NVRM: The NVIDIA GPU (?P<bus>" + _BUS + ")")
PCI_ID = re.compile(r"\(PCI ID: (?P<id>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\)")
MODPROBE = re.compile(r"could not insert '(?P<module>nvidia[\w\-]{0,32})': ?(?P<reason>.{0,200})")
UDEV_MODPROBE = re.compile(r"Process '\S{0,64}modprobe (?P<module>nvidia[\w\-]{0,32})' failed "
                            r"with exit code (?P<code>[0-9]{1,4})")
SYMBOL = re.compile(r"^(?P<module>nvidia[\w\-]{0,32}): (?P<reason>Unknown symbol .{0,200}|"
                     r"disagrees about version of symbol .{0,200})")
NVRM_TEXT = re.compile(r"^NVRM:\s?")


def nvrm_text(texts: list[str]) -> str:
    """The text of a message's lines without their ``NVRM:`` tags."""
    return " ".join(NVRM_TEXT.sub("", t).strip() for t in texts)


_FUNCTION = re.compile(r"^(?:NVRM:\s{0,4})?(?:GPU[0-9]{1,3}\s{1,4})?(?P<fn>[A-Za-z_]\w{2,80}):")
RPC_TIMEOUT = re.compile(r"Timeout after (?P<secs>[0-9]{1,6})s of waiting for RPC response")
RPC_FUNCTION = re.compile(r"Expected function (?P<num>[0-9]{1,6}) \((?P<name>\w{1,64})\)")
GSP_FAILURE = re.compile(r"fail|error|exception|crash|fault|assert|cannot|health ?check",
                          re.IGNORECASE)
NVLINK_FAILURE = re.compile(r"error|fatal|fail|\bdown\b", re.IGNORECASE)
AER_RECEIVED = re.compile(
    r"(?P<sev>(?:Multiple )?(?:Corrected|Uncorrected \((?:Non-)?Fatal\))) error received:?"
    r"\s{0,4}(?:(?P<bus>" + _BUS + r")|id=(?P<id>[0-9a-fA-F]{4}))?")
AER_BUS_ERROR = re.compile(r"PCIe Bus Error: severity=(?P<sev>[^,]{1,40}),\s{0,4}"
                            r"type=(?P<type>[^,]{1,40})(?:,\s{0,4}\(?(?P<agent>[^)]{1,40})\)?)?")
BANDWIDTH = re.compile(r"(?P<avail>[0-9.]{1,12} [GM]b/s) available PCIe bandwidth, limited by "
                        r"(?P<limit>[0-9.]{1,8} GT/s PCIe x[0-9]{1,2}) link at "
                        r"(?P<at>" + _BUS + r")"
                        r"(?: \(capable of (?P<cap>[^)]{1,80})\))?")
MLX5_LINK = re.compile(r"mlx5_core (?P<bus>" + _BUS + r")(?: (?P<ifname>[\w.\-]{1,32}))?: "
                        r"Link (?P<state>up|down)", re.IGNORECASE)
SEGFAULT = re.compile(r"(?P<proc>[^\s\[\]]{1,64})\[(?P<pid>[0-9]{1,10})\]: segfault at "
                       r"(?P<addr>[0-9a-fA-F]{1,16}) ip (?P<ip>[0-9a-fA-F]{1,16})(?:.{0,120}? in "
                       r"(?P<lib>[^\s\[]{1,128})\[)?")
GPU_LIB = re.compile(r"libcuda|libnccl|libnvidia|libcudnn|libcublas|libcudart|libnvrtc|"
                      r"libnvJitLink|libcufft|libcusparse|libcusolver|libcurand|libtorch_cuda|"
                      r"libnvinfer|libdcgm|libnvrm|nvidia", re.IGNORECASE)
HUNG = re.compile(r"INFO: task (?P<proc>.{1,64}?):(?P<pid>[0-9]{1,10}) blocked for more than "
                   r"(?P<secs>[0-9]{1,8}) seconds")
LOCKUP = re.compile(r"soft lockup - CPU#(?P<cpu>[0-9]{1,5}) stuck for (?P<secs>[0-9]{1,8})s! "
                     r"\[(?P<proc>.{1,64}?):(?P<pid>[0-9]{1,10})\]")
NV_FRAME = re.compile(r"\[nvidia[\w\-]{0,16}\]|\bnv_\w|\bos_\w|\b_nv[0-9]{3,8}rm\b|\bnvidia\w{0,16}"
                       r"\+0x|\buvm_\w|\brm_\w")


def bus_near(msg: str, hint: str | None = None) -> str | None:
    m = _GPU_BUS.search(msg) or _AT_PCI.search(msg) or DEV_BUS.match(msg)
    return normalize_bus_id(m.group("bus")) if m else hint


def xid_details(code: str, rest: str) -> dict[str, str]:
    details = {"code": code}
    p = _XID_PID.match(rest)
    if p:
        details["pid"] = p.group("pid").strip("'")
        rest = rest[p.end():]
    n = _XID_NAME.match(rest)
    if n:
        details["process"] = n.group("name")
        rest = rest[n.end():]
    msg = rest.strip()
    details["message"] = msg
    ch = _CHANNEL.search(msg) if "Ch" in msg or "ch" in msg else None  # (its literals first)
    if ch:
        details["channel"] = ch.group("ch")
    c = _CAUSED_BY.search(msg)
    if c:
        details["caused_by"] = c.group("code")
    r = _RECOVERY.search(msg)
    if r:
        details.update(recovery_action=r.group("to").strip(),
                       recovery_action_code=r.group("to_code"),
                       recovery_action_from=r.group("from").strip())
    v = _NVLINK5.match(msg)
    if v:
        details.update(unit=v.group("unit"), severity=v.group("sev"),
                       link=str(int(v.group("link"))))
        if v.group("intr"):
            details["intrinfo"] = v.group("intr")
            if 144 <= int(code) <= 150:
                details["subcode"] = str((int(v.group("intr"), 16) >> 20) & 0x3F)
    elif "link" not in details and "ink" in msg:  # (its literal first: LINK scans slowly)
        lk = LINK.search(msg)
        if lk:
            details["link"] = str(int(lk.group("link")))
    return details


def sxid_details(msg: str, m: re.Match[str]) -> dict[str, str]:
    details = {"code": m.group("code")}
    sw = _SWITCH.search(msg, 0, m.start() + 1)
    if sw:
        details["switch"] = sw.group("sw")
    rest = m.group("rest").strip()
    s = _SXID_SEV.match(rest)
    if s:
        details["severity"] = "Fatal" if s.group("sev").lower() == "fatal" else "Non-fatal"
        if s.group("link"):
            details["link"] = str(int(s.group("link")))
    details["message"] = rest
    return details


def gpu_details(msg: str) -> dict[str, str]:
    details: dict[str, str] = {}
    f = _FUNCTION.match(msg)
    if f and f.group("fn") not in {"NVRM", "GPU"}:
        details["function"] = f.group("fn")
    g = _GPU_INDEX.search(msg)
    if g:
        details["gpu"] = g.group("idx")
    return details


def mismatch_details(joined: str) -> dict[str, str]:
    """Versions (and the client, when named) from a joined API-mismatch message."""
    details: dict[str, str] = {}
    c = _MISMATCH_CLIENT.search(joined)
    if c:
        details["client"] = c.group(1)
        if c.group(2):
            details["client_pid"] = c.group(2)
    for key, pattern in (("client_version", _MISMATCH_CLIENT_VERSION),
                         ("kernel_version", _MISMATCH_KERNEL_VERSION)):
        m = pattern.search(joined)
        if m:
            details[key] = m.group(1)
    return details
