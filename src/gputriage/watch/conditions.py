"""``watch --node-conditions``: the Node's ``GPUHealthy`` condition, set after each
check through the official Kubernetes client (``PATCH nodes/NAME/status``).

``True`` while no node-side finding is critical (reason ``GPUsHealthy``, or
``GPUsDegraded`` when a warning is current: still in service), ``False`` when one is
(the reason is the worst finding's id in CamelCase, ``Xid79``; the message names it and
its GPU), ``Unknown`` when the check failed or could not tell, and as soon as a
check runs past its limit (reason ``CheckOverran``: a collector hangs; the late
result is written when it comes). A job's fault never
makes it ``False``. As kubelet and node-problem-detector do, the condition is written
when it changes and otherwise once per heartbeat period (``lastHeartbeatTime``);
``lastTransitionTime`` moves only when the status does (read back from the Node at
start, so a restart keeps it). The RBAC it needs: get and patch ``nodes/status``
(deploy/kubernetes/watch-rbac.yaml). A failed write is logged and counted, never a
failed check; the next cycle tries again.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gputriage.watch.cycle import CycleOutcome, Sink

__all__ = ["CONDITION", "DEFAULT_HEARTBEAT_S", "Condition", "NodeConditionSink",
           "condition_of", "node_condition_sink", "overrun_condition", "reason_of"]

CONDITION = "GPUHealthy"
DEFAULT_HEARTBEAT_S = 300.0  # kubelet's and NPD's default node status report period
MESSAGE_LENGTH = 1024
_REASON_WORD = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class Condition:
    """The condition's judged part: status (``True`` / ``False`` / ``Unknown``), reason
    and message."""

    status: str
    reason: str
    message: str


def reason_of(finding_id: str) -> str:
    """A finding id as a CamelCase reason: ``xid.79`` -> ``Xid79``,
    ``fabric.manager-inactive`` -> ``FabricManagerInactive``."""
    words = _REASON_WORD.findall(finding_id)
    reason = "".join(w[:1].upper() + w[1:] for w in words)
    if not reason or not reason[0].isalpha():
        reason = f"Finding{reason}"
    return reason


def condition_of(outcome: CycleOutcome) -> Condition:
    """What a cycle says about the Node's GPUs."""
    from gputriage.results.document import to_json
    from gputriage.watch import npd

    if outcome.result is None:
        return Condition("Unknown", "CheckFailed",
                         npd.shorten(f"gputriage: the check failed: {outcome.error or '?'}",
                                     MESSAGE_LENGTH))
    said = npd.judge(to_json(outcome.result), "critical", MESSAGE_LENGTH)
    if said.status == npd.PROBLEM:
        return Condition("False", reason_of(said.finding.id if said.finding else ""),
                         said.message)
    if said.status == npd.UNKNOWN:
        return Condition("Unknown", "CheckUnknown", said.message)
    # an OK that names a finding names a node-side warning, or the job's fault
    degraded = said.finding is not None and not npd.job_side(said.finding)
    return Condition("True", "GPUsDegraded" if degraded else "GPUsHealthy", said.message)


def overrun_condition(number: int, running_s: float, limit_s: float) -> Condition:
    """A check still running past its limit: the GPUs' state is not known now."""
    from gputriage.watch import npd

    return Condition("Unknown", "CheckOverran", npd.shorten(
        f"gputriage: check {number} has run for {running_s:.0f} s, past its limit of "
        f"{limit_s:g} s (a collector hangs?)", MESSAGE_LENGTH))


