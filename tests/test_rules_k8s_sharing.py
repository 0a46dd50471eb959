"""The device plugin's sharing and MIG configuration (rules/k8s_sharing.py): a
time-slicing ConfigMap shaped as the GPU operator's docs show it, the workloads and pods
that ask against it, and a mixed MIG strategy that GFD's labels contradict."""

from __future__ import annotations

import pytest
from hostkit import run

from gputriage.model import Action, Blame, Severity

TIME_SLICING = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: time-slicing-config
  namespace: gpu-operator
data:
  any: |-
    version: v1
    flags:
      migStrategy: none
    sharing:
      timeSlicing:
        renameByDefault: {rename}
        failRequestsGreaterThanOne: {fail}
        resources:
        - name: nvidia.com/gpu
          replicas: 4
"""

DEPLOYMENT = """\
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: embedder
  namespace: inference
spec:
  replicas: 3
  selector:
    matchLabels: {{app: embedder}}
  template:
    metadata:
      labels: {{app: embedder}}
    spec:
      containers:
      - name: server
        image: registry.example.com/embedder:1.4
        resources:
          limits:
            {resource}: {count}
"""

PENDING_POD = """\
---
apiVersion: v1
kind: Pod
metadata:
  name: notebook-7f9c
  namespace: research
spec:
  containers:
  - name: jupyter
    image: jupyter/pytorch-notebook:2024-05
    resources:
      limits:
        nvidia.com/gpu: 1
status:
  phase: Pending
"""

NODE = """\
---
apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels:
    nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB
    nvidia.com/mig.capable: "true"
    nvidia.com/mig.strategy: {strategy}
status:
  capacity: {{nvidia.com/gpu: "{gpus}"}}
  allocatable: {{nvidia.com/gpu: "{gpus}"}}
"""

MIG_CONFIG = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: nvidia-device-plugin-configs
  namespace: nvidia-device-plugin
data:
  mig-mixed: |-
    version: v1
    flags:
      migStrategy: mixed
      failOnInitError: true
"""


def _ts(rename: bool = False, fail: bool = False) -> str:
    return TIME_SLICING.format(rename=str(rename).lower(), fail=str(fail).lower())


def _deploy(resource: str = "nvidia.com/gpu", count: int = 2) -> str:
    return DEPLOYMENT.format(resource=resource, count=count)


MULTI = _ts() + _deploy()
RENAMED = _ts(rename=True) + PENDING_POD
MIG_MISMATCH = MIG_CONFIG + NODE.format(name="gpu-a100-01", strategy="single", gpus=7) \
    + NODE.format(name="gpu-a100-02", strategy="single", gpus=7)

# a node that still advertises its 8 GPUs once under a 4-replica config
NOT_APPLIED = _ts() + NODE.format(name="gpu-a100-03", strategy="none", gpus=6)

RULE_CASES = {
    "k8s.sharing-time-sliced": [({"k8s_objects": _ts()}, "k8s.sharing-time-sliced")],
    "k8s.sharing-requests": [({"k8s_objects": MULTI}, "k8s.sharing-multi-replica"),
                             ({"k8s_objects": RENAMED}, "k8s.sharing-renamed")],
    "k8s.mig-strategy-config": [({"k8s_objects": MIG_MISMATCH}, "k8s.mig-strategy-config")],
    "k8s.sharing-not-applied": [({"k8s_objects": NOT_APPLIED}, "k8s.sharing-not-applied")],
}


def _ids(text: str) -> list[str]:
    return [f.id for f in run(k8s_objects=text).findings]


def _one(text: str, fid: str):
    found = [f for f in run(k8s_objects=text).findings if f.id == fid]
    assert len(found) == 1, [f.id for f in run(k8s_objects=text).findings]
    return found[0]


def test_time_slicing_is_information_quoting_the_configmap():
    f = _one(_ts(), "k8s.sharing-time-sliced")
    assert (f.severity, f.action, f.blame) == (Severity.INFO, Action.NONE, Blame.CONFIG)
    assert f.scope.kind == "configmap" and f.scope.name == "gpu-operator/time-slicing-config"
    lines = f.evidence[0].lines
    assert "ConfigMap/gpu-operator/time-slicing-config data[any] " \
           "sharing.timeSlicing.resources[0].replicas: 4" in lines
    assert "nvidia.com/gpu x4" in f.title and "memory" in f.explanation


