"""The Model Context Protocol server of ``gputriage mcp``: the tools of
:mod:`gputriage.assist.tools` over stdio, with the official SDK (the ``mcp`` package:
its ``MCPServer``, named ``FastMCP`` before mcp 2). Imported only by that command.

Every tool is read-only (annotated so: read-only, not destructive, idempotent, closed
world); a call runs in its own process under the time bound (:mod:`.bounded`); input
that cannot be answered (too large, binary, a path outside the allowed folders, a
missing file, an unknown code) is an error result, and the server goes on serving."""

# no `from __future__ import annotations`: the SDK reads the tools' signatures (with
# their Annotated descriptions) at run time to make their input schemas

import inspect
import json
from typing import Annotated, Any

from pydantic import Field

from gputriage import __version__
from gputriage.assist.bounded import Runner
from gputriage.assist.tools import TOOLS, Policy, Refused, text_bytes

__all__ = ["build_server", "serve"]

CONCURRENT_CALLS = 2  # child processes at once; further calls wait their turn

INSTRUCTIONS = (
    "gputriage reads what a GPU host printed (nvidia-smi, kernel logs with Xid/SXid, "
    "NCCL logs, lspci, ibstat, Kubernetes, a job's CUDA errors) and says what is wrong, "
    "whether the node or the job is at fault, and what to do next, with the evidence "
    "lines. Use explain_xid for an Xid code instead of recalling its meaning; "
    "analyze_text for pasted outputs; explain_error for one error message. Every tool "
    "is read-only: nothing here collects, changes, acknowledges or drains anything.")

Text = Annotated[str, Field(description="The pasted text, as the host or job printed it.")]
Since = Annotated[str | None, Field(
    description="Only kernel-log events at or after this time: ISO (2024-05-14T09:00, UTC "
                "without offset) or an age (30m, 2h, 1d).")]
Boot = Annotated[str | None, Field(
    description="Which boot's kernel log: 0 the current one, -1 the one before, all.")]
Paths = Annotated[list[str], Field(
    description="Files or snapshot folders of one host, under the allowed folders.")]


def _sdk() -> tuple[Any, Any, Any]:
    """The server class, its ToolError and ToolAnnotations, from mcp 2 (``MCPServer``)
    or mcp 1 (``FastMCP``); looked up by name, so that either typechecks."""
    import importlib

    try:
        server_class = importlib.import_module("mcp.server.mcpserver").MCPServer
        errors = importlib.import_module("mcp.server.mcpserver.exceptions")
    except ImportError:  # mcp 1.x
        server_class = importlib.import_module("mcp.server.fastmcp").FastMCP
        errors = importlib.import_module("mcp.server.fastmcp.exceptions")
    return server_class, errors.ToolError, importlib.import_module("mcp.types").ToolAnnotations


def build_server(policy: Policy, runner: Runner) -> Any:
    """The SDK server with the read-only tools, each answered by ``runner``."""
    import anyio

    server_class, tool_error, annotations_type = _sdk()
    options: dict[str, Any] = {"instructions": INSTRUCTIONS, "log_level": "WARNING"}
    if "version" in inspect.signature(server_class).parameters:  # mcp 2
        options["version"] = __version__
    server = server_class("gputriage", **options)
    limiter = anyio.CapacityLimiter(CONCURRENT_CALLS)
    read_only = annotations_type.model_validate(
        {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True,
         "openWorldHint": False})

    async def call(name: str, **arguments: Any) -> dict[str, Any]:
        if isinstance(arguments.get("text"), str):  # refused before a child gets a copy
            try:
                text_bytes(arguments["text"], policy)
            except Refused as exc:
                raise tool_error(str(exc)) from None
        given = {key: value for key, value in arguments.items() if value is not None}
        ok, text = await anyio.to_thread.run_sync(runner.call, name, given, limiter=limiter)
        if not ok:
            raise tool_error(text)
        document: dict[str, Any] = json.loads(text)
        return document

    async def analyze_text(text: Text, since: Since = None, boot: Boot = None
                           ) -> dict[str, Any]:
        return await call("analyze_text", text=text, since=since, boot=boot)

    async def analyze_paths(paths: Paths, since: Since = None, boot: Boot = None
                            ) -> dict[str, Any]:
        return await call("analyze_paths", paths=paths, since=since, boot=boot)

    async def explain_error(text: Annotated[str, Field(
            description="The error message, a CUDA error number or name.")]
                            ) -> dict[str, Any]:
        return await call("explain_error", text=text)

    async def explain_xid(codes: Annotated[list[int | str], Field(
            description="Xid (or SXid) codes: 79, \"Xid 48\".")],
                          sxid: Annotated[bool, Field(
                              description="NVSwitch SXid codes instead of GPU Xid codes.")]
                          = False) -> dict[str, Any]:
        return await call("explain_xid", codes=[str(c) for c in codes], sxid=sxid)

    async def triage(paths: Annotated[list[str] | None, Field(
            description="Files or snapshot folders of one host, under the allowed "
                        "folders (or give text).")] = None,
                     text: Annotated[str | None, Field(
                         description="Pasted outputs of one host (or give paths).")] = None,
                     baseline: Annotated[str | None, Field(
                         description="A snapshot, bug report or result JSON of the same "
                                     "host from before, under the allowed folders.")] = None,
                     since: Since = None, boot: Boot = None) -> dict[str, Any]:
        return await call("triage", paths=paths or None, text=text, baseline=baseline,
                          since=since, boot=boot)

    async def diff_snapshots(a: Annotated[str, Field(description="The earlier side.")],
                             b: Annotated[str, Field(description="The later side.")],
                             include_noise: bool = False, since: Since = None,
                             boot: Boot = None) -> dict[str, Any]:
        return await call("diff_snapshots", a=a, b=b, include_noise=include_noise,
                          since=since, boot=boot)

    where = (", ".join(policy.roots) if policy.roots
             else "none: this server was started without --allow, so it reads no file")
    for fn in (analyze_text, analyze_paths, explain_error, explain_xid, triage,
               diff_snapshots):
        spec = TOOLS[fn.__name__]
        note = f" Folders it may read: {where}." if spec.reads_files else ""
        server.add_tool(fn, name=fn.__name__, title=spec.title,
                        description=spec.description + note, annotations=read_only,
                        structured_output=True)
    return server


def serve(policy: Policy, timeout_s: float) -> None:
    """Serve on stdin / stdout until the client closes them."""
    import anyio

    server = build_server(policy, Runner(policy, timeout_s))
    anyio.run(server.run_stdio_async)
