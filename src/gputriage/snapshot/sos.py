"""The files of a sosreport, read in place: its tarball (through
:class:`gputriage.snapshot.tar.TarReader`) or its unpacked folder; nothing is ever
extracted to disk.

sos writes one top folder (``sosreport-HOST-DATE-ID/``) holding each command's output
under ``sos_commands/<plugin>/<command as a file name>``, the files it copied at their
own paths (``proc/...``, ``sys/...``, ``etc/...``, ``var/log/...``), links at the top
to some of them (``hostname``, ``uname``, ``lspci``...), and its own ``sos_logs/`` and
``sos_reports/``. sysfs is copied with its links (``sys/bus/pci/devices/X`` points
into ``sys/devices/``), so paths are resolved link by link here: a link may only
point inside the report (an absolute link, or one that climbs out, names a file of
whatever machine reads the report, and is never followed), and at most
``_MAX_HOPS`` links are followed for one path.

The load budgets of :mod:`gputriage.snapshot.bundle` hold (sizes, time, bytes read), with
the member count of :data:`gputriage.snapshot.budget.SOS_MAX_MEMBERS` (a sosreport
copies whole ``/proc`` and ``/sys`` folders); a folder is listed entry by entry under
the same count.
"""

from __future__ import annotations

import os
import posixpath
import stat
from fnmatch import fnmatchcase
from typing import Any

from gputriage.errors import InputError
from gputriage.snapshot.budget import Budget, Got
from gputriage.snapshot.tar import SOS_FOLDERS, TarReader, member_name

__all__ = ["MAX_GLOB", "SosFiles", "is_sos_folder"]

_MAX_HOPS = 16  # links followed for one path
MAX_GLOB = 4096  # paths one pattern may match
FILE, DIR, LINK, OTHER = "file", "dir", "link", "other"
OUTSIDE = "a link pointing outside the sosreport"
NEITHER = ("{}: no manifest.json: not a gputriage snapshot (a half-written one, or another "
           "archive), nor a sosreport (no sos_commands/)")


def is_sos_folder(path: str) -> bool:
    """Whether a folder is an unpacked sosreport (sos's own folders in it)."""
    return any(os.path.isdir(os.path.join(path, name)) for name in SOS_FOLDERS)