def test_multi_replica_names_the_workload_and_the_path():
    f = _one(MULTI, "k8s.sharing-multi-replica")
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.JOB_CONFIG,
                                               Action.FIX_CONFIG)
    assert f.title.startswith("Deployment/inference/embedder: asks for 2 nvidia.com/gpu")
    text = "\n".join(f.evidence[0].lines)
    assert "spec.template.spec.containers[0].resources.limits: nvidia.com/gpu: 2" in text
    assert "failRequestsGreaterThanOne: false" in text
    assert "refuses" not in f.explanation
    refused = _one(_ts(fail=True) + _deploy(), "k8s.sharing-multi-replica")
    assert "maximum request size for shared resources is 1" in refused.explanation


def test_renamed_resource_names_the_waiting_pod():
    f = _one(RENAMED, "k8s.sharing-renamed")
    assert f.title == ("Pod/research/notebook-7f9c: asks for nvidia.com/gpu, which the "
                       "sharing config advertises as nvidia.com/gpu.shared")
    assert f.blame is Blame.JOB_CONFIG and f.scope.kind == "pod"
    assert any("renameByDefault: true" in ln for ln in f.evidence[0].lines)


def test_mixed_strategy_against_single_labels():
    f = _one(MIG_MISMATCH, "k8s.mig-strategy-config")
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)
    assert "gpu-a100-01, gpu-a100-02" in f.title and "mig.strategy=single" in f.title
    assert "ConfigMap/nvidia-device-plugin/nvidia-device-plugin-configs data[mig-mixed] " \
           "flags.migStrategy: mixed" in f.evidence[0].lines


@pytest.mark.parametrize("text", [
    # the shared name asked once, the plain name where the config does not rename it
    _ts() + _deploy(count=1),
    _ts(rename=True) + _deploy("nvidia.com/gpu.shared", 1),
    _ts() + PENDING_POD,
    # GFD agrees with the plugin
    MIG_CONFIG + NODE.format(name="gpu-a100-01", strategy="mixed", gpus=0),
    # a node without the label says nothing
    MIG_CONFIG.replace("mixed", "single"),
])
def test_well_formed_gives_no_sharing_warning(text):
    ids = _ids(text)
    assert not {"k8s.sharing-multi-replica", "k8s.sharing-renamed",
                "k8s.mig-strategy-config"} & set(ids), ids


def test_renamed_but_plain_name_offered_elsewhere_is_quiet():
    text = RENAMED + NODE.format(name="gpu-plain", strategy="none", gpus=8)
    assert "k8s.sharing-renamed" not in _ids(text)


def test_shared_lint_is_not_repeated():
    """More than one nvidia.com/gpu.shared is the lint's finding, said once."""
    ids = _ids(_ts(rename=True) + _deploy("nvidia.com/gpu.shared", 2))
    assert "k8s.lint-gpu-requests" in ids and "k8s.sharing-multi-replica" not in ids


@pytest.mark.parametrize("data", [
    "version: v1\nsharing: [unclosed",  # bad YAML
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
    "      replicas: 1\n",  # one replica: not shared
    "version: v2\nsharing:\n  timeSlicing:\n    resources:\n    - {name: x, replicas: 4}\n",
    "server { listen 80; }  # version flags sharing",  # some other config
    "version: v1\nsharing:\n  timeSlicing:\n    resources: 4\n",  # wrong shapes
])
def test_other_or_broken_data_gives_nothing(data):
    body = "\n".join("    " + ln for ln in data.splitlines())
    text = ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: n}\n"
            f"data:\n  cfg: |-\n{body}\n")
    ids = _ids(text)
    assert not [i for i in ids if i.startswith(("k8s.sharing", "k8s.mig-strategy"))], ids


def test_mps_with_rename_per_resource():
    text = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: mps-config, namespace: gpu-operator}
data:
  h100: |-
    version: v1
    sharing:
      mps:
        resources:
        - name: nvidia.com/gpu
          rename: gpu-mps
          replicas: 10
""" + PENDING_POD
    ids = _ids(text)
    assert "k8s.sharing-time-sliced" in ids and "k8s.sharing-renamed" in ids
    f = _one(text, "k8s.sharing-renamed")
    assert "nvidia.com/gpu-mps" in f.title
