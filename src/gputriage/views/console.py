"""The one rich console every terminal view prints through.

On a terminal it is rich's own console: the terminal's width (or ``COLUMNS``), colour
and styles. Anywhere else (a pipe, a file, Slurm ``--output``, a ticket paste, a test's
``StringIO``) it prints plain text that is never hard-wrapped and never padded: lines
are as long as what they say, with no trailing spaces and no escape sequences. So a
report pasted into an 80-column ticket is wrapped by the ticket, between words.

``NO_COLOR`` (set to anything but the empty string, per no-color.org) and ``TERM=dumb``
turn colour and styles off on a terminal too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["PIPED_WIDTH", "is_terminal", "make_console", "plain_output"]

# wide enough that nothing a report prints is wrapped; views size tables to their content
# and never expand to the console's width
PIPED_WIDTH = 10_000


def is_terminal(stream: Any, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``stream`` is a terminal (``FORCE_COLOR`` set non-empty counts as one)."""
    env = os.environ if environ is None else environ
    if env.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False


def plain_output(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for no colour and no styles (NO_COLOR, TERM=dumb)."""
    env = os.environ if environ is None else environ
    return env.get("NO_COLOR", "") != "" or env.get("TERM", "").lower() == "dumb"


def make_console(stream: IO[str] | None = None, *, stderr: bool = False) -> Console:
    """The console to render onto ``stream`` (stdout, or stderr with ``stderr``, when
    None): rich's on a terminal, unwrapped plain text without trailing spaces elsewhere."""
    from rich.console import Console

    if stream is None:
        stream = sys.stderr if stderr else sys.stdout
    plain = plain_output()
    if is_terminal(stream):
        return Console(file=stream, stderr=stderr, highlight=False, force_terminal=True,
                       color_system=None if plain else "auto", no_color=plain or None,
                       emoji=False)
    return Console(file=cast("IO[str]", _TrimmedLines(stream)), stderr=stderr, highlight=False,
                   force_terminal=False, force_jupyter=False, force_interactive=False,
                   color_system=None, no_color=True, width=PIPED_WIDTH, soft_wrap=True,
                   emoji=False, legacy_windows=False)


class _TrimmedLines:
    """A text stream that drops the spaces at the end of every line written through it.

    Trailing blanks are held back until the line goes on (they are written then) or ends
    (they are dropped), so a flush in the middle of a line loses nothing."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._blanks = ""

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", None) or "utf-8"

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        lines = text.split("\n")
        out: list[str] = []
        for i, line in enumerate(lines):
            if i:
                out.append("\n")
                self._blanks = ""
            body = line.rstrip(" \t")
            if body:
                out.append(self._blanks + body)
                self._blanks = ""
            self._blanks += line[len(body):]
        self._stream.write("".join(out))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def fileno(self) -> int:
        return self._stream.fileno()
