"""Tests for gputriage.parsers.fabricmanager (fabric manager log and journal)."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.fabricmanager import parse_fabricmanager_log

FM_LOG = """\
[Mar 14 2024 10:00:00] [INFO] [tid 1234] Fabric Manager version 550.54.15 is running with the following configuration options
[Mar 14 2024 10:00:05] [INFO] [tid 1234] Successfully configured all the available NVSwitches to route GPU NVLink traffic.
[Mar 14 2024 11:00:00] [ERROR] [tid 1240] detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id 00000000:07:00.0 physical id 2 port 12
[Mar 14 2024 11:00:01] [ERROR] [tid 1240] failed to setup multicast team for request id 42
Message payload details: Team setup request
[Mar 14 2024 11:00:02] [WARNING] [tid 1240] something to keep an eye on
"""

JOURNAL_ISO = """\
-- Boot 3f2a --
2024-03-14T10:00:00+0000 node7 systemd[1]: Starting NVIDIA fabric manager service...
2024-03-14T10:00:01+0000 node7 nv-fabricmanager[2211]: fabric manager NVLink version 550.54 does not match the driver version 550.90
2024-03-14T10:00:01+0000 node7 systemd[1]: nvidia-fabricmanager.service: Main process exited, code=exited, status=1/FAILURE
2024-03-14T10:00:01+0000 node7 systemd[1]: Failed to start NVIDIA fabric manager service.
"""


def test_log_file_levels_events_and_details():
    log = parse_fabricmanager_log(FM_LOG)
    assert log.formats == {"log"}
    assert [e.level for e in log.entries] == ["info", "info", "error", "error", "warning"]
    configured, fatal, multicast = log.entries[1], log.entries[2], log.entries[3]
    assert configured.event == "configured" and configured.time == "Mar 14 2024 10:00:05"
    assert fatal.event == "nvswitch-fatal" and fatal.nvswitch == "0000:07:00.0"
    assert fatal.code == "20034" and fatal.port == 12
    assert multicast.event == "multicast-error"
    assert multicast.line.endswith("Message payload details: Team setup request")
    assert [e.event for e in log.errors] == ["nvswitch-fatal", "multicast-error"]
    assert log.last_lifecycle is configured


def test_journal_short_iso_and_lifecycle():
    log = parse_fabricmanager_log(JOURNAL_ISO)
    assert log.formats == {"journal"}
    assert [e.event for e in log.entries] == ["starting", "version-mismatch", "start-failed",
                                              "start-failed"]
    assert log.entries[1].program == "nv-fabricmanager" and log.entries[1].level == "error"
    assert log.last_lifecycle.event == "start-failed"


def test_localised_month_and_bare_lines_with_continuations():
    log = parse_fabricmanager_log(
        "11月 15 14:15:47 leon nv-fabricmanager[4177]: request to query NVSwitch device "
        "information from NVSwitch driver failed with error:WARNING Nothing to do "
        "[NV_WARN_NOTHING_TO_DO]\n"
        "$ sudo systemctl start nvidia-fabricmanager\n"
        "nvidia-fabricmanager-start.sh: Detected Pre-NVL5 system\n"
        "nv-fabricmanager: request to query NVSwitch device information failed:\n"
        "  WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]\n")
    assert [e.event for e in log.entries] == ["nothing-to-do", "pre-nvl5", "nothing-to-do"]
    assert log.entries[0].time == "11月 15 14:15:47"
    assert log.entries[2].level == "warning"
    assert log.entries[2].line.count("\n") == 1
    assert log.formats == {"journal", "bare"}


def test_job_failed_line_from_systemctl():
    log = parse_fabricmanager_log(
        "Job for nvidia-fabricmanager.service failed because the control process exited "
        "with error code.\n")
    assert log.entries[0].program == "systemctl" and log.entries[0].event == "start-failed"


def test_empty_no_entries_and_malformed():
    assert parse_fabricmanager_log("").entries == []
    assert parse_fabricmanager_log("-- No entries --\n").entries == []
    with pytest.raises(ParseError):
        parse_fabricmanager_log("GPU 0: NVIDIA A100 (UUID: GPU-1)\n\t Link 0: 25 GB/s\n")


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=2000))
def test_parser_returns_a_result_or_parse_error(text):
    with contextlib.suppress(ParseError):
        parse_fabricmanager_log(text)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(FM_LOG.splitlines() + JOURNAL_ISO.splitlines()
                                + ["  continued", "", "[x] [y]", "nv-fabricmanager:",
                                   "Sep 18 03:19:01 h p[1]: NVSwitch pci bus id zz:zz fatal"]),
                max_size=30))
def test_parser_on_shuffled_real_lines(lines):
    with contextlib.suppress(ParseError):
        parse_fabricmanager_log("\n".join(lines))


# --- real captures ---------------------------------------------------------------------

def _fm_samples(corpus):
    return [s for s in corpus.category("8") if "fabricmanager" in s.name]


def test_every_fabric_manager_sample_parses(corpus):
    samples = _fm_samples(corpus)
    assert len(samples) >= 5
    for sample in samples:
        log = parse_fabricmanager_log(sample.text())
        assert log.entries, sample.name


@pytest.mark.parametrize("part", ["cubestudio29", "gpuop610", "lambda-h100-sxm"])
def test_nothing_to_do_samples(corpus, part):
    log = parse_fabricmanager_log(corpus.sample(part).text())
    assert log.having("nothing-to-do"), [e.event for e in log.entries]


def test_gpud_log_multicast_info_and_one_nonfatal_error(corpus):
    log = parse_fabricmanager_log(corpus.sample("gpud-fabricmanager-log").text())
    assert log.formats == {"log"}
    errors = log.errors
    assert len(errors) == 1
    assert errors[0].event == "nvswitch-nonfatal" and errors[0].code == "12028"
    assert errors[0].nvswitch == "0000:86:00.0" and errors[0].port == 61
    assert len(log.entries) > 20


def test_nvtrust128_restart_failed_after_earlier_success(corpus):
    log = parse_fabricmanager_log(corpus.sample("nvtrust128").text())
    assert log.having("configured") and log.having("stopped")
    job = [e for e in log.entries if e.program == "systemctl"]
    assert job and job[0].event == "start-failed"


def test_xe9780_status_journal_lines_show_success(corpus):
    log = parse_fabricmanager_log(corpus.sample("xe9780-b300-systemctl-status").text())
    assert log.having("configured") and not log.errors
    assert log.last_lifecycle.event == "started"
