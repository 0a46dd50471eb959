"""The published JSON Schemas (draft 2020-12) of every ``--json`` document.

One file per document, written by hand from docs/json-schema.md; the definitions
they share (a finding, the host, a diff) live in ``common.json``, referred to by
its ``$id`` (``urn:gputriage:schema:common:v1``). :func:`bundled` gives a schema
with what it refers to embedded under ``$defs``, so that one printed file
validates on its own (``gputriage schema NAME``).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["COMMANDS", "bundled", "load", "names"]

# Each schema: the commands whose --json prints a document of it.
COMMANDS: dict[str, str] = {
    "result": "check --json, analyze --json (gputriage/result/v1)",
    "nccl": "nccl --json (gputriage/result/v1 with an nccl object)",
    "logs": "logs --json (gputriage/logs/v1)",
    "diff": "diff --json (gputriage/diff/v1)",
    "triage": "triage --json (gputriage/triage/v1)",
    "fleet": "fleet --json (gputriage/fleet/v1)",
    "history": "history --json (gputriage/history/v1)",
    "ack": "ack ... --json (the acknowledgement recorded)",
    "ack-list": "ack --list --json (every acknowledgement)",
    "xid": "xid --json (gputriage/xid/v1)",
    "explain": "explain --json (gputriage/explain/v1)",
    "k8s": "k8s status --json, k8s lint --json (gputriage/k8s/v1)",
    "weights": "weights --json (gputriage/weights/v1)",
    "scenarios": "scenario list --json (gputriage/scenarios/v1)",
    "schemas": "schema --list --json (gputriage/schemas/v1)",
}

_PREFIX = "urn:gputriage:schema:"


def names() -> list[str]:
    """The document schemas, in the order :data:`COMMANDS` lists them."""
    return list(COMMANDS)


def load(name: str) -> dict[str, Any]:
    """The schema file ``name`` as stored (``common`` included); KeyError when none."""
    if name != "common" and name not in COMMANDS:
        raise KeyError(name)
    from importlib import resources  # lazily: slow to import, needed by few commands

    text = resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _referred(node: Any, found: set[str]) -> None:
    """Add the names of the other schema files ``node`` refers to."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_PREFIX):
            found.add(ref[len(_PREFIX):].split("#")[0].rsplit(":", 1)[0])
        for value in node.values():
            _referred(value, found)
    elif isinstance(node, list):
        for value in node:
            _referred(value, found)


def bundled(name: str) -> dict[str, Any]:
    """Schema ``name`` with every schema file it refers to embedded under ``$defs``
    (each keeps its ``$id``, so the references resolve inside the one document)."""
    schema = load(name)
    todo, seen = {name}, set()
    while todo:
        current = todo.pop()
        seen.add(current)
        found: set[str] = set()
        _referred(load(current), found)
        todo |= found - seen
    embedded = {f"gputriage-{other}": load(other) for other in sorted(seen - {name})}
    if embedded:
        schema["$defs"] = {**schema.get("$defs", {}), **embedded}
    return schema
