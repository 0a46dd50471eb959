"""Writing snapshots: the manifest records and the payloads of a collection (or a
scenario) written to a directory or a ``.tar.gz`` (read back by :mod:`gputriage.snapshot.bundle`).

The writer runs as root on hosts where others may plant files, so an output is
never opened in place: it is built in a private temporary (``mkstemp`` /
``mkdtemp``: created exclusively, 0o600 / 0o700) next to the destination, its
files created with ``O_CREAT|O_EXCL|O_NOFOLLOW``, then renamed into place. An
existing output is refused unless ``force``; the temporary is removed on any
failure. Snapshots hold kernel logs and configuration: they are not
world-readable (files 0o600, directories 0o700).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gputriage import sources
from gputriage.snapshot.bundle import MANIFEST, SNAPSHOT_SCHEMA
from gputriage.status import ExitStatus

if TYPE_CHECKING:  # pragma: no cover
    from gputriage.snapshot.redact import Redactor

TARBALL_SUFFIXES = (".tar.gz", ".tgz")
# names that look like an archive the writer does not make
_OTHER_ARCHIVES = (".zip", ".tar", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tbz", ".tar.zst",
                   ".gz", ".xz", ".bz2", ".zst", ".7z", ".rar")
ARCHIVE_SUFFIXES = TARBALL_SUFFIXES + _OTHER_ARCHIVES  # names that say "archive"
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_MODE = 0o600
DIR_MODE = 0o700


class OutputError(click.ClickException):
    """An output path the writer refuses (exit 64, one line)."""

    exit_code = int(ExitStatus.USAGE)


def new_manifest(host: str, created: str, boot_id: str | None, tool_version: str,
                 extra: dict | None = None) -> dict:
    return {
        "schema": SNAPSHOT_SCHEMA,
        "tool_version": tool_version,
        "host": host,
        "created": created,
        "boot_id": boot_id,
        "complete": False,
        "sources": {},
        **(extra or {}),
    }


def source_record(name: str, *, rc: int | None = 0, duration_s: float = 0.0,
                  nbytes: int = 0, truncated: bool = False, error: str | None = None,
                  error_detail: str | None = None, argv: list[str] | None = None,
                  with_file: bool = True) -> dict:
    """The manifest record of one source (``error``: absent / permission /
    timeout / not-applicable / failed, or None)."""
    spec = sources.get(name)
    target: str | list[str] = argv if argv is not None else spec.target
    return {
        "kind": spec.kind,
        "target": target,
        "rc": rc,
        "duration_s": round(duration_s, 4),
        "bytes": nbytes,
        "truncated": truncated,
        "error": error,
        "error_detail": error_detail,
        "file": spec.filename if with_file else None,
    }


def output_kind(out: str | os.PathLike) -> str:
    """``"tar"`` for a ``.tar.gz``/``.tgz`` name, ``"dir"`` otherwise; OutputError for
    a name that looks like another kind of archive (``x.zip``)."""
    name = Path(out).name.lower()
    if name.endswith(TARBALL_SUFFIXES):
        return "tar"
    if name.endswith(_OTHER_ARCHIVES):
        raise OutputError(f"{out}: gputriage writes a directory or a .tar.gz/.tgz, "
                          "not this kind of archive")
    if not name or name in (".", ".."):
        raise OutputError(f"{out}: name a new directory or FILE.tar.gz")
    return "dir"


def check_output(out: str | os.PathLike, force: bool = False, option: str = "") -> str:
    """Validate an output path before any work is done: its kind (see
    :func:`output_kind`), OutputError when its folder does not exist (an output never
    creates folders: a typo in a path run as root must not leave a tree behind), and
    when something is already there (unless ``force``). Returns the kind."""
    kind = output_kind(out)
    check_folder(out, option)
    if not force and occupied(Path(out)):
        raise OutputError(f"{out} already exists (use --force to replace it)")
    return kind


def check_folder(out: str | os.PathLike, option: str = "") -> Path:
    """The folder ``out`` goes in; OutputError (one line) when it is not an existing
    directory. ``option`` (``--html``) prefixes the message."""
    folder = Path(out).parent
    name = f"{option} {out}" if option else str(out)
    try:
        if folder.is_dir():
            return folder
    except OSError as exc:  # a folder without search permission, a name too long
        raise OutputError(f"{name}: cannot look up {folder} ({exc.strerror or exc})") from None
    what = "not a directory" if os.path.lexists(folder) else "no such directory"
    raise OutputError(f"{name}: {what} {folder} (gputriage creates no folders)")


def occupied(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds something an output would destroy: anything but
    nothing, an empty regular file or an empty directory (links count)."""
    try:
        st = os.lstat(path)
    except OSError:  # absent, ENOTDIR, ENAMETOOLONG: nothing an output would destroy
        return False
    if stat.S_ISREG(st.st_mode):
        return st.st_size > 0
    if stat.S_ISDIR(st.st_mode):
        with os.scandir(Path(path)) as entries:
            return any(True for _ in entries)
    return True


