"""The MIG manager and nvidia-mig-parted (parsers/gpu_operator_log.py, rules/k8s_mig.py),
the mig.config.state label, and a node's labels or resources pasted as a bare JSON map
(``jq .metadata.labels``, ``jq .status.capacity``: ingest/detect_k8s.py)."""

from __future__ import annotations

import json

import pytest
from golden import by_id
from hostkit import run

from gputriage.ingest.detect import detect
from gputriage.model import Blame, Severity
from gputriage.parsers.gpu_operator_log import parse_gpu_operator_log
from gputriage.parsers.k8s_objects import parse_k8s_objects

APPLIED = """\
Applying the selected MIG config to the node
time="2024-05-15T13:40:08Z" level=debug msg="Parsing config file..."
time="2024-05-15T13:40:08Z" level=debug msg="Walking MigConfig for (devices=all)"
time="2024-05-15T13:40:08Z" level=debug msg="  GPU 0: 0x233010DE"
time="2024-05-15T13:40:08Z" level=debug msg="    Current MIG mode: Enabled"
time="2024-05-15T13:40:09Z" level=debug msg="Running apply-exit hook"
MIG configuration applied successfully
Changing the 'nvidia.com/mig.config.state' node label to 'success'
"""
UNKNOWN = """\
MIG configuration applied successfully
WARNING: unable to get device name: [failed to find device with id '2bb5']
WARNING: unable to get device name: [failed to find device with id '2bb5']
"""
FAILED = """\
time="2024-12-31T06:44:08Z" level=debug msg="    Asserting MIG mode: Enabled"
time="2024-12-31T06:44:09Z" level=error msg="Error applying MIG configuration with hooks: \
error setting MIGConfig: error attempting multiple config orderings: all orderings failed"
Changing the 'nvidia.com/mig.config.state' node label to 'failed'
"""
LABELS = {"kubernetes.io/hostname": "gpu-17", "nvidia.com/gpu.count": "2",
          "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.config": "all-1g.5gb",
          "nvidia.com/mig.config.state": "{state}", "nvidia.com/mig.strategy": "single"}

RULE_CASES = {
    "k8s.mig-manager": [
        ({"gpu_operator_log": UNKNOWN}, "k8s.mig-unknown-device"),
        ({"gpu_operator_log": FAILED}, "k8s.mig-config-failed"),
        ({"gpu_operator_log": APPLIED}, "k8s.mig-config-applied"),
    ],
}


@pytest.mark.parametrize("prefix", ["", "[pod/nvidia-mig-manager-x7/nvidia-mig-manager] ",
                                    "2024-05-15T13:40:09.1Z stdout F "])
def test_mig_manager_lines_in_any_frame(prefix):
    text = "".join(prefix + ln + "\n" for ln in APPLIED.splitlines())
    assert "gpu_operator_log" in dict(detect(text))
    log = parse_gpu_operator_log(text)
    assert [e.event for e in log.of("mig")][-2:] == ["mig-applied", "mig-state"]
    assert any(e.detail == "Enabled" for e in log.having("mig-mode"))
    f = by_id(run(gpu_operator_log=text))["k8s.mig-config-applied"]
    assert f.severity is Severity.OK


def test_an_unknown_device_makes_the_success_line_a_lie():
    found = by_id(run(gpu_operator_log=UNKNOWN))
    f = found["k8s.mig-unknown-device"]
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.CONFIG)
    assert "2bb5" in f.title and "k8s.mig-config-applied" not in found
    assert not any(fid.startswith(("xid.", "gpu.")) for fid in found)


def test_a_failed_apply_from_the_log_or_the_label():
    assert "k8s.mig-config-failed" in by_id(run(gpu_operator_log=FAILED))
    labels = {k: v.format(state="failed") for k, v in LABELS.items()}
    f = by_id(run(k8s_objects=json.dumps(labels)))["k8s.mig-config-failed"]
    assert "all-1g.5gb" in f.title and "gpu-17" in f.title
    assert f.blame is Blame.CONFIG and f.severity is Severity.WARNING


def test_show_labels_column_is_read():
    text = ("NAME      STATUS   ROLES    AGE   VERSION   LABELS\n"
            "gpu-a-3   Ready    <none>   41d   v1.29.4   kubernetes.io/hostname=gpu-a-3,"
            "nvidia.com/gpu.count=8,nvidia.com/mig.config=all-disabled,"
            "nvidia.com/mig.config.state=failed\n")
    f = by_id(run(k8s_table=text))["k8s.mig-config-failed"]
    assert "gpu-a-3" in f.title and "all-disabled" in f.title


def test_a_bare_label_map_is_a_node_named_by_its_hostname():
    text = json.dumps({**{k: v.format(state="success") for k, v in LABELS.items()},
                       "feature.node.kubernetes.io/pci-10de.present": "true"}, indent=2)
    assert "k8s_objects" in dict(detect("$ kubectl get node gpu-17 -o json | jq "
                                         ".metadata.labels\n" + text))
    cluster = parse_k8s_objects(text)
    node = cluster.nodes["gpu-17"]
    assert node.labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert "k8s.mig-config-applied" in by_id(run(k8s_objects=text))


def test_a_bare_resource_map_is_a_nodes_capacity():
    text = json.dumps({"cpu": "96", "memory": "1056440Mi", "nvidia.com/gpu": "8",
                       "pods": "110"})
    assert "k8s_objects" in dict(detect(text))
    node = next(iter(parse_k8s_objects(text).nodes.values()))
    assert node.gpus("capacity") == {"nvidia.com/gpu": 8.0}


@pytest.mark.parametrize("text", [
    json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}),
    json.dumps({"name": "x", "version": "1.2", "labels": "none"}),
    json.dumps({"gpu_name": "A100", "count": 8}),
])
def test_other_json_maps_are_not_nodes(text):
    assert "k8s_objects" not in dict(detect(text))
