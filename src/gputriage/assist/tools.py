"""The read-only tools ``gputriage mcp`` serves, as plain functions: each takes the
tool's arguments and the server's :class:`Policy` and returns the document the CLI's
``--json`` prints for the same input (the same code path), or raises :class:`Refused`
with one line saying why. Nothing here collects this host, writes, acknowledges or
drains: the tools read what the caller hands over, and files only under the
directories the server was started with."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_MAX_TEXT_BYTES", "TOOLS", "Policy", "Refused", "ToolSpec", "allowed_path",
           "run_tool", "text_bytes"]

DEFAULT_MAX_TEXT_BYTES = 4 << 20  # a paste; a larger log is a file (--allow its folder)
MAX_PATHS = 16  # paths one call may name
MAX_CODES = 64  # Xid codes one call may name


class Refused(Exception):
    """A tool call that cannot be answered: bad or unreadable input, a path the server
    may not read. The message is one line for the caller."""


@dataclass(frozen=True)
class Policy:
    """What the server may read: files only under ``roots`` (resolved, symlinks
    followed; none: no file at all), pasted text up to ``max_text_bytes``."""

    roots: tuple[str, ...] = ()
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES

    @classmethod
    def of(cls, allowed: list[str] | tuple[str, ...], max_text_bytes: int) -> Policy:
        """The policy of ``--allow`` paths as given: each resolved once, at start."""
        return cls(tuple(dict.fromkeys(os.path.realpath(p) for p in allowed)), max_text_bytes)


def allowed_path(raw: str, policy: Policy) -> str:
    """``raw`` resolved (symlinks followed, relative to the server's directory), when it
    lies under one of the policy's roots; Refused otherwise. The resolved path is what
    is read, so a link cannot lead out of the roots after the check passed."""
    if not policy.roots:
        raise Refused("this server reads no file: it was started without --allow "
                      "(gputriage mcp --allow DIR names the folders it may read); "
                      "paste the text to analyze_text instead")
    if not raw or "\0" in raw or raw.strip() == "-":
        raise Refused(f"{raw!r} is not a file path (the server's standard input is the "
                      "protocol: paste text to analyze_text instead)")
    resolved = os.path.realpath(os.path.expanduser(raw))
    for root in policy.roots:
        if resolved == root or resolved.startswith(root.rstrip(os.sep) + os.sep):
            return resolved
    raise Refused(f"{raw} is outside what this server may read "
                  f"({', '.join(policy.roots)}): start it with --allow for that folder")


def text_bytes(text: str, policy: Policy) -> bytes:
    """The pasted text as the bytes a paste on stdin would be; Refused when empty or over
    the size cap (the cap is checked before anything else reads it)."""
    data = text.encode("utf-8", errors="surrogateescape")
    if len(data) > policy.max_text_bytes:
        from gputriage.io.inputs import human

        raise Refused(f"the text is {human(len(data))}, over this server's "
                      f"{human(policy.max_text_bytes)} limit: give a file under an allowed "
                      "folder instead (or start the server with a larger --max-text)")
    if not data.strip():
        raise Refused("the text is empty")
    return data


def _pasted(text: str, policy: Policy) -> Any:
    """A snapshot of pasted text, read exactly as ``gputriage analyze -`` reads stdin
    (binary data refused, NUL padding dropped, the detectors cut it into sources)."""
    from gputriage.ingest import load_opened
    from gputriage.io.inputs import BUDGETS, STREAM, Input, Stream

    name = "<pasted text>"
    problems: list[str] = []
    stream = Stream(name, problems, BUDGETS, fh=io.BytesIO(text_bytes(text, policy)))
    return load_opened(Input(name, "-", STREAM, stream, problems))


def _paths(paths: list[str], policy: Policy) -> list[str]:
    if not paths:
        raise Refused("no path given")
    if len(paths) > MAX_PATHS:
        raise Refused(f"{len(paths)} paths: at most {MAX_PATHS} in one call")
    return [allowed_path(p, policy) for p in paths]


def _window(since: str | None, boot: str | None) -> Any:
    """The kernel-log window, as ``--since`` / ``--boot`` give it."""
    from gputriage.facts.window import LogWindow

    try:
        return LogWindow.of(since, boot)
    except ValueError as exc:
        raise Refused(f"since/boot: {exc}") from None


def _result_document(snapshot: Any, window: Any) -> dict:
    """``gputriage analyze --json`` of a loaded snapshot (gputriage/result/v1)."""
    from gputriage.engine.analysis import analyze_facts
    from gputriage.facts.context import CheckContext
    from gputriage.facts.store import Facts
    from gputriage.results.document import to_json

    return to_json(analyze_facts(Facts(snapshot, window, CheckContext())))


def analyze_text(policy: Policy, text: str, since: str | None = None,
                 boot: str | None = None) -> dict:
    window = _window(since, boot)
    return _result_document(_pasted(text, policy), window)


def analyze_paths(policy: Policy, paths: list[str], since: str | None = None,
                  boot: str | None = None) -> dict:
    from gputriage.ingest import load_inputs

    window = _window(since, boot)
    return _result_document(load_inputs(_paths(paths, policy)), window)


def explain_error(policy: Policy, text: str) -> dict:
    from gputriage.commands.explain import STDIN_LIMIT, explain_document, explained
    from gputriage.io.inputs import human
    from gputriage.io.sniff import looks_binary

    data = text_bytes(text, policy)
    if len(data) > STDIN_LIMIT:  # what explain reads of stdin
        raise Refused(f"the message is {human(len(data))}: explain_error takes at most "
                      f"{human(STDIN_LIMIT)} (the lines around the error; a whole log goes "
                      "to analyze_text)")
    if looks_binary(data[:64 * 1024]):
        raise Refused("binary data, not an error message")
    return explain_document(explained([data.decode("utf-8", errors="replace")]))


def explain_xid(policy: Policy, codes: list[str], sxid: bool = False) -> dict:
    from gputriage.commands.logs import xid_code, xid_document

    if not codes:
        raise Refused("no code given")
    if len(codes) > MAX_CODES:
        raise Refused(f"{len(codes)} codes: at most {MAX_CODES} in one call")
    numbers = []
    for raw in codes:
        code = xid_code(str(raw))
        if code is None:
            raise Refused(f"{str(raw)[:40]!r} is not an Xid code (a number such as 79)")
        numbers.append(code)
    doc = xid_document(numbers, sxid)
    if not any(entry["known"] for entry in doc["entries"]):
        kind = "SXid" if sxid else "Xid"
        raise Refused(f"{kind} {', '.join(map(str, numbers))}: not in gputriage's {kind} "
                      "catalog (NVIDIA's Xid and SXid documentation lists the codes it "
                      "knows); the meaning is not known here, do not guess it")
    return doc


def triage(policy: Policy, paths: list[str] | None = None, text: str | None = None,
           baseline: str | None = None, since: str | None = None,
           boot: str | None = None) -> dict:
    from gputriage.results.triage import triage_snapshot
    from gputriage.views.triage import triage_to_json

    if bool(paths) == (text is not None):
        raise Refused("give either paths or text (this server never collects its own host)")
    window = _window(since, boot)
    against = allowed_path(baseline, policy) if baseline is not None else None
    if text is not None:
        snapshot, label = _pasted(text, policy), "<pasted text>"
    else:
        from gputriage.ingest import load_inputs

        named = _paths(paths or [], policy)
        snapshot, label = load_inputs(named), ", ".join(named)
    return triage_to_json(triage_snapshot(snapshot, window, against, label))


def diff_snapshots(policy: Policy, a: str, b: str, include_noise: bool = False,
                   since: str | None = None, boot: str | None = None) -> dict:
    from gputriage.commands.compare import diff_document
    from gputriage.results.diff import diff_views, load_view

    window = _window(since, boot)
    before, after = allowed_path(a, policy), allowed_path(b, policy)
    return diff_document(diff_views(load_view(before, include_noise, window),
                                    load_view(after, include_noise, window)))


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its function and what the assistant is told about it."""

    run: Callable[..., dict]
    title: str
    description: str
    reads_files: bool = False
    schema: str = ""  # the published JSON schema of its answer (gputriage schema NAME)


TOOLS: dict[str, ToolSpec] = {
    "analyze_text": ToolSpec(
        analyze_text, "Analyse pasted GPU host outputs",
        "Judge pasted outputs of one GPU host as `gputriage analyze -` does: nvidia-smi "
        "(-q, -x, the table), kernel log or journal lines (Xid, SXid, NVRM), lspci, ibstat, "
        "numactl, systemctl, NCCL logs, a job's CUDA / NVML / container errors, an "
        "nvidia-bug-report log. Returns the gputriage/result/v1 document: verdict, exit "
        "status (0 OK, 1 warning, 2 critical, 3 unknown), each finding with severity, "
        "blame (node or job), action, evidence lines and next step. since: only kernel-log "
        "events at or after it (ISO time or 2h, 1d); boot: 0 current, -1 the one before, "
        "all.", schema="result"),
    "analyze_paths": ToolSpec(
        analyze_paths, "Analyse files of one GPU host",
        "As analyze_text, for files: a snapshot (directory or .tar.gz from gputriage "
        "collect), an nvidia-bug-report.log(.gz), saved command outputs or kernel logs. "
        "Several paths make one host's view. Only paths under the folders the server was "
        "started with (--allow) are read.", reads_files=True, schema="result"),
    "explain_error": ToolSpec(
        explain_error, "Explain an error message",
        "Explain a job's error message (CUDA, NVML, NCCL WARN, container runtime, device "
        "plugin, driver): its meaning, whose fault it is (node, node configuration, job, "
        "job settings), the action and the next step, from gputriage's catalogs. A CUDA "
        "error number or name works too (700, cudaErrorNoDevice). Returns the "
        "gputriage/explain/v1 document; an unrecognised message has no hits.",
        schema="explain"),
    "explain_xid": ToolSpec(
        explain_xid, "Explain Xid or SXid codes",
        "NVIDIA Xid codes (or NVSwitch SXid codes with sxid=true) from gputriage's "
        "catalog: meaning, likely origin, node or job, what to do, NVIDIA's resolution "
        "bucket. Returns the gputriage/xid/v1 document; a code not in the catalog is "
        "marked known=false, and an error when none is known.", schema="xid"),
    "triage": ToolSpec(
        triage, "Incident screen",
        "The incident screen of one host as `gputriage triage --json` gives it: what "
        "changed since a baseline (a snapshot or result JSON under an allowed folder), the "
        "critical findings with node-or-job blame, the next actions most drastic first. "
        "Give paths (under the allowed folders) or pasted text. Returns the "
        "gputriage/triage/v1 document.", reads_files=True, schema="triage"),
    "diff_snapshots": ToolSpec(
        diff_snapshots, "What changed between two snapshots",
        "What changed from a to b, each a snapshot, bug report, saved outputs or a "
        "result JSON under the allowed folders: facts (kernel, driver, CUDA, GPUs, VBIOS, "
        "links, IB ports, fabric manager...), then findings new, resolved and still there. "
        "include_noise also compares temperatures, clocks and counters. Returns the "
        "gputriage/diff/v1 document.", reads_files=True, schema="diff"),
}


def run_tool(name: str, policy: Policy, arguments: dict[str, Any]) -> dict:
    """The document of one call; Refused with one line for input that cannot be
    answered (unreadable, binary, outside the allowed folders, unknown)."""
    from gputriage.errors import InputError

    spec = TOOLS.get(name)
    if spec is None:
        raise Refused(f"no tool {name!r}")
    try:
        return spec.run(policy, **arguments)
    except InputError as exc:
        raise Refused(str(exc)) from None
    except (OSError, ValueError) as exc:  # a path that cannot be read, resolved or named
        raise Refused(f"{type(exc).__name__}: {exc}") from None
