"""Host configuration rules (hugepages, THP, IOMMU, cgroups, containers) on small
simulated hosts."""

from __future__ import annotations

from hostkit import ids, pci_tree, pools, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputriage.model import Action, Severity
from gputriage.rules.hostcfg import hugepages_numa, thp_mode

GPUS = {"0000:18:00.0": "nvidia", "0000:9a:00.0": "nvidia"}


def gpu_tree(numa: dict[str, int] | None = None, driver: str = "nvidia") -> dict:
    """hostkit's PCI tree with each GPU's NUMA node set."""
    tree = pci_tree(dict.fromkeys(GPUS, driver))
    for addr, node in (numa or {}).items():
        tree["files"][f"{addr}/numa_node"] = f"{node}\n"
    return tree


def nodes(counts: dict[int, int], size_kb: int = 2048, cpuless: tuple[int, ...] = ()) -> dict:
    files = {}
    for n, nr in counts.items():
        files[f"node{n}/cpulist"] = "" if n in cpuless else f"{n * 48}-{n * 48 + 47}\n"
        files[f"node{n}/hugepages/hugepages-{size_kb}kB/nr_hugepages"] = f"{nr}\n"
    return {"files": files, "links": {}, "errors": {}}


MEMINFO = ("MemTotal:       1056456789 kB\nHugePages_Total:     300\nHugePages_Free:      300\n"
           "HugePages_Rsvd:        0\nHugePages_Surp:        0\nHugepagesize:       2048 kB\n")
CMD_1G = "BOOT_IMAGE=/vmlinuz ro default_hugepagesz=1G hugepagesz=1G hugepages=64\n"
CMD_IOMMU = "BOOT_IMAGE=/vmlinuz ro intel_iommu=on quiet\n"
V1_CGROUP = ("12:devices:/kubepods/besteffort/pod1/abc\n11:memory:/kubepods/besteffort/pod1/abc\n"
             "1:name=systemd:/kubepods/besteffort/pod1/abc\n")
DEVNODES = [{"path": "/dev/nvidiactl", "kind": "char", "major": 195, "minor": 255},
            {"path": "/dev/nvidia-uvm", "kind": "char", "major": 508, "minor": 0},
            {"path": "/dev/nvidia3", "kind": "char", "major": 195, "minor": 3}]

RULE_CASES = {
    "hugepages.reserved": [
        ({"proc_cmdline": CMD_1G, "hugepages": pools(kb1048576=40)}, "hugepages.not-reserved"),
        ({"proc_cmdline": "ro hugepages=1024\n", "proc_meminfo": MEMINFO},
         "hugepages.not-reserved"),
    ],
    "hugepages.numa": [
        ({"hugepages_per_node": nodes({0: 1024, 1: 0}),
          "pci_devices": gpu_tree({"0000:18:00.0": 0, "0000:9a:00.0": 1})},
         "hugepages.node-imbalance"),
    ],
    "hugepages.thp": [
        ({"thp_enabled": "[always] madvise never\n"}, "hugepages.thp"),
    ],
    "kernel.iommu": [
        ({"proc_cmdline": CMD_IOMMU, "pci_devices": gpu_tree()}, "kernel.iommu"),
    ],
    "host.cgroup": [
        ({"proc_self_cgroup": V1_CGROUP}, "host.cgroup-v1"),
    ],
    "host.container": [
        ({"proc_self_cgroup": "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-1.scope\n",
          "dev_nvidia": DEVNODES}, "host.container"),
    ],
}

def _only(result, fid):
    found = [f for f in result.findings if f.id == fid]
    assert len(found) == 1, [(f.id, f.title) for f in result.findings]
    return found[0]


HOST_IDS = {"hugepages.not-reserved", "hugepages.node-imbalance", "hugepages.thp",
            "kernel.iommu", "host.cgroup-v1", "host.container"}


def test_well_configured_host_is_quiet():
    result = run(proc_cmdline="BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt "
                              "hugepagesz=1G hugepages=64\n",
                 hugepages=pools(kb1048576=64, kb2048=0),
                 hugepages_per_node=nodes({0: 32, 1: 32}, size_kb=1048576),
                 proc_meminfo=MEMINFO, thp_enabled="always [madvise] never\n",
                 cgroup_controllers="cpuset cpu io memory hugetlb pids rdma misc\n",
                 proc_self_cgroup="0::/system.slice/slurmd.service\n",
                 pci_devices=gpu_tree({"0000:18:00.0": 0, "0000:9a:00.0": 1}))
    assert not ids(result) & HOST_IDS, [(f.id, f.title) for f in result.findings]
    skipped = {s.rule for s in result.skipped}
    assert not skipped & {"hugepages.reserved", "hugepages.numa", "hugepages.thp",
                          "kernel.iommu", "host.cgroup", "host.container"}


