"""``gputriage k8s status`` against a replayed API server (tests/k8s_replay.py), through
the real ``kubernetes`` client, and the fixtures checked through ``kubectl --server``."""

from __future__ import annotations

import io
import json
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from golden import said_json
from k8s_replay import ReplayServer, fixture_objects, load_objects

from gputriage import schemas
from gputriage.cli import main
from gputriage.collect.k8s_api import ReadOptions, read_cluster
from gputriage.collect.k8s_slim import slim
from gputriage.commands.common import Environment

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (Debian: "
                                   "apt-get install kubectl); the client tests still run")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def status_json(server: ReplayServer, tmp_path: Path, *extra: str) -> tuple[int, dict, str]:
    config = server.kubeconfig(tmp_path / "kubeconfig")
    code, out, err = run("k8s", "status", "--kubeconfig", str(config), "--json", *extra)
    doc = json.loads(out)
    jsonschema.validate(doc, schemas.bundled("k8s"))
    return code, doc, err


def ids(doc: dict[str, Any]) -> set[str]:
    """The finding ids of a JSON document, consequences included."""
    return {fid for fid, _ in said_json(doc["findings"])}


def test_status_reads_every_page_of_every_kind_once(tmp_path: Path) -> None:
    with ReplayServer(fixture_objects()) as server:
        code, doc, _ = status_json(server, tmp_path, "--page-size", "2")
    read = doc["cluster"]["read"]
    assert read["Node"] == 5 and read["Pod"] == 8 and read["Event"] == 4
    assert read["ClusterPolicy"] == 1  # discovery lists nvidia.com: read
    assert "ClusterQueue" not in read  # kueue is not served: not asked
    assert doc["summary"]["gpu_nodes"] == 3
    assert doc["summary"]["gpus"] == {"capacity": 16, "allocatable": 14}
    assert doc["summary"]["pending_gpu_pods"] == 2
    pages = [r for r in server.requests if r.startswith("/api/v1/pods")]
    assert len(pages) == 4 and all("limit=2" in r for r in pages)
    assert sum("continue=" in r for r in pages) == 3
    # one list per kind, never a request per node or pod; only GETs
    assert not any("/nodes/" in r or "/pods/" in r for r in server.requests)
    assert not any(r.split()[0] in ("POST", "PUT", "PATCH", "DELETE") for r in server.requests)
    assert {"k8s.gpus-short", "k8s.driver-drift"} <= ids(doc)
    assert code == doc["exit_status"] == 2


def test_a_forbidden_kind_is_reported_and_the_rest_judged(tmp_path: Path) -> None:
    with ReplayServer(fixture_objects(), forbidden={"events", "poddisruptionbudgets"}) as srv:
        _, doc, _ = status_json(srv, tmp_path)
    assert doc["not_read"]["Event"].startswith(
        'forbidden: events is forbidden: User "system:serviceaccount:monitoring:gputriage" '
        'cannot list resource "events" in API group "" at the cluster scope')
    assert "PodDisruptionBudget" in doc["not_read"]
    assert "Event" not in doc["cluster"]["read"]
    assert {"k8s.gpus-short", "k8s.driver-drift"} <= ids(doc)


