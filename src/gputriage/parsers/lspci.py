"""PCI functions from ``lspci`` output, in the shapes people paste.

Handled: ``lspci -vvv -nn -D`` (the collector's form), the same without
``-D`` (domain 0000) or without ``-nn`` (vendor and class inferred from their
names), ``lspci -v -xxx`` (config-space hex dump lines; used only to fill ids
the text lacked), one-liners (``lspci``, ``lspci -nn``, ``lspci | grep -i
nvidia``), ``-vvv`` run as non-root (``Capabilities: <access denied>``), and
text around it: shell prompts, bug-report section headers, markdown ``> ``
quotes and code fences. An excerpt cut from inside a block (no header line,
e.g. only ``LnkCap:``/``LnkSta:``) gives one function with ``address == ""``
and ``raw["headerless"] == "true"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.parsers.pci import PciFunction
from gputriage.text.fields import normalize_bus_id, split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["ACS_REDIRECT", "CLASS_NAMES", "VENDOR_NAMES", "AcsControl", "acs_controls",
           "claim_lspci", "parse_lspci"]

# Vendor names as pci.ids spells them -> vendor id (used when -nn is absent).
VENDOR_NAMES: dict[str, int] = {
    "NVIDIA Corporation": 0x10DE,
    "Mellanox Technologies": 0x15B3,
    "Intel Corporation": 0x8086,
    "Advanced Micro Devices, Inc. [AMD/ATI]": 0x1002,
    "Advanced Micro Devices, Inc. [AMD]": 0x1022,
    "Broadcom / LSI": 0x1000,
    "Broadcom Inc. and subsidiaries": 0x14E4,
    "PLX Technology, Inc.": 0x10B5,
    "ASPEED Technology, Inc.": 0x1A03,
    "Hewlett-Packard Company": 0x103C,
    "Red Hat, Inc.": 0x1AF4,
}

# Class (subclass) names as lspci prints them -> 16-bit class id.
CLASS_NAMES: dict[str, int] = {
    "raid bus controller": 0x0104, "sata controller": 0x0106,
    "serial attached scsi controller": 0x0107, "non-volatile memory controller": 0x0108,
    "ethernet controller": 0x0200, "infiniband controller": 0x0207,
    "network controller": 0x0280, "vga compatible controller": 0x0300,
    "3d controller": 0x0302, "display controller": 0x0380,
    "multimedia audio controller": 0x0401, "audio device": 0x0403,
    "ram memory": 0x0500, "memory controller": 0x0580, "host bridge": 0x0600,
    "isa bridge": 0x0601, "pci bridge": 0x0604, "bridge": 0x0680,
    "communication controller": 0x0780, "iommu": 0x0806, "system peripheral": 0x0880,
    "usb controller": 0x0c03, "smbus": 0x0c05, "serial bus controller": 0x0c80,
    "encryption controller": 0x1080, "signal processing controller": 0x1180,
    "processing accelerators": 0x1200,
}

_QUOTE = re.compile(r"^(?:[ ]{0,3}>[ ]?)+")
_HEADER = re.compile(
    r"^(?P<addr>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])[ \t]+"
    r"(?P<cls>[A-Za-z0-9][^:\[\]]{0,60}?)[ \t]*(?:\[(?P<clsid>[0-9a-fA-F]{4})\])?[ \t]*:"
    r"[ \t]*(?P<desc>.*)$")
_HEXDUMP = re.compile(r"^(?P<off>[0-9a-fA-F]{2,3}):(?P<bytes>(?: [0-9a-fA-F]{2}){1,16})\s*$")
_PROMPT = re.compile(r"^(?:\([^)]{0,40}\)\s*)?(?:\[[^\]]{0,80}\]|[\w.-]{1,64}@[^\s#$]{1,120})?"
                     r"\s*[#$](?:\s|$)")
_FENCE = re.compile(r"^(?:```|~~~)")
_KEYED = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9 _#/.-]{0,40}?):(?:\s+|$)(?P<val>.*)$")
_IDS = re.compile(r"\[(?P<v>[0-9a-fA-F]{4}):(?P<d>[0-9a-fA-F]{4})\]\s*$")
_DEVICE_WORD = re.compile(r"(?:^|\s)Device (?P<d>[0-9a-fA-F]{4})\s*$")
_REV = re.compile(r"\(rev (?P<rev>[0-9a-fA-F]{2})\)")
_PROGIF = re.compile(r"\(prog-if (?P<pi>[0-9a-fA-F]{2})(?: \[[^\]]*\])?\)")
_SPEED = re.compile(r"Speed (?P<v>[0-9]{1,3}(?:\.[0-9]{1,3})?)\s*GT/s(?:\s*\((?P<tag>[a-z]+)\))?")
_WIDTH = re.compile(r"Width x(?P<v>[0-9]{1,2})(?:\s*\((?P<tag>[a-z]+)\))?")
_NUMA_FLAG = re.compile(r"NUMA node (?P<n>-?[0-9]{1,4})")
_IOMMU_FLAG = re.compile(r"IOMMU group (?P<n>[0-9]{1,6})")
_INT = re.compile(r"^\s*(-?[0-9]{1,6})\b")
_BUSES = re.compile(r"primary=(?P<pri>[0-9a-fA-F]{2}),\s*secondary=(?P<sec>[0-9a-fA-F]{2}),"
                    r"\s*subordinate=(?P<sub>[0-9a-fA-F]{2})")
#: the PCI Express capability's device/port type, as lspci names it
_EXPRESS = re.compile(r"Express \(v[0-9]\) (?P<type>Root Port|Upstream Port|Downstream Port|"
                      r"Endpoint|Legacy Endpoint|Root Complex Integrated Endpoint|"
                      r"PCI-Express to PCI/PCI-X Bridge|PCI/PCI-X to PCI-Express Bridge|"
                      r"Root Complex Event Collector)")

# Keys that only lspci prints: enough to recognise a block without its header.
_STRONG = frozenset({"LnkCap", "LnkSta", "LnkCtl", "LnkCap2", "LnkSta2", "LnkCtl2", "DevCap",
                     "DevSta", "DevCtl", "DevCap2", "DevCtl2", "UESta", "CESta", "UEMsk",
                     "CEMsk", "UESvrt", "ACSCap", "ACSCtl", "Kernel driver in use"})
# Keys read from a block even when a paste lost their indentation.
_DETAIL = _STRONG | {"Subsystem", "NUMA node", "Kernel modules", "Physical Slot",
                     "IOMMU group", "Flags", "Capabilities"}
# Keys whose value continues on deeper-indented lines.
_CONTINUED = frozenset({"LnkCap", "LnkSta", "UESta", "CESta", "UEMsk", "CEMsk", "UESvrt"})
_MAX_CONTINUATION = 8  # real AER status lines wrap over at most a few lines
_RAW_KEYS = {"LnkCap": "lnkcap", "LnkSta": "lnksta", "LnkCap2": "lnkcap2", "UESta": "uesta",
             "CESta": "cesta", "Subsystem": "subsystem", "Kernel modules": "kernel_modules",
             "Physical Slot": "physical_slot", "DevSta": "devsta", "ACSCtl": "acsctl"}


@dataclass
class _Block:
    """Lines gathered for one function (``header`` None for a headerless excerpt)."""

    header: re.Match[str] | None
    indent: int
    values: dict[str, str] = field(default_factory=dict)
    capabilities: list[str] = field(default_factory=list)
    config: dict[int, int] = field(default_factory=dict)
    cont_key: str | None = None
    cont_indent: int = 0
    cont_lines: int = 0

    def add(self, indent: int, text: str) -> None:
        """Record one detail line (a ``Key: value`` or a continuation)."""
        if self.cont_key is not None and indent > self.cont_indent:
            if self.cont_lines < _MAX_CONTINUATION:
                self.values[self.cont_key] += " " + text
                self.cont_lines += 1
            return
        self.cont_key = None
        m = _KEYED.match(text)
        if not m:
            return
        key, val = m.group("key"), m.group("val").strip()
        if key == "Capabilities":
            self.capabilities.append(val)
            return
        if key in self.values:
            return
        self.values[key] = val
        if key in _CONTINUED:
            self.cont_key, self.cont_indent, self.cont_lines = key, indent, 0

    def add_hex(self, m: re.Match[str]) -> None:
        """Record one config-space hex dump line."""
        off = int(m.group("off"), 16)
        for i, b in enumerate(m.group("bytes").split()):
            self.config.setdefault(off + i, int(b, 16))


def _indent(line: str) -> int:
    stripped = line.lstrip(" \t")
    return len(line[: len(line) - len(stripped)].expandtabs(8))


def _key(text: str) -> str | None:
    m = _KEYED.match(text)
    return m.group("key") if m else None


def _blocks(text: str) -> list[_Block]:
    out: list[_Block] = []
    cur: _Block | None = None
    for raw_line in split_lines(text):
        line = _QUOTE.sub("", raw_line).rstrip()
        body = line.lstrip(" \t")
        if not body:
            continue
        indent = _indent(line)
        head = _HEADER.match(body)
        if head:
            cur = _Block(head, indent)
            out.append(cur)
            continue
        hexm = _HEXDUMP.match(body)
        if hexm:
            if cur is not None:
                cur.add_hex(hexm)
            continue
        if _FENCE.match(body) or _PROMPT.match(body):
            cur = None
            continue
        key = _key(body)
        if cur is not None and (indent > cur.indent or key in _DETAIL):
            cur.add(indent, body)
            continue
        cur = None
        if key in _STRONG:
            cur = _Block(None, 0)
            out.append(cur)
            cur.add(indent, body)
    return out


def _vendor_by_name(desc: str) -> tuple[int | None, str]:
    """(vendor id, rest of the text) for a description starting with a known vendor name."""
    for name in sorted(VENDOR_NAMES, key=len, reverse=True):
        if desc == name or desc.startswith(name + " "):
            return VENDOR_NAMES[name], desc[len(name):].strip()
    return None, desc


def _ids(desc: str) -> tuple[int | None, int | None, str]:
    """(vendor, device, name text) of ``Vendor Name [vvvv:dddd]`` or ``... Device dddd``."""
    m = _IDS.search(desc)
    if m:
        return int(m.group("v"), 16), int(m.group("d"), 16), desc[: m.start()].strip()
    vendor, rest = _vendor_by_name(desc)
    d = _DEVICE_WORD.search(rest) if vendor is not None else _DEVICE_WORD.search(desc)
    return vendor, (int(d.group("d"), 16) if d else None), desc


def _speed(text: str) -> tuple[str | None, str | None]:
    m = _SPEED.search(text)
    if not m:
        return None, None
    return f"{float(m.group('v')):.1f} GT/s PCIe", m.group("tag")


def _width(text: str) -> tuple[int | None, str | None]:
    m = _WIDTH.search(text)
    return (int(m.group("v")), m.group("tag")) if m else (None, None)


def _set_flags(text: str) -> str:
    """Comma list of the ``Name+`` flags of an AER status line."""
    return ",".join(w[:-1] for w in text.split() if w.endswith("+") and len(w) > 1)


def _int(text: str | None) -> int | None:
    m = _INT.match(text) if text is not None else None
    return int(m.group(1)) if m else None


def _header_fields(fn: PciFunction, head: re.Match[str]) -> None:
    desc = head.group("desc").strip()
    fn.raw["header"] = head.string.strip()
    progif = 0
    pm = _PROGIF.search(desc)
    if pm:
        progif = int(pm.group("pi"), 16)
        fn.raw["prog_if"] = pm.group("pi").lower()
        desc = (desc[: pm.start()] + desc[pm.end():]).strip()
    rm = _REV.search(desc)
    if rm:
        fn.raw["revision"] = rm.group("rev").lower()
        desc = (desc[: rm.start()] + desc[rm.end():]).strip()
    cls_name = head.group("cls").strip()
    fn.raw["class_name"] = cls_name
    cls = (int(head.group("clsid"), 16) if head.group("clsid")
           else CLASS_NAMES.get(cls_name.lower()))
    if cls is not None:
        fn.class_code = (cls << 8) | progif
    fn.vendor, fn.device, name = _ids(desc)
    if name:
        fn.raw["description"] = name


def _config_fields(fn: PciFunction, cfg: dict[int, int]) -> None:
    """Fill ids still unknown from a ``-xxx`` config-space dump."""
    def word(off: int) -> int | None:
        lo, hi = cfg.get(off), cfg.get(off + 1)
        return None if lo is None or hi is None else lo | (hi << 8)

    vendor = word(0)
    if vendor is None or vendor == 0xFFFF:
        return
    if fn.vendor is None:
        fn.vendor = vendor
    if fn.device is None:
        fn.device = word(2)
    if fn.class_code is None and all(o in cfg for o in (9, 10, 11)):
        fn.class_code = (cfg[11] << 16) | (cfg[10] << 8) | cfg[9]
    if cfg.get(0x0E, 0xFF) & 0x7F == 0:  # type 0 header: subsystem ids at 0x2c
        if fn.subsystem_vendor is None:
            fn.subsystem_vendor = word(0x2C)
        if fn.subsystem_device is None:
            fn.subsystem_device = word(0x2E)


def _link_fields(fn: PciFunction, values: dict[str, str]) -> None:
    cap, sta = values.get("LnkCap"), values.get("LnkSta")
    if cap is not None:
        fn.max_link_speed, _ = _speed(cap)
        fn.max_link_width, _ = _width(cap)
    if sta is not None:
        fn.current_link_speed, s_tag = _speed(sta)
        fn.current_link_width, w_tag = _width(sta)
        down = [n for n, t in (("speed", s_tag), ("width", w_tag)) if t == "downgraded"]
        if down:
            fn.raw["lnksta_downgraded"] = ",".join(down)


def _bridge_fields(fn: PciFunction, values: dict[str, str], capabilities: list[str]) -> None:
    """A bridge's bus numbers (``Bus: primary=00, secondary=01, subordinate=04``) and the
    PCI Express port type (``Express (v2) Root Port``): what rebuilds the tree."""
    buses = _BUSES.search(values.get("Bus", ""))
    if buses:
        fn.raw["primary_bus"] = buses.group("pri").lower()
        fn.raw["secondary_bus"] = buses.group("sec").lower()
        fn.raw["subordinate_bus"] = buses.group("sub").lower()
    for cap in capabilities:
        m = _EXPRESS.search(cap)
        if m:
            fn.raw["express_type"] = m.group("type")
            break


def _build(block: _Block) -> PciFunction:
    v = block.values
    if block.header is None:
        fn = PciFunction(address="", raw={"headerless": "true"})
    else:
        fn = PciFunction(address=normalize_bus_id(block.header.group("addr")) or "")
        _header_fields(fn, block.header)
    sub = v.get("Subsystem")
    if sub:
        fn.subsystem_vendor, fn.subsystem_device, _ = _ids(sub)
    fn.numa_node = _int(v.get("NUMA node"))
    flags = v.get("Flags", "")
    nm = _NUMA_FLAG.search(flags)
    if fn.numa_node is None and nm:
        fn.numa_node = int(nm.group("n"))
    im = _IOMMU_FLAG.search(flags)
    iommu = _int(v.get("IOMMU group")) if "IOMMU group" in v else (
        int(im.group("n")) if im else None)
    if iommu is not None:
        fn.raw["iommu_group"] = str(iommu)
    fn.driver = v.get("Kernel driver in use") or None
    _link_fields(fn, v)
    for key, name in _RAW_KEYS.items():
        if key in v:
            fn.raw[name] = v[key]
    for key in ("UESta", "CESta"):
        if key in v:
            fn.raw[key.lower() + "_set"] = _set_flags(v[key])
    if any("<access denied>" in c for c in block.capabilities):
        fn.raw["capabilities"] = "access denied"
    _bridge_fields(fn, v, block.capabilities)
    if block.config:
        _config_fields(fn, block.config)
    return fn


def _merge(into: PciFunction, other: PciFunction) -> None:
    """Fill ``into``'s unknown fields from a second block of the same address."""
    for name in ("vendor", "device", "class_code", "subsystem_vendor", "subsystem_device",
                 "numa_node", "current_link_speed", "max_link_speed", "current_link_width",
                 "max_link_width", "driver"):
        if getattr(into, name) is None:
            setattr(into, name, getattr(other, name))
    for k, val in other.raw.items():
        into.raw.setdefault(k, val)


