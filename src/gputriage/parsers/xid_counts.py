"""A table of one Xid's counts per node, as a fleet dashboard, a metrics query or an
on-call's note gives it: ``node count`` pairs (one or several per line, the columns of
a wide table; ``r06-01  11760  <--`` marks a node) or a markdown table
(``| node | count |``), under a line that names the Xid (``XID 45 totals across
rack06:``, a header ``| node | Xid 79 |``).

The Xid must be named just above the table (or in its header): a bare table of host
names and numbers is not recognised as anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import split_lines, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["XidCountTable", "XidCounts", "claim_xid_counts", "parse_xid_counts"]

_XID = re.compile(r"\bxids?[\s_#:=-]*([0-9]{1,3})\b", re.IGNORECASE)
# a host name with a digit, starting a word (the lookahead, atomic in Python, settles
# where its digit is: no backtracking over them; a name is at most 253 characters) and a
# count; a row is pairs and nothing else, tested
# pair by pair (never one regex repeating pairs, which backtracks exponentially)
_HOST = r"(?<![\w.-])(?=[A-Za-z][\w.-]{0,252}[0-9])[A-Za-z][\w.-]{0,252}"
_COUNT = r"[0-9]{1,3}(?:,[0-9]{3}){1,4}|[0-9]{1,15}"
_MARK = r"<-+|\u2190|\*"
_PAIR = re.compile(rf"(?P<host>{_HOST})(?:\s*:\s*|\s+)(?P<count>{_COUNT})(?![\w.,])"
                   rf"(?:\s*(?P<mark>{_MARK}))?")
_MD_ROW = re.compile(rf"^\s*\|\s*(?P<host>{_HOST})\s*\|\s*(?P<count>{_COUNT})\s*\|"
                     rf"\s*(?:(?P<mark>{_MARK}|suspect|marked)\s*\|?)?\s*$", re.IGNORECASE)
_MD_RULE = re.compile(r"^\s*\|[\s:|-]+\|\s*$")
MIN_NODES = 4  # fewer is not a fleet table
LOOK_BACK = 6  # lines above a table searched for the line naming the Xid


@dataclass(frozen=True)
class XidCountTable:
    """One table: the Xid, each node's count in the table's order, the nodes it
    marks, and the lines it was read from (the line naming the Xid first)."""

    xid: int
    counts: tuple[tuple[str, int], ...]
    marked: tuple[str, ...]
    lines: tuple[str, ...]


@dataclass(frozen=True)
class XidCounts:
    tables: tuple[XidCountTable, ...]


def _xids(line: str) -> set[int]:
    found = {strict_int(m.group(1), signed=False) for m in _XID.finditer(line)}
    return {n for n in found if n is not None}


def _is_row(line: str) -> bool:
    if _MD_ROW.match(line) or _MD_RULE.match(line):
        return True
    return bool(_PAIR.search(line)) and not _PAIR.sub(" ", line).strip()


def _pairs(line: str) -> list[tuple[str, int, bool]]:
    md = _MD_ROW.match(line)
    found = [md] if md else ([] if _MD_RULE.match(line) else list(_PAIR.finditer(line)))
    return [(m.group("host"), n, bool(m.group("mark"))) for m in found
            if (n := strict_int(m.group("count").replace(",", ""), signed=False)) is not None]


def parse_xid_counts(text: str) -> XidCounts:
    """The tables of a claimed text: a line naming one Xid starts a table, the rows
    under it are its nodes; ParseError without a table of at least four nodes."""
    tables: list[XidCountTable] = []
    xid: int | None = None
    rows: list[tuple[str, int, bool]] = []
    lines: list[str] = []

    def close() -> None:
        hosts = {h for h, _, _ in rows}
        if xid is not None and len(hosts) >= MIN_NODES:
            tables.append(XidCountTable(xid, tuple((h, c) for h, c, _ in rows),
                                        tuple(h for h, _, m in rows if m), tuple(lines)))

    for line in split_lines(text):
        if not line.strip():
            continue
        named = _xids(line)
        if len(named) == 1 and not _is_row(line):
            close()
            xid, rows, lines = named.pop(), [], [line]
        elif xid is not None and _is_row(line):
            rows += _pairs(line)
            lines.append(line)
    close()
    if not tables:
        raise ParseError("no table of one Xid's counts on four or more nodes under a line "
                         "naming the Xid")
    return XidCounts(tuple(tables))


def _naming_line(doc: PasteDoc, start: int) -> int | None:
    """The free line naming exactly one Xid within :data:`LOOK_BACK` lines above."""
    seen = 0
    i = start - 1
    while i >= 0 and seen < LOOK_BACK:
        line = doc.lines[i]
        if line.strip() and not line.strip().startswith("```"):
            seen += 1
            named = _xids(line)
            if named:
                return i if len(named) == 1 and doc.free(i) else None
        i -= 1
    return None


_GATE = Gate(_XID)  # a block is claimed only under a line naming an Xid


@gated_by(_GATE)
def claim_xid_counts(doc: PasteDoc) -> None:
    """Each block of four or more nodes' counts with its Xid named just above (or in
    its markdown header): the block and that line."""
    if not _GATE.open(doc):
        return
    i = 0
    while i < len(doc.lines):
        if not (doc.free(i) and _is_row(doc.lines[i])):
            i += 1
            continue
        end = doc.extend(i, _is_row)
        hosts = {h for j in range(i, end) for h, _, _ in _pairs(doc.lines[j])}
        header = _naming_line(doc, i) if len(hosts) >= MIN_NODES else None
        if header is not None:
            doc.claim("xid_counts", header, header + 1)
            doc.claim("xid_counts", i, end)
        i = max(end, i + 1)
