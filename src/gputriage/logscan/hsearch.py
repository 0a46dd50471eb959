"""Anchor search through Hyperscan (the optional ``hyperscan`` package): one compiled
database of every anchor, scanned over a span outside the GIL.

Each match's end is turned into its line start (one candidate per line). A routine
anchor (see :data:`gputriage.logscan.search.ROUTINE`) is found through its required
literals (case ignored) where they are rare, its line checked here for the anchor,
else through the anchor, its line checked here for a required literal (see
:class:`Matcher`): every pattern is a literal, and routine lines seldom reach Python.
The lines found are exactly those of the ``bytes.find`` search.

Where ``hyperscan`` cannot be imported, :func:`available` is False and the scan uses
``bytes.find``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from gputriage.text.hscache import compiled
from gputriage.text.hslines import import_hyperscan, literal_pattern

__all__ = ["Matcher", "available", "hyperscan_hits", "matcher"]

_MODULE: list[Any] = []  # [the hyperscan module or None], once looked for
_BLANK = (32, 9)  # the first byte of a continuation line


def _hyperscan() -> Any:
    if not _MODULE:
        _MODULE.append(import_hyperscan())
    return _MODULE[0]


def available() -> bool:
    """Whether the Hyperscan binding can be imported."""
    return _hyperscan() is not None


def overlaps(anchor: bytes, literal: bytes) -> bool:
    """Whether ``literal`` can share bytes with an occurrence of ``anchor`` (case
    ignored): then "the anchor, then the literal, or the other way round" would miss
    lines that hold both."""
    a, r = anchor.lower(), literal.lower()
    if a in r or r in a:
        return True
    return any(a.endswith(r[:k]) or r.endswith(a[:k]) for k in range(1, min(len(a), len(r))))


def not_preceded(text: bytes, before: bytes) -> bytes:
    """A pattern matching ``text`` wherever ``before`` does not come right before it (no
    look-behind either: at each byte of ``before``, counted back from ``text``, another
    byte or the start of the data)."""
    alternatives = []
    for k in range(1, len(before) + 1):
        other, same = before[-k:len(before) - k + 1], before[len(before) - k + 1:]
        alternatives.append(b"(?:^|[^" + literal_pattern(other) + b"])" + literal_pattern(same))
    return b"(?:" + b"|".join(alternatives) + b")" + literal_pattern(text)


def not_followed(text: bytes, lead: bytes) -> bytes:
    """A pattern matching ``text`` wherever ``lead`` does not follow it (Hyperscan has no
    negative look-ahead: at each byte of ``lead``, another byte or the end of the data)."""
    tail = b""
    for i in range(len(lead), 0, -1):
        byte = literal_pattern(lead[i - 1:i])
        tail = b"(?:[^" + byte + b"]|\\z" + (b"|" + byte + tail if tail else b"") + b")"
    return literal_pattern(text) + tail


# a routine anchor whose required literals are all this long is searched through them
# (case ignored: shorter ones, such as "error", are words most logs hold)
RARE_LITERAL = 7

# Hyperscan picks its literal matcher by how many literals a database holds: below 50,
# "Teddy", whose cost per byte grows with each literal on builds without AVX2 (the
# hyperscan wheel's: its databases report no CPU features), from there on "FDR", whose
# cost hardly does. Measured on 8 MiB of the generated quiet, busy-HCA and storm logs and
# of the corpus's kernel logs (benchmarks/log_scan.py, scan_parts.py), the anchors' 36
# literals take 4.6-7.5 ms under Teddy (searched through shorter probes that end in rarer
# byte pairs, as they were) and 2.4-3.9 ms under FDR (whole). So every database is filled
# up to FILL_TO literals with fillers that no text holds (a NUL, a DEL, then letters: a
# match of one in binary junk is ignored).
FILL_TO = 64


def fillers(count: int) -> list[bytes]:
    """``count`` distinct literals that no text holds (see :data:`FILL_TO`)."""
    letters = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out = []
    for k in range(count):
        mixed = (k + 1) * 2654435761 % (1 << 32)  # (letters that differ all along)
        out.append(b"\x00\x7f" + bytes(letters[(mixed >> 5 * i) % 52] for i in range(6)))
    return out


class Matcher:
    """A compiled database: each pattern's id -> (context mode, literals one of which the
    line must hold, case ignored, or (), and a literal the line must hold as it is, or
    b""); mode -1: the ``screen`` expression, or one of ``screened_after`` (literals,
    case ignored where True: the last item is the literal), whose line is noted apart
    (and is a candidate), a literal's only where ``lead`` comes before it on its line.
    With ``lead`` (a literal that starts with an anchor: the storm pass's), that anchor
    is found only where the rest of ``lead`` does not follow it, and a line that holds
    ``lead`` and is followed by no continuation line is left to the storm pass unless an
    anchor of context mode 1 finds it. With ``lead``, an anchor of ``named`` is found
    only where ``name_field`` does not come right before it (an Xid line's process name,
    which the storm pass reads), and each of its literals (the needles of the rows that
    anchor, where they do not hold it) finds the line instead where it holds the anchor
    anywhere. Ids past ``checks`` are the fillers of :data:`FILL_TO`.

    A routine anchor (see :data:`gputriage.logscan.search.ROUTINE`) is found through its
    required literals where they are rare enough (:data:`RARE_LITERAL`), each a caseless
    literal whose line must hold the anchor too; else through the anchor, whose line must
    hold one of them: routine lines seldom call back either way, and every pattern stays
    a literal (a pattern of the anchor, then a required literal on its line, costs a
    third of the scan's speed)."""

    def __init__(self, anchors: Sequence[bytes], modes: Sequence[int],
                 routine: dict[bytes, tuple[bytes, ...]], screen: bytes | None = None,
                 lead: bytes | None = None,
                 screened_after: Sequence[tuple[bytes, bool]] = (),
                 named: dict[bytes, tuple[bytes, ...]] | None = None,
                 name_field: bytes = b"") -> None:
        hs = _hyperscan()
        exprs: list[bytes] = []
        flags: list[int] = []
        self.checks: list[tuple[int, tuple[bytes, ...], bytes]] = []
        named = named or {}

        def literal(text: bytes, caseless: bool) -> None:
            exprs.append(literal_pattern(text))
            flags.append(hs.HS_FLAG_CASELESS if caseless else 0)

        for a, mode in zip(anchors, modes, strict=True):
            need = routine.get(a, ())
            if lead is not None and lead.startswith(a) and not need:
                exprs.append(not_followed(a, lead[len(a):]))
                flags.append(0)
                self.checks.append((mode, (), b""))
            elif lead is not None and a in named and not need:
                exprs.append(not_preceded(a, name_field))
                flags.append(0)
                self.checks.append((mode, (), b""))
                for keep in named[a]:  # (the line found wherever it holds the anchor)
                    literal(keep, False)
                    self.checks.append((mode, (), a))
            elif need and all(len(r) >= RARE_LITERAL for r in need):
                for r in need:
                    literal(r, True)
                    self.checks.append((mode, (), a))
            else:
                literal(a, False)
                self.checks.append((mode, need, b""))
        if screen is not None:
            exprs.append(screen)
            flags.append(0)
            self.checks.append((-1, (), b""))
        for text, caseless in screened_after if lead is not None else ():
            literal(text, caseless)
            self.checks.append((-1, (), text))
        fill = fillers(max(0, FILL_TO - len(exprs)))
        exprs += map(literal_pattern, fill)
        flags += [0] * len(fill)
        self.patterns = len(exprs)  # (fillers included)
        self.lead = lead
        self.db = compiled(hs, exprs, range(len(exprs)), flags)
        self.scratch: Callable[[], Any] = functools.partial(hs.Scratch, self.db)


@functools.lru_cache(maxsize=8)
def matcher(anchors: tuple[bytes, ...], modes: tuple[int, ...],
            routine: tuple[tuple[bytes, tuple[bytes, ...]], ...],
            screen: bytes | None = None, lead: bytes | None = None,
            screened_after: tuple[tuple[bytes, bool], ...] = (),
            named: tuple[tuple[bytes, tuple[bytes, ...]], ...] = (),
            name_field: bytes = b"") -> Matcher:
    """The database of ``anchors`` (and ``screen``, a Hyperscan expression; ``lead``,
    ``screened_after``, ``named`` and ``name_field``, see :class:`Matcher`), once per
    process: compiled in about 4 ms for the anchors alone, 30 ms with the screen, or
    loaded from the cache where a run compiled it before (:mod:`gputriage.text.hscache`).
    Hyperscan searches a MiB in about 0.35 ms."""
    return Matcher(anchors, modes, dict(routine), screen, lead, screened_after, dict(named),
                   name_field)


def hyperscan_hits(buf: bytes | bytearray, lo: int, hi: int, m: Matcher,
                   starts: dict[int, int], screened: set[int] | None = None) -> None:
    """Add the start of each line of ``buf[lo:hi]`` that ``m`` finds -> its context mode
    (the higher of its anchors'); the starts of the lines its screen expression finds
    to ``screened``."""
    rfind, find = buf.rfind, buf.find
    checks = m.checks
    real = len(checks)
    lead = m.lead
    after = lead or b"\n"  # what a screen literal follows (there is one only with a lead)
    # the start and end of the last line recorded, and whether it is left to the storm
    # pass: it holds the lead and no continuation line follows it (the pass folds it as
    # it would fold it listed, or hands it over alone: a line its anchors of context mode
    # 0 find costs the pass more as a candidate and gives the same)
    line: list[Any] = [hi, hi, False]

    def on_match(i: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
        if i >= real:  # a filler
            return None
        pos = lo + to - 1  # the match's last byte
        mode, need, held = checks[i]
        if mode < 0:  # the screen (``held``: a literal that must follow the lead)
            if screened is None:
                return None
            s = rfind(b"\n", lo, pos) + 1 or lo
            if not held or find(after, s, pos + 1 - len(held)) >= 0:
                screened.add(s)
                if s not in starts:  # (found by its NVRM: too, unless that was left out)
                    starts[s] = 0
            return None
        if line[0] <= pos < line[1]:
            s = line[0]
            if line[2] and not mode:
                return None
        else:
            s = rfind(b"\n", lo, pos) + 1 or lo
            e = find(b"\n", pos, hi)
            e = hi if e < 0 else e
            if need:
                low = buf[s:e].lower()
                if not any(r in low for r in need):
                    return None
            if held and find(held, s, e) < 0:
                return None
            left = (lead is not None and e + 1 < hi and buf[e + 1] not in _BLANK
                    and find(lead, s, e) >= 0)
            line[0], line[1], line[2] = s, e, left
            if left and not mode:
                return None
        if starts.get(s, -1) < mode:
            starts[s] = mode
        return None

    with memoryview(buf) as view, view[lo:hi] as span:
        m.db.scan(span, match_event_handler=on_match, scratch=m.scratch())
