"""``dcgmi diag -j``: the JSON of DCGM's diagnostic, 3.x (``"DCGM GPU Diagnostic"``, per-GPU
``gpu_id``) and 4.x (``"DCGM Diagnostic"``, ``entity_id``, warnings with DCGM's error id and
category, a ``test_summary`` that repeats them). A paste that does not load (cut short,
``{"..."}`` for what was left out) is read key by key: jsoncpp writes keys sorted, so a
result's ``gpu_id`` comes before its ``status``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gputriage import safejson
from gputriage.parsers.dcgmi_diag_model import (
    RETURN,
    DiagMessage,
    DiagReport,
    DiagTest,
    gpus_named,
    status_word,
    worst,
)

__all__ = ["read_json"]


def read_json(text: str, out: DiagReport) -> None:
    """Read the JSON of ``text`` (whole, or cut short) into ``out``."""
    out.form = "json"
    start = text.find("{")
    try:
        doc = safejson.loads(text[start:]) if start >= 0 else None
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        out.complete = True
        _walk_json(doc, out)
    else:
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
            out.return_code, out.return_text = int(r.group("code")), r.group("text") or None
    for cat in _list(root.get("test_categories")):
        if not isinstance(cat, dict):
            continue
        for t in _list(cat.get("tests")):
            if isinstance(t, dict) and _str(t.get("name")):
                out.tests.append(_json_test(t, _str(cat.get("category"))))


def _json_test(t: dict[str, Any], category: str | None) -> DiagTest:
    test = DiagTest(_str(t.get("name")) or "?", category)
    summary = t.get("test_summary")
    if isinstance(summary, dict) and _str(summary.get("status")):
        test.status = status_word(_str(summary.get("status")) or "")
    for r in _list(t.get("results")):
        if not isinstance(r, dict):
            continue
        status = status_word(_str(r.get("status")) or "")
        gid = r.get("gpu_id", r.get("entity_id"))
        gpus: tuple[int, ...] = ()
        if r.get("entity_group", "GPU") == "GPU" and str(gid).isdigit():
            gpus = (int(str(gid)),)
            test.gpus[gpus[0]] = status
        elif isinstance(r.get("gpu_ids"), str):  # DCGM 1.x/2.x: "0,1,2,3"
            gpus = tuple(int(g) for g in re.findall(r"\d+", r["gpu_ids"]))
            test.gpus.update({g: status for g in gpus})
        if status:
            test.status = test.status if isinstance(summary, dict) else worst(test.status,
                                                                                 status)
        _json_messages(test, r, gpus)
    if isinstance(summary, dict):
        _json_messages(test, summary, ())
    test.lines = [f'"name": "{test.name}"'] + [
        f'"gpu {g}": "{s}"' for g, s in sorted(test.gpus.items())]
    return test


def _json_messages(test: DiagTest, r: dict[str, Any], gpus: tuple[int, ...]) -> None:
    seen = {m.text for m in test.messages}
    for w in _list(r.get("warnings")):
        if isinstance(w, dict) and (text := _str(w.get("warning"))) and text not in seen:
            code, cat = w.get("error_id"), w.get("error_category")
            msg = _json_message("warning", text, gpus, code, cat)
            test.messages.append(msg)
            test.lines.append(msg.lines[0])
            seen.add(text)
    info = r.get("info")
    for text in [info] if isinstance(info, str) else _list(info):
        if isinstance(text, str) and text and text not in seen:
            test.messages.append(_json_message("info", text, gpus, None, None))
            seen.add(text)


def _json_message(kind: str, text: str, gpus: tuple[int, ...], code: Any,
                  category: Any) -> DiagMessage:
    words = " ".join(text.split())
    return DiagMessage(kind, words, gpus or gpus_named(words), [json.dumps(text)],
                       code if isinstance(code, int) else None,
                       category if isinstance(category, int) else None)


_TOKEN = re.compile(r'"(?P<key>[^"\\]{1,40})"\s*:\s*(?P<value>"(?:[^"\\]|\\.)*"|-?\d+)')


def _scan_json(text: str, out: DiagReport) -> None:
    """A JSON paste that does not load (cut short, ``{"..."}`` elisions): its keys in
    order, each ``name`` a test, each ``gpu_id``/``entity_id`` a result of it."""
    category: str | None = None
    test: DiagTest | None = None
    gpu: int | None = None
    code: int | None = None
    for m in _TOKEN.finditer(text):
        key, raw = m.group("key"), m.group("value")
        value = json.loads(raw) if raw.startswith('"') else int(raw)
        line = _line_at(text, m.start())
        if key == "category":
            category, test = str(value), None
        elif key == "name":
            test, gpu = DiagTest(str(value), category, lines=[line]), None
            out.tests.append(test)
        elif key in ("gpu_id", "entity_id") and test is not None and str(value).isdigit():
            gpu = int(str(value))
        elif key == "status" and test is not None:
            status = status_word(str(value))
            if gpu is not None:
                test.gpus[gpu] = status
            test.status = worst(test.status, status)
            test.lines.append(line)
        elif key == "error_id" and isinstance(value, int):
            code = value
        elif key == "warning" and test is not None and isinstance(value, str):
            msg = DiagMessage("warning", " ".join(value.split()),
                              (gpu,) if gpu is not None else gpus_named(value), [line], code)
            if msg.text not in {x.text for x in test.messages}:
                test.messages.append(msg)
                test.lines.append(line)
            code = None
        elif key == "version" and isinstance(value, str):
            out.version = value
        elif key == "Driver Version Detected" and isinstance(value, str):
            out.driver = value


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start:end if end >= 0 else len(text)].strip()


def _str(v: Any) -> str | None:
    return v.strip() if isinstance(v, str) and v.strip() else None


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []
