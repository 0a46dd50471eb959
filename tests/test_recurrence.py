"""Latching of flapping signals and "this node again", from the history store
(gputriage.state.recurrence): N strikes within T latch until acknowledged, a one-off
does not; a GPU failing again within 7 days of its repair is escalated."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from resultkit import finding, gpu_scope, host

from gputriage.engine.acks import Ack
from gputriage.model import Result
from gputriage.state import ackstore
from gputriage.state.history import record
from gputriage.state.recurrence import Check, again, apply_history, families, latched
from gputriage.vocabulary import Action, Severity, Status

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)
FLAP = {"id": "ib.port-unstable", "severity": "warning"}
TABLE = families()


def _checks(pattern: str, minutes: float = 10) -> list[Check]:
    """A check every ``minutes``: ``x`` the port flapped in it, ``.`` it did not."""
    return [Check(T0 + timedelta(minutes=i * minutes), (FLAP,) if c == "x" else ())
            for i, c in enumerate(pattern)]


def _ack(fid: str | None, minutes: float, gpu: str | None = None) -> Ack:
    return Ack(1, T0 + timedelta(minutes=minutes), "ana", "reseated", fid, gpu)


def test_the_table_names_its_sources() -> None:
    assert {f.family for f in TABLE} >= {"ib-port", "nvlink", "corrected-errors", "thermal"}
    for f in TABLE:
        assert f.strikes >= 2 and f.window > timedelta(0) and "NVSentinel" in f.source


@pytest.mark.parametrize("pattern, minutes, latches", [
    ("x.x.x", 10, True),       # three flaps in 40 minutes
    ("x.x.x", 30, False),      # three flaps over two hours: not within one
    ("xxxxx", 10, False),      # down for a while, once: one strike
    ("x....", 10, False),      # a one-off
    ("x.x..", 10, False),      # two
    ("x.x.x....", 10, True),   # latched stays latched once the signal is gone
])
def test_strikes_within_the_window_latch(pattern: str, minutes: float,
                                         latches: bool) -> None:
    found = latched(_checks(pattern, minutes), [], TABLE)
    assert [f.id for f in found] == (["flapping.ib-port"] if latches else [])
    if latches:
        (f,) = found
        assert f.severity is Severity.CRITICAL and f.action is Action.DRAIN_AND_REPAIR
        assert f.occurrences is not None and f.occurrences.count == 3
        assert len(f.evidence[0].lines) == 3 and "ib.port-unstable appeared" in \
            f.evidence[0].lines[0]
        assert "3 within 1 h" in f.explanation and "NVSentinel" in f.explanation


def test_an_acknowledgement_unlatches_and_the_count_starts_again() -> None:
    checks = _checks("x.x.x....x.x.x")
    assert latched(checks[:9], [_ack("flapping.ib-port", 60)], TABLE) == []
    # three new strikes after the acknowledgement latch again
    again_flapping = latched(checks, [_ack("flapping.ib-port", 60)], TABLE)
    assert [f.id for f in again_flapping] == ["flapping.ib-port"]
    assert latched(checks, [_ack("flapping.*", 200)], TABLE) == []
    withdrawn = replace(_ack("flapping.ib-port", 60), cleared="2026-12-06T13:05:00")
    assert len(latched(checks[:9], [withdrawn], TABLE)) == 1


XID48 = finding("xid.48", action=Action.RESET_GPU, scope=gpu_scope(5, "0000:ba:00.0"))


def test_a_gpu_failing_again_after_its_repair_is_escalated() -> None:
    now = T0 + timedelta(days=2)
    (f,) = again([XID48], [_ack("xid.48", 0, gpu="0000:ba:00.0"),
                           _ack(None, 60, gpu="0000:ba:00.0")], now)
    assert f.action is Action.DRAIN_AND_REPAIR and f.severity is Severity.CRITICAL
    assert "again: 2x in 7 days" in f.title
    assert "2 repair(s) or reset(s)" in f.explanation and T0.isoformat() in f.explanation
    assert len(f.evidence[-1].lines) == 2 and "hardware repair" in (f.step or "")


@pytest.mark.parametrize("acks, now_days", [
    ([_ack("xid.48", 0, gpu="0000:ba:00.0")], 8),     # repaired 8 days ago: a new failure
    ([_ack("xid.48", 0, gpu="0000:18:00.0")], 2),     # another GPU's repair
    ([_ack("xid.79", 0)], 2),                         # another finding's
    ([replace(_ack("xid.48", 0), cleared="x")], 2),   # withdrawn
])
def test_not_escalated(acks: list[Ack], now_days: float) -> None:
    assert again([XID48], acks, T0 + timedelta(days=now_days)) == [XID48]


def test_only_resets_of_current_node_criticals_are_escalated() -> None:
    acks = [_ack(None, 0, gpu="0000:ba:00.0")]
    kept = [finding("xid.79", scope=gpu_scope(5, "0000:ba:00.0")),  # already a repair
            replace(XID48, status=Status.ACKNOWLEDGED),
            finding("ecc.warn", "warning", scope=gpu_scope(5, "0000:ba:00.0"))]
    assert again(kept, acks, T0 + timedelta(days=1)) == kept


def test_apply_history_latches_from_the_store(tmp_path: Path) -> None:
    state = tmp_path / "state"

    def result(flapping: bool) -> Result:
        found = [finding("ib.port-unstable", "warning")] if flapping else []
        return Result(findings=found, host=host(verdict="warning" if flapping else "ok"))
    for i, flapping in enumerate([True, False, True, False]):
        record(state, result(flapping), T0 + timedelta(minutes=10 * i))
    now = T0 + timedelta(minutes=40)
    third = result(True)
    assert apply_history(third, state, now) == []
    assert any(f.id == "flapping.ib-port" for f in third.findings)
    assert third.host.verdict == "critical"
    # acknowledged after the repair: the next flap is one strike, not a latch
    ackstore.record(state, Ack(None, now + timedelta(minutes=1), "ana", "new cable",
                               "flapping.ib-port"))
    record(state, third, now)
    fourth = result(False)
    apply_history(fourth, state, now + timedelta(minutes=10))
    assert not [f for f in fourth.findings if f.id.startswith("flapping.")]
    assert fourth.host.verdict == "ok"
