"""What ``dcgmi diag`` reports, as its table and its JSON both say it: the run, its tests
with each GPU's result, and the messages (warnings, info, errors) with the GPUs they name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.text.fields import strict_int

__all__ = ["ENTITY_GROUPS", "RETURN", "DiagMessage", "DiagReport", "DiagTest", "gpus_named",
           "status_word", "worst"]

_GPU_IN_TEXT = re.compile(r"\bGPU\s?([0-9]{1,4})\b")
RETURN = re.compile(r"Return:\s*\((?P<code>-?[0-9]{1,4})\)\s*:?\s*(?P<text>.*)$")  # dcgmi's
# the entity groups DCGM prints a result or a message for (dcgm_structs.h's names; NvSwitch
# and Link in older releases); longest first, so that a regex alternation takes CPU_CORE
ENTITY_GROUPS = ("CPU_CORE", "ConnectX", "NvSwitch", "Switch", "vGPU", "LINK", "Link", "GPU",
                 "CPU")


@dataclass
class DiagMessage:
    """A Warning, Info or Error DCGM printed: its words, the GPUs it names, its lines."""

    kind: str  # "warning" | "info" | "error"
    text: str
    gpus: tuple[int, ...] = ()
    lines: list[str] = field(default_factory=list)
    code: int | None = None  # DCGM's error id (dcgm_errors.h), JSON only
    category: int | None = None  # DCGM's error category, JSON (4.x) only
    entities: tuple[str, ...] = ()  # the other entities it is about ("CPU0", "Switch1")


@dataclass(eq=False)
class DiagTest:
    """One test (plugin) of the run: its overall result and each GPU's."""

    name: str
    category: str | None = None  # Deployment | Integration | Hardware | Stress | ...
    status: str | None = None  # pass | fail | skip | warn | not run (lower case)
    all_gpus: str | None = None  # the status given for "All" GPUs (2.x/3.x)
    gpus: dict[int, str] = field(default_factory=dict)  # GPU index -> status
    entities: dict[str, str] = field(default_factory=dict)  # "CPU0", "Switch1" -> status
    messages: list[DiagMessage] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """The name in lower case, underscores as spaces (``targeted power``)."""
        return self.name.lower().replace("_", " ").strip()

    def gpus_with(self, status: str) -> list[int]:
        return sorted(g for g, s in self.gpus.items() if s == status)

    def entities_with(self, *statuses: str) -> list[str]:
        """The other entities (CPUs, switches, links...) of that result, in order."""
        return [e for e, s in self.entities.items() if s in statuses]


@dataclass
class DiagReport:
    """A ``dcgmi diag`` run as printed: versions, the level, the tests, dcgmi's errors."""

    version: str | None = None  # DCGM's
    driver: str | None = None
    device_ids: list[str] = field(default_factory=list)
    command: str | None = None  # the dcgmi diag command line, when pasted with it
    level: int | None = None
    complete: bool = False  # the table's footer (or the whole JSON) is there
    tests: list[DiagTest] = field(default_factory=list)
    errors: list[DiagMessage] = field(default_factory=list)  # dcgmi's, outside the table
    return_code: int | None = None  # "Return: (-30)"
    return_text: str | None = None

    def test(self, key: str) -> DiagTest | None:
        """The test of that (lower case) name, if it ran."""
        return next((t for t in self.tests if t.key == key), None)


def gpus_named(text: str) -> tuple[int, ...]:
    """The GPU indexes a message names ("GPU 0", "GPU1"), each once, in order."""
    found = (strict_int(m, signed=False) for m in _GPU_IN_TEXT.findall(text))
    return tuple(dict.fromkeys(n for n in found if n is not None))


def status_word(word: str) -> str:
    """A result as the report keeps it: ``pass``, ``fail``, ``skip``, ``warn``..."""
    return word.strip().lower()


_RANK = {"fail": 4, "warn": 3, "pass": 2, "skip": 1, "not run": 0}


def worst(a: str | None, b: str) -> str:
    """The worse of two results (``a`` None: none yet)."""
    return b if a is None or _RANK.get(b, 0) > _RANK.get(a, 0) else a
