"""A fragment is an input: framed lines and nvidia-smi -q sections pasted alone.

Real captures (tests/fixtures/fragments, each from a public thread) and synthetic
variants of the class: the same record under every framing an on-call pastes it in
(text/framing.py), sections of nvidia-smi -q at any indentation, and lines that look
like a framing but are content and must stay as they are."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from detect_both import lazy_and_eager_agree  # noqa: F401  (the fixture)
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.engine.analysis import analyze
from gputriage.errors import InputError
from gputriage.ingest import load_text
from gputriage.ingest.detect import detect
from gputriage.model import Result, Severity
from gputriage.text import framing
from gputriage.text.framing import unframe_lines

# every detection of these tests is also made with every detector run (tests/detect_both.py)
pytestmark = pytest.mark.usefixtures("lazy_and_eager_agree")


FRAGMENTS = Path(__file__).resolve().parent / "fixtures" / "fragments"

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
DMESG79 = f"[ 1843.308145] {XID79}"
NCCL_WARN = ("gpu-node-7:3468:3905 [4] transport/net_ib.cc:1615 NCCL WARN NET/IB : Got "
             "completion from peer 10.0.0.2<54862> with status=12 opcode=0 len=0 vendor err "
             "129 (Recv)")


def judge(text: str) -> Result:
    return analyze(load_text(text, "paste"))


def ids(result: Result) -> set[str]:
    return {f.id for f in result.findings}


def evidence_lines(result: Result, finding_id: str) -> list[str]:
    found = next(f for f in result.findings if f.id == finding_id)
    return [ln for ev in found.evidence for ln in ev.lines]


# -- real captures ------------------------------------------------------------------------
def test_a_remapped_rows_section_alone_is_judged_on_a_gpu_it_cannot_name() -> None:
    result = judge((FRAGMENTS / "remapped-rows-section-pending.txt").read_text())
    remap = next(f for f in result.findings if f.id == "memory.remap-pending")
    assert remap.severity is Severity.WARNING and remap.blame.value == "node"
    assert "does not name" in remap.title
    assert any("which GPU it describes could not be told" in n for n in result.not_read)


def test_a_quoted_dmesg_ctime_paste_is_the_job_s_fault_not_a_drain(corpus) -> None:
    result = judge(corpus.sample("gpud-pr46-xid13").text())
    assert {"xid.13", "xid.109"} <= ids(result)
    assert all(f.severity is not Severity.CRITICAL for f in result.findings)
    quoted = evidence_lines(result, "xid.13")
    assert quoted and all(ln.startswith("> [Fri Aug 30") for ln in quoted)


def test_busybox_logread_lines_are_a_kernel_log() -> None:
    text = (FRAGMENTS / "logread-kernel-lines.txt").read_text()
    assert [name for name, _ in detect(text)] == ["kernel_log"]
    assert not [f for f in judge(text).findings if f.severity >= Severity.WARNING]


def test_a_quoted_nccl_warn_line_alone_is_an_ib_completion_error() -> None:
    result = judge((FRAGMENTS / "quoted-nccl-warn-ib-completion.txt").read_text())
    found = next(f for f in result.findings if f.id == "nccl.ib-completion-error")
    assert found.severity is Severity.WARNING and found.action.value != "drain-and-repair"


def test_a_healthy_clocks_section_raises_nothing() -> None:
    text = (FRAGMENTS / "clocks-throttle-section-healthy.txt").read_text()
    for variant in (text, "\n".join(text.splitlines()[1:])):  # with and without its prompt
        result = judge(variant)
        assert not [f for f in result.findings if f.severity >= Severity.WARNING]


# -- one record under every framing -------------------------------------------------------
FRAMED_XID = {
    "markdown quote": f"> {DMESG79}",
    "nested quote": f"> > {DMESG79}",
    "container runtime": f"2025-01-17T15:36:15.123456789Z stdout F {DMESG79}",
    "kubectl --prefix": f"[pod/nvidia-driver-daemonset-x7k2p/nvidia-driver-ctr] {DMESG79}",
    "docker json-file": json.dumps({"log": DMESG79 + "\n", "stream": "stdout",
                                    "time": "2025-01-17T15:36:15.1Z"}),
    "elasticsearch hit": json.dumps({"_source": {"@timestamp": "2025-01-17T15:36:15Z",
                                                 "message": DMESG79}}),
    "cloud logging": json.dumps({"textPayload": DMESG79, "severity": "ERROR"}),
    "logcli": f'2025-01-17T15:36:15Z {{host="gpu-node-7", unit="kernel"}} {DMESG79}',
    "dmesg -x iso": f"kern  :err   : 2025-01-17T15:36:15,345059+00:00 {XID79}",
    "logread": f"Fri Jan 17 15:36:15 2025 kern.err kernel: {DMESG79}",
}


@pytest.mark.parametrize("framing", sorted(FRAMED_XID))
def test_an_xid_is_read_in_any_framing_and_quoted_as_pasted(framing: str) -> None:
    pasted = FRAMED_XID[framing]
    result = judge(pasted + "\n")
    assert "xid.79" in ids(result)
    assert pasted in evidence_lines(result, "xid.79")


RUNS = {  # framings that count only over two lines that agree
    "grep -n": ["812:{0}", "815:{1}"],
    "cat -n": ["   812\t{0}", "   813\t{1}"],
    "editor": [" 812 | {0}", " 813 | {1}"],
    "grep over files": ["/var/log/kern.log:Jan 17 15:36:15 gpu-node-7 kernel: {0}",
                        "/var/log/kern.log:Jan 17 15:36:16 gpu-node-7 kernel: {1}"],
    "pdsh": ["gpu-node-07: {0}", "gpu-node-07: {1}"],
}


@pytest.mark.parametrize("framing", sorted(RUNS))
def test_run_framings_are_taken_off_a_run_of_lines(framing: str) -> None:
    second = "[ 1843.308200] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."
    lines = [template.format(DMESG79, second) for template in RUNS[framing]]
    result = judge("\n".join(lines) + "\n")
    assert "xid.79" in ids(result)
    assert lines[0] in evidence_lines(result, "xid.79")


def test_nccl_warn_lines_of_a_pod_log_are_nccl_records() -> None:
    for pasted in (f"2025-01-17T15:36:15.1Z stderr F {NCCL_WARN}",
                   f"[pod/trainer-0/pytorch] {NCCL_WARN}",
                   json.dumps({"log": NCCL_WARN + "\n", "stream": "stderr"})):
        assert "nccl.ib-completion-error" in ids(judge(pasted + "\n"))


def test_a_service_s_journal_json_is_read_as_its_syslog_line() -> None:
    record = {"__REALTIME_TIMESTAMP": "1737128175345059", "_HOSTNAME": "gpu-node-7",
              "SYSLOG_IDENTIFIER": "nv-fabricmanager", "_PID": "4177",
              "MESSAGE": "request to query NVSwitch device information from NVSwitch driver "
                         "failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]"}
    result = judge(json.dumps(record) + "\n")
    assert "fabric.manager-not-needed" in ids(result)
    assert not [f for f in result.findings if f.severity is Severity.CRITICAL]


# -- nvidia-smi -q sections at any indentation ---------------------------------------------
ECC = """\
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 12
            DRAM Uncorrectable            : 3
        Aggregate
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 40
            DRAM Uncorrectable            : 3
