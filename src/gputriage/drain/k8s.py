"""The fleet as Kubernetes sees it, and cordoning through the official client: the GPU
Nodes (an ``nvidia.com/gpu`` capacity, or the GPU Operator's / NFD's GPU label; every
Node when none has one), those unschedulable, ours when they carry gputriage's
annotation ``gputriage/cordoned: <UTC time> <reason>``. Every cordon also adds its time
to ``gputriage/drained-at`` (the last hour's, space separated), which stays after the
uncordon: the rate counts a node cordoned, uncordoned and cordoned again twice."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from gputriage.drain.policy import RATE_WINDOW, Fleet, OutNode

__all__ = ["ANNOTATION", "LEDGER", "K8sError", "K8sFleet", "fleet_of"]

ANNOTATION = "gputriage/cordoned"
LEDGER = "gputriage/drained-at"
_GPU_LABELS = ("nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present")
PAGE = 500


class K8sError(Exception):
    """The API could not be read or written (one line)."""


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if obj is None:
            return None
        obj = obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
    return obj


def _has_gpu(node: dict[str, Any]) -> bool:
    labels = _get(node, "metadata", "labels") or {}
    if any(str(labels.get(k, "")).lower() == "true" for k in _GPU_LABELS):
        return True
    capacity = _get(node, "status", "capacity") or {}
    value = str(capacity.get("nvidia.com/gpu", "0")).strip()
    return value.isdigit() and int(value) > 0


def stamp(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _since(annotation: str) -> datetime | None:
    first = annotation.split(" ", 1)[0]
    try:
        return datetime.fromisoformat(first.replace("Z", "+00:00"))
    except ValueError:
        return None


def _stamps(text: str) -> list[datetime]:
    return [when for when in map(_since, str(text or "").split()) if when is not None]


def ledger_after(text: str, now: datetime) -> str:
    """The ledger annotation with a cordon at ``now`` added, the stamps older than the
    rate's window dropped (the annotation stays a few words long)."""
    kept = [w for w in _stamps(text) if timedelta(0) <= now - w < RATE_WINDOW]
    return " ".join(stamp(w) for w in sorted({*kept, now.replace(microsecond=0)}))


def fleet_of(nodes: list[dict[str, Any]]) -> Fleet:
    """The fleet of Node objects (as dicts)."""
    gpu = [n for n in nodes if _has_gpu(n)] or nodes
    out = []
    ledger: list[OutNode] = []
    for n in gpu:
        name = str(_get(n, "metadata", "name"))
        annotations = _get(n, "metadata", "annotations") or {}
        ledger.extend(OutNode(name, when, True, "cordoned before")
                      for when in _stamps(annotations.get(LEDGER, "")))
        if not _get(n, "spec", "unschedulable"):
            continue
        note = annotations.get(ANNOTATION)
        if note:
            out.append(OutNode(name, _since(str(note)), True, str(note)))
        else:
            out.append(OutNode(name, None, False, "cordoned"))
    return Fleet(len(gpu), tuple(sorted(out, key=lambda o: o.name)), tuple(ledger))


class K8sFleet:
    """Nodes read and cordoned through a ``kubernetes.client.CoreV1Api``."""

    def __init__(self, core: Any, timeout_s: float = 20.0) -> None:
        self.core = core
        self.timeout_s = timeout_s
        self._ledgers: dict[str, str] = {}  # each Node's ledger as last read
        self._before: dict[str, str] = {}  # as it was before our cordon

    def _nodes(self) -> list[dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException

        items: list[dict[str, Any]] = []
        token = None
        try:
            while True:
                kwargs: dict[str, Any] = {"limit": PAGE, "_request_timeout": self.timeout_s}
                if token:
                    kwargs["_continue"] = token
                page = self.core.list_node(**kwargs)
                items.extend(self.core.api_client.sanitize_for_serialization(i)
                             for i in page.items or [])
                token = page.metadata._continue if page.metadata else None
                if not token:
                    return items
        except ApiException as exc:
            raise K8sError(f"list nodes: {exc.status} {exc.reason}") from None
        except Exception as exc:  # urllib3 errors: refused, timed out
            raise K8sError(f"list nodes: {type(exc).__name__}: {exc}".splitlines()[0]) \
                from None

    def read(self) -> Fleet:
        nodes = self._nodes()
        self._ledgers = {str(_get(n, "metadata", "name")):
                         str((_get(n, "metadata", "annotations") or {}).get(LEDGER) or "")
                         for n in nodes}
        return fleet_of(nodes)

    def _patch(self, node: str, body: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.patch_node(node, body, _request_timeout=self.timeout_s)
        except ApiException as exc:
            raise K8sError(f"patch node {node}: {exc.status} {exc.reason}") from None
        except Exception as exc:
            raise K8sError(f"patch node {node}: {type(exc).__name__}") from None

    def drain(self, node: str, reason: str, now: datetime | None = None) -> None:
        """Cordon, with the annotation saying when and why, and its time in the
        ledger."""
        at = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
        self._before[node] = self._ledgers.get(node, "")
        ledger = ledger_after(self._before[node], at)
        self._patch(node, {"spec": {"unschedulable": True},
                           "metadata": {"annotations": {ANNOTATION: f"{stamp(at)} {reason}",
                                                        LEDGER: ledger}}})

    def give_back(self, node: str) -> None:
        """Undo a cordon that overflowed the budget: it never happened, for the ledger
        too."""
        before = self._before.get(node) or None
        self._patch(node, {"spec": {"unschedulable": None},
                           "metadata": {"annotations": {ANNOTATION: None, LEDGER: before}}})

    def resume(self, node: str) -> None:
        """Uncordon a node cordoned by gputriage; its ledger stays, for the rate."""
        self._patch(node, {"spec": {"unschedulable": None},
                           "metadata": {"annotations": {ANNOTATION: None}}})