def parse_lspci(text: str) -> list[PciFunction]:
    """Parse ``lspci`` output into PCI functions, in the order first seen.

    Blocks for the same address (e.g. a ``lspci -nn`` listing pasted above a
    ``lspci -vvv`` one) are merged. Link speeds are written sysfs-style
    (``"32.0 GT/s PCIe"``); lspci-only data goes in ``raw``: ``header``,
    ``class_name``, ``description``, ``revision``, ``prog_if``, ``subsystem``,
    ``lnkcap``, ``lnksta``, ``lnksta_downgraded`` (``speed``/``width``/
    ``speed,width``), ``uesta``/``cesta`` and their ``+`` flags
    (``uesta_set``/``cesta_set``), ``kernel_modules``, ``physical_slot``,
    ``iommu_group``, ``capabilities`` (``access denied`` for non-root output), and for
    bridges ``primary_bus``/``secondary_bus``/``subordinate_bus`` (two hex digits) and
    ``express_type`` (``Root Port``, ``Upstream Port``, ``Downstream Port``, ``Endpoint``...).

    Empty or whitespace text gives []; text holding no lspci block raises
    ParseError.
    """
    if not text.strip():
        return []
    blocks = _blocks(text)
    if not blocks:
        raise ParseError("no lspci device block found (expected lines like "
                         "'0000:18:00.0 3D controller: NVIDIA Corporation ...')")
    out: list[PciFunction] = []
    seen: dict[str, PciFunction] = {}
    for block in blocks:
        fn = _build(block)
        if fn.address and fn.address in seen:
            _merge(seen[fn.address], fn)
            continue
        if fn.address:
            seen[fn.address] = fn
        out.append(fn)
    return out


