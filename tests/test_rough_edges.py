"""Issue 13, states that mislead and rough edges: GPU rows UNKNOWN when the driver
cannot be asked, evidence without repeated lines, no circular Xid 45 follow-on, the
NCCL view's network and host count, one-line usage errors, output paths that mean
what they say and are never overwritten without --force, a warning when diff compares
two hosts, every command in the top-level help, fleet within COLUMNS, check's last
line naming no vanished temporary directory, and the README's demo exit status."""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from fakehost import FakeHost

from gputriage.cli import EXIT_USAGE, Environment, cli, main
from gputriage.engine.analysis import analyze
from gputriage.errors import InputError, ParseError
from gputriage.ingest import load_input
from gputriage.model import Finding, Result
from gputriage.scenarios import build_scenario, list_scenarios

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = ("driver-mismatch", "healthy-8xh100", "gpu-fallen-off-bus")


def run(*argv: str, host: FakeHost | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err, host=host))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scenarios")
    return {name: build_scenario(name, root / name) for name in SCENARIOS}


def _host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path / "root")
    host.write("/proc/modules", "ext4 1 0 - Live 0x0\n")
    return host


# -- GPU rows say UNKNOWN when the driver cannot be asked ------------------------------
def test_gpu_rows_are_unknown_when_nvml_cannot_initialise(built):
    code, out, _ = run("analyze", "--json", str(built["driver-mismatch"]))
    gpus = json.loads(out)["gpus"]
    assert code == 2 and len(gpus) == 8
    assert {g.get("state") for g in gpus} == {"unknown"}
    assert {g["severity"] for g in gpus} == {"ok"}  # what the logs say of each GPU


@pytest.mark.parametrize("name", ["healthy-8xh100", "gpu-fallen-off-bus"])
def test_gpu_rows_of_an_answering_driver_have_no_state(built, name):
    _, out, _ = run("analyze", "--json", str(built[name]))
    gpus = json.loads(out)["gpus"]
    assert gpus and all("state" not in g for g in gpus)


def test_gpu_table_prints_unknown(built):
    _, out, _ = run("analyze", str(built["driver-mismatch"]))
    rows = [line for line in out.splitlines() if re.match(r"\s*GPU \? ", line)]
    assert len(rows) == 8 and all("UNKNOWN" in r and " OK" not in r for r in rows)


# -- evidence: each line once -------------------------------------------------------------
def _walk(f: Finding) -> Iterator[Finding]:
    yield f
    for c in f.consequences:
        yield from _walk(c)


def repeated_evidence(result: Result) -> list[tuple[str, str, str]]:
    """(finding, source, line) for each evidence line a finding quotes twice (a quoted
    line with an embedded newline counts as its lines). A finding merged over several
    GPUs quotes each GPU's section under its own note ("GPU 1", "GPU 4"): the same text
    in two GPUs' sections is two lines of the input, not one quoted twice."""
    found = []
    for top in result.findings:
        for f in _walk(top):
            seen: set[tuple[str, str | None, str]] = set()
            for e in f.evidence:
                for line in (part for ln in e.lines for part in ln.split("\n")):
                    if line.strip() and (e.source, e.note, line) in seen:
                        found.append((f.id, e.source, line))
                    seen.add((e.source, e.note, line))
    return found


def test_no_scenario_quotes_an_evidence_line_twice(analysed):
    repeats = {sc.name: repeated_evidence(analysed.result(sc.name)) for sc in list_scenarios()}
    assert not {k: v for k, v in repeats.items() if v}


def test_no_corpus_sample_quotes_an_evidence_line_twice(corpus, analysed):
    repeats = {}
    for sample in corpus.samples:
        try:
            _, result = analysed.sample(sample.path)
        except (InputError, ParseError):
            continue
        if found := repeated_evidence(result):
            repeats[sample.name] = found
    assert not repeats


def test_nvml_version_line_once_in_driver_mismatch(built):
    _, out, _ = run("analyze", "--json", str(built["driver-mismatch"]))
    (f,) = [f for f in json.loads(out)["findings"] if f["id"] == "driver.version-mismatch"]
    smi = next(e for e in f["evidence"] if e["source"] == "nvidia_smi")
    assert smi["lines"] == ["NVML library version: 550.54",
                            "Failed to initialize NVML: Driver/library version mismatch"]


# -- Xid 45: a follow-on of a different Xid ---------------------------------------------
XID45 = ("[ 100.{n}] NVRM: Xid (PCI:0000:48:00): 45, pid=22884, name=python, channel "
         "0x0000001{n} caused by previous Xid {cause}\n")


