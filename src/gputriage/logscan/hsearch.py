"""Anchor search through Hyperscan (the optional ``hyperscan`` package): one compiled
database of every anchor, scanned over a span outside the GIL.

Each match's end is turned into its line start (one candidate per line). A routine
anchor (see :data:`gputriage.logscan.search.ROUTINE`) is found through its required
literals (case ignored) where they are rare, its line checked here for the anchor,
else through the anchor, its line checked here for a required literal (see
:class:`Matcher`): every pattern is a literal, and routine lines seldom reach Python.
The lines found are exactly those of the libc and ``bytes.find`` searches.

Where ``hyperscan`` cannot be imported, :func:`available` is False and the scan uses
the other searches."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Matcher", "available", "hyperscan_hits", "matcher"]

_MODULE: list[Any] = []  # [the hyperscan module or None], once looked for


def _hyperscan() -> Any:
    if not _MODULE:
        try:
            module: Any = importlib.import_module("hyperscan")
        except Exception:  # a missing or broken binding: search without it
            module = None
        _MODULE.append(module)
    return _MODULE[0]


def available() -> bool:
    """Whether the Hyperscan binding can be imported."""
    return _hyperscan() is not None


def _lit(text: bytes) -> bytes:
    """``text`` as a pattern matching it literally."""
    return b"".join(bytes([c]) if c < 128 and chr(c).isalnum() else b"\\x%02x" % c for c in text)


def overlaps(anchor: bytes, literal: bytes) -> bool:
    """Whether ``literal`` can share bytes with an occurrence of ``anchor`` (case
    ignored): then "the anchor, then the literal, or the other way round" would miss
    lines that hold both."""
    a, r = anchor.lower(), literal.lower()
    if a in r or r in a:
        return True
    return any(a.endswith(r[:k]) or r.endswith(a[:k]) for k in range(1, min(len(a), len(r))))


def not_followed(text: bytes, lead: bytes) -> bytes:
    """A pattern matching ``text`` wherever ``lead`` does not follow it (Hyperscan has no
    negative look-ahead: at each byte of ``lead``, another byte or the end of the data)."""
    tail = b""
    for i in range(len(lead), 0, -1):
        byte = _lit(lead[i - 1:i])
        tail = b"(?:[^" + byte + b"]|\\z" + (b"|" + byte + tail if tail else b"") + b")"
    return _lit(text) + tail


# a routine anchor whose required literals are all this long is searched through them
# (case ignored: shorter ones, such as "error", are words most logs hold)
RARE_LITERAL = 7

# Hyperscan's literal matcher (FDR) filters on the last bytes of each literal: one that
# ends in a pair common in logs (a space, "er", "ia", "ed") lets many positions through
# to be confirmed, and with about 30 literals their filters add up. Such a literal is
# searched through a prefix of it that ends in a rarer pair, and a match counts only
# where the whole literal follows (checked in the callback: exactly the same lines are
# found). Measured on 8 MiB of quiet and busy-HCA logs and of the corpus's kernel logs
# (benchmarks/log_scan.py), the scan takes about 13 % less time; the prefixes are long
# enough that their extra matches are rare (a few per MiB of real kernel logs).
PROBES: dict[bytes, bytes] = {
    b"NVRM:": b"NVRM", b"nvidia": b"nvidi", b"EDAC ": b"EDAC",
    b"nv_peer_mem": b"nv_peer_", b"error received": b"error receiv",
    b"PCIe Bus Error": b"PCIe B", b"PCIe bandwidth": b"PCIe bandw", b"FW version": b"FW vers",
    b"command interface revision": b"command interface rev", b"NETDEV WATCHDOG": b"NETDEV WA",
    b"Lost carrier": b"Lost c", b"Gained carrier": b"Gained c", b"Memory failure": b"Memory fai",
    b"hardware memory error": b"hardware memory", b"Hardware Error": b"Hardware E",
    b"EXT4-fs error": b"EXT4-fs err", b"Aborting journal": b"Aborting j",
    b"error, dev ": b"error,", b"Buffer I/O error": b"Buffer I/O", b"nvme nvme": b"nvme nv",
    b"Disk failure on": b"Disk fai", b"segfault at ": b"segfaul",
    b"blocked for more than": b"blocked for more th", b"soft lockup": b"soft locku",
    b"-- Boot ": b"-- Boot", b"-- Reboot --": b"-- Reb", b"Linux version ": b"Linux v",
    # required literals of routine anchors (searched with case ignored)
    b"can't recover": b"can't recov", b"has no aer-aware": b"has no aer-aw",
    b"driver reported": b"driver rep", b"recovery failed": b"recovery",
    b"link down": b"link dow", b"link active": b"link activ",
}


def _probe(literal: bytes, caseless: bool = False) -> bytes:
    """What Hyperscan searches for ``literal`` (see :data:`PROBES`): a prefix of it."""
    probe = PROBES.get(literal.lower() if caseless else literal, literal)
    ok = literal.lower().startswith(probe.lower()) if caseless else literal.startswith(probe)
    return probe if ok and probe else literal


class Matcher:
    """A compiled database: each pattern's id -> (context mode, literals one of which the
    line must hold, case ignored, or (), and a literal the line must hold as it is, or
    b""); mode -1: the ``screen`` expression, whose lines are noted apart (and are
    candidates). With ``lead`` (a literal that starts with an anchor), that anchor is
    found only where the rest of ``lead`` does not follow it. A literal searched through
    a shorter probe (:data:`PROBES`) has its id in ``whole``: -> (the probe's length, the
    literal, lower-cased when its case is ignored, and whether it is).

    A routine anchor (see :data:`gputriage.logscan.search.ROUTINE`) is found through its
    required literals where they are rare enough (:data:`RARE_LITERAL`), each a caseless
    literal whose line must hold the anchor too; else through the anchor, whose line must
    hold one of them: routine lines seldom call back either way, and every pattern stays
    a literal (a pattern of the anchor, then a required literal on its line, costs a
    third of the scan's speed)."""

    def __init__(self, anchors: Sequence[bytes], modes: Sequence[int],
                 routine: dict[bytes, tuple[bytes, ...]], screen: bytes | None = None,
                 lead: bytes | None = None) -> None:
        hs = _hyperscan()
        exprs: list[bytes] = []
        flags: list[int] = []
        self.checks: list[tuple[int, tuple[bytes, ...], bytes]] = []
        self.whole: dict[int, tuple[int, bytes, bool]] = {}

        def literal(text: bytes, caseless: bool) -> None:
            probe = _probe(text, caseless)
            if probe != text:
                self.whole[len(exprs)] = (len(probe), text.lower() if caseless else text,
                                          caseless)
            exprs.append(_lit(probe))
            flags.append(hs.HS_FLAG_CASELESS if caseless else 0)

        for a, mode in zip(anchors, modes, strict=True):
            need = routine.get(a, ())
            if lead is not None and lead.startswith(a) and not need:
                exprs.append(not_followed(a, lead[len(a):]))
                flags.append(0)
                self.checks.append((mode, (), b""))
            elif need and all(len(r) >= RARE_LITERAL for r in need):
                for r in need:
                    literal(r, True)
                    self.checks.append((mode, (), a))
            else:
                literal(a, False)
                self.checks.append((mode, need, b""))
        if screen is not None:
            exprs.append(screen)
            flags.append(0)
            self.checks.append((-1, (), b""))
        self.db = hs.Database(mode=hs.HS_MODE_BLOCK)
        self.db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs),
                        flags=flags)
        self.scratch: Callable[[], Any] = functools.partial(hs.Scratch, self.db)


