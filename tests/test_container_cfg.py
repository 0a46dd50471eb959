"""The container stack's configuration sources: parsers on real captures and inline
texts, recognition in a paste, collection (only NVIDIA_*/CUDA_* variables kept) and the
diff of two snapshots."""

from __future__ import annotations

import json
import os

import pytest

from gputriage.collect.readers import read_tree
from gputriage.errors import ParseError
from gputriage.facts.store import Facts
from gputriage.ingest import load_text
from gputriage.ingest.detect import detect, source_for_command
from gputriage.parsers.container_cfg import (
    PASTED,
    dumps_tree,
    parse_cdi_specs,
    parse_container_cli_info,
    parse_ctk_cdi_list,
    parse_ctk_version,
    parse_toolkit_config,
)
from gputriage.parsers.container_engines import (
    parse_container_env,
    parse_containerd_config,
    parse_docker_daemon_json,
)
from gputriage.results.diff import facts_digest
from gputriage.scenarios.container_cdi import OLD_DRIVER, cdi_specs
from gputriage.scenarios.model import healthy_hgx_h100
from gputriage.scenarios.render_logs import container_toolkit_config
from gputriage.snapshot.bundle import Snapshot
from gputriage.sources import get

SOURCE_SAMPLES = {  # the fixtures are written in the formats the toolkit's docs give
    "cdi_specs": ("fixture:container/cdi-nvidia-yaml-a100-550.yaml",),
    "nvidia_ctk_cdi_list": ("corpus:podman-cdi-unresolvable-rtx2060-cdi-list-ok",
                            "fixture:container/nvidia-ctk-cdi-list.txt"),
    "nvidia_ctk_version": ("corpus:podman-cdi-unresolvable-rtx2060-cdi-list-ok",
                           "fixture:container/nvidia-ctk-version.txt"),
    "container_env": ("fixture:container/env-grep-nvidia.txt",),
    "container_toolkit_config": ("fixture:container/nvidia-container-runtime-config.toml",),
    "containerd_config": ("corpus:containerd-config-toml-nvidia-runtime",),
    "docker_daemon_json": ("corpus:daemon-json-nvidia-runtime-rootless",),
    "nvidia_container_cli_info": ("corpus:nvdocker1775-nvidia-container-cli-info",
                                  "corpus:nvdocker904-nvidia-container-cli-info"),
}

SPEC_YAML = """---
cdiVersion: 0.5.0
containerEdits:
  mounts:
  - containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    options: [ro, nosuid, nodev, bind]
  - containerPath: /lib/firmware/nvidia/550.54.15/gsp_ga10x.bin
    hostPath: /lib/firmware/nvidia/550.54.15/gsp_ga10x.bin
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- name: all
kind: nvidia.com/gpu
"""
SPEC_JSON = json.dumps({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
                        "devices": [{"name": "GPU-1234"}],
                        "containerEdits": {"mounts": [
                            {"hostPath": "/usr/lib64/libnvidia-ml.so.535.161.07"}]}})
CDI_LIST = ("INFO[0000] Found 3 CDI devices\nnvidia.com/gpu=0\n"
            "nvidia.com/gpu=GPU-1c3b3c8e-7a52-4b5e-9d1c-111111111111\nnvidia.com/gpu=all\n")
CTK_VERSION = ("NVIDIA Container Toolkit CLI version 1.13.5\n"
               "commit: 6b8589dcb4dead72ab64f14a5912886e6165c079\n")


