"""Helpers shared by parsers."""

from __future__ import annotations

import functools
import math
import re

from gputriage.errors import ParseError

__all__ = ["INT_DIGITS", "ParseError", "as_float", "as_int", "normalize_bus_id", "parse_bool",
           "parse_int", "split_lines", "strict_float", "strict_hex", "strict_int"]

_BUS_RE = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})"
    r"(?:\.(?P<fn>[0-7]))?$"
)


def normalize_bus_id(raw: str | None) -> str | None:
    """Canonical PCI address ``dddd:bb:dd.f`` in lower case.

    nvidia-smi prints an 8-digit domain (``00000000:18:00.0``), the kernel a
    4-digit one (``0000:18:00.0``), Xid lines omit the function
    (``PCI:0000:18:00``): all map to ``0000:18:00.0``.
    """
    if not raw:
        return None
    return _normalized(raw) if len(raw) <= 64 else _normalize(raw)


@functools.lru_cache(maxsize=1024)  # a host has few addresses, seen on every event line
def _normalized(raw: str) -> str | None:
    return _normalize(raw)


def _normalize(raw: str) -> str | None:
    text = raw.strip().removeprefix("PCI:").strip("()")
    m = _BUS_RE.match(text)
    if not m:
        return None
    dom = int(m.group("dom") or "0", 16)
    return (f"{dom:04x}:{int(m.group('bus'), 16):02x}:{int(m.group('dev'), 16):02x}."
            f"{int(m.group('fn') or '0')}")


_BREAK = re.compile(r"\r\n?|\n")


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` as the tools print them and the log scanner reads them: cut
    at ``\n``, ``\r\n`` and ``\r`` only. ``str.splitlines()`` also cuts at ``\v``,
    ``\f``, ``\x1c``-``\x1e``, ``\x85``, ``\u2028`` and ``\u2029``: a byte in a field
    would start a line of its own there (a forged record), and a pasted output would
    not be cut where a file of it is."""
    lines = _BREAK.split(text) if "\r" in text else text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def parse_bool(raw: str | None) -> bool | None:
    """Enabled/Disabled, Yes/No, On/Off, True/False; None for N/A or unknown."""
    if raw is None:
        return None
    v = raw.strip().lower()
    if v in {"enabled", "yes", "on", "true", "active", "1"}:
        return True
    if v in {"disabled", "no", "off", "false", "inactive", "0"}:
        return False
    return None


# The one converter of numbers read from input: every parser, reader and rule that turns
# input text (or a decoded JSON / YAML / TOML value) into a number goes through these (a
# pattern's own bounded run of ASCII digits, ``[0-9]{1,18}``, is all int() ever reads).
# ASCII only: int() and float() also take Unicode digits ("١٢"), "1_000", "nan" and "inf",
# str.isdigit() says yes to "²", which int() then refuses, float() turns "1e400" into inf
# and int() refuses more than 4,300 digits. What is not a plain number is None (the field
# is unknown, the rest of the input is read), never an exception.
INT_DIGITS = 20  # the uint64 range, far from int()'s digit limit
_LEADING_INT = re.compile(r"\s*(-?[0-9]{1,18})(?![0-9])")
_INT = re.compile(r"[-+]?[0-9]{1,20}")
_HEX = re.compile(r"(?:0[xX])?([0-9a-fA-F]{1,16})")
_FLOAT = re.compile(r"[-+]?(?:[0-9]{1,40}(?:\.[0-9]{0,40})?|\.[0-9]{1,40})"
                    r"(?:[eE][-+]?[0-9]{1,4})?")


def parse_int(raw: str | None) -> int | None:
    """A leading ASCII integer (``"35 C"`` -> 35), or None for N/A, [N/A], empty or garbage."""
    if raw is None:
        return None
    m = _LEADING_INT.match(raw)
    return int(m.group(1)) if m else None


def _within(value: float, lo: float | None, hi: float | None) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def strict_int(text: str | None, *, signed: bool = True, lo: int | None = None,
               hi: int | None = None) -> int | None:
    """The integer ``text`` spells exactly (an optional sign, unless not ``signed``, then 1
    to 20 ASCII digits, no spaces), within ``lo``..``hi`` when given, else None: never an
    exception, whatever the input."""
    if not isinstance(text, str) or not _INT.fullmatch(text) or \
            not signed and not text[0].isdigit():
        return None
    value = int(text)
    return value if _within(value, lo, hi) else None


def strict_hex(text: str | None) -> int | None:
    """The integer of 1 to 16 ASCII hex digits (``0x`` allowed: ``0x1C``, ``ff``), else
    None."""
    m = _HEX.fullmatch(text) if isinstance(text, str) else None
    return int(m.group(1), 16) if m else None


def strict_float(text: str | None, *, lo: float | None = None,
                 hi: float | None = None) -> float | None:
    """The finite number ``text`` spells exactly in ASCII decimal or exponent form
    (``12``, ``-0.5``, ``.5``, ``1.2e+03``), within ``lo``..``hi`` when given, else None
    (also for nan, inf, overflow)."""
    if not isinstance(text, str) or not _FLOAT.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) and _within(value, lo, hi) else None


def as_int(value: object, *, lo: int | None = None, hi: int | None = None) -> int | None:
    """An integer of a decoded JSON / YAML / TOML document: an int (not a bool), a
    whole finite float, or a string :func:`strict_int` reads (surrounding blanks
    allowed), within ``lo``..``hi`` and 20 digits; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value) or abs(value) >= 10.0 ** INT_DIGITS:
            return None
        value = int(value)
    if isinstance(value, int):
        return value if abs(value) < 10 ** INT_DIGITS and _within(value, lo, hi) else None
    return strict_int(value.strip(), lo=lo, hi=hi) if isinstance(value, str) else None


def as_float(value: object, *, lo: float | None = None,
             hi: float | None = None) -> float | None:
    """A finite number of a decoded JSON / YAML / TOML document: an int or float (not a
    bool), or a string :func:`strict_float` reads (surrounding blanks allowed), within
    ``lo``..``hi``; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if abs(value) >= 10 ** 300:  # float() of it would overflow
            return None
        value = float(value)
    if isinstance(value, float):
        return value if math.isfinite(value) and _within(value, lo, hi) else None
    return strict_float(value.strip(), lo=lo, hi=hi) if isinstance(value, str) else None
