"""Untrusted text made safe for a terminal, a one-line message or a spreadsheet.

Host names, kernel strings, finding titles, evidence lines and file names come
from files strangers attach to tickets. Before any of it reaches a terminal,
C0 and C1 control characters, DEL, Unicode line/paragraph separators and bidi
overrides are shown as ``\\xNN`` / ``\\uNNNN`` (so no escape sequence runs and
no line is forged); ordinary Unicode stays as it is. rich markup is never parsed
here: callers put the result into ``rich.text.Text``.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["csv_cell", "printable"]

# C0 but TAB, LF (kept only where multi-line text is wanted), DEL, C1, line and paragraph
# separators, bidi embeddings / overrides / isolates
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_LINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CSV_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: Any, *, multiline: bool = False) -> str:
    """``str(value)`` with every control character escaped; LF kept when ``multiline``."""
    text = str(value)
    return (_UNSAFE if multiline else _UNSAFE_LINE).sub(_escape, text)


def csv_cell(value: Any) -> Any:
    """A CSV cell that neither a spreadsheet runs as a formula (OWASP's CSV-injection
    rule: a text starting with ``= + - @``, TAB or CR gets a leading single quote) nor a
    terminal showing the file runs as escapes. Numbers stay as they are."""
    if not isinstance(value, str):
        return value
    return "'" + printable(value) if value.startswith(_CSV_TRIGGERS) else printable(value)
