"""Job outputs in a paste, and what a prompt line's command produces.

* ``nccl_log``: NCCL_DEBUG=INFO records (``host:pid:tid [dev] NCCL INFO ...``,
  with whatever prefixes a shipper added), bare ``NCCL WARN`` / ``NCCL version``
  lines, old NCCL's ``include/socket.h:311 WARN ...``, and the NCCL errors of the
  framework around it (PyTorch ProcessGroupNCCL watchdog lines with their wrapped
  continuation lines).
* ``nccl_tests``: the output of an nccl-tests binary (``all_reduce_perf`` and
  friends): header, device list, size table, footer and failure lines. NCCL
  records interleaved in it go to ``nccl_log``; the run is claimed around them.

The header lines of nccl-tests start with ``# `` like a root prompt; the
paste splitter asks :func:`is_tests_prompt` before it takes such a line for a
barrier. (``source_for_command`` is re-exported from
:mod:`gputriage.text.prompts`.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.parsers.detect_kernel import is_kernel_line
from gputriage.parsers.nccl_lines import is_nccl_line, strip_shippers
from gputriage.parsers.nccl_tests import is_nccl_tests_line, tests_line
from gputriage.text.fields import split_lines
from gputriage.text.hslines import (
    NON_ASCII,
    LineFinder,
    line_break,
    literal_pattern,
    text_offsets,
)
from gputriage.text.paste import PasteDoc
from gputriage.text.prompts import source_for_command

__all__ = ["claim_nccl_log", "claim_nccl_tests", "is_tests_prompt", "nccl_lines", "nccl_record",
           "source_for_command"]


# --- NCCL log ---------------------------------------------------------------------
_NCCL_RECORD = re.compile(r"\bNCCL (?:INFO|WARN|TRACE)\b|^\W*NCCL version [0-9]+\.[0-9]+")
# framework lines that may wrap over the next lines (a PyTorch watchdog message)
_FRAMEWORK = re.compile(r"ProcessGroupNCCL|DistBackendError|\bWorkNCCL\(|ncclInternalError"
                        r"|ncclSystemError|ncclUnhandledCudaError|ncclRemoteError"
                        r"|ncclInvalidUsage|\bNCCL (?:error|communicator was aborted)")
_CONT_MAX = 16  # continuation lines kept after a framework error line
# ... an error (PyTorch's E level, an exception, a timeout), not a warning
_FRAMEWORK_ERROR = re.compile(r"\[E[0-9]{3,4} |[Ee]rror|[Ee]xception|[Tt]imeout|timed out"
                              r"|DistBackendError")
# the start of another kind of record: a table, dmesg, a timestamp, XML, a prompt...
_FOREIGN = re.compile(r"^\s*(?:[|+]|\[\s*[0-9]+\.[0-9]+\]|[0-9]{4}-[0-9]{2}-[0-9]{2}|"
                      r"[A-Z][a-z]{2} [ 0-9][0-9] "
                      r"[0-9]{2}:[0-9]{2}|<|GPU [0-9]|CA '|\S+@\S+[:$#]|[$#] )")


def nccl_record(line: str) -> bool:
    """One line of an NCCL debug log or an NCCL error line of the framework."""
    if "NCCL" not in line and "nccl" not in line and "DistBackendError" not in line:
        # an old NCCL's "file.h:311 WARN" or "host:pid:tid [0] INFO", a bare NET/IB error
        return ("WARN" in line or "INFO" in line or "Got completion" in line) and \
            is_nccl_line(line)
    return bool(_NCCL_RECORD.search(line) or _FRAMEWORK.search(line)) or is_nccl_line(line)


# What every line ``nccl_record`` takes holds: a word of an NCCL record or error, or an
# old NCCL's record shape ("host:pid:tid [0] INFO", "file.cc:311 WARN"; the bare
# completion error holds its words). A training log's "[rank3] INFO ..." lines have
# neither, so ``nccl_lines`` tries the record grammar on a few lines in a hundred, found
# in the whole text at once (the words by ``str.find``, the shape by one regex, which
# never crosses a newline) when its lines end at newlines only.
_RECORD_WORDS = ("NCCL", "nccl", "DistBackendError", "Got completion")
# the old record's shape around its two runs of blanks (joined by what a blank is)
_OLD_SHAPE = (r":[0-9]{1,10}", r"{1,8}(?:\[-?[0-9]{1,5}\]", r"{1,8}INFO|WARN)")
_MAYBE_RECORD = re.compile("|".join(_RECORD_WORDS) + "|" + r"\s".join(_OLD_SHAPE))
_OLD_SHAPE_IN_TEXT = re.compile(r"[^\S\n]".join(_OLD_SHAPE))  # (a blank, never a newline)
# the words and the shape found in one Hyperscan pass, where it is installed (a blank of
# an ASCII line is what Python's [^\S\n] matches there, a carriage return apart: a text
# that holds one is read in lines cut at it; a line that holds a character that is not
# ASCII is taken too)
_MAYBE_LINES = LineFinder([*(literal_pattern(w.encode()) for w in _RECORD_WORDS),
                           rb"[\t\x0b\x0c\x1c-\x20]".join(x.encode() for x in _OLD_SHAPE)],
                          wide=[NON_ASCII])


def nccl_lines(text: str, data: bytes | None = None) -> str:
    """The NCCL records of a large text, in order (without the wrapped lines of framework
    errors: for inputs too large for the full detector). ``data``: the text encoded as
    UTF-8, where the caller has it."""
    cr = "\r" in text  # (a line may end at a CR too)
    if data is None:
        data = text.encode("utf-8", "surrogatepass")
    maybe: Iterable[str]
    if (starts := _MAYBE_LINES.starts(data, cr, text.isascii())) is not None:
        maybe = _lines_from(text, text_offsets(text, data, starts), cr)
    elif cr:  # (looked for line by line)
        maybe = filter(_MAYBE_RECORD.search, split_lines(text))
    else:
        maybe = _lines_at(text, [m.start() for m in _OLD_SHAPE_IN_TEXT.finditer(text)])
    kept = [ln for ln in maybe if nccl_record(ln)]
    return "\n".join(kept) + "\n" if kept else ""


def _lines_from(text: str, starts: list[int], cr: bool = False) -> list[str]:
    """The lines of ``text`` (cut at newlines, and with ``cr`` at carriage returns) that
    start at ``starts``."""
    out = []
    for start in starts:
        end = line_break(text, start) if cr else text.find("\n", start)
        out.append(text[start:end if end >= 0 else len(text)])
    return out


def _lines_at(text: str, found: list[int]) -> list[str]:
    """The lines of ``text`` (cut at newlines) that hold a record word or a position of
    ``found``, each once, in order."""
    for word in _RECORD_WORDS:
        at = text.find(word)
        while at >= 0:
            found.append(at)
            end = text.find("\n", at)
            at = -1 if end < 0 else text.find(word, end)
    out: list[str] = []
    line_end = -1
    for at in sorted(found):
        if at <= line_end:
            continue  # (another find on a line taken)
        start = text.rfind("\n", 0, at) + 1
        line_end = text.find("\n", at)
        if line_end < 0:
            line_end = len(text)
        out.append(text[start:line_end])
    return out


def _wrapped(lines: list[str], owner: list[str | None], j: int) -> bool:
    """Whether line ``j`` may be a wrapped line of a framework error above it."""
    return (bool(lines[j].strip()) and (owner[j] is None or owner[j] == "nccl_log")
            and not _FOREIGN.match(lines[j]) and not is_kernel_line(lines[j])
            and not tests_line(lines[j]))


def claim_nccl_log(doc: PasteDoc) -> None:
    """Claim NCCL records, then the wrapped lines that follow a framework error (up to a
    blank line or the start of another kind of record)."""
    lines, owner = doc.lines, doc.owner
    for i, ln in enumerate(lines):
        if owner[i] is None and nccl_record(ln):
            owner[i] = "nccl_log"
    i = 0
    while i < len(lines):
        if (owner[i] != "nccl_log" or not _FRAMEWORK.search(lines[i])
                or not _FRAMEWORK_ERROR.search(lines[i])):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and j - i <= _CONT_MAX and _wrapped(lines, owner, j):
            owner[j] = "nccl_log"
            j += 1
        i = j


# --- nccl-tests -------------------------------------------------------------------
# lines that make a run of candidate lines an nccl-tests output for sure
_TESTS_STRONG = re.compile(
    r"^\s*#\s*(?:nThread\s+[0-9]|Using devices|Rank\s+[0-9]+\s+Group|size\s+count|Avg bus bandwidth"
    r"|Out of bounds values|Collective test|nccl-tests version)"
    r"|Test (?:CUDA |NCCL )?failure")


def is_tests_prompt(lines: list[str], i: int) -> bool:
    """Whether a ``# ...`` line that looks like a root prompt is an nccl-tests line
    (itself, or a comment line between two of them)."""
    ln = lines[i]
    if not ln.lstrip().startswith("#"):
        return False
    if is_nccl_tests_line(ln) or _TESTS_STRONG.match(ln):
        return True
    near = [lines[k] for k in (i - 1, i + 1) if 0 <= k < len(lines)]
    return any(x.lstrip().startswith("#") and (is_nccl_tests_line(x) or _TESTS_STRONG.match(x))
               for x in near)


# a run is claimed only with a free line _TESTS_STRONG finds something in: its "#"
# branch or its "Test ... failure" one
_STRONG_GATE = Gate(literals=("#", "failure"),
                    test=lambda line: _TESTS_STRONG.search(strip_shippers(line)))


@gated_by(_STRONG_GATE)
def claim_nccl_tests(doc: PasteDoc) -> None:
    """Claim each run of nccl-tests lines (NCCL records and blank lines may sit in
    between) that holds at least one line only nccl-tests prints."""
    if not _STRONG_GATE.open(doc):
        return
    lines, owner = doc.lines, doc.owner
    i = 0
    while i < len(lines):
        if not (doc.free(i) and lines[i].strip() and tests_line(lines[i])):
            i += 1
            continue
        last = j = i
        while j < len(lines):
            if owner[j] == "nccl_log" or (doc.free(j) and not lines[j].strip()):
                j += 1
            elif doc.free(j) and tests_line(lines[j]):
                last = j
                j += 1
            else:
                break
        run = [k for k in range(i, last + 1) if doc.free(k)]
        if any(_TESTS_STRONG.search(strip_shippers(lines[k])) for k in run):
            for k in run:
                owner[k] = "nccl_tests"
        i = last + 1
