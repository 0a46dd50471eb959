"""Golden verdicts on every category-3 (nvidia-smi topo), category-6 (ibstat and
friends) and category-7 (numactl / lscpu / lspci / dmidecode) capture: the finding ids
that must appear (``id`` or ``id=severity``) and those that must not (``id``, or
``id=severity`` for that severity only; CALM: nothing at warning or above beyond the
must list), read from MANIFEST.tsv's expected_diagnosis. A sample this project cannot
judge right yet is an xfail(strict=True) with the reason, so that fixing it shows."""

from __future__ import annotations

import pytest

from gputriage.engine import analyze
from gputriage.ingest import load_input
from gputriage.model import Severity

CALM = "calm"  # no finding at warning or above other than the must ones
TOPO_FAULTS = ("topology.nic-far", "topology.nvlink-uneven", "gpu.board-short")
IB_FAULTS = ("ib.port-not-active", "ib.rate-below-peers")

# sample name part -> (must, must not[, reason it is expected to fail])
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
}


def _cases():
    for part, row in GOLDEN.items():
        marks = [pytest.mark.xfail(strict=True, reason=row[2])] if len(row) > 2 else []
        yield pytest.param(part, row[0], row[1], id=part, marks=marks)


def test_every_category_3_6_and_7_sample_has_a_golden_row(corpus):
    names = {corpus.sample(part).name for part in GOLDEN}
    assert len(names) == len(GOLDEN)
    wanted = {s.name for cat in ("3", "6", "7") for s in corpus.category(cat)}
    assert wanted <= names, sorted(wanted - names)


@pytest.mark.parametrize(("part", "must", "must_not"), list(_cases()))
def test_golden_verdict(corpus, part, must, must_not):
    result = analyze(load_input(str(corpus.sample(part).path)))
    found: dict[str, set[str]] = {}
    for f in result.findings:
        found.setdefault(f.id, set()).add(f.severity.value)
    for item in must:
        fid, _, severity = item.partition("=")
        assert fid in found, (fid, sorted(found))
        assert not severity or severity in found[fid], (fid, found[fid])
    for item in must_not:
        if item == CALM:
            wanted = {m.partition("=")[0] for m in must}
            loud = [f.id for f in result.findings if f.id not in wanted
                    and f.severity.rank >= Severity.WARNING.rank]
            assert not loud, loud
            continue
        fid, _, severity = item.partition("=")
        assert fid not in found or (severity and severity not in found[fid]), (item, found)
