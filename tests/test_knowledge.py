"""The GPU model profiles: table shape, lookups, and the limits the rules use."""

from __future__ import annotations

import csv
from importlib import resources

import pytest

from gputriage import knowledge
from gputriage.knowledge import GpuProfile, gpu_profile, gpu_profiles, is_datacenter

COLUMNS = ["model", "pci_device_ids", "name_pattern", "form", "datacenter", "memory_gb",
           "nvlink_gen", "nvlink_links", "pcie_gen", "baseboard_gpus", "tdp_w",
           "mem_bandwidth_tbs", "temp_shutdown_c", "temp_slowdown_c", "temp_max_operating_c",
           "temp_memory_max_c"]


def _table_rows() -> list[list[str]]:
    text = resources.files(knowledge).joinpath("gpu_models.csv").read_text(encoding="utf-8")
    return list(csv.reader(ln for ln in text.splitlines() if ln and not ln.startswith("#")))


def test_table_columns_and_row_widths():
    header, *rows = _table_rows()
    assert header == COLUMNS
    assert rows and all(len(r) == len(COLUMNS) for r in rows)
    assert len(rows) == len(gpu_profiles())


def test_models_and_device_ids_are_unique():
    profiles = gpu_profiles()
    assert len({p.model for p in profiles}) == len(profiles)
    seen: set[int] = set()
    for p in profiles:
        assert not (p.pci_device_ids & seen), p.model
        seen |= p.pci_device_ids


@pytest.mark.parametrize("profile", gpu_profiles(), ids=lambda p: p.model)
def test_profile_values_are_sane(profile: GpuProfile):
    assert profile.form in {"sxm", "pcie", "superchip"}
    assert profile.tdp_w is None or 50 <= profile.tdp_w <= 2000
    assert profile.mem_bandwidth_tbs is None or 0.1 <= profile.mem_bandwidth_tbs <= 20
    temps = [profile.temp_max_operating_c, profile.temp_slowdown_c, profile.temp_shutdown_c]
    known = [t for t in temps if t is not None]
    assert known == sorted(known), "max operating <= slowdown <= shutdown"
    assert all(60 <= t <= 110 for t in known)
    assert profile.temperature_limits_known == (profile.temp_slowdown_c is not None)
    if profile.nvlink_links == 0:
        assert profile.form == "pcie"


@pytest.mark.parametrize(("name", "device_id", "model"), [
    ("NVIDIA H100 80GB HBM3", None, "H100 SXM5"),
    (None, 0x2330, "H100 SXM5"),
    ("NVIDIA A100-SXM4-80GB", None, "A100 SXM4"),
    ("NVIDIA A10G", None, "A10"),
    ("NVIDIA L40S", None, "L40S"),
    ("NVIDIA L40", None, "L40"),
    ("NVIDIA H200", None, "H200 SXM"),
    ("NVIDIA H200 NVL", None, "H200 NVL"),
    ("Tesla P100-PCIE-16GB", None, "P100"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", None, "RTX PRO 6000 Blackwell"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", None,
     "RTX PRO 6000 Blackwell Workstation"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", None,
     "RTX PRO 6000 Blackwell Workstation"),
    ("NVIDIA GeForce RTX 4090", None, None),
    (None, None, None),
])
def test_lookup(name, device_id, model):
    profile = gpu_profile(name, device_id)
    assert (profile.model if profile else None) == model


def test_device_id_wins_over_the_name():
    assert gpu_profile("NVIDIA A10G", 0x2330).model == "H100 SXM5"


def test_reference_temperature_limits():
    a100 = gpu_profile("NVIDIA A100-SXM4-80GB")
    assert (a100.temp_shutdown_c, a100.temp_slowdown_c, a100.temp_max_operating_c,
            a100.temp_memory_max_c) == (92, 89, 85, 95)
    h100 = gpu_profile("NVIDIA H100 80GB HBM3")
    assert (h100.temp_slowdown_c, h100.temp_max_operating_c, h100.tdp_w,
            h100.mem_bandwidth_tbs) == (89, 87, 700, 3.35)
    assert not gpu_profile("NVIDIA L40S").temperature_limits_known
    assert gpu_profile("NVIDIA L40S").tdp_w == 350


def test_is_datacenter():
    assert is_datacenter("NVIDIA H100 80GB HBM3")
    assert is_datacenter("Tesla T4")
    assert is_datacenter("NVIDIA A800 80GB PCIe")  # no profile: by name
    assert not is_datacenter("NVIDIA GeForce RTX 3090")
    assert not is_datacenter(None)


def test_gh200_is_not_taken_for_an_h200():
    from gputriage.knowledge import gpu_profile

    assert gpu_profile("NVIDIA GH200 480GB").model == "GH200"
    assert gpu_profile("NVIDIA H200").model == "H200 SXM"
