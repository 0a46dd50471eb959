"""The lines of a large text that hold a match of any of a few patterns, found in one
Hyperscan pass (the optional ``hyperscan`` package) instead of one regex search per
pattern: a search that starts at a common character (a colon, a bracket) is tried at
each of them by Python's engine, where Hyperscan scans the text once for all of them.

Where ``hyperscan`` cannot be imported (or compile the patterns), :meth:`LineFinder.
starts` returns None and the caller searches as it did without it.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from gputriage.text.hscache import compiled

__all__ = ["NON_ASCII", "GroupEnds", "LineFinder", "Patterns", "group_ends", "hyperscan_module",
           "import_hyperscan", "line_break", "literal_pattern", "text_offsets"]

_MODULE: list[Any] = []  # [the hyperscan module or None], once looked for
# a byte of a character that is not ASCII (UTF-8): a finder given it also finds every
# line that holds one, where a search of the text would know more than its bytes tell
# (a space or a letter of another script, a case folded to an ASCII one)
NON_ASCII = rb"[\x80-\xff]"


def import_hyperscan() -> Any:
    """The hyperscan module imported now, or None where it cannot be."""
    try:
        return importlib.import_module("hyperscan")
    except Exception:  # a missing or broken binding: search without it
        return None


def hyperscan_module() -> Any:
    """The hyperscan module (looked for once), or None where it cannot be imported."""
    if not _MODULE:
        _MODULE.append(import_hyperscan())
    return _MODULE[0]


# (buf, lo, hi) -> for each group, where in buf the matches of its expressions in
# buf[lo:hi] end, as found
GroupEnds = Callable[[Any, int, int], tuple[list[int], ...]]


def group_ends(expressions: Sequence[bytes], groups: Sequence[int]) -> GroupEnds | None:
    """One Hyperscan database of ``expressions`` (Hyperscan's syntax, each in its group of
    ``groups``: 0, 1, ...), compiled now or loaded from the cache; the function returned
    scans ``buf[lo:hi]`` (bytes, a bytearray or a mapping) with it and gives, for each
    group, the offsets in ``buf`` where matches of its expressions end. Each thread scans
    with a scratch space of its own (a scan refuses one that another scan is using).
    None where Hyperscan cannot be imported or compile them."""
    hyperscan = import_hyperscan()
    if hyperscan is None:
        return None
    try:
        db = compiled(hyperscan, list(expressions), list(groups), [0] * len(expressions))
    except Exception:  # a wheel that cannot compile here: search without it
        return None
    count = max(groups) + 1
    local = threading.local()

    def ends(buf: Any, lo: int, hi: int) -> tuple[list[int], ...]:
        found: tuple[list[int], ...] = tuple([] for _ in range(count))

        def hit(group: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            found[group].append(lo + end)

        scratch = getattr(local, "scratch", None)
        if scratch is None:
            scratch = local.scratch = hyperscan.Scratch(db)
        db.scan(cast(bytes, memoryview(buf)[lo:hi]), match_event_handler=hit, scratch=scratch)
        return found

    return ends


class Patterns:
    """Patterns (Hyperscan's syntax, case kept) and literal words (case ignored)
    compiled into one database on first use, scanned over a text at once; ``wide``:
    patterns searched too in data that is not ASCII (in a second database: each pattern
    costs its time on every byte, and ASCII data never matches :data:`NON_ASCII`)."""

    def __init__(self, patterns: Sequence[bytes], caseless: Sequence[bytes] = (),
                 wide: Sequence[bytes] = ()) -> None:
        self.patterns = tuple(patterns)
        self.caseless = tuple(caseless)
        self.wide = tuple(wide)
        self._db: dict[bool, Any] = {}  # ASCII or not -> the database (None: none here)

    def _database(self, ascii: bool = True) -> Any:
        narrow = ascii or not self.wide
        if narrow not in self._db:
            hs = hyperscan_module()
            db = None
            if hs is not None:
                plain = [*self.patterns, *(() if narrow else self.wide)]
                exprs = [*plain, *(literal_pattern(w) for w in self.caseless)]
                flags = [0] * len(plain) + [hs.HS_FLAG_CASELESS] * len(self.caseless)
                try:
                    db = compiled(hs, exprs, range(len(exprs)), flags)
                except Exception:  # a wheel that cannot compile here: search without it
                    db = None
            self._db[narrow] = db
        return self._db[narrow]

    def available(self) -> bool:
        """Whether the patterns are searched here (Hyperscan imported and compiled)."""
        return self._database() is not None

    def ends(self, data: bytes | bytearray, ascii: bool = True) -> list[int] | None:
        """Where matches in ``data`` (with ``ascii`` False, data that may not be ASCII:
        the ``wide`` patterns too) end, each end once for each pattern whose match ends
        there (overlapping matches included), in no set order; None without Hyperscan."""
        db = self._database(ascii)
        if db is None:
            return None
        ends: list[int] = []

        def hit(_id: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            ends.append(end)

        try:
            db.scan(bytes(data), match_event_handler=hit)
        except Exception:  # (its scratch in use on another thread, say): search without it
            return None
        return ends


class LineFinder(Patterns):
    """Finds where the lines (cut at newlines) of a text holding a match of any of the
    patterns (none may match a newline or a carriage return) or of the words start."""

    def starts(self, data: bytes | bytearray, cr: bool = False,
               ascii: bool = True) -> set[int] | None:
        """The offsets in ``data`` where its lines that hold a match start (with ``cr``,
        lines cut at a carriage return too, as ``text.fields.split_lines`` cuts them;
        ``ascii``: as :meth:`Patterns.ends`); None without Hyperscan."""
        ends = self.ends(data, ascii)
        if ends is None:
            return None
        found: set[int] = set()
        line_end = -1
        for end in sorted(ends):  # (a match ends at or before its line's break)
            if end <= line_end:
                continue
            start = data.rfind(b"\n", 0, end) + 1
            line_end = data.find(b"\n", end)
            if cr:
                start = max(start, data.rfind(b"\r", 0, end) + 1)
                line_end = line_break(data, end)
            found.add(start)
            if line_end < 0:
                break
        return found


def line_break(text: bytes | bytearray | str, start: int) -> int:
    """Where the line of ``text`` at ``start`` ends: its first newline or carriage return
    (-1: none)."""
    if isinstance(text, str):
        nl, cr = text.find("\n", start), text.find("\r", start)
    else:
        nl, cr = text.find(b"\n", start), text.find(b"\r", start)
    return cr if nl < 0 or 0 <= cr < nl else nl


def text_offsets(text: str, data: bytes, offsets: Iterable[int]) -> list[int]:
    """``offsets`` into ``data`` (``text`` encoded as UTF-8, each at the start of a
    character) as offsets into ``text``, in order."""
    ordered = sorted(offsets)
    if len(data) == len(text):  # (ASCII: the same)
        return ordered
    out: list[int] = []
    prev = at = 0
    for offset in ordered:
        at += len(data[prev:offset].decode("utf-8", "surrogatepass"))
        out.append(at)
        prev = offset
    return out


def literal_pattern(word: bytes) -> bytes:
    """``word`` as a pattern matching it literally."""
    return b"".join(bytes([c]) if c < 128 and chr(c).isalnum() else b"\\x%02x" % c
                    for c in word)