class SosFiles:
    """Listing, link resolution, globbing and bounded reads over one sosreport.

    Paths are relative to the report's top folder (``sos_commands/kernel/dmesg``)."""

    def __init__(self, reader: Any, budget: Budget) -> None:
        self.reader = reader
        self.budget = budget
        self.origin = budget.origin
        self.scanned = 0  # folder entries listed (an unpacked report)
        if isinstance(reader, TarReader):
            if not reader.sos:
                raise InputError(NEITHER.format(self.origin))
            self._index_tar(reader)
        else:
            self.root = str(reader.root)
            if not is_sos_folder(self.root):
                raise InputError(NEITHER.format(self.origin))

    # -- the tarball's index ------------------------------------------------------------
    def _index_tar(self, reader: TarReader) -> None:
        top = next(iter(reader.folders)) if len(reader.folders) == 1 else ""
        if top and any(not (n == top or n.startswith(top + "/")) for n in reader.members):
            top = ""  # members beside the folder: the archive's root is the report's
        self.top = top + "/" if top else ""
        reader.prefix = self.top
        self.kids: dict[str, set[str]] = {}
        for name in reader.members:
            if not name.startswith(self.top) or name == top:
                continue
            rel = name[len(self.top):]
            parent, _, base = rel.rpartition("/")
            self.kids.setdefault(parent, set()).add(base)
            while parent:  # folders tar did not list are still folders
                up, _, base = parent.rpartition("/")
                self.kids.setdefault(up, set()).add(base)
                parent = up

    # -- one entry ------------------------------------------------------------------------
    def entry(self, rel: str) -> tuple[str | None, str]:
        """``(kind, link target)`` of a path whose folders hold no link; kind None: absent."""
        if isinstance(self.reader, TarReader):
            member = self.reader.members.get(self.top + rel)
            if member is None:
                return (DIR, "") if rel in self.kids else (None, "")
            if member.issym():
                return LINK, member.linkname
            if member.islnk():  # a hard link names a member from the archive's root
                target = member_name(member.linkname) or ""
                if not target.startswith(self.top):
                    return LINK, "/" + target
                return LINK, _relative(rel, target[len(self.top):])
            if member.isdir():
                return DIR, ""
            return (FILE if member.isreg() else OTHER), ""
        try:
            st = os.lstat(os.path.join(self.root, rel))
        except OSError:
            return None, ""
        if stat.S_ISLNK(st.st_mode):
            try:
                return LINK, os.readlink(os.path.join(self.root, rel))
            except OSError:
                return None, ""
        if stat.S_ISDIR(st.st_mode):
            return DIR, ""
        return (FILE if stat.S_ISREG(st.st_mode) else OTHER), ""

    def children(self, rel: str) -> list[str]:
        """The names in a folder, in name order (none when it is a link out)."""
        if rel:
            real, _ = self.resolve(rel)
            if real is None:
                return []
            rel = real
        if isinstance(self.reader, TarReader):
            return sorted(self.kids.get(rel, ()))
        names: list[str] = []
        try:
            with os.scandir(os.path.join(self.root, rel) if rel else self.root) as it:
                for item in it:
                    self.scanned += 1
                    if self.scanned > self.budget.limits.sos_members:
                        raise InputError(f"{self.origin}: more than "
                                         f"{self.budget.limits.sos_members} entries listed: "
                                         "not a sosreport")
                    names.append(item.name)
        except OSError:
            return []
        self.budget.check_time()
        return sorted(names)

    def resolve(self, rel: str) -> tuple[str | None, str]:
        """``(the path with every link followed, why not)``: None with a reason for a
        link out of the report or a loop, None with no reason when the path is absent."""
        todo = [p for p in rel.split("/") if p]
        done: list[str] = []
        hops = 0
        while todo:
            part = todo.pop(0)
            here = "/".join([*done, part])
            kind, target = self.entry(here)
            if kind is None:
                return None, ""
            if kind != LINK:
                done.append(part)
                continue
            hops += 1
            if hops > _MAX_HOPS:
                return None, f"more than {_MAX_HOPS} links"
            if target.startswith("/"):
                return None, OUTSIDE
            joined = posixpath.normpath(posixpath.join("/".join(done), target))
            if joined == ".." or joined.startswith("../"):
                return None, OUTSIDE
            todo = [p for p in joined.split("/") if p and p != "."] + todo
            done = []
        return "/".join(done), ""

    def is_file(self, rel: str) -> bool:
        real, _ = self.resolve(rel)
        return real is not None and self.entry(real)[0] == FILE

    def glob(self, pattern: str) -> list[str]:
        """The paths (as named, links not followed in the result) a glob matches, at most
        :data:`MAX_GLOB`; ``*`` never crosses a ``/``."""
        paths = [""]
        for part in (p for p in pattern.split("/") if p):
            found: list[str] = []
            for path in paths:
                real, _ = self.resolve(path) if path else ("", "")
                if real is None:
                    continue
                if any(c in part for c in "*?["):
                    names = [n for n in self.children(real) if fnmatchcase(n, part)]
                else:
                    names = [part] if self.entry(_join(real, part))[0] is not None else []
                found.extend(_join(path, n) for n in names)
                if len(found) >= MAX_GLOB:
                    break
            paths = found[:MAX_GLOB]
        return paths

    # -- reading ----------------------------------------------------------------------------
    def read(self, names: list[str]) -> dict[str, Got]:
        """The kept tails of files (links followed inside the report), under the load's
        budgets; a name that is not a regular file inside the report gets the reason."""
        out: dict[str, Got] = {}
        real_of: dict[str, str] = {}
        for name in names:
            real, reason = self.resolve(name)
            if real is None:
                out[name] = Got(None, reason=reason)
                continue
            kind = self.entry(real)[0]
            if kind != FILE:
                out[name] = Got(None, reason="not a regular file" if kind else "")
                continue
            real_of[name] = real
        got = self.reader.read(sorted(set(real_of.values())))
        for name, real in real_of.items():
            out[name] = got[real]
        return out


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _relative(rel: str, target: str) -> str:
    """A link target written relative to ``rel``'s folder for ``target`` (both relative
    to the report's top)."""
    return posixpath.relpath(target, posixpath.dirname(rel) or ".")
