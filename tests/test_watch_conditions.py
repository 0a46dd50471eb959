"""``watch --node-conditions``: the Node's GPUHealthy condition, written by the official
Kubernetes client to a local replay apiserver (tests/k8s_replay.py, taught here to
read a Node's status and take its PATCH) — the test asserts what the client sent."""

from __future__ import annotations

import io
import json
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from k8s_replay import ReplayServer  # after the skip

from gputriage.cli import Environment, main
from gputriage.engine.analysis import analyze
from gputriage.facts.context import CheckContext
from gputriage.facts.window import LogWindow
from gputriage.ingest import load_inputs
from gputriage.scenarios import build_scenario
from gputriage.watch.conditions import (
    CONDITION,
    NodeConditionSink,
    condition_of,
    node_condition_sink,
    reason_of,
)
from gputriage.watch.cycle import CycleOutcome

NODE = "gpu-node-017"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


class NodeStatusServer(ReplayServer):
    """The replay apiserver, with one Node whose status can be read and patched
    (conditions merged by type, as the apiserver's strategic merge does)."""

    def __init__(self, node: dict[str, Any], patch_status: int = 200) -> None:
        super().__init__({"Node": [node]})
        self.node = node
        self.patch_status = patch_status
        self.patches: list[tuple[str, str, dict[str, Any], str]] = []

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, bytes]:
        name = self.node["metadata"]["name"]
        if path.rstrip("/") in (f"/api/v1/nodes/{name}", f"/api/v1/nodes/{name}/status"):
            return 200, json.dumps(self.node).encode()
        return super().answer(path, query)

    def patch(self, path: str, ctype: str, body: dict[str, Any], auth: str) -> tuple[int, bytes]:
        self.patches.append((path, ctype, body, auth))
        if self.patch_status != 200:
            return self.patch_status, json.dumps({
                "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
                "reason": "Forbidden", "message": 'nodes "x" is forbidden'}).encode()
        conditions = self.node.setdefault("status", {}).setdefault("conditions", [])
        for new in body.get("status", {}).get("conditions", []):
            conditions[:] = [c for c in conditions if c.get("type") != new["type"]] + [new]
        return 200, json.dumps(self.node).encode()

    def _handler(self) -> Any:
        server = self
        base = super()._handler()

        class Handler(base):  # type: ignore[misc, valid-type]
            def do_PATCH(self) -> None:  # http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                status, answer = server.patch(self.path, self.headers.get("Content-Type", ""),
                                              body, self.headers.get("Authorization", ""))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        return Handler


def _node(conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": NODE, "labels": {"nvidia.com/gpu.present": "true"}},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": "2026-03-01T11:00:00Z",
                 "lastTransitionTime": "2026-02-01T00:00:00Z"},
                *(conditions or [])]}}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CycleOutcome]:
    root = tmp_path_factory.mktemp("conditions")
    found = {}
    for number, name in enumerate(("healthy-8xh100", "gpu-fallen-off-bus", "xid31-one-job",
                                   "xid48-row-remap", "pcie-x8-gpu3"), 1):
        snapshot = load_inputs([str(build_scenario(name, root / name))])
        result = analyze(snapshot, LogWindow(), CheckContext())
        found[name] = CycleOutcome(number, T0, 0.1, result, 0)
    found["failed"] = CycleOutcome(9, T0, 0.1, None, 3,
                                   error="OSError: [Errno 5] Input/output error")
    return found


class Clock:
    def __init__(self) -> None:
        self.at = T0

    def __call__(self) -> datetime:
        return self.at


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def log(self, level: str, msg: str, **fields: Any) -> None:
        self.lines.append((level, msg, fields))


def _sink(server: NodeStatusServer, tmp_path: Path, clock: Clock, log: Log,
          monkeypatch: pytest.MonkeyPatch) -> NodeConditionSink:
    monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig")))
    monkeypatch.setenv("NODE_NAME", NODE)
    sink = node_condition_sink(None, log=log, heartbeat_s=300)
    assert isinstance(sink, NodeConditionSink)
    sink.now = clock
    return sink


def _sent(server: NodeStatusServer, index: int = -1) -> dict[str, Any]:
    path, ctype, body, auth = server.patches[index]
    assert path == f"/api/v1/nodes/{NODE}/status"
    assert ctype == "application/strategic-merge-patch+json"
    assert auth == "Bearer replay-token"
    (cond,) = body["status"]["conditions"]
    assert set(body) == {"status"} and set(body["status"]) == {"conditions"}
    return cond


def test_reasons_are_camel_case() -> None:
    assert reason_of("xid.79") == "Xid79"
    assert reason_of("fabric.manager-inactive") == "FabricManagerInactive"
    assert reason_of("79.x") == "Finding79X"


