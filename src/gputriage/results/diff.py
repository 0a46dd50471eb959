"""What changed between two analysed hosts: the facts digest and the findings.

A side of a diff is a :class:`DiffView` — host summary, GPU rows, a flat facts
digest (stable key -> value) and the findings — so anything that can produce
those can be diffed: an analysed snapshot, a ``gputriage/result/v1`` JSON
document, or a stored history entry. :func:`diff_views` is pure.

Digest keys look like ``kernel``, ``driver.module``,
``gpu[0000:18:00.0].vbios``, ``ib[mlx5_0/1].rate``, ``unit[nvidia-fabricmanager].state``.
Noise (temperatures, power, utilisation, clocks, counters that only grow) is
left out unless ``include_noise``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from gputriage.errors import InputError
from gputriage.facts.store import Facts
from gputriage.io import safejson
from gputriage.model import Finding, GpuRow, HostIdentity, Result
from gputriage.results.reader import read_result
from gputriage.text.fields import normalize_bus_id

if TYPE_CHECKING:
    from gputriage.facts.window import LogWindow

DIFF_SCHEMA = "gputriage/diff/v1"
# Findings that are problems; ok / info confirmations come and go with the inputs.
PROBLEM_SEVERITIES = ("warning", "critical")

# Per-GPU fields of nvidia-smi (name in SmiGpu -> digest suffix).
_GPU_FIELDS = (("uuid", "uuid"), ("serial", "serial"), ("name", "name"), ("vbios", "vbios"),
               ("ecc_mode", "ecc_mode"), ("mig_mode_current", "mig"),
               ("power_limit_w", "power_limit_w"))
_GPU_NOISE = (("temperature_c", "temperature_c"), ("power_draw_w", "power_draw_w"),
              ("utilization_gpu_pct", "utilization_pct"), ("memory_used_mib", "memory_used_mib"),
              ("performance_state", "pstate"), ("pcie_replays", "pcie.replays"),
              ("ecc_volatile_corrected", "ecc.volatile_corrected"),
              ("ecc_aggregate_corrected", "ecc.aggregate_corrected"),
              ("ecc_volatile_uncorrected", "ecc.volatile_uncorrected"),
              ("ecc_aggregate_uncorrected", "ecc.aggregate_uncorrected"))
_BRACKET = re.compile(r"\[[^\]]*\]")
# A digest value: text ("550.54.15", "x16", "on"), or a count or figure.
DigestValue = str | int | float


@dataclass(frozen=True)
class FindingRef:
    """A finding as a diff needs it, from a Finding or its JSON form."""

    id: str
    scope: str  # Scope.label(): "node", "GPU 3 0000:5d:00.0", "unit nvidia-fabricmanager"
    severity: str
    title: str
    action: str = "none"
    blame: str = "unknown"

    @property
    def key(self) -> tuple[str, str]:
        """What matches a finding across two sides: (id, scope label)."""
        return (self.id, self.scope)

    @classmethod
    def from_finding(cls, f: Finding) -> FindingRef:
        """The reference of an engine finding."""
        return cls(f.id, f.scope.label(), f.severity.value, f.title, f.action.value,
                   f.blame.value)

    def to_json(self) -> dict:
        """Plain JSON form."""
        return {"id": self.id, "scope": self.scope, "severity": self.severity,
                "title": self.title, "action": self.action, "blame": self.blame}


@dataclass
class DiffView:
    """One side of a diff: what a snapshot, a result document or a history entry says."""

    label: str
    host: HostIdentity = HostIdentity()
    gpus: Sequence[GpuRow] = ()
    digest: dict[str, DigestValue] = field(default_factory=dict)
    findings: list[FindingRef] = field(default_factory=list)
    kind: str = "snapshot"  # snapshot | result | history


@dataclass(frozen=True)
class FactChange:
    """One digest key whose value differs (None: absent on that side)."""

    key: str
    before: DigestValue | None
    after: DigestValue | None


@dataclass(frozen=True)
class GpuChange:
    """A GPU that appeared, disappeared or moved to another bus id."""

    change: str  # added | removed | moved
    ident: str  # UUID or serial when known, else the bus id
    bus_before: str | None = None
    bus_after: str | None = None
    name: str | None = None
    note: str | None = None


@dataclass
class Diff:
    """Everything that differs from side A to side B."""

    a: str
    b: str
    changes: list[FactChange] = field(default_factory=list)
    gpus: list[GpuChange] = field(default_factory=list)
    new: list[FindingRef] = field(default_factory=list)
    resolved: list[FindingRef] = field(default_factory=list)
    still: list[FindingRef] = field(default_factory=list)
    not_compared: list[str] = field(default_factory=list)  # key families on one side only
    warnings: list[str] = field(default_factory=list)  # e.g. A and B are different hosts

    @property
    def facts_changed(self) -> bool:
        """Whether any fact or the GPU set changed."""
        return bool(self.changes or self.gpus)

    @property
    def exit_status(self) -> int:
        """0 when no fact changed and no finding is new; 1 otherwise."""
        return 1 if self.facts_changed or self.new else 0


# -- the facts digest ------------------------------------------------------------------
def _put(out: dict[str, DigestValue], key: str, value: DigestValue | None) -> None:
    if value is not None and value != "":
        out[key] = value


def _bus_of_index(facts: Facts) -> dict[int, str]:
    visible = facts.maybe("visible_gpus")
    if not visible:
        return {}
    return {g.index: g.bus_id for g in visible[1] if g.index is not None and g.bus_id}


def _onoff(value: bool | None) -> str | None:
    return None if value is None else ("on" if value else "off")


def _gpu_digest(facts: Facts, out: dict[str, DigestValue], include_noise: bool) -> None:
    fields = _GPU_FIELDS + (_GPU_NOISE if include_noise else ())
    for _, report in facts.maybe("smi", []) or []:
        for g in report.gpus:
            bus = normalize_bus_id(g.pci_bus_id) if g.pci_bus_id else None
            if not bus:
                continue
            for attr, suffix in fields:
                key = f"gpu[{bus}].{suffix}"
                if key not in out:
                    value = getattr(g, attr, None)
                    _put(out, key, _onoff(value) if isinstance(value, bool) else value)
            key = f"gpu[{bus}].persistence"
            if key not in out:
                _put(out, key, _onoff(g.persistence_mode))
    reading = facts.maybe("nvml")
    if reading is not None and reading.available:
        for d in reading.devices:
            bus = normalize_bus_id(d.pci_bus_id) if d.pci_bus_id else None
            if bus and not d.error:
                for attr in ("uuid", "serial", "name"):
                    if getattr(d, attr):
                        out.setdefault(f"gpu[{bus}].{attr}", getattr(d, attr))
                if d.persistence_mode is not None:
                    out.setdefault(f"gpu[{bus}].persistence",
                                   "on" if d.persistence_mode else "off")


def _pcie_digest(facts: Facts, out: dict[str, DigestValue], include_noise: bool) -> None:
    for link in facts.maybe("pcie_links", []) or []:
        if not link.bus_id or link.kind not in ("gpu", "nic"):
            continue
        base = f"{link.kind}[{link.bus_id}].pcie"
        _put(out, f"{base}.width", f"x{link.cur_width}" if link.cur_width else None)
        _put(out, f"{base}.max_width", f"x{link.max_width}" if link.max_width else None)
        _put(out, f"{base}.max_speed", f"{link.max_gts:g} GT/s" if link.max_gts else None)
        if include_noise:  # GPUs drop their link speed when idle: noise by default
            _put(out, f"{base}.speed", f"{link.cur_gts:g} GT/s" if link.cur_gts else None)


def _nvlink_digest(facts: Facts, out: dict[str, DigestValue]) -> None:
    status = facts.maybe("nvlink")
    if status is None:
        return
    buses = _bus_of_index(facts)
    for g in status.gpus:
        if g.truncated:
            continue
        who = buses.get(g.index) if g.index is not None else None
        who = who or (f"#{g.index}" if g.index is not None else g.uuid)
        if who:
            out[f"gpu[{who}].nvlink.active"] = sum(1 for link in g.links if link.active)


def _ib_digest(facts: Facts, out: dict[str, DigestValue], include_noise: bool) -> None:
    for port in facts.maybe("ib_ports", []) or []:
        base = f"ib[{port.key}]"
        _put(out, f"{base}.state", port.state)
        _put(out, f"{base}.phys_state", port.phys_state)
        _put(out, f"{base}.rate", f"{port.rate_gbps:g} Gb/s" if port.rate_gbps else None)
        _put(out, f"{base}.fw", port.fw_ver)
        if include_noise:
            for name, value in sorted(port.counters.items()):
                out[f"{base}.counter.{name}"] = value


def _host_digest(facts: Facts, out: dict[str, DigestValue], include_noise: bool) -> None:
    for pool in facts.maybe("host_hugepages", []) or []:
        base = f"hugepages[{pool.size_kb}kB]"
        _put(out, f"{base}.total", pool.nr)
        if include_noise:
            _put(out, f"{base}.free", pool.free)
    for unit, state in sorted((facts.maybe("units") or {}).items()):
        active = "/".join(s for s in (state.active_state, state.sub_state) if s)
        _put(out, f"unit[{unit}].state", active or state.load_state)
    _put(out, "container.toolkit", facts.get("host_identity").container_toolkit)
    _container_digest(facts, out)


def _container_digest(facts: Facts, out: dict[str, DigestValue]) -> None:
    """The CDI specs (which driver each was generated for, how many devices) and the
    engines' runtimes: what a driver upgrade or a toolkit reconfiguration changes."""
    specs = facts.maybe("cdi_specs")
    if specs is not None:
        out["container.cdi_specs"] = ", ".join(s.path for s in specs.specs) or "none"
        for spec in specs.specs:
            _put(out, f"cdi[{spec.path}].driver", ", ".join(spec.driver_versions) or None)
            _put(out, f"cdi[{spec.path}].devices", len(spec.devices))
    containerd = facts.maybe("containerd_config")
    if containerd is not None:
        _put(out, "containerd.default_runtime", containerd.default_runtime)
        _put(out, "containerd.runtimes", ", ".join(sorted(containerd.runtimes)) or "none")
    for cfg in getattr(facts.maybe("docker_daemon_json"), "files", ()):
        _put(out, f"docker[{cfg.path}].runtimes", ", ".join(sorted(cfg.runtimes)) or "none")
        _put(out, f"docker[{cfg.path}].default_runtime", cfg.default_runtime)


