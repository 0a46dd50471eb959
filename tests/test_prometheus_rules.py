"""deploy/prometheus/gputriage-rules.yaml: the rules are valid and their unit tests pass
(``promtool check rules``, ``promtool test rules``: Debian's prometheus package, skipped
without it), and they cannot drift from the exporter: every metric, label and label
value they select is one ``gputriage watch`` really serves (its collector, on a scenario
host), every finding id they name is one a rule produces, and every alert has a runbook
section in docs/alerts.md and a unit test in which it fires. Last, the watch's own scrape
of scenario hosts goes through the rules (promtool, an hour of samples): the alerts that
fire are those an on-call expects, and none for a healthy node, the job's faults beyond
info, or an acknowledged GPU."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gputriage.engine.acks import Ack
from gputriage.engine.analysis import analyze
from gputriage.facts.context import CheckContext
from gputriage.ingest import load_inputs
from gputriage.parsers import expect
from gputriage.rules import all_rules
from gputriage.scenarios import build_scenario
from gputriage.state.history import record
from gputriage.state.recurrence import apply_history, families
from gputriage.status import exit_status
from gputriage.vocabulary import VERDICTS, Action, Blame
from gputriage.watch.cycle import CycleOutcome
from gputriage.watch.loop import OUTCOMES, Running, WatchState, sources_of
from gputriage.watch.metrics import GPU_STATES, SEVERITIES, make_registry

REPO = Path(__file__).resolve().parents[1]
RULES_DIR = REPO / "deploy" / "prometheus"
RULES = RULES_DIR / "gputriage-rules.yaml"
UNIT_TESTS = sorted((RULES_DIR / "tests").glob("*.yaml"))
ALERTS_DOC = REPO / "docs" / "alerts.md"

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="needs promtool (Debian package prometheus; .ci/run installs it)")

# A selector (metric{matchers}) and one matcher of it, in PromQL.
SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
METRIC = re.compile(r"(?<![\w:])(gputriage_[a-z_]+)(?![\w:])")  # not inside a record's name
TEMPLATE_LABEL = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")


def _groups() -> list[dict[str, Any]]:
    return list(yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"])


def _rules(kind: str) -> list[dict[str, Any]]:
    return [r for g in _groups() for r in g["rules"] if kind in r]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Each series name the watch's collector serves, with its label names, after a
    check of gpu-fallen-off-bus with 8 GPUs expected (a finding, failed and read
    sources, both GPU counts)."""
    root = tmp_path_factory.mktemp("rules-scrape")
    snapshot = build_scenario("gpu-fallen-off-bus", root / "fallen.tar.gz")
    (root / "expect.toml").write_text("[gpu]\ncount = 8\n", encoding="utf-8")
    result = analyze(load_inputs([str(snapshot)]),
                     context=CheckContext(expectations=expect.load(str(root / "expect.toml"))))
    state = WatchState(60, 120, expected_gpus=8)
    state.publish(CycleOutcome(1, datetime.now(timezone.utc), 0.5, result,
                               int(exit_status(result)), sources=sources_of(result)),
                  Running(1, state.clock()))
    text = generate_latest(make_registry(state)).decode()
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def _unescape(value: str) -> str:
    """A PromQL double-quoted string's value."""
    return re.sub(r"\\(.)", r"\1", value)


def _alternatives(regex: str) -> list[str]:
    """The top-level alternatives of a matcher's regex (the rules use no groups)."""
    assert "(" not in regex, f"a grouped regex in the rules: {regex}"
    return regex.split("|")


def _produced_ids() -> set[str]:
    return {p for r in all_rules() for p in r.produces} | {f.id for f in families()}


# Label values the exporter can serve, per label (the finding's id is checked apart).
KNOWN_VALUES: dict[str, set[str]] = {
    "severity": set(SEVERITIES),
    "blame": {b.value for b in Blame},
    "action": {a.value for a in Action},
    "outcome": set(OUTCOMES),
}


def _known_values(metric: str, label: str) -> set[str] | None:
    if label == "state":
        return set(GPU_STATES) if metric == "gputriage_gpu_health" else set(VERDICTS)
    return KNOWN_VALUES.get(label)


