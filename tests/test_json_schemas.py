"""The published JSON Schemas: every --json document the CLI prints validates against
its schema (every scenario, corpus logs, every command), and a document that gains an
undocumented key, or a finding with a word outside the vocabulary, does not."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest
from analysed import Analysed

from gputriage import schemas
from gputriage.cli import EXIT_USAGE, Environment, main
from gputriage.scenarios import build_scenario, list_scenarios

jsonschema = pytest.importorskip("jsonschema")

SCENARIOS = [s.name for s in list_scenarios()]
KERNEL_LOGS = ("dalle104-api-mismatch", "bumblebee677-legacy-xid32",
               "dcgm144-a40-hpe-xl645d-xid119")
NCCL_LOG = "nccltests188-ib-disable-env-socket-over-ipoib"


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def _json(argv: list[str]) -> object:
    code, out, err = _run(argv)
    assert code in (0, 1, 2, 3), (code, err)
    return json.loads(out)


_VALIDATORS: dict[str, object] = {}


def validator(name: str):
    if name not in _VALIDATORS:
        _VALIDATORS[name] = jsonschema.Draft202012Validator(
            schemas.bundled(name), format_checker=jsonschema.FormatChecker())
    return _VALIDATORS[name]


def errors(name: str, doc: object) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator(name).iter_errors(doc)]


def assert_valid(name: str, doc: object) -> None:
    problems = errors(name, doc)
    assert not problems, "\n".join(problems[:10])


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("schema-scenarios")
    return {n: str(build_scenario(n, root / f"{n}.tar.gz")) for n in SCENARIOS}


@pytest.fixture(scope="module")
def analyzed(analysed: Analysed) -> Callable[[str], dict]:
    """``analyze --json SCENARIO``, run once a scenario for all tests (tests/analysed.py;
    a fresh copy each call: a test may change it)."""
    def of(name: str) -> dict:
        code, _, err = analysed.cli("analyze", "--json", name)
        assert code in (0, 1, 2, 3), (code, err)
        return analysed.json("analyze", "--json", name)
    return of


# --- the schema files --------------------------------------------------------------------

def test_every_schema_is_a_valid_2020_12_schema():
    for name in schemas.names():
        schema = schemas.bundled(name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)


def test_every_file_is_listed_and_every_listed_name_has_a_file():
    files = {p.name.removesuffix(".json")
             for p in resources.files("gputriage.schemas").iterdir()
             if p.name.endswith(".json")}
    assert files == set(schemas.names()) | {"common"}


def test_bundled_schema_stands_alone():
    """The printed schema resolves every reference without the other files."""
    for name in schemas.names():
        text = json.dumps(schemas.bundled(name))
        refs = {r.split("#")[0] for r in _refs(json.loads(text)) if not r.startswith("#")}
        ids = {s["$id"] for s in _embedded(schemas.bundled(name))}
        assert refs <= ids, name


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def _embedded(schema: dict) -> list[dict]:
    return [schema, *(d for d in schema.get("$defs", {}).values() if "$id" in d)]


def test_vocabularies_are_the_models():
    from gputriage.model import Action, Blame, Severity, Status

    defs = schemas.load("common")["$defs"]
    assert set(defs["action"]["enum"]) == {a.value for a in Action}
    assert set(defs["blame"]["enum"]) == {b.value for b in Blame}
    assert set(defs["severity"]["enum"]) == {s.value for s in Severity}
    assert set(defs["status"]["enum"]) == {s.value for s in Status}
    assert {"plan-repair"} <= set(defs["action"]["enum"])
    assert {"job-config"} <= set(defs["blame"]["enum"])


def test_result_top_level_keys_are_the_views():
    from gputriage.results.document import TOP_LEVEL_KEYS

    body = schemas.load("common")["$defs"]["result"]
    assert tuple(body["required"]) == TOP_LEVEL_KEYS
    assert list(body["properties"]) == list(TOP_LEVEL_KEYS)


# --- every scenario ----------------------------------------------------------------------

@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_analyze_and_check_snapshot_validate(name, built, analyzed):
    assert_valid("result", analyzed(name))
    assert_valid("result", _json(["check", "--snapshot", built[name], "--json"]))


def test_scenarios_cover_the_finding_shapes(analyzed):
    """The scenarios exercise the optional parts the schema describes."""
    seen: set[str] = set()

    def walk(f: dict) -> None:  # a consequence has a finding's shape too
        seen.update(f)
        for c in f.get("consequences", ()):
            walk(c)

    for name in SCENARIOS:
        for f in analyzed(name)["findings"]:
            walk(f)
    assert {"occurrences", "consequences", "also", "step", "status_note"} <= seen


# --- the other commands ------------------------------------------------------------------

@pytest.mark.parametrize("part", KERNEL_LOGS)
def test_logs_of_corpus_kernel_logs_validate(corpus, part):
    doc = _json(["logs", str(corpus.sample(part).path), "--json"])
    assert doc["timeline"]
    assert_valid("logs", doc)


def test_nccl_of_the_scenario_and_a_corpus_log_validate(built, corpus):
    doc = _json(["nccl", built["nccl-socket-fallback"], "--json"])
    assert doc["nccl"]["tests"] and doc["nccl"]["tests"][0]["rows"]
    assert_valid("nccl", doc)
    assert_valid("nccl", _json(["nccl", str(corpus.sample(NCCL_LOG).path), "--json"]))
    assert errors("result", doc), "a result document has no nccl key"


def _fleet(analysed: Analysed) -> dict:
    """``fleet --json`` of the demo fleet, run once for the module's tests."""
    analysed.fleet_demo()
    code, _, err = analysed.cli("fleet", "fleet-demo", "--json", "-j", "1")
    assert code in (0, 1, 2, 3), (code, err)
    return analysed.json("fleet", "fleet-demo", "--json", "-j", "1")


