"""Helpers shared by parsers."""

from __future__ import annotations

import functools
import re

from gputriage.errors import ParseError

__all__ = ["ParseError", "normalize_bus_id", "parse_bool", "parse_int"]

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


def parse_int(raw: str | None) -> int | None:
    """An integer, or None for N/A, [N/A], empty or garbage."""
    if raw is None:
        return None
    m = re.match(r"^\s*(-?\d{1,18})(?!\d)", raw)
    return int(m.group(1)) if m else None
