"""Two pasted fragments that used to be unrecognised (exit 66): the fabric lines of
nvidia-smi -q pasted alone whatever their indentation, and libnvidia-container refusing
to mount the driver's GSP firmware into a container. Both are the configuration's or the
software's, never a hardware repair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from golden import run_analyze

FIXTURES = Path(__file__).parent / "fixtures"
DRAINS = {"drain-and-repair", "drain", "rma", "replace-gpu"}


def _analyse(tmp_path: Path, text: str) -> tuple[int, dict]:
    path = tmp_path / "paste.txt"
    path.write_text(text)
    code, out, err = run_analyze(path)
    assert code != 66 and not err, (code, err)
    return code, json.loads(out)


def _ids(doc: dict) -> dict[str, dict]:
    return {f["id"]: f for f in doc["findings"]}


def test_firmware_mount_refused_real_capture() -> None:
    """NVIDIA/libnvidia-container#147: enroot's hook fails on the firmware mount."""
    code, out, err = run_analyze(FIXTURES / "container" / "enroot-firmware-mount-not-permitted.txt")
    assert code == 1 and not err
    f = _ids(json.loads(out))["container.firmware-mount-denied"]
    assert (f["blame"], f["action"], f["severity"]) == ("config", "fix-software", "warning")


@pytest.mark.parametrize("line", [
    "nvidia-container-cli: mount error: mount operation failed: /var/lib/docker/overlay2/9f1/"
    "merged/lib/firmware/nvidia/535.104.05: permission denied: unknown.",
    "nvidia-container-cli.real: mount error: mount operation failed: /run/containerd/io."
    "containerd.runtime.v2.task/k8s.io/abc/rootfs/usr/lib/firmware/nvidia/550.54.15: "
    "operation not permitted",
])
def test_firmware_mount_refused_variants(tmp_path: Path, line: str) -> None:
    code, doc = _analyse(tmp_path, line + "\n")
    f = _ids(doc)["container.firmware-mount-denied"]
    assert f["blame"] == "config" and f["action"] not in DRAINS and code == 1


FLAT = "Fabric\nState : In Progress\nStatus : N/A\n"
TABS = "\tFabric\n\t\tState\t: In Progress\n\t\tStatus\t: N/A\n"
GREP = ("$ nvidia-smi -q | grep -A 2 Fabric\n" + "    Fabric\n        State"
        "                             : In Progress\n        Status"
        "                            : N/A\n--\n") * 2


@pytest.mark.parametrize("text", [FLAT, TABS, GREP], ids=["flat", "tabs", "grep"])
def test_fabric_in_progress_pasted_alone(tmp_path: Path, text: str) -> None:
    """The fabric registration not completed: the configuration's (the fabric manager),
    never a hardware repair, whatever the paste did to the indentation."""
    _, doc = _analyse(tmp_path, text)
    f = _ids(doc)["fabric.state-not-completed"]
    assert f["blame"] == "config" and f["action"] not in DRAINS


def test_fabric_completed_pasted_alone_is_quiet(tmp_path: Path) -> None:
    code, doc = _analyse(tmp_path, "Fabric\nState : Completed\nStatus : Success\n")
    assert code in (0, 3) and not [f for f in doc["findings"]
                                   if f["severity"] in ("warning", "critical")]
