"""Parse ``dmidecode -t slot``: the physical PCIe slots and what sits in them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import gated_blocks, gated_by
from gputriage.text.fields import normalize_bus_id, split_lines, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["Slot", "claim_dmidecode_slots", "parse_dmidecode_slots"]

_WIDTH = re.compile(r"\bx([0-9]{1,2})\b")
_GEN = re.compile(r"PCI Express ([0-9])\b", re.IGNORECASE)


@dataclass
class Slot:
    """One "System Slot Information" record."""

    designation: str | None = None
    type: str | None = None  # "x8 PCI Express 3 x8"
    width: int | None = None  # electrical lanes: the last xN of the type
    gen: int | None = None
    usage: str | None = None  # "In Use" / "Available"
    bus_address: str | None = None  # normalised 0000:31:00.0
    lines: list[str] = field(default_factory=list)


def parse_dmidecode_slots(text: str) -> list[Slot]:
    """Slots from ``dmidecode -t slot`` (or ``-t 9``); [] for empty text, ParseError
    when the text holds no slot record."""
    if not text.strip():
        return []
    slots: list[Slot] = []
    current: Slot | None = None
    for raw in split_lines(text):
        line = raw.rstrip()
        if line.strip() == "System Slot Information":
            current = Slot(lines=[line.strip()])
            slots.append(current)
            continue
        if current is None or ":" not in line:
            continue
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if key == "Designation":
            current.designation = value
        elif key == "Type":
            current.type = value
            widths = _WIDTH.findall(value)
            current.width = strict_int(widths[-1], signed=False) if widths else None
            gen = _GEN.search(value)
            current.gen = strict_int(gen.group(1), signed=False) if gen else None
        elif key == "Current Usage":
            current.usage = value
        elif key == "Bus Address":
            current.bus_address = normalize_bus_id(value)
        else:
            continue
        current.lines.append(line.strip())
    if not slots:
        raise ParseError("not dmidecode slot output: no 'System Slot Information' record")
    return slots


# --- recognising it in a paste -------------------------------------------------------
_SLOTS_START = re.compile(r"^(?:Handle 0x[0-9A-Fa-f]+, DMI type 9\b|System Slot Information\s*$)")


@gated_by(_SLOTS_START)
def claim_dmidecode_slots(doc: PasteDoc) -> None:
    """``dmidecode -t slot`` records (other DMI types stop a block)."""
    gated_blocks(doc, "dmidecode_slots", _SLOTS_START,
                 lambda s: not s.startswith("Handle ") or "DMI type 9" in s)
