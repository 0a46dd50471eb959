"""Telling text from binary data by a sample of its bytes (kept import-light: the
``logs`` command asks before anything else is loaded)."""

from __future__ import annotations

__all__ = ["looks_binary"]

# control bytes that text outputs do not contain (tab, newlines, form feed, ESC allowed)
_CONTROL = bytes(b for b in range(1, 32) if b not in (9, 10, 11, 12, 13, 27)) + b"\x7f"


def looks_binary(sample: bytes) -> bool:
    """Many control bytes in a sample: binary data, not a text output."""
    if not sample:
        return False
    ctrl = sum(sample.count(bytes([c])) for c in _CONTROL)
    return ctrl > max(8, len(sample) // 20)
