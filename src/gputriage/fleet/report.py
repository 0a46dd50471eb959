"""Fleet aggregation and blast radius: which nodes share a finding, and what
sets them apart from the nodes that do not have it.

Each node is reduced to a :class:`NodeRecord` (its name, a few attributes and
the ids of its findings) as soon as it is read, so a fleet of 100,000 nodes
never holds 100,000 full results. :class:`Fleet` counts, and
:meth:`Fleet.report` ranks, for every finding, the attribute values of the
affected nodes by how well they separate them from the unaffected ones.

Score: the F1 of the rule "nodes with this value are the affected ones":
precision = affected nodes with the value / all nodes with the value,
recall = affected nodes with the value / affected nodes, F1 their harmonic
mean. A value that every affected node has and no healthy node has scores 1;
a confounder that the affected nodes share with many healthy ones loses on
precision, and a value only some affected nodes have loses on recall. Values
that every node of the fleet has are never reported (they separate nothing).
F1 was chosen over information gain because it reads directly ("6 of 10
nodes on this driver are affected, all affected nodes are on it") and does
not reward values that describe the healthy majority.

The aggregation above the "inputs" line is pure; below it, :func:`load_fleet`
reads result JSON files, snapshot directories and tarballs (in worker
processes for large fleets), reporting and skipping the ones it cannot use;
:mod:`gputriage.fleet.walk` finds them, reads only regular files and bounds the
walk. Result JSON is read up to 64 MiB, by :mod:`gputriage.results.reader`: a field
missing or of another type makes the input a bad one, the field named; nesting that
the JSON decoder refuses (RecursionError) is "not valid JSON". Result JSON carries
driver, kernel, OS and GPU models; VBIOS, GSP firmware, container toolkit and boot
time come from snapshots (uptime and the manifest time), or from ``gpus[].vbios``,
``gpus[].firmware``, ``host.container_toolkit`` and ``host.boot_time`` should
results carry them.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from gputriage.fleet.walk import SKIP, discover
from gputriage.results.reader import ResultBrief, ResultDocError, read_brief
from gputriage.vocabulary import RESULT_SCHEMA, Severity

if TYPE_CHECKING:
    from gputriage.facts.store import Facts
    from gputriage.model import GpuRow
    from gputriage.results.reader import FindingBrief, ResultHost

FLEET_SCHEMA = "gputriage/fleet/v1"

# Attribute names, in the order ties are broken (most telling first).
ATTRIBUTES: tuple[str, ...] = (
    "driver.userspace", "driver.kernel_module", "driver.cuda", "kernel", "vbios",
    "gpu.model", "firmware", "container_toolkit", "os", "boot_window", "host.pattern",
)
_ATTR_ORDER = {name: i for i, name in enumerate(ATTRIBUTES)}
_SEVERITY_RANK = {s.value: s.rank for s in Severity}  # records keep severities as text
_TRAILING_DIGITS = re.compile(r"[0-9]+$")
_SPLIT = re.compile(r"[-_.]")


@dataclass(frozen=True)
class NodeRecord:
    """What the fleet keeps of one node: name, attributes, finding ids."""

    node: str
    origin: str
    attributes: tuple[tuple[str, str], ...]  # (attribute, value); host.pattern repeats
    findings: tuple[tuple[str, str], ...]  # (finding id, severity), one per id
    created: str = ""  # the result's snapshot time; the newest of duplicates wins


@dataclass(frozen=True)
class BadInput:
    """An input that was reported and skipped."""

    path: str
    reason: str


@dataclass(frozen=True)
class DuplicateHost:
    """A host named by several inputs: the input kept (the newest result) and the one
    left out."""

    node: str
    kept: str
    dropped: str


@dataclass(frozen=True)
class Separator:
    """One attribute value and how well it separates affected from unaffected."""

    attribute: str
    value: str
    affected_with: int  # affected nodes having the value
    nodes_with: int  # all nodes having the value
    precision: float
    recall: float
    score: float  # F1


@dataclass(frozen=True)
class FindingSummary:
    """A finding across the fleet: its nodes and its blast radius."""

    id: str
    severity: str
    count: int
    nodes: tuple[str, ...]
    blast_radius: tuple[Separator, ...]


@dataclass
class FleetReport:
    """The fleet view: findings worst first, and the inputs that were skipped."""

    nodes: int
    healthy: int  # nodes without any finding of the reported severities
    findings: list[FindingSummary]
    bad_inputs: list[BadInput]
    bad_count: int
    duplicates: int = 0
    duplicate_hosts: list[DuplicateHost] = field(default_factory=list)  # up to keep_bad


class FleetInputError(Exception):
    """An input that cannot be turned into a node (missing, corrupt, wrong schema)."""


# -- attributes ------------------------------------------------------------------------
def host_patterns(name: str) -> list[str]:
    """Host-name patterns as ``PATTERN*``: the name without its trailing digits
    (``r12-gpu-*``) and each prefix ending in ``-``, ``_`` or ``.`` (``r12-*``)."""
    out: list[str] = []
    stripped = _TRAILING_DIGITS.sub("", name)
    if stripped and stripped != name:
        out.append(stripped + "*")
    for m in _SPLIT.finditer(name):
        if m.start() > 0:
            out.append(name[:m.end()] + "*")
    return sorted(set(out) - {name + "*"})


def boot_window(boot: datetime, hours: float) -> str:
    """The ``hours``-wide UTC window a boot time falls in (ISO start/width)."""
    if boot.tzinfo is None:
        boot = boot.replace(tzinfo=timezone.utc)
    width = max(int(hours * 3600), 60)
    stamp = int(boot.timestamp()) // width * width
    start = datetime.fromtimestamp(stamp, tz=timezone.utc)
    return f"{start.strftime('%Y-%m-%dT%H:%MZ')}/{hours:g}h"


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _text(value: str | None) -> str | None:
    text = value.strip() if value else None
    return sys.intern(text) if text else None


def _gpu_sets(gpus: tuple[GpuRow, ...]) -> tuple[str | None, str | None, str | None]:
    """The GPU models, VBIOS versions and firmware versions of a node, each as one
    sorted comma-joined value (one pass over the GPUs: this runs 100,000 times)."""
    names: set[str] = set()
    vbioses: set[str] = set()
    firmwares: set[str] = set()
    for g in gpus:
        for bucket, value in ((names, g.name), (vbioses, g.vbios), (firmwares, g.firmware)):
            if value:
                bucket.add(value.strip())
    return _joined(names), _joined(vbioses), _joined(firmwares)


def _joined(values: set[str]) -> str | None:
    values.discard("")
    return sys.intern(",".join(sorted(values))) if values else None


def _attributes(host: ResultHost, gpus: tuple[GpuRow, ...]) -> dict[str, str | None]:
    """The attributes a result's host summary and GPU rows give."""
    model, vbios, firmware = _gpu_sets(gpus)
    return {
        "driver.userspace": _text(host.driver.userspace),
        "driver.kernel_module": _text(host.driver.kernel_module),
        "driver.cuda": _text(host.driver.cuda),
        "kernel": _text(host.kernel),
        "vbios": vbios,
        "gpu.model": model,
        "firmware": firmware,
        "container_toolkit": _text(host.container_toolkit),
        "os": _text(host.os),
    }


