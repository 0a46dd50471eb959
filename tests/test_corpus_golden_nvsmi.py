"""Golden verdicts on the nvidia-smi family of real captures (corpus categories 1, 2
and 8; category 11's deviceQuery samples are in test_corpus_golden_jobs): the finding
ids each one must raise and must not raise, drawn from its MANIFEST expected diagnosis.

``never`` ids must not appear at all; ``quiet`` ids may appear only below warning
(an id ending in "." stands for every id of that area).
"""

from __future__ import annotations

from typing import NamedTuple

import pytest
from golden import flat

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.model import Action, Blame, Severity


class Gold(NamedTuple):
    must: tuple[str, ...] = ()
    never: tuple[str, ...] = ()
    quiet: tuple[str, ...] = ()


_MINE = ("memory.", "pcie.", "gpu.error-state", "thermal.", "gpu.reset-", "cuda.")
HEALTHY = Gold(quiet=_MINE)

GOLDEN: dict[str, Gold] = {
    # category 1: nvidia-smi -q (text and XML, whole or excerpts)
    "aws-p5-h100-fabric-state-completed": Gold(never=("fabric.state-not-completed",),
                                               quiet=_MINE),
    "azurehpc-nvsmi-q-page-retirement": Gold(
        never=("memory.retired-pages-pending", "memory.retired-pages-limit"), quiet=_MINE),
    "cudackpt22-nvidia-smi-q-display-pids": HEALTHY,
    "netdata-tesla-p100-pcie": Gold(never=("memory.retired-pages-pending",), quiet=_MINE),
    "rtxpro6000-blackwell-q-d-row-remapper": Gold(
        must=("memory.remap-pending",), never=("memory.remap-exhausting", "memory.remap-failed")),
    "telegraf-a10g-aws": HEALTHY,
    "thamada-1x-h200-passthrough": HEALTHY,
    "thamada-8x-h100-sxm-nvidia-smi-a": HEALTHY,
    "thamada-l40s-nvidia-smi-a": HEALTHY,
    "amax-a100-pcie-row-remapper-14": Gold(must=("memory.remap-exhausting",),
                                           never=("memory.remap-pending",)),
    # idle at P8 with the link trained down and ECC off: a workstation card's defaults
    "telegraf-rtx-pro-6000-blackwell-maxq": Gold(never=("memory.ecc-disabled",
                                                        "pcie.speed-degraded"), quiet=_MINE),
    "gpud-q-8x-rtx4090-535.154.05": Gold(never=("pcie.speed-degraded", "memory.ecc-disabled"),
                                         quiet=(*_MINE, "power.")),
    "pai-q-x-dgx2-v100-sxm3": Gold(must=("memory.uncorrectable", "memory.retired-pages-pending"),
                                   never=("memory.remap-", "memory.retired-pages-limit")),
    "gpuexporter-rtx2080super": Gold(never=("pcie.speed-degraded", "memory.ecc-disabled"),
                                     quiet=_MINE),
    "telegraf-rtx4000-sff-ada": Gold(never=("pcie.speed-degraded", "memory.ecc-disabled",
                                            "clocks."), quiet=_MINE),
    "netdata-query-gpu-csv-tesla-p100": Gold(quiet=(*_MINE, "clocks.", "power.")),
    "azhpcimages506-fabric-completed": Gold(must=("fabric.state-not-completed",)),
    # category 2: the table, its errors, CSV queries, resets
    "aws-p5-rhel9-8x-h100": Gold(never=("gpu.error-state",)),
    "gpud-sxid-readme-unable-to-determine": Gold(must=("nvidia-smi.gpu-lost",)),
    "modal-gpu-glossary-8x-h100": HEALTHY,
    "nolebase-4x-rtx3090": HEALTHY,
    "nvctk1227-container-failed-to-initialize": Gold(must=("nvidia-smi.nvml-init-failed",)),
    "nvdocker1553-nvidia-smi-a-i0": Gold(must=("nvidia-smi.gpu-lost",)),
    "ogkm862-rtx5090-no-devices": Gold(must=("nvidia-smi.no-devices",)),
    "syno22-tesla-p4": Gold(must=("nvidia-smi.gpu-lost",)),
    "thamada-1x-h200-550.90.12": HEALTHY,
    "thamada-4x-a100-sxm4": HEALTHY,
    "thamada-8x-h100-sxm-565.57.01.txt": HEALTHY,
    "xe9780-b300-only-7-of-8": Gold(must=("gpu.count-unexpected",)),
    "xxd3vin19-unable-to-determine": Gold(must=("nvidia-smi.gpu-lost",)),
    "smc57-query-gpu-csv": HEALTHY,
    "amax-a100-pcie-query-retired-pages-csv": Gold(
        never=("memory.retired-pages-pending", "memory.retired-pages-limit")),
    "dcgmexp94-query-compute-apps": HEALTHY,
    "gpuop118-a100-mig-disable": Gold(must=("gpu.reset-done",),
                                      never=("gpu.reset-blocked", "gpu.reset-failed")),
    "nvsentinel1690-gpu-reset": Gold(must=("gpu.reset-done",),
                                     never=("gpu.reset-blocked", "gpu.reset-failed")),
    "ogkm446-8x-a40": Gold(must=("gpu.error-state",), never=("memory.", "thermal.")),
    "ogkm446-8x-a30": Gold(must=("gpu.error-state",), never=("memory.", "thermal.")),
    "lambda-docs-a100-sxm-gpu5-err": Gold(must=("gpu.error-state",)),
    "l40s-8gpu-query-pcie": Gold(never=("pcie.width-degraded",), quiet=_MINE),
    "jon-x570-rtx5060ti": HEALTHY,
    "gpuexporter-h100-mig-4-instances": Gold(must=("mig.layout",), quiet=(*_MINE, "mig.")),
    "cnd-container-toolkit-t4": HEALTHY,
    "cnd-gpuop-mig-single-h100-7x-1g10gb": Gold(must=("mig.layout",), quiet=(*_MINE, "mig.")),
    "dcgm138-nvidia-smi-mig-lgi": Gold(must=("mig.layout",), quiet=(*_MINE, "mig.")),
    "bottlerocket4418-h100-sxm-nvlink-status": Gold(never=("nvlink.links-down",), quiet=_MINE),
    "mbab101-nvidia-smi-couldnt-communicate-dkms": Gold(
        must=("driver.module-build-failed", "nvidia-smi.cannot-communicate"),
        never=("gpu.", "memory.", "xid.", "pcie.")),
    # category 8: driver, fabric manager and other single outputs
    "aws-p5-devicequery-cudagetdevicecount-802": Gold(must=("cuda.device-query-failed",)),
    "azurehpc-nvlink-status-a100": Gold(must=("nvlink.links-down",)),
    "cubestudio29-rtx4090": Gold(must=("fabric.manager-not-needed",),
                                 never=("fabric.manager-inactive",)),
    "gpud-fabricmanager-log-multicast": Gold(must=("fabric.manager-errors",)),
    "gpud-nvidia-smi-nvlink-status": Gold(never=("nvlink.links-down",)),
    "gpuop610-a40-nvlink-bridge": Gold(must=("fabric.manager-not-needed",),
                                       never=("fabric.manager-inactive",)),
    "lambda-h100-sxm-vm-passthrough": Gold(must=("fabric.state-not-completed",)),
    "nccltests228-nvlink-status": Gold(never=("nvlink.links-down",)),
    "nvdocker1775-nvidia-container-cli-info": Gold(must=("container.toolkit-sees-gpus",),
                                                   quiet=("container.",)),  # Jetson: (null)
    "nvdocker904-nvidia-container-cli-info": Gold(must=("container.toolkit-sees-gpus",),
                                                  quiet=("container.",)),
    "nvtrust128-h20-journalctl-fabricmanager": Gold(must=("fabric.manager-inactive",)),
    "ollama11932-persistenced-failed": Gold(must=("driver.module-load-failed",)),
    "persistenced2-journal-started": Gold(must=("persistence.daemon-stopped",)),
    "proc-driver-nvidia-version-proprietary": Gold(),
    "rtxpro6000-gpu-reset-blocked": Gold(must=("gpu.reset-blocked",),
                                         never=("gpu.reset-done",)),
    "xe9780-b300-systemctl-status": Gold(never=("fabric.manager-inactive",)),
    "gb300-nvl72-compute-tray": Gold(must=("fabric.manager-not-needed",),
                                     never=("fabric.manager-inactive", "fabric.manager-errors")),
    "nccl1043-h100-fabricmanager-log": Gold(must=("fabric.multicast-state",),
                                            never=("sxid.", "nvlink.", "xid.")),
    "canvos700-hgx-b200-fm-precheck": Gold(must=("fabric.manager-prerequisite",),
                                           never=("fabric.manager-errors", "sxid.", "xid.")),
    "siderodocs581-talos-nvlsm": Gold(must=("fabric.manager-prerequisite",),
                                      never=("fabric.manager-errors", "sxid.", "xid.")),
    "gdrcopy-readme-copybw": Gold(must=("gdrcopy.bandwidth",), quiet=("gdrcopy.", "pcie.")),
    "dradriver289-imex-daemon": Gold(must=("imex.no-local-address",),
                                     never=("fabric.manager-errors", "xid.", "gpu.")),
    "gdrcopy305-a100-560": Gold(must=("gdrcopy.pin-failed",),
                                never=("gdrcopy.open-failed", "memory.", "pcie.", "xid.")),
    "gdrcopy126-dgx1v-sanity": Gold(must=("gdrcopy.open-failed",),
                                    never=("gdrcopy.pin-failed", "gdrcopy.bandwidth")),
    "gdrcopy234-clara-agx": Gold(must=("gdrcopy.open-failed",),
                                 never=("module.nvidia-uvm-missing", "gdrcopy.pin-failed")),
    "nvpeermem70-ubuntu2004-dkms": Gold(must=("driver.module-build-failed",),
                                       never=("k8s.operator-driver-failed", "xid.", "pcie.")),
    "zenkernel305-nvidia-dkms": Gold(must=("driver.module-build-failed",),
                                     never=("xid.", "gpu.", "driver.gpu-init-failed")),
    "olares3963-runfile-install": Gold(must=("driver.no-adapter-probed", "driver.install-failed"),
                                       never=("gpu.missing", "xid.", "driver.gpu-init-failed")),
}


