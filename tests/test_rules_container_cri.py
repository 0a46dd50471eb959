"""The running containerd (``crictl info``) against the containerd config read: the
nvidia runtime's BinaryName or SystemdCgroup differ -> the edit never applied; k3s,
RKE2 and the GPU operator's toolkit each name where the change belongs."""

from __future__ import annotations

import json
from pathlib import Path

from hostkit import run

from gputriage.model import Action, Blame, Severity
from gputriage.parsers.container_cfg import dumps_tree
from gputriage.rules.container_cri import TEMPLATES

FIXTURE = Path(__file__).parent / "fixtures" / "container" / "crictl-info-k3s.json"
EDITED = """\
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
  SystemdCgroup = false
"""
RUNNING = """\
  "config": {
    ...
      "runtimes": {
        "nvidia": {
          "runtimeType": "io.containerd.runc.v2",
          "options": {
            "BinaryName": "/usr/bin/nvidia-container-runtime",
            "SystemdCgroup": true
          },
        },
"""


def _cfg(text: str = EDITED, path: str = "etc/containerd/config.toml") -> str:
    return dumps_tree({path: text})


RULE_CASES = {
    "container.cri-running": [
        ({"crictl_info": RUNNING, "containerd_config": _cfg()},
         "container.cri-config-not-loaded"),
    ],
}


def _found(**sources):
    return {f.id: f for f in run(**sources).findings}


def test_systemdcgroup_differs_restart_and_check_the_config_flag():
    f = _found(crictl_info=RUNNING, containerd_config=_cfg())["container.cri-config-not-loaded"]
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.CONFIG,
                                               Action.FIX_CONFIG)
    assert "SystemdCgroup true (the file: false)" in f.explanation
    assert "BinaryName" not in f.explanation.split(".")[0]  # the binaries agree
    assert "containerd --config" in f.explanation and "k3s" not in f.explanation
    lines = {e.source: e.lines for e in f.evidence}
    assert '"SystemdCgroup": true' in lines["crictl_info"]
    assert "SystemdCgroup = false" in lines["containerd_config"]


def test_k3s_running_config_names_its_template():
    f = _found(crictl_info=FIXTURE.read_text(),
               containerd_config=_cfg())["container.cri-config-not-loaded"]
    assert "k3s never reads /etc/containerd/config.toml" in f.explanation
    assert TEMPLATES["k3s"] in f.explanation and "rke2" not in f.explanation.lower()
    assert "ClusterPolicy" in f.explanation  # its runtime is the operator's toolkit copy


def test_rke2_from_the_file_path():
    running = RUNNING.replace("/usr/bin/", "/usr/local/nvidia/toolkit/")
    cfg = _cfg(path="var/lib/rancher/rke2/agent/etc/containerd/config.toml")
    f = _found(crictl_info=running, containerd_config=cfg)["container.cri-config-not-loaded"]
    assert TEMPLATES["rke2"] in f.explanation and "BinaryName" in f.explanation


def test_agreeing_running_and_edited_config_say_nothing():
    same = RUNNING.replace("true", "false")
    assert "container.cri-config-not-loaded" not in _found(crictl_info=same,
                                                           containerd_config=_cfg())


def test_a_running_config_alone_is_nothing_at_warning():
    result = run(crictl_info=FIXTURE.read_text())
    assert not [f for f in result.findings if f.severity >= Severity.WARNING]


def test_whole_running_config_without_nvidia_runtime_differs():
    doc = json.loads(FIXTURE.read_text())
    del doc["config"]["containerd"]["runtimes"]["nvidia"]
    f = _found(crictl_info=json.dumps(doc, indent=2),
               containerd_config=_cfg())["container.cri-config-not-loaded"]
    assert "no nvidia runtime" in f.explanation
    assert "runtimes: runc" in {ln for e in f.evidence for ln in e.lines}
