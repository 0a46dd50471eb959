"""JSON from strangers, parsed with its nesting bounded.

``json.loads`` on ``[[[[...`` 100,000 levels deep raises RecursionError, and a
document just under the interpreter's limit makes each later recursive walk of
it (``repr``, the JSON view, a parser) raise RecursionError instead. Real
gputriage documents nest fewer than 10 levels; :func:`loads` refuses more than
:data:`MAX_DEPTH` with :class:`TooDeep`, a ValueError, which callers already treat
as "not valid JSON" (or tell apart, to refuse the input rather than pass it by).
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64


class TooDeep(ValueError):
    """JSON nested deeper than the limit (or than the decoder can go)."""


def too_deep(doc: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``doc`` nests lists / dicts more than ``limit`` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if not isinstance(value, (dict, list)):
            continue
        if depth > limit:
            return True
        items = value.values() if isinstance(value, dict) else value
        stack.extend((v, depth + 1) for v in items if isinstance(v, (dict, list)))
    return False


def loads(data: str | bytes | bytearray, limit: int = MAX_DEPTH) -> Any:
    """``json.loads``; ValueError for broken JSON, :class:`TooDeep` for nesting deeper
    than ``limit``."""
    try:
        doc = json.loads(data)
    except RecursionError:
        raise TooDeep("nested too deeply") from None
    if too_deep(doc, limit):
        raise TooDeep(f"nested more than {limit} levels deep")
    return doc
