"""Each tool call in a process of its own, so that a time bound is a real one: a call
still running when its time is up is killed, and neither it, a crash, nor the memory
it took outlives it; the server goes on serving.

The processes are forked from a server process that has gputriage's analysis loaded
(multiprocessing's ``forkserver``, where the platform has one): a call costs a fork,
not an interpreter start. The child's standard input and output are the protocol's
stream: it points both at /dev/null (what it prints goes nowhere), and hands back
its answer, already JSON, through a pipe."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from typing import Any

from gputriage.assist.tools import Policy, Refused, run_tool

__all__ = ["ANSWER_MAX_BYTES", "DEFAULT_TIMEOUT_S", "Answer", "Runner"]

DEFAULT_TIMEOUT_S = 60.0
ANSWER_MAX_BYTES = 8 << 20  # an answer past this is no use to an assistant
# what every call needs, imported once by the process the calls are forked from
_PRELOAD = ["gputriage.assist.tools", "gputriage.engine.analysis", "gputriage.ingest",
            "gputriage.results.document", "gputriage.results.diff", "gputriage.results.triage",
            "gputriage.views.triage", "gputriage.commands.explain", "gputriage.commands.logs",
            "gputriage.commands.compare"]

Answer = tuple[bool, str]  # (answered, the document as JSON text | why not, one line)


class Runner:
    """Runs tool calls in child processes under ``policy``, each within ``timeout_s``."""

    def __init__(self, policy: Policy, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.policy, self.timeout_s = policy, timeout_s
        if "forkserver" in multiprocessing.get_all_start_methods():
            self._ctx: Any = multiprocessing.get_context("forkserver")
            self._ctx.set_forkserver_preload(_PRELOAD)
        else:
            self._ctx = multiprocessing.get_context("spawn")

    def call(self, name: str, arguments: dict[str, Any]) -> Answer:
        """The answer of one call (blocking: the server runs it in a worker thread)."""
        receive, send = self._ctx.Pipe(duplex=False)
        child = self._ctx.Process(target=_answer, args=(name, self.policy, arguments, send),
                                  name=f"gputriage-mcp-{name}", daemon=True)
        try:
            child.start()
            send.close()
            if not receive.poll(self.timeout_s):
                return False, (f"{name} was stopped after {self.timeout_s:g} s, this "
                               "server's time bound per call: give a smaller input (fewer "
                               "paths, a since= window)")
            try:
                ok, text = receive.recv()
            except EOFError:  # the child died without answering
                child.join(5)
                return False, (f"{name} ended without an answer (exit status "
                               f"{child.exitcode}); the server goes on")
            return bool(ok), str(text)
        finally:
            receive.close()
            if child.is_alive():
                child.kill()
            child.join(5)


def _quiet_standard_streams() -> None:
    """Point descriptors 0 and 1 (the protocol's) at /dev/null in the child."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    os.close(null)
    sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115


def _answer(name: str, policy: Policy, arguments: dict[str, Any], send: Any) -> None:
    """The child: one call, its answer (or why not) sent through ``send``."""
    _quiet_standard_streams()
    try:
        text = json.dumps(run_tool(name, policy, arguments), ensure_ascii=False,
                          allow_nan=False)
        if len(text.encode("utf-8")) > ANSWER_MAX_BYTES:
            from gputriage.io.inputs import human

            answer: Answer = (False, f"the answer is {human(len(text.encode()))}, over "
                                     f"{human(ANSWER_MAX_BYTES)}: narrow the input (fewer "
                                     "paths, a since= window)")
        else:
            answer = (True, text)
    except Refused as exc:
        answer = (False, str(exc))
    except Exception as exc:  # a bug: one line, not a traceback on the protocol
        answer = (False, f"internal error: {type(exc).__name__}: {exc}")
    try:
        send.send(answer)
    finally:
        send.close()
