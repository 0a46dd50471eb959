"""Split an nvidia-bug-report.log into the sources gputriage knows.

``nvidia-bug-report.sh`` writes a prologue, then sections separated by a line
of underscores. A file section starts ``*** /path`` (followed by an
``*** ls: ...`` metadata line, or reads ``*** /path does not exist`` / ``is
not readable``); a command section starts with the command line
(``/usr/bin/nvidia-smi --query``) and may hold several commands; the kernel
sections start ``dmesg:`` and ``Scanning kernel log files for NVIDIA kernel
messages:``. Which source a section holds comes from the sources' aliases
(:mod:`gputriage.text.prompts`): a file section by its path, a command
section by its command line; a tree source gathers its files' sections.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass

from gputriage import sources
from gputriage.parsers.detect_kernel import kernel_lines
from gputriage.text.fields import split_lines
from gputriage.text.prompts import (
    programs,
    report_pattern,
    source_for_command,
    source_for_section,
)

__all__ = ["Section", "is_bug_report", "sections", "split_bug_report", "split_with_headers"]

_SEP = re.compile(r"^_{20,}\s*$")
# commands the report runs whose output no source reads: they still start a new part
_OTHER_COMMANDS = ("nvidia-debugdump", "modinfo")
_COMMANDS = "|".join(re.escape(p) for p in sorted({*programs(), *_OTHER_COMMANDS},
                                                  key=lambda p: (-len(p), p)))
_CMD_LINE = re.compile(rf"^/\S*/(?:{_COMMANDS})\b.*$")
_MARKERS = ("Start of NVIDIA bug report log file", "nvidia-bug-report.sh Version:")


@dataclass(frozen=True)
class Section:
    """One section (or one command of a section) of a bug report."""

    header: str
    body: str
    error: str | None = None  # absent | permission, for "*** path does not exist" etc.


def is_bug_report(text: str) -> bool:
    """Whether a text is (the start or a part of) an nvidia-bug-report.log."""
    head = text[: 1 << 20]
    if any(m in head for m in _MARKERS):
        return True
    seps = sum(1 for ln in split_lines(head) if _SEP.match(ln))
    return seps >= 3 and re.search(r"^\*\*\* /(?:proc|etc|var|sys)/", head, re.M) is not None


def sections(text: str) -> list[Section]:
    """The report's sections in order, commands of one section split apart."""
    out: list[Section] = []
    chunk: list[str] = []
    for ln in split_lines(text) + ["_" * 44]:
        if not _SEP.match(ln):
            chunk.append(ln)
            continue
        while chunk and not chunk[0].strip():
            chunk.pop(0)
        if chunk:
            out.extend(_split_chunk(chunk))
        chunk = []
    return out


def _split_chunk(lines: list[str]) -> list[Section]:
    head = lines[0].strip()
    if head.startswith("*** "):
        path = head[4:].strip()
        for suffix, err in ((" does not exist", "absent"), (" is not readable", "permission")):
            if path.endswith(suffix):
                gone = path[: -len(suffix)]
                return [Section(posixpath.normpath(gone) if gone.startswith("/") else gone,
                                "", err)]
        body = lines[1:]
        if body and body[0].startswith("*** ls:"):
            body = body[1:]
        norm = posixpath.normpath(path) if path.startswith("/") else path
        return [Section(norm, "\n".join(body).strip("\n"))]
    out: list[Section] = []
    start = 0
    for i in range(1, len(lines) + 1):
        if i == len(lines) or _CMD_LINE.match(lines[i]):
            out.append(Section(lines[start].strip(), "\n".join(lines[start + 1:i]).strip("\n")))
            start = i
    return out


def _kernel_from_scan(body: str) -> str:
    """Kernel lines of the "Scanning kernel log files" section, current boot preferred."""
    parts = re.split(r"^\s{2}(\S.*):\s*$", body, flags=re.M)
    named = dict(zip(parts[1::2], parts[2::2], strict=True))
    for key in ("journalctl -b -0", "journalctl -b 0"):
        if key in named:
            return kernel_lines(named[key])
    return kernel_lines(body)


def _name_for(sec: Section) -> str | None:
    h = sec.header
    if h.startswith("/") and not _CMD_LINE.match(h):
        return source_for_section(h)
    return source_for_command(h)


def _add(out: dict[str, tuple[str, str | None, str | None]], name: str, sec: Section) -> None:
    """Record a section under its source (sections of one source are joined)."""
    body: str | None = sec.body + "\n" if sec.error is None else None
    prev = out.get(name)
    if prev and prev[1] is not None and body is not None:
        out[name] = (f"{prev[0]}, {sec.header}", prev[1] + body, None)
    elif prev is None or prev[1] is None:
        out[name] = (sec.header, body, sec.error)


def _uname(out: dict[str, tuple[str, str | None, str | None]], sec: Section) -> bool:
    """Take the ``uname:`` line of the prologue; whether the section is that line."""
    if sec.header.startswith("uname:"):
        out.setdefault("uname", (sec.header, sec.header[6:].strip() + "\n", None))
        return True
    for ln in split_lines(sec.body):
        if ln.startswith("uname:"):
            out.setdefault("uname", ("uname", ln[6:].strip() + "\n", None))
    return False


def _tree_doc(files: dict[str, str]) -> str:
    return json.dumps({"files": files, "links": {}, "errors": {}}, indent=1, sort_keys=True)


def split_with_headers(text: str) -> dict[str, tuple[str, str | None, str | None]]:
    """Source name -> ``(section header, text or None, error kind or None)``."""
    out: dict[str, tuple[str, str | None, str | None]] = {}
    trees: dict[str, tuple[str, dict[str, str]]] = {}  # name -> (glob, files)
    scan: Section | None = None
    for sec in sections(text):
        if sec.header.startswith("Scanning kernel log files"):
            scan = sec
            continue
        if _uname(out, sec):
            continue
        name = _name_for(sec)
        if name is None:
            continue
        src = sources.get(name)
        if src.kind == "tree":
            files = trees.setdefault(name, (report_pattern(sec.header) or "", {}))[1]
            if sec.error is None:
                files[posixpath.relpath(sec.header, src.path or "/")] = sec.body + "\n"
            continue
        _add(out, name, sec)
    for name, (pattern, files) in trees.items():
        if files:
            out[name] = (pattern, _tree_doc(files), None)
    if scan is not None and (out.get("kernel_log") or ("", None, None))[1] is None:
        body = _kernel_from_scan(scan.body)
        if body:
            out["kernel_log"] = (scan.header, body, None)
    return out


def split_bug_report(text: str) -> dict[str, str]:
    """Map the report's sections onto source names: ``{name: text}`` (readable ones only)."""
    return {name: body for name, (_, body, _) in split_with_headers(text).items()
            if body is not None}
