"""The stack's detectors (DCGM exporter, Kubernetes, container runtime, systemd units,
NVVS, fabric manager) return at once on a training job's log: their gates close, and no
line is looked at one by one. What they detect with the gates is checked by
tests/test_detect_gate.py (every corpus sample inside a training log, gates open and
closed)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from training_kit import training_log

from gputriage.parsers.crictl_info import claim_crictl_info
from gputriage.parsers.dcgm_exporter import claim_exporter_log, claim_metrics
from gputriage.parsers.detect_container import claim_container_cli_info, claim_container_config
from gputriage.parsers.detect_k8s import claim_k8s_objects, claim_k8s_table
from gputriage.parsers.fabricmanager import claim_fabricmanager_log
from gputriage.parsers.nvvs_log import claim_nvvs_log
from gputriage.parsers.systemd import claim_units
from gputriage.text.paste import PasteDoc

_NCCL = "gpu-node-018:43782:43782 [{r}] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib\n"


def _training(lines: int) -> str:
    return training_log(lines, _NCCL, every=100, at=99)


class _Watched(PasteDoc):
    """A paste that fails a test when a detector asks whether one of its lines is free."""

    def free(self, i: int) -> bool:
        raise AssertionError(f"line {i} looked at")


_DETECTORS: list[Callable[[PasteDoc], None]] = [
    claim_metrics, claim_exporter_log, claim_k8s_objects, claim_k8s_table,
    claim_container_config, claim_container_cli_info, claim_crictl_info, claim_units,
    claim_nvvs_log, claim_fabricmanager_log]


@pytest.mark.parametrize("claim", _DETECTORS, ids=lambda f: f.__name__)
def test_a_training_log_is_not_read_line_by_line(claim: Callable[[PasteDoc], None]) -> None:
    doc = _Watched(_training(2000))
    claim(doc)
    assert set(doc.owner) == {None}


@pytest.mark.parametrize(("claim", "paste", "source"), [
    (claim_metrics, 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 41\n', "dcgm_exporter_metrics"),
    (claim_exporter_log, 'time="2025-01-01T00:00:00Z" level=info msg="Starting dcgm-exporter"\n',
     "dcgm_exporter_log"),
    (claim_exporter_log, "ERRO[0000] Failed to collect metrics; err: Host engine connection "
     "invalid\n", "dcgm_exporter_log"),
    (claim_k8s_objects, '{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}\n',
     "k8s_objects"),
    (claim_k8s_objects, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n", "k8s_objects"),
    (claim_k8s_objects, "  capacity:\n    nvidia.com/gpu: 8\n  allocatable:\n    cpu: 4\n",
     "k8s_objects"),
    (claim_k8s_table, "train-0   1/1   Running   0   5m\ntrain-1   0/1   Pending   0   5m\n",
     "k8s_table"),
    (claim_container_config,
     '{\n  "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}\n}\n',
     "docker_daemon_json"),
    (claim_crictl_info, '  "runtimeType": "io.containerd.runc.v2",\n  "BinaryName": "x"\n',
     "crictl_info"),
    (claim_units, "Unit nvidia-fabricmanager.service could not be found.\n",
     "systemctl_fabricmanager"),
    (claim_nvvs_log, "2023-12-07 17:09:52.612 ERROR [73032:73032] [[pcie]] bandwidth low "
     "[/nvvs/plugin_src/pcie/Pcie.cpp:120] [f]\n", "nvvs_log"),
    (claim_fabricmanager_log, "[Feb 25 2025 13:59:45] [ERROR] [tid 1803] failed to start\n",
     "fabricmanager_journal"),
])
def test_the_gates_open_for_what_the_detectors_claim(
        claim: Callable[[PasteDoc], None], paste: str, source: str) -> None:
    """Inside the training log, on a line of their own, still claimed."""
    job = _training(300)
    doc = PasteDoc(job + paste + job)
    claim(doc)
    assert source in doc.owner
