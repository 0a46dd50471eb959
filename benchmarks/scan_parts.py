"""Where a worker's CPU time goes, block by block, in the kernel-log scan.

Runs the worker task (``gputriage.logscan.blocks.block_task``) in this process on a few
blocks spread over a log and splits each block's CPU time by part, each part's own time
(what the parts it calls took is theirs):

  * search: the anchor search (Hyperscan, or ``bytes.find`` where it is absent);
  * storm pass: the pass over the Xid lines of a span that storm lines crowd, folding
    them (``logscan.stormspan``), its per-line hand-overs apart;
  * per-line parse: the candidate lines (and the first occurrences of each Xid key)
    read one by one (``LineSource.line``: prefixes, the event table, the fold);
  * numbering: the newlines counted for line numbers;
  * other: mapping the block, its margins, the block's result;

then what its result costs to send: pickled in the worker, unpickled by the main process.
Each part is timed by wrapping the function that does it: a part whose function has
been renamed since says so and its time goes to "other".

Usage: python benchmarks/scan_parts.py LOG [--blocks 8]  (gputriage imported from
PYTHONPATH, else this checkout's src)
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# part -> (module, attribute path) of the function that does it
PARTS = {
    "search": [("gputriage.logscan.hsearch", "hyperscan_hits"),
               ("gputriage.logscan.search", "_find_hits")],
    "storm pass": [("gputriage.logscan.stormspan", "SpanPass.run")],
    "per-line parse": [("gputriage.logscan.lines", "LineSource.line")],
    "numbering": [("gputriage.logscan.search", "newlines"),
                  ("gputriage.logscan.stormspan", "newlines")],
}


class Clock:
    """Each part's own CPU time: a part's time less that of the parts it called."""

    def __init__(self) -> None:
        self.own: dict[str, float] = {}
        self.inner: list[float] = []  # per open part: the time of the parts it called

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            self.inner.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.process_time() - start
                self.own[part] = self.own.get(part, 0.0) + spent - self.inner.pop()
                if self.inner:
                    self.inner[-1] += spent
        return timed


def _install(clock: Clock) -> list[str]:
    """Wrap every part's functions; the names no longer found."""
    import importlib

    missing = []
    for part, places in PARTS.items():
        for module_name, path in places:
            owner: Any = importlib.import_module(module_name)
            *outer, name = path.split(".")
            for attr in outer:
                owner = getattr(owner, attr)
            fn = getattr(owner, name, None)
            if fn is None:
                missing.append(f"{module_name}.{path}")
                continue
            setattr(owner, name, clock.wrap(part, fn))
    return missing


def measure(log: str, blocks: int, config: Any = None) -> str:
    """One line: each part's CPU ms per block, over ``blocks`` blocks spread over ``log``
    (the first, whose start-up costs differ, left out), and the result's pickle;
    ``config``: a ``ScanConfig`` (by default the scan's)."""
    from gputriage.logscan import blocks as block_mod
    from gputriage.logscan import search
    from gputriage.logscan.config import ScanConfig

    config = config or ScanConfig()
    fd = os.open(log, os.O_RDONLY)
    try:
        anchors = tuple(search.anchors_for(os.pread(fd, 4096, 0)))
        count = os.fstat(fd).st_size // config.task_bytes + 1
    finally:
        os.close(fd)
    search.prepare(anchors, config)  # (as before the workers fork)
    picks = sorted({1 + k * max(1, (count - 1) // blocks) for k in range(blocks)} & set(
        range(1, count))) or [0]

    def task(i: int) -> Any:
        return block_mod.block_task(log, i, anchors=anchors, config=config, name="log",
                                    now=None)

    fd = os.open(log, os.O_RDONLY)
    try:  # the blocks in the page cache, as a run that follows the benchmark's warm-up finds them
        for i in picks:
            os.pread(fd, config.task_bytes, i * config.task_bytes)
    finally:
        os.close(fd)
    task(picks[0])  # (caches warm, as in a worker past its first block)
    clock = Clock()
    missing = _install(clock)
    total = dumps = loads = 0.0
    sent = 0
    for i in picks:
        start = time.process_time()
        result = task(i)
        total += time.process_time() - start
        start = time.process_time()
        data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        dumps += time.process_time() - start
        start = time.process_time()
        pickle.loads(data)
        loads += time.process_time() - start
        sent += len(data)
    n = len(picks)
    parts = [(part, clock.own.get(part, 0.0)) for part in PARTS]
    other = total - sum(t for _, t in parts)
    line = ", ".join(f"{part} {t / n * 1e3:.1f}" for part, t in [*parts, ("other", other)])
    out = (f"CPU ms per {config.task_bytes >> 20} MiB block ({n} blocks): {total / n * 1e3:.1f} = "
           f"{line}; its result pickled {dumps / n * 1e3:.1f} + unpickled "
           f"{loads / n * 1e3:.1f} ({sent / n / 1024:.0f} KiB)")
    if missing:
        out += f" [not found, timed as other: {', '.join(missing)}]"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--blocks", type=int, default=8, help="blocks timed (default 8)")
    args = parser.parse_args()
    if not any(Path(p, "gputriage").is_dir() for p in sys.path if p):
        sys.path.insert(0, str(REPO / "src"))
    print(measure(args.log, max(1, args.blocks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
