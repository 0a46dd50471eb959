"""Recognise pasted command outputs by their content (never by file name).

A paste may hold one output or a shell session with several: prompt lines
(``$ cmd``, ``# cmd``, ``user@host:~$ cmd``) and markdown fences act as
barriers, and each block found is claimed by one source. The detectors, their
order and the commands that name a source all come from
:mod:`gputriage.sources`. Lines nobody claims are ignored. A segment whose
content is not recognised falls back on the command in its prompt line
(``$ nvidia-smi -q | grep Fabric``).

A detector whose gates' literals no line of the paste that the detectors before it
left unclaimed can hold (what :mod:`gputriage.parsers.detect_table` says of them, before
the detector's module is imported) is not run, nor imported: it would claim nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from gputriage import sources
from gputriage.parsers.detect_gate import GateEntry, may_open
from gputriage.parsers.detect_jobs import is_tests_prompt
from gputriage.parsers.detect_kernel import is_kernel_line, kernel_lines
from gputriage.parsers.detect_table import GATES
from gputriage.text.framing import originals, unframe_lines
from gputriage.text.paste import BARRIER, PasteDoc
from gputriage.text.prompts import programs, source_for_command, subcommands

__all__ = ["EXPECTED", "detect", "detect_framed", "expected", "formats", "is_kernel_line",
           "kernel_lines", "source_for_command"]


def formats() -> list[str]:
    """Every input gputriage reads, one a line (``gputriage analyze --formats``): a
    snapshot, a bug report, and the description of each source it recognises in a
    paste."""
    return ["a gputriage snapshot (a directory or .tar.gz: gputriage collect)",
            "a sosreport (sos report's .tar.xz, .tar.gz, .tar.bz2 or its unpacked folder)",
            "an nvidia-bug-report.log or .log.gz",
            *(f"pasted: {s.description}" for s in sources.SOURCES if s.detector)]


def expected() -> str:
    """What gputriage reads, for the message about an input it does not recognise: one
    short line that points at the whole list (``analyze --formats``)."""
    return ("expected a snapshot, a sosreport, a bug report or a command's output "
            "(gputriage analyze --formats lists them)")


EXPECTED = expected()

_PROMPT = re.compile(
    r"^\s*(?:\([^)]*\)\s*)?"
    r"(?:[\w.-]+@[\w.-]+(?::[^\s$#]*)?\s*[$#]|\[[^\]\s]+@[^\]]+\]\s*[$#]|[$#])"
    r"\s+(?P<cmd>\S.*)$")


def _programs() -> str:
    """The programs an alias runs, as alternatives of a regex (the longest first)."""
    return "|".join(re.escape(p) for p in sorted(programs(), key=len, reverse=True))


def _bare_command() -> re.Pattern[str]:
    """A command line without a prompt: a program an alias runs, alone or followed by
    an option, a pipe or a subcommand an alias names."""
    subs = "|".join(rf"{re.escape(w)}\b" for w in subcommands())
    return re.compile(rf"^\s*(?P<cmd>(?:sudo\s+)?(?:{_programs()})(?:\s+(?:[-|]|{subs}).*)?)\s*$")


_BARE_CMD = _bare_command()
_FENCE = re.compile(r"^\s*```")
# a line the three may match holds a prompt's "$" or "#" or a fence's "```", or starts with
# a program an alias runs (led by the newline before it: see PasteDoc.lines_starting)
_MAYBE_BARRIER = ("$", "#", "```")
_MAYBE_BARE = re.compile(rf"\n[^\S\n]*(?:sudo[^\S\n]+)?(?:{_programs()})")


@functools.cache
def _detectors() -> tuple[tuple[str, GateEntry | None], ...]:
    """Each detector's reference, in the order they run, with what its gates look for."""
    return tuple((ref, GATES.get(ref)) for ref in sources.detector_refs())


def _claim(doc: PasteDoc) -> None:
    """Run the detectors over ``doc`` in order, but those whose gates cannot open."""
    for ref, gate in _detectors():
        if gate is None or may_open(doc, *gate):
            _load(ref)(doc)


_load = functools.cache(sources.load)  # a detector imported once, when a paste needs it


@functools.cache
def _prompt_steps() -> tuple[tuple[str, Callable[[str], bool]], ...]:
    return tuple((s.name, sources.load(s.prompt_step)) for s in sources.SOURCES
                 if s.prompt_step)


_KEEPS_PROMPT = {s.name: s.keeps_prompt for s in sources.SOURCES if s.keeps_prompt}


