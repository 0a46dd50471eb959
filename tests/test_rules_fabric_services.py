"""The fabric manager's prerequisites and multicast state, and the IMEX daemon, read from
their logs in the framings people paste (journal, elided hosts, talosctl's node prefix,
a pod's log) and judged."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

import pytest
from hostkit import run

from gputriage.ingest.detect import detect
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.fabricmanager import parse_fabricmanager_log
from gputriage.parsers.imex import parse_imex_log

SOURCE_SAMPLES = {"imex_log": ("corpus:dradriver289-imex-daemon",),
                  "fabricmanager_journal": ("corpus:canvos700-hgx-b200-fm-precheck",
                                            "corpus:siderodocs581-talos-nvlsm")}

PRECHECK_JOURNAL = """\
Mar 02 09:12:44 gb200-n17 nvidia-fabricmanager-start.sh[2231]: Detected NVL5+ system
Mar 02 09:12:44 gb200-n17 nvidia-fabricmanager-start.sh[2231]: Kernel module "ib_umad" has not been loaded, fabric manager cannot be started
Mar 02 09:12:44 gb200-n17 systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE
"""
# the host and program elided by whoever pasted it
PRECHECK_ELIDED = """\
Jul 20 16:15:36 edge-...:  Polling for at least one Infiniband device before starting Fabric Manager...
Jul 20 16:15:36 edge-...:  Checking mlx5_10...
Jul 20 16:15:36 edge-...:  Detected NVL5+ system
Jul 20 16:15:36 edge-...:  Kernel module "ib_umad" has not been loaded, fabric manager cannot be started
"""
NVLSM_TALOS = ("172.20.0.5: nvlsm: ibwarn: [15] umad_init: can't read ABI version from "
               "/sys/class/infiniband_mad/abi_version (No such file or directory): is ib_umad "
               "module loaded?\n")
MULTICAST_LOST = """\
[Jan 08 2025 10:02:11] [INFO] [tid 4411] Received an inband message:  Message header details: magic Id:adbc request Id:11 status:0 type:4 length:14
Message payload details:Team release request: Team Handle:ab12 Flags:0

[Jan 08 2025 10:02:11] [ERROR] [tid 4415] failed to release multicast team with handle 1234, cannot find the team
[Jan 08 2025 10:07:40] [ERROR] [tid 4415] failed to find the GPU handle 99881 in the multicast team
"""
MULTICAST_OK = """\
[Feb 25 2025 13:59:45] [INFO] [tid 1808] multicast group 0 is freed.
[Feb 25 2025 13:59:45] [INFO] [tid 1808] successfully released multicast team with handle 11081654703155798918.
"""
IMEX_POD_LOG = """\
/etc/nvidia-imex/nodes_config.cfg:
10.115.131.13
10.115.131.6
IMEX Log initializing at: 3/26/2025 16:41:27.217
[Mar 26 2025 16:41:27] [INFO] [tid 40] IMEX version 570.124.06 is running with the following configuration options
[Mar 26 2025 16:41:27] [INFO] [tid 40] Logging level = 4
[Mar 26 2025 16:41:27] [INFO] [tid 40] IMEX library communication bind port = 50000
[Mar 26 2025 16:41:27] [ERROR] [tid 40] No matching network interface found for any IP addresses in the node configuration file /etc/nvidia-imex/nodes_config.cfg.
"""
IMEX_JOURNAL = ("Apr 01 08:00:01 nvl72-c3 nvidia-imex[5120]: No matching network interface found "
                "for any IP addresses in the node configuration file "
                "/etc/nvidia-imex/nodes_config.cfg.\n")

RULE_CASES = {
    "fabric.manager-prerequisite": [
        ({"fabricmanager_journal": PRECHECK_JOURNAL}, "fabric.manager-prerequisite")],
    "fabric.multicast-state": [
        ({"fabricmanager_journal": MULTICAST_LOST}, "fabric.multicast-state")],
    "imex.daemon": [({"imex_log": IMEX_POD_LOG}, "imex.no-local-address"),
                    ({"imex_log": IMEX_POD_LOG.replace(
                        "No matching network interface found for any IP addresses in the node "
                        "configuration file", "failed to connect to peer")},
                     "imex.daemon-errors")],
}


def _found(text: str) -> dict:
    return {f.id: f for f in run(**dict(detect(text))).findings}


@pytest.mark.parametrize("text", [PRECHECK_JOURNAL, PRECHECK_ELIDED, NVLSM_TALOS,
                                  "nvlsm[900]: umad_init: can't read ABI version from "
                                  "/sys/class/infiniband_mad/abi_version\n"])
def test_ib_umad_missing_stops_the_fabric_manager_in_every_framing(text: str) -> None:
    assert [name for name, _ in detect(text)] == ["fabricmanager_journal"]
    log = parse_fabricmanager_log(dict(detect(text))["fabricmanager_journal"])
    assert log.having("umad-missing")
    found = _found(text)
    f = found["fabric.manager-prerequisite"]
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.FIX_CONFIG,
                                               Blame.CONFIG)
    assert "modprobe ib_umad" in f.step and "restart nvidia-fabricmanager" in f.step
    assert "fabric.manager-errors" not in found  # one cause, one finding


def test_the_elided_prefix_keeps_the_start_scripts_other_lines() -> None:
    text = dict(detect(PRECHECK_ELIDED))["fabricmanager_journal"]
    assert "Checking mlx5_10" in text and text.count("\n") == 4


def test_lost_multicast_teams_are_the_nodes_fabric_state() -> None:
    found = _found(MULTICAST_LOST)
    f = found["fabric.multicast-state"]
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.REBOOT_NODE, Blame.NODE)
    assert "2 failed" in f.title and "fabric.manager-errors" not in found


def test_successful_multicast_bookkeeping_is_quiet() -> None:
    assert not _found(MULTICAST_OK)


def test_imex_log_is_read_and_its_config_fault_judged() -> None:
    log = parse_imex_log(IMEX_POD_LOG)
    assert log.version == "570.124.06" and len(log.errors) == 1
    f = _found(IMEX_POD_LOG)["imex.no-local-address"]
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    assert "nodes_config.cfg" in f.step


def test_imex_lines_are_not_the_fabric_managers() -> None:
    assert [name for name, _ in detect(IMEX_POD_LOG)] == ["imex_log"]
    assert [name for name, _ in detect(IMEX_JOURNAL)] == ["imex_log"]
    assert "imex.no-local-address" in _found(IMEX_JOURNAL)


def test_a_fabric_manager_log_is_not_imex() -> None:
    assert [name for name, _ in detect(MULTICAST_LOST)] == ["fabricmanager_journal"]
    with pytest.raises(Exception, match="not an IMEX"):
        parse_imex_log(MULTICAST_LOST)


def test_the_cut_imex_sample_still_names_the_fault(corpus) -> None:
    found = _found(corpus.sample("dradriver289-imex-daemon").text())
    assert set(found) == {"imex.no-local-address"}