# --- Access Control Services ---------------------------------------------------------
#: ACS controls that send peer-to-peer requests and completions up to the root complex
#: (SrcValid+ alone is what NCCL's troubleshooting guide tells to look for)
ACS_REDIRECT = ("SrcValid", "ReqRedir", "CmpltRedir")
_ACSCTL = re.compile(r"^\s*ACSCtl:\s*(?P<flags>.*?)\s*$")
_ACS_FLAG = re.compile(r"\b(?P<name>[A-Za-z]+)(?P<on>[+-])")


@dataclass(frozen=True)
class AcsControl:
    """One ``ACSCtl:`` line of ``lspci -vvv``: the function it belongs to ("" when the
    paste has no header above it, as ``lspci -vvv | grep ACSCtl`` prints) and the
    controls it has on."""

    address: str
    header: str
    line: str
    enabled: frozenset[str]

    @property
    def redirects(self) -> bool:
        """Peer traffic below this port is validated or redirected upstream."""
        return bool(self.enabled & set(ACS_REDIRECT))


def acs_controls(text: str) -> list[AcsControl]:
    """Every ``ACSCtl:`` line of an lspci paste, with the function header above it."""
    out: list[AcsControl] = []
    address, header = "", ""
    for raw_line in split_lines(text):
        line = _QUOTE.sub("", raw_line).rstrip()
        head = _HEADER.match(line.lstrip(" \t"))
        if head:
            address = normalize_bus_id(head.group("addr")) or ""
            header = line.strip()
            continue
        m = _ACSCTL.match(line)
        if m:
            on = frozenset(f.group("name") for f in _ACS_FLAG.finditer(m.group("flags"))
                           if f.group("on") == "+")
            out.append(AcsControl(address, header, line.strip(), on))
    return out


