"""NVLink, NVSwitch and fabric manager rules on small simulated hosts and real captures.

``RULE_CASES`` holds, for every fabric rule, at least one host that makes it
fire (collected by the conformance test).
"""

from __future__ import annotations

import pytest
from hostkit import nvml_doc, run
from smi_kit import nvlink_errors

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.model import Action, Blame, Severity

BUSES = [f"0000:{b}:00.0" for b in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]
SWITCHES = [f"0000:{b}:00.0" for b in ("05", "06", "07", "08")]
H100 = "NVIDIA H100 80GB HBM3"


def pci(gpus: list[str], device: str = "0x2330", switches: tuple[str, ...] = ()) -> dict:
    """A sysfs PCI tree with NVIDIA GPUs and NVSwitches (class 0x068000)."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    for addr in gpus:
        files.update({f"{addr}/vendor": "0x10de\n", f"{addr}/device": f"{device}\n",
                      f"{addr}/class": "0x030200\n"})
        links[f"{addr}/driver"] = "../../../../bus/pci/drivers/nvidia"
    for addr in switches:
        files.update({f"{addr}/vendor": "0x10de\n", f"{addr}/device": "0x22a3\n",
                      f"{addr}/class": "0x068000\n"})
    return {"files": files, "links": links, "errors": {}}


def unit(active: str = "active", sub: str = "running", result: str = "success",
         load: str = "loaded") -> str:
    return (f"Id=nvidia-fabricmanager.service\nNames=nvidia-fabricmanager.service\n"
            f"LoadState={load}\nActiveState={active}\nSubState={sub}\nResult={result}\n"
            f"UnitFileState=enabled\nExecMainStatus={0 if result == 'success' else 1}\n")


def nvlink_status(name: str = H100, gpus: int = 8, links: int = 18,
                  down: dict[int, list[int]] | None = None) -> str:
    out = []
    for i in range(gpus):
        out.append(f"GPU {i}: {name} (UUID: GPU-{i:08x}-0000)")
        for n in range(links):
            speed = "<inactive>" if n in (down or {}).get(i, []) else "26.562 GB/s"
            out.append(f"\t Link {n}: {speed}")
    return "\n".join(out) + "\n"


def smi_q(states: list[tuple[str, str]], name: str = H100) -> str:
    out = ["==============NVSMI LOG==============", "",
           "Driver Version                            : 550.54.15",
           "CUDA Version                              : 12.4", "",
           f"Attached GPUs                             : {len(states)}"]
    for i, (state, status) in enumerate(states):
        out += [f"GPU 00000000:{BUSES[i][5:7].upper()}:00.0",
                f"    Product Name                          : {name}",
                f"    GPU UUID                              : GPU-{i:08x}-0000",
                f"    Minor Number                          : {i}",
                "    Fabric",
                f"        State                             : {state}",
                f"        Status                            : {status}", ""]
    return "\n".join(out)


HGX = {"pci_devices": pci(BUSES, switches=tuple(SWITCHES)), "nvml": nvml_doc(BUSES)}
NOTHING_TO_DO = (
    "Sep 18 03:19:01 node nvidia-fabricmanager-start.sh[4753]: Detected Pre-NVL5 system\n"
    "Sep 18 03:19:01 node nv-fabricmanager[4756]: request to query NVSwitch device "
    "information from NVSwitch driver failed with error:WARNING Nothing to do "
    "[NV_WARN_NOTHING_TO_DO]\n"
    "Sep 18 03:19:01 node systemd[1]: nvidia-fabricmanager.service: Control process exited, "
    "code=exited, status=1/FAILURE\n")
FATAL_LOG = ("[Mar 14 2024 11:00:00] [ERROR] [tid 1240] detected NVSwitch fatal error 20034 "
             "on fid 0 on NVSwitch pci bus id 00000000:07:00.0 physical id 2 port 12\n")


RULE_CASES = {
    "nvlink.links": [
        ({**HGX, "nvidia_smi_nvlink_status": nvlink_status(down={3: [4, 5]})},
         "nvlink.links-down"),
    ],
    "nvlink.errors": [
        ({"nvidia_smi_nvlink_errors": nvlink_errors({(1, 0): {"CRC Errors": 500}})},
         "nvlink.errors"),
    ],
    "fabric.manager": [
        ({**HGX, "systemctl_fabricmanager": unit("failed", "failed", "exit-code")},
         "fabric.manager-inactive"),
        ({"fabricmanager_journal": NOTHING_TO_DO}, "fabric.manager-not-needed"),
    ],
    "fabric.state": [
        ({**HGX, "nvidia_smi_q": smi_q([("In Progress", "N/A")] * 8),
          "systemctl_fabricmanager": unit()}, "fabric.state-not-completed"),
    ],
    "fabric.manager-log": [
        ({"fabricmanager_journal": FATAL_LOG}, "fabric.manager-errors"),
    ],
}

def fabric(result, severity: Severity | None = None) -> list:
    """Findings of this area (optionally at or above a severity)."""
    found = [f for f in result.findings if f.id.split(".")[0] in ("nvlink", "fabric")]
    if severity is not None:
        found = [f for f in found if f.severity.rank >= severity.rank]
    return found


def one(result, fid: str):
    hits = [f for f in result.findings if f.id == fid]
    assert len(hits) == 1, [(f.id, f.title) for f in result.findings]
    return hits[0]


def test_healthy_hgx_is_quiet():
    result = run(**HGX, systemctl_fabricmanager=unit(),
                 nvidia_smi_nvlink_status=nvlink_status(),
                 nvidia_smi_nvlink_errors=nvlink_errors({}),
                 nvidia_smi_q=smi_q([("Completed", "Success")] * 8),
                 fabricmanager_journal="-- No entries --\n")
    assert not fabric(result), [(f.id, f.title) for f in fabric(result)]


# --- NVLink state ----------------------------------------------------------------------

def test_inactive_links_name_the_gpu_and_the_numbers():
    f = one(run(**HGX, nvidia_smi_nvlink_status=nvlink_status(down={3: [4, 5]})),
            "nvlink.links-down")
    assert f.severity is Severity.CRITICAL and f.action is Action.DRAIN_AND_REPAIR
    assert f.scope.gpu_index == 3 and f.scope.pci_bus_id == BUSES[3]
    assert "16 of 18" in f.title and "4, 5" in f.title
    assert "\t Link 4: <inactive>".strip() in f.evidence[0].lines


def test_all_links_inactive_is_critical_reset():
    text = ("GPU 6: NVIDIA A100-SXM4-80GB (UUID: GPU-6)\n"
            "NVML: Unable to retrieve NVLink information as all links are inactive\n")
    f = one(run(nvidia_smi_nvlink_status=text), "nvlink.links-down")
    assert f.severity is Severity.CRITICAL and f.action is Action.RESET_GPU
    assert "0 of 12" in f.title and f.blame is Blame.NODE


def test_pcie_cards_without_bridge_are_silent():
    for text in ("GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-1)\n",
                 nvlink_status("NVIDIA A100 80GB PCIe", gpus=2, links=12,
                               down={0: list(range(12)), 1: list(range(12))}),
                 "GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-2)\n"):
        assert not fabric(run(nvidia_smi_nvlink_status=text))


def test_pcie_bridge_partly_trained_is_a_warning():
    text = nvlink_status("NVIDIA A40", gpus=2, links=4, down={1: [2, 3]})
    f = one(run(nvidia_smi_nvlink_status=text), "nvlink.links-down")
    assert f.severity is Severity.WARNING and "bridge" in f.title


def test_unknown_model_gets_a_generic_check_and_says_so():
    text = nvlink_status("NVIDIA A800-SXM4-80GB", gpus=2, links=8, down={0: [7]})
    f = one(run(nvidia_smi_nvlink_status=text), "nvlink.links-down")
    assert f.severity is Severity.WARNING and "no profile" in f.explanation
    healthy = nvlink_status("NVIDIA A800-SXM4-80GB", gpus=2, links=8)
    assert not fabric(run(nvidia_smi_nvlink_status=healthy))


def test_lone_sxm_gpu_in_a_vm_is_a_config_warning_and_lone_superchip_is_silent():
    lone = nvlink_status(H100, gpus=1, down={0: list(range(18))})
    f = one(run(nvidia_smi_nvlink_status=lone, pci_devices=pci(BUSES[:1])),
            "nvlink.links-down")
    assert f.severity is Severity.WARNING and f.blame is Blame.CONFIG
    gb = nvlink_status("NVIDIA GB200", gpus=1, down={0: list(range(18))})
    assert not fabric(run(nvidia_smi_nvlink_status=gb))


def test_elided_gpu_is_not_counted_short():
    text = ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n"
            + "".join(f"\t Link {n}: 25 GB/s\n" for n in range(12))
            + "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-2)\n\t Link 0: 25 GB/s\n......\n")
    assert not fabric(run(nvidia_smi_nvlink_status=text))


# --- NVLink error counters -------------------------------------------------------------

def test_small_crc_counts_are_info_and_recovery_is_a_warning():
    small = one(run(nvidia_smi_nvlink_errors=nvlink_errors({(0, 1): {"CRC Errors": 5}})),
                "nvlink.errors")
    assert small.severity is Severity.INFO and small.action is Action.NONE
    rec = one(run(nvidia_smi_nvlink_errors=nvlink_errors({(1, 0): {"Recovery Errors": 1}})),
              "nvlink.errors")
    assert rec.severity is Severity.WARNING and rec.scope.gpu_index == 1
    assert rec.evidence[0].lines[-1].endswith("Recovery Errors: 1")


def test_saturated_counter_is_said():
    f = one(run(nvidia_smi_nvlink_errors=nvlink_errors({(0, 0): {"CRC Errors": 65535}})),
            "nvlink.errors")
    # a warning: the repair is planned (drain at the next window), not a drain now
    assert "saturated" in f.explanation and f.action is Action.PLAN_REPAIR


def test_zero_counters_are_silent():
    assert not fabric(run(nvidia_smi_nvlink_errors=nvlink_errors({})))


# --- the fabric manager service --------------------------------------------------------

def test_manager_inactive_on_nvswitch_host():
    f = one(run(**HGX, systemctl_fabricmanager=unit("inactive", "dead")),
            "fabric.manager-inactive")
    assert f.severity is Severity.CRITICAL and f.blame is Blame.CONFIG
    assert "802" in f.explanation and "4 NVSwitches on PCI" in f.title
    assert {e.source for e in f.evidence} == {"systemctl_fabricmanager", "pci_devices"}


def test_manager_not_installed_on_an_8_gpu_sxm_inventory():
    f = one(run(nvml=nvml_doc(BUSES), systemctl_fabricmanager=unit("inactive", "dead",
                                                                    load="not-found")),
            "fabric.manager-inactive")
    assert f.action is Action.FIX_SOFTWARE and "8-GPU baseboard" in f.title


def test_manager_active_is_quiet_and_four_gpu_board_demands_nothing():
    assert not fabric(run(**HGX, systemctl_fabricmanager=unit()))
    four = run(nvml=nvml_doc(BUSES[:4]), pci_devices=pci(BUSES[:4]),
               systemctl_fabricmanager=unit("inactive", "dead"))
    assert not fabric(four)


def test_manager_failing_on_a_pcie_host_is_not_needed():
    f = one(run(pci_devices=pci(BUSES[:2], device="0x20b1"),
                systemctl_fabricmanager=unit("failed", "failed", "exit-code")),
            "fabric.manager-not-needed")
    assert f.severity is Severity.INFO and f.action is Action.FIX_CONFIG
    assert f.blame is Blame.CONFIG


def test_nothing_to_do_although_switches_are_on_pci_is_critical():
    f = one(run(**HGX, fabricmanager_journal=NOTHING_TO_DO), "fabric.manager-inactive")
    assert "NV_WARN_NOTHING_TO_DO" in f.explanation
    assert not [x for x in fabric(run(**HGX, fabricmanager_journal=NOTHING_TO_DO))
                if x.id == "fabric.manager-not-needed"]


def test_restart_failure_from_the_journal_alone(corpus):
    text = corpus.sample("nvtrust128").text()
    f = one(run(fabricmanager_journal=text), "fabric.manager-inactive")
    assert "failed to (re)start" in f.title and f.severity is Severity.CRITICAL
    assert any("Job for nvidia-fabricmanager" in ln for e in f.evidence for ln in e.lines)


# --- per-GPU fabric state --------------------------------------------------------------

def test_state_in_progress_without_manager_says_start_it():
    result = run(**HGX, nvidia_smi_q=smi_q([("In Progress", "N/A")] * 2))
    f = next(x for x in result.findings if x.id == "fabric.state-not-completed")
    assert f.action is Action.FIX_CONFIG and f.scope.pci_bus_id == BUSES[0]
    assert f.evidence[0].lines == ("Fabric", "State                             : In Progress",
                                   "Status                            : N/A")
    assert [s.pci_bus_id for s in f.scopes] == BUSES[:2]  # one finding on both GPUs


def test_state_in_progress_with_manager_running_says_reset():
    result = run(**HGX, nvidia_smi_q=smi_q([("Completed", "Success"), ("In Progress", "N/A")]),
                 systemctl_fabricmanager=unit())
    f = one(result, "fabric.state-not-completed")
    assert f.action is Action.RESET_GPU and f.scope.gpu_index == 1


def test_state_completed_with_error_status():
    # registration ended in error: the fabric must be repaired, a GPU reset alone does not
    f = one(run(**HGX, nvidia_smi_q=smi_q([("Completed", "NV_ERR_GENERIC")]),
                systemctl_fabricmanager=unit()), "fabric.state-not-completed")
    assert "NV_ERR_GENERIC" in f.title and "registration failed" in f.title
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.DRAIN_AND_REPAIR,
                                               Blame.NODE)
    assert "journalctl -u nvidia-fabricmanager" in f.step and "Status: Success" in f.step


PARTITION = ("        CliqueId                          : {clique}\n"
             "        ClusterUUID                       : {uuid}\n")
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def _with_partition(text: str, clique: str, uuid: str) -> str:
    """``smi_q`` text with CliqueId / ClusterUUID lines after each Fabric Status."""
    lines = []
    for line in text.splitlines(keepends=True):
        lines.append(line if line.endswith("\n") else line + "\n")
        if line.strip().startswith("Status"):
            lines.append(PARTITION.format(clique=clique, uuid=uuid))
    return "".join(lines)


@pytest.mark.parametrize("status", ["Insufficient Resources", "NV_ERR_INSUFFICIENT_RESOURCES",
                                    "Unknown Error"])
def test_completed_with_error_and_no_partition_names_the_partition(status):
    # a multi-node NVLink tray the fabric placed in no partition (Azure/azhpc-images#506)
    text = _with_partition(smi_q([("Completed", status)], name="NVIDIA GB200"), "0", ZERO_UUID)
    f = one(run(nvidia_smi_q=text), "fabric.state-not-completed")
    assert "no NVLink partition (CliqueId 0)" in f.title and f.action is Action.DRAIN_AND_REPAIR
    assert any("CliqueId" in ln for ln in f.evidence[0].lines)


def test_completed_success_with_clique_0_is_a_single_board_not_a_fault():
    # an HGX board outside multi-node NVLink reports CliqueId 0 and a zero UUID: normal
    text = _with_partition(smi_q([("Completed", "Success")] * 2), "0", ZERO_UUID)
    assert not [f for f in run(**HGX, nvidia_smi_q=text).findings
                if f.id == "fabric.state-not-completed"]


def test_vm_with_sxm_gpu_and_no_switch_blames_the_config():
    lspci = "07:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n"
    result = run(lspci_nvidia=lspci, nvidia_smi_q=smi_q([("In Progress", "N/A")]),
                 fabricmanager_journal=NOTHING_TO_DO)
    f = one(result, "fabric.state-not-completed")
    assert f.blame is Blame.CONFIG and "no NVSwitch" in f.title
    assert not [x for x in result.findings if x.id.startswith("fabric.manager")]


# --- errors in the fabric manager's log ------------------------------------------------

def test_fatal_nvswitch_error_is_critical_repair():
    f = one(run(fabricmanager_journal=FATAL_LOG), "fabric.manager-errors")
    assert f.severity is Severity.CRITICAL and f.action is Action.DRAIN_AND_REPAIR
    assert "20034 on NVSwitch 0000:07:00.0 port 12" in f.title


def test_version_mismatch_is_fix_software():
    log = ("2024-03-14T10:00:01+0000 n nv-fabricmanager[2]: fabric manager version 550.54 "
           "does not match the driver version 550.90\n")
    f = one(run(fabricmanager_journal=log), "fabric.manager-errors")
    assert f.action is Action.FIX_SOFTWARE


# --- real captures ---------------------------------------------------------------------

EXPECTED = {
    "azurehpc-nvlink-status": ("nvlink.links-down", Severity.CRITICAL),
    "cubestudio29": ("fabric.manager-not-needed", Severity.INFO),
    "gpuop610": ("fabric.manager-not-needed", Severity.INFO),
    "lambda-h100-sxm": ("fabric.state-not-completed", Severity.CRITICAL),
    "nvtrust128": ("fabric.manager-inactive", Severity.CRITICAL),
    "gpud-fabricmanager-log": ("fabric.manager-errors", Severity.WARNING),
}
HEALTHY = ("gpud-nvidia-smi-nvlink-status", "nccltests228-nvlink-status",
           "xe9780-b300-systemctl-status", "aws-p5-h100-fabric-state-completed",
           "thamada-8x-h100-sxm-nvidia-smi-a", "thamada-1x-h200-passthrough")


@pytest.mark.parametrize("part", sorted(EXPECTED))
def test_corpus_sample_gets_its_fabric_diagnosis(corpus, part):
    fid, severity = EXPECTED[part]
    result = analyze(load_input(str(corpus.sample(part).path)))
    hits = [f for f in fabric(result) if f.id == fid]
    assert hits, [(f.id, f.title) for f in result.findings]
    assert hits[0].severity is severity
    assert max(f.severity.rank for f in fabric(result)) == severity.rank


def test_lambda_vm_is_a_config_problem_not_a_missing_service(corpus):
    result = analyze(load_input(str(corpus.sample("lambda-h100-sxm").path)))
    f = one(result, "fabric.state-not-completed")
    assert f.blame is Blame.CONFIG and "PCIe SKU" in f.explanation
    assert not [x for x in result.findings if x.id.startswith("fabric.manager")]


@pytest.mark.parametrize("part", HEALTHY)
def test_healthy_corpus_sample_has_no_fabric_alarm(corpus, part):
    result = analyze(load_input(str(corpus.sample(part).path)))
    assert not fabric(result), [(f.id, f.title) for f in fabric(result)]


def test_version_mismatch_that_stopped_the_service_is_one_finding():
    log = ("2024-03-14T10:00:01+0000 n nv-fabricmanager[2]: fabric manager NVIDIA GPU driver "
           "interface version 550.90.07 don't match with driver version 550.54.15\n")
    result = run(**HGX, systemctl_fabricmanager=unit("failed", "failed", "exit-code"),
                 fabricmanager_journal=log)
    f = one(result, "fabric.manager-inactive")
    assert "does not match the driver" in f.title and f.action is Action.FIX_SOFTWARE
    assert any("don't match" in ln for e in f.evidence for ln in e.lines)
    assert "fabric.manager-errors" not in {x.id for x in result.findings}


def test_completed_with_error_read_from_the_xml_too():
    xml = ('<?xml version="1.0" ?>\n<nvidia_smi_log>\n<driver_version>570.124.06'
           '</driver_version>\n<attached_gpus>1</attached_gpus>\n<gpu id="00000008:01:00.0">\n'
           '<product_name>NVIDIA GB200</product_name>\n<fabric>\n<state>Completed</state>\n'
           '<status>Insufficient Resources</status>\n<cliqueId>0</cliqueId>\n'
           f'<clusterUuid>{ZERO_UUID}</clusterUuid>\n</fabric>\n</gpu>\n</nvidia_smi_log>\n')
    f = one(run(nvidia_smi_q_xml=xml), "fabric.state-not-completed")
    assert "CliqueId 0" in f.title and f.action is Action.DRAIN_AND_REPAIR
    assert "<cliqueId>0</cliqueId>" in f.evidence[0].lines


def test_nothing_to_do_logged_as_an_error_is_one_finding_not_a_logged_error_too():
    """NV_WARN_NOTHING_TO_DO in an [ERROR] record is fabric.manager's (no NVSwitch to
    manage), not also a fabric.manager-errors warning to watch."""
    from gputriage.engine.analysis import analyze
    from gputriage.ingest import load_text

    result = analyze(load_text(
        "[Jun 03 2024 10:00:00] [ERROR] [tid 2345] request to query NVSwitch device "
        "information from NVSwitch driver failed with error:WARNING Nothing to do\n", "paste"))
    assert [f.id for f in result.findings if f.current] == ["fabric.manager-not-needed"]