"""
THERMAL = """\
        Clocks Event Reasons
            Idle                              : Not Active
            SW Power Cap                      : Not Active
            HW Slowdown                       : Active
                HW Thermal Slowdown           : Active
                HW Power Brake Slowdown       : Not Active
            SW Thermal Slowdown               : Not Active
"""
GPU_BLOCK = """\
    Product Name                          : NVIDIA H100 80GB HBM3
    Product Brand                         : NVIDIA
    Persistence Mode                      : Enabled
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 1
        Pending                           : No
        Remapping Failure Occurred        : Yes
"""


@pytest.mark.parametrize("text, finding_id", [
    (ECC, "memory.uncorrectable"),
    (THERMAL, "clocks.hw-thermal-slowdown"),
    (GPU_BLOCK, "memory.remap-failed"),
    ("".join(f"> {ln}\n" for ln in GPU_BLOCK.splitlines()), "memory.remap-failed"),
    ("".join(f"gpu-node-07: {ln}\n" for ln in ECC.splitlines()), "memory.uncorrectable"),
])
def test_a_section_without_its_gpu_header_is_judged(text: str, finding_id: str) -> None:
    result = judge(text)
    assert finding_id in ids(result)
    assert any("could not be told" in n for n in result.not_read)


def test_a_section_under_its_gpu_header_names_the_gpu() -> None:
    text = "GPU 00000000:3B:00.0\n" + GPU_BLOCK
    result = judge(text)
    found = next(f for f in result.findings if f.id == "memory.remap-failed")
    assert "0000:3b:00.0" in found.title and not result.not_read


# -- what is content, not framing ------------------------------------------------------------
@pytest.mark.parametrize("lines", [
    ["15:36:15 INFO started", "16:01:02 INFO stopped"],  # times, not grep -n numbers
    ["ib0: link up", "ib0: link down"],  # an interface, not a host
    ["NVRM: GPU at PCI:0000:3b:00: GPU-0a1b", "NVRM: Xid (PCI:0000:3b:00): 79"],
    ["     8             2     float     sum      -1    10.39    0.00    0.00      0",
     "    16             4     float     sum      -1    10.10    0.00    0.00      0"],
    ["  24:          0          0   PCI-MSI 1 nvidia", "  25:          0          0   PCI-MSI 2"],
    ["/usr/bin/nvidia-smi: error while loading shared libraries: libnvidia-ml.so.1"],
    ["12: only one numbered line"],
    ['{"level":"info","ts":"2025-06-05T18:00:13Z","caller":"x.go:1"}'],  # no message field
])
def test_content_that_looks_framed_is_left_alone(lines: list[str]) -> None:
    payloads, taken = unframe_lines(lines)
    assert payloads == lines and not any(taken)


def test_text_with_nothing_recognisable_is_still_unrecognised() -> None:
    with pytest.raises(InputError, match="unrecognised content"):
        load_text("> we rebooted the node and it works now\n> thanks!\n", "paste")


_FRAMED_LINES = [line for text in FRAMED_XID.values() for line in text.splitlines()]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_FRAMED_LINES), st.sampled_from([DMESG79, XID79]),
                          st.text(max_size=30)), max_size=12))
def test_the_quick_look_for_a_framing_finds_what_a_line_start_search_finds(
        lines: list[str]) -> None:
    """The look before any line is read (each line's start after its newline) finds a
    framing's start where the multiline search it replaced ("^" at every line) does."""
    multiline = re.compile("(?m)^" + framing._STARTS)
    joined = "\n".join(lines)
    assert bool(framing._ANY.search("\n" + joined)) == bool(multiline.search(joined))
