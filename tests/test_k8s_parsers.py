"""Pasted Kubernetes text into the cluster model: ``kubectl describe`` (parsers/
k8s_describe.py), ``kubectl get`` tables (parsers/k8s_table.py), API objects and the
fragments of them people paste (parsers/k8s_objects.py, k8s_fragments.py), and the paste
detectors that find them (ingest/detect_k8s.py), on the real captures of corpus
category 9."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from golden import run_analyze

from gputriage.errors import ParseError
from gputriage.ingest.detect import detect
from gputriage.parsers.k8s_describe import parse_k8s_describe
from gputriage.parsers.k8s_model import GPU, Cluster, Taint
from gputriage.parsers.k8s_objects import parse_k8s_objects
from gputriage.parsers.k8s_table import parse_k8s_table

FIXTURES = Path(__file__).parent / "fixtures" / "k8s"

SOURCE_SAMPLES = {
    "k8s_describe": ("corpus:aks-spot-gpu-describe-pod", "corpus:devplugin430-describe-pod",
                     "corpus:hami314-describe-node", "corpus:describe-node-no-gpu-capacity",
                     "corpus:gfd-mig-mixed-labels-a100", "corpus:lambda-kubeai-doc-gfd",
                     "corpus:kueue-pending-resource", "fixture:k8s/A-describe-node-full.txt"),
    "k8s_table": ("corpus:cluster-gpu-table-half-nodes", "corpus:gpu-operator-ds-driver",
                  "corpus:openshift-cuda-validator-init-error",
                  "corpus:gpu-operator-driver-upgrade-node-events",
                  "fixture:k8s/A-get-tables.txt"),
    "k8s_objects": ("corpus:volcano-gang-notenoughresources",
                    "corpus:failedscheduling-insufficient-gpu-unschedulable",
                    "fixture:k8s/A-get-nodes-gfd.yaml"),
}


def _read(text: str, source: str) -> Cluster:
    """What a paste gives the source (through the detectors, as ``analyze`` reads it)."""
    found = dict(detect(text))
    assert source in found, sorted(found)
    parse = {"k8s_describe": parse_k8s_describe, "k8s_table": parse_k8s_table,
             "k8s_objects": parse_k8s_objects}[source]
    return parse(found[source])


# --- describe --------------------------------------------------------------------------------
def test_describe_pod_pending_with_events_and_tolerations(corpus):
    c = _read(corpus.sample("aks-spot-gpu-describe-pod").text(), "k8s_describe")
    (pod,) = c.pods
    assert (pod.name, pod.namespace, pod.phase, pod.priority) == ("vllm-1", "llm", "Pending", 0)
    assert pod.node == "aks-gpunp-98036146-vmss000004" and pod.owner == "StatefulSet/vllm"
    assert pod.gpu_requests() == {GPU: 1.0}
    (ctr,) = pod.containers
    assert (ctr.state, ctr.reason, ctr.restarts, ctr.ready) == ("waiting", "ContainerCreating",
                                                                0, False)
    gpu_tol = [t for t in pod.tolerations or [] if t.key == GPU]
    assert gpu_tol and gpu_tol[0].operator == "Exists"
    assert gpu_tol[0].tolerates(Taint(GPU, "present", "NoSchedule"))
    assert pod.conditions["PodScheduled"][0] == "True" and pod.node_selector == {}
    failed = [e for e in c.events if e.reason == "FailedScheduling"]
    assert [e.count for e in failed] == [2, None]
    assert failed[0].about == "Pod/llm/vllm-1" and failed[0].source == "default-scheduler"
    assert failed[1].message.startswith("0/3 nodes are available: 1 node(s) had untolerated "
                                        "taint {node.kubernetes.io/network-unavailable: }")
    assert failed[1].message.endswith("No preemption victims found for incoming pod..")
    assert failed[0].line.startswith("Warning  FailedScheduling")


def test_describe_pod_environment_and_no_events(corpus):
    c = _read(corpus.sample("devplugin430-describe-pod").text(), "k8s_describe")
    (pod,) = c.pods
    assert pod.node is None and pod.conditions == {"PodScheduled": ("False", "", "")}
    assert pod.containers[0].env == {"DP_DISABLE_HEALTHCHECKS": "xids"}
    assert pod.containers[0].limits == {GPU: "1"} and not c.events


def test_describe_node_in_full():
    c = parse_k8s_describe((FIXTURES / "A-describe-node-full.txt").read_text())
    node = c.nodes["gpu-node-3"]
    assert node.gpus("capacity") == {GPU: 4} and node.gpus() == {GPU: 3}
    assert node.taints == [Taint(GPU, "present", "NoSchedule"),
                           Taint("node.kubernetes.io/unschedulable", None, "NoSchedule")]
    assert node.unschedulable is True and node.ready is True
    assert node.conditions["XidCriticalError"] == ("True", "Xid79", "GPU has fallen off the bus")
    assert node.allocated is not None and node.allocated[GPU] == ("2", "2")
    assert node.gpu_label_count == 4 and node.kubelet_version == "v1.30.2"
    assert node.runtime_version == "containerd://1.7.18" and node.kernel == "6.5.0-41-generic"
    assert {p.name for p in c.pods if p.node == "gpu-node-3"} == {
        "nvidia-device-plugin-daemonset-7xk2p", "kube-proxy-9wz7d", "train-llama-0"}
    xid = [e for e in c.events if e.reason == "XidCriticalError"]
    assert xid[0].count == 3 and xid[0].about == "Node/gpu-node-3"


def test_describe_node_header_keeps_annotations(corpus):
    c = _read(corpus.sample("hami314-describe-node").text(), "k8s_describe")
    node = c.nodes["416a100"]
    assert node.labels["gpu"] == "on" and node.capacity is None and node.taints is None
    assert node.annotations["hami.io/node-nvidia-register"].startswith("GPU-b7c4eb59")


@pytest.mark.parametrize(("part", "capacity", "allocatable"), [
    ("devplugin-2020-legacy-log", {GPU: 8}, {GPU: 8}),
    ("describe-node-no-gpu-capacity", {}, {}),
    ("describe-node-gke-no-gpu-capacity", {}, {}),
    ("allocatable-gpu-and-mig-mixed-rke2", None,
     {GPU: 2, "nvidia.com/mig-1g.10gb": 6, "nvidia.com/mig-2g.20gb": 4,
      "nvidia.com/mig-3g.40gb": 0}),
    ("devplugin283-openshift", {GPU: 2}, {GPU: 2}),
    ("openshift-devplugin-0.13.0", {GPU: 1}, {GPU: 1}),
    ("gfd-mig-mixed-labels-a100", {"nvidia.com/mig-3g.20gb": 16},
     {"nvidia.com/mig-3g.20gb": 16}),
])
def test_capacity_excerpts_give_a_node(corpus, part, capacity, allocatable):
    (node,) = _read(corpus.sample(part).text(), "k8s_describe").nodes.values()
    assert node.gpus("capacity") == capacity and node.gpus() == allocatable


def test_excerpt_named_by_its_prompt_and_grep_rows(corpus):
    c = _read(corpus.sample("gfd-mig-mixed-labels-a100").text(), "k8s_describe")
    node = c.nodes["a100-node6"]
    assert node.labels["nvidia.com/mig.strategy"] == "mixed"
    assert node.labels["nvidia.com/mig-3g.21gb.count"] == "16"
    assert node.allocated == {"nvidia.com/mig-3g.20gb": ("0", "0")}
    alpha = _read(corpus.sample("describe-node-alpha-nvidia").text(), "k8s_describe")
    assert alpha.nodes["?"].capacity == {
        "alpha.kubernetes.io/nvidia-gpu": "1", "cpu": "4", "ephemeral-storage": "130046416Ki",
        "hugepages-1Gi": "0", "hugepages-2Mi": "0", "memory": "62879988Ki", "pods": "110"}


def test_gfd_labels_grepped_out_of_describe(corpus):
    (node,) = _read(corpus.sample("lambda-kubeai-doc-gfd").text(), "k8s_describe").nodes.values()
    assert node.gpu_label_count == 2
    assert node.labels["nvidia.com/cuda.driver-version.full"] == "550.90.07"
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node.annotations == {"nvidia.com/gpu-driver-upgrade-enabled": "true"}


def test_condition_row_and_yaml_fragment_are_one_node(corpus):
    text = corpus.sample("gke-node-condition-xidcriticalerror-31").text()
    found = dict(detect(text))
    described = parse_k8s_describe(found["k8s_describe"])
    node = described.nodes["gke-weitong-cluster-p100-22d24db3-kd6j"]
    assert node.conditions["XidCriticalError"][:2] == ("True", '{"31":true}')
    fragment = parse_k8s_objects(found["k8s_objects"])
    described.merge(fragment)
    assert list(described.nodes) == ["gke-weitong-cluster-p100-22d24db3-kd6j"]
    assert fragment.nodes["?"].taints is None


@pytest.mark.parametrize(("part", "reasons", "counts"), [
    ("kueue-pending-resource", ["Pending", "Pending"], [3, None]),
    ("failedscheduling-insufficient-gpu-unschedulable", ["FailedScheduling"], [2]),
    ("devplugin283-openshift", ["FailedScheduling"], [5]),
    ("failedscheduling-pod-affinity", ["FailedScheduling"], [None]),
])
def test_events_with_their_counts(corpus, part, reasons, counts):
    c = _read(corpus.sample(part).text(), "k8s_describe")
    assert [e.reason for e in c.events] == reasons and [e.count for e in c.events] == counts
    assert all(e.type == "Warning" and e.line for e in c.events)


# --- tables ----------------------------------------------------------------------------------
def test_gpu_per_node_table(corpus):
    c = _read(corpus.sample("cluster-gpu-table-half-nodes").text(), "k8s_table")
    assert len(c.nodes) == 9
    zero = sorted(n.name[-1] for n in c.nodes.values() if n.gpus() == {GPU: 0})
    assert zero == ["3", "5", "7", "8", "9"]
    assert c.nodes["kubernetes-node-geforce-2080-6"].allocated == {GPU: ("1", "1")}


def test_daemonset_table(corpus):
    c = _read(corpus.sample("gpu-operator-ds-driver").text(), "k8s_table")
    ds = {d.name: d for d in c.daemonsets}
    assert len(ds) == 7
    driver = ds["nvidia-driver-daemonset"]
    assert (driver.desired, driver.current, driver.ready, driver.available) == (1, 1, 0, 0)
    assert driver.node_selector == {"nvidia.com/gpu.deploy.driver": "true"}
    assert ds["gpu-operator-v23-1696394609-node-feature-discovery-worker"].node_selector == {}


def test_pod_tables_with_and_without_header(corpus):
    c = _read(corpus.sample("openshift-cuda-validator-init-error").text(), "k8s_table")
    pods = {p.name: p for p in c.pods}
    assert len(pods) == 10
    assert (pods["nvidia-operator-validator-99l6b"].status,
            pods["nvidia-operator-validator-99l6b"].restarts) == ("Init:2/4", 41)
    assert pods["nvidia-cuda-validator-wgs28"].status == "Init:Error"
    bare = _read(corpus.sample("gpu-operator-driver-could-not-resolve").text(), "k8s_table")
    crash = [p.name for p in bare.pods if p.status == "CrashLoopBackOff"]
    assert crash == ["nvidia-dcgm-exporter-4f8fz", "nvidia-device-plugin-daemonset-42pzg"]


def test_events_table_and_wide_tables(corpus):
    c = _read(corpus.sample("gpu-operator-driver-upgrade-node-events").text(), "k8s_table")
    assert [e.about for e in c.events] == ["Node/ipp1-2890"] * 4
    assert c.events[-1].message.endswith("pod-deletion-required")
    t = parse_k8s_table((FIXTURES / "A-get-tables.txt").read_text())
    assert t.nodes["gpu-node-3"].unschedulable is True
    assert t.nodes["cpu-node-1"].kubelet_version == "v1.30.2"
    pods = {p.name: p for p in t.pods}
    assert pods["nvidia-device-plugin-daemonset-7xk2p"].node == "gpu-node-3"
    assert pods["nvidia-device-plugin-daemonset-7xk2p"].restarts == 12
    assert pods["train-llama-1"].phase == "Pending" and pods["train-llama-1"].node is None
    (event,) = t.events
    assert event.about == "Pod/train-llama-1" and event.age == "3m12s"


# --- objects and fragments -------------------------------------------------------------------
def test_get_nodes_yaml_with_gfd_labels():
    c = _read((FIXTURES / "A-get-nodes-gfd.yaml").read_text(), "k8s_objects")
    one, two = c.nodes["gpu-node-1"], c.nodes["gpu-node-2"]
    assert one.gpu_label_count == 8 and one.gpus() == {GPU: 8}
    assert two.gpus("capacity") == {GPU: 8} and two.gpus() == {GPU: 6}
    assert two.unschedulable is True and two.taints == [Taint(GPU, "present", "NoSchedule")]
    drivers = {n.labels["nvidia.com/cuda.driver-version.full"] for n in c.gpu_nodes()}
    assert drivers == {"550.90.07", "535.183.01"}


def test_manifest_in_prose_and_json_in_fences(corpus):
    c = _read(corpus.sample("failedscheduling-insufficient-gpu-unschedulable").text(),
              "k8s_objects")
    (pod,) = c.pods
    assert pod.node_selector == {"accelerator": "gtx-1050"} and pod.gpu_requests() == {GPU: 1}
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: "2"}}}]}}
    text = "my pod:\n```\n" + json.dumps(doc, indent=2) + "\n```\nwhy pending?\n"
    assert _read(text, "k8s_objects").pods[0].gpu_requests() == {GPU: 2}


def test_volcano_fragments_are_a_podgroup_and_a_job(corpus):
    c = _read(corpus.sample("volcano-gang-notenoughresources").text(), "k8s_objects")
    (group,) = c.of_kind("PodGroup")
    status = group.raw["status"]
    assert status["running"] == 8 and status["conditions"][0]["reason"] == "NotEnoughResources"
    assert "20 minAvailable" in status["conditions"][0]["message"]
    (job,) = c.of_kind("Job")
    assert job.api_version == "batch.volcano.sh/v1alpha1"
    assert job.raw["spec"]["minAvailable"] == 20 and job.raw["spec"]["queue"] == "default"
    assert group.lines[0] == "conditions:"


def test_fragment_of_unknown_shape_keeps_its_mapping():
    c = parse_k8s_objects("spec:\n  nodeSelector:\n    pool: a\n  restartPolicy: Never\n")
    (obj,) = c.objects
    assert obj.kind == "Fragment" and obj.raw["spec"]["restartPolicy"] == "Never"


# --- malformed input -------------------------------------------------------------------------
BAD = ["\x00\x01\x02garbage\x7f" * 50, "", "Name:\n", "NAME  READY  STATUS\n",
       '{"apiVersion": "v1", "kind": "NodeList", "items": [{"metadata": ']


@pytest.mark.parametrize("text", BAD)
@pytest.mark.parametrize("parse", [parse_k8s_describe, parse_k8s_table, parse_k8s_objects])
def test_malformed_is_a_clean_parse_error(parse, text):
    with pytest.raises(ParseError):
        parse(text)


def test_cut_short_gives_what_was_read():
    pod = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n"
           "  - name: a\n    resources: {limits: {nvidia.com/gpu: 1")
    assert [p.name for p in parse_k8s_objects(pod).pods] == ["x"]
    table = ("NAME    READY   STATUS    RESTARTS   AGE\nfoo-1   1/1     Running   0          3d\n"
             "foo-2   0/1     CrashLoo")
    assert [p.name for p in parse_k8s_table(table).pods] == ["foo-1"]
    events = "Events:\n  Type     Reason  Age  From     Message\n  Warning  Failed"
    with pytest.raises(ParseError):
        parse_k8s_describe(events)


def test_other_outputs_are_not_claimed(corpus):
    for part in ("thamada-8x-h100-sxm-565.57.01", "nolebase-h100-xid79-fallen-off-bus",
                 "containerd-config-toml-nvidia-runtime"):
        found = dict(detect(corpus.sample(part).text()))
        assert not {"k8s_describe", "k8s_table", "k8s_objects"} & set(found), (part, found)


# --- every sample of category 9 is read -------------------------------------------------------
def test_every_kubernetes_sample_is_read(corpus):
    for sample in corpus.category("9"):
        code, _, err = run_analyze(sample.path)
        assert code != 66 and "input error" not in err, (sample.name, err)
