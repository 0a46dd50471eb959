"""Safe HTML pieces: every text from an input goes through :func:`esc` (control
characters escaped as ``\\xNN`` by :func:`gputriage.text.safe.printable`, then
``html.escape`` with quotes), and is clipped first, so a hostile or huge input can
neither become markup nor make the file unbounded."""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from gputriage.text.safe import printable

TEXT_CAP = 4000  # characters of one text (title, explanation, step) kept
LINE_CAP = 1000  # characters of one evidence line kept
LINES_CAP = 200  # evidence lines kept per evidence block

SEVERITY_WORDS = {"critical": "CRITICAL", "warning": "WARNING", "info": "INFO", "ok": "OK",
                  "unknown": "UNKNOWN"}


def clip(value: Any, limit: int = TEXT_CAP) -> str:
    """``str(value)`` cut to ``limit`` characters, saying how many were left out."""
    text = str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\u2026 ({len(text) - limit:,} more characters)"


def esc(value: Any, limit: int = TEXT_CAP) -> str:
    """``value`` as HTML text: clipped, control characters escaped, markup escaped."""
    return html.escape(printable(clip(value, limit)), quote=True)


def tag(name: str, body: str = "", **attrs: Any) -> str:
    """``<name attrs>body</name>``; ``body`` is markup the caller built; attribute values
    are escaped here (``class_`` for ``class``; None or False leaves one out)."""
    parts = [name]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        key = key.rstrip("_").replace("_", "-")
        parts.append(key if value is True else f'{key}="{esc(value)}"')
    return f"<{' '.join(parts)}>{body}</{name}>"


def badge(severity: str) -> str:
    """The severity in words on its colour (never colour alone)."""
    word = severity if severity in SEVERITY_WORDS else "unknown"
    return tag("span", SEVERITY_WORDS[word], class_=f"badge sev-{word}")


def banner_box(word: str, text_markup: str, more: str = "") -> str:
    """The verdict banner of every report: ``word`` (a severity) as a badge before
    ``text_markup`` (markup the caller escaped), then ``more`` markup under it."""
    line = tag("p", badge(word) + " " + text_markup, class_="verdict")
    return tag("section", line + more, class_=f"banner sev-{word}", aria_label="verdict")


def section(heading: str, body: str, *, ident: str) -> str:
    """A report section: its h2 and body."""
    return tag("section", tag("h2", esc(heading), id=f"{ident}-h") + body,
               id=ident, aria_labelledby=f"{ident}-h")


def table(head: Iterable[str], rows: Iterable[Iterable[Any]], *, caption: str | None = None,
          row_header: bool = True, class_: str | None = None) -> str:
    """A table in its own horizontal scroll box: ``head`` are texts, each row's cells
    markup or (markup, class); the first cell of a row is its header (``scope="row"``)
    unless told not."""
    cols = "".join(tag("th", esc(h), scope="col") for h in head)
    body = []
    for row in rows:
        cells = [c if isinstance(c, tuple) else (c, None) for c in row]
        first = (tag("th", cells[0][0], scope="row", class_=cells[0][1])
                 if row_header and cells else "")
        rest = cells[1:] if first else cells
        body.append(tag("tr", first + "".join(tag("td", c, class_=k) for c, k in rest)))
    cap = tag("caption", esc(caption)) if caption else ""
    grid = tag("table", cap + tag("thead", tag("tr", cols)) + tag("tbody", "".join(body)),
               class_=class_)
    return tag("div", grid, class_="scroll", tabindex="0", role="region",
               aria_label=caption or "table")


def lines_block(lines: Iterable[Any], *, cap: int = LINES_CAP) -> str:
    """Quoted input lines as one ``<pre>``: at most ``cap`` lines (and a note of the
    rest), each clipped to :data:`LINE_CAP` characters."""
    kept: list[str] = []
    left = 0
    for i, line in enumerate(lines):
        if i < cap:
            kept.append(esc(line, LINE_CAP))
        else:
            left += 1
    if left:
        kept.append(esc(f"\u2026 {left:,} more line{'s' if left != 1 else ''} "
                        "(the JSON output has them all)"))
    return tag("pre", "\n".join(kept))


def para(text: Any, class_: str | None = None) -> str:
    return tag("p", esc(text), class_=class_)


def definitions(pairs: Iterable[tuple[str, str]]) -> str:
    """A ``<dl>`` of (label text, value markup) pairs."""
    return tag("dl", "".join(tag("div", tag("dt", esc(k)) + tag("dd", v)) for k, v in pairs))
