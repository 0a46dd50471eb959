"""``gputriage fleet``: aggregation, blast radius, bad inputs, the 64-node demo."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from resultkit import document, finding, gpus
from resultkit import host as host_summary

from gputriage.cli import EXIT_INPUT, EXIT_USAGE, Environment, main
from gputriage.fleet.report import (
    Fleet,
    FleetInputError,
    NodeRecord,
    aggregate,
    boot_window,
    host_patterns,
    load_fleet,
    load_result,
    record_from_result,
)
from gputriage.fleet.scenario import NEW_DRIVER, NEW_KERNEL, XID79_NODES, demo_plan, write_demo
from gputriage.views.fleetview import CSV_COLUMNS, fleet_csv, fleet_json


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def result_doc(host: str, driver: str = "550.54.15", kernel: str = "5.15.0-105-generic",
               findings: tuple[tuple[str, str], ...] = (), **host_extra: object) -> dict:
    """A gputriage/result/v1 document, as check --json writes it."""
    return document(*(finding(fid, sev, title=fid) for fid, sev in findings),
                    host_summary=host_summary(host, driver, kernel, **host_extra),
                    gpu_rows=gpus(8, uuid_prefix=f"GPU-{host}"),
                    manifest={"host": host, "created": "2024-05-14T09:30:00+00:00"})


def constructed_fleet() -> list[dict]:
    """40 nodes: the 5 with xid.79 are exactly the 5 on driver 560.1; the newer
    kernel is on those 5 and 13 healthy nodes (a confounder)."""
    docs = []
    for i in range(40):
        bad = i in (2, 11, 19, 27, 38)
        docs.append(result_doc(
            f"r{i // 10}-node{i:03d}",
            driver="560.1" if bad else "550.54.15",
            kernel="6.8.0" if bad or i < 15 else "5.15.0",
            findings=(("xid.79", "critical"), ("driver.versions-consistent", "ok"))
            if bad else (("driver.versions-consistent", "ok"),)))
    return docs


def records(docs: list[dict]) -> list[NodeRecord]:
    return [record_from_result(d, f"mem{i}") for i, d in enumerate(docs)]


# -- attributes ----------------------------------------------------------------------
def test_host_patterns_strip_digits_and_split_prefixes():
    assert host_patterns("r12-gpu-017") == ["r12-*", "r12-gpu-*"]
    assert host_patterns("dgx_a_7") == ["dgx_*", "dgx_a_*"]
    assert host_patterns("node42") == ["node*"]
    assert host_patterns("login") == []


def test_boot_window_buckets_in_utc():
    from datetime import datetime, timezone

    when = datetime(2024, 5, 14, 9, 47, tzinfo=timezone.utc)
    assert boot_window(when, 1) == "2024-05-14T09:00Z/1h"
    assert boot_window(when, 6) == "2024-05-14T06:00Z/6h"


def test_record_reads_driver_kernel_gpus_and_optional_fields():
    doc = result_doc("r1-n01", findings=(("xid.79", "critical"), ("xid.79", "warning"),
                                         ("topology.map", "info"), ("x", "ok")),
                     boot_time="2024-05-14T01:10:00Z", container_toolkit="1.15.0")
    doc["gpus"][0]["vbios"] = "96.00.74.00.01"
    doc["gpus"][1]["vbios"] = "96.00.99.00.01"
    rec = record_from_result(doc, "f.json")
    attrs = dict(a for a in rec.attributes if a[0] != "host.pattern")
    assert attrs["driver.userspace"] == "550.54.15"
    assert attrs["kernel"] == "5.15.0-105-generic"
    assert attrs["gpu.model"] == "NVIDIA H100 80GB HBM3"
    assert attrs["vbios"] == "96.00.74.00.01,96.00.99.00.01"
    assert attrs["container_toolkit"] == "1.15.0"
    assert attrs["boot_window"] == "2024-05-14T01:00Z/1h"
    assert dict(rec.findings) == {"xid.79": "critical", "topology.map": "info"}


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00",
                                  "yesterday"])
def test_impossible_boot_times_give_no_window(when):
    rec = record_from_result(result_doc("n1", boot_time=when), "x")
    assert "boot_window" not in dict(rec.attributes)


@pytest.mark.parametrize(("where", "value", "field"), [
    ("host", {"boot_time": 7}, "host.boot_time"),
    ("host", {"driver": {"userspace": ["550"]}}, "host.driver.userspace"),
    ("gpu", {"name": None, "vbios": 96}, "gpus[0].vbios"),
    ("finding", {"severity": "CRITICAL"}, "findings[0].severity"),
    ("finding", {"id": ""}, "findings[0].id")])
def test_a_wrong_typed_field_makes_a_bad_input_naming_it(where, value, field):
    doc = result_doc("n1", findings=(("xid.79", "critical"),))
    part = {"host": doc["host"], "gpu": doc["gpus"][0], "finding": doc["findings"][0]}[where]
    part.update(value)
    with pytest.raises(FleetInputError, match=rf"^{re.escape(field)}: "):
        record_from_result(doc, "n1.json")


@pytest.mark.parametrize("doc", [[], "x", {"schema": "gputriage/logs/v1"}, {"host": {}}])
def test_record_rejects_what_is_not_a_result(doc):
    with pytest.raises(FleetInputError):
        record_from_result(doc, "x.json")


# -- aggregation and blast radius ------------------------------------------------------
def test_aggregation_counts_nodes_per_finding():
    report = aggregate(records(constructed_fleet()))
    assert report.nodes == 40 and report.healthy == 35
    [xid] = report.findings  # "ok" findings are passed checks, never listed
    assert (xid.id, xid.severity, xid.count) == ("xid.79", "critical", 5)
    assert xid.nodes == ("r0-node002", "r1-node011", "r1-node019", "r2-node027",
                         "r3-node038")


def test_blast_radius_names_the_driver_and_ranks_the_confounder_lower():
    [xid] = aggregate(records(constructed_fleet())).findings
    top = xid.blast_radius[0]
    assert (top.attribute, top.value, top.score) == ("driver.userspace", "560.1", 1.0)
    assert (top.precision, top.recall, top.affected_with, top.nodes_with) == (1.0, 1.0, 5, 5)
    ranked = [(s.attribute, s.value) for s in xid.blast_radius]
    kernel = next(s for s in xid.blast_radius if s.attribute == "kernel")
    assert (kernel.value, kernel.affected_with, kernel.nodes_with) == ("6.8.0", 5, 18)
    assert kernel.recall == 1.0 and kernel.score < top.score
    assert ranked.index(("kernel", "6.8.0")) > ranked.index(("driver.userspace", "560.1"))
    # what every node shares separates nothing and is never offered
    assert ("gpu.model", "NVIDIA H100 80GB HBM3") not in ranked
    assert ("driver.cuda", "12.4") not in ranked


def test_finding_on_every_node_has_no_blast_radius():
    docs = [result_doc(f"n{i}", findings=(("fabric.down", "warning"),)) for i in range(4)]
    [f] = aggregate(records(docs)).findings
    assert f.count == 4 and f.blast_radius == ()


def test_min_severity_info_lists_info_findings():
    docs = [result_doc("a1", findings=(("topology.map", "info"),)), result_doc("b1")]
    assert aggregate(records(docs)).findings == []
    [f] = aggregate(records(docs), min_severity="info").findings
    assert f.id == "topology.map" and f.count == 1


def test_newest_result_of_a_host_wins():
    old = result_doc("n1", findings=(("xid.79", "critical"),))
    new = result_doc("n1")
    new["manifest"]["created"] = "2024-05-15T00:00:00+00:00"
    fleet = Fleet()
    for d in (new, old):  # order does not matter
        fleet.add(record_from_result(d, "x"))
    fleet.add(record_from_result(result_doc("n2"), "y"))
    report = fleet.report()
    assert report.nodes == 2 and report.duplicates == 1 and report.findings == []


# -- inputs ----------------------------------------------------------------------------
def write_fleet(root: Path, docs: list[dict]) -> None:
    for i, doc in enumerate(docs):
        sub = root / f"rack{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"{doc['host']['hostname']}.json").write_text(json.dumps(doc))


def test_bad_inputs_are_counted_listed_and_skipped(tmp_path):
    write_fleet(tmp_path, constructed_fleet())
    (tmp_path / "corrupt.json").write_bytes(b'{"schema": "gputriage/result/v1", "ho')
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "logs.json").write_text(json.dumps({"schema": "gputriage/logs/v1"}))
    (tmp_path / "binary.json").write_bytes(bytes(range(256)))
    (tmp_path / "broken.tar.gz").write_bytes(b"\x1f\x8b not really gzip")
    (tmp_path / "notes.txt").write_text("ignored: not an input")
    report = load_fleet([str(tmp_path), str(tmp_path / "missing-node.json")])
    assert report.nodes == 40
    assert report.bad_count == 6
    reasons = {Path(b.path).name: b.reason for b in report.bad_inputs}
    assert set(reasons) == {"corrupt.json", "empty.json", "logs.json", "binary.json",
                            "broken.tar.gz", "missing-node.json"}
    assert "gputriage/logs/v1" in reasons["logs.json"]
    assert reasons["missing-node.json"] == "no such file or directory"
    assert report.findings[0].blast_radius[0].value == "560.1"


def test_indented_and_compact_results_read_the_same(tmp_path):
    from gputriage.fleet.scenario import demo_results

    _, doc = list(demo_results(4))[3]  # an Xid 79 node, as check --json writes it
    doc["manifest"]["created"] = "2024-05-14T10:00:00+00:00"
    (tmp_path / "indented.json").write_text(json.dumps(doc, indent=2))
    (tmp_path / "compact.json").write_text(json.dumps(doc, separators=(",", ":")))
    fast = load_result(str(tmp_path / "indented.json"))
    full = load_result(str(tmp_path / "compact.json"))
    assert (fast.attributes, fast.findings, fast.created) == \
        (full.attributes, full.findings, full.created)
    assert fast.created == "2024-05-14T10:00:00+00:00"
    assert dict(fast.findings)["xid.79"] == "critical"
    # a file cut short inside the manifest is corrupt, not half read
    text = json.dumps(doc, indent=2)
    (tmp_path / "cut.json").write_text(text[: text.index('"manifest"') + 40])
    with pytest.raises(FleetInputError, match="not valid JSON"):
        load_result(str(tmp_path / "cut.json"))


def test_cli_reports_bad_inputs_in_json_and_terminal(tmp_path):
    write_fleet(tmp_path, constructed_fleet())
    (tmp_path / "corrupt.json").write_text("{")
    code, out, _ = cli("fleet", str(tmp_path), "--json")
    assert code == 2
    doc = json.loads(out)
    assert doc["schema"] == "gputriage/fleet/v1" and doc["nodes"] == 40
    assert doc["bad_inputs"]["count"] == 1
    assert doc["bad_inputs"]["listed"][0]["path"].endswith("corrupt.json")
    code, out, _ = cli("fleet", str(tmp_path))
    assert code == 2
    assert "xid.79" in out and "driver.userspace = 560.1" in out
    assert "skipped 1 unusable input:" in out and "corrupt.json" in out


def test_cli_without_usable_input_or_paths(tmp_path):
    (tmp_path / "a.json").write_text("[]")
    code, _, err = cli("fleet", str(tmp_path))
    assert code == EXIT_INPUT and "no usable node" in err
    assert cli("fleet")[0] == EXIT_USAGE


@pytest.mark.slow  # 320 results through a process pool
def test_process_pool_gives_the_same_report(tmp_path):
    docs = constructed_fleet() * 8  # 320 inputs: enough to start the pool
    for i, d in enumerate(docs):
        d = json.loads(json.dumps(d))
        d["host"]["hostname"] = f"{d['host']['hostname']}-{i // 40}"
        docs[i] = d
    write_fleet(tmp_path, docs)
    serial = load_fleet([str(tmp_path)], jobs=1)
    parallel = load_fleet([str(tmp_path)], jobs=2)
    assert serial.nodes == parallel.nodes == 320
    assert fleet_json(serial) == fleet_json(parallel)


def test_snapshots_dirs_and_tarballs_bring_toolkit_and_boot_time(tmp_path):
    from gputriage.scenarios import build_scenario

    (tmp_path / "fleet").mkdir()
    build_scenario("healthy-8xh100", tmp_path / "fleet" / "a")
    build_scenario("xid79-gpu-lost", tmp_path / "b.tar.gz")
    (tmp_path / "fleet" / "c").mkdir()
    (tmp_path / "fleet" / "c" / "manifest.json").write_text("{not json")
    report = load_fleet([str(tmp_path / "fleet"), str(tmp_path / "b.tar.gz")])
    assert report.bad_count == 1 and report.bad_inputs[0].path.endswith("c")
    # both scenarios are the same host name: the newest snapshot is kept
    assert report.nodes == 1 and report.duplicates == 1
    rec = load_fleet.__globals__["load_snapshot"](str(tmp_path / "fleet" / "a"))
    attrs = dict(a for a in rec.attributes if a[0] != "host.pattern")
    assert attrs["container_toolkit"] == "1.15.0"
    assert attrs["vbios"].startswith("96.00.")
    assert attrs["firmware"] == "550.54.15"
    assert attrs["boot_window"].endswith("/1h")
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        assert any(m.name.endswith("manifest.json") for m in tar.getmembers())


# -- views -----------------------------------------------------------------------------
def test_csv_has_one_row_per_finding_and_separator():
    report = aggregate(records(constructed_fleet()), top=3)
    rows = list(csv.DictReader(io.StringIO(fleet_csv(report))))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) == 3
    assert [r["rank"] for r in rows] == ["1", "2", "3"]
    assert rows[0]["finding"] == "xid.79" and rows[0]["node_count"] == "5"
    assert rows[0]["attribute"] == "driver.userspace" and rows[0]["score"] == "1.0000"
    assert len(rows[0]["nodes"].split()) == 5


def test_json_document_shape():
    doc = fleet_json(aggregate(records(constructed_fleet())))
    assert set(doc) == {"schema", "nodes", "healthy", "duplicates", "duplicate_hosts",
                        "findings", "bad_inputs"}
    sep = doc["findings"][0]["blast_radius"][0]
    assert set(sep) == {"attribute", "value", "affected_with", "nodes_with", "precision",
                        "recall", "score"}
    json.dumps(doc)  # plain data


# -- the 64-node demo (issue 5, item 6) ------------------------------------------------
def test_demo_plan():
    plan = demo_plan()
    assert len(plan) == 64
    bad = [n for n in plan if n.xid79]
    assert len(bad) == 6 and {n.driver for n in bad} == {NEW_DRIVER}
    assert sum(n.driver == NEW_DRIVER for n in plan) > 6  # healthy nodes on it too
    assert len({n.hostname[:3] for n in bad}) > 1  # spread over racks
    assert [i for i, n in enumerate(plan) if n.xid79] == list(XID79_NODES)


def test_demo_fleet_names_the_new_driver(tmp_path):
    code, _, err = cli("fleet", "--demo", str(tmp_path / "demo"))
    assert code == 0 and "64 node results" in err
    assert len(list((tmp_path / "demo").glob("*.json"))) == 64
    code, out, _ = cli("fleet", str(tmp_path / "demo"), "--json")
    assert code == 2
    doc = json.loads(out)
    assert doc["nodes"] == 64 and doc["bad_inputs"]["count"] == 0
    xid = next(f for f in doc["findings"] if f["id"] == "xid.79")
    assert xid["count"] == 6
    top = xid["blast_radius"][0]
    assert top["attribute"].startswith("driver.") and top["value"] == NEW_DRIVER
    kernel = next(s for s in xid["blast_radius"] if s["attribute"] == "kernel")
    assert kernel["value"] == NEW_KERNEL and kernel["score"] < top["score"]


def test_demo_as_snapshots_reads_the_same(tmp_path):
    written = write_demo(tmp_path, nodes=4, snapshots=True)
    assert len(written) == 4 and all((p / "manifest.json").is_file() for p in written)
    report = load_fleet([str(tmp_path)])
    assert report.nodes == 4 and report.bad_count == 0
    assert [f.count for f in report.findings if f.id == "xid.79"] == [1]


# -- robustness ------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(
    st.sampled_from(["host", "gpus", "findings", "manifest", "generated", "x"]),
    json_values, max_size=6))
def test_any_json_gives_a_record_or_fleet_input_error(body):
    doc = {"schema": "gputriage/result/v1", **body}
    try:
        rec = record_from_result(doc, "fuzz.json")
    except FleetInputError:
        return
    assert isinstance(rec, NodeRecord)
    aggregate([rec])


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_give_a_record_or_fleet_input_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "r.json"
    path.write_bytes(data)
    with contextlib.suppress(FleetInputError):
        load_result(str(path))


def test_fleet_scenario_through_the_scenario_command(tmp_path):
    import io

    from gputriage.cli import Environment, main

    out, err = io.StringIO(), io.StringIO()
    assert main(["scenario", "list"], Environment(stdout=out, stderr=err)) == 0
    assert "fleet-64-xid79-driver" in out.getvalue()
    target = tmp_path / "fleet"
    code = main(["scenario", "build", "fleet-64-xid79-driver", "-o", str(target)],
                Environment(stdout=io.StringIO(), stderr=err))
    assert code == 0 and len(list(target.glob("*.json"))) == 64
    out = io.StringIO()
    code = main(["fleet", "--json", str(target)], Environment(stdout=out, stderr=io.StringIO()))
    doc = __import__("json").loads(out.getvalue())
    xid79 = next(f for f in doc["findings"] if f["id"] == "xid.79")
    assert xid79["count"] == 6
    assert xid79["blast_radius"][0]["attribute"] == "driver.userspace"
