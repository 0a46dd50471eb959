"""nvidia-smi --query-* CSV outputs: parser and detection, on hand-written fixtures."""

from __future__ import annotations

import pytest

from gputriage.errors import ParseError
from gputriage.ingest.detect import detect
from gputriage.parsers.nvsmi_csv import parse_nvsmi_csv

HEADER_UNITS = """\
index, name, pci.bus_id, driver_version, pstate, utilization.gpu [%], memory.total [MiB], \
memory.used [MiB], temperature.gpu, power.draw [W], pcie.link.gen.current, pcie.link.gen.max, \
pcie.link.width.current, pcie.link.width.max, ecc.errors.uncorrected.volatile.total
0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 550.54.15, P0, 97 %, 81559 MiB, 70123 MiB, 61, \
612.40 W, 5, 5, 16, 16, 0
1, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 550.54.15, P8, 0 %, 81559 MiB, 1 MiB, 30, \
[N/A], 1, 5, 8, 16, [Not Supported]
"""


def test_header_with_units():
    report = parse_nvsmi_csv(HEADER_UNITS)
    assert report.format == "csv" and report.driver_version == "550.54.15"
    a, b = report.gpus
    assert (a.index, a.pci_bus_id, a.name) == (0, "0000:18:00.0", "NVIDIA H100 80GB HBM3")
    assert (a.utilization_gpu_pct, a.memory_used_mib, a.temperature_c) == (97, 70123, 61)
    assert a.power_draw_w == pytest.approx(612.4) and a.performance_state == "P0"
    assert (b.pcie_gen_current, b.pcie_gen_max, b.pcie_width_current, b.pcie_width_max) == (
        1, 5, 8, 16)
    assert b.power_draw_w is None and b.ecc_volatile_uncorrected is None  # [N/A], unsupported
    assert a.ecc_volatile_uncorrected == 0


def test_noheader_nounits_named_by_the_command_line():
    text = ("$ nvidia-smi --query-gpu=gpu_bus_id,temperature.gpu,utilization.gpu,pstate "
            "--format=csv,noheader,nounits\n00000000:18:00.0, 45, 3, P0\n"
            "00000000:2A:00.0, 39, 0, P8\n")
    assert [n for n, _ in detect(text)] == ["nvidia_smi_csv"]
    body = dict(detect(text))["nvidia_smi_csv"]
    assert body.startswith("$ nvidia-smi --query-gpu")  # the command names the columns
    a, b = parse_nvsmi_csv(body).gpus
    assert (a.pci_bus_id, a.temperature_c, a.utilization_gpu_pct) == ("0000:18:00.0", 45, 3)
    assert b.performance_state == "P8"


def test_noheader_without_command_reads_only_certain_columns():
    text = "00000000:3B:00.0, 535.161.08, 42, 17\n00000000:5E:00.0, 535.161.08, 40, 0\n"
    assert [n for n, _ in detect(text)] == ["nvidia_smi_csv"]
    report = parse_nvsmi_csv(text)
    assert report.driver_version == "535.161.08"
    gpu = report.gpus[0]
    assert gpu.pci_bus_id == "0000:3b:00.0" and gpu.temperature_c is None
    assert gpu.raw["column 3"] == "42" and "inferred" in gpu.raw["columns"]


def test_rows_whose_columns_cannot_be_mapped_are_refused():
    with pytest.raises(ParseError, match="cannot map"):
        parse_nvsmi_csv("42, 17\n40, 0\n")


def test_query_remapped_rows():
    text = ("gpu_bus_id, gpu_uuid, remapped_rows.correctable, remapped_rows.uncorrectable, "
            "remapped_rows.pending, remapped_rows.failure\n"
            "00000000:46:00.0, GPU-1c2d3e4f-aaaa-bbbb-cccc-000000000001, 0, 14, No, No\n"
            "00000000:C7:00.0, GPU-1c2d3e4f-aaaa-bbbb-cccc-000000000002, 2, 1, Yes, No\n")
    assert [n for n, _ in detect(text)] == ["nvidia_smi_csv"]
    a, b = parse_nvsmi_csv(text).gpus
    assert (a.pci_bus_id, a.remapped_uncorrectable, a.remapping_pending) == (
        "0000:46:00.0", 14, False)
    assert (b.remapped_correctable, b.remapping_pending, b.remapping_failure) == (2, True, False)
    assert b.uuid.endswith("0002")


def test_query_retired_pages_counts_real_pages_and_skips_placeholders():
    text = ("gpu_bus_id, retired_pages.address, retired_pages.cause\n"
            "00000000:04:00.0, 0x000000000070a2d4, Double Bit ECC\n"
            "00000000:04:00.0, 0x00000000007f1c00, Single Bit ECC\n"
            "00000000:04:00.0, 0x00000000007f1c80, Single Bit ECC\n"
            "00000000:05:00.0, [N/A], Single Bit ECC\n")
    report = parse_nvsmi_csv(text)
    (gpu,) = report.gpus  # the [N/A] row is a placeholder, not a page of 05:00.0
    assert (gpu.pci_bus_id, gpu.retired_pages_sbe, gpu.retired_pages_dbe) == (
        "0000:04:00.0", 2, 1)
    placeholders = parse_nvsmi_csv("retired_pages.address, retired_pages.cause\n"
                                   "[N/A], Single Bit ECC\n[N/A], Double Bit ECC\n")
    assert placeholders.format == "csv" and not placeholders.gpus


def test_query_compute_apps_with_and_without_rows():
    text = ("$ nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_bus_id "
            "--format=csv\npid, process_name, used_gpu_memory [MiB], gpu_bus_id\n"
            "4121, python3, 30522 MiB, 00000000:18:00.0\n")
    (proc,) = parse_nvsmi_csv(dict(detect(text))["nvidia_smi_csv"]).processes
    assert (proc.pid, proc.name, proc.used_memory_mib, proc.gpu_bus_id) == (
        4121, "python3", 30522, "0000:18:00.0")
    empty = "$ nvidia-smi -i 1 --query-compute-apps=pid,name --format=csv\npid, process_name\n"
    report = parse_nvsmi_csv(dict(detect(empty))["nvidia_smi_csv"])
    assert report.format == "csv" and not report.processes and not report.gpus


def test_a_repeated_query_updates_the_earlier_reading():
    text = ("pcie.link.gen.current, pcie.link.gen.max\n1, 4\n\n"
            "pcie.link.gen.current, pcie.link.gen.max\n4, 4\n")
    (gpu,) = parse_nvsmi_csv(text).gpus
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (4, 4)


def test_bracketed_errors_are_named_fields():
    text = "index, name, temperature.gpu, power.draw [W]\n0, NVIDIA A100, [Unknown Error], " \
           "[GPU requires reset]\n"
    (gpu,) = parse_nvsmi_csv(text).gpus
    assert gpu.raw["error_fields"] == "temperature.gpu,power.draw"
    assert gpu.temperature_c is None


def test_other_csv_is_not_claimed():
    assert detect("name, age\nalice, 30\n") == []
    assert parse_nvsmi_csv("").gpus == []
