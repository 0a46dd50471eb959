"""What a GPU health checker left on a node, pasted alone: NVSentinel's condition
messages and events (``ErrorCode:DCGM_FR_IMEX_UNHEALTHY GPU:0 ... Recommended
Action=CONTACT_SUPPORT;``, ``checkName: GpuNvlinkWatch`` / ``errorCode: DCGM_FR_...``),
the EKS node monitoring agent's ``AcceleratedHardwareReady`` reasons
(``DCGMHealthCode122``, ``DCGMError``) and its log line when it cannot reach DCGM.

Each mark keeps the checker, its check (the condition type), the DCGM error code, the
GPU, the Xid it names and the checker's recommended action, with the lines it was read
from. A full ``kubectl describe node`` or ``get node -o yaml`` is Kubernetes' source: the
same messages in its conditions are judged by the same table (rules/k8s_node_health.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import split_lines, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["HealthMark", "claim_health_marks", "marks_in", "parse_health_marks"]

# every quantifier bounded: these run on every line of a paste
_CODE = re.compile(r"\b(DCGM_FR_[A-Z0-9_]{2,60})\b")
_EKS_CODE = re.compile(r"\bDCGMHealthCode([0-9]{1,4})\b|health check system with error code "
                       r"([0-9]{1,4})\b")
_EKS_DCGM_DOWN = re.compile(r"\bReason:\s{0,4}DCGMError\b|failed to (?:initialize|reconcile) "
                            r"DCGM\b.{0,200}?(?:nv-hostengine|Host engine)", re.IGNORECASE)
_GPU = re.compile(r"\bGPU[: ]{1,2}([0-9]{1,3})\b|\bGPU ([0-9]{1,3})'s\b")
_PCI = re.compile(r"\bPCI:([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\b")
_XID = re.compile(r"\bXID[ _-]?([0-9]{1,3})\b", re.IGNORECASE)
_ACTION = re.compile(r"Recommended ?Action[=:]\s{0,4}\"?([A-Z_]{2,40})|\brecommendedAction\"?:"
                     r"\s{0,4}\"?([A-Z_]{2,40}|[0-9]{1,3})", re.IGNORECASE)
_CHECK = re.compile(r"\b(Gpu[A-Za-z]{2,40}(?:Watch|Error|Failure)|DcgmDiagnostic[A-Za-z]{2,30}|"
                    r"AcceleratedHardwareReady|XidCriticalError)\b")
# a line that goes with a mark: its condition row, the event's other keys, a wrapped message
_RECORD = re.compile(r"^\s{0,12}(?:-\s)?(?:checkName|errorCode|isFatal|isHealthy|"
                     r"recommendedAction|message|entitiesImpacted|componentClass|agent|type|"
                     r"reason|status)\"?\s{0,2}[:=]|Recommended Action=|Gpu[A-Za-z]{2,40}Watch\b|"
                     r"AcceleratedHardwareReady|^\s{0,12}Check [A-Z]", re.IGNORECASE)


@dataclass
class HealthMark:
    """One checker's mark: a DCGM error (name or number) on a GPU or the node."""

    code: str  # DCGM_FR_..., DCGMHealthCode<N>, DCGMError
    number: int | None = None
    checker: str = "a health checker"
    check: str | None = None
    gpu: int | None = None
    pci: str | None = None
    xids: list[int] = field(default_factory=list)
    recommended: str | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(self.lines)


def _checker(text: str) -> str:
    if "AcceleratedHardwareReady" in text or "DCGMHealthCode" in text or "eks" in text.lower():
        return "the EKS node monitoring agent"
    if re.search(r"ErrorCode:DCGM_FR|errorCode|checkName|Gpu[A-Za-z]{2,40}Watch|"
                 r"quarantineHealthEvent|nvsentinel", text, re.IGNORECASE):
        return "NVSentinel"
    return "a health checker"


def marks_in(lines: list[str]) -> list[HealthMark]:
    """The marks a run of lines carries (one per code and GPU); a mark's lines are its
    own line and the lines around it up to the next mark."""
    found: list[HealthMark] = []
    for i, line in enumerate(lines):
        code, number = _code_of(line)
        if code is None:
            continue
        start = i
        while start > 0 and i - start < 3 and _code_of(lines[start - 1])[0] is None \
                and _RECORD.search(lines[start - 1]):
            start -= 1
        end = i + 1
        while end < len(lines) and end - i <= 4 and _continues(lines[end]):
            end += 1
        block = [ln.rstrip() for ln in lines[start:end] if ln.strip()]
        text = " ".join(block)
        gpu = next((strict_int(m.group(1) or m.group(2), signed=False)
                    for m in _GPU.finditer(text)), None)
        pci = next((m.group(1) for m in _PCI.finditer(text)), None)
        act = _ACTION.search(text)
        check = _CHECK.search(text)
        xids = sorted({x for m in _XID.finditer(text)
                       if (x := strict_int(m.group(1), signed=False)) is not None})
        mark = HealthMark(code, number, _checker(text), check.group(1) if check else None,
                          gpu, pci, xids, (act.group(1) or act.group(2)) if act else None, block)
        if not any(m.code == mark.code and m.gpu == mark.gpu for m in found):
            found.append(mark)
    return found


def _continues(line: str) -> bool:
    """Whether a line after a mark goes on with its record: another key of the event, a
    wrapped message (indented, or going on in lower case), the checker's advice."""
    text = line.strip()
    if not text or _code_of(line)[0] is not None:
        return False
    return bool(_RECORD.search(line)) or line[:1].isspace() or text[:1].islower() or \
        "Recommended Action" in line


def _code_of(line: str) -> tuple[str | None, int | None]:
    if m := _CODE.search(line):
        return m.group(1), None
    if m := _EKS_CODE.search(line):
        n = strict_int(m.group(1) or m.group(2), signed=False)
        return f"DCGMHealthCode{n}", n
    if _EKS_DCGM_DOWN.search(line):
        return "DCGMError", None
    return None, None


def parse_health_marks(text: str) -> list[HealthMark]:
    """Parse the marks of a paste; ParseError when it names no DCGM error."""
    marks = marks_in(split_lines(text))
    if not marks:
        raise ParseError("no health checker mark: no DCGM_FR_* code, DCGMHealthCode or "
                         "DCGM connection error")
    return marks


_GATE = Gate(_CODE, _EKS_CODE, _EKS_DCGM_DOWN)  # what _code_of finds


@gated_by(_GATE)
def claim_health_marks(doc: PasteDoc) -> None:
    """Each free line naming a DCGM error code, with its record's lines around it."""
    if not _GATE.open(doc):
        return
    i = 0
    while i < len(doc.lines):
        if not doc.free(i) or _code_of(doc.lines[i])[0] is None:
            i += 1
            continue
        start = i
        while doc.free(start - 1) and i - start < 3 and _RECORD.search(doc.lines[start - 1]):
            start -= 1
        end = i + 1
        while doc.free(end) and end - i <= 4 and _continues(doc.lines[end]):
            end += 1
        doc.claim("health_checker_marks", start, end)
        i = end
