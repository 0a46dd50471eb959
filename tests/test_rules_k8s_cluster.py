"""Nodes and scheduling in the cluster (rules/k8s_nodes.py, k8s_node_health.py, k8s_pending.py,
k8s_admission.py, k8s_sched.py): what each GPU node advertises against what it has, driver drift,
GPU node conditions, MIG resource names, and why each Pending GPU pod waits.

``RULE_CASES`` feed the conformance test with API objects (``kubectl get -o json``); the
rest checks blame, action and wording, on the corpus's pastes where they exist.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from golden import flat
from hostkit import run

from gputriage.model import Action, Blame, Severity
from gputriage.rules.k8s_sched import (
    AFFINITY,
    INSUFFICIENT,
    SELECTOR,
    TAINT,
    UNSCHEDULABLE,
    gang_message,
    parse_failed_scheduling,
)

GFD = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def node(name: str, gpus: int | None = 8, alloc: int | None = None,
         labels: dict[str, str] | None = None, taints: list[dict] | None = None,
         conditions: list[dict] | None = None, extra: dict[str, str] | None = None,
         unschedulable: bool = False) -> dict[str, Any]:
    cap: dict[str, str] = {"cpu": "96", "memory": "2Ti", **(extra or {})}
    if gpus is not None:
        cap["nvidia.com/gpu"] = str(gpus)
    allocatable = dict(cap)
    if alloc is not None:
        allocatable["nvidia.com/gpu"] = str(alloc)
    marks = dict(GFD) if labels is None else {**GFD, **labels} if labels else {}  # {}: a CPU node
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": marks},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"capacity": cap, "allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True"},
                                      *(conditions or [])]}}


def pod(name: str, gpus: int = 1, node_name: str | None = None, phase: str = "Pending",
        namespace: str = "ml", resource: str = "nvidia.com/gpu", **spec: Any) -> dict[str, Any]:
    res = {resource: str(gpus)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "main", "image": "trainer:1",
                                     "resources": {"limits": res, "requests": res}}],
                     **({"nodeName": node_name} if node_name else {}), **spec},
            "status": {"phase": phase,
                       "conditions": [{"type": "PodScheduled",
                                       "status": "True" if node_name else "False"}]}}


def event(reason: str, message: str, about: str = "trainer-0", kind: str = "Pod",
          typ: str = "Warning", source: str = "default-scheduler", at: str = "10:00:00",
          namespace: str = "ml") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{about}.{reason}.{at}", "namespace": namespace},
            "involvedObject": {"kind": kind, "name": about, "namespace": namespace},
            "reason": reason, "message": message, "type": typ,
            "source": {"component": source},
            "lastTimestamp": f"2025-03-04T{at}Z"}


def objects(*items: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)})


INSUFF = ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
          "available: 3 No preemption victims found for incoming pod.")
# two nodes with 4 of 8 GPUs held each, a pod asking 8
FRAGMENTED = objects(
    node("gpu-a"), node("gpu-b"),
    pod("hold-a", 4, "gpu-a", "Running"), pod("hold-b", 4, "gpu-b", "Running"),
    pod("trainer-0", 8),
    event("FailedScheduling", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
          "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming "
          "pod."))
NOT_ADVERTISED = objects(
    node("gpu-a", gpus=0), node("gpu-b"), pod("hold-b", 8, "gpu-b", "Running"),
    pod("trainer-0", 1), event("FailedScheduling", INSUFF.replace("0/3", "0/2")
                               .replace("3 ", "2 ")))
TAINTED = objects(
    node("gpu-a", taints=[{"key": "nvidia.com/gpu", "value": "present",
                           "effect": "NoSchedule"}]),
    pod("trainer-0", 1),
    event("FailedScheduling", "0/1 nodes are available: 1 node(s) had untolerated taint "
          "{nvidia.com/gpu: present}. preemption: 0/1 nodes are available: 1 Preemption is "
          "not helpful for scheduling."))
SELECTOR_MISS = objects(
    node("gpu-a"), node("cpu-a", gpus=None, labels={}),
    pod("trainer-0", 1, nodeSelector={"nvidia.com/gpu.product": "Tesla-V100"}),
    event("FailedScheduling", "0/2 nodes are available: 1 node(s) didn't match Pod's node "
          "affinity/selector, 1 Insufficient nvidia.com/gpu."))
CORDONED = objects(
    node("gpu-a", unschedulable=True), pod("trainer-0", 1),
    event("FailedScheduling", "0/1 nodes are available: 1 node(s) were unschedulable."))
KUEUE = objects(event("Pending", "couldn't assign flavors to pod set main: resource cpu "
                      "unavailable in ClusterQueue", about="job-train-7c1f", kind="Workload",
                      source="kueue-admission"))
QUOTA = objects(event("FailedCreate", 'Error creating: pods "train-x7" is forbidden: exceeded '
                      "quota: gpu-quota, requested: requests.nvidia.com/gpu=4, used: "
                      "requests.nvidia.com/gpu=16, limited: requests.nvidia.com/gpu=16",
                      about="train", kind="Job", source="job-controller"))
GANG = objects(event("Unschedulable", "12/8 tasks in gang unschedulable: pod group is not "
                     "ready, 20 minAvailable, 8 Running", about="train-pg", kind="PodGroup",
                     source="volcano"))
DRIFT = objects(
    node("gpu-a", labels={"nvidia.com/cuda.driver-version.full": "550.90.07"}),
    node("gpu-b", labels={"nvidia.com/cuda.driver-version.full": "550.90.07"}),
    node("gpu-c", labels={"nvidia.com/cuda.driver-version.full": "535.183.01"}))
XID31 = objects(node("gpu-a", conditions=[{"type": "XidCriticalError", "status": "True",
                                           "reason": '{"31":true}',
                                           "message": "6e43a052-e544-467b"}]))
XID79 = objects(node("gpu-a", conditions=[{"type": "XidCriticalError", "status": "True",
                                           "reason": '{"79":true}', "message": "x"}]))
MIG_MIXED = objects(node("gpu-a", gpus=2, extra={"nvidia.com/mig-1g.10gb": "6",
                                                 "nvidia.com/mig-2g.20gb": "4"},
                         labels={"nvidia.com/mig.strategy": "mixed"}))
SHORT = objects(node("gpu-a", gpus=8, alloc=6))
HEALTHY = objects(node("gpu-a", labels={"nvidia.com/gpu.count": "8"}), node("gpu-b"))

RULE_CASES = {
    "k8s.gpu-nodes": [
        ({"k8s_objects": NOT_ADVERTISED}, "k8s.gpus-not-advertised"),
        ({"k8s_objects": SHORT}, "k8s.gpus-short"),
        ({"k8s_objects": HEALTHY}, "k8s.gpus-advertised"),
    ],
    "k8s.driver-drift": [({"k8s_objects": DRIFT}, "k8s.driver-drift")],
    "k8s.node-condition": [({"k8s_objects": XID31}, "k8s.node-condition")],
    "k8s.mig-resources": [({"k8s_objects": MIG_MIXED}, "k8s.mig-resources")],
    "k8s.pending": [
        ({"k8s_objects": FRAGMENTED}, "k8s.pending-fragmented"),
        ({"k8s_objects": TAINTED}, "k8s.pending-untolerated-taint"),
        ({"k8s_objects": SELECTOR_MISS}, "k8s.pending-selector-mismatch"),
        ({"k8s_objects": CORDONED}, "k8s.pending-unschedulable-node"),
        ({"k8s_objects": objects(node("gpu-a"), pod("trainer-0", 1),
                                 event("FailedScheduling", INSUFF.replace("0/3", "0/1")
                                       .replace("3 ", "1 ")))},
         "k8s.pending-insufficient-gpu"),
        ({"k8s_objects": objects(node("gpu-a"), node("helper", gpus=None, labels={}),
                                 pod("trainer-0", 1),
                                 event("FailedScheduling", "0/2 nodes are available: 1 node(s)"
                                       " didn't match pod affinity rules, 1 Insufficient "
                                       "nvidia.com/gpu."))},
         "k8s.pending-affinity"),
    ],
    "k8s.admission": [
        ({"k8s_objects": KUEUE}, "k8s.pending-queue"),
        ({"k8s_objects": QUOTA}, "k8s.pending-quota"),
        ({"k8s_objects": GANG}, "k8s.gang-unschedulable"),
    ],
}


def _all(result) -> dict[str, Any]:
    """Finding id -> finding, consequences included."""
    return {f.id: f for f in flat(result.findings)}


# --- the scheduler's message ----------------------------------------------------------

def test_failed_scheduling_message_per_reason():
    m = parse_failed_scheduling(
        "0/6 nodes are available: 3 node(s) didn't match node selector, 6 Insufficient "
        "nvidia.com/gpu.")
    assert (m.available, m.total) == (0, 6)
    assert [(r.count, r.kind) for r in m.reasons] == [(3, SELECTOR), (6, INSUFFICIENT)]
    assert m.gpu_short() == 6 and not m.disjoint() and m.preemption is None
    m = parse_failed_scheduling(
        "0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/"
        "network-unavailable: }, 2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
        "available: 1 Preemption is not helpful for scheduling, 2 No preemption victims "
        "found for incoming pod..")
    assert [r.kind for r in m.reasons] == [TAINT, INSUFFICIENT] and m.disjoint()
    assert m.reasons[0].detail.startswith("node.kubernetes.io/network-unavailable")
    assert m.preemption.startswith("0/3 nodes are available: 1 Preemption")
    m = parse_failed_scheduling("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 "
                                "node(s) were unschedulable.")
    assert [r.kind for r in m.reasons] == [INSUFFICIENT, UNSCHEDULABLE]
    m = parse_failed_scheduling("0/5 nodes are available: 2 node(s) had taint {nvidia.com/gpu:"
                                " present}, that the pod didn't tolerate, 3 Insufficient cpu.")
    assert [(r.kind, r.detail) for r in m.reasons] == [(TAINT, "nvidia.com/gpu: present"),
                                                      (INSUFFICIENT, "cpu")]
    assert m.gpu_short() == 0
    assert parse_failed_scheduling("0/4 nodes are available: 1 node(s) didn't match pod "
                                   "affinity rules, 3 Insufficient nvidia.com/gpu."
                                   ).reasons[0].kind == AFFINITY
    assert parse_failed_scheduling("Successfully assigned ml/x to gpu-a") is None
    assert gang_message("12/8 tasks in gang unschedulable: pod group is not ready, 20 "
                        "minAvailable,\n      8 Running") == (12, 20, 8)


# --- nodes ------------------------------------------------------------------------------

def test_fragmentation_says_what_would_fit():
    f = _all(run(k8s_objects=FRAGMENTED))["k8s.pending-fragmented"]
    assert "gpu-a has 4" in f.explanation and "gpu-b has 4" in f.explanation
    assert "asks 8" in f.explanation and f.blame is Blame.JOB_CONFIG
    assert f.scope.name == "ml/trainer-0"


def test_pending_pod_folds_under_the_node_that_advertises_nothing():
    result = run(k8s_objects=NOT_ADVERTISED)
    top = {f.id: f for f in result.findings}
    cause = top["k8s.gpus-not-advertised"]
    assert "gpu-a" in cause.title and cause.blame is Blame.CONFIG
    assert cause.severity is Severity.CRITICAL and cause.action is Action.FIX_CONFIG
    assert "k8s.pending-insufficient-gpu" not in top
    assert [c.id for c in cause.consequences] == ["k8s.pending-insufficient-gpu"]
    assert "kubectl logs" in cause.explanation  # says which outputs would tell


def test_short_allocatable_is_unhealthy_devices():
    f = _all(run(k8s_objects=SHORT))["k8s.gpus-short"]
    assert "6 of its 8" in f.title and "unhealthy" in f.explanation
    assert f.severity is Severity.WARNING and f.blame is Blame.CONFIG


def test_healthy_nodes_are_one_ok_finding():
    found = _all(run(k8s_objects=HEALTHY))
    assert found["k8s.gpus-advertised"].severity is Severity.OK
    assert not [f for f in found.values() if f.severity.rank >= Severity.WARNING.rank]


def test_driver_drift_names_the_odd_node():
    f = _all(run(k8s_objects=DRIFT))["k8s.driver-drift"]
    assert "535.183.01 on gpu-c" in f.title and f.scope.name == "gpu-c"


def test_xid_condition_blamed_by_the_xid():
    f31 = _all(run(k8s_objects=XID31))["k8s.node-condition"]
    assert f31.blame is Blame.JOB and f31.action is Action.RESTART_JOB
    assert "Xid 31" in f31.title and "clear" in f31.explanation
    f79 = _all(run(k8s_objects=XID79))["k8s.node-condition"]
    assert f79.severity is Severity.CRITICAL and f79.blame is Blame.NODE
    assert "cordon" in f79.explanation


def test_mig_mixed_is_configuration_semantics():
    f = _all(run(k8s_objects=MIG_MIXED))["k8s.mig-resources"]
    assert f.severity is Severity.INFO and "nvidia.com/mig-" in f.explanation
    assert "2 whole GPUs" in f.title


@pytest.mark.parametrize(("text", "fid", "blame"), [
    (TAINTED, "k8s.pending-untolerated-taint", Blame.JOB_CONFIG),
    (SELECTOR_MISS, "k8s.pending-selector-mismatch", Blame.JOB_CONFIG),
    (KUEUE, "k8s.pending-queue", Blame.JOB_CONFIG),
    (QUOTA, "k8s.pending-quota", Blame.JOB_CONFIG),
    (GANG, "k8s.gang-unschedulable", Blame.JOB_CONFIG),
])
def test_pending_causes_are_the_jobs_side(text, fid, blame):
    found = _all(run(k8s_objects=text))
    assert found[fid].blame is blame, found[fid]
    assert found[fid].severity is Severity.WARNING


def test_kueue_names_the_missing_resource_and_the_fix():
    f = _all(run(k8s_objects=KUEUE))["k8s.pending-queue"]
    assert "cpu" in f.title and "coveredResources" in f.explanation


def test_gang_says_partial_start():
    f = _all(run(k8s_objects=GANG))["k8s.gang-unschedulable"]
    assert "20 pods" in f.title and "8 of its pods run" in f.explanation


def test_later_scheduled_event_makes_it_transient():
    text = objects(node("gpu-a"), pod("trainer-0", 1),
                   event("TriggeredScaleUp", "pod triggered scale-up: [{gpu-pool 1->2 (max: 2)}]",
                         typ="Normal", source="cluster-autoscaler", at="10:00:00"),
                   event("FailedScheduling", INSUFF, at="10:00:01"),
                   event("Scheduled", "Successfully assigned ml/trainer-0 to gpu-b",
                         typ="Normal", at="10:03:00"))
    f = _all(run(k8s_objects=text))["k8s.pending-insufficient-gpu"]
    assert f.severity is Severity.INFO and f.action is Action.NONE
    assert "transient" in f.title and "TriggeredScaleUp" in f.explanation


# --- the corpus's pastes (MANIFEST.tsv's expected diagnosis) ---------------------------

# sample -> (finding id, severity, blame, words its title or explanation must hold)
CORPUS = {
    "aks-spot-gpu-describe-pod": ("k8s.pending-insufficient-gpu", Severity.INFO,
                                  Blame.JOB_CONFIG, ("transient", "TriggeredScaleUp")),
    "allocatable-gpu-and-mig-mixed-rke2": ("k8s.mig-resources", Severity.INFO,
                                           Blame.JOB_CONFIG, ("nvidia.com/mig-", "mixed")),
    "cluster-gpu-table-half-nodes-zero": ("k8s.gpus-not-advertised", Severity.CRITICAL,
                                          Blame.CONFIG, ("5 of 9", "Not kubectl")),
    "describe-node-alpha-nvidia-gpu-taint": ("k8s.gpus-not-advertised", Severity.CRITICAL,
                                             Blame.CONFIG, ("alpha.kubernetes.io", "toleration")),
    "describe-node-gke-no-gpu-capacity": ("k8s.gpus-not-advertised", Severity.WARNING,
                                          Blame.CONFIG, ("nvidia-driver-installer",)),
    "describe-node-no-gpu-capacity-docker": ("k8s.gpus-not-advertised", Severity.WARNING,
                                             Blame.CONFIG, ("default-runtime",)),
    "devplugin283-openshift": ("k8s.pending-selector-mismatch", Severity.WARNING,
                               Blame.JOB_CONFIG, ("node0-066an8.ocx.oqg offers 2",)),
    "devplugin430-describe-pod-pending": ("k8s.pending-insufficient-gpu", Severity.WARNING,
                                          Blame.UNKNOWN, ("Allocatable", "plugin")),
    "failedscheduling-insufficient-gpu-unschedulable": (
        "k8s.pending-insufficient-gpu", Severity.WARNING, Blame.UNKNOWN,
        ("cordoned", "does not advertise")),
    "failedscheduling-pod-affinity": ("k8s.pending-affinity", Severity.WARNING,
                                      Blame.JOB_CONFIG, ("pod affinity", "healthy")),
    "gfd-mig-mixed-labels-a100": ("k8s.mig-resources", Severity.INFO, Blame.UNKNOWN,
                                  ("3g.21gb", "cosmetic")),
    "gke-node-condition-xidcriticalerror-31": ("k8s.node-condition", Severity.WARNING,
                                               Blame.JOB, ("Xid 31", "clear")),
    "hami314-describe-node": ("k8s.gpus-not-advertised", Severity.WARNING, Blame.CONFIG,
                              ("Requesting",)),
    "kueue-pending-resource-unavailable": ("k8s.pending-queue", Severity.WARNING,
                                           Blame.JOB_CONFIG, ("cpu and memory",
                                                              "coveredResources")),
    "lambda-kubeai-doc-gfd-node-labels": ("k8s.gpus-advertised", Severity.OK, Blame.UNKNOWN,
                                          ("gpu.count 2",)),
    "volcano-gang-notenoughresources": ("k8s.gang-unschedulable", Severity.WARNING,
                                        Blame.JOB_CONFIG, ("20 pods", "8 of its pods")),
    "openshift-devplugin-0.13.0": ("k8s.gpus-advertised", Severity.OK, Blame.UNKNOWN,
                                   ("nvidia.com/gpu 1",)),
}


@pytest.mark.parametrize("part", sorted(CORPUS))
def test_corpus_sample_is_judged_as_its_manifest_says(corpus, part):
    from gputriage.engine.analysis import analyze
    from gputriage.ingest import load_input

    fid, severity, blame, words = CORPUS[part]
    result = analyze(load_input(str(corpus.sample(part).path)))
    found = _all(result)
    assert fid in found, sorted(found)
    f = found[fid]
    assert (f.severity, f.blame) == (severity, blame), f
    text = f"{f.title} {f.explanation}"
    assert all(w in text for w in words), text
    # no GPU fault is blamed on a node in these pastes
    assert not [g.id for g in found.values() if g.blame is Blame.NODE]


def test_pod_asking_a_name_no_node_advertises():
    text = objects(node("gpu-a", gpus=0, extra={"nvidia.com/mig-3g.40gb": "2"},
                        labels={"nvidia.com/mig.strategy": "mixed"}),
                   pod("trainer-0", 1, resource="nvidia.com/gpu.shared"),
                   event("FailedScheduling", "0/1 nodes are available: 1 Insufficient "
                         "nvidia.com/gpu.shared."))
    f = _all(run(k8s_objects=text))["k8s.pending-insufficient-gpu"]
    assert "nvidia.com/gpu.shared" in f.title and "nvidia.com/mig-3g.40gb" in f.title
    assert f.blame is Blame.JOB_CONFIG and "mixed MIG strategy" in f.explanation


def test_node_snapshot_with_the_cluster_counts_the_gpus_on_its_bus():
    """A node result given with the cluster: its PCI bus says how many GPUs it has."""
    from hostkit import pci_tree

    buses = [f"0000:{b:02x}:00.0" for b in (0x18, 0x2a, 0x3a, 0x5d)]
    text = objects(node("testhost", gpus=None, labels={}))  # no GPU label, no resource
    found = _all(run(k8s_objects=text, pci_devices=pci_tree(dict.fromkeys(buses, "nvidia"))))
    f = found["k8s.gpus-not-advertised"]
    assert f.severity is Severity.CRITICAL and "4 GPUs on its PCI bus" in f.explanation
