"""Expectation rules (``expect.*``) and the GPUs-gone verdict on small simulated hosts.

``RULE_CASES`` make every expectation rule fire (the conformance test runs them under
the ``context`` they carry); the scenario and CLI checks are in tests/test_expect.py.
"""

from __future__ import annotations

from hostkit import BUSES, HEALTHY, POLLING, ib_tree, ids, nvml_doc, pci_tree, pools, rails, run

from gputriage.facts.context import CheckContext
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.expect import parse
from gputriage.rules.expectations import UNKNOWN_COUNT


def expecting(text: str) -> CheckContext:
    return CheckContext(expectations=parse(text, "expect.toml"))


def links(widths: dict[str, int], speed: str = "32.0 GT/s PCIe") -> dict:
    """The healthy PCI tree with each GPU's current link width (x16 unless named)."""
    tree = pci_tree(dict.fromkeys(BUSES, "nvidia"), nics=("0000:19:00.0",))
    for bus in BUSES:
        tree["files"].update({f"{bus}/current_link_speed": f"{speed}\n",
                              f"{bus}/max_link_speed": "32.0 GT/s PCIe\n",
                              f"{bus}/current_link_width": f"{widths.get(bus, 16)}\n",
                              f"{bus}/max_link_width": "16\n"})
    return tree


MIG_CSV = ("index, pci.bus_id, mig.mode.current\n"
           + "".join(f"{i}, 0000{b.upper()}, {'Enabled' if i < 2 else 'Disabled'}\n"
                     for i, b in enumerate(BUSES)))
GONE_LOG = "".join(
    f"May 14 08:18:27 gpu-node-017 kernel: NVRM: Xid (PCI:{b[:-2]}): 79, pid='<unknown>', "
    "name=<unknown>, GPU has fallen off the bus.\n" for b in BUSES[:3])
CPU_HOST = {"pci_devices": pci_tree({}, nics=("0000:19:00.0",)),
            "proc_modules": "ext4 1 0 - Live 0x0\n"}

RULE_CASES = {
    "expect.gpu-count": [
        ({**HEALTHY, "nvml": nvml_doc(BUSES[:7]), "context": expecting("[gpu]\ncount = 8")},
         "expect.gpu-count"),
        ({"proc_modules": "ext4 1 0 - Live 0x0\n", "context": expecting("[gpu]\ncount = 8")},
         UNKNOWN_COUNT),
    ],
    "expect.gpu-model": [({**HEALTHY, "context": expecting('[gpu]\nmodel = "A100-SXM4-80GB"')},
                          "expect.gpu-model")],
    "expect.driver": [({**HEALTHY, "context": expecting('[gpu]\ndriver = "535.161.07"')},
                       "expect.driver")],
    "expect.cuda": [({**HEALTHY, "context": expecting('[gpu]\ncuda = "12.6"')}, "expect.cuda")],
    "expect.nvswitch-count": [({**HEALTHY, "context": expecting("[nvswitch]\ncount = 4")},
                               "expect.nvswitch-count")],
    "expect.pcie": [({**HEALTHY, "pci_devices": links({BUSES[3]: 8}),
                      "context": expecting("[pcie]\nwidth = 16")}, "expect.pcie")],
    "expect.infiniband": [({"infiniband": ib_tree(rails(8, mlx5_3=POLLING)),
                            "context": expecting("[infiniband]\nports = 8")},
                           "expect.infiniband")],
    "expect.mig": [({**HEALTHY, "nvidia_smi_csv": MIG_CSV,
                     "context": expecting("[gpu]\nmig = false")}, "expect.mig")],
    "expect.persistence": [({**HEALTHY, "nvml": nvml_doc(BUSES, persistence=False),
                             "context": expecting("[gpu]\npersistence = true")},
                            "expect.persistence")],
    "expect.hugepages": [({"hugepages": pools(kb2048=9216),
                           "context": expecting("[hugepages]\ncount = 32768")},
                          "expect.hugepages")],
    "expect.unchecked": [({**HEALTHY, "context": expecting("[infiniband]\nports = 8")},
                          "expect.unchecked")],
    "driver.presence": [({**CPU_HOST, "kernel_log": GONE_LOG}, "host.gpus-gone")],
}


def _one(result, fid):
    [f] = [f for f in result.findings if f.id == fid]
    return f


def test_healthy_host_meets_what_it_has():
    text = ('[gpu]\ncount = 8\nmodel = "H100 80GB HBM3"\ndriver = "550.54.15"\n'
            'cuda = "12.4"\npersistence = true\n[pcie]\nwidth = 16\n[hugepages]\ncount = 0\n')
    result = run(**{**HEALTHY, "pci_devices": links({}), "hugepages": pools(kb2048=0)},
                 context=expecting(text))
    assert not [f for f in result.findings if f.id.startswith("expect.")]
    assert result.host.verdict == "ok"


