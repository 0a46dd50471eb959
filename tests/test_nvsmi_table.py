"""Tests for the plain ``nvidia-smi`` table / ``-L`` parser and ``scan_smi_errors``."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.ingest.detect import detect
from gputriage.parsers.nvsmi import SmiReport, scan_smi_errors
from gputriage.parsers.nvsmi_table import parse_nvsmi_table

FIXTURES = Path(__file__).parent / "fixtures" / "nvsmi"


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_every_category2_sample_parses(corpus) -> None:
    """Category 2 holds the table and other pasted nvidia-smi outputs (CSV queries,
    resets, nvidia-smi nvlink -s): the pieces detected as the table parse with the table
    parser."""
    tables = 0
    for sample in corpus.category("2"):
        pieces = dict(detect(sample.text()))
        if "nvidia_smi" not in pieces:
            assert {"nvidia_smi_csv", "gpu_reset", "nvidia_smi_nvlink_status"} & set(pieces), (
                sample.name, list(pieces))
            continue
        tables += 1
        report = parse_nvsmi_table(pieces["nvidia_smi"])
        assert report.format in {"table", "list", "error", "mig"}, sample.name
        if report.format == "error":
            assert report.errors, sample.name
        elif report.format == "mig":  # nvidia-smi mig -lgi/-lci: instances, not GPU rows
            assert report.mig_devices or report.mig_notes, sample.name
        else:
            assert report.gpus, sample.name
            if "NVIDIA-SMI" in pieces["nvidia_smi"]:  # an excerpt may lack the header
                assert report.driver_version, sample.name
    assert tables >= 15


def test_b300_kmd_header_two_domains(corpus) -> None:
    report = parse_nvsmi_table(corpus.sample("xe9780-b300-only-7").text())
    assert report.format == "table"
    assert report.kmd_version == "610.57.04"
    assert report.driver_version == "610.57.04"
    assert report.cuda_version == "13.3"
    assert len(report.gpus) == 7
    assert [g.index for g in report.gpus] == list(range(7))
    assert {g.pci_bus_id.split(":")[0] for g in report.gpus} == {"0000", "0001"}
    assert report.gpus[3].pci_bus_id == "0001:1a:00.0"
    assert all(g.name == "NVIDIA B300 SXM6 AC" for g in report.gpus)
    assert report.gpus[0].power_limit_w == pytest.approx(1100.0)
    assert report.gpus[0].memory_total_mib == 275040
    assert report.processes == []


def test_aws_p5_persistence_off(corpus) -> None:
    report = parse_nvsmi_table(corpus.sample("aws-p5-rhel9").text())
    assert (report.driver_version, report.cuda_version) == ("570.133.20", "12.8")
    assert report.kmd_version is None
    assert len(report.gpus) == 8
    assert all(g.persistence_mode is False for g in report.gpus)
    assert all(g.ecc_volatile_uncorrected == 0 for g in report.gpus)
    gpu = report.gpus[2]
    assert gpu.pci_bus_id == "0000:75:00.0"
    assert (gpu.temperature_c, gpu.performance_state) == (26, "P0")
    assert gpu.power_draw_w == pytest.approx(70.0)
    assert (gpu.memory_used_mib, gpu.memory_total_mib) == (0, 81559)
    assert gpu.utilization_gpu_pct == 0
    assert gpu.mig_mode_current == "Disabled"


def test_rtx3090_530_layout_in_pod_no_processes(corpus) -> None:
    report = parse_nvsmi_table(corpus.sample("nolebase-4x-rtx3090").text())
    assert report.driver_version == "530.30.02"
    assert len(report.gpus) == 4
    assert report.processes == []
    gpu = report.gpus[0]
    assert gpu.name == "NVIDIA GeForce RTX 3090"
    assert gpu.persistence_mode is True
    assert gpu.ecc_volatile_uncorrected is None
    assert gpu.raw["fan"] == "33%"
    assert (gpu.power_draw_w, gpu.power_limit_w) == (22.0, 350.0)


def test_h100_table_no_running_processes(corpus) -> None:
    report = parse_nvsmi_table(corpus.sample("thamada-8x-h100-sxm-565").text())
    assert len(report.gpus) == 8
    assert report.processes == []
    assert report.gpus[5].pci_bus_id == "0000:ab:00.0"


@pytest.mark.parametrize(("name", "bus"), [
    ("xxd3vin19", "0000:0b:00.0"),
    ("gpud-sxid-readme-unable-to-determine", "0000:91:00.0"),
    ("syno22", "0000:07:00.0"),
    ("nvdocker1553", "0000:09:00.0"),
])
def test_device_handle_samples(corpus, name: str, bus: str) -> None:
    report = parse_nvsmi_table(corpus.sample(name).text())
    assert report.format == "error"
    (err,) = report.errors
    assert (err.kind, err.bus_id, err.reason) == ("device-handle", bus, "Unknown Error")


def test_no_devices_sample(corpus) -> None:
    report = parse_nvsmi_table(corpus.sample("ogkm862").text())
    assert report.format == "error"
    assert [e.kind for e in report.errors] == ["no-devices"]


def test_nvml_init_unknown_error_sample(corpus) -> None:
    report = parse_nvsmi_table(corpus.sample("nvctk1227").text())
    assert report.format == "error"
    (err,) = report.errors
    assert (err.kind, err.reason) == ("nvml-init", "Unknown Error")


def test_old_470_layout_with_processes() -> None:
    report = parse_nvsmi_table(_fixture("table-470-old-layout-processes.txt"))
    assert (report.driver_version, report.cuda_version) == ("470.182.03", "11.4")
    assert len(report.gpus) == 2
    first, second = report.gpus
    assert first.name == "Tesla V100-SXM2..." and first.raw["name_truncated"] == "yes"
    assert (first.persistence_mode, second.persistence_mode) == (True, False)
    assert first.ecc_volatile_uncorrected == 2 and second.ecc_volatile_uncorrected is None
    assert (first.memory_used_mib, first.utilization_gpu_pct) == (15012, 87)
    assert second.power_draw_w is None and second.power_limit_w == pytest.approx(300.0)
    assert [(p.gpu_index, p.pid, p.type, p.name, p.used_memory_mib)
            for p in report.processes] == [(0, 21873, "C", "python train.py", 15009),
                                           (0, 2212, "G", "/usr/lib/xorg/Xorg", 3)]


def test_418_layout_without_gi_ci_and_mig_rows() -> None:
    report = parse_nvsmi_table(_fixture("table-418-no-gi-ci.txt"))
    (gpu,) = report.gpus
    assert (gpu.name, gpu.pci_bus_id, gpu.memory_used_mib) == ("Tesla P4", "0000:07:00.0", 513)
    assert gpu.mig_mode_current is None
    (proc,) = report.processes
    assert (proc.pid, proc.name, proc.used_memory_mib, proc.gpu_instance_id) == (
        4242, "ffmpeg", 503, None)


def test_list_output() -> None:
    report = parse_nvsmi_table(_fixture("list-L.txt"))
    assert report.format == "list"
    assert [(g.index, g.name, g.uuid) for g in report.gpus] == [
        (0, "NVIDIA A10", "GPU-11111111-2222-3333-4444-555555555555"),
        (1, "Tesla T4", "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")]


@pytest.mark.parametrize("text", ["", " \n \n", "\r\n"])
def test_empty_input(text: str) -> None:
    report = parse_nvsmi_table(text)
    assert report.format == "table" and report.gpus == [] and report.errors == []


@pytest.mark.parametrize("text", ["garbage\x00\x01", "| a | b | c |\n| d | e | f |",
                                  "Thu May  1 12:48:05 2025\n"])
def test_garbage_raises(text: str) -> None:
    with pytest.raises(ParseError):
        parse_nvsmi_table(text)


# --- scan_smi_errors ---------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "kind", "bus", "reason"), [
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
     "that the latest NVIDIA driver is installed and running.", "driver-communication", None,
     "couldn't communicate with the NVIDIA driver"),
    ("No devices were found", "no-devices", None, "No devices were found"),
    ("Failed to initialize NVML: Unknown Error", "nvml-init", None, "Unknown Error"),
    ("Failed to initialize NVML: Driver/library version mismatch", "version-mismatch", None,
     "Driver/library version mismatch"),
    ("Failed to initialize NVML: Insufficient Permissions", "insufficient-permissions", None,
     "Insufficient Permissions"),
    ("Unable to determine the device handle for GPU0000:91:00.0: Unknown Error",
     "device-handle", "0000:91:00.0", "Unknown Error"),
    ("Unable to determine the device handle for gpu 0000:3B:00.0: GPU is lost.  Reboot the "
     "system to recover this GPU", "gpu-lost", "0000:3b:00.0", "GPU is lost"),
    ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.", "nvml-init", None,
     "could not load NVML library"),
])
def test_scan_smi_errors_kinds(line: str, kind: str, bus: str | None, reason: str) -> None:
    (err,) = scan_smi_errors(f"$ nvidia-smi\r\n{line}\r\n")
    assert (err.kind, err.bus_id, err.reason) == (kind, bus, reason)
    assert err.line == line


def test_scan_version_mismatch_library_version() -> None:
    (err,) = scan_smi_errors("Failed to initialize NVML: Driver/library version mismatch\n"
                             "NVML library version: 550.54\n")
    assert (err.kind, err.nvml_library_version) == ("version-mismatch", "550.54")


def test_table_parser_reports_version_mismatch() -> None:
    report = parse_nvsmi_table("Failed to initialize NVML: Driver/library version mismatch\n"
                               "NVML library version: 550.54\n")
    assert report.format == "error"
    assert report.errors[0].nvml_library_version == "550.54"


def test_scan_ignores_kernel_lines() -> None:
    text = ("Jul 01 22:55:07 gpu kernel: NVRM: GPU 0000:01:00.0: RmInitAdapter failed!\n"
            "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n")
    assert scan_smi_errors(text) == []


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_table_arbitrary_text(text: str) -> None:
    with contextlib.suppress(ParseError):
        assert isinstance(parse_nvsmi_table(text), SmiReport)


_ROW = st.one_of(
    st.sampled_from([
        "| NVIDIA-SMI 550.1  Driver Version: 550.1  CUDA Version: 12.4 |",
        "|   0  NVIDIA H100 On | 00000000:18:00.0 Off | 0 |",
        "| N/A 30C P0 100W / 700W | 1MiB / 81559MiB | 0% Default |",
        "| | | Disabled |", "+---+", "| Processes: |", "| MIG devices: |",
        "|    0   N/A  N/A  12  C  x  1MiB |", "GPU 0: A (UUID: GPU-1)",
        "|  x | 0000:00:00.0 | |", "| 0 | 0:0:0.0 |",
    ]),
    st.text(alphabet="|+-=0123456789 :./%WCMiBPNAOnf", max_size=40),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_ROW, max_size=25))
def test_table_structured_fuzz(lines: list[str]) -> None:
    with contextlib.suppress(ParseError):
        parse_nvsmi_table("\n".join(lines))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_scan_smi_errors_never_raises(text: str) -> None:
    for err in scan_smi_errors(text):
        assert err.kind in {"driver-communication", "no-devices", "device-handle",
                            "version-mismatch", "nvml-init", "gpu-lost",
                            "insufficient-permissions", "other"}
        assert err.line


def test_crlf_table(corpus) -> None:
    text = corpus.sample("thamada-4x-a100").text().replace("\n", "\r\n")
    report = parse_nvsmi_table(text)
    assert [g.pci_bus_id for g in report.gpus] == [
        "0000:68:00.0", "0000:9e:00.0", "0000:c2:00.0", "0000:d4:00.0"]
    assert report.gpus[0].mig_mode_current == "Disabled"


def test_hostile_digit_runs_do_not_escape() -> None:
    digits = "9" * 5000
    text = (f"| NVIDIA-SMI 1  Driver Version: 1  CUDA Version: 1 |\n"
            f"|   0  X On | 00000000:18:00.0 Off | {digits} |\n"
            f"| N/A {digits}C P0 {digits}W / 1W | {digits}MiB / 1MiB | {digits}% x |\n"
            f"| Processes: |\n|  0  {digits}  C  x  {digits}MiB |\n")
    report = parse_nvsmi_table(text)
    assert report.gpus[0].ecc_volatile_uncorrected is None
    assert report.gpus[0].temperature_c is None


ERR_EXCERPT = """\
+-------------------------------+----------------------+----------------------+
|   0  Tesla V100-SXM2...  On   | 00000000:1B:00.0 Off |                    0 |
| N/A   38C    P0    52W / 300W |      0MiB / 16384MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
|   1  Tesla V100-SXM2...  On   | 00000000:1C:00.0 Off |                 ERR! |
|ERR!  41C    P0    ERR! / 300W |      0MiB / 16384MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
"""


def test_err_fields_are_named_and_an_excerpt_without_header_is_detected() -> None:
    assert [n for n, _ in detect(ERR_EXCERPT)] == ["nvidia_smi"]
    report = parse_nvsmi_table(ERR_EXCERPT)
    assert report.driver_version is None
    ok, bad = report.gpus
    assert "error_fields" not in ok.raw
    assert bad.raw["error_fields"].split(",") == ["volatile uncorrectable ECC", "fan",
                                                  "power draw"]
    assert bad.temperature_c == 41 and bad.name == "Tesla V100-SXM2..."
