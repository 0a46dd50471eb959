"""The catalog of messages a job prints when the GPU stack fails it: CUDA runtime and
driver API errors, NVML errors, the container stack's errors and the frameworks' own
words (PyTorch, TensorFlow, cuBLAS, cuDNN).

Knowledge as data, two kinds of table in this package:

- ``cuda_errors.csv``: one row per ``cudaError_t`` value (``code``), its runtime enum
  (``enum``: ``cudaErrorNoDevice``), its driver API name where ``cuda.h`` has one
  (``cu_name``: ``CUDA_ERROR_NO_DEVICE``), the runtime's message text (``message``) and
  other texts printed for it (``also``, ``|`` between). A line names the error by any
  of these, or by its number next to the word CUDA (``cudaGetDeviceCount returned 35``,
  ``CUDA error 700``, ``Error 802:``). A text too common to stand alone (``generic``:
  "out of memory", "unknown error") counts only on a line that names CUDA.
- ``messages/<family>.csv``: one row per other message, ``id`` and ``pattern`` (a
  regular expression, matched case-insensitively; its named groups are the message's
  fields: ``version``, ``cause``, ``want``...) and ``sample`` (one line as the tool
  prints it, which ``explain`` and ``analyze`` must judge alike). The file's name is
  the family.

Both carry this project's judgement in the closed vocabularies of
:mod:`gputriage.model`: ``meaning`` (what the message says), ``cause`` (its likely
cause), ``blame`` (``node``, ``config``, ``job``, ``job-config`` or ``unknown``: whose
fault it is when nothing else is known), ``action``, ``severity``, ``next`` (the
next step) and, optionally, ``decide`` (the host facts that settle whose fault it is).
Rules refine blame and severity with the host's facts; ``gputriage explain`` prints the
rows as they are. Loaded once, on first use.
"""

from __future__ import annotations

import csv
import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gputriage.text.literals import required_literals
from gputriage.vocabulary import Action, Blame, Severity

__all__ = ["CUDA_FAMILY", "FRAMEWORK_FAMILY", "WRAPPERS", "Hit", "Message", "catalog",
           "cuda_error", "find", "find_hits", "message", "one_per_line", "scan", "scan_line",
           "scan_literals"]

CUDA_FAMILY = "cuda"
FRAMEWORK_FAMILY = "framework"  # messages/framework.csv: PyTorch, JAX, cuBLAS, cuDNN, NGC
_HERE = Path(__file__).parent  # the tables beside this module (importlib.resources is slow
# to import, and start-up is what `gputriage explain` is measured on)
# words that must be on a line for any message to be looked for (a cheap first filter),
# searched in the lowered line: a case-sensitive alternation runs ten times faster than
# the same under IGNORECASE, and it runs on every line of a paste
CATALOG_WORDS = re.compile(
    r"cuda|curesult|nvml|nvidia|cublas|cudnn|gpu|driver|runtime|cdi|hook|device|"
    r"oci|nccl|ptx|sm_[0-9]|kernel image|out of memory|launch|ecc|nvlink|"
    r"illegal|os call|not yet initiali[sz]ed|forward compat|tegra|selinux|"
    r"name for group")
# a line that names CUDA itself (not libcuda.so): where a generic text counts
_CUDA_CONTEXT = re.compile(
    r"(?<![a-z])cuda(?:(?![a-z])|error|get|set|malloc|memcpy|launch|stream|device|runtime)"
    r"|\bcuresult\b", re.IGNORECASE)
