"""The job's CUDA and framework errors judged with the host's facts (rules/cuda_job.py,
rules/cuda_job_faults.py): compatibility arithmetic, the node's state a CUDA error
reveals, the job's own faults; each corpus sample of the family with its blame; the
scenario cuda-driver-too-old; folding under the node's own findings."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

import pytest
from golden import flat
from hostkit import run

from gputriage.engine.analysis import analyze
from gputriage.ingest import load_input
from gputriage.model import Action, Blame, Severity
from gputriage.scenarios import build_scenario, write_host
from gputriage.scenarios.catalog import _fabric_manager_down
from gputriage.scenarios.model import Outcome

SMI_535 = ("+-----------------------------------------------------------------------------+\n"
           "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |\n"
           "|-------------------------------+----------------------+----------------------+\n")
SMI_470 = SMI_535.replace("535.104.05", "470.86     ").replace("12.2", "11.4")
ERR_35 = "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version\n"
ERR_222 = "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.\n"
ERR_700 = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
ERR_802 = "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 802: system not yet initialized\n"
ERR_803 = "RuntimeError: CUDA error: system has unsupported display driver / cuda driver combination\n"
ERR_804 = "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorCompatNotSupportedOnDevice: forward compatibility was attempted on non supported HW\n"
NO_GPUS = "RuntimeError: No CUDA GPUs are available\n"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.19 GiB is free.\n"
LDCONFIG = ("\tlibcuda.so.1 (libc6,x86-64) => /usr/local/cuda-12.8/compat/libcuda.so.1\n"
            "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n")
XID_79 = "[ 4012.551234] NVRM: Xid (PCI:0000:18:00): 79, pid=1423, name=python, GPU has fallen off the bus.\n"
XID_13 = "[ 4012.551234] NVRM: Xid (PCI:0000:18:00): 13, pid=1423, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address\n"
TORCH_128 = "torch.__version__ = 2.7.0+cu128\n"

RULE_CASES = {
    "cuda.compatibility": [
        ({"job_log": TORCH_128 + ERR_35, "nvidia_smi": SMI_470}, "cuda.driver-too-old"),
        ({"job_log": TORCH_128 + ERR_222, "nvidia_smi": SMI_535}, "cuda.driver-too-old"),
        ({"job_log": ERR_35, "nvidia_smi": SMI_535}, "cuda.driver-unseen"),
        ({"job_log": "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"},
         "cuda.no-kernel-image"),
        ({"job_log": ERR_804}, "cuda.forward-compat-unsupported"),
        ({"job_log": LDCONFIG}, "cuda.compat-lib-shadowing"),
    ],
    "cuda.node-state": [
        ({"job_log": ERR_802}, "cuda.fabric-not-ready"),
        ({"job_log": ERR_803}, "cuda.driver-mismatch"),
        ({"job_log": NO_GPUS}, "cuda.no-device"),
        ({"job_log": "RuntimeError: CUDA error: unknown error\ncudaErrorUnknown\n"}, "cuda.unknown-error"),
    ],
    "cuda.job-fault": [
        ({"job_log": ERR_700}, "cuda.kernel-fault"),
        ({"job_log": OOM}, "cuda.out-of-memory"),
    ],
}


def one(result, fid):
    found = [f for f in flat(result.findings) if f.id == fid]
    assert len(found) == 1, [f.id for f in flat(result.findings)]
    return found[0]


def text(f) -> str:
    return f.title + " " + f.explanation


# --- compatibility arithmetic ------------------------------------------------------------

def test_a_cu128_wheel_on_a_470_driver_names_both_fixes():
    f = one(run(job_log=TORCH_128 + ERR_35, nvidia_smi=SMI_470), "cuda.driver-too-old")
    assert (f.blame, f.action, f.severity) == (Blame.JOB_CONFIG, Action.FIX_SOFTWARE,
                                               Severity.WARNING)
    assert "CUDA 12.8" in text(f) and "CUDA 11.4" in text(f)
    assert ">= 570.26" in f.explanation  # 12.8's toolkit driver
    assert "cu118" in f.explanation  # 11.x runs on 470 (>= 450.80.02)
    lines = [ln for e in f.evidence for ln in e.lines]
    assert ERR_35.strip() in lines and TORCH_128.strip() in lines
    assert any("470.86" in ln for e in f.evidence if e.source == "host" for ln in e.lines)


def test_a_ptx_error_under_minor_version_compatibility():
    f = one(run(job_log=TORCH_128 + ERR_222, nvidia_smi=SMI_535), "cuda.driver-too-old")
    assert "minor-version compatibility" in f.title
    assert ">= 570.26" in f.explanation and "cu121" in f.explanation
    assert "SASS" in f.explanation
    assert f.blame is Blame.JOB_CONFIG


def test_error_35_when_the_driver_is_new_enough_means_no_driver_in_the_container():
    f = one(run(job_log=TORCH_128.replace("cu128", "cu121") + ERR_35, nvidia_smi=SMI_535),
            "cuda.driver-unseen")
    assert "--gpus" in f.explanation and f.blame is Blame.JOB_CONFIG


def test_a_paste_without_host_facts_names_the_facts_it_needs():
    f = one(run(job_log=ERR_35), "cuda.driver-too-old")
    assert "gputriage check" in f.explanation
    assert f.blame is Blame.UNKNOWN


def test_versions_alone_that_cannot_run_are_said_before_the_error():
    f = one(run(job_log="torch.__version__ = 2.7.0+cu130\n", nvidia_smi=SMI_535),
            "cuda.driver-too-old")
    assert "CUDA 13.0" in text(f) and "580" in f.explanation
    assert not [x for x in flat(run(job_log=TORCH_128, nvidia_smi=SMI_535).findings)
                if x.id.startswith("cuda.")]  # 12.8 on 535 starts: nothing to say


def test_an_ngc_image_built_for_a_newer_driver():
    log = ("CUDA Version 12.8.0\nERROR: This container was built for NVIDIA Driver Release "
           "570.86 or later, but version 535.104.05 was detected and compatibility mode is "
           "UNAVAILABLE.\n")
    f = one(run(job_log=log), "cuda.driver-too-old")
    assert "570.86" in f.title and "forward compatibility is not available" in f.explanation


def test_no_kernel_image_names_the_first_release_and_checks_the_driver():
    log = ("RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
           "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
           "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\n")
    f = one(run(job_log=log, nvidia_smi=SMI_535), "cuda.no-kernel-image")
    assert "sm_120" in f.title and "CUDA 12.8" in f.explanation and "cu128" in f.explanation
    assert "upgrade it to >= 570.26" in f.explanation  # 535 supports only 12.2
    assert f.blame is Blame.JOB_CONFIG


def test_compiled_archs_that_cover_the_gpu_are_not_blamed():
    log = ("NVIDIA H100 80GB HBM3 with CUDA capability sm_90 is not compatible\n"
           "The current PyTorch install supports CUDA capabilities sm_80 sm_86 sm_90.\n")
    findings = [f.id for f in run(job_log=log).findings]
    # the warning line is a hit (the catalog's), but the arithmetic finds sm_90 built
    assert findings.count("cuda.no-kernel-image") <= 1


def test_804_on_a_geforce_card_with_a_compat_library_on_the_path():
    f = one(run(job_log="GPU 0: NVIDIA GeForce RTX 3090\n" + LDCONFIG + ERR_804),
            "cuda.forward-compat-unsupported")
    assert "not a data-center GPU" in f.explanation
    assert "/usr/local/cuda-12.8/compat" in f.explanation and "reboot" in f.explanation
    assert f.blame is Blame.CONFIG
    assert "cuda.compat-lib-shadowing" not in {x.id for x in flat(run(
        job_log=LDCONFIG + ERR_804).findings)}  # one cause, one finding


# --- the node's state -------------------------------------------------------------------

def test_802_is_the_nodes_fabric_and_folds_under_the_fabric_manager(tmp_path):
    f = one(run(job_log=ERR_802), "cuda.fabric-not-ready")
    # the node's software: critical (no CUDA job runs), never a hardware repair
    assert (f.severity, f.blame) == (Severity.CRITICAL, Blame.CONFIG)
    assert "move the job" in f.explanation and "gputriage check" in f.explanation
    host = _fabric_manager_down()
    host.command_overrides["job_log"] = Outcome(ERR_802, 0)
    write_host(host, tmp_path / "fm.tar.gz")
    result = analyze(load_input(str(tmp_path / "fm.tar.gz")))
    top = [x.id for x in result.findings]
    assert "cuda.fabric-not-ready" not in top
    assert "cuda.fabric-not-ready" in [x.id for x in flat(result.findings)]


def test_803_is_the_nodes_driver_software_unless_a_compat_library_is_at_fault():
    """Issue 31: a driver whose halves differ (or too old for the runtime) is fixed by
    installing one driver, not by a hardware drain; a reboot alone may not do it."""
    f = one(run(job_log=ERR_803), "cuda.driver-mismatch")
    assert (f.severity, f.action, f.blame) == (Severity.CRITICAL, Action.FIX_SOFTWARE,
                                               Blame.CONFIG)
    assert "/proc/driver/nvidia/version" in (f.step or "")
    g = one(run(job_log=LDCONFIG + ERR_803), "cuda.driver-mismatch")
    assert (g.action, g.blame) == (Action.FIX_CONFIG, Blame.CONFIG)


def test_no_gpu_in_a_container_is_the_jobs_configuration():
    """PyTorch's "No CUDA GPUs are available" is its runtime counting no GPU it may use:
    the job's selection (CUDA_VISIBLE_DEVICES) first, as `explain` says of the text."""
    f = one(run(job_log=NO_GPUS), "cuda.no-device")
    assert f.blame is Blame.JOB_CONFIG and "gputriage check" in f.explanation
    assert "CUDA_VISIBLE_DEVICES" in f.explanation and "CUDA_VISIBLE_DEVICES" in (f.step or "")
    bare = one(run(job_log="cudaGetDeviceCount returned 100\n"), "cuda.no-device")
    assert bare.blame is Blame.UNKNOWN  # CUDA's own 100: the driver may be down
    g = one(run(job_log=NO_GPUS, nvidia_smi=SMI_535), "cuda.no-device")
    assert g.blame is Blame.JOB_CONFIG and "535.104.05" in g.explanation