def _stack_digest(facts: Facts, out: dict[str, DigestValue]) -> None:
    identity = facts.get("host_identity")
    _put(out, "kernel", identity.kernel)
    _put(out, "driver.module", identity.driver.kernel_module)
    _put(out, "driver.userspace", identity.driver.userspace)
    _put(out, "cuda", identity.driver.cuda)


def facts_digest(facts: Facts, include_noise: bool = False) -> dict[str, DigestValue]:
    """A flat dict of stable keys -> values describing what a diff compares.

    Every part is optional: a fact the inputs cannot establish adds no key.
    Never raises for missing or malformed inputs.
    """
    out: dict[str, DigestValue] = {}
    _stack_digest(facts, out)
    _gpu_digest(facts, out, include_noise)
    _pcie_digest(facts, out, include_noise)
    _nvlink_digest(facts, out)
    _ib_digest(facts, out, include_noise)
    _host_digest(facts, out, include_noise)
    return dict(sorted(out.items()))


def host_digest(host: HostIdentity, gpus: Sequence[GpuRow]) -> dict[str, DigestValue]:
    """The digest keys a result's host summary and GPU rows can give (all a
    ``gputriage/result/v1`` document has)."""
    out: dict[str, DigestValue] = {}
    _put(out, "kernel", host.kernel)
    _put(out, "driver.module", host.driver.kernel_module)
    _put(out, "driver.userspace", host.driver.userspace)
    _put(out, "cuda", host.driver.cuda)
    for g in gpus:
        bus = g.pci_bus_id
        if not bus or not g.visible:
            continue
        _put(out, f"gpu[{bus}].uuid", g.uuid)
        _put(out, f"gpu[{bus}].name", g.name)
        if g.listed and g.persistence_mode is not None:  # what the result says
            out[f"gpu[{bus}].persistence"] = "on" if g.persistence_mode else "off"
    return out


