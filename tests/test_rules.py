"""Driver-stack and inventory rules on small simulated hosts.

``RULE_CASES`` holds, for every registered rule, at least one host that makes
it fire; the conformance test checks that no rule is left without one.
"""

from __future__ import annotations

from golden import flat
from hostkit import BUSES, HEALTHY, MODULES_FULL, VERSION_FILE, ids, nvml_doc, pci_tree, run, snap

from gputriage.engine.analysis import analyze
from gputriage.facts.store import Facts
from gputriage.ingest import load_text
from gputriage.model import Action, Blame, Severity
from gputriage.rules.driver import driver_wedged


def host(**changes):
    sources = {**HEALTHY, **changes}
    return {k: v for k, v in sources.items() if v is not None}


LSPCI_SWITCHES_4_GPUS = "".join(
    [f"{b:02x}:00.0 Bridge: NVIDIA Corporation Device 22a3 (rev a1)\n" for b in range(5, 9)]
    + [f"{b}:00.0 3D controller: NVIDIA Corporation Device 2330 (rev a1)\n"
       for b in ("18", "2a", "3a", "5d")])


def switched_topo(n: int, cell: str = "NV18") -> str:
    """``nvidia-smi topo -m`` of ``n`` GPUs that all meet with ``cell``."""
    names = [f"GPU{i}" for i in range(n)]
    rows = [f"{a}\t" + "\t".join(" X " if a == b else cell for b in names) + "\t0-31\t0"
            for a in names]
    return "\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\n" + "\n".join(rows) + "\n"


TOPO_7_SWITCHED = switched_topo(7)

# apt upgrading the driver for a kernel it cannot build against (DKMS 3, Ubuntu)
DKMS_APT = """\
Setting up nvidia-dkms-550 (550.120-0ubuntu1) ...
Building for 6.11.0-1-generic
Building initial module for 6.11.0-1-generic
Error! Bad return status for module build on kernel: 6.11.0-1-generic (x86_64)
Consult /var/lib/dkms/nvidia/550.120/build/make.log for more information.
dpkg: error processing package nvidia-dkms-550 (--configure):
"""
SMI_NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                 "Make sure that the latest NVIDIA driver is installed and running.\n")

