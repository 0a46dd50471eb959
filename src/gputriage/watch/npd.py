"""node-problem-detector's custom-plugin protocol: a check's result as one exit status
and one line.

NPD runs a custom plugin every ``invoke_interval`` and reads its exit status (0 OK,
1 NonOK: the problem is there, anything else Unknown) and its standard output, cut at the
monitor's ``max_output_length`` (80 bytes by default), as the condition's message. Not
Nagios' 0/1/2/3: a warning is not a problem unless asked for (``level``), and a check that
could not conclude is Unknown (2), never OK.

The judgement reads the ``gputriage/result/v1`` document (``check --json``, a running
watch's ``/result``) through :mod:`gputriage.results.reader`, so a fresh check and a watch's
last result are judged alike, and a document that is not a valid result is Unknown,
the line naming what is wrong with it. Only
the node's side counts: a fault blamed on the job or its settings never makes the node a
problem (the line says it was the job's).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gputriage.io.netbounds import Deadline, TooLarge, loads_within, read_capped
from gputriage.model import Finding
from gputriage.results.reader import ResultDoc, ResultDocError, read_result
from gputriage.vocabulary import RESULT_SCHEMA, Severity

__all__ = ["DEFAULT_MAX_LENGTH", "LEVELS", "OK", "PROBLEM", "SCHEMA", "UNKNOWN",
           "PluginVerdict", "fetch_result", "job_side", "judge", "node_causes", "result_url",
           "scope_text", "shorten", "unknown"]

OK, PROBLEM, UNKNOWN = 0, 1, 2  # NPD's OK, NonOK and Unknown
DEFAULT_MAX_LENGTH = 80  # NPD's default max_output_length (bytes)
LEVELS = ("critical", "warning")  # the least severity that makes the node a problem
SCHEMA = RESULT_SCHEMA


@dataclass(frozen=True)
class PluginVerdict:
    """What the plugin says: its exit status, its line, and the finding it names."""

    status: int
    message: str
    finding: Finding | None = None


def shorten(text: str, max_length: int = DEFAULT_MAX_LENGTH) -> str:
    """``text`` on one printable ASCII line of at most ``max_length`` bytes (NPD cuts
    bytes, which could split a character): ``...`` marks a cut."""
    line = " ".join(text.split())
    line = "".join(c if " " <= c <= "~" else "?" for c in line)
    if len(line) <= max_length:
        return line
    return line[:max(0, max_length - 3)].rstrip() + "..."


def unknown(why: str, max_length: int = DEFAULT_MAX_LENGTH) -> PluginVerdict:
    """Unknown: the check could not conclude, and why."""
    return PluginVerdict(UNKNOWN, shorten(f"UNKNOWN: {why}", max_length))


def job_side(f: Finding) -> bool:
    """Whether a finding is blamed on the job or its settings."""
    return f.blame.side == "job"


def _rank(f: Finding) -> int:
    return f.severity.rank


def node_causes(doc: ResultDoc, least: str = "warning") -> list[Finding]:
    """The current node-side findings of ``least`` severity or worse, worst first (the
    document lists them in report order: a stable sort keeps it within a severity)."""
    floor = Severity(least).rank
    found = [f for f in doc.findings if f.current and not job_side(f) and _rank(f) >= floor]
    return sorted(found, key=lambda f: -_rank(f))


def scope_text(f: Finding) -> str:
    """Where a finding is: ``GPU 4 0000:9a:00.0`` (``+2 GPUs`` for a per-GPU repeat),
    ``unit nvidia-fabricmanager``; empty for the node."""
    if f.scope.kind == "node":
        return ""
    text = f.scope.label()
    return f"{text} +{len(f.also)} GPUs" if f.also else text


def _named(word: str, f: Finding, more: int, max_length: int) -> str:
    """``WORD id [scope] [(+N more)]: title``, the scope left out when the title names
    it within the line (it is never cut away)."""
    head = f"{word} {f.id}"
    tail = f" (+{more} more)" if more else ""
    named = f.scope.pci_bus_id or f.scope.name or ""
    short = shorten(f"{head}{tail}: {f.title}", max_length)
    if named and named in short.removesuffix("...") and not f.also:
        return short
    where = scope_text(f)
    return shorten(f"{head}{' ' + where if where else ''}{tail}: {f.title}", max_length)


def judge(doc: ResultDoc | object, level: str = "critical",
          max_length: int = DEFAULT_MAX_LENGTH) -> PluginVerdict:
    """The plugin's verdict on a result (read, or a decoded document to read): PROBLEM
    when a current node-side finding is ``level`` or worse (naming the worst, its GPU,
    how many more), UNKNOWN when the check could not tell and found nothing that bad,
    or when the document is not a valid result, else OK (saying what the job's faults or
    lesser warnings were)."""
    if not isinstance(doc, ResultDoc):
        try:
            doc = read_result(doc, "result")
        except ResultDocError as exc:
            return unknown(f"not a gputriage result: {exc.detail}", max_length)
    causes = node_causes(doc, level)
    if causes:
        worst = causes[0]
        return PluginVerdict(PROBLEM, _named(worst.severity.value.upper(), worst,
                                             len(causes) - 1, max_length), worst)
    if doc.verdict == "unknown" or doc.verdicts.node == "unknown":
        why = ", ".join(doc.unreadable) or "no rule could decide"
        return unknown(f"the check could not tell ({why})", max_length)
    lesser = node_causes(doc, "warning")
    if lesser:
        return PluginVerdict(OK, _named(f"OK, no {level} problem; WARNING", lesser[0],
                                        len(lesser) - 1, max_length), lesser[0])
    job = [f for f in doc.findings
           if f.current and job_side(f) and _rank(f) >= Severity.WARNING.rank]
    if job:
        worst = max(job, key=_rank)
        where = scope_text(worst)
        text = f"OK: node fine; the job's fault: {worst.id}"
        return PluginVerdict(OK, shorten(f"{text} {where}" if where else text, max_length),
                             worst)
    return PluginVerdict(OK, shorten("OK: no node-side GPU problem", max_length))


def result_url(url: str) -> str:
    """The ``/result`` URL of a watch: its base (``http://127.0.0.1:9400``) or the URL
    itself when it names a path."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not an http URL: {url}")
    path = parts.path if parts.path not in ("", "/") else "/result"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