# -- building sides --------------------------------------------------------------------
def view_from_result(result: Result, facts: Facts | None, label: str,
                     include_noise: bool = False) -> DiffView:
    """The side of an analysed snapshot (``facts`` the engine used, when at hand)."""
    digest = host_digest(result.host, result.gpus)
    if facts is not None:
        digest.update(facts_digest(facts, include_noise))
    return DiffView(label, result.host, tuple(result.gpus), dict(sorted(digest.items())),
                    [FindingRef.from_finding(f) for f in result.findings], "snapshot")


def view_from_json(doc: object, label: str) -> DiffView:
    """The side of a decoded ``gputriage/result/v1`` document, read by
    :func:`gputriage.results.reader.read_result`: InputError naming the field for anything
    else."""
    result = read_result(doc, label)
    return DiffView(label, result.host, result.gpus,
                    dict(sorted(host_digest(result.host, result.gpus).items())),
                    [FindingRef.from_finding(f) for f in result.findings], "result")


JSON_CAP = 64 << 20  # a result document larger than this is not read as JSON
_WS = b" \t\r\n"


def _json_document(data: bytes, label: str) -> dict[str, object] | None:
    """The JSON document ``data`` holds when it is one with a schema (None otherwise).
    An object nested deeper than any result (``safejson.MAX_DEPTH``) is refused
    (InputError), not read as a paste: nothing else would read it, and a side read as
    nothing is "every GPU removed"."""
    if not data.lstrip(_WS).startswith(b"{") or len(data) > JSON_CAP:
        return None
    try:
        doc = safejson.loads(data.decode("utf-8", errors="replace"))
    except safejson.TooDeep:
        raise InputError(f"{label}: JSON nested too deeply to read: not a result") from None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "schema" in doc else None


