"""Several scanned inputs made one timeline: their order, their boots joined across
inputs, their counts and problems (see :mod:`gputriage.logscan`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from gputriage.logscan.lines import BootSegment, LineSource
from gputriage.parsers.kernel_fold import Deferred, Folder, FollowChain
from gputriage.parsers.kernel_model import DriverEvent

__all__ = ["BootInfo", "InputResult", "LogScan", "merge"]

_ROTATION = re.compile(r"\.([0-9]{1,4})(?:\.(?:gz|xz|bz2|lzma))?$")


@dataclass
class BootInfo:
    """One boot seen in the input."""

    index: int  # 0 = last/current, -1, -2 ...
    boot_id: str | None  # journal boot id when printed
    first: datetime | None
    last: datetime | None


@dataclass
class LogScan:
    """What a kernel-log scan found, and how much it read."""

    events: list[DriverEvent] = field(default_factory=list)
    boots: list[BootInfo] = field(default_factory=list)  # oldest first
    lines: int | None = 0  # lines seen (None: a large file whose lines were not counted)
    skipped: int = 0  # candidate lines cut or not cleanly decodable (counted, never fatal)
    bytes: int = 0
    formats: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class InputResult:
    """One input scanned: its events and boots (from ``src``), and what was read."""

    name: str
    order: int
    src: LineSource
    lines: int | None
    nbytes: int
    problems: list[str]

    @property
    def first_time(self) -> datetime | None:
        return next((s.first for s in self.src.segs if s.first), None)

    @property
    def rotation(self) -> int:
        m = _ROTATION.search(self.name)
        return int(m.group(1)) if m else 0


def _continues(prev: BootSegment | None, seg: BootSegment) -> bool:
    """Whether an input's first boot segment continues the previous input's last boot:
    no marker, boot id, uptime or sequence number says it is a new one."""
    if prev is None or seg.marked:
        return False
    if seg.boot_id and prev.boot_id and seg.boot_id != prev.boot_id:
        return False
    if (seg.first_up is not None and prev.last_up is not None
            and seg.first_up < prev.last_up - 1.0):
        return False
    return not (seg.first_seq is not None and prev.last_seq is not None
                and seg.first_seq < prev.last_seq)


def _extend(prev: BootSegment, seg: BootSegment) -> None:
    """``prev`` continued by ``seg``."""
    prev.boot_id = prev.boot_id or seg.boot_id
    prev.first = prev.first or seg.first
    prev.last = seg.last or prev.last
    prev.last_up = seg.last_up if seg.last_up is not None else prev.last_up
    prev.last_seq = seg.last_seq if seg.last_seq is not None else prev.last_seq
    prev.seen = prev.seen or seg.seen


def join_boots(segs: list[BootSegment], boots: list[BootSegment]) -> tuple[list[int], bool]:
    """Add one part's boot segments to ``boots``: the index in ``boots`` of each, and
    whether its first one continues the last boot before it."""
    mapping: list[int] = []
    continued = False
    for i, seg in enumerate(segs):
        prev = boots[-1] if boots else None
        if i == 0 and prev is not None and not prev.seen and not (
                seg.boot_id and prev.boot_id and seg.boot_id != prev.boot_id):
            _extend(prev, seg)  # nothing was logged in that boot yet: this is its start
            prev.marked = prev.marked or seg.marked
            continued = True
        elif i == 0 and prev is not None and _continues(prev, seg):
            _extend(prev, seg)
            continued = True
        elif seg.seen or seg.boot_id or seg.marked or not boots:
            boots.append(seg)
        mapping.append(len(boots) - 1)
    return mapping, continued


def fold_in(fold: Folder, chain: FollowChain, part: Folder, mapping: list[int],
            continued: bool, boots: int) -> None:
    """One part's folded events (a block, an input) joined to ``fold``, their boots
    renumbered by ``mapping``; ``chain`` settles the Xid 45s that open the part."""
    leads, tails = part.summary()
    chain.join(leads, tails, continued, len(set(mapping)) == 1)
    kept = part.deferred  # (occurrences kept as their bytes, each in its place)
    k = 0
    for i, ev in enumerate(part.events):
        while k < len(kept) and kept[k].at <= i:
            _add_deferred(fold, kept[k], mapping, boots)
            k += 1
        ev.boot = mapping[ev.boot] if 0 <= ev.boot < len(mapping) else boots - 1
        fold.add(ev)
    for item in kept[k:]:
        _add_deferred(fold, item, mapping, boots)


def _add_deferred(fold: Folder, item: Deferred, mapping: list[int], boots: int) -> None:
    item.boot = mapping[item.boot] if 0 <= item.boot < len(mapping) else boots - 1
    fold.add_deferred(item)


def _as_is(part: Folder, mapping: list[int]) -> bool:
    """Whether folding ``part``'s events into an empty folder would give them back
    unchanged: each boot keeps its number (so no two keys become one), and a folder
    folds again what it folded already in the same way."""
    n = len(mapping)
    return mapping == list(range(n)) and all(0 <= ev.boot < n for ev in part.events)


def _add(scan: LogScan, r: InputResult, boots: list[BootSegment], fold: Folder,
         chain: FollowChain, alone: bool = False) -> None:
    """One input's events (numbered by the joined boots), counts and formats;
    ``alone``: the only input, whose events ``fold`` takes as they are when their boots
    keep their numbers (see :func:`_as_is`)."""
    mapping, continued = join_boots(r.src.segs, boots)
    if alone and not fold.events and _as_is(r.src.fold, mapping):
        fold.events = r.src.fold.events
    else:
        fold_in(fold, chain, r.src.fold, mapping, continued, len(boots))
    scan.lines = None if scan.lines is None or r.lines is None else scan.lines + r.lines
    scan.bytes += r.nbytes
    scan.skipped += r.src.skipped
    for f in r.src.formats:
        if f not in scan.formats:
            scan.formats.append(f)


def merge(results: list[InputResult]) -> LogScan:
    """One timeline from several inputs (see :mod:`gputriage.logscan`)."""
    if all(r.first_time for r in results):
        results.sort(key=lambda r: (r.first_time, r.order))
    else:
        results.sort(key=lambda r: (-r.rotation, r.order))
    scan = LogScan()
    boots: list[BootSegment] = []
    fold, chain = Folder(attribute=False), FollowChain()
    for r in results:
        _add(scan, r, boots, fold, chain, alone=len(results) == 1)
    scan.events = fold.events
    if len(scan.formats) > 1 and "plain" in scan.formats:  # unprefixed continuation text
        scan.formats.remove("plain")
    for problem in (p for r in results for p in r.problems):
        if problem not in scan.problems:
            scan.problems.append(problem)
    if scan.lines == 0 and not scan.events:
        boots = [b for b in boots if b.seen or b.boot_id]
    last = len(boots) - 1
    for ev in scan.events:
        ev.boot -= last
    scan.boots = [BootInfo(i - last, b.boot_id, b.first, b.last) for i, b in enumerate(boots)]
    if len(results) > 1 and scan.events and all(e.time for e in scan.events):
        scan.events.sort(key=lambda e: e.time)  # type: ignore[arg-type, return-value]
    return scan
