"""Behaviour is kept (issue 11): what gputriage says of every scenario and corpus sample
equals the summary recorded before the refactor in tests/fixtures/behaviour_baseline.json
(tools/behaviour.py), except for the differences ALLOWED lists with their reason."""

from __future__ import annotations

import importlib.util
import json
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

TOOL = Path(__file__).resolve().parent.parent / "tools" / "behaviour.py"

# {input key: {summary field: why it may differ from the baseline}}
ALLOWED: dict[str, dict[str, str]] = {}


@cache
def behaviour() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gputriage_behaviour", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _baseline(kind: str) -> dict[str, dict]:
    doc = json.loads(behaviour().BASELINE.read_text(encoding="utf-8"))
    return {key: value for key, value in doc.items() if key.startswith(f"{kind}:")}


def _check(before: dict[str, dict], now: dict[str, dict]) -> None:
    assert before, "the baseline holds no input of this kind"
    diff = behaviour().differences(before, now, ALLOWED)
    assert not diff, "behaviour changed:\n" + "\n".join(diff)
    stale = [f"{key}: {field}" for key, fields in ALLOWED.items() if key in before
             for field in fields if before[key].get(field) == now.get(key, {}).get(field)]
    assert not stale, f"ALLOWED differences that no longer differ: {stale}"


def test_scenarios_behave_as_recorded(tmp_path):
    _check(_baseline("scenario"), behaviour().measure(behaviour().scenario_inputs(tmp_path)))


def test_corpus_behaves_as_recorded(corpus):
    _check(_baseline("corpus"), behaviour().measure(behaviour().corpus_inputs(corpus.root)))
