"""Opt-in sources: ``dcgmi diag`` and the weights host check run only when asked
(``--dcgm-diag LEVEL``, ``--model-dir DIR`` or ``[weights] model_dir``), with their own
timeouts, and what they print is judged like any other source."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fakehost import FakeHost, gpu_host

from gputriage import sources
from gputriage.cli import EXIT_USAGE, Environment, main
from gputriage.collect import CollectOptions, collect
from gputriage.commands.common import opt_in_sources
from gputriage.engine.analysis import analyze
from gputriage.errors import InputError
from gputriage.parsers import expect
from gputriage.snapshot.bundle import Snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"
DIAG_2 = ("dcgmi", "diag", "-r", "2", "-j")


class TimedHost(FakeHost):
    """A FakeHost that also remembers each command's timeout."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.timeouts: dict[tuple[str, ...], float] = {}

    def run(self, argv, timeout_s, cap_bytes):
        self.timeouts[tuple(argv)] = timeout_s
        return super().run(argv, timeout_s, cap_bytes)


def cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue() + err.getvalue()


def _gpu_host(tmp_path: Path, **kw) -> TimedHost:
    host = gpu_host(tmp_path / "root", TimedHost, **kw)
    assert isinstance(host, TimedHost)
    return host


def test_no_opt_in_source_runs_without_its_option(tmp_path):
    host = _gpu_host(tmp_path)
    manifest = json.loads((collect(host, tmp_path / "snap") / "manifest.json").read_text())
    ran = {c[0] for c in host.calls} | {" ".join(c[:2]) for c in host.calls}
    assert "dcgmi diag" not in ran
    assert not any("--host-report" in c for c in host.calls)
    assert "dcgmi_diag" not in manifest["sources"]
    assert "weights_host" not in manifest["sources"]
    opt_in = {s.name for s in sources.SOURCES if s.opt_in}
    assert opt_in == {"dcgmi_diag", "weights_host"}
    assert not any(s.collect for s in sources.SOURCES if s.opt_in)


def test_dcgm_diag_runs_at_its_level_past_the_deadline(tmp_path):
    """-r 2 may run ten minutes although the run's deadline is 5 s; its JSON (a failed
    memory test) is judged from the snapshot."""
    text = (FIXTURES / "a-diag-r3-4x-memory-fail.json").read_text()
    host = _gpu_host(tmp_path, commands={DIAG_2: (226, text)})
    out = collect(host, tmp_path / "snap",
                  CollectOptions(deadline_s=5.0, opt_in={"dcgm_diag": "2"}))
    assert host.timeouts[DIAG_2] == sources.DCGM_DIAG_TIMEOUT_S[2] == 600.0
    manifest = json.loads((out / "manifest.json").read_text())
    rec = manifest["sources"]["dcgmi_diag"]
    assert rec["target"] == list(DIAG_2)
    assert (rec["error"], rec["error_detail"]) == ("failed", "exit status 226")
    assert manifest["collector"]["opt_in"] == {"dcgm_diag": "2"}
    ids = {f.id for f in analyze(Snapshot.load(out)).findings}
    assert "dcgm.test-failed" in ids


def test_dcgm_diag_without_nvidia_hardware_is_not_applicable(tmp_path):
    host = TimedHost(tmp_path / "root")
    host.write("/sys/bus/pci/devices/0000:00:1f.0/vendor", "0x8086\n")
    host.write("/sys/bus/pci/devices/0000:00:1f.0/class", "0x060100\n")
    out = collect(host, tmp_path / "snap", CollectOptions(opt_in={"dcgm_diag": "1"}))
    rec = json.loads((out / "manifest.json").read_text())["sources"]["dcgmi_diag"]
    assert rec["error"] == "not-applicable"


def test_weights_host_runs_gputriage_in_a_child(tmp_path):
    """The host report comes from ``python -m gputriage weights --model-dir DIR
    --host-report`` (a hung mount cannot hold the collection), argv with the DIR."""
    host = _gpu_host(tmp_path)
    collect(host, tmp_path / "snap", CollectOptions(opt_in={"model_dir": "/models/m"}))
    [call] = [c for c in host.calls if "--host-report" in c]
    assert call[1:] == ["-I", "-m", "gputriage", "weights", "--model-dir", "/models/m",
                        "--host-report"]
    assert host.timeouts[tuple(call)] == 30.0


def test_check_model_dir_judges_where_the_weights_lie(tmp_path):
    """A real collection of this machine with --model-dir: the report's model size is
    the files' own, and a weights finding names the mount."""
    np = pytest.importorskip("numpy")
    from safetensors.numpy import save_file

    model = tmp_path / "model"
    model.mkdir()
    save_file({"w": np.zeros((64, 32), dtype=np.float16)}, str(model / "m.safetensors"))
    out = tmp_path / "snap"
    code, said = cli("collect", "-o", str(out), "--model-dir", str(model), "--deadline", "60",
                     "--expect", str(_no_expect(tmp_path)))
    assert code == 0, said
    report = (out / "sources" / "weights_host.txt").read_text()
    assert f"model_dir: {model.resolve()}" in report
    on_disk = (model / "m.safetensors").stat().st_size  # what a load reads
    assert on_disk > 64 * 32 * 2
    assert f"model_bytes: {on_disk}\n" in report
    found = [f for f in analyze(Snapshot.load(out)).findings if f.id.startswith("weights.")]
    assert found and all(f.evidence for f in found)


def _no_expect(tmp_path: Path) -> Path:
    path = tmp_path / "expect.toml"
    path.write_text("[gpu]\ncount = 0\n")
    return path


def test_the_expectations_file_names_the_model_dir(tmp_path):
    found = expect.parse('[weights]\nmodel_dir = "/models/llama"\n')
    assert found.weights.model_dir == "/models/llama"
    assert opt_in_sources(None, None, found) == {"model_dir": "/models/llama"}
    assert opt_in_sources("/other", "3", found) == {"model_dir": "/other", "dcgm_diag": "3"}
    assert expect.parse(found.to_toml()) == expect.Expectations(
        weights=expect.WeightsExpect("/models/llama"), path="<expect>")
    with pytest.raises(InputError, match="model_dir must be a string"):
        expect.parse("[weights]\nmodel_dir = 3\n")


def test_a_bad_diag_level_is_a_usage_error():
    code, said = cli("collect", "--dcgm-diag", "5")
    assert code == EXIT_USAGE
    assert "'5' is not one of" in said
