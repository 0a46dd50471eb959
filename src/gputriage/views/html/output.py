"""Writing the HTML file: the path is checked before any work (a directory, a missing
or unwritable folder is an error up front), then the file is written 0644 by the one
output writer (a temporary file in the same folder renamed into place: a reader never
sees half a report, a link is never written through). An existing regular file is
replaced: the report is derived output, made again by running the command again."""

from __future__ import annotations

import os
from pathlib import Path

from gputriage.snapshot.writer import OutputError, write_file

MODE = 0o644


def check_html_path(path: str) -> Path:
    """``path`` as a Path, or OutputError when the report could not be written there."""
    out = Path(path)
    folder = out.parent
    try:  # stat can fail (a folder without search permission, a name too long)
        if out.is_dir():
            raise OutputError(f"--html {path}: is a directory (name a file)")
        if out.exists() and not out.is_file():
            raise OutputError(f"--html {path}: exists and is not a regular file")
        if not folder.is_dir():
            raise OutputError(f"--html {path}: no such directory {folder}")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OutputError(f"--html {path}: cannot look up the path "
                          f"({reason[:1].lower()}{reason[1:]})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"--html {path}: cannot write in {folder} (permission denied)")
    return out


def write_html(path: str, text: str) -> Path:
    """Write ``text`` to ``path`` (UTF-8, mode 0644) through the writer every output
    uses (:func:`gputriage.snapshot.writer.write_file`): a private temporary renamed into
    place, so a link at ``path`` is replaced, never written through; OutputError on
    failure."""
    out = check_html_path(path)
    return write_file(out, text.encode("utf-8"), force=True, mode=MODE, option="--html")
