"""``dcgmi diag``: DCGM's diagnostic (levels 1-4), as its table or its ``-j`` JSON.

The table is a box of two columns: metadata rows (``DCGM Version``), section lines
(``+-----  Hardware  ---``) and one row per test. DCGM 2.x/3.x print a test's result as
``Pass - All`` or ``Fail - GPU: 1`` (then ``Warning | GPU 1 ...`` rows); 4.x print the
test's result, then one ``GPU0: Pass`` row per GPU and ``Warning: GPU0`` rows. Messages
are cut every 45 characters, mid-word: the cuts are joined back. The JSON is
``{"DCGM GPU Diagnostic" | "DCGM Diagnostic": {"test_categories": [...]}}`` with per-GPU
results (``gpu_id`` in 3.x, ``entity_id`` in 4.x) and warnings with their DCGM error
codes; a cut-short or elided paste of it is read key by key. dcgmi's own errors
(``Error: ... Return: (-30) : DCGM GPU Diagnostic returned an error``) are kept too.
"""

from __future__ import annotations

import re

from gputriage.errors import ParseError
from gputriage.parsers.dcgmi import BOX
from gputriage.parsers.dcgmi_diag_json import read_json
from gputriage.parsers.dcgmi_diag_model import (
    ENTITY_GROUPS,
    RETURN,
    DiagMessage,
    DiagReport,
    DiagTest,
    gpus_named,
    status_word,
    worst,
)
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import split_lines, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["MIG_REFUSAL", "DiagMessage", "DiagReport", "DiagTest", "claim_dcgmi_diag",
           "gpus_named", "parse_dcgmi_diag"]

MSG_WIDTH = 45  # dcgmi cuts a message into cells of this many characters

# the tests DCGM 2.x-4.x print (lower case): a table row naming one starts a block
TEST_NAMES = frozenset({
    "denylist", "blacklist", "nvml library", "cuda main library", "cuda toolkit libraries",
    "cuda toolkit library", "permissions and os blocks", "permissions and os-related blocks",
    "persistence mode", "environment variables", "page retirement/row remap",
    "page retirement", "graphics processes", "inforom", "fabric manager", "software",
    "pcie", "gpu memory", "memory", "memtest", "pulse test", "pulse_test", "diagnostic",
    "targeted stress", "targeted_stress", "targeted power", "targeted_power",
    "memory bandwidth", "memory_bandwidth", "sm stress", "sm_stress", "eud test", "eud",
    "cpu eud", "cpu_eud", "context create", "context_create", "nvbandwidth",
    "nvlink bandwidth", "ecc", "nccl tests", "nccl_tests",
})
_STATUS = r"(?:Pass|Fail|Skip|Warn|Not Run|PASS|FAIL|SKIP|WARN)"
_GROUPS = "|".join(ENTITY_GROUPS)
# every quantifier bounded or followed by a literal: these run on every line of a paste
_RESULT = re.compile(rf"^(?P<status>{_STATUS})(?:\s{{0,8}}-\s{{0,8}}(?P<who>All|GPUs?:\s{{0,8}}"
                     rf"[0-9]{{1,4}}(?:[,\s]{{1,8}}[0-9]{{1,4}}){{0,63}},?))?\s*$")
_ENTITY = re.compile(rf"^(?P<group>{_GROUPS})\s?(?P<id>[0-9]{{1,4}}):\s{{0,8}}"
                     rf"(?P<status>{_STATUS})\s*$")
_ROW = re.compile(r"^\s*\|(?P<name>[^|]*)\|(?P<value>.*)$")
_SECTION = re.compile(r"^\s*[+|]-{3,}\s{1,40}(?P<name>[A-Za-z][\w ]{0,40}?)\s{1,40}-{3}")
_MSG_NAME = re.compile(rf"^(?P<kind>Warning|Info|Error)(?::\s{{0,8}}(?P<group>{_GROUPS})\s?"
                       rf"(?P<id>[0-9]{{1,4}}))?$")
