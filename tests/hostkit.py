"""Build small in-memory snapshots for rule tests, and the host sources the rule tests
share: PCI and NVML documents, a healthy 8-GPU host, hugepage pools, InfiniBand trees."""

from __future__ import annotations

import json
from typing import Any

from gputriage.engine.analysis import analyze
from gputriage.model import Result
from gputriage.snapshot.bundle import Captured, Snapshot


def snap(live: bool = True, failed: dict[str, str] | None = None, **sources: Any) -> Snapshot:
    """A snapshot of the given sources (str text, or dict/list stored as JSON).

    ``live`` gives it a manifest (as a collected snapshot has) so that absent
    files mean "absent on the host". ``failed`` maps a source to an error kind.
    """
    caps = {}
    for name, value in sources.items():
        text = value if isinstance(value, str) else json.dumps(value)
        caps[name] = Captured(name, text, {"error": None}, f"test:{name}")
    for name, kind in (failed or {}).items():
        caps[name] = Captured(name, None, {"error": kind, "error_detail": "test"},
                              f"test:{name}")
    manifest = {"schema": "gputriage/snapshot/v1", "host": "testhost", "sources": {}} if live \
        else None
    return Snapshot(caps, manifest, "test")


def ids(result: Result) -> set[str]:
    return {f.id for f in result.findings}


def run(context: Any = None, **sources: Any) -> Result:
    """Analyse the snapshot of ``sources`` (under a ``CheckContext`` when given)."""
    return analyze(snap(**sources), context=context)


def pci_tree(gpus: dict[str, str], nics: tuple[str, ...] = (), gpu_driver: str = "nvidia",
             device: str = "0x2330") -> dict:
    """A sysfs PCI tree: GPUs by address -> driver (or '' for unbound), NICs by address."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    for addr, drv in gpus.items():
        files.update({f"{addr}/vendor": "0x10de\n", f"{addr}/device": f"{device}\n",
                      f"{addr}/class": "0x030200\n", f"{addr}/numa_node": "0\n"})
        if drv:
            links[f"{addr}/driver"] = f"../../../../bus/pci/drivers/{drv}"
    for addr in nics:
        files.update({f"{addr}/vendor": "0x15b3\n", f"{addr}/device": "0x1021\n",
                      f"{addr}/class": "0x020700\n"})
        links[f"{addr}/driver"] = "../../../../bus/pci/drivers/mlx5_core"
    return {"files": files, "links": links, "errors": {}}


def nvml_doc(bus_ids: list[str], persistence: bool = True, name: str = "NVIDIA H100 80GB HBM3",
             version: str = "550.54.15") -> dict:
    return {"schema": "gputriage/nvml/v1", "available": True, "error": None,
            "library_version": f"12.{version}", "driver_version": version,
            "cuda_driver_version": 12040, "device_count": len(bus_ids),
            "devices": [{"index": i, "name": name, "uuid": f"GPU-{i:08x}-0000",
                         "pci_bus_id": b.upper().replace("0000:", "00000000:", 1),
                         "serial": str(1000 + i), "minor_number": i,
                         "persistence_mode": persistence, "error": None}
                        for i, b in enumerate(bus_ids)]}


MODULES_FULL = """nvidia_peermem 16384 0 - Live 0x0 (POE)
nvidia_uvm 1437696 4 - Live 0x0 (POE)
nvidia_drm 77824 0 - Live 0x0 (POE)
nvidia_modeset 1302528 1 nvidia_drm, Live 0x0 (POE)
nvidia 56463360 120 nvidia_peermem,nvidia_uvm,nvidia_modeset, Live 0x0 (POE)
mlx5_ib 462848 0 - Live 0x0
mlx5_core 2154496 1 mlx5_ib, Live 0x0
ib_core 446464 8 mlx5_ib,nvidia_peermem, Live 0x0
"""

VERSION_FILE = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  "
                "(dvs-builder@U16-I3-B03-4-3)  Thu Feb 22 01:25:25 UTC 2024\n"
                "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")


# -- a healthy 8-GPU host (tests/test_rules.py's base) ------------------------------------

BUSES = [f"0000:{b}:00.0" for b in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]
HEALTHY = {
    "pci_devices": pci_tree(dict.fromkeys(BUSES, "nvidia"), nics=("0000:19:00.0",)),
    "nvml": nvml_doc(BUSES),
    "proc_modules": MODULES_FULL,
    "proc_driver_nvidia_version": VERSION_FILE.format(v="550.54.15"),
    "sys_module_nvidia": {"files": {"nvidia/version": "550.54.15\n",
                                    "nvidia_uvm/version": "550.54.15\n"}, "links": {}},
    "nvidia_libs": {"files": {"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15": ""},
                    "links": {"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1":
                              "libnvidia-ml.so.550.54.15"}},
    "proc_devices": "Character devices:\n195 nvidia-frontend\n508 nvidia-uvm\n\nBlock devices:\n",
    "dev_nvidia": [{"path": "/dev/nvidiactl", "kind": "char", "major": 195, "minor": 255},
                   {"path": "/dev/nvidia-uvm", "kind": "char", "major": 508, "minor": 0}]
    + [{"path": f"/dev/nvidia{i}", "kind": "char", "major": 195, "minor": i} for i in range(8)],
}


# -- hugepages and InfiniBand sysfs trees -----------------------------------------------

def pools(**sizes: int) -> dict:
    """A ``hugepages`` tree: pools(kb2048=1024) -> hugepages-2048kB/nr_hugepages 1024."""
    files = {}
    for key, nr in sizes.items():
        kb = key.removeprefix("kb")
        files[f"hugepages-{kb}kB/nr_hugepages"] = f"{nr}\n"
        files[f"hugepages-{kb}kB/free_hugepages"] = f"{nr}\n"
    return {"files": files, "links": {}, "errors": {}}


ACTIVE = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
          "link_layer": "InfiniBand", "lid": "0x12", "sm_lid": "0x1"}
POLLING = {**ACTIVE, "state": "1: DOWN", "phys_state": "2: Polling", "rate": "10 Gb/sec (4X SDR)"}


def ib_tree(ports: dict[str, dict[str, str]], hca_type: str = "MT4129",
            pci: dict[str, str] | None = None, fw: str = "28.39.1002") -> dict:
    """An ``infiniband`` sysfs tree: ``{"mlx5_0/1": {attr: text}}`` -> tree document.

    ``pci`` maps an HCA to its PCI address, stored as the ``<hca>/device`` link."""
    files: dict[str, str] = {}
    for key, attrs in ports.items():
        dev, num = key.split("/")
        files[f"{dev}/fw_ver"] = fw + "\n"
        files[f"{dev}/hca_type"] = hca_type + "\n"
        for attr, value in attrs.items():
            files[f"{dev}/ports/{num}/{attr}"] = value + "\n"
    links = {f"{dev}/device": f"../../../{addr}" for dev, addr in (pci or {}).items()}
    return {"files": files, "links": links, "errors": {}}


def rails(n: int = 8, **changes: dict[str, str]) -> dict:
    """``n`` single-port NDR HCAs mlx5_0.., all active unless ``changes`` says otherwise."""
    ports = {f"mlx5_{i}/1": dict(ACTIVE) for i in range(n)}
    for dev, attrs in changes.items():
        ports[f"{dev}/1"] = attrs
    return ports
