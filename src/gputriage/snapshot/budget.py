"""The limits a snapshot is loaded under and what a reader hands back: shared by the
directory reader (:mod:`gputriage.snapshot.bundle`) and the tarball reader
(:mod:`gputriage.snapshot.tar`). The budgets are described in :mod:`gputriage.snapshot.bundle`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gputriage.errors import InputError

SNAPSHOT_SCHEMA = "gputriage/snapshot/v1"
MANIFEST = "manifest.json"

MANIFEST_CAP_BYTES = 16 << 20
MAX_SOURCES = 4096
READ_CAP_BYTES = 256 << 20  # a single source is never read past this (the tail is kept)
READ_TOTAL_BYTES = 1 << 30
TAR_MAX_MEMBERS = 4096
# a sosreport copies whole /proc and /sys folders: a full one holds tens of thousands of
# members (the tarball's layout says it is one before the snapshot limit is passed)
SOS_MAX_MEMBERS = 100_000
TAR_TOTAL_BYTES = 2 << 30
TAR_HEADER_BYTES = 1 << 20
TAR_SKIP_BYTES = 256 << 20
LOAD_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class LoadBudgets:
    """The limits one snapshot is loaded under (see the module docstring)."""

    manifest_bytes: int = MANIFEST_CAP_BYTES
    sources: int = MAX_SOURCES
    read_cap: int = READ_CAP_BYTES
    read_total: int = READ_TOTAL_BYTES
    tar_members: int = TAR_MAX_MEMBERS
    sos_members: int = SOS_MAX_MEMBERS
    tar_total: int = TAR_TOTAL_BYTES
    tar_header: int = TAR_HEADER_BYTES
    tar_skip: int = TAR_SKIP_BYTES
    load_s: float = LOAD_TIMEOUT_S



class Budget:
    """What is left of one load's budgets: the deadline and the bytes to read."""

    def __init__(self, origin: str, limits: LoadBudgets) -> None:
        self.origin = origin
        self.limits = limits
        self.deadline = time.monotonic() + limits.load_s
        self.left = limits.read_total

    def check_time(self) -> None:
        """InputError once the load has run past its wall-time budget."""
        if time.monotonic() > self.deadline:
            raise InputError(f"{self.origin}: loading took longer than "
                             f"{self.limits.load_s:g} s (the load budget): stopped")


@dataclass(frozen=True)
class Got:
    """What a reader got for one file: its (tail) bytes, or why there are none."""

    data: bytes | bytearray | None
    size: int = 0  # the whole file's size: more than len(data) when only the tail is kept
    reason: str = ""  # why data is None; empty: the file is not there


SPENT = "not read: the read budget was spent"
