"""What a fact is: a name, the snapshot sources it reads, and the function that builds
it from what it may read (:class:`FactReader`, which :class:`~gputriage.facts.store.Facts`
is).

Each area module keeps its facts in one :class:`FactTable`; :mod:`gputriage.facts.registry`
lists the names each area defines (and imports an area when one of its facts is first
asked for), and :class:`~gputriage.facts.store.Facts` looks names up there. Nothing is
registered by importing a module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gputriage.facts.context import CheckContext
    from gputriage.facts.window import LogWindow
    from gputriage.snapshot.bundle import Snapshot

Builder = Callable[[Any], Any]


class Missing(Exception):
    """A fact cannot be established from the inputs."""


class FactReader(Protocol):
    """What a fact's builder may ask while it builds: other facts by name, and the
    snapshot's sources (each read is remembered). :class:`~gputriage.facts.store.Facts`
    is one; builders name this protocol so that no area module imports the store that
    lists them."""

    snapshot: Snapshot
    window: LogWindow
    context: CheckContext

    def get(self, name: str) -> Any: ...
    def has(self, name: str) -> bool: ...
    def maybe(self, name: str, default: Any = None) -> Any: ...
    def parse(self, source: str, parser: Callable[[Any], Any], *,
              as_json: bool = False) -> Any: ...
    def text(self, source: str) -> str | None: ...
    def record(self, source: str) -> dict[str, Any] | None: ...


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

    def get(self, name: str) -> Fact | None:
        """The fact ``name`` of this table, None when it defines none."""
        return self._facts.get(name)


def merge(*tables: FactTable) -> dict[str, Fact]:
    """One name -> fact map of several tables; a name defined twice is an error."""
    merged: dict[str, Fact] = {}
    for table in tables:
        for item in table:
            if item.name in merged:
                raise ValueError(f"fact {item.name} defined twice")
            merged[item.name] = item
    return merged
