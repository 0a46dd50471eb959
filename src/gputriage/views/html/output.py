"""Writing the HTML file: the path is checked before any work (a directory, a missing
or unwritable folder is an error up front), then the file is written 0644 through a
temporary file in the same folder and ``os.replace`` (a reader never sees half a
report). An existing regular file is replaced: the report is derived output, made
again by running the command again."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from gputriage.snapshot_writer import OutputError

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
    """Write ``text`` to ``path`` (UTF-8, mode 0644) atomically; OutputError on failure."""
    out = check_html_path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, MODE)
        os.replace(tmp, out)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(f"--html {path}: {exc.strerror or exc}") from None
        raise
    return out