# a cudaError_t number next to CUDA words: "cudaGetDeviceCount returned 35",
# "CUDA error 700", "cuda runtime error (35)", "Cuda failure 1", "CUresult 999"; or
# PyTorch's "Error 802: system not yet initialized" on a line that names CUDA
_CUDA_NUMBER = (
    re.compile(r"(?:\bcuda\w*(?:\(\))?\s+returned|\bcuda(?:\s+runtime)?\s+(?:error|failure)|"
               r"\bCUresult|\berror\s+code)\s*[:=]?\s*\(?(?P<code>[0-9]{1,3})\)?"
               r"(?!\.[0-9]|[0-9])", re.IGNORECASE),
    re.compile(r"\berror\s+(?P<code>[0-9]{1,3}):", re.IGNORECASE),
)
# a runtime enum or driver API name
_CUDA_NAME = re.compile(r"\b(?:cudaError[A-Za-z]+|CUDA_ERROR_[A-Z_]+)\b")
# how far before a generic text the line must name CUDA ("CUDA error: out of memory")
_GENERIC_REACH = 48


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
    patterns: tuple[re.Pattern[str], ...] = ()  # the family rows' (CUDA: names and texts)
    code: int | None = None  # cudaError_t value (family cuda)
    name: str | None = None  # cudaError_t enum name
    cu_name: str | None = None  # CUresult name
    text: str | None = None  # the runtime's own message
    also: tuple[str, ...] = ()  # other texts printed for the same error
    generic: bool = False  # its texts count only on a line that names CUDA
    decide: str = ""  # the host facts that settle whose fault it is
    title: str = ""  # the finding's title (the NCCL and node catalogs' rows)
    source: str = ""  # where the facts come from (the NCCL and node catalogs' rows)
    sample: str = ""  # a line as the tool prints it (the family rows' ``sample``)


@dataclass(frozen=True)
class Hit:
    """A message found on one line of a job's output."""

    message: Message
    line: str
    lineno: int  # 0-based index of the line in what was scanned
    fields: dict[str, str] = field(default_factory=dict)  # the pattern's named groups


def _rows(name: str) -> list[dict[str, str]]:
    text = (_HERE / name).read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return list(csv.DictReader(lines))


def _judgement(row: dict[str, str], where: str) -> dict:
    try:
        return {"meaning": row["meaning"].strip(), "cause": row["cause"].strip(),
                "blame": Blame(row["blame"].strip()), "action": Action(row["action"].strip()),
                "severity": Severity(row["severity"].strip()), "next": row["next"].strip(),
                "decide": (row.get("decide") or "").strip()}
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc


def _cuda_rows() -> Iterator[Message]:
    for row in _rows("cuda_errors.csv"):
        where = f"cuda_errors.csv code {row.get('code')}"
        try:
            code = int(row["code"])
            generic = {"yes": True, "": False}[row["generic"].strip()]
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from exc
        name, cu_name, text = row["enum"].strip(), row["cu_name"].strip(), row["message"].strip()
        also = tuple(t.strip() for t in row["also"].split("|") if t.strip())
        yield Message(f"cuda.{code}", CUDA_FAMILY, code=code, name=name or None,
                      cu_name=cu_name or None, text=text or None, also=also, generic=generic,
                      **_judgement(row, where))


def _family_rows() -> Iterator[Message]:
    folder = _HERE / "messages"
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
                          sample=(row.get("sample") or "").strip(), **_judgement(row, where))


@functools.cache
def _cuda_catalog() -> tuple[Message, ...]:
    """The CUDA errors alone (a number or a name is looked up without the families'
    patterns being compiled)."""
    return tuple(_cuda_rows())


@functools.cache
def catalog() -> tuple[Message, ...]:
    """Every message: the CUDA errors first (by code), then each family's rows."""
    out = _cuda_catalog() + tuple(_family_rows())
    ids = [m.id for m in out]
    if len(ids) != len(set(ids)):
        raise ValueError(f"duplicate message ids: {sorted({i for i in ids if ids.count(i) > 1})}")
    return out


@functools.cache
def _cuda_index() -> dict[str, Message]:
    index: dict[str, Message] = {}
    for msg in _cuda_catalog():
        index[str(msg.code)] = msg
        for key in (msg.name, msg.cu_name):
            if key:
                index[key.lower()] = msg
    return index