_COMMAND = re.compile(r"\bdcgmi\s{1,20}diag\b(?P<args>.*)$")
_LEVEL = re.compile(r"(?:-r|--run)[\s=]{1,8}(?P<level>[1-4])\b")
_ERROR = re.compile(r"^\s*Error:\s*(?P<text>\S.*)$")
_WARNING = re.compile(r"^\s*Warning:\s*(?P<text>requested test .*)$")  # older NVVS's
_RAN = re.compile(r"^\s*Successfully ran diagnostic for group\.?\s*$")
_HEADER = re.compile(r"^\s*\|\s*Diagnostic\s*\|\s*Result\s*\|\s*$")
_FOOTER = re.compile(r"^\s*\+[-=+]+\+\s*$")
_JSON_ROOT = re.compile(r'"DCGM (?:GPU )?Diagnostic"\s*:')
# a piece of the JSON without its root: a category's or a test's object, cut out of it
_JSON_PIECE = re.compile(r'^\s*"(?:(?P<key>name|category)"\s*:\s*"(?P<value>[\w -]{1,40})"|'
                         r'test_categories"\s*:)')
_CATEGORIES = frozenset({"deployment", "integration", "hardware", "stress", "performance",
                         "custom", "plugin"})
_METADATA = {"dcgm version": "version", "version": "version",
             "driver version detected": "driver", "gpu device ids detected": "device_ids",
             "gpu device ids": "device_ids"}
_DCGMI_ERRORS = re.compile(
    r"^\s*(?:Error|Warning): (?:Unable to complete diagnostic|Cannot load plugins|"
    r"Diagnostic could not|Unable to (?:start|run) (?:the )?diag|requested test .{1,80} was "
    r"not found among possible test choices|.*\bReturn: \(-?[0-9]{1,4}\))")
# NVVS's refusals to run on MIG-enabled GPUs, printed without "Error:" (NVVS's gpu list)
MIG_REFUSAL = re.compile(
    r"MIG configuration is incompatible with the diagnostic|CUDA does not support enumerating "
    r"GPUs with MIG mode enabled|MIG is enabled, but no compute instances are configured")
_REFUSAL = re.compile(r"(?P<text>(?:GPU [0-9]{1,4}'s |Cannot run diagnostic: )?"
                      r"(?:" + MIG_REFUSAL.pattern + r").{0,200})$")  # any prefix before


def parse_dcgmi_diag(text: str) -> DiagReport:
    """Parse ``dcgmi diag`` output (table, ``-j`` JSON, or dcgmi's error); ParseError
    when it holds no test result and no dcgmi diag error."""
    out = DiagReport()
    lines = split_lines(text)
    for ln in lines:
        if m := _COMMAND.search(ln):
            out.command = ln.strip()
            if lv := _LEVEL.search(m.group("args")):
                out.level = int(lv.group("level"))
            break
    if _JSON_ROOT.search(text) or any(_piece_line(ln) for ln in lines[:8]):
        read_json(text, out)
    else:
        _read_table(lines, out)
    if not out.tests and not out.errors:
        raise ParseError("not dcgmi diag output: no test result and no dcgmi error")
    return out


# --- the table --------------------------------------------------------------------------

def _chunk(line: str) -> str:
    """The message text of a row's value cell: a full-width cell keeps its trailing space
    (a cut may fall after one), a short one is stripped."""
    first = line.index("|")
    second = line.index("|", first + 1)
    body = line[second + 1:]
    last = body.rfind("|")
    if last >= MSG_WIDTH + 2:  # " ", 45 characters and the padding before "|"
        return body[1:1 + MSG_WIDTH]
    return (body[:last] if last >= 0 else body)[1:].rstrip()


