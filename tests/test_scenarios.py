"""Scenario snapshots: they build, load back, parse, agree, and differ where they should."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from gputriage import sources
from gputriage.scenarios import (
    build_scenario,
    get_scenario,
    list_scenarios,
    render_outcomes,
    write_host,
)
from gputriage.scenarios.model import healthy_hgx_h100
from gputriage.snapshot.bundle import Snapshot

NAMES = [s.name for s in list_scenarios()]
GPU_BUSES = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
             "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]


def payloads(name: str) -> dict[str, str]:
    return {k: v.decode() for k, v in get_scenario(name).build().items()}


def tree_files(text: str) -> dict[str, str]:
    return json.loads(text)["files"]


def test_catalog_has_the_four_scenarios_with_expectations() -> None:
    assert NAMES[:4] == ["healthy-8xh100", "driver-mismatch", "gpu-fallen-off-bus",
                         "uvm-not-loaded"]
    assert get_scenario("healthy-8xh100").expected == ()
    assert get_scenario("driver-mismatch").expected == ("driver.version-mismatch",)
    assert get_scenario("gpu-fallen-off-bus").expected == ("gpu.missing",
                                                           "nvidia-smi.gpu-lost", "xid.79")
    assert get_scenario("uvm-not-loaded").expected == ("module.nvidia-uvm-missing",)
    for s in list_scenarios():
        assert s.title and "\n" not in s.title
        assert s.description.count(". ") >= 1


def test_unknown_scenario_lists_known_names() -> None:
    with pytest.raises(KeyError) as exc:
        get_scenario("no-such-thing")
    assert "healthy-8xh100" in str(exc.value) and "uvm-not-loaded" in str(exc.value)


def test_builds_are_reproducible() -> None:
    for name in NAMES:
        assert get_scenario(name).build() == get_scenario(name).build()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("suffix", ["", ".tar.gz"])
def test_builds_and_loads_back(name: str, suffix: str, tmp_path) -> None:
    out = build_scenario(name, tmp_path / f"snap{suffix}", created="2024-05-14T09:30:00+00:00")
    snap = Snapshot.load(out)
    assert snap.problems == []
    assert snap.manifest["scenario"] == name
    assert snap.manifest["host"] == "gpu-node-017"
    assert snap.manifest["created"] == "2024-05-14T09:30:00+00:00"
    assert snap.manifest["complete"] is True
    built = get_scenario(name).build()
    assert set(snap.manifest["sources"]) >= set(built)
    for src, rec in snap.manifest["sources"].items():
        spec = sources.get(src)
        cap = snap.get(src)
        if rec.get("error") == "absent":  # a file the host lacks (gpus-gone: no driver)
            assert cap is None and src not in built, src
            continue
        assert cap is not None, src  # every other source of these hosts has a file
        assert cap.text == built[src].decode()
        assert rec["bytes"] == len(built[src])
        assert rec["kind"] == spec.kind
        if spec.kind in ("tree", "devnodes", "nvml"):
            cap.json()  # parses
        if spec.suffix == ".xml" and rec["rc"] == 0:
            ET.fromstring(cap.text.split("\n", 2)[2])  # after the <?xml and DOCTYPE lines
        if spec.kind == "command":
            assert isinstance(rec["rc"], int)


def test_absent_source_is_recorded_without_file(tmp_path) -> None:
    host = healthy_hgx_h100()
    host.absent.add("ibstat")
    snap = Snapshot.load(write_host(host, tmp_path / "s"))
    rec = snap.record("ibstat")
    assert rec["error"] == "absent" and rec["file"] is None
    assert snap.get("ibstat") is None
    assert not (tmp_path / "s" / "sources" / "ibstat.txt").exists()


def test_every_declared_collected_source_is_rendered() -> None:
    outcomes = render_outcomes(get_scenario("healthy-8xh100"))
    wanted = {s.name for s in sources.SOURCES if s.collect}
    assert wanted <= set(outcomes)


# -- the healthy host agrees with itself ----------------------------------------

def test_healthy_views_agree_on_eight_gpus() -> None:
    p = payloads("healthy-8xh100")
    nvml = json.loads(p["nvml"])
    assert nvml["available"] is True and nvml["device_count"] == 8
    assert [d["pci_bus_id"] for d in nvml["devices"]] == ["0000" + b.upper() for b in GPU_BUSES]
    uuids = [d["uuid"] for d in nvml["devices"]]
    assert len(set(uuids)) == 8 and all(re.fullmatch(r"GPU-[0-9a-f-]{36}", u) for u in uuids)

    proc = tree_files(p["proc_driver_nvidia_gpus"])
    assert sorted(k.split("/")[0] for k in proc) == GPU_BUSES
    for bus, info in ((k.split("/")[0], v) for k, v in proc.items()):
        assert f"Bus Location: \t {bus}" in info
    assert {re.search(r"GPU UUID: \t (\S+)", v).group(1) for v in proc.values()} == set(uuids)

    pci = json.loads(p["pci_devices"])
    gpus = sorted(k.split("/")[0] for k, v in pci["files"].items()
                  if k.endswith("/class") and v == "0x030200\n")
    assert gpus == GPU_BUSES
    assert sum(v == "0x068000\n" for k, v in pci["files"].items() if k.endswith("/class")) == 4
    assert sum(v == "0x020700\n" for k, v in pci["files"].items() if k.endswith("/class")) == 8
    assert pci["links"]["0000:18:00.0/driver"].endswith("/drivers/nvidia")
    assert pci["files"]["0000:18:00.0/current_link_speed"] == "32.0 GT/s PCIe\n"
    assert pci["files"]["0000:9a:00.0/numa_node"] == "1\n"

    root = ET.fromstring(p["nvidia_smi_q_xml"].split("\n", 2)[2])
    assert root.findtext("attached_gpus") == "8"
    assert [g.get("id") for g in root.findall("gpu")] == ["0000" + b.upper() for b in GPU_BUSES]
    assert [g.findtext("uuid") for g in root.findall("gpu")] == uuids
    assert {g.findtext("fabric/state") for g in root.findall("gpu")} == {"Completed"}
    assert root.findtext("driver_version") == "550.54.15"

    table = p["nvidia_smi"]
    assert "Driver Version: 550.54.15" in table and "CUDA Version: 12.4" in table
    assert len(re.findall(r"NVIDIA H100 80GB HBM3\s+On", table)) == 8
    assert len(json.loads(p["dev_nvidia"])) == 8 + 1 + 4 + 1 + 2 + 1
    assert p["nvidia_smi_topo"].count("NV18") == 8 * 7
    assert p["nvidia_smi_nvlink_status"].count("26.562 GB/s") == 8 * 18


def test_healthy_versions_and_modules_agree() -> None:
    p = payloads("healthy-8xh100")
    assert "Open Kernel Module for x86_64  550.54.15  " in p["proc_driver_nvidia_version"]
    assert set(tree_files(p["sys_module_nvidia"]).values()) >= {"550.54.15\n", "live\n"}
    libs = json.loads(p["nvidia_libs"])
    assert "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15" in libs["files"]
    assert libs["links"]["usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"] == \
        "libnvidia-ml.so.550.54.15"
    mods = [line.split()[0] for line in p["proc_modules"].splitlines()]
    for m in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem",
              "mlx5_ib", "mlx5_core", "ib_core", "ext4"):
        assert m in mods
    uvm_major = int(re.search(r"^\s*(\d+) nvidia-uvm$", p["proc_devices"], re.M).group(1))
    nodes = {n["path"]: n for n in json.loads(p["dev_nvidia"])}
    assert nodes["/dev/nvidia-uvm"]["major"] == uvm_major
    assert (nodes["/dev/nvidiactl"]["major"], nodes["/dev/nvidiactl"]["minor"]) == (195, 255)
    assert nodes["/dev/nvidia7"]["minor"] == 7
    assert "nvidia: loading out-of-tree module taints kernel." in p["kernel_log"]
    assert "NVRM: Xid" not in p["kernel_log"] and "API mismatch" not in p["kernel_log"]
    assert "ActiveState=active" in p["systemctl_fabricmanager"]
    assert "ActiveState=active" in p["systemctl_persistenced"]
    ib = tree_files(p["infiniband"])
    assert [ib[f"mlx5_{i}/ports/1/state"] for i in range(8)] == ["4: ACTIVE\n"] * 8
    assert ib["mlx5_0/ports/1/rate"] == "400 Gb/sec (4X NDR)\n"
    assert p["ibstat"].count("State: Active") == 8
    assert p["hostname"] == "gpu-node-017\n"
    assert "5.15.0-105-generic" in p["uname"]


# -- faulty scenarios differ exactly where they should ---------------------------

def test_driver_mismatch() -> None:
    healthy, p = payloads("healthy-8xh100"), payloads("driver-mismatch")
    outcomes = render_outcomes(get_scenario("driver-mismatch"))
    assert "  535.161.07  " in p["proc_driver_nvidia_version"]
    assert "nvidia/version" in tree_files(p["sys_module_nvidia"])
    assert set(v for k, v in tree_files(p["sys_module_nvidia"]).items()
               if k.endswith("/version")) == {"535.161.07\n"}
    assert p["nvidia_libs"] == healthy["nvidia_libs"]  # userspace is 550
    assert "libnvidia-ml.so.550.54.15" in p["nvidia_libs"]
    for name in ("nvidia_smi", "nvidia_smi_q_xml"):
        assert outcomes[name].rc == 18
        assert p[name] == ("Failed to initialize NVML: Driver/library version mismatch\n"
                           "NVML library version: 550.54\n")
    nvml = json.loads(p["nvml"])
    assert nvml["available"] is False and nvml["error_code"] == 18
    assert nvml["error"] == "RM has detected an NVML/RM version mismatch."
    assert nvml["library_version"] is None
    log = p["kernel_log"]
    assert log.count("NVRM: API mismatch: the client has the version 550.54.15, but") >= 3
    assert "NVRM: this kernel module has the version 535.161.07.  Please" in log
    assert "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  535.161.07" in log
    # nothing else about the host changed
    for same in ("pci_devices", "proc_modules", "proc_devices", "dev_nvidia", "infiniband",
                 "systemctl_fabricmanager", "systemctl_persistenced", "os_release"):
        assert p[same] == healthy[same], same


def test_gpu_fallen_off_bus() -> None:
    healthy, p = payloads("healthy-8xh100"), payloads("gpu-fallen-off-bus")
    outcomes = render_outcomes(get_scenario("gpu-fallen-off-bus"))
    assert p["pci_devices"] == healthy["pci_devices"]  # still 8 functions on PCI
    buses = sorted(k.split("/")[0] for k in tree_files(p["proc_driver_nvidia_gpus"]))
    assert buses == [b for b in GPU_BUSES if b != "0000:9a:00.0"]
    nvml = json.loads(p["nvml"])
    assert nvml["available"] is True
    lost = [d for d in nvml["devices"] if d["error"]]
    assert [(d["index"], d["error"]) for d in lost] == [(4, "GPU is lost")]
    for name in ("nvidia_smi", "nvidia_smi_q_xml"):
        assert outcomes[name].rc == 255
        assert p[name] == ("Unable to determine the device handle for GPU0000:9A:00.0: "
                           "Unknown Error\n")
    log = p["kernel_log"]
    assert re.search(r"NVRM: Xid \(PCI:0000:9a:00\): 79, pid=.*GPU has fallen off the bus\.",
                     log)
    assert "NVRM: GPU 0000:9a:00.0: GPU has fallen off the bus." in log
    assert p["proc_modules"] == healthy["proc_modules"]


def test_uvm_not_loaded() -> None:
    healthy, p = payloads("healthy-8xh100"), payloads("uvm-not-loaded")
    mods = [line.split()[0] for line in p["proc_modules"].splitlines()]
    assert "nvidia_uvm" not in mods and "nvidia" in mods
    assert "nvidia_uvm" not in p["proc_modules"]
    assert not any(k.startswith("nvidia_uvm/") for k in tree_files(p["sys_module_nvidia"]))
    assert "nvidia-uvm" not in p["proc_devices"]
    assert not any("uvm" in n["path"] for n in json.loads(p["dev_nvidia"]))
    assert "nvidia-uvm" not in p["kernel_log"]
    # the GPUs themselves are fine
    for same in ("nvidia_smi", "nvidia_smi_q_xml", "nvml", "pci_devices",
                 "proc_driver_nvidia_version", "nvidia_libs"):
        assert p[same] == healthy[same], same
