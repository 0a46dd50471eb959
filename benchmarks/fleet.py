"""Benchmark ``gputriage fleet`` on 100,000 node results.

Setup (not timed): the demo fleet's result documents
(:mod:`gputriage.fleet.scenario`: real engine output for a healthy node and an
Xid 79 node, on two drivers and two kernels) are used as templates; 100,000
``HOST.json`` files of schema ``gputriage/result/v1`` are written to a
temporary directory (1,000 per sub-directory), each with its own host name,
boot id and snapshot time, 1% of them on a new driver and half of those with
Xid 79, plus a few corrupt files. About 1.5 GB of disk.

Timed: the real CLI, ``python -m gputriage fleet DIR --json``, in a child
process pinned to 2 CPUs where the OS allows, so the path is exactly the one
users run (files on disk, not in memory; the CLI reads them in one worker
process per CPU and keeps only each node's attributes and finding ids).
Prints wall time, nodes per second, CPU time (useful on a busy machine) and
peak RSS (of the largest process: the parent or one worker). Target: < 20 s
and < 2 GB on 2 cores.

    PYTHONPATH=src python3 benchmarks/fleet.py [--nodes N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(SRC))

from gputriage.fleet.scenario import NEW_DRIVER, demo_plan, demo_results  # noqa: E402

PER_DIR = 1000


def _templates() -> dict[tuple[str, bool], str]:
    """JSON text per (driver, xid79) with the host name, boot id and time as
    placeholders."""
    out: dict[tuple[str, bool], str] = {}
    for node, (host, doc) in zip(demo_plan(), demo_results(), strict=True):
        key = (node.driver, node.xid79)
        if key in out:
            continue
        doc["host"]["boot_id"] = doc["manifest"]["boot_id"] = "@@BOOT@@"
        doc["manifest"]["created"] = "@@CREATED@@"
        text = json.dumps(doc, indent=2).replace(host, "@@HOST@@")
        out[key] = text
    return out


def build(root: Path, nodes: int) -> int:
    """Write ``nodes`` results (and 10 corrupt files) under ``root``; bytes written."""
    templates = _templates()
    total = 0
    for i in range(nodes):
        sub = root / f"batch{i // PER_DIR:04d}"
        if i % PER_DIR == 0:
            sub.mkdir(parents=True, exist_ok=True)
        new = i % 100 == 7
        key = (NEW_DRIVER if new else "550.54.15", new and i % 200 == 7)
        host = f"r{i // 16:05d}-gpu-{i % 16:02d}"
        text = (templates[key].replace("@@HOST@@", host)
                .replace("@@BOOT@@", f"00000000-0000-4000-8000-{i:012d}")
                .replace("@@CREATED@@", f"2024-05-14T09:{(i // 60) % 60:02d}:{i % 60:02d}+00:00"))
        (sub / f"{host}.json").write_text(text, encoding="utf-8")
        total += len(text)
    for j in range(10):
        (root / f"corrupt{j}.json").write_text("{\"schema\": \"gputriage/result/v1\", ")
    return total


def run(root: Path, nodes: int) -> None:
    """Time the CLI on ``root`` and print the numbers."""
    env = dict(os.environ, PYTHONPATH=str(SRC))
    cmd = [sys.executable, "-m", "gputriage", "fleet", str(root), "--json"]

    def pin() -> None:
        if hasattr(os, "sched_setaffinity"):
            cpus = sorted(os.sched_getaffinity(0))[:2]
            os.sched_setaffinity(0, cpus)

    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, preexec_fn=pin, check=False)
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_kib, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    if proc.returncode not in (0, 1, 2):
        print(proc.stderr.decode(errors="replace"), file=sys.stderr)
        raise SystemExit(f"gputriage fleet failed with {proc.returncode}")
    doc = json.loads(proc.stdout)
    print(f"nodes aggregated : {doc['nodes']} (bad inputs {doc['bad_inputs']['count']})")
    counts = ", ".join(f"{f['id']}={f['count']}" for f in doc["findings"])
    print(f"findings         : {counts}")
    top = doc["findings"][0]["blast_radius"][0] if doc["findings"] else None
    if top:
        print(f"top separator    : {top['attribute']} = {top['value']} (F1 {top['score']})")
    print(f"wall time        : {wall:.2f} s  (target < 20 s)")
    print(f"nodes per second : {nodes / wall:,.0f}")
    print(f"CPU time         : {cpu:.2f} s, parent and workers together")
    print(f"peak RSS         : {peak_kib / 1024:.0f} MiB  (target < 2048 MiB)")


def main() -> None:
    """Build the fleet, time ``gputriage fleet`` on it, clean up."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, default=None,
                        help="build into (and keep) this directory; reuse it when it exists")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="gputriage-fleet-bench-"))
    try:
        if not (args.keep and root.exists() and any(root.iterdir())):
            t = time.perf_counter()
            size = build(root, args.nodes)
            print(f"built {args.nodes} results ({size / 2**20:.0f} MiB) in "
                  f"{time.perf_counter() - t:.1f} s under {root}")
        run(root, args.nodes)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