class _Table:
    """The state of reading a table: the section, the test and the message being read."""

    def __init__(self, out: DiagReport) -> None:
        self.out = out
        self.category: str | None = None
        self.test: DiagTest | None = None
        self.msg: DiagMessage | None = None
        self.chunks: list[str] = []

    def end_message(self) -> None:
        if self.msg is not None:
            self.msg.text = " ".join("".join(self.chunks).split())
            if not self.msg.gpus and not self.msg.entities:
                self.msg.gpus = gpus_named(self.msg.text)
        self.msg, self.chunks = None, []

    def row(self, line: str, name: str, value: str) -> None:
        key = name.lower()
        if key in _METADATA and self.test is None:
            self.metadata(_METADATA[key], value)
            return
        if m := _MSG_NAME.match(name):
            self.end_message()
            group, ident = m.group("group"), m.group("id")
            gpus = (int(ident),) if group == "GPU" else ()
            others = (f"{group}{ident}",) if group and group != "GPU" else ()
            self.msg = DiagMessage(m.group("kind").lower(), "", gpus, [line], entities=others)
            self.chunks = [_chunk(line)]
            if self.test is not None:
                self.test.messages.append(self.msg)
                self.test.lines.append(line)
            else:
                self.out.errors.append(self.msg)
            return
        if name:
            self.end_message()
            if not (_RESULT.match(value) or key in TEST_NAMES):
                return  # another metadata row (serials, CPUs, EUD version)
            self.test = DiagTest(name, self.category, lines=[line])
            self.out.tests.append(self.test)
            self.result(value)
            return
        per_gpu = bool(_ENTITY.match(value) or ((m := _RESULT.match(value)) and m["who"]))
        if self.test is not None and (self.msg is None or per_gpu) and self.result(value):
            self.end_message()  # 4.x: the GPUs' results follow the test's own warnings
            self.test.lines.append(line)
        elif self.msg is not None:
            self.msg.lines.append(line)
            self.chunks.append(_chunk(line))
            if self.test is not None:
                self.test.lines.append(line)

    def metadata(self, what: str, value: str) -> None:
        if what == "device_ids":
            self.out.device_ids = [v.strip() for v in value.split(",") if v.strip()]
        else:
            setattr(self.out, what, value or None)

    def result(self, value: str) -> bool:
        """Read a result cell into the test; False when it is not one."""
        test = self.test
        if test is None:
            return False
        if m := _ENTITY.match(value):
            group, status = m.group("group"), status_word(m.group("status"))
            if group == "GPU":
                test.gpus[int(m.group("id"))] = status
            else:  # a CPU, switch, link...: its result, never a GPU's
                test.entities[f"{group}{m.group('id')}"] = status
            return True
        if not (m := _RESULT.match(value)):
            return False
        status, who = status_word(m.group("status")), m.group("who")
        if who and who.startswith("GPU"):
            for g in re.findall(r"[0-9]{1,4}", who):
                test.gpus[int(g)] = status
        elif who:
            test.all_gpus = status
        test.status = worst(test.status, status)
        return True


def _read_table(lines: list[str], out: DiagReport) -> None:
    table = _Table(out)
    for ln in lines:
        if _RAN.match(ln):
            continue
        elif m := _SECTION.match(ln):
            table.end_message()
            table.category, table.test = m.group("name").strip(), None
        elif _HEADER.match(ln):
            continue
        elif _FOOTER.match(ln):
            table.end_message()
            out.complete = out.complete or bool(out.tests)
        elif m := _ROW.match(ln):
            value = m.group("value").rstrip().rstrip("|").strip()
            table.row(ln.rstrip(), m.group("name").strip(), value)
        elif ((m := _ERROR.match(ln) or _WARNING.match(ln)) and (_DCGMI_ERRORS.match(ln)
                                                                 or out.errors)) or (
                m := _REFUSAL.search(ln)):
            table.end_message()
            text = m.group("text").rstrip()
            out.errors.append(DiagMessage("error", text, gpus_named(text), [ln.strip()]))
            if r := RETURN.search(ln):
                out.return_code = strict_int(r.group("code"))
                out.return_text = r.group("text").strip() or None
    table.end_message()


# --- the detector -----------------------------------------------------------------------

