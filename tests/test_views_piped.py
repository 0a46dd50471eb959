"""The views other than the host report, piped and on a narrow terminal.

Piped (stdout a file or a pipe), every view prints plain lines: no escape sequences,
no trailing spaces, and a long value (a kernel line, a node list, an explanation) whole
on one line, never wrapped mid-word. On an 80-column terminal the same views render
within 80 columns. Covers ``logs``, ``nccl``, ``xid``, ``fleet``, ``triage``, ``diff``,
``history`` and ``scenario list``.
"""

from __future__ import annotations

import io
import re

import pytest
from rich.cells import cell_len

from gputriage.cli import Environment, main
from gputriage.knowledge.xid import xid_info
from gputriage.scenarios import build_scenario, get_scenario, list_scenarios
from gputriage.views.historyview import format_rows, render_rows

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[=>]")
LONG_XID = ("2024-05-14T08:18:27+0000 gpu-node-017 kernel: NVRM: Xid (PCI:0000:9a:00): 79, "
            "pid='<unknown>', name=<unknown>, GPU has fallen off the bus. "
            + "padding-word " * 12 + "end-of-line\n")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("piped")
    paths = {n: str(build_scenario(n, root / n))
             for n in ("healthy-8xh100", "gpu-fallen-off-bus", "driver-mismatch")}
    payloads = get_scenario("nccl-socket-fallback").build()
    for name, key in (("job.log", "nccl_log"), ("tests.out", "nccl_tests")):
        (root / name).write_bytes(payloads[key])
        paths[name] = str(root / name)
    (root / "kern.log").write_text(LONG_XID)
    paths["kern.log"] = str(root / "kern.log")
    assert main(["scenario", "build", "fleet-64-xid79-driver", "-o", str(root / "fleet")],
                Environment(stdout=io.StringIO(), stderr=io.StringIO())) == 0
    paths["fleet"] = str(root / "fleet")
    return paths


def cli(*argv: str, terminal: bool = False, monkeypatch=None) -> tuple[int, str]:
    """Run the CLI piped, or (``terminal``) on a pretend 80-column terminal."""
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, pager=out.write)
    if terminal:
        assert monkeypatch is not None
        monkeypatch.setenv("FORCE_COLOR", "1")
        monkeypatch.setenv("COLUMNS", "80")
        monkeypatch.delenv("NO_COLOR", raising=False)
    code = main(list(argv), env)
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return code, out.getvalue()


def assert_plain(out: str) -> list[str]:
    """Piped output: no escape sequences, no trailing whitespace; its lines."""
    assert out.strip(), "nothing printed"
    assert not ANSI.search(out), out
    lines = out.splitlines()
    assert not [ln for ln in lines if ln != ln.rstrip()], "trailing whitespace"
    return lines


def assert_whole(lines: list[str], value: str) -> None:
    """``value`` appears in full on one line (it was not wrapped)."""
    assert any(value in ln for ln in lines), f"{value!r} not on one line"


def assert_fits(out: str, width: int = 80) -> None:
    lines = ANSI.sub("", out).splitlines()
    assert [ln for ln in lines if ln.strip()], "nothing rendered"
    too_wide = [ln for ln in lines if cell_len(ln) > width]
    assert not too_wide, too_wide[:3]


CASES = {
    "logs": lambda b: ("logs", "-v", b["kern.log"]),
    "nccl": lambda b: ("nccl", b["job.log"], b["tests.out"]),
    "xid": lambda b: ("xid", "79", "31", "119"),
    "fleet": lambda b: ("fleet", b["fleet"]),
    "triage": lambda b: ("triage", b["gpu-fallen-off-bus"], "--baseline", b["healthy-8xh100"]),
    "diff": lambda b: ("diff", b["healthy-8xh100"], b["driver-mismatch"]),
    "scenario list": lambda b: ("scenario", "list"),
}


