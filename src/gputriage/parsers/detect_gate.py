"""Literal gates for the paste detectors: a cheap "no line can match" before a per-line loop.

A detector that claims only lines one of its regular expressions matches runs a Python
step per line of the paste, over a whole MiB of a training log that holds nothing of
it. :class:`Gate` takes those expressions and, from their parse trees, the literal
strings that every match must contain (one of them at least, compared lowercased). When
none of them occurs in the paste (one ``str`` search in C per literal, each searched
once per paste whichever detectors share it), no line can match and the detector returns
at once. The gate is a necessary condition by construction: an expression with no
required literal (a class or an optional part only) makes its gate always open, and so
does a paste with a non-ASCII character (whose case folding ``str.lower`` may not mirror).

A detector declares the gates it claims through (:func:`gated_by`): it claims nothing
when none of them is open. Their literals and searches, per detector, are stored in
:mod:`gputriage.parsers.detect_table` (written by ``tools/gate_table.py`` from these
declarations), so that :func:`may_open` can tell whether a paste may hold anything of a
detector without importing the detector's module.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import weakref
from collections.abc import Callable, Iterable, Iterator

from gputriage.text.literals import required_literals
from gputriage.text.paste import PasteDoc, claim_blocks, claim_lines

__all__ = ["Gate", "declared_gates", "gate_entry", "gated_blocks", "gated_by", "gated_lines",
           "held_by_line", "may_open"]

_LETTERS = bytes(c | 32 if 65 <= c <= 90 or 97 <= c <= 122 else 32 for c in range(256))


def _runs(literal: str) -> list[str]:
    """The runs of letters of a lowercased literal."""
    return literal.encode("ascii", "replace").translate(_LETTERS).decode().split()


_CHUNK = 1 << 20  # characters of a paste turned into words at a time
_LOWERED_MAX = 16 << 20  # a paste this long is searched in a lowercased copy


def _words(text: str) -> str | None:
    """The paste's words (runs of ASCII letters, lowercased; any other character parts
    them), each once, between spaces; None for a run of letters over a chunk long (then
    no literal is ruled out)."""
    words: set[bytes] = set()
    pos = 0
    while pos < len(text):
        data = text[pos:pos + _CHUNK].encode("ascii", "replace").translate(_LETTERS)
        if pos + len(data) < len(text):  # cut after the last non-letter: no word split
            cut = data.rfind(b" ") + 1
            if not cut:
                return None
            data = data[:cut]
        words.update(data.split())
        pos += len(data)
    return " " + b" ".join(words).decode() + " "


class _Seen:
    """One paste: its words, where its lines start, its text lowercased (when short), and
    the literals found on no free line so far (a claimed line stays claimed while the
    detectors run)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.words = _words(text)
        self.starts: list[int] | None = None
        self.lowered: str | None = None
        self.absent: set[str] = set()
        self.absent_anywhere: set[str] = set()  # literals on no line, claimed or not

    def may_hold(self, literal: str) -> bool:
        """False when the words of the paste rule ``literal`` out: each run of letters
        of it is a word of the paste, the first one may end one, the last start one."""
        runs = _runs(literal)
        if not runs or self.words is None:
            return True
        letter = literal[0].isalpha(), literal[-1].isalpha()
        if len(runs) == 1:
            word = runs[0]
            return (word if letter[0] and letter[1] else f" {word}" if letter[1]
                    else f"{word} " if letter[0] else f" {word} ") in self.words
        first = f"{runs[0]} " if letter[0] else f" {runs[0]} "
        last = f" {runs[-1]}" if letter[1] else f" {runs[-1]} "
        return (first in self.words and last in self.words
                and all(f" {w} " in self.words for w in runs[1:-1]))

    def line_starts(self, doc: PasteDoc) -> list[int]:
        """Where each line of ``doc`` starts in its text (and where the text ends)."""
        if self.starts is None:
            self.starts = list(itertools.accumulate(map((1).__add__, map(len, doc.lines)),
                                                    initial=0))
        return self.starts

    def line_of(self, doc: PasteDoc, at: int) -> int:
        """The index of the line of ``doc`` that holds offset ``at`` of its text."""
        return bisect.bisect_right(self.line_starts(doc), at) - 1

    def matched_lines(self, doc: PasteDoc, pattern: re.Pattern[str]) -> Iterator[int]:
        """The lines of ``doc`` nobody claimed where ``pattern`` (which matches no line
        break) finds something, in order."""
        for m in pattern.finditer(self.text):
            i = self.line_of(doc, m.start())
            if doc.owner[i] is None:
                yield i

    def holding(self, doc: PasteDoc, literal: str) -> Iterator[int]:
        """The lines of ``doc`` (claimed or not) that hold ``literal``, in order."""
        if literal in self.absent_anywhere:
            return
        at = self.find(literal, 0) if self.may_hold(literal) else -1
        if at < 0:
            self.absent_anywhere.add(literal)
        while at >= 0:
            i = self.line_of(doc, at)
            yield i
            at = self.find(literal, self.line_starts(doc)[i + 1])

    def free_lines(self, doc: PasteDoc, literal: str) -> Iterator[int]:
        """The lines of ``doc`` nobody claimed that hold ``literal``, in order."""
        if literal in self.absent:
            return
        free = False
        for i in self.holding(doc, literal):
            if doc.owner[i] is None:
                free = True
                yield i
        if not free:
            self.absent.add(literal)

    def find(self, literal: str, pos: int) -> int:
        """Where ``literal`` (lowercased) is next in the paste, in any case, from ``pos``."""
        if len(self.text) <= _LOWERED_MAX:
            if self.lowered is None:
                self.lowered = self.text.lower()
            return self.lowered.find(literal, pos)
        m = _literal_re(literal).search(self.text, pos)  # no lowercased copy of a large paste
        return -1 if m is None else m.start()


