"""Kubernetes outputs in a paste: API objects (JSON, YAML, fragments of them),
``kubectl describe`` (whole or grep excerpts) and ``kubectl get`` tables.

* ``k8s_objects``: a JSON object with ``apiVersion`` and ``kind``, or a bare mapping of a
  node's labels or resources (``jq .metadata.labels``, ``.status.capacity``); YAML from an
  ``apiVersion:`` / ``kind:`` line or a ``---`` to the end of the indented block; YAML
  fragments users paste without a kind (a ``conditions:`` list, a ``status:`` or
  ``spec:`` block, a ``labels:`` mapping of GFD labels) when they carry Kubernetes keys
  (:data:`gputriage.parsers.k8s_fragments.FRAGMENT_KEYS`).
* ``k8s_describe``: a block of describe fields (two distinct sections of a node or a pod,
  or a Capacity/Allocatable/Events section with its rows), describe's event rows (and
  ``kubectl get events`` rows without their header), a scheduler's ``0/N nodes are
  available:`` message, the kubelet's ``Allocate failed due to ...`` and KAI's
  ``Non-preemptible workload is over quota`` (each with the
  lines a paste wrapped its message onto), condition rows with their times, and
  runs of GFD / NFD labels (``nvidia.com/gpu.count=2``: ``describe node | grep``).
* ``k8s_table``: a header of a table :func:`gputriage.parsers.k8s_table.table_kind`
  knows and its rows, and runs of pod rows without their header.
"""

from __future__ import annotations

import json
import re

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.parsers.k8s_describe import (
    EVENT_ROW,
    GET_EVENT_ROW,
    KUBELET_MESSAGE,
    QUOTA_MESSAGE,
    SCHEDULER_MESSAGE,
    condition_row,
    message_end,
)
from gputriage.parsers.k8s_fragments import FRAGMENT_KEYS, is_bare_node_map
from gputriage.parsers.k8s_table import POD_ROW, table_kind
from gputriage.text.paste import PasteDoc

__all__ = ["claim_k8s_describe", "claim_k8s_objects", "claim_k8s_table"]

# --- objects ------------------------------------------------------------------------------
_JSON_KEYS = re.compile(r'"apiVersion"\s*:|"kind"\s*:')
_YAML_START = re.compile(r"^(?:apiVersion|kind):\s*\S|^---\s*$")
_YAML_LINE = re.compile(r"^(?:\s*$|\s*#|---\s*$|\s+\S|- |[\w.\"'/-]+:(?:\s|$))")
_FRAGMENT_START = re.compile(r"^(?P<indent>\s*)(?:- )?(?P<key>[\w./-]+):(?:\s|$)")


def _yaml_end(doc: PasteDoc, start: int, base: int) -> int:
    """The end of the YAML block from ``start``: its lines at ``base`` indentation or
    deeper (list items at ``base`` too), up to a line that is not YAML."""
    end = start + 1
    while doc.free(end):
        ln = doc.lines[end]
        if ln.strip() in ("...", "```"):
            break
        if ln.strip():
            indent = len(ln) - len(ln.lstrip())
            if indent < base or not _YAML_LINE.match(ln[base:] if indent >= base else ln):
                break
        elif not doc.free(end + 1) or not doc.lines[end + 1].strip():
            break
        end += 1
    return end


_JSON_TRIES = 50  # JSON values tried per paste (a paste of many brackets stays linear)


# a bare JSON mapping of a node's labels or resources (``kubectl get node -o json | jq
# .metadata.labels``, ``.status.capacity``): no kind, but keys only Kubernetes gives
_LABEL_KEY = re.compile(r'"(?:[\w-]+\.)*(?:nvidia\.com|kubernetes\.io)/[\w./-]+"\s*:|'
                        r'"(?:cpu|pods)"\s*:')


# a JSON value is tried only from a line that opens one (the first line, or one after a
# line break: a search led by a literal, in C)
_JSON_FIRST = re.compile(r"[^\S\n]*[{\[]")
_JSON_NEXT = re.compile(r"\n[^\S\n]*[{\[]")


