"""State of one systemd unit, from ``systemctl show UNIT`` or ``systemctl status UNIT``.

``show`` prints ``Key=Value`` lines; ``status`` prints a header
(``● unit - description``) then ``Loaded:``, ``Active:`` and ``Main PID:``
lines, then journal lines. Both map to one :class:`UnitState`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import ParseError, parse_int, split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["JOURNAL_LINE", "UNIT_LIFECYCLE", "UnitState", "claim_units", "parse_systemctl_show"]


# a journal record as journalctl or syslog prints it: time, host, program[pid]: message
JOURNAL_LINE = re.compile(
    r"^\s{0,4}(?P<time>(?:\S{1,12}\s{1,4}[0-9]{1,2}|[0-9]{4}-[0-9]{2}-[0-9]{2}[T ])\s{0,4}"
    r"[0-9]{2}:[0-9]{2}:[0-9]{2}\S{0,16})\s{1,4}(?P<host>\S{1,128})\s{1,4}"
    r"(?P<prog>[^\s:\[\]]{1,128})(?:\[(?P<pid>[0-9]{1,10})\])?:\s{0,4}(?P<msg>.{0,4000})$")

# systemd's own records of a unit's life (journalctl -u), shared by the service journals
UNIT_LIFECYCLE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("stopping", re.compile(r"^Stopping\b", re.IGNORECASE)),
    ("stopped", re.compile(r"^Stopped\b|Deactivated successfully", re.IGNORECASE)),
    ("starting", re.compile(r"^Starting\b", re.IGNORECASE)),
    ("started", re.compile(r"^Started\b", re.IGNORECASE)),
)

@dataclass
class UnitState:
    """A unit's load / active state and main process outcome."""

    id: str | None = None
    load_state: str | None = None  # loaded | not-found | masked | error
    active_state: str | None = None  # active | inactive | failed | activating | ...
    sub_state: str | None = None  # running | dead | exited | auto-restart | ...
    unit_file_state: str | None = None  # enabled | disabled | static | masked
    result: str | None = None  # success | exit-code | signal | timeout | ...
    exec_main_status: int | None = None
    main_pid: int | None = None
    active_enter_timestamp: str | None = None
    raw: dict[str, str] = field(default_factory=dict)

    @property
    def installed(self) -> bool:
        """The unit file exists (systemd could load it)."""
        return self.load_state not in (None, "not-found")

    @property
    def active(self) -> bool:
        """The unit is active now."""
        return self.active_state == "active"


_KEY_VALUE = re.compile(r"^([A-Z][A-Za-z0-9]{0,63})=(.*)$")
_SHOW_KEYS = frozenset({"Id", "Names", "LoadState", "ActiveState", "SubState", "UnitFileState"})
_STATUS_KEY = re.compile(r"^\s{0,16}(Loaded|Active|Main PID|Status|Unit):\s{0,8}(.*)$")
_HEADER = re.compile(r"^\s{0,4}(?:[●○×*↻✗✓]\s{1,4})?(\S{1,256}\.(?:service|socket|timer|"
                     r"target|mount|path|scope|slice|device|swap))(?:\s+-\s.*)?$")
_NOT_FOUND = re.compile(r"Unit (\S{1,256}) could not be found")
_STATE_WORD = re.compile(r"^([a-z][a-z\-]{0,31})(?:\s+\(([^)]{0,64})\))?")
_RESULT = re.compile(r"\(Result: ([a-z\-]{1,32})\)")
_SINCE = re.compile(r"\bsince (.{1,64}?)(?:;|$)")
_STATUS_CODE = re.compile(r"status=([0-9]{1,5})")


