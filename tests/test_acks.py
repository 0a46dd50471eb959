"""Acknowledgements: ``gputriage ack`` records who, when, why and until when in the
history store; the next check reports what an acknowledgement covers as acknowledged,
not current, and its exit status no longer drains for it. A new event after the
acknowledgement, an expired or a withdrawn one, covers nothing."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gputriage.cli import Environment, main
from gputriage.engine import acks
from gputriage.model import (
    Action,
    Blame,
    Finding,
    Occurrences,
    Scope,
    Severity,
    Status,
)
from gputriage.scenarios import build_scenario

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
BUS = "0000:ab:00.0"  # GPU 5 of the xid48-row-remap scenario


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def _gpu_finding(fid: str = "xid.48", bus: str = BUS, last: str | None = None) -> Finding:
    occ = Occurrences(1, last, last) if last else None
    return Finding(fid, Severity.CRITICAL, f"{fid} on {bus}", "", Action.RESET_GPU,
                   Blame.NODE, Scope("gpu", pci_bus_id=bus), occurrences=occ)


def _ack(**kw: object) -> acks.Ack:
    base = acks.Ack(1, NOW, "ana", "reset after the DBE, INC-1", gpu=BUS)
    return replace(base, **kw)


@pytest.fixture(autouse=True)
def _own_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUTRIAGE_STATE_DIR", str(tmp_path / "default-state"))


# --- what an acknowledgement covers ------------------------------------------------------

def test_a_gpu_acknowledgement_covers_that_gpus_findings_only() -> None:
    mine, other = _gpu_finding(), _gpu_finding(bus="0000:18:00.0")
    out = acks.apply([mine, other], [_ack()], NOW)
    assert out[0].status is Status.ACKNOWLEDGED and "ana" in (out[0].status_note or "")
    assert out[1].status is Status.CURRENT


def test_a_finding_id_acknowledgement_matches_globs() -> None:
    out = acks.apply([_gpu_finding("xid.48"), _gpu_finding("memory.remap-pending")],
                     [_ack(gpu=None, finding="xid.*")], NOW)
    assert [f.status for f in out] == [Status.ACKNOWLEDGED, Status.CURRENT]


def test_a_new_event_after_the_acknowledgement_stays_current() -> None:
    later = (NOW + timedelta(hours=1)).isoformat()
    earlier = (NOW - timedelta(hours=1)).isoformat()
    out = acks.apply([_gpu_finding(last=later), _gpu_finding(last=earlier)], [_ack()],
                     NOW + timedelta(hours=2))
    assert out[0].status is Status.CURRENT and "new events" in (out[0].status_note or "")
    assert out[1].status is Status.ACKNOWLEDGED


def test_expired_and_withdrawn_acknowledgements_cover_nothing() -> None:
    expired = _ack(until=NOW + timedelta(days=1))
    withdrawn = _ack(cleared=NOW.isoformat())
    f = _gpu_finding()
    assert acks.apply([f], [expired], NOW + timedelta(days=2))[0].current
    assert acks.apply([f], [withdrawn], NOW)[0].current
    assert not acks.apply([f], [expired], NOW + timedelta(hours=1))[0].current


def test_a_finding_on_several_gpus_needs_each_gpu_acknowledged() -> None:
    both = replace(_gpu_finding(), also=(Scope("gpu", pci_bus_id="0000:18:00.0"),))
    assert acks.apply([both], [_ack()], NOW)[0].current
    other = _ack(id=2, gpu="0000:18:00.0", when=NOW + timedelta(minutes=1))
    [done] = acks.apply([both], [_ack(), other], NOW + timedelta(hours=1))
    assert done.status is Status.ACKNOWLEDGED and done.status_note == other.describe()


@pytest.mark.parametrize(("text", "expected"), [
    (None, NOW + timedelta(days=acks.DEFAULT_DAYS)),
    ("never", None),
    ("7d", NOW + timedelta(days=7)),
    ("12h", NOW + timedelta(hours=12)),
    ("2026-12-10T00:00Z", datetime(2026, 12, 10, tzinfo=timezone.utc)),
])
def test_until_reads_durations_times_and_never(text: str | None,
                                               expected: datetime | None) -> None:
    assert acks.parse_until(text, NOW) == expected


def test_until_in_the_past_is_refused() -> None:
    with pytest.raises(ValueError, match="passed"):
        acks.parse_until("2020-01-01", NOW)


# --- the command -------------------------------------------------------------------------

def test_ack_records_lists_and_withdraws(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    code, out, err = _run(["ack", "xid.48", "--gpu", "00000000:AB:00.0", "--reason",
                           "reset, INC-1", "--by", "ana", "--state-dir", state])
    assert code == 0, err
    assert "acknowledgement 1: xid.48 on GPU 0000:ab:00.0" in out
    code, out, _ = _run(["ack", "--list", "--json", "--state-dir", state])
    [row] = json.loads(out)
    assert (row["who"], row["gpu"], row["finding"], row["in_force"]) == (
        "ana", BUS, "xid.48", True)
    assert row["until"] is not None  # 30 days by default, never silently forever
    assert _run(["ack", "--clear", "1", "--state-dir", state])[0] == 0
    code, out, _ = _run(["ack", "--list", "--state-dir", state])
    assert "withdrawn" in out
    assert _run(["ack", "--clear", "1", "--state-dir", state])[0] == 64


@pytest.mark.parametrize("argv", [
    ["ack", "--reason", "x"],  # names nothing
    ["ack", "xid.48"],  # no reason
    ["ack", "--gpu", "not-a-bus", "--reason", "x"],
    ["ack", "xid.48", "--reason", "x", "--until", "yesterday-ish"],
])
def test_bad_acknowledgements_are_usage_errors(argv: list[str], tmp_path: Path) -> None:
    code, _, err = _run([*argv, "--state-dir", str(tmp_path / "s")])
    assert code == 64 and "Traceback" not in err and err.startswith("gputriage: ")


# --- the repair -> ack -> next check loop ------------------------------------------------

def _check(snapshot: Path, state: Path) -> tuple[int, dict]:
    code, out, err = _run(["check", "--snapshot", str(snapshot), "--state-dir", str(state),
                           "--json"])
    assert "Traceback" not in err and out, err
    return code, json.loads(out)


def test_a_reset_and_acknowledged_gpu_does_not_fail_the_next_check(tmp_path: Path) -> None:
    snap = build_scenario("xid48-row-remap", tmp_path / "snap")
    state = tmp_path / "state"
    code, doc = _check(snap, state)
    assert code == 2
    assert any(f["status"] == "current" and f["severity"] == "critical"
               and f["scope"].get("pci_bus_id") == BUS for f in doc["findings"])
    assert _run(["ack", "--gpu", BUS, "--reason", "GPU reset, remap applied",
                 "--state-dir", str(state)])[0] == 0
    code, doc = _check(snap, state)
    assert code < 2, [f["id"] for f in doc["findings"] if f["status"] == "current"]
    on_gpu = [f for f in doc["findings"] if f["scope"].get("pci_bus_id") == BUS]
    assert on_gpu and all(f["status"] == "acknowledged" for f in on_gpu)
    assert all("GPU reset, remap applied" in f["status_note"] for f in on_gpu)


def test_another_gpus_failure_still_fails_after_an_acknowledgement(tmp_path: Path) -> None:
    snap = build_scenario("xid48-row-remap", tmp_path / "snap")
    state = tmp_path / "state"
    assert _run(["ack", "--gpu", "0000:18:00.0", "--reason", "other GPU",
                 "--state-dir", str(state)])[0] == 0
    assert _check(snap, state)[0] == 2


def test_a_rule_that_raises_is_skipped_and_the_others_still_run(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gputriage.engine import analysis as engine
    from gputriage.ingest import load_inputs
    from gputriage.rules import all_rules
    from gputriage.rules.base import Rule

    monkeypatch.delenv(engine.STRICT_ENV)

    def broken(**_: object) -> list[Finding]:
        raise RuntimeError("boom")

    rules = [Rule("test.broken", broken, requires=(), any_of=("pci_gpus",), produces=()),
             *all_rules()]
    snapshot = load_inputs([str(build_scenario("gpu-fallen-off-bus", tmp_path / "s"))])
    result = engine.analyze_facts(engine.Facts(snapshot), rules)
    assert [s.reason for s in result.skipped if s.rule == "test.broken"] == [
        f"{engine.RULE_ERROR}: RuntimeError: boom"]
    assert result.worst is Severity.CRITICAL  # the GPU that fell off the bus is still seen