# --- parsers ------------------------------------------------------------------------
def test_cdi_spec_yaml_kind_devices_and_driver_version():
    spec = parse_cdi_specs(SPEC_YAML).specs[0]
    assert spec.path == PASTED and spec.kind == "nvidia.com/gpu"
    assert spec.devices == ("0", "all") and spec.driver_versions == ("550.54.15",)
    assert spec.qualified == ("nvidia.com/gpu=0", "nvidia.com/gpu=all")
    assert spec.lines == ("hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                          "hostPath: /lib/firmware/nvidia/550.54.15/gsp_ga10x.bin")


def test_cdi_specs_tree_json_and_a_foreign_file():
    tree = dumps_tree({"etc/cdi/nvidia.json": SPEC_JSON, "var/run/cdi/junk": "[1, 2"})
    specs = parse_cdi_specs(tree)
    assert [s.driver_versions for s in specs.specs] == [("535.161.07",)]
    assert list(specs.unreadable) == ["var/run/cdi/junk"]
    assert parse_cdi_specs(dumps_tree({})).specs == []


@pytest.mark.parametrize("bad", ["cdiVersion: 0.5.0\ndevices: [\n", "\x00\x01\x02binary",
                                 '{"cdiVersion": "0.5.0", "kind":'])
def test_cdi_spec_malformed_is_a_parse_error(bad):
    with pytest.raises(ParseError):
        parse_cdi_specs(bad)


def test_scenario_spec_carries_the_old_driver():
    host = healthy_hgx_h100()
    host.cdi_driver_version = OLD_DRIVER
    spec = parse_cdi_specs(cdi_specs(host)).specs[0]
    assert spec.driver_versions == (OLD_DRIVER,) and len(spec.devices) == 9


def test_toolkit_config_and_its_errors():
    cfg = parse_toolkit_config(container_toolkit_config(healthy_hgx_h100()))
    assert cfg.mode == "auto" and cfg.runtimes == ("docker-runc", "runc", "crun")
    assert cfg.spec_dirs == ("/etc/cdi", "/var/run/cdi") and "compute" in cfg.capabilities
    assert cfg.lines["mode"] == 'mode = "auto"'
    for bad in ('[nvidia-container-runtime]\nmode = "cdi', '[other]\nx = 1\n', "\x00\x00"):
        with pytest.raises(ParseError):
            parse_toolkit_config(bad)


def test_ctk_version_and_cdi_list():
    assert parse_ctk_version(CTK_VERSION) == "1.13.5"
    with pytest.raises(ParseError):
        parse_ctk_version("nvidia-ctk: command not found\n")
    listed = parse_ctk_cdi_list(CDI_LIST)
    assert listed.count == 3 and listed.devices[-1] == "nvidia.com/gpu=all"
    new_style = parse_ctk_cdi_list('time="2024-05-01T10:00:00Z" level=info msg="Found 1 CDI '
                                   'devices"\nnvidia.com/gpu=all\n')
    assert new_style.count == 1
    with pytest.raises(ParseError):
        parse_ctk_cdi_list("no devices here\n")


def test_container_cli_info_real_captures(corpus):
    jetson = parse_container_cli_info(
        corpus.sample("nvdocker1775-nvidia-container-cli-info").text())
    assert jetson.nvrm is None and jetson.cuda == "10.2" and jetson.listed == ()
    dev = jetson.devices[0]
    assert (dev.model, dev.brand, dev.uuid, dev.bus, dev.architecture) == (
        "Xavier", None, None, None, "7.2")
    eight = parse_container_cli_info(
        corpus.sample("nvidia-container-cli-info-8x-rtx2080ti").text())
    assert eight.nvrm == "465.19.01" and len(eight.listed) == 8
    failed = parse_container_cli_info("nvidia-container-cli: initialization error: nvml error: "
                                      "driver/library version mismatch\n")
    assert failed.error and not failed.devices
    with pytest.raises(ParseError):
        parse_container_cli_info("hello\n")


def test_containerd_diff_reads_the_plus_side(corpus):
    text = dict(detect(corpus.sample("containerd-config-toml-nvidia-runtime").text()))
    cfg = parse_containerd_config(text["containerd_config"])
    assert cfg.diff and cfg.default_runtime == "nvidia"
    nv = cfg.nvidia
    assert nv is not None and nv.binary == "/usr/bin/nvidia-container-runtime"
    assert nv.systemd_cgroup is True and nv.runtime_type == "io.containerd.runc.v1"


def test_containerd_file_v3_tables_and_a_k3s_template():
    v3 = ("version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n"
          "  default_runtime_name = 'runc'\n"
          "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]\n"
          "  BinaryName = '/usr/local/nvidia/toolkit/nvidia-container-runtime'\n")
    cfg = parse_containerd_config(dumps_tree({"etc/containerd/config.toml": v3}))
    assert cfg.default_runtime == "runc" and cfg.nvidia and cfg.nvidia.binary.endswith("runtime")
    tmpl = ('{{ template "base" . }}\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."nvidia"]\n'
            '  runtime_type = "io.containerd.runc.v2"\n')
    cfg = parse_containerd_config(dumps_tree(
        {"var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl": tmpl}))
    assert cfg.template and "nvidia" in cfg.runtimes
    with pytest.raises(ParseError):
        parse_containerd_config(dumps_tree({"etc/containerd/config.toml": "version = 2\n["}))
    with pytest.raises(ParseError):
        parse_containerd_config("just words\n")


def test_daemon_json_root_and_rootless():
    tree = dumps_tree({
        "etc/docker/daemon.json": '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}',
        "home/ana/.config/docker/daemon.json": '{"data-root": "/scratch/docker"}'})
    files = parse_docker_daemon_json(tree).files
    assert [(f.path, f.has_nvidia, f.rootless) for f in files] == [
        ("etc/docker/daemon.json", True, False),
        ("home/ana/.config/docker/daemon.json", False, True)]
    for bad in ('{"runtimes": ', "[1, 2]"):
        with pytest.raises(ParseError):
            parse_docker_daemon_json(bad)


def test_container_env_keeps_only_nvidia_and_cuda_variables():
    env = parse_container_env(dumps_tree({
        ".dockerenv": "", "proc/self/environ": "NVIDIA_VISIBLE_DEVICES=0,1\n"
                                              "NVIDIA_DRIVER_CAPABILITIES=compute,utility\n"}))
    assert env.in_container and env.markers == ("/.dockerenv",) and env.read_environment
    assert env.capabilities == ("compute", "utility")
    pasted = parse_container_env("export NVIDIA_VISIBLE_DEVICES=all\nHOME=/root\n")
    assert pasted.variables == {"NVIDIA_VISIBLE_DEVICES": "all"} and not pasted.in_container
    with pytest.raises(ParseError):
        parse_container_env("HOME=/root\n")


# --- collection ---------------------------------------------------------------------
def test_collection_keeps_no_other_environment_variable(tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/environ").write_bytes(
        b"HOME=/root\0AWS_SECRET_ACCESS_KEY=xyz\0NVIDIA_VISIBLE_DEVICES=all\0"
        b"CUDA_VISIBLE_DEVICES=0\0NVIDIA_DRIVER_CAPABILITIES=utility\0")
    (tmp_path / "run").mkdir()
    (tmp_path / "run/.containerenv").write_text('engine="podman-4.9.3"\n')
    data, rec = read_tree(tmp_path, get("container_env"))
    assert data is not None and not rec["truncated"]
    assert b"SECRET" not in data and b"HOME" not in data
    env = parse_container_env(data.decode())
    assert env.engine == "podman-4.9.3" and env.markers == ("/run/.containerenv",)
    assert set(env.variables) == {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                                  "NVIDIA_DRIVER_CAPABILITIES"}


def test_collection_of_absent_configuration_is_quiet(tmp_path):
    for name in ("cdi_specs", "docker_daemon_json", "containerd_config"):
        data, _ = read_tree(tmp_path, get(name))
        assert data is not None and json.loads(data)["files"] == {}, name
    os.makedirs(tmp_path / "etc/docker")
    (tmp_path / "etc/docker/daemon.json").write_text("{}")
    data, _ = read_tree(tmp_path, get("docker_daemon_json"))
    assert parse_docker_daemon_json(data.decode()).files[0].runtimes == {}


# --- pastes -------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "source"), [
    (SPEC_YAML, "cdi_specs"), (SPEC_JSON + "\n", "cdi_specs"), (CDI_LIST, "nvidia_ctk_cdi_list"),
    (CTK_VERSION, "nvidia_ctk_version"),
    (container_toolkit_config(healthy_hgx_h100()), "container_toolkit_config"),
    ("NVIDIA_VISIBLE_DEVICES=all\nNVIDIA_DRIVER_CAPABILITIES=utility\n", "container_env"),
])
def test_pasted_configuration_is_recognised(text, source):
    assert [name for name, _ in detect(text)] == [source]
    snap = load_text(f"$ cat whatever\n{text}", "paste")
    assert snap.get(source) is not None


