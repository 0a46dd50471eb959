"""Lint of GPU workloads and of the pool's policy (rules/k8s_lint.py, k8s_pool.py,
k8s_herd.py) and the scenarios k8s-shared-pool and k8s-weights-herd.

Each rule: a case that fires and a well-formed manifest that gives no warning; paths of
the manifest and the file in the evidence; real-shaped input (helm template output with
``# Source:`` comments, a kustomize build, a ``kubectl get -o yaml`` List), read through
the engine and through ``gputriage k8s lint``.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
import yaml
from hostkit import run

from gputriage.cli import Environment, main
from gputriage.model import Blame, Severity
from gputriage.scenarios.k8s_pool import (
    k8s_shared_pool_objects,
    k8s_weights_herd_objects,
    manifests,
)

FIXTURES = Path(__file__).parent / "fixtures" / "k8s"
CLEAN = (FIXTURES / "D-helm-clean.yaml").read_text()
BAD = (FIXTURES / "D-kustomize-bad.yaml").read_text()
LIST = (FIXTURES / "D-get-list.yaml").read_text()
POOL = manifests(k8s_shared_pool_objects())
HERD = manifests(k8s_weights_herd_objects())


def _edit(objects: list[dict], kind: str, name: str, fn) -> str:
    objs = copy.deepcopy(objects)
    for o in objs:
        if o["kind"] == kind and o["metadata"]["name"] == name:
            fn(o)
    return manifests(objs)


def _no_priority(o: dict) -> None:
    o["preemptionPolicy"] = "Never"


POOL_NO_PREEMPT = _edit(k8s_shared_pool_objects(), "PriorityClass", "research-urgent",
                        _no_priority)

RULE_CASES = {
    "k8s.lint-resources": [({"k8s_objects": BAD}, "k8s.lint-gpu-requests")],
    "k8s.lint-taint": [({"k8s_objects": BAD}, "k8s.lint-gpu-toleration")],
    "k8s.lint-dev-shm": [({"k8s_objects": BAD}, "k8s.lint-shm")],
    "k8s.lint-gang": [({"k8s_objects": BAD}, "k8s.lint-no-gang")],
    "k8s.lint-probes": [({"k8s_objects": HERD}, "k8s.lint-probe-vs-load")],
    "k8s.pool-quota": [({"k8s_objects": POOL}, "k8s.lint-pool-no-quota")],
    "k8s.pool-priority": [({"k8s_objects": POOL}, "k8s.lint-preempts-production"),
                          ({"k8s_objects": POOL_NO_PREEMPT}, "k8s.lint-pool-no-priority")],
    "k8s.pool-pdb": [({"k8s_objects": LIST}, "k8s.lint-no-pdb")],
    "k8s.pool-pdb-blocks": [({"k8s_objects": HERD.replace("maxUnavailable: 1",
                                                          "maxUnavailable: 0")},
                             "k8s.lint-pdb-blocks-drain")],
    "k8s.pool-hpa": [({"k8s_objects": POOL}, "k8s.lint-hpa-cpu")],
    "k8s.herd-weights": [({"k8s_objects": HERD}, "k8s.lint-weights-herd")],
    "k8s.herd-pull": [({"k8s_objects": HERD}, "k8s.lint-pull-always")],
}


def _lint(text: str) -> list:
    return [f for f in run(k8s_objects=text).findings if f.id.startswith("k8s.lint-")]


def _by_id(text: str) -> dict:
    out: dict = {}
    for f in _lint(text):
        out.setdefault(f.id, []).append(f)
    return out


def _lines(f) -> str:
    return "\n".join(ln for e in f.evidence for ln in e.lines)


def test_a_well_formed_helm_chart_gives_no_warning():
    assert [f.id for f in _lint(CLEAN) if f.severity.rank >= Severity.WARNING.rank] == []


def test_kustomize_build_each_problem_once_with_its_object_and_path():
    found = _by_id(BAD)
    gpu = {f.scope.name: f for f in found["k8s.lint-gpu-requests"]}
    assert set(gpu) == {"ml-dev/embedder", "ml-dev/notebook-shared"}
    f = gpu["ml-dev/embedder"]
    assert "requests 2 != limits 1" in f.title
    assert "spec.template.spec.containers[0].resources" in _lines(f)
    assert "D-kustomize-bad" not in _lines(f)  # pasted: the paste and its document
    assert "(paste #3)" in _lines(f)
    assert "shared replica" in gpu["ml-dev/notebook-shared"].title
    tol = found["k8s.lint-gpu-toleration"]
    assert [f.scope.name for f in tol] == ["monitoring/gpu-node-exporter"]
    assert tol[0].severity is Severity.WARNING  # asks no GPU: no admission plugin helps
    assert [f.scope.name for f in found["k8s.lint-no-gang"]] == ["ml-dev/pretrain-8x8"]
    assert "8 GPU pods" in found["k8s.lint-no-gang"][0].title
    assert [f.scope.name for f in found["k8s.lint-shm"]] == ["ml-dev/pretrain-8x8"]
    probe = found["k8s.lint-probe-vs-load"][0]
    assert "livenessProbe gives up after 60 s" in probe.title and "144 GB" in probe.title
    assert "Qwen/Qwen2.5-72B-Instruct" in probe.explanation
    assert found["k8s.lint-hpa-cpu"][0].scope.kind == "horizontalpodautoscaler"
    pdb = {f.scope.name: f.severity for f in found["k8s.lint-no-pdb"]}
    assert pdb == {"ml-dev/qwen-72b": Severity.WARNING, "ml-dev/embedder": Severity.INFO}
    for fs in found.values():
        for f in fs:
            assert f.blame in (Blame.JOB_CONFIG, Blame.CONFIG)
            assert f.severity in (Severity.WARNING, Severity.INFO)


def test_kubectl_get_list_is_read():
    found = _by_id(LIST)
    assert list(found) == ["k8s.lint-no-pdb"]
    assert "inference/triton" in found["k8s.lint-no-pdb"][0].scope.name


@pytest.mark.parametrize(("limits", "requests", "expected"), [
    ({"nvidia.com/gpu": 1}, None, None),
    ({"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 2}, None),
    (None, {"nvidia.com/gpu": 1}, "in requests only"),
    ({"nvidia.com/gpu": "500m"}, None, "0.5 is not whole"),
    ({"nvidia.com/mig-1g.10gb": 2}, None, None),
    ({"nvidia.com/gpu.shared": 1}, None, None),
])
def test_gpu_resources(limits, requests, expected):
    res = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
           "spec": {"containers": [{"name": "c", "image": "x:1", "resources": res}]}}
    found = [f for f in _lint(yaml.safe_dump(pod)) if f.id == "k8s.lint-gpu-requests"]
    assert [expected in f.title for f in found] == ([True] if expected else [])


def test_toleration_against_the_nodes_real_taints():
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "gpu-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
        "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
        "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
           "spec": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "containers": [{"name": "c", "image": "x:1",
                                    "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    text = yaml.safe_dump_all([node, pod])
    f = next(f for f in _lint(text) if f.id == "k8s.lint-gpu-toleration")
    assert "sku=gpu:NoSchedule" in f.title and f.severity is Severity.WARNING
    pod["spec"]["tolerations"].append({"key": "sku", "operator": "Equal", "value": "gpu"})
    assert not [f for f in _lint(yaml.safe_dump_all([node, pod]))
                if f.id == "k8s.lint-gpu-toleration"]


def test_gang_by_kueue_or_podgroup():
    job = yaml.safe_load(BAD.split("---")[-1])
    assert "k8s.lint-no-gang" in _by_id(yaml.safe_dump(job))
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
    assert "k8s.lint-no-gang" not in _by_id(yaml.safe_dump(job))
    job["metadata"]["labels"] = {}
    job["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    f = _by_id(yaml.safe_dump(job))["k8s.lint-no-gang"][0]
    assert "no PodGroup" in f.explanation
    job["spec"]["template"]["metadata"] = {"annotations": {
        "scheduling.k8s.io/group-name": "pretrain"}}
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "pretrain", "namespace": "ml-dev"}, "spec": {"minMember": 4}}
    f = _by_id(yaml.safe_dump_all([job, group]))["k8s.lint-no-gang"][0]
    assert "minMember 4 is below its 8 pods" in f.explanation
    group["spec"]["minMember"] = 8
    assert "k8s.lint-no-gang" not in _by_id(yaml.safe_dump_all([job, group]))


def test_shared_pool_scenario_findings():
    found = _by_id(POOL)
    assert set(found) == {"k8s.lint-pool-no-quota", "k8s.lint-preempts-production",
                          "k8s.lint-no-pdb", "k8s.lint-hpa-cpu"}
    quota = found["k8s.lint-pool-no-quota"][0]
    assert quota.scope.name == "research" and quota.blame is Blame.CONFIG
    assert "research-compute does not count GPUs" in quota.explanation
    assert "9 GPUs" in quota.explanation  # 8 + 1 research GPUs
    pre = found["k8s.lint-preempts-production"][0]
    assert pre.scope.kind == "priorityclass" and "1000000" in pre.title
    assert "priority 0" in _lines(pre)
    # a quota on GPUs settles the quota; a production class above research's the rest
    objs = k8s_shared_pool_objects()
    objs[3]["spec"]["hard"]["requests.nvidia.com/gpu"] = "16"
    objs.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                 "metadata": {"name": "production"}, "value": 2000000})
    for o in objs:
        if o["kind"] == "Deployment":
            o["spec"]["template"]["spec"]["priorityClassName"] = "production"
    fixed = _by_id(manifests(objs))
    assert not {"k8s.lint-pool-no-quota", "k8s.lint-preempts-production",
                "k8s.lint-pool-no-priority"} & set(fixed)


def test_no_priority_when_research_cannot_preempt():
    found = _by_id(POOL_NO_PREEMPT)
    assert "k8s.lint-preempts-production" not in found
    f = found["k8s.lint-pool-no-priority"][0]
    assert f.scope.name == "prod-inference"


def test_weights_herd_scenario_figures():
    found = _by_id(HERD)
    assert set(found) == {"k8s.lint-weights-herd", "k8s.lint-pull-always",
                          "k8s.lint-probe-vs-load"}
    herd = found["k8s.lint-weights-herd"][0]
    assert "16 replicas" in herd.title and "140 GB" in herd.title
    assert "2,240 GB" in herd.title and "12 min" in herd.title and "25 Gb/s" in herd.title
    assert "maxReplicas 16" in herd.explanation and "pre-pull DaemonSet" in herd.explanation
    assert "spec.template.spec.initContainers[0].command" in _lines(herd)
    pull = found["k8s.lint-pull-always"][0]
    assert pull.severity is Severity.WARNING and "vllm/vllm-openai:latest" in pull.title
    probe = found["k8s.lint-probe-vs-load"][0]
    assert "60 s" in probe.title and "70-140 s" in probe.title


def test_herd_is_quiet_with_a_node_cache_and_a_pinned_image():
    def fix(o: dict) -> None:
        spec = o["spec"]["template"]["spec"]
        spec["volumes"][0] = {"name": "models", "hostPath": {"path": "/mnt/nvme/models"}}
        spec["containers"][0].update(image="vllm/vllm-openai:v0.6.3",
                                     imagePullPolicy="IfNotPresent")
        spec["containers"][0]["startupProbe"]["failureThreshold"] = 60
    found = _by_id(_edit(k8s_weights_herd_objects(), "Deployment", "llama-70b", fix))
    assert found == {}


def test_live_cluster_bare_pods_typed_and_owned_pods_left_to_controllers():
    from gputriage.parsers.k8s_objects import cluster_from_api
    from gputriage.rules.k8s_workloads import workloads

    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b", "namespace": "a"},
            "spec": {"containers": [{"name": "c", "resources": {
                "requests": {"nvidia.com/gpu": "1"}}}]}}
    owned = copy.deepcopy(bare)
    owned["metadata"].update(name="o-1", ownerReferences=[
        {"kind": "ReplicaSet", "name": "o", "controller": True}])
    cluster = cluster_from_api([bare, owned, owned], origin="api", keep_raw=False)
    ws = workloads(cluster)
    assert [(w.ref, w.partial, w.where) for w in ws] == [("Pod/a/b", True, "api")]
    assert ws[0].templates[0].spec["containers"][0]["resources"]["requests"] == \
        {"nvidia.com/gpu": "1"}
    pasted = cluster_from_api([owned, owned], origin="paste")
    assert [w.ref for w in workloads(pasted)] == ["Pod/a/o-1"]  # one for its controller


def test_model_size_from_names():
    from gputriage.parsers.k8s_model import KObject
    from gputriage.rules.k8s_workloads import Template, Workload, model_size_gb

    def size(*args: str, env: dict | None = None) -> float | None:
        c = {"name": "c", "args": list(args),
             "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}
        spec = {"containers": [c]}
        w = Workload(KObject("Pod", "p", "a", "v1", {"spec": spec}), [
            Template(spec, {}, "spec", 1)], "x")
        got = model_size_gb(w)
        return None if got is None else round(got[0], 1)

    assert size("--model", "meta-llama/Llama-3.1-405B-Instruct-FP8") == 405.0
    assert size("--model", "TheBloke/Llama-2-70B-AWQ") == 35.0
    assert size(env={"MODEL_ID": "mistralai/Mixtral-8x7B-v0.1"}) == pytest.approx(93.0, 0.01)
    assert size("--model", "Qwen/Qwen2.5-7B", "--dtype", "float32") == 28.0
    assert size("--port", "8000", "--max-model-len", "8192") is None


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def test_cli_lint_of_the_fixtures_and_scenario_manifests(tmp_path):
    (tmp_path / "pool.yaml").write_text(POOL)
    code, out, err = _cli(["k8s", "lint", str(FIXTURES / "D-helm-clean.yaml")])
    assert code == 0, out + err
    code, out, err = _cli(["k8s", "lint", "--json", str(tmp_path / "pool.yaml")])
    assert code == 1, out + err
    doc = json.loads(out)
    ids = {f["id"] for f in doc["findings"]}
    assert {"k8s.lint-pool-no-quota", "k8s.lint-preempts-production"} <= ids
    lines = [ln for f in doc["findings"] for e in f["evidence"] for ln in e["lines"]]
    assert any("pool.yaml #5" in ln for ln in lines), lines
