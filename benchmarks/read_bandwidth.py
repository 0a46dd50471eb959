"""Sequential read bandwidth of ``gputriage weights --measure`` beside ``dd iflag=direct``.

Creates a file of --size under a temporary directory (--dir picks where: put it on the
storage you want to measure), then reads at most --bytes of it, alternately, with the
measure function (O_DIRECT, aligned buffer) and with ``dd if=FILE of=/dev/null
bs=8M count=N iflag=direct``; prints MB/s of each, their ratio, the bytes each run
read at most, and the peak RSS of this process (the measure's buffer is one aligned
chunk, whatever --bytes says). The only bytes
written are the test file's, inside the temporary directory, removed at the end.

Usage: python benchmarks/read_bandwidth.py [--dir DIR] [--size 1GB] [--bytes 512MB]
                                          [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

from gputriage.text.units import parse_size
from gputriage.weights.measure import CHUNK, measure_read


def _make(path: str, size: int) -> None:
    block = os.urandom(CHUNK)
    with open(path, "wb") as fh:
        left = size
        while left > 0:
            fh.write(block[: min(left, len(block))])
            left -= len(block)
        fh.flush()
        os.fsync(fh.fileno())


def _dd(path: str, limit: int) -> float | None:
    """dd's MB/s for ``limit`` bytes with iflag=direct (None when dd or O_DIRECT fails)."""
    if shutil.which("dd") is None:
        return None
    count = max(1, limit // CHUNK)
    argv = ["dd", f"if={path}", "of=/dev/null", f"bs={CHUNK}", f"count={count}", "iflag=direct"]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False,
                          env={**os.environ, "LC_ALL": "C"})
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        return None
    m = re.search(r"^(\d+) bytes", done.stderr, re.MULTILINE)
    copied = int(m.group(1)) if m else count * CHUNK
    return copied / elapsed / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where the test file goes")
    parser.add_argument("--size", default="1GB", help="test file size")
    parser.add_argument("--bytes", default="512MB", help="bytes read per run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    size, limit = int(parse_size(args.size)), int(parse_size(args.bytes))
    with tempfile.TemporaryDirectory(prefix="gputriage-bw-", dir=args.dir) as tmp:
        path = os.path.join(tmp, "weights.bin")
        _make(path, size)
        ours: list[float] = []
        dds: list[float] = []
        direct = True
        most = 0
        base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for _ in range(args.runs):
            found = measure_read(path, limit)
            assert found.bytes_read <= limit
            most = max(most, found.bytes_read)
            direct = direct and found.direct
            ours.append(found.bytes_per_s / 1e6)
            dd = _dd(path, limit)
            if dd is not None:
                dds.append(dd)
    mode = "O_DIRECT" if direct else "page cache (O_DIRECT refused here)"
    mine = statistics.median(ours)
    print(f"file {size / 1e6:,.0f} MB, {limit / 1e6:,.0f} MB read per run, {args.runs} runs")
    print(f"gputriage weights --measure  {mine:10,.0f} MB/s  ({mode})")
    if dds:
        theirs = statistics.median(dds)
        print(f"dd iflag=direct              {theirs:10,.0f} MB/s")
        print(f"ratio (measure / dd)         {mine / theirs:10.2f}")
    else:
        print("dd iflag=direct              not run (no dd, or O_DIRECT refused)")
    print(f"most bytes one measure read   {most:10,} (limit {limit:,})")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS                     {peak:10.1f} MiB (before the reads "
          f"{base_rss / 1024:.1f} MiB)")


if __name__ == "__main__":
    main()
