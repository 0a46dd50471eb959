"""Every registered parser takes arbitrary bytes: a result or ParseError, nothing else."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputriage.errors import ParseError
from gputriage.sources import PARSED, parser_of

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=25)


def _feed(source: str, data: bytes) -> None:
    parser, as_json = parser_of(source)
    text = data.decode("utf-8", errors="replace")
    if as_json:
        try:
            doc = json.loads(text)
        except ValueError:
            return  # the snapshot layer reports invalid JSON before any parser runs
        arg = doc
    else:
        arg = text
    with contextlib.suppress(ParseError):
        parser(arg)


@pytest.mark.parametrize("source", sorted(PARSED))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=4096))
def test_arbitrary_bytes(source, data):
    _feed(source, data)


@pytest.mark.parametrize("source", sorted(s for s in PARSED if parser_of(s)[1]))
@settings(max_examples=60, deadline=None)
@given(doc=JSON_VALUES)
def test_arbitrary_json_documents(source, doc):
    parser, _ = parser_of(source)
    with contextlib.suppress(ParseError):
        parser(doc)
