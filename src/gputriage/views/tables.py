"""The tables of the terminal views, one way: a rich ``Table`` sized to its content.

On a terminal the table wraps its free-text column at the console's width (between
words; a word longer than its column folds). Piped (a console from
:func:`gputriage.views.console.make_console`, or any console that is not a
terminal), the same table prints as plain aligned columns: no box, no edge padding,
nothing wrapped, no trailing spaces. rich is imported inside the functions only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gputriage.views.console import PIPED_WIDTH

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console
    from rich.table import Table

__all__ = ["new_table", "piped", "print_lines", "print_table", "say", "table_lines"]


def piped(console: Console) -> bool:
    """Whether ``console`` prints to something other than a terminal."""
    return not console.is_terminal


def new_table(console: Console, *, header: bool = True, boxed: bool = False) -> Table:
    """An empty table: columns two spaces apart, no outer padding; ``boxed`` draws a
    box with row separators on a terminal only (piped output stays plain)."""
    from rich import box
    from rich.table import Table

    framed = boxed and not piped(console)
    return Table(box=box.SQUARE if framed else None, show_header=header, show_lines=framed,
                 show_edge=framed, pad_edge=framed, padding=(0, 1), expand=False,
                 header_style="dim" if not framed else "table.header", highlight=False)


def print_table(console: Console, table: Table, *, indent: int = 0) -> None:
    """Print ``table`` ``indent`` columns in: as rich draws it on a terminal; piped, at
    its content's width with each line's trailing spaces dropped (whatever the
    console's width)."""
    from rich.padding import Padding

    if not piped(console):
        console.print(Padding(table, (0, 0, 0, indent), expand=False) if indent else table)
        return
    print_lines(console, table_lines(console, table, indent=indent))


def table_lines(console: Console, table: Table, *, indent: int = 0) -> list[Any]:
    """``table`` as it prints piped: ``Text`` lines at its content's width, ``indent``
    columns in, trailing spaces stripped."""
    from rich.padding import Padding

    return _render_lines(console, Padding(table, (0, 0, 0, indent), expand=False)
                         if indent else table)


def print_lines(console: Console, lines: list[Any]) -> None:
    """Print rich ``Text`` lines as they are: never wrapped, never cropped."""
    for line in lines:
        console.print(line, soft_wrap=True, no_wrap=True, overflow="ignore", crop=False)


def say(console: Console, text: Any) -> None:
    """Print one ``Text`` line: wrapped between words on a terminal, whole when piped."""
    if piped(console):
        print_lines(console, [text])
    else:
        console.print(text)


def _render_lines(console: Console, table: Any) -> list[Any]:
    """The table's lines as ``Text``, trailing spaces stripped."""
    from rich.text import Text

    options = console.options.update(width=PIPED_WIDTH, min_width=1, max_width=PIPED_WIDTH,
                                     no_wrap=False, overflow="fold")
    out = []
    for segments in console.render_lines(table, options, pad=False):
        line = Text()
        for seg in segments:
            if not seg.control:
                line.append(seg.text, style=seg.style)
        line.rstrip()
        out.append(line)
    return out