@functools.lru_cache(maxsize=8)
def matcher(anchors: tuple[bytes, ...], modes: tuple[int, ...],
            routine: tuple[tuple[bytes, tuple[bytes, ...]], ...],
            screen: bytes | None = None, lead: bytes | None = None) -> Matcher:
    """The database of ``anchors`` (and ``screen``, a Hyperscan expression; ``lead``, see
    :class:`Matcher`) compiled once per process: about 2 ms for the anchors alone, 20 ms
    with the screen expression. Hyperscan searches a MiB in about 0.65 ms, libc in 0.9:
    small spans are searched by libc, which needs no database."""
    return Matcher(anchors, modes, dict(routine), screen, lead)


def hyperscan_hits(buf: bytes | bytearray, lo: int, hi: int, m: Matcher,
                   starts: dict[int, int], screened: set[int] | None = None) -> None:
    """Add the start of each line of ``buf[lo:hi]`` that ``m`` finds -> its context mode
    (the higher of its anchors'); the starts of the lines its screen expression finds
    to ``screened``."""
    rfind, find = buf.rfind, buf.find
    checks = m.checks
    whole = m.whole
    line = [hi, hi]  # the start and end of the last line recorded

    def on_match(i: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
        pos = lo + to - 1  # the match's last byte
        if i in whole:  # a probe: the whole literal must follow it
            n, text, caseless = whole[i]
            at = pos + 1 - n
            if at + len(text) > hi:
                return None
            seen = buf[at:at + len(text)]
            if (seen.lower() if caseless else seen) != text:
                return None
        mode, need, held = checks[i]
        if mode < 0:
            if screened is not None:
                s = rfind(b"\n", lo, pos) + 1 or lo
                screened.add(s)
                if s not in starts:  # (found by its NVRM: too, unless that was left out)
                    starts[s] = 0
            return None
        if line[0] <= pos < line[1]:
            s = line[0]
        else:
            s = rfind(b"\n", lo, pos) + 1 or lo
            e = find(b"\n", pos, hi)
            e = hi if e < 0 else e
            if need:
                low = buf[s:e].lower()
                if not any(r in low for r in need):
                    return None
            if held and find(held, s, e) < 0:
                return None
            line[0], line[1] = s, e
        if starts.get(s, -1) < mode:
            starts[s] = mode
        return None

    with memoryview(buf) as view, view[lo:hi] as span:
        m.db.scan(span, match_event_handler=on_match, scratch=m.scratch())
