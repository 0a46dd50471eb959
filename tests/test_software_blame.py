"""Software that is missing, mismatched or misconfigured is the node's configuration,
never a hardware repair: critical when the node cannot run GPU jobs, with an action that
fixes the software and a report saying that a drain only keeps jobs off the node.
Real captures (tests/fixtures/software, dcgm) and synthetic variants of the class."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.model import DRAINING_ACTIONS, Action, Blame, Severity
from gputriage.rules.base import SOFTWARE_DRAIN
from gputriage.status import ExitStatus, exit_status

FIXTURES = Path(__file__).parent / "fixtures"


def _judged(tmp_path: Path, text: str, name: str = "paste.txt"):
    path = tmp_path / name
    path.write_text(text)
    return analyze(load_input(str(path)))


def _one(result, fid: str):
    hits = [f for f in result.findings if f.id == fid and f.current]
    assert len(hits) == 1, [(f.id, f.severity.value) for f in result.findings]
    return hits[0]


def _software_critical(f) -> None:
    assert f.severity is Severity.CRITICAL
    assert f.blame is Blame.CONFIG
    assert f.action in (Action.FIX_SOFTWARE, Action.FIX_CONFIG)
    assert f.action not in DRAINING_ACTIONS
    assert SOFTWARE_DRAIN in f.explanation


@pytest.mark.parametrize(("fixture", "fid"), [
    ("software/fm-version-mismatch-530.txt", "fabric.manager-errors"),
    ("software/nvml-mismatch-unattended-upgrade.txt", "driver.version-mismatch"),
    ("software/cuda802-pytorch.txt", "cuda.fabric-not-ready"),
])
def test_real_software_faults_are_config_not_hardware(fixture: str, fid: str) -> None:
    result = analyze(load_input(str(FIXTURES / fixture)))
    _software_critical(_one(result, fid))
    assert exit_status(result) is ExitStatus.CRITICAL  # the node cannot run GPU jobs


@pytest.mark.parametrize(("fm", "driver"), [("535.54.03", "535.104.05"),
                                            ("570.86.15", "570.124.06")])
def test_fabric_manager_of_another_version(tmp_path: Path, fm: str, driver: str) -> None:
    text = (f"Mar 02 10:00:01 hgx-07 nv-fabricmanager[2211]: fabric manager NVIDIA GPU "
            f"driver interface version {fm} doesn't match with driver version {driver}. "
            "Please update with the matching NVIDIA driver package.\n")
    _software_critical(_one(_judged(tmp_path, text), "fabric.manager-errors"))


def test_mismatch_with_packages_of_two_releases_says_complete_the_upgrade(tmp_path) -> None:
    """Libraries of two releases: a partial upgrade; a reboot alone does not help."""
    text = ("$ cat /proc/driver/nvidia/version\n"
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 "
            "UTC 2024\n"
            "$ nvidia-smi\nFailed to initialize NVML: Driver/library version mismatch\n"
            "NVML library version: 550.127\n")
    f = _one(_judged(tmp_path, text), "driver.version-mismatch")
    _software_critical(f)
    assert "550.90.07" in f.title and "550.127" in f.title
    assert "modinfo -F version nvidia" in f.explanation  # packages agree? then reboot
    assert "a reboot alone does not help" in f.explanation


def test_mismatch_without_versions_says_what_to_compare(tmp_path) -> None:
    text = "$ nvidia-smi\nFailed to initialize NVML: Driver/library version mismatch\n"
    f = _one(_judged(tmp_path, text), "driver.version-mismatch")
    _software_critical(f)
    assert "dpkg -l" in f.explanation and "complete or roll back" in f.explanation


def test_gsp_firmware_not_found_is_the_software(tmp_path) -> None:
    """The firmware path a driver or vGPU manager container did not mount."""
    text = ("[  42.100000] nvidia 0000:41:00.0: Direct firmware load for "
            "nvidia/570.124.06/gsp_ga10x.bin failed with error -2\n")
    f = _one(_judged(tmp_path, text, "dmesg.txt"), "driver.gsp-firmware-missing")
    _software_critical(f)
    assert "firmware_class" in f.explanation


def test_dcgm_nvlink_down_on_a_gpu_without_nvlink_is_no_drain() -> None:
    """DCGM's PCIe test failing only on NVLink links of a GPU without NVLink
    (NVIDIA/DCGM#49): no drain; the diagnostic alone cannot tell, so a warning."""
    result = analyze(load_input(str(FIXTURES / "dcgm/diag-r2-pcie-nvlink-down-no-nvlink.txt")))
    f = _one(result, "dcgm.nvlink-down-without-nvlink")
    assert f.severity is Severity.WARNING and f.blame is Blame.UNKNOWN
    assert f.action not in DRAINING_ACTIONS
    assert f.step and "nvidia-smi nvlink -s" in f.step  # what tells: shown, not hidden
    assert not any(x.id == "dcgm.pcie-failed" for x in result.findings)
    assert exit_status(result) is ExitStatus.WARNING


def test_dcgm_nvlink_down_on_a_gpu_nvidia_smi_says_has_none_is_info() -> None:
    from gputriage.parsers.dcgmi_diag import parse_dcgmi_diag
    from gputriage.parsers.nvlink import NvlinkGpu, NvlinkLink, NvlinkStatus
    from gputriage.rules.dcgm_diag import diag_hardware

    diag = parse_dcgmi_diag((FIXTURES / "dcgm/diag-r2-pcie-nvlink-down-no-nvlink.txt")
                            .read_text())
    none = NvlinkStatus([NvlinkGpu(0, "NVIDIA A100 80GB PCIe", None, "GPU 0: NVIDIA A100",
                                   messages=["Device does not have or support Nvlink"])])
    f = next(x for x in diag_hardware(diag, None, none))
    assert (f.id, f.severity, f.blame) == ("dcgm.nvlink-down-without-nvlink",
                                           Severity.INFO, Blame.CONFIG)
    links = NvlinkStatus([NvlinkGpu(0, "NVIDIA A100-SXM4-80GB", None, "GPU 0: A100",
                                    links=[NvlinkLink(0, False, None, "Link 0: <inactive>")])])
    assert next(x for x in diag_hardware(diag, None, links)).id == "dcgm.pcie-failed"


def test_a_pcie_failure_with_other_words_stays_a_pcie_failure(tmp_path) -> None:
    diag = (FIXTURES / "dcgm/diag-r2-pcie-nvlink-down-no-nvlink.txt").read_text().replace(
        "GPU 0GPU 0's NvLink link 0 is currently down",
        "GPU 0 host-to-device bandwidth 2.1 GB/s below the minimum")
    found = {f.id for f in _judged(tmp_path, diag).findings}
    assert "dcgm.nvlink-down-without-nvlink" not in found
