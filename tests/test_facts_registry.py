"""The fact registry's index: which area module defines each fact, so that a lookup
imports that area only."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest

from gputriage.facts import registry
from gputriage.facts.store import fact_named
from gputriage.facts.table import Fact, FactTable


def _area_modules() -> list[str]:
    """The modules of gputriage.facts that keep a table of facts (imported)."""
    package = Path(registry.__file__).parent
    names = [m.name for m in pkgutil.iter_modules([str(package)])]
    return [n for n in names if isinstance(getattr(pkgutil.resolve_name(
        f"gputriage.facts.{n}"), "FACTS", None), FactTable)]


def test_the_index_lists_exactly_the_facts_the_areas_define():
    """A fact added to (or removed from) an area's table without its line in
    registry.AREAS, listed under another area, or a new area module not listed there,
    fails here."""
    listed = {name: area for area, names in registry.AREAS.items() for name in names}
    assert sum(map(len, registry.AREAS.values())) == len(listed), "a fact listed twice"
    defined = {item.name: area for area in _area_modules()
               for item in registry.area_table(area)}
    assert listed == defined
    assert list(registry.defined_facts()) == list(listed)  # no name defined twice


def test_a_lookup_gives_the_areas_fact_and_iterating_lists_every_name():
    every = registry.defined_facts()
    assert list(registry.REGISTRY) == list(every)
    assert len(registry.REGISTRY) == len(every)
    for name, item in every.items():
        assert registry.REGISTRY[name] is item is fact_named(name)
    assert registry.fact("no_such_fact") is None
    assert "no_such_fact" not in registry.REGISTRY
    with pytest.raises(KeyError):
        registry.REGISTRY["no_such_fact"]


def test_a_fact_listed_under_an_area_that_lacks_it_is_an_error(monkeypatch):
    monkeypatch.setattr(registry, "_AREA_OF", {**registry._AREA_OF, "ghost_fact": "stack"})
    with pytest.raises(LookupError, match="ghost_fact"):
        registry.fact("ghost_fact")


def test_a_table_looks_up_its_own_facts():
    table = FactTable()
    table.add(Fact("one", lambda facts: 1))
    assert table.get("one") is not None and table.get("two") is None
