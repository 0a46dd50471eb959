"""Errors that reach the user as one clear line, never as a traceback."""

from __future__ import annotations


class InputError(Exception):
    """An input the user named cannot be read or understood."""


class ParseError(ValueError):
    """A source's text is malformed (as opposed to empty)."""
