"""Expectations end to end: the file (errors are one line, exit 66), each group against
the scenario that breaks it, ``gputriage expect --from`` and its round trip, the
standard file and $GPUTRIAGE_EXPECT in ``check``, and the node that lost every GPU."""

from __future__ import annotations

import io
import json

import pytest
from fakehost import FakeHost

from gputriage.cli import EXIT_INPUT, EXIT_USAGE, Environment, main
from gputriage.parsers.expect import Expectations, GpuExpect, load, parse
from gputriage.scenarios import build_scenario

SCENARIOS = ("healthy-8xh100", "gpu-fallen-off-bus", "driver-mismatch", "ib-port-polling",
             "pcie-x8-gpu3", "hugepages-not-reserved", "gpus-gone")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("expect")
    return {name: build_scenario(name, root / name) for name in SCENARIOS}


def _run(argv, host=None):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err, host=host))
    return code, out.getvalue(), err.getvalue()


def _findings(doc: dict) -> list[dict]:
    """Every finding of a JSON result, those folded into a cause included."""
    out = []
    todo = list(doc["findings"])
    while todo:
        f = todo.pop(0)
        out.append(f)
        todo += [c for c in f.get("consequences") or () if isinstance(c, dict)]
    return out


def _judge(snapshot, tmp_path, toml: str) -> tuple[int, dict]:
    path = tmp_path / "expect.toml"
    path.write_text(toml)
    code, out, err = _run(["analyze", "--json", "--expect", str(path), str(snapshot)])
    assert code in (0, 1, 2, 3), err
    return code, json.loads(out)


def _expect_ids(doc: dict) -> dict[str, dict]:
    return {f["id"]: f for f in _findings(doc) if f["id"].startswith("expect.")}


# -- the file -----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    ("[gpu\ncount = 8\n", "TOML syntax error"),
    ("[gpu]\ncuont = 8\n", "unknown key gpu.cuont"),
    ("[gpus]\ncount = 8\n", "unknown table 'gpus'"),
    ('[gpu]\ncount = "8"\n', "gpu.count must be a whole number, not a string"),
    ("[gpu]\nmig = 0\n", "gpu.mig must be true or false"),
    ('[gpu]\ndriver = "latest"\n', "gpu.driver must be a version"),
    ("[infiniband]\nports = -1\n", "infiniband.ports must not be negative"),
    ("\x00\xff", "not UTF-8"),
])
def test_a_bad_file_is_one_line_and_exit_66(text, message, built, tmp_path):
    path = tmp_path / "expect.toml"
    path.write_bytes(text.encode("latin-1"))
    code, out, err = _run(["analyze", "--expect", str(path), str(built["healthy-8xh100"])])
    assert code == EXIT_INPUT and not out
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and message in err


def test_a_missing_file_is_an_input_error(tmp_path, built):
    code, _, err = _run(["analyze", "--expect", str(tmp_path / "nope.toml"),
                         str(built["healthy-8xh100"])])
    assert code == EXIT_INPUT and "nope.toml: no such file or directory" in err


def test_file_round_trips_through_toml():
    exp = parse('[gpu]\ncount = 8\nmodel = "NVIDIA H100 80GB HBM3"\nmig = false\n'
                '[infiniband]\nrate_gbps = 400\nstate = "Active"\n', "a.toml")
    assert exp.gpu == GpuExpect(count=8, model="NVIDIA H100 80GB HBM3", mig=False)
    assert exp.infiniband.rate_gbps == 400.0
    again = parse(exp.to_toml("a header"), "b.toml")
    assert (again.gpu, again.infiniband) == (exp.gpu, exp.infiniband)
    assert "rate_gbps = 400\n" in exp.to_toml()
    assert Expectations().to_toml() == "\n"


# -- each group against the scenario that breaks it -----------------------------------------

def test_a_lost_gpu_is_short_of_the_count(built, tmp_path):
    code, doc = _judge(built["gpu-fallen-off-bus"], tmp_path, "[gpu]\ncount = 8\n")
    f = _expect_ids(doc)["expect.gpu-count"]
    assert code == 2 and f["severity"] == "critical" and f["action"] == "drain-and-repair"
    assert f["title"] == "7 of 8 expected GPUs: 0000:9a:00.0 missing"


def test_the_driver_expectation(built, tmp_path):
    code, doc = _judge(built["driver-mismatch"], tmp_path, '[gpu]\ndriver = "550.54.15"\n')
    f = _expect_ids(doc)["expect.driver"]
    assert code == 2 and f["title"] == "driver 535.161.07 (kernel module), expected 550.54.15"
    assert (f["action"], f["blame"]) == ("fix-software", "config")


def test_the_infiniband_expectation(built, tmp_path):
    _, doc = _judge(built["ib-port-polling"], tmp_path, "[infiniband]\nports = 8\n")
    f = _expect_ids(doc)["expect.infiniband"]
    assert f["severity"] == "critical"
    assert f["title"].startswith("7 of 8 expected InfiniBand ports Active: mlx5_3/1 Down")


def test_the_pcie_width_expectation(built, tmp_path):
    _, doc = _judge(built["pcie-x8-gpu3"], tmp_path, "[pcie]\nwidth = 16\n")
    f = _expect_ids(doc)["expect.pcie"]
    assert f["severity"] == "critical" and f["action"] == "drain-and-repair"
    assert f["title"] == "GPU 3 0000:5d:00.0 PCIe link Gen5 x8, expected x16"


def test_the_hugepages_expectation(built, tmp_path):
    _, doc = _judge(built["hugepages-not-reserved"], tmp_path,
                    "[hugepages]\nsize_kb = 2048\ncount = 32768\n")
    f = _expect_ids(doc)["expect.hugepages"]
    assert f["title"] == "9216 hugepages of 2048 kB reserved, expected 32768"
    assert (f["severity"], f["action"]) == ("critical", "fix-config")


