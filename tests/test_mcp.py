"""gputriage mcp: the read-only tools an assistant can call over the Model Context
Protocol. In process: the path policy (folders given with --allow, symlinks resolved),
the size cap, binary text, the time bound (a call's process killed), and that each
tool answers the document the CLI's --json prints. Then the SDK's own client against
the server in a subprocess (slow): exactly the read-only tools, each on real inputs,
bad input as error results while the server keeps serving."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from gputriage import schemas
from gputriage.assist.bounded import Runner
from gputriage.assist.tools import TOOLS, Policy, Refused, allowed_path, run_tool
from gputriage.cli import Environment, main
from gputriage.scenarios import build_scenario

jsonschema = pytest.importorskip("jsonschema")

XID79 = "nolebase-h100-xid79-fallen-off-bus-crash-dump"  # a corpus kernel log
CUDA_ERROR = ("RuntimeError: CUDA error: an illegal memory access was encountered\n"
              "CUDA kernel errors might be asynchronously reported at some other API call")
READ_ONLY_TOOLS = {"analyze_text", "analyze_paths", "explain_error", "explain_xid", "triage",
                   "diff_snapshots"}


def cli_json(*argv: str, stdin: str | None = None,
             monkeypatch: pytest.MonkeyPatch | None = None) -> dict:
    if stdin is not None and monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    assert code in (0, 1, 2, 3), err.getvalue()
    doc: dict = json.loads(out.getvalue())
    return doc


def assert_valid(name: str, doc: object) -> None:
    check = jsonschema.Draft202012Validator(schemas.bundled(name),
                                            format_checker=jsonschema.FormatChecker())
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in check.iter_errors(doc)]
    assert not problems, "\n".join(problems[:10])


def verdicts(doc: dict) -> tuple:
    """What an expert reads of a result document: verdict and each finding."""
    return (doc["verdict"], doc["exit_status"],
            [(f["id"], f["severity"], f["blame"], f["action"]) for f in doc["findings"]])


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("mcp")
    return {name: str(build_scenario(name, root / f"{name}.tar.gz"))
            for name in ("healthy-8xh100", "gpu-fallen-off-bus")}


# -- the path policy ------------------------------------------------------------------
def test_without_allow_no_file_is_read(tmp_path):
    (tmp_path / "log").write_text("x\n")
    with pytest.raises(Refused, match="without --allow"):
        allowed_path(str(tmp_path / "log"), Policy())


def test_paths_are_read_only_under_the_allowed_folders_after_resolving_links(tmp_path):
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "dmesg.txt").write_text("x\n")
    (outside / "secret").write_text("x\n")
    (allowed / "link").symlink_to(outside / "secret")
    (allowed / "dirlink").symlink_to(outside)
    policy = Policy.of([str(allowed)], 1 << 20)
    assert allowed_path(str(allowed / "dmesg.txt"), policy) == str(allowed / "dmesg.txt")
    for escape in (allowed / "link", allowed / "dirlink" / "secret",
                   allowed / ".." / "outside" / "secret", outside / "secret",
                   Path(str(allowed) + "-sibling")):
        with pytest.raises(Refused, match="outside what this server may read"):
            allowed_path(str(escape), policy)
    for not_a_path in ("-", "", "a\0b"):  # stdin is the protocol's stream
        with pytest.raises(Refused, match="not a file path"):
            allowed_path(not_a_path, policy)


def test_an_allowed_file_allows_that_file_only(tmp_path):
    (tmp_path / "a.log").write_text("x\n")
    (tmp_path / "b.log").write_text("x\n")
    policy = Policy.of([str(tmp_path / "a.log")], 1 << 20)
    assert allowed_path(str(tmp_path / "a.log"), policy)
    with pytest.raises(Refused):
        allowed_path(str(tmp_path / "b.log"), policy)


# -- bad input ------------------------------------------------------------------------
def test_pasted_text_over_the_cap_binary_or_empty_is_refused():
    policy = Policy(max_text_bytes=4096)
    with pytest.raises(Refused, match="over this server's 4.0 KiB limit"):
        run_tool("analyze_text", policy, {"text": "NVRM: Xid 79\n" * 400})
    with pytest.raises(Refused, match="explain_error takes at most 1.0 MiB"):
        run_tool("explain_error", Policy(), {"text": "CUDA error: out of memory\n" * 50000})
    for tool in ("analyze_text", "explain_error"):
        with pytest.raises(Refused, match="binary data"):
            run_tool(tool, policy, {"text": "\x7fELF\x02\x01\x01" + "\x00\x01\x02\x03" * 200})
        with pytest.raises(Refused, match="empty"):
            run_tool(tool, policy, {"text": " \n"})


def test_unknown_or_malformed_xid_codes_are_errors_not_guesses():
    with pytest.raises(Refused, match="not in gputriage's Xid catalog"):
        run_tool("explain_xid", Policy(), {"codes": ["9999"]})
    with pytest.raises(Refused, match="not in gputriage's SXid catalog"):
        run_tool("explain_xid", Policy(), {"codes": ["79"], "sxid": True})
    with pytest.raises(Refused, match="is not an Xid code"):
        run_tool("explain_xid", Policy(), {"codes": ["79; rm -rf /"]})
    mixed = run_tool("explain_xid", Policy(), {"codes": ["79", "9999"]})
    assert [e["known"] for e in mixed["entries"]] == [True, False]


def test_a_missing_file_and_unrecognised_text_are_one_line_refusals(tmp_path):
    policy = Policy.of([str(tmp_path)], 1 << 20)
    with pytest.raises(Refused, match="No such file|not found|no such"):
        run_tool("analyze_paths", policy, {"paths": [str(tmp_path / "missing.log")]})
    with pytest.raises(Refused, match="unrecognised content"):
        run_tool("analyze_text", policy, {"text": "hello there\n"})
    with pytest.raises(Refused, match="either paths or text"):
        run_tool("triage", policy, {})


# -- the same documents as the CLI ----------------------------------------------------
def test_each_tool_answers_what_the_cli_prints_with_json(corpus, snapshots, monkeypatch):
    root = os.path.dirname(snapshots["healthy-8xh100"])
    policy = Policy.of([root, str(corpus.root)], 4 << 20)
    good, bad = snapshots["healthy-8xh100"], snapshots["gpu-fallen-off-bus"]
    xid = run_tool("explain_xid", policy, {"codes": ["79", "48"]})
    assert xid == cli_json("xid", "79", "48", "--json")
    explained = run_tool("explain_error", policy, {"text": CUDA_ERROR})
    assert explained == cli_json("explain", CUDA_ERROR, "--json")
    assert explained["inputs"][0]["known"] and explained["inputs"][0]["messages"]
    log = corpus.sample(XID79)
    pasted = run_tool("analyze_text", policy, {"text": log.text()})
    assert verdicts(pasted) == verdicts(cli_json("analyze", "-", "--json", stdin=log.text(),
                                                 monkeypatch=monkeypatch))
    assert verdicts(pasted)[0] == "critical" and "xid.79" in str(verdicts(pasted))
    named = run_tool("analyze_paths", policy, {"paths": [str(log.path)]})
    assert verdicts(named) == verdicts(pasted)
    assert run_tool("diff_snapshots", policy, {"a": good, "b": bad}) == cli_json(
        "diff", good, bad, "--json")
    screen = run_tool("triage", policy, {"paths": [bad], "baseline": good})
    expected = cli_json("triage", bad, "--baseline", good, "--json")
    screen.pop("generated", None)
    expected.pop("generated", None)
    assert screen == expected
    for name, doc in (("xid", xid), ("explain", explained), ("result", pasted),
                      ("result", named), ("triage", screen)):
        assert_valid(name, doc)


# -- the time bound -------------------------------------------------------------------
def test_a_call_past_its_time_bound_is_killed_and_the_next_one_answers():
    text = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    ok, why = Runner(Policy(), timeout_s=0.001).call("analyze_text", {"text": text})
    assert not ok and "stopped after 0.001 s" in why
    assert not [p for p in multiprocessing.active_children()
                if p.name.startswith("gputriage-mcp-")]
    ok, answer = Runner(Policy(), timeout_s=60).call("analyze_text", {"text": text})
    assert ok and json.loads(answer)["verdict"] == "critical"
    ok, why = Runner(Policy(), timeout_s=60).call("explain_xid", {"codes": ["0x"]})
    assert not ok and "not an Xid code" in why


def test_without_the_sdk_the_command_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp.server", None)  # import mcp.server fails
    out, err = io.StringIO(), io.StringIO()
    code = main(["mcp"], Environment(stdout=out, stderr=err))
    assert code == 66 and out.getvalue() == ""
    assert err.getvalue().count("\n") == 1 and "pip install 'gputriage[mcp]'" in err.getvalue()


def test_an_allowed_path_must_exist_when_the_server_starts(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = main(["mcp", "--allow", str(tmp_path / "missing")], Environment(stdout=out, stderr=err))
    assert code == 64 and "does not exist" in err.getvalue()


# -- the SDK's client against the server ---------------------------------------------
def _wire(model: Any) -> dict:
    """A result as it goes over the wire (camelCase in mcp 1 and 2 alike)."""
    dumped: dict = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


@pytest.mark.slow
def test_the_sdk_client_lists_the_read_only_tools_and_calls_each(corpus, snapshots, tmp_path):
    pytest.importorskip("mcp", reason="the mcp package (the test extra) is not installed")
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    log = corpus.sample(XID79)
    allowed = os.path.dirname(snapshots["healthy-8xh100"])
    good, bad = snapshots["healthy-8xh100"], snapshots["gpu-fallen-off-bus"]
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [src, *filter(None, [os.environ.get("PYTHONPATH")])])}
    params = StdioServerParameters(
        command=sys.executable, env=env,
        args=["-m", "gputriage", "mcp", "--allow", allowed, "--allow", str(log.path),
              "--max-text", str(1 << 20), "--timeout", "60"])

    async def session() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            tools = [_wire(t) for t in (await s.list_tools()).tools]
            assert {t["name"] for t in tools} == READ_ONLY_TOOLS == set(TOOLS)
            for tool in tools:
                assert tool["annotations"]["readOnlyHint"] is True, tool["name"]
                assert tool["annotations"]["destructiveHint"] is False, tool["name"]

            async def call(name: str, **arguments: object) -> dict:
                return _wire(await s.call_tool(name, arguments))

            async def answer(name: str, schema: str, **arguments: object) -> dict:
                got = await call(name, **arguments)
                assert not got.get("isError"), got["content"]
                doc: dict = got["structuredContent"]
                assert json.loads(got["content"][0]["text"]) == doc
                assert_valid(schema, doc)
                return doc

            async def refused(name: str, expect: str, **arguments: object) -> None:
                got = await call(name, **arguments)
                assert got.get("isError") and expect in got["content"][0]["text"], got
                assert (await answer("explain_xid", "xid", codes=[79]))["entries"]

            assert (await answer("explain_xid", "xid", codes=[79, "Xid 48"]))["entries"]
            assert (await answer("explain_error", "explain", text=CUDA_ERROR))["inputs"][0]["known"]
            pasted = await answer("analyze_text", "result", text=log.text())
            named = await answer("analyze_paths", "result", paths=[str(log.path)])
            assert verdicts(pasted) == verdicts(named) and pasted["verdict"] == "critical"
            screen = await answer("triage", "triage", paths=[bad], baseline=good)
            assert screen["changed"] is not None and screen["actions"]
            assert (await answer("diff_snapshots", "diff", a=good, b=bad))["findings"]["new"]

            await refused("analyze_text", "over this server's", text="x\n" * (1 << 20))
            await refused("analyze_text", "binary data", text="\x00\x01\x02\x03\x04" * 400)
            await refused("explain_error", "binary data", text="\x00\x01\x02\x03\x04" * 400)
            await refused("analyze_paths", "outside what this server may read",
                          paths=[str(Path(__file__).resolve())])
            await refused("diff_snapshots", "outside what this server may read",
                          a=good, b="/etc/passwd")
            await refused("analyze_paths", "missing.log",
                          paths=[os.path.join(allowed, "missing.log")])
            await refused("explain_xid", "not in gputriage's Xid catalog", codes=[9999])
            await refused("analyze_text", "since", text=log.text(), since="yesterday-ish")

    anyio.run(session)
