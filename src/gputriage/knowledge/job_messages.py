"""The catalog of messages a job prints when the GPU stack fails it: CUDA runtime and
driver API errors, NVML errors, the container stack's errors and the frameworks' own
words (PyTorch, TensorFlow, cuBLAS, cuDNN).

Knowledge as data, two kinds of table in this package:

- ``cuda_errors.csv``: one row per ``cudaError_t`` value (``code``), its runtime enum
  (``enum``: ``cudaErrorInsufficientDriver``), its driver API name (``cu_name``:
  ``CUDA_ERROR_INSUFFICIENT_DRIVER``) and the runtime's message text (``message``). A
  line names the error by any of the three, or by its number next to the word CUDA
  (``cudaGetDeviceCount returned 35``, ``CUDA error 700``, ``Error 802:``).
- ``messages/<family>.csv``: one row per other message, ``id`` and ``pattern`` (a
  regular expression, matched case-insensitively; its named groups are the message's
  fields: ``version``, ``cause``, ``want``...). The file's name is the family.

Both carry this project's judgement in the closed vocabularies of
:mod:`gputriage.model`: ``meaning`` (what the message says), ``cause`` (its likely
cause), ``blame`` (``node``, ``config``, ``job``, ``job-config`` or ``unknown``: whose
fault it is when nothing else is known), ``action``, ``severity`` and ``next`` (the
next step). Rules refine blame and severity with the host's facts; ``gputriage
explain`` prints the rows as they are. Loaded once, on first use.
"""

from __future__ import annotations

import csv
import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources

from gputriage.model import Action, Blame, Severity

__all__ = ["CUDA_FAMILY", "Hit", "Message", "catalog", "cuda_error", "find", "scan",
           "scan_line"]

CUDA_FAMILY = "cuda"
# words that must be on a line for any message to be looked for (a cheap first filter)
_WORDS = re.compile(r"cuda|nvml|nvidia|cublas|cudnn|gpu|driver|runtime|cdi|hook|device|"
                    r"oci|nccl|ptx|sm_\d|kernel image|out of memory", re.IGNORECASE)
# a cudaError_t number next to CUDA words: "cudaGetDeviceCount returned 35",
# "CUDA error 700", "cuda runtime error (35)", "Error 802: system not yet initialized"
_CUDA_NUMBER = re.compile(
    r"(?:\bcuda\w*(?:\(\))?\s+returned|\bcuda(?:\s+runtime)?\s+error|\bcudaError|"
    r"\bCUresult|\berror(?:\s+code)?)\s*[:=]?\s*\(?(?P<code>\d{1,3})\)?(?!\.\d|\d)",
    re.IGNORECASE)


@dataclass(frozen=True)
class Message:
    """One message of the catalog and this project's judgement of it."""

    id: str  # "cuda.35", "nvml.unknown-error", "container.unknown-runtime"
    family: str  # cuda | nvml | container | framework (the table it comes from)
    meaning: str
    cause: str
    blame: Blame
    action: Action
    severity: Severity
    next: str
    patterns: tuple[re.Pattern[str], ...] = ()
    code: int | None = None  # cudaError_t value (family cuda)
    name: str | None = None  # cudaError_t enum name
    cu_name: str | None = None  # CUresult name
    text: str | None = None  # the runtime's own message


@dataclass(frozen=True)
class Hit:
    """A message found on one line of a job's output."""

    message: Message
    line: str
    lineno: int  # 0-based index of the line in what was scanned
    fields: dict[str, str] = field(default_factory=dict)  # the pattern's named groups


def _rows(name: str) -> list[dict[str, str]]:
    text = resources.files("gputriage.knowledge").joinpath(name).read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return list(csv.DictReader(lines))


def _judgement(row: dict[str, str], where: str) -> dict:
    try:
        return {"meaning": row["meaning"].strip(), "cause": row["cause"].strip(),
                "blame": Blame(row["blame"].strip()), "action": Action(row["action"].strip()),
                "severity": Severity(row["severity"].strip()), "next": row["next"].strip()}
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc


def _cuda_rows() -> Iterator[Message]:
    for row in _rows("cuda_errors.csv"):
        code = int(row["code"])
        name, cu_name, text = row["enum"].strip(), row["cu_name"].strip(), row["message"].strip()
        pats = [re.compile(rf"\b{re.escape(n)}\b") for n in (name, cu_name) if n]
        if text:
            pats.append(re.compile(re.escape(text), re.IGNORECASE))
        yield Message(f"cuda.{code}", CUDA_FAMILY, patterns=tuple(pats), code=code,
                      name=name or None, cu_name=cu_name or None, text=text or None,
                      **_judgement(row, f"cuda_errors.csv code {code}"))


def _family_rows() -> Iterator[Message]:
    folder = resources.files("gputriage.knowledge").joinpath("messages")
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".csv"):
            continue
        family = entry.name.removesuffix(".csv")
        for row in _rows(f"messages/{entry.name}"):
            where = f"messages/{entry.name} {row.get('id')}"
            try:
                pattern = re.compile(row["pattern"], re.IGNORECASE)
            except re.error as exc:
                raise ValueError(f"{where}: {exc}") from exc
            yield Message(row["id"].strip(), family, patterns=(pattern,),
                          **_judgement(row, where))


@functools.cache
def catalog() -> tuple[Message, ...]:
    """Every message: the CUDA errors first (by code), then each family's rows."""
    out = tuple(_cuda_rows()) + tuple(_family_rows())
    ids = [m.id for m in out]
    if len(ids) != len(set(ids)):
        raise ValueError(f"duplicate message ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    return out


@functools.cache
def _cuda_index() -> dict[str, Message]:
    index: dict[str, Message] = {}
    for msg in catalog():
        if msg.code is None:
            continue
        index[str(msg.code)] = msg
        for key in (msg.name, msg.cu_name):
            if key:
                index[key.lower()] = msg
    return index


def cuda_error(key: int | str) -> Message | None:
    """The CUDA error of a number, a runtime enum name or a driver API name."""
    return _cuda_index().get(str(key).strip().lower())


def scan_line(line: str, lineno: int = 0) -> list[Hit]:
    """The messages on one line, each once, in catalog order."""
    if not _WORDS.search(line):
        return []
    hits: list[Hit] = []
    for msg in catalog():
        for pat in msg.patterns:
            if m := pat.search(line):
                fields = {k: v for k, v in m.groupdict().items() if v is not None}
                hits.append(Hit(msg, line, lineno, fields))
                break
    if "cuda" in line.lower() and not any(h.message.family == CUDA_FAMILY for h in hits):
        for m in _CUDA_NUMBER.finditer(line):
            if known := cuda_error(m.group("code")):
                hits.append(Hit(known, line, lineno, {"code": m.group("code")}))
                break
    return hits


def scan(lines: Iterable[str]) -> list[Hit]:
    """The messages of each line, in line order."""
    return [hit for i, line in enumerate(lines) for hit in scan_line(line, i)]


def find(text: str) -> list[Message]:
    """The messages a short text names (``gputriage explain``): a CUDA error's number or
    name alone, or the messages found on its lines, each once."""
    bare = text.strip().strip("'\"`").strip()
    known = cuda_error(bare)
    if known is not None:
        return [known]
    found: list[Message] = []
    for hit in scan(text.splitlines()):
        if hit.message not in found:
            found.append(hit.message)
    return found