def _starts_table(line: str) -> bool:
    """A line only dcgmi diag prints: its header, a section line, or a row of a test it
    runs with a result."""
    if _HEADER.match(line) or _SECTION.match(line):
        return True
    m = _ROW.match(line)
    if not m:
        return False
    value = m.group("value").rstrip().rstrip("|").strip()
    return m.group("name").strip().lower() in TEST_NAMES and bool(
        _RESULT.match(value) or _ENTITY.match(value))


def _starts_claim(doc: PasteDoc, i: int) -> bool:
    """Whether a claim of claim_dcgmi_diag starts at free line ``i``."""
    ln = doc.lines[i]
    return bool(_starts_table(ln) or (ln.lstrip("\ufeff \t").startswith("{")
                                       and _json_starts(doc, i))
                or _DCGMI_ERRORS.match(ln) or _REFUSAL.search(ln))


# a table's rows and header hold "|", a section line "---", the JSON "{"
_GATE = Gate(_DCGMI_ERRORS, _REFUSAL, literals=("|", "---", "{"), test_at=_starts_claim)


@gated_by(_GATE)
def claim_dcgmi_diag(doc: PasteDoc) -> None:
    """The diag table (from its header, a section line or a test row, with the
    "Successfully ran" line above it), its -j JSON, and dcgmi diag's error lines."""
    if not _GATE.open(doc):
        return
    i = 0
    while i < len(doc.lines):
        ln = doc.lines[i]
        if not doc.free(i):
            i += 1
        elif _starts_table(ln):
            first = i - 1 if doc.free(i - 1) and _RAN.match(doc.lines[i - 1]) else i
            first = first - 1 if _table_top(doc, first - 1) else first
            end = doc.extend(i + 1, lambda s: bool(BOX.match(s)))
            doc.claim("dcgmi_diag", first, end)
            i = end
        elif ln.lstrip("\ufeff \t").startswith("{") and _json_starts(doc, i):
            end = _json_end(doc, i)
            doc.claim("dcgmi_diag", i, end)
            i = end
        elif _DCGMI_ERRORS.match(ln) or _REFUSAL.search(ln):
            end = doc.extend(i + 1, lambda s: bool(_ERROR.match(s)))
            doc.claim("dcgmi_diag", i, end)
            i = end
        elif _RAN.match(ln) and doc.free(i + 1) and BOX.match(doc.lines[i + 1]):
            i += 1  # the table below claims it
        else:
            i += 1


def _table_top(doc: PasteDoc, i: int) -> bool:
    return doc.free(i) and bool(_FOOTER.match(doc.lines[i])) and "=" not in doc.lines[i]


def _piece_line(line: str) -> bool:
    """A line that opens a piece of the JSON: ``"test_categories" :``, a category's
    ``"category" : "Hardware"``, or a test's ``"name" : "diagnostic"``."""
    m = _JSON_PIECE.match(line)
    if not m:
        return False
    value = (m.group("value") or "").lower().replace("_", " ").strip()
    return m.group("key") is None or value in (
        _CATEGORIES if m.group("key") == "category" else TEST_NAMES)


def _json_starts(doc: PasteDoc, i: int) -> bool:
    if _JSON_ROOT.search(doc.lines[i]):
        return True
    j = doc.next_nonblank(i + 1)
    return doc.free(j) and bool(_JSON_ROOT.search(doc.lines[j]) or _piece_line(doc.lines[j]))


def _json_end(doc: PasteDoc, i: int) -> int:
    """The line after the document: its closing brace at the first one's indentation,
    else the end of the free lines (a paste cut short)."""
    if doc.lines[i].rstrip().endswith("}"):
        return i + 1  # a one-line document
    indent = len(doc.lines[i]) - len(doc.lines[i].lstrip())
    j = i + 1
    while doc.free(j):
        ln = doc.lines[j]
        j += 1
        if ln.strip() == "}" and len(ln) - len(ln.lstrip()) == indent:
            break
    return j
