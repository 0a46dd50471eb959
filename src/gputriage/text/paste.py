"""The document a paste's detectors share: its lines and which source claimed each.

A detector is a function ``claim(doc: PasteDoc) -> None`` named by a source's
``detector`` in :mod:`gputriage.sources`; it marks the lines of the blocks it
recognises with a source name and leaves lines others claimed alone. Detectors run
in the sources' ``detect_order``, so an earlier one wins a contested line. Prompt
lines and markdown fences are marked :data:`BARRIER` before any detector runs.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Iterable

from gputriage.text.fields import split_lines

__all__ = ["BARRIER", "PasteDoc", "claim_blocks", "claim_lines"]

BARRIER = "#barrier"  # owner of prompt lines and fences: no detector may take them


class PasteDoc:
    """Lines of a paste and which source claimed each one (``None``: nobody yet)."""

    def __init__(self, text: str) -> None:
        self.lines = split_lines(text)
        self.owner: list[str | None] = [None] * len(self.lines)
        self._joined: str | None = None  # the lines joined by "\n", once a detector asks
        self._starts: list[int] = []  # where each line starts in it

    @property
    def text(self) -> str:
        """The whole paste, its lines joined by "\n" (claimed or not): one regex search
        over it says whether any line holds a match of a pattern that spans no line."""
        if self._joined is None:
            self._joined = "\n".join(self.lines)
            self._starts = list(itertools.accumulate(map((1).__add__, map(len, self.lines)),
                                                     initial=0))
        return self._joined

    def lines_with(self, words: Iterable[str]) -> list[int]:
        """The indices, in order, of the lines that hold one of ``words`` (claimed or
        not; no word holds a line break). Each word is looked for with ``str.find`` over
        the whole paste: a detector's literal test costs a pass in C per word, not a
        Python step per line."""
        text, starts = self.text, self._starts
        found: set[int] = set()
        for word in filter(None, words):
            at = text.find(word)
            while at >= 0:
                i = bisect.bisect_right(starts, at) - 1
                found.add(i)
                at = text.find(word, starts[i + 1])
        return sorted(found)

    def lines_starting(self, pattern: re.Pattern[str]) -> list[int]:
        """The indices, in order, of the lines (claimed or not) whose start ``pattern``
        matches, ``pattern`` led by the newline before the line (the paste is searched
        once, from one newline to the next in C; "(?m)^" would be tried at every
        character)."""
        text = "\n" + self.text  # (the newline before a line is where the line starts here)
        starts = self._starts
        found: list[int] = []
        m = pattern.search(text)
        while m is not None:
            i = bisect.bisect_right(starts, m.start()) - 1
            if i >= len(self.lines):  # (the newline before a paste of no line)
                break
            found.append(i)
            m = pattern.search(text, starts[i + 1])
        return found

    def free(self, i: int) -> bool:
        """Whether line ``i`` exists and nobody claimed it."""
        return 0 <= i < len(self.lines) and self.owner[i] is None

    def extend(self, i: int, pred: Callable[[str], bool]) -> int:
        """First index >= i that is claimed or fails ``pred``."""
        while self.free(i) and pred(self.lines[i]):
            i += 1
        return i

    def claim(self, name: str, start: int, end: int) -> None:
        """Claim the free lines of ``[start, end)``, trailing blank lines excepted."""
        while end > start and not self.lines[end - 1].strip():
            end -= 1
        for j in range(start, end):
            if self.owner[j] is None:
                self.owner[j] = name

    def next_nonblank(self, i: int) -> int:
        """First index >= i that is claimed or not blank."""
        while self.free(i) and not self.lines[i].strip():
            i += 1
        return i

    def free_text(self) -> str:
        """The lines nobody claimed yet, joined."""
        return "\n".join(x for i, x in enumerate(self.lines) if self.owner[i] is None)


def claim_blocks(doc: PasteDoc, name: str, start: re.Pattern[str], cont: Callable[[str], bool],
                 confirm: Callable[[PasteDoc, int], bool] | None = None,
                 before: Callable[[str], bool] | None = None) -> None:
    """Claim every block that begins at a ``start`` line (``confirm``-ed when given)
    and goes on while ``cont``; with ``before``, the free lines just above the start
    line that pass it belong to the block too."""
    i = 0
    while i < len(doc.lines):
        if doc.free(i) and start.search(doc.lines[i]) and (confirm is None or confirm(doc, i)):
            first = i
            while before is not None and doc.free(first - 1) and before(doc.lines[first - 1]):
                first -= 1
            end = doc.extend(i + 1, cont)
            doc.claim(name, first, end)
            i = max(end, i + 1)
        else:
            i += 1


def claim_lines(doc: PasteDoc, name: str, pat: re.Pattern[str]) -> None:
    """Claim every free line ``pat`` finds something in."""
    for i, ln in enumerate(doc.lines):
        if doc.owner[i] is None and pat.search(ln):
            doc.owner[i] = name
