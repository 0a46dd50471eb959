"""Rules on the container stack's configuration (rules/container_config.py) on small
hosts: each fires where it should, stays quiet where it should not, and blames the
node's configuration without draining it."""

from __future__ import annotations

import pytest
from golden import flat
from hostkit import VERSION_FILE, run

from gputriage.model import Action, Blame, Severity
from gputriage.parsers.container_cfg import dumps_tree


def cdi(version: str, path: str = "etc/cdi/nvidia.yaml") -> dict:
    """A CDI spec tree whose mounts carry driver ``version``."""
    lib = f"/usr/lib/x86_64-linux-gnu/libcuda.so.{version}"
    spec = ("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n"
            "  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n"
            f"containerEdits:\n  mounts:\n  - hostPath: {lib}\n    containerPath: {lib}\n")
    return {"files": {path: spec}, "links": {}, "errors": {}}


LOADED_550 = VERSION_FILE.format(v="550.54.15")
MOUNT_ERROR = ('Error: failed to create containerd task: OCI runtime create failed: error '
               'mounting "/usr/lib/x86_64-linux-gnu/libcuda.so.535.161.07" to rootfs: stat '
               '/usr/lib/x86_64-linux-gnu/libcuda.so.535.161.07: no such file or directory\n')
CONTAINERD_NO_NVIDIA = {"files": {"etc/containerd/config.toml": (
    'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
    '  default_runtime_name = "runc"\n'
    '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
    '    runtime_type = "io.containerd.runc.v2"\n')}}
CONTAINERD_NVIDIA_NOT_DEFAULT = {"files": {"etc/containerd/config.toml": (
    CONTAINERD_NO_NVIDIA["files"]["etc/containerd/config.toml"]
    + '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
      '    BinaryName = "/usr/bin/nvidia-container-runtime"\n')}}
DAEMON_NVIDIA = {"files": {"etc/docker/daemon.json": (
    '{"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": '
    '"nvidia-container-runtime", "args": []}}}')}}
TOOLKIT = "NVIDIA Container Toolkit CLI version 1.17.3\ncommit: 1a2b3c4d\n"
UNKNOWN_RUNTIME = ("docker: Error response from daemon: unknown or invalid runtime name: "
                   "nvidia.\n")
ENV_NO_COMPUTE = {"files": {"proc/self/environ": "NVIDIA_VISIBLE_DEVICES=all\n"
                                                 "NVIDIA_DRIVER_CAPABILITIES=utility\n"}}
CLI_INFO = ("NVRM version:   550.54.15\nCUDA version:   12.4\n\nDevice Index:   0\n"
            "Device Minor:   0\nModel:          NVIDIA H100 80GB HBM3\nBrand:          Nvidia\n"
            "GPU UUID:       GPU-0\nBus Location:   00000000:18:00.0\nArchitecture:   9.0\n")
TOOLKIT_CDI_MODE = '[nvidia-container-runtime]\nmode = "cdi"\n'

RULE_CASES = {
    "container.cdi": [
        ({"cdi_specs": cdi("535.161.07"), "proc_driver_nvidia_version": LOADED_550},
         "container.cdi-stale-spec"),
        ({"cdi_specs": cdi("550.54.15"), "proc_driver_nvidia_version": LOADED_550},
         "container.cdi-spec-current"),
        ({"cdi_specs": cdi("535.161.07")}, "container.cdi-spec-version"),
    ],
    "container.runtime": [
        ({"containerd_config": CONTAINERD_NO_NVIDIA, "nvidia_ctk_version": TOOLKIT},
         "container.runtime-nvidia-missing"),
        ({"docker_daemon_json": DAEMON_NVIDIA, "job_log": UNKNOWN_RUNTIME},
         "container.runtime-daemon-mismatch"),
        ({"containerd_config": CONTAINERD_NVIDIA_NOT_DEFAULT},
         "container.runtime-default-not-nvidia"),
        ({"docker_daemon_json": DAEMON_NVIDIA}, "container.runtime-configured"),
    ],
    "container.capabilities": [
        ({"container_env": ENV_NO_COMPUTE}, "container.capabilities-no-compute"),
    ],
    "container.toolkit": [
        ({"nvidia_container_cli_info": CLI_INFO}, "container.toolkit-sees-gpus"),
        ({"container_toolkit_config": TOOLKIT_CDI_MODE, "cdi_specs": {"files": {}}},
         "container.toolkit-cdi-mode-without-spec"),
    ],
}