def _none(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip()
    return v or None


def _from_show(raw: dict[str, str]) -> UnitState:
    status = parse_int(raw.get("ExecMainStatus"))
    return UnitState(
        id=_none(raw.get("Id")),
        load_state=_none(raw.get("LoadState")),
        active_state=_none(raw.get("ActiveState")),
        sub_state=_none(raw.get("SubState")),
        unit_file_state=_none(raw.get("UnitFileState")),
        result=_none(raw.get("Result")),
        exec_main_status=status,
        main_pid=parse_int(raw.get("MainPID")),
        active_enter_timestamp=_none(raw.get("ActiveEnterTimestamp")),
        raw=raw,
    )


def _from_status(lines: list[str]) -> UnitState | None:
    state = UnitState()
    seen = False
    for line in lines:
        nf = _NOT_FOUND.search(line)
        if nf:
            state.id = state.id or nf.group(1).rstrip(".")
            state.load_state, state.active_state, state.sub_state = "not-found", "inactive", "dead"
            seen = True
            continue
        if state.id is None:
            h = _HEADER.match(line)
            if h:
                state.id = h.group(1)
                continue
        m = _STATUS_KEY.match(line)
        if not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        state.raw.setdefault(key, value)
        seen = True
        word = _STATE_WORD.match(value)
        if key == "Loaded" and word:
            state.load_state = word.group(1)
            inner = value[len(word.group(1)):].strip().removeprefix("(").rstrip(")")
            details = [p.strip() for p in inner.split(";")]
            if len(details) > 1 and details[1] and ":" not in details[1]:
                state.unit_file_state = details[1]
        elif key == "Active" and word:
            state.active_state = word.group(1)
            sub = _none(word.group(2))
            if sub is None or sub.startswith("Result:"):
                sub = "failed" if state.active_state == "failed" else None
            state.sub_state = sub
            r = _RESULT.search(value)
            state.result = r.group(1) if r else state.result
            s = _SINCE.search(value)
            if s and state.active_state in ("active", "activating", "reloading"):
                state.active_enter_timestamp = s.group(1).strip()
        elif key == "Main PID":
            state.main_pid = parse_int(value)
            c = _STATUS_CODE.search(value)
            if c:
                state.exec_main_status = int(c.group(1))
    return state if seen else None


def parse_systemctl_show(text: str) -> UnitState | None:
    """Parse ``systemctl show UNIT`` (or ``systemctl status UNIT``) output.

    None when the text is empty; ParseError when it is neither format. For
    ``show`` output naming several units only the first block is read.
    """
    if not text or not text.strip():
        return None
    lines = split_lines(text)
    raw: dict[str, str] = {}
    if any((m := _KEY_VALUE.match(line.strip())) and m.group(1) in _SHOW_KEYS for line in lines):
        for line in lines:
            stripped = line.strip()
            if not stripped:
                if raw:
                    break
                continue
            m = _KEY_VALUE.match(stripped)
            if m:
                raw.setdefault(m.group(1), m.group(2))
        return _from_show(raw)
    state = _from_status(lines)
    if state is None:
        raise ParseError("not systemctl show/status output: no 'Key=Value' or 'Active:' line")
    return state


# --- recognising it in a paste -------------------------------------------------------
_SHOW = re.compile(r"^[A-Z][A-Za-z]+=")
_STATUS_HEAD = re.compile(r"^\s*[●○×*]?\s*(?P<unit>nvidia-(?:persistenced|fabricmanager))"
                          r"(?:\.service)?\s+-\s")
_UNIT_NOT_FOUND = re.compile(
    r"^Unit nvidia-(?:persistenced|fabricmanager)\S* could not be found")
_INDENTED = re.compile(r"^(?:\s*$|\s)")
_JOURNAL = re.compile(r"^(?:\S+\s+[0-9]{1,2}|"
                      r"[0-9]{4}-[0-9]{2}-[0-9]{2}T\S+)"
                      r"\s+[0-9]{2}:[0-9]{2}:[0-9]{2}\S*\s+\S+\s+\S+:|"
                      r"^\S+\s+[0-9]{1,2} [0-9]{2}:[0-9]{2}:[0-9]{2} \S+ \S+:")
_STATE_KEY = re.compile(r"^(?:ActiveState|LoadState)=", re.M)


def _unit_source(text: str) -> str:
    if "persistenced" in text:
        return "systemctl_persistenced"
    return "systemctl_fabricmanager" if "fabricmanager" in text else ""


def _status_line(line: str) -> bool:
    return bool(_INDENTED.match(line) or _JOURNAL.match(line))


def _show_line(line: str) -> bool:
    return bool(_SHOW.match(line))


def _claim_show(doc: PasteDoc, i: int) -> None:
    """A ``systemctl show`` block starting at line ``i`` (four keys or more, a state)."""
    e = doc.extend(i, _show_line)
    name = _unit_source("\n".join(x for x in doc.lines[i:e]
                                  if x.startswith(("Id=", "Names=", "Description="))))
    if e - i >= 4 and name and _STATE_KEY.search("\n".join(doc.lines[i:e])):
        doc.claim(name, i, e)


# every claim holds the unit's name on a free line: a status header, "Unit ... could not
# be found", a show block's Id=/Names=/Description=
_GATE = Gate(literals=("persistenced", "fabricmanager"))


@gated_by(_GATE)
def claim_units(doc: PasteDoc) -> None:
    """``systemctl status`` / ``show`` of nvidia-persistenced and nvidia-fabricmanager."""
    if not _GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if not doc.free(i):
            continue
        m = _STATUS_HEAD.match(ln)
        if m and any("Loaded:" in x for x in doc.lines[i + 1:i + 4]):
            doc.claim(_unit_source(m.group("unit")), i, doc.extend(i + 1, _status_line))
        elif _UNIT_NOT_FOUND.match(ln):
            doc.claim(_unit_source(ln), i, i + 1)
        elif _SHOW.match(ln) and not (i and doc.free(i - 1) and _SHOW.match(doc.lines[i - 1])):
            _claim_show(doc, i)