def _worst_findings(findings: tuple[FindingBrief, ...]) -> tuple[tuple[str, str], ...]:
    """(finding id, worst severity) of each problem finding, sorted by id ("ok"
    findings are passed checks, not problems)."""
    worst: dict[str, Severity] = {}
    for f in findings:
        if f.severity.rank == 0:
            continue
        if f.severity.rank > (worst[f.id].rank if f.id in worst else -1):
            worst[f.id] = f.severity
    return tuple(sorted((sys.intern(fid), sys.intern(sev.value))
                        for fid, sev in worst.items()))


def record_from_result(doc: object, origin: str, *, extra: dict[str, str] | None = None,
                       boot_hours: float = 1.0) -> NodeRecord:
    """The :class:`NodeRecord` of a ``gputriage/result/v1`` document (decoded, or
    already read by :mod:`gputriage.results.reader`).

    VBIOS, firmware, container toolkit and boot time are read from the result
    when present (``gpus[].vbios``, ``gpus[].firmware``,
    ``host.container_toolkit``, ``host.boot_time``); ``extra`` supplies them
    from a snapshot. FleetInputError, naming the field, when ``doc`` is not such a
    result."""
    if not isinstance(doc, ResultBrief):
        try:
            doc = read_brief(doc, origin)
        except ResultDocError as exc:
            raise FleetInputError(exc.detail) from None
    host = doc.host
    name = _text(host.hostname) or _text(doc.manifest_host) or origin
    attrs = _attributes(host, doc.gpus)
    boot = _parse_time(host.boot_time)
    for key, value in (extra or {}).items():
        if key == "boot_time":
            boot = boot or _parse_time(value)
        elif value and not attrs.get(key):
            attrs[key] = sys.intern(value)
    if boot is not None:
        with contextlib.suppress(ValueError, OverflowError, OSError):  # no such clock time
            attrs["boot_window"] = sys.intern(boot_window(boot, boot_hours))
    pairs = [(k, v) for k, v in attrs.items() if v]
    pairs += [("host.pattern", sys.intern(p)) for p in host_patterns(name)]
    created = _text(doc.manifest_created) or _text(doc.generated) or ""
    return NodeRecord(name, origin, tuple(pairs), _worst_findings(doc.findings), created)