# --- the job's faults -------------------------------------------------------------------

def test_an_illegal_address_is_the_jobs_unless_the_gpu_logged_a_hardware_xid():
    f = one(run(job_log=ERR_700), "cuda.kernel-fault")
    assert (f.blame, f.action) == (Blame.JOB, Action.RESTART_JOB)
    assert "gputriage check" in f.explanation
    g = one(run(job_log=ERR_700, kernel_log=XID_13), "cuda.kernel-fault")
    assert g.blame is Blame.JOB and "Xid 13" in g.explanation
    result = run(job_log=ERR_700, kernel_log=XID_79)
    h = one(result, "cuda.kernel-fault")
    assert h.blame is Blame.NODE and "Xid 79" in h.title
    assert "cuda.kernel-fault" not in [x.id for x in result.findings]  # under xid.79


def test_out_of_memory_is_the_job_and_never_fails_the_node():
    f = one(run(job_log=OOM), "cuda.out-of-memory")
    assert (f.blame, f.action) == (Blame.JOB, Action.RESTART_JOB)
    g = one(run(job_log="E tensorflow/stream_executor/cuda/cuda_blas.cc:366] failed to create cublas handle: CUBLAS_STATUS_NOT_INITIALIZED\n"),
            "cuda.out-of-memory")
    assert "NOT_INITIALIZED" in g.explanation and g.blame is Blame.JOB


