"""Progress on stderr for work that takes a while: bytes read of each log or snapshot,
sources collected.

Nothing is shown until the work has run for :attr:`Environment.progress_after_s` (about
a second), nor ever when stderr is not a terminal or with ``-q``: piped stderr stays
empty. The display is rich's progress bar, transient (it goes once the work is done) and
refreshed by the callbacks themselves, never by a thread of its own: the kernel-log
scanner forks worker processes only while no other thread runs.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Progress", "progress_for"]


class Progress:
    """Tasks by name (an input, "sources"), each with what is done of its total (None:
    unknown), drawn on ``stderr`` once ``after_s`` has passed since it was made."""

    def __init__(self, stderr: Any, after_s: float, enabled: bool = True) -> None:
        self.stderr = stderr
        self.enabled = enabled
        self.after_s = after_s
        self.start = time.monotonic()
        self.bar: Any = None  # rich.progress.Progress, once drawn
        self.tasks: dict[str, Any] = {}
        self.state: dict[str, tuple[float, float | None, str]] = {}

    def __call__(self, name: str, done: float, total: float | None = None,
                 unit: str = "bytes") -> None:
        """``name`` has ``done`` of ``total`` (None: unknown) ``unit`` (bytes, or a word
        for items: "sources")."""
        self.state[name] = (done, total, unit)
        if self.bar is None:
            if time.monotonic() - self.start < self.after_s:
                return
            self._open()
        for key, (now, of, what) in self.state.items():
            if key not in self.tasks:
                self.tasks[key] = self.bar.add_task(_short(key), total=of, shown="")
            self.bar.update(self.tasks[key], completed=now, total=of,
                            shown=_amount(now, of, what))
        self.state.clear()
        self.bar.refresh()

    def _open(self) -> None:
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        from gputriage.views.console import make_console

        self.bar = Bar(TextColumn("{task.description}"), BarColumn(),
                       TextColumn("{task.fields[shown]}"), TimeElapsedColumn(),
                       console=make_console(self.stderr, stderr=True), transient=True,
                       auto_refresh=False)
        self.bar.start()

    @property
    def update(self) -> Progress | None:
        """The callback to hand to the work (None when nothing is to be shown)."""
        return self if self.enabled else None

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _amount(done: float, total: float | None, unit: str) -> str:
    """``12.6/300.0 MB`` or ``12/40 sources`` (the total left out when unknown)."""
    if unit != "bytes":
        return f"{done:.0f}/{total:.0f} {unit}" if total is not None else f"{done:.0f} {unit}"
    from rich.filesize import decimal

    return f"{decimal(int(done))}/{decimal(int(total))}" if total is not None else decimal(
        int(done))


def _short(name: str, width: int = 40) -> str:
    """An input's name cut to ``width`` characters from the left (the file name stays)."""
    from gputriage.text.safe import printable

    text = printable(name)
    return text if len(text) <= width else "…" + text[-(width - 1):]


def progress_for(env: Any, quiet: bool = False) -> Progress:
    """A progress display on ``env.stderr``, disabled (its ``update`` None) with ``quiet``
    or when stderr is not a terminal."""
    stream = env.stderr
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError):
        tty = False
    return Progress(stream, getattr(env, "progress_after_s", 1.0), enabled=tty and not quiet)
