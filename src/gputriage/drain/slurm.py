"""The fleet as Slurm sees it, and draining through it: ``sinfo`` for the GPU nodes and
those out of service (with the reason and its time, set by slurmctld), ``scontrol`` to
drain and to give a drain back. Every command runs without a shell, under a timeout.

The rate's memory is the node's ``Comment`` (kept by slurmctld in its state, no slurmdbd,
read by every node's ``sinfo``): each drain of ours appends its time to a word
``gputriage-drains=<time>,<time>`` (the last hour's, sinfo's ``%H`` format), after
whatever a person wrote there, which is kept. A resume leaves the word, so a node
drained, resumed and drained again within the hour counts twice."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from gputriage.drain.policy import RATE_WINDOW, Fleet, OutNode, is_ours

__all__ = ["LEDGER_WORD", "Runner", "SlurmError", "SlurmFleet", "comment_after",
           "split_comment"]

Runner = Callable[[Sequence[str], float], tuple[int, str, str]]
# sinfo's compact states of a node out of service (those ``sinfo -R`` lists, and maint)
OUT_STATES = ("drain", "drng", "drained", "draining", "down", "fail", "failg", "failing",
              "maint")
# the fields of the one sinfo read, each ended by the ASCII unit separator: a reason and
# a Comment are a person's free text, where "|" occurs and this control character not
SINFO_FIELDS = ("NodeList", "Gres", "StateCompact", "TimeStamp", "Reason", "Comment")
FIELD_END = "\x1f"


LEDGER_WORD = "gputriage-drains="
_LEDGER = re.compile(r"(?:^|\s)gputriage-drains=(\S*)")
# a drain in place and its own ledger time: a second or two apart (two clocks' seconds)
SAME_DRAIN = timedelta(seconds=10)
NULL = "(null)"  # sinfo's empty field


class SlurmError(Exception):
    """sinfo or scontrol could not be run or failed (one line)."""


def run_command(argv: Sequence[str], timeout_s: float) -> tuple[int, str, str]:
    """Run ``argv`` (no shell) under ``timeout_s``: (exit status, stdout, stderr)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, errors="replace",
                              timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: timed out after {timeout_s:g} s"
    except OSError as exc:
        return 126, "", f"{argv[0]}: {exc.strerror or exc}"
    return proc.returncode, proc.stdout, proc.stderr


def parse_time(text: str) -> datetime | None:
    """sinfo's ``%H`` (``2026-12-06T16:00:00``, the controller's local time)."""
    text = text.strip()
    if not text or text.lower() in ("unknown", "none", "n/a"):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def split_comment(comment: str) -> tuple[str, list[datetime]]:
    """A node's Comment: (what a person wrote, our drain times)."""
    comment = "" if comment.strip() == NULL else comment.strip()
    stamps = [when for m in _LEDGER.finditer(comment) for word in m.group(1).split(",")
              if (when := parse_time(word)) is not None]
    return " ".join(_LEDGER.sub(" ", comment).split()), stamps


def comment_after(comment: str, now: datetime) -> str:
    """The Comment with a drain at ``now`` added to our word, the times past the rate's
    window dropped, and a person's text kept in front."""
    theirs, stamps = split_comment(comment)
    kept = {w for w in stamps if timedelta(0) <= now - w < RATE_WINDOW}
    kept.add(now.replace(microsecond=0))
    ours = LEDGER_WORD + ",".join(w.isoformat(timespec="seconds") for w in sorted(kept))
    return f"{theirs} {ours}" if theirs else ours


class SlurmFleet:
    """The GPU nodes of a Slurm cluster (or of ``partition``)."""

    def __init__(self, runner: Runner = run_command, timeout_s: float = 20.0,
                 partition: str | None = None) -> None:
        self.runner = runner
        self.timeout_s = timeout_s
        self.partition = partition
        self._comments: dict[str, str] = {}  # each node's Comment as last read
        self._before: dict[str, str] = {}  # as it was before our drain

    def _run(self, *argv: str) -> str:
        rc, out, err = self.runner(argv, self.timeout_s)
        if rc != 0:
            why = (err.strip().splitlines() or [f"exit {rc}"])[-1]
            raise SlurmError(f"{' '.join(argv[:3])}: {why}")
        return out

    def _where(self) -> list[str]:
        return ["-p", self.partition] if self.partition else []

    def read(self) -> Fleet:
        """The GPU nodes (those with a ``gpu`` GRES; every node when none has one) and,
        of them, those out of service, with their reason and its time, and the drains
        of ours of the last hour that their Comment remembers.

        One ``sinfo``, so one answer of the controller: a node's state, reason and
        Comment are as one update left them. Read in two calls, a drain given back
        between them would leave its Comment's time without the drain in place, a past
        drain that never was, and ranked ahead of the drains kept it gave one back."""
        fields = ",".join(f"{name}:{FIELD_END}" for name in SINFO_FIELDS)
        nodes: dict[str, tuple[str, str, str, str]] = {}  # name -> (gres, state, when, why)
        comments: dict[str, str] = {}
        for line in self._run("sinfo", "-h", "-N", *self._where(), "-O",
                              fields).splitlines():
            if not line.strip():
                continue
            parts = [part.strip() for part in line.split(FIELD_END)]
            if len(parts) != len(SINFO_FIELDS) + 1 or parts[-1]:
                raise SlurmError(f"sinfo: a line that does not read as its fields: "
                                 f"{line.strip()[:80]!r}")
            name, gres, state, when, reason, comment = parts[:-1]
            if name:
                nodes[name] = (gres, state.lower(), when, reason)
                comments[name] = comment
        self._comments = comments
        gpu = {n for n, (gres, *_) in nodes.items() if "gpu" in gres.lower()}
        counted = gpu or set(nodes)
        out: dict[str, OutNode] = {}
        for name in sorted(counted):
            _, state, when, reason = nodes[name]
            if state.rstrip("*~#!%$@^-") not in OUT_STATES:
                continue
            if reason and reason.lower() != "none" and reason != NULL:
                out[name] = OutNode(name, parse_time(when), is_ours(reason), reason)
            else:
                out[name] = OutNode(name, None, False, state)
        ledger = []
        for name in sorted(counted):
            now_out = out.get(name)
            for drained_at in split_comment(comments.get(name, ""))[1]:
                if now_out is not None and now_out.ours and now_out.since is not None \
                        and abs(drained_at - now_out.since) <= SAME_DRAIN:
                    continue  # the drain in place, counted once
                ledger.append(OutNode(name, drained_at, True, "drained before"))
        return Fleet(len(counted), tuple(out[n] for n in sorted(out)), tuple(ledger))

    def drain(self, node: str, reason: str, now: datetime | None = None) -> None:
        """Drain with ``reason``, and its time added to the node's Comment, in one
        update."""
        self._before[node] = before = self._comments.get(node, "")
        comment = comment_after(before, now or datetime.now())
        self._run("scontrol", "update", f"nodename={node}", "state=drain",
                  f"reason={reason}", f"comment={comment}")

    def give_back(self, node: str) -> None:
        """Undo a drain (the node returns to service as it was): one of ours that
        overflowed the budget also leaves the Comment as it was, so it never counted;
        another (a job's, ``--undrain``) keeps it."""
        if node in self._before:
            before = self._before.pop(node)
            kept = "" if before.strip() == NULL else before.strip()
            self._run("scontrol", "update", f"nodename={node}", "state=resume",
                      f"comment={kept}")
        else:
            self._run("scontrol", "update", f"nodename={node}", "state=resume")