def _claim_json(doc: PasteDoc) -> None:
    if not (_JSON_FIRST.match(doc.text) or _JSON_NEXT.search(doc.text)):
        return
    tries = 0
    for i, line in enumerate(doc.lines):
        if not (doc.free(i) and line.lstrip().startswith(("{", "["))):
            continue
        text = "\n".join(doc.lines[i:])
        if tries >= _JSON_TRIES or not ('"kind"' in text or _LABEL_KEY.search(text)):
            return
        tries += 1
        try:
            obj, length = json.JSONDecoder().raw_decode(text.lstrip())
        except (ValueError, RecursionError):
            continue
        body = text.lstrip()[:length]
        if not isinstance(obj, (dict, list)) or '"cdiVersion"' in body or not (
                (_JSON_KEYS.search(body) and '"kind"' in body) or is_bare_node_map(obj)):
            continue
        end = i + text[:len(text) - len(text.lstrip()) + length].count("\n") + 1
        if all(doc.free(j) for j in range(i, end)):
            doc.claim("k8s_objects", i, end)


def _has_kind(lines: list[str]) -> bool:
    keys = {ln.split(":")[0] for ln in lines if not ln.startswith((" ", "-"))}
    if "cdiVersion" in keys:  # a CDI spec (kind: nvidia.com/gpu) is the container stack's
        return False
    return "kind" in keys and ("apiVersion" in keys or "metadata" in keys or "items" in keys)


_YAML_GATE = Gate(_YAML_START, test=_YAML_START.match)


def _claim_yaml(doc: PasteDoc) -> None:
    if not _YAML_GATE.open(doc):
        return
    i = 0
    while i < len(doc.lines):
        if doc.free(i) and _YAML_START.match(doc.lines[i]):
            end = _yaml_end(doc, i, 0)
            if _has_kind(doc.lines[i:end]):
                doc.claim("k8s_objects", i, end)
                i = end
                continue
        i += 1


def _fragment_ok(lines: list[str]) -> bool:
    keys = {m.group("key") for ln in lines if (m := _FRAGMENT_START.match(ln))}
    if "cdiVersion" in keys or "containerEdits" in keys or "services" in keys:
        return False
    return len(keys & FRAGMENT_KEYS) >= 2 or ("conditions" in keys and "type" in keys
                                              and "status" in keys)


# a fragment is claimed only with a line (free, as its block's are) of a Kubernetes key
_FRAGMENT_GATE = Gate(literals=tuple(f"{key}:" for key in sorted(FRAGMENT_KEYS | {"conditions"})))


def _claim_fragments(doc: PasteDoc) -> None:
    if not _FRAGMENT_GATE.open(doc):
        return
    i = 0
    while i < len(doc.lines):
        m = _FRAGMENT_START.match(doc.lines[i]) if doc.free(i) else None
        if m is None or (i > 0 and doc.free(i - 1) and doc.lines[i - 1].strip()
                         and _FRAGMENT_START.match(doc.lines[i - 1])):
            i += 1
            continue
        end = _fragment_end(doc, i, len(m.group("indent")))
        if end - i >= 2 and _fragment_ok(doc.lines[i:end]):
            doc.claim("k8s_objects", i, end)
            i = end
        else:
            i += 1


def _fragment_end(doc: PasteDoc, start: int, base: int) -> int:
    """Like :func:`_yaml_end`, and a fragment goes on over sibling blocks at its own
    indentation (``conditions:`` then ``phase:`` then ``running:``)."""
    end = start
    while doc.free(end) and doc.lines[end].strip():
        ln = doc.lines[end]
        indent = len(ln) - len(ln.lstrip())
        if indent < base or not (_FRAGMENT_START.match(ln) or indent > base
                                 or ln.lstrip().startswith("- ")):
            break
        end += 1
    return end


# what _claim_json looks for first: a line that starts with { or [
_JSON_GATE = Gate(searches=(re.compile(r"\A" + _JSON_FIRST.pattern), _JSON_NEXT))


@gated_by(_JSON_GATE, _YAML_GATE, _FRAGMENT_GATE)
def claim_k8s_objects(doc: PasteDoc) -> None:
    """Kubernetes API objects as JSON or YAML (``kubectl get -o json|yaml``, manifests)
    and the YAML fragments of them people paste (conditions, status, spec, labels)."""
    _claim_json(doc)
    _claim_yaml(doc)
    _claim_fragments(doc)


# --- describe -----------------------------------------------------------------------------
_STRONG = ("Roles", "Taints", "Capacity", "Allocatable", "System Info", "Unschedulable",
           "Allocated resources", "Non-terminated Pods", "Containers", "Init Containers",
           "Controlled By", "QoS Class", "Node-Selectors", "Tolerations", "Labels",
           "Annotations", "Namespace", "Conditions", "Events", "Priority Class Name",
           "Service Account", "CreationTimestamp")
