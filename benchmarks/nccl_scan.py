"""Reading a job's NCCL log, side by side with the on-call's grep.

Generates a training job's log (default 1 GB): a PyTorch-style step log with the
NCCL_DEBUG=INFO output of a 16-rank, two-node job (the ``nccl-socket-fallback``
scenario's) repeated through it at ``--nccl-percent`` of the lines (default 1 %,
as when a job re-creates communicators), then times:

  * ``python -m gputriage nccl FILE --json > out`` (a large plain file is read by
    worker processes: :mod:`gputriage.nccl.scan`);
  * ``grep -F NCCL FILE > out2``, the simplest pull of the NCCL lines (the target:
    gputriage at half its throughput or better);
  * ``grep -E 'NCCL (INFO|WARN)|Using network|via NET' FILE > out3``, the lines an
    on-call would pull out to read transports by eye;

with ``--sizes``, ``gputriage nccl`` on the log's first 1, 4 and 16 MiB (files of their
own, each cut after its last whole line): the start-up and reading of the logs a job
usually leaves, beside ``grep -F NCCL`` on the same files;

with ``--stdin``, the same log piped, as ``kubectl logs POD | gputriage nccl -`` reads a
job's log (``cat FILE | python -m gputriage nccl - --json`` against
``cat FILE | grep -F NCCL``: one process, the streamed reader of
:mod:`gputriage.nccl.inputs`, instead of workers);

and, with ``--analyze``, ``python -m gputriage analyze FILE --json > out`` once (the same
log as a job's log pasted to ``analyze``: streamed through its large-text reader,
``gputriage.ingest.bigtext``);

and prints wall times (best of ``--repeat``; gputriage's runs and grep's taking turns),
throughputs, the ratios, the peak RSS of the gputriage run (its largest process and
its process tree, workers included, sampled in one more run of its own as
``benchmarks/log_scan.py`` says why; the target: memory bounded however large the log)
and the size of each output. gputriage runs with its bytecode cached (in a
temporary folder, as an installed package has it, even where PYTHONDONTWRITEBYTECODE
is set): compiling its modules on every start would be timed otherwise.

With ``--parts``, also where the CPU time of one run goes, each part alone in one
process: starting (imports), the look for host outputs in the first MiB (ingest's
detectors; in its own process during a run), and the scan with the NCCL builder
(worker processes share it during a run); then, of the scan, what the workers do (their
regions read, searched, newlines counted, candidate lines cut out), and under it the
floor of any design that looks for the same markers: the file read and the finder's
pass alone (Hyperscan where it is installed), no line cut out nor counted.

With ``--baseline SRC``, gputriage imported from another source tree (a main checkout's
``src``) is timed too, its runs alternating with this tree's, and its parts as well: a
before and after of the same run. CPU seconds (the process tree's user + system, of the
best run) are printed beside wall times: what a shared machine's load disturbs least.

Usage: python benchmarks/nccl_scan.py [--size 1GB] [--nccl-percent 1] [--file LOG] [--parts]
       [--sizes] [--stdin] [--analyze] [--baseline SRC]
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from log_scan import _cpu, _parse_size, _timed, _tree_peak

_STEP = ("2025-03-02 10:{m:02d}:{s:02d},{ms:03d} [rank{r}] INFO train.py:412 step {n} "
         "loss {loss:.4f} lr 3.0e-04 tokens/s {tok:.1f} mem {mem:.1f}G grad_norm {g:.3f}\n")


def _nccl_lines() -> list[str]:
    from gputriage.scenarios.catalog import SOCKET_JOB
    from gputriage.scenarios.model import healthy_hgx_h100
    from gputriage.scenarios.render_nccl import nccl_log

    return nccl_log(healthy_hgx_h100(), SOCKET_JOB).splitlines(keepends=True)


def generate(path: Path, size: int, percent: float, seed: int = 11) -> int:
    rng = random.Random(seed)
    nccl = _nccl_lines()
    written = i = 0
    with path.open("w", encoding="utf-8") as fh:
        while written < size:
            out = []
            for _ in range(5000):
                if rng.random() * 100 < percent:
                    out.append(nccl[i % len(nccl)])
                    i += 1
                else:
                    out.append(_STEP.format(m=rng.randint(0, 59), s=rng.randint(0, 59),
                                            ms=rng.randint(0, 999), r=rng.randint(0, 15),
                                            n=rng.randint(1, 99999), loss=rng.random() * 3,
                                            tok=rng.uniform(5e4, 9e4), mem=rng.uniform(60, 79),
                                            g=rng.random() * 2))
            chunk = "".join(out)
            fh.write(chunk)
            written += len(chunk)
    return written


_PARTS = """
import os, sys, time
t = time.process_time()
import gputriage.cli, gputriage.commands.nccl
from gputriage.nccl.inputs import SNIFF, _host_pieces
from gputriage.nccl.scan import LargeTap, read_large
from gputriage.parsers.nccl_model import NcclLog
from gputriage.snapshot.bundle import decode
out = [f"imports {time.process_time() - t:.2f}"]
t = time.process_time()
fd = os.open(sys.argv[1], os.O_RDONLY)
_host_pieces(decode(os.pread(fd, SNIFF, 0)))
out.append(f"host outputs in the first MiB {time.process_time() - t:.2f}")
t = time.process_time()
read_large(fd, os.fstat(fd).st_size, "log", NcclLog(), LargeTap(fd, 8 << 20), [], workers=1)
out.append(f"scan and NCCL builder {time.process_time() - t:.2f}")
try:  # the workers' share, and the floor under it (a tree without these names skips them)
    from gputriage.nccl.scan import REGION, _finder, _region