# --- recognising it in a paste -------------------------------------------------------
_HEAD = re.compile(r"^\s*(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] [^:]+:")
_BODY = re.compile(r"^\s+\S|^\s*$")
_NVIDIA = re.compile(r"NVIDIA|\[10de:")
_MELLANOX = re.compile(r"Mellanox|\[15b3:")
_LINK_LINE = re.compile(r"^\s*(?:LnkCap|LnkSta|LnkCtl|DevSta|UESta|CESta|ACSCtl)2?:\s")
_ACS_LINE = re.compile(r"^\s*ACSCtl:\s")
_BRIDGE_HEAD = re.compile(r"\sPCI bridge(?: \[0604\])?:")
_PORT_LINE = re.compile(r"^\s*(?:LnkSta:|Capabilities: \[[0-9a-fA-F]+\] Express \(v[0-9]\) "
                        r"(?:Root|Upstream|Downstream) Port)")


# a block starts at a free line with a function's header; an excerpt at a link line
_HEAD_GATE = Gate(searches=(re.compile(r":(?<=[0-9a-fA-F]{2}:)[0-9a-fA-F]{2}\.[0-7] [^:\n]+:"),),
                  test=_HEAD.match)
_LINK_GATE = Gate(_LINK_LINE)


def _body_line(line: str) -> bool:
    return bool(_BODY.match(line)) and not _HEAD.match(line)


