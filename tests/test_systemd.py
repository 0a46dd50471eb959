"""Tests for gputriage.parsers.systemd."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.parsers.systemd import parse_systemctl_show

SHOW_ACTIVE = """\
Type=forking
Restart=no
PIDFile=/var/run/nvidia-persistenced/nvidia-persistenced.pid
MainPID=2211
ExecMainStartTimestamp=Tue 2024-05-14 09:12:03 UTC
ExecMainPID=2211
ExecMainCode=0
ExecMainStatus=0
Result=success
Id=nvidia-persistenced.service
Names=nvidia-persistenced.service
LoadState=loaded
ActiveState=active
SubState=running
UnitFileState=enabled
ActiveEnterTimestamp=Tue 2024-05-14 09:12:03 UTC
Description=NVIDIA Persistence Daemon
"""

SHOW_FAILED = """\
Type=simple
MainPID=0
ExecMainStatus=1
Result=exit-code
Id=nvidia-fabricmanager.service
LoadState=loaded
ActiveState=failed
SubState=failed
UnitFileState=enabled
ActiveEnterTimestamp=
"""

SHOW_INACTIVE = """\
Id=nvidia-fabricmanager.service
Names=nvidia-fabricmanager.service
LoadState=loaded
ActiveState=inactive
SubState=dead
UnitFileState=disabled
Result=success
MainPID=0
ExecMainStatus=0
ActiveEnterTimestamp=
"""

SHOW_NOT_FOUND = """\
Restart=no
MainPID=0
Result=success
Id=nvidia-fabricmanager.service
Names=nvidia-fabricmanager.service
LoadState=not-found
ActiveState=inactive
SubState=dead
UnitFileState=
LoadError=org.freedesktop.systemd1.NoSuchUnit "Unit nvidia-fabricmanager.service not found."
"""

STATUS_FAILED = """\
× nvidia-persistenced.service - NVIDIA Persistence Daemon
     Loaded: loaded (/lib/systemd/system/nvidia-persistenced.service; enabled; vendor preset: enabled)
     Active: failed (Result: exit-code) since Sat 2025-08-16 00:03:03 EDT; 2min ago
    Process: 1234 ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced (code=exited, status=1/FAILURE)
        CPU: 12ms

Aug 16 00:03:03 host systemd[1]: Failed to start NVIDIA Persistence Daemon.
"""

STATUS_AUTORESTART = """\
● nvidia-fabricmanager.service - NVIDIA fabric manager service
     Loaded: loaded (/usr/lib/systemd/system/nvidia-fabricmanager.service; enabled; preset: enabled)
     Active: activating (auto-restart) (Result: exit-code) since Mon 2025-01-06 10:00:01 UTC; 3s ago
    Process: 4242 ExecStart=/usr/bin/nvidia-fabricmanager-start.sh --mode start (code=exited, status=1/FAILURE)
   Main PID: 4250 (code=exited, status=1/FAILURE)
"""


def test_show_active():
    u = parse_systemctl_show(SHOW_ACTIVE)
    assert u is not None
    assert (u.id, u.load_state, u.active_state, u.sub_state) == (
        "nvidia-persistenced.service", "loaded", "active", "running")
    assert (u.unit_file_state, u.result, u.exec_main_status, u.main_pid) == (
        "enabled", "success", 0, 2211)
    assert u.active_enter_timestamp == "Tue 2024-05-14 09:12:03 UTC"
    assert u.installed and u.active
    assert u.raw["Description"] == "NVIDIA Persistence Daemon"


def test_show_failed_and_inactive():
    f = parse_systemctl_show(SHOW_FAILED)
    assert f is not None and f.active_state == "failed" and f.exec_main_status == 1
    assert f.result == "exit-code" and f.active_enter_timestamp is None and not f.active
    i = parse_systemctl_show(SHOW_INACTIVE)
    assert i is not None and i.installed and not i.active
    assert (i.active_state, i.sub_state, i.unit_file_state) == ("inactive", "dead", "disabled")


def test_show_not_found():
    u = parse_systemctl_show(SHOW_NOT_FOUND)
    assert u is not None
    assert u.load_state == "not-found" and not u.installed and not u.active
    assert u.unit_file_state is None


def test_status_from_corpus(corpus):
    text = corpus.sample("xe9780-b300-systemctl-status-fabricmanager-active-nvlsm").text()
    u = parse_systemctl_show(text)
    assert u is not None
    assert u.id == "nvidia-fabricmanager.service"
    assert (u.load_state, u.active_state, u.sub_state) == ("loaded", "active", "running")
    assert u.unit_file_state == "enabled"
    assert u.main_pid == 31082
    assert u.active_enter_timestamp == "Thu 2026-08-27 07:13:21 UTC"
    assert u.installed and u.active


def test_status_failed_and_restarting():
    f = parse_systemctl_show(STATUS_FAILED)
    assert f is not None and f.id == "nvidia-persistenced.service"
    assert (f.active_state, f.sub_state, f.result) == ("failed", "failed", "exit-code")
    assert f.active_enter_timestamp is None and not f.active
    r = parse_systemctl_show(STATUS_AUTORESTART)
    assert r is not None
    assert (r.active_state, r.sub_state, r.result) == ("activating", "auto-restart", "exit-code")
    assert r.main_pid == 4250 and r.exec_main_status == 1


def test_status_unit_not_found():
    u = parse_systemctl_show("Unit nvidia-fabricmanager.service could not be found.\n")
    assert u is not None and u.id == "nvidia-fabricmanager.service"
    assert u.load_state == "not-found" and not u.installed and not u.active
    u2 = parse_systemctl_show("○ nvidia-fabricmanager.service\n     Loaded: not-found "
                              "(Reason: Unit nvidia-fabricmanager.service not found.)\n"
                              "     Active: inactive (dead)\n")
    assert u2 is not None and u2.load_state == "not-found" and u2.sub_state == "dead"
    assert u2.unit_file_state is None


def test_empty_and_malformed():
    assert parse_systemctl_show("") is None
    assert parse_systemctl_show(" \n") is None
    with pytest.raises(ParseError):
        parse_systemctl_show("bash: systemctl: command not found\n")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_property(data):
    text = data.decode("utf-8", errors="replace")
    for candidate in (text, "Id=x.service\n" + text, "     Active: " + text):
        with contextlib.suppress(ParseError):
            u = parse_systemctl_show(candidate)
            if u is not None:
                _ = (u.installed, u.active)
