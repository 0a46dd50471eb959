"""Hardware-health scenarios (issue 4): they build, load back, render the fault
where it belongs and nowhere else, and the analysis finds what they expect."""

from __future__ import annotations

import json
import re

import pytest
from golden import flat

from gputriage.model import Severity
from gputriage.parsers.nvsmi_table import parse_nvsmi_table
from gputriage.parsers.nvsmi_xml import parse_nvsmi_xml
from gputriage.rules.base import REGISTRY
from gputriage.scenarios import build_scenario, get_scenario, render_outcomes
from gputriage.snapshot.bundle import Snapshot

EXPECTED = {
    "pcie-x8-gpu3": ("pcie.width-degraded", "kernel.pcie-bandwidth-limited"),
    "nic-far-socket": ("topology.nic-far",),
    "hugepages-not-reserved": ("hugepages.not-reserved",),
    "fabric-manager-down": ("fabric.manager-inactive", "fabric.state-not-completed"),
    "ib-port-polling": ("ib.port-not-active",),
    "remap-failure": ("memory.remap-failed", "xid.64"),
    "hw-slowdown": ("clocks.hw-power-brake",),
}
NAMES = list(EXPECTED)
# finding-id families of the issue-4 rules (hardware health and topology)
HW_FAMILIES = ("pcie.", "topology.", "hugepages.", "kernel.iommu", "host.", "nvlink.",
               "fabric.", "memory.", "clocks.", "thermal.", "power.", "ib.")


def payloads(name: str) -> dict[str, str]:
    return {k: v.decode() for k, v in get_scenario(name).build().items()}


HEALTHY = payloads("healthy-8xh100")


def changed(p: dict[str, str]) -> set[str]:
    """Sources whose bytes differ from the healthy host's."""
    return {k for k in set(p) | set(HEALTHY) if p.get(k) != HEALTHY.get(k)}