def test_not_reserved_names_pool_numbers_and_evidence():
    f = _only(run(proc_cmdline=CMD_1G, hugepages=pools(kb1048576=40)), "hugepages.not-reserved")
    assert f.severity is Severity.WARNING and f.action is Action.FIX_CONFIG
    assert "1 GiB pool holds 40 of 64" in f.title and "hugepagesz=1G hugepages=64" in f.title
    by_source = {e.source: e.lines for e in f.evidence}
    assert by_source["proc_cmdline"] == (CMD_1G.strip(),)
    assert by_source["hugepages"] == ("hugepages-1048576kB/nr_hugepages: 40",)


def test_default_size_request_against_meminfo():
    f = _only(run(proc_cmdline="ro hugepages=1024\n", proc_meminfo=MEMINFO),
              "hugepages.not-reserved")
    assert "2 MiB pool holds 300 of 1024" in f.title
    assert "HugePages_Total:     300" in f.evidence[1].lines


def test_per_node_sums_when_no_host_pool():
    result = run(proc_cmdline="ro hugepages=100\n", hugepages_per_node=nodes({0: 50, 1: 50}))
    assert "hugepages.not-reserved" not in ids(result)
    result = run(proc_cmdline="ro hugepages=100\n", hugepages_per_node=nodes({0: 50, 1: 10}))
    assert "hugepages.not-reserved" in ids(result)


def test_full_pool_and_unrequested_sizes_are_quiet():
    assert "hugepages.not-reserved" not in ids(run(proc_cmdline=CMD_1G,
                                                   hugepages=pools(kb1048576=64)))
    # requested size with no pool data at all: nothing to compare against
    assert "hugepages.not-reserved" not in ids(run(proc_cmdline=CMD_1G,
                                                   hugepages=pools(kb2048=0)))


def test_imbalance_severity_depends_on_where_gpus_sit():
    lopsided = nodes({0: 1024, 1: 0})
    f = _only(run(hugepages_per_node=lopsided,
                  pci_devices=gpu_tree({"0000:18:00.0": 0, "0000:9a:00.0": 1})),
              "hugepages.node-imbalance")
    assert f.severity is Severity.WARNING and "node0 1024, node1 0" in f.title
    assert "GPUs sit on node(s) 0, 1" in f.title
    f = _only(run(hugepages_per_node=lopsided,
                  pci_devices=gpu_tree({"0000:18:00.0": 0, "0000:9a:00.0": 0})),
              "hugepages.node-imbalance")
    assert f.severity is Severity.INFO
    f = _only(run(hugepages_per_node=lopsided), "hugepages.node-imbalance")
    assert f.severity is Severity.WARNING  # GPU placement unknown: assume it matters


def test_imbalance_ignores_cpuless_nodes_small_pools_and_explicit_requests():
    assert "hugepages.node-imbalance" not in ids(run(
        hugepages_per_node=nodes({0: 1024, 1: 0}, cpuless=(1,))))
    assert "hugepages.node-imbalance" not in ids(run(hugepages_per_node=nodes({0: 3, 1: 0})))
    assert "hugepages.node-imbalance" not in ids(run(
        hugepages_per_node=nodes({0: 1024, 1: 0}), proc_cmdline="ro hugepages=0:1024\n"))
    assert "hugepages.node-imbalance" not in ids(run(hugepages_per_node=nodes({0: 600, 1: 424})))


def test_thp_only_always_and_info():
    f = _only(run(thp_enabled="[always] madvise never\n",
                  thp_defrag="[always] defer defer+madvise madvise never\n"), "hugepages.thp")
    assert f.severity is Severity.INFO and "defrag always" in f.title
    for mode in ("always [madvise] never\n", "always madvise [never]\n"):
        assert "hugepages.thp" not in ids(run(thp_enabled=mode))


