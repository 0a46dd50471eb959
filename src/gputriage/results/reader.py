"""The one reader of the published result JSON, ``gputriage/result/v1``.

``check --json`` and ``analyze --json`` print it, a watch serves it on ``/result``,
``diff``, ``fleet`` and ``npd`` read it back (docs/json-schema.md; the schema file is
src/gputriage/schemas/result.json). :func:`read_result` turns a decoded document into
frozen, typed values: the model's own :class:`~gputriage.model.Finding`,
:class:`~gputriage.model.Scope`, :class:`~gputriage.model.Evidence`,
:class:`~gputriage.model.GpuRow`... so that a document read back equals the Result it
was written from. Each field it reads is checked: a key the schema requires that is
missing, a value of another type, a number out of range or a word outside the
vocabulary is a :class:`ResultDocError` naming the field
(``findings[2].scope.gpu_index``), never a KeyError or a default in its place. Keys it
does not know are ignored: within v1 keys are only ever added.

:func:`read_brief` reads only what an aggregate over many results needs (``fleet``:
the host, the GPUs, each finding's id, severity, blame and status).

Bounded by construction: it walks only the keys it knows, consequences at most
:data:`MAX_CONSEQUENCE_DEPTH` deep; the snapshot manifest (its own schema,
``gputriage/snapshot/v1``) is kept as decoded. :func:`loads_result` decodes through
:mod:`gputriage.io.safejson` (nesting bounded) first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import NoReturn

from gputriage.errors import InputError
from gputriage.io import safejson
from gputriage.model import (
    DriverVersions,
    Evidence,
    Finding,
    GpuRow,
    HealthyChange,
    HostIdentity,
    Occurrences,
    Scope,
    Skipped,
)
from gputriage.text.fields import as_int
from gputriage.vocabulary import (
    AT_FAULT,
    JOB_VERDICTS,
    RESULT_SCHEMA,
    VERDICTS,
    Action,
    Blame,
    Severity,
    Status,
)

__all__ = ["MAX_CONSEQUENCE_DEPTH", "RESULT_SCHEMA", "FindingBrief", "InputRef",
           "ResultBrief", "ResultDoc", "ResultDocError", "ResultHost", "Verdicts",
           "loads_result", "read_brief", "read_result"]

# Consequences nest findings in findings: causes fold one level, and a document nested
# within safejson's bound has at most this many (a list and an object per level).
MAX_CONSEQUENCE_DEPTH = safejson.MAX_DEPTH // 2
_SHOWN = 40  # characters of a wrong value quoted in an error
_MAX_NUMBER = 1 << 31  # a GPU index, a count: far beyond any host


class ResultDocError(InputError):
    """A document that is not a valid ``gputriage/result/v1``: ``field`` says where
    (``""`` for the document itself), ``why`` what is wrong there."""

    def __init__(self, label: str, field: str, why: str) -> None:
        self.label, self.field, self.why = label, field, why
        super().__init__(f"{label}: {self.detail}")

    @property
    def detail(self) -> str:
        """The error without the document's label: ``field: why``."""
        return f"{self.field}: {self.why}" if self.field else self.why


@dataclass(frozen=True)
class Verdicts:
    """The two sides judged apart (``verdicts``)."""

    node: str  # ok | warning | critical | unknown
    job: str  # ok | warning | critical
    at_fault: str  # node | job | node and job | neither
    job_faults_fail: bool


@dataclass(frozen=True)
class ResultHost(HostIdentity):
    """The ``host`` summary as published: every key may be absent (None here)."""

    gpus_on_pci: int | None = None
    gpus_visible: int | None = None
    rules_run: int | None = None
    verdict: str | None = None  # ok | warning | critical | unknown
    changed_since_healthy: HealthyChange | None = None


