"""``--since`` that leaves out every event says so (issue 33): how many events came
before the window and when the last was, in the first lines of ``logs``, ``analyze``
and ``triage`` and in their JSON (``host.log_window``, the logs document's ``window``);
a window the log does not reach is "could not tell" (exit 3), never OK."""

from __future__ import annotations

import io
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gputriage.cli import Environment, main
from gputriage.facts.window import LogWindow, parse_since
from gputriage.logscan import scan_text

LOG = """\
2024-05-14T06:02:11+0000 node kernel: Linux version 5.15.0-105-generic
2024-05-14T09:00:00+0000 node kernel: NVRM: Xid (PCI:0000:18:00): 31, pid=4411, name=python, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_3 faulted @ 0x7e9f_4f200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ
2024-05-14T11:30:00+0000 node kernel: NVRM: Xid (PCI:0000:18:00): 31, pid=4412, name=python, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_3 faulted @ 0x7e9f_4f200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ
2024-05-14T11:31:00+0000 node kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=4412, name=python, Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0): Out Of Range Address
2024-05-14T18:00:00+0000 node kernel: usb 1-1: new high-speed USB device number 3 using xhci_hcd
"""  # noqa: E501
LAST_EVENT = "2024-05-14T11:31:00+00:00"


def cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue()


def log_file(tmp_path: Path, written: str) -> str:
    """The log, its file last written at ``written`` (ISO, UTC)."""
    path = tmp_path / "kern.log"
    path.write_text(LOG)
    when = datetime.fromisoformat(written).replace(tzinfo=timezone.utc).timestamp()
    os.utime(path, (when, when))
    return str(path)


@pytest.mark.parametrize("command", ["logs", "analyze", "triage"])
def test_a_window_after_every_event_says_how_many_came_before(tmp_path, command):
    path = log_file(tmp_path, "2024-05-14T18:00:00")  # the log reaches into the window
    code, out = cli(command, path, "--since", "2024-05-14T12:00", "--json")
    doc = json.loads(out)
    window = doc["window"] if command == "logs" else doc["host"]["log_window"]
    assert window["events_in_window"] == 0 and window["events_before"] == 3
    assert window["last_before"] == LAST_EVENT and window["window_read"] is True
    assert code == doc["exit_status"] == 0 and doc["findings"] == []  # history, not current
    code, out = cli(command, path, "--since", "2024-05-14T12:00", "--no-pager")
    head = "\n".join(out.splitlines()[:3])
    assert ("3 kernel-log events before 2024-05-14T12:00Z (the last at 2024-05-14T11:31Z), "
            "none after it") in head
    assert "No findings" not in head


@pytest.mark.parametrize("command", ["logs", "analyze", "triage"])
def test_the_window_report_follows_the_schemas(tmp_path, command):
    jsonschema = pytest.importorskip("jsonschema")
    from gputriage import schemas

    name = {"analyze": "result"}.get(command, command)
    check = jsonschema.Draft202012Validator(schemas.bundled(name))
    path = log_file(tmp_path, "2024-05-14T18:00:00")
    for since in ("2024-05-14T12:00", "2024-05-15T00:00"):
        doc = json.loads(cli(command, path, "--since", since, "--json")[1])
        assert not [e.message for e in check.iter_errors(doc)]
        window = doc["window"] if command == "logs" else doc["host"]["log_window"]
        window["unknown_key"] = 1  # the window report's keys are closed
        assert [e.message for e in check.iter_errors(doc)] or command == "logs"


@pytest.mark.parametrize("command", ["logs", "analyze", "triage"])
def test_a_window_the_log_does_not_reach_is_unknown(tmp_path, command):
    path = log_file(tmp_path, "2024-05-14T18:00:00")
    code, out = cli(command, path, "--since", "2024-05-15T00:00", "--json")
    doc = json.loads(out)
    window = doc["window"] if command == "logs" else doc["host"]["log_window"]
    assert window["window_read"] is False and window["events_before"] == 3
    assert code == doc["exit_status"] == 3 and doc["verdict"] == "unknown"
    _, out = cli(command, path, "--since", "2024-05-15T00:00", "--no-pager")
    assert "nothing in the window was read" in "\n".join(out.splitlines()[:3])


def test_a_window_that_keeps_events_judges_them(tmp_path):
    path = log_file(tmp_path, "2024-05-14T18:00:00")
    code, out = cli("analyze", path, "--since", "2024-05-14T11:00", "--json")
    doc = json.loads(out)
    window = doc["host"]["log_window"]
    assert (window["events_in_window"], window["events_before"]) == (2, 1)
    assert code == 1 and {f["id"] for f in doc["findings"]} == {"xid.31", "xid.13"}
    assert doc["not_read"] == ["--since 2024-05-14T11:00: 1 kernel-log event before "
                               "2024-05-14T11:00Z not judged"]


def test_without_a_window_there_is_no_window_report(tmp_path):
    _, out = cli("analyze", log_file(tmp_path, "2024-05-14T18:00:00"), "--json")
    assert "log_window" not in json.loads(out)["host"]


def test_a_collection_after_the_window_started_covers_it():
    """A snapshot collected inside the window read the log up to then: a quiet window
    is OK; collected (or written) before it, nothing in it was read."""
    scan = scan_text(LOG)
    ends = max(b.last for b in scan.boots)
    window = LogWindow(since=parse_since("2024-05-15T00:00"), since_text="2024-05-15T00:00")
    later = datetime(2024, 5, 15, 6, 0, tzinfo=timezone.utc)
    assert window.report(scan.events, ends, later).read
    earlier = datetime(2024, 5, 14, 20, 0, tzinfo=timezone.utc)
    report = window.report(scan.events, ends, earlier)
    assert report is not None and not report.read and report.emptied
    assert "nothing in the window was read" in (report.line() or "")
    # read from a pipe: the last NVIDIA record does not say where the log ends
    quiet = window.report(scan.events, ends, None)
    assert quiet is not None and quiet.read and quiet.emptied
    assert "nothing in the window" not in (quiet.line() or "")
    assert LogWindow().report(scan.events, ends) is None


def test_a_log_on_stdin_that_is_quiet_in_the_window_is_ok(monkeypatch):
    import sys
    from types import SimpleNamespace

    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(LOG.encode())))
    code, out = cli("analyze", "-", "--since", "2024-05-14T12:00", "--json")
    window = json.loads(out)["host"]["log_window"]
    assert code == 0 and window["window_read"] is True and window["events_before"] == 3
