"""``gputriage npd``: one check as a node-problem-detector custom plugin (exit 0 OK,
1 problem, 2 unknown; one line on stdout). See :mod:`gputriage.watch.npd`."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import click

from gputriage.commands.common import (
    STATE_DIR_HELP,
    CommandExit,
    StrictFloatRange,
    StrictIntRange,
    current_env,
    expect_option,
    timeout_option,
)

if TYPE_CHECKING:
    from gputriage.results.reader import ResultDoc

# Beyond the collection deadline, what analysing the snapshot may take before the
# plugin gives up and says Unknown (a kernel log of millions of lines takes seconds).
ANALYSIS_GRACE_S = 15.0
FETCH_TIMEOUT_S = 10.0  # --from: the most the watch's answer may take


@click.command()
@click.option("--level", type=click.Choice(["critical", "warning"]), default="critical",
              show_default=True,
              help="The least severity of a node-side finding that is a problem (exit 1): "
                   "critical (what check would drain for) for NPD's permanent condition, "
                   "warning for its temporary events.")
@click.option("--from", "from_url", metavar="URL", default=None,
              help="Judge the last result of a running `gputriage watch` (its --listen "
                   "address, e.g. http://127.0.0.1:9400, or its /result URL) instead of "
                   "checking now: fast. Unreachable: Unknown, or --fallback.")
@click.option("--fallback", is_flag=True,
              help="With --from: run the check here when the watch cannot be reached.")
@click.option("--max-age", type=StrictFloatRange(min=1), default=600.0, show_default=True,
              metavar="SECONDS",
              help="With --from: a last result older than this is Unknown (the watch's "
                   "checks stopped).")
@click.option("--snapshot", "from_snapshot", type=click.Path(), default=None,
              metavar="PATH", help="Judge this snapshot (directory or .tar.gz) instead "
                                   "of collecting now.")
@click.option("--max-length", type=StrictIntRange(min=20), default=80, show_default=True,
              help="The longest line printed, in bytes: at most the monitor config's "
                   "max_output_length (NPD's default is 80).")
@click.option("--deadline", type=StrictFloatRange(min=1), default=40.0, show_default=True,
              help="Collection deadline in seconds; keep it well under the plugin timeout "
                   f"(the check gives up, Unknown, {ANALYSIS_GRACE_S:.0f} s after it).")
@click.option("--unknown-exit", type=StrictIntRange(0, 255), default=2, show_default=True,
              metavar="N",
              help="The exit status when the check could not conclude (the line still "
                   "says UNKNOWN). NPD makes an event of any status but 0 for a temporary "
                   "rule: 0 there, unless a watch that does not answer is worth an event.")
@timeout_option
@click.option("--state-dir", type=click.Path(), default=None, help=STATE_DIR_HELP)
@expect_option
def npd(level: str, from_url: str | None, fallback: bool, max_age: float,
        from_snapshot: str | None, max_length: int, deadline: float, unknown_exit: int,
        timeout: float | None, state_dir: str | None, expect_file: str | None) -> None:
    """A node-problem-detector custom plugin: exit 0 when the node's GPUs are fine,
    1 when a node-side finding of LEVEL or worse is current (the line names the worst
    and its GPU), 2 (Unknown, or --unknown-exit) when the check could not conclude.
    A job's fault never makes the node a problem. Not recorded in the history;
    acknowledgements apply. The monitor config:
    deploy/node-problem-detector/gputriage-monitor.json."""
    from gputriage.watch import npd as plugin

    env = current_env()
    try:
        doc = None
        if from_url is not None:
            start = time.monotonic()
            try:
                doc = plugin.fetch_result(from_url, timeout_s=min(FETCH_TIMEOUT_S, deadline),
                                          max_age_s=max_age)
            except (OSError, ValueError) as exc:
                if not fallback:
                    _say(plugin.unknown(f"watch: {exc}", max_length), unknown_exit)
                env.stderr.write(f"gputriage: watch: {exc}; checking here\n")
                # the plugin's whole run stays within what the deadline promised
                deadline = max(1.0, deadline - (time.monotonic() - start))
        if doc is None:
            doc = _bounded_check(from_snapshot, deadline, timeout, state_dir, expect_file)
        verdict = plugin.judge(doc, level, max_length)
    except CommandExit:
        raise
    except Exception as exc:  # NPD reads stdout: never only a traceback
        from gputriage.errors import InputError

        known = isinstance(exc, (InputError, OSError, TimeoutError, ValueError))
        verdict = plugin.unknown(str(exc) if known else f"{type(exc).__name__}: {exc}",
                                 max_length)
    _say(verdict, unknown_exit)


def _say(verdict: Any, unknown_exit: int) -> None:
    current_env().stdout.write(verdict.message + "\n")
    from gputriage.watch.npd import UNKNOWN

    raise CommandExit(unknown_exit if verdict.status == UNKNOWN else verdict.status)


def _bounded_check(from_snapshot: str | None, deadline: float, timeout: float | None,
                   state_dir: str | None, expect_file: str | None) -> ResultDoc:
    """``check``'s judgement of this host (or a snapshot) as its result document reads
    (as a watch's would); a check still running ``ANALYSIS_GRACE_S`` after the deadline
    raises TimeoutError (its thread is left behind: the plugin process ends anyway)."""
    from gputriage.commands.common import load_expectations, opt_in_sources
    from gputriage.commands.host import host_acks
    from gputriage.facts.context import CheckContext

    env = current_env()
    expectations = load_expectations(expect_file, default=True)
    opt_in = opt_in_sources(None, None, expectations)
    context = CheckContext(expectations=expectations,
                           acks=tuple(host_acks(state_dir)), now=env.live_host().now())
    done: dict[str, Any] = {}

    def work() -> None:
        from gputriage.collect import CollectOptions
        from gputriage.commands.host import judge_host
        from gputriage.facts.window import LogWindow
        from gputriage.results.document import to_json
        from gputriage.results.reader import read_result

        try:
            opts = CollectOptions(timeout_s=timeout, deadline_s=deadline, opt_in=opt_in)
            done["doc"] = read_result(to_json(judge_host(env, LogWindow(), context, opts,
                                                         from_snapshot=from_snapshot)),
                                      "the check")
        except BaseException as exc:  # handed to the waiting thread
            done["error"] = exc

    worker = threading.Thread(target=work, name="gputriage-npd-check", daemon=True)
    worker.start()
    worker.join(deadline + ANALYSIS_GRACE_S)
    if worker.is_alive():
        raise TimeoutError(f"the check did not finish in {deadline + ANALYSIS_GRACE_S:.0f} s")
    if "error" in done:
        raise done["error"]
    return done["doc"]