def _search_at(pattern: re.Pattern[str], text: str, pos: int) -> int:
    m = pattern.search(text, pos)
    return -1 if m is None else m.start()


def _lines_with(text: str, search: Callable[[int], int], found: set[int]) -> None:
    """Add to ``found`` the start of each line of ``text`` where ``search(pos)`` (the
    next offset at or after ``pos`` where it finds something, or -1) finds something."""
    find, rfind = text.find, text.rfind
    at = search(0)
    while at >= 0:
        found.add(rfind("\n", 0, at) + 1)
        after = find("\n", at)
        if after < 0:
            return
        at = search(after + 1)


@functools.lru_cache(maxsize=1024)
def _literal_re(literal: str) -> re.Pattern[str]:
    """A lowercased literal found in any case (of an ASCII paste)."""
    return re.compile(re.escape(literal), re.IGNORECASE)


_SEEN: weakref.WeakKeyDictionary[PasteDoc, _Seen] = weakref.WeakKeyDictionary()


def _seen(doc: PasteDoc) -> _Seen:
    """What is known of ``doc``'s text so far (the gates of every detector share it)."""
    text = doc.text
    seen = _SEEN.get(doc)
    if seen is None or seen.text is not text:
        seen = _SEEN[doc] = _Seen(text)
    return seen


