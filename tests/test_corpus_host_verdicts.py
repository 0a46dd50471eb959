"""The verdicts MANIFEST gives the real captures of the host's software and fabric
services (corpus categories 6 and 8, rows added with issue 31): for each, the finding
that carries the diagnosis with its severity, blame and action, and the exit verdict;
the golden tables only name the ids."""

from __future__ import annotations

import pytest

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.model import Action, Blame, Severity
from gputriage.status import verdict

GENERIC = ("Fix the configuration of", "Update or reinstall the software at fault")
C, W, I = Severity.CRITICAL, Severity.WARNING, Severity.INFO  # noqa: E741
NODE, CONFIG, UNKNOWN = Blame.NODE, Blame.CONFIG, Blame.UNKNOWN

# sample part -> (finding id, severity, blame, action, verdict)
VERDICTS = {
    "nccl1043-h100-fabricmanager-log": ("fabric.multicast-state", C, NODE, Action.REBOOT_NODE,
                                        "critical"),
    "canvos700-hgx-b200-fm-precheck": ("fabric.manager-prerequisite", C, CONFIG,
                                       Action.FIX_CONFIG, "critical"),
    "siderodocs581-talos-nvlsm": ("fabric.manager-prerequisite", C, CONFIG, Action.FIX_CONFIG,
                                  "critical"),
    "imbue-h100-ibdev2netdev": ("ib.link-state-unshown", I, UNKNOWN, Action.NONE, "ok"),
    "sriovop382-pod-ib-vf": ("ib.port-not-active", W, CONFIG, Action.FIX_CONFIG, "warning"),
    "gdrcopy-readme-copybw": ("gdrcopy.bandwidth", I, UNKNOWN, Action.NONE, "ok"),
    "dradriver289-imex-daemon": ("imex.no-local-address", W, CONFIG, Action.FIX_CONFIG,
                                 "warning"),
    "gdrcopy305-a100-560": ("gdrcopy.pin-failed", W, NODE, Action.FIX_SOFTWARE, "warning"),
    "gdrcopy126-dgx1v-sanity": ("gdrcopy.open-failed", W, CONFIG, Action.FIX_CONFIG, "warning"),
    "gdrcopy234-clara-agx": ("gdrcopy.open-failed", W, CONFIG, Action.FIX_CONFIG, "warning"),
    "nvpeermem70-ubuntu2004-dkms": ("driver.module-build-failed", W, NODE, Action.FIX_SOFTWARE,
                                    "warning"),
    "dsxinfra5251-ibv-devinfo": ("ib.no-devices", W, CONFIG, Action.FIX_CONFIG, "warning"),
    "rccl1423-rdma-link-mlx5_7": ("ib.port-unstable", W, NODE, Action.PLAN_REPAIR, "warning"),
    "trinity219-ibstatus": ("ib.no-devices", W, NODE, Action.FIX_SOFTWARE, "warning"),
    # the running kernel is not said: the next boot into the zen kernels has no driver
    "zenkernel305-nvidia-dkms": ("driver.module-build-failed", W, NODE, Action.FIX_SOFTWARE,
                                 "warning"),
    "olares3963-runfile-install": ("driver.no-adapter-probed", C, CONFIG, Action.FIX_CONFIG,
                                   "critical"),
}


@pytest.mark.parametrize("part", sorted(VERDICTS))
def test_sample_is_judged_as_manifest_says(corpus, part):
    fid, severity, blame, action, expected = VERDICTS[part]
    result = analyze(load_input(str(corpus.sample(part).path)))
    [f] = [f for f in result.findings if f.id == fid]  # the cause, at the top
    assert (f.severity, f.blame, f.action) == (severity, blame, action)
    assert verdict(result) == expected
    top = [x.id for x in result.findings if x.severity.rank >= Severity.WARNING.rank]
    assert top in ([], [fid]), top  # one cause, one finding
    assert bool(f.step) == (action is not Action.NONE)
    if f.step:  # the step of its own id (issue 32), not the action's generic frame
        assert not f.step.startswith(GENERIC), f.step


def test_healthy_perfquery_is_ok(corpus):
    result = analyze(load_input(str(corpus.sample("treydock-perfquery").path)))
    assert verdict(result) == "ok" and not result.findings