# --- the corpus and the scenario --------------------------------------------------------

@pytest.mark.parametrize(("part", "fid", "blame"), [
    ("cuda-802-azure-nd96asr-v4", "cuda.fabric-not-ready", Blame.CONFIG),
    ("cuda-802-h200-hf-jobs", "cuda.fabric-not-ready", Blame.CONFIG),
    ("cupy-804-quadro-rtx6000", "cuda.forward-compat-unsupported", Blame.NODE),
    ("tf-cublas-not-initialized", "cuda.out-of-memory", Blame.JOB),
    ("torch-driver-too-old-11040", "cuda.driver-too-old", Blame.JOB_CONFIG),
    ("torch-driver-too-old-9000", "cuda.driver-too-old", Blame.JOB_CONFIG),
    ("torch-no-kernel-image-rtx4090", "cuda.no-kernel-image", Blame.JOB_CONFIG),
    ("torch-no-kernel-image-rtx5090", "cuda.no-kernel-image", Blame.JOB_CONFIG),
    ("fasterwhisper1259", "cuda.driver-unseen", Blame.JOB_CONFIG),
    ("nvdocker747-k80-caffe", "cuda.driver-too-old", Blame.UNKNOWN),
])
def test_corpus_samples_get_their_diagnosis_and_blame(corpus, part, fid, blame):
    result = analyze(load_input(str(corpus.sample(part).path)))
    f = one(result, fid)
    assert f.blame is blame
    assert f.evidence and f.evidence[0].source == "job_log"


def test_corpus_specifics(corpus):
    def get(part, fid):
        return one(analyze(load_input(str(corpus.sample(part).path))), fid)

    f = get("torch-driver-too-old-11040", "cuda.driver-too-old")
    assert "470.86" in f.explanation and "525.60.13" in f.explanation and "cu118" in f.explanation
    f = get("torch-no-kernel-image-rtx5090", "cuda.no-kernel-image")
    assert "CUDA 12.8" in f.explanation and "cu128" in f.explanation
    f = get("torch-no-kernel-image-rtx4090", "cuda.no-kernel-image")
    assert "CUDA 11.8" in f.explanation and "sm_89" in f.title
    f = get("cupy-804-quadro-rtx6000", "cuda.forward-compat-unsupported")
    assert "not a data-center GPU" in f.explanation and "reboot" in f.explanation


def test_the_cuda_driver_too_old_scenario(tmp_path):
    result = analyze(load_input(str(build_scenario("cuda-driver-too-old", tmp_path / "s.tar.gz"))))
    f = one(result, "cuda.driver-too-old")
    assert f.blame is Blame.JOB_CONFIG
    assert ">= 570.26" in f.explanation and "cu121" in f.explanation
    assert "535.161.07" in f.explanation
    assert result.host.verdict in ("ok", "warning")
