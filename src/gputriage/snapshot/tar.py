"""A snapshot tarball, read under the load budgets of :mod:`gputriage.snapshot.bundle`.

Two passes over one stream. The index pass walks the member headers one by one
(``TarFile.next``), stops at ``TAR_MAX_MEMBERS`` members or ``TAR_TOTAL_BYTES``
declared, refuses a header record over ``TAR_HEADER_BYTES``, and keeps the
candidate manifests (``manifest.json`` at the root, ``TOP/manifest.json`` in the
first top folder). The read pass reads the tails of the members the manifest
names, in archive order: a compressed stream rewinds once and then only moves
forward, and every byte it decompresses is charged to ``READ_TOTAL_BYTES``.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
from typing import IO

from gputriage.errors import InputError, unreadable
from gputriage.io.decompress import BROKEN, compression, seekable
from gputriage.io.inputs import file_kind, human
from gputriage.snapshot.budget import MANIFEST, SPENT, Budget, Got

_PIECE = 1 << 20  # bytes per read while walking
_BROKEN = (tarfile.TarError, OSError, *BROKEN)


def _open_regular(path: str) -> int:
    """A descriptor of ``path`` when it is a regular file (a FIFO is never waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise unreadable(path, exc) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(f"{path}: {file_kind(mode)}, not a snapshot directory or tarball")
    os.set_blocking(fd, True)
    return fd


def looks_like_tar(path: str) -> bool:
    """gzip, bzip2 or xz magic, or a ustar header: from the first 512 bytes only."""
    fd = _open_regular(path)
    try:
        head = os.pread(fd, 512, 0)
    except OSError as exc:
        raise unreadable(path, exc) from None
    finally:
        os.close(fd)
    return compression(head) is not None or head[257:262] == b"ustar"


def member_name(name: str) -> str | None:
    """A member's name as a normalized relative path; None for the root itself, an
    absolute name or one that climbs out (``..``)."""
    norm = posixpath.normpath(name) if name else "."
    if norm in (".", "..") or norm.startswith(("/", "../")):
        return None
    return norm


SOS_FOLDERS = ("sos_commands", "sos_reports", "sos_logs")


def sos_mark(name: str, link: str = "") -> bool:
    """Whether a member says its archive is a sosreport: sos's own folders at the top or
    under the single top folder, or a top-level link into ``sos_commands/`` (``hostname``,
    ``uname``, ``date``: sos writes these first)."""
    parts = name.split("/")
    if any(p in SOS_FOLDERS for p in parts[:2]):
        return True
    return len(parts) <= 2 and link.startswith("sos_commands/")


class _Walker:
    """The decompressed stream as the seekable file tarfile wants: it counts what it
    decompresses, checks the deadline every MiB, and refuses a header record over
    the header budget (tarfile reads long-name and pax records whole)."""

    def __init__(self, stream: IO[bytes], compressed: bool, budget: Budget) -> None:
        self.stream = stream
        self.compressed = compressed
        self.budget = budget
        self.pos = 0
        self.walked = 0  # decompressed bytes, rewinds included

    def tell(self) -> int:
        return self.pos

    def read(self, size: int = -1) -> bytes:
        cap = self.budget.limits.tar_header
        if size < 0 or size > cap:
            raise InputError(f"{self.budget.origin}: a tar header record of {human(size)}, "
                             f"over {human(cap)}: not a gputriage snapshot")
        return bytes(self.take(size))

    def take(self, size: int) -> bytearray:
        """Up to ``size`` bytes from here (fewer at the end), not copied once more."""
        buf = bytearray()
        while len(buf) < size:
            self.budget.check_time()
            piece = self.stream.read(min(size - len(buf), _PIECE))
            if not piece:
                break
            buf += piece
        self.pos += len(buf)
        if self.compressed:
            self.walked += len(buf)
        return buf

    def cost_to(self, pos: int) -> int:
        """The bytes to decompress to get to ``pos``."""
        if not self.compressed:
            return 0
        return pos - self.pos if pos >= self.pos else pos

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        if whence != os.SEEK_SET:
            raise ValueError("only absolute seeks")
        if not self.compressed:
            self.pos = self.stream.seek(pos)
            return self.pos
        if pos < self.pos:
            self.stream.seek(0)  # a decompressor rewinds to its start
            self.pos = 0
        while self.pos < pos:
            if not self.take(min(pos - self.pos, _PIECE)):
                break
        return self.pos


class TarReader:
    """The members of a snapshot tarball, as :class:`gputriage.snapshot.bundle.Snapshot`
    reads them: ``manifest()`` once, then ``read(names)`` once."""

    def __init__(self, path: str, budget: Budget) -> None:
        self.path = path
        self.budget = budget
        self.members: dict[str, tarfile.TarInfo] = {}
        self.folders: set[str] = set()
        self.first_folder = ""
        self.manifests: dict[str, Got] = {}
        self.prefix = ""
        self.sos = False  # a sosreport's layout was seen (see :func:`sos_mark`)
        self.raw = os.fdopen(_open_regular(path), "rb")
        self.stream, compressed = seekable(self.raw)
        self.fh = _Walker(self.stream, compressed, budget)
        self.tar: tarfile.TarFile | None = None
        try:
            self.tar = tarfile.TarFile(fileobj=self.fh, mode="r")  # type: ignore[arg-type]
            self._index()
        except _BROKEN as exc:
            self.close()
            raise self._broken(exc) from None
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> TarReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for obj in (self.tar, self.stream, self.raw):
            if obj is not None:
                obj.close()

    def _broken(self, exc: BaseException) -> InputError:
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        return InputError(f"{self.path}: corrupt or truncated tarball ({detail})")

    # -- pass 1: the headers --------------------------------------------------------
    def _index(self) -> None:
        assert self.tar is not None
        limits = self.budget.limits
        count = declared = 0
        while True:
            self.budget.check_time()
            member = self.tar.next()
            if member is None:
                return
            count += 1
            if count > limits.tar_members and not (self.sos and count <= limits.sos_members):
                most = limits.sos_members if self.sos else limits.tar_members
                what = "a sosreport" if self.sos else "a gputriage snapshot"
                raise InputError(f"{self.path}: more than {most} members: not {what}")
            if member.isreg():
                declared += member.size
                if declared > limits.tar_total:
                    raise InputError(f"{self.path}: its members unpack to more than "
                                     f"{human(limits.tar_total)}: not a gputriage snapshot")
            name = member_name(member.name)
            if name is not None:
                self._note(name, member)

    def _note(self, name: str, member: tarfile.TarInfo) -> None:
        self.sos = self.sos or sos_mark(name, member.linkname if member.issym() else "")
        if "/" in name or member.isdir():
            folder = name.split("/", 1)[0]
            self.folders.add(folder)
            self.first_folder = self.first_folder or folder
        self.members[name] = member
        if member.isreg() and name in (MANIFEST, f"{self.first_folder}/{MANIFEST}"):
            cap = self.budget.limits.manifest_bytes
            data = None
            if member.size <= cap:
                self.fh.seek(member.offset_data)
                data = bytes(self.fh.take(member.size))
            self.manifests[name] = Got(data, member.size)

    def manifest(self) -> bytes | bytearray | None:
        """The root's manifest.json, else the single top folder's; None: neither."""
        chosen = MANIFEST if MANIFEST in self.manifests else None
        if chosen is None and len(self.folders) == 1:
            folder = f"{next(iter(self.folders))}/{MANIFEST}"
            chosen = folder if folder in self.manifests else None
        if chosen is None:
            return None
        self.prefix = chosen[: -len(MANIFEST)]
        got = self.manifests[chosen]
        if got.data is None:
            raise InputError(f"{self.path}: {chosen} is larger than "
                             f"{human(self.budget.limits.manifest_bytes)}: not a gputriage "
                             "snapshot")
        return got.data

    # -- pass 2: the named members ----------------------------------------------------
    def read(self, names: list[str]) -> dict[str, Got]:
        """The kept tails of the members ``names`` (relative to the manifest's folder)."""
        limits = self.budget.limits
        out: dict[str, Got] = {}
        wanted: list[tuple[int, str, tarfile.TarInfo]] = []
        for name in names:
            member = self.members.get(self.prefix + name)
            if member is None:
                out[name] = Got(None)
            elif not member.isreg() or member.issparse():
                out[name] = Got(None, reason="a link, folder or sparse member, not a file")
            elif member.size > limits.read_cap + limits.tar_skip:
                out[name] = Got(None, member.size, f"a member of {human(member.size)}, over "
                                f"{human(limits.read_cap + limits.tar_skip)}")
            else:
                wanted.append((member.offset_data, name, member))
        try:
            for _, name, member in sorted(wanted, key=lambda w: w[0]):
                out[name] = self._member(name, member)
        except _BROKEN as exc:
            raise self._broken(exc) from None
        return out

    def _member(self, name: str, member: tarfile.TarInfo) -> Got:
        keep = min(member.size, self.budget.limits.read_cap)
        start = member.offset_data + member.size - keep
        if self.fh.cost_to(start) + keep > self.budget.left:
            return Got(None, member.size, SPENT)
        before = self.fh.walked
        self.fh.seek(start)
        data = self.fh.take(keep)
        self.budget.left -= (self.fh.walked - before) if self.fh.compressed else len(data)
        if len(data) < keep:
            raise InputError(f"{self.path}: member {name} is cut short: truncated tarball")
        return Got(data, member.size)