class Gate:
    """Whether a free line of a paste may hold a match of any of ``patterns`` (or one of
    ``literals``, words compared lowercased that a detector looks for without a regex);
    with ``test``, whether such a line passes it (a detector's exact test of the line
    its claims start at, run only on the lines that hold a literal; ``test_at`` is given
    the paste and the line's index instead)."""

    def __init__(self, *patterns: re.Pattern[str], literals: tuple[str, ...] = (),
                 searches: tuple[re.Pattern[str], ...] = (),
                 test: Callable[[str], object] | None = None,
                 test_at: Callable[[PasteDoc, int], object] | None = None) -> None:
        self.test: Callable[[PasteDoc, int], object] | None = test_at
        if test is not None:
            self.test = lambda doc, i: test(doc.lines[i])
        self.searches = searches  # regexes that match no line break, searched whole
        found: set[str] | None = {w.lower() for w in literals}
        for pat in patterns:
            lits = required_literals(pat)
            if lits is None or found is None:
                found = None
                break
            found |= lits
        self.literals = None if found is None else tuple(sorted(found, key=len, reverse=True))

    def anywhere(self, text: str) -> bool:
        """False only when no line of ``text`` can match: none holds a literal (case
        ignored) or a search's match. Without literals (a pattern gives none), or for a
        text that is not ASCII (as :meth:`open`), True."""
        if self.literals is None or not text.isascii():
            return True
        if any(p.search(text) for p in self.searches):
            return True
        if len(text) <= _LOWERED_MAX:  # (as ``_Seen.find``: a copy only of a smaller paste)
            low = text.lower()
            return any(lit in low for lit in self.literals)
        return any(_literal_re(lit).search(text) for lit in self.literals)

    def lines_holding(self, text: str) -> set[int] | None:
        """Where the lines of ``text`` (cut at newlines) that may match start: those
        holding a literal (case ignored) or a search's match, each search made once a
        line, up to its first. None where the gate stands for no test (as
        :meth:`anywhere` says True)."""
        if self.literals is None or not text.isascii():
            return None
        found: set[int] = set()
        for pattern in self.searches:
            _lines_with(text, functools.partial(_search_at, pattern, text), found)
        if len(text) <= _LOWERED_MAX:
            low = text.lower()  # (ASCII: the same offsets)
            for lit in self.literals:
                _lines_with(text, functools.partial(low.find, lit), found)
        else:
            for lit in self.literals:
                _lines_with(text, functools.partial(_search_at, _literal_re(lit), text), found)
        return found

    def candidates(self, doc: PasteDoc) -> list[int] | None:
        """The indices, in order, of the free lines of ``doc`` that hold one of the
        literals (case ignored) or a search's match: all a detector need try whose every
        claim starts at such a line (its test is not applied; a line it claims on the
        way stays to be skipped). None where every line may (no literals, a paste that
        is not ASCII), as :meth:`open` reads them."""
        if self.literals is None or not doc.text.isascii():
            return None
        seen = _seen(doc)
        found: set[int] = set()
        for literal in self.literals:
            found.update(seen.free_lines(doc, literal))
        for pattern in self.searches:
            found.update(seen.matched_lines(doc, pattern))
        return sorted(found)

    def open(self, doc: PasteDoc) -> bool:
        """False only when no free line of ``doc`` can match: a detector that starts its
        claims on such lines only may return."""
        if self.literals is None:
            return True
        text = doc.text
        if not text.isascii():
            return True
        seen = _seen(doc)
        tested: set[int] = set()
        found = itertools.chain.from_iterable(
            [*(seen.free_lines(doc, lit) for lit in self.literals),
             *(seen.matched_lines(doc, pat) for pat in self.searches)])
        for i in found:
            if self.test is None:
                return True
            if i not in tested:
                tested.add(i)
                if self.test(doc, i):
                    return True
        return False


@functools.cache
def _gate_of(pattern: re.Pattern[str]) -> Gate:
    return Gate(pattern)


def gated_blocks(doc: PasteDoc, name: str, start: re.Pattern[str], cont: Callable[[str], bool],
                 confirm: Callable[[PasteDoc, int], bool] | None = None,
                 before: Callable[[str], bool] | None = None) -> None:
    """:func:`~gputriage.text.paste.claim_blocks`, when a free line may hold ``start``."""
    if _gate_of(start).open(doc):
        claim_blocks(doc, name, start, cont, confirm, before)


def gated_lines(doc: PasteDoc, name: str, pat: re.Pattern[str]) -> None:
    """:func:`~gputriage.text.paste.claim_lines`, when a free line may hold ``pat``."""
    if _gate_of(pat).open(doc):
        claim_lines(doc, name, pat)


def held_by_line(doc: PasteDoc, literals: Iterable[str]) -> dict[int, frozenset[str]] | None:
    """For each line of ``doc`` (claimed or not) that holds some of ``literals`` (lower
    case, none holding a line break), those it holds, case ignored: what
    ``frozenset(t for t in literals if t in line.lower())`` gives a line, for every line at
    once (a search in C per literal over the whole paste, none for a literal its words
    rule out). None for a paste that is not ASCII (lower case may move its offsets)."""
    if not doc.text.isascii():
        return None
    seen = _seen(doc)
    found: dict[int, set[str]] = {}
    for literal in literals:
        for i in seen.holding(doc, literal):
            found.setdefault(i, set()).add(literal)
    return {i: frozenset(held) for i, held in found.items()}


