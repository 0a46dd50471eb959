"""The fleet demo: 64 simulated HGX H100 nodes where the 6 nodes that show
Xid 79 are all on one new driver version (issue 5, item 6).

The nodes come from the scenario models (:mod:`gputriage.scenarios`): each
distinct variant (driver, kernel, healthy or ``xid79-gpu-lost``) is rendered
and analysed once by the real engine, and every node's result is that
variant's ``gputriage/result/v1`` document with the host attributes rewritten
(host name, boot id, GPU UUIDs, snapshot time). With ``snapshots=True`` each
node is instead written as a full snapshot directory (slower to analyse).

Write it with ``gputriage fleet --demo DIR``, then run ``gputriage fleet DIR``:
the top separating attribute of ``xid.79`` is ``driver.userspace = 550.90.07``
(F1 0.75: all 6 affected nodes and 4 healthy ones run it); the newer kernel
that the affected nodes share with 24 healthy nodes is a confounder (F1 0.33).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputriage.scenarios.model import Host

OLD_DRIVER = "550.54.15"
NEW_DRIVER = "550.90.07"
OLD_KERNEL = "5.15.0-105-generic"
NEW_KERNEL = "5.15.0-107-generic"
NODES = 64
NEW_DRIVER_NODES = (3, 9, 12, 20, 27, 33, 41, 46, 52, 60)  # spread over the racks
XID79_NODES = NEW_DRIVER_NODES[:6]
NEW_KERNEL_NODES = frozenset(XID79_NODES) | frozenset(range(36, 60))
CREATED = datetime(2024, 5, 14, 9, 30, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class DemoNode:
    """One simulated node of the demo fleet."""

    hostname: str  # r01-gpu-04: rack 1, slot 4
    driver: str
    kernel: str
    xid79: bool


def demo_plan(nodes: int = NODES) -> list[DemoNode]:
    """The demo fleet: 8 nodes a rack; see the module docstring."""
    plan = []
    for i in range(nodes):
        plan.append(DemoNode(
            hostname=f"r{i // 8 + 1:02d}-gpu-{i % 8 + 1:02d}",
            driver=NEW_DRIVER if i in NEW_DRIVER_NODES else OLD_DRIVER,
            kernel=NEW_KERNEL if i in NEW_KERNEL_NODES else OLD_KERNEL,
            xid79=i in XID79_NODES))
    return plan


def _host_model(node: DemoNode) -> Host:
    """The scenario host model of a node (healthy or xid79-gpu-lost)."""
    from gputriage.scenarios import get_scenario

    host = get_scenario("xid79-gpu-lost" if node.xid79 else "healthy-8xh100").host()
    host.userspace_version = node.driver
    host.kernel_module_version = node.driver
    host.kernel_release = node.kernel
    return host


def _analysed(node: DemoNode) -> dict:
    """The result document of a node's variant, rendered and analysed once."""
    from gputriage.engine.analysis import analyze
    from gputriage.results.document import to_json
    from gputriage.scenarios import write_host
    from gputriage.snapshot.bundle import Snapshot

    name = "xid79-gpu-lost" if node.xid79 else "healthy-8xh100"
    with tempfile.TemporaryDirectory(prefix="gputriage-fleet-") as tmp:
        path = write_host(_host_model(node), Path(tmp) / "snap", scenario=name)
        return to_json(analyze(Snapshot.load(path)), generated=CREATED)


def _node_uuid(hostname: str, salt: str) -> str:
    digest = hashlib.sha256(f"{hostname}:{salt}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def _rewrite(doc: dict, node: DemoNode, index: int) -> dict:
    """A copy of ``doc`` as node ``node`` would have reported it."""
    out = copy.deepcopy(doc)
    boot_id = _node_uuid(node.hostname, "boot")
    created = (CREATED + timedelta(seconds=7 * index)).isoformat()
    out["host"]["hostname"] = node.hostname
    out["host"]["boot_id"] = boot_id
    manifest = out.get("manifest") or {}
    manifest.update(host=node.hostname, boot_id=boot_id, created=created)
    old_uuids = {}
    for gpu in out.get("gpus", []):
        if gpu.get("uuid"):
            new = "GPU-" + _node_uuid(node.hostname, f"gpu{gpu.get('index')}")
            old_uuids[gpu["uuid"]] = new
            gpu["uuid"] = new
    for finding in out.get("findings", []):
        scope = finding.get("scope") or {}
        if scope.get("uuid") in old_uuids:
            scope["uuid"] = old_uuids[scope["uuid"]]
    return out


def demo_results(nodes: int = NODES) -> Iterator[tuple[str, dict]]:
    """``(hostname, result document)`` of every demo node, in plan order."""
    variants: dict[tuple[str, str, bool], dict] = {}
    for i, node in enumerate(demo_plan(nodes)):
        key = (node.driver, node.kernel, node.xid79)
        if key not in variants:
            variants[key] = _analysed(node)
        yield node.hostname, _rewrite(variants[key], node, i)


def write_demo(out_dir: str | os.PathLike, *, nodes: int = NODES,
               snapshots: bool = False, force: bool = False) -> list[Path]:
    """Write the demo fleet as the new directory ``out_dir``: one ``HOST.json``
    result per node, or one snapshot directory per node with ``snapshots=True``.
    An existing non-empty ``out_dir`` is refused unless ``force``; a ``.tar.gz``
    name is refused (the demo is a directory)."""
    from gputriage.snapshot.writer import OutputError, output_kind, staged_directory, write_new

    out = Path(out_dir)
    if output_kind(out) != "dir":
        raise OutputError(f"{out}: the fleet demo is a directory of {nodes} node results; "
                          "give a directory name, not a .tar.gz")
    names: list[str] = []
    with staged_directory(out, force) as tmp:
        if snapshots:
            from gputriage.scenarios import write_host

            for i, node in enumerate(demo_plan(nodes)):
                host = _host_model(node)
                host.hostname = node.hostname
                host.boot_id = _node_uuid(node.hostname, "boot")
                host.now = CREATED + timedelta(seconds=7 * i)
                names.append(write_host(host, tmp / node.hostname, scenario="fleet-demo").name)
        else:
            for hostname, doc in demo_results(nodes):
                write_new(tmp / f"{hostname}.json",
                          (json.dumps(doc, indent=2) + "\n").encode("utf-8"))
                names.append(f"{hostname}.json")
    return [out / name for name in names]
