"""NCCL data-path rules: network channels without GPUDirect RDMA (a far HCA, a far
NIC on some channels, no GPUDirect support, limits set by the job) and GPU pairs
that talk through host shared memory, on synthetic logs with the host's topology,
sysfs and module list, and on the real captures."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

from hostkit import MODULES_FULL, nvml_doc, pci_tree, run
from nccl_kit import (
    BUSES,
    FAR_HCA,
    NO_GDR,
    NO_PEERMEM,
    SHM_ONLY,
    SHM_P2P_DISABLED,
    hcas,
    job_log,
    lines_of,
    mine,
    one,
    topo_m,
)

from gputriage.model import Action, Blame, Severity

RULE_CASES = {
    "nccl.gdr-disabled": [
        ({"nccl_log": NO_GDR, "proc_modules": NO_PEERMEM}, "nccl.gdr-disabled"),
        ({"nccl_log": FAR_HCA}, "nccl.gdr-disabled"),
    ],
    "nccl.shm-transport": [
        ({"nccl_log": SHM_P2P_DISABLED}, "nccl.shm-transport"),
    ],
}


# --- nccl.gdr-disabled -----------------------------------------------------------------


def test_far_hca_related_to_the_topology() -> None:
    f = one(run(nccl_log=FAR_HCA, nvidia_smi_topo=topo_m(), nvml=nvml_doc(BUSES)),
            "nccl.gdr-disabled")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    assert "GPU 18000 / HCA 1 (mlx5_1) at distance 7, limit 5" in f.title
    assert "2 network channel(s) without /GDRDMA" in f.title
    assert "topo -m: GPU0 [0000:18:00.0] to mlx5_1 is SYS; its nearest NIC is mlx5_0 (PIX)" \
        in f.explanation
    assert f.scope.kind == "gpu" and f.scope.pci_bus_id == "0000:18:00.0"
    assert [e.source for e in f.evidence] == ["nccl_log", "nvidia_smi_topo"]


def test_far_hca_related_to_numa_nodes() -> None:
    pci = pci_tree({"0000:18:00.0": "nvidia"}, nics=("0000:9b:00.0",))
    pci["files"]["0000:9b:00.0/numa_node"] = "1\n"
    ib = hcas(2, pci={"mlx5_1": "0000:9b:00.0"})
    f = one(run(nccl_log=FAR_HCA, pci_devices=pci, infiniband=ib), "nccl.gdr-disabled")
    assert ("sysfs: GPU 0000:18:00.0 on NUMA node 0, mlx5_1 (0000:9b:00.0) on NUMA node 1 "
            "(different NUMA nodes)") in f.explanation


def test_no_gdr_support_with_and_without_peermem() -> None:
    result = run(nccl_log=NO_GDR, proc_modules=NO_PEERMEM, infiniband=hcas(1))
    missing = one(result, "nccl.gdr-disabled")
    assert (missing.action, missing.blame) == (Action.FIX_CONFIG, Blame.CONFIG)
    # the host-side finding about the same module says the same
    [module] = [f for f in result.findings if f.id == "module.peermem-missing"]
    assert (module.action, module.blame) == (missing.action, missing.blame)
    assert "nvidia_peermem is not loaded on this host" in missing.title
    assert "HCA 0 'mlx5_0'" in missing.title and "2 network channel(s)" in missing.title
    assert missing.evidence[-1].source == "proc_modules"
    loaded = one(run(nccl_log=NO_GDR, proc_modules=MODULES_FULL), "nccl.gdr-disabled")
    assert loaded.blame is Blame.CONFIG and "although nvidia_peermem is loaded" in loaded.title
    unknown = one(run(nccl_log=NO_GDR), "nccl.gdr-disabled")
    assert unknown.blame is Blame.CONFIG and "nvidia_peermem not loaded?" in unknown.title


def test_far_hca_under_a_gdr_level_set_by_the_job() -> None:
    log = FAR_HCA.replace("NCCL INFO Using network IB",
                          "NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PIX.")
    f = one(run(nccl_log=log), "nccl.gdr-disabled")
    assert f.blame is Blame.JOB_CONFIG and "The job sets NCCL_NET_GDR_LEVEL=PIX" in f.explanation
    assert any(ln.endswith("NCCL_NET_GDR_LEVEL set by environment to PIX.") for ln in lines_of(f))
    assert one(run(nccl_log=FAR_HCA), "nccl.gdr-disabled").blame is Blame.CONFIG


def test_gdr_level_set_by_the_job() -> None:
    log = NO_GDR.replace("NCCL INFO Using network IB",
                         "NCCL INFO NCCL_NET_GDR_LEVEL set by environment to LOC.")
    f = one(run(nccl_log=log, proc_modules=MODULES_FULL), "nccl.gdr-disabled")
    assert f.blame is Blame.JOB_CONFIG and "NCCL_NET_GDR_LEVEL=LOC" in f.title


def test_all_channels_with_gdr_are_silent() -> None:
    assert not mine(run(nccl_log=job_log(net="IB"), proc_modules=NO_PEERMEM),
                    "nccl.gdr-disabled")
    bare = job_log(net="IB", gdr=False)
    f = one(run(nccl_log=bare, proc_modules=NO_PEERMEM), "nccl.gdr-disabled")
    assert "8 network channel(s) without /GDRDMA" in f.title


def test_distance_in_the_log(corpus) -> None:
    f = one(run(nccl_log=corpus.sample("nccl1657").text()), "nccl.gdr-disabled")
    assert "GPU 42000 / HCA 0 at distance 6, limit 4" in f.title
    assert f.scope.pci_bus_id == "0000:42:00.0" and f.blame is Blame.CONFIG
    old = one(run(nccl_log=corpus.sample("nvpeermem56").text()), "nccl.gdr-disabled")
    assert "3 GPU/HCA pair(s) on 2 hosts" in old.title
    assert "master_node: GPU 3[3] / HCA 0 at distance 3, limit 2" in old.title
    assert "4 network channel(s) without /GDRDMA" in old.title


# GDR read off (pre-Ampere PCIe platform): receives land in GPU memory, sends are staged.
GDR_READ_OFF = """\
gpu-a:4100:4157 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.11<0>
gpu-a:4100:4157 [0] NCCL INFO Using network IB
gpu-a:4100:4157 [0] NCCL INFO comm 0x55d000000 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
gpu-a:4100:4160 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu-a:4100:4160 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu-a:4100:4160 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0
gpu-a:4100:4160 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/0
"""


def test_sends_without_gdr_read_are_normal() -> None:
    assert not mine(run(nccl_log=GDR_READ_OFF, proc_modules=MODULES_FULL), "nccl.gdr-disabled")
    # a receive on another NIC without /GDRDMA is still the mixed case
    far = GDR_READ_OFF + ("gpu-a:4100:4160 [0] NCCL INFO Channel 02/0 : 1[0] -> 0[0] [receive] "
                          "via NET/IB/1\n")
    f = one(run(nccl_log=far), "nccl.gdr-disabled")
    assert f.title == ("1 of 3 network channels lose GPUDirect RDMA (NET/IB/1 without it; "
                       "NET/IB/0 with it)")


def test_far_nic_loses_gdr_on_half_the_channels(corpus) -> None:
    f = one(run(nccl_log=corpus.sample("nccl2345-after").text()), "nccl.gdr-disabled")
    assert f.title == ("2 of 4 network channels lose GPUDirect RDMA (NET/IB/1 without it; "
                       "NET/IB/0 with it)")
    assert "GPU 0 uses GPUDirect on NET/IB/0" in f.explanation
    assert f.action is Action.FIX_CONFIG


# --- nccl.shm-transport ----------------------------------------------------------------


def test_p2p_disabled_by_the_job() -> None:
    f = one(run(nccl_log=SHM_P2P_DISABLED), "nccl.shm-transport")
    assert (f.severity, f.blame) == (Severity.WARNING, Blame.JOB_CONFIG)
    assert "because NCCL_P2P_DISABLE=1 is set" in f.title and "1 GPU pair(s) via SHM: 0-1" in f.title


def test_p2p_level_limited_by_the_job() -> None:
    log = SHM_ONLY + "box:4100:4157 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to NVL.\n"
    f = one(run(nccl_log=log, nvidia_smi_topo=topo_m("SYS")), "nccl.shm-transport")
    assert f.blame is Blame.JOB_CONFIG and "because NCCL_P2P_LEVEL=NVL is set" in f.title
    assert any(ln.endswith("NCCL_P2P_LEVEL set by environment to NVL.") for ln in lines_of(f))


def test_shm_between_nvlinked_gpus() -> None:
    f = one(run(nccl_log=SHM_ONLY, nvidia_smi_topo=topo_m("NV18")), "nccl.shm-transport")
    assert f.severity is Severity.WARNING and f.action is Action.FIX_CONFIG
    assert "topo -m: 0-1 NV18" in f.title and "IPC" in f.explanation
    assert f.evidence[-1].lines == ("GPU0-GPU1 NV18",)


def test_shm_only_without_nvlink_is_info() -> None:
    f = one(run(nccl_log=SHM_ONLY, nvidia_smi_topo=topo_m("SYS")), "nccl.shm-transport")
    assert f.severity is Severity.INFO
    assert not mine(run(nccl_log=job_log(net="IB")), "nccl.shm-transport")


def test_partial_nvlink_is_the_topology(corpus) -> None:
    f = one(run(nccl_log=corpus.sample("vastai-4xa100-shm").text()), "nccl.shm-transport")
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.NONE, Blame.CONFIG)
    assert "2 GPU pair(s) via SHM: 0-3, 1-2; 2 pair(s) via P2P: 2-3, 0-1" in f.title
    assert "topology" in f.explanation


def test_partial_nvlink_with_the_same_hosts_topology(corpus) -> None:
    result = run(nccl_log=corpus.sample("vastai-4xa100-shm").text(),
                 nvidia_smi_topo=corpus.sample("vastai-4xa100-partial").text())
    f = one(result, "nccl.shm-transport")
    assert f.severity is Severity.WARNING and f.blame is Blame.CONFIG
    assert "topo -m for the SHM pairs: 0-3 NODE, 1-2 NODE." in f.explanation
    assert set(f.evidence[-1].lines) == {"GPU0-GPU3 NODE", "GPU1-GPU2 NODE", "GPU2-GPU3 NV10",
                                          "GPU0-GPU1 NV12"}
