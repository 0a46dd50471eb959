"""The result model, the rules, the parsers and the text they read stay under mypy's
strict checks: the plain ``mypy`` of .ci/run reads them from pyproject.toml, per module
(docs/contributing.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the backport the project depends on there
    tomllib = pytest.importorskip("tomli")

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
STRICT_MODULES = ("gputriage.model", "gputriage.rules.*", "gputriage.parsers.*", "gputriage.text.*",
                  "gputriage.vocabulary")
# what `mypy --strict` turns on, as config keys: set per module, or for the whole run
STRICT_PER_MODULE = {
    "disallow_any_generics": True, "disallow_subclassing_any": True,
    "disallow_untyped_calls": True, "disallow_untyped_defs": True,
    "disallow_incomplete_defs": True, "check_untyped_defs": True,
    "disallow_untyped_decorators": True, "warn_return_any": True,
    "implicit_reexport": False, "strict_equality": True, "extra_checks": True,
}
STRICT_GLOBAL = {"warn_unused_ignores": True, "warn_redundant_casts": True}


def _mypy_config() -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads(PYPROJECT.read_text())["tool"]["mypy"]
    return config


@pytest.mark.parametrize("module", STRICT_MODULES)
def test_module_is_checked_strictly(module: str) -> None:
    config = _mypy_config()
    overrides = [o for o in config.get("overrides", []) if module in o.get("module", ())]
    assert overrides, f"no [[tool.mypy.overrides]] names {module}"
    settings = {**{k: v for k, v in config.items() if k != "overrides"}, **overrides[-1]}
    weaker = {k: settings.get(k) for k, want in STRICT_PER_MODULE.items()
              if settings.get(k) != want}
    assert not weaker, f"{module} is not checked as mypy --strict checks it: {weaker}"


def test_stale_ignores_are_errors() -> None:
    config = _mypy_config()
    assert {k: config.get(k) for k in STRICT_GLOBAL} == STRICT_GLOBAL
    assert "src" in config["files"]
