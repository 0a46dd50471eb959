"""The Xid verdicts come from the catalog (knowledge/xid.csv): editing a row changes
the finding; the rules add only what the GPU's other events say."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kernel_kit import A, judge, one, other, xid

from gputriage.knowledge import xid as catalog
from gputriage.model import Action, Blame, Severity


@pytest.fixture
def edit_row(monkeypatch):
    """Edit the loaded catalog in memory: ``edit_row(code, field=value, ...)``."""
    table = dict(catalog._xids())

    def edit(code: int, **changes) -> None:
        table[code] = replace(table[code], **changes)

    monkeypatch.setattr(catalog, "_xids", lambda: table)
    return edit


EDITED = {"severity": Severity.INFO, "action": Action.RESTART_JOB, "blame": Blame.JOB}


@pytest.mark.parametrize("code", [64, 79, 94, 95, 119, 120])
def test_editing_a_catalog_row_changes_the_xid_finding(edit_row, code):
    before = one(judge([xid(code)]), f"xid.{code}")
    assert (before.severity, before.action, before.blame) != tuple(EDITED.values())
    edit_row(code, **EDITED)
    after = one(judge([xid(code)]), f"xid.{code}")
    assert (after.severity, after.action, after.blame) == tuple(EDITED.values())


def test_an_escalation_takes_the_verdict_of_the_code_that_escalates(edit_row):
    """Xid 48 followed by 64 (the remap failed) is judged as 64 is; so is 63 beside 64."""
    edit_row(64, severity=Severity.WARNING, action=Action.PLAN_REPAIR, blame=Blame.NODE)
    edit_row(63, severity=Severity.INFO, action=Action.NONE)
    found = judge([xid(48), xid(63, t=0.1), xid(64, t=0.2)])
    f48 = one(found, "xid.48")
    assert (f48.severity, f48.action) == (Severity.WARNING, Action.PLAN_REPAIR)
    f63 = one(found, "xid.63")
    assert (f63.severity, f63.action) == (Severity.WARNING, Action.PLAN_REPAIR)


def test_messages_without_the_number_follow_their_xid_row(edit_row):
    """A GSP timeout message alone is judged by Xid 119's row (and covered by an Xid 119
    on its GPU); a fallen-off-bus message counts as the Xid whose row names it."""
    banner = other("gsp-rpc-timeout", "NVRM: _kgspLogXid119: GSP Timeout", A)
    edit_row(119, severity=Severity.WARNING, action=Action.FIX_SOFTWARE)
    alone = one(judge([banner]), "kernel.gsp-rpc-timeout")
    assert (alone.severity, alone.action) == (Severity.WARNING, Action.FIX_SOFTWARE)
    bare = other("fallen-off-bus", "NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.", A)
    assert one(judge([bare]), "xid.79")
    edit_row(79, kernel_event=None)
    edit_row(74, kernel_event="fallen-off-bus")
    assert [f.id for f in judge([bare])] == ["xid.74"]


def test_catalog_kernel_events_are_event_kinds():
    named = {x.code: x.kernel_event for x in catalog.all_xids() if x.kernel_event}
    assert named == {79: "fallen-off-bus", 119: "gsp-rpc-timeout", 120: "gsp-error"}
    assert catalog.xid_for_event("gsp-error").code == 120
    assert catalog.xid_for_event("segfault") is None
