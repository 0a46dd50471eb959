"""The host a report and its next steps name is the one the inputs name (a pasted
journal's ``gpu-b12 kernel:``, a described Kubernetes node, an NCCL log's host), never
the machine gputriage runs on; with no name, steps say so in words and keep the
``<node>`` placeholder only in the commands (issue 32, "Host names ignored")."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.model import Result

XID79 = ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the "
         "bus.")
DESCRIBE_NODE = """\
Name:               gpu-node-031
Roles:              <none>
Labels:             nvidia.com/gpu.present=true
                    nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3
Taints:             <none>
Capacity:
  cpu:                96
  memory:             2113442012Ki
  pods:               110
Allocatable:
  cpu:                96
  memory:             2113339612Ki
  pods:               110
"""
NCCL = """\
gpu-a7:2461:2461 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>
gpu-a7:2461:2461 [0] NCCL INFO NET/IB : No device found.
gpu-a7:2461:2461 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.7<0>
gpu-a7:2461:2461 [0] NCCL INFO Using network Socket
"""


def _analyse(tmp_path: Path, text: str) -> Result:
    path = tmp_path / "paste.txt"
    path.write_text(text)
    return analyze(load_input(str(path)))


def _steps(result: Result) -> list[str]:
    return [f.step for f in result.findings if f.step]


@pytest.mark.parametrize("prefix", [
    "Mar 03 10:12:01 gpu-b12 kernel: ",  # journalctl / syslog
    "2025-03-03T10:12:01.123456+00:00 gpu-b12 kernel: ",  # journalctl -o short-iso
    "gpu-b12 kernel: ",  # the time cut off, the host kept
])
def test_a_journal_names_its_host(tmp_path, prefix):
    result = _analyse(tmp_path, f"{prefix}{XID79}\n")
    assert result.host.hostname == "gpu-b12"
    (step,) = _steps(result)
    assert step.startswith("Drain gpu-b12 (scontrol update nodename=gpu-b12 state=drain")
    assert "<node>" not in step and "kubectl uncordon gpu-b12" in step


def test_a_journal_of_two_hosts_names_none(tmp_path):
    text = (f"Mar 03 10:12:01 gpu-b12 kernel: {XID79}\n"
            f"Mar 03 10:12:02 gpu-b13 kernel: {XID79.replace('3b', '5e')}\n")
    result = _analyse(tmp_path, text)
    assert result.host.hostname is None
    for step in _steps(result):  # no name: said in words, the placeholder in commands only
        assert step.startswith("Drain the node these outputs came from (scontrol update "
                               "nodename=<node> state=drain"), step


@pytest.mark.parametrize("name", ["localhost", "localhost.localdomain"])
def test_localhost_names_no_host(tmp_path, name):
    result = _analyse(tmp_path, f"Mar 03 10:12:01 {name} kernel: {XID79}\n")
    assert result.host.hostname is None


def test_a_described_node_names_its_host(tmp_path):
    result = _analyse(tmp_path, DESCRIBE_NODE)
    assert result.host.hostname == "gpu-node-031"


def test_a_one_host_nccl_log_names_its_host(tmp_path):
    assert _analyse(tmp_path, NCCL).host.hostname == "gpu-a7"


def test_inputs_that_disagree_name_no_host(tmp_path):
    """A journal of one host and a described node of another: neither is taken."""
    journal = tmp_path / "kern.log"
    journal.write_text(f"Mar 03 10:12:01 gpu-b12 kernel: {XID79}\n")
    node = tmp_path / "node.txt"
    node.write_text(DESCRIBE_NODE)
    from gputriage.ingest import load_inputs

    result = analyze(load_inputs([str(journal), str(node)]))
    assert result.host.hostname is None