def _long_values(name: str, built: dict) -> list[str]:
    """Values longer than 80 columns that each view must keep on one line."""
    if name == "logs":
        return [LONG_XID.strip()]
    if name == "nccl":
        return ["network  Socket  socket ifaces ib0 ib1 ib2 ib3 ib4 ib5 ib6 ib7  bootstrap ib0",
                "GDR      0 of 32 network channel(s) with GDRDMA  channels net-socket 32, "
                "p2p 112"]
    if name == "xid":
        info = xid_info(79)
        assert info is not None
        return [info.explanation]
    if name == "fleet":
        return ["r01-gpu-04, r02-gpu-02, r02-gpu-05, r03-gpu-05, r04-gpu-04, r05-gpu-02"]
    if name == "triage":
        return ["xid.79 (GPU 0000:9a:00.0): Xid 79 on GPU 0000:9a:00.0: GPU has fallen off "
                "the bus (1 event)",
                "changed: GPU removed: NVIDIA H100 80GB HBM3 0000:9a:00.0 GPU-"]
    if name == "diff":
        return ["[critical] driver.version-mismatch: driver version mismatch: kernel module "
                "535.161.07, userspace 550.54.15"]
    return [sc.title for sc in list_scenarios() if len(sc.title) > 60]


@pytest.mark.parametrize("name", sorted(CASES))
def test_piped_output_is_plain_and_never_wrapped(name, built) -> None:
    _, out = cli(*CASES[name](built))
    lines = assert_plain(out)
    values = _long_values(name, built)
    assert values
    for value in values:
        assert len(value) > 60
        assert_whole(lines, value)


@pytest.mark.parametrize("name", sorted(CASES))
def test_views_render_on_an_80_column_terminal(name, built, monkeypatch) -> None:
    piped_code, piped = cli(*CASES[name](built))
    code, out = cli(*CASES[name](built), terminal=True, monkeypatch=monkeypatch)
    assert code == piped_code
    assert ANSI.search(out), "no styles on a terminal"
    assert_fits(out)
    # the same words, in the same order, only laid out differently
    assert ANSI.sub("", out).split() == piped.split() or name in ("logs", "fleet", "nccl")


def test_nccl_size_table_lines_up_piped(built) -> None:
    _, out = cli("nccl", built["job.log"], built["tests.out"])
    lines = assert_plain(out)
    head = next(i for i, ln in enumerate(lines) if ln.split() == ["size", "oop", "busbw", "ip",
                                                                  "busbw", "#wrong"])
    rows = lines[head + 1:head + 7]
    assert all(ln.startswith("  ") for ln in rows)
    assert {len(ln) for ln in [lines[head], *rows]} == {len(lines[head])}  # right-aligned


def test_fleet_takes_the_terminal_width(built, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("FORCE_COLOR", "1")
    out = io.StringIO()
    main(["fleet", built["fleet"]], Environment(stdout=out, stderr=io.StringIO()))
    widths = {cell_len(ln) for ln in ANSI.sub("", out.getvalue()).splitlines()}
    assert max(widths) == 120  # the box spans the terminal, not a fixed 160


def _history_rows(host: str) -> list[dict]:
    return [{"time": "2026-01-02T03:04:05+00:00", "host": host, "boot_id": "b00t-1234-5678",
             "verdict": v, "critical": c, "warning": w, "digest_sha256": "ab" * 32,
             "changed": changed}
            for v, c, w, changed in (("ok", 0, 0, False), ("critical", 1, 12, True))]


def test_history_listing_piped_and_on_a_terminal() -> None:
    from rich.console import Console

    host = "a-very-long-host-name-that-does-not-fit-in-twenty-columns.cluster.example.org"
    lines = format_rows(_history_rows(host))
    assert lines[0].split() == ["TIME", "HOST", "BOOT", "VERDICT", "CRIT", "WARN", "DIGEST"]
    assert all(ln == ln.rstrip() for ln in lines)
    assert all(host in ln for ln in lines[1:])
    assert lines[1].split()[-1] == "ab" * 6 and lines[2].endswith(" changed")
    assert lines[2].split()[3:6] == ["CRITICAL", "1", "12"]
    console = Console(file=io.StringIO(), width=80, force_terminal=True)
    render_rows(_history_rows(host), console)
    assert_fits(console.file.getvalue())  # type: ignore[attr-defined]