def _matches(fid: str, pattern: str) -> bool:
    return fid.startswith(pattern) if pattern.endswith(".") else fid == pattern


@pytest.mark.parametrize("part", sorted(GOLDEN))
def test_golden_verdict(corpus, part):
    gold = GOLDEN[part]
    result = analyze(load_input(str(corpus.sample(part).path)))
    assert not result.unreadable, result.unreadable
    said = flat(result.findings)  # a folded consequence is still said
    ids = {f.id for f in said}
    assert set(gold.must) <= ids, sorted(ids)
    assert not [i for i in ids for p in gold.never if _matches(i, p)], sorted(ids)
    loud = [f.id for f in said if f.severity.rank >= Severity.WARNING.rank
            and any(_matches(f.id, p) for p in gold.quiet)]
    assert not loud, loud
    for f in said:  # whatever says drain is critical (the rules of this family)
        if f.id.startswith(("memory.", "gpu.error-state", "gpu.reset-", "cuda.")) \
                and f.action is Action.DRAIN_AND_REPAIR:
            assert f.severity is Severity.CRITICAL, f


def test_every_category_1_2_8_sample_has_a_golden_verdict(corpus):
    samples = corpus.category("1") + corpus.category("2") + corpus.category("8")
    missing = [s.name for s in samples if not any(p in s.name for p in GOLDEN)]
    assert not missing, "add their expected findings to GOLDEN: " + ", ".join(missing)


