"""The line printer the views share: plain strings made safe rich output on one console,
wrapped and hung on a terminal, whole lines anywhere else."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gputriage.text.safe import printable
from gputriage.views.styles import LABEL_WIDTH

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

__all__ = ["Out", "Segment"]

Segment = tuple[str, str]  # (text, rich style; "" for none)


class Out:
    """Turns plain strings into safe rich output on one console (shared by the views
    that print a result's header, findings and tail around their own sections).

    On a terminal (``console.is_terminal``) a long line wraps between words, its further
    lines hanging under the text; on anything else every logical line is printed whole,
    without trailing spaces."""

    def __init__(self, console: Console, verbose: bool) -> None:
        from rich.text import Text

        self.console = console
        self.verbose = verbose
        self.wraps = console.is_terminal
        self._text = Text
        encoding = (getattr(console, "encoding", None) or "utf-8").lower()
        self.encoding = encoding
        self.unicode = encoding.replace("-", "").startswith("utf")
        self.dot = " · " if self.unicode else " | "
        self.evidence_lines: int | None = None  # per finding outside verbose; None: all

    def clean(self, value: Any) -> str:
        """``value`` as one printable line (:func:`gputriage.text.safe.printable`),
        characters the console cannot encode replaced."""
        text = printable(value)
        if not self.unicode:
            try:
                text = text.encode(self.encoding, errors="replace").decode(self.encoding)
            except LookupError:
                text = text.encode("ascii", errors="replace").decode("ascii")
        return text

    def text(self, *segments: Segment) -> Any:
        """A rich ``Text`` from (string, style) segments (no markup parsing)."""
        out = self._text(overflow="fold")
        for value, style in segments:
            out.append(self.clean(value), style=style or None)
        return out

    def labelled(self, label: Segment, *segments: Segment) -> None:
        """One line in two columns: ``label`` (a severity word) padded to
        :data:`LABEL_WIDTH`, then the text, whose wrapped lines hang under it."""
        from rich.cells import cell_len

        head = self.text(label)
        head.append(" " * max(LABEL_WIDTH - cell_len(head.plain), 1))
        self.hang(head, LABEL_WIDTH, self.text(*segments))

    def line(self, *segments: Segment, indent: int = 0) -> None:
        """Print one logical line; wrapped continuations keep the indent."""
        self.hang(self._text(" " * indent), indent, self.text(*segments))

    def verbatim(self, value: Any, *, indent: int = 0, style: str = "") -> None:
        """A line quoted from an input (an evidence line): whole and as it is when
        piped (control characters escaped, never re-wrapped); on a terminal its further
        lines hang under it."""
        self.hang(self._text(" " * indent), indent, self.text((value, style)))

    def whole(self, text: Any) -> None:
        """Print ``text`` as one line: never wrapped nor cropped, no trailing blanks."""
        text.rstrip()
        self.console.print(text, highlight=False, soft_wrap=True, no_wrap=True,
                           overflow="ignore", crop=False)

    def hang(self, head: Any, indent: int, body: Any) -> None:
        """``head`` then ``body``: on a terminal wrapped at spaces (a word longer than
        the line folds), its further lines indented by ``indent``; elsewhere one line."""
        if not self.wraps:
            self.whole(head + body)
            return
        width = max(self.console.width - indent, 20)
        parts = body.wrap(self.console, width)
        for i, part in enumerate(parts):
            part.rstrip()
            row = (head if i == 0 else self._text(" " * indent)) + part
            self.console.print(row, highlight=False, no_wrap=True, overflow="ignore")
