"""The host side of a model directory, read live: its mount, free space there and on
local NVMe, and MemAvailable; written as the ``weights_host`` source's report, which
the rules of :mod:`gputriage.rules.weights` judge (here, or pasted into ``analyze``)."""

from __future__ import annotations

import os
from pathlib import Path

from gputriage.errors import InputError
from gputriage.parsers.weights_host import HEADER, Mount, classify_mount, parse_mountinfo
from gputriage.text.fields import split_lines
from gputriage.text.safe import printable

__all__ = ["host_report", "mount_of"]


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount a path lies on: the longest mount point above it (the last one
    mounted there, which hides the earlier)."""
    best: Mount | None = None
    for mount in mounts:
        point = mount.mount_point.rstrip("/") or "/"
        below = path == point or path.startswith(point if point == "/" else point + "/")
        if below and (best is None or len(point) >= len(best.mount_point.rstrip("/") or "/")):
            best = mount
    return best


def _free(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _roomiest(mounts: list[Mount], kind: str) -> tuple[Mount | None, int | None]:
    """The writable mount of ``kind`` with the most free space."""
    best: tuple[Mount | None, int | None] = (None, None)
    for mount in mounts:
        if classify_mount(mount) != kind or "ro" in mount.options.split(","):
            continue
        free = _free(mount.mount_point)
        if free is not None and (best[1] is None or free > best[1]):
            best = (mount, free)
    return best


def _local_candidate(mounts: list[Mount], stage_dir: str | None) -> tuple[Mount | None,
                                                                          int | None]:
    """Where weights could be staged: ``stage_dir``'s mount, else the writable local
    NVMe mount with the most free space, else (no NVMe) the local disk's (a
    device-mapper volume, a SATA disk); the report's mount line says which."""
    if stage_dir is not None:
        return mount_of(os.path.realpath(stage_dir), mounts), _free(stage_dir)
    nvme = _roomiest(mounts, "local_nvme")
    return nvme if nvme[0] is not None else _roomiest(mounts, "local_disk")


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def host_report(model_dir: str, model_bytes: int | None, *, stage_dir: str | None = None,
                mountinfo: str | None = None, meminfo: str | None = None) -> str:
    """The report of ``model_dir`` on this host (texts of /proc files may be given)."""
    if not os.path.exists(model_dir):
        raise InputError(f"{model_dir}: no such file or directory")
    real = os.path.realpath(model_dir)
    text = _read("/proc/self/mountinfo") if mountinfo is None else mountinfo
    try:
        mounts = parse_mountinfo(text)
    except ValueError:
        mounts = []
    lines = [HEADER, f"model_dir: {printable(real)}"]  # a name cannot forge a line
    if model_bytes is not None:
        lines.append(f"model_bytes: {model_bytes}")
    mount = mount_of(real, mounts)
    if mount is not None:
        lines.append(f"mount: {mount.line}")
    free = _free(real)
    if free is not None:
        lines.append(f"free_bytes: {free}")
    local, local_free = _local_candidate(mounts, stage_dir)
    if local is not None:
        lines.append(f"local_mount: {local.line}")
        if local_free is not None:
            lines.append(f"local_free_bytes: {local_free}")
    mem = _read("/proc/meminfo") if meminfo is None else meminfo
    lines += [ln for ln in split_lines(mem) if ln.startswith("MemAvailable:")][:1]
    return "\n".join(lines) + "\n"
