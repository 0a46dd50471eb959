"""NVLink state and error counters: ``nvidia-smi nvlink -s`` and ``nvidia-smi nvlink -e``.

Both print one block per GPU: a header ``GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-...)``
then indented ``Link N: ...`` lines (spaces, or a tab and a space on newer
drivers). ``-s`` gives each link's speed (``25 GB/s``) or ``<inactive>``; when no
link trained NVML prints ``NVML: Unable to retrieve NVLink information as all
links are inactive`` instead. ``-e`` gives ``Link N: <counter>: <value>`` lines
(Replay / Recovery / CRC Errors on most drivers; other counters, throughput
such as ``Tx0`` / ``Data Rx`` and a ``Link N:`` header with indented counters on
others). Pasted outputs often hold elisions (``......``, ``[...]``): a GPU cut
short by one is marked ``truncated``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import ParseError, split_lines, strict_float, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["NvlinkErrorGpu", "NvlinkErrors", "NvlinkGpu", "NvlinkLink", "NvlinkStatus",
           "claim_nvlink", "counter_kind", "parse_nvlink_errors", "parse_nvlink_status"]

_GPU = re.compile(r"^\s{0,8}GPU\s{1,4}(?P<index>[0-9]{1,4})\s{0,4}:\s{0,4}(?P<name>[^()\n]{0,200}?)"
                  r"\s{0,4}(?:\(\s{0,4}UUID:\s{0,4}(?P<uuid>[^)\s]{1,128})\s{0,4}\))?\s*$")
_LINK = re.compile(r"^\s{0,16}Link\s{1,4}(?P<link>[0-9]{1,4})\s{0,4}:\s{0,8}(?P<rest>.{0,400})$")
_LINKS = re.compile(r"^\s{0,16}Links\s{1,4}(?P<spec>[0-9\s,\-]{1,200}):\s{0,8}(?P<rest>.{0,400})$")
_SPEED = re.compile(r"^(?P<value>[0-9]{1,7}(?:\.[0-9]{1,6})?)\s{0,4}(?P<unit>[GMK]B/s|Gb/s|GT/s)",
                    re.IGNORECASE)
_INACTIVE = re.compile(r"<?\s{0,2}(?:inactive|down|disabled|not active)\s{0,2}>?", re.IGNORECASE)
_ALL_INACTIVE = re.compile(r"all links are inactive|NVLink is not active|"
                           r"no active NVLinks?", re.IGNORECASE)
_NVML_MSG = re.compile(r"^\s{0,8}(?:NVML|NVIDIA-SMI)\b.{0,300}$|"
                       r"^\s{0,8}(?:Unable|Failed) to .{0,300}$")
_ELISION = re.compile(r"^\s{0,16}(?:\.{3,}|…+|\[\s{0,2}(?:\.{3}|…)\s{0,2}\]|<snip>|\(snip\))\s*$")
_COUNTER = re.compile(r"^(?P<name>[A-Za-z][\w ./()+-]{0,80}?)\s{0,4}:\s{0,8}(?P<value>\S.{0,80})$")
_NUMBER = re.compile(r"^(?P<num>-?[0-9]{1,20}(?:\.[0-9]{1,12})?(?:[eE][-+]?[0-9]{1,3})?)\s{0,4}"
                     r"(?P<unit>[A-Za-z]{0,8})\s*$")

_THROUGHPUT = re.compile(r"^(?:Data |Raw )?(?:Tx|Rx)[0-9]{0,2}$|throughput|bandwidth",
                         re.IGNORECASE)
_KINDS = (("crc", re.compile(r"\bCRC\b", re.IGNORECASE)),
          ("replay", re.compile(r"replay", re.IGNORECASE)),
          ("recovery", re.compile(r"recovery", re.IGNORECASE)),
          ("ecc", re.compile(r"\bECC\b", re.IGNORECASE)),
          ("error", re.compile(r"errors?\b|discard|malformed|overrun|downed|failed",
                               re.IGNORECASE)))


@dataclass
class NvlinkLink:
    """One link of ``nvidia-smi nvlink -s``: active with a speed, or inactive."""

    link: int
    active: bool
    speed_gbps: float | None  # as printed, in GB/s
    line: str


@dataclass
class NvlinkGpu:
    """One GPU's links as ``nvidia-smi nvlink -s`` lists them."""

    index: int | None
    name: str | None
    uuid: str | None
    header: str
    links: list[NvlinkLink] = field(default_factory=list)
    all_inactive: bool = False  # NVML: "all links are inactive"
    messages: list[str] = field(default_factory=list)  # NVML / nvidia-smi messages
    truncated: bool = False  # an elision cut this GPU's list short

    @property
    def active_links(self) -> int:
        """How many links are up."""
        return sum(1 for ln in self.links if ln.active)

    @property
    def inactive_links(self) -> list[int]:
        """The numbers of the links listed as inactive."""
        return [ln.link for ln in self.links if not ln.active]

    def evidence_lines(self, limit: int = 24) -> list[str]:
        """The header, messages and the inactive links first, then the rest."""
        inactive = [ln.line for ln in self.links if not ln.active]
        active = [ln.line for ln in self.links if ln.active]
        return ([self.header] + self.messages + inactive + active)[:limit]


