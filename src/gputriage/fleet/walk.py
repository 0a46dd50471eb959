"""Finding the inputs of ``fleet``: result JSON files and snapshots under the paths
given, without ever opening what is not a regular file.

A FIFO named ``node.json`` would block the reader forever and a device may act
when opened, so only regular files are read: anything else under a walked
directory, and a path argument that is neither a directory nor a regular file,
is listed as skipped with its reason. A symbolic link met while walking is
followed when it stays inside the directory given (a fleet folder of links to
the latest result of each node is a common layout) and skipped when it points
outside it: a folder assembled from nodes' uploads must not make the tool read
elsewhere. A link named on the command line is the user's choice and is followed.

The walk lists at most ``MAX_ENTRIES`` directory entries per path given (files and
folders, whatever their names); past that the rest of that path is skipped, with
one line saying so. Entries are kept only when they can be inputs, so memory is
that of the inputs found.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator

from gputriage.io.inputs import file_kind
from gputriage.snapshot.sos import is_sos_folder

MAX_ENTRIES = 1_000_000
RESULT, SNAPSHOT, SKIP = "result", "snapshot", "skip"
TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.xz", ".txz", ".tar.bz2", ".tbz2")
_MANIFEST = "manifest.json"


def discover(paths: Iterable[str]) -> Iterator[tuple[str, str, str]]:
    """``(path, kind, reason)`` for every input under ``paths``: kind is "result" (a
    ``*.json``), "snapshot" (a directory with manifest.json, or a tarball) or "skip"
    (with the reason). Directories are walked, snapshot directories not entered."""
    for top in paths:
        try:
            mode = os.stat(top).st_mode
        except OSError as exc:
            yield top, SKIP, _link_reason(exc)
            continue
        if stat.S_ISDIR(mode):
            if _is_snapshot(top):
                yield top, SNAPSHOT, ""
            else:
                yield from _walk(top)
        elif stat.S_ISREG(mode):
            yield top, SNAPSHOT if top.endswith(TAR_SUFFIXES) else RESULT, ""
        else:
            yield top, SKIP, f"{file_kind(mode)}, not a regular file"


def _reason(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file or directory"
    return (exc.strerror or type(exc).__name__).lower()


def _is_snapshot(path: str) -> bool:
    """A snapshot folder, or an unpacked sosreport (read as one)."""
    return os.path.isfile(os.path.join(path, _MANIFEST)) or is_sos_folder(path)


def _inside(path: str, root: str) -> bool:
    real = os.path.realpath(path)
    return os.path.commonpath([real, root]) == root


def _walk(top: str) -> Iterator[tuple[str, str, str]]:
    """Depth first, in name order: a folder's snapshot subfolders, then its files,
    then its other subfolders. An entry that cannot be looked at (a symbolic link loop,
    a dangling link, no permission) is skipped and named, never its whole folder."""
    root = os.path.realpath(top)
    left = MAX_ENTRIES
    stack = [top]
    while stack:
        folder = stack.pop()
        dirs: list[os.DirEntry] = []
        files: list[os.DirEntry] = []
        broken: list[tuple[str, str]] = []
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    left -= 1
                    if left < 0:
                        yield top, SKIP, (f"more than {MAX_ENTRIES:,} entries: the rest of it "
                                          "was not walked")
                        return
                    try:
                        is_dir = entry.is_dir()
                    except OSError as exc:  # ELOOP: a link loop; only this entry
                        broken.append((entry.path, _link_reason(exc)))
                        continue
                    if is_dir:
                        dirs.append(entry)
                    elif entry.name.endswith((".json", *TAR_SUFFIXES)):
                        files.append(entry)
        except OSError as exc:
            yield folder, SKIP, _reason(exc)
            continue
        for path, reason in sorted(broken):
            yield path, SKIP, reason
        walk_on = []
        for entry in sorted(dirs, key=lambda e: e.name):
            if not _is_snapshot(entry.path):
                if not entry.is_symlink():
                    walk_on.append(entry.path)  # links to folders are not walked
            elif entry.is_symlink() and not _inside(entry.path, root):
                yield entry.path, SKIP, f"a symbolic link pointing outside {top}"
            else:
                yield entry.path, SNAPSHOT, ""
        for entry in sorted(files, key=lambda e: e.name):
            yield _file(entry, root, top)
        stack.extend(reversed(walk_on))


def _link_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symbolic link loop"
    return _reason(exc)


def _file(entry: os.DirEntry, root: str, top: str) -> tuple[str, str, str]:
    """A walked file: an input when it is (a link inside ``top`` to) a regular file."""
    path = entry.path
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            if not _inside(path, root):
                return path, SKIP, f"a symbolic link pointing outside {top}"
            mode = os.stat(path).st_mode
    except OSError as exc:
        return path, SKIP, _link_reason(exc)
    if not stat.S_ISREG(mode):
        return path, SKIP, f"{file_kind(mode)}, not a regular file"
    return path, SNAPSHOT if path.endswith(TAR_SUFFIXES) else RESULT, ""
