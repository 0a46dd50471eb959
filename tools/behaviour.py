"""Record, then compare, what ``gputriage check --json`` says about every scenario and
every corpus sample: the guard of issue 11's refactor ("behaviour is kept").

    python tools/behaviour.py record [--out FILE]   # before a change
    python tools/behaviour.py compare [--baseline FILE]

The record keeps, per input, each finding's id, severity, blame, action, scope and
title, the host and GPU tables and the exit status, plus a digest
of the evidence lines (evidence quotes the input, so it is stored as a hash only).
``compare`` prints every difference and exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tests" / "fixtures" / "behaviour_baseline.json"
WHEN = datetime(2026, 1, 1, tzinfo=timezone.utc)


def corpus_root() -> Path | None:
    """GPUTRIAGE_CORPUS, else ../shared/corpus beside the checkout (as the tests find it)."""
    env = os.environ.get("GPUTRIAGE_CORPUS")
    candidates = [Path(env)] if env else []
    for base in candidates + [ROOT.parent / "shared" / "corpus", ROOT / "shared" / "corpus"]:
        if (base / "MANIFEST.tsv").is_file():
            return base
    return None


def summary(doc: dict) -> dict:
    """The parts of a result document the refactor must keep."""
    findings = []
    for f in doc["findings"]:
        evidence = json.dumps(f.get("evidence"), sort_keys=True).encode()
        findings.append({
            "id": f["id"], "severity": f["severity"], "blame": f.get("blame"),
            "action": f.get("action"), "scope": f.get("scope"), "title": f["title"],
            "evidence_sha": hashlib.sha256(evidence).hexdigest()[:16],
            "status": f.get("status"),
            "also": [s.get("pci_bus_id") or s.get("name") for s in f.get("also", [])],
            "consequences": [c["id"] for c in f.get("consequences", [])],
        })
    return {
        "exit_status": doc["exit_status"], "verdict": doc["verdict"],
        "verdicts": doc.get("verdicts"),
        # how many rules ran grows with every rule added anywhere: not what an expert reads
        "host": {k: v for k, v in doc["host"].items() if k != "rules_run"},
        "gpus": doc["gpus"], "findings": findings,
        "unreadable": len(doc.get("unreadable") or []),
    }


def scenario_inputs(tmp: Path) -> Iterator[tuple[str, Path]]:
    """(key, path) of every scenario, built under ``tmp``."""
    from gputriage.scenarios import build_scenario, list_scenarios

    for sc in list_scenarios():
        yield f"scenario:{sc.name}", build_scenario(sc.name, tmp / sc.name,
                                                    created="2026-01-01T00:00:00+00:00")


def corpus_inputs(corpus: Path) -> Iterator[tuple[str, Path]]:
    """(key, path) of every sample MANIFEST.tsv names."""
    for line in (corpus / "MANIFEST.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        name = line.split("\t", 1)[0]
        if name:
            yield f"corpus:{name}", corpus / name


def inputs(tmp: Path) -> Iterator[tuple[str, Path]]:
    """(key, path) of every scenario (built under ``tmp``) and corpus sample."""
    yield from scenario_inputs(tmp)
    corpus = corpus_root()
    if corpus is not None:
        yield from corpus_inputs(corpus)


def measure_one(path: Path) -> dict:
    """The summary of what ``check --json`` says of one input (or its input error)."""
    from gputriage.engine import analyze
    from gputriage.errors import InputError, ParseError
    from gputriage.ingest import load_input
    from gputriage.views.jsonview import to_json

    try:
        doc = to_json(analyze(load_input(str(path))), generated=WHEN)
    except (InputError, ParseError) as exc:
        return {"error": type(exc).__name__}
    return summary(json.loads(json.dumps(doc)))


def measure(which: Iterable[tuple[str, Path]] | None = None) -> dict[str, dict]:
    """Summaries of ``which`` (default: every scenario and corpus sample)."""
    if which is not None:
        return {key: measure_one(path) for key, path in which}
    with tempfile.TemporaryDirectory(prefix="gputriage-behaviour-") as tmp:
        return {key: measure_one(path) for key, path in inputs(Path(tmp))}


def differences(before: dict[str, dict], after: dict[str, dict],
                allowed: Mapping[str, Mapping[str, str]] | None = None) -> list[str]:
    """One line per input that is new or gone, and per field that changed, except the
    fields ``allowed`` lists for a key ({key: {field: reason}})."""
    allowed = allowed or {}
    lines = []
    for key in sorted(set(before) | set(after)):
        a, b = before.get(key), after.get(key)
        if a == b:
            continue
        if a is None or b is None:
            lines.append(f"{key}: {'new' if a is None else 'gone'}")
            continue
        for field in sorted(set(a) | set(b)):
            if a.get(field) != b.get(field) and field not in allowed.get(key, {}):
                lines.append(f"{key}: {field}: {json.dumps(a.get(field))[:300]} -> "
                             f"{json.dumps(b.get(field))[:300]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("record", "compare"))
    ap.add_argument("--baseline", "--out", type=Path, default=BASELINE)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    now = measure()
    if args.action == "record":
        args.baseline.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n",
                                 encoding="utf-8")
        print(f"recorded {len(now)} inputs to {args.baseline.relative_to(ROOT)}")
        return 0
    before = json.loads(args.baseline.read_text(encoding="utf-8"))
    if corpus_root() is None:
        print("corpus not found (set GPUTRIAGE_CORPUS): comparing the scenarios only")
        before = {k: v for k, v in before.items() if not k.startswith("corpus:")}
    diff = differences(before, now)
    print("\n".join(diff) if diff else f"identical on {len(now)} inputs")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