@dataclass
class NvlinkStatus:
    """``nvidia-smi nvlink -s``: the GPUs in print order."""

    gpus: list[NvlinkGpu] = field(default_factory=list)
    elided: bool = False  # the paste had elisions ("......")


@dataclass
class NvlinkErrorGpu:
    """One GPU's NVLink counters: link -> counter name as printed -> value."""

    index: int | None
    name: str | None
    uuid: str | None
    header: str
    counters: dict[int, dict[str, int | float]] = field(default_factory=dict)
    lines: dict[int, list[str]] = field(default_factory=dict)
    truncated: bool = False

    def errors(self) -> dict[int, dict[str, int]]:
        """Non-zero error counters per link (throughput and rates left out)."""
        out: dict[int, dict[str, int]] = {}
        for link, counters in self.counters.items():
            for name, value in counters.items():
                if isinstance(value, int) and value > 0 and counter_kind(name):
                    out.setdefault(link, {})[name] = value
        return out


@dataclass
class NvlinkErrors:
    """``nvidia-smi nvlink -e``: the GPUs in print order."""

    gpus: list[NvlinkErrorGpu] = field(default_factory=list)
    elided: bool = False


def counter_kind(name: str) -> str | None:
    """What an NVLink counter counts: crc, replay, recovery, ecc, error; None for
    throughput, rates (BER) and anything else that is not an error count."""
    if _THROUGHPUT.search(name.strip()) or "BER" in name:
        return None
    for kind, pattern in _KINDS:
        if pattern.search(name):
            return kind
    return None


def _gpu_header(line: str) -> re.Match[str] | None:
    m = _GPU.match(line)
    if m and (m.group("uuid") or m.group("name")):
        return m
    return None


def _speed(rest: str) -> float | None:
    m = _SPEED.match(rest.strip())
    if not m:
        return None
    value = strict_float(m.group("value"))
    if value is None:
        return None
    unit = m.group("unit")
    if unit.upper() == "MB/S":
        return value / 1000.0
    if unit.upper() == "KB/S":
        return value / 1_000_000.0
    if unit == "Gb/s":
        return value / 8.0
    return value


def parse_nvlink_status(text: str) -> NvlinkStatus:
    """Parse ``nvidia-smi nvlink -s`` (``--status``) output.

    An empty text gives an empty :class:`NvlinkStatus`; text with neither a GPU
    header nor a link line raises ParseError.
    """
    status = NvlinkStatus()
    if not text or not text.strip():
        return status
    current: NvlinkGpu | None = None
    recognised = False
    for raw in split_lines(text):
        line = raw.rstrip()
        if not line.strip():
            continue
        g = _gpu_header(line)
        if g:
            current = NvlinkGpu(int(g.group("index")), (g.group("name") or "").strip() or None,
                                g.group("uuid"), line.strip())
            status.gpus.append(current)
            recognised = True
            continue
        if _ELISION.match(line):
            status.elided = True
            if current is not None:
                current.truncated = True
            continue
        m = _LINK.match(line)
        if m:
            if current is None:
                current = NvlinkGpu(None, None, None, "")
                status.gpus.append(current)
            rest = m.group("rest").strip()
            speed = _speed(rest)
            active = speed is not None and speed > 0
            if speed is None and not _INACTIVE.fullmatch(rest):
                continue  # an unknown link line: neither a speed nor inactive
            current.links.append(NvlinkLink(int(m.group("link")), active, speed, line.strip()))
            recognised = True
            continue
        if _NVML_MSG.match(line) or _ALL_INACTIVE.search(line):
            if current is None:
                current = NvlinkGpu(None, None, None, "")
                status.gpus.append(current)
            current.messages.append(line.strip())
            if _ALL_INACTIVE.search(line):
                current.all_inactive = True
            recognised = True
    if not recognised:
        raise ParseError("not nvidia-smi nvlink -s output: no 'GPU N:' header or 'Link N:' line")
    return status


def _link_numbers(spec: str) -> list[int]:
    """``"0-2, 4-5"`` -> [0, 1, 2, 4, 5] (bounded)."""
    out: list[int] = []
    for part in spec.split(","):
        bounds = [strict_int(p.strip(), signed=False) for p in part.split("-")]
        if len(bounds) == 1 and bounds[0] is not None:
            out.append(bounds[0])
        elif len(bounds) == 2:
            lo, hi = bounds
            if lo is not None and hi is not None and 0 <= hi - lo <= 64:
                out.extend(range(lo, hi + 1))
    return out


