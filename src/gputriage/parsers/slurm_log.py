"""What Slurm says of a GPU node: slurmctld's and slurmd's log lines, ``sinfo -R`` and
``scontrol show node`` reasons, and slurmstepd's messages in a job's output.

Read: a node whose gres/gpu count is lower than slurm.conf configures (``gres/gpu count
reported lower than configured (7 < 8)``, ``_node_config_validate: gres/gpu: Count
changed on node X (8 != 7)``), the registration slurmctld then rejected, slurmd unable
to autodetect GPUs through NVML, and a job step that the kernel's OOM killer hit
(``Detected 1 oom_kill event in StepId=...``). Each event keeps its node (where the line
names one) and its line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import split_lines, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["SlurmEvent", "SlurmLog", "claim_slurm_log", "parse_slurm_log"]

# the words a line must hold for any pattern to be tried (found by str.find first)
WORDS = ("gres/gpu", "oom_kill event", "autodetect nvml", "_slurm_rpc_node_registration",
         "gpu/nvml")
_COUNT_LOW = re.compile(r"gres/gpu count (?:reported )?lower than configured \("
                        r"(?P<have>[0-9]{1,4}) < (?P<want>[0-9]{1,4})\)", re.IGNORECASE)
_COUNT_CHANGED = re.compile(r"gres/gpu: Count changed on node (?P<node>[\w.-]{1,100}) \("
                            r"(?P<want>[0-9]{1,4}) != (?P<have>[0-9]{1,4})\)", re.IGNORECASE)
_REGISTRATION = re.compile(r"_slurm_rpc_node_registration node=(?P<node>[\w.-]{1,100}): "
                           r"(?P<why>[^\n]{1,120})")
_NO_NVML = re.compile(r"configured to autodetect nvml functionality, but we weren'?t able to "
                      r"find that lib|gpu/nvml: .{0,80}(?:failed|unable)", re.IGNORECASE)
_OOM = re.compile(r"Detected (?P<n>[0-9]{1,6}) oom[_-]kill events? in (?P<step>StepId=[\w.+]"
                  r"{1,60}|step [\w.+]{1,60})", re.IGNORECASE)
# where a line names its node: "node=X", "on node X", "Setting node X state", "NodeName=X",
# sinfo -R's NODELIST column last
_NODE = re.compile(r"\bnode[= ](?P<node>[A-Za-z][\w.-]{0,99})\b(?! state\b)|Setting node "
                   r"(?P<set>[\w.-]{1,100}) state|NodeName=(?P<name>[\w.-]{1,100})")
_SINFO_NODE = re.compile(r"\s(?P<node>[A-Za-z][\w.-]{0,99}(?:\[[0-9,-]{1,60}\])?)\s*$")
_NODE_NAME = re.compile(r"^\s*NodeName=(?P<name>[\w.-]{1,100})")


@dataclass
class SlurmEvent:
    kind: str  # gres-count-low | registration-rejected | nvml-autodetect | oom-kill
    line: str
    node: str | None = None
    have: int | None = None  # GPUs slurmd found
    want: int | None = None  # GPUs slurm.conf configures
    detail: str | None = None


@dataclass
class SlurmLog:
    events: list[SlurmEvent] = field(default_factory=list)

    def of(self, kind: str) -> list[SlurmEvent]:
        return [e for e in self.events if e.kind == kind]


def _node_of(line: str, block_node: str | None) -> str | None:
    if m := _NODE.search(line):
        return m.group("node") or m.group("set") or m.group("name")
    if (m := _SINFO_NODE.search(line)) and _COUNT_LOW.search(line) and \
            not line.rstrip().endswith(")"):
        return m.group("node")  # sinfo -R: REASON USER TIMESTAMP NODELIST
    return block_node


def _event(line: str, node: str | None) -> SlurmEvent | None:
    text = line.strip()
    if m := _COUNT_LOW.search(line):
        return SlurmEvent("gres-count-low", text, _node_of(line, node),
                          strict_int(m["have"]), strict_int(m["want"]))
    if m := _COUNT_CHANGED.search(line):
        return SlurmEvent("gres-count-low", text, m["node"], strict_int(m["have"]),
                          strict_int(m["want"]))
    if m := _REGISTRATION.search(line):
        return SlurmEvent("registration-rejected", text, m["node"], detail=m["why"].strip())
    if _NO_NVML.search(line):
        return SlurmEvent("nvml-autodetect", text, _node_of(line, node))
    if m := _OOM.search(line):
        return SlurmEvent("oom-kill", text, _node_of(line, node),
                          detail=m["step"].rstrip("."), have=strict_int(m["n"]))
    return None


def _candidate(line: str) -> bool:
    low = line.lower()
    return any(w in low for w in WORDS)


def parse_slurm_log(text: str) -> SlurmLog:
    """Slurm's GPU events, in the order printed; ParseError when there is none."""
    log = SlurmLog()
    node = None  # the node of a `scontrol show node` block
    for line in split_lines(text):
        if m := _NODE_NAME.match(line):
            node = m.group("name")
        if _candidate(line) and (ev := _event(line, node)) is not None:
            log.events.append(ev)
    if not log.events:
        raise ParseError("no Slurm message about a node's GPUs or a step's OOM kill")
    return log


_WORDS_GATE = Gate(literals=WORDS)  # one of them is in every paste it claims in


@gated_by(_WORDS_GATE)
def claim_slurm_log(doc: PasteDoc) -> None:
    """Each line of Slurm's that tells of a node's GPUs or a step's OOM kill, and the
    NodeName line of the `scontrol show node` block it sits in."""
    low = doc.text.lower()
    if not any(w in low for w in WORDS):  # a literal first: this runs on every paste
        return
    last_name = None
    for i, line in enumerate(doc.lines):
        if _NODE_NAME.match(line):
            last_name = i
        if doc.free(i) and _candidate(line) and _event(line, None) is not None:
            if last_name is not None and doc.free(last_name):
                doc.claim("slurm_log", last_name, last_name + 1)
            doc.claim("slurm_log", i, i + 1)