@dataclass(frozen=True)
class InputRef:
    """One input analysed: where it came from and the sources read from it."""

    origin: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class ResultDoc:
    """One ``gputriage/result/v1`` document, typed. ``findings`` keep the document's
    order (current first, worst first)."""

    tool_version: str
    generated: str  # ISO 8601 with its UTC offset, as written
    verdict: str  # ok | warning | critical | unknown
    exit_status: int  # 0..3
    verdicts: Verdicts
    host: ResultHost
    gpus: tuple[GpuRow, ...]
    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...]
    inputs: tuple[InputRef, ...]
    manifest: Mapping[str, object] | None  # the snapshot manifest, as decoded
    unreadable: tuple[str, ...]
    not_read: tuple[str, ...]

    @property
    def generated_at(self) -> datetime:
        """:attr:`generated` as an aware time (validated when read)."""
        return _aware(datetime.fromisoformat(self.generated))


@dataclass(frozen=True)
class FindingBrief:
    """A finding as an aggregate over many results counts it."""

    id: str
    severity: Severity
    blame: Blame
    status: Status


@dataclass(frozen=True)
class ResultBrief:
    """What ``fleet`` keeps of each of 100,000 results (:func:`read_brief`): when,
    the host, its GPUs, each finding's id, severity, blame and status, and the
    snapshot manifest's host and creation time."""

    generated: str
    host: ResultHost
    gpus: tuple[GpuRow, ...]
    findings: tuple[FindingBrief, ...]
    manifest_host: str | None
    manifest_created: str | None


def loads_result(data: str | bytes | bytearray, label: str) -> ResultDoc:
    """The result ``data`` holds: decoded with its nesting bounded, then read."""
    try:
        doc = safejson.loads(data)
    except ValueError as exc:  # UnicodeDecodeError included
        raise ResultDocError(label, "", f"not valid JSON ({str(exc)[:80]})") from None
    return read_result(doc, label)


def read_result(doc: object, label: str) -> ResultDoc:
    """The typed reading of a decoded ``gputriage/result/v1`` document;
    :class:`ResultDocError` (an InputError) naming the field for anything else."""
    r = _Reader(label)
    top = r.document(doc)
    return ResultDoc(
        tool_version=r.text(top, "tool_version", ""),
        generated=r.generated(top),
        verdict=r.word(top, "verdict", "", VERDICTS),
        exit_status=r.integer(top, "exit_status", "", hi=3),
        verdicts=r.verdicts(r.obj(top, "verdicts", "")) if "verdicts" in top
        else _verdicts_before_sides(r.word(top, "verdict", "", VERDICTS)),
        host=r.host(r.obj(top, "host", "")),
        gpus=r.gpus(r.array(top, "gpus", "")),
        findings=r.findings(r.array(top, "findings", ""), "findings", 0),
        skipped=r.skipped(r.array(top, "skipped", "")),
        inputs=tuple(r.input_ref(s, f"inputs[{i}]")
                     for i, s in enumerate(r.array(top, "inputs", ""))),
        manifest=r.manifest(top),
        unreadable=r.texts(top, "unreadable", ""),
        not_read=r.texts(top, "not_read", "") if "not_read" in top else ())


def _verdicts_before_sides(verdict: str) -> Verdicts:
    """``verdicts`` of a result written before v1 judged the node and the job apart (it
    gained ``verdicts``, ``not_read`` and each finding's ``status`` later): every finding
    was the node's then, and every one current."""
    bad = verdict in ("warning", "critical")
    return Verdicts(verdict, "ok", "node" if bad else "neither", False)