def _found(**sources):
    return {f.id: f for f in flat(run(**sources).findings)}


def test_stale_spec_names_both_versions_the_repair_order_and_does_not_drain():
    f = _found(cdi_specs=cdi("535.161.07"), proc_driver_nvidia_version=LOADED_550)[
        "container.cdi-stale-spec"]
    assert f.severity is Severity.WARNING and f.blame is Blame.CONFIG
    assert f.action is Action.FIX_CONFIG
    assert "535.161.07" in f.title and "550.54.15" in f.title
    text = f.explanation
    order = [text.index(w) for w in ("reboot", "nvidia-ctk cdi generate", "restart the "
                                     "container runtime", "device plugin")]
    assert order == sorted(order)
    lines = [ln for e in f.evidence for ln in e.lines]
    assert any("libcuda.so.535.161.07" in ln for ln in lines)
    assert any("550.54.15" in ln for ln in lines)


def test_stale_spec_joined_to_the_jobs_mount_error_is_critical_when_the_log_is_read():
    found = _found(cdi_specs=cdi("535.161.07"), proc_driver_nvidia_version=LOADED_550,
                   job_log=MOUNT_ERROR + UNKNOWN_RUNTIME)
    f = found["container.cdi-stale-spec"]
    if any(e.source == "job_log" for e in f.evidence):  # the catalog read the mount error
        assert f.severity is Severity.CRITICAL and f.action is Action.FIX_CONFIG
    else:
        assert f.severity is Severity.WARNING


def test_current_spec_and_a_spec_without_driver_libraries_raise_nothing():
    assert not [f for f in _found(cdi_specs=cdi("550.54.15"),
                                  proc_driver_nvidia_version=LOADED_550).values()
                if f.id.startswith("container.") and f.severity.rank >= Severity.WARNING.rank]
    spec = {"files": {"etc/cdi/x.yaml": "cdiVersion: 0.6.0\nkind: example.com/dev\n"}}
    assert not [i for i in _found(cdi_specs=spec) if i.startswith("container.cdi")]


def test_a_pasted_spec_without_host_facts_names_the_fact_it_needs():
    f = _found(cdi_specs=cdi("535.161.07"))["container.cdi-spec-version"]
    assert f.severity is Severity.INFO and "gputriage check" in f.explanation


def test_no_nvidia_runtime_is_only_a_finding_where_the_toolkit_is_installed():
    assert "container.runtime-nvidia-missing" not in _found(containerd_config=CONTAINERD_NO_NVIDIA)
    f = _found(containerd_config=CONTAINERD_NO_NVIDIA,
               container_toolkit_config=TOOLKIT_CDI_MODE)["container.runtime-nvidia-missing"]
    assert f.blame is Blame.CONFIG and "nvidia-ctk runtime configure" in f.explanation


def test_default_runtime_not_nvidia_is_information():
    f = _found(containerd_config=CONTAINERD_NVIDIA_NOT_DEFAULT)[
        "container.runtime-default-not-nvidia"]
    assert f.severity is Severity.INFO and "runtimeClassName" in f.explanation


@pytest.mark.parametrize(("caps", "fires"), [("utility", True), ("utility,video", True),
                                             ("compute,utility", False), ("all", False)])
def test_capabilities_without_compute(caps, fires):
    env = {"files": {"proc/self/environ": f"NVIDIA_DRIVER_CAPABILITIES={caps}\n"}}
    found = _found(container_env=env)
    assert ("container.capabilities-no-compute" in found) is fires
    if fires:
        f = found["container.capabilities-no-compute"]
        assert f.evidence[0].lines == (f"NVIDIA_DRIVER_CAPABILITIES={caps}",)


def test_environment_without_the_variable_is_quiet():
    assert "container.capabilities-no-compute" not in _found(
        container_env={"files": {"proc/self/environ": ""}})


def test_tree_text_round_trips():
    assert dumps_tree({"a": "b"}).startswith("{")