RULE_CASES = {
    "driver.presence": [
        (host(proc_modules="ext4 1 0 - Live 0x0\nnouveau 2 0 - Live 0x0\n", nvml=None,
              proc_driver_nvidia_version=None, sys_module_nvidia=None), "driver.not-loaded"),
        ({"pci_devices": pci_tree({}, nics=()), "proc_modules": "ext4 1 0 - Live 0x0\n"},
         "host.not-gpu-host"),
    ],
    "driver.version-mismatch": [
        (host(proc_driver_nvidia_version=VERSION_FILE.format(v="535.161.07"),
              nvml={"schema": "gputriage/nvml/v1", "available": False, "error_code": 18,
                    "error": "RM has detected an NVML/RM version mismatch."}),
         "driver.version-mismatch"),
        (host(), "driver.versions-consistent"),
    ],
    "driver.wedged": [({"failed": {"nvidia_smi_q_xml": "timeout"}}, "driver.wedged")],
    "nvidia-smi.errors": [
        ({"nvidia_smi": "Unable to determine the device handle for GPU0000:9A:00.0: "
                        "Unknown Error\n"}, "nvidia-smi.gpu-lost"),
        ({"nvidia_smi": "NVIDIA-SMI has failed because it couldn't communicate with the "
                        "NVIDIA driver. Make sure that the latest NVIDIA driver is installed "
                        "and running.\n"}, "nvidia-smi.cannot-communicate"),
        ({"nvidia_smi": "No devices were found\n"}, "nvidia-smi.no-devices"),
        ({"nvidia_smi": "Failed to initialize NVML: Unknown Error\n"},
         "nvidia-smi.nvml-init-failed"),
    ],
    "driver.init-events": [
        ({"kernel_log": "[   12.345678] NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! "
                        "(0x24:0x72:1568)\n"}, "driver.gpu-init-failed"),
    ],
    "driver.dkms-build": [
    ],
    "gpu.count": [
        (host(nvml=nvml_doc(BUSES[:4] + BUSES[5:])), "gpu.missing"),
        (host(), "gpu.count-ok"),
    ],
    "gpu.count-unexpected": [
        ({"nvml": nvml_doc(BUSES[:7])}, "gpu.count-unexpected"),
    ],
    "gpu.board-count": [
        ({"lspci_nvidia": LSPCI_SWITCHES_4_GPUS}, "gpu.board-short"),
        ({"nvidia_smi_topo": TOPO_7_SWITCHED}, "gpu.board-short"),
    ],
    "module.required": [
        # a module that is not loaded has no row and is no other module's user either
        (host(proc_modules=MODULES_FULL.replace("nvidia_uvm 1437696 4 - Live 0x0 (POE)\n", "")
              .replace("nvidia_uvm,", "")), "module.nvidia-uvm-missing"),
        (host(proc_modules=MODULES_FULL.replace("nvidia_peermem 16384 0 - Live 0x0 (POE)\n", "")
              .replace("nvidia_peermem,", "")), "module.peermem-missing"),
    ],
    "module.version-skew": [
        (host(sys_module_nvidia={"files": {"nvidia/version": "550.54.15\n",
                                           "nvidia_uvm/version": "550.54.14\n"}}),
         "module.version-skew"),
    ],
    "devnode.check": [
        (host(dev_nvidia=HEALTHY["dev_nvidia"][:1] + HEALTHY["dev_nvidia"][2:]),
         "devnode.missing"),
        (host(dev_nvidia=[{**n, "major": 507} if n["path"] == "/dev/nvidia-uvm" else n
                          for n in HEALTHY["dev_nvidia"]]), "devnode.wrong-number"),
    ],
    "persistence.mode": [
        (host(nvml=nvml_doc(BUSES, persistence=False)), "persistence.off"),
    ],
    "kernel.xid": [
        ({"kernel_log": "[  100.1] NVRM: Xid (PCI:0000:9a:00): 79, pid=1234, name=python, GPU "
                        "has fallen off the bus.\n"}, "xid.79"),
    ],
    "kernel.sxid": [
        ({"kernel_log": "[  100.1] nvidia-nvswitch3: SXid (PCI:0000:07:00.0): 20034, Fatal, "
                        "Link 28 LTSSM Fault Up\n"}, "sxid.20034"),
    ],
    "kernel.events": [
        ({"kernel_log": "[  200.5] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset "
                        "required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ "
                        "kernel_channel.c:2874\n"}, "kernel.gpu-reset-required"),
    ],
    "persistence.daemon": [
        ({"systemctl_persistenced": "Id=nvidia-persistenced.service\nLoadState=loaded\n"
                                    "ActiveState=failed\nSubState=failed\nResult=exit-code\n"
                                    "ExecMainStatus=1\n"}, "persistence.daemon-inactive"),
    ],
}

def test_healthy_host_has_no_warnings():
    result = run(**host())
    bad = [f for f in result.findings if f.severity.rank >= Severity.WARNING.rank]
    assert not bad, [(f.id, f.title) for f in bad]
    assert {"gpu.count-ok", "driver.versions-consistent"} <= ids(result)
    assert result.host.verdict == "ok"
    assert result.host.gpus_on_pci == 8 and result.host.gpus_visible == 8


def test_mismatch_names_both_versions_and_says_reboot():
    result = run(**host(proc_driver_nvidia_version=VERSION_FILE.format(v="535.161.07")))
    f = next(f for f in result.findings if f.id == "driver.version-mismatch")
    assert "535.161.07" in f.title and "550.54.15" in f.title
    assert f.action is Action.FIX_SOFTWARE and f.blame is Blame.CONFIG
    sources = {e.source for e in f.evidence}
    assert {"proc_driver_nvidia_version", "nvidia_libs"} <= sources


def test_mismatch_from_the_kernel_log_alone():
    log = ("[ 2391.113455] NVRM: API mismatch: the client has the version 550.54.15, but\n"
           "               NVRM: this kernel module has the version 535.161.07.  Please\n"
           "               NVRM: make sure that this kernel module and all NVIDIA driver\n"
           "               NVRM: components have the same version.\n")
    result = analyze(snap(live=False, kernel_log=log))
    f = next(f for f in result.findings if f.id == "driver.version-mismatch")
    assert "535.161.07" in f.title and "550.54.15" in f.title


