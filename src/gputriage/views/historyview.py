"""The listing of ``gputriage history``: one row a recorded check."""

from __future__ import annotations

import io
from typing import Any, Literal

from gputriage.text.safe import printable
from gputriage.views.console import make_console
from gputriage.views.styles import STYLES
from gputriage.views.tables import new_table, print_table

__all__ = ["format_rows", "render_rows"]


_LISTING: tuple[tuple[str, Literal["left", "right"]], ...] = (
    ("TIME", "left"), ("HOST", "left"), ("BOOT", "left"), ("VERDICT", "left"),
    ("CRIT", "right"), ("WARN", "right"), ("DIGEST", "left"), ("", "left"))


def _cells(r: dict[str, Any]) -> tuple[str, ...]:
    return (str(r["time"]), str(r.get("host") or "-"), (r.get("boot_id") or "-")[:8],
            r["verdict"].upper(), str(r["critical"]), str(r["warning"]),
            r["digest_sha256"][:12], "changed" if r.get("changed") else "")


def render_rows(rows: list[dict[str, Any]], console: Any) -> None:
    """Print a listing on a rich console: time, host, boot id, verdict, counts, short
    digest, and ``changed`` when the digest moved (a table on a terminal, plain
    aligned columns piped)."""
    from rich.text import Text

    table = new_table(console)
    for name, justify in _LISTING:
        table.add_column(name, justify=justify, no_wrap=name != "HOST",
                         overflow="fold")
    for r in rows:
        cells = [Text(printable(c)) for c in _cells(r)]
        cells[3].stylize(STYLES.get(r["verdict"], "none"))
        table.add_row(*cells)
    print_table(console, table)


def format_rows(rows: list[dict[str, Any]]) -> list[str]:
    """Plain text lines of a listing (see :func:`render_rows`), as printed piped."""
    buf = io.StringIO()
    render_rows(rows, make_console(buf))
    return buf.getvalue().splitlines()
