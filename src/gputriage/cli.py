"""Command line: ``main(argv, env) -> exit status``.

The commands live in :mod:`gputriage.commands` and are registered on the group
here. Imports of everything heavier than click happen inside the commands, so
``gputriage --help`` answers fast. Exit status follows the Nagios convention
(0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN); usage errors exit 64 and unreadable
input 66, with one line on stderr (control characters escaped), never a traceback.
A closed stdout (``| head -1``) ends the output, not the command: the exit status
stays the verdict's.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import IO, Any, cast

import click

from gputriage import __version__
from gputriage.commands.common import (
    CommandExit,
    Environment,
)
from gputriage.status import ExitStatus
from gputriage.text.safe import printable

__all__ = ["EXIT_INPUT", "EXIT_INTERNAL", "EXIT_USAGE", "Environment", "PipeSafeStdout",
           "QuietStderr", "cli", "main", "run"]

EXIT_USAGE = int(ExitStatus.USAGE)
EXIT_INPUT = int(ExitStatus.INPUT_ERROR)
EXIT_INTERNAL = int(ExitStatus.INTERNAL)


# Each command and the module that defines it, imported when the command runs (or the
# help lists it), so that a quick command (explain, xid) pays only for its own imports.
COMMANDS: dict[str, str] = {
    "ack": "ack:ack", "analyze": "host:analyze", "check": "host:check",
    "collect": "host:collect", "diff": "compare:diff", "expect": "expect:expect",
    "explain": "explain:explain", "fleet": "compare:fleet", "history": "compare:history",
    "k8s": "k8s:k8s", "logs": "logs:logs", "nccl": "nccl:nccl", "scenario": "scenario:scenario",
    "schema": "schema:schema", "triage": "compare:triage", "xid": "logs:xid",
    "weights": "weights:weights", "mcp": "mcp:mcp",
    "npd": "npd:npd", "watch": "watch:watch", "drain-guard": "drain_guard:drain_guard",
}


class _LazyGroup(click.Group):
    """A group whose commands (:data:`COMMANDS`) are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        ref = COMMANDS.get(cmd_name)
        if ref is None:
            return None
        module, _, name = ref.partition(":")
        command = getattr(importlib.import_module(f"gputriage.commands.{module}"), name)
        return command if isinstance(command, click.Command) else None

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        """click's, with a "did you mean" for a mistyped command, worded as click words it
        for the subcommands of a group (``k8s stauts``)."""
        name = args[0] if args else ""
        if args and name not in COMMANDS and not name.startswith("-"):
            best = closest(name, self.list_commands(ctx))
            if best is not None:
                ctx.fail(f"No such command {name!r}. Did you mean {best!r}?")
        return super().resolve_command(ctx, args)


def closest(word: str, choices: list[str]) -> str | None:
    """The choice ``word`` most likely mistypes (``analyse`` → ``analyze``), or None."""
    import difflib

    found = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return found[0] if found else None


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gputriage")
def cli() -> None:
    """Triage a GPU node: what is wrong, is it the node or the job, what to do
    next, with the evidence lines.

    \b
    gputriage check                 collect this host and analyse it
    gputriage analyze PATH...       analyse a snapshot, a sosreport, a bug report, or pastes
    gputriage diff A B              what changed between two snapshots or results
    gputriage triage [PATH...]      incident screen: changes, findings, next actions
    gputriage fleet PATH...         many nodes' results: each finding, its blast radius
    gputriage collect -o FILE       save a snapshot of this host
    gputriage logs FILE...          per-GPU timeline and findings of kernel logs
    gputriage nccl LOG...           NCCL logs and nccl-tests results (with host outputs)
    gputriage xid CODE...           explain Xid (or --sxid SXid) codes
    gputriage explain 'ERROR TEXT'  a job's CUDA, NVML or container error explained
    gputriage k8s status|lint       a cluster's GPU nodes, plugin, pods and policies
    gputriage history               the checks recorded on this host
    gputriage ack ID|--gpu BUS      acknowledge a finding after a repair
    gputriage drain-guard NODE      drain only within the fleet's budget (recipes call it)
    gputriage expect --from SNAP    what a known-good node has, as an expectations file
    gputriage scenario list         simulated hosts to try it on
    gputriage schema NAME           the JSON Schema of a --json document
    gputriage weights MODEL|--params 70B  model size, GPU fit, load time, the herd
    gputriage watch --listen :9400  check every minute; Prometheus metrics, /healthz
    gputriage npd [--from URL]      node-problem-detector plugin (0 OK, 1 problem, 2 unknown)
    gputriage mcp [--allow DIR]     read-only answers for an LLM assistant (MCP, stdio)

    Exit status: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; 64 usage, 66 unreadable input.
    """



