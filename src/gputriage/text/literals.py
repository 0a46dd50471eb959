"""The literals a regular expression needs: one of them, at least, is in every match.

From the expression's parse tree (Python's own regex parser), the runs of ASCII literal
characters that every match holds, lowercased (a run goes on through a branch of
literals, each way it may be spelt), so that a text with none of them (looked for with
one ``str`` search each, in C) is known to hold no match before the expression runs.
Used by the paste detectors' gates (:mod:`gputriage.parsers.detect_gate`), the job
messages' catalog (:mod:`gputriage.knowledge.job_messages`) and the job log's version
readers (:mod:`gputriage.parsers.job_log`).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

__all__ = ["required_literal_sets", "required_literals"]

sre: Any
sre_parse: Any
try:  # the regex parser of Python 3.11+ (of 3.10 below)
    sre, sre_parse = importlib.import_module("re._constants"), importlib.import_module("re._parser")
except ImportError:  # pragma: no cover - Python 3.10
    sre, sre_parse = importlib.import_module("sre_constants"), importlib.import_module("sre_parse")

_TRANSPARENT = {sre.AT, sre.ASSERT, sre.ASSERT_NOT}  # zero-width: a literal run goes on
_REPEATS = {sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", sre.MAX_REPEAT)}


def _best(options: list[frozenset[str]]) -> frozenset[str] | None:
    """The option whose shortest literal is longest (the most selective), if any."""
    return max(options, key=lambda s: min(map(len, s)), default=None)


# strings a run of literal characters may branch into (``(?:NVIDIA|CUDA)_``: "nvidia_" or
# "cuda_", not "nvidia" or "cuda" and then "_" alone; the 40 field names of ``kubectl
# describe`` each with its colon); past it, the run ends there
_SPELLINGS = 64
_CLASS = 4  # characters of a class that a run goes on through


def _spelt(op: Any, arg: Any) -> list[str] | None:
    """The strings one item of a parse tree matches, lowercased, where it is an ASCII
    literal, a class of a few of them, or a branch or group of sequences of these (None
    for any other item, or past :data:`_SPELLINGS` strings)."""
    if op is sre.LITERAL:
        return [chr(arg).lower()] if arg < 128 and arg != 10 else None
    if op is sre.IN:
        if len(arg) > _CLASS or not all(o is sre.LITERAL and a < 128 and a != 10
                                        for o, a in arg):
            return None
        return list({chr(a).lower() for _, a in arg})  # ([:=], [ _-]: a few bytes)
    if op is sre.SUBPATTERN:
        return _spellings(arg[-1])
    if op is sre.BRANCH:
        out: set[str] = set()
        for alternative in arg[1]:
            found = _spellings(alternative)
            if found is None:
                return None
            out.update(found)
            if len(out) > _SPELLINGS:
                return None
        return list(out)
    return None


def _spellings(items: Any) -> list[str] | None:
    """Every string a sequence of items :func:`_spelt` spells matches (None: it holds
    another item, or past :data:`_SPELLINGS` strings)."""
    out = [""]
    for op, arg in getattr(items, "data", items):  # (a SubPattern's list: no __getitem__)
        found = _spelt(op, arg)
        if found is None or len(out) * len(found) > _SPELLINGS:
            return None
        out = [a + b for a in out for b in found]
    return out


def _required(items: Any) -> frozenset[str] | None:
    """Literals one of which every match of the sequence ``items`` contains."""
    return _best(_options(items))


def _options(items: Any) -> list[frozenset[str]]:
    """Sets of literals, every match of the sequence ``items`` containing one of each."""
    options: list[frozenset[str]] = []
    run = [""]  # the ways the run of literal characters so far is spelt

    def end_run() -> list[str]:
        if all(run):
            options.append(frozenset(run))
        return [""]

    for op, arg in getattr(items, "data", items):
        if op is sre.LITERAL and arg < 128 and arg != 10:  # (the usual item: no call)
            c = chr(arg).lower()
            run = [a + c for a in run]
            continue
        if op in _TRANSPARENT:
            continue
        spelt = _spelt(op, arg) if op is not sre.LITERAL else None
        if spelt is not None and len(run) * len(spelt) <= _SPELLINGS:
            run = [a + b for a in run for b in spelt]
            continue
        run = end_run()
        found: frozenset[str] | None = None
        if op is sre.SUBPATTERN:
            found = _required(arg[-1])
        elif getattr(sre, "ATOMIC_GROUP", None) is op:
            found = _required(arg)
        elif op in _REPEATS and arg[0] >= 1:
            found = _required(arg[2])
        elif op is sre.BRANCH:
            branches = [_required(b) for b in arg[1]]
            if all(b is not None for b in branches):
                found = frozenset().union(*(b for b in branches if b is not None))
        if found:
            options.append(found)
    end_run()
    return [o for o in options if all(o)]


def required_literals(pattern: re.Pattern[str]) -> frozenset[str] | None:
    """Lowercased literals one of which every match of ``pattern`` contains (None when
    the pattern has none: its gate is always open)."""
    return _best(list(required_literal_sets(pattern)))


def required_literal_sets(pattern: re.Pattern[str]) -> tuple[frozenset[str], ...]:
    """Every set of lowercased literals that :func:`required_literals` chooses from: each
    match of ``pattern`` contains one literal of each set (``GPU\\s*:\\s*(?:Tesla|RTX)``:
    "gpu", and "tesla" or "rtx"). Empty when the pattern has none."""
    if pattern.flags & re.VERBOSE:
        return ()  # parsed here without the whitespace rules it was compiled with
    try:
        return tuple(_options(sre_parse.parse(pattern.pattern, pattern.flags)))
    except Exception:  # a parse tree of another Python version: no gate
        return ()
