"""Untrusted strings reach no terminal raw (issue 10, item 8): result JSON files and
file names come from tickets. ``diff``, ``fleet``, ``triage --baseline`` and the terminal
report escape control characters, print rich markup literally, error lines stay one
line, and ``fleet --csv`` cells never start like a spreadsheet formula."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from gputriage.cli import EXIT_INPUT, Environment, main
from gputriage.model import NODE, Action, Blame, Evidence, Finding, HostSummary, Result, Severity
from gputriage.text.safe import csv_cell, printable
from gputriage.views.terminal import render_terminal

TITLE_SET = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
MARKUP = "[bold red]x[/]"
FAKE = "\nFAKE LINE"
EVIL = TITLE_SET + CLEAR + MARKUP + FAKE + "\x9b31m\x7f"
FORMULA = "=cmd|' /C calc'!A0"
RAW = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")  # what may not pass, LF aside


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def _assert_safe(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert not RAW.search(text.replace("\n", ""))
    assert not any(re.match(r"[\s│┃|]*FAKE LINE", line) for line in text.splitlines())


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A snapshot of a critical host, its result JSON and a copy with hostile text."""
    root = tmp_path_factory.mktemp("escaping")
    snap = root / "snap"
    code, _, err = _run(["scenario", "build", "gpu-fallen-off-bus", "-o", str(snap)])
    assert code == 0, err
    code, out, err = _run(["analyze", "--json", str(snap)])
    assert code == 2, err
    clean = root / "clean.json"
    clean.write_text(out)
    doc = json.loads(out)
    doc["host"]["hostname"] = "n" + EVIL
    doc["host"]["kernel"] = "k" + EVIL
    for f in doc["findings"]:
        f["title"] = "t" + EVIL
        f["id"] += EVIL
        for ev in f["evidence"]:
            ev["lines"] = [line + EVIL for line in ev["lines"]]
    evil = root / "evil.json"
    evil.write_text(json.dumps(doc))
    doc["host"]["hostname"] = FORMULA
    doc["host"]["kernel"] = "@SUM(1+1)"
    for f in doc["findings"]:
        f["id"] = FORMULA
    formula = root / "formula.json"
    formula.write_text(json.dumps(doc))
    return {"snap": snap, "clean": clean, "evil": evil, "formula": formula}