except ImportError:
    print(", ".join(out))
    raise SystemExit(0)
size = os.fstat(fd).st_size
t = time.process_time()
for i in range(size // REGION + 1):
    _region(fd, i, REGION, None)
out.append(f"of which the workers' regions {time.process_time() - t:.2f}")
find, buf = _finder(), bytearray(REGION)
t = time.process_time()
for at in range(0, size, REGION):
    n = os.preadv(fd, [buf], at)
    find(buf if n == REGION else buf[:n], 0, n, False)
out.append(f"of which reading and finding the marked lines {time.process_time() - t:.2f}")
t = time.process_time()
for at in range(0, size, REGION):
    os.preadv(fd, [buf], at)
out.append(f"of which reading {time.process_time() - t:.2f}")
print(", ".join(out))
"""


def _small(log: Path, folder: Path, trees: list[Path | None], rep: int,
           baseline: str | None) -> None:
    """``gputriage nccl`` (each tree) and ``grep -F NCCL`` on the log's first 1, 4 and 16
    MiB, their runs alternating; best of ``rep``."""
    data = b""
    with log.open("rb") as fh:
        for mib in (1, 4, 16):
            data += fh.read((mib << 20) - len(data))
            part = folder / f"first-{mib}MiB.log"
            part.write_bytes(data[:data.rfind(b"\n") + 1])
            gt = [sys.executable, "-m", "gputriage", "nccl", str(part), "--json"]
            walls: dict[Path | None, float] = {}
            grep = float("inf")
            for _ in range(rep):
                for src in trees:
                    walls[src] = min(walls.get(src, float("inf")),
                                     _timed(gt, folder / "outs", 1, src)[0])
                grep = min(grep, _timed(["grep", "-F", "NCCL", str(part)], folder / "outsg")[0])
            than = f" (--baseline {baseline}: {walls[trees[-1]]:.2f} s)" if baseline else ""
            print(f"first {mib} MiB: gputriage nccl --json {walls[None]:.2f} s{than}; "
                  f"grep -F NCCL {grep:.3f} s")


def _piped(log: Path, folder: Path, trees: list[Path | None], rep: int, size_mb: float,
           baseline: str | None) -> None:
    """The log piped to ``gputriage nccl -`` (each tree) and to ``grep -F NCCL``, their
    runs alternating; best of ``rep``."""
    def shell(tail: list[str]) -> list[str]:
        return ["sh", "-c", f"cat {shlex.quote(str(log))} | {shlex.join(tail)}"]

    gt = shell([sys.executable, "-m", "gputriage", "nccl", "-", "--json"])
    grep = shell(["grep", "-F", "NCCL"])
    walls: dict[Path | None, tuple[float, float, int]] = {}
    grep_wall = float("inf")
    for _ in range(rep):
        for src in trees:
            wall, rss, _tree, _rc = _timed(gt, folder / "outp", 1, src)
            if src not in walls or wall < walls[src][0]:
                walls[src] = (wall, _cpu(gt, src), rss)
        grep_wall = min(grep_wall, _timed(grep, folder / "outpg", 1)[0])
    for src in trees:
        wall, cpu, rss = walls[src]
        who = f" (--baseline {baseline})" if src else ""
        print(f"piped: gputriage nccl - --json{who}: {wall:.2f} s ({cpu:.2f} CPU-s), "
              f"{size_mb / wall:.0f} MB/s, peak RSS {rss / 1024:.0f} MB, output "
              f"{_size(folder / 'outp')}; grep -F NCCL piped: {grep_wall:.2f} s, "
              f"{size_mb / grep_wall:.0f} MB/s; gputriage's throughput "
              f"{grep_wall / wall:.2f}x of it")


def _size(path: Path) -> str:
    size = path.stat().st_size
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} KB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1GB")
    parser.add_argument("--nccl-percent", type=float, default=1.0)
    parser.add_argument("--file", help="time this existing log instead of generating one")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parts", action="store_true",
                        help="also the CPU seconds of each part of a run, one by one")
    parser.add_argument("--sizes", action="store_true",
                        help="also time the log's first 1, 4 and 16 MiB, each a file")
    parser.add_argument("--stdin", action="store_true",
                        help="also time the log piped to gputriage and to grep")
    parser.add_argument("--analyze", action="store_true",
                        help="also time analyze of the log, once per tree")
    parser.add_argument("--baseline", metavar="SRC",
                        help="also time gputriage imported from this source tree")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="gt-nccl-"))
    log = Path(args.file) if args.file else folder / "job.log"
    if not args.file:
        start = time.perf_counter()
        generate(log, _parse_size(args.size), args.nccl_percent)
        print(f"generated {log.stat().st_size / 1e6:.0f} MB "
              f"({args.nccl_percent:g} % NCCL lines) in {time.perf_counter() - start:.1f} s")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    # (compiled Hyperscan databases kept for this run alone: the warm-up run compiles them)
    os.environ["GPUTRIAGE_CACHE_DIR"] = str(folder / "hyperscan")
    try:
        size_mb = log.stat().st_size / 1e6
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=False)
        rep = args.repeat
        warm = folder / "warm.log"
        generate(warm, 1 << 16, 5.0)
        base = Path(args.baseline).resolve() if args.baseline else None
        trees = [None, base] if base else [None]
        for src in trees:  # bytecode written
            _timed([sys.executable, "-m", "gputriage", "nccl", str(warm), "--json"],
                   folder / "out", 1, src)
        gt = [sys.executable, "-m", "gputriage", "nccl", str(log), "--json"]
        greps = [("grep -F NCCL", ["grep", "-F", "NCCL", str(log)]),
                 ("grep -E 'NCCL (INFO|WARN)|...'",
                  ["grep", "-E", "NCCL (INFO|WARN)|Using network|via NET", str(log)])]
        timed: dict[Path | None, tuple[float, int, int, int, float]] = {}
        grep_walls = [float("inf")] * len(greps)
        for _ in range(rep):  # the trees' runs and grep's alternate: the same load
            for src in trees:
                wall, rss, tree, rc = _timed(gt, folder / f"out{'b' if src else ''}", 1, src)
                old = timed.get(src)
                if old is None or wall < old[0]:
                    timed[src] = (wall, max(rss, old[1] if old else 0),
                                  max(tree, old[2] if old else 0), rc, _cpu(gt, src))
            for i, (_label, argv) in enumerate(greps):
                grep_walls[i] = min(grep_walls[i], _timed(argv, folder / f"out{i + 2}", 1)[0])
        for src in trees:  # (the process tree's memory: sampled in a run of its own)
            wall, rss, _tree, rc, cpu = timed[src]
            timed[src] = (wall, rss, _tree_peak(gt, folder / f"out{'b' if src else ''}", src),
                          rc, cpu)
        gt_wall, gt_rss, gt_tree, gt_rc, gt_cpu = timed[None]
        print(f"input: {log} ({size_mb:.0f} MB); best of {rep} runs")
        print(f"gputriage nccl --json: {gt_wall:.2f} s ({gt_cpu:.2f} CPU-s), "
              f"{size_mb / gt_wall:.0f} MB/s, peak RSS {gt_rss / 1024:.0f} MB (process tree "
              f"{gt_tree / 1024:.0f} MB), rc {gt_rc}, output {_size(folder / 'out')}")
        if base is not None:
            b_wall, b_rss, b_tree, b_rc, b_cpu = timed[base]
            print(f"  --baseline {args.baseline}: {b_wall:.2f} s ({b_cpu:.2f} CPU-s), peak RSS "
                  f"{b_rss / 1024:.0f} MB (process tree {b_tree / 1024:.0f} MB), rc {b_rc}, "
                  f"output {_size(folder / 'outb')}; this tree {b_wall / gt_wall:.2f}x as fast")
        for i, (label, _argv) in enumerate(greps):
            wall = grep_walls[i]
            print(f"{label}: {wall:.2f} s, {size_mb / wall:.0f} MB/s, output "
                  f"{_size(folder / f'out{i + 2}')}; gputriage's throughput "
                  f"{wall / gt_wall:.2f}x of it (time ratio {gt_wall / wall:.2f})")
        if args.sizes:
            _small(log, folder, trees, rep, args.baseline)
        if args.stdin:
            _piped(log, folder, trees, rep, size_mb, args.baseline)
        if args.analyze:
            for src in trees:
                argv = [sys.executable, "-m", "gputriage", "analyze", str(log), "--json"]
                wall, rss, _, rc = _timed(argv, folder / "outa", 1, src)
                tree = _tree_peak(argv, folder / "outa", src)
                who = f" (--baseline {args.baseline})" if src else ""
                print(f"gputriage analyze --json{who}: {wall:.2f} s, {size_mb / wall:.0f} MB/s, "
                      f"peak RSS {rss / 1024:.0f} MB (process tree {tree / 1024:.0f} MB), rc "
                      f"{rc}, output {_size(folder / 'outa')}; {wall / gt_wall:.1f}x nccl's time")
        if args.parts:
            for src in trees:
                path = src or Path(__file__).resolve().parent.parent / "src"
                parts = subprocess.run([sys.executable, "-c", _PARTS, str(log)], check=True,
                                       env={**os.environ, "PYTHONPATH": str(path)},
                                       capture_output=True, text=True).stdout
                who = f" (--baseline {args.baseline})" if src else ""
                print(f"CPU seconds by part{who}: " + parts.strip())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
