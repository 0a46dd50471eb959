"""The documented messages of the stack (issue 31, part B): real captures of each, their
variants (other prefixes, versions, bus ids), and the rule that ``analyze`` and
``explain`` read one message from the same row and give the same blame, severity and
action."""

from __future__ import annotations

from pathlib import Path

import pytest
from golden import by_id
from message_samples import SAMPLES

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.knowledge import nccl_warnings, node_messages
from gputriage.knowledge.job_messages import message
from gputriage.knowledge.lookup import find_hits
from gputriage.model import Action, Blame, Finding, Result, Severity

FIXTURES = Path(__file__).parent / "fixtures" / "messages"
DRAINS = (Action.DRAIN_AND_REPAIR, Action.REBOOT_NODE, Action.RESET_GPU)

# real capture -> (finding id, severity, blame, action) an expert gives it
REAL = {
    "gpuop20-inforom-table.txt": ("nvidia-smi.inforom-corrupted", Severity.WARNING,
                                  Blame.NODE, Action.PLAN_REPAIR),
    "nccltests206-ibv-reg-mr-enomem.txt": ("nccl.ib-memlock", Severity.WARNING, Blame.CONFIG,
                                           Action.FIX_CONFIG),
    "ctk202-driver-rpc-timeout.txt": ("container.driver-rpc-timeout", Severity.WARNING,
                                      Blame.CONFIG, Action.FIX_CONFIG),
    "marin7018-no-socket-interface.txt": ("nccl.no-socket-interface", Severity.WARNING,
                                          Blame.CONFIG, Action.FIX_CONFIG),
    "mambatree14-no-socket-interface.txt": ("nccl.no-socket-interface", Severity.WARNING,
                                            Blame.CONFIG, Action.FIX_CONFIG),
    "kata11875-no-firmware-image.txt": ("driver.gsp-firmware-missing", Severity.CRITICAL,
                                        Blame.CONFIG, Action.FIX_SOFTWARE),
}

# one message line of each row of the NCCL and node catalogs, as the tools print it


def _result(tmp_path: Path, text: str) -> Result:
    path = tmp_path / "paste.txt"
    path.write_text(text)
    return analyze(load_input(str(path)))


def _findings(tmp_path: Path, text: str) -> dict[str, Finding]:
    """The findings and their consequences, by id."""
    return by_id(_result(tmp_path, text))


@pytest.mark.parametrize("name", sorted(REAL))
def test_a_real_capture_is_judged_as_the_expert_does(name, tmp_path):
    fid, severity, blame, action = REAL[name]
    result = _result(tmp_path, (FIXTURES / name).read_text())
    found = by_id(result)
    f = found[fid]
    assert (f.severity, f.blame, f.action) == (severity, blame, action)
    loud = [g.id for g in result.findings if g.severity.rank >= Severity.WARNING.rank]
    assert loud == [fid]  # one cause, one finding (consequences folded under it)
    if blame is not Blame.NODE:
        assert not any(g.action in DRAINS for g in result.findings)


@pytest.mark.parametrize("name", sorted(REAL))
def test_explain_reads_the_same_row_as_analyze(name):
    fid, severity, blame, action = REAL[name]
    hits = {h.message.id: h.message for h in find_hits((FIXTURES / name).read_text())}
    assert (hits[fid].severity, hits[fid].blame, hits[fid].action) == (severity, blame, action)


def test_every_row_of_the_nccl_and_node_catalogs_has_a_sample_explain_finds():
    rows = [*(w.id for w in nccl_warnings.warnings()), *(m.id for m in node_messages.messages())]
    assert sorted(rows) == sorted(SAMPLES)  # a new row brings its sample line
    for fid, line in SAMPLES.items():
        assert [h.message.id for h in find_hits(line)] == [fid]
        assert find_hits(line)[0].message.source


@pytest.mark.parametrize("line", [
    "misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate "
    "memory",
    "gpu-07:11:11 [3] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed with error "
    "Cannot allocate memory",
    "[1,0]<stderr>:n2:55:60 [0] include/ibvwrap.h:98 NCCL WARN Call to ibv_create_qp failed "
    "with error Cannot allocate memory",
])
def test_an_ib_verbs_enomem_is_the_locked_memory_limit(line, tmp_path):
    f = _findings(tmp_path, line + "\n")["nccl.ib-memlock"]
    assert (f.blame, f.action, f.severity) == (Blame.CONFIG, Action.FIX_CONFIG, Severity.WARNING)


@pytest.mark.parametrize("line", [
    "nvidia-container-cli: initialization error: driver rpc error: timed out: unknown.",
    "nvidia-container-cli.real: initialization error: driver rpc error: timed out",
    "Error: crun: error executing hook `/usr/bin/nvidia-container-toolkit` (exit code: 1)\n"
    "nvidia-container-cli: initialization error: driver error: timed out",
])
def test_a_driver_rpc_timeout_is_persistence_mode(line, tmp_path):
    found = _findings(tmp_path, line + "\n")
    f = found["container.driver-rpc-timeout"]
    assert (f.blame, f.action) == (Blame.CONFIG, Action.FIX_CONFIG)
    assert "container.hook-failed" not in found
    row = message("container.driver-rpc-timeout")
    assert row is not None and "persistence" in row.next


@pytest.mark.parametrize("bus", ["0000:0B:00.0", "00000000:B3:00.0", "0001:C1:00.0"])
def test_a_corrupted_inforom_is_planned_not_drained(bus, tmp_path):
    f = _findings(tmp_path, f"WARNING: infoROM is corrupted at gpu {bus}\n")[
        "nvidia-smi.inforom-corrupted"]
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.PLAN_REPAIR, Blame.NODE)
    assert f.scope.pci_bus_id and f.scope.pci_bus_id.endswith(bus[-7:].lower())


def test_missing_gsp_firmware_folds_the_gpus_that_did_not_come_up(tmp_path):
    text = ("[ 12.0] nvidia 0000:01:00.0: Direct firmware load for nvidia/550.76/gsp_ga10x.bin "
            "failed with error -2\n"
            "[ 12.1] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0x56:1892)\n"
            "[ 12.2] NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor number 0\n")
    result = _result(tmp_path, text)
    [f] = result.findings
    assert f.id == "driver.gsp-firmware-missing"
    assert (f.blame, f.action, f.severity) == (Blame.CONFIG, Action.FIX_SOFTWARE,
                                               Severity.CRITICAL)
    assert [c.id for c in f.consequences] == ["driver.gpu-init-failed"]


def test_a_job_set_interface_that_does_not_exist_is_the_jobs_setting(tmp_path):
    text = ("node1:10:10 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ens9\n"
            "node1:10:10 [0] bootstrap.cc:55 NCCL WARN Bootstrap : no socket interface found\n")
    f = _findings(tmp_path, text)["nccl.no-socket-interface"]
    assert f.blame is Blame.JOB_CONFIG and f.action is Action.FIX_CONFIG
