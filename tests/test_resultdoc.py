"""The one reader of ``gputriage/result/v1`` (:mod:`gputriage.results.reader`): every
scenario's ``check --json`` reads back as the Result that wrote it; each field the
published schema types or requires is checked, a wrong or missing one named; hostile
documents (huge numbers, deep nesting, long values) are one-line errors."""

from __future__ import annotations

import copy
import functools
import io
import json
from collections.abc import Iterator
from dataclasses import fields
from importlib import resources
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from resultkit import GENERATED, document, finding, gpu_scope, host

from gputriage.cli import Environment, main
from gputriage.engine.analysis import analyze
from gputriage.model import (
    Evidence,
    GpuRow,
    HealthyChange,
    Occurrences,
    Result,
    Scope,
    Severity,
    Skipped,
    Status,
)
from gputriage.results.document import dumps, plain
from gputriage.results.reader import (
    MAX_CONSEQUENCE_DEPTH,
    FindingBrief,
    InputRef,
    ResultDocError,
    ResultHost,
    Verdicts,
    loads_result,
    read_brief,
    read_result,
)
from gputriage.scenarios import build_scenario, list_scenarios
from gputriage.snapshot.bundle import Snapshot
from gputriage.status import at_fault, exit_status, side_verdict, verdict

SCENARIOS = [s.name for s in list_scenarios()]


# --- round trip: what check --json says is what the Result said ------------------------

def _expected_host(result: Result) -> ResultHost:
    return ResultHost(**{f.name: getattr(result.host, f.name) for f in fields(ResultHost)})


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_reads_back_as_its_result(name: str, analysed) -> None:
    result = analysed.result(name)
    doc = loads_result(dumps(result, generated=GENERATED), name)
    assert (doc.verdict, doc.exit_status) == (verdict(result), int(exit_status(result)))
    assert doc.verdicts == Verdicts(side_verdict(result, "node"), side_verdict(result, "job"),
                                    at_fault(result), result.job_faults_fail)
    assert doc.generated_at == GENERATED
    assert doc.host == _expected_host(result)
    assert doc.gpus == tuple(result.gpus)
    assert doc.findings == tuple(result.sorted_findings())
    assert doc.skipped == tuple(result.skipped)
    assert doc.inputs == tuple(InputRef(i["origin"], tuple(i["sources"]))
                               for i in result.inputs)
    assert doc.manifest == plain(result.manifest)
    assert (doc.unreadable, doc.not_read) == (tuple(result.unreadable),
                                              tuple(result.not_read))
    brief = read_brief(json.loads(dumps(result)), name)
    assert (brief.host, brief.gpus) == (doc.host, doc.gpus)
    assert brief.findings == tuple(FindingBrief(f.id, f.severity, f.blame, f.status)
                                   for f in doc.findings)
    assert (brief.manifest_host, brief.manifest_created) == (
        (result.manifest or {}).get("host"), (result.manifest or {}).get("created"))


@pytest.mark.parametrize("name", ["gpu-fallen-off-bus", "xid48-reset", "xid31-one-job"])
def test_what_check_json_prints_reads_as_the_engine_said(name: str, tmp_path) -> None:
    path = build_scenario(name, tmp_path / name)
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", "--snapshot", str(path), "--json", "--no-history"],
                Environment(stdout=out, stderr=err))
    doc = loads_result(out.getvalue(), "check")
    assert code == doc.exit_status, err.getvalue()
    assert doc.findings == tuple(analyze(Snapshot.load(path)).sorted_findings())


# --- a document with every part, and the published schema's demands ---------------------