def test_condition_follows_the_checks(outcomes: dict[str, CycleOutcome], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    clock, log = Clock(), Log()
    with NodeStatusServer(_node()) as server:
        sink = _sink(server, tmp_path, clock, log, monkeypatch)
        sink(outcomes["gpu-fallen-off-bus"])
        assert server.requests[0] == f"/api/v1/nodes/{NODE}/status"  # read back first
        cond = _sent(server)
        assert cond["type"] == CONDITION == "GPUHealthy"
        assert (cond["status"], cond["reason"]) == ("False", "Xid79")
        assert cond["message"].startswith("CRITICAL xid.79")
        assert "0000:9a:00.0" in cond["message"]
        assert cond["lastHeartbeatTime"] == cond["lastTransitionTime"] == "2026-03-01T12:00:00Z"

        clock.at += timedelta(seconds=60)  # the same verdict, heartbeat not due: no write
        sink(outcomes["gpu-fallen-off-bus"])
        assert len(server.patches) == 1
        clock.at += timedelta(seconds=300)  # heartbeat due: written, transition kept
        sink(outcomes["gpu-fallen-off-bus"])
        cond = _sent(server)
        assert cond["lastHeartbeatTime"] == "2026-03-01T12:06:00Z"
        assert cond["lastTransitionTime"] == "2026-03-01T12:00:00Z"

        clock.at += timedelta(seconds=60)  # repaired: True, a new transition
        sink(outcomes["healthy-8xh100"])
        cond = _sent(server)
        assert (cond["status"], cond["reason"]) == ("True", "GPUsHealthy")
        assert cond["lastTransitionTime"] == "2026-03-01T12:07:00Z"

        clock.at += timedelta(seconds=60)  # a job's fault: the node stays healthy
        sink(outcomes["xid31-one-job"])
        cond = _sent(server)
        assert (cond["status"], cond["reason"]) == ("True", "GPUsHealthy")
        assert "the job's fault: xid.31" in cond["message"]
        assert cond["lastTransitionTime"] == "2026-03-01T12:07:00Z"  # status unchanged

        clock.at += timedelta(seconds=60)
        sink(outcomes["failed"])
        cond = _sent(server)
        assert (cond["status"], cond["reason"]) == ("Unknown", "CheckFailed")
        assert "Input/output error" in cond["message"]
        assert cond["lastTransitionTime"] == "2026-03-01T12:09:00Z"
        # the apiserver's copy: one GPUHealthy beside kubelet's Ready, untouched
        types = [c["type"] for c in server.node["status"]["conditions"]]
        assert types == ["Ready", "GPUHealthy"]
        assert len(server.patches) == 5 and sink.updates == 5 and sink.errors == 0
        assert [f["status"] for level, msg, f in log.lines if msg == "node condition set"] == [
            "False", "True", "Unknown"]


def test_an_overrun_is_unknown_at_once_then_the_late_result(
        outcomes: dict[str, CycleOutcome], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The real loop: a check past its limit makes the condition Unknown (CheckOverran)
    while it still runs, as the watch command wires it; its late result replaces it."""
    from gputriage.commands.watch import overrun_listener
    from gputriage.watch.logs import WatchLog
    from gputriage.watch.loop import Watch, WatchState

    result = outcomes["gpu-fallen-off-bus"].result
    release = threading.Event()

    def hung_check() -> Any:
        release.wait(30)
        return result

    clock, log = Clock(), Log()
    with NodeStatusServer(_node()) as server:
        sink = _sink(server, tmp_path, clock, log, monkeypatch)
        state = WatchState(0, 0.2)
        watch = Watch(hung_check, state, WatchLog(io.StringIO()), sinks=[sink],
                      listeners=[overrun_listener(state, sink)], max_cycles=1)
        thread = threading.Thread(target=watch.run, daemon=True)
        thread.start()
        try:
            waited = threading.Event()
            for _ in range(300):
                if server.patches:
                    break
                waited.wait(0.05)
            cond = _sent(server)
            assert (cond["status"], cond["reason"]) == ("Unknown", "CheckOverran")
            assert cond["message"].startswith("gputriage: check 1 has run for")
            assert state.counts["overran"] == 1 and thread.is_alive()
        finally:
            release.set()
        thread.join(timeout=30)
        assert not thread.is_alive()
        cond = _sent(server)
        assert (cond["status"], cond["reason"]) == ("False", "Xid79")
        sink.overran(1, 60.0, 0.2)  # late news of a check already written: ignored
        assert len(server.patches) == 2


def test_a_node_side_warning_is_healthy_but_degraded(outcomes: dict[str, CycleOutcome]
                                                     ) -> None:
    cond = condition_of(outcomes["pcie-x8-gpu3"])
    assert (cond.status, cond.reason) == ("True", "GPUsDegraded")
    assert "pcie.width-degraded" in cond.message and "0000:5d:00.0" in cond.message


def test_a_restart_keeps_the_transition_time(outcomes: dict[str, CycleOutcome],
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    held = {"type": "GPUHealthy", "status": "False", "reason": "Xid48",
            "message": "CRITICAL xid.48 ...", "lastHeartbeatTime": "2026-03-01T11:55:00Z",
            "lastTransitionTime": "2026-03-01T09:30:00Z"}
    clock, log = Clock(), Log()
    with NodeStatusServer(_node([held])) as server:
        sink = _sink(server, tmp_path, clock, log, monkeypatch)
        sink(outcomes["xid48-row-remap"])
        cond = _sent(server)
        assert (cond["status"], cond["reason"]) == ("False", "Xid48")
        assert cond["lastTransitionTime"] == "2026-03-01T09:30:00Z"
        assert cond["lastHeartbeatTime"] == "2026-03-01T12:00:00Z"


def test_write_errors_are_logged_counted_and_retried(outcomes: dict[str, CycleOutcome],
                                                     tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    clock, log = Clock(), Log()
    with NodeStatusServer(_node(), patch_status=403) as server:
        sink = _sink(server, tmp_path, clock, log, monkeypatch)
        sink(outcomes["gpu-fallen-off-bus"])  # never raises
        assert sink.errors == 1 and sink.updates == 0
        ((level, msg, fields),) = log.lines
        assert level == "error" and msg == "node condition writing failed"
        assert fields["error"].startswith("HTTP 403")
        server.patch_status = 200
        clock.at += timedelta(seconds=10)
        sink(outcomes["gpu-fallen-off-bus"])  # retried at once, not at the heartbeat
        assert sink.updates == 1 and _sent(server)["status"] == "False"
    # the apiserver gone (its port closed): errors, not exceptions
    server = NodeStatusServer(_node())
    server.stop()
    gone = _sink(server, tmp_path, clock, Log(), monkeypatch)
    gone(outcomes["healthy-8xh100"])
    assert gone.errors == 2 and gone.updates == 0  # reading back, then writing


def test_the_node_must_be_named_and_the_cluster_reachable(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    import click

    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(click.UsageError, match="--node-name or \\$NODE_NAME"):
        node_condition_sink(None)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(click.UsageError, match="--node-conditions: no kubeconfig"):
        node_condition_sink("gpu1")


def test_watch_sets_the_condition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gputriage watch --node-conditions`` end to end, on a scenario snapshot."""
    snap = build_scenario("gpu-fallen-off-bus", tmp_path / "snap")
    with NodeStatusServer(_node()) as server:
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig")))
        out, err = io.StringIO(), io.StringIO()
        code = main(["watch", "--snapshot", str(snap), "--interval", "0", "--max-cycles", "2",
                     "--no-history", "--node-conditions", "--node-name", NODE],
                    Environment(stdout=out, stderr=err))
        assert code == 0, err.getvalue()
        cond = _sent(server)
        assert (cond["status"], cond["reason"]) == ("False", "Xid79")
        assert len(server.patches) == 1  # the second cycle changed nothing


@pytest.mark.parametrize("seeded, latches", [(True, True), (False, False)])
def test_watch_latches_a_flapping_port_in_its_cycle(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    seeded: bool, latches: bool) -> None:
    """The watch's cycle amends its result from the history as ``check`` does: a port
    that came back twice before and flaps a third time latches, and stays in /metrics
    and the Node condition once the port is up again; a one-off does not."""
    from prometheus_client import generate_latest
    from resultkit import finding, host

    from gputriage.commands.watch import _check
    from gputriage.model import Result
    from gputriage.state.history import record
    from gputriage.watch.logs import WatchLog
    from gputriage.watch.loop import Watch, WatchState
    from gputriage.watch.metrics import make_registry

    flap = build_scenario("ib-port-polling", tmp_path / "flap")
    healthy = build_scenario("healthy-8xh100", tmp_path / "healthy")
    state_dir = tmp_path / "state"
    if seeded:  # x . x . in the last 40 minutes: two strikes already
        now = datetime.now(timezone.utc)
        for i, flapping in enumerate([True, False, True, False]):
            found = [finding("ib.port-not-active")] if flapping else []
            record(state_dir, Result(findings=found, host=host(NODE)),
                   now - timedelta(minutes=40 - 10 * i))
    snap = tmp_path / "snap"
    order = iter([flap, healthy])

    log = io.StringIO()
    check = _check(Environment(), WatchLog(log), from_snapshot=str(snap), expectations=None,
                   timeout=None, deadline=90, opt_in={}, state_dir=str(state_dir),
                   no_history=False, history_every_s=3600)

    def cycle() -> Any:  # the port down in the first cycle, up again in the second
        snap.unlink(missing_ok=True)
        snap.symlink_to(next(order))
        return check()

    statuses: list[int] = []
    with NodeStatusServer(_node()) as server:
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig")))
        conditions = node_condition_sink(NODE)
        state = WatchState(0, 60)
        loop = Watch(cycle, state, WatchLog(log), max_cycles=2,
                     sinks=[conditions, lambda o: statuses.append(o.exit_status)])
        loop.run()
        cond = _sent(server)
    metrics = generate_latest(make_registry(state)).decode()
    assert statuses[0] == 2, log.getvalue()
    if latches:
        assert statuses == [2, 2]
        assert (cond["status"], cond["reason"]) == ("False", "FlappingIbPort")
        assert "3 times" in cond["message"]
        assert 'id="flapping.ib-port"' in metrics
    else:
        assert statuses == [2, 0]
        assert (cond["status"], cond["reason"]) == ("True", "GPUsHealthy")
        assert "flapping" not in metrics
    assert " warning " not in log.getvalue()