def test_no_mismatch_when_versions_agree_by_prefix():
    smi = ("Failed to initialize NVML: Driver/library version mismatch\n"
           "NVML library version: 550.54\n")
    result = run(**host(nvidia_smi=smi))  # the error itself is a flag
    assert "driver.version-mismatch" in ids(result)
    result = run(**host())
    assert "driver.version-mismatch" not in ids(result)


def test_missing_gpu_is_named_by_bus_id_with_the_lost_lines():
    result = run(**host(nvml=nvml_doc(BUSES[:4] + BUSES[5:]),
                        kernel_log="[ 100.1] NVRM: Xid (PCI:0000:9a:00): 79, pid=1234, "
                                   "name=python, GPU has fallen off the bus.\n"))
    missing = [f for f in flat(result.findings) if f.id == "gpu.missing"]  # under xid.79
    assert len(missing) == 1
    f = missing[0]
    assert f.scope.pci_bus_id == "0000:9a:00.0"
    assert f.action is Action.DRAIN_AND_REPAIR and f.severity is Severity.CRITICAL
    assert any("fallen off the bus" in line for e in f.evidence for line in e.lines)
    row = next(g for g in result.gpus if g.pci_bus_id == "0000:9a:00.0")
    assert row.visible is False and row.severity is Severity.CRITICAL


def test_passthrough_gpus_are_not_missing():
    tree = pci_tree({**dict.fromkeys(BUSES[:4], "nvidia"), **dict.fromkeys(BUSES[4:], "vfio-pci")})
    result = run(**host(pci_devices=tree, nvml=nvml_doc(BUSES[:4])))
    assert "gpu.missing" not in ids(result)
    assert "gpu.passthrough" in ids(result)


def test_peermem_not_demanded_without_infiniband():
    mods = MODULES_FULL.replace("nvidia_peermem 16384 0 - Live 0x0 (POE)\n", "").replace(
        "nvidia_peermem,", "")
    result = run(**host(proc_modules=mods, pci_devices=pci_tree(dict.fromkeys(BUSES, "nvidia"))))
    assert "module.peermem-missing" not in ids(result)


def test_persistence_not_demanded_on_geforce():
    result = run(**host(nvml=nvml_doc(BUSES, persistence=False,
                                      name="NVIDIA GeForce RTX 4090")))
    assert "persistence.off" not in ids(result)


def test_container_gpu_nodes_are_info_only():
    nodes = HEALTHY["dev_nvidia"][:2] + HEALTHY["dev_nvidia"][2:4]
    result = run(**host(dev_nvidia=nodes, proc_self_cgroup="0::/kubepods/burstable/pod1/abc\n"))
    sev = {f.severity for f in result.findings if f.id == "devnode.missing"}
    assert sev == {Severity.INFO}


def test_wedged_driver():
    s = snap(failed={"nvidia_smi_q_xml": "timeout", "nvml": "timeout"},
             **host(nvml=None))
    result = analyze(s)
    f = next(f for f in result.findings if f.id == "driver.wedged")
    assert f.severity is Severity.CRITICAL and f.action is Action.REBOOT_NODE


def test_hung_queries_are_a_fact_in_command_order():
    s = snap(failed={"nvml": "timeout", "nvidia_smi_q_xml": "timeout", "nvidia_smi": "error"})
    hung = Facts(s).get("hung_driver_queries")
    assert list(hung) == ["nvidia_smi_q_xml", "nvml"]
    [f] = driver_wedged(hung_driver_queries=hung)
    assert f.title.startswith("2 driver queries hung")
    assert not list(driver_wedged())  # nothing hung, nothing to say


def test_missing_inputs_are_skipped_with_reasons():
    result = analyze(snap(live=False, nvidia_smi="No devices were found\n"))
    skipped = {s.rule: s.reason for s in result.skipped}
    assert "gpu.count" in skipped and "pci" in skipped["gpu.count"]
    assert "module.required" in skipped


def test_nothing_known_is_unknown():
    result = analyze(snap(live=False))
    assert result.host.verdict == "unknown"


def test_the_library_the_loader_picks_decides_among_leftovers():
    libs = {"files": {"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.161.07": "",
                      "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15": ""},
            "links": {"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1":
                      "libnvidia-ml.so.550.54.15"}}
    assert "driver.version-mismatch" not in ids(run(**host(nvidia_libs=libs)))
    libs["links"]["usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"] = "libnvidia-ml.so.535.161.07"
    assert "driver.version-mismatch" in ids(run(**host(nvidia_libs=libs)))
    assert Facts(snap(nvidia_libs=libs)).get("libnvidia_ml_targets") == {
        "libnvidia-ml.so.535.161.07"}


