"""A searched span of a kernel log (:func:`gputriage.logscan.search.search_span`): its
candidate lines, numbered, with what the next span owes them, or, where the storm path
lists them, where they start in the buffer it keeps."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Line", "Span"]

Line = tuple[int, bytes | bytearray, bool]  # (newlines before it, its text, cut)


@dataclass
class Span:
    """Candidate lines of one block: (newlines before the line, text bytes, cut)."""

    lines: list[Line]
    newlines: int  # exact count, or (``exact`` False) an upper bound from long gaps' sizes
    exact: bool = True
    carry: tuple[int, int] = (0, 0)  # (lines wanted from the next block, mode)
    head: list[Line] = field(default_factory=list)
    head_all: bool = True  # ``head`` holds every line of the block
    # with the storm path's lines left out (``search_span(storm=True)``), the storm path
    # lists and numbers every line (``StormLines.run``): the buffer and bounds it reads,
    # how it numbers lines (exact, gap_exact), where the wanted lines and ``head``'s
    # lines start, and the starts of the screened lines; ``lines``, ``newlines`` and
    # ``exact`` are left to it
    storm: tuple[bytes | bytearray, int, int] | None = None
    numbering: tuple[bool, int] = (True, 0)
    starts: list[int] = field(default_factory=list)
    head_starts: list[int] = field(default_factory=list)
    screened_at: frozenset[int] = frozenset()

    def carried(self, carry: tuple[int, int]) -> tuple[list[Line], tuple[int, int]]:
        """The block's first lines that a previous block's context ``carry`` takes, and
        what is still wanted after this block (as :func:`_context` would find them)."""
        limit, mode = carry
        out: list[Line] = []
        for line in self.head:
            if len(out) >= limit:
                return out, (0, 0)
            if mode == 0 and line[1][:1] not in (b" ", b"\t"):
                return out, (0, 0)
            out.append(line)
        left = limit - len(out)
        return out, ((left, mode) if left and self.head_all else (0, 0))

    def take_carried(self, carry: tuple[int, int]) -> None:
        """Join to the span's lines the first lines a previous block's context ``carry``
        takes, and raise ``carry`` by what is still wanted after this block."""
        extra, more = self.carried(carry)
        if self.storm is not None:  # (lines listed by their starts: the storm path's)
            self.starts = sorted({*self.starts, *self.head_starts[:len(extra)]})
        else:
            seen = {n for n, _, _ in self.lines}
            self.lines = sorted(self.lines + [x for x in extra if x[0] not in seen],
                                key=lambda x: x[0])
        if more[0]:
            self.carry = max(self.carry, more)