@functools.cache
def _cuda_texts() -> tuple[tuple[str, Message], ...]:
    """(text in lower case, its closing full stop dropped; message), longest first."""
    pairs = [(t.rstrip(".").lower(), m) for m in _cuda_catalog()
             for t in (m.text, *m.also) if t]
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))


@functools.cache
def _by_id() -> dict[str, Message]:
    return {m.id: m for m in catalog()}


def message(mid: str) -> Message | None:
    """The message of an id (``cuda.401``, ``container.selinux-denied``, ``nvml.os-blocked``)."""
    return _by_id().get(mid)


def cuda_error(key: int | str) -> Message | None:
    """The CUDA error of a number, a runtime enum name or a driver API name."""
    return _cuda_index().get(str(key).strip().lower())


def _cuda_hits(line: str, lineno: int) -> dict[Message, Hit]:
    """The CUDA errors a line names: by runtime or driver API name (as code prints them),
    or by message text in any case (a generic text only after the word CUDA)."""
    found: dict[Message, Hit] = {}
    for m in _CUDA_NAME.finditer(line):
        msg = _cuda_index().get(m.group(0).lower())
        if msg is not None and m.group(0) in (msg.name, msg.cu_name):
            found.setdefault(msg, Hit(msg, line, lineno))
    lower = line.lower()
    for text, msg in _cuda_texts():
        if (at := lower.find(text)) < 0 or msg in found:  # (a message hashes slowly)
            continue
        if msg.generic and not _CUDA_CONTEXT.search(line, max(0, at - _GENERIC_REACH), at):
            continue  # "out of memory" that CUDA did not say
        found[msg] = Hit(msg, line, lineno)
    return found