@pytest.mark.parametrize(("cmd", "source"), [
    ("cat /etc/docker/daemon.json", "docker_daemon_json"),
    ("cat ~/.config/docker/daemon.json", "docker_daemon_json"),
    ("sudo cat /etc/containerd/config.toml", "containerd_config"),
    ("cat /etc/cdi/nvidia.yaml", "cdi_specs"),
    ("nvidia-ctk cdi list", "nvidia_ctk_cdi_list"),
    ("nvidia-ctk --version", "nvidia_ctk_version"),
])
def test_command_aliases(cmd, source):
    assert source_for_command(cmd) == source


def test_pasted_spec_is_judged_without_host_facts():
    from gputriage.engine.analysis import analyze

    result = analyze(load_text(SPEC_YAML, "paste"))
    assert "container.cdi-spec-version" in {f.id for f in result.findings}
    assert not result.unreadable


# --- diff ---------------------------------------------------------------------------
def test_digest_shows_the_cdi_driver_and_the_runtimes(tmp_path):
    from gputriage.scenarios import write_host

    host = healthy_hgx_h100()
    host.cdi_driver_version = OLD_DRIVER
    digest = facts_digest(Facts(Snapshot.load(write_host(host, tmp_path / "s"))))
    assert digest["cdi[etc/cdi/nvidia.yaml].driver"] == OLD_DRIVER
    assert digest["cdi[etc/cdi/nvidia.yaml].devices"] == 9
    assert digest["containerd.default_runtime"] == "nvidia"
    assert digest["container.cdi_specs"] == "etc/cdi/nvidia.yaml"


def test_containerd_without_cri_is_docker_s_and_judged_quietly():
    docker_s = dumps_tree({"etc/containerd/config.toml": 'disabled_plugins = ["cri"]\n'})
    cfg = parse_containerd_config(docker_s)
    assert cfg.cri_disabled and not cfg.runtimes
    from hostkit import run

    found = {f.id for f in run(containerd_config=json.loads(docker_s),
                               nvidia_ctk_version=CTK_VERSION).findings}
    assert not {i for i in found if i.startswith("container.runtime")}
    assert parse_containerd_config(dumps_tree({})).paths == ()
