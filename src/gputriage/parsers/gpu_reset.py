"""What a GPU reset attempt printed: ``nvidia-smi -r`` / ``--gpu-reset`` and the
MIG mode changes that also need the GPU free, with what people paste around
them (the commands of a shell session, ``fuser -v /dev/nvidia*`` listings of
the processes holding a device, persistence mode switched off).

Each attempt becomes a :class:`ResetAttempt`: ``reset`` (done), ``in-use``
(refused: another client holds the GPU), ``mig-refused`` (nvidia-smi -mig refused for
the same reason), ``mig-pending`` (a MIG mode change
waits for the GPU to be free) or ``failed`` (refused for another reason).
The processes named as holders and the steps taken between attempts
(persistence mode off, a daemon stopped or killed) are kept in order, so a
rule can tell what finally let a reset through. The examples in nvidia-smi's
own advice ("e.g. Fabric Manager, CUDA application ...") are not holders.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import normalize_bus_id, split_lines, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["Holder", "ResetAttempt", "ResetLog", "claim_gpu_reset", "is_reset_context",
           "is_reset_line", "is_reset_step", "parse_gpu_reset", "wraps"]

_BUS = r"(?P<bus>(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])"
_DONE = re.compile(rf"^\s*GPU {_BUS} was successfully reset\b", re.IGNORECASE)
_LIST_HEAD = re.compile(r"^\s*The following GPUs? could not be reset:?\s*$", re.IGNORECASE)
_LIST_ITEM = re.compile(rf"^\s*GPU {_BUS}:\s*(?P<why>\S.*)$")
_IN_USE = re.compile(rf"^\s*(?:GPU )?{_BUS} is currently (?:in use|being used) by (?:another|one "
                     r"or more other) process", re.IGNORECASE)
_UNABLE = re.compile(rf"^\s*Unable to reset (?:this )?GPU(?: {_BUS})?(?:\s*(?:because|:)\s*"
                     r"(?P<why>.*))?$", re.IGNORECASE)
_MIG = re.compile(rf"MIG mode is in pending (?P<to>enable|disable) state for GPU {_BUS}:?\s*"
                  r"(?P<why>.*)$", re.IGNORECASE)
# nvidia-smi -mig 0|1 refused outright: the mode did not change, a client holds the GPU
_MIG_REFUSED = re.compile(rf"Unable to (?P<to>enable|disable) MIG Mode for GPU {_BUS}:?\s*"
                          r"(?P<why>.*)$", re.IGNORECASE)
_N_DEVICES = re.compile(r"^\s*[0-9]+ devices? (?:is|are) currently being used by one or more other "
                        r"processes", re.IGNORECASE)
_PM_OFF = re.compile(rf"^\s*Disabled persistence mode for GPU {_BUS}", re.IGNORECASE)
_PM_ON = re.compile(rf"^\s*Enabled persistence mode for GPU {_BUS}", re.IGNORECASE)
_ALL_DONE = re.compile(r"^\s*All done\.?\s*$")
_FUSER_HEAD = re.compile(r"^\s*USER\s+PID\s+ACCESS\s+COMMAND\s*$")
_FUSER_DEV = re.compile(r"^\s*(?P<dev>/dev/nvidia[\w-]*):\s+(?P<rest>\S.*)$")
_FUSER_MORE = re.compile(r"^\s+(?P<rest>\S+\s+[0-9]{1,10}\s+[Ffcemr.]{1,6}\s+\S.*)$")
_FUSER_ROW = re.compile(r"^(?P<user>\S+)\s+(?P<pid>[0-9]{1,10})\s+[Ffcemr.]{1,6}\s+(?P<cmd>\S+)")
_PROMPT = re.compile(r"^\s*(?:\S+@\S+?[:\s]\S*\s*[$#]|[$#])\s+(?P<cmd>\S.*)$")
_STOP = re.compile(r"\b(?:killall|pkill(?:\s+-\S+)*|systemctl\s+(?:stop|disable|mask)"
                   r"(?:\s+--now)?)\s+(?P<name>[\w@.-]+)")
_SMI_PM_OFF = re.compile(r"\bnvidia-smi\b.*\s-pm\s+0\b|\bnvidia-smi\b.*--persistence-mode[= ]0")
_EXIT = re.compile(r"^\s*exit(?:\s+code)?\s*[=:]\s*(?P<rc>[0-9]{1,3})\s*$", re.IGNORECASE)
_OTHER_FAIL = re.compile(r"GPU Reset couldn't run|Failed to reset GPU|Resetting GPU .{0,80} is "
                         r"not supported|reset (?:is )?not supported", re.IGNORECASE)


@dataclass
class Holder:
    """A process named as holding a GPU device (``fuser -v`` listing)."""

    name: str
    pid: int | None
    device: str | None
    line: str


@dataclass
class ResetAttempt:
    """One reset (or MIG mode change) and how it ended."""

    bus_id: str | None
    outcome: str  # reset | in-use | mig-pending | mig-refused | failed
    line: str
    reason: str | None = None
    steps_before: list[str] = field(default_factory=list)  # what was done since the last one


@dataclass
class ResetLog:
    """Reset attempts in order, the holders named, and the lines that show them."""

    attempts: list[ResetAttempt] = field(default_factory=list)
    holders: list[Holder] = field(default_factory=list)
    persistence_off: list[str] = field(default_factory=list)  # bus ids, "" when not said
    stopped: list[str] = field(default_factory=list)  # daemons stopped or killed
    lines: list[str] = field(default_factory=list)

    def last_by_gpu(self) -> dict[str | None, ResetAttempt]:
        """The last attempt per GPU (``None``: attempts that named no GPU)."""
        out: dict[str | None, ResetAttempt] = {}
        for a in self.attempts:
            out[a.bus_id] = a
        return out


def is_reset_line(line: str) -> bool:
    """A line only a GPU reset or a MIG mode change prints."""
    return bool(_DONE.match(line) or _LIST_HEAD.match(line) or _IN_USE.match(line)
                or _UNABLE.match(line) or _MIG.search(line) or _MIG_REFUSED.search(line)
                or _N_DEVICES.match(line)
                or _OTHER_FAIL.search(line))


_GATE = Gate(_DONE, _LIST_HEAD, _IN_USE, _UNABLE, _MIG, _MIG_REFUSED, _N_DEVICES,
             _OTHER_FAIL)  # is_reset_line's


def is_reset_context(line: str) -> bool:
    """A line that goes with reset messages: a refused GPU of the list, persistence
    mode switched, "All done.", an exit status, a ``fuser -v`` listing of a device."""
    return bool(_LIST_ITEM.match(line) or _PM_OFF.match(line) or _PM_ON.match(line)
                or _ALL_DONE.match(line) or _EXIT.match(line) or _FUSER_HEAD.match(line)
                or _FUSER_DEV.match(line) or _FUSER_MORE.match(line))


def wraps(line: str) -> bool:
    """A message nvidia-smi wraps over the following lines (its advice on holders)."""
    return bool(_N_DEVICES.match(line) or _IN_USE.match(line) or _UNABLE.match(line))


def _bus(m: re.Match[str]) -> str | None:
    raw = m.groupdict().get("bus")
    return normalize_bus_id(raw) if raw else None


class _Reader:
    def __init__(self) -> None:
        self.log = ResetLog()
        self.steps: list[str] = []
        self.in_list = False
        self.since_command = True  # a prompt line came since the last attempt

    def attempt(self, bus: str | None, outcome: str, line: str, reason: str | None) -> None:
        last = self.log.attempts[-1] if self.log.attempts else None
        if (outcome == "in-use" and last is not None and last.bus_id == bus
                and last.outcome in ("in-use", "mig-pending", "mig-refused")
                and not self.steps
                and not self.since_command):
            return  # the same refusal, explained on the next line
        self.since_command = False
        self.log.attempts.append(ResetAttempt(bus, outcome, line.strip(), reason,
                                              self.steps))
        self.steps = []

    def command(self, cmd: str) -> None:
        stop = _STOP.search(cmd)
        if stop:
            self.log.stopped.append(stop.group("name"))
            self.steps.append(cmd.strip())
        elif _SMI_PM_OFF.search(cmd):
            self.steps.append(cmd.strip())

    def line(self, raw: str) -> bool:
        """Read one line; False when it says nothing about a reset."""
        line = raw.rstrip()
        prompt = _PROMPT.match(line)
        if prompt:
            self.in_list = False
            self.since_command = True
            self.command(prompt.group("cmd"))
            return True
        for pattern, outcome in ((_DONE, "reset"), (_IN_USE, "in-use")):
            m = pattern.match(line)
            if m:
                self.attempt(_bus(m), outcome, line, None if outcome == "reset" else "in use")
                return True
        if _LIST_HEAD.match(line):
            self.in_list = True
            return True
        m = _LIST_ITEM.match(line)
        if m and self.in_list:
            why = m.group("why").strip()
            kind = "in-use" if re.search(r"in use|being used", why, re.IGNORECASE) else "failed"
            self.attempt(_bus(m), kind, line, why)
            return True
        return self._other(line)

    def _other(self, line: str) -> bool:
        m = _MIG.search(line)
        if m:
            self.attempt(_bus(m), "mig-pending", line, m.group("why").strip() or None)
            return True
        m = _MIG_REFUSED.search(line)
        if m:
            why = m.group("why").strip() or None
            used = why is not None and re.search(r"in use|being used|another client", why,
                                                 re.IGNORECASE)
            self.attempt(_bus(m), "mig-refused" if used else "failed", line, why)
            return True
        m = _UNABLE.match(line)
        if m:
            why = (m.group("why") or "").strip() or None
            used = why is not None and re.search(r"in use|being used|used by", why, re.I)
            self.attempt(_bus(m), "in-use" if used else "failed", line, why)
            return True
        if _OTHER_FAIL.search(line):
            self.attempt(None, "failed", line, line.strip())
            return True
        m = _PM_OFF.match(line)
        if m:
            self.log.persistence_off.append(_bus(m) or "")
            self.steps.append(line.strip())
            return True
        return bool(self._holder(line) or _N_DEVICES.match(line) or _ALL_DONE.match(line)
                    or _PM_ON.match(line) or _FUSER_HEAD.match(line) or _EXIT.match(line))

    def _holder(self, line: str) -> bool:
        m = _FUSER_DEV.match(line)
        dev = m.group("dev") if m else None
        rest = m.group("rest") if m else None
        if rest is None:
            more = _FUSER_MORE.match(line)
            rest = more.group("rest") if more else None
            dev = self.log.holders[-1].device if self.log.holders else None
        row = _FUSER_ROW.match(rest.strip()) if rest else None
        pid = strict_int(row.group("pid"), signed=False) if row else None
        if row is None or pid is None:
            return False
        # fuser -v prints the user first; the command column is cut to 15 characters
        user, cmd = row.group("user"), row.group("cmd")
        name = user if user.startswith(cmd) and len(user) > len(cmd) else cmd
        self.log.holders.append(Holder(name, pid, dev, line.strip()))
        return True


def parse_gpu_reset(text: str) -> ResetLog:
    """Parse what a GPU reset / MIG mode change session printed into a :class:`ResetLog`.

    Empty text gives an empty log; text with no reset message, holder listing
    or persistence-mode change raises :class:`ParseError`.
    """
    reader = _Reader()
    if not text or not text.strip():
        return reader.log
    for raw in split_lines(text):
        if reader.line(raw) and raw.strip():
            reader.log.lines.append(raw.rstrip())
    log = reader.log
    if not (log.attempts or log.holders or log.persistence_off):
        raise ParseError("not a GPU reset output: no 'successfully reset', 'could not be "
                         "reset', 'in use' or MIG pending message")
    return log


# --- recognising it in a paste -------------------------------------------------------
# commands of a reset session: stopping a GPU's holders, persistence mode, the reset
_STEP_CMD = re.compile(r"\b(?:killall|pkill|kill|fuser|lsof|systemctl\s+(?:stop|disable|mask)"
                       r"|nvidia-smi\b.*\s(?:-pm|--persistence-mode|-r|--gpu-reset|-mig))\b")


def is_reset_step(command: str) -> bool:
    """A command of a reset session (its prompt line belongs with the reset messages)."""
    return _STEP_CMD.search(command) is not None


def _reset_related(line: str) -> bool:
    return is_reset_line(line) or is_reset_context(line)


@gated_by(_GATE)
def claim_gpu_reset(doc: PasteDoc) -> None:
    """GPU reset / MIG mode change messages, and what goes with them in a paste."""
    if not _GATE.open(doc) or not any(doc.free(i) and is_reset_line(ln)
                                      for i, ln in enumerate(doc.lines)):
        return
    for i, ln in enumerate(doc.lines):
        if not (doc.free(i) and _reset_related(ln)):
            continue
        doc.owner[i] = "gpu_reset"
        j = i + 1
        while wraps(ln) and doc.free(j) and doc.lines[j].strip() and not _reset_related(
                doc.lines[j]):
            doc.owner[j] = "gpu_reset"
            j += 1