def test_thp_evidence_quotes_the_sysfs_files_as_read():
    f = _only(run(thp_enabled="[always] madvise never\n", thp_defrag="always [madvise]\n"),
              "hugepages.thp")
    assert [(e.source, e.lines) for e in f.evidence] == [
        ("thp_enabled", ("[always] madvise never",)), ("thp_defrag", ("always [madvise]",))]
    # a rule takes its facts as keyword arguments: without the raw text, the mode stands in
    [g] = thp_mode(host_thp="always")
    assert g.evidence[0].lines == ("always",)


def test_iommu_levels():
    f = _only(run(proc_cmdline=CMD_IOMMU, pci_devices=gpu_tree()), "kernel.iommu")
    assert f.severity is Severity.WARNING and "intel_iommu=on" in f.title
    assert f.evidence[0].source == "proc_cmdline" and f.evidence[0].lines == (CMD_IOMMU.strip(),)
    one = pci_tree({"0000:18:00.0": "nvidia"})
    assert _only(run(proc_cmdline=CMD_IOMMU, pci_devices=one), "kernel.iommu").severity \
        is Severity.INFO
    vfio = gpu_tree(driver="vfio-pci")
    assert _only(run(proc_cmdline=CMD_IOMMU, pci_devices=vfio), "kernel.iommu").severity \
        is Severity.INFO
    for cmd in ("ro intel_iommu=on iommu=pt\n", "ro quiet\n", "ro amd_iommu=on iommu=pt\n",
                "ro intel_iommu=off\n"):
        assert "kernel.iommu" not in ids(run(proc_cmdline=cmd, pci_devices=gpu_tree())), cmd
    assert "kernel.iommu" in ids(run(proc_cmdline="ro amd_iommu=on\n", pci_devices=gpu_tree()))
    # no GPU on the host: not a GPU-host concern
    assert "kernel.iommu" not in ids(run(proc_cmdline=CMD_IOMMU, pci_devices=pci_tree({})))


def test_cgroup_versions():
    f = _only(run(proc_self_cgroup=V1_CGROUP), "host.cgroup-v1")
    assert f.severity is Severity.INFO
    assert "11:memory:/kubepods/besteffort/pod1/abc" in f.evidence[0].lines
    assert "host.cgroup-v1" not in ids(run(proc_self_cgroup="0::/init.scope\n"))
    assert "host.cgroup-v1" not in ids(run(cgroup_controllers="cpu memory\n"))
    assert "host.cgroup-v1" not in ids(run(cgroup_controllers="\n",
                                           proc_self_cgroup="0::/\n"))


def test_numa_imbalance_called_with_values():
    from gputriage.parsers.memory import parse_hugepages_per_node

    per_node = parse_hugepages_per_node(nodes({0: 1024, 1: 0}))
    [f] = hugepages_numa(host_hugepage_nodes=per_node)
    assert f.severity is Severity.WARNING and "node0 1024, node1 0" in f.title
    assert not list(hugepages_numa(host_hugepage_nodes=per_node[:1]))  # one node: no spread


def test_container_lists_gpu_nodes():
    f = _only(run(proc_self_cgroup=V1_CGROUP, dev_nvidia=DEVNODES), "host.container")
    assert f.severity is Severity.INFO and "1 GPU device node(s) (/dev/nvidia3)" in f.title
    sources = {e.source for e in f.evidence}
    assert sources == {"proc_self_cgroup", "dev_nvidia"}
    assert "host.container" not in ids(run(proc_self_cgroup="0::/system.slice/ssh.service\n"))


CMD_WORDS = st.sampled_from(["hugepages=", "hugepagesz=", "default_hugepagesz=", "1G", "2M",
                             "0:1,1:2", "16", " ", "intel_iommu=", "amd_iommu=", "on", "off",
                             "iommu=pt", "iommu.passthrough=0", '"', "x"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cmd=st.lists(CMD_WORDS, max_size=16).map("".join),
       counts=st.dictionaries(st.integers(0, 3), st.integers(0, 5000), max_size=4),
       size=st.sampled_from([2048, 1048576, 64]),
       thp=st.sampled_from(["[always] madvise never", "always", "", "[never]"]))
def test_hostcfg_rules_never_crash(cmd, counts, size, thp):
    run(proc_cmdline=cmd, hugepages_per_node=nodes(counts, size_kb=size),
        hugepages=pools(**{f"kb{size}": sum(counts.values())}), thp_enabled=thp,
        proc_meminfo=MEMINFO, pci_devices=gpu_tree(), proc_self_cgroup=V1_CGROUP)
