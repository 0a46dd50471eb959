"""Tests for the ``nvidia-smi -q`` text parser and the category-1 corpus walk."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.nvsmi import SmiReport, clock_reason_key
from gputriage.parsers.nvsmi_csv import parse_nvsmi_csv
from gputriage.parsers.nvsmi_text import parse_nvsmi_text
from gputriage.parsers.nvsmi_xml import parse_nvsmi_xml

FIXTURES = Path(__file__).parent / "fixtures" / "nvsmi"


def test_every_category1_sample_parses(corpus) -> None:
    samples = corpus.category("1")
    assert samples, "no category 1 samples"
    for sample in samples:
        # category 1 holds the --query-gpu CSV form of the full query too (netdata's)
        parser = (parse_nvsmi_xml if sample.name.endswith(".xml") else
                  parse_nvsmi_csv if sample.name.endswith(".csv") else parse_nvsmi_text)
        report = parser(sample.text())
        assert isinstance(report, SmiReport), sample.name
        assert report.gpus, f"{sample.name}: no GPU parsed"
        assert not report.errors, f"{sample.name}: {report.errors}"


def test_8x_h100_full_output(corpus) -> None:
    report = parse_nvsmi_text(corpus.sample("thamada-8x-h100-sxm-nvidia-smi-a").text())
    assert report.format == "text"
    assert report.driver_version == "565.57.01"
    assert report.cuda_version == "12.7"
    assert report.attached_gpus == 8
    assert len(report.gpus) == 8
    assert [g.index for g in report.gpus] == list(range(8))
    assert all(g.pci_bus_id for g in report.gpus)
    assert report.gpus[0].pci_bus_id == "0000:18:00.0"
    for gpu in report.gpus:
        assert gpu.persistence_mode is True
        assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (5, 5)
        assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
        assert (gpu.fabric_state, gpu.fabric_status) == ("Completed", "Success")
        assert gpu.recovery_action == "None"
        assert gpu.ecc_volatile_uncorrected == 0
        assert gpu.name == "NVIDIA H100 80GB HBM3"
        assert gpu.clock_event_reasons["gpu_idle"] in (True, False)
    replays = {g.pci_bus_id: g.pcie_replays for g in report.gpus}
    assert replays["0000:18:00.0"] == 7
    assert replays["0000:ab:00.0"] == 4
    assert replays["0000:ba:00.0"] == 15
    assert sum(1 for v in replays.values() if v) == 3


def test_h200_negative_tlimit_temps_and_passthrough(corpus) -> None:
    report = parse_nvsmi_text(corpus.sample("thamada-1x-h200-passthrough").text())
    (gpu,) = report.gpus
    assert gpu.name == "NVIDIA H200"
    assert gpu.virtualization_mode == "Pass-Through"
    assert gpu.temperature_c == 28
    assert gpu.raw["Temperature/GPU Shutdown T.Limit Temp"] == "-8 C"
    assert gpu.raw["Temperature/GPU Slowdown T.Limit Temp"] == "-2 C"
    assert gpu.power_draw_w == pytest.approx(74.58)
    assert gpu.power_limit_w == pytest.approx(700.0)
    assert gpu.memory_total_mib == 143771
    assert gpu.fabric_state == "Completed"
    assert gpu.uuid == "GPU-cb3dfa52-e2f3-9ca4-a399-7d16041c3732"
    assert gpu.processes == []


def test_l40s_idle_gen1(corpus) -> None:
    (gpu,) = parse_nvsmi_text(corpus.sample("thamada-l40s").text()).gpus
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_max) == (1, 4, 16)
    assert gpu.ecc_mode is True
    assert gpu.ecc_aggregate_corrected == 0
    assert gpu.fabric_state is None
    assert gpu.clock_event_reasons["gpu_idle"] is True


def test_rtx_pro_6000_row_remapper_partial(corpus) -> None:
    report = parse_nvsmi_text(corpus.sample("rtxpro6000-blackwell-q-d-row").text())
    (gpu,) = report.gpus
    assert gpu.pci_bus_id == "0000:55:00.0"
    assert gpu.remapped_uncorrectable == 1
    assert gpu.remapped_correctable == 0
    assert gpu.remapping_pending is True
    assert gpu.remapping_failure is False
    assert gpu.raw["Remapped Rows/Bank Remap Availability Histogram/Max"] == "511 bank(s)"


def test_azure_page_retirement_domains(corpus) -> None:
    report = parse_nvsmi_text(corpus.sample("azurehpc-nvsmi-q").text())
    assert len(report.gpus) == 8
    assert report.gpus[7].pci_bus_id == "0008:00:00.0"
    for gpu in report.gpus:
        assert (gpu.retired_pages_sbe, gpu.retired_pages_dbe) == (0, 0)
        assert gpu.retired_pages_pending is False


def test_display_pids_container_process(corpus) -> None:
    (gpu,) = parse_nvsmi_text(corpus.sample("cudackpt22").text()).gpus
    assert gpu.pci_bus_id == "0000:2f:00.0"
    (proc,) = gpu.processes
    assert (proc.gpu_index, proc.pid, proc.type, proc.name, proc.used_memory_mib) == (
        0, 3314482, "C", None, 386)


def test_grep_of_fabric_section_without_gpu_header(corpus) -> None:
    report = parse_nvsmi_text(corpus.sample("aws-p5-h100-fabric-state").text())
    (gpu,) = report.gpus
    assert gpu.pci_bus_id is None
    assert (gpu.fabric_state, gpu.fabric_status) == ("Completed", "Success")


def test_old_driver_throttle_reasons_and_pascal_ecc() -> None:
    text = (FIXTURES / "q-old-470-throttle-pascal-ecc.txt").read_text(encoding="utf-8")
    report = parse_nvsmi_text(text.replace("\n", "\r\n"))
    (gpu,) = report.gpus
    assert report.driver_version == "470.182.03"
    assert gpu.pci_bus_id == "0000:00:1b.0"
    assert gpu.mig_mode_current is None
    assert gpu.clock_event_reasons["sw_power_cap"] is True
    assert gpu.clock_event_reasons["gpu_idle"] is False
    assert gpu.clock_event_reasons["hw_thermal_slowdown"] is False
    assert (gpu.ecc_volatile_corrected, gpu.ecc_volatile_uncorrected) == (5, 2)
    assert (gpu.ecc_aggregate_corrected, gpu.ecc_aggregate_uncorrected) == (12, 2)
    assert (gpu.retired_pages_sbe, gpu.retired_pages_dbe) == (1, 2)
    assert gpu.retired_pages_pending is True
    assert gpu.remapped_uncorrectable is None
    assert (gpu.temp_shutdown_c, gpu.temp_slowdown_c) == (90, 87)
    assert gpu.power_draw_w == pytest.approx(57.12)
    assert gpu.power_limit_w == pytest.approx(300.0)
    assert gpu.utilization_gpu_pct == 87
    assert [(p.pid, p.type, p.name, p.used_memory_mib) for p in gpu.processes] == [
        (21873, "C", "python train.py", 15009), (2212, "G", "/usr/lib/xorg/Xorg", 3)]


def test_wide_key_padding_and_tabs() -> None:
    text = ("GPU 00000000:55:00.0\n"
            "    Remapped Rows\n"
            "        Uncorrectable Error                                          : 2\n"
            "\t\tPending                                                        : No\n")
    (gpu,) = parse_nvsmi_text(text).gpus
    assert gpu.remapped_uncorrectable == 2
    assert gpu.remapping_pending is False


@pytest.mark.parametrize("text", ["", "   \n\t\n", "\r\n"])
def test_empty_input_gives_empty_report(text: str) -> None:
    report = parse_nvsmi_text(text)
    assert report.format == "text"
    assert report.gpus == [] and report.errors == []


@pytest.mark.parametrize("text", [
    "hello world\nthis is not nvidia-smi\n",
    "  random : indented\n  other : thing\n",
    "<nvidia_smi_log><gpu/></nvidia_smi_log>",
    "| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: 12.4 |\n",
])
def test_garbage_raises_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_nvsmi_text(text)


def test_error_message_instead_of_output() -> None:
    text = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n")
    report = parse_nvsmi_text(text)
    assert report.format == "error"
    assert [e.kind for e in report.errors] == ["driver-communication"]


def test_gpu_lost_inside_q_output_is_reported() -> None:
    text = ("Attached GPUs                             : 2\n"
            "GPU 00000000:18:00.0\n"
            "    Product Name                          : NVIDIA H100 80GB HBM3\n"
            "Unable to determine the device handle for gpu 0000:2A:00.0: GPU is lost.  "
            "Reboot the system to recover this GPU\n")
    report = parse_nvsmi_text(text)
    assert report.format == "text"
    assert len(report.gpus) == 1
    (err,) = report.errors
    assert (err.kind, err.bus_id, err.reason) == ("gpu-lost", "0000:2a:00.0", "GPU is lost")


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_gives_result_or_parse_error(text: str) -> None:
    with contextlib.suppress(ParseError):
        assert isinstance(parse_nvsmi_text(text), SmiReport)


@settings(max_examples=200, deadline=None)
@given(st.binary())
def test_arbitrary_bytes_gives_result_or_parse_error(data: bytes) -> None:
    with contextlib.suppress(ParseError):
        parse_nvsmi_text(data.decode("utf-8", errors="replace"))


_LINE = st.one_of(
    st.sampled_from(["GPU 00000000:18:00.0", "==============NVSMI LOG==============",
                     "Driver Version : 550.1", "    Processes", "        Process ID : x",
                     "            Type : C", "    ECC Errors", "        Volatile",
                     "            Single Bit", "                Total : 3",
                     "    Clocks Event Reasons", "        Idle : Active", "    PCI",
                     "        Bus Id : zz", "    Temperature", "  GPU Current Temp : -"]),
    st.text(max_size=30),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, max_size=30))
def test_structured_fuzz_gives_result_or_parse_error(lines: list[str]) -> None:
    with contextlib.suppress(ParseError):
        parse_nvsmi_text("\n".join(lines))


def test_clock_reason_names_normalise_to_one_key() -> None:
    assert clock_reason_key("Idle") == "gpu_idle"
    assert clock_reason_key("clocks_throttle_reason_gpu_idle") == "gpu_idle"
    assert clock_reason_key("clocks_event_reason_gpu_idle") == "gpu_idle"
    assert clock_reason_key("Display Clock Setting") == clock_reason_key(
        "clocks_event_reason_display_clocks_setting")
    assert clock_reason_key("SW Thermal Slowdown") == "sw_thermal_slowdown"


def test_hostile_digit_runs_in_text() -> None:
    digits = "9" * 5000
    text = (f"GPU 00000000:18:00.0\n    Minor Number : {digits}\n    PCI\n"
            f"        GPU Link Info\n            Link Width\n                Max : {digits}x\n"
            f"    GPU Power Readings\n        Power Draw : {digits} W\n")
    (gpu,) = parse_nvsmi_text(text).gpus
    assert (gpu.minor_number, gpu.pcie_width_max, gpu.power_draw_w) == (None, None, None)
