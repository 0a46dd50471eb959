"""Storms folded while scanning: memory bounded by what is distinct, not by lines.

Events are folded per key: boot, kind, device, code (and what else tells two events of a
kind apart, see :func:`fold_key`), and reset epoch (the driver loads of the boot and the
resets of the GPU so far, so that no folded event straddles a reset). The first
:data:`KEEP` events of a key are kept one by one, in log order; every later one is folded
into one event standing for them all (``count`` and ``repeats``: the last occurrence, the
processes that logged them, their fault patterns, and for Xid 45 what each follows, as
:mod:`gputriage.parsers.kernel_repeats` records them). A driver load and an Xid 154 are
never folded: each may be a reset the rules must see. :meth:`Folder.repeat` and its
helpers fold a storm's plain Xid lines without building their events, and
:meth:`Folder.defer` keeps a worker block's first occurrences of a plain Xid as their bytes
(:class:`Deferred`), whose events :meth:`Folder.add_deferred` builds where the blocks are
joined only if the whole file keeps them one by one: a storm's every block parsed its
keys' first occurrences again, which the joined file folds.

Xid 45 attribution is made here, in log order, for every Xid 45: it follows the GPU's latest
other Xid when that is among the GPU's last :data:`LOOKBACK` Xids and at most
:data:`FOLLOW_ON_S` earlier (or either has no time), and the Xid its message names ("caused
by previous Xid N"). A folder that starts inside a log (a worker's block, a rotated file)
cannot see the Xid before its GPU's first 45s: it keeps them as ``leads``, and
:class:`FollowChain` settles them from what came before.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from gputriage.parsers.kernel_model import DriverEvent, Repeats
from gputriage.parsers.kernel_repeats import (
    count_causes,
    count_details,
    count_key,
    count_line_into,
    merge_folded,
    start_folded,
)
from gputriage.text.fields import strict_hex, strict_int

__all__ = ["FOLLOW_ON_S", "KEEP", "LOOKBACK", "Deferred", "FoldKey", "FollowChain", "Folder",
           "fold_key", "follows_code", "recovery_cleared", "seconds", "weight"]

KEEP = 64  # events of one key kept one by one before the rest are folded
FOLLOW_ON_S = 30.0  # an Xid 45 this soon after another Xid on its GPU is its consequence
LOOKBACK = 64  # an Xid 45 follows an Xid only among the GPU's last this many Xids
# details that differ from one occurrence to the next (left out of the key)
_VOLATILE = frozenset({"pid", "process", "message", "channel", "caused_by", "intrinfo",
                       "address", "ip", "sp", "error_code"})
_NEVER = frozenset({"driver-load"})
_XID_KINDS = frozenset({"xid", "fallen-off-bus"})  # what _attribute looks at
_RESET_KINDS = frozenset({"xid", "driver-load"})  # what _note_reset looks at
_XID_COMMON = frozenset({"code", "pid", "process", "message", "channel", "caused_by"})

# What events folded together share (:func:`fold_key`): the kind, the bus, and the usual
# Xid line's code or else the details that tell two events of the kind apart
FoldKey = tuple[str, str | None, str | None | tuple[tuple[str, str], ...]]
# A fold key in its boot and reset epoch: (boot, driver loads, GPU resets, key)
_EpochKey = tuple[int, int, int, FoldKey]


def seconds(ev: DriverEvent) -> float | None:
    """An event's time in seconds (absolute when known, else since boot)."""
    if ev.time is not None:
        return ev.time.timestamp()
    return ev.uptime_s



def fold_key(ev: DriverEvent) -> FoldKey | None:
    """What two events must share to be folded (before boot and epoch); None: never."""
    if ev.kind in _NEVER:
        return None
    d = ev.details
    if ev.kind == "xid":
        code = d.get("code")
        if code == "154":
            return None
        if len(d) <= 6 and d.keys() <= _XID_COMMON:  # the usual Xid line: a cheap key
            return ("xid", ev.bus_id, code)
    rest = tuple(sorted((k, v) for k, v in d.items() if k not in _VOLATILE))
    return (str(ev.kind), ev.bus_id, rest)