_DESCRIBE_FIELD = re.compile(r"^\s{0,4}(?P<key>" + "|".join(re.escape(k) for k in (
    *_STRONG, "Name", "Status", "Node", "Priority", "IP", "IPs", "Start Time", "Addresses",
    "PodCIDR", "PodCIDRs", "ProviderID", "Lease", "Volumes", "Runtime Class Name", "Kind",
    "API Version", "Spec", "Metadata")) + r"):(?:\s|$)")
_RESOURCE = re.compile(r"^\s+(?:cpu|memory|pods|ephemeral-storage|hugepages-\w+|"
                       r"attachable-volumes-[\w-]+|[\w.-]+\.[a-z]{2,}/[\w.-]+):\s+[0-9]")
# (``nvidia.com/gpu=0``, ``=all``, ``=GPU-<uuid>``: CDI device names, not labels)
_LABEL_LINE = re.compile(r"^\s*(?!nvidia\.com/gpu=)(?:[\w-]+\.)*"
                         r"(?:nvidia\.com|kubernetes\.io|k8s\.io)/[\w./-]+=\S*\s*$")
_ANNOTATION_LINE = re.compile(r"^\s*(?:[\w-]+\.)*nvidia\.com/[\w./-]+: \S+\s*$")
_EVENT_HEADER = re.compile(r"^\s*Type\s+Reason\s+Age\s+From\s+Message\s*$")
# a line of ``describe node | grep``: a resource of Capacity/Allocatable, or its row of
# Allocated resources (requests, limits)
_GREP_RESOURCE = re.compile(r"^\s*(?:[\w-]+\.)*nvidia\.com/[\w.-]+"
                            r"(?::\s+[0-9]+|\s+[0-9]+\S*(?:\s+\([^)]*\))?"
                            r"\s+[0-9]+\S*(?:\s+\([^)]*\))?)\s*$")
_K_DESCRIBE = re.compile(r"^\s*(?:sudo\s+)?k\s+describe\s+(?:no|nodes?|po|pods?)\b")


def _describe_line(line: str) -> bool:
    return bool(not line.strip() or line[:1] in (" ", "\t") or _DESCRIBE_FIELD.match(line))


def _describe_end(doc: PasteDoc, start: int) -> int:
    end = start + 1
    while doc.free(end):
        ln = doc.lines[end]
        if not ln.strip():
            nxt = doc.next_nonblank(end)
            if not (doc.free(nxt) and _DESCRIBE_FIELD.match(doc.lines[nxt])):
                break
        elif not _describe_line(ln) or ln.strip() == "```":
            break
        end += 1
    return end


def _confirmed(lines: list[str]) -> bool:
    """Two sections of describe, or one section with the rows it holds."""
    keys = {m.group("key") for ln in lines if (m := _DESCRIBE_FIELD.match(ln))}
    if len(keys & set(_STRONG)) >= 2 or ("Name" in keys and len(keys) >= 3):
        return True
    if keys & {"Capacity", "Allocatable"}:
        return any(_RESOURCE.match(ln) for ln in lines)
    if "Events" in keys:
        return any(_EVENT_HEADER.match(ln) or EVENT_ROW.match(ln) for ln in lines)
    return False


def _grep_line(line: str) -> bool:
    return bool(_LABEL_LINE.match(line) or _ANNOTATION_LINE.match(line)
                or _GREP_RESOURCE.match(line))


def _claim_grep_runs(doc: PasteDoc) -> None:
    """Runs of ``describe node | grep`` lines: three or more, one a label at least."""
    i = 0
    while i < len(doc.lines):
        end = doc.extend(i, _grep_line)
        if end - i >= 3 and any(_LABEL_LINE.match(doc.lines[j]) for j in range(i, end)):
            doc.claim("k8s_describe", i, end)
        i = max(end, i + 1)


_EVENTS_HEADER = re.compile(r"\bTYPE\s+REASON\s+OBJECT\b")


# what each pass of claim_k8s_describe starts its claims at, on a free line: a field, a
# row (a condition's status, an event's type, a scheduler's or kubelet's message), a run
# of grep-ed lines with a label, "k describe"
_FIELD_GATE = Gate(_DESCRIBE_FIELD, test=_DESCRIBE_FIELD.match)
_ROW_GATE = Gate(GET_EVENT_ROW, EVENT_ROW, SCHEDULER_MESSAGE, KUBELET_MESSAGE, QUOTA_MESSAGE,
                 literals=("True", "False", "Unknown"))  # condition_row's statuses
