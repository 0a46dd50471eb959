"""dmidecode -t slot: physical slot widths explain narrow links."""

from __future__ import annotations

import contextlib

import pytest
from hostkit import run
from hypothesis import given
from hypothesis import strategies as st

from gputriage.engine.analysis import analyze
from gputriage.errors import ParseError
from gputriage.ingest import load_input
from gputriage.model import Severity
from gputriage.parsers.dmidecode import parse_dmidecode_slots

SLOTS = """# dmidecode 3.3
Handle 0x0004, DMI type 9, 24 bytes
System Slot Information
\tDesignation: SLOT1
\tType: x16 PCI Express 4 x16
\tCurrent Usage: In Use
\tBus Address: 0000:17:00.0

Handle 0x0005, DMI type 9, 24 bytes
System Slot Information
\tDesignation: SLOT2
\tType: x16 PCI Express 4 x8
\tCurrent Usage: In Use
\tBus Address: 0000:31:00.0
"""


def test_parse_slots_takes_the_electrical_width():
    slots = parse_dmidecode_slots(SLOTS)
    assert [(s.designation, s.width, s.gen, s.bus_address) for s in slots] == [
        ("SLOT1", 16, 4, "0000:17:00.0"), ("SLOT2", 8, 4, "0000:31:00.0")]


def test_empty_and_foreign_text():
    assert parse_dmidecode_slots("  \n") == []
    with pytest.raises(ParseError):
        parse_dmidecode_slots("Linux version 6.1\n")


@given(st.text())
def test_arbitrary_text(text):
    with contextlib.suppress(ParseError):
        parse_dmidecode_slots(text)


def _nic_tree(width: str) -> dict:
    a = "0000:31:00.0"
    return {"files": {f"{a}/vendor": "0x15b3\n", f"{a}/device": "0x101b\n",
                      f"{a}/class": "0x020700\n", f"{a}/current_link_width": f"{width}\n",
                      f"{a}/max_link_width": "16\n",
                      f"{a}/current_link_speed": "16.0 GT/s PCIe\n",
                      f"{a}/max_link_speed": "16.0 GT/s PCIe\n"},
            "links": {f"{a}/driver": "../../../../bus/pci/drivers/mlx5_core"}}


def test_a_narrow_slot_explains_a_narrow_link():
    narrow = [f for f in run(pci_devices=_nic_tree("8")).findings
              if f.id == "pcie.width-degraded"]
    assert narrow and narrow[0].severity is Severity.WARNING
    explained = [f for f in run(pci_devices=_nic_tree("8"), dmidecode_slots=SLOTS).findings
                 if f.id == "pcie.width-degraded"]
    assert explained[0].severity is Severity.INFO and "SLOT2" in explained[0].title
    assert any(e.source == "dmidecode_slots" for e in explained[0].evidence)


def test_corpus_dmidecode_sample_is_read(corpus):
    sample = corpus.sample("cn-notes-connectx6-dmidecode")
    snap = load_input(str(sample.path))
    assert snap.get("dmidecode_slots") is not None
    slots = parse_dmidecode_slots(snap.text("dmidecode_slots"))
    by_bus = {s.bus_address: s for s in slots}
    assert by_bus["0000:31:00.0"].width == 8 and by_bus["0000:17:00.0"].width == 16
    assert not analyze(snap).unreadable
