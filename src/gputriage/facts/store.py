"""Facts: typed views of a snapshot, parsed once and shared by all rules.

A fact is looked up by name in :mod:`gputriage.facts.registry` (the explicit
facts of every area) or, for a source that declares its parser in
:mod:`gputriage.sources`, is that source parsed. Each is computed on first use; a
fact whose sources are absent raises :class:`Missing` with the reason, which the
engine reports as a skipped rule. A malformed source is reported once in
``problems`` and treated as missing; a parsed value with an ``unreadable_fields()`` method
(fields that are not numbers, read as unknown) has each of its lines reported there too.
Each fact built remembers the snapshot sources it read, directly or through other facts
(:meth:`Facts.sources_read`), so that a skipped rule can say whether it lacked an input or
could not judge one that was there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gputriage.errors import InputError, ParseError
from gputriage.facts.context import CheckContext
from gputriage.facts.table import Fact, Missing
from gputriage.facts.window import LogWindow
from gputriage.snapshot.bundle import Snapshot

__all__ = ["Facts", "Missing", "fact_named", "is_fact"]


def _explicit_fact(name: str) -> Fact | None:
    """An area's fact ``name`` (the registry imports that area only)."""
    from gputriage.facts.registry import fact

    return fact(name)


def _source_fact(name: str) -> Fact | None:
    """The fact of a source that declares its parser (``module:function``)."""
    from gputriage import sources

    src = sources.BY_NAME.get(name)
    if src is None or not src.parser:
        return None

    def build(facts: Facts) -> Any:
        if facts.snapshot.get(name) is None:  # Missing, without importing the parser
            return facts.parse(name, _unparsed)
        parse, as_json = sources.parser_of(name)
        return facts.parse(name, parse, as_json=as_json)

    build.__doc__ = f"{src.description} (parsed by {src.parser})"
    return Fact(name, build, (name,))


def _unparsed(value: Any) -> Any:
    """The parser of an absent source: :meth:`Facts.parse` never calls it."""
    raise AssertionError("an absent source was parsed")


def fact_named(name: str) -> Fact | None:
    """The fact called ``name``: an area's explicit fact first, else a parsed source."""
    return _explicit_fact(name) or _source_fact(name)


def is_fact(name: str) -> bool:
    """Whether a fact of that name exists (for the conformance test)."""
    return fact_named(name) is not None


@dataclass
class Facts:
    """Lazily built facts of one host, and the reader their builders use."""

    snapshot: Snapshot
    window: LogWindow = field(default_factory=LogWindow)
    context: CheckContext = field(default_factory=CheckContext)
    problems: list[str] = field(default_factory=list)
    _cache: dict[str, Any] = field(default_factory=dict)
    _read: dict[str, frozenset[str]] = field(default_factory=dict)  # sources per fact built
    _reading: list[set[str]] = field(default_factory=list)  # the facts being built, innermost last

    def prefill(self, name: str, value: Any) -> None:
        """Supply a fact computed elsewhere (``gputriage logs`` scans files itself)."""
        self._cache[name] = value

    # -- what rules and views ask ----------------------------------------------------
    def get(self, name: str) -> Any:
        """The fact ``name``, or raise Missing."""
        if name not in self._cache:
            item = fact_named(name)
            if item is None:
                raise KeyError(f"no fact named {name}")
            self._reading.append(set(item.sources))
            try:
                self._cache[name] = item.build(self)
            except Missing as exc:
                self._cache[name] = exc
            finally:
                self._read[name] = frozenset(self._reading.pop())
        self._note_read(self._read.get(name, ()))
        value = self._cache[name]
        if isinstance(value, Missing):
            raise value
        return value

    def has(self, name: str) -> bool:
        try:
            self.get(name)
        except Missing:
            return False
        return True

    def maybe(self, name: str, default: Any = None) -> Any:
        try:
            return self.get(name)
        except Missing:
            return default

    def sources_read(self, name: str) -> frozenset[str]:
        """The snapshot sources the fact ``name`` read when it was built (its declared
        ones, those it read and those of the facts it asked for); empty when it was never
        asked for or was supplied by :meth:`prefill`."""
        return self._read.get(name, frozenset())

    # -- what fact builders read -------------------------------------------------------
    def _note_read(self, sources: Iterable[str]) -> None:
        if self._reading:
            self._reading[-1].update(sources)

    def parse(self, source: str, parser: Callable[[Any], Any], *, as_json: bool = False) -> Any:
        """``parser`` applied to ``source`` (its text, or its JSON when ``as_json``);
        Missing when the source is absent or malformed (recorded in ``problems``)."""
        self._note_read((source,))
        cap = self.snapshot.get(source)
        if cap is None:
            raise Missing(self.snapshot.missing_reason(source))
        try:
            value = parser(cap.json() if as_json else cap.text)
        except (ParseError, InputError) as exc:
            if cap.record.get("error"):  # a failed command printed its complaint
                raise Missing(self.snapshot.missing_reason(source)) from None
            self._problem(f"{cap.origin or source}: {exc}")
            raise Missing(f"{source}: malformed ({exc})") from None
        unreadable = getattr(value, "unreadable_fields", None)
        for field_problem in unreadable() if callable(unreadable) else ():
            self._problem(f"{cap.origin or source}: {field_problem}")
        return value

    def _problem(self, msg: str) -> None:
        if msg not in self.problems:
            self.problems.append(msg)

    def text(self, source: str) -> str | None:
        """The raw text of a source, None when absent."""
        self._note_read((source,))
        return self.snapshot.text(source)

    def record(self, source: str) -> dict | None:
        """A source's manifest record, None when it has none."""
        self._note_read((source,))
        return self.snapshot.record(source)
