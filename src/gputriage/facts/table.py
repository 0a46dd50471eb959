"""What a fact is: a name, the snapshot sources it reads, and the function that builds
it from a :class:`~gputriage.facts.store.Facts` reader.

Each area module keeps its facts in one :class:`FactTable`; :mod:`gputriage.facts.registry`
lists the tables, and :class:`~gputriage.facts.store.Facts` looks names up there. Nothing is
registered by importing a module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

Builder = Callable[[Any], Any]


class Missing(Exception):
    """A fact cannot be established from the inputs."""


@dataclass(frozen=True)
class Fact:
    """``build(facts) -> value`` (raising :class:`Missing`) under ``name``."""

    name: str
    build: Builder
    sources: tuple[str, ...] = ()  # snapshot sources read directly (others via facts)

    @property
    def doc(self) -> str:
        return (self.build.__doc__ or "").strip()


class FactTable:
    """The facts of one area, in definition order."""

    def __init__(self) -> None:
        self._facts: dict[str, Fact] = {}

    def fact(self, name: str, *, sources: Sequence[str] = ()) -> Callable[[Builder], Builder]:
        """Decorate a builder as the fact ``name`` of this table."""

        def define(build: Builder) -> Builder:
            self.add(Fact(name, build, tuple(sources)))
            return build

        return define

    def add(self, item: Fact) -> None:
        if item.name in self._facts:
            raise ValueError(f"duplicate fact {item.name}")
        self._facts[item.name] = item

    def __iter__(self) -> Iterator[Fact]:
        return iter(self._facts.values())


def merge(*tables: FactTable) -> dict[str, Fact]:
    """One name -> fact map of several tables; a name defined twice is an error."""
    merged: dict[str, Fact] = {}
    for table in tables:
        for item in table:
            if item.name in merged:
                raise ValueError(f"fact {item.name} defined twice")
            merged[item.name] = item
    return merged