def _xid45_titles(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "kern.log"
    path.write_text(text)
    return [f.title for f in analyze(load_input(str(path))).findings if f.id == "xid.45"]


def test_xid45_caused_by_xid45_alone_is_not_its_own_follow_on(tmp_path):
    (title,) = _xid45_titles(tmp_path, "".join(XID45.format(n=n, cause=45) for n in (1, 2)))
    assert "follow-on of" not in title and "Xid 45 (" not in title
    assert "not in this log" in title and "(2 events)" in title


def test_xid45_after_another_xid_is_its_follow_on(tmp_path):
    xid74 = ("[ 99.0] NVRM: Xid (PCI:0000:48:00): 74, pid=22884, name=python, NVLink: "
             "fatal error detected on link 8(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)\n")
    titles = _xid45_titles(tmp_path, xid74 + XID45.format(n=1, cause=45))
    assert titles == ["Xid 45 on GPU 0000:48:00.0: follow-on of Xid 74 (1 event)"]


def test_corpus_xid45_chain_is_not_circular(corpus):
    result = analyze(load_input(str(corpus.sample("vllm40652-talos").path)))
    (f,) = [f for f in result.findings if f.id == "xid.45"]
    assert "follow-on of earlier Xid 45" not in f.title and "not in this log" in f.title


# -- the NCCL view: network from the channels, hosts of unprefixed logs ------------------
def test_nccl_network_from_channels_when_not_logged(corpus):
    path = str(corpus.sample("nccl1189-h20-net-ib").path)
    _, out, _ = run("nccl", "--json", path)
    hosts = {h["host"]: h for h in json.loads(out)["nccl"]["hosts"]}
    assert hosts["H20-GPU-06"]["channels"].get("net-ib") == 9
    assert hosts["H20-GPU-06"]["networks"] == ["IB"]
    _, text, _ = run("nccl", path)
    block = text.split("H20-GPU-06", 1)[1]
    assert re.search(r"network\s+IB\b", block.split("\n\n", 1)[0])


def test_nccl_header_counts_an_unprefixed_log_as_one_host(corpus):
    _, out, _ = run("nccl", str(corpus.sample("gb300-nvl72-72gpu-mnnvl-not-working").path))
    assert "1 process on 1 host" in out and "on 0 hosts" not in out


# -- usage errors: one line ---------------------------------------------------------------
@pytest.mark.parametrize("argv", [["check", "--bogus"], ["analyze"], ["scenario", "build", "x"],
                                  ["nosuchcommand"], ["diff", "a"]])
def test_usage_error_is_one_line(argv):
    code, out, err = run(*argv)
    assert code == EXIT_USAGE and out == ""
    assert err.count("\n") == 1 and err.startswith("gputriage: usage error: ")
    assert "--help" in err


# -- output paths mean what they say; nothing is overwritten without --force -------------
def test_scenario_tarball_name_writes_a_tarball(tmp_path):
    out = tmp_path / "X.tar.gz"
    code, _, _ = run("scenario", "build", "gpu-fallen-off-bus", "-o", str(out))
    assert code == 0 and out.is_file() and tarfile.is_tarfile(out)


def test_fleet_scenario_refuses_a_tarball_name(tmp_path):
    out = tmp_path / "X.tar.gz"
    code, _, err = run("scenario", "build", "fleet-64-xid79-driver", "-o", str(out))
    assert code == EXIT_USAGE and err.count("\n") == 1 and not out.exists()


@pytest.mark.parametrize("name", ["x.zip", "x.tar", "x.tar.xz"])
def test_collect_refuses_other_archive_names(tmp_path, name):
    out = tmp_path / name
    code, _, err = run("collect", "-o", str(out), host=_host(tmp_path))
    assert code == EXIT_USAGE and err.count("\n") == 1 and not out.exists()


def _occupied(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text("keep me\n")
    return path


@pytest.mark.parametrize(("argv", "names"), [
    (lambda p, _: ["scenario", "build", "healthy-8xh100", "-o", p], ("o.tar.gz", "o")),
    (lambda p, _: ["collect", "-o", p], ("o.tar.gz", "o")),
    (lambda p, _: ["check", "--no-history", "--keep", p], ("o.tar.gz", "o")),
    (lambda p, snap: ["expect", "--from", snap, "-o", p], ("o.toml",)),
], ids=["scenario-build", "collect", "check-keep", "expect"])
def test_existing_output_is_not_overwritten_without_force(tmp_path, built, argv, names):
    for name in names:
        path = _occupied(tmp_path, name)
        code, _, err = run(*argv(str(path), str(built["healthy-8xh100"])),
                           host=_host(tmp_path))
        assert code == EXIT_USAGE and "--force" in err and path.read_text() == "keep me\n"


def test_existing_directory_is_not_overwritten_without_force(tmp_path):
    out = tmp_path / "snap"
    out.mkdir()
    (out / "mine.txt").write_text("keep me\n")
    code, _, _ = run("scenario", "build", "healthy-8xh100", "-o", str(out))
    assert code == EXIT_USAGE and (out / "mine.txt").read_text() == "keep me\n"
    code, _, _ = run("scenario", "build", "healthy-8xh100", "-o", str(out), "--force")
    assert code == 0 and not (out / "mine.txt").exists() and (out / "manifest.json").is_file()


def test_expect_refuses_an_archive_name(tmp_path, built):
    out = tmp_path / "expect.tar.gz"
    code, _, err = run("expect", "--from", str(built["healthy-8xh100"]), "-o", str(out))
    assert code == EXIT_USAGE and "TOML" in err and not out.exists()


# -- diff of two hosts warns ---------------------------------------------------------------
def _result_as(tmp_path: Path, snapshot: Path, hostname: str | None) -> str:
    _, out, _ = run("analyze", "--json", str(snapshot))
    doc = json.loads(out)
    if hostname is not None:
        doc["host"]["hostname"] = hostname
    path = tmp_path / f"{hostname or 'same'}-{snapshot.name}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_diff_of_two_hosts_warns_on_terminal_and_json(tmp_path, built):
    a = _result_as(tmp_path, built["healthy-8xh100"], "gpu-node-017")
    b = _result_as(tmp_path, built["gpu-fallen-off-bus"], "gpu-node-018")
    _, out, _ = run("diff", a, b)
    assert out.splitlines()[0].startswith("warning: A is host gpu-node-017, B is host "
                                          "gpu-node-018")
    _, out, _ = run("diff", "--json", a, b)
    (warning,) = json.loads(out)["warnings"]
    assert "two different hosts" in warning


def test_diff_of_one_host_does_not_warn(built):
    _, out, _ = run("diff", str(built["healthy-8xh100"]), str(built["gpu-fallen-off-bus"]))
    assert "warning:" not in out
    _, out, _ = run("diff", "--json", str(built["healthy-8xh100"]),
                    str(built["gpu-fallen-off-bus"]))
    assert json.loads(out)["warnings"] == []


# -- help, fleet width, check's last line, README -----------------------------------------
def test_every_command_is_in_the_top_level_help():
    ctx = click.Context(cli, info_name="gputriage")
    synopsis = cli.get_help(ctx).split("Options:")[0]
    listed = set(re.findall(r"^\s+gputriage ([a-z0-9-]+)", synopsis, re.M))
    assert listed == set(cli.list_commands(ctx))
    assert all(cli.get_command(ctx, name) is not None for name in listed)


@pytest.fixture(scope="module")
def fleet_built(tmp_path_factory) -> Path:
    """The fleet scenario, built once through the command for both widths."""
    out = tmp_path_factory.mktemp("fleet") / "f"
    code, _, _ = run("scenario", "build", "fleet-64-xid79-driver", "-o", str(out))
    assert code == 0
    return out


@pytest.mark.parametrize("columns", [100, 130])
def test_fleet_honours_columns(fleet_built, monkeypatch, columns):
    monkeypatch.setenv("FORCE_COLOR", "1")  # render as for a terminal, without colour
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", str(columns))
    _, out, _ = run("fleet", str(fleet_built))
    assert "xid.79" in out
    assert max(len(line) for line in out.splitlines()) <= columns


def test_check_names_no_vanished_temporary_directory(tmp_path):
    code, out, _ = run("check", "--no-history", host=_host(tmp_path))
    assert code in (0, 1, 3)
    assert "gputriage-" not in out and "this host, collected now, not kept" in out
    _, out, _ = run("check", "--no-history", "--json", host=_host(tmp_path))
    assert [i["origin"] for i in json.loads(out)["inputs"]] == [
        "this host, collected now, not kept"]


def test_check_keep_names_the_kept_snapshot(tmp_path):
    kept = tmp_path / "kept"
    _, out, _ = run("check", "--no-history", "--json", "--keep", str(kept),
                    host=_host(tmp_path))
    assert [i["origin"] for i in json.loads(out)["inputs"]] == [str(kept)]


def test_readme_demo_line_shows_the_demos_exit_status():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    first = text.split("```sh\n", 1)[1].splitlines()[0]
    _, _, rest = first.partition("gputriage analyze demo.tar.gz")
    assert rest.startswith('; echo "exit $?"; gputriage check')
    assert "(`exit 2`: CRITICAL)" in text.split("```", 2)[2].strip().split("\n\n", 1)[0]