def read_brief(doc: object, label: str) -> ResultBrief:
    """The :class:`ResultBrief` of a decoded result: only ``schema``, ``generated``,
    ``host``, ``gpus``, ``manifest`` and the findings' ``id``, ``severity``, ``blame``
    and ``status`` are read, as :func:`read_result` reads them; the rest may be absent."""
    r = _Reader(label)
    top = r.document(doc)
    manifest = r.manifest(top) or {}
    host, created = manifest.get("host"), manifest.get("created")
    return ResultBrief(
        generated=r.generated(top), host=r.host(r.obj(top, "host", "")),
        gpus=r.gpus(r.array(top, "gpus", "")),
        findings=tuple(r.brief(f, f"findings[{i}]")
                       for i, f in enumerate(r.array(top, "findings", ""))),
        manifest_host=host if type(host) is str else None,
        manifest_created=created if type(created) is str else None)


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def _kind(value: object) -> str:
    """What a JSON value is, in words, with a short quote of it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int) and value.bit_length() > 64:
        return f"a number of about {value.bit_length() * 3 // 10} digits"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {_show(value)}"
    if isinstance(value, list):
        return f"an array of {len(value)}"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    return type(value).__name__


def _show(text: str) -> str:
    """A string quoted on one short line, escapes and all."""
    shown = ascii(text[:_SHOWN])
    return shown if len(text) <= _SHOWN else shown[:-1] + "...'"


def _path(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


_MISSING = object()
JsonObject = dict[str, object]  # a decoded JSON object
JsonArray = list[object]


class _Reader:
    """Field readers: each takes the object, the key and the object's path (joined
    into a field name only when an error is raised). The common case, a value of the
    right type, is one dict lookup and one type test."""

    def __init__(self, label: str) -> None:
        self.label = label

    def fail(self, field: str, why: str) -> NoReturn:
        raise ResultDocError(self.label, field, why)

    def need(self, obj: JsonObject, key: str, prefix: str) -> object:
        """The value of a required key, of any type (null included)."""
        value = obj.get(key, _MISSING)
        if value is _MISSING:
            self.fail(_path(prefix, key), "missing")
        return value

    def wrong(self, prefix: str, key: str, value: object, expected: str) -> NoReturn:
        if value is _MISSING:
            self.fail(_path(prefix, key), "missing")
        self.fail(_path(prefix, key), f"expected {expected}, got {_kind(value)}")

    # -- scalars -----------------------------------------------------------------------
    def text(self, obj: JsonObject, key: str, prefix: str) -> str:
        value = obj.get(key, _MISSING)
        if type(value) is str:
            return value
        self.wrong(prefix, key, value, "a string")

    def opt_text(self, obj: JsonObject, key: str, prefix: str) -> str | None:
        """A string, or None when absent or null."""
        value = obj.get(key)
        if value is None or type(value) is str:
            return value
        self.wrong(prefix, key, value, "a string")

    def some_text(self, obj: JsonObject, key: str, prefix: str) -> str | None:
        """A string, or None when absent (a key the writer leaves out when unknown:
        never null)."""
        value = obj.get(key, _MISSING)
        if type(value) is str:
            return value
        if value is _MISSING:
            return None
        self.wrong(prefix, key, value, "a string")

    def flag(self, obj: JsonObject, key: str, prefix: str) -> bool:
        value = obj.get(key, _MISSING)
        if type(value) is bool:
            return value
        self.wrong(prefix, key, value, "true or false")

    def integer(self, obj: JsonObject, key: str, prefix: str, *, lo: int = 0,
                hi: int = _MAX_NUMBER) -> int:
        """A whole number from ``lo`` to ``hi`` (``3.0`` too: JSON does not tell it
        from ``3``), read by the project's number converter."""
        value = obj.get(key, _MISSING)
        if type(value) is int and lo <= value <= hi:
            return value
        if type(value) in (int, float):
            number = as_int(value, lo=lo, hi=hi)
            if number is None:
                self.fail(_path(prefix, key),
                          f"{_kind(value)} is not a whole number from {lo} to {hi}")
            return number
        self.wrong(prefix, key, value, "an integer")

    def opt_integer(self, obj: JsonObject, key: str, prefix: str, *, nullable: bool = True
                    ) -> int | None:
        """An integer, or None when absent (or null, when ``nullable``)."""
        value = obj.get(key, _MISSING)
        if value is _MISSING or value is None and nullable:
            return None
        return self.integer(obj, key, prefix)

    def word(self, obj: JsonObject, key: str, prefix: str, words: tuple[str, ...],
             absent: str | None = None) -> str:
        """A string of the closed vocabulary ``words``; ``absent`` when the key is not
        there and may be missing (a field v1 gained later: older results lack it)."""
        value = obj.get(key, _MISSING)
        if value is _MISSING and absent is not None:
            return absent
        if value in words and type(value) is str:
            return value
        if type(value) is str:
            self.fail(_path(prefix, key), f"{_show(value)} is not one of {', '.join(words)}")
        self.wrong(prefix, key, value, "a string")

    # -- containers --------------------------------------------------------------------
    def obj(self, parent: JsonObject, key: str, prefix: str) -> JsonObject:
        value = parent.get(key, _MISSING)
        if type(value) is dict:
            return value
        self.wrong(prefix, key, value, "an object")

    def array(self, parent: JsonObject, key: str, prefix: str,
              required: bool = True) -> JsonArray:
        value = parent.get(key, _MISSING)
        if type(value) is list:
            return value
        if value is _MISSING and not required:
            return []
        self.wrong(prefix, key, value, "an array")

    def texts(self, parent: JsonObject, key: str, prefix: str) -> tuple[str, ...]:
        texts: list[str] = []
        for i, item in enumerate(self.array(parent, key, prefix)):
            if type(item) is not str:
                self.fail(f"{_path(prefix, key)}[{i}]",
                          f"expected a string, got {_kind(item)}")
            texts.append(item)
        return tuple(texts)

    def item(self, value: object, path: str) -> JsonObject:
        if type(value) is dict:
            return value
        self.fail(path, f"expected an object, got {_kind(value)}")

    # -- the parts ---------------------------------------------------------------------
    def document(self, doc: object) -> JsonObject:
        """``doc`` when it is an object of the result's schema."""
        if type(doc) is not dict:
            self.fail("", f"expected a JSON object, got {_kind(doc)}")
        schema = doc.get("schema", _MISSING)
        if schema != RESULT_SCHEMA:
            shown = "without a schema" if schema is _MISSING else (
                f"of schema {_show(schema)}" if type(schema) is str
                else f"whose schema is {_kind(schema)}")
            self.fail("", f"JSON {shown}, expected {RESULT_SCHEMA!r} (the output of "
                          "check --json or analyze --json)")
        return doc

    def generated(self, top: JsonObject) -> str:
        generated = self.text(top, "generated", "")
        try:
            datetime.fromisoformat(generated)
        except ValueError:
            self.fail("generated", f"{_show(generated)} is not an ISO 8601 time")
        return generated

    def manifest(self, top: JsonObject) -> JsonObject | None:
        manifest = self.need(top, "manifest", "")
        if manifest is not None and type(manifest) is not dict:
            self.wrong("", "manifest", manifest, "an object or null")
        return manifest

    def verdicts(self, v: JsonObject) -> Verdicts:
        at = "verdicts"
        return Verdicts(self.word(v, "node", at, VERDICTS),
                        self.word(v, "job", at, JOB_VERDICTS),
                        self.word(v, "at_fault", at, AT_FAULT),
                        self.flag(v, "job_faults_fail", at))

    def host(self, h: JsonObject) -> ResultHost:
        at = "host"
        driver = DriverVersions()
        if h.get("driver") is not None:
            where = "host.driver"
            d = self.obj(h, "driver", at)
            driver = DriverVersions(self.opt_text(d, "kernel_module", where),
                                    self.opt_text(d, "userspace", where),
                                    self.opt_text(d, "cuda", where))
        changed = None
        if h.get("changed_since_healthy") is not None:
            where = "host.changed_since_healthy"
            c = self.obj(h, "changed_since_healthy", at)
            changed = HealthyChange(self.text(c, "when", where),
                                    self.texts(c, "changes", where))
        verdict = None
        if h.get("verdict") is not None:
            verdict = self.word(h, "verdict", at, VERDICTS)
        return ResultHost(
            hostname=self.opt_text(h, "hostname", at), kernel=self.opt_text(h, "kernel", at),
            os=self.opt_text(h, "os", at), boot_id=self.opt_text(h, "boot_id", at),
            boot_time=self.opt_text(h, "boot_time", at), driver=driver,
            container_toolkit=self.opt_text(h, "container_toolkit", at),
            gpus_on_pci=self.opt_integer(h, "gpus_on_pci", at),
            gpus_visible=self.opt_integer(h, "gpus_visible", at),
            rules_run=self.opt_integer(h, "rules_run", at, nullable=False),
            verdict=verdict, changed_since_healthy=changed)

    def gpus(self, items: JsonArray) -> tuple[GpuRow, ...]:
        return tuple(self.gpu(g, f"gpus[{i}]") for i, g in enumerate(items))

    def gpu(self, value: object, at: str) -> GpuRow:
        if type(value) is dict:  # the rows check --json writes, tested in one go
            g = value
            index, bus, name, uuid = g.get("index"), g.get("pci_bus_id"), g.get("name"), \
                g.get("uuid")
            visible, persistence, severity = g.get("visible"), g.get("persistence_mode"), \
                g.get("severity")
            serial, vbios, firmware, state = g.get("serial", ""), g.get("vbios", ""), \
                g.get("firmware", ""), g.get("state", "")
            if (type(index) is int and 0 <= index <= _MAX_NUMBER and "pci_bus_id" in g
                    and (bus is None or type(bus) is str) and (name is None or type(name) is str)
                    and (uuid is None or type(uuid) is str) and type(visible) is bool
                    and (persistence is None or type(persistence) is bool)
                    and type(serial) is str and type(vbios) is str and type(firmware) is str
                    and type(state) is str and type(severity) is str
                    and severity in _SEVERITY_OF):
                return GpuRow(index, bus, name, uuid, visible, "persistence_mode" in g,
                              persistence, serial or None, vbios or None, firmware or None,
                              _SEVERITY_OF[severity], state or None)
        return self.gpu_in_detail(value, at)

    def gpu_in_detail(self, value: object, at: str) -> GpuRow:
        """:meth:`gpu` field by field: the error names the field (or a row the quick
        test was stricter on, such as a null index, is read)."""
        g = self.item(value, at)
        self.need(g, "index", at)
        self.need(g, "pci_bus_id", at)
        persistence = g.get("persistence_mode")
        return GpuRow(
            index=self.opt_integer(g, "index", at), pci_bus_id=self.opt_text(g, "pci_bus_id", at),
            name=self.opt_text(g, "name", at), uuid=self.opt_text(g, "uuid", at),
            visible=self.flag(g, "visible", at), listed="persistence_mode" in g,
            persistence_mode=None if persistence is None
            else self.flag(g, "persistence_mode", at),
            serial=self.some_text(g, "serial", at), vbios=self.some_text(g, "vbios", at),
            firmware=self.some_text(g, "firmware", at),
            severity=_SEVERITY_OF[self.word(g, "severity", at, _SEVERITIES)],
            state=self.some_text(g, "state", at))

    def scope(self, value: object, at: str) -> Scope:
        s = self.item(value, at)
        return Scope(self.text(s, "kind", at),
                     self.opt_integer(s, "gpu_index", at, nullable=False),
                     self.some_text(s, "uuid", at), self.some_text(s, "pci_bus_id", at),
                     self.some_text(s, "name", at))

    def evidence(self, value: object, at: str) -> Evidence:
        e = self.item(value, at)
        return Evidence(self.text(e, "source", at), self.texts(e, "lines", at),
                        self.some_text(e, "note", at))

    def occurrences(self, o: JsonObject, at: str) -> Occurrences:
        self.need(o, "first", at)
        self.need(o, "last", at)
        return Occurrences(self.integer(o, "count", at, lo=1),
                           self.opt_text(o, "first", at), self.opt_text(o, "last", at),
                           self.flag(o, "current_boot", at))

    def findings(self, items: JsonArray, at: str, depth: int) -> tuple[Finding, ...]:
        return tuple(self.finding(f, f"{at}[{i}]", depth) for i, f in enumerate(items))

    def finding(self, value: object, at: str, depth: int) -> Finding:
        if depth >= MAX_CONSEQUENCE_DEPTH:
            self.fail(at, f"consequences nested more than {MAX_CONSEQUENCE_DEPTH} deep")
        f = self.item(value, at)
        fid = self.text(f, "id", at)
        if not fid:
            self.fail(_path(at, "id"), "empty")
        severity = _SEVERITY_OF[self.word(f, "severity", at, _SEVERITIES)]
        # derived (the result's caps recompute it): checked, not kept; older documents lack it
        self.word(f, "counted_severity", at, _SEVERITIES, severity.value)
        action = _ACTION_OF[self.word(f, "action", at, _ACTIONS)]
        blame = _BLAME_OF[self.word(f, "blame", at, _BLAMES)]
        evidence = self.array(f, "evidence", at)
        also = self.array(f, "also", at, required=False)
        consequences = self.array(f, "consequences", at, required=False)
        try:
            return Finding(
                fid, severity, self.text(f, "title", at), self.text(f, "explanation", at),
                action, blame, scope=self.scope(self.need(f, "scope", at), _path(at, "scope")),
                evidence=tuple(self.evidence(e, f"{at}.evidence[{i}]")
                               for i, e in enumerate(evidence)),
                references=self.texts(f, "references", at),
                occurrences=self.occurrences(self.obj(f, "occurrences", at),
                                             _path(at, "occurrences"))
                if "occurrences" in f else None,
                status=_STATUS_OF[self.word(f, "status", at, _STATUSES, "current")],
                status_note=self.some_text(f, "status_note", at),
                also=tuple(self.scope(s, f"{at}.also[{i}]") for i, s in enumerate(also)),
                consequences=self.findings(consequences, _path(at, "consequences"), depth + 1),
                step=self.some_text(f, "step", at))
        except ValueError as exc:  # a severity, action and blame that cannot go together
            self.fail(at, str(exc).removeprefix(f"finding {fid}: "))

    def brief(self, value: object, at: str) -> FindingBrief:
        f = self.item(value, at)
        fid = self.text(f, "id", at)
        if not fid:
            self.fail(_path(at, "id"), "empty")
        return FindingBrief(fid, _SEVERITY_OF[self.word(f, "severity", at, _SEVERITIES)],
                            _BLAME_OF[self.word(f, "blame", at, _BLAMES)],
                            _STATUS_OF[self.word(f, "status", at, _STATUSES,
                                                 "current")])

    def skipped(self, items: JsonArray) -> tuple[Skipped, ...]:
        out = []
        for i, s in enumerate(items):
            if type(s) is dict and type(rule := s.get("rule")) is str \
                    and type(reason := s.get("reason")) is str:
                out.append(Skipped(rule, reason))
                continue
            at = f"skipped[{i}]"
            s = self.item(s, at)
            self.text(s, "rule", at)
            self.text(s, "reason", at)
        return tuple(out)

    def input_ref(self, value: object, at: str) -> InputRef:
        s = self.item(value, at)
        return InputRef(self.text(s, "origin", at), self.texts(s, "sources", at))


_SEVERITY_OF = {s.value: s for s in Severity}
_ACTION_OF = {a.value: a for a in Action}
_BLAME_OF = {b.value: b for b in Blame}
_STATUS_OF = {s.value: s for s in Status}
_SEVERITIES, _ACTIONS = tuple(_SEVERITY_OF), tuple(_ACTION_OF)
_BLAMES, _STATUSES = tuple(_BLAME_OF), tuple(_STATUS_OF)