# --- promtool ----------------------------------------------------------------------------

@needs_promtool
def test_promtool_accepts_the_rules() -> None:
    proc = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@needs_promtool
def test_the_rules_unit_tests_pass() -> None:
    """Series in, alerts out (deploy/prometheus/tests): a node-side critical, a GPU lost,
    a latch, the check stale or overran, metrics gone or absent fire; a job-blamed
    critical, an acknowledged GPU and a healthy node raise nothing."""
    assert UNIT_TESTS
    proc = subprocess.run(["promtool", "test", "rules", *(p.name for p in UNIT_TESTS)],
                          cwd=RULES_DIR / "tests", capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_promtool_fails_a_unit_test_whose_alert_does_not_fire(tmp_path: Path) -> None:
    """The unit tests can fail: the job's fault made a page is caught."""
    broken = RULES.read_text(encoding="utf-8").replace(
        'gputriage_finding{severity="critical", blame=~"node|config",\n          id!~',
        'gputriage_finding{severity="critical",\n          id!~')
    assert broken != RULES.read_text(encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / RULES.name).write_text(broken, encoding="utf-8")
    for test in UNIT_TESTS:
        shutil.copy(test, tmp_path / "tests" / test.name)
    proc = subprocess.run(["promtool", "test", "rules", "findings.yaml"],
                          cwd=tmp_path / "tests", capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "nccl.socket-transport" in proc.stdout + proc.stderr


# --- no drift from the exporter ---------------------------------------------------------

def test_every_metric_the_rules_use_is_served_by_the_watch(served: dict[str, set[str]]) -> None:
    recorded = {r["record"] for r in _rules("record")}
    for rule in _rules("expr"):
        for name in METRIC.findall(rule["expr"]):
            assert name in served, f"{rule.get('alert') or rule.get('record')}: {name} is " \
                                   "not a series gputriage watch serves"
        for name in re.findall(r"\b([a-z_]+:[a-z_]+:[a-z_0-9]+)\b", rule["expr"]):
            assert name in recorded, f"{name} is recorded by no rule"


def test_every_label_and_value_the_rules_select_is_one_the_watch_serves(
        served: dict[str, set[str]]) -> None:
    ids = _produced_ids()
    for rule in _rules("expr"):
        name = rule.get("alert") or rule.get("record")
        for metric, matchers in SELECTOR.findall(rule["expr"]):
            if ":" in metric:
                continue  # a recording rule's series: its labels are checked at its source
            for label, op, raw in MATCHER.findall(matchers):
                value = _unescape(raw)
                assert label in served[metric], f"{name}: {metric} has no label {label}"
                if label == "id":
                    for alt in _alternatives(value) if "~" in op else [value]:
                        pattern = re.compile(alt if "~" in op else re.escape(alt))
                        assert any(pattern.fullmatch(i) for i in ids), \
                            f"{name}: no rule produces a finding id matching {alt!r}"
                    continue
                known = _known_values(metric, label)
                if known is None:
                    continue
                for alt in _alternatives(value) if "~" in op else [value]:
                    assert alt in known, f"{name}: {metric}{{{label}}} is never {alt!r}"


def test_every_series_the_watch_serves_is_in_the_metrics_table(
        served: dict[str, set[str]]) -> None:
    """docs/watch.md's table, which the rules and the runbooks refer to, lists them all
    with their labels."""
    doc = (REPO / "docs" / "watch.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(" `"): line for line in doc.splitlines()
            if line.startswith("| `gputriage_")}
    for name, labels in served.items():
        assert name in rows, f"docs/watch.md's metrics table lacks {name}"
        for label in labels:
            assert f"`{label}`" in rows[name], f"docs/watch.md: {name}'s label {label}"


def test_the_labels_in_annotations_are_the_alerts_own(served: dict[str, set[str]]) -> None:
    """An annotation's $labels.X is a label of the series the alert selects (or one its
    expression adds), so a summary never renders an empty host or id."""
    for rule in _rules("alert"):
        metrics = set(METRIC.findall(rule["expr"]))
        recorded = re.findall(r"\b([a-z_]+:gputriage_[a-z_]+:[a-z_0-9]+)\b", rule["expr"])
        have = {"job", "instance", "severity"} | set(
            re.findall(r'label_replace\([^,]+,\s*"([a-z_]+)"', rule["expr"], re.S))
        if not recorded:
            have |= set().union(*(served[m] for m in metrics)) if metrics else set()
        for text in rule.get("annotations", {}).values():
            for label in TEMPLATE_LABEL.findall(text):
                assert label in have, f"{rule['alert']}: $labels.{label} is not its label"


def test_every_alert_has_a_severity_a_summary_and_a_runbook_section() -> None:
    doc = ALERTS_DOC.read_text(encoding="utf-8")
    headings = {line[3:].strip().lower() for line in doc.splitlines()
                if line.startswith("## ")}
    alerts = _rules("alert")
    assert len(alerts) >= 8
    for rule in alerts:
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], name
        assert notes["runbook_url"] == f"docs/alerts.md#{name.lower()}", name
        assert name.lower() in headings, f"docs/alerts.md has no section {name}"
        section = doc.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert "**Means.**" in section and "**Do.**" in section, name
        if not notes["summary"].startswith("{{ $labels.instance }}"):
            assert "absent(" in rule["expr"], f"{name}: its summary does not name the host"


def test_a_job_blamed_finding_only_ever_raises_an_info_alert() -> None:
    """Whatever else changes in the rules: no alert above info selects the job's side."""
    for rule in _rules("alert"):
        if rule["labels"]["severity"] == "info" or "gputriage_finding" not in rule["expr"]:
            continue
        for metric, matchers in SELECTOR.findall(rule["expr"]):
            if metric != "gputriage_finding":
                continue
            found = {label: (op, _unescape(raw)) for label, op, raw in
                     MATCHER.findall(matchers)}
            op, value = found.get("blame", ("", ""))
            excluded = op == "!~" and {"job", "job-config"} <= set(value.split("|"))
            only_node = op in ("=", "=~") and not {"job", "job-config"} & set(
                value.split("|"))
            assert excluded or only_node or found.get("id", ("", ""))[1].startswith(
                "flapping"), f"{rule['alert']} may page for the job's fault"


def test_every_alert_fires_in_a_unit_test_and_is_asserted_quiet_in_one() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in UNIT_TESTS:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert doc["rule_files"] == ["../gputriage-rules.yaml"], path.name
        for test in doc["tests"]:
            for case in test.get("alert_rule_test", []):
                (fired if case["exp_alerts"] else quiet).add(case["alertname"])
    names = {r["alert"] for r in _rules("alert")}
    assert names - fired == set(), "alerts no unit test fires"
    assert names - quiet == set(), "alerts no unit test asserts quiet"


# --- the rules on real scrapes -------------------------------------------------------------

def _series_of(text: str, instance: str) -> list[dict[str, str]]:
    """promtool input series for an exposition: every sample held for an hour, the last
    success moving with promtool's clock (a watch checking every minute)."""
    out = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {"job": "gputriage", "instance": instance,
                      **{k: v for k, v in sample.labels.items() if v != ""}}
            selector = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
            values = ("0+60x60" if sample.name == "gputriage_last_success_timestamp_seconds"
                      else f"{sample.value!r}x60")
            out.append({"series": f"{sample.name}{{{selector}}}", "values": values})
    return out


def _scrape(scenario: str, root: Path, *, expected_gpus: int | None = None,
            acks: tuple[Ack, ...] = (), amend: Callable[[Any], None] | None = None) -> str:
    """The /metrics text of a watch whose last check judged ``scenario``."""
    snapshot = build_scenario(scenario, root / f"{scenario}.tar.gz")
    expectations = None
    if expected_gpus is not None:
        (root / "expect.toml").write_text(f"[gpu]\ncount = {expected_gpus}\n",
                                          encoding="utf-8")
        expectations = expect.load(str(root / "expect.toml"))
    result = analyze(load_inputs([str(snapshot)]), context=CheckContext(
        expectations=expectations, acks=acks, now=datetime.now(timezone.utc)))
    if amend is not None:
        amend(result)
    state = WatchState(60, 120, expected_gpus=expected_gpus)
    state.publish(CycleOutcome(1, datetime.now(timezone.utc), 0.5, result,
                               int(exit_status(result)), sources=sources_of(result)),
                  Running(1, state.clock()))
    return generate_latest(make_registry(state)).decode()


def _ack_gpu(bus: str) -> Ack:
    return Ack(1, datetime.now(timezone.utc), "oncall", "sent for repair, INC-1", gpu=bus)


# scenario, its expectations (GPUs), acknowledged GPU: the alerts firing after an hour
REAL_SCRAPES = [
    ("healthy-8xh100", 8, None, {}),
    ("gpu-fallen-off-bus", 8, None, {"GPUTriageNodeCritical": "critical",
                                     "GPUTriageGPULost": "critical",
                                     "GPUTriageSourceFailing": "info"}),
    ("gpu-fallen-off-bus", 8, "0000:9a:00.0", {"GPUTriageSourceFailing": "info"}),
    ("xid31-one-job", None, None, {"GPUTriageJobFault": "info"}),
    ("nccl-socket-fallback", None, None, {"GPUTriageJobFault": "info"}),
    ("pcie-x8-gpu3", 8, None, {"GPUTriageNodeWarning": "warning"}),
]


@needs_promtool
@pytest.mark.parametrize(("scenario", "gpus", "acked", "firing"), REAL_SCRAPES,
                         ids=[f"{s}{'-acked' if a else ''}" for s, _, a, _ in REAL_SCRAPES])
def test_the_rules_on_a_real_scrape_fire_what_an_oncall_expects(
        scenario: str, gpus: int | None, acked: str | None, firing: dict[str, str],
        tmp_path: Path) -> None:
    """The watch's own series for a scenario, through the rules for an hour: the alerts
    firing, by name and severity (a job's critical is info, an acknowledged GPU pages
    nobody, a healthy node raises nothing)."""
    text = _scrape(scenario, tmp_path, expected_gpus=gpus,
                   acks=(_ack_gpu(acked),) if acked else ())
    _assert_firing(text, scenario, firing, tmp_path)


def _assert_firing(text: str, instance: str, firing: dict[str, str], root: Path) -> None:
    """promtool: ``text``'s series held for an hour fire exactly ``firing`` (name:
    severity)."""
    expected = [{"labels": f'{{alertname="{name}", severity="{severity}"}}', "value": 1}
                for name, severity in sorted(firing.items())]
    test = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "name": instance, "interval": "1m", "input_series": _series_of(text, instance),
        "promql_expr_test": [{
            "expr": 'group by (alertname, severity) (ALERTS{alertstate="firing"})',
            "eval_time": "60m", "exp_samples": expected}]}]}
    (root / "real.yaml").write_text(yaml.safe_dump(test), encoding="utf-8")
    proc = subprocess.run(["promtool", "test", "rules", "real.yaml"], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_a_latched_port_on_a_real_scrape_fires_the_latch_alone(tmp_path: Path) -> None:
    """ib-port-polling's port down in three checks of the last hour, up in between and
    now: the history latches flapping.ib-port (issue 34), and its alert is the one that
    fires, though the port is up in this check."""
    down = analyze(load_inputs([str(build_scenario("ib-port-polling",
                                                   tmp_path / "down.tar.gz"))]))
    up = analyze(load_inputs([str(build_scenario("healthy-8xh100",
                                                 tmp_path / "up.tar.gz"))]))
    assert {f.id for f in down.findings if f.current} >= {"ib.port-not-active"}
    now = datetime.now(timezone.utc)
    state_dir = tmp_path / "state"
    for minutes_ago, result in ((50, down), (40, up), (30, down), (20, up), (10, down)):
        record(state_dir, result, now - timedelta(minutes=minutes_ago))

    def latch(result: Any) -> None:
        assert apply_history(result, state_dir, now) == []
        assert "flapping.ib-port" in {f.id for f in result.findings}

    text = _scrape("healthy-8xh100", tmp_path, amend=latch)
    _assert_firing(text, "gpu-node-017", {"GPUTriageFlappingLatched": "critical"}, tmp_path)
