"""Words for counts and numbers as a person reads them: ``1 finding``, ``2 findings``,
``59.4 GB/s`` (not ``59.4126``). Every view counts and rounds through these."""

from __future__ import annotations

import math

__all__ = ["counted", "human_number", "plural"]

# Plurals that adding "s" gets wrong, as the views use them.
_IRREGULAR = {"consequence": "consequences", "GPU": "GPUs", "busy": "busy",
              "entry": "entries", "category": "categories", "body": "bodies",
              "this": "these", "is": "are", "was": "were", "has": "have"}


def plural(n: int, word: str, many: str | None = None) -> str:
    """``word`` as it goes with ``n``: itself for 1, else ``many`` (default: its
    plural: ``entry`` → ``entries``, ``finding`` → ``findings``)."""
    if n == 1:
        return word
    if many is not None:
        return many
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in tuple("aeiou"):
        return word[:-1] + "ies"
    return word + "s"


def counted(n: int, word: str, many: str | None = None) -> str:
    """``1 finding``, ``2 findings``, ``0 findings``; ``word`` may be several words, the
    last one agreeing with ``n`` (``counted(3, "distinct finding")``)."""
    head, _, last = word.rpartition(" ")
    noun = plural(n, last, many)
    return f"{n:,} {head + ' ' if head else ''}{noun}"


def human_number(value: float) -> str:
    """``value`` rounded as a person reads a measurement: three significant figures at
    most, never an exponent, no trailing zeros (``59.4126`` → ``59.4``, ``1234.5`` →
    ``1,234``, ``0.04567`` → ``0.0457``, ``12.0`` → ``12``)."""
    if not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{round(value):,}"
    if magnitude == 0:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(magnitude)))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
