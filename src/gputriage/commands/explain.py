"""``gputriage explain TEXT...``: an error message, offline, from the catalogs of CUDA,
NVML, container-runtime and framework messages, NCCL WARNs and the node's own tools'
messages (the rows ``analyze`` judges the same messages by)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from gputriage.commands.common import CommandExit, current_env, list_quiet_option

if TYPE_CHECKING:
    from gputriage.views.explainview import Judged

# a paste, not a log: what stdin holds beyond this is left unread
STDIN_LIMIT = 1 << 20


def _texts(args: tuple[str, ...]) -> list[str]:
    """One text per argument; ``-`` is what stdin holds (read once, under the input
    policy: an idle pipe or terminal is given up after the idle budget, exit 66)."""
    stdin_text = ""
    if "-" in args:
        from gputriage.io.inputs import read_bytes

        stdin_text = read_bytes("-", STDIN_LIMIT, what="a message", whole=False).decode(
            "utf-8", errors="replace")
    return [stdin_text if arg == "-" else arg for arg in args]


def explained(items: list[str]) -> list[Judged]:
    """Each text with the catalog rows it matches, each with its verdict (the one
    ``analyze`` gives the same text); several texts that match nothing apart are one
    unquoted paste, explained joined."""
    from gputriage.engine.judged import verdicts
    from gputriage.knowledge.lookup import find_hits

    found = [(text, find_hits(text)) for text in items]
    if len(items) > 1 and not any(hits for _, hits in found):  # an unquoted paste
        joined = " ".join(items)
        found = [(joined, find_hits(joined))]
    return [(text, list(zip(hits, verdicts(text, hits), strict=True))) for text, hits in found]


def explain_document(found: list[Judged]) -> dict:
    """The ``gputriage/explain/v1`` document of :func:`explained`'s answer."""
    from gputriage import __version__
    from gputriage.views.explainview import explain_json

    return {"schema": "gputriage/explain/v1", "tool_version": __version__,
            "inputs": explain_json(found)}


@click.command("explain")
@click.argument("texts", nargs=-1, required=True, metavar="TEXT...")
@click.option("--json", "as_json", is_flag=True,
              help="Print what was found as JSON (schema gputriage/explain/v1).")
@list_quiet_option("one line per message found: severity, id, whose fault, what, action")
def explain(texts: tuple[str, ...], as_json: bool, quiet: bool) -> None:
    """Explain a job's error message: its meaning, likely cause, whose fault it is (the
    node, the node's configuration, the job or the job's settings), the action and the
    next step, and which host facts would settle it -- the verdict `analyze` gives the
    same text, with what the text shows (a container's prompt, a docker run) counted.
    TEXT is a pasted line or lines, a CUDA error's number, cudaError name or CUDA_ERROR
    name (700, cudaErrorNoDevice, CUDA_ERROR_ILLEGAL_ADDRESS), or - to read stdin;
    several TEXTs are explained one by one (words that mean nothing apart are read as
    one text). Offline: nothing on this host is read. Exit status 0 when a message is
    recognised, 3 when none is."""
    from gputriage.status import ExitStatus

    env = current_env()
    found = explained(_texts(texts))
    if as_json:
        env.write_json(explain_document(found))
    elif quiet:
        from gputriage.views.explainview import explained_lines

        env.stdout.write("".join(line + "\n" for line in explained_lines(found)))
    else:
        from gputriage.views.console import is_terminal
        from gputriage.views.explainview import render_explained

        width = None
        if is_terminal(env.stdout):
            import shutil

            width = shutil.get_terminal_size().columns
        render_explained(found, env.stdout, width=width)
    known = any(hits for _, hits in found)
    raise CommandExit(int(ExitStatus.OK if known else ExitStatus.UNKNOWN))
