"""``dcgmi`` outputs other than ``diag``: ``discovery -l`` (the GPUs and NVSwitches DCGM's
host engine sees), ``health -c`` (its health watches), ``nvlink --link-status`` / ``-s``
and ``nvlink -e -g N`` (link states and error counters), ``dcgmi --version``.

Each of them prints the same complaint when nv-hostengine is not running or not
reachable (``Error: Unable to connect to host engine. Host engine connection
invalid/disconnected.``): it is kept as ``hostengine_error``, not as an unreadable
output, so that the rules can say DCGM (not the GPU) is the problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gputriage.io import safejson
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import ParseError, normalize_bus_id, split_lines, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["BOX", "HOSTENGINE_ERROR", "Discovery", "DiscoveredGpu", "HealthIncident",
           "HealthReport", "NvlinkReport", "claim_dcgmi", "hostengine_error", "parse_discovery",
           "parse_health", "parse_nvlink", "parse_version"]

# what every dcgmi command prints when it cannot reach nv-hostengine
HOSTENGINE_ERROR = re.compile(
    r"Unable to connect to host engine|unable to establish a connection to the specified host"
    r"|Host engine connection invalid/disconnected", re.IGNORECASE)
# every quantifier bounded or followed by a literal: these run on every line of a paste
_COUNT = re.compile(r"^\s*(?P<n>[0-9]{1,9}) (?P<what>GPUs?|NvSwitch(?:es)?|CPUs?) found\.\s*$")
_ROW = re.compile(r"^\|\s{0,8}(?P<id>[0-9]{1,9})?\s{0,40}\|\s{0,8}(?P<key>[A-Za-z][\w ]{0,40}?):"
                  r"(?P<value>.*)\|\s*$")
BOX = re.compile(r"^\s*[+|]")  # a line of a dcgmi box (its rules and rows)
_VERSION = re.compile(r"^\s*(?:dcgmi\s+)?version\s*:\s*(?P<v>[0-9]+(?:\.[0-9]+){1,3})\s*$",
                      re.IGNORECASE)


def hostengine_error(text: str) -> list[str]:
    """The lines of ``text`` that say dcgmi could not reach nv-hostengine."""
    return [ln.strip() for ln in split_lines(text) if HOSTENGINE_ERROR.search(ln)]


# --- dcgmi discovery -l -----------------------------------------------------------------
@dataclass
class DiscoveredGpu:
    gpu_id: int
    name: str | None = None
    bus_id: str | None = None
    uuid: str | None = None
    lines: list[str] = field(default_factory=list)


@dataclass
class Discovery:
    """What DCGM sees: its GPUs (id, name, bus id, UUID), NVSwitch and CPU counts."""

    gpu_count: int | None = None
    switch_count: int | None = None
    cpu_count: int | None = None
    gpus: list[DiscoveredGpu] = field(default_factory=list)
    count_lines: list[str] = field(default_factory=list)
    hostengine_error: list[str] = field(default_factory=list)

    @property
    def bus_ids(self) -> list[str]:
        return [g.bus_id for g in self.gpus if g.bus_id]


def parse_discovery(text: str) -> Discovery:
    """Parse ``dcgmi discovery -l``; ParseError when it has neither an "N GPUs found."
    line nor dcgmi's host-engine connection error."""
    out = Discovery(hostengine_error=hostengine_error(text))
    section = "GPU"
    current: DiscoveredGpu | None = None
    for line in split_lines(text):
        if m := _COUNT.match(line):
            what, n = m.group("what"), int(m.group("n"))
            section = what[:3].upper() if not what.startswith("NvSwitch") else "SWITCH"
            out.count_lines.append(line.strip())
            if section == "GPU":
                out.gpu_count = n
            elif section == "SWITCH":
                out.switch_count = n
            else:
                out.cpu_count = n
            continue
        m = _ROW.match(line)
        if not m or section != "GPU":
            continue
        if m.group("id") is not None:
            current = DiscoveredGpu(int(m.group("id")))
            out.gpus.append(current)
        if current is None:
            continue
        current.lines.append(line.rstrip())
        key, value = m.group("key").strip(), m.group("value").strip()
        if key == "Name":
            current.name = value
        elif key == "PCI Bus ID":
            current.bus_id = normalize_bus_id(value)
        elif key == "Device UUID":
            current.uuid = value
    if out.gpu_count is None and not out.hostengine_error:
        raise ParseError("not dcgmi discovery output: no 'N GPUs found.' line")
    return out


