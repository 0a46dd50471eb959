"""``dcgmi diag -j``: the JSON of DCGM's diagnostic, 3.x (``"DCGM GPU Diagnostic"``, per-GPU
``gpu_id``) and 4.x (``"DCGM Diagnostic"``, ``entity_group``/``entity_id``, warnings with
DCGM's error id and category, a ``test_summary`` that repeats them). A paste that does not
load (cut short, ``{"..."}`` for what was left out) is read key by key: jsoncpp writes keys
sorted, so a result's ``entity_group`` and ``gpu_id``/``entity_id`` come before its
``status``, and a test's ``results`` before its ``test_summary``.

The evidence is the paste's own lines (the token itself where the document is one line).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gputriage.io import safejson
from gputriage.parsers.dcgmi_diag_model import (
    RETURN,
    DiagMessage,
    DiagReport,
    DiagTest,
    gpus_named,
    status_word,
    worst,
)
from gputriage.text.fields import strict_int

__all__ = ["read_json"]

LONG_LINE = 240  # a line longer than this is quoted by its token only (a one-line document)


def read_json(text: str, out: DiagReport) -> None:
    """Read the JSON of ``text`` (whole, or cut short) into ``out``."""
    text = text.replace("\ufeff", "")  # a UTF-8 byte-order mark before the document
    start = text.find("{")
    try:
        doc = safejson.loads(text[start:]) if start >= 0 else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and ("DCGM GPU Diagnostic" in doc or "DCGM Diagnostic" in doc):
        out.complete = True
        _walk_json(doc, out)
        scanned = DiagReport()
        _scan_json(text, scanned)
        _quote(text, out, scanned)
    else:  # cut short, or a piece of the document (one category or test): key by key
        _scan_json(text, out)


def _walk_json(doc: dict[str, Any], out: DiagReport) -> None:
    root = doc.get("DCGM GPU Diagnostic") or doc.get("DCGM Diagnostic") or {}
    if not isinstance(root, dict):
        return
    meta_doc = doc.get("metadata")
    meta: dict[str, Any] = meta_doc if isinstance(meta_doc, dict) else root
    out.version = _str(meta.get("version")) or _str(root.get("version"))
    out.driver = _str(meta.get("Driver Version Detected"))
    ids = root.get("GPU Device IDs")
    if isinstance(ids, list):
        out.device_ids = [str(i) for i in ids]
    if err := _str(root.get("runtime_error")):
        out.errors.append(_json_message("error", err, (), None, None))
        if r := RETURN.search(err):
            out.return_code = strict_int(r.group("code"))
            out.return_text = r.group("text").strip() or None
    for cat in _list(root.get("test_categories")):
        if not isinstance(cat, dict):
            continue
        for t in _list(cat.get("tests")):
            if isinstance(t, dict) and _str(t.get("name")):
                out.tests.append(_json_test(t, _str(cat.get("category"))))


def _index(v: Any) -> int | None:
    """An entity's id (an int, or digits in a string), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if 0 <= v < 100_000 else None
    return strict_int(v.strip(), signed=False) if isinstance(v, str) else None


def _json_test(t: dict[str, Any], category: str | None) -> DiagTest:
    test = DiagTest(_str(t.get("name")) or "?", category)
    summary = t.get("test_summary")
    own = _str(summary.get("status")) if isinstance(summary, dict) else None
    if own:
        test.status = status_word(own)
    for r in _list(t.get("results")):
        if not isinstance(r, dict):
            continue
        status = status_word(_str(r.get("status")) or "")
        gid = _index(r.get("gpu_id", r.get("entity_id")))
        group = _str(r.get("entity_group")) or "GPU"
        gpus: tuple[int, ...] = ()
        others: tuple[str, ...] = ()
        if group != "GPU" and gid is not None:
            others = (f"{group}{gid}",)
            test.entities[others[0]] = status
        elif gid is not None:
            gpus = (gid,)
            test.gpus[gid] = status
        elif isinstance(r.get("gpu_ids"), str):  # DCGM 1.x/2.x: "0,1,2,3"
            gpus = tuple(int(g) for g in re.findall(r"(?<![0-9])[0-9]{1,4}(?![0-9])", r["gpu_ids"]))
            test.gpus.update({g: status for g in gpus})
        if status and not own:
            test.status = worst(test.status, status)
        _json_messages(test, r, gpus, others)
    if isinstance(summary, dict):
        _json_messages(test, summary, (), ())
    test.lines = [json.dumps(test.name)]  # the paste's own lines replace it (_quote)
    return test


def _json_messages(test: DiagTest, r: dict[str, Any], gpus: tuple[int, ...],
                   others: tuple[str, ...]) -> None:
    seen = {m.text for m in test.messages}
    for w in _list(r.get("warnings")):
        text = _str(w.get("warning")) if isinstance(w, dict) else None
        if text and " ".join(text.split()) not in seen:
            code, cat = w.get("error_id"), w.get("error_category")
            test.messages.append(_json_message("warning", text, gpus, code, cat, others))
            seen.add(test.messages[-1].text)
    info = r.get("info")
    for text in [info] if isinstance(info, str) else _list(info):
        if isinstance(text, str) and text.strip() and " ".join(text.split()) not in seen:
            test.messages.append(_json_message("info", text, gpus, None, None, others))
            seen.add(test.messages[-1].text)