def _full_result() -> Result:
    """A result using every key the schema has (consequences, occurrences, also...)."""
    lost = gpu_scope(3, "0000:3b:00.0")
    missing = finding("gpu.missing", scope=lost, evidence=(Evidence("lspci", ("3b:00.0",)),))
    xid = finding("xid.79", scope=lost, also=(gpu_scope(4, "0000:5d:00.0"),),
                  evidence=(Evidence("kmsg", ("NVRM: Xid 79", "NVRM: Xid 79"), "tail"),),
                  references=("https://docs.nvidia.com/deploy/xid-errors/",),
                  occurrences=Occurrences(2, "2024-05-14T09:00:00+00:00", "4254.197860"),
                  consequences=(missing,), step="drain the node, reseat the GPU")
    acked = finding("remap.pending", "warning", scope=gpu_scope(0, "0000:18:00.0"),
                    status=Status.ACKNOWLEDGED, status_note="acknowledged by ops")
    job = finding("cuda.oom", "info", "job-config", scope=Scope("unit", name="train.service"))
    rows = [GpuRow(0, "0000:18:00.0", "NVIDIA H100", "GPU-a", persistence_mode=True,
                   serial="1650", vbios="96.00", firmware="550.54.15",
                   severity=Severity.WARNING),
            GpuRow(3, "0000:3b:00.0", visible=False, listed=False, state="unknown",
                   severity=Severity.CRITICAL)]
    summary = host(boot_id="b1", boot_time="2024-05-14T01:00:00+00:00",
                   container_toolkit="1.15.0", gpus_on_pci=2, gpus_visible=1,
                   verdict="critical",
                   changed_since_healthy=HealthyChange("2024-05-13T00:00:00+00:00",
                                                       ("kernel: 5.15 -> 6.8",)))
    return Result(findings=[xid, acked, job], skipped=[Skipped("ib-link-down", "no ibstat")],
                  host=summary, gpus=rows, inputs=[{"origin": "s.tar.gz", "sources": ["kmsg"]}],
                  manifest={"schema": "gputriage/snapshot/v1", "host": "gpu-node-01",
                            "created": "2024-05-14T09:30:00+00:00", "sources": {}},
                  unreadable=["nvidia_smi_q: timeout"], not_read=["kmsg: last 64 MiB"])


FULL = json.loads(dumps(_full_result(), generated=GENERATED))


def test_the_full_document_reads_back_and_is_valid_by_the_schema() -> None:
    result = _full_result()
    doc = read_result(copy.deepcopy(FULL), "full")
    assert doc.findings == tuple(result.sorted_findings())
    assert doc.gpus == tuple(result.gpus) and doc.host == _expected_host(result)
    assert doc.manifest == result.manifest
    assert _schema_errors(FULL) == []


def _schema() -> tuple[dict[str, Any], dict[str, Any]]:
    common = json.loads(resources.files("gputriage.schemas").joinpath("common.json")
                        .read_text(encoding="utf-8"))
    return common["$defs"]["result"], common["$defs"]