def tree_diff(name: str, p: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """Files of a tree source that differ from healthy: rel -> (healthy, scenario)."""
    a, b = json.loads(HEALTHY[name])["files"], json.loads(p[name])["files"]
    return {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}


def new_lines(name: str, p: dict[str, str]) -> list[str]:
    """Lines of a text source absent from the healthy host's."""
    old = set(HEALTHY[name].splitlines())
    return [ln for ln in p[name].splitlines() if ln not in old]


def gpu_blocks(xml: str) -> dict[str, str]:
    """Each ``<gpu id=...>`` element of nvidia-smi -q -x text, by its id."""
    return dict(re.findall(r'<gpu id="([^"]+)">(.*?)</gpu>', xml, re.S))


def changed_gpus(p: dict[str, str]) -> set[str]:
    a, b = gpu_blocks(HEALTHY["nvidia_smi_q_xml"]), gpu_blocks(p["nvidia_smi_q_xml"])
    assert set(a) == set(b)
    return {k for k in a if a[k] != b[k]}


def smi_gpu(p: dict[str, str], index: int):
    return parse_nvsmi_xml(p["nvidia_smi_q_xml"]).gpus[index]


def topo_cells(text: str) -> dict[tuple[str, str], str]:
    lines = text.splitlines()
    header = lines[0].split("\t")[1:]
    cells = {}
    for line in lines[1:]:
        if not line.strip() or line.startswith("Legend"):
            break
        row = line.split("\t")
        for col, value in zip(header, row[1:], strict=False):
            cells[(row[0], col)] = value.strip()
    return cells


# -- the catalog -------------------------------------------------------------------

def test_catalog_holds_the_hardware_scenarios() -> None:
    for name, expected in EXPECTED.items():
        s = get_scenario(name)
        assert s.expected == expected
        assert s.title and "\n" not in s.title
        assert 2 <= s.description.count(". ") + 1 <= 4, s.description


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("suffix", ["", ".tar.gz"])
def test_builds_and_loads_back(name: str, suffix: str, tmp_path) -> None:
    out = build_scenario(name, tmp_path / f"snap{suffix}", created="2024-05-14T09:30:00+00:00")
    snap = Snapshot.load(out)
    assert snap.problems == []
    assert snap.manifest["scenario"] == name and snap.manifest["complete"] is True
    built = get_scenario(name).build()
    assert set(snap.manifest["sources"]) >= set(built)
    for src, data in built.items():
        assert snap.get(src).text == data.decode(), src
    assert all(r.rc in (0, None) for r in render_outcomes(get_scenario(name)).values())


# -- the fault is rendered where it belongs, and nowhere else -------------------------

def test_pcie_x8_gpu3() -> None:
    p = payloads("pcie-x8-gpu3")
    assert changed(p) == {"pci_devices", "lspci_nvidia", "nvidia_smi_q_xml", "nvidia_smi",
                          "kernel_log"}
    # both ends of the link report it: the GPU and its switch downstream port above it
    assert tree_diff("pci_devices", p) == {"0000:5d:00.0/current_link_width": ("16\n", "8\n"),
                                           "0000:5a:01.0/current_link_width": ("16\n", "8\n")}
    assert json.loads(p["pci_devices"])["files"]["0000:5d:00.0/max_link_width"] == "16\n"
    assert "LnkSta:\tSpeed 32GT/s (ok), Width x8 (downgraded)" in p["lspci_nvidia"]
    assert p["lspci_nvidia"].count("(downgraded)") == 1
    assert changed_gpus(p) == {"00000000:5D:00.0"}
    g = smi_gpu(p, 3)
    assert (g.pcie_width_current, g.pcie_width_max, g.pcie_gen_current, g.pcie_gen_max) == \
        (8, 16, 5, 5)
    assert g.utilization_gpu_pct == 95 and g.performance_state == "P0"
    assert g.clock_event_reasons["gpu_idle"] is False
    assert [(x.pid, x.name) for x in g.processes] == [(52907, "python3")]
    table = parse_nvsmi_table(p["nvidia_smi"])
    assert table.gpus[3].utilization_gpu_pct == 95
    assert [(x.gpu_index, x.pid) for x in table.processes] == [(3, 52907)]
    assert [ln.split("kernel: ")[1] for ln in new_lines("kernel_log", p)] == [
        "pci 0000:5d:00.0: 252.056 Gb/s available PCIe bandwidth, limited by 32.0 GT/s PCIe "
        "x8 link at 0000:5d:00.0 (capable of 504.112 Gb/s with 32.0 GT/s PCIe x16 link)"]


def test_pcie_switch_uplink_gen3() -> None:
    """Only the uplink's two ends change (the GPU's own link stays Gen5 x16), and the
    kernel's boot note names the switch port that limits the GPU."""
    p = payloads("pcie-switch-uplink-gen3")
    assert changed(p) == {"pci_devices", "kernel_log", "nvidia_smi_q_xml", "nvidia_smi"}
    assert tree_diff("pci_devices", p) == {
        "0000:35:01.0/current_link_speed": ("32.0 GT/s PCIe\n", "8.0 GT/s PCIe\n"),
        "0000:36:00.0/current_link_speed": ("32.0 GT/s PCIe\n", "8.0 GT/s PCIe\n")}
    links = json.loads(p["pci_devices"])["links"]
    assert links["0000:3a:00.0"].endswith("/0000:35:01.0/0000:36:00.0/0000:37:01.0/0000:3a:00.0")
    (line,) = new_lines("kernel_log", p)
    assert "limited by 8.0 GT/s PCIe x16 link at 0000:36:00.0" in line
    assert "-[0000:35]---01.0-[36-3a]----00.0-[37-3a]--+-00.0-[39]" in p["lspci_tree"]


def test_nic_far_socket() -> None:
    p = payloads("nic-far-socket")
    assert changed(p) == {"pci_devices", "lspci_mellanox", "nvidia_smi_topo", "kernel_log",
                          "dmidecode_slots", "lspci_tree"}
    assert "Bus Address: 0000:ca:00.0" in p["dmidecode_slots"]  # the HCA moved slot
    assert "-[0000:c9]---01.0-[ca]----00.0  Mellanox" in p["lspci_tree"]  # its own root port
    files = json.loads(p["pci_devices"])["files"]
    assert files["0000:ca:00.0/numa_node"] == "1\n" and "0000:17:00.0/vendor" not in files
    assert files["0000:18:00.0/numa_node"] == "0\n"
    assert "0000:ca:00.0 Infiniband controller" in p["lspci_mellanox"]
    cells = topo_cells(p["nvidia_smi_topo"])
    assert cells[("GPU0", "NIC0")] == "SYS"
    assert [cells[("GPU0", f"NIC{i}")] for i in (1, 2, 3)] == ["NODE"] * 3
    assert [cells[("GPU4", "NIC0")], cells[("GPU1", "NIC1")]] == ["NODE", "PIX"]
    healthy = topo_cells(HEALTHY["nvidia_smi_topo"])
    assert healthy[("GPU0", "NIC0")] == "PIX"
    assert {k for k in cells if cells[k] != healthy[k]} == {
        (a, b) for a, b in cells if "NIC0" in (a, b) and a != b}
    assert "NIC0: mlx5_0" in p["nvidia_smi_topo"]
    assert all("0000:17:00.0" not in ln for ln in p["kernel_log"].splitlines())


def test_hugepages_not_reserved() -> None:
    p = payloads("hugepages-not-reserved")
    assert changed(p) == {"proc_cmdline", "proc_meminfo", "hugepages", "hugepages_per_node",
                          "kernel_log"}
    assert p["proc_cmdline"].split()[-3:] == ["default_hugepagesz=2M", "hugepagesz=2M",
                                              "hugepages=32768"]
    assert re.search(r"^HugePages_Total:\s+9216$", p["proc_meminfo"], re.M)
    assert re.search(r"^Hugepagesize:\s+2048 kB$", p["proc_meminfo"], re.M)
    assert tree_diff("hugepages", p) == {"hugepages-2048kB/nr_hugepages": ("0\n", "9216\n"),
                                         "hugepages-2048kB/free_hugepages": ("0\n", "9216\n")}
    per_node = tree_diff("hugepages_per_node", p)
    assert {k: v[1] for k, v in per_node.items()} == {
        f"node{n}/hugepages/hugepages-2048kB/{a}": "4608\n"
        for n in (0, 1) for a in ("nr_hugepages", "free_hugepages")}
    added = [ln.split("kernel: ")[1] for ln in new_lines("kernel_log", p)]
    assert "HugeTLB: allocating 32768 of page size 2.00 MiB failed.  Only allocated 9216 " \
           "hugepages." in added
    assert any(a.startswith("Command line: ") and a.endswith("hugepages=32768") for a in added)


def test_fabric_manager_down() -> None:
    p = payloads("fabric-manager-down")
    assert changed(p) == {"systemctl_fabricmanager", "fabricmanager_journal",
                          "nvidia_smi_q_xml"}
    props = dict(ln.split("=", 1) for ln in p["systemctl_fabricmanager"].splitlines())
    assert (props["ActiveState"], props["SubState"], props["Result"]) == \
        ("failed", "failed", "exit-code")
    assert props["MainPID"] == "0" and props["ExecMainStatus"] == "1"
    journal = p["fabricmanager_journal"]
    assert "don't match with driver version 550.54.15" in journal
    assert "status=1/FAILURE" in journal and "Failed to start NVIDIA fabric manager" in journal
    assert "Successfully configured" not in journal
    report = parse_nvsmi_xml(p["nvidia_smi_q_xml"])
    assert {(g.fabric_state, g.fabric_status) for g in report.gpus} == {("In Progress", None)}
    assert len(changed_gpus(p)) == 8
    assert p["nvidia_smi_nvlink_status"].count("26.562 GB/s") == 8 * 18  # ALI keeps links up


def test_ib_port_polling() -> None:
    p = payloads("ib-port-polling")
    assert changed(p) == {"infiniband", "ibstat"}
    diff = tree_diff("infiniband", p)
    assert {k for k in diff} == {f"mlx5_3/ports/1/{a}" for a in
                                 ("state", "phys_state", "rate", "lid", "sm_lid")}
    assert diff["mlx5_3/ports/1/state"][1] == "1: DOWN\n"
    assert diff["mlx5_3/ports/1/phys_state"][1] == "2: Polling\n"
    block = p["ibstat"].split("CA 'mlx5_3'")[1].split("CA '")[0]
    assert "State: Down" in block and "Physical state: Polling" in block
    assert p["ibstat"].count("State: Active") == 7


def test_remap_failure() -> None:
    p = payloads("remap-failure")
    assert changed(p) == {"nvidia_smi_q_xml", "kernel_log"}
    assert changed_gpus(p) == {"00000000:BA:00.0"}
    g = smi_gpu(p, 6)
    assert (g.remapped_uncorrectable, g.remapping_failure, g.remapping_pending) == \
        (3, True, False)
    assert g.ecc_volatile_uncorrected == 0 and g.ecc_aggregate_uncorrected == 3
    added = new_lines("kernel_log", p)
    assert len(added) == 3
    assert re.search(r"NVRM: Xid \(PCI:0000:ba:00\): 64, ", added[-1])


def test_hw_slowdown() -> None:
    p = payloads("hw-slowdown")
    assert changed(p) == {"nvidia_smi_q_xml", "nvidia_smi"}
    assert changed_gpus(p) == {"00000000:3A:00.0"}
    g = smi_gpu(p, 2)
    active = {k for k, v in g.clock_event_reasons.items() if v}
    assert active == {"hw_slowdown", "hw_power_brake_slowdown"}
    assert g.utilization_gpu_pct == 98 and g.temperature_c == 49
    assert g.power_draw_w is not None and g.power_draw_w < g.power_limit_w / 2
    others = [x for x in parse_nvsmi_xml(p["nvidia_smi_q_xml"]).gpus if x.index != 2]
    assert all(x.clock_event_reasons["gpu_idle"] for x in others)


# -- end to end: the analysis reaches each scenario's diagnosis ---------------------------

def _producers() -> set[str]:
    return {fid for r in REGISTRY for fid in r.produces}


@pytest.fixture(scope="module")
def results(analysed) -> dict:
    """Each scenario's Result, from the analyses the modules share (tests/analysed.py)."""
    return {name: analysed.result(name) for name in ["healthy-8xh100", *NAMES]}


@pytest.mark.parametrize("name", NAMES)
def test_analysis_finds_the_expected_ids(name: str, results) -> None:
    pending = [fid for fid in EXPECTED[name] if fid not in _producers()]
    if pending:
        pytest.skip(f"no registered rule produces {', '.join(pending)} yet "
                    "(its rule module is still a placeholder)")
    result = results[name]
    found = {f.id for f in flat(result.findings)}  # a folded consequence is still found
    assert set(EXPECTED[name]) <= found, sorted(found)
    serious = {f.id for f in flat(result.findings) if f.severity.rank >= Severity.WARNING.rank}
    assert serious <= set(EXPECTED[name]), sorted(serious)
    assert not result.unreadable, result.unreadable


def test_healthy_host_has_no_hardware_warnings(results) -> None:
    result = results["healthy-8xh100"]
    loud = [(f.id, f.title) for f in result.findings
            if f.id.startswith(HW_FAMILIES) and f.severity.rank >= Severity.WARNING.rank]
    assert loud == []
    assert result.host.verdict == "ok"
