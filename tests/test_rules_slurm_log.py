"""What Slurm says of a GPU node (parsers/slurm_log.py, rules/slurm.py): a gres/gpu count
lower than configured, as slurmctld logs it, as sinfo -R and scontrol show node give its
reason; slurmd built without NVML; a step the OOM killer hit. None of them drains the
node again (Slurm already took it out) and none blames the GPUs on Slurm's word alone."""

from __future__ import annotations

import pytest
from hostkit import run

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_text
from gputriage.ingest.detect import detect
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.slurm_log import parse_slurm_log

CTLD = ("Mar 11 04:12:09 head1 slurmctld[2211]: slurmctld: _node_config_validate: gres/gpu: "
        "Count changed on node gpu-r3n12 (8 != 7)\n"
        "Mar 11 04:12:09 head1 slurmctld[2211]: slurmctld: error: Setting node gpu-r3n12 "
        "state to INVAL with reason:gres/gpu count reported lower than configured (7 < 8)\n"
        "Mar 11 04:12:09 head1 slurmctld[2211]: slurmctld: error: "
        "_slurm_rpc_node_registration node=gpu-r3n12: Invalid argument\n")
SHOW_NODE = """\
NodeName=gpu-a07 Arch=x86_64 CoresPerSocket=48
   CPUAlloc=0 CPUEfctv=96 CPUTot=96 CPULoad=0.12
   Gres=gpu:h100:8
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   CfgTRES=cpu=96,mem=1500000M,billing=96,gres/gpu=8
   Reason=gres/gpu count reported lower than configured (0 < 8) [slurm@2025-06-02T08:15:44]
"""
SINFO_R = ("REASON                                               USER      TIMESTAMP"
           "           NODELIST\n"
           "gres/gpu count reported lower than configured (6 < 8) slurm     "
           "2025-06-02T08:15:44 dgx[014-015]\n")
NO_NVML = ("[2025-02-03T10:00:01.123] fatal: We were configured to autodetect nvml "
           "functionality, but we weren't able to find that lib when Slurm was "
           "configured.\n")
OOM = ("slurmstepd: error: Detected 3 oom_kill events in StepId=88123.0. Some of the step "
       "tasks have been OOM Killed.\n"
       "srun: error: gpu-a07: task 5: Out Of Memory\n")

RULE_CASES = {
    "slurm.gres-count": [({"slurm_log": CTLD}, "slurm.gpu-count-low")],
    "slurm.gpu-autodetect": [({"slurm_log": NO_NVML}, "slurm.nvml-autodetect-unavailable")],
    "slurm.oom-kill": [({"slurm_log": OOM}, "slurm.step-oom-killed")],
}
NO_SAMPLE_YET = {"slurm_log": "slurmctld's log or sinfo -R of a GPU node drained for its "
                              "gres/gpu count"}


def _one(result, fid):
    (f,) = [f for f in result.findings if f.id == fid]
    return f


@pytest.mark.parametrize(("text", "node", "count"), [
    (CTLD, "gpu-r3n12", "7 of 8"), (SHOW_NODE, "gpu-a07", "0 of 8"),
    (SINFO_R, "dgx[014-015]", "6 of 8")])
def test_a_node_short_of_its_gres_is_out_of_service_and_says_why(text, node, count):
    f = _one(analyze(load_text(text, "paste")), "slurm.gpu-count-low")
    assert (f.severity, f.blame, f.action) == (Severity.WARNING, Blame.UNKNOWN,
                                               Action.FIX_CONFIG)
    assert f.scope.name == node and count in f.title
    assert f"nvidia-smi -L on {node}" in (f.step or "")
    assert ("not seeing them" in f.explanation) is count.startswith("0 ")


def test_the_rejected_registration_is_evidence_of_the_same_cause():
    f = _one(run(slurm_log=CTLD), "slurm.gpu-count-low")
    assert any("_slurm_rpc_node_registration" in ln for e in f.evidence for ln in e.lines)
    assert len(run(slurm_log=CTLD).findings) == 1


def test_slurmd_without_nvml_and_a_step_oom_kill():
    f = _one(run(slurm_log=NO_NVML), "slurm.nvml-autodetect-unavailable")
    assert (f.blame, f.action) == (Blame.CONFIG, Action.FIX_SOFTWARE)
    g = _one(run(slurm_log=OOM), "slurm.step-oom-killed")
    assert g.blame is Blame.JOB_CONFIG and "StepId=88123.0 " in g.title + " "
    assert "GPU's" in g.explanation


def test_pastes_are_recognised_and_prose_is_not():
    for text in (CTLD, SHOW_NODE, SINFO_R, NO_NVML, OOM):
        assert "slurm_log" in dict(detect(text)), text
    log = parse_slurm_log(SHOW_NODE)
    assert [(e.kind, e.node, e.have, e.want) for e in log.events] == [
        ("gres-count-low", "gpu-a07", 0, 8)]
    assert "slurm_log" not in dict(detect("Slurm counts GPUs as gres/gpu in slurm.conf.\n"))
