"""Parsers: pure functions from a source's text (or JSON document) to typed
dataclasses. Each source names its parser in :mod:`gputriage.sources`
(``Source.parser``); :func:`gputriage.sources.parser_of` returns it."""