# --- gpu.board-count ---------------------------------------------------------------------

def test_nvswitches_beside_four_gpus_mean_a_board_short_of_eight():
    [f] = [f for f in run(lspci_nvidia=LSPCI_SWITCHES_4_GPUS).findings
           if f.id == "gpu.board-short"]
    assert f.title.startswith("4 GPU(s) on the PCI bus beside 4 NVSwitch(es)")
    assert f.severity is Severity.WARNING and f.blame is Blame.NODE
    no_switch = "".join(ln + "\n" for ln in LSPCI_SWITCHES_4_GPUS.splitlines()[4:])
    assert "gpu.board-short" not in ids(run(lspci_nvidia=no_switch))  # HGX 4-GPU: fine


def test_topology_one_gpu_short_of_a_switched_board():
    [f] = [f for f in run(nvidia_smi_topo=TOPO_7_SWITCHED).findings
           if f.id == "gpu.board-short"]
    assert "7 GPUs joined through NVSwitch (NV18 every pair)" in f.title
    for healthy in (switched_topo(8), switched_topo(4), switched_topo(2),
                    switched_topo(3, "NV6")):  # 3 x NV6 direct links: no switch implied
        assert "gpu.board-short" not in ids(run(nvidia_smi_topo=healthy))


# -- DKMS building the module (rules/module_build.py) ------------------------------------------

def _dkms(result):
    return [f for f in flat(result.findings) if f.id == "driver.module-build-failed"]


def test_dkms_failure_in_apt_output_is_a_software_warning_for_that_kernel():
    [f] = _dkms(analyze(load_text(DKMS_APT, "paste")))
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_SOFTWARE, Blame.NODE)
    assert "6.11.0-1-generic" in f.title and "next boot" in f.explanation


def test_dkms_failure_with_no_driver_is_the_critical_cause():
    journal = "".join(f"Mar 03 10:00:0{i} gpu-b12 dkms[812]: {ln}\n"
                      for i, ln in enumerate(DKMS_APT.splitlines()[2:5]))
    result = analyze(load_text(journal + SMI_NO_DRIVER, "paste"))
    top = [f for f in result.findings if f.severity is Severity.CRITICAL]
    assert [f.id for f in top] == ["driver.module-build-failed"]
    assert [c.id for c in top[0].consequences] == ["nvidia-smi.cannot-communicate"]


def test_dkms_failure_on_the_running_kernel_is_critical():
    uname = "Linux gpu-b12 6.11.0-1-generic #1 SMP PREEMPT_DYNAMIC x86_64 GNU/Linux\n"
    [f] = _dkms(run(module_build=DKMS_APT, uname=uname))
    assert f.severity is Severity.CRITICAL and f.action is Action.FIX_SOFTWARE


def test_a_dkms_failure_without_a_module_named_is_only_information():
    line = "Error! Bad return status for module build on kernel: 6.8.0-45-generic (x86_64)\n"
    [f] = _dkms(analyze(load_text(line, "paste")))
    assert f.severity is Severity.INFO and f.action is Action.NONE



# -- an unknown blame never drains (exit 2): the verdict says what it could not tell -------

def test_a_critical_whose_fault_is_unknown_is_no_drain():
    from gputriage.status import ExitStatus, exit_status

    # alone, the line says nothing of where it ran: the NVML catalog's row (as `explain`
    # says it), never a drain
    alone = analyze(load_text("Failed to initialize NVML: Unknown Error\n", "paste"))
    [f] = alone.findings
    assert (f.severity, f.action) == (Severity.WARNING, Action.FIX_CONFIG)
    assert exit_status(alone) is ExitStatus.WARNING
    beside = analyze(load_text("Failed to initialize NVML: Unknown Error\n" + SMI_NO_DRIVER
                               .replace("NVIDIA-SMI has failed", "\nNVIDIA-SMI has failed"),
                               "paste"))
    node = [f for f in beside.findings if f.severity is Severity.CRITICAL
            and f.blame in (Blame.NODE, Blame.CONFIG)]
    assert node and exit_status(beside) is ExitStatus.CRITICAL