# -- gputriage expect --from ----------------------------------------------------------------

def test_generated_from_a_healthy_node_it_passes(built, tmp_path):
    out = tmp_path / "expect.toml"
    code, _, err = _run(["expect", "--from", str(built["healthy-8xh100"]), "-o", str(out)])
    assert code == 0 and "expectations written" in err
    exp = load(str(out))
    assert (exp.gpu.count, exp.gpu.model, exp.gpu.driver, exp.gpu.cuda) == (
        8, "NVIDIA H100 80GB HBM3", "550.54.15", "12.4")
    assert (exp.gpu.mig, exp.gpu.persistence, exp.nvswitch.count) == (False, True, 4)
    assert (exp.pcie.gen, exp.pcie.width) == (5, 16)
    assert (exp.infiniband.ports, exp.infiniband.rate_gbps) == (8, 400.0)
    code, doc = _judge(built["healthy-8xh100"], tmp_path, out.read_text())
    assert code == 0 and doc["host"]["verdict"] == "ok"
    assert all(f["severity"] == "info" for f in _expect_ids(doc).values())
    # the same file holds a node that lost a GPU to it
    code, doc = _judge(built["gpu-fallen-off-bus"], tmp_path, out.read_text())
    assert code == 2 and "expect.gpu-count" in _expect_ids(doc)


def test_expect_writes_stdout_and_refuses_to_overwrite(built, tmp_path):
    code, out, _ = _run(["expect", "--from", str(built["healthy-8xh100"])])
    assert code == 0 and out.startswith("# What gpu-node-017 had") and "[gpu]\ncount = 8" in out
    target = tmp_path / "taken.toml"
    target.write_text("keep me\n")
    code, _, err = _run(["expect", "--from", str(built["healthy-8xh100"]), "-o", str(target)])
    assert code == EXIT_USAGE and "already exists" in err
    assert target.read_text() == "keep me\n"
    code, _, _ = _run(["expect", "--from", str(built["healthy-8xh100"]), "-o", str(target),
                       "--force"])
    assert code == 0 and "[gpu]" in target.read_text()


def test_expect_from_an_unhealthy_node_says_so(built):
    code, out, err = _run(["expect", "--from", str(built["gpu-fallen-off-bus"])])
    assert code == 0 and "is not healthy (critical" in err and "count = 7" in out


# -- check: the standard file and $GPUTRIAGE_EXPECT ------------------------------------------

def test_check_reads_gputriage_expect(built, tmp_path, monkeypatch):
    path = tmp_path / "node.toml"
    path.write_text("[gpu]\ncount = 8\n")
    monkeypatch.setenv("GPUTRIAGE_EXPECT", str(path))
    monkeypatch.setenv("GPUTRIAGE_STATE_DIR", str(tmp_path / "state"))
    host = FakeHost(tmp_path / "root")
    argv = ["check", "--json", "--no-history", "--snapshot"]
    code, out, _ = _run(argv + [str(built["gpu-fallen-off-bus"])], host=host)
    assert code == 2 and "expect.gpu-count" in _expect_ids(json.loads(out))
    code, out, _ = _run(argv + [str(built["healthy-8xh100"])], host=host)
    assert code == 0 and not _expect_ids(json.loads(out))
    monkeypatch.setenv("GPUTRIAGE_EXPECT", str(tmp_path / "absent.toml"))
    code, _, err = _run(argv + [str(built["healthy-8xh100"])], host=host)
    assert code == EXIT_INPUT and "absent.toml: no such file or directory" in err


def test_check_of_an_unreadable_host_with_expected_gpus_is_unknown(tmp_path, monkeypatch):
    path = tmp_path / "node.toml"
    path.write_text("[gpu]\ncount = 8\n")
    monkeypatch.setenv("GPUTRIAGE_STATE_DIR", str(tmp_path / "state"))
    host = FakeHost(tmp_path / "root")
    host.write("/proc/modules", "ext4 1 0 - Live 0x0\n")
    code, out, _ = _run(["check", "--json", "--no-history", "--expect", str(path)], host=host)
    doc = json.loads(out)
    assert code == 3 and doc["host"]["verdict"] == "unknown"
    assert "expect.gpu-count-unknown" in _expect_ids(doc)


# -- a node that lost every GPU is not a CPU host ---------------------------------------------

def test_a_node_that_lost_every_gpu_is_critical(built):
    code, out, _ = _run(["analyze", "--json", str(built["gpus-gone"])])
    doc = json.loads(out)
    assert code == 2
    [f] = [f for f in _findings(doc) if f["id"] == "host.gpus-gone"]
    assert f["severity"] == "critical" and f["action"] == "drain-and-repair"
    assert "this host had 8 GPUs" in f["title"]
    assert {e["source"] for e in f["evidence"]} >= {"kernel_log", "dev_nvidia"}
    assert "host.not-gpu-host" not in {x["id"] for x in _findings(doc)}


def test_a_cpu_host_check_is_still_ok(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTRIAGE_STATE_DIR", str(tmp_path / "state"))
    host = FakeHost(tmp_path / "root")
    host.write("/proc/modules", "ext4 1 0 - Live 0x0\n")
    host.write("/sys/bus/pci/devices/0000:00:03.0/vendor", "0x1af4\n")
    host.write("/sys/bus/pci/devices/0000:00:03.0/class", "0x020000\n")
    code, out, err = _run(["check", "--json", "--no-history"], host=host)
    assert code == 0, err
    assert [f["id"] for f in json.loads(out)["findings"]] == ["host.not-gpu-host"]