def _stamp(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeConditionSink:
    """The sink: one Node's ``GPUHealthy`` condition, kept in step with the checks.
    ``updates``, ``errors``: writes made and failed (a failure is logged, and retried
    next cycle)."""

    def __init__(self, api: Any, node: str, *, log: Any = None,
                 heartbeat_s: float = DEFAULT_HEARTBEAT_S, timeout_s: float = 10.0,
                 now: Any = None) -> None:
        self.api = api  # a kubernetes.client.CoreV1Api
        self.node = node
        self.log = log
        self.heartbeat_s = heartbeat_s
        self.timeout_s = timeout_s
        self.now = now or (lambda: datetime.now(timezone.utc))
        self.updates = 0
        self.errors = 0
        self._read = False  # the Node's condition read back once
        self._written: Condition | None = None  # what the Node holds, as far as known
        self._transition: str | None = None
        self._heartbeat: datetime | None = None
        self._seen = 0  # the last cycle written (an overrun of it is then stale)
        self._lock = threading.RLock()  # the loop's worker and its main thread both write
        self.__name__ = "node-conditions"

    def __call__(self, outcome: CycleOutcome) -> None:
        with self._lock:
            self._seen = max(self._seen, outcome.number)
            try:
                self.publish(condition_of(outcome))
            except Exception as exc:  # a condition never fails the cycle
                self._failed("judging", exc)

    def overran(self, number: int, running_s: float, limit_s: float) -> None:
        """Check ``number`` runs past its limit: Unknown, unless its result (or a later
        one) was written meanwhile."""
        with self._lock:
            if number > self._seen:
                self.publish(overrun_condition(number, running_s, limit_s))

    def publish(self, cond: Condition) -> None:
        """Write ``cond`` when it differs from what the Node holds or the heartbeat is
        due; errors are logged and counted."""
        with self._lock:
            self._publish(cond)

    def _publish(self, cond: Condition) -> None:
        now = self.now()
        if not self._read:
            self._read_back()
        due = self._heartbeat is None or (now - self._heartbeat).total_seconds() \
            >= self.heartbeat_s
        if cond == self._written and not due:
            return
        transition = self._transition if (
            self._written is not None and self._written.status == cond.status
            and self._transition) else _stamp(now)
        body = {"status": {"conditions": [{
            "type": CONDITION, "status": cond.status, "reason": cond.reason,
            "message": cond.message, "lastHeartbeatTime": _stamp(now),
            "lastTransitionTime": transition}]}}
        try:
            self.api.patch_node_status(self.node, body, _request_timeout=self.timeout_s)
        except Exception as exc:  # API, network, auth: all retried
            self._failed("writing", exc)
            return
        self.updates += 1
        if self._written is None or self._written.status != cond.status:
            self._info("node condition set", status=cond.status, reason=cond.reason)
        self._written, self._transition, self._heartbeat = cond, transition, now

    def _read_back(self) -> None:
        """The condition as the Node holds it (a restart keeps its transition time)."""
        try:
            node = self.api.read_node_status(self.node, _request_timeout=self.timeout_s)
        except Exception as exc:  # the write may still work: go on
            self._failed("reading", exc)
            return
        self._read = True
        for cond in getattr(getattr(node, "status", None), "conditions", None) or []:
            if getattr(cond, "type", None) == CONDITION:
                self._written = Condition(str(cond.status), str(cond.reason or ""),
                                          str(cond.message or ""))
                when = getattr(cond, "last_transition_time", None)
                self._transition = _stamp(when) if isinstance(when, datetime) else None
                return

    def _failed(self, doing: str, exc: BaseException) -> None:
        self.errors += 1
        status = getattr(exc, "status", None)
        why = f"HTTP {status} {getattr(exc, 'reason', '')}".strip() if status else \
            f"{type(exc).__name__}: {exc}"
        self._log("error", f"node condition {doing} failed", node=self.node,
                  error=" ".join(why.split())[:300], errors=self.errors)

    def _info(self, msg: str, **fields: Any) -> None:
        self._log("info", msg, node=self.node, **fields)

    def _log(self, level: str, msg: str, **fields: Any) -> None:
        if self.log is None:
            from gputriage.watch.logs import WatchLog

            self.log = WatchLog(sys.stderr)
        self.log.log(level, msg, **fields)


def node_condition_sink(node_name: str | None, *, log: Any = None,
                        kubeconfig: str | None = None,
                        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
                        timeout_s: float = 10.0) -> Sink:
    """The sink that sets ``GPUHealthy`` on Node ``node_name`` (default ``$NODE_NAME``)
    through the in-cluster service account or the kubeconfig. A usage error when no node
    is named or no cluster configuration loads (found at start, not each cycle)."""
    import click

    node = node_name or os.environ.get("NODE_NAME")
    if not node:
        raise click.UsageError("--node-conditions needs the Node's name: --node-name or "
                               "$NODE_NAME (in a pod: the downward API's spec.nodeName)")
    from gputriage.collect.k8s_api import (
        ClusterUnavailable,
        ReadOptions,
        api_client,
        has_kubeconfig,
    )

    try:
        # $KUBECONFIG as the client would read it, but read now, not at its import
        where = kubeconfig or (os.environ.get("KUBECONFIG") if has_kubeconfig() else None)
        api, _, _ = api_client(ReadOptions(kubeconfig=where, timeout_s=timeout_s))
    except ClusterUnavailable as exc:
        raise click.UsageError(f"--node-conditions: {exc}") from None
    from kubernetes import client

    return NodeConditionSink(client.CoreV1Api(api), node, log=log,
                             heartbeat_s=heartbeat_s, timeout_s=timeout_s)
