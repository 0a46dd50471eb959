"""The instructions one worker task of the kernel-log scan executes, this checkout against
a baseline: a figure that does not move from run to run.

On a shared 2-core machine the same task's CPU time varies by a tenth from run to run
and more from hour to hour, so a change worth 1 % cannot be seen in times. valgrind's
callgrind counts the instructions instead: the same on every run (hashes seeded alike,
bytecode compiled beforehand), and a fair proxy for the time of Python-level work
(less so for Hyperscan's vector code, whose instructions do more each). Each tree runs
twice under callgrind: once to set up (imports, anchors, the database) and once to set
up and run the task; the task is the difference. Two runs of one tree differ by about
0.3 % (the C allocator's, whose work follows the environment's size), not by the
interpreter's or the regex engine's counts. The functions whose counts differ most
between the trees are listed (C functions: the interpreter's, the regex engine's,
Hyperscan's), which tells where a change saved or spent.

Usage: python benchmarks/instructions.py LOG [--task 3] [--baseline OLD/src] [--top 12]
(valgrind needed: about 30 s per 128 MiB task and tree, the trees run side by side)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# run in the measured process: the scan's setup, then the task (none: setup alone)
_RUN = """
import os, sys
from dataclasses import replace
from gputriage.io.collector import settle_worker
from gputriage.logscan import ScanConfig, blocks
from gputriage.logscan.search import anchors_for
path, task = sys.argv[1], int(sys.argv[2])
config = ScanConfig()
config = replace(config, task=config.task_for(os.path.getsize(path)))
with open(path, "rb") as fh:
    anchors = anchors_for(fh.read(1 << 20))
blocks.prepare(anchors, config)
settle_worker()
if task >= 0:
    blocks.block_task(path, task, anchors=anchors, config=config, name="log", now=None)
"""
_LINE = re.compile(r"\s*([\d,]+) \([^)]*\)\s+(\S+)(?: \[(\S+)\])?")


class Failed(Exception):
    """A run that gave no count (its error, one line)."""


def _counts(out_file: str) -> dict[str, int]:
    """Instructions per function (file:function, the path left out) in a callgrind file."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", out_file],
                          capture_output=True, text=True, check=True).stdout
    counts: dict[str, int] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            name = m.group(2).rsplit("/", 1)[-1]
            if name.startswith("???") and m.group(3):  # (no symbols: its library named)
                name = m.group(3).rsplit("/", 1)[-1].split(".")[0] + name[3:]
            counts[name] = counts.get(name, 0) + int(m.group(1).replace(",", ""))
    return counts


def _start(tree: str, log: str, task: int, work: str, tag: str) -> tuple[subprocess.Popen[str],
                                                                           str]:
    """Start one run under callgrind; (the process, its output file)."""
    out_file = os.path.join(work, f"{tag}.out")
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONHASHSEED": "0",
           "PYTHONPYCACHEPREFIX": os.path.join(work, "pyc")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}",
           sys.executable, "-c", _RUN, log, str(task)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True), out_file


def _compile(tree: str, work: str) -> None:
    """Bytecode of the tree and of what it imports, so that no run compiles any."""
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONPYCACHEPREFIX": os.path.join(work, "pyc")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", tree], env=env, check=False,
                   stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-c", _RUN, os.devnull, "-1"], env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(trees: dict[str, str], log: str, task: int, work: str) -> dict[str, dict[str, int]]:
    """Each tree's task: instructions per function (setup's taken off)."""
    for tree in trees.values():
        _compile(tree, work)
    runs = []
    for name, tree in trees.items():
        for tag, index in (("setup", -1), ("task", task)):
            proc, out_file = _start(tree, log, index, work, f"{name}-{tag}")
            runs.append((name, tag, proc, out_file))
    counted: dict[tuple[str, str], dict[str, int]] = {}
    for name, tag, proc, out_file in runs:
        _, err = proc.communicate()
        if proc.returncode != 0 or not os.path.exists(out_file):
            last = [line for line in err.splitlines() if line.strip()][-1:] or ["no output"]
            raise Failed(f"{name} ({tag}) failed: {last[0]}")
        counted[name, tag] = _counts(out_file)
    out = {}
    for name in trees:
        setup, whole = counted[name, "setup"], counted[name, "task"]
        out[name] = {f: n - setup.get(f, 0) for f, n in whole.items()}
    return out


def report(counts: dict[str, dict[str, int]], top: int) -> list[str]:
    """The task's instructions per tree, then the functions that differ most."""
    names = list(counts)
    totals = {n: counts[n].get("PROGRAM", 0) for n in names}
    lines = ["instructions of the task: " + ", ".join(
        f"{n} {totals[n] / 1e6:,.1f} M" for n in names)]
    if len(names) == 2:
        a, b = names
        change = (totals[a] - totals[b]) / totals[b] * 100 if totals[b] else 0.0
        lines[0] += f" ({change:+.2f} %)"
        funcs = sorted(({*counts[a], *counts[b]} - {"PROGRAM"}),
                       key=lambda f: -abs(counts[a].get(f, 0) - counts[b].get(f, 0)))
        lines.append(f"{'M ' + a:>12} {'M ' + b:>12} {'difference':>11}  function")
        for f in funcs[:top]:
            x, y = counts[a].get(f, 0) / 1e6, counts[b].get(f, 0) / 1e6
            lines.append(f"{x:12.1f} {y:12.1f} {x - y:+11.1f}  {f}")
    else:
        ranked = sorted(counts[names[0]].items(), key=lambda kv: -kv[1])
        lines += [f"{n / 1e6:12.1f} M  {f}" for f, n in ranked if f != "PROGRAM"][:top]
    return lines


def _tasks(log: str) -> int:
    """How many worker tasks the scan cuts ``log`` into (this checkout's layout)."""
    if str(REPO / "src") not in sys.path:
        sys.path.insert(0, str(REPO / "src"))
    from gputriage.logscan import ScanConfig

    size = os.path.getsize(log)
    task = ScanConfig().task_for(size)
    return max(1, -(-size // task))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--task", type=int, default=3, help="the task counted (default 3)")
    parser.add_argument("--baseline", metavar="SRC", help="another tree's src to compare")
    parser.add_argument("--top", type=int, default=12, help="functions listed (default 12)")
    args = parser.parse_args()
    missing = [tool for tool in ("valgrind", "callgrind_annotate") if not shutil.which(tool)]
    if missing:
        print(f"instructions: {', '.join(missing)} not found (install valgrind)",
              file=sys.stderr)
        return 2
    if not os.path.isfile(args.log):
        print(f"instructions: no such file: {args.log}", file=sys.stderr)
        return 2
    tasks = _tasks(args.log)
    if not 0 <= args.task < tasks:
        print(f"instructions: {args.log} has tasks 0 to {tasks - 1}", file=sys.stderr)
        return 2
    trees = {"this": str(REPO / "src")}
    if args.baseline:
        trees["baseline"] = str(Path(args.baseline).resolve())
    with tempfile.TemporaryDirectory() as work:
        try:
            counts = measure(trees, os.path.abspath(args.log), args.task, work)
        except Failed as exc:
            print(f"instructions: {exc}", file=sys.stderr)
            return 1
    print("\n".join(report(counts, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