def test_fleet_of_the_fleet_scenario_validates(analysed):
    doc = _fleet(analysed)
    assert doc["findings"][0]["blast_radius"]
    assert_valid("fleet", doc)


def test_triage_and_diff_validate(built):
    bad, good = built["gpu-fallen-off-bus"], built["healthy-8xh100"]
    doc = _json(["triage", bad, "--baseline", good, "--json"])
    assert doc["changed"] is not None and doc["actions"]
    assert_valid("triage", doc)
    assert_valid("triage", _json(["triage", good, "--json"]))
    diff = _json(["diff", good, bad, "--json"])
    assert diff["findings"]["new"]
    assert_valid("diff", diff)
    assert_valid("diff", _json(["diff", built["driver-mismatch"], bad, "--json"]))


def test_history_validates(built):
    _run(["check", "--snapshot", built["gpu-fallen-off-bus"]])
    _run(["check", "--snapshot", built["healthy-8xh100"]])
    doc = _json(["history", "--json"])
    assert len(doc["entries"]) == 2
    assert_valid("history", doc)


def test_ack_and_ack_list_validate():
    done = _json(["ack", "xid.79", "--gpu", "0000:9a:00.0", "--reason", "reseated"
                  , "--json"])
    assert_valid("ack", done)
    _run(["ack", "--gpu", "0000:5d:00.0", "--reason", "reset", "--until", "never"])
    _run(["ack", "--clear", str(done["id"])])
    listed = _json(["ack", "--list", "--json"])
    assert len(listed) == 2
    assert_valid("ack-list", listed)
    assert errors("ack", listed[0]), "in_force belongs to the listing only"


def test_xid_validates():
    assert_valid("xid", _json(["xid", "79", "48", "9999", "--json"]))
    assert_valid("xid", _json(["xid", "--sxid", "12", "--json"]))


# --- the schemas can fail ----------------------------------------------------------------

CLOSED = ("result", "nccl", "logs", "diff", "triage", "fleet", "history", "xid")


@pytest.fixture(scope="module")
def documents(built, analyzed, analysed) -> dict[str, dict]:
    bad, good = built["gpu-fallen-off-bus"], built["healthy-8xh100"]
    docs = {
        "result": analyzed("gpu-fallen-off-bus"),
        "nccl": _json(["nccl", built["nccl-socket-fallback"], "--json"]),
        "logs": {"schema": "gputriage/logs/v1", "tool_version": "0", "verdict": "ok",
                 "exit_status": 0, "scan": {"lines": 0, "skipped": 0, "bytes": 0,
                                            "formats": [], "problems": [], "events": 0,
                                            "boots": []},
                 "window": {"boot": None, "since": None}, "timeline": [], "findings": []},
        "diff": _json(["diff", good, bad, "--json"]),
        "triage": _json(["triage", bad, "--json"]),
        "fleet": _fleet(analysed),
        "history": {"schema": "gputriage/history/v1", "state_dir": "s", "entries": []},
        "xid": _json(["xid", "79", "--json"]),
    }
    for name, doc in docs.items():
        assert_valid(name, doc)
    return docs


@pytest.mark.parametrize("name", CLOSED)
def test_an_undocumented_top_level_key_fails(name, documents):
    doc = dict(documents[name], surprise=1)
    assert any("surprise" in e for e in errors(name, doc))


@pytest.mark.parametrize("name", CLOSED)
def test_a_missing_top_level_key_fails(name, documents):
    doc = dict(documents[name])
    doc.pop(next(iter(doc)))
    assert errors(name, doc)


def test_a_wrong_schema_string_fails(documents):
    assert errors("result", dict(documents["result"], schema="gputriage/result/v2"))


def _first_consequence(doc: dict) -> dict:
    return next(c for f in doc["findings"] for c in f.get("consequences", ()))


@pytest.mark.parametrize("key, value", [
    ("action", "panic"), ("blame", "cosmic-rays"), ("severity", "fatal"),
    ("status", "maybe"), ("undocumented", True), ("evidence", [{"lines": ["x"]}]),
    ("occurrences", {"count": 0, "first": None, "last": None, "current_boot": True}),
])
def test_a_bad_finding_fails_also_as_a_nested_consequence(documents, key, value):
    doc = copy.deepcopy(documents["result"])
    doc["findings"][0][key] = value
    assert errors("result", doc)
    doc = copy.deepcopy(documents["result"])
    _first_consequence(doc)[key] = value
    assert any("consequences" in e for e in errors("result", doc))


def test_a_finding_without_status_fails(documents):
    doc = copy.deepcopy(documents["result"])
    del doc["findings"][0]["status"]
    assert errors("result", doc)


def test_a_bad_diff_inside_triage_fails(documents):
    doc = copy.deepcopy(documents["triage"])
    doc["changed"] = {"schema": "gputriage/diff/v1"}
    assert errors("triage", doc)


# --- gputriage schema --------------------------------------------------------------------

def test_schema_command_prints_the_bundled_schema():
    for name in schemas.names():
        code, out, _ = _run(["schema", name])
        assert code == 0
        assert json.loads(out) == schemas.bundled(name)


def test_schema_list_names_every_schema_with_its_commands():
    code, out, _ = _run(["schema", "--list"])
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == schemas.names()
    assert "check --json" in lines[0]


@pytest.mark.parametrize("argv", [["schema"], ["schema", "common"], ["schema", "bogus"]])
def test_schema_usage_errors(argv):
    code, out, err = _run(argv)
    assert code == EXIT_USAGE and not out and err.startswith("gputriage: usage error")


def test_schema_files_ship_as_package_data():
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert '"schemas/*.json"' in text