def _claim_functions(doc: PasteDoc) -> None:
    if not _HEAD_GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and _HEAD.match(ln)):
            continue
        e = doc.extend(i + 1, _body_line)
        if _NVIDIA.search(ln):
            doc.claim("lspci_nvidia", i, e)
        elif _MELLANOX.search(ln):
            doc.claim("lspci_mellanox", i, e)
        elif any(_ACS_LINE.match(x) for x in doc.lines[i + 1:e]):
            doc.claim("lspci_nvidia", i, e)  # a bridge on the GPUs' paths: its ACS controls
        elif _BRIDGE_HEAD.search(ln) and any(_PORT_LINE.match(x) for x in doc.lines[i + 1:e]):
            doc.claim("lspci_nvidia", i, e)  # a PCIe port: a hop of the path to a device


def _claim_excerpt(doc: PasteDoc) -> None:
    """An lspci excerpt without its device header (the LnkCap/LnkSta lines people
    paste): the indented run around those lines, as ``lspci_nvidia``."""
    if not _LINK_GATE.open(doc):
        return
    if any(o in ("lspci_nvidia", "lspci_mellanox") for o in doc.owner):
        return
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and _LINK_LINE.match(ln)):
            continue
        start = i
        while start > 0 and doc.free(start - 1) and doc.lines[start - 1][:1].isspace():
            start -= 1
        end = doc.extend(i + 1, lambda s: bool(s.strip()) and s[:1].isspace())
        doc.claim("lspci_nvidia", start, end)


@gated_by(_HEAD_GATE, _LINK_GATE)
def claim_lspci(doc: PasteDoc) -> None:
    """``lspci -vvv`` blocks of NVIDIA and Mellanox functions and of bridges that show
    their ACS controls or their PCIe port's link, else an excerpt of link or ACSCtl
    lines."""
    _claim_functions(doc)
    _claim_excerpt(doc)
