"""The CPU time of worker tasks of the kernel-log scan, this checkout against a baseline,
in one process, the two trees taking turns: each task's least time over the rounds.

On a shared 2-core machine a task's CPU time moves by a tenth from minute to minute, so
two trees timed one after the other (or in two processes) differ by more than a change
worth a few percent. Here both trees are imported into one process (each under its own
copy of the ``gputriage`` modules), and each round runs every task of the one tree, then
of the other (which goes first alternates): a slow minute slows both. The least time of
each task over the rounds is kept, and the sums are compared.

``benchmarks/instructions.py`` counts instructions instead, which do not move at all; but
an instruction of Hyperscan's vector code does more than one of the interpreter's, so a
change to what Hyperscan searches can count more instructions and take less time (the
storm search's screen, split into literals and one expression: 12 % more instructions
on the 1 GB storm's task 3, 1 to 2 % less CPU time here, 9 % less in Hyperscan). Time
such a change here; six rounds or more (two let a slow minute decide).

Usage: python benchmarks/task_cpu.py LOG --baseline OLD/src [--tasks 3,4,5] [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _ours(name: str) -> bool:
    return name == "gputriage" or name.startswith("gputriage.")


class Tree:
    """One tree's ``gputriage`` modules, kept apart from the other's: put in
    ``sys.modules`` (and the tree first on ``sys.path``) while the tree runs, so that
    what a task imports late comes from its own tree too; those there before are put
    back after."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.modules: dict[str, object] = {}
        self.saved: dict[str, object] = {}

    def __enter__(self) -> Tree:
        self.saved = _take()
        sys.modules.update(self.modules)  # type: ignore[arg-type]
        sys.path.insert(0, self.path)
        return self

    def __exit__(self, *_: object) -> None:
        sys.path.remove(self.path)
        self.modules = _take()
        sys.modules.update(self.saved)  # type: ignore[arg-type]


def _take() -> dict[str, object]:
    """The ``gputriage`` modules of ``sys.modules``, taken out of it."""
    return {name: sys.modules.pop(name) for name in [n for n in sys.modules if _ours(n)]}


def load(tree: Tree, log: str) -> tuple[Callable[[int], object], int]:
    """The worker task of ``tree``'s scan of ``log`` (set up: anchors, databases, a
    first task run) and how many tasks the log is cut into."""
    with tree:
        from dataclasses import replace

        import gputriage
        from gputriage.logscan import ScanConfig, blocks

        if not Path(gputriage.__file__).resolve().is_relative_to(Path(tree.path).resolve()):
            raise ValueError(f"no gputriage package in {tree.path}")  # (else: the installed one)
        from gputriage.logscan.search import anchors_for

        size = os.path.getsize(log)
        config = ScanConfig()
        config = replace(config, task=config.task_for(size))
        with open(log, "rb") as fh:
            anchors = anchors_for(fh.read(1 << 20))
        blocks.prepare(anchors, config)

        def task(index: int) -> object:
            return blocks.block_task(log, index, anchors=anchors, config=config, name="log",
                                     now=None)

        task(0)  # (what a first task compiles or loads once)
        return task, max(1, -(-size // config.task))


def measure(trees: dict[str, str], log: str, tasks: list[int] | None,
            rounds: int) -> dict[str, dict[int, float]]:
    """Each tree's least CPU seconds per task over ``rounds`` rounds (every task when
    ``tasks`` is None)."""
    kept = {name: Tree(path) for name, path in trees.items()}
    loaded = {name: load(tree, log) for name, tree in kept.items()}
    count = min(n for _, n in loaded.values())
    chosen = tasks if tasks is not None else list(range(count))
    if any(not 0 <= i < count for i in chosen):
        raise ValueError(f"{log} has tasks 0 to {count - 1}")
    best = {name: dict.fromkeys(chosen, float("inf")) for name in trees}
    names = list(trees)
    for r in range(rounds):
        for name in names[r % 2:] + names[:r % 2]:
            task = loaded[name][0]
            with kept[name]:
                for i in chosen:
                    start = time.process_time()
                    task(i)
                    best[name][i] = min(best[name][i], time.process_time() - start)
    return best


def report(best: dict[str, dict[int, float]]) -> list[str]:
    """A line per tree: each task's least time and their sum; then the change."""
    lines = [f"{name:>10}: " + " ".join(f"{i}:{t * 1000:.0f}" for i, t in per.items())
             + f"  sum {sum(per.values()) * 1000:.0f} ms" for name, per in best.items()]
    if len(best) == 2:
        (_, a), (_, b) = best.items()
        change = (sum(a.values()) - sum(b.values())) / sum(b.values()) * 100
        lines.append(f"this checkout against the baseline: {change:+.1f} % CPU time")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--baseline", metavar="SRC", required=True,
                        help="another tree's src to compare")
    parser.add_argument("--tasks", help="the tasks timed, as 3,4,5 (default: 3,4,5, or "
                        "every task of a log cut into fewer)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds (default 6)")
    args = parser.parse_args()
    if not os.path.isfile(args.log):
        print(f"task_cpu: no such file: {args.log}", file=sys.stderr)
        return 2
    if not os.path.isdir(args.baseline):
        print(f"task_cpu: no such folder: {args.baseline}", file=sys.stderr)
        return 2
    try:
        tasks = [int(t) for t in args.tasks.split(",")] if args.tasks else None
    except ValueError:
        print(f"task_cpu: --tasks wants numbers such as 3,4,5, not {args.tasks}",
              file=sys.stderr)
        return 2
    trees = {"this": str(REPO / "src"), "baseline": str(Path(args.baseline).resolve())}
    try:
        best = measure(trees, os.path.abspath(args.log), tasks or _default(args.log),
                       max(1, args.rounds))
    except (ValueError, OSError) as exc:
        print(f"task_cpu: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report(best)))
    return 0


def _default(log: str) -> list[int] | None:
    """Tasks 3, 4 and 5 (a storm's steady state), or None (every task) for a log cut into
    fewer than six."""
    with Tree(str(REPO / "src")):
        from gputriage.logscan import ScanConfig

        size = os.path.getsize(log)
        return [3, 4, 5] if -(-size // ScanConfig().task_for(size)) >= 6 else None


if __name__ == "__main__":
    sys.exit(main())