def _head(fh: IO[bytes]) -> bytes:
    """The bytes that tell a result JSON from anything else, read once: up to the first
    non-blank byte, then, when it is ``{``, up to JSON_CAP + 1 bytes."""
    data = bytearray(fh.read(64 << 10))
    blank = not data.strip(_WS)
    while blank and data and len(data) <= JSON_CAP:
        more = fh.read(64 << 10)
        if not more:
            break
        data += more
        blank = not more.strip(_WS)
    if data.lstrip(_WS)[:1] == b"{":
        data += fh.read(JSON_CAP + 1 - len(data))
    return bytes(data)


def load_view(path: str, include_noise: bool = False,
              window: LogWindow | None = None) -> DiffView:
    """Load and analyse one side: anything ``analyze`` accepts, or a result JSON. A
    pipe, FIFO or stdin is read once: the bytes that decided go on to the loader."""
    from gputriage.ingest import load_inputs, load_opened
    from gputriage.io.inputs import DIR, STREAM, open_input

    with open_input(path) as inp:
        data = b"" if inp.kind == DIR else _head(inp.fh)
        doc = _json_document(data, inp.name)
        if doc is not None:
            return view_from_json(doc, inp.name)
        snap = load_opened(inp, data) if inp.kind == STREAM else load_inputs([path])
    from gputriage.engine.analysis import analyze_facts
    from gputriage.facts.window import LogWindow

    facts = Facts(snap, window=window or LogWindow())
    result = analyze_facts(facts)
    return view_from_result(result, facts, inp.name, include_noise)


# -- comparing -------------------------------------------------------------------------
def family(key: str) -> str:
    """The key with its bracketed part wildcarded: ``gpu[*].vbios``."""
    return _BRACKET.sub("[*]", key)


@dataclass(frozen=True)
class _Gpu:
    """A GPU of one side as the comparison needs it."""

    bus: str
    ident: str | None  # UUID, else serial
    name: str | None
    visible: bool

    @property
    def label(self) -> str:
        return self.ident or self.bus


def _gpu_rows(view: DiffView) -> list[_Gpu]:
    rows = []
    for g in view.gpus:
        bus = g.pci_bus_id
        if not bus:
            continue
        ident = (g.uuid or _digest_text(view, f"gpu[{bus}].uuid")
                 or _digest_text(view, f"gpu[{bus}].serial"))
        rows.append(_Gpu(bus, ident, g.name, g.visible))
    return rows