@pytest.mark.parametrize("argv", [
    ["diff", "{clean}", "{evil}"],
    ["diff", "-v", "{evil}", "{clean}"],
    ["fleet", "{evil}", "{clean}"],
    ["fleet", "--csv", "{evil}", "{clean}"],
    ["triage", "{snap}", "--baseline", "{evil}"],
])
def test_hostile_result_text_is_escaped(results: dict[str, Path], argv: list[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    code, out, err = _run([a.format(**results) for a in argv])
    assert code in (1, 2), err
    assert "pwned" in out  # the hostile text is shown, escaped
    _assert_safe(out)
    if "--csv" not in argv:
        assert MARKUP in out  # printed as text, not taken as rich markup


def test_fleet_csv_cells_never_start_a_formula(results: dict[str, Path]) -> None:
    code, out, err = _run(["fleet", "--csv", str(results["formula"]), str(results["clean"])])
    assert code == 2, err
    rows = list(csv.DictReader(io.StringIO(out)))
    mine = [r for r in rows if "calc" in r["finding"]]
    assert mine and all(r["finding"] == "'" + FORMULA for r in mine)
    assert any(r["nodes"].startswith("'=cmd") for r in rows)
    assert any(r["value"] == "'@SUM(1+1)" for r in rows)
    for row in rows:
        assert not any(v.startswith(("=", "+", "-", "@", "\t", "\r")) for v in row.values())


@pytest.mark.parametrize("command", ["analyze", "nccl", "logs"])
def test_hostile_file_name_gives_one_clean_error_line(tmp_path: Path, command: str) -> None:
    name = str(tmp_path / ("bad" + TITLE_SET + FAKE + "\x9b2J\x1b[31m.txt"))
    code, out, err = _run([command, name])
    assert code == EXIT_INPUT and out == ""
    assert err.count("\n") == 1 and err.startswith("gputriage: input error: ")
    _assert_safe(err)
    assert "\\x1b]0;pwned\\x07\\x0aFAKE LINE\\x9b2J" in err


def test_terminal_report_escapes_host_and_finding_text() -> None:
    finding = Finding(id="x.evil", severity=Severity.CRITICAL, title="t" + EVIL,
                      explanation="e" + EVIL, action=Action.DRAIN_AND_REPAIR,
                      blame=Blame.NODE, scope=NODE,
                      evidence=(Evidence(source="s" + EVIL, lines=("l" + EVIL,),
                                         note="n" + EVIL),))
    result = Result(host=HostSummary(hostname="h" + EVIL, kernel="k" + EVIL, os="o" + EVIL),
                    findings=[finding], unreadable=["u" + EVIL],
                    inputs=[{"origin": "p" + EVIL, "sources": ["x"]}])
    buf = io.StringIO()
    render_terminal(result, Console(file=buf, width=400, color_system=None), verbose=True)
    out = buf.getvalue()
    # an evidence line holding a newline is shown as two evidence lines, indented as such
    assert "\x1b" not in out and "\x9b" not in out and "\x07" not in out
    split = [line for line in out.splitlines() if line.lstrip().startswith("FAKE LINE")]
    assert split and all(line.startswith(" " * 12 + "FAKE") for line in split)
    _assert_safe("\n".join(line for line in out.splitlines() if line not in split))
    assert out.count(MARKUP) >= 6


@pytest.mark.parametrize("text, shown", [
    ("a\x1bb", "a\\x1bb"), ("\x00\x7f\x85\x9b", "\\x00\\x7f\\x85\\x9b"),
    ("x\ny\r", "x\\x0ay\\x0d"), ("tab\tok", "tab\tok"), ("\u2028\u202e", "\\u2028\\u202e"),
    ("température · ГПУ 温度 [b]", "température · ГПУ 温度 [b]"),
])
def test_printable(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_printable_keeps_newlines_only_when_asked() -> None:
    assert printable("a\nb\x1b", multiline=True) == "a\nb\\x1b"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_printable_output_has_no_controls(text: str) -> None:
    assert not re.search("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]", printable(text))


@pytest.mark.parametrize("cell, written", [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-2", "'-2"), ("@x", "'@x"), ("\tx", "'\tx"),
    ("\rx", "'\\x0dx"), ("node-1", "node-1"), (3, 3), ("a\x1b", "a\\x1b"),
])
def test_csv_cell(cell: object, written: object) -> None:
    assert csv_cell(cell) == written


# --- names from input, through every command (issue 29) ----------------------------------

NAME = TITLE_SET + CLEAR + "\x9b31m"  # no newline: a file name holds it as it is


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Inputs whose file and folder names (and a few contents) carry escape sequences."""
    import struct

    root = tmp_path_factory.mktemp("names")
    snap = root / f"snap{NAME}"
    assert _run(["scenario", "build", "gpu-fallen-off-bus", "-o", str(snap)])[0] == 0
    log = root / f"kern{NAME}.log"
    log.write_text("[ 4254.197860] NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', "
                   "name=<unknown>, GPU has fallen off the bus.\n")
    model = root / f"model{NAME}"
    model.mkdir()
    header = json.dumps({"w": {"dtype": "F16", "shape": [4, 4], "data_offsets": [0, 32]}})
    (model / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header.encode() + b"\0" * 32)
    sharded = root / "sharded"
    sharded.mkdir()
    (sharded / "config.json").write_text(json.dumps(
        {"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "vocab_size": 9}))
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": f"gone{NAME}.safetensors", "b": f"/abs{NAME}"}}))
    fleet = root / f"fleet{NAME}"
    fleet.mkdir()
    code, out, _ = _run(["analyze", "--json", str(snap)])
    (fleet / f"node{NAME}.json").write_text(out)
    (fleet / f"loop{NAME}").symlink_to(f"loop{NAME}")
    manifest = root / f"pod{NAME}.yaml"
    manifest.write_text('apiVersion: v1\nkind: Pod\nmetadata: {name: "p\\e]0;pwned\\a"}\n'
                        "spec:\n  containers:\n  - name: c\n    image: i\n"
                        "    resources: {limits: {nvidia.com/gpu: 1}}\n")
    return {"snap": str(snap), "log": str(log), "model": str(model), "sharded": str(sharded),
            "fleet": str(fleet), "manifest": str(manifest), "state": str(root / f"st{NAME}"),
            "out": str(root / f"out{NAME}")}


@pytest.mark.parametrize("argv", [
    ["weights", "{model}", "--model-dir", "{model}"],
    ["weights", "{sharded}"],
    ["weights", "{model}", "--model-dir", "{model}", "--host-report"],
    ["history", "--state-dir", "{state}"],
    ["analyze", "-v", "{log}"],
    ["logs", "-v", "{log}"],
    ["nccl", "{log}"],
    ["diff", "{snap}", "{log}"],
    ["fleet", "{fleet}"],
    ["k8s", "lint", "-v", "{manifest}"],
    ["expect", "--from", "{snap}"],
    ["check", "--snapshot", "{snap}", "--no-history", "-v"],
    ["triage", "{snap}", "--baseline", "{log}"],
    ["npd", "--snapshot", "{snap}"],
    ["scenario", "build", "healthy-8xh100", "-o", "{out}"],
], ids=lambda argv: " ".join(a for a in argv if "{" not in a))
def test_names_from_input_reach_stdout_and_stderr_escaped(hostile: dict[str, str],
                                                          argv: list[str]) -> None:
    code, out, err = _run([a.format(**hostile) for a in argv])
    assert code not in (64, 70), err
    if argv[0] not in ("logs", "npd"):  # these two do not name their inputs
        assert "pwned" in out + err  # the name is shown, escaped
    _assert_safe(out)
    _assert_safe(err)


def test_expect_states_a_hostile_host_name_in_a_file_check_can_read(tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    assert _run(["scenario", "build", "healthy-8xh100", "-o", str(snap)])[0] == 0
    manifest = json.loads((snap / "manifest.json").read_text())
    manifest["host"] = "n" + EVIL
    (snap / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = _run(["expect", "--from", str(snap), "-o", str(tmp_path / "e.toml")])
    assert code == 0, err
    text = (tmp_path / "e.toml").read_text()
    assert "pwned" in text and "FAKE LINE" in text
    assert all(line.startswith(("#", "[")) or " = " in line or not line
               for line in text.splitlines())  # the forged line is a comment too
    assert not RAW.search(text.replace("\n", ""))
    code, out, err = _run(["analyze", "-q", "--expect", str(tmp_path / "e.toml"), str(snap)])
    assert code == 0, err