ROOT, DEFS = _schema()


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = DEFS[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _wrong(node: dict[str, Any]) -> object:
    """A value the schema node refuses, of another type than any it allows."""
    node = _resolve(node)
    if "const" in node or "enum" in node or "oneOf" in node:
        return "no-such-word"
    kinds = node["type"] if isinstance(node.get("type"), list) else [node.get("type")]
    return {"string": 7, "integer": "7", "boolean": "yes", "object": ["x"],
            "array": {"x": 1}}[kinds[0]]


def _places(value: object, node: dict[str, Any], path: str, keys: list[str | int]
            ) -> Iterator[tuple[str, list[str | int], dict[str, Any]]]:
    """(field name, key path, schema node) of every value under ``value`` the reader
    checks, walking the document and its schema together (the manifest is kept as
    decoded: only itself is checked; ``schema`` is the document's own test)."""
    node = _resolve(node)
    if isinstance(value, dict) and "properties" in node:
        for key, sub in node["properties"].items():
            if key in value and key != "schema":
                name = f"{path}.{key}" if path else key
                yield name, [*keys, key], sub
                if name != "manifest":
                    yield from _places(value[key], sub, name, [*keys, key])
    elif isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            name = f"{path}[{i}]"
            yield name, [*keys, i], node["items"]
            yield from _places(item, node["items"], name, [*keys, i])


PLACES = list(_places(FULL, ROOT, "", []))


def _put(doc: Any, keys: list[str | int], value: object) -> None:
    for key in keys[:-1]:
        doc = doc[key]
    doc[keys[-1]] = value


def _drop(doc: Any, keys: list[str | int]) -> None:
    for key in keys[:-1]:
        doc = doc[key]
    del doc[keys[-1]]


@functools.cache
def _validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.dumps({**ROOT, "$defs": DEFS}).replace("urn:gputriage:schema:common:v1#", "#")
    return jsonschema.Draft202012Validator(json.loads(schema))


def _schema_errors(doc: object) -> list[str]:
    """What the published schema finds wrong with ``doc``."""
    return [e.message for e in _validator().iter_errors(doc)]


def test_the_walk_covers_every_part_of_the_document() -> None:
    names = {name for name, _, _ in PLACES}
    for field in ("exit_status", "verdicts.job_faults_fail", "host.driver.cuda",
                  "host.changed_since_healthy.changes[0]", "gpus[1].state", "gpus[0].serial",
                  "findings[0].scope.gpu_index", "findings[0].also[0].pci_bus_id",
                  "findings[0].evidence[0].lines[1]", "findings[0].evidence[0].note",
                  "findings[0].occurrences.current_boot", "findings[0].references[0]",
                  "findings[0].consequences[0].evidence[0].source", "findings[2].status_note",
                  "findings[0].step", "skipped[0].reason", "inputs[0].sources[0]",
                  "manifest", "unreadable[0]", "not_read[0]"):
        assert field in names, field


@pytest.mark.parametrize(("name", "keys", "node"), PLACES, ids=[p[0] for p in PLACES])
def test_a_value_of_the_wrong_type_is_named(name: str, keys: list[str | int],
                                            node: dict[str, Any]) -> None:
    doc = copy.deepcopy(FULL)
    _put(doc, keys, _wrong(node))
    with pytest.raises(ResultDocError) as caught:
        read_result(doc, "r.json")
    assert caught.value.field == name, str(caught.value)
    assert str(caught.value).startswith(f"r.json: {name}: ") and "\n" not in str(caught.value)
    assert _schema_errors(doc), "the published schema accepts it: not a wrong value"


def _required() -> list[tuple[str, list[str | int]]]:
    """Each key the schema requires, where the full document has it."""
    out = []
    for name, keys, node in [("", [], ROOT), *PLACES]:
        for key in _resolve(node).get("required", ()):
            if name != "manifest" and key != "schema" and key not in LATER_IN_V1:
                out.append((f"{name}.{key}" if name else key, [*keys, key]))
    return out


# keys v1 gained after its first results: always written, read with a default when absent
# (test_a_result_written_before_v1_judged_the_two_sides_apart_is_read)
LATER_IN_V1 = ("verdicts", "not_read", "status")


REQUIRED = _required()


@pytest.mark.parametrize(("name", "keys"), REQUIRED, ids=[r[0] for r in REQUIRED])
def test_a_missing_required_key_is_named(name: str, keys: list[str | int]) -> None:
    doc = copy.deepcopy(FULL)
    _drop(doc, keys)
    with pytest.raises(ResultDocError) as caught:
        read_result(doc, "r.json")
    assert (caught.value.field, caught.value.why) == (name, "missing")
    assert _schema_errors(doc)


def test_optional_keys_may_be_absent_and_unknown_keys_are_ignored() -> None:
    doc = copy.deepcopy(FULL)
    doc["host"] = {}
    del doc["gpus"][0]["serial"], doc["findings"][0]["occurrences"]
    doc["nccl"] = {"log": {}}  # nccl --json: a result with one more key
    doc["findings"][0]["scope"]["slot"] = 7  # keys added within v1 in a later version
    read = read_result(doc, "r.json")
    assert read.host == ResultHost() and read.gpus[0].serial is None
    assert read.findings[0].occurrences is None


# --- hostile documents ------------------------------------------------------------------

@pytest.mark.parametrize(("keys", "value", "why"), [
    (["exit_status"], 10 ** 30, "a number of about 30 digits is not a whole number from 0 "
                                "to 3"),
    (["exit_status"], 4, "the number 4 is not a whole number from 0 to 3"),
    (["gpus", 0, "index"], 1e300, "the number 1e+300 is not a whole number from 0 to "),
    (["gpus", 0, "index"], -1, "the number -1 is not a whole number from 0 to "),
    (["findings", 0, "occurrences", "count"], 0, "the number 0 is not a whole number from 1"),
    (["findings", 0, "scope", "gpu_index"], 2.5, "the number 2.5 is not a whole number"),
    (["findings", 0, "scope", "gpu_index"], True, "expected an integer, got the boolean true"),
    (["verdicts", "job"], "unknown", "'unknown' is not one of ok, warning, critical"),
    (["generated"], "yesterday", "'yesterday' is not an ISO 8601 time"),
    (["findings", 0, "severity"], "x" * 10 ** 6, "'xxxxxxxx"),
    (["findings", 0, "id"], "", "empty"),
    (["findings", 0, "action"], "none", "a critical finding needs an action"),
])
def test_numbers_and_words_out_of_range_are_named(keys: list[str | int], value: object,
                                                 why: str) -> None:
    doc = copy.deepcopy(FULL)
    _put(doc, keys, value)
    with pytest.raises(ResultDocError) as caught:
        read_result(doc, "r.json")
    message = str(caught.value)
    assert caught.value.why.startswith(why), message
    assert len(message) < 200 and "\n" not in message


def test_a_whole_float_is_an_integer() -> None:
    doc = copy.deepcopy(FULL)
    doc["exit_status"], doc["gpus"][0]["index"] = 2.0, 0.0
    read = read_result(doc, "r.json")
    assert (read.exit_status, read.gpus[0].index) == (2, 0)
    assert type(read.exit_status) is int


@pytest.mark.parametrize(("data", "why"), [
    ("[" * 100_000 + "]" * 100_000, "not valid JSON (nested too deeply)"),
    ('{"schema": "gputriage/result/v1", "x": ' + "[" * 80 + "]" * 80 + "}",
     "not valid JSON (nested more than 64 levels deep)"),
    ('{"exit_status": ' + "9" * 5000 + "}", "not valid JSON (Exceeds the limit"),
    ("", "not valid JSON (Expecting value"),
    (b"\xff\xfe{}", "not valid JSON ("),
    ("[]", "expected a JSON object, got an array of 0"),
    ('{"schema": "gputriage/logs/v1"}', "JSON of schema 'gputriage/logs/v1', expected "
                                        "'gputriage/result/v1'"),
    ('{"schema": ["gputriage/result/v1"]}', "JSON whose schema is an array of 1, expected"),
    ("{}", "JSON without a schema, expected 'gputriage/result/v1'"),
])
def test_hostile_text_is_a_one_line_error(data: str | bytes, why: str) -> None:
    with pytest.raises(ResultDocError) as caught:
        loads_result(data, "r.json")
    assert caught.value.field == "" and caught.value.why.startswith(why), str(caught.value)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300


def test_consequences_nested_past_the_bound_are_refused() -> None:
    doc = copy.deepcopy(FULL)
    inner = doc["findings"][0]
    for _ in range(MAX_CONSEQUENCE_DEPTH + 1):
        inner["consequences"] = [copy.deepcopy(FULL["findings"][1])]
        inner = inner["consequences"][0]
    with pytest.raises(ResultDocError, match=f"nested more than {MAX_CONSEQUENCE_DEPTH} deep"):
        read_result(doc, "r.json")


def test_a_manifest_of_any_shape_is_kept_as_decoded() -> None:
    doc = copy.deepcopy(FULL)
    doc["manifest"] = {"host": 7, "created": ["x"], "sources": "?"}
    assert read_result(doc, "r.json").manifest == doc["manifest"]
    brief = read_brief(doc, "r.json")
    assert (brief.manifest_host, brief.manifest_created) == (None, None)
    doc["manifest"] = None
    assert read_result(doc, "r.json").manifest is None


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=10)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([keys for _, keys, _ in PLACES]), JSON, st.booleans())
def test_any_value_anywhere_is_read_or_a_one_line_error(keys: list[str | int], value: object,
                                                        brief: bool) -> None:
    doc = copy.deepcopy(FULL)
    _put(doc, keys, value)
    try:
        (read_brief if brief else read_result)(doc, "r.json")
    except ResultDocError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400


def test_documents_made_by_the_test_kit_are_valid() -> None:
    doc = document(finding("xid.79"), finding("x", "ok"))
    assert _schema_errors(doc) == []
    assert [f.id for f in read_result(doc, "kit").findings] == ["xid.79", "x"]


def test_a_result_written_before_v1_judged_the_two_sides_apart_is_read():
    """verdicts, not_read and each finding's status came later in v1: a node that has not
    been upgraded yet still counts in a fleet, with its findings current and its own."""
    doc = copy.deepcopy(FULL)
    del doc["verdicts"], doc["not_read"]
    for f in doc["findings"]:
        f.pop("status", None)
    got = read_result(doc, "old.json")
    assert got.not_read == ()
    assert got.verdicts.node == doc["verdict"] and got.verdicts.job == "ok"
    assert all(f.current for f in got.findings)
    assert read_brief(doc, "old.json").findings
    doc["verdicts"] = "critical"  # present, it is checked as ever
    with pytest.raises(ResultDocError, match="verdicts"):
        read_result(doc, "old.json")
