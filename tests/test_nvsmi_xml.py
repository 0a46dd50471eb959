"""Tests for the ``nvidia-smi -q -x`` parser."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.nvsmi import SmiReport
from gputriage.parsers.nvsmi_xml import parse_nvsmi_xml

FIXTURES = Path(__file__).parent / "fixtures" / "nvsmi"


def test_every_xml_sample_parses(corpus) -> None:
    xml_samples = [s for s in corpus.samples if s.name.endswith(".xml")]
    assert xml_samples
    for sample in xml_samples:
        report = parse_nvsmi_xml(sample.text())
        assert report.format == "xml", sample.name
        assert report.gpus, sample.name


def test_telegraf_a10g_pcie_x8_and_idle(corpus) -> None:
    report = parse_nvsmi_xml(corpus.sample("telegraf-a10g").text())
    assert report.driver_version == "515.105.01"
    assert report.cuda_version == "11.7"
    assert report.attached_gpus == 1
    (gpu,) = report.gpus
    assert gpu.pci_bus_id == "0000:00:1e.0"
    assert gpu.name == "NVIDIA A10G"
    assert (gpu.pcie_gen_current, gpu.pcie_width_current) == (1, 8)
    assert (gpu.pcie_gen_max, gpu.pcie_width_max) == (4, 16)
    assert gpu.clock_event_reasons["gpu_idle"] is True
    assert gpu.clock_event_reasons["hw_slowdown"] is False
    assert gpu.performance_state == "P8"
    assert gpu.virtualization_mode == "Pass-Through"
    assert gpu.ecc_mode is True
    assert (gpu.remapped_uncorrectable, gpu.remapping_pending) == (0, False)
    assert gpu.raw["remapped_rows/row_remapper_histogram/row_remapper_histogram_max"] == (
        "192 bank(s)")
    assert gpu.retired_pages_sbe is None  # N/A on Ampere
    (proc,) = gpu.processes
    assert (proc.pid, proc.type, proc.name, proc.used_memory_mib) == (
        725, "G", "/usr/lib/xorg/Xorg", 22)


def test_netdata_p100_pascal_ecc_schema(corpus) -> None:
    (gpu,) = parse_nvsmi_xml(corpus.sample("netdata-tesla-p100").text()).gpus
    assert gpu.architecture == "Pascal"
    assert gpu.ecc_aggregate_corrected == 3
    assert gpu.ecc_aggregate_uncorrected == 0
    assert gpu.ecc_volatile_corrected == 0
    assert (gpu.retired_pages_sbe, gpu.retired_pages_dbe) == (0, 0)
    assert gpu.retired_pages_pending is False
    assert gpu.remapped_uncorrectable is None
    assert (gpu.temp_shutdown_c, gpu.temp_slowdown_c) == (85, 82)
    assert gpu.power_limit_w == pytest.approx(250.0)
    assert gpu.persistence_mode is False
    assert gpu.processes == []
    assert not any(k.startswith("supported_clocks") for k in gpu.raw)


def test_new_schema_event_reasons_fabric_sram() -> None:
    text = (FIXTURES / "xml-565-event-reasons-fabric.xml").read_text(encoding="utf-8")
    report = parse_nvsmi_xml(text)
    assert len(report.gpus) == 2
    gpu = report.gpus[0]
    assert gpu.clock_event_reasons == {"gpu_idle": False, "hw_slowdown": True,
                                       "sw_thermal_slowdown": True,
                                       "display_clock_setting": False}
    assert (gpu.ecc_volatile_corrected, gpu.ecc_volatile_uncorrected) == (5, 1)
    assert (gpu.ecc_aggregate_corrected, gpu.ecc_aggregate_uncorrected) == (11, 4)
    assert (gpu.remapped_uncorrectable, gpu.remapping_pending) == (1, True)
    assert gpu.fabric_state == "In Progress" and gpu.fabric_status is None
    assert gpu.recovery_action == "None"
    assert gpu.pcie_replays == 7
    assert gpu.power_draw_w == pytest.approx(612.4)
    assert gpu.power_limit_w == pytest.approx(700.0)
    assert gpu.temperature_c == 71 and gpu.temp_shutdown_c is None
    assert gpu.mig_mode_current == "Disabled"
    assert gpu.utilization_gpu_pct == 100
    assert [p.pid for p in gpu.processes] == [4711]
    second = report.gpus[1]
    assert (second.index, second.pci_bus_id) == (1, "0000:2a:00.0")


def test_prompt_and_trailing_junk_are_ignored() -> None:
    text = ("$ nvidia-smi -q -x\n<?xml version=\"1.0\" ?>\n<nvidia_smi_log>"
            "<driver_version>550.54.15</driver_version><gpu id=\"00000000:3B:00.0\">"
            "<product_name>X</product_name></gpu></nvidia_smi_log>\n$ exit\n")
    report = parse_nvsmi_xml(text)
    assert report.driver_version == "550.54.15"
    assert report.gpus[0].pci_bus_id == "0000:3b:00.0"


def test_truncated_xml_raises(corpus) -> None:
    text = corpus.sample("telegraf-a10g").text()
    with pytest.raises(ParseError, match="truncated or malformed nvidia-smi XML"):
        parse_nvsmi_xml(text[: len(text) // 2])


@pytest.mark.parametrize("text", [
    "\x00\x01garbage<<<>>>",
    "just some words",
    "<html><body><p>hello</p></body></html>",
    "<?xml version=\"1.0\"?><nvidia_smi_log><gpu>",
    "<nvidia_smi_log>&undefined;</nvidia_smi_log>",
])
def test_garbage_and_foreign_xml_raise(text: str) -> None:
    with pytest.raises(ParseError):
        parse_nvsmi_xml(text)


def test_billion_laughs_is_refused_quickly() -> None:
    ents = "".join(f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10}">'
                   for i in range(1, 10))
    text = ('<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY lol0 "lol">'
            f"{ents}]>\n<nvidia_smi_log><timestamp>&lol9;</timestamp></nvidia_smi_log>")
    with pytest.raises(ParseError, match="ENTITY"):
        parse_nvsmi_xml(text)


def test_external_entity_is_refused() -> None:
    text = ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
            "<nvidia_smi_log><timestamp>&xxe;</timestamp></nvidia_smi_log>")
    with pytest.raises(ParseError):
        parse_nvsmi_xml(text)


@pytest.mark.parametrize("text", ["", "  \n", "\r\n\t"])
def test_empty_input(text: str) -> None:
    report = parse_nvsmi_xml(text)
    assert report.format == "xml" and report.gpus == [] and report.errors == []


def test_error_message_instead_of_xml() -> None:
    report = parse_nvsmi_xml(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n")
    assert report.format == "error"
    assert report.errors[0].kind == "driver-communication"


def test_version_mismatch_with_library_version() -> None:
    report = parse_nvsmi_xml("Failed to initialize NVML: Driver/library version mismatch\n"
                             "NVML library version: 550.54\n")
    assert report.format == "error"
    (err,) = report.errors
    assert err.kind == "version-mismatch"
    assert err.nvml_library_version == "550.54"
    assert err.line.splitlines() == ["Failed to initialize NVML: Driver/library version mismatch",
                                     "NVML library version: 550.54"]


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_gives_result_or_parse_error(text: str) -> None:
    with contextlib.suppress(ParseError):
        assert isinstance(parse_nvsmi_xml(text), SmiReport)


_TAGS = st.sampled_from(["nvidia_smi_log", "gpu", "pci", "ecc_errors", "volatile", "single_bit",
                         "total", "processes", "process_info", "pid", "clocks_event_reasons",
                         "clocks_event_reason_gpu_idle", "remapped_rows", "fabric", "state"])


@st.composite
def _xmlish(draw: st.DrawFn) -> str:
    parts = ['<?xml version="1.0"?>', "<nvidia_smi_log>"]
    for _ in range(draw(st.integers(0, 12))):
        tag = draw(_TAGS)
        kind = draw(st.integers(0, 3))
        text = draw(st.text(alphabet="0123456789 NA/ActiveMiBx<&", max_size=8))
        parts.append({0: f"<{tag}>", 1: f"</{tag}>", 2: f"<{tag}>{text}</{tag}>",
                      3: f'<{tag} id="{text}">'}[kind])
    if draw(st.booleans()):
        parts.append("</nvidia_smi_log>")
    return "".join(parts)


@settings(max_examples=300, deadline=None)
@given(_xmlish())
def test_xml_shaped_fuzz_gives_result_or_parse_error(text: str) -> None:
    with contextlib.suppress(ParseError):
        parse_nvsmi_xml(text)
