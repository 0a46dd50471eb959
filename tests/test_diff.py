"""gputriage diff: the facts digest, the comparison, its views and the CLI."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from resultkit import document, finding, gpu_scope, host

from gputriage.cli import EXIT_INPUT, Environment, main
from gputriage.errors import InputError
from gputriage.facts.store import Facts
from gputriage.model import GpuRow
from gputriage.results.diff import (
    DiffView,
    FindingRef,
    diff_views,
    facts_digest,
    family,
    load_view,
    view_from_json,
)
from gputriage.scenarios import build_scenario, list_scenarios
from gputriage.snapshot.bundle import Snapshot
from gputriage.views.diffview import changed_line, diff_to_json, gpu_change_text

NAMES = ("healthy-8xh100", "driver-mismatch", "gpu-fallen-off-bus", "pcie-x8-gpu3")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("diff-scenarios")
    return {n: str(build_scenario(n, root / n)) for n in NAMES}


@pytest.fixture(scope="module")
def views(built) -> dict[str, DiffView]:
    return {n: load_view(p) for n, p in built.items()}


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


# --- scenarios: healthy before, each fault after ------------------------------------

def test_same_snapshot_has_no_changes(views):
    d = diff_views(views["healthy-8xh100"], views["healthy-8xh100"])
    assert not d.changes and not d.gpus and not d.new and not d.resolved
    assert d.exit_status == 0
    assert changed_line(d) == "changed: nothing"


def test_driver_mismatch_changes_the_module_and_adds_a_finding(views):
    d = diff_views(views["healthy-8xh100"], views["driver-mismatch"])
    assert [(c.key, c.before, c.after) for c in d.changes] == [
        ("driver.module", "550.54.15", "535.161.07")]
    assert [f.id for f in d.new] == ["driver.version-mismatch"]
    assert d.new[0].severity == "critical" and d.new[0].action == "fix-software"
    assert d.exit_status == 1
    assert changed_line(d) == "changed: driver module 550.54.15 -> 535.161.07"
    # and back again: the finding is resolved, the module changes the other way
    back = diff_views(views["driver-mismatch"], views["healthy-8xh100"])
    assert [f.id for f in back.resolved] == ["driver.version-mismatch"] and not back.new
    assert back.changes[0].after == "550.54.15"


def test_fallen_off_bus_removes_the_gpu(views):
    d = diff_views(views["healthy-8xh100"], views["gpu-fallen-off-bus"])
    assert [(g.change, g.bus_before) for g in d.gpus] == [("removed", "0000:9a:00.0")]
    gone = d.gpus[0]
    assert gone.ident.startswith("GPU-") and "not visible" in (gone.note or "")
    assert "0000:9a:00.0" in gpu_change_text(gone)
    assert not any("0000:9a:00.0" in c.key for c in d.changes)  # covered by the GPU change
    assert "xid.79" in {f.id for f in d.new}  # gpu.missing is folded into it
    assert all(f.scope.endswith("0000:9a:00.0") for f in d.new)


def test_pcie_x8_changes_only_that_link_width(views):
    d = diff_views(views["healthy-8xh100"], views["pcie-x8-gpu3"])
    assert [(c.key, c.before, c.after) for c in d.changes] == [
        ("gpu[0000:5d:00.0].pcie.width", "x16", "x8")]
    assert "pcie.width-degraded" in {f.id for f in d.new}
    assert not d.gpus


def test_digest_covers_the_stack_and_leaves_noise_out(built):
    facts = Facts(Snapshot.load(built["healthy-8xh100"]))
    digest = facts_digest(facts)
    families = {family(k) for k in digest}
    assert {"kernel", "driver.module", "driver.userspace", "cuda", "gpu[*].vbios",
            "gpu[*].serial", "gpu[*].uuid", "gpu[*].persistence", "gpu[*].pcie.width",
            "gpu[*].nvlink.active", "nic[*].pcie.width", "ib[*].state", "ib[*].rate",
            "hugepages[*].total", "unit[*].state", "container.toolkit",
            "container.cdi_specs"} <= families
    assert digest["unit[nvidia-fabricmanager].state"] == "active/running"
    assert digest["container.toolkit"] == "1.15.0"
    assert not any("temperature" in k or "counter" in k or k.endswith(".speed")
                   for k in digest)
    noisy = facts_digest(Facts(Snapshot.load(built["healthy-8xh100"])), include_noise=True)
    assert any(k.endswith(".temperature_c") for k in noisy)
    assert set(digest) < set(noisy)


def test_digest_of_nothing_is_empty():
    assert facts_digest(Facts(Snapshot({}, None, "empty"))) == {}


# --- real captures of one GPU model -------------------------------------------------

def test_corpus_same_host_text_vs_table_agree(corpus):
    q = corpus.sample("thamada-8x-h100-sxm-nvidia-smi-a-565.57.01")
    table = corpus.sample("thamada-8x-h100-sxm-565.57.01")
    d = diff_views(load_view(str(q.path)), load_view(str(table.path)))
    # the same 8 GPUs on the same bus ids, same driver and CUDA: nothing changed...
    assert not d.changes and not d.gpus and d.exit_status == 0
    # ...and what only -q shows is listed as not compared, not as a change
    assert {"gpu[*].vbios", "gpu[*].serial", "gpu[*].uuid"} <= set(d.not_compared)


def test_corpus_two_h100_hosts_differ_in_driver_and_gpus(corpus):
    a = corpus.sample("thamada-8x-h100-sxm-nvidia-smi-a-565.57.01")
    b = corpus.sample("modal-gpu-glossary-8x-h100-sxm-550.90.07")
    d = diff_views(load_view(str(a.path)), load_view(str(b.path)))
    assert {(c.key, c.before, c.after) for c in d.changes} == {
        ("driver.userspace", "565.57.01", "550.90.07"), ("cuda", "12.7", "12.4")}
    kinds = [g.change for g in d.gpus]
    assert kinds.count("removed") == 8 and kinds.count("added") == 8
    assert "0000:53:00.0" in {g.bus_after for g in d.gpus}


# --- result JSON input ----------------------------------------------------------------

def test_result_json_against_a_snapshot(built, tmp_path):
    code, out, _ = _run(["analyze", "--json", built["healthy-8xh100"]])
    assert code == 0
    saved = tmp_path / "healthy.json"
    saved.write_text(out)
    view = load_view(str(saved))
    assert view.kind == "result" and view.digest["driver.module"] == "550.54.15"
    code, out, err = _run(["diff", "--json", str(saved), built["driver-mismatch"]])
    assert code == 1, err
    doc = json.loads(out)
    assert doc["schema"] == "gputriage/diff/v1" and doc["exit_status"] == 1
    assert {"key": "driver.module", "before": "550.54.15", "after": "535.161.07"} in \
        doc["changed"]
    assert [f["id"] for f in doc["findings"]["new"]] == ["driver.version-mismatch"]
    assert "container.toolkit" in doc["not_compared"]  # a result has no toolkit version


def test_view_from_a_hand_written_result():
    doc = document(finding("xid.79", scope=gpu_scope(0, "0000:18:00.0")),
                   host_summary=host(kernel="5.15.0-112-generic", driver=None),
                   gpu_rows=[GpuRow(0, "0000:18:00.0", uuid="GPU-a", persistence_mode=False)])
    doc["host"]["driver"] = {"kernel_module": "550.54.15"}  # the other keys: optional
    view = view_from_json(doc, "r.json")
    assert view.digest == {"kernel": "5.15.0-112-generic", "driver.module": "550.54.15",
                           "gpu[0000:18:00.0].persistence": "off",
                           "gpu[0000:18:00.0].uuid": "GPU-a"}
    assert view.findings[0].key == ("xid.79", "GPU 0 0000:18:00.0")


# --- pure comparison on hand-made views ---------------------------------------------

def _view(label: str, gpus: list[tuple[str, str | None]], findings=(), **digest) -> DiffView:
    rows = [GpuRow(None, bus, uuid=uuid) for bus, uuid in gpus]
    return DiffView(label, gpus=rows, digest=dict(digest), findings=list(findings))


def test_moved_added_and_finding_matching():
    warn = FindingRef("pcie.width-degraded", "GPU 1 0000:2a:00.0", "warning", "x8")
    crit = FindingRef("xid.79", "GPU 0 0000:18:00.0", "critical", "lost")
    ok = FindingRef("gpu.count-ok", "node", "ok", "fine")
    a = _view("a", [("0000:18:00.0", "GPU-a"), ("0000:2a:00.0", "GPU-b")], [warn, crit, ok],
              kernel="5.15.0-105")
    b = _view("b", [("0000:19:00.0", "GPU-a"), ("0000:2a:00.0", "GPU-b"),
                    ("0000:3a:00.0", "GPU-c")], [warn], kernel="5.15.0-112")
    d = diff_views(a, b)
    assert [(g.change, g.bus_before, g.bus_after) for g in d.gpus] == [
        ("moved", "0000:18:00.0", "0000:19:00.0"), ("added", None, "0000:3a:00.0")]
    assert changed_line(d).startswith("changed: kernel 5.15.0-105 -> 5.15.0-112; GPU ")
    assert [f.id for f in d.still] == ["pcie.width-degraded"]
    assert [f.id for f in d.resolved] == ["xid.79"]  # ok findings never count
    assert not d.new and d.exit_status == 1


def test_only_resolved_findings_exit_zero():
    crit = FindingRef("xid.79", "node", "critical", "lost")
    d = diff_views(_view("a", [], [crit]), _view("b", []))
    assert d.resolved and d.exit_status == 0
    assert diff_to_json(d)["exit_status"] == 0


# --- the command line -----------------------------------------------------------------

def test_cli_terminal_diff(built):
    code, out, _ = _run(["diff", built["healthy-8xh100"], built["pcie-x8-gpu3"]])
    assert code == 1
    assert "changed: gpu[0000:5d:00.0].pcie.width x16 -> x8" in out
    assert "new findings" in out and "pcie.width-degraded" in out
    code, out, _ = _run(["diff", built["healthy-8xh100"], built["healthy-8xh100"]])
    assert code == 0 and "changed: nothing" in out


def test_cli_bad_inputs_are_one_line_errors(built, tmp_path):
    code, out, err = _run(["diff", str(tmp_path / "missing"), built["healthy-8xh100"]])
    assert code == EXIT_INPUT and err.count("\n") == 1 and "missing" in err
    other = tmp_path / "logs.json"
    other.write_text(json.dumps({"schema": "gputriage/logs/v1", "timeline": []}))
    code, out, err = _run(["diff", built["healthy-8xh100"], str(other)])
    assert code == EXIT_INPUT and err.count("\n") == 1
    assert "gputriage/logs/v1" in err and "Traceback" not in err
    code, _, err = _run(["diff", built["healthy-8xh100"]])
    assert code == 64


# --- robustness -----------------------------------------------------------------------

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda c: st.lists(c, max_size=3)
                     | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=12)


_gpu_rows = st.lists(st.dictionaries(st.sampled_from(
    ["pci_bus_id", "uuid", "name", "visible", "persistence_mode"]), _json, max_size=5),
    max_size=4)
_findings = st.lists(st.dictionaries(st.sampled_from(
    ["id", "scope", "severity", "title", "action", "blame"]), _json, max_size=6), max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["schema", "host", "gpus", "findings", "digest"]),
                       _json, max_size=5), st.booleans(), _gpu_rows, _findings)
def test_any_json_gives_a_view_or_input_error(doc, force_schema, gpus, findings):
    if force_schema:
        doc.update(schema="gputriage/result/v1", gpus=gpus, findings=findings)
    try:
        view = view_from_json(doc, "x.json")
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    diff_views(view, view)


RESOLVED = {"xid48-reset"}  # its findings are history (ended by a reset): nothing new
FAULTY = [s for s in list_scenarios() if s.expected and s.name not in RESOLVED]


@pytest.mark.parametrize("scenario", FAULTY, ids=[s.name for s in FAULTY])
def test_every_scenario_fault_shows_in_the_diff_against_healthy(scenario, views,
                                                                tmp_path_factory):
    """Before (healthy) and after each fault: its findings are new; back, resolved."""
    path = build_scenario(scenario.name, tmp_path_factory.mktemp("fault") / scenario.name)
    after = load_view(str(path))
    d = diff_views(views["healthy-8xh100"], after)
    new = {f.id for f in d.new}
    assert new & set(scenario.expected), (scenario.name, sorted(new))
    assert d.exit_status == 1
    back = diff_views(after, views["healthy-8xh100"])
    assert {f.id for f in back.resolved} == new