def main(argv: list[str] | None = None, env: Environment | None = None) -> int:
    """Run the CLI and return its exit status (never raises)."""
    from gputriage.errors import InputError, InputsConflict

    env = env or Environment()
    if not isinstance(env.stderr, QuietStderr):  # notes never decide the verdict
        env.stderr = cast("IO[str]", QuietStderr(env.stderr))
    args = sys.argv[1:] if argv is None else argv
    try:
        cli.main(args=args, prog_name="gputriage", standalone_mode=False, obj=env)
    except CommandExit as done:
        return done.code
    except click.UsageError as exc:
        if type(exc).__name__.startswith("NoArgsIsHelp") and exc.ctx is not None:
            env.stdout.write(exc.ctx.get_help() + "\n")
            return 0
        hint = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        _error(env, f"usage error: {_usage_message(exc)}{hint}")
        return EXIT_USAGE
    except click.Abort:
        _error(env, "aborted")
        return 130
    except click.ClickException as exc:
        _error(env, f"error: {exc.format_message()}")
        return EXIT_USAGE
    except InputsConflict as exc:
        _error(env, f"usage error: {exc}")
        return EXIT_USAGE
    except InputError as exc:
        _error(env, f"input error: {exc}")
        return EXIT_INPUT
    except BrokenPipeError:  # a stream the guard below does not cover
        if env.stdout is sys.stdout:
            _silence(sys.stdout)
        return 130
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        _error(env, f"error: {exc}")
        return EXIT_INPUT
    except Exception as exc:  # last resort: one line, not a traceback
        if os.environ.get("GPUTRIAGE_DEBUG"):
            raise
        _error(env, f"internal error: {type(exc).__name__}: {exc} "
                    "(set GPUTRIAGE_DEBUG=1 for the traceback)")
        return EXIT_INTERNAL
    return 0


def _usage_message(exc: click.UsageError) -> str:
    """click's message, with one "did you mean" for a mistyped option as for a command
    (click offers "one of" several when more than one is close)."""
    if isinstance(exc, click.NoSuchOption) and exc.possibilities:
        best = closest(exc.option_name, list(exc.possibilities)) or sorted(exc.possibilities)[0]
        return f"No such option {exc.option_name!r}. Did you mean {best!r}?"
    return exc.format_message().rstrip()


def _error(env: Environment, message: str) -> None:
    """One line on stderr: file names and other input text cannot break it or reach the
    terminal as escape sequences."""
    env.stderr.write(f"gputriage: {printable(message)}\n")


def _silence(stream: Any) -> None:
    """Point the file descriptor of ``stream`` (stdout) at /dev/null once its reader is
    gone, so that flushing it at interpreter exit fails neither loudly nor with another
    status (the way Python's documentation handles SIGPIPE)."""
    try:
        fd = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):
        return
    try:
        os.dup2(devnull, fd)
    except OSError:
        pass
    finally:
        os.close(devnull)


class PipeSafeStdout:
    """Standard output that outlives its reader: ``gputriage analyze | head -1``.

    Once a write or flush meets EPIPE (the reader closed the pipe), output is dropped,
    stdout is pointed at /dev/null, and the command runs to its end, so its exit status
    is still the verdict's. Everything else is the wrapped stream's.
    """

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._broke()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._broke()

    def _broke(self) -> None:
        self.broken = True
        _silence(self._stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class QuietStderr:
    """Standard error that never decides a command's outcome: progress, notes, warnings
    and error lines go there, the verdict and the exit status do not depend on them.

    A write or flush that fails (a full disk: stderr on /dev/full; a closed or broken
    descriptor) drops that text and all that follows, and points the descriptor at
    /dev/null so that the interpreter's own flush at exit does not fail either.
    ``None`` (Python's stderr when descriptor 2 was closed) writes nothing."""

    def __init__(self, stream: IO[str] | None) -> None:
        self._stream = stream
        self.broken = stream is None

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)  # type: ignore[union-attr]
            except (OSError, ValueError):  # ValueError: the stream was closed
                self._broke()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()  # type: ignore[union-attr]
            except (OSError, ValueError):
                self._broke()

    def isatty(self) -> bool:
        try:
            return not self.broken and bool(self._stream.isatty())  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):
            return False

    def _broke(self) -> None:
        self.broken = True
        _silence(self._stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _hold_standard_descriptors() -> None:
    """Open /dev/null on a standard descriptor (0, 1, 2) that was closed when the
    command started (``2>&-``): else the next file opened would take its number and
    whatever writes to it (a child's errors) would land in that file."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                null = os.open(os.devnull, os.O_RDWR)
            except OSError:
                return
            if null != fd:
                os.dup2(null, fd, inheritable=True)
                os.close(null)
            else:
                os.set_inheritable(fd, True)


def run() -> None:
    """Console-script entry point."""
    from gputriage.io.collector import collect_less

    collect_less()
    _hold_standard_descriptors()
    if sys.stdout is None:  # descriptor 1 was closed: the verdict is the exit status
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    if not isinstance(sys.stdout, PipeSafeStdout):
        sys.stdout = PipeSafeStdout(sys.stdout)
    if not isinstance(sys.stderr, QuietStderr):
        sys.stderr = QuietStderr(sys.stderr)
    sys.exit(main())