def _json_message(kind: str, text: str, gpus: tuple[int, ...], code: Any,
                  category: Any, others: tuple[str, ...] = ()) -> DiagMessage:
    words = " ".join(text.split())
    return DiagMessage(kind, words, gpus or (() if others else gpus_named(words)),
                       [json.dumps(text)], _small(code), _small(category), others)


def _small(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 100_000 else None


def _quote(text: str, out: DiagReport, scanned: DiagReport) -> None:
    """Give the walked tests and messages the lines of the paste that say them."""
    by_name: dict[str, list[DiagTest]] = {}
    for s in scanned.tests:
        by_name.setdefault(s.name, []).append(s)
    for t in out.tests:
        same = by_name.get(t.name)
        if not same:
            continue
        s = same.pop(0)
        t.lines = s.lines
        said = {m.text: m.lines for m in s.messages}
        for m in t.messages:
            m.lines = said.get(m.text) or _lines_with(text, m.lines[0][1:-1][:40]) or m.lines


def _lines_with(text: str, needle: str) -> list[str]:
    """The first line of ``text`` holding ``needle`` (a JSON string's escaped start)."""
    at = text.find(needle) if needle else -1
    if at < 0:
        return []
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    line = text[start:end if end >= 0 else len(text)].strip()
    return [line if len(line) <= LONG_LINE else needle]


_TOKEN = re.compile(r'"(?P<key>[^"\\]{1,40})"\s{0,40}:\s{0,40}'
                    r'(?P<value>"(?:[^"\\]|\\.)*"|-?[0-9]{1,9}(?![0-9.eE]))')
_RESULT_KEYS = ("gpu_id", "entity_id")


@dataclass
class _Scan:
    """Where a key-by-key read of a diag JSON is: the test and result being read."""

    out: DiagReport
    category: str | None = None
    test: DiagTest | None = None
    entity: str | int | None = None  # the result being read: a GPU index or "CPU0"
    group: str = "GPU"
    code: int | None = None

    def status(self, value: Any, line: str) -> None:
        """A result's status, or, after it, the test's own (its ``test_summary``)."""
        test, entity = self.test, self.entity
        if test is None:
            return
        status = status_word(str(value))
        if isinstance(entity, int) and entity not in test.gpus:
            test.gpus[entity] = status
            test.status = worst(test.status, status)
        elif isinstance(entity, str) and entity not in test.entities:
            test.entities[entity] = status
            test.status = worst(test.status, status)
        else:  # the test's own status (test_summary): it is the test's verdict
            test.status, self.entity = status, None
        test.lines.append(line)

    def warning(self, value: str, line: str) -> None:
        test, entity = self.test, self.entity
        if test is None:
            return
        gpus = (entity,) if isinstance(entity, int) else ()
        others = (entity,) if isinstance(entity, str) else ()
        msg = DiagMessage("warning", " ".join(value.split()),
                          gpus or (() if others else gpus_named(value)), [line], self.code,
                          entities=others)
        if msg.text not in {x.text for x in test.messages}:
            test.messages.append(msg)
            test.lines.append(line)
        self.code = None

    def result(self, value: Any) -> None:
        gid = _index(value)
        self.entity = None if gid is None else (gid if self.group == "GPU"
                                                else f"{self.group}{gid}")
        self.group = "GPU"

    def key(self, key: str, value: Any, line: str) -> None:
        """Apply one ``"key": value`` token."""
        if key == "category":
            self.category, self.test = str(value), None
        elif key == "name":
            self.test = DiagTest(str(value), self.category, lines=[line])
            self.entity, self.group = None, "GPU"
            self.out.tests.append(self.test)
        elif key == "entity_group" and isinstance(value, str):
            self.group = value.strip() or "GPU"
        elif key in _RESULT_KEYS and self.test is not None:
            self.result(value)
        elif key == "status":
            self.status(value, line)
        elif key == "error_id" and isinstance(value, int):
            self.code = value
        elif key == "warning" and isinstance(value, str):
            self.warning(value, line)
        elif key == "version" and isinstance(value, str):
            self.out.version = value
        elif key == "Driver Version Detected" and isinstance(value, str):
            self.out.driver = value


def _scan_json(text: str, out: DiagReport) -> None:
    """A JSON paste that does not load (cut short, ``{"..."}`` elisions): its keys in
    order, each ``name`` a test, each ``gpu_id``/``entity_id`` a result of it; a
    ``status`` after a result's is the test's own (its ``test_summary``)."""
    scan = _Scan(out)
    for m in _TOKEN.finditer(text):
        key, raw = m.group("key"), m.group("value")
        try:
            value: Any = json.loads(raw) if raw.startswith('"') else strict_int(raw)
        except ValueError:
            continue
        scan.key(key, value, _line_at(text, m))


def _line_at(text: str, m: re.Match[str]) -> str:
    """The paste's line of a token (the token itself on a very long line)."""
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    line = text[start:end if end >= 0 else len(text)].strip()
    return line if len(line) <= LONG_LINE else m.group(0)[:LONG_LINE]


def _str(v: Any) -> str | None:
    return v.strip() if isinstance(v, str) and v.strip() else None


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []
