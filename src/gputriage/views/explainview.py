"""``gputriage explain TEXT...``: what a job's error message means, from the catalog of
:mod:`gputriage.knowledge.job_messages`.

For each message found: its id (and, for a CUDA error, its number and names), what it
means, its likely cause, whose fault it is when nothing else is known, the action and
the next step, the host facts that would settle it, and the fields its pattern captured
(a CUDA version printed as ``11040`` is decoded: 11.4). Plain text, no rich: on a
terminal the values wrap between words at its width; piped, each is one line.
"""

from __future__ import annotations

import re
from typing import IO, Any

from gputriage.engine.judged import Verdict
from gputriage.knowledge.job_messages import Hit, Message
from gputriage.text.safe import printable
from gputriage.vocabulary import ACTION_WORDS as VOCABULARY_ACTIONS

__all__ = ["KNOWS", "Judged", "explain_json", "render_explained"]

# one input text and each message found in it with its verdict
Judged = tuple[str, list[tuple[Hit, Verdict]]]

BLAME_WORDS = {
    "node": "the node (its hardware or driver), not the job",
    "config": "the node's configuration (its setup or software), not the job",
    "job": "the job (the application), not the node",
    "job-config": "the job's settings (its image, build or environment), not the node",
    "unknown": "not known from the message alone: it takes the host's facts",
}
ACTION_WORDS = {**VOCABULARY_ACTIONS, "none": "nothing to do from the message alone"}
FAMILY_WORDS = {"cuda": "CUDA error", "nvml": "NVML error",
                "container": "error of the container stack", "framework": "framework error",
                "nccl": "NCCL warning", "node": "message of the node's tools"}
KNOWS = ("CUDA runtime and driver API errors (by number next to the word CUDA, cudaError "
         "name, CUDA_ERROR name or message text), NVML errors, the container runtime's "
         "errors (nvidia-container-cli, the NVIDIA runtime and hook, Docker, containerd, "
         "CRI-O, Podman, CDI), the frameworks' GPU errors (PyTorch, TensorFlow, cuBLAS, "
         "cuDNN), NCCL's WARNs whose cause is known and the node's own messages (nvidia-smi's "
         "infoROM warning, the kernel module's missing GSP firmware)")
CONFIRM = ("run `gputriage check` on the node, or `gputriage analyze` the job's log "
           "together with the node's outputs (nvidia-smi -q, the kernel log)")
_LABEL = 14


def cuda_version(value: str) -> str | None:
    """``"11040"`` -> ``"11.4"`` (the driver and runtime APIs print a CUDA version as
    1000 * major + 10 * minor); None when ``value`` is not such a number."""
    if not (value.isascii() and value.isdigit() and 4 <= len(value) <= 6):
        return None
    number = int(value)
    major, minor = number // 1000, number % 1000 // 10
    return f"{major}.{minor}" if 1 <= major <= 99 else None


def _field_notes(fields: dict[str, str]) -> list[str]:
    notes = []
    for name, value in fields.items():
        if name == "code":
            continue
        note = f"{name} = {value}"
        version = cuda_version(value) if re.search(r"found|version|cuda", name) else None
        if version:
            note += f" (CUDA {version}: the number is 1000 x major + 10 x minor)"
        notes.append(note)
    return notes


def _rows(msg: Message, hit: Hit | None, verdict: Verdict) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if msg.code is not None:
        names = " / ".join(n for n in (msg.name, msg.cu_name) if n)
        rows.append(("CUDA error", f"{msg.code} {names}".strip()))
    rows += [("meaning", msg.meaning), ("likely cause", msg.cause)]
    if verdict.finding and verdict.title:
        rows.append(("here", f"{verdict.title} ({verdict.finding})"))
    blame, action = verdict.blame.value, verdict.action.value
    rows += [("whose fault", BLAME_WORDS.get(blame, blame)),
             ("action", f"{action}: {ACTION_WORDS.get(action, '-')}"),
             ("next step", verdict.step or msg.next)]
    if msg.decide:
        rows.append(("decided by", msg.decide))
    if msg.source:
        rows.append(("source", msg.source))
    if msg.decide or blame == "unknown":
        rows.append(("to confirm", CONFIRM))
    if hit is not None:
        rows += [("captured", note) for note in _field_notes(hit.fields)]
        if hit.line.strip() and hit.line.strip() != msg.name:
            rows.append(("on the line", hit.line.strip()))
    return rows


