"""Record, then compare, what ``gputriage check --json`` says about every scenario and
every corpus sample: the guard of issue 11's refactor ("behaviour is kept").

    python tools/behaviour.py record [--out FILE]   # before a change
    python tools/behaviour.py compare [--baseline FILE]

The record holds what an expert reads, so that its diff is worth reading (issue 30): per
input the verdict (node, job, at fault) and exit status, each finding's id, severity,
blame, action, the GPUs / NICs / units it is scoped to (none for the node), its status
when not current and its consequences' ids; the rules that could not judge a source that
was there (skipped although an input they read was present, or failed); and how many
inputs were unreadable, when some were. It leaves out what changes without the verdict
changing: titles' and explanations' wording, evidence, the host and GPU tables, how many
rules ran, and rules skipped for lack of an input. So rewording a finding, or adding a
rule that fires on nothing, changes no record (tests/test_recorded_files.py checks it).
``compare`` prints every difference and exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

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


# a source recorded with one of these errors was not there to read (no command, no file)
NOT_THERE = frozenset({"absent", "not-applicable"})


def scope_label(scope: Mapping[str, Any]) -> str:
    """A finding's scope as an expert names it: ``gpu 0000:3b:00.0`` (else its index or
    UUID), ``nic mlx5_0``, ``unit nvidia-fabricmanager``; ``node`` for the node."""
    kind = str(scope.get("kind", "node"))
    if kind == "gpu":
        which = scope.get("pci_bus_id") or (
            f"#{scope['gpu_index']}" if scope.get("gpu_index") is not None else scope.get("uuid"))
        return f"gpu {which}" if which else "gpu"
    return f"{kind} {scope['name']}" if scope.get("name") else kind


def finding_summary(f: Mapping[str, Any]) -> dict:
    """What an expert reads of one finding of the JSON form (empty parts left out)."""
    out: dict[str, Any] = {"id": f["id"], "severity": f["severity"], "blame": f.get("blame"),
                           "action": f.get("action")}
    scopes = [scope_label(s) for s in (f.get("scope") or {}, *f.get("also", ()))]
    if scopes != ["node"]:
        out["scope"] = scopes
    if f.get("status", "current") != "current":
        out["status"] = f["status"]
    if f.get("consequences"):
        out["consequences"] = [c["id"] for c in f["consequences"]]
    return out


def summary(doc: Mapping[str, Any], could_not_judge: Iterable[str] = ()) -> dict:
    """What an expert reads of a result document (see the module docstring)."""
    out: dict[str, Any] = {
        "exit_status": doc["exit_status"], "verdict": doc["verdict"],
        "verdicts": doc.get("verdicts"),
        "findings": [finding_summary(f) for f in doc["findings"]],
    }
    judged = sorted(set(could_not_judge))
    if judged:
        out["could_not_judge"] = judged
    if doc.get("unreadable"):
        out["unreadable"] = len(doc["unreadable"])
    return out


def _there(snapshot: Any, source: str) -> bool:
    """Whether the input holds ``source``: its text, or a record of a failed attempt to
    read it (a timeout, a permission error), not of its absence."""
    cap = snapshot.captures.get(source)
    if cap is None:
        return False
    return cap.text is not None or cap.record.get("error") not in NOT_THERE | {None}


def could_not_judge(facts: Any, result: Any) -> list[str]:
    """The skipped rules that are a fact about the input: a rule that failed, and one
    that lacked nothing the input could not give, each missing fact having read a source
    that was there (malformed, failed, or without what the rule needs). A rule that an
    absent input alone kept from running is left out: a new rule reading another source
    adds nothing here."""
    from gputriage.engine.analysis import RULE_ERROR
    from gputriage.rules import all_rules

    def there(name: str) -> bool:
        return any(_there(facts.snapshot, src) for src in facts.sources_read(name))

    rules = {r.id: r for r in all_rules()}
    out = []
    for skipped in result.skipped:
        rule = rules[skipped.rule]
        missing = [n for n in rule.requires if not facts.has(n)]
        none_of = bool(rule.any_of) and not any(facts.has(n) for n in rule.any_of)
        if (skipped.reason.startswith(RULE_ERROR)
                or (all(there(n) for n in missing)
                    and (not none_of or any(there(n) for n in rule.any_of)))):
            out.append(skipped.rule)
    return out


def scenario_inputs(tmp: Path, names: Iterable[str] | None = None) -> Iterator[tuple[str, Path]]:
    """(key, path) of every scenario (or of those ``names``), built under ``tmp``."""
    from gputriage.scenarios import build_scenario, list_scenarios

    for name in [sc.name for sc in list_scenarios()] if names is None else names:
        yield f"scenario:{name}", build_scenario(name, tmp / name,
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
    from gputriage.engine.analysis import analyze_facts
    from gputriage.errors import InputError, ParseError
    from gputriage.facts.store import Facts
    from gputriage.ingest import load_input
    from gputriage.results.document import to_json

    try:
        facts = Facts(load_input(str(path)))
        result = analyze_facts(facts)
        doc = to_json(result, generated=WHEN)
    except (InputError, ParseError) as exc:
        return {"error": type(exc).__name__}
    return summary(json.loads(json.dumps(doc)), could_not_judge(facts, result))


def measure(which: Iterable[tuple[str, Path]] | None = None) -> dict[str, dict]:
    """Summaries of ``which`` (default: every scenario and corpus sample)."""
    if which is not None:
        return {key: measure_one(path) for key, path in which}
    with tempfile.TemporaryDirectory(prefix="gputriage-behaviour-") as tmp:
        return {key: measure_one(path) for key, path in inputs(Path(tmp))}


def _one_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def dumps(record: Mapping[str, Mapping[str, Any]]) -> str:
    """``record`` as JSON laid out for review: one block per input, keys sorted, one line
    per finding, so that its diff is the list of verdicts that changed."""
    blocks = []
    for key in sorted(record):
        entry = record[key]
        parts = []
        for field in sorted(entry):
            value = entry[field]
            if field == "findings" and value:
                lines = ",\n".join(f"   {_one_line(f)}" for f in value)
                parts.append(f'  "findings": [\n{lines}\n  ]')
            else:
                parts.append(f"  {_one_line(field)}: {_one_line(value)}")
        blocks.append(f" {_one_line(key)}: {{\n" + ",\n".join(parts) + "\n }")
    return "{\n" + ",\n".join(blocks) + "\n}\n"


def _changes(key: str, field: str, a: Any, b: Any) -> list[str]:
    """The lines that say how ``field`` of input ``key`` changed from ``a`` to ``b``."""
    if field == "findings" and isinstance(a, list) and isinstance(b, list):
        old, new = [_one_line(f) for f in a], [_one_line(f) for f in b]
        lines = [f"{key}: finding gone: {f}" for f in old if f not in new]
        lines += [f"{key}: finding new: {f}" for f in new if f not in old]
        if lines or len(old) != len(new):
            return lines or [f"{key}: findings repeated: {len(old)} -> {len(new)}"]
        return [f"{key}: findings reordered: {[f['id'] for f in a]} -> {[f['id'] for f in b]}"]
    return [f"{key}: {field}: {_one_line(a)[:300]} -> {_one_line(b)[:300]}"]


def differences(before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]],
                allowed: Mapping[str, Mapping[str, str]] | None = None) -> list[str]:
    """One line per input that is new or gone, and per change of a field (one per finding
    gone or new), except in the fields ``allowed`` lists for a key ({key: {field:
    reason}})."""
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
                lines += _changes(key, field, a.get(field), b.get(field))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("record", "compare"))
    ap.add_argument("--baseline", "--out", type=Path, default=BASELINE)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    now = measure()
    if args.action == "record":
        args.baseline.write_text(dumps(now), encoding="utf-8")
        where = (args.baseline.resolve().relative_to(ROOT)
                 if args.baseline.resolve().is_relative_to(ROOT) else args.baseline)
        print(f"recorded {len(now)} inputs to {where}")
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
