"""The rich styles of verdict and severity words, shared by the terminal views."""

from __future__ import annotations

__all__ = ["STYLES"]

STYLES = {
    "ok": "bold green",
    "info": "bold cyan",
    "warning": "bold yellow",
    "critical": "bold red",
    "unknown": "bold magenta",
    "missing": "bold red",
}
