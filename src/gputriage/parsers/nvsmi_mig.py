"""The MIG listings of nvidia-smi, read as part of its table family: the MIG devices box
of the plain table, ``nvidia-smi -L``'s MIG lines, the ``nvidia-smi mig -lgi`` (GPU
instances) and ``-lci`` (compute instances) boxes, and the messages these commands print
instead ("No MIG-enabled devices found.", "No GPU instances found: Not Found").

Rows as printed::

    |  0    2   0   0  |   26MiB / 40448MiB    | 60      0 |  3   0    3    0    3 |
      MIG 1g.10gb     Device  0: (UUID: MIG-3f6f389f-...)
    |   0  MIG 1g.10gb         19        9          2:1     |
    |   0      1       MIG 3g.20gb          2         0          0:3      |
"""

from __future__ import annotations

import re

from gputriage.parsers.nvsmi import MigDevice
from gputriage.text.fields import strict_int

__all__ = ["MIG_BOXES", "MIG_NOTE", "box_kind", "list_line", "note", "row"]

#: the head of each MIG box -> the listing it is ("GPU instance profiles" is not read)
MIG_BOXES = {"MIG devices:": "table", "GPU instances:": "gpu-instances",
             "Compute instances:": "compute-instances",
             "GPU instance profiles:": "profiles", "Compute instance profiles:": "profiles"}
MIG_NOTE = re.compile(r"^\s*(?P<text>No MIG-enabled devices found\.?|No GPU instances found\b.*"
                      r"|No compute instances found\b.*|No MIG devices found)\s*$")

_ID = r"([0-9]{1,6}|N/A)"
_TABLE_ROW = re.compile(rf"^\s*(?P<gpu>[0-9]{{1,6}})\s+(?P<gi>{_ID})\s+(?P<ci>{_ID})\s+"
                        r"(?P<dev>[0-9]{1,6})\s*$")
_GI_ROW = re.compile(r"^(?P<gpu>[0-9]{1,6})\s+MIG\s+(?P<profile>\S+)\s+(?P<pid>[0-9]{1,6})\s+"
                     r"(?P<gi>[0-9]{1,6})\s+(?P<place>[0-9]{1,3}:[0-9]{1,3})$")
_CI_ROW = re.compile(r"^(?P<gpu>[0-9]{1,6})\s+(?P<gi>[0-9]{1,6})\s+MIG\s+(?P<profile>\S+)\s+"
                     r"(?P<pid>[0-9]{1,6})\s+(?P<ci>[0-9]{1,6})\s+(?P<place>[0-9]{1,3}:[0-9]{1,3})$")
_LIST_LINE = re.compile(r"^\s*MIG\s+(?P<profile>\S+)\s+Device\s+(?P<dev>[0-9]{1,6}):\s*"
                        r"\(UUID:\s*(?P<uuid>[^)\s]+)\)\s*$")


def box_kind(joined: str) -> str | None:
    """The listing a box heading opens (``MIG devices:`` -> "table"), else None."""
    return next((kind for head, kind in MIG_BOXES.items() if joined.startswith(head)), None)


def row(kind: str, cells: list[str], joined: str) -> MigDevice | None:
    """One instance row of a MIG box of ``kind`` (its cells, and their text joined), or
    None (headings, memory lines)."""
    if kind == "table":
        m = _TABLE_ROW.match(cells[0]) if cells else None
        if m is None:
            return None
        return MigDevice(int(m.group("gpu")), strict_int(m.group("gi"), signed=False),
                         strict_int(m.group("ci"), signed=False),
                         int(m.group("dev")), line=joined)
    if kind == "gpu-instances" and (m := _GI_ROW.match(joined)):
        return MigDevice(int(m.group("gpu")), int(m.group("gi")), profile=m.group("profile"),
                         profile_id=int(m.group("pid")), placement=m.group("place"),
                         line=joined)
    if kind == "compute-instances" and (m := _CI_ROW.match(joined)):
        return MigDevice(int(m.group("gpu")), int(m.group("gi")), int(m.group("ci")),
                         profile=m.group("profile"), profile_id=int(m.group("pid")),
                         placement=m.group("place"), line=joined)
    return None


def list_line(line: str, gpu_index: int | None) -> MigDevice | None:
    """An ``nvidia-smi -L`` MIG line under the GPU line of ``gpu_index``."""
    m = _LIST_LINE.match(line)
    if m is None:
        return None
    return MigDevice(gpu_index, device=int(m.group("dev")), profile=m.group("profile"),
                     uuid=m.group("uuid"), line=line.strip())


def note(line: str) -> str | None:
    """A MIG message of nvidia-smi (bare, or inside a box row), as printed."""
    text = line.strip().strip("|").strip()
    m = MIG_NOTE.match(text)
    return m.group("text") if m else None