# A result is 20-30 KB for an 8-GPU node (a few hundred KB for a node of storms): its
# body is capped far above that, and its decoding within a budget that, with Python and
# gputriage loaded, keeps the plugin inside the 256 MiB limit of
# deploy/node-problem-detector/node-problem-detector.yaml.
RESULT_MAX_BYTES = 4 * 2**20
RESULT_DECODE_BUDGET = 64 * 2**20


def fetch_result(url: str, timeout_s: float, max_age_s: float | None = None,
                 now: datetime | None = None) -> ResultDoc:
    """A running watch's last result (``GET /result``), within ``timeout_s`` in all (a
    server answering a byte at a time is cut off too) and ``RESULT_MAX_BYTES``. OSError
    when the watch cannot be reached, answers with an error, not HTTP, too much, or not
    in time; ValueError when the answer is not a result (or one too costly to decode),
    or one older than ``max_age_s`` (a watch whose checks stopped)."""
    import http.client
    from urllib.parse import urlsplit

    target = result_url(url)
    parts = urlsplit(target)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else \
        http.client.HTTPConnection
    conn = kind(parts.netloc, timeout=timeout_s)
    answer: Any = None
    with Deadline(timeout_s) as deadline:
        def connect(*args: Any, **kwargs: Any) -> socket.socket:
            sock = socket.create_connection(*args, **kwargs)
            deadline.hold(sock)  # before TLS wraps it: a trickled handshake is cut too
            return sock

        conn._create_connection = connect  # type: ignore[attr-defined] # http.client's hook
        try:
            conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""),
                         headers={"Accept": "application/json",
                                  "Accept-Encoding": "identity"})
            answer = conn.getresponse()
            if answer.status != 200:
                raise _Answered(f"answered {answer.status} {answer.reason}")
            body = _read_body(answer)
            if deadline.cut:  # a cut head or body can read as a short, whole one
                raise TimeoutError
        except _Answered as exc:
            raise OSError(f"{target} {exc}") from None
        except (http.client.HTTPException, OSError) as exc:
            if isinstance(exc, TimeoutError) or deadline.expired:
                raise OSError(f"{target} did not answer within {timeout_s:g} s") from None
            why = f"not an HTTP answer ({type(exc).__name__})" \
                if isinstance(exc, http.client.HTTPException) else str(exc)
            raise OSError(f"{target} unreachable: {why}") from None
        finally:
            if answer is not None:
                answer.close()
            conn.close()
    try:
        doc = loads_within(body, RESULT_DECODE_BUDGET)
    except TooLarge as exc:
        raise ValueError(f"{target}: JSON too costly to decode ({exc})") from None
    except ValueError:
        raise ValueError(f"{target} did not answer JSON") from None
    try:
        result = read_result(doc, target)
    except ResultDocError as exc:
        raise ValueError(f"{target} did not answer a gputriage result ({exc.detail})") \
            from None
    if max_age_s is not None:
        age = ((now or datetime.now(timezone.utc)) - result.generated_at).total_seconds()
        if age > max_age_s:
            raise ValueError(f"the watch's last result is {age:.0f} s old "
                             f"(more than {max_age_s:.0f} s)")
    return result


class _Answered(Exception):
    """The watch answered, but not a result: an HTTP error status, too much."""


def _read_body(answer: Any) -> bytearray:
    """The answer's body, at most ``RESULT_MAX_BYTES`` (the deadline cuts a slow one)."""
    import http.client

    length = answer.length
    try:
        body = read_capped(answer.read1, RESULT_MAX_BYTES, length)
    except TooLarge as exc:
        raise _Answered(f"answered too much: {exc}") from None
    if length and len(body) < length:  # the connection closed before the length
        raise http.client.IncompleteRead(bytes(body), length - len(body))
    return body