def _value(raw: str) -> int | float | None:
    m = _NUMBER.match(raw.strip())
    if not m:
        return None
    num = m.group("num")
    value = strict_int(num)
    return value if value is not None else strict_float(num)


def _combined_names(name: str) -> list[str]:
    """``"Replay/Recovery/CRC Errors"`` -> Replay Errors, Recovery Errors, CRC Errors."""
    parts = name.split("/")
    if len(parts) < 2:
        return [name]
    last = parts[-1].strip().split()
    suffix = " ".join(last[1:]) if len(last) > 1 else ""
    names = [p.strip() for p in parts[:-1]] + [last[0] if last else ""]
    return [f"{n} {suffix}".strip() for n in names if n]


def parse_nvlink_errors(text: str) -> NvlinkErrors:
    """Parse ``nvidia-smi nvlink -e`` (``--errorcounters``) output.

    Every ``Link N: <name>: <value>`` line is kept (older and newer drivers name
    counters differently), as are ``Link N:`` headers followed by indented
    ``<name>: <value>`` lines and author summaries ``Links 0-2, 4-5: ... : 0``.
    Empty text gives an empty result; text without any GPU header or link
    counter raises ParseError.
    """
    result = NvlinkErrors()
    if not text or not text.strip():
        return result
    current: NvlinkErrorGpu | None = None
    open_link: int | None = None
    recognised = False

    def gpu() -> NvlinkErrorGpu:
        nonlocal current
        if current is None:
            current = NvlinkErrorGpu(None, None, None, "")
            result.gpus.append(current)
        return current

    def add(links: list[int], name: str, raw_value: str, line: str) -> bool:
        value = _value(raw_value)
        if value is None:
            return False
        g = gpu()
        for link in links:
            for counter in _combined_names(name.strip()):
                g.counters.setdefault(link, {})[counter] = value
            g.lines.setdefault(link, []).append(line.strip())
        return True

    for raw in split_lines(text):
        line = raw.rstrip()
        if not line.strip():
            continue
        g = _gpu_header(line)
        if g:
            current = NvlinkErrorGpu(int(g.group("index")),
                                     (g.group("name") or "").strip() or None,
                                     g.group("uuid"), line.strip())
            result.gpus.append(current)
            open_link = None
            recognised = True
            continue
        if _ELISION.match(line):
            result.elided = True
            if current is not None:
                current.truncated = True
            continue
        m = _LINK.match(line)
        multi = None if m else _LINKS.match(line)
        hit = m or multi
        if hit:
            links = [int(hit.group("link"))] if m else _link_numbers(hit.group("spec"))
            rest = hit.group("rest").strip()
            c = _COUNTER.match(rest)
            if c and add(links, c.group("name"), c.group("value"), line):
                recognised = True
                open_link = None
            elif not rest and m:
                open_link = links[0]
                gpu().counters.setdefault(open_link, {})
                recognised = True
            continue
        if open_link is not None and line[:1].isspace():
            c = _COUNTER.match(line.strip())
            if c and add([open_link], c.group("name"), c.group("value"), line):
                recognised = True
            continue
    if not recognised:
        raise ParseError("not nvidia-smi nvlink -e output: no 'GPU N:' header or "
                         "'Link N: <counter>: <value>' line")
    return result


# --- recognising it in a paste -------------------------------------------------------
_GPU_UUID = re.compile(r"^GPU [0-9]+: .*\(UUID: ")
# a link's row of -s / -e / -c ("Link 0, P2P is supported: true"), or NVML's message for a GPU
# whose links are all down, at any indentation
_LINK_ROW = re.compile(r"^\s{0,16}Link [0-9]+[:,] |^\s{0,16}(?:NVML: )?Unable to retrieve NVLink|"
                       r"^\s{0,16}all links are inactive", re.IGNORECASE)
_GPU_GATE = Gate(_GPU_UUID)  # a block starts at a free GPU line
_ERROR_LINK = re.compile(r"Link [0-9]+: .*(?:Errors?|Replay|Recovery|CRC)")


def _link_line(line: str) -> bool:
    return bool(_LINK_ROW.match(line) or line.strip() in ("", "...") or set(line.strip()) == {"."})


@gated_by(_GPU_GATE)
def claim_nvlink(doc: PasteDoc) -> None:
    """``nvidia-smi nvlink -s`` / ``-e`` blocks: a GPU line and its links (error
    counters make it ``nvidia_smi_nvlink_errors``)."""
    if not _GPU_GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if doc.free(i) and _GPU_UUID.match(ln) and doc.free(i + 1) and _LINK_ROW.match(
                doc.lines[i + 1]):
            end = doc.extend(i + 1, _link_line)
            errors = _ERROR_LINK.search("\n".join(doc.lines[i:end]))
            doc.claim("nvidia_smi_nvlink_errors" if errors else "nvidia_smi_nvlink_status",
                      i, end)
