"""Read-only readers for file, tree and devnode sources under a host root.

Each returns ``(payload bytes | None, record fields)``; an outcome is always
data (absent / permission / failed), never an exception.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

from gputriage.io.inputs import file_kind
from gputriage.sources import Source

TREE_FILE_CAP = 256 * 1024
_NIC_VENDORS = {"0x15b3"}  # Mellanox / NVIDIA networking


def under_root(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def error_kind(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError) or exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "absent"
    if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM):
        return "permission"
    return "failed"


class NotRegularFile(OSError):
    """A collected path that is a FIFO, device or socket: never read (a FIFO blocks)."""


def read_capped(path: Path, cap: int) -> tuple[bytes, bool]:
    """Read a regular file keeping at most ``cap`` bytes of its tail.

    Opened non-blocking, so a FIFO planted where a file is expected cannot stall a
    collector thread, and refused unless it is a regular file. A file with a known
    size is read from its last ``cap`` bytes; procfs and sysfs report size 0 and are
    read to the end (they are small)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, f"not a regular file ({file_kind(st.st_mode)})")
        skipped = st.st_size > cap
        if skipped:
            fh.seek(st.st_size - cap)
        data = bytearray()
        truncated = skipped
        while chunk := fh.read(64 * 1024):
            data += chunk
            if len(data) > cap:
                del data[: len(data) - cap]
                truncated = True
        return bytes(data), truncated


def read_file(root: Path, spec: Source) -> tuple[bytes | None, dict]:
    path = under_root(root, spec.path or "")
    try:
        data, truncated = read_capped(path, spec.cap_bytes)
    except OSError as exc:
        return None, {"error": error_kind(exc), "error_detail": exc.strerror or str(exc)}
    return data, {"truncated": truncated}


# -- trees ---------------------------------------------------------------------

def _gpu_and_nic_functions(base: Path, device_dir: str) -> bool:
    """Keep NVIDIA functions, Mellanox functions and any network-class function."""
    try:
        vendor = (base / device_dir / "vendor").read_text().strip().lower()
        klass = (base / device_dir / "class").read_text().strip().lower()
    except OSError:
        return False
    return vendor == "0x10de" or vendor in _NIC_VENDORS or klass.startswith("0x02")


_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_MAX_PCI_ENTRIES = 4096  # far more functions than a host has: a bound on the listing


def _gpu_and_nic_paths(base: Path) -> Callable[[str], bool]:
    """Keep the GPU and NIC functions and every bridge on their way up to the root
    complex (the addresses in their real sysfs path), so that each hop of the path can
    be judged."""
    try:
        names = sorted(os.listdir(base))[:_MAX_PCI_ENTRIES]
    except OSError:
        names = []
    wanted = {name for name in names if _gpu_and_nic_functions(base, name)}
    above: set[str] = set()
    for name in wanted:
        parts = os.path.realpath(base / name).split(os.sep)
        above.update(p for p in parts[:-1] if _PCI_ADDRESS.match(p))
    keep = wanted | above
    return lambda top: top in keep


# a tree's selector, by the source's ``select``: made once per read from the tree's base,
# then asked for each top-level entry
_SELECTORS: dict[str, Callable[[Path], Callable[[str], bool]]] = {
    "gpu_and_nic_paths": _gpu_and_nic_paths}


_ENV_KEPT = re.compile(r"^(?:NVIDIA|CUDA)_[A-Z0-9_]+=")


def _nvidia_environment(rel: str, text: str) -> str:
    """The collecting process's environment cut to its NVIDIA_* and CUDA_* variables, one
    per line: no other variable is ever stored. Other files are kept as they are."""
    if not rel.endswith("environ"):
        return text
    return "".join(f"{v}\n" for v in text.split("\0") if _ENV_KEPT.match(v))


# filters of a tree's file contents, by the source's ``select``
_CONTENT_FILTERS = {"nvidia_environment": _nvidia_environment}


def read_tree(root: Path, spec: Source) -> tuple[bytes | None, dict]:
    """Files matched by the source's globs, as one JSON document."""
    base = under_root(root, spec.path or "/")
    if not base.is_dir():
        return None, {"error": "absent", "error_detail": f"{spec.path} does not exist"}
    make_selector = _SELECTORS.get(spec.select or "")
    select = make_selector(base) if make_selector is not None else None
    names_only = spec.select == "names_only"
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    errors: dict[str, str] = {}
    keep: dict[str, bool] = {}
    budget = spec.cap_bytes
    truncated = False
    for pattern in spec.globs:
        for path in sorted(base.glob(pattern)):
            rel = path.relative_to(base).as_posix()
            if select is not None:
                top = rel.split("/", 1)[0]
                if top not in keep:
                    keep[top] = select(top)
                if not keep[top]:
                    continue
            if path.is_symlink():
                try:
                    links[rel] = os.readlink(path)
                except OSError as exc:
                    errors[rel] = error_kind(exc)
                if not names_only:
                    continue
            if names_only:
                files.setdefault(rel, "")
                continue
            if path.is_dir():
                continue
            try:
                data, _ = read_capped(path, min(TREE_FILE_CAP, max(budget, 0)))
            except OSError as exc:
                errors[rel] = error_kind(exc)
                continue
            budget -= len(data)
            if budget <= 0:
                truncated = True
                break
            text = data.decode("utf-8", errors="replace")
            content = _CONTENT_FILTERS.get(spec.select or "")
            files[rel] = content(rel, text) if content else text
    doc = {"files": files, "links": links, "errors": errors}
    return json.dumps(doc, indent=1, sort_keys=True).encode(), {"truncated": truncated}


# -- device nodes --------------------------------------------------------------

def read_devnodes(root: Path, spec: Source) -> tuple[bytes | None, dict]:
    pattern = (spec.path or "").lstrip("/")
    nodes = []
    for path in sorted(root.glob(pattern)):
        try:
            st = path.lstat()
        except OSError:
            continue
        entry: dict = {"path": "/" + path.relative_to(root).as_posix(),
                       "mode": stat.filemode(st.st_mode)}
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            entry["kind"] = "char" if stat.S_ISCHR(st.st_mode) else "block"
            entry["major"] = os.major(st.st_rdev)
            entry["minor"] = os.minor(st.st_rdev)
        elif stat.S_ISDIR(st.st_mode):
            entry["kind"] = "dir"
        else:
            entry["kind"] = "other"
        nodes.append(entry)
    return json.dumps(nodes, indent=1).encode(), {}
