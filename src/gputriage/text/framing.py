"""The framings a pasted line arrives in, and the payload inside them.

An on-call pastes what the tool printed inside whatever carried it: a Markdown quote
(``> ``), a container runtime's log line (``2025-01-17T15:36:15.123456789Z stdout F
...``), ``kubectl logs --prefix`` (``[pod/name/container] ...``), one JSON object per
line (docker's json-file log, Loki / Elasticsearch / Cloud Logging exports, ``journalctl
-o json`` of a service), ``logcli`` output, line numbers (``grep -n``, ``cat -n``, an
editor's ``12 | ...``), a ``grep`` over several files (``/var/log/syslog:...``) or a
``pdsh`` / ``clush`` host tag (``node07: ...``). :func:`unframe_lines` returns each
line's payload so that the detectors and parsers read the tool's own output; the
caller keeps the original lines for the evidence (:func:`originals`).

Framings that are unambiguous on one line are stripped line by line. The others (line
numbers, file and host tags) could be part of a message, so they are stripped only
over a run of at least two consecutive lines that agree: numbers that increase, one
file, one host. A line is never changed otherwise; a kernel log's own prefixes
(timestamps, ``host kernel:``) are content, not framing, and stay.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from gputriage.io import safejson

__all__ = ["FRAMINGS", "originals", "unframe", "unframe_lines"]

# --- framings recognised on one line -------------------------------------------------
_QUOTE = re.compile(r"^[ \t]{0,3}(?:>[ \t]?)+")
_CRI = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
                  r"(?:Z|[+-][0-9]{2}:?[0-9]{2}) (?:stdout|stderr) [FP] ?")
_KUBECTL = re.compile(r"^\[(?:pod|node|job|deployment|statefulset|daemonset)/[\w.-]{1,253}"
                      r"(?:/[\w.-]{1,63})?\] ")
# a launcher's per-rank tag: Open MPI --tag-output "[1,0]<stderr>:", TorchX "[trainer0|0]:",
# torchrun --tee "[default0]:" (PyTorch's own "[rank0]:" stays: the NCCL readers take the
# rank from it)
_RANK_TAG = re.compile(r"^(?:\[[0-9]{1,7},[0-9]{1,7}\]<(?:stdout|stderr|stddiag)>:"
                       r"|\[[A-Za-z][\w.-]{0,62}\|[0-9]{1,7}\]:|\[default[0-9]{1,7}\]:)"
                       r"[ \t]?")
_LOGCLI = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{8,18}(?:Z|[+-][0-9]{2}:[0-9]{2})"
                     r" \{[^{}]{0,2000}\} ")
# --- framings stripped only over a run that agrees -------------------------------------
# "  12 | x" (an editor), "    12\tx" (cat -n), "12:x" (grep -n; not "15:36:15", a time)
_NUMBERED = re.compile(r"^(?:[ \t]{0,7}(?P<a>[0-9]{1,7})(?:[ \t]{0,2}\|[ \t]?|\t)"
                       r"|(?P<b>[0-9]{1,7}):(?![0-9]{2}[:.]))")
_FILE = re.compile(r"^(?P<key>(?:/[\w.@+-]{1,80}){1,12}|[\w.-]{0,60}(?:\.log|syslog|messages|"
                   r"kern\.log|\.txt)(?:[.-][0-9]{1,8})?(?:\.gz)?):(?:[0-9]{1,9}[:-])?")
_HOST = re.compile(r"^(?P<key>[A-Za-z][\w.-]{0,62}): ")
_HOST_BAR = re.compile(r"^(?P<key>[A-Za-z][\w.-]{0,62}) \| ")  # "host | line" (clush, pssh)
# srun --label: "0: line" (not a table keyed by number: /proc/interrupts' "24:    0    0")
_SRUN_LABEL = re.compile(r"^[ \t]{0,5}(?P<key>[0-9]{1,6}): (?![ \t]*[0-9]+[ \t]{2})")
# tags that lead kernel and driver messages: never a host's name
_NOT_HOST = re.compile(r"^(?:NVRM|kernel|nvidia|nv_|mlx[0-9]|mlx5|ib_|pci|usb|ata[0-9]|nvme|"
                       r"xhci|ACPI|EDAC|mce|audit|systemd|GPU[0-9]|gpu[0-9]|NCCL|Warning|Error|"
                       r"WARNING|ERROR|INFO|Note|ib[0-9ps]|eth[0-9]|en[ops][0-9]|eno|bond|veth|"
                       r"docker|br-|virbr|cni|cali|flannel|lo$|sd[a-z]|md[0-9]|dm-|loop)")

# what the quick test looks for at the start of a line before any line is looked at
_STARTS = (r"(?:[ \t]{0,3}>|\[[\w.-]{1,64}[,|\]]|[ \t]{0,5}[0-9]{1,6}: "
           r"|[0-9]{4}-[0-9]{2}-[0-9]{2}T\S{8,40} (?:stdout|stderr|\{)"
           r"|\[[a-z]{2,12}/|\{|[ \t]{0,7}[0-9]{1,7}(?:[ \t]{0,2}\||\t|:)|/[\w.@+-]|"
           r"[\w.-]{0,60}(?:\.log|syslog|messages|\.txt)|[A-Za-z][\w.-]{0,62}(?:: | \| ))")
# searched in lines joined, each after its newline: Python's regex engine goes from one
# newline to the next in C, where it tries a line start ("(?m)^") at every character
# (a MiB of a training or kernel log: 5-7 ms against 10-15)
_ANY = re.compile(r"\n" + _STARTS)

FRAMINGS = ("markdown quote", "container runtime log", "kubectl logs --prefix", "logcli",
            "JSON log record", "rank tag (launcher)", "line numbers", "file name (grep)",
            "host tag (pdsh)", "rank label (srun)")

_JSON_MAX = 64 << 10  # longest JSON line decoded
_MESSAGE_KEYS = ("log", "line", "message", "msg", "MESSAGE", "@message", "textPayload", "body",
                 "Message", "content")
_NESTED_KEYS = ("_source", "jsonPayload", "fields", "record", "event")


def _journal_line(doc: dict[str, Any]) -> str | None:
    """A ``journalctl -o json`` record of a service as the syslog line journalctl prints
    (``2025-01-17T15:36:15+00:00 host prog[pid]: message``); None for a kernel record
    (the kernel-log reader takes those whole, with their own time) or a broken one."""
    if doc.get("_TRANSPORT") == "kernel" or doc.get("SYSLOG_IDENTIFIER") == "kernel":
        return None
    message = doc.get("MESSAGE")
    stamp = doc.get("__REALTIME_TIMESTAMP")
    if not isinstance(message, str) or not isinstance(stamp, str) or not stamp.isdigit():
        return None
    try:
        when = datetime.fromtimestamp(int(stamp[:16]) / 1e6, timezone.utc)
    except (OverflowError, ValueError, OSError):
        return None
    host = doc.get("_HOSTNAME") or "localhost"
    ident = doc.get("SYSLOG_IDENTIFIER") or doc.get("_COMM") or "unknown"
    pid = doc.get("_PID") or doc.get("SYSLOG_PID")
    tag = f"{ident}[{pid}]" if isinstance(pid, str) and pid.isdigit() else str(ident)
    return f"{when.isoformat(timespec='seconds')} {host} {tag}: {message}"


def _message_of(doc: Any, depth: int = 0) -> str | None:
    """The log line a JSON record carries (its first message-like string field)."""
    if not isinstance(doc, dict) or depth > 2:
        return None
    if "__REALTIME_TIMESTAMP" in doc or "_TRANSPORT" in doc:
        return _journal_line(doc)
    for key in _MESSAGE_KEYS:
        value = doc.get(key)
        if isinstance(value, str) and value.strip():
            return value.rstrip("\r\n")
    for key in _NESTED_KEYS:
        found = _message_of(doc.get(key), depth + 1)
        if found is not None:
            return found
    return None


def _json_payload(line: str) -> str | None:
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")) or len(text) > _JSON_MAX:
        return None
    try:
        doc = safejson.loads(text)
    except ValueError:
        return None
    found = _message_of(doc)
    if found is None or "\n" in found.rstrip("\n"):
        return None  # several lines in one record: not one log line
    # structured loggers (zap, logrus) put the cause beside the message: keep it with it
    error = doc.get("error", doc.get("err")) if isinstance(doc, dict) else None
    if isinstance(error, str) and error.strip() and "\n" not in error and error not in found:
        return f"{found.rstrip()}: {error.strip()}"
    return found


def _strip_one(line: str) -> tuple[str, str] | None:
    """(framing, payload) of a framing recognised on the line alone."""
    head = line[:1]
    if head in (">", " ", "\t") and (m := _QUOTE.match(line)) and ">" in m.group(0):
        return "markdown quote", line[m.end():]
    if head.isdigit():
        if m := _CRI.match(line):
            return "container runtime log", line[m.end():]
        if m := _LOGCLI.match(line):
            return "logcli", line[m.end():]
    elif head == "[" and (m := _KUBECTL.match(line)):
        return "kubectl logs --prefix", line[m.end():]
    elif head == "[" and (m := _RANK_TAG.match(line)):
        return "rank tag (launcher)", line[m.end():]
    elif head == "{" and (payload := _json_payload(line)) is not None:
        return "JSON log record", payload
    return None


_Cand = tuple[str, str, str]  # (framing, key, payload)


def _run_candidates(line: str) -> list[_Cand]:
    """The framings a line may carry that count only over an agreeing run, most
    specific first; the key is the line number, the file, the host or the rank."""
    out: list[_Cand] = []
    if m := _NUMBERED.match(line):
        out.append(("line numbers", m.group("a") or m.group("b"), line[m.end():]))
    if m := _SRUN_LABEL.match(line):
        out.append(("rank label (srun)", m.group("key"), line[m.end():]))
    if m := _FILE.match(line):
        out.append(("file name (grep)", m.group("key"), line[m.end():]))
    for pattern in (_HOST, _HOST_BAR):
        if (m := pattern.match(line)) and any(c.isdigit() for c in m.group("key")) and \
                not _NOT_HOST.match(m.group("key")):
            out.append(("host tag (pdsh)", m.group("key"), line[m.end():]))
    return out


def _agrees(kind: str, prev_key: str, key: str) -> bool:
    if kind == "line numbers":
        return int(key) > int(prev_key)
    if kind == "rank label (srun)":
        return True  # the ranks' lines interleave
    return key == prev_key


def _of_kind(cands: list[_Cand], kind: str) -> _Cand | None:
    return next((c for c in cands if c[0] == kind), None)


def _run_from(lines: list[str], cands: list[list[_Cand]], i: int,
              kind: str) -> tuple[list[int], int]:
    """The lines from ``i`` on that carry framing ``kind`` and agree (blank lines
    between them are skipped), and where the run stopped."""
    run = [i]
    j = i + 1
    while j < len(lines):
        if not lines[j].strip():
            j += 1
            continue
        nxt, last = _of_kind(cands[j], kind), _of_kind(cands[run[-1]], kind)
        if nxt is None or last is None or not _agrees(kind, last[1], nxt[1]):
            break
        run.append(j)
        j += 1
    return run, j


def _strip_runs(lines: list[str], names: list[set[str]]) -> bool:
    """Strip the run-confirmed framings in place; True when a line changed."""
    cands = [_run_candidates(ln) if ln.strip() else [] for ln in lines]
    changed = False
    i = 0
    while i < len(lines):
        taken = False
        for kind, _, _ in cands[i]:
            run, j = _run_from(lines, cands, i, kind)
            if len(run) < 2:
                continue
            for k in run:
                cand = _of_kind(cands[k], kind)
                assert cand is not None
                lines[k] = cand[2]
                names[k].add(kind)
            changed = taken = True
            i = j
            break
        if not taken:
            i += 1
    return changed


def unframe_lines(lines: Iterable[str]) -> tuple[list[str], list[set[str]]]:
    """Each line's payload and the framings taken off it (empty: the line as it was)."""
    out = list(lines)
    names: list[set[str]] = [set() for _ in out]
    if not _ANY.search("\n" + "\n".join(out[:20000])) and not any(
            _ANY.search("\n" + ln) for ln in out[20000:]):
        return out, names
    for _ in range(3):  # framings nest: a quoted grep -n of a container's log
        changed = False
        for i, line in enumerate(out):
            while (found := _strip_one(line)) is not None:
                line = found[1]
                names[i].add(found[0])
                changed = True
            out[i] = line
        changed = _strip_runs(out, names) or changed
        if not changed:
            break
    return out, names


def unframe(text: str) -> str:
    """``text`` with every line's framing taken off (see :func:`unframe_lines`)."""
    from gputriage.text.fields import split_lines

    lines, names = unframe_lines(split_lines(text))
    if not any(names):
        return text
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def originals(payloads: list[str], raw: list[str], names: list[set[str]]) -> dict[str, str]:
    """payload -> the original line, for the lines whose framing was taken off (the
    first original wins when two framed lines carry the same payload)."""
    found: dict[str, str] = {}
    for payload, line, taken in zip(payloads, raw, names, strict=True):
        if taken and payload.strip():
            found.setdefault(payload, line)
    return found