def parse_version(text: str) -> str:
    """``dcgmi --version`` (``dcgmi  version: 3.3.9``): the version (the dcgm_version fact
    reads the collected line with it)."""
    for line in split_lines(text):
        if m := _VERSION.match(line):
            return m.group("v")
    raise ParseError("not dcgmi --version output: no 'version: N.N.N' line")


# --- dcgmi health -c ----------------------------------------------------------------------
HEALTH_WORDS = {"healthy": "healthy", "warning": "warning", "failure": "failure",
                "fail": "failure", "internal error": "internal-error"}
_SYSTEM = re.compile(r"^(?:->\s{0,8})?(?P<system>PCIe|NVLINK|PMU|MCU|Memory|SM|InfoROM|Thermal|"
                     r"Power|Driver|NvSwitch (?:NF|F)|CPU|CPU Core|ConnectX)(?: system)?"
                     r"(?::\s{0,8}(?P<health>[A-Za-z][A-Za-z ]{0,30}?)"
                     r"(?:\s{1,8}-\s{1,8}(?P<msg>.*))?)?$", re.IGNORECASE)
_ENTITY_OLD = re.compile(r"^(?P<group>GPU|Switch|NvSwitch|CPU|ConnectX) ID:\s{0,8}"
                         r"(?P<id>[0-9]{1,9})$")
_ENTITY = re.compile(r"^->\s{0,8}(?P<id>[0-9]{1,9})$")
_GROUP = re.compile(r"^(?P<group>GPU|Switch|NvSwitch|NVSWITCH|CPU|CPU_CORE|ConnectX|CONNECTX)$")
_OVERALL = re.compile(r"Overall Health:?(?P<rest>.*)$")


@dataclass
class HealthIncident:
    """One watched system of one entity that DCGM reports as not healthy."""

    entity: str  # GPU | Switch | CPU
    entity_id: int | None
    system: str  # PCIe, NVLINK, Memory, ...
    health: str  # warning | failure | internal-error
    message: str = ""
    lines: list[str] = field(default_factory=list)


@dataclass
class HealthReport:
    """``dcgmi health -c``: the overall verdict and each incident; ``error`` when dcgmi
    could not check (watches not enabled, host engine unreachable)."""

    overall: str | None = None
    overall_line: str = ""
    incidents: list[HealthIncident] = field(default_factory=list)
    error: str | None = None
    hostengine_error: list[str] = field(default_factory=list)


def _cells(line: str) -> tuple[str, str] | None:
    """The left and right cells of a ``| left | right |`` row (None: not a row)."""
    s = line.strip()
    if not s.startswith("|"):
        return None
    parts = [p.strip() for p in s.strip("|").split("|")]
    if len(parts) == 1:
        return parts[0], ""
    return parts[0], " ".join(p for p in parts[1:] if p)


def _health_word(text: str) -> str | None:
    return HEALTH_WORDS.get(text.strip().lower())


def parse_health(text: str) -> HealthReport:
    """Parse ``dcgmi health -c`` in the layouts DCGM prints (the tree of DCGM 2.x and
    later, ``-> 0`` / ``-> Errors`` / ``-> PCIe system``, and the older ``GPU ID: 0`` /
    ``PCIe system: Warning - ...`` rows); ParseError when it is neither."""
    if text.lstrip().startswith("{"):
        return _health_json(text)
    out = HealthReport(hostengine_error=hostengine_error(text))
    group, entity_id = "GPU", None
    incident: HealthIncident | None = None
    seen_header = False
    for line in split_lines(text):
        stripped = line.strip()
        if stripped.startswith("Error:"):
            out.error = out.error or stripped
            continue
        if "Health Monitor Report" in line:
            seen_header = True
        cells = _cells(line)
        if cells is None:
            continue
        left, right = cells
        if m := _OVERALL.search(line):
            word = _health_word(m.group("rest").replace("|", " "))
            if word:
                out.overall, out.overall_line = word, stripped
            continue
        if m := (_ENTITY_OLD.match(left) or _ENTITY.match(left)):
            group = m.groupdict().get("group") or group
            entity_id, incident = int(m.group("id")), None
            continue
        if m := _GROUP.match(left):
            group, incident = m.group("group"), None
            continue
        if left in ("-> Errors", "Errors"):
            continue
        found = _system_incident(left, right, group, entity_id, stripped)
        if found is not None:
            incident = found
            out.incidents.append(incident)
        elif incident is not None and not left and right:
            incident.message = f"{incident.message} {right}".strip()
            incident.lines.append(stripped)
    if out.overall is None and not out.incidents and not out.error and not (
            out.hostengine_error or seen_header):
        raise ParseError("not dcgmi health -c output: no 'Overall Health' row")
    return out


