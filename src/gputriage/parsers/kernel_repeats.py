"""What a folded event records of the occurrences it stands for: the bookkeeping of
:class:`~gputriage.parsers.kernel_model.Repeats` that :mod:`gputriage.parsers.kernel_fold`
and the storm path of :mod:`gputriage.logscan` fill in.

The processes that logged them (their pid, else their name), up to :data:`PROCESSES` and
then only counted; for each process's application faults (Xid 13, 31, 43) up to
:data:`PATTERNS` fault patterns, the code and message with addresses, channels and numbers
blanked (:func:`fault_pattern`, :func:`message_pattern`: worked out from the raw bytes of a
storm's lines and kept per distinct message); and, for Xid 45, how many follow each cause
and how many follow none. :func:`merge_folded` joins two folded events.
"""

from __future__ import annotations

import re
import sys

from gputriage.parsers.kernel_model import DriverEvent, Repeats

__all__ = ["APP_FAULTS", "PATTERNS", "PATTERN_TRIES", "PROCESSES", "blank_bytes",
           "count_causes", "count_details", "count_into", "count_key", "count_line_into",
           "count_pattern", "count_process", "fault_pattern", "line_process",
           "merge_folded", "message_pattern", "process_key", "start_folded"]

PROCESSES = 64  # processes named per folded event (then only counted)
PATTERNS = 4  # fault patterns kept per process
PATTERN_TRIES = 8  # occurrences of a process whose fault pattern is worked out
APP_FAULTS = frozenset({"13", "31", "43"})
_WHO = frozenset({"xid", "segfault"})  # kinds whose processes a folded event names


def _named(name: str) -> bool:
    return bool(name) and not name.startswith("<")


def process_key(ev: DriverEvent) -> tuple[str, str]:
    """(process key, name) of an Xid: its pid when printed, else its name ("" when
    neither); the name is "" when not printed or a placeholder such as ``<unknown>``."""
    pid = (ev.details.get("pid") or "").strip("'")
    name = (ev.details.get("process") or "").strip()
    name = name if _named(name) else ""
    return (pid if pid.isdigit() else name), name


_VARIABLE = re.compile(r"0x[0-9a-fA-F_]+|\b[0-9a-fA-F]{8}\b|[0-9]+")
_VARIABLE_BYTES = re.compile(_VARIABLE.pattern.encode())  # (for ASCII, the same matches)
_ASCII_SPACE = bytes(c for c in range(128) if chr(c).isspace())  # what str.strip() strips
# (code, raw message) -> its fault pattern, kept across the blocks a process folds
_RAW_PATTERNS: dict[tuple[str, bytes], str] = {}
_RAW_PATTERNS_KEPT = 1 << 14
_ADDRESS = b" 0x"  # an address in a message (most fault messages print one each)
_ONES = bytes.maketrans(b"23456789", b"11111111")  # (see message_pattern)
_ADDRESS_DIGITS = b"0123456789abcdefABCDEF_"
_BLANKED: dict[bytes, str] = {}  # a piece of a message between addresses -> blanked


def fault_pattern(code: str | int, ev: DriverEvent) -> str:
    """An Xid's code and message with addresses, channels and numbers blanked: what
    stays the same when one program hits one bug again (interned: equal patterns are one
    object, which a pickle of folded events holds once)."""
    return message_pattern(str(code), ev.details.get("message") or "")


def start_folded(ev: DriverEvent) -> None:
    """Make ``ev`` a folded event standing for itself so far."""
    reps = Repeats(last=ev)
    count_into(reps, ev)
    ev.repeats = reps


def count_into(reps: Repeats, ev: DriverEvent) -> None:
    """Add one occurrence's process, pattern and Xid 45 cause to ``reps``."""
    if ev.kind not in _WHO:
        return
    d = ev.details
    code = d.get("code")
    count_line_into(reps, *process_key(ev), code or "", d.get("message") or "")
    if code == "45":
        count_causes(reps, ev.follows)


def count_causes(reps: Repeats, follows: tuple[int, ...] | None) -> None:
    """One Xid 45's causes (``follows``: what it follows; none: uncaused)."""
    if follows:
        for c in follows:
            reps.causes[c] = reps.causes.get(c, 0) + 1
    else:
        reps.uncaused += 1


def count_line_into(reps: Repeats, key: str, name: str, code: str,
                    message: str | bytes | bytearray) -> None:
    """One occurrence's process ``key`` and ``name`` (as :func:`process_key` reads
    them; "": none) and, for an application fault ``code``, its message's fault pattern
    while its process's are worked out (bytes: the raw rest of an ASCII line): what
    :func:`count_into` adds but a cause, without an event."""
    if key and count_process(reps, key, name, latest=True) and code in APP_FAULTS:
        count_pattern(reps, key, code, message)


def count_details(reps: Repeats, d: dict[str, str], code: str) -> None:
    """``count_into`` for a line folded by
    :meth:`gputriage.parsers.kernel_fold.Folder.fold_line` (its details only)."""
    key, name = line_process(d.get("pid") or "", d.get("process") or "")
    if key:
        count_key(reps, key, name, code, d.get("message") or "")


def line_process(pid: str, process: str) -> tuple[str, str]:
    """(process key, name) of a plain Xid line's pid and process, as
    :func:`process_key` reads them ("" when neither)."""
    if pid[:1] == "'":
        pid = pid.strip("'")
    name = process.strip()
    if name[:1] == "<":
        name = ""
    return (pid if pid.isdigit() else name), name