def recovery_cleared(ev: DriverEvent) -> bool:
    """An Xid 154 whose recovery action went back to None: a reset of its GPU (as
    :mod:`gputriage.facts.resets` counts it)."""
    d = ev.details
    if ev.kind != "xid" or d.get("code") != "154" or not ev.bus_id:
        return False
    to = strict_hex(d.get("recovery_action_code", ""))
    return to == 0 and (d.get("recovery_action_from") or "").strip().lower() not in (
        "", "none", "no", "n/a", "0x0")


@functools.lru_cache(maxsize=1024)
def code_number(code: str) -> int | None:
    """An Xid code's number (None when it is not one): the lines of a storm repeat it."""
    return strict_int(code, signed=False)


def _xid_code(ev: DriverEvent) -> int | None:
    if ev.kind != "xid":
        return 79 if ev.kind == "fallen-off-bus" else None
    return strict_int(ev.details.get("code", ""), signed=False)


@dataclass
class XidState:
    """A GPU's latest Xid other than 45 (code None: none yet) and the 45s since."""

    code: int | None = None
    at: float | None = None
    since: int = 0


@dataclass
class Lead:
    """An Xid 45 logged before any other Xid of its GPU in a folder's first boot."""

    event: DriverEvent | Deferred  # the event itself (or its bytes), or the folded event
    at: float | None
    named: int | None  # the cause its message names
    index: int  # 45s of its GPU before it in this folder's first boot


def _add_cause(ev: DriverEvent | Deferred, code: int, named: int | None) -> None:
    """Record that one occurrence folded into (or being) ``ev`` also follows ``code``."""
    if ev.repeats is not None:
        if code == named:
            return
        if named is None and ev.repeats.uncaused:
            ev.repeats.uncaused -= 1
        ev.repeats.causes[code] = ev.repeats.causes.get(code, 0) + 1
    else:
        ev.follows = tuple(sorted({*(ev.follows or ()), code}))


def follows_code(st: XidState | None, at: float | None, index_base: int = 0) -> int | None:
    """The code an Xid 45 at ``at`` follows given its GPU's state, or None."""
    if st is None or st.code is None or st.since + index_base >= LOOKBACK:
        return None
    if at is None or st.at is None or 0 <= at - st.at <= FOLLOW_ON_S:
        return st.code
    return None


@dataclass(slots=True)
class Deferred:
    """One occurrence of a plain Xid line (a code other than 79 and 154) that a worker's
    block keeps one by one, kept as its bytes (see :meth:`Folder.defer`): the process
    that joins the blocks builds its event only where the whole file keeps it one by one
    too, else counts it into the key's folded event as it would count the event
    (:meth:`Folder.add_deferred`)."""

    raw: bytes  # the line
    lineno: int
    boot: int
    bus: str | None
    code: str
    process: tuple[str, str]  # (key, name) as ``kernel_repeats.line_process`` reads them
    message_at: int  # where the raw message starts in ``raw``
    origin: str | None
    at: int  # the events of its folder before it (its place among them)
    follows: tuple[int, ...] | None = None  # an Xid 45's, as its event's (Lead may add)

    repeats = None  # (read where events are renumbered and causes added)

    def __reduce__(self) -> tuple[Any, ...]:  # (a tuple: a third of the default's cost)
        return Deferred, _DEFERRED_FIELDS(self)


_DEFERRED_FIELDS = operator.attrgetter(*(f.name for f in fields(Deferred)))


