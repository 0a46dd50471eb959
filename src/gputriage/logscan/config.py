"""How a kernel-log scan reads and searches: block sizes, worker counts and the search
functions, in one value passed to :func:`gputriage.logscan.scan_paths` /
:func:`~gputriage.logscan.scan_text` (tests pass small blocks to reach the edge cases
of large inputs)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

__all__ = ["DEFAULT", "TASKS", "TASK_MAX", "ScanConfig"]

TASKS = 8  # tasks a large plain file is cut into, or a multiple (``ScanConfig.task_for``)
TASK_MAX = 256 << 20  # bytes of a task at most


@dataclass(frozen=True)
class ScanConfig:
    """Tunables of one scan."""

    block: int = 8 << 20  # bytes per read (and per decompression step)
    # bytes of a large plain file per worker task (None: :meth:`task_for` the file's
    # size). What a task keeps one by one of a key that storms (``blocks.BLOCK_KEEP``),
    # parses before the key folds, sends back and the main process merges is per task, so
    # fewer, larger tasks cost less; what a task holds in memory is ``piece_bytes``
    task: int | None = None
    piece: int | None = None  # bytes of a task searched and parsed at a time (None: 2 blocks)
    long_line: int = 4 << 20  # a line without a newline for this long is cut into pieces
    process_min: int = 64 << 20  # plain files this big are searched by worker processes
    workers: int | None = None  # threads or processes; None: one per CPU, at most 8
    gap_exact: int = 64 << 10  # longer gaps between wanted lines are not counted (workers)
    # the anchor search: "auto" or "hyperscan" (Hyperscan where its wheel is installed,
    # else ``bytes.find``), or "python" (``bytes.find``)
    engine: Literal["auto", "hyperscan", "python"] = "auto"
    reject: bool = True  # drop routine lines (``search.ROUTINE``) before decoding them

    @property
    def task_bytes(self) -> int:
        """Bytes of a plain file per worker task where ``task`` sets them (else the
        least :meth:`task_for` gives: two blocks)."""
        return self.task or 2 * self.block

    @property
    def piece_bytes(self) -> int:
        """Bytes of a task searched and parsed at a time (see ``piece``)."""
        return self.piece or 2 * self.block

    def task_for(self, size: int) -> int:
        """Bytes per worker task for a plain file of ``size`` bytes: ``task`` where set,
        else an eighth of the file (:data:`TASKS`; in whole MiB, at least two blocks),
        or past 8 x :data:`TASK_MAX` the share of the least multiple of eight tasks
        that keeps each within it: 1, 2, 4 or 8 workers then share them evenly. It
        follows the file alone, not the machine, so that a file is read the same
        everywhere (a long gap's lines are counted by its bytes, from where a task
        starts: line numbers past one depend on it).

        Fewer, larger tasks cost less: each parses again the first occurrences of a
        storm's keys, and its result is merged. Measured with benchmarks/log_scan.py (2
        workers): on the 1 GB logs, 128 MiB tasks against 16 MiB ones, storm 5.56 ->
        4.76 CPU seconds, quiet 1.19 -> 1.07, busy HCA 1.12 -> 0.97; on the 5 GB storm,
        24 tasks of 213 MiB against 40 of 128 MiB, 20.4 -> 18.9 user CPU seconds (best
        of 3 alternating). The same output."""
        if self.task:
            return self.task
        tasks = TASKS * max(1, -(-size // (TASKS * TASK_MAX)))
        return max(2 * self.block, size // tasks >> 20 << 20)

    def parallel(self, processes: bool = False) -> int:
        """How many search threads to use (one where the search cannot run outside the
        GIL: ``bytes.find``'s), or with ``processes``, forked worker processes (for
        which the GIL does not matter)."""
        if not processes and not self.hyperscan():
            return 1
        if self.workers is not None:
            return max(1, self.workers)
        return max(1, min(8, os.cpu_count() or 1))

    def hyperscan(self) -> bool:
        """Whether the anchor search is Hyperscan's (else ``bytes.find``)."""
        if self.engine == "python":
            return False
        from gputriage.logscan.hsearch import available

        return available()


DEFAULT = ScanConfig()
