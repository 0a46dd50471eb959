"""The literal gates of the host-output detectors (kernel log, nvidia-smi, lspci, NUMA,
NVLink, topology, weights, module build, GDRCopy): closed on a training job's log, open
as soon as one line that starts a claim is in it, whatever the line's format."""

from __future__ import annotations

import pytest
from detect_both import lazy_and_eager_agree  # noqa: F401  (the fixture)
from hypothesis import given, settings
from hypothesis import strategies as st
from record_prefixes import RECORDS as _RECORDS
from training_kit import training_log

from gputriage.ingest.detect import detect
from gputriage.parsers import (
    detect_gate,
    detect_kernel,
    gdrcopy,
    lspci,
    lspci_tree,
    module_build,
    numactl,
    nvlink,
    nvsmi_table,
    nvsmi_xml,
    topo,
    weights_host,
)
from gputriage.parsers.detect_gate import Gate
from gputriage.parsers.kernel_log import is_kernel_line, is_system_log_line
from gputriage.text.paste import PasteDoc

# every detection of these tests is also made with every detector run (tests/detect_both.py)
pytestmark = pytest.mark.usefixtures("lazy_and_eager_agree")


_NCCL = "gpu-node-018:43782:43782 [6] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"


def _training(lines: int) -> str:
    return training_log(lines, _NCCL)




@pytest.mark.parametrize("record", _RECORDS)
def test_the_kernel_gate_opens_on_every_record_prefix(record: str) -> None:
    assert is_kernel_line(record) or is_system_log_line(record)
    gate = detect_kernel._RECORD_GATE
    assert gate.open(PasteDoc(_training(60) + record + "\n" + _training(60)))
    assert gate.open(PasteDoc(record + "\n"))


# a line each detector starts a claim at
_STARTS: list[tuple[Gate, str]] = [
    (nvsmi_table._TABLE_GATE,
     "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |"),
    (nvsmi_table._ROW_GATE,
     "|   0  NVIDIA A100-SXM4-80GB  On   | 00000000:07:00.0 Off |                    0 |"),
    (nvsmi_table._MIG_BOX_GATE, "| GPU instances:                                              |"),
    (nvsmi_xml._START_GATE, '<?xml version="1.0" ?>'),
    (nvsmi_xml._START_GATE, "<nvidia_smi_log>"),
    (lspci._HEAD_GATE, "3b:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4] (rev a1)"),
    (lspci._HEAD_GATE, "0000:3b:00.0 Infiniband controller: Mellanox ConnectX-6 [15b3:101b]"),
    (lspci._LINK_GATE, "\t\tLnkSta:\tSpeed 16GT/s (ok), Width x16 (ok)"),
    (lspci_tree._FIRST_GATE, "-[0000:00]-+-00.0  Intel Corporation Device 09a2"),
    (lspci_tree._FIRST_GATE, "> \\-[0000:b0]-+-00.0  Intel Corporation Device 09a2"),
    (numactl._LSCPU_GATE, "NUMA node(s):                    2"),
    (numactl._LSCPU_GATE, "Architecture:                    x86_64"),
    (nvlink._GPU_GATE, "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1b2c3d4e-0000-1111)"),
    (topo._HEAD_GATE, "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"),
    (weights_host._HEADER_GATE, weights_host.HEADER),
    (module_build._MARK_GATE, "DKMS make.log for nvidia-535.104.05 for kernel 5.15.0-91-generic"),
    (module_build._MARK_GATE, "  MODPOST /var/lib/dkms/nvidia/535.104.05/build/Module.symvers"),
    (gdrcopy._MARK_GATE, "GPU id:0; name: NVIDIA A100-SXM4-80GB; Bus id: 0000:07:00"),
]


@pytest.mark.parametrize(("gate", "line"), _STARTS)
def test_each_host_gate_is_closed_on_a_training_log_and_opens_on_its_start(
        gate: Gate, line: str) -> None:
    job = _training(300)
    assert not gate.open(PasteDoc(job))
    doc = PasteDoc(job + line + "\n" + job)
    assert gate.open(doc)
    doc.owner[300] = "other"  # the line claimed by an earlier detector: nothing to start at
    assert not gate.open(doc)


def test_a_host_output_in_a_training_log_is_detected_the_same_with_the_gates(monkeypatch) -> None:
    host = "".join(line + "\n" for _, line in _STARTS) + "".join(r + "\n" for r in _RECORDS[:8])
    paste = _training(200) + host + _training(200)
    gated = detect(paste)
    monkeypatch.setattr(detect_gate.Gate, "open", lambda self, doc: True)
    assert gated == detect(paste)


def test_every_record_prefix_is_a_system_log_record_as_by_its_whole_pattern():
    from gputriage.parsers import kernel_log
    from gputriage.parsers.kernel_patterns import strip_ansi

    for record in _RECORDS:
        for line in (record, record.replace(": ", ":"), record.replace(": ", ":\t"),
                     record.replace(": ", ":\u2003"), "  " + record, record[:20]):
            bare = strip_ansi(line) if "\x1b" in line else line
            assert is_system_log_line(line) == (
                kernel_log._SYSTEM_LOG.match(bare) is not None), line


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_RECORDS), st.text(max_size=30), st.text(max_size=30),
       st.integers(0, 80))
def test_a_system_log_record_is_told_as_by_its_whole_pattern(record, before, after, cut):
    """The ": " looked for first is in every record the pattern matches: the same lines
    are system-log records with or without it."""
    from gputriage.parsers import kernel_log
    from gputriage.parsers.kernel_patterns import strip_ansi

    for line in (record, before + record + after, record[:cut], record.replace(": ", ":")):
        bare = strip_ansi(line) if "\x1b" in line else line
        assert is_system_log_line(line) == (kernel_log._SYSTEM_LOG.match(bare) is not None)
