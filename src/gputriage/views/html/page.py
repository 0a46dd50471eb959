"""The document around the sections: doctype, ``lang``, the Content-Security-Policy
that forbids every fetch (``default-src 'none'``: the file loads nothing, and runs no
script), the inline style sheet, the one h1 and the header lines."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone

from gputriage import __version__
from gputriage.views.html.markup import esc, tag
from gputriage.views.html.style import CSS

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def now_text() -> str:
    """The time the report is written, to the second, in UTC."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def when_text(iso: str | None) -> str | None:
    """An ISO 8601 time as ``2024-05-14 09:30:00 UTC`` (as given when not ISO)."""
    if not iso:
        return None
    try:
        at = datetime.fromisoformat(str(iso))
    except ValueError:
        return str(iso)
    if at.tzinfo is not None:
        at = at.astimezone(timezone.utc)
    return at.strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if at.tzinfo is not None else "")


def document(title: str, heading: str, meta: Iterable[str], sections: Iterable[str]) -> str:
    """The whole file: ``title`` and ``heading`` are plain text, ``meta`` lines plain
    text under the h1, ``sections`` markup."""
    header = tag("header", tag("h1", esc(heading)) + "".join(
        tag("p", esc(m), class_="meta") for m in meta))
    footer = tag("footer", tag("p", esc(
        f"Written by gputriage {__version__} on {now_text()}. Self-contained: this file "
        "loads nothing from the network and runs no script.")))
    head = ("<meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{esc(CSP)}\">"
            "<meta name=\"color-scheme\" content=\"light dark\">"
            "<meta name=\"referrer\" content=\"no-referrer\">"
            f"<meta name=\"generator\" content=\"gputriage {esc(__version__)}\">"
            + tag("title", esc(title)) + tag("style", CSS))
    body = header + tag("main", "".join(sections)) + footer
    return ("<!DOCTYPE html>\n" + tag("html", tag("head", head) + tag("body", body), lang="en")
            + "\n")