class _Attributed:
    """What builds a kept Xid 45's events (``built``, see :attr:`Folder.rebuild`), their
    ``follows`` as its attribution had them."""

    __slots__ = ("built", "follows")

    def __init__(self, built: Any, follows: tuple[int, ...]) -> None:
        self.built, self.follows = built, follows

    def events(self, lineno: int | None = None, origin: str | None = None,
               boot: int = 0) -> list[DriverEvent]:
        out: list[DriverEvent] = self.built.events(lineno, origin, boot)
        for ev in out:
            ev.follows = self.follows
        return out


class Folder:
    """Folds events in log order (see the module docstring). ``events`` is the result,
    ordered by first occurrence. With ``attribute`` False, Xid 45s keep what they were
    given (events merged from folders that attributed them)."""

    def __init__(self, attribute: bool = True, keep: int | None = None) -> None:
        self.events: list[DriverEvent] = []
        self.attribute = attribute
        self.keep = KEEP if keep is None else keep  # events of a key kept one by one
        self._kept: dict[_EpochKey, int] = {}
        self._folded: dict[_EpochKey, DriverEvent] = {}
        self._loads: dict[int, int] = {}  # boot -> driver loads so far
        self._resets: dict[tuple[int, str | None], int] = {}  # (boot, bus) -> resets
        self.states: dict[tuple[int, str | None], XidState] = {}  # (boot, bus) -> Xid state
        self.first_boot: int | None = None
        self.last_boot: int | None = None
        self.leads: dict[str | None, list[Lead]] = {}
        self._lost79: set[tuple[int, str | None]] = set()
        self.chain: FollowChain | None = None  # set when this folder joins parts
        self._epochs = 0  # resets and driver loads seen (a change voids ``_hot``)
        # (boot, bus, code, also fallen off the bus) of a fast-parsed Xid line -> (the
        # epochs seen, its folded event, its folded fallen-off-bus event)
        self._hot: dict[tuple[int, str | None, str, bool],
                        tuple[int, DriverEvent, DriverEvent | None]] = {}
        # occurrences kept as their bytes, each with its place among ``events`` (a
        # worker's block, see :meth:`defer`), and what builds their events where they
        # are joined (raw line -> an object whose ``events(lineno, origin, boot)`` builds
        # them: the joining process sets it)
        self.deferred: list[Deferred] = []
        self.rebuild: Callable[[bytes], Any] | None = None

    # -- attribution -------------------------------------------------------------------
    def _attribute(self, ev: DriverEvent) -> Lead | None:
        """Update the GPU's Xid state with ``ev``; for an Xid 45 set its ``follows``.
        Returns the lead it is (see :class:`Lead`), if any."""
        code = _xid_code(ev)
        if code is None:
            return None
        key = (ev.boot, ev.bus_id)
        if ev.kind == "fallen-off-bus":
            if key in self._lost79:
                return None  # its Xid 79 line is the event
        elif code == 79:
            self._lost79.add(key)
        st = self.states.get(key)
        if code != 45:
            self.states[key] = XidState(code, seconds(ev), 0)
            return None
        named = strict_int(ev.details.get("caused_by"), signed=False)
        at = seconds(ev)
        found = follows_code(st, at)
        if ev.follows is None:
            ev.follows = tuple(sorted({c for c in (named, found) if c is not None}))
        if st is None:
            st = self.states[key] = XidState()
        lead = None
        if st.code is None and ev.boot == self.first_boot and st.since < LOOKBACK:
            lead = Lead(ev, at, named, st.since)
            self.leads.setdefault(ev.bus_id, []).append(lead)
        st.since += 1
        return lead

    def _note_reset(self, ev: DriverEvent) -> None:
        if ev.kind == "driver-load":
            self._epochs += 1
            self._loads[ev.boot] = self._loads.get(ev.boot, 0) + 1
        elif recovery_cleared(ev):
            self._epochs += 1
            key = (ev.boot, ev.bus_id)
            self._resets[key] = self._resets.get(key, 0) + 1
            self.states.pop(key, None)

    # -- folding -----------------------------------------------------------------------
    def add(self, ev: DriverEvent) -> None:
        """Take the next event in log order (one occurrence, or an already folded one)."""
        boot = ev.boot
        if self.first_boot is None:
            self.first_boot = boot
        self.last_boot = boot
        kind = ev.kind
        # (only an Xid or a fallen-off-bus event is attributed, only a driver load or an Xid
        # 154 is a reset)
        lead = (self._attribute(ev) if self.attribute and kind in _XID_KINDS
                and ev.repeats is None else None)
        base = fold_key(ev)
        if kind in _RESET_KINDS and (kind == "driver-load"
                                     or ev.details.get("code") == "154"):
            self._note_reset(ev)
        if base is None:
            self.events.append(ev)
            return
        loads, resets = self._loads, self._resets
        key = (boot, loads.get(boot, 0) if loads else 0,
               resets.get((boot, ev.bus_id), 0) if resets else 0, base)
        folded = self._folded.get(key)
        if folded is not None:
            merge_folded(folded, ev)
            if lead is not None:
                lead.event = folded  # its cause is settled in the folded event
            return
        kept = self._kept.get(key, 0)
        if kept < self.keep or ev.repeats is not None:
            self._kept[key] = kept + 1
            if ev.repeats is not None:
                self._folded[key] = ev
            self.events.append(ev)
            return
        start_folded(ev)
        self._folded[key] = ev
        self.events.append(ev)

    def _plain_key(self, item: Deferred) -> _EpochKey:
        """The key a kept occurrence's event folds under now (see :meth:`add`)."""
        boot, loads, resets = item.boot, self._loads, self._resets
        return (boot, loads.get(boot, 0) if loads else 0,
                resets.get((boot, item.bus), 0) if resets else 0, ("xid", item.bus, item.code))

    def defer(self, item: Deferred, number: int, at: float | None) -> bool:
        """Keep ``item`` one by one as its bytes, as :meth:`add` would keep its event
        (``number``: its code's, ``at``: its time in seconds): False when its key has a
        folded event or keeps no more one by one (the caller builds its event)."""
        boot, bus = item.boot, item.bus
        key = self._plain_key(item)
        kept = self._kept.get(key, 0)
        if kept >= self.keep or key in self._folded:
            return False
        self._kept[key] = kept + 1
        if self.first_boot is None:
            self.first_boot = boot
        self.last_boot = boot
        if self.attribute:  # (_attribute of a plain line of a code other than 79)
            if number != 45:
                self.states[(boot, bus)] = XidState(number, at, 0)
            else:
                self._attribute_45(item, at)
        item.at = len(self.events)
        self.deferred.append(item)
        return True

    def _attribute_45(self, item: Deferred, at: float | None) -> None:
        """:meth:`_attribute` of a plain Xid 45 line (no cause named) kept as bytes."""
        key = (item.boot, item.bus)
        st = self.states.get(key)
        found = follows_code(st, at)
        item.follows = () if found is None else (found,)
        if st is None:
            st = self.states[key] = XidState()
        if st.code is None and item.boot == self.first_boot and st.since < LOOKBACK:
            self.leads.setdefault(item.bus, []).append(Lead(item, at, None, st.since))
        st.since += 1

    def add_deferred(self, item: Deferred) -> None:
        """Take a kept occurrence of another folder (:meth:`defer`) in its turn: its
        event built and added where its key keeps it one by one here, else counted into
        the key's folded event as :meth:`add` counts the event, which is built only if
        it stays the last occurrence (:meth:`finish`)."""
        boot = item.boot
        folded = self._folded.get(self._plain_key(item))
        assert self.rebuild is not None  # (set by the process that joins folders)
        if folded is None or self.attribute:
            for ev in self.rebuild(item.raw).events(item.lineno, item.origin, boot):
                ev.follows = item.follows
                self.add(ev)
            return
        if self.first_boot is None:
            self.first_boot = boot
        self.last_boot = boot
        reps = folded.repeats
        assert reps is not None
        folded.count += 1
        built = self.rebuild(item.raw)
        if item.follows is not None:  # (an Xid 45: its event as attributed)
            built = _Attributed(built, item.follows)
        reps.pending = (built, item.lineno, boot, 0)
        count_line_into(reps, *item.process, item.code, item.raw[item.message_at:])
        if item.code == "45":
            count_causes(reps, item.follows)

    def repeat(self, line: Any, lineno: int, boot: int) -> bool:
        """Fold one fast-parsed Xid line (a ``gputriage.logscan.fastline.FastLine``)
        into the folded event its key already has, without building its event(s): what
        a storm costs per line. False when its key has none yet (or the line is not a
        plain Xid): the caller builds the events and calls :meth:`add`."""
        d = line.details
        code = d["code"]
        if code == "154" or len(d) > 6 or not d.keys() <= _XID_COMMON:
            return False
        found = self.hot(boot, line.bus_id, code, line.fallen)
        if found is None:
            return False
        at = line.time.timestamp() if line.time is not None else line.uptime_s
        self.fold_line(found, line.bus_id, code, d, at, line, lineno, boot)
        return True

    @property
    def epochs(self) -> int:
        """Resets and driver loads seen so far: what :meth:`hot` gave stays true while
        this and the boot stay the same."""
        return self._epochs

    def hot(self, boot: int, bus: str | None, code: str, fallen: bool = False
            ) -> tuple[DriverEvent, DriverEvent | None] | None:
        """The folded event (and, for a line that also fell off the bus, the folded
        fallen-off-bus event) that a plain Xid line of ``bus`` and ``code`` (not 154) in
        ``boot`` joins now; None when its key has none yet."""
        hot = self._hot.get((boot, bus, code, fallen))
        if hot is not None and hot[0] == self._epochs:
            return hot[1], hot[2]
        epoch = (boot, self._loads.get(boot, 0), self._resets.get((boot, bus), 0))
        found = self._folded.get((*epoch, ("xid", bus, code)))
        if found is None:
            return None
        lost = None
        if fallen:
            lost = self._folded.get((*epoch, ("fallen-off-bus", bus, ())))
            if lost is None:
                return None
        self._hot[(boot, bus, code, fallen)] = (self._epochs, found, lost)
        return found, lost

    def fold_line(self, hot: tuple[DriverEvent, DriverEvent | None], bus: str | None,
                  code: str, details: dict[str, str], at: float | None, pending: Any,
                  lineno: int, boot: int) -> None:
        """Fold one plain Xid line into the events :meth:`hot` gave for it: ``details``
        its code, pid, process and message (and caused_by), ``at`` its time in seconds,
        ``pending`` what builds its events when it stays the last (``events(lineno,
        origin, boot)``, see :meth:`finish`)."""
        folded, lost = hot
        self.last_boot = boot
        reps = folded.repeats
        assert reps is not None
        if self.attribute:
            self.attribute_line(reps, folded, bus, at, details.get("caused_by"), code, boot)
        folded.count += 1
        reps.pending = (pending, lineno, boot, 0)
        count_details(reps, details, code)
        if lost is not None and lost.repeats is not None:
            lost.count += 1
            lost.repeats.pending = (pending, lineno, boot, 1)

    def fold_plain(self, hot: tuple[DriverEvent, DriverEvent | None], bus: str | None,
                   code: str, proc: tuple[str, str], rest: bytes | bytearray,
                   at: float | None, pending: Any, lineno: int, boot: int) -> None:
        """:meth:`fold_line` for a plain Xid line that did not fall off the bus, its
        process as :func:`line_process` reads it and its message as the raw rest of an
        ASCII line (decoded only when needed)."""
        folded = hot[0]
        self.last_boot = boot
        reps = folded.repeats
        assert reps is not None and hot[1] is None
        if self.attribute:
            self.attribute_line(reps, folded, bus, at, None, code, boot)
        folded.count += 1
        reps.pending = (pending, lineno, boot, 0)
        if proc[0]:
            count_key(reps, proc[0], proc[1], code, rest)

    def attribute_line(self, reps: Repeats, folded: DriverEvent, bus: str | None,
                        at: float | None, caused_by: str | None, code: str,
                        boot: int) -> None:
        """:meth:`_attribute` for a line folded by :meth:`fold_line`."""
        key = (boot, bus)
        st = self.states.get(key)
        if code != "45":
            if code == "79":
                self._lost79.add(key)
            number = code_number(code)
            if number is None:
                return
            if st is None:
                self.states[key] = XidState(number, at, 0)
            else:
                st.code, st.at, st.since = number, at, 0
            return
        named = strict_int(caused_by, signed=False)
        found = follows_code(st, at)
        causes = {c for c in (named, found) if c is not None}
        for c in causes:
            reps.causes[c] = reps.causes.get(c, 0) + 1
        if not causes:
            reps.uncaused += 1
        if st is None:
            st = self.states[key] = XidState()
        if st.code is None and boot == self.first_boot and st.since < LOOKBACK:
            self.leads.setdefault(bus, []).append(Lead(folded, at, named, st.since))
        st.since += 1

    def finish(self) -> None:
        """Build the last occurrences :meth:`repeat` left parsed only."""
        for ev in self._folded.values():
            reps = ev.repeats
            if reps is not None and reps.pending is not None:
                line, lineno, boot, which = reps.pending
                reps.pending = None
                built = line.events(lineno, ev.origin, boot)
                reps.last = built[min(which, len(built) - 1)]

    def tails(self) -> dict[str | None, XidState]:
        """The Xid state of each GPU in the last boot seen."""
        return {bus: st for (boot, bus), st in self.states.items() if boot == self.last_boot}

    def summary(self) -> tuple[dict[str | None, list[Lead]], dict[str | None, XidState]]:
        """(leads, tails): the Xid 45s that open what this folder holds, and its GPUs'
        Xid states at its end (from ``chain`` when it joined parts)."""
        if self.chain is not None:
            return self.chain.leads, self.chain.states
        return self.leads, self.tails()


