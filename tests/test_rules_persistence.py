"""nvidia-persistenced's journal: its parser, its paste detector and the rule on a daemon
whose last run ended (``persistence.daemon-stopped``).

``RULE_CASES`` and ``SOURCE_SAMPLES`` are collected by the conformance and source tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from golden import flat
from hostkit import run

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.persistenced import parse_persistenced_journal
from gputriage.text.fields import ParseError
from gputriage.text.prompts import source_for_command

FIXTURES = Path(__file__).parent / "fixtures"
HEALTHY = (FIXTURES / "sources" / "persistenced_journal-healthy.txt").read_text()
SAMPLE = "persistenced2-journal-started"

# systemd's start timeout: the daemon never told it that it had started
TIMED_OUT = """\
2025-06-02T10:00:01+0000 n1 systemd[1]: Starting NVIDIA Persistence Daemon...
2025-06-02T10:00:02+0000 n1 nvidia-persistenced[901]: Started (901)
2025-06-02T10:01:31+0000 n1 systemd[1]: nvidia-persistenced.service: start operation timed out. \
Terminating.
2025-06-02T10:01:31+0000 n1 nvidia-persistenced[901]: Received signal 15
2025-06-02T10:01:31+0000 n1 nvidia-persistenced[901]: Shutdown (901)
2025-06-02T10:01:31+0000 n1 systemd[1]: nvidia-persistenced.service: Failed with result 'timeout'.
2025-06-02T10:01:31+0000 n1 systemd[1]: Failed to start NVIDIA Persistence Daemon.
"""
KILLED = """\
May 31 05:33:20 n1 systemd[1]: Starting NVIDIA Persistence Daemon...
May 31 05:33:40 n1 nvidia-persistenced[19176]: Started (19176)
May 31 05:33:40 n1 nvidia-persistenced[19176]: device 0000:3d:00.0 - registered
May 31 05:33:40 n1 nvidia-persistenced[19175]: Received signal 15
May 31 05:33:41 n1 nvidia-persistenced[19176]: Shutdown (19176)
"""
ACTIVE_UNIT = ("Id=nvidia-persistenced.service\nNames=nvidia-persistenced.service\n"
               "LoadState=loaded\nActiveState=active\nSubState=running\nResult=success\n"
               "UnitFileState=enabled\n")

RULE_CASES = {
    "persistence.journal": [({"persistenced_journal": KILLED}, "persistence.daemon-stopped")],
}
SOURCE_SAMPLES = {
    "persistenced_journal": (f"corpus:{SAMPLE}",
                             "fixture:sources/persistenced_journal-healthy.txt"),
}


def stopped(result) -> list:
    return [f for f in flat(result.findings) if f.id == "persistence.daemon-stopped"]


# --- the parser ------------------------------------------------------------------------
def test_parser_reads_the_runs_events_in_order(corpus) -> None:
    log = parse_persistenced_journal(corpus.sample(SAMPLE).text())
    events = [e.event for e in log.entries if e.event]
    assert events == ["starting", "started", "registered", "signal", "shutdown", "signal",
                      "shutdown"]
    assert log.devices == ["0000:3d:00.0"]
    assert [e.signal for e in log.having("signal")] == [15, 15]
    assert log.entries[0].program == "systemd" and log.entries[3].pid == 19176
    assert [e.event for e in log.ended] == ["signal", "shutdown", "signal", "shutdown"]


def test_parser_a_clean_run_has_not_ended() -> None:
    log = parse_persistenced_journal(HEALTHY)
    assert log.ended == [] and log.devices == ["0000:18:00.0", "0000:2a:00.0"]
    assert log.last_run[0].event == "starting"


def test_parser_a_restart_after_a_failure_opens_a_new_run(corpus) -> None:
    log = parse_persistenced_journal(corpus.sample("ollama11932-persistenced-failed").text())
    assert [e.event for e in log.entries] == ["failed", "failed", "failed", "starting"]
    assert log.ended == []  # the last run is still starting
    assert [e.event for e in parse_persistenced_journal(TIMED_OUT).ended][:1] == ["timeout"]


def test_parser_ignores_other_programs_and_refuses_a_text_without_records() -> None:
    text = "Jun 02 10:00:01 n1 systemd[1]: Started Session 4 of user root.\n"
    with pytest.raises(ParseError):
        parse_persistenced_journal(text)
    assert parse_persistenced_journal("-- No entries --\n").entries == []
    assert parse_persistenced_journal("").entries == []


# --- recognising it --------------------------------------------------------------------
def test_a_paste_of_the_journal_is_recognised(corpus) -> None:
    snap = load_input(str(corpus.sample(SAMPLE).path))
    assert snap.names() == ["persistenced_journal"]
    assert source_for_command("journalctl -u nvidia-persistenced -b") == "persistenced_journal"
    assert source_for_command("systemctl status nvidia-persistenced") == "systemctl_persistenced"


# --- the rule --------------------------------------------------------------------------
def test_the_corpus_sample_is_a_stopped_daemon(corpus) -> None:
    result = analyze(load_input(str(corpus.sample(SAMPLE).path)))
    [f] = stopped(result)
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.CONFIG,
                                                Action.FIX_CONFIG)
    assert "signal 15" in f.title
    for words in ("Type=forking", "PIDFile=", "TimeoutStartSec", "systemctl restart",
                  "grep Persistence", "0000:3d:00.0", "gputriage check"):
        assert words in f.explanation, words
    [ev] = f.evidence
    assert ev.source == "persistenced_journal"
    assert any("Received signal 15" in ln for ln in ev.lines)
    assert any("Started (19176)" in ln for ln in ev.lines)


def test_a_start_timeout_is_named() -> None:
    [f] = stopped(run(persistenced_journal=TIMED_OUT))
    assert "timed out" in f.title and "raise TimeoutStartSec" in f.explanation
    assert any("Failed with result 'timeout'" in ln for ln in f.evidence[0].lines)


def test_a_clean_journal_says_nothing() -> None:
    assert stopped(run(persistenced_journal=HEALTHY)) == []


def test_an_active_unit_makes_the_journal_history() -> None:
    assert stopped(run(persistenced_journal=KILLED, systemctl_persistenced=ACTIVE_UNIT)) == []


def test_an_inactive_unit_is_the_stop_s_consequence() -> None:
    unit = ACTIVE_UNIT.replace("ActiveState=active", "ActiveState=inactive").replace(
        "SubState=running", "SubState=dead")
    result = run(persistenced_journal=KILLED, systemctl_persistenced=unit)
    top = {f.id for f in result.findings}
    assert "persistence.daemon-stopped" in top and "persistence.daemon-inactive" not in top
    assert "persistence.daemon-inactive" in {f.id for f in flat(result.findings)}
    [f] = stopped(result)
    assert "gputriage check" not in f.explanation  # the unit's state is known
    assert {e.source for e in f.evidence} == {"persistenced_journal", "systemctl_persistenced"}


def test_a_requested_stop_asks_for_a_start_not_a_unit_fix() -> None:
    text = HEALTHY + (
        "2025-03-04T09:00:00+0000 gpu-node-07 systemd[1]: Stopping NVIDIA Persistence "
        "Daemon...\n"
        "2025-03-04T09:00:00+0000 gpu-node-07 nvidia-persistenced[2211]: Received signal 15\n"
        "2025-03-04T09:00:00+0000 gpu-node-07 nvidia-persistenced[2211]: Shutdown (2211)\n"
        "2025-03-04T09:00:00+0000 gpu-node-07 systemd[1]: Stopped NVIDIA Persistence Daemon.\n")
    [f] = stopped(run(persistenced_journal=text))
    assert "not started again" in f.title and "enable --now" in f.explanation
    assert "Type=forking" not in f.explanation