_LABEL_GATE = Gate(_LABEL_LINE)
_K_GATE = Gate(_K_DESCRIBE)


@gated_by(_FIELD_GATE, _ROW_GATE, _LABEL_GATE, _K_GATE)
def claim_k8s_describe(doc: PasteDoc) -> None:
    """``kubectl describe`` output (nodes, pods, other objects) whole or grep-ed: its
    fields and sections, event rows, condition rows, scheduler messages, GFD labels."""
    i = 0 if _FIELD_GATE.open(doc) else len(doc.lines)
    while i < len(doc.lines):
        if doc.free(i) and _DESCRIBE_FIELD.match(doc.lines[i]):
            end = _describe_end(doc, i)
            if _confirmed(doc.lines[i:end]):
                doc.claim("k8s_describe", i, end)
                i = end
                continue
        i += 1
    headed = in_run = False  # the run of ``kubectl get events`` rows has the table's header
    for i, ln in enumerate(doc.lines if _ROW_GATE.open(doc) else ()):
        get_event = bool(GET_EVENT_ROW.match(ln))
        if get_event and not in_run:
            headed = i > 0 and bool(_EVENTS_HEADER.search(doc.lines[i - 1]))
        in_run = get_event
        if doc.free(i) and condition_row(ln) and re.search(r"[0-9]{2}(?::[0-9]{2}){2}", ln):
            doc.claim("k8s_describe", i, i + 1)
        elif get_event and headed:
            continue  # a row of a get events table: the table's detector reads it
        elif doc.free(i) and (get_event or EVENT_ROW.match(ln) or SCHEDULER_MESSAGE.match(ln)
                              or KUBELET_MESSAGE.search(ln) or QUOTA_MESSAGE.search(ln)):
            end = message_end(doc.lines, i)  # with the lines its message wraps onto
            while end > i + 1 and not all(doc.free(j) for j in range(i, end)):
                end -= 1
            doc.claim("k8s_describe", i, end)
    if _LABEL_GATE.open(doc):
        _claim_grep_runs(doc)
    if not _K_GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):  # ``k``, kubectl's usual alias, names the node
        nxt = doc.next_nonblank(i + 1)
        if doc.free(i) and _K_DESCRIBE.match(ln) and 0 <= nxt < len(doc.lines) \
                and doc.owner[nxt] == "k8s_describe":
            doc.owner[i] = "k8s_describe"


# --- tables -------------------------------------------------------------------------------
def _table_head(ln: str) -> bool:
    """A header of a table claim_k8s_table reads."""
    if not _HEAD_WORD.search(ln):  # (a GPU node's log: its host name, "name=" of a process)
        return False
    names = re.findall(r"\S+(?: \S+)*", ln.strip())
    return ((ln == ln.upper() or "GPU" in ln.upper()) and len(names) > 1
            and table_kind(names) is not None and not POD_ROW.match(ln))


# every kind of table_kind's has a NAME, NODE, NODENAME or REASON column (a cell of its
# own: the word between blanks or the line's ends, in any case; NODE starts "NODE NAME");
# a pod row has its READY n/m
_HEAD_WORD = re.compile(r"(?<!\S)(?:name|reason|node|nodename)(?!\S)", re.IGNORECASE)
_HEAD_GATE = Gate(literals=("name", "reason", "node"), test=_table_head)
# (the lines of "[0-9]/[0-9]", searched from each "/": a literal the engine skips to)
_POD_GATE = Gate(searches=(re.compile(r"/(?<=[0-9]/)[0-9]"),), test=POD_ROW.match)


@gated_by(_HEAD_GATE, _POD_GATE)
def claim_k8s_table(doc: PasteDoc) -> None:
    """``kubectl get`` tables of pods, nodes, DaemonSets and events, custom-columns
    tables of GPUs per node, and runs of pod rows without their header."""
    i = 0 if _HEAD_GATE.open(doc) else len(doc.lines)
    while i < len(doc.lines):
        ln = doc.lines[i]
        if doc.free(i) and _table_head(ln):
            end = doc.extend(i + 1, lambda s: bool(s.strip()) and s.strip() != "```")
            if end > i + 1:
                doc.claim("k8s_table", i, end)
            i = max(end, i + 1)
            continue
        i += 1
    i = 0 if _POD_GATE.open(doc) else len(doc.lines)
    while i < len(doc.lines):
        end = doc.extend(i, lambda s: bool(POD_ROW.match(s)))
        if end - i >= 2:
            doc.claim("k8s_table", i, end)
        i = max(end, i + 1)