def _digest_text(view: DiffView, key: str) -> str | None:
    value = view.digest.get(key)
    return value if isinstance(value, str) else None


def _match(row: _Gpu, after: list[_Gpu], by_ident: dict[str, int],
           by_bus: dict[str, int]) -> int | None:
    """Where ``row`` is in ``after``: the GPU of the same identity, else the one on the
    same bus unless both identities are known and differ."""
    if row.ident and row.ident in by_ident:
        return by_ident[row.ident]
    i = by_bus.get(row.bus)
    if i is None or (row.ident and after[i].ident and after[i].ident != row.ident):
        return None
    return i


def _gpu_changes(a: DiffView, b: DiffView) -> tuple[list[GpuChange], set[str]]:
    """GPU set changes, and the bus ids whose per-GPU keys they already cover."""
    before = [r for r in _gpu_rows(a) if r.visible]
    after_all = _gpu_rows(b)
    after = [r for r in after_all if r.visible]
    hidden = {r.bus for r in after_all if not r.visible}
    changes: list[GpuChange] = []
    covered: set[str] = set()
    matched: set[int] = set()
    by_ident = {r.ident: i for i, r in enumerate(after) if r.ident}
    by_bus = {r.bus: i for i, r in enumerate(after)}
    for row in before:
        i = _match(row, after, by_ident, by_bus)
        if i is None or i in matched:
            note = "on PCI but not visible to the driver" if row.bus in hidden else None
            changes.append(GpuChange("removed", row.label, row.bus, None, row.name, note))
            covered.add(row.bus)
            continue
        matched.add(i)
        other = after[i]
        if other.bus != row.bus:
            changes.append(GpuChange("moved", row.label, row.bus, other.bus,
                                     other.name or row.name))
            covered.update((row.bus, other.bus))
    for i, row in enumerate(after):
        if i not in matched:
            changes.append(GpuChange("added", row.label, None, row.bus, row.name))
            covered.add(row.bus)
    return changes, covered


def _bus_in(key: str) -> str | None:
    if key.startswith("gpu[") and "]" in key:
        return key[4:key.index("]")]
    return None


def _sort_key(key: str) -> tuple[int, str]:
    order = ("kernel", "driver.", "cuda", "container.", "cdi[", "containerd.", "docker[",
             "gpu[", "nic[", "ib[", "unit[", "hugepages[")
    for rank, prefix in enumerate(order):
        if key.startswith(prefix):
            return (rank, key)
    return (len(order), key)


def diff_views(a: DiffView, b: DiffView) -> Diff:
    """Compare side ``a`` (before) with side ``b`` (after)."""
    out = Diff(a.label, b.label, warnings=host_warnings(a, b))
    out.gpus, covered = _gpu_changes(a, b)
    fam_a = {family(k) for k in a.digest}
    fam_b = {family(k) for k in b.digest}
    out.not_compared = sorted(fam_a ^ fam_b, key=_sort_key)
    for key in sorted(set(a.digest) | set(b.digest), key=_sort_key):
        if family(key) not in fam_a or family(key) not in fam_b:
            continue
        if _bus_in(key) in covered:
            continue
        before, after = a.digest.get(key), b.digest.get(key)
        if before != after:
            out.changes.append(FactChange(key, before, after))
    old = {f.key: f for f in a.findings if f.severity in PROBLEM_SEVERITIES}
    cur = {f.key: f for f in b.findings if f.severity in PROBLEM_SEVERITIES}
    out.new = [f for k, f in cur.items() if k not in old]
    out.resolved = [f for k, f in old.items() if k not in cur]
    out.still = [f for k, f in cur.items() if k in old]
    return out


def host_warnings(a: DiffView, b: DiffView) -> list[str]:
    """A line when A and B name different hosts: their differences are then two
    machines', not what changed on one."""
    name_a, name_b = a.host.hostname, b.host.hostname
    if not (name_a and name_b):
        return []
    if name_a.casefold() == name_b.casefold():
        return []
    return [f"A is host {name_a}, B is host {name_b}: this compares two different hosts, "
            "not one host over time"]
