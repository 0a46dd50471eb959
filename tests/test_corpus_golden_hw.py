"""Golden verdicts on every category-3 (nvidia-smi topo), category-6 (ibstat and
friends) and category-7 (numactl / lscpu / lspci / dmidecode) capture: the finding ids
that must appear (``id`` or ``id=severity``) and those that must not (``id``, or
``id=severity`` for that severity only; CALM: nothing at warning or above beyond the
must list), read from MANIFEST.tsv's expected_diagnosis (row kinds: see golden.py)."""

from __future__ import annotations

import pytest
from golden import CALM, cases, check_verdict, missing_rows

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input

TOPO_FAULTS = ("topology.nic-far", "topology.nvlink-uneven", "gpu.board-short")
IB_FAULTS = ("ib.port-not-active", "ib.rate-below-peers")

# sample name part -> (must, must not)
GOLDEN: dict[str, tuple] = {
    # --- 3: nvidia-smi topo ---
    "aws-g6e-12xlarge": (("topology.map=info",), (CALM, *TOPO_FAULTS)),
    "k8stestinfra371-gb200": (("topology.map=info",), (CALM, *TOPO_FAULTS)),
    "vastai-4xa100-partial-nvlink": (("topology.map", "topology.nvlink-uneven=warning"),
                                     ("gpu.board-short",)),
    "numa-allreduce-appendix-8gpu-pcie-topo-p2p": (("topology.p2p=info",),
                                                   (CALM, "topology.p2p=warning")),
    "oyanghd-dgx-a100": (("topology.map=info",), (CALM, *TOPO_FAULTS)),
    "sglang30401": (("topology.map=info",), (CALM, *TOPO_FAULTS)),
    "sm120-6gpu-pcie": (("topology.map=info",), (CALM, *TOPO_FAULTS)),
    "xe9780-b300-7gpu": (("gpu.board-short=warning", "topology.map"),
                         ("topology.nvlink-uneven",)),
    "mleng-8gpu-nv18-2numa": (("topology.map=info",), (CALM, *TOPO_FAULTS)),
    "nccl1617-4x-h100-nv6": (("topology.map=info",), (CALM, *TOPO_FAULTS)),
    "club3090-1229-2x-rtx5090": (("topology.map=info", "topology.p2p=info"),
                                 (CALM, "topology.p2p=warning", *TOPO_FAULTS)),
    # MANIFEST blames ACS/VT-d (nccl667, nccl2079) and a bridge making partial contact
    # (nccl557): none of it is in a topo matrix, which the map says (test below)
    "nccl667-4gpu-pxb-pix": (("topology.map=info",), (CALM, *TOPO_FAULTS)),
    "nccl2079-2x-rtx5880ada": (("topology.map=info",), (CALM, *TOPO_FAULTS)),
    "nccl557-2gpu-nvlink-bridge-nv3": (("topology.map=info",), (CALM, *TOPO_FAULTS)),
    # --- 6: ibstat / ibstatus / ibv_devinfo / ibdev2netdev / show_gids ---
    "bernie-connectx6": ((), (CALM, *IB_FAULTS)),
    "cn-doc-ibv-devinfo-v-mlx4-port2": (("ib.port-not-active=warning",),
                                        ("ib.rate-below-peers",)),
    "cx7-roce-ibdev2netdev": (("ib.port-not-active=info",), (CALM,)),
    "doc-ibstat-mt25418": (("ib.port-not-active=info",), (CALM, "ib.rate-below-peers")),
    "gpud-ibstat-azure-a100": ((), (CALM, *IB_FAULTS)),
    "gpud-ibstat-h100-some-down": (("ib.port-not-active=warning",),
                                   ("ib.port-not-active=info", "ib.rate-below-peers")),
    "gpud-ibstatus-a100-all-active": ((), (CALM, *IB_FAULTS)),
    "nccl1510-show-gids": (("ib.roce-gid=info",), (CALM, "ib.port-not-active")),
    "oyanghd-ibstat-connectx3": ((), (CALM, *IB_FAULTS)),
    "imbue-h100-ibdev2netdev-8x-cx7": (("ib.link-state-unshown=info",),
                                       (CALM, "ib.port-not-active=warning",
                                        "ib.port-not-active=critical")),
    "sriovop382-pod-ib-vf": (("ib.port-not-active=warning",), ("ib.rate-below-peers",)),
    "treydock-perfquery-x-lid133": ((), (CALM, "ib.symbol-errors", "ib.link-downed",
                                         "ib.port-errors")),
    "dsxinfra5251-ibv-devinfo-no-ib-devices": (("ib.no-devices=warning",),
                                               ("ib.port-not-active",)),
    "rccl1423-rdma-link-mlx5_7": (("ib.port-unstable=warning",), ()),
    "trinity219-ibstatus-sys-files-not-found": (("ib.no-devices=warning",), ()),
    # --- 7: numactl / lscpu / lspci / dmidecode ---
    "cn-notes-connectx6-dmidecode": ((), (CALM, "pcie.width-degraded")),
    "geerlingguy480": (("pcie.width-degraded",), ("pcie.aer-errors",)),
    "hwloc653": ((), (CALM, "pcie.width-degraded", "pcie.speed-degraded")),
    "jan183-rtx4090-riser": (("pcie.speed-degraded=info",), (CALM, "pcie.width-degraded")),
    "legion1338-numactl-power9": ((), (CALM, "topology.numa-unknown")),
    "gtx1650super-idle": (("pcie.speed-degraded=info",),
                          (CALM, "pcie.width-degraded", "pcie.aer-errors")),
    "nolebase-lspci-grep-nvidia": (("gpu.board-short=warning",), ()),
    "talos9121": ((), (CALM, "gpu.board-short", "gpu.count-unexpected")),
    "xpuperf129-gh200": ((), (CALM, "topology.numa-unknown")),
    "gpud-lspci-nn-qemu-vm-1x-a10": ((), (CALM, "gpu.board-short", "gpu.count-unexpected",
                                          "fabric.")),
    "ktransformers797-numactl": (("topology.numa-layout=info",),
                                 (CALM, "topology.numa-unknown")),
    "ghbench-numactl-H-gh200": (("topology.numa-layout=info",),
                                (CALM, "topology.numa-unknown")),
}


@pytest.mark.parametrize(("part", "must", "must_not"), list(cases(GOLDEN)))
def test_golden_verdict(corpus, analysed, part, must, must_not):
    check_verdict(analysed, corpus, part, must, must_not)


def test_every_category_3_6_and_7_sample_has_a_golden_row(corpus):
    assert not missing_rows(corpus, GOLDEN, ("3", "6", "7"))


@pytest.mark.parametrize(("part", "says"), [
    ("nccl667-4gpu-pxb-pix", "ACSCtl"), ("nccl2079-2x-rtx5880ada", "ACSCtl"),
    ("nccl557-2gpu-nvlink-bridge-nv3", "nvlink -s")])
def test_topology_map_says_what_the_matrix_cannot_tell(corpus, part, says):
    result = analyze(load_input(str(corpus.sample(part).path)))
    (f,) = [f for f in result.findings if f.id == "topology.map"]
    assert says in f.explanation

