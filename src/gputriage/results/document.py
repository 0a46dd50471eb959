"""The JSON result: one analysed host as a versioned document.

The schema ``gputriage/result/v1`` is a public contract documented in
docs/json-schema.md: within v1 fields are only ever added, never renamed,
removed or retyped. Top-level keys come in a fixed order; the host summary and GPU
rows give their keys in the documented order, the manifest keeps its own.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from gputriage import __version__
from gputriage.model import Finding, Result
from gputriage.status import at_fault, counted_severity, exit_status, side_verdict, verdict
from gputriage.vocabulary import RESULT_SCHEMA as SCHEMA  # read back by gputriage.results.reader

TOP_LEVEL_KEYS = (
    "schema", "tool_version", "generated", "verdict", "exit_status", "verdicts", "host",
    "gpus", "findings", "skipped", "inputs", "manifest", "unreadable", "not_read",
)


def plain(value: Any) -> Any:
    """``value`` as plain JSON data: enums to values, tuples / sets to lists,
    paths and unknown objects to strings, non-finite floats to null."""
    if isinstance(value, Enum):
        return plain(value.value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=repr)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)  # paths and anything else


def _finding_json(result: Result, f: Finding) -> dict:
    """A finding's JSON with ``counted_severity`` beside its ``severity``: the one its
    line, the host line, the headline and the exit status count it with (a job's fault
    counts as a warning at most where it cannot fail the check), at every depth."""
    data = plain(f.to_json())
    data["counted_severity"] = counted_severity(result, f).value
    if f.consequences:
        data["consequences"] = [_finding_json(result, c) for c in f.consequences]
    return data


def to_json(result: Result, *, generated: datetime | None = None) -> dict:
    """The ``gputriage/result/v1`` document of ``result`` (findings worst
    first). ``generated`` defaults to now, in UTC."""
    when = generated or datetime.now(timezone.utc)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "generated": when.isoformat(timespec="seconds"),
        "verdict": verdict(result),
        "exit_status": int(exit_status(result)),
        "verdicts": {"node": side_verdict(result, "node"),
                     "job": side_verdict(result, "job"), "at_fault": at_fault(result),
                     "job_faults_fail": result.job_faults_fail},
        "host": plain(result.host.to_json()),
        "gpus": [plain(g.to_json()) for g in result.gpus],
        "findings": [_finding_json(result, f) for f in result.sorted_findings()],
        "skipped": [{"rule": s.rule, "reason": s.reason} for s in result.skipped],
        "inputs": plain(list(result.inputs or [])),
        "manifest": plain(result.manifest),
        "unreadable": [str(u) for u in result.unreadable],
        "not_read": [str(u) for u in result.not_read],
    }


def dumps(result: Result, *, generated: datetime | None = None) -> str:
    """:func:`to_json` serialised with ``indent=2`` (UTF-8 text, no trailing newline)."""
    return json.dumps(to_json(result, generated=generated), indent=2, ensure_ascii=False,
                      allow_nan=False)
