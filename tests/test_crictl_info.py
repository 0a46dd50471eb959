"""``crictl info``: the running CRI plugin's runtimes, whole or cut short as pasted, and
its recognition in a paste (the corpus capture: a k3s node whose running nvidia runtime is
not the edited /etc/containerd/config.toml)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputriage.engine.analysis import analyze
from gputriage.errors import ParseError
from gputriage.ingest import load_input
from gputriage.ingest.detect import detect, source_for_command
from gputriage.parsers.crictl_info import TOOLKIT_DIR, parse_crictl_info

SOURCE_SAMPLES = {
    "crictl_info": ("corpus:k3s-crictl-info-systemdcgroup",
                    "fixture:container/crictl-info-k3s.json"),
}
FIXTURE = Path(__file__).parent / "fixtures" / "container" / "crictl-info-k3s.json"


def test_whole_document_runtimes_default_cdi_and_k3s():
    info = parse_crictl_info(FIXTURE.read_text())
    assert info.whole and set(info.runtimes) == {"nvidia", "runc"}
    nv = info.nvidia
    assert nv is not None and nv.name == "nvidia" and nv.operator_toolkit
    assert (nv.binary, nv.systemd_cgroup, nv.runtime_type) == (
        f"{TOOLKIT_DIR}/nvidia-container-runtime", True, "io.containerd.runc.v2")
    assert info.runtimes["runc"].binary is None
    assert (info.default_runtime, info.cdi_enabled, info.distribution) == ("runc", False, "k3s")


def test_one_line_dump_reads_the_same():
    info = parse_crictl_info(json.dumps(json.loads(FIXTURE.read_text())))
    assert info.nvidia is not None and info.nvidia.systemd_cgroup is True
    assert info.nvidia.lines["SystemdCgroup"] == '"SystemdCgroup": true'


def test_elided_fragment_from_the_corpus(corpus):
    text = dict(detect(corpus.sample("k3s-crictl-info-systemdcgroup").text()))["crictl_info"]
    info = parse_crictl_info(text)
    assert not info.whole and list(info.runtimes) == ["nvidia"]
    assert info.nvidia is not None and info.nvidia.systemd_cgroup is True
    assert info.nvidia.binary == f"{TOOLKIT_DIR}/nvidia-container-runtime"
    assert info.distribution is None and info.default_runtime is None


def test_rke2_paths_and_trailing_commas():
    text = ('{\n  "config": {\n    "containerd": {\n      "defaultRuntimeName": "nvidia",\n'
            '      "runtimes": {\n        "nvidia": {\n          "options": {\n'
            '            "BinaryName": "/usr/bin/nvidia-container-runtime",\n'
            '          },\n        },\n      },\n    },\n'
            '    "containerdRootDir": "/var/lib/rancher/rke2/agent/containerd",\n  }\n}\n')
    info = parse_crictl_info(text)
    assert not info.whole and info.default_runtime == "nvidia"
    assert info.distribution == "rke2" and info.nvidia is not None
    assert info.nvidia.systemd_cgroup is None


def test_no_runtime_is_a_parse_error():
    with pytest.raises(ParseError, match="no CRI runtime"):
        parse_crictl_info('{"status": {"conditions": []}}')


def test_corpus_paste_splits_into_running_and_edited_config(corpus):
    found = dict(detect(corpus.sample("k3s-crictl-info-systemdcgroup").text()))
    assert set(found) == {"crictl_info", "containerd_config"}
    assert '"SystemdCgroup": true' in found["crictl_info"]
    assert "BinaryName = " not in found["crictl_info"]
    assert "[plugins." not in found["crictl_info"]


def test_daemon_json_is_not_crictl_info():
    daemon = '{\n  "runtimes": {\n    "nvidia": {\n      "path": "nvidia-container-runtime"\n' \
             '    }\n  }\n}\n'
    assert [n for n, _ in detect(daemon)] == ["docker_daemon_json"]


@pytest.mark.parametrize("cmd", ["crictl info", "sudo crictl info", "k3s crictl info",
                                 "crictl --runtime-endpoint unix:///run/k3s/containerd/"
                                 "containerd.sock info"])
def test_commands_that_print_it(cmd):
    assert source_for_command(cmd) == "crictl_info"


def test_corpus_sample_analyzed(corpus):
    result = analyze(load_input(str(corpus.sample("k3s-crictl-info-systemdcgroup").path)))
    ids = {f.id: f for f in result.findings}
    f = ids["container.cri-config-not-loaded"]
    assert f.severity.name == "WARNING"
    assert "/usr/local/nvidia/toolkit" in f.explanation and TOOLKIT_DIR in f.explanation
    assert "config.toml.tmpl" in f.explanation