# -- aggregation -----------------------------------------------------------------------
@dataclass
class Fleet:
    """Streaming aggregation: add records one by one, then :meth:`report`."""

    names: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)  # per node: the input kept
    dups: list[DuplicateHost] = field(default_factory=list)
    _values: list[tuple[int, ...]] = field(default_factory=list)  # per node: value ids
    _findings: list[tuple[str, ...]] = field(default_factory=list)  # per node
    _value_ids: dict[tuple[str, str], int] = field(default_factory=dict)
    _value_keys: list[tuple[str, str]] = field(default_factory=list)
    _value_count: Counter = field(default_factory=Counter)
    _by_name: dict[str, int] = field(default_factory=dict)
    _severity: dict[str, str] = field(default_factory=dict)
    bad: list[BadInput] = field(default_factory=list)
    bad_count: int = 0
    duplicates: int = 0
    keep_bad: int = 1000  # bad inputs listed by name; all are counted

    def add_bad(self, path: str, reason: str) -> None:
        """Count (and list, up to ``keep_bad``) an input that was skipped."""
        self.bad_count += 1
        if len(self.bad) < self.keep_bad:
            self.bad.append(BadInput(path, reason))

    def _value_id(self, key: tuple[str, str]) -> int:
        vid = self._value_ids.get(key)
        if vid is None:
            vid = self._value_ids[key] = len(self._value_keys)
            self._value_keys.append(key)
        return vid

    def add(self, rec: NodeRecord) -> None:
        """Add one node; a second result of the same host replaces the older one."""
        values = tuple(sorted({self._value_id(k) for k in rec.attributes}))
        fids = tuple(sys.intern(fid) for fid, _ in rec.findings)
        for fid, sev in rec.findings:
            if _SEVERITY_RANK[sev] > _SEVERITY_RANK.get(self._severity.get(fid, ""), -1):
                self._severity[fid] = sev
        old = self._by_name.get(rec.node)
        if old is not None:
            self.duplicates += 1
            older = rec.created < self.created[old]
            if len(self.dups) < self.keep_bad:
                kept, dropped = self.origins[old], rec.origin
                self.dups.append(DuplicateHost(rec.node, *((kept, dropped) if older
                                                           else (dropped, kept))))
            if older:
                return
            self._value_count.subtract(self._values[old])
            self._values[old], self._findings[old], self.created[old] = \
                values, fids, rec.created
            self.origins[old] = rec.origin
        else:
            self._by_name[rec.node] = len(self.names)
            self.names.append(rec.node)
            self.created.append(rec.created)
            self.origins.append(rec.origin)
            self._values.append(values)
            self._findings.append(fids)
        self._value_count.update(values)

    def report(self, top: int = 5, min_severity: str = "warning") -> FleetReport:
        """Findings of at least ``min_severity``, worst first (then by node count),
        each with its ``top`` separators; "healthy" nodes have none of them."""
        total = len(self.names)
        floor = _SEVERITY_RANK.get(min_severity, 2)
        affected: dict[str, list[int]] = {}
        healthy = 0
        for i, fids in enumerate(self._findings):
            shown = [f for f in fids if _SEVERITY_RANK.get(self._severity.get(f, ""), 0) >= floor]
            healthy += not shown
            for fid in shown:
                affected.setdefault(fid, []).append(i)
        summaries = []
        for fid, idx in affected.items():
            summaries.append(FindingSummary(
                fid, self._severity.get(fid, "warning"), len(idx),
                tuple(sorted(self.names[i] for i in idx)), self._separators(idx, total, top)))
        summaries.sort(key=lambda s: (-_SEVERITY_RANK.get(s.severity, 0), -s.count, s.id))
        return FleetReport(total, healthy, summaries, list(self.bad), self.bad_count,
                           self.duplicates, list(self.dups))

    def _separators(self, idx: list[int], total: int, top: int) -> tuple[Separator, ...]:
        if len(idx) >= total:
            return ()  # every node affected: nothing to compare with
        hits: Counter = Counter()
        for i in idx:
            hits.update(self._values[i])
        out = []
        for vid, tp in hits.items():
            n = self._value_count[vid]
            if n >= total:
                continue  # the whole fleet has it: separates nothing
            precision, recall = tp / n, tp / len(idx)
            score = 2 * precision * recall / (precision + recall)
            attr, value = self._value_keys[vid]
            out.append(Separator(attr, value, tp, n, round(precision, 4), round(recall, 4),
                                 round(score, 4)))
        out.sort(key=lambda s: (-s.score, -s.precision, _ATTR_ORDER.get(s.attribute, 99),
                                len(s.value), s.value))
        kept: list[Separator] = []
        for sep in out:
            if len(kept) >= top:
                break
            if sep.attribute == "host.pattern" and any(
                    k.attribute == "host.pattern" and k.nodes_with == sep.nodes_with
                    and k.affected_with == sep.affected_with
                    and sep.value.startswith(k.value[:-1]) for k in kept):
                continue  # a longer pattern naming the same nodes as a kept one
            kept.append(sep)
        return tuple(kept)


