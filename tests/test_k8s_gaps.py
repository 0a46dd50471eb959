"""The Kubernetes gaps of issue 32: an untolerated taint first among a Pending pod's
reasons, with the toleration to add; budgets that block every drain; why a quota keyed
without ``requests.`` counts no GPU; ``k8s lint --link``; lint in the order an on-call
acts."""

from __future__ import annotations

import copy
import io
import json

from hostkit import run

from gputriage.cli import Environment, main
from gputriage.model import finding_order
from gputriage.rules.k8s_pending import toleration_for
from gputriage.scenarios.k8s_pool import (
    k8s_shared_pool_objects,
    k8s_weights_herd_objects,
    manifests,
)

DESCRIBE_PENDING = """\
Name:             trainer-0
Namespace:        ml
Status:           Pending
Containers:
  main:
    Image:      trainer:1
    Limits:
      nvidia.com/gpu:  1
    Requests:
      nvidia.com/gpu:  1
Node-Selectors:  nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3
Events:
  Type     Reason            Age   From               Message
  ----     ------            ----  ----               -------
  Warning  FailedScheduling  2m    default-scheduler  0/5 nodes are available: 2 node(s) \
didn't match Pod's node affinity/selector, 3 node(s) had untolerated taint \
{nvidia.com/gpu: present}. preemption: 0/5 nodes are available: 5 Preemption is not \
helpful for scheduling.
"""


def test_an_untolerated_gpu_taint_comes_before_the_selector():
    found = [f for f in run(k8s_describe=DESCRIBE_PENDING).findings
             if f.id.startswith("k8s.pending-")]
    assert [f.id for f in found] == ["k8s.pending-untolerated-taint"]
    step = found[0].step or ""
    assert "key: nvidia.com/gpu, operator: Equal, value: present, effect: NoSchedule" in step
    assert "nvidia.com/gpu: present" in step and "tolerations" in step


def test_a_control_plane_taint_leaves_the_selector_first():
    text = DESCRIBE_PENDING.replace("{nvidia.com/gpu: present}",
                                    "{node-role.kubernetes.io/control-plane: }")
    ids = [f.id for f in run(k8s_describe=text).findings if f.id.startswith("k8s.pending-")]
    assert ids == ["k8s.pending-selector-mismatch"]


def test_toleration_of_each_printed_form():
    assert toleration_for("nvidia.com/gpu: present") == \
        "{key: nvidia.com/gpu, operator: Equal, value: present, effect: NoSchedule}"
    assert toleration_for("dedicated=gpu:NoExecute") == \
        "{key: dedicated, operator: Equal, value: gpu, effect: NoExecute}"
    assert toleration_for("nvidia.com/gpu") == \
        "{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}"


def _herd(edit) -> str:
    objs = copy.deepcopy(k8s_weights_herd_objects())
    for o in objs:
        edit(o)
    return manifests(objs)


def _pdb(spec: dict):
    def edit(o: dict) -> None:
        if o["kind"] == "PodDisruptionBudget":
            o["spec"] = {**{k: v for k, v in o["spec"].items()
                            if k not in ("maxUnavailable", "minAvailable")}, **spec}
    return edit


def _lint_ids(text: str) -> list[str]:
    return [f.id for f in run(k8s_objects=text).findings if f.id.startswith("k8s.lint-")]


def test_a_budget_that_allows_no_eviction_is_flagged():
    for spec in ({"maxUnavailable": 0}, {"maxUnavailable": "0%"}, {"minAvailable": "100%"},
                 {"minAvailable": 8}):
        found = [f for f in run(k8s_objects=_herd(_pdb(spec))).findings
                 if f.id == "k8s.lint-pdb-blocks-drain"]
        assert len(found) == 1, spec
        assert "drain" in found[0].title and found[0].step
    for spec in ({"maxUnavailable": 1}, {"minAvailable": 7}, {"minAvailable": "50%"}):
        assert "k8s.lint-pdb-blocks-drain" not in _lint_ids(_herd(_pdb(spec))), spec


def test_lint_orders_the_herd_above_the_budget_and_preemption_first():
    ordered = sorted(run(k8s_objects=_herd(_pdb({"maxUnavailable": 0}))).findings,
                     key=finding_order)
    ids = [f.id for f in ordered if f.id.startswith("k8s.lint-")]
    assert ids.index("k8s.lint-weights-herd") < ids.index("k8s.lint-pdb-blocks-drain")
    pool = sorted(run(k8s_objects=manifests(k8s_shared_pool_objects())).findings,
                  key=finding_order)
    assert [f.id for f in pool if f.id.startswith("k8s.lint-")][0] == \
        "k8s.lint-preempts-production"


def test_a_quota_without_the_requests_prefix_says_why_it_counts_no_gpu():
    objs = copy.deepcopy(k8s_shared_pool_objects())
    for o in objs:
        if o["kind"] == "ResourceQuota":
            o["spec"]["hard"] = {"nvidia.com/gpu": "4", "requests.cpu": "512"}
    found = [f for f in run(k8s_objects=manifests(objs)).findings
             if f.id == "k8s.lint-pool-no-quota"]
    assert len(found) == 1
    assert "names nvidia.com/gpu" in found[0].explanation
    assert "requests.nvidia.com/gpu" in found[0].explanation


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(argv, Environment(stdout=out, stderr=err)), out.getvalue(), err.getvalue()


def test_lint_link_rate_replaces_the_assumed_one(tmp_path):
    path = tmp_path / "herd.yaml"
    path.write_text(manifests(k8s_weights_herd_objects()))
    code, out, _ = _cli(["k8s", "lint", "--json", str(path)])
    herd = [f for f in json.loads(out)["findings"] if f["id"] == "k8s.lint-weights-herd"]
    assert "an assumed 25 Gb/s link" in herd[0]["explanation"]
    assert "--link" in herd[0]["explanation"]
    code, out, _ = _cli(["k8s", "lint", "--json", "--link", "10", str(path)])
    herd = [f for f in json.loads(out)["findings"] if f["id"] == "k8s.lint-weights-herd"]
    assert "over a 10 Gb/s link" in herd[0]["title"]
    assert "the given 10 Gb/s link" in herd[0]["explanation"]
    code, out, _ = _cli(["k8s", "lint", "--json", "--link", "400", str(path)])
    assert "k8s.lint-weights-herd" not in [f["id"] for f in json.loads(out)["findings"]]
    assert _cli(["k8s", "lint", "--link", "fast", str(path)])[0] == 64
