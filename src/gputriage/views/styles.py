"""The rich styles of verdict and severity words, shared by the terminal views."""

from __future__ import annotations

__all__ = ["LABEL_WIDTH", "STYLES"]

LABEL_WIDTH = 10  # the severity / verdict column; wrapped lines hang under the text

STYLES = {
    "ok": "bold green",
    "info": "bold cyan",
    "warning": "bold yellow",
    "critical": "bold red",
    "unknown": "bold magenta",
    "missing": "bold red",
}
