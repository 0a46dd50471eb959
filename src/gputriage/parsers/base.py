"""Helpers shared by parsers."""

from __future__ import annotations

import functools
import math
import re

from gputriage.errors import ParseError

__all__ = ["ParseError", "normalize_bus_id", "parse_bool", "parse_int", "strict_float",
           "strict_int"]

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


# ASCII only: int() and float() also take Unicode digits ("١٢"), "1_000", "nan" and "inf",
# and str.isdigit() says yes to "²", which int() then refuses.
_LEADING_INT = re.compile(r"\s*(-?[0-9]{1,18})(?![0-9])")
_INT = re.compile(r"[-+]?[0-9]{1,20}")  # the uint64 range, far from int()'s digit limit
_FLOAT = re.compile(r"[-+]?(?:[0-9]{1,40}(?:\.[0-9]{0,40})?|\.[0-9]{1,40})"
                    r"(?:[eE][-+]?[0-9]{1,4})?")


def parse_int(raw: str | None) -> int | None:
    """A leading ASCII integer (``"35 C"`` -> 35), or None for N/A, [N/A], empty or garbage."""
    if raw is None:
        return None
    m = _LEADING_INT.match(raw)
    return int(m.group(1)) if m else None


def strict_int(text: str | None, *, signed: bool = True) -> int | None:
    """The integer ``text`` spells exactly (an optional sign, unless not ``signed``, then 1
    to 20 ASCII digits, no spaces), else None: never an exception, whatever the input."""
    if text is None or not _INT.fullmatch(text) or not signed and not text[0].isdigit():
        return None
    return int(text)


def strict_float(text: str | None) -> float | None:
    """The finite number ``text`` spells exactly in ASCII decimal or exponent form
    (``12``, ``-0.5``, ``.5``, ``1.2e+03``), else None (also for nan, inf, overflow)."""
    if text is None or not _FLOAT.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None