def _health_json(text: str) -> HealthReport:
    """``dcgmi health -c -j``: dcgmi's output tree as JSON (``{"header": ["Health Monitor
    Report"], "body": {"Overall Health": {"value": ...}, "GPU": {"children": {"0":
    {"value": ..., "children": {"Errors": {"children": {"Memory system": {"value":
    "Failure", "overflow": [message lines]}}}}}}}}}``)."""
    try:
        doc = safejson.loads(text.strip())
    except ValueError as exc:
        raise ParseError(f"dcgmi health -j: not JSON ({exc})") from None
    body = doc.get("body") if isinstance(doc, dict) else None
    if not isinstance(body, dict) or "Overall Health" not in body:
        raise ParseError("not dcgmi health -c -j output: no body with 'Overall Health'")
    out = HealthReport()
    overall = _value(body.get("Overall Health"))
    if overall and (word := _health_word(overall)):
        out.overall, out.overall_line = word, f'"Overall Health": "{overall}"'
    for group, node in body.items():
        if group == "Overall Health" or not isinstance(node, dict):
            continue
        for eid, entity in _children(node).items():
            errors = _children(entity).get("Errors", {})
            for system, cell in _children(errors).items():
                word = _health_word(_value(cell) or "")
                m = _SYSTEM.match(system)
                if word is None or m is None:
                    continue
                lines = [ln for ln in cell.get("overflow", []) if isinstance(ln, str)]
                out.incidents.append(HealthIncident(
                    _entity(group), strict_int(eid, signed=False), m.group("system"), word,
                    " ".join(lines).strip(), [f'{group} {eid}: "{system}": "{_value(cell)}"',
                                              *lines]))
    return out


def _value(node: Any) -> str | None:
    value = node.get("value") if isinstance(node, dict) else None
    return value if isinstance(value, str) else None


def _children(node: Any) -> dict[str, Any]:
    kids = node.get("children") if isinstance(node, dict) else None
    return {k: v for k, v in kids.items() if isinstance(v, dict)} if isinstance(kids, dict) \
        else {}


def _system_incident(left: str, right: str, group: str, entity_id: int | None,
                     line: str) -> HealthIncident | None:
    """The incident a row's ``PCIe system: Warning - ...`` cell starts (in its left cell,
    or in its right cell under a tree's entity), or None."""
    for cell, rest in ((left, right), (right, "")):
        if (m := _SYSTEM.match(cell)) and (m.group("health") or rest or cell == left):
            word = _health_word(m.group("health") or rest)
            if word is not None:
                return HealthIncident(_entity(group), entity_id, m.group("system"), word,
                                      (m.group("msg") or "").strip(), [line])
    return None


def _entity(group: str) -> str:
    g = group.upper()
    if g == "CONNECTX":
        return "ConnectX"
    return "Switch" if "SWITCH" in g else ("CPU" if g.startswith("CPU") else "GPU")


# --- dcgmi nvlink -----------------------------------------------------------------------
_LINK_GPU = re.compile(r"^\s*gpuId (?P<id>[0-9]{1,9}):\s*$")
_LINK_SWITCH = re.compile(r"^\s*physicalId (?P<id>[0-9]{1,9}):\s*$")
_STATES = re.compile(r"^\s*(?:[UDX_] ){0,143}[UDX_]\s*$")  # up to 144 ports (NVSwitch 4: 72)
_ERR_GPU = re.compile(r"^\|\s{0,40}GPU (?P<id>[0-9]{1,9})(?:\s{0,200}\|)?\s*$")
_ERR_LINK = re.compile(r"^\|\s{0,40}(?:Link (?P<link>[0-9]{1,9}))?\s{0,40}\|\s{0,40}"
                       r"(?P<kind>CRC FLIT Error|CRC Data Error|Replay Error|Recovery Error)"
                       r"\s{0,40}=>\s{0,40}(?P<n>[0-9]{1,20})\s{0,80}\|")


@dataclass
class NvlinkReport:
    """``dcgmi nvlink``: link states per GPU and NVSwitch (U D X _), and error counters
    per GPU and link (``{gpu: {link: {"CRC FLIT Error": n, ...}}}``)."""

    gpu_links: dict[int, list[str]] = field(default_factory=dict)
    switch_links: dict[int, list[str]] = field(default_factory=dict)
    no_switches: bool = False
    errors: dict[int, dict[int, dict[str, int]]] = field(default_factory=dict)
    lines: dict[int, list[str]] = field(default_factory=dict)  # gpu -> its state lines
    error_lines: dict[int, list[str]] = field(default_factory=dict)  # gpu -> nonzero rows
    hostengine_error: list[str] = field(default_factory=list)


