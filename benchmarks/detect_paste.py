"""The paste detector on the first MiB of the logs an incident produces, this tree
against a baseline.

``analyze`` runs the detector (:func:`gputriage.ingest.detect.detect`) on what it is
given: a pasted text whole, the first and last MiB of a large one, the first 128 KiB of
a large log it streams; ``nccl`` runs it on the first MiB of a job's log, in its own
process, to see whether host outputs are in it. On a GPU node's logs the words of many
detectors' gates are on every line (the host name ``gpu-node-17``, an Xid's ``pid=`` and
``name=``), so what a detector does per line shows there. Three texts, made with the
generators of ``benchmarks/log_scan.py`` and ``benchmarks/nccl_scan.py``:

  * a kernel log of an Xid storm (journalctl short-iso, 1 line in 10 an Xid);
  * a training job's log with 1 % NCCL lines;
  * NCCL lines alone (``grep NCCL`` of such a log).

For each, and each tree, in a fresh process: the CPU time of the detector's first run
after ``import gputriage.cli`` (cold: the detectors it imports and their expressions
compiled) and the least of three more (warm); the trees take turns, ``--repeat`` rounds,
the least of each kept. ``grep -c`` of the same text is timed beside them, for scale.

Usage: python benchmarks/detect_paste.py [--size 1MB] [--repeat 5] [--baseline SRC]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from log_scan import _parse_size
from log_scan import generate as kernel_log
from nccl_scan import generate as job_log

REPO = Path(__file__).resolve().parent.parent

_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import gputriage.cli  # noqa: F401  (as a command has it imported)
text = open(sys.argv[2], encoding="utf-8").read()
start = time.process_time()
from gputriage.ingest.detect import detect
found = [name for name, _ in detect(text)]
cold = time.process_time() - start
warm = float("inf")
for _ in range(3):
    start = time.process_time()
    detect(text)
    warm = min(warm, time.process_time() - start)
print(json.dumps({"cold": cold, "warm": warm, "found": found}))
"""


def texts(folder: Path, size: int) -> dict[str, Path]:
    """The three texts, ``size`` bytes each (whole lines), written in ``folder``."""
    out: dict[str, Path] = {}
    storm, job = folder / "storm.log", folder / "job.log"
    kernel_log(storm, 2 * size, profile="storm")
    job_log(job, 2 * size, 1.0)
    nccl = "".join(ln for ln in job.read_text(encoding="utf-8").splitlines(keepends=True)
                   if "NCCL" in ln)
    while len(nccl) < size:
        nccl += nccl
    for name, text in (("Xid storm kernel log", storm.read_text(encoding="utf-8")),
                       ("training log, 1 % NCCL", job.read_text(encoding="utf-8")),
                       ("NCCL lines alone", nccl)):
        head = text[:size]
        path = folder / f"{len(out)}.txt"
        path.write_text(head[:head.rfind("\n") + 1], encoding="utf-8")
        out[name] = path
    return out


def once(src: str, path: Path) -> dict[str, object]:
    """One fresh process's cold and warm detection of ``path`` with ``src``'s gputriage."""
    done = subprocess.run([sys.executable, "-c", _CHILD, src, str(path)], capture_output=True,
                          text=True, timeout=300, check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def grep_seconds(path: Path) -> float:
    """The least wall time of three ``grep -ciE 'nvidia|xid|nvrm'`` of ``path``."""
    grep = shutil.which("grep")
    if grep is None:
        return float("nan")
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([grep, "-ciE", "nvidia|xid|nvrm", str(path)], capture_output=True,
                       timeout=60, check=False)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1MB", help="bytes of each text (default 1MB)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--baseline", metavar="SRC", help="another tree's src to compare")
    args = parser.parse_args()
    try:
        size = _parse_size(args.size)
    except ValueError:
        print(f"detect_paste: --size wants a size such as 1MB, not {args.size}",
              file=sys.stderr)
        return 2
    trees = {"this": str(REPO / "src")}
    if args.baseline:
        if not (Path(args.baseline) / "gputriage").is_dir():
            print(f"detect_paste: no gputriage package in {args.baseline}", file=sys.stderr)
            return 2
        trees["baseline"] = str(Path(args.baseline).resolve())
    with tempfile.TemporaryDirectory(prefix="detect-paste-") as tmp:
        inputs = texts(Path(tmp), size)
        best: dict[tuple[str, str], dict[str, float]] = {}
        found: dict[tuple[str, str], object] = {}
        for round_ in range(max(1, args.repeat)):
            order = list(trees.items()) if round_ % 2 == 0 else list(reversed(trees.items()))
            for name, path in inputs.items():
                for tree, src in order:
                    got = once(src, path)
                    key = (name, tree)
                    found[key] = got["found"]
                    for part in ("cold", "warm"):
                        value = float(got[part])  # type: ignore[arg-type]
                        best.setdefault(key, {})[part] = min(
                            best.get(key, {}).get(part, float("inf")), value)
        print(f"detect() of {size >> 10} KiB of each text: CPU ms, the least of "
              f"{args.repeat} fresh processes (cold: the first run after import; warm: "
              "the least of three more)")
        for name, path in inputs.items():
            cells = [f"{tree} {best[name, tree]['cold'] * 1000:.0f} cold, "
                     f"{best[name, tree]['warm'] * 1000:.0f} warm" for tree in trees]
            if "baseline" in trees:
                ratio = best[name, "baseline"]["warm"] / max(best[name, "this"]["warm"], 1e-9)
                cells.append(f"warm {ratio:.1f}x as fast")
            cells.append(f"grep -ciE {grep_seconds(path) * 1000:.0f} ms wall")
            print(f"  {name}: " + "; ".join(cells) + f"; found {found[name, 'this']}")
            if "baseline" in trees and found[name, "this"] != found[name, "baseline"]:
                print(f"    the trees found different sources: {found[name, 'baseline']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
