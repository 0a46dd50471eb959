"""``gputriage mcp``: a Model Context Protocol server on stdio, for an assistant to
call gputriage's read-only answers (docs/mcp.md)."""

from __future__ import annotations

import click

from gputriage.commands.common import StrictFloatRange, StrictIntRange


@click.command("mcp")
@click.option("--allow", "allowed", multiple=True, type=click.Path(exists=True),
              metavar="PATH",
              help="A folder (or file) the file tools may read, symlinks resolved; "
                   "repeatable. None: the server reads no file, only pasted text.")
@click.option("--timeout", "timeout_s", type=StrictFloatRange(min=1), default=60.0,
              show_default=True, metavar="SECONDS",
              help="Each tool call is stopped (its process killed) after SECONDS.")
@click.option("--max-text", "max_text", type=StrictIntRange(min=1024), default=4 << 20,
              show_default=True, metavar="BYTES",
              help="The largest pasted text a call takes; larger is refused.")
def mcp(allowed: tuple[str, ...], timeout_s: float, max_text: int) -> None:
    """Serve the Model Context Protocol on stdin / stdout, for an LLM assistant: analyze
    pasted text or files, explain an error, explain Xid / SXid codes, triage, diff two
    snapshots. Each tool answers the JSON document --json gives for the same input.
    Read-only: nothing collects this host, writes, acknowledges or drains. Needs the
    mcp package (pip install 'gputriage[mcp]'). Setup for an assistant: docs/mcp.md."""
    from gputriage.assist.tools import Policy
    from gputriage.errors import InputError

    try:
        import mcp.server  # noqa: F401  (the SDK: an optional extra)
    except ImportError as exc:
        raise InputError(f"gputriage mcp needs the mcp package ({exc}): "
                         "pip install 'gputriage[mcp]'") from None
    from gputriage.assist.server import serve

    serve(Policy.of(list(allowed), max_text), timeout_s)
