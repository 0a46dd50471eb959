"""``gputriage k8s lint`` as users run it, the ``gputriage/k8s/v1`` document, start-up
cost, and the Kubernetes scenarios served by the replay server to ``k8s status``."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from golden import said_json
from k8s_replay import KINDS, ReplayServer, load_objects

from gputriage import schemas
from gputriage.cli import main
from gputriage.commands.common import Environment

GPU_JOB = """\
# Source: trainer/templates/job.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: finetune
  namespace: research
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: nvcr.io/nvidia/pytorch:24.05-py3
        resources:
          limits:
            nvidia.com/gpu: 8
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: research
data:
  key: value
"""


def run(*argv: str, stdin: str | None = None,
        monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def ids(doc: dict[str, Any]) -> set[str]:
    """The finding ids of a JSON document, consequences included."""
    return {fid for fid, _ in said_json(doc["findings"])}


def lint_json(*argv: str, **kw: Any) -> tuple[int, dict[str, Any]]:
    code, out, err = run("k8s", "lint", "--json", *argv, **kw)
    assert err == "", err
    doc = json.loads(out)
    jsonschema.validate(doc, schemas.bundled("k8s"))
    return code, doc


def test_lint_reads_multi_document_yaml_and_names_each_origin(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(GPU_JOB)
    code, doc = lint_json(str(path))
    assert doc["command"] == "lint" and doc["cluster"] is None
    assert doc["files"] == [str(path)]
    assert doc["summary"]["objects"] == {"ConfigMap": 1, "Job": 1}
    assert code == doc["exit_status"] and code in (0, 1)  # settings never exit 2


def test_lint_walks_a_directory_and_reads_stdin(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "chart" / "templates").mkdir(parents=True)
    (tmp_path / "chart" / "templates" / "job.yml").write_text(GPU_JOB)
    (tmp_path / "chart" / "list.json").write_text(json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research"}}]}))
    (tmp_path / "chart" / "README.md").write_text("not a manifest: {{ .Values }}")
    _, doc = lint_json(str(tmp_path / "chart"))
    assert len(doc["files"]) == 2
    assert doc["summary"]["objects"] == {"ConfigMap": 1, "Job": 1, "Namespace": 1}
    _, doc = lint_json("-", stdin=GPU_JOB, monkeypatch=monkeypatch)
    assert doc["files"] == ["<stdin>"]


def test_lint_of_bad_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n   bad: [\n")
    code, out, err = run("k8s", "lint", str(bad))
    assert code == 66 and out == ""
    assert err.startswith(f"gputriage: input error: {bad}: not valid JSON or YAML (line ")
    assert err.count("\n") == 1


def test_lint_without_objects_or_files_is_an_input_error(tmp_path: Path) -> None:
    empty = tmp_path / "values.yaml"
    empty.write_text("replicas: 3\nimage: x\n")
    code, _, err = run("k8s", "lint", str(empty))
    assert code == 66 and "no Kubernetes object" in err
    (tmp_path / "docs").mkdir()
    code, _, err = run("k8s", "lint", str(tmp_path / "docs"))
    assert code == 66 and "no *.yaml" in err
    code, _, err = run("k8s", "lint", str(tmp_path / "absent.yaml"))
    assert code == 66 and "no such file" in err


def test_lint_terminal_report_is_whole_lines_when_piped(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(GPU_JOB)
    code, out, _ = run("k8s", "lint", str(path))
    lines = out.splitlines()
    assert lines[0].split()[0] in ("OK", "WARNING")
    assert any(ln.startswith("manifests") and "1 file, 2 objects" in ln for ln in lines)
    assert all(ln == ln.rstrip() for ln in lines)


def test_the_k8s_schema_is_listed_and_printed() -> None:
    code, out, _ = run("schema", "--list")
    assert code == 0 and any(ln.startswith("k8s ") for ln in out.splitlines())
    code, out, _ = run("schema", "k8s")
    assert code == 0 and json.loads(out)["$id"] == "urn:gputriage:schema:k8s:v1"


def test_help_does_not_import_the_kubernetes_client() -> None:
    probe = ("import sys; from gputriage.cli import main; "
             "main(['--help']); main(['k8s', '--help']); main(['k8s', 'status', '--help']); "
             "sys.stderr.write(str([m for m in sys.modules if m.split('.')[0] in "
             "('kubernetes', 'yaml', 'urllib3')]))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stderr.strip() == "[]"
    assert "k8s status|lint" in proc.stdout and "--kubeconfig" in proc.stdout


# --- the scenarios of issue 17, served by the replay server -------------------------
def _serve_and_judge(objects: list[dict[str, Any]], tmp_path: Path, *inputs: str
                     ) -> dict[str, Any]:
    by_kind = load_objects(objects)
    assert set(by_kind) <= set(KINDS), "the replay server cannot serve every kind"
    with ReplayServer(by_kind) as server:
        config = server.kubeconfig(tmp_path / "kubeconfig")
        code, out, err = run("k8s", "status", "--kubeconfig", str(config), "--json", *inputs)
    doc = json.loads(out)
    jsonschema.validate(doc, schemas.bundled("k8s"))
    assert code == doc["exit_status"], err
    return doc


def _expected(name: str) -> tuple[str, ...]:
    from gputriage.scenarios.catalog import CATALOG

    entry = next((e for e in CATALOG if e.name == name), None)
    if entry is None:
        pytest.skip(f"scenario {name} is not in the catalog yet")
    return entry.expected


@pytest.mark.parametrize("name, objects", [("k8s-shared-pool", "k8s_shared_pool_objects"),
                                           ("k8s-weights-herd", "k8s_weights_herd_objects")])
def test_pool_scenarios_through_the_live_read(name: str, objects: str, tmp_path: Path) -> None:
    expected = _expected(name)
    from gputriage.scenarios import k8s_pool

    doc = _serve_and_judge(getattr(k8s_pool, objects)(), tmp_path)
    assert set(expected) <= ids(doc)


def test_driver_update_scenario_cluster_and_node_together(tmp_path: Path) -> None:
    """Q1: the cluster read live, the node's snapshot given as NODE_RESULT."""
    expected = _expected("k8s-gpus-gone-after-driver-update")
    try:
        from gputriage.scenarios.k8s_driver import api_objects
    except ImportError:
        pytest.skip("scenario k8s-gpus-gone-after-driver-update exposes no api_objects yet")
    from gputriage.scenarios import build_scenario

    node = build_scenario("k8s-gpus-gone-after-driver-update", tmp_path / "node")
    doc = _serve_and_judge(api_objects(), tmp_path, str(node))
    assert set(expected) <= ids(doc)
    alone = _serve_and_judge(api_objects(), tmp_path)  # the cluster without the node
    assert {i for i in expected if i.startswith("k8s.pending")} <= ids(alone)
