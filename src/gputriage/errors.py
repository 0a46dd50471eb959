"""Errors that reach the user as one clear line, never as a traceback."""

from __future__ import annotations


class InputError(Exception):
    """An input the user named cannot be read or understood."""


class InputsConflict(InputError):
    """Inputs that each read fine but cannot go together (two hosts given as one):
    a usage error (exit 64), not an unreadable input."""


class ParseError(ValueError):
    """A source's text is malformed (as opposed to empty)."""


def unreadable(path: str, exc: OSError) -> InputError:
    """The one-line error for an input the system would not let us read."""
    if isinstance(exc, FileNotFoundError):
        return InputError(f"{path}: no such file or directory")
    if isinstance(exc, PermissionError):
        return InputError(f"{path}: permission denied")
    if isinstance(exc, IsADirectoryError):
        return InputError(f"{path}: is a directory")
    return InputError(f"{path}: cannot read ({exc.strerror or exc})")