def test_gpu_count_names_the_gpu_the_driver_lost():
    result = run(**{**HEALTHY, "nvml": nvml_doc(BUSES[:4] + BUSES[5:])},
                 context=expecting("[gpu]\ncount = 8"))
    f = _one(result, "expect.gpu-count")
    assert f.title == "7 of 8 expected GPUs: 0000:9a:00.0 missing"
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.DRAIN_AND_REPAIR,
                                               Blame.NODE)
    assert f.scope.pci_bus_id == "0000:9a:00.0"
    assert {e.source for e in f.evidence} >= {"expectations", "nvml", "pci_devices"}


def test_gpu_count_short_on_the_pci_bus_too():
    tree = pci_tree(dict.fromkeys(BUSES[:6], "nvidia"))
    f = _one(run(**{**HEALTHY, "pci_devices": tree, "nvml": nvml_doc(BUSES[:6])},
                 context=expecting("[gpu]\ncount = 8")), "expect.gpu-count")
    assert f.title == "6 of 8 expected GPUs: 2 not on the PCI bus"
    assert f.scope.kind == "node"


def test_unreadable_gpus_make_the_verdict_unknown_unless_something_is_critical():
    result = run(proc_modules="ext4 1 0 - Live 0x0\n", context=expecting("[gpu]\ncount = 8"))
    assert UNKNOWN_COUNT in ids(result)
    assert result.host.verdict == "unknown"
    result = run(proc_modules="ext4 1 0 - Live 0x0\n", hugepages=pools(kb2048=0),
                 context=expecting("[gpu]\ncount = 8\n[hugepages]\ncount = 16"))
    assert result.host.verdict == "critical"


def test_driver_title_names_both_layers_when_they_differ():
    f = _one(run(**HEALTHY, context=expecting('[gpu]\ndriver = "535.161.07"')), "expect.driver")
    assert f.title == "driver 550.54.15, expected 535.161.07"
    assert (f.action, f.blame) == (Action.FIX_SOFTWARE, Blame.CONFIG)
    assert "proc_driver_nvidia_version" in {e.source for e in f.evidence}
    # a branch is a prefix: 550 accepts 550.54.15
    assert not [f for f in run(**HEALTHY, context=expecting('[gpu]\ndriver = "550"')).findings
                if f.id == "expect.driver"]


def test_pcie_generation_of_an_idle_link_is_not_judged():
    idle = {**HEALTHY, "pci_devices": links({}, speed="2.5 GT/s PCIe")}
    result = run(**idle, context=expecting("[pcie]\ngen = 5"))
    assert "expect.pcie" not in ids(result)
    assert "PCIe generation of 8 idle GPU link(s)" in _one(result, "expect.unchecked").title
    slow = {**HEALTHY, "pci_devices": links({}, speed="16.0 GT/s PCIe")}
    f = _one(run(**slow, context=expecting("[pcie]\ngen = 5")), "expect.pcie")
    assert f.title.startswith("8 GPU PCIe links below Gen5: GPU")


def test_infiniband_counts_ports_at_the_rate():
    tree = ib_tree(rails(8, mlx5_3=POLLING))
    f = _one(run(infiniband=tree, context=expecting("[infiniband]\nports = 8\nrate_gbps = 400")),
             "expect.infiniband")
    assert f.title.startswith("7 of 8 expected InfiniBand ports Active at 400 Gb/s: mlx5_3/1")
    # a frontend port in addition to the rails does not count against them
    assert "expect.infiniband" not in ids(run(
        infiniband=tree, context=expecting("[infiniband]\nports = 7\nrate_gbps = 400")))


def test_unchecked_lists_what_the_snapshot_lacks():
    f = _one(run(**HEALTHY, context=expecting("[infiniband]\nports = 8\n[hugepages]\ncount = 4")),
             "expect.unchecked")
    assert f.severity is Severity.INFO and f.action is Action.NONE
    assert f.title == ("could not check: infiniband (no ibstat output or /sys/class/infiniband); "
                       "hugepages (no /sys/kernel/mm/hugepages)")


def test_a_cpu_host_is_still_not_a_gpu_host():
    result = run(**CPU_HOST)
    assert ids(result) == {"host.not-gpu-host"} and result.host.verdict == "ok"


def test_gpus_gone_names_the_evidence():
    nodes = [{"path": f"/dev/nvidia{i}", "kind": "char", "major": 195, "minor": i}
             for i in range(2)]
    f = _one(run(**CPU_HOST, kernel_log=GONE_LOG, dev_nvidia=nodes), "host.gpus-gone")
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.DRAIN_AND_REPAIR,
                                               Blame.NODE)
    assert "this host had 3 GPUs" in f.title
    assert {e.source for e in f.evidence} == {"pci_devices", "kernel_log", "dev_nvidia"}


def test_an_installed_driver_alone_is_a_hint_not_a_verdict():
    libs = {"files": {"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15": ""}, "links": {}}
    f = _one(run(**CPU_HOST, nvidia_libs=libs), "host.not-gpu-host")
    assert f.severity is Severity.INFO and "expect.toml" in f.explanation
    assert "nvidia_libs" in {e.source for e in f.evidence}
