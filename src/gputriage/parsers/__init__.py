"""Parsers: pure functions from a source's text to typed dataclasses."""