@pytest.mark.parametrize("part", ["lambda-docs-a100-sxm-gpu5-err", "ogkm446-8x-a30"])
def test_err_gpu_is_named(corpus, part):
    result = analyze(load_input(str(corpus.sample(part).path)))
    (f,) = [f for f in result.findings if f.id == "gpu.error-state"]
    assert f.severity is Severity.CRITICAL and f.scope.pci_bus_id
    assert "ERR!" in f.title and "temperature" in f.title


def test_reset_blocked_names_its_holder(corpus):
    result = analyze(load_input(str(corpus.sample("rtxpro6000-gpu-reset-blocked").path)))
    (f,) = [f for f in result.findings if f.id == "gpu.reset-blocked"]
    assert "nvidia-persistenced" in f.title and f.scope.pci_bus_id == "0000:55:00.0"
    assert f.action is Action.FIX_CONFIG and f.severity is Severity.WARNING


def test_devicequery_802_says_fabric_manager(corpus):
    part = "aws-p5-devicequery-cudagetdevicecount-802"
    result = analyze(load_input(str(corpus.sample(part).path)))
    (f,) = [f for f in result.findings if f.id == "cuda.device-query-failed"]
    assert "802" in f.title and "fabricmanager" in f.explanation


def test_v100_double_bit_error_with_pending_retirement_is_one_reset(corpus):
    # the DBE since the last reset marked its page; the reset retires it (pre-Ampere)
    result = analyze(load_input(str(corpus.sample("pai-q-x-dgx2-v100-sxm3").path)))
    (f,) = [f for f in result.findings if f.severity.rank >= Severity.WARNING.rank]
    assert (f.id, f.severity, f.action) == ("memory.uncorrectable", Severity.CRITICAL,
                                            Action.RESET_GPU)
    assert [c.id for c in f.consequences] == ["memory.retired-pages-pending"]
    assert "PAGE_RETIREMENT" in f.step and "ROW_REMAPPER" not in f.step


def test_fabric_completed_without_success_stays_out_until_the_fabric_is_repaired(corpus):
    result = analyze(load_input(str(corpus.sample("azhpcimages506-fabric-completed").path)))
    (f,) = [f for f in result.findings if f.id == "fabric.state-not-completed"]
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.DRAIN_AND_REPAIR,
                                               Blame.NODE)
    assert "Insufficient Resources" in f.title and "CliqueId 0" in f.title


def test_dkms_build_failure_is_the_cause_of_the_unreachable_driver(corpus):
    part = "mbab101-nvidia-smi-couldnt-communicate-dkms"
    result = analyze(load_input(str(corpus.sample(part).path)))
    (f,) = [f for f in result.findings if f.severity.rank >= Severity.WARNING.rank]
    assert (f.id, f.severity, f.action, f.blame) == (
        "driver.module-build-failed", Severity.CRITICAL, Action.FIX_SOFTWARE, Blame.NODE)
    assert "5.13.18-21.09.16.amdgpu.ubuntu" in f.title and "-k 5.13.18-21.09.16" in f.step
    assert [c.id for c in f.consequences] == ["nvidia-smi.cannot-communicate"]

