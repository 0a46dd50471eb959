"""Issue 32 part A: the CLI is one tool. Every report or list takes -q and --json; an
output path never creates folders; a mistyped command gets one "did you mean" line; an
input gputriage does not recognise gets one short line pointing at the formats."""

from __future__ import annotations

import io
import json
from pathlib import Path

import click
import pytest
from fakehost import FakeHost

from gputriage.cli import COMMANDS, EXIT_INPUT, EXIT_USAGE, Environment, cli, main
from gputriage.scenarios import build_scenario


def run(*argv: str, host: FakeHost | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err, host=host))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    return build_scenario("healthy-8xh100", tmp_path_factory.mktemp("sc") / "healthy")


def _host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path / "root")
    host.write("/proc/modules", "ext4 1 0 - Live 0x0\n")
    return host


# -- output paths never create folders -------------------------------------------------
OUTPUTS = {
    "collect": lambda p, _: ["collect", "-o", p],
    "collect-dir": lambda p, _: ["collect", "-o", p.removesuffix(".tar.gz")],
    "check-keep": lambda p, _: ["check", "--no-history", "--keep", p],
    "scenario-build": lambda p, _: ["scenario", "build", "healthy-8xh100", "-o", p],
    "fleet-demo": lambda p, _: ["fleet", "--demo", p.removesuffix(".tar.gz")],
    "expect": lambda p, snap: ["expect", "--from", snap, "-o", p.replace(".tar.gz", ".toml")],
    "analyze-html": lambda p, snap: ["analyze", snap, "-q", "--html", p + ".html"],
    "k8s-save": lambda p, _: ["k8s", "status", "--save", p],
}


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_an_output_path_never_creates_its_folder(tmp_path, healthy, name):
    missing = tmp_path / "missing"
    argv = OUTPUTS[name](str(missing / "deeper" / "x.tar.gz"), str(healthy))
    code, _, err = run(*argv, host=_host(tmp_path))
    assert code == EXIT_USAGE, err
    assert err.count("\n") == 1 and "no such directory" in err
    assert not missing.exists()


def test_an_output_in_a_folder_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x\n")
    out = tmp_path / "file" / "x.tar.gz"
    code, _, err = run("scenario", "build", "healthy-8xh100", "-o", str(out))
    assert code == EXIT_USAGE and "not a directory" in err and err.count("\n") == 1


# -- -q and --json wherever the output is a report or a list ----------------------------
# Commands whose output is neither: a file written, a plugin's line, a daemon.
NOT_A_REPORT = {
    "collect": "writes a snapshot; its one stderr line says where",
    "drain-guard": "a recipe's gate: its output is the decision's log line and exit status",
    "expect": "writes an expectations file (TOML), or prints it",
    "mcp": "a Model Context Protocol server on stdio: its output is the protocol",
    "npd": "prints node-problem-detector's one line already",
    "watch": "a daemon: its output is metrics and log lines",
}


def _commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(cli)
    found = []
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            found += [(f"{name} {sub}", command.commands[sub]) for sub in command.commands]
        else:
            found.append((name, command))
    return found


def test_every_report_or_list_takes_q_and_json():
    missing = []
    for name, command in _commands():
        if name in NOT_A_REPORT or name == "scenario build":
            continue
        options = {opt for p in command.params for opt in getattr(p, "opts", ())}
        missing += [f"{name} {opt}" for opt in ("-q", "--json") if opt not in options]
    assert not missing


def test_fleet_quiet_is_one_line_with_the_exit_status(tmp_path):
    run("fleet", "--demo", str(tmp_path / "f"))
    code, out, _ = run("fleet", "-q", str(tmp_path / "f"))
    assert code == 2 and out.count("\n") == 1
    assert out.startswith("CRITICAL fleet of 64 nodes: xid.79 on 6 nodes")
    assert "1 distinct finding\n" in out or "1 distinct finding;" in out


def test_scenario_list_quiet_and_json(healthy):
    from gputriage import schemas

    code, out, _ = run("scenario", "list", "-q")
    names = out.split()
    assert code == 0 and "healthy-8xh100" in names and "fleet-64-xid79-driver" in names
    code, out, _ = run("scenario", "list", "--json")
    doc = json.loads(out)
    assert [s["name"] for s in doc["scenarios"]] == names
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, schemas.bundled("scenarios"))
    code, out, _ = run("schema", "--list", "--json")
    jsonschema.validate(json.loads(out), schemas.bundled("schemas"))
    assert run("schema", "--list", "-q")[1].split() == schemas.names()


def test_quiet_lines_of_xid_explain_diff_and_weights(healthy):
    code, out, _ = run("xid", "-q", "79", "999")
    assert code == 0 and out.splitlines() == [
        "Xid 79 CRITICAL [node]: GPU has fallen off the bus — cordon, drain and open a "
        "hardware repair",
        "Xid 999 UNKNOWN: not in the catalog"]
    code, out, _ = run("explain", "-q", "CUDA error: an illegal memory access was encountered")
    assert code == 0 and out.count("\n") == 1 and "[job]" in out
    code, out, _ = run("diff", "-q", str(healthy), str(healthy))
    assert code == 0 and out.startswith("SAME: 0 facts changed, 0 new findings")
    code, out, _ = run("weights", "-q", "--params", "8B")
    assert code == 0 and out.count("\n") == 1 and out.startswith("OK weights: 8")