def parse_nvlink(text: str) -> NvlinkReport:
    """Parse ``dcgmi nvlink --link-status`` and ``dcgmi nvlink -e -g N``."""
    out = NvlinkReport(hostengine_error=hostengine_error(text))
    owner: tuple[str, int] | None = None
    err_gpu: int | None = None
    link: int | None = None
    for line in split_lines(text):
        if m := _LINK_GPU.match(line):
            owner = ("gpu", int(m.group("id")))
            out.lines[owner[1]] = [line.strip()]
        elif m := _LINK_SWITCH.match(line):
            owner = ("switch", int(m.group("id")))
        elif owner and _STATES.match(line) and line.strip():
            states = line.split()
            if owner[0] == "gpu":
                out.gpu_links[owner[1]] = states
                out.lines[owner[1]].append(line.strip())
            else:
                out.switch_links[owner[1]] = states
            owner = None
        elif "No NvSwitches found" in line:
            out.no_switches = True
        elif m := _ERR_GPU.match(line):
            err_gpu, link = int(m.group("id")), None
        elif err_gpu is not None and (m := _ERR_LINK.match(line)):
            if m.group("link") is not None:
                link = int(m.group("link"))
            if link is None:
                continue
            n = strict_int(m.group("n")) or 0
            out.errors.setdefault(err_gpu, {}).setdefault(link, {})[m.group("kind")] = n
            if n:
                out.error_lines.setdefault(err_gpu, []).append(
                    f"GPU {err_gpu} link {link}: {m.group('kind')} => {n}")
    if not (out.gpu_links or out.errors or out.hostengine_error or out.no_switches):
        raise ParseError("not dcgmi nvlink output: no link states or error counters")
    return out


# --- the detector ---------------------------------------------------------------------------
_HEALTH_START = re.compile(r"Health Monitor Report|^\s*Error: Health watches not enabled|"
                           r"^\s*Error: Unable to check health watches")
_NVLINK_START = re.compile(r"^\|\s+NvLink Link Status\s+\|$|^\|\s+NVLINK Error Counts\s+\|?")


def _json_block(doc: PasteDoc, i: int) -> tuple[int, int] | None:
    """The free lines of the JSON object around line ``i`` (its braces balanced)."""
    start = i  # the top-level object opens with an unindented "{" (jsoncpp puts "body",
    while doc.free(start - 1) and i - start < 4000 and doc.lines[start].rstrip() != "{":
        start -= 1  # the tree, before "header")
    if doc.lines[start].rstrip() != "{":
        return None
    depth, end = 0, start
    while doc.free(end) and end - start < 4000:
        depth += doc.lines[end].count("{") - doc.lines[end].count("}")
        end += 1
        if depth <= 0:
            return start, end
    return None


# each block starts at a line naming the health report, "N GPU(s) found." or a start line
_GATE = Gate(_HEALTH_START, _NVLINK_START, literals=('"Health Monitor Report"', " found."))


@gated_by(_GATE)
def claim_dcgmi(doc: PasteDoc) -> None:
    """Blocks of dcgmi discovery, health (its tree or -j JSON) and nvlink, each to its
    source."""
    if not _GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if not doc.free(i):
            continue
        if '"Health Monitor Report"' in ln and (block := _json_block(doc, i)):
            doc.claim("dcgmi_health", *block)
            continue
        if _COUNT.match(ln) and (ln.strip().endswith("GPUs found.") or
                                   ln.strip().endswith("GPU found.")):
            end = doc.extend(i + 1, lambda s: bool(BOX.match(s) or _COUNT.match(s)))
            doc.claim("dcgmi_discovery", i, end)
        elif _HEALTH_START.search(ln):
            start = i - 1 if doc.free(i - 1) and doc.lines[i - 1].lstrip().startswith("+") else i
            doc.claim("dcgmi_health", start, doc.extend(i + 1, lambda s: bool(BOX.match(s))))
        elif _NVLINK_START.match(ln.strip()):
            start = i - 1 if doc.free(i - 1) and doc.lines[i - 1].lstrip().startswith("+") else i
            doc.claim("dcgmi_nvlink", start, doc.extend(i + 1, _nvlink_line))


def _nvlink_line(s: str) -> bool:
    t = s.strip()
    return (not t or bool(BOX.match(s)) or t in ("GPUs:", "NvSwitches:") or
            bool(_LINK_GPU.match(s) or _LINK_SWITCH.match(s) or _STATES.match(s)) or
            t.startswith(("No NvSwitches found", "No GPUs found", "Key: Up=U")))