def aggregate(records: Iterable[NodeRecord], top: int = 5,
              min_severity: str = "warning") -> FleetReport:
    """A :class:`FleetReport` of already built records (pure)."""
    fleet = Fleet()
    for rec in records:
        fleet.add(rec)
    return fleet.report(top, min_severity)


# -- inputs ----------------------------------------------------------------------------
_RESULT_CAP = 64 * 1024 * 1024
_GSP = re.compile(r"<gsp_firmware_version>\s*([^<\s]+)\s*<")


def load_result(path: str, boot_hours: float = 1.0) -> NodeRecord:
    """The record of a ``check --json`` result file; FleetInputError when unusable
    (a FIFO or device is refused without a byte read)."""
    import json

    data = _read_regular(path, _RESULT_CAP + 1)
    if len(data) > _RESULT_CAP:
        raise FleetInputError("larger than 64 MiB: not a result")
    if not data.strip():
        raise FleetInputError("empty file")
    doc = _result_head(data)
    if doc is None:
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise FleetInputError(f"not valid JSON ({str(exc)[:80]})") from None
    return record_from_result(doc, path, boot_hours=boot_hours)


def _read_regular(path: str, size: int) -> bytes:
    """Up to ``size`` bytes of ``path`` when it is a regular file (never waits on a FIFO)."""
    import os
    import stat

    from gputriage.io.inputs import file_kind

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise FleetInputError(exc.strerror or type(exc).__name__) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FleetInputError(f"{file_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(size)
    except OSError as exc:
        raise FleetInputError(exc.strerror or type(exc).__name__) from None
    finally:
        os.close(fd)


# ``check --json`` writes the top-level keys in a fixed order with indent=2; a key
# after exactly one newline and two spaces is a top-level key (JSON strings hold
# no raw newline), and "created"/"host" after four spaces are the manifest's own.
_SKIPPED = b'\n  "skipped": '
_MANIFEST = b'\n  "manifest": {'
_MANIFEST_KEY = re.compile(rb'\n    "(created|host)": ("(?:[^"\\\n]|\\.)*")')


def _result_head(data: bytes) -> dict | None:
    """Fast path for the files ``check --json`` writes: decode only what the fleet
    reads (:func:`gputriage.results.reader.read_brief`: host, gpus, findings and two
    manifest fields), not the skipped rules, inputs and the manifest's source records,
    which are most of the bytes. None: use the full decoder."""
    import json

    cut = data.find(_SKIPPED)
    if cut <= 0 or not data.rstrip().endswith(b"}"):
        return None
    try:
        doc = json.loads(data[:cut].rstrip().rstrip(b",") + b"}")
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != RESULT_SCHEMA:
        return None
    start = data.find(_MANIFEST, cut)
    manifest: dict[str, object] = {}
    if start > 0:
        for m in _MANIFEST_KEY.finditer(data, start):
            with contextlib.suppress(ValueError):
                manifest.setdefault(m.group(1).decode(), json.loads(m.group(2)))
    doc["manifest"] = manifest
    return doc


def snapshot_extras(facts: Facts) -> dict[str, str]:
    """VBIOS, GSP firmware, container toolkit version and boot time of an analysed
    snapshot's facts (what a result JSON may not carry)."""
    extra: dict[str, str] = {}
    vbios = sorted({g.vbios for _, rep in facts.maybe("smi", []) for g in rep.gpus
                    if getattr(g, "vbios", None)})
    if vbios:
        extra["vbios"] = ",".join(vbios)
    firmware = sorted(set(_GSP.findall(facts.text("nvidia_smi_q_xml") or "")) - {"N/A"})
    if firmware:
        extra["firmware"] = ",".join(firmware)
    identity = facts.get("host_identity")
    if identity.container_toolkit:
        extra["container_toolkit"] = identity.container_toolkit
    if identity.boot_time:
        extra["boot_time"] = identity.boot_time
    return extra


def load_snapshot(path: str, boot_hours: float = 1.0) -> NodeRecord:
    """Analyse a snapshot or a sosreport (directory or tarball) and keep its record."""
    from gputriage.engine.analysis import analyze_facts
    from gputriage.errors import InputError
    from gputriage.facts.store import Facts
    from gputriage.ingest import load_snapshot
    from gputriage.results.document import to_json

    try:
        snap = load_snapshot(path)
        if snap.manifest is None:
            raise FleetInputError("no manifest.json: not a gputriage snapshot")
        facts = Facts(snap)
        doc = read_brief(to_json(analyze_facts(facts)), path)  # as a result file reads
        extra = snapshot_extras(facts)
    except (InputError, OSError, ValueError, EOFError) as exc:
        raise FleetInputError(str(exc).replace(str(path) + ": ", "")[:200]) from None
    return record_from_result(doc, path, extra=extra, boot_hours=boot_hours)


def _load_one(item: tuple[str, str, str, float]) -> tuple[str, NodeRecord | None, str]:
    """Worker: ``(path, record or None, reason)`` of one discovered input."""
    path, kind, reason, boot_hours = item
    if kind == SKIP:
        return path, None, reason
    loader = load_result if kind == "result" else load_snapshot
    try:
        return path, loader(path, boot_hours), ""
    except FleetInputError as exc:
        return path, None, str(exc) or "unreadable"
    except Exception as exc:  # one bad node never stops the fleet
        return path, None, f"could not be analysed: {type(exc).__name__}: {exc}"[:200]


def _chunks(items: Iterator[tuple[str, str, str, float]], size: int) -> Iterator[list]:
    batch: list = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def load_fleet(paths: Iterable[str], *, boot_hours: float = 1.0, top: int = 5,
               min_severity: str = "warning", jobs: int = 1,
               fleet: Fleet | None = None) -> FleetReport:
    """Read every input under ``paths`` into a fleet and report it; unusable
    inputs are counted and listed, never fatal. With ``jobs`` > 1 a fleet of
    256 inputs or more is read by that many worker processes (only the small
    records travel back; input order is kept)."""
    fleet = fleet or Fleet()
    items = ((path, kind, reason, boot_hours) for path, kind, reason in discover(paths))
    pool = None
    try:
        for batch in _chunks(items, 4096):  # bounded: never all paths in flight
            if pool is None and jobs > 1 and len(batch) >= 256:
                from concurrent.futures import ProcessPoolExecutor

                pool = ProcessPoolExecutor(max_workers=jobs)
            done = (pool.map(_load_one, batch, chunksize=64) if pool is not None
                    else map(_load_one, batch))
            for path, rec, reason in done:
                _take(fleet, path, rec, reason)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return fleet.report(top, min_severity)


def _take(fleet: Fleet, path: str, rec: NodeRecord | None, reason: str) -> None:
    if rec is None:
        fleet.add_bad(path, reason)
    else:
        fleet.add(rec)
