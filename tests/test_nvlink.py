"""Tests for gputriage.parsers.nvlink (nvidia-smi nvlink -s / -e)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.nvlink import counter_kind, parse_nvlink_errors, parse_nvlink_status

STATUS_MIXED = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-1111-2222-3333-444444444444)
\t Link 0: 26.562 GB/s
\t Link 1: <inactive>
\t Link 2: 26.562 GB/s
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-55555555-1111-2222-3333-444444444444)
         Link 0: 26.562 GB/s
         Link 1: 26.562 GB/s
"""

ERRORS_OLD = """\
GPU 0: Tesla V100-SXM2-32GB (UUID: GPU-aaaaaaaa-0000-0000-0000-000000000000)
         Link 0: Replay Errors: 0
         Link 0: Recovery Errors: 0
         Link 0: CRC Errors: 0

         Link 3: Replay Errors: 2353
         Link 3: Recovery Errors: 1
         Link 3: CRC Errors: 65535
GPU 1: Tesla V100-SXM2-32GB (UUID: GPU-bbbbbbbb-0000-0000-0000-000000000000)
         Link 0: Replay Errors: 0
         [...]
"""

ERRORS_NESTED = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-cccccccc-0000-0000-0000-000000000000)
\t Link 0:
\t\t Replay Errors: 0
\t\t Recovery Errors: 2
\t\t CRC Errors: 0
\t\t Effective BER: 1.5e-15
\t Link 1: Tx0: 1000000 KiB
\t Link 1: Rx0: 2000000 KiB
\t Link 1: Data Tx: 14984231343 KiB
"""


def test_status_counts_active_and_inactive_links():
    status = parse_nvlink_status(STATUS_MIXED)
    assert [g.index for g in status.gpus] == [0, 1]
    g0 = status.gpus[0]
    assert g0.name == "NVIDIA H100 80GB HBM3"
    assert g0.uuid == "GPU-00000000-1111-2222-3333-444444444444"
    assert g0.active_links == 2 and g0.inactive_links == [1]
    assert g0.links[0].speed_gbps == pytest.approx(26.562)
    assert "<inactive>" in g0.evidence_lines()[1]
    assert status.gpus[1].active_links == 2 and not status.elided


def test_status_nvml_all_inactive_message():
    status = parse_nvlink_status(
        "GPU 6: NVIDIA A100-SXM4-80GB (UUID: GPU-9)\n"
        "NVML: Unable to retrieve NVLink information as all links are inactive\n")
    gpu = status.gpus[0]
    assert gpu.index == 6 and gpu.all_inactive and gpu.links == []
    assert gpu.messages == ["NVML: Unable to retrieve NVLink information as all links are "
                            "inactive"]


def test_status_message_without_header_and_elision():
    status = parse_nvlink_status("NVML: Unable to retrieve NVLink information as all links "
                                 "are inactive\n")
    assert status.gpus[0].index is None and status.gpus[0].all_inactive
    cut = parse_nvlink_status("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n"
                              "\t Link 0: 25 GB/s\n......\n")
    assert cut.elided and cut.gpus[0].truncated and cut.gpus[0].active_links == 1


def test_status_of_a_card_without_links_lists_the_gpu_only():
    status = parse_nvlink_status("GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-42)\n")
    assert status.gpus[0].links == [] and not status.gpus[0].all_inactive


def test_status_empty_and_malformed():
    assert parse_nvlink_status("").gpus == []
    assert parse_nvlink_status("  \n").gpus == []
    with pytest.raises(ParseError):
        parse_nvlink_status("Mon Jan  1 00:00:00 2024\nhello world\n")


def test_errors_old_layout_keeps_every_counter():
    errs = parse_nvlink_errors(ERRORS_OLD)
    g0, g1 = errs.gpus
    assert g0.counters[3] == {"Replay Errors": 2353, "Recovery Errors": 1, "CRC Errors": 65535}
    assert g0.errors() == {3: {"Replay Errors": 2353, "Recovery Errors": 1,
                               "CRC Errors": 65535}}
    assert "Link 3: CRC Errors: 65535" in g0.lines[3]
    assert g1.truncated and errs.elided and g1.errors() == {}


def test_errors_nested_layout_and_throughput():
    g = parse_nvlink_errors(ERRORS_NESTED).gpus[0]
    assert g.counters[0]["Recovery Errors"] == 2
    assert g.counters[0]["Effective BER"] == pytest.approx(1.5e-15)
    assert g.counters[1]["Tx0"] == 1000000 and g.counters[1]["Data Tx"] == 14984231343
    assert g.errors() == {0: {"Recovery Errors": 2}}  # throughput and BER are not errors


def test_errors_author_summary_of_several_links():
    g = parse_nvlink_errors("GPU 2: Tesla V100-SXM2-32GB-LS (UUID: GPU-d)\n"
                            "         Link 0: CRC Errors: 65535\n"
                            "         Links 1-3, 5: Replay/Recovery/CRC Errors: 0\n").gpus[0]
    assert sorted(g.counters) == [0, 1, 2, 3, 5]
    assert g.counters[5] == {"Replay Errors": 0, "Recovery Errors": 0, "CRC Errors": 0}
    assert g.errors() == {0: {"CRC Errors": 65535}}


def test_counter_kinds():
    assert counter_kind("CRC Errors") == "crc"
    assert counter_kind("CRC Data Errors") == "crc"
    assert counter_kind("Replay Errors") == "replay"
    assert counter_kind("Recovery Errors") == "recovery"
    assert counter_kind("Malformed Packet Errors") == "error"
    assert counter_kind("Tx0") is None and counter_kind("Data Rx") is None
    assert counter_kind("Symbol BER") is None


def test_errors_empty_and_malformed():
    assert parse_nvlink_errors("").gpus == []
    with pytest.raises(ParseError):
        parse_nvlink_errors("<?xml version='1.0'?><nvidia_smi_log/>\n")


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=2000))
def test_parsers_return_a_result_or_parse_error(text):
    for parser in (parse_nvlink_status, parse_nvlink_errors):
        with contextlib.suppress(ParseError):
            parser(text)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)", "\t Link 0: ",
                                 "Link 99999: 1e999 GB/s", "Links 5-1: CRC Errors: x",
                                 "\t\t CRC Errors: 99999999999999999999", "......", "",
                                 "Link 1: <inactive>", "NVML: Unable"]), max_size=30))
def test_parsers_on_shuffled_real_lines(lines):
    text = "\n".join(lines)
    for parser in (parse_nvlink_status, parse_nvlink_errors):
        with contextlib.suppress(ParseError):
            parser(text)


# --- real captures ---------------------------------------------------------------------

def _nvlink_samples(corpus):
    return [s for s in corpus.category("8") if "nvlink" in s.name and "status" in s.name]


def test_every_nvlink_status_sample_parses(corpus):
    samples = _nvlink_samples(corpus)
    assert len(samples) >= 3
    for sample in samples:
        status = parse_nvlink_status(sample.text())
        assert status.gpus, sample.name


def test_gpud_a100_status_has_twelve_links_per_gpu(corpus):
    status = parse_nvlink_status(corpus.sample("gpud-nvidia-smi-nvlink-status").text())
    assert len(status.gpus) == 8
    assert all(g.active_links == 12 and not g.inactive_links for g in status.gpus)
    assert {ln.speed_gbps for g in status.gpus for ln in g.links} == {25.0}


def test_nccltests228_tab_indented_and_elided(corpus):
    status = parse_nvlink_status(corpus.sample("nccltests228-nvlink-status").text())
    assert status.elided
    assert [g.active_links for g in status.gpus[:2]] == [12, 12]
    assert status.gpus[-1].truncated


def test_azurehpc_all_links_inactive(corpus):
    status = parse_nvlink_status(corpus.sample("azurehpc-nvlink-status").text())
    assert len(status.gpus) == 1
    assert status.gpus[0].index == 6 and status.gpus[0].all_inactive
