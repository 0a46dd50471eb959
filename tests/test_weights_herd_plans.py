"""The plans that cut a herd over the shared link (issue 32): one pull into the cluster
then fan-out, a shared read-only volume, a staged rollout, each with its time; a herd
past the threshold is a warning (exit 1), never a green OK."""

from __future__ import annotations

import io
import json

import pytest

from gputriage.cli import Environment, main
from gputriage.weights import plan

GB = 1e9


def _rows(model: float, replicas: int, link: float) -> dict[str, plan.HerdRow]:
    rows = plan.herd(model, replicas, link, dict(plan.DEFAULT_BANDWIDTH))
    return {r.strategy.split(" (")[0]: r for r in rows}


def test_fan_out_and_shared_volume_carry_the_model_once_over_the_link():
    rows = _rows(140 * GB, 16, 25e9 / 8)
    fan = rows["one pull into the cluster, then peer-to-peer fan-out"]
    assert fan.link_bytes == 140 * GB
    local = 140 * GB / plan.DEFAULT_BANDWIDTH["local_nvme"]
    one = 140 * GB / plan.DEFAULT_BANDWIDTH["object_store"]
    assert fan.ready_s == pytest.approx(one + 4 * local)  # 16 nodes: 4 doubling rounds
    assert fan.ready_s < rows["every replica pulls at once"].ready_s
    shared = rows["shared read-only volume filled once"]
    assert shared.link_bytes == 140 * GB and shared.ahead_s > 0


def test_staged_rollout_keeps_each_batch_under_the_threshold():
    rows = plan.herd(140 * GB, 16, 25e9 / 8, dict(plan.DEFAULT_BANDWIDTH))
    staged = [r for r in rows if r.strategy.startswith("staged rollout")]
    assert len(staged) == 1
    batch = plan.staged_batch(140 * GB, 25e9 / 8, 16)
    assert batch == 6 and batch * 140 * GB / (25e9 / 8) <= plan.HERD_WARN_S
    each = max(6 * 140 * GB / (25e9 / 8), 140 * GB / plan.DEFAULT_BANDWIDTH["object_store"])
    assert staged[0].ready_s == pytest.approx(3 * each)
    # a herd the link carries within the threshold needs no staging
    assert not any(r.strategy.startswith("staged rollout")
                   for r in plan.herd(16 * GB, 4, 100e9 / 8, dict(plan.DEFAULT_BANDWIDTH)))


def test_the_verdict_is_a_warning_past_the_threshold_only():
    slow = plan.herd(140 * GB, 16, 25e9 / 8, dict(plan.DEFAULT_BANDWIDTH))
    assert slow[0].ready_s > plan.HERD_WARN_S and plan.herd_verdict(slow) == "warning"
    quick = plan.herd(16 * GB, 4, 100e9 / 8, dict(plan.DEFAULT_BANDWIDTH))
    assert plan.herd_verdict(quick) == "ok"


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(argv, Environment(stdout=out, stderr=err)), out.getvalue()


def test_a_nine_minute_herd_exits_1_and_says_warning():
    code, out = _run(["weights", "--params", "70B", "--dtype", "fp16", "--replicas", "50",
                      "--link", "100Gb/s"])
    assert code == 1
    assert "WARNING herd" in out and "5 min" in out and "OK herd" not in out
    assert "peer-to-peer fan-out" in out and "staged rollout" in out
    code, out = _run(["weights", "--params", "70B", "--dtype", "fp16", "--replicas", "50",
                      "--link", "100Gb/s", "--json"])
    doc = json.loads(out)
    assert code == 1 and doc["herd"]["severity"] == "warning"
    assert doc["herd"]["warn_after_s"] == plan.HERD_WARN_S
    code, out = _run(["weights", "--params", "8B", "--replicas", "4", "--link", "100Gb/s"])
    assert code == 0 and "OK herd" in out
