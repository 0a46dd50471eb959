"""Which source a command line, a file read, or a bug-report section produces: the
tables are derived from the sources' ``aliases`` (see :mod:`gputriage.sources` for
their grammar) and from the paths of file sources.

A command is looked at after ``sudo``/``env``/``command`` and ``VAR=value`` prefixes;
a launcher (``mpirun``, ``srun``...) stands for the first program it runs that an
alias names; a reader (``cat``, ``tail``, ``zcat``, ``grep``...) stands for the
first file it reads that a source is.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from gputriage import sources

__all__ = ["REPORT_PREFIX", "CommandAlias", "command_aliases", "programs", "report_pattern",
           "source_for_command", "source_for_path", "source_for_section", "subcommands"]

REPORT_PREFIX = "*** "  # an alias naming a file section of an nvidia-bug-report log
_PREFIXES = frozenset({"sudo", "env", "command"})
_LAUNCHERS = frozenset({"mpirun", "mpiexec", "orterun", "prterun", "srun", "salloc"})
_READERS = frozenset({"cat", "tail", "head", "less", "more", "zcat", "grep"})
_PLAIN = re.compile(r"[\w.+-]+")


@dataclass(frozen=True)
class _Word:
    """One word of a command alias: alternatives, maybe negated or optional."""

    forms: tuple[str, ...]
    negated: bool = False
    optional: bool = False

    @classmethod
    def parse(cls, text: str) -> _Word:
        negated, optional = text.startswith("!"), text.startswith("?")
        return cls(tuple((text[1:] if negated or optional else text).split("|")), negated,
                   optional)

    def takes(self, arg: str) -> bool:
        """Whether one argument is one of the word's forms."""
        return any(_form_takes(f, arg) for f in self.forms if not f.startswith("~"))

    def holds(self, args: list[str], line: str) -> bool:
        """Whether the command has the word (before negation)."""
        low = line.lower()
        return any(f[1:].lower() in low for f in self.forms if f.startswith("~")) or any(
            self.takes(a) for a in args)


def _form_takes(form: str, arg: str) -> bool:
    if form == "#":
        return arg.isdigit()
    return fnmatchcase(arg, form)


@dataclass(frozen=True)
class CommandAlias:
    """A command line that produces a source: a program (a glob on its base name)
    and the words its arguments must have."""

    source: str
    program: str
    words: tuple[_Word, ...]

    @classmethod
    def parse(cls, source: str, text: str) -> CommandAlias:
        program, *words = text.split()
        return cls(source, program, tuple(_Word.parse(w) for w in words))

    def example(self) -> str:
        """A command line the alias stands for (each word's first form)."""
        words = [w.forms[0].lstrip("~") for w in self.words if not (w.negated or w.optional)]
        return " ".join([self.program, *words])

    @property
    def weight(self) -> int:
        """How specific the alias is: the words a command must (not) have."""
        return sum(1 for w in self.words if not w.optional)

    def matches(self, program: str, args: list[str], line: str) -> bool:
        if not fnmatchcase(program, self.program):
            return False
        for w in self.words:
            if not w.optional and w.holds(args, line) == w.negated:
                return False
        if any(w.optional for w in self.words):  # exact: no argument besides the words'
            kept = [w for w in self.words if not w.negated]
            return all(any(w.takes(a) for w in kept) for a in args)
        return True


def _is_path_alias(alias: str) -> bool:
    return alias.startswith(("/", REPORT_PREFIX))


def command_aliases() -> list[CommandAlias]:
    """Every command alias, in the order the sources declare them."""
    return [CommandAlias.parse(s.name, a) for s in sources.SOURCES for a in s.aliases
            if not _is_path_alias(a)]


_ALIASES = command_aliases()


def _path_patterns(report: bool) -> list[tuple[str, str]]:
    """(glob, source) for files read by a command (``report``: bug-report sections)."""
    out = []
    for s in sources.SOURCES:
        if s.kind == "file" and s.path:
            out.append((s.path, s.name))
        for a in s.aliases:
            if report and a.startswith(REPORT_PREFIX):
                out.append((a[len(REPORT_PREFIX):], s.name))
            elif not report and a.startswith("/"):
                out.append((a, s.name))
    return out


_READ_PATHS = _path_patterns(report=False)
_REPORT_PATHS = _path_patterns(report=True)


def programs() -> list[str]:
    """The plain program names the aliases run (globs and bug-report headers left out)."""
    seen: dict[str, None] = {}
    for a in _ALIASES:
        if _PLAIN.fullmatch(a.program):
            seen.setdefault(a.program, None)
    return list(seen)


def subcommands() -> list[str]:
    """Plain words the aliases require after their program (``topo``, ``show``...)."""
    seen: dict[str, None] = {}
    for a in _ALIASES:
        for w in a.words:
            if w.negated or w.optional:
                continue
            for f in w.forms:
                if re.fullmatch(r"[A-Za-z][\w-]*", f):
                    seen.setdefault(f, None)
    return list(seen)


def source_for_path(path: str) -> str | None:
    """The source a file is, when a command prints it (``cat /proc/modules``); a relative
    path is taken from the root (``cat fabricmanager.log`` in its folder)."""
    full = path if path.startswith("/") else "/" + path
    return next((name for pat, name in _READ_PATHS if fnmatchcase(full, pat)), None)


def source_for_section(path: str) -> str | None:
    """The source a file section of an nvidia-bug-report log (``*** /path``) holds."""
    return next((name for pat, name in _REPORT_PATHS if fnmatchcase(path, pat)), None)


def report_pattern(path: str) -> str | None:
    """The bug-report section glob a path matched (names a tree's gathered sections)."""
    return next((pat for pat, _ in _REPORT_PATHS if fnmatchcase(path, pat)), None)


def _words(cmd: str) -> list[str]:
    """The first pipeline stage's words, without sudo/env/``VAR=value`` prefixes."""
    first = cmd.split("|")[0].split()
    while first and (first[0] in _PREFIXES or "=" in first[0]):
        first = first[1:]
    return first


def _matched(program: str) -> bool:
    return any(fnmatchcase(program, a.program) for a in _ALIASES)


def source_for_command(cmd: str) -> str | None:
    """The source a command line (``sudo nvidia-smi -q | grep X``) produces, if known."""
    words = _words(cmd)
    if not words:
        return None
    prog = os.path.basename(words[0])
    args = [a.strip("'\"") for a in words[1:]]
    if prog in _LAUNCHERS:
        at = next((i for i, a in enumerate(args) if _matched(os.path.basename(a))), None)
        return None if at is None else source_for_command(" ".join(args[at:]))
    if prog in _READERS:
        return next((s for a in args if (s := source_for_path(a))), None)
    best: CommandAlias | None = None
    for alias in _ALIASES:
        if alias.matches(prog, args, cmd) and (best is None or alias.weight > best.weight):
            best = alias
    return best.source if best else None