def write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (never an existing one, never through a link) and write ``data``."""
    fd = os.open(path, _NEW_FILE, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


@contextlib.contextmanager
def staged_directory(out: str | os.PathLike, force: bool = False) -> Iterator[Path]:
    """A private empty directory next to ``out``; moved into place when the block
    ends, removed when it raises (anything, KeyboardInterrupt included)."""
    out = Path(out)
    check_output(out, force)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent))
    try:
        yield tmp
        _install(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def staged_file(out: str | os.PathLike, force: bool = False) -> Iterator[io.BufferedWriter]:
    """A private new file next to ``out`` (0o600), open for writing; renamed into
    place when the block ends, removed when it raises."""
    out = Path(out)
    check_output(out, force)
    with _staged(out, force, FILE_MODE) as f:
        yield f


@contextlib.contextmanager
def _staged(out: Path, force: bool, mode: int) -> Iterator[io.BufferedWriter]:
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
    tmp = Path(name)
    try:
        if mode != FILE_MODE:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            yield f
        _install(tmp, out, force)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def write_file(out: str | os.PathLike, data: bytes, *, force: bool = False,
               mode: int = FILE_MODE, option: str = "") -> Path:
    """One output file (an expectations file, an HTML report, a textfile), written as
    every output is: built in a private temporary beside ``out`` and renamed into place,
    so nothing is ever written through a link and a reader never sees half a file. An
    existing file, link or anything else at ``out`` is refused (OutputError, exit 64)
    unless ``force``, which replaces that entry itself (a link is replaced, never
    followed). The folder must exist. ``option`` (``--html``) prefixes the messages."""
    out = Path(out)
    name = f"{option} {out}" if option else str(out)
    if not force and occupied(out):
        raise OutputError(f"{name} already exists (use --force to replace it)")
    if os.path.isdir(out) and not os.path.islink(out):
        raise OutputError(f"{name}: is a directory (name a file)")
    check_folder(out, option)
    try:
        with _staged(out, force, mode) as f:
            f.write(data)
    except FileNotFoundError:
        raise OutputError(f"{name}: no such directory {out.parent}") from None
    except OutputError:
        raise
    except OSError as exc:
        raise OutputError(f"{name}: cannot write ({exc.strerror or exc})") from None
    return out


def _install(tmp: Path, out: Path, force: bool) -> None:
    """Move the finished temporary ``tmp`` to ``out``: into a free place without
    replacing anything that appeared meanwhile; over an existing output only with
    ``force``, and then never through a link (rename replaces the link itself)."""
    if not occupied(out):
        try:
            _rename_no_replace(tmp, out)
            return
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
                raise
    if not force:
        raise OutputError(f"{out} already exists (use --force to replace it)")
    if tmp.is_dir() or (out.is_dir() and not out.is_symlink()):
        _swap(tmp, out)
    else:
        os.replace(tmp, out)


def _rename_no_replace(tmp: Path, out: Path) -> None:
    """Rename that fails (EEXIST) rather than replace a non-empty thing at ``out``:
    a file goes in by hard link (atomic, never replaces); a directory's rename only
    replaces an empty directory."""
    if tmp.is_dir():
        os.rename(tmp, out)
        return
    if os.path.lexists(out):  # an empty regular file (checked by the caller)
        os.replace(tmp, out)
        return
    try:
        os.link(tmp, out, follow_symlinks=False)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise
        os.rename(tmp, out)  # a file system without hard links
        return
    tmp.unlink()


def _swap(tmp: Path, out: Path) -> None:
    """Put ``tmp`` where ``out`` is: the old one is moved aside, then removed
    without following any link inside it."""
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
    os.rename(out, aside / "old")
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(aside / "old", out)
        aside.rmdir()
        raise
    _remove_tree(aside)


def _remove_tree(path: Path) -> None:
    """Remove a directory tree we own. ``shutil.rmtree`` works on file descriptors
    on Linux (``rmtree.avoids_symlink_attacks``): links inside are unlinked, never
    followed."""
    try:
        shutil.rmtree(path)
    except OSError as exc:
        raise OutputError(f"the old output was moved to {path} and could not be removed: "
                          f"{exc.strerror or exc}") from None


def write_snapshot(out: str | os.PathLike, manifest: dict, payloads: dict[str, bytes], *,
                   force: bool = False, redactor: Redactor | None = None) -> Path:
    """Write payloads (by source name) and the manifest; a ``.tar.gz``/``.tgz``
    path gives a tarball, any other name a directory. The manifest is written last
    with ``complete: true``. ``redactor`` rewrites identities first
    (:mod:`gputriage.snapshot.redact`)."""
    out = Path(out)
    kind = check_output(out, force)
    if redactor is not None:
        manifest, payloads = redactor.snapshot(manifest, payloads)
    manifest = {**manifest, "complete": True}
    body = json.dumps(manifest, indent=2, sort_keys=True).encode()
    if kind == "tar":
        top = out.name
        for suffix in TARBALL_SUFFIXES:
            top = top.removesuffix(suffix)
        with staged_file(out, force) as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
            for name, data in payloads.items():
                _add_member(tar, f"{top}/{sources.get(name).filename}", data)
            _add_member(tar, f"{top}/{MANIFEST}", body)
        return out
    with staged_directory(out, force) as tmp:
        (tmp / "sources").mkdir(mode=DIR_MODE)
        for name, data in payloads.items():
            write_new(tmp / sources.get(name).filename, data)
        write_new(tmp / MANIFEST, body)
    return out


def _add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = FILE_MODE
    tar.addfile(info, io.BytesIO(data))
