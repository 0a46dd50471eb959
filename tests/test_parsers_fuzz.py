"""Every registered parser takes arbitrary bytes: a result or ParseError, nothing else;
the same result for the same input, and one whose size stays proportional to it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.sources import PARSED, parser_of

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=25)


def _outcome(parser: Any, arg: Any) -> str:
    """The repr of what ``parser`` makes of ``arg``, or of its ParseError."""
    try:
        return repr(parser(arg))
    except ParseError as exc:
        return f"ParseError: {exc}"


def _check(parser: Any, arg: Any, size: int) -> None:
    first = _outcome(parser, arg)
    assert _outcome(parser, arg) == first  # no hidden state between calls
    assert len(first) <= 4096 + 16 * size, len(first)  # no blow-up on odd input


@pytest.mark.parametrize("source", sorted(PARSED))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=4096))
def test_arbitrary_bytes(source, data):
    parser, as_json = parser_of(source)
    text = data.decode("utf-8", errors="replace")
    if not as_json:
        _check(parser, text, len(text))
        return
    try:
        doc = json.loads(text)
    except ValueError:
        return  # the snapshot layer reports invalid JSON before any parser runs
    _check(parser, doc, len(text))


@pytest.mark.parametrize("source", sorted(s for s in PARSED if parser_of(s)[1]))
@settings(max_examples=60, deadline=None)
@given(doc=JSON_VALUES)
def test_arbitrary_json_documents(source, doc):
    parser, _ = parser_of(source)
    _check(parser, doc, len(json.dumps(doc)))
