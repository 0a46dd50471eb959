"""Rules on where a model's weights lie: a network or object-store mount read on every
start, local NVMe too small to stage them, and RAM too small to cache them."""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.model import Action, Blame, Finding, Severity, evidence
from gputriage.parsers.weights_host import WeightsHost
from gputriage.rules.base import finding, rule
from gputriage.text.units import format_bytes

_REMOTE = {"nfs": "NFS", "network": "a network file system", "object_store":
           "an object store (FUSE mount)"}


def _lines(host: WeightsHost, *keys: str) -> list[str]:
    return [host.lines[k] for k in ("model_dir", *keys) if k in host.lines]


def _size(host: WeightsHost) -> str:
    return f"a {format_bytes(host.model_bytes)} model" if host.model_bytes else "the model"


_LOCAL = {"local_nvme": "local NVMe", "local_disk": "a local disk", "memory": "memory (tmpfs)"}


@rule("weights.storage", produces=("weights.network-read", "weights.overlay-image",
                                   "weights.local-read"))
def weights_storage(weights_host: WeightsHost) -> Iterator[Finding]:
    """Weights read from a network file system or an object store on every start (each
    replica, each restart on a new node: the herd goes through the shared link), or
    carried in a container image's layers."""
    tier, mount = weights_host.tier, weights_host.mount
    if mount is None or tier is None:
        return
    if tier in _REMOTE:
        yield finding(
            "weights.network-read", Severity.WARNING,
            f"weights read over {_REMOTE[tier]} on every start ({mount.fs_type} at "
            f"{mount.mount_point})",
            f"{_size(weights_host).capitalize()} is read from {mount.source} each time a "
            "replica starts on a node: replicas that start together share that link and "
            "the last one waits for all of them (gputriage weights --replicas N --link "
            "RATE computes it). Stage the weights on local NVMe (a node-local cache or a "
            "pre-pull DaemonSet) and load from there.",
            Action.FIX_CONFIG, Blame.CONFIG,
            evidence=[evidence("weights_host", _lines(weights_host, "model_bytes", "mount"))])
    elif tier == "overlay":
        yield finding(
            "weights.overlay-image", Severity.INFO,
            f"weights in the container's image layers (overlay at {mount.mount_point})",
            "The model ships inside the image: every node pulls it from the registry with "
            "the image, and replicas starting on new nodes pull together. A volume on "
            "local NVMe, filled ahead, keeps the image small.",
            Action.NONE, Blame.CONFIG,
            evidence=[evidence("weights_host", _lines(weights_host, "model_bytes", "mount"))])
    elif tier in _LOCAL:
        yield finding(
            "weights.local-read", Severity.OK,
            f"weights read from {_LOCAL[tier]} ({mount.fs_type} {mount.source} at "
            f"{mount.mount_point})",
            f"{_size(weights_host).capitalize()} loads at this node's own storage speed; "
            "replicas starting together do not share a link for it.",
            Action.NONE, Blame.CONFIG,
            evidence=[evidence("weights_host", _lines(weights_host, "model_bytes", "mount",
                                                      "free_bytes"))])


@rule("weights.local-space", produces=("weights.local-nvme-short",))
def weights_local_space(weights_host: WeightsHost) -> Iterator[Finding]:
    """Local NVMe (else a local disk), where the weights would be staged, has less free
    space than the model is large (only when the model is not there already)."""
    host = weights_host
    if (host.model_bytes is None or host.local_free_bytes is None or host.local_mount is None
            or host.tier in ("local_nvme", "local_disk", "memory")):
        return
    if host.local_free_bytes >= host.model_bytes:
        return
    yield finding(
        "weights.local-nvme-short", Severity.WARNING,
        f"{_LOCAL.get(host.local_tier or '', 'local storage')} has "
        f"{format_bytes(host.local_free_bytes)} free for {_size(host)}",
        f"{host.local_mount.mount_point} ({host.local_mount.source}) cannot hold the "
        "weights, so they cannot be staged there: every start reads them from "
        f"{host.mount.fs_type if host.mount else 'their mount'}. Free space, or stage on a "
        "larger local volume.", Action.FIX_CONFIG, Blame.CONFIG,
        evidence=[evidence("weights_host", _lines(host, "model_bytes", "local_mount",
                                                  "local_free_bytes"))])


@rule("weights.page-cache", produces=("weights.ram-short",))
def weights_page_cache(weights_host: WeightsHost) -> Iterator[Finding]:
    """MemAvailable below the model's size: the page cache cannot keep the weights, so a
    restart of the job on this node reads them from storage again."""
    host = weights_host
    if host.model_bytes is None or host.mem_available_kb is None:
        return
    available = host.mem_available_kb * 1024
    if available >= host.model_bytes:
        return
    yield finding(
        "weights.ram-short", Severity.INFO,
        f"RAM available ({format_bytes(available)}) is less than {_size(host)}",
        "The page cache cannot hold the weights: a restart reads them from storage again, "
        "at the storage's speed, not at memory speed.", Action.NONE, Blame.CONFIG,
        evidence=[evidence("weights_host", _lines(host, "model_bytes", "MemAvailable"))])