# --- the look before a detector's module is imported ----------------------------------

# a detector's gates as data: their literals, and their searches as (pattern, flags)
GateEntry = tuple[tuple[str, ...], tuple[tuple[str, int], ...]]
_Detector = Callable[[PasteDoc], None]
_DECLARED: dict[Callable[..., object], tuple[Gate, ...]] = {}

# the characters that are not ASCII but that case folding (``str.lower``, ``upper``,
# ``casefold``, a regex's IGNORECASE) turns into ASCII letters or matches with one:
# where one is in a paste, its ASCII words do not rule a literal out
# (tests/test_detect_lazy.py computes the set again from the Unicode tables)
FOLDS_INTO_ASCII = ("\u00df\u0130\u0131\u0149\u017f\u01f0\u1e96\u1e97\u1e98\u1e99\u1e9a"
                    "\u1e9e\u212a\ufb00\ufb01\ufb02\ufb03\ufb04\ufb05\ufb06")
_FOLDING = re.compile(f"[{FOLDS_INTO_ASCII}]")


def gated_by(*gates: Gate | re.Pattern[str]) -> Callable[[_Detector], _Detector]:
    """Declare that the detector below claims nothing when none of ``gates`` is open (a
    pattern stands for the gate :func:`gated_blocks` / :func:`gated_lines` give it). The
    detector is returned as it is: the declaration is what ``tools/gate_table.py`` reads
    to write :mod:`gputriage.parsers.detect_table`."""
    declared = tuple(g if isinstance(g, Gate) else _gate_of(g) for g in gates)

    def declare(detector: _Detector) -> _Detector:
        _DECLARED[detector] = declared
        return detector

    return declare


def declared_gates(detector: Callable[..., object]) -> tuple[Gate, ...] | None:
    """The gates a detector declared with :func:`gated_by` (None: it declared none)."""
    return _DECLARED.get(detector)


def gate_entry(gates: tuple[Gate, ...] | None) -> GateEntry | None:
    """The literals and searches of ``gates`` together, as the table stores them; None
    when a detector declared no gate or one of its gates is always open."""
    if not gates or any(g.literals is None for g in gates):
        return None
    literals = sorted({lit for g in gates for lit in g.literals or ()})
    searches = sorted({(s.pattern, s.flags) for g in gates for s in g.searches})
    return tuple(literals), tuple(searches)


@functools.lru_cache(maxsize=256)
def _search_re(pattern: str, flags: int) -> re.Pattern[str]:
    return re.compile(pattern, flags)


def may_open(doc: PasteDoc, literals: tuple[str, ...],
             searches: tuple[tuple[str, int], ...] = ()) -> bool:
    """False only when no free line of ``doc`` (one no detector claimed so far) can hold
    one of ``literals`` (in any case) or a match of ``searches``: then no gate made of
    them is open (:meth:`Gate.open` looks at the free lines, and detection asks before
    the detector runs, its claims and those after it still to come). So the words of a
    job's NCCL records (a host named ``gpu-node-3``, ``NCCL_SOCKET_IFNAME``, ``nvmlDev``),
    claimed by the NCCL detector first, open no later detector. A paste that is not
    ASCII (where a lowercased copy's offsets may differ) is read by its ASCII words,
    claimed lines or not, unless a character of it folds into an ASCII letter
    (:data:`FOLDS_INTO_ASCII`): then it may open anything."""
    text = doc.text
    seen = _seen(doc)
    if not text.isascii():
        if _FOLDING.search(text):
            return True
        for literal in literals:
            if literal in seen.absent_anywhere:
                continue
            if seen.may_hold(literal) and seen.find(literal, 0) >= 0:
                return True
            seen.absent_anywhere.add(literal)
        return any(_search_re(pattern, flags).search(text) for pattern, flags in searches)
    if any(next(seen.free_lines(doc, literal), None) is not None for literal in literals):
        return True
    return any(next(seen.matched_lines(doc, _search_re(pattern, flags)), None) is not None
               for pattern, flags in searches)
