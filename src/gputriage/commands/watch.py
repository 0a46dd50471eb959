"""``gputriage watch``: the check every interval, served to Prometheus, node_exporter's
textfile collector and the Node's conditions (see docs/watch.md)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from gputriage.commands.common import (
    STATE_DIR_HELP,
    StrictFloatRange,
    StrictIntRange,
    current_env,
    deadline_option,
    expect_option,
    load_expectations,
    model_dir_option,
    opt_in_sources,
    timeout_option,
)
from gputriage.text.safe import printable

OVERRUN_MARGIN_S = 30.0  # a check is late once it has run for the deadline and this


@click.command()
@click.option("--interval", type=StrictFloatRange(min=0), default=60.0, show_default=True,
              metavar="SECONDS", help="Seconds between the starts of two checks (0: back "
                                      "to back). A check still running at the next tick "
                                      "skips that tick: never two at once.")
@click.option("--listen", metavar="ADDR:PORT", default=None,
              help="Serve /metrics (Prometheus), /healthz and /result here: "
                   "127.0.0.1:9400, :9400 (every address), [::1]:9400.")
@click.option("--textfile", "textfile_dir", type=click.Path(file_okay=False), default=None,
              metavar="DIR", help="Write DIR/gputriage.prom (the same series) after every "
                                  "check, for node_exporter's textfile collector.")
@click.option("--snapshot", "from_snapshot", type=click.Path(exists=True), default=None,
              metavar="PATH", help="Judge this snapshot (directory or .tar.gz) every "
                                   "cycle instead of collecting this host.")
@click.option("--max-cycles", type=StrictIntRange(min=1), default=None, metavar="N",
              help="Stop after N checks (default: run until SIGTERM or SIGINT).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="stderr log lines: text, or JSON lines (ts, level, "
                                      "msg, fields).")
@click.option("--state-dir", type=click.Path(), default=None, help=STATE_DIR_HELP)
@click.option("--no-history", is_flag=True, help="Record no check in the history.")
@click.option("--history-every", type=StrictFloatRange(min=0), default=60.0,
              show_default=True, metavar="MINUTES",
              help="Record a check whose verdict and findings are unchanged once per "
                   "MINUTES (a changed one is always recorded).")
@expect_option
@model_dir_option
@timeout_option
@deadline_option
@click.option("--node-conditions", is_flag=True,
              help="Also set the GPUHealthy condition of this Kubernetes Node after each "
                   "check (needs RBAC: deploy/kubernetes/watch-rbac.yaml).")
@click.option("--node-name", default=None, metavar="NAME",
              help="The Node whose condition is set (default: $NODE_NAME).")
def watch(interval: float, listen: str | None, textfile_dir: str | None,
          from_snapshot: str | None, max_cycles: int | None, log_format: str,
          state_dir: str | None, no_history: bool, history_every: float,
          expect_file: str | None, timeout: float | None, deadline: float,
          node_conditions: bool, node_name: str | None, model_dir: str | None) -> None:
    """Run the check every interval and keep its last result: Prometheus metrics on
    --listen, node_exporter's textfile in --textfile, the Node's condition with
    --node-conditions. Each cycle is what check does (acknowledgements and
    expectations apply; the history is recorded when the findings change and once per
    --history-every otherwise).

    SIGTERM or SIGINT stops it after the running check (abandoned after 10 s): exit 0.
    One log line per check and per problem on stderr."""
    from gputriage.watch.logs import WatchLog
    from gputriage.watch.loop import Watch, WatchState
    from gputriage.watch.metrics import make_registry

    if node_name is not None and not node_conditions:
        raise click.UsageError("--node-name is for --node-conditions")
    env = current_env()
    log = WatchLog(env.stderr, log_format)
    expectations = load_expectations(expect_file, default=True)
    if from_snapshot is not None:
        _readable(from_snapshot)
    state = WatchState(interval, deadline + OVERRUN_MARGIN_S,
                       expected_gpus=expectations.gpu.count if expectations else None)
    registry = make_registry(state)
    sinks: list[Any] = []
    listeners: list[Callable[[], None]] = []
    if textfile_dir is not None:
        writer = _textfile(textfile_dir, registry)
        sinks.append(writer)
        listeners.append(writer.write)
    if node_conditions:
        from gputriage.watch.conditions import node_condition_sink

        conditions = node_condition_sink(node_name, log=log)
        sinks.append(conditions)
        listeners.append(overrun_listener(state, conditions))
    server = _server(listen, state, registry, log) if listen is not None else None
    check = _check(env, log, from_snapshot=from_snapshot, expectations=expectations,
                   timeout=timeout, deadline=deadline,
                   opt_in=opt_in_sources(model_dir, None, expectations),
                   state_dir=state_dir, no_history=no_history,
                   history_every_s=history_every * 60)
    loop = Watch(check, state, log, sinks=sinks, listeners=listeners, max_cycles=max_cycles)
    log.info("watching", interval_s=interval, listen=server.address if server else "",
             textfile=textfile_dir or "", snapshot=from_snapshot or "",
             limit_s=state.limit_s)
    if server is not None:
        server.start()
    try:
        with _signals(loop):
            loop.run()
    finally:
        if server is not None:
            server.stop()
    log.info("stopped", cycles=loop.cycles)


def _textfile(directory: str, registry: Any) -> Any:
    from gputriage.watch.textfile import TextfileError, TextfileWriter

    writer = TextfileWriter(directory, registry)
    try:
        writer.check()
    except TextfileError as exc:
        raise click.BadParameter(printable(str(exc)), param_hint="--textfile") from None
    return writer


def _readable(snapshot: str) -> None:
    """--snapshot read once at start: an unreadable one is an input error (exit 66, one
    line), not a failed check every cycle."""
    from gputriage.ingest import load_inputs

    load_inputs([snapshot])


def _server(listen: str, state: Any, registry: Any, log: Any) -> Any:
    from gputriage.watch.server import ListenError, WatchServer

    try:
        return WatchServer(listen, state, registry, log=log)
    except ListenError as exc:
        raise click.BadParameter(printable(str(exc)), param_hint="--listen") from None


def overrun_listener(state: Any, sink: Any) -> Callable[[], None]:
    """A listener telling the Node condition sink (``NodeConditionSink.overran``) of a
    check running past its limit, at once: its result may be minutes away."""

    def tell() -> None:
        with state.lock:
            running = state.running
        if running is not None and running.overran and not running.done.is_set():
            sink.overran(running.number, state.clock() - running.started, state.limit_s)

    return tell


def _check(env: Any, log: Any, *, from_snapshot: str | None, expectations: Any,
           timeout: float | None, deadline: float, opt_in: dict[str, str],
           state_dir: str | None, no_history: bool,
           history_every_s: float) -> Callable[[], Any]:
    """One cycle's check: what ``check`` does (acknowledgements read again each time;
    flapping signals latched and failures-again escalated from the history, once, so the
    metrics and the Node condition say what ``check`` would), then the history when
    due."""
    from gputriage.collect import CollectOptions
    from gputriage.commands.host import host_acks, judge_host
    from gputriage.facts.context import CheckContext
    from gputriage.facts.window import LogWindow
    from gputriage.watch.recording import HistoryRecorder

    recorder = None if no_history else HistoryRecorder(
        state_dir, log, every_s=history_every_s, now=lambda: env.live_host().now())
    window = LogWindow()

    def _amend(result: Any, context: Any) -> None:
        from gputriage.state.history import default_state_dir
        from gputriage.state.recurrence import apply_history

        try:
            problems = apply_history(result, state_dir or default_state_dir(),
                                     context.now, acks=context.acks)
        except Exception as exc:  # the history never fails a check
            problems = [f"{type(exc).__name__}: {exc}"]
        for problem in problems:
            log.warning("history not read", problem=problem)

    def check() -> Any:
        opts = CollectOptions(timeout_s=timeout, deadline_s=deadline, opt_in=opt_in)
        context = CheckContext(expectations=expectations,
                               acks=tuple(host_acks(state_dir, warn=log.warning)),
                               now=env.live_host().now())
        result = judge_host(env, window, context, opts, from_snapshot=from_snapshot)
        if recorder is not None:
            _amend(result, context)
            try:
                recorder(result)
            except Exception as exc:  # the history never fails a check
                log.warning("history not recorded", problem=f"{type(exc).__name__}: {exc}")
        return result

    return check


@contextmanager
def _signals(loop: Any) -> Iterator[None]:
    """SIGTERM and SIGINT end the loop while it runs (from the main thread only: a
    watch run from another thread is stopped by its caller)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    names: dict[int, str] = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}

    def handler(signum: int, frame: Any) -> None:
        loop.signalled(names.get(signum, str(signum)))

    previous = {sig: signal.signal(sig, handler) for sig in names}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