@dataclass
class FollowChain:
    """Xid 45 attribution across folders that follow one another in one log (a file's
    blocks, rotated files): each settles the next one's leads from the GPUs' states."""

    states: dict[str | None, XidState] = field(default_factory=dict)
    leads: dict[str | None, list[Lead]] = field(default_factory=dict)  # still open

    def join(self, leads: dict[str | None, list[Lead]], tails: dict[str | None, XidState],
             continues: bool, one_boot: bool) -> None:
        """The next folder: its first-boot ``leads``, its last boot's ``tails``;
        ``continues``: its first boot continues the last one here; ``one_boot``: it saw
        only that boot."""
        if not continues:
            self.states, self.leads = {}, {bus: list(ls) for bus, ls in leads.items()}
        else:
            for bus, ls in leads.items():
                st = self.states.get(bus)
                if st is not None and st.code is not None:
                    for lead in ls:
                        cause = follows_code(st, lead.at, lead.index)
                        if cause is not None:
                            _add_cause(lead.event, cause, lead.named)
                else:
                    base = st.since if st is not None else 0
                    self.leads.setdefault(bus, []).extend(
                        Lead(x.event, x.at, x.named, x.index + base) for x in ls
                        if x.index + base < LOOKBACK)
        if one_boot and continues:
            for bus, st in tails.items():
                old = self.states.get(bus)
                if st.code is None and old is not None:
                    self.states[bus] = XidState(old.code, old.at, old.since + st.since)
                else:
                    self.states[bus] = XidState(st.code, st.at, st.since)
        else:
            self.states = {bus: XidState(st.code, st.at, st.since) for bus, st in tails.items()}


def weight(events: Iterable[DriverEvent]) -> int:
    """How many occurrences ``events`` stand for."""
    return sum(ev.count for ev in events)