def _write_rows(out: IO[str], rows: list[tuple[str, str]], width: int | None) -> None:
    for label, value in rows:
        head = f"  {label:<{_LABEL}} "
        if width is None or len(head) + len(value) <= width:
            out.write(f"{head}{value}\n")
            continue
        import textwrap  # a terminal's only
        lines = textwrap.wrap(value, width=max(20, width - len(head)),
                              break_long_words=False, break_on_hyphens=False)
        out.write(head + lines[0] + "\n")
        for more in lines[1:]:
            out.write(" " * len(head) + more + "\n")


def render_explained(found: list[Judged], out: IO[str], *,
                     width: int | None = None) -> None:
    """Each input text and the messages found in it; ``width`` wraps values between
    words (a terminal's), None prints each value on one line (piped)."""
    first = True
    for text, hits in found:
        if not first:
            out.write("\n")
        first = False
        if not hits:
            _unknown(text, out, width)
            continue
        for i, (hit, verdict) in enumerate(hits):
            if i:
                out.write("\n")
            msg = hit.message
            out.write(f"{msg.id}  {verdict.severity.value.upper()}  {_title(msg)}\n")
            _write_rows(out, _rows(msg, hit if hit.line != text.strip() else
                                   Hit(msg, "", 0, hit.fields), verdict), width)


def _title(msg: Message) -> str:
    return msg.text or msg.title or FAMILY_WORDS.get(msg.family, f"{msg.family} message")


def explained_lines(found: list[Judged]) -> list[str]:
    """One line per message found (``-q``): severity, id, whose fault, what it is and
    the action; one line per text that holds none."""
    lines: list[str] = []
    for text, hits in found:
        if not hits:
            shown = " ".join(text.split())
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            lines.append(printable(f"UNKNOWN not a message gputriage knows: {shown!r}"))
        for hit, verdict in hits:
            action = ACTION_WORDS.get(verdict.action.value, verdict.action.value)
            lines.append(printable(f"{verdict.severity.value.upper()} {hit.message.id} "
                                   f"[{verdict.blame.value}]: {_title(hit.message)} — "
                                   f"{action}"))
    return lines


def _unknown(text: str, out: IO[str], width: int | None) -> None:
    shown = " ".join(text.split())
    if len(shown) > 200:
        shown = shown[:197] + "..."
    out.write(f"not a message gputriage knows: {shown!r}\n")
    rows = [("it knows", KNOWS)]
    if text.strip().isdigit():
        rows.append(("an Xid?", f"for Xid {text.strip()} from the kernel log: "
                                f"gputriage xid {text.strip()}"))
    _write_rows(out, rows, width)


def _entry(hit: Hit, verdict: Verdict) -> dict[str, Any]:
    msg = hit.message
    cuda = ({"code": msg.code, "enum": msg.name, "cu_name": msg.cu_name, "text": msg.text}
            if msg.code is not None else None)
    return {"id": msg.id, "family": msg.family, "cuda": cuda, "meaning": msg.meaning,
            "cause": msg.cause, "blame": verdict.blame.value, "action": verdict.action.value,
            "severity": verdict.severity.value, "next": msg.next, "step": verdict.step,
            "finding": verdict.finding,
            "needs": msg.decide or None, "source": msg.source or None,
            "fields": dict(hit.fields),
            "notes": _field_notes(hit.fields), "line": hit.line, "lineno": hit.lineno}


def explain_json(found: list[Judged]) -> list[dict[str, Any]]:
    """The inputs and what was found in each, as plain JSON data."""
    return [{"text": text, "known": bool(hits), "messages": [_entry(*h) for h in hits]}
            for text, hits in found]