@dataclass(frozen=True)
class _Segment:
    """The lines after one prompt (or fence) up to the next one."""

    prompt: int  # first line of the prompt (its continuation lines follow)
    start: int  # first line of the output
    command: str | None


def _perfquery_head(line: str) -> bool:
    """Whether a line that looks like a root prompt is perfquery's header (ib_tools is
    imported only when a paste has such a line)."""
    from gputriage.parsers.ib_tools import PERFQUERY_HEAD

    return PERFQUERY_HEAD.match(line) is not None


def _segments(doc: PasteDoc) -> list[_Segment]:
    """Mark prompt lines and fences as barriers; the segments they open."""
    segments = [_Segment(0, 0, None)]
    taken = -1  # the last line a command went on to
    for i in sorted({*doc.lines_with(_MAYBE_BARRIER), *doc.lines_starting(_MAYBE_BARE)}):
        if i <= taken:
            continue
        ln = doc.lines[i]
        m = _PROMPT.match(ln) or _BARE_CMD.match(ln)
        if m and (is_tests_prompt(doc.lines, i) or _perfquery_head(ln)):
            m = None  # "# nThread 1 nGpus 8 ...", "# Port counters: Lid 2 port 1": output
        elif m or _FENCE.match(ln):
            cmd = m.group("cmd").strip() if m else None
            first = i
            doc.owner[i] = BARRIER
            while cmd and cmd.endswith("\\") and i + 1 < len(doc.lines):
                i += 1
                doc.owner[i] = BARRIER
                cmd = cmd[:-1] + " " + doc.lines[i].strip()
            taken = i
            segments.append(_Segment(first, i + 1, cmd))
    return segments


def _keeps_prompt(doc: PasteDoc, body: list[int], hint: str | None, cmd: str) -> str | None:
    """The source a prompt line belongs to (see ``keeps_prompt`` in
    :mod:`gputriage.sources`), else a source whose session the command is a step of."""
    owners = {doc.owner[j] for j in body if doc.lines[j].strip()}
    if hint and _KEEPS_PROMPT.get(hint) == "named":
        return hint if hint in owners else None
    only = owners.pop() if len(owners) == 1 else None
    if only and _KEEPS_PROMPT.get(only) == "alone":
        return only
    if not owners and only is None:
        return next((name for name, step in _prompt_steps()
                     if name in doc.owner and step(cmd)), None)
    return None


def _apply_command(doc: PasteDoc, seg: _Segment, end: int) -> None:
    """Give an unrecognised output to the source its command names, and the prompt line
    to a source that keeps it."""
    body = [j for j in range(seg.start, end) if doc.owner[j] != BARRIER]
    if not seg.command:
        return
    hint = source_for_command(seg.command)
    if hint and all(doc.owner[j] is None for j in body) and any(
            doc.lines[j].strip() for j in body):
        for j in body:
            doc.owner[j] = hint
    keep = _keeps_prompt(doc, body, hint, seg.command)
    if keep:
        for j in range(seg.prompt, seg.start):  # the command says what the output means
            doc.owner[j] = keep


def detect(text: str) -> list[tuple[str, str]]:
    """The ``(source_name, text)`` pieces found in a pasted text; ``[]`` when unrecognised.

    Pieces are in the order they appear; several blocks of one source are joined. Lines
    that arrived framed (a quote, a container's log prefix, a JSON record, line numbers:
    :mod:`gputriage.text.framing`) are read, and given, as their payload.
    """
    return detect_framed(text)[0]


def detect_framed(text: str) -> tuple[list[tuple[str, str]], dict[str, dict[str, str]]]:
    """:func:`detect`'s pieces, and for each source the original line of every payload
    whose framing was taken off (so that evidence can quote the line as pasted)."""
    doc = PasteDoc(text)
    raw = doc.lines
    payloads, taken = unframe_lines(raw)
    framed = any(taken)
    if framed:
        doc.lines = payloads
    segments = _segments(doc)
    _claim(doc)
    ends = [s.prompt for s in segments[1:]] + [len(doc.lines)]
    for seg, end in zip(segments, ends, strict=True):
        _apply_command(doc, seg, end)
    found: dict[str, list[int]] = {}
    for i, owner in enumerate(doc.owner):
        if owner and owner != BARRIER:
            found.setdefault(owner, []).append(i)
    pieces = [(name, "\n".join(doc.lines[i] for i in idx).strip("\n") + "\n")
              for name, idx in found.items()]
    if not framed:
        return pieces, {}
    origin = {name: originals([payloads[i] for i in idx], [raw[i] for i in idx],
                              [taken[i] for i in idx]) for name, idx in found.items()}
    return pieces, {name: m for name, m in origin.items() if m}