# A pattern matched ignoring case is slow to search (no literal lead helps it), and a
# GPU node's host name ("gpu-b12") lets every line of its logs past CATALOG_WORDS. So
# each pattern is searched only on a line that holds, in lower case, one of the literals
# every match of it holds (text.literals); on an ASCII line that is exact: there,
# ignoring case is comparing in lower case.
@functools.cache
def _family_patterns() -> tuple[tuple[Message, tuple[tuple[re.Pattern[str],
                                                             tuple[str, ...] | None], ...]], ...]:
    """Each message of the catalog with its patterns and the literals they need."""
    def needs(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
        found = required_literals(pattern)
        return None if found is None else tuple(found)
    return tuple((msg, tuple((p, needs(p)) for p in msg.patterns)) for msg in catalog())


@functools.cache
def _literals() -> tuple[tuple[str, ...], bool]:
    """Every literal the catalog's patterns need (:func:`_family_patterns`), and whether
    a pattern needs none."""
    found: set[str] = set()
    unguarded = False
    for msg, patterns in _family_patterns():
        for _, needs in patterns if msg.code is None else ():
            unguarded = unguarded or needs is None
            found.update(needs or ())
    return tuple(sorted(found)), unguarded


def scan_line(line: str, lineno: int = 0, held: frozenset[str] | None = None) -> list[Hit]:
    """The messages on one line, each once, in catalog order. ``held``: the literals of
    :func:`scan_literals` an ASCII line holds (in lower case), where the caller found
    them for all its lines at once (None: looked for here)."""
    lower = line.lower()
    if not CATALOG_WORDS.search(lower):
        return []
    cuda = _cuda_hits(line, lineno)
    hits: list[Hit] = []
    literals, unguarded = _literals()
    # the literals the line holds (each looked for once, not once per pattern); None on
    # a line that is not ASCII, where every pattern is searched (the literals of
    # scan_literals that no pattern needs are disjoint from every pattern's needs)
    if held is None:
        held = frozenset(t for t in literals if t in lower) if line.isascii() else None
    searched = _family_patterns() if cuda or unguarded or held is None or held else ()
    for msg, patterns in searched:
        if msg.code is not None:
            if cuda and msg in cuda:
                hits.append(cuda[msg])
            continue
        for pat, needs in patterns:
            if held is not None and needs is not None and held.isdisjoint(needs):
                continue
            if m := pat.search(line):
                fields = {k: v for k, v in m.groupdict().items() if v is not None}
                hits.append(Hit(msg, line, lineno, fields))
                break
    if not cuda and _CUDA_CONTEXT.search(line):
        for pattern in _CUDA_NUMBER:
            if hit := _numbered(pattern, line, lineno):
                hits.append(hit)
                break
    return hits


@functools.cache
def scan_literals() -> tuple[str, ...] | None:
    """Literals in lower case, one of which an ASCII line holds whenever
    :func:`scan_line` finds something on it: those the catalog's patterns need, CUDA's
    texts, and "cuda" and "curesult" (which a CUDA name and the words before a CUDA
    number hold). None while a pattern of the catalog needs none."""
    literals, unguarded = _literals()
    if unguarded:
        return None
    return tuple(dict.fromkeys((*literals, *(text for text, _ in _cuda_texts()), "cuda",
                                "curesult")))


def _numbered(pattern: re.Pattern[str], line: str, lineno: int) -> Hit | None:
    """The first known CUDA error number ``pattern`` finds on ``line``."""
    for m in pattern.finditer(line):
        if known := cuda_error(m.group("code")):
            return Hit(known, line, lineno, {"code": m.group("code")})
    return None


def scan(lines: Iterable[str]) -> list[Hit]:
    """The messages of each line, in line order."""
    return [hit for i, line in enumerate(lines) for hit in scan_line(line, i)]


# the container stack's messages that only wrap a cause printed with them (a prestart
# hook that failed, a CDI injection that failed): the cause's message speaks for them
WRAPPERS = frozenset({"container.hook-failed", "container.cdi-inject-failed"})
_CAUSE_REACH = 3  # lines after a wrapper where its cause may be printed
_ONE_PER_LINE = ("container", "nvml")  # families of which a line says one thing


def one_per_line(hits: list[Hit]) -> list[Hit]:
    """The hits that say something of their own, in their order: of the container and
    NVML messages of a line, the first container message (catalog order puts the
    specific before the wrappers) or, with none, the first NVML one; a wrapper only when
    no specific container message follows it within a few lines. The other families'
    hits are all kept. ``analyze`` and ``explain`` judge a text by these."""
    by_line: dict[int, list[Hit]] = {}
    for h in hits:
        if h.message.family in _ONE_PER_LINE:
            by_line.setdefault(h.lineno, []).append(h)

    def specific(lineno: int) -> list[Hit]:
        return [h for h in by_line.get(lineno, ()) if h.message.family == "container"
                and h.message.id not in WRAPPERS]

    chosen: set[int] = set()
    for lineno, line_hits in by_line.items():
        container = [h for h in line_hits if h.message.family == "container"]
        if here := specific(lineno):
            chosen.add(id(here[0]))
        elif not container:
            chosen.add(id(line_hits[0]))
        elif not any(specific(n) for n in range(lineno + 1, lineno + _CAUSE_REACH + 1)):
            chosen.add(id(container[0]))
    return [h for h in hits if h.message.family not in _ONE_PER_LINE or id(h) in chosen]


def find_hits(text: str) -> list[Hit]:
    """The messages a short text names (``gputriage explain``), each once: a CUDA error's
    number or name alone; else the messages found on its lines; else a CUDA error whose
    message text the whole text is ("unknown error": generic texts count here)."""
    bare = text.strip().strip("'\"`").strip()
    known = cuda_error(bare)
    if known is not None:
        return [Hit(known, bare, 0)]
    found: dict[Message, Hit] = {}
    for hit in one_per_line(scan(text.splitlines())):
        found.setdefault(hit.message, hit)
    if not found:
        whole = " ".join(bare.split()).rstrip(".").lower()
        for each, msg in _cuda_texts():
            if whole == each:
                return [Hit(msg, bare, 0)]
    return list(found.values())


def find(text: str) -> list[Message]:
    """The messages a short text names (see :func:`find_hits`)."""
    return [hit.message for hit in find_hits(text)]