def test_history_and_ack_quiet(tmp_path):
    state = str(tmp_path / "state")
    code, out, _ = run("ack", "xid.79", "--reason", "reseated", "-q", "--state-dir", state)
    assert code == 0 and out == "1\n"
    assert run("ack", "--list", "-q", "--state-dir", state)[1] == "1\n"
    code, out, _ = run("history", "-q", "--state-dir", state)
    assert code == 0 and out.count("\n") == 1


# -- weights refuses a file that is not a model -----------------------------------------
def test_weights_of_a_file_that_is_not_a_model_is_an_input_error(tmp_path):
    report = tmp_path / "report.pdf"
    report.write_bytes(b"%PDF-1.7\n" + bytes(4096))
    code, out, err = run("weights", str(report))
    assert code == EXIT_INPUT and out == "" and err.count("\n") == 1
    assert "not a model's weights" in err
    gguf = tmp_path / "model"  # no suffix: told by its magic
    gguf.write_bytes(b"GGUF" + bytes(60))
    assert run("weights", str(gguf))[0] != 0  # a GGUF reader's error, not "not a model"
    assert "not a model's weights" not in run("weights", str(gguf))[2]


# -- the small wording bugs -------------------------------------------------------------
def test_counts_and_numbers_read_as_a_person_writes_them():
    from gputriage.text.words import counted, human_number

    assert counted(1, "distinct finding") == "1 distinct finding"
    assert counted(2, "distinct finding") == "2 distinct findings"
    assert counted(3, "fact family") == "3 fact families"
    assert counted(0, "GPU") == "0 GPUs" and counted(2, "bus") == "2 buses"
    assert [human_number(v) for v in (59.4126, 156.742, 0.04567, 12.0, 483.0)] == [
        "59.4", "157", "0.0457", "12", "483"]


def test_a_title_that_names_its_gpu_is_not_prefixed_again():
    from gputriage.model import Scope
    from gputriage.views.scopes import names_scope

    unnamed = Scope(kind="gpu")
    assert names_scope("GPU: row remapper near its limit", unnamed)
    assert names_scope("a GPU the paste does not name: row remap pending", unnamed)
    indexed = Scope(kind="gpu", gpu_index=4, pci_bus_id="0000:9a:00.0")
    assert names_scope("GPU 4 0000:9a:00.0 (H100): row remap pending", indexed)
    assert not names_scope("row remap pending", indexed)


def test_nccl_quiet_line_does_not_say_job_twice(corpus):
    log = corpus.sample("ib-disable-env-socket-over-ipoib")
    code, out, _ = run("nccl", "-q", str(log.path))
    assert "job: job:" not in out and out.count("\n") == 1


def test_nccl_view_rounds_busbw(corpus):
    log = corpus.sample("allreduce-mpi-prefixed-483GBps")
    code, out, _ = run("nccl", "--no-pager", str(log.path))
    assert "avg busbw 157 GB/s" in out and "156.742" not in out.replace(
        "Avg bus bandwidth    : 156.742", "")


def test_research_namespace_is_not_named_twice(tmp_path):
    snap = build_scenario("k8s-shared-pool", tmp_path / "pool")
    code, out, _ = run("analyze", "--json", str(snap))
    titles = [f["title"] for f in json.loads(out)["findings"]]
    pool = [t for t in titles if "shares the GPU pool" in t]
    assert pool and not any("research (research)" in t for t in pool)


def test_cdi_spec_is_judged_against_the_loaded_kernel_module(tmp_path):
    snap = build_scenario("driver-mismatch", tmp_path / "dm")
    code, out, _ = run("analyze", "--json", str(snap))
    cdi = {f["id"]: f["title"] for f in json.loads(out)["findings"]
           if f["id"].startswith("container.cdi")}
    assert "container.cdi-spec-current" not in cdi
    assert "535.161.07" in cdi["container.cdi-spec-version"]
    assert "mismatch" in cdi["container.cdi-spec-version"]


# -- did you mean; the unrecognised-input line -----------------------------------------
@pytest.mark.parametrize(("argv", "said"), [
    (["analyse", "x"], "No such command 'analyse'. Did you mean 'analyze'?"),
    (["chek"], "No such command 'chek'. Did you mean 'check'?"),
    (["k8s", "stauts"], "No such command 'stauts'. Did you mean 'status'?"),
    (["analyze", "--jsn", "x"], "No such option '--jsn'. Did you mean '--json'?"),
])
def test_a_mistyped_command_or_option_gets_one_suggestion(argv, said):
    code, out, err = run(*argv)
    assert code == EXIT_USAGE and out == "" and err.count("\n") == 1 and said in err


def test_a_word_like_no_command_gets_no_suggestion():
    code, _, err = run("zzz")
    assert code == EXIT_USAGE and "Did you mean" not in err and "--help" in err


def test_unrecognised_input_is_one_short_line_pointing_at_the_formats(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("just some notes\nnothing of a GPU\n")
    code, out, err = run("analyze", str(notes))
    assert code == EXIT_INPUT and out == "" and err.count("\n") == 1
    assert len(err.replace(str(notes), "notes.txt")) < 200 and "analyze --formats" in err
    code, out, _ = run("analyze", "--formats")
    assert code == 0 and "pasted: nvidia-smi -q -x XML (full GPU state)" in out.splitlines()
