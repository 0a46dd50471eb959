"""node_exporter's textfile collector: ``DIR/gputriage.prom``, the same series as
``/metrics``, written after every cycle (and when a tick is skipped or a check overruns).

The series are written by the writer every output uses
(:func:`gputriage.snapshot.writer.write_file`): a private temporary file in DIR (its name
does not end in ``.prom``, so node_exporter ignores it) renamed over the old one. A
reader sees the whole previous file or the whole new one, never a part, and a link
planted in DIR (at the output's or a temporary's name) is never written through.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

__all__ = ["TEXTFILE_NAME", "TextfileError", "TextfileWriter"]

TEXTFILE_NAME = "gputriage.prom"


class TextfileError(Exception):
    """The textfile directory cannot be written to."""


class TextfileWriter:
    """Writes ``registry`` to ``directory/gputriage.prom``; a sink (called with each
    cycle's outcome) and a listener (called with nothing)."""

    def __init__(self, directory: str | os.PathLike, registry: Any) -> None:
        self.directory = Path(directory)
        self.path = self.directory / TEXTFILE_NAME
        self.registry = registry
        self._lock = threading.Lock()  # the loop and a worker may both write

    def check(self) -> None:
        """TextfileError unless the directory exists and a file can be made in it (and
        renamed over the output): said before the first cycle, not after."""
        if not self.directory.is_dir():
            raise TextfileError(f"{self.directory}: no such directory")
        try:  # a fresh private file (mkstemp: O_EXCL, never through a link)
            fd, probe = tempfile.mkstemp(prefix=f".{TEXTFILE_NAME}.", suffix=".probe",
                                         dir=self.directory)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise TextfileError(f"{self.directory}: cannot write there "
                                f"({exc.strerror or exc})") from None

    def write(self) -> None:
        from prometheus_client import generate_latest

        from gputriage.snapshot.writer import write_file

        with self._lock:
            write_file(self.path, generate_latest(self.registry), force=True, mode=0o644)

    def __call__(self, outcome: Any = None) -> None:
        self.write()