def test_the_terminal_report_names_what_was_not_read(tmp_path: Path) -> None:
    with ReplayServer(fixture_objects(), forbidden={"pods"}) as server:
        config = server.kubeconfig(tmp_path / "kubeconfig")
        code, out, err = run("k8s", "status", "--kubeconfig", str(config))
    assert err == ""
    lines = out.splitlines()
    assert lines[0].startswith(("CRITICAL cluster replay", "WARNING cluster replay"))
    assert any(ln.startswith("nodes") and "3 with GPUs" in ln and "allocatable 14" in ln
               for ln in lines)
    assert any(ln.startswith("not read") and "Pod: forbidden: pods is forbidden" in ln
               for ln in lines)
    assert code in (1, 2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connection_refused_is_one_line_and_unknown(tmp_path: Path) -> None:
    server = ReplayServer({}, port=_free_port())
    config = server.kubeconfig(tmp_path / "kubeconfig")
    server.stop()  # nothing listens there any more
    code, out, err = run("k8s", "status", "--kubeconfig", str(config), "--timeout", "20")
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("gputriage: cannot read the cluster: cannot reach http://127.0.0.1:")
    assert "connection refused" in err


@pytest.mark.slow  # waits out the client's timeout
def test_a_slow_server_ends_at_the_timeout(tmp_path: Path) -> None:
    with ReplayServer(fixture_objects(), delay_s=0.6) as server:
        config = server.kubeconfig(tmp_path / "kubeconfig")
        code, _, err = run("k8s", "status", "--kubeconfig", str(config), "--timeout", "1")
    assert code == 3
    assert "timed out after 1 s" in err and err.count("\n") == 1


def test_no_kubeconfig_is_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = run("k8s", "status")
    assert code == 3 and "no kubeconfig" in err
    bad = tmp_path / "broken"
    bad.write_text("clusters: [")
    code, _, err = run("k8s", "status", "--kubeconfig", str(bad))
    assert code == 3 and "cannot load the cluster configuration" in err
    assert "Traceback" not in err


def test_save_writes_a_snapshot_that_analyze_judges_alike(tmp_path: Path) -> None:
    saved = tmp_path / "cluster.tar.gz"
    with ReplayServer(fixture_objects(), forbidden={"pods"}) as server:
        _, live, err = status_json(server, tmp_path, "--save", str(saved))
    assert "snapshot written" in err
    code, out, _ = run("analyze", str(saved), "--json")
    offline = json.loads(out)
    assert ids(offline) == ids(live)
    assert code == live["exit_status"]
    from gputriage.ingest import load_inputs

    doc = json.loads(load_inputs([str(saved)]).text("k8s_objects") or "")
    assert doc["errors"]["Pod"].startswith("forbidden")
    assert doc["cluster"]["read"]["Node"] == 5
    assert not any("managedFields" in item["metadata"] for item in doc["items"])


def test_slim_keeps_what_the_parsers_read_and_drops_the_rest() -> None:
    nodes = fixture_objects("C-nodes.json")["Node"]
    kept = slim("Node", nodes[1], "v1")
    assert kept["kind"] == "Node" and kept["apiVersion"] == "v1"
    assert "managedFields" not in kept["metadata"] and "images" not in kept["status"]
    assert kept["status"]["allocatable"]["nvidia.com/gpu"] == "6"
    assert kept["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    assert kept["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    pod = slim("Pod", fixture_objects("C-pods.json")["Pod"][6], "v1")
    state = pod["status"]["containerStatuses"][0]["state"]
    assert state["waiting"]["reason"] == "CrashLoopBackOff"
    assert len(json.dumps(kept)) < 0.8 * len(json.dumps(nodes[1]))


def test_read_cluster_keeps_the_items_only_when_asked(tmp_path: Path) -> None:
    with ReplayServer(fixture_objects()) as server:
        config = str(server.kubeconfig(tmp_path / "kubeconfig"))
        plain = read_cluster(ReadOptions(kubeconfig=config))
        kept = read_cluster(ReadOptions(kubeconfig=config, keep_items=True))
    assert plain.items is None and plain.document()["items"] == []
    assert len(kept.document()["items"]) == sum(kept.read.values())
    assert plain.cluster.nodes.keys() == kept.cluster.nodes.keys()
    assert kept.context == "replay" and kept.server == server.url


def test_node_results_are_judged_with_the_cluster(tmp_path: Path, corpus: Any) -> None:
    sample = corpus.sample("device-plugin-non-nvml-platform-eks-ami")
    code, out, _ = run("analyze", str(sample.path), "--json")
    alone = ids(json.loads(out))
    with ReplayServer(fixture_objects()) as server:
        _, doc, _ = status_json(server, tmp_path, str(sample.path))
    assert alone and alone <= ids(doc)
    assert "k8s.gpus-short" in ids(doc)
    assert any(str(sample.path) in i["origin"] for i in doc["inputs"])


@needs_kubectl
def test_kubectl_reads_the_fixtures_as_from_a_real_server(tmp_path: Path) -> None:
    assert KUBECTL is not None
    recorded = fixture_objects()
    with ReplayServer(recorded) as server:
        got = {}
        for kind, resource in (("Node", "nodes"), ("Pod", "pods"),
                               ("DaemonSet", "daemonsets"), ("ClusterPolicy",
                                                             "clusterpolicies")):
            proc = subprocess.run(
                [KUBECTL, "--server", server.url, "--kubeconfig", "/dev/null", "get",
                 resource, "-A", "-o", "json", "--chunk-size", "3"],
                capture_output=True, text=True, timeout=60, check=False)
            assert proc.returncode == 0, proc.stderr
            got[kind] = json.loads(proc.stdout)["items"]
    for kind, items in got.items():
        assert [i["metadata"]["name"] for i in items] == \
            [i["metadata"]["name"] for i in recorded[kind]]
        assert all(i["kind"] == kind for i in items)  # kubectl filled what lists leave out
    assert sum("continue=" in r for r in server.requests if "/pods" in r) == 2
    # and what kubectl printed reads as the same cluster
    from gputriage.parsers.k8s_objects import cluster_from_api

    cluster = cluster_from_api([{"kind": "List", "items": sum(got.values(), [])}])
    assert cluster.nodes["gpu-h100-b"].allocatable == \
        {**cluster.nodes["gpu-h100-b"].allocatable, "nvidia.com/gpu": "6"}
    assert load_objects([{"kind": "List", "items": got["Pod"]}])["Pod"][6]["status"][
        "containerStatuses"][0]["restartCount"] == 41


@needs_kubectl
def test_kubectl_sees_the_forbidden_answer_as_rbac(tmp_path: Path) -> None:
    assert KUBECTL is not None
    with ReplayServer(fixture_objects(), forbidden={"pods"}) as server:
        proc = subprocess.run([KUBECTL, "--server", server.url, "--kubeconfig", "/dev/null",
                               "get", "pods", "-A", "-o", "json"],
                              capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert 'pods is forbidden: User "system:serviceaccount:monitoring:gputriage" cannot list ' \
           'resource "pods" in API group "" at the cluster scope' in proc.stderr


def test_a_kubeconfig_that_is_not_one_is_one_line_and_unknown(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text("garbage\n")
    code, out, err = run("k8s", "status", "--kubeconfig", str(config))
    assert code == 3 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "not a kubeconfig" in err, err
