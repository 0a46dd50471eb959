"""DCGM's host and exporter inputs: dcgmi discovery / health / nvlink, dcgm-exporter's
metrics and log, nv-hostengine's log. Each parser on every corpus capture of its family
(the numbers asserted), on the fixtures of tests/fixtures/dcgm, and on bad input."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from gputriage.errors import ParseError
from gputriage.ingest.detect import detect
from gputriage.parsers.dcgm_exporter import parse_exporter_log, parse_metrics
from gputriage.parsers.dcgmi import parse_discovery, parse_health, parse_nvlink, parse_version
from gputriage.parsers.nv_hostengine import parse_hostengine_log

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"


def _piece(text: str, source: str) -> str:
    found = dict(detect(text))
    assert source in found, sorted(found)
    return found[source]


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- dcgmi ------------------------------------------------------------------------------------
def test_discovery_h800(corpus) -> None:
    d = parse_discovery(_piece(corpus.sample("discovery-l-8x-h800-healthy").text(),
                               "dcgmi_discovery"))
    assert (d.gpu_count, d.switch_count, len(d.gpus)) == (8, 0, 8)
    assert d.gpus[0].name == "NVIDIA H800" and d.gpus[0].bus_id == "0000:18:00.0"
    assert d.gpus[7].uuid == "GPU-474d838c-171f-d249-4f45-bbc01a8eb74a"


def test_discovery_b300_seven_gpus_and_cpus(corpus) -> None:
    d = parse_discovery(_piece(corpus.sample("xe9780-b300-dcgm-service-inactive").text(),
                               "dcgmi_discovery"))
    assert (d.gpu_count, d.switch_count, d.cpu_count) == (7, 0, 0)
    assert d.bus_ids[3] == "0001:1a:00.0" and d.gpus[6].name == "NVIDIA B300 SXM6 AC"


def test_dcgmi_cannot_reach_the_host_engine() -> None:
    text = ("Error: unable to establish a connection to the specified host: localhost\n"
            "Error: Unable to connect to host engine. Host engine connection "
            "invalid/disconnected.\n")
    assert parse_discovery(text).gpu_count is None
    assert len(parse_discovery(text).hostengine_error) == 2
    assert parse_health(text).hostengine_error


def test_version() -> None:
    assert parse_version("dcgmi  version: 3.3.9\n") == "3.3.9"
    assert parse_version("Version : 4.2.3\nBuild ID : 14\n") == "4.2.3"
    with pytest.raises(ParseError):
        parse_version("command not found\n")


def test_health_tree_layout_with_failures() -> None:
    h = parse_health(_piece(_fixture("b-health-c-failures.txt"), "dcgmi_health"))
    assert h.overall == "failure"
    assert [(i.entity_id, i.system, i.health) for i in h.incidents] == [
        (2, "Memory", "failure"), (5, "PCIe", "warning")]
    assert "double-bit ECC error" in h.incidents[0].message
    assert h.incidents[1].message.endswith("verify hops off the GPU board.")


def test_health_old_layout() -> None:
    h = parse_health(_piece(_fixture("b-health-c-old-layout.txt"), "dcgmi_health"))
    assert h.overall == "warning"
    [inc] = h.incidents
    assert (inc.entity, inc.entity_id, inc.system, inc.health) == ("GPU", 0, "NVLINK", "warning")
    assert inc.message.startswith("Detected NvLink CRC error") and "link 3" in inc.message


def test_health_healthy_and_watches_off() -> None:
    h = parse_health(_fixture("b-health-c-healthy.txt"))
    assert h.overall == "healthy" and not h.incidents
    off = parse_health("Error: Health watches not enabled. Please enable watches. \n")
    assert off.error and off.error.startswith("Error: Health watches not enabled")


def test_nvlink_link_status_all_down(corpus) -> None:
    r = parse_nvlink(_piece(corpus.sample("dcgm198-dcgmi-nvlink-link-status").text(),
                            "dcgmi_nvlink"))
    assert sorted(r.gpu_links) == [0, 1] and r.no_switches
    assert all(st == ["D"] * 18 for st in r.gpu_links.values())


def test_nvlink_error_counters() -> None:
    r = parse_nvlink(_piece(_fixture("b-nvlink-e-g0-recovery.txt"), "dcgmi_nvlink"))
    assert r.errors[0][2] == {"CRC FLIT Error": 37, "CRC Data Error": 0, "Replay Error": 5,
                              "Recovery Error": 1}
    assert r.errors[0][0]["CRC FLIT Error"] == 0 and len(r.error_lines[0]) == 3


def test_health_of_a_connectx_is_not_a_gpus() -> None:
    text = _fixture("b-health-c-failures.txt").replace("| GPU                       |",
                                                       "| ConnectX                  |")
    h = parse_health(text)
    assert [(i.entity, i.entity_id) for i in h.incidents] == [("ConnectX", 2), ("ConnectX", 5)]


BIG = "9" * 5000


@pytest.mark.parametrize(("parse", "text"), [
    (parse_discovery, f"{BIG} GPUs found.\n"),
    (parse_discovery, f"1 GPU found.\n| {BIG} | Name: NVIDIA H100 |\n"),
    (parse_health, f"| Health Monitor Report |\n| GPU ID: {BIG} |\n| PCIe system: Warning |\n"),
    (parse_health, f"| Health Monitor Report |\n| -> {BIG} | Warning |\n"),
    (parse_nvlink, f"GPUs:\n    gpuId {BIG}:\n        U U\n"),
    (parse_nvlink, f"| GPU {BIG} |\n| Link 0 | CRC FLIT Error => 1 |\n"),
    (parse_nvlink, f"| GPU 0 |\n| Link {BIG} | CRC FLIT Error => 1 |\n"),
    (parse_nvlink, f"| GPU 0 |\n| Link 0 | CRC FLIT Error => {BIG} |\n"),
    (parse_metrics, f'DCGM_FI_DEV_XID_ERRORS{{gpu="0"}} {BIG}\n'),
    (parse_metrics, 'DCGM_FI_DEV_XID_ERRORS{gpu="²"} 79\n')])
def test_numbers_out_of_range_never_crash(parse, text: str) -> None:
    """int() refuses more than 4300 digits and '²' (which str.isdigit() accepts)."""
    with contextlib.suppress(ParseError):
        parse(text)


def test_metrics_skip_values_that_are_no_number() -> None:
    text = ('DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-1"} NaN\n'
            'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",UUID="GPU-1"} +Inf\n'
            'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40\n')
    m = parse_metrics(text)
    assert m.non_finite == 2 and m.gpus[0].values == {"DCGM_FI_DEV_GPU_TEMP": 40.0}
    assert m.gpus[0].index == 0


@pytest.mark.parametrize("parse", [parse_discovery, parse_health, parse_nvlink,
                                   parse_metrics, parse_exporter_log, parse_hostengine_log])
@pytest.mark.parametrize("text", ["", "garbage\n\x00\xff line\n", "| a | b |\n+---+\n"])
def test_garbage_is_a_parse_error(parse, text) -> None:
    with pytest.raises(ParseError):
        parse(text)


# --- dcgm-exporter ------------------------------------------------------------------------
def test_metrics_mig_instances(corpus) -> None:
    m = parse_metrics(_piece(corpus.sample("exporter-metrics-a30-mig-1g6gb").text(),
                             "dcgm_exporter_metrics"))
    assert len(m.gpus) == 6 and {g.mig_instance for g in m.gpus} == {"3", "4", "5", "6"}
    assert all(g.values["DCGM_FI_DEV_XID_ERRORS"] == 0 for g in m.gpus)
    assert m.gpus[4].gpu == "1" and m.gpus[4].mig_profile == "1g.6gb"


def test_metrics_vgpu(corpus) -> None:
    m = parse_metrics(_piece(corpus.sample("exporter-metrics-vgpu-grid-a100").text(),
                             "dcgm_exporter_metrics"))
    [g] = m.gpus
    assert g.bus_id == "0000:03:00.0" and g.model == "GRID A100-8C"
    assert g.values["DCGM_FI_DEV_FB_FREE"] == 7531 and g.values["DCGM_FI_DEV_SM_CLOCK"] == 1410
    assert g.labels["DCGM_FI_DEV_XID_ERRORS"]["err_msg"] == "No Error"


def test_metrics_eight_gpus_with_faults() -> None:
    m = parse_metrics(_piece(_fixture("b-metrics-8x-h100-faults.txt"), "dcgm_exporter_metrics"))
    assert len(m.gpus) == 8 and m.unreadable == 0
    by = {g.gpu: g.values for g in m.gpus}
    assert by["3"]["DCGM_FI_DEV_XID_ERRORS"] == 79
    assert by["1"]["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 1
    assert by["2"]["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 1
    assert by["5"]["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"] == 4210
    assert m.gpus[2].bus_id == "0000:3a:00.0"


def test_metrics_truncated_last_line_keeps_the_rest() -> None:
    text = _fixture("b-metrics-8x-h100-faults.txt")
    cut = text[: text.rindex("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu=\"7\"") + 60]
    m = parse_metrics(cut)
    assert m.unreadable == 1 and len(m.gpus) == 8
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" not in m.gpus[7].values
    assert m.gpus[6].values["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == 0


@pytest.mark.parametrize(("part", "events"), [
    ("dcgm-exporter-cannot-connect-hostengine",
     ["started", "remote-hostengine", "hostengine-unreachable"]),
    ("dcgm-exporter-dcp-module-not-loaded",
     ["started", "started", "dcp-unavailable", None, "dcp-unavailable", "dcp-unavailable",
      "dcp-unavailable", "dcp-unavailable", "dcp-unavailable"]),
    ("dcgm-exporter-stale-metrics", ["collect-failed", "collect-failed"]),
])
def test_exporter_log_events(corpus, part, events) -> None:
    log = parse_exporter_log(_piece(corpus.sample(part).text(), "dcgm_exporter_log"))
    assert [e.event for e in log.entries] == events


def test_exporter_log_compose_prefix_and_csv_error(corpus) -> None:
    log = parse_exporter_log(_piece(corpus.sample("dcgm-exporter-metrics-csv-wrong-fields").text(),
                                    "dcgm_exporter_log"))
    assert len(log.entries) == 12
    bad = log.of("metrics-file-invalid")
    assert len(bad) == 4 and bad[1].level == "fatal"
    assert log.entries[0].time == "2025-05-22T03:57:31Z"


def test_exporter_log_remote_address(corpus) -> None:
    log = parse_exporter_log(_piece(corpus.sample("dcgm-exporter-cannot-connect-hostengine")
                                    .text(), "dcgm_exporter_log"))
    assert log.of("remote-hostengine")[0].detail == "localhost:5555"
    assert log.of("hostengine-unreachable")[0].level == "fatal"


def test_legacy_exporter_script(corpus) -> None:
    log = parse_exporter_log(_piece(corpus.sample("old-dcgm-exporter-fails-tesla-k80").text(),
                                    "dcgm_exporter_log"))
    assert len(log.entries) == 7
    assert [e.event for e in log.of("legacy-start", "legacy-hostengine-stopped")] == [
        "legacy-start", "legacy-start", "legacy-hostengine-stopped", "legacy-hostengine-stopped"]


# --- nv-hostengine ------------------------------------------------------------------------
def test_hostengine_debug_log(corpus) -> None:
    log = parse_hostengine_log(_piece(corpus.sample("nv-hostengine-debug-log-cannot-init-nvml")
                                      .text(), "nv_hostengine_log"))
    assert len(log.entries) == 4 and log.version == "2.3.1"
    assert [e.event for e in log.entries] == [None, None, "nvml-init-failed", "init-failed"]
    assert log.entries[2].message == ("Cannot initialize the hostengine: Error: Failed to "
                                      "initialize NVML")


def test_hostengine_journal_and_dcgmi_errors(corpus) -> None:
    log = parse_hostengine_log(_piece(corpus.sample("xe9780-b300-dcgm-service-inactive").text(),
                                      "nv_hostengine_log"))
    assert log.version == "3.3.9" and [e.event for e in log.entries] == ["started", "started"]
    err = parse_hostengine_log(_piece(corpus.sample("nv-hostengine-nvml-fail-gpu-err-state")
                                      .text(), "nv_hostengine_log"))
    assert [e.event for e in err.entries] == ["unreachable", "unreachable"]


def test_xid45_rack_totals_are_an_xid_count_table(corpus) -> None:
    """An NVSentinel comment's table of per-node XID 45 totals: no DCGM detector claims
    it; it is a table of one Xid's counts (tests/test_rules_xid_counts.py), its prose is
    left unread."""
    found = detect(corpus.sample("xid45-counts-rack-nvl72").text())
    assert [name for name, _ in found] == ["xid_counts"]
    assert found[0][1].count("r06-") == 17