def count_key(reps: Repeats, key: str, name: str, code: str,
               message: str | bytes | bytearray) -> None:
    """One occurrence of process ``key`` (``name``) and its message (bytes: the raw
    rest of an ASCII line, decoded only when its fault pattern is worked out)."""
    if count_process(reps, key, name) and code in APP_FAULTS:
        count_pattern(reps, key, code, message)


def count_process(reps: Repeats, key: str, name: str, latest: bool = False) -> bool:
    """One occurrence of process ``key`` (``name``): named while fewer than
    ``PROCESSES`` are, else counted among the others (False). A name fills an empty
    one; with ``latest`` (an event's process, a folded event's), it replaces it."""
    procs = reps.processes
    if key in procs:
        if name and (latest or not procs[key]):
            procs[key] = name
    elif len(procs) < PROCESSES:
        procs[key] = name
    else:
        reps.other_processes += 1
        return False
    return True


def count_pattern(reps: Repeats, key: str, code: str, message: str | bytes | bytearray
                  ) -> None:
    """The fault pattern of one occurrence of an application fault ``code`` by process
    ``key`` (named already), while that process's patterns are still worked out."""
    tries = reps.tries.get(key, 0)
    pats = reps.patterns.get(key)
    if pats is None:
        pats = reps.patterns[key] = set()
    if len(pats) < PATTERNS and tries < PATTERN_TRIES:
        reps.tries[key] = tries + 1
        pats.add(message_pattern(code, message))


def message_pattern(code: str, message: str | bytes | bytearray) -> str:
    """An Xid's fault pattern from its code and message (bytes: the raw rest of an ASCII
    line, blanked as bytes: the same pattern, a fifth sooner, and kept per distinct
    message shape, as a storm repeats its messages), as :func:`fault_pattern` makes it of
    an event."""
    if isinstance(message, str):
        if not message.isascii() or message.strip() != message:  # (blanked as it is)
            return sys.intern(f"{code}:{_VARIABLE.sub('#', message)}")
        message = message.encode("ascii")  # (the same pattern, see the tests)
    # digits 2-9 read as 1: every number, hex word and address is blanked as it was (a
    # digit stays a digit, a hex digit and a word character; a "0x" stays one and no
    # other becomes one), and the digits left are none, so the pattern is the same and
    # messages that differ only in their numbers are one key
    said = (code, bytes(message).translate(_ONES))
    pat = _RAW_PATTERNS.get(said)
    if pat is None:
        text = said[1].strip(_ASCII_SPACE)
        # (interned: the messages of one pattern give one object, which a pickle of the
        # folded events then holds once, not once per process)
        if _ADDRESS in text:  # an address each: blanked piece by piece, not kept whole
            return sys.intern(f"{code}:{blank_bytes(text)}")
        pat = sys.intern(f"{code}:{_VARIABLE_BYTES.sub(b'#', text).decode('ascii')}")
        if len(_RAW_PATTERNS) < _RAW_PATTERNS_KEPT:  # (full: those that came first stay)
            _RAW_PATTERNS[said] = pat
    return pat


def blank_bytes(text: bytes) -> str:
    """``_VARIABLE_BYTES.sub(b"#", text)`` of an ASCII ``text``, worked out between its
    addresses: each `` 0x...`` is blanked whole (the space before it ends any number,
    and the address runs to the first byte that is no hex digit or ``_``, where no
    blanked number can start), and each piece around them is blanked once and kept. A
    fault message that differs only in its address is then a few lookups, not a scan."""
    pieces = text.split(_ADDRESS)
    out = [_blank_piece(pieces[0])]
    for piece in pieces[1:]:
        rest = piece.lstrip(_ADDRESS_DIGITS)
        if len(rest) == len(piece):  # ("0x" and no digit: not an address)
            return _VARIABLE_BYTES.sub(b"#", text).decode("ascii")
        out.append(" #")
        out.append(_blank_piece(rest))
    return "".join(out)


def _blank_piece(piece: bytes) -> str:
    found = _BLANKED.get(piece)
    if found is None:
        found = _VARIABLE_BYTES.sub(b"#", piece).decode("ascii")
        if len(_BLANKED) < _RAW_PATTERNS_KEPT:
            _BLANKED[piece] = found
    return found


def merge_folded(into: DriverEvent, ev: DriverEvent) -> None:
    """Fold ``ev`` (one occurrence or a folded event) into ``into``."""
    reps = into.repeats
    assert reps is not None
    into.count += ev.count
    other = ev.repeats
    reps.last = ev.latest if other is not None else ev
    reps.pending = None
    if other is None:
        count_into(reps, ev)
        return
    procs, theirs = reps.processes, other.processes
    if len(procs) >= PROCESSES:  # (a storm's usual case: only those named already join)
        named = [key for key in theirs if key in procs]
        reps.other_processes += len(theirs) - len(named)
    else:
        named = list(theirs)
    patterns, their_patterns = reps.patterns, other.patterns
    for key in named:
        if not count_process(reps, key, theirs[key], latest=True):
            continue
        pats = patterns.get(key)
        if pats is None:
            pats = patterns[key] = set()
        for p in their_patterns.get(key, ()):
            if len(pats) < PATTERNS:
                pats.add(p)
    reps.other_processes += other.other_processes
    causes = reps.causes
    for c, n in other.causes.items():
        causes[c] = causes.get(c, 0) + n
    reps.uncaused += other.uncaused
