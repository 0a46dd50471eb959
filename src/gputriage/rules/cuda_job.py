"""The job's CUDA and framework errors judged with the host's facts: CUDA compatibility
as arithmetic (driver, the driver's CUDA, the program's CUDA, compute capability,
compiled architectures), the node's state a CUDA error reveals (fabric not ready,
driver halves that differ, no device), and the job's own faults (illegal address,
out of memory), told from the GPU's by the kernel log's Xids.

Every finding names the fact that is wrong and what to change; when the host facts it
would need are missing, it says which ones and how to get them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from gputriage.facts.stack import GpuSighting
from gputriage.knowledge import cuda_compat as cc
from gputriage.knowledge.job_messages import Hit
from gputriage.model import Action, Blame, DriverVersions, Evidence, Finding, Severity, evidence
from gputriage.parsers.job_log import JobLog, JobVersions
from gputriage.rules.base import finding, rule

DOC_COMPAT = "https://docs.nvidia.com/deploy/cuda-compatibility/"
DOC_NOTES = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/"
ASK_HOST = ("run `gputriage check` on the node (or paste its nvidia-smi) to confirm the "
            "driver version")

# how a rebuilt or re-pinned job shows it runs, before it is resubmitted (each fix ends so)
CUDA_BUILD_CHECK = ("then torch.cuda.is_available() (or deviceQuery) in the job's environment "
                    "should pass before the job is resubmitted")

# catalog ids of each kind of failure (221, the PTX JIT compiler library missing, is
# not: the driver's library was not given to the process, said as its row says)
TOO_OLD = frozenset({"cuda.35", "cuda.36", "cuda.222", "torch.driver-too-old",
                     "ngc.driver-too-old"})
NO_IMAGE = frozenset({"cuda.209", "torch.arch-unsupported"})
NO_DEVICE = frozenset({"cuda.100", "cuda.101", "torch.no-cuda-gpus", "torch.no-driver",
                       "app.no-gpu-found"})
OOM = frozenset({"cuda.2", "torch.cuda-oom", "cublas.not-initialized", "cublas.alloc-failed",
                 "cudnn.not-initialized"})
KERNEL_FAULT = frozenset({"cuda.700", "cuda.710", "cuda.715", "cuda.716", "cuda.719"})
NODE_XIDS = frozenset({48, 63, 64, 79, 94, 95})
JOB_XIDS = frozenset({13, 31, 43})


@dataclass(frozen=True)
class Stack:
    """What is known of the GPU stack, from the host first, else from the job."""

    driver: str | None  # driver version
    driver_cuda: str | None  # the newest CUDA the driver supports
    app_cuda: str | None
    gpu: str | None
    capability: str | None
    host_lines: tuple[str, ...]  # the host's facts used, as lines

    @property
    def host_known(self) -> bool:
        return self.driver is not None or self.driver_cuda is not None


def _stack(v: JobVersions, drv: DriverVersions | None,
           gpus: tuple[str, list[GpuSighting]] | None) -> Stack:
    host: list[str] = []
    driver = driver_cuda = None
    if drv is not None and (drv.userspace or drv.kernel_module or drv.cuda):
        driver = drv.kernel_module or drv.userspace
        driver_cuda = drv.cuda
        host.append(f"node: driver {driver or '?'}, CUDA {driver_cuda or '?'} (gputriage's "
                    "reading of the host)")
    driver = driver or v.driver_version
    driver_cuda = driver_cuda or v.driver_cuda or cc.newest_cuda(driver)
    gpu = v.gpu_name
    if gpus is not None and gpus[1] and not gpu:
        gpu = gpus[1][0].name
        host.append(gpus[1][0].line)
    return Stack(driver, driver_cuda, v.app_cuda, gpu, v.capability or cc.capability_of(gpu),
                 tuple(host))


def _ev(log: JobLog, hits: Sequence[Hit], stack: Stack, *fields: str) -> list[Evidence]:
    lines = [h.line.strip() for h in hits] + log.versions.line(*fields)
    out = [evidence("job_log", dict.fromkeys(lines))]
    if stack.host_lines:
        out.append(evidence("host", stack.host_lines))
    return out


def _of(log: JobLog, ids: Iterable[str]) -> list[Hit]:
    wanted = set(ids)
    return [h for h in log.hits if h.message.id in wanted]


def _ver(v: str | None) -> tuple[int, ...]:
    return cc.version_key(v)


# --- the driver against the program's CUDA ----------------------------------------------

def _fit(stack: Stack) -> cc.Fit | None:
    """Whether the program's CUDA runs on the node's driver (None: cannot tell)."""
    if stack.app_cuda is None:
        return None
    if stack.driver is not None and cc.newest_cuda(stack.driver) is not None:
        return cc.runs_on(stack.app_cuda, stack.driver)
    if stack.driver_cuda is None:
        return None
    app, top = _ver(stack.app_cuda)[:2], _ver(stack.driver_cuda)[:2]
    if app <= top:
        return cc.Fit.YES
    return cc.Fit.MINOR if app[:1] == top[:1] and app[0] >= 11 else cc.Fit.NO


def _builds_for(stack: Stack, *, minor_ok: bool) -> str:
    """The build to use instead: a wheel tag and an image base for the driver's CUDA."""
    top = stack.driver_cuda
    if top is None:
        return "a build (wheel or image) made for the CUDA release the node's driver supports"
    tag = cc.torch_tag_for(top, stack.driver if minor_ok else None)
    major = _ver(top)[0]
    family = (f"any CUDA {major}.x build (minor-version compatibility)" if minor_ok
              and cc.family_floor(top) else f"a build for CUDA {top} or older")
    wheel = f"e.g. the PyTorch {tag} wheel" if tag else "e.g. a PyTorch wheel of that CUDA"
    return f"{family}: {wheel}, an nvidia/cuda:{top}.x image base"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _upgrade(app: str | None, *, floor_starts: bool = True) -> str:
    """The driver upgrade a CUDA ``app`` program needs; ``floor_starts``: also the family's
    floor, which starts the program (not where minor-version compatibility falls short)."""
    if app is None:
        return "upgrade the driver to one that supports the program's CUDA"
    need, floor = cc.min_driver(app), cc.family_floor(app)
    text = f"upgrade the driver to >= {need} (CUDA {app}'s toolkit driver)" if need else (
        f"upgrade the driver to one that supports CUDA {app}")
    if floor_starts and floor and floor != need:
        text += f"; any driver >= {floor} starts CUDA {_ver(app)[0]}.x programs"
    return text


def _too_old(log: JobLog, hits: list[Hit], stack: Stack) -> Finding:
    ids = {h.message.id for h in hits}
    fields = ("torch", "torch_cuda", "runtime_cuda", "image_cuda", "image", "nvcc",
              "driver_cuda", "driver_version", "driver_required", "compat_mode")
    ev = _ev(log, hits, stack, *fields)
    fit = _fit(stack)
    v = log.versions
    if ids & {"cuda.222", "cuda.36"} and fit is not cc.Fit.NO:
        return _minor_limit(ids, stack, ev)
    if "ngc.driver-too-old" in ids and v.driver_required:
        have = stack.driver or v.driver_version or "?"
        mode = (" and forward compatibility is not available for this GPU or driver branch"
                if v.compat_mode is False else "")
        return finding(
            "cuda.driver-too-old", Severity.WARNING,
            f"the image needs driver {v.driver_required} or later; the node has {have}",
            f"The container was built for driver {v.driver_required} or later (CUDA "
            f"{v.image_cuda or '?'}), the node runs {have}{mode}. Run an image release built "
            f"for the node's driver ({_builds_for(stack, minor_ok=False)}) or upgrade the "
            f"driver to >= {v.driver_required}.", Action.FIX_SOFTWARE, Blame.JOB_CONFIG,
            evidence=ev, references=(DOC_COMPAT,),
            fix=f"run an image release built for driver {have} "
                f"({_builds_for(stack, minor_ok=False)}), or upgrade the driver to >= "
                f"{v.driver_required}; {CUDA_BUILD_CHECK}")
    if fit in (cc.Fit.YES, cc.Fit.MINOR) or (
            stack.app_cuda is None and stack.driver_cuda and cc.family_floor(stack.driver_cuda)
            and "torch.driver-too-old" not in ids and "cuda.35" in ids):
        return _unseen(stack, ev, fit)
    return _gap(ids, stack, ev)


def _gap(ids: set[str], stack: Stack, ev: list[Evidence]) -> Finding:
    """The program's CUDA is newer than the driver's, beyond what compatibility covers."""
    app, top = stack.app_cuda, stack.driver_cuda
    if app is None and top is not None and cc.family_floor(top) and stack.driver is not None:
        # PyTorch said the driver is too old: with the family floor met, the wheel
        # must be of a newer major release
        app_text = f"CUDA {_ver(top)[0] + 1}.x or later (a {_ver(top)[0]}.x build would run)"
        upgrade = _upgrade(f"{_ver(top)[0] + 1}.0")
    else:
        app_text = f"CUDA {app}" if app else "a newer CUDA (its version is not printed)"
        upgrade = _upgrade(app)
    if top is None:
        return finding(
            "cuda.driver-too-old", Severity.WARNING,
            "the driver is older than the CUDA runtime the program needs",
            f"The program needs {app_text}; the driver's version is not in this output, so "
            f"gputriage cannot tell by how much it falls short: {ASK_HOST} and compare its CUDA "
            "version with the program's (torch.version.cuda, nvcc --version, the image tag). "
            "Then upgrade the driver or run a build made for the node's CUDA; in a container, "
            "check that the host's driver libraries were mounted.",
            Action.FIX_SOFTWARE, Blame.UNKNOWN, evidence=ev, references=(DOC_NOTES,))
    drv = f"driver {stack.driver}" if stack.driver else "the driver"
    ask = "" if stack.host_known and stack.driver else f" ({ASK_HOST})"
    return finding(
        "cuda.driver-too-old", Severity.WARNING,
        f"the program needs {app_text.split(' (')[0]}; {drv} supports CUDA {top}",
        f"The driver's CUDA is the wrong fact here: {drv} supports CUDA {top}{ask} and the "
        f"program was built for {app_text}. Either {upgrade}, or install "
        f"{_builds_for(stack, minor_ok=True)}.", Action.FIX_SOFTWARE, Blame.JOB_CONFIG,
        evidence=ev, references=(DOC_NOTES, DOC_COMPAT),
        fix=f"install {_builds_for(stack, minor_ok=True)}, or {upgrade}; {CUDA_BUILD_CHECK}")


def _minor_limit(ids: set[str], stack: Stack, ev: list[Evidence]) -> Finding:
    if stack.app_cuda is None and "cuda.222" in ids:
        return _ptx_too_new(stack, ev)
    app = stack.app_cuda or "?"
    floor = cc.family_floor(stack.app_cuda) if stack.app_cuda else None
    what = ("JIT-compile the program's PTX" if "cuda.222" in ids
            else "serve an API call the program makes")
    drv = stack.driver or "the node's driver"
    return finding(
        "cuda.driver-too-old", Severity.WARNING,
        f"CUDA {app} runs on {drv} through minor-version compatibility, which cannot {what}",
        f"Minor-version compatibility lets a CUDA {app} program start on {drv} (CUDA "
        f"{stack.driver_cuda or '?'}{f', >= {floor}' if floor else ''}) but not {what}: the "
        f"driver older than the toolkit is the wrong fact. {_cap(_upgrade(stack.app_cuda))}, ship "
        "native code (SASS) for the GPU (-gencode arch=compute_XX,code=sm_XX) so nothing is "
        f"JIT-compiled, or install {_builds_for(stack, minor_ok=False)}.",
        Action.FIX_SOFTWARE, Blame.JOB_CONFIG, evidence=ev, references=(DOC_COMPAT,),
        fix=f"{_upgrade(stack.app_cuda, floor_starts=False)}, or install "
            f"{_builds_for(stack, minor_ok=False)}, or "
            "rebuild with native code for the GPU (-gencode arch=compute_XX,code=sm_XX) so "
            f"nothing is JIT-compiled; {CUDA_BUILD_CHECK}")


def _ptx_too_new(stack: Stack, ev: list[Evidence]) -> Finding:
    """PTX from a toolkit newer than the driver's compiler, the toolkit not printed."""
    drv = (f"driver {stack.driver} (CUDA {stack.driver_cuda or '?'})" if stack.driver
           else "the node's driver")
    ask = "" if stack.driver else f" ({ASK_HOST})"
    need = (f" A toolkit newer than CUDA {stack.driver_cuda} built it: any driver of the "
            "toolkit's release or newer compiles it." if stack.driver_cuda else "")
    return finding(
        "cuda.driver-too-old", Severity.WARNING,
        f"{_cap(drv)} cannot compile the program's PTX: a newer CUDA toolkit built it",
        f"The program carries PTX (no native code for this GPU) produced by a newer CUDA "
        f"toolkit than {drv}{ask} understands, so the driver cannot JIT-compile it; minor-"
        f"version compatibility does not cover PTX.{need} Upgrade the driver to one of the "
        "toolkit's release or newer (nvcc --version, or the build's CUDA, names it), or "
        "rebuild the program with the toolkit the driver supports, or with native code for "
        "the GPU (-gencode arch=compute_XX,code=sm_XX). The GPU is not at fault.",
        Action.FIX_SOFTWARE, Blame.JOB_CONFIG, evidence=ev, references=(DOC_COMPAT,))


def _unseen(stack: Stack, ev: list[Evidence], fit: cc.Fit | None) -> Finding:
    drv = stack.driver or "the node's driver"
    why = (f"its CUDA {stack.app_cuda} runs on it" if fit is not None else
           f"it runs every CUDA {_ver(stack.driver_cuda)[0]}.x program under minor-version "
           "compatibility")
    return finding(
        "cuda.driver-unseen", Severity.WARNING,
        f"CUDA reports an insufficient driver, but {drv} (CUDA {stack.driver_cuda}) is enough",
        f"{drv} supports CUDA {stack.driver_cuda} and {why}, so error 35 means the process "
        "did not get that driver: a container started without the GPU (no --gpus / CDI "
        "device / runtimeClassName nvidia / nvidia.com/gpu request) has no libcuda, or a "
        "stale libcuda inside the image shadows the host's. Give the container the GPU; "
        "only if the program needs a newer major CUDA than the driver's is the driver short.",
        Action.FIX_CONFIG, Blame.JOB_CONFIG, evidence=ev, references=(DOC_COMPAT,))


# --- architectures ----------------------------------------------------------------------

def _covers(archs: Sequence[str], capability: str) -> bool:
    """Whether a build of ``archs`` runs on a GPU of ``capability``: a cubin of the same
    major and a minor not above the GPU's, or PTX of an older or equal capability."""
    gpu = _ver(capability)[:2]
    for a in archs:
        arch = cc.arch_of(a)
        c = _ver(arch.capability if arch else None)[:2]
        if not c:
            continue
        if a.startswith("sm_") and c[0] == gpu[0] and c[1] <= gpu[1]:
            return True
        if a.startswith("compute_") and c <= gpu:
            return True
    return False


def _no_image(log: JobLog, hits: list[Hit], stack: Stack) -> Finding | None:
    v = log.versions
    cap = stack.capability
    if not hits and not (cap and v.archs and not _covers(v.archs, cap)):
        return None
    ev = _ev(log, hits, stack, "gpu_name", "capability", "archs", "torch", "torch_cuda")
    sm = cc.sm_name(cap)
    first = cc.first_cuda_for(cap)
    if cap is None or first is None:
        return finding(
            "cuda.no-kernel-image", Severity.WARNING,
            "the build carries no kernel for this GPU",
            "The program (or a library) was compiled without code for this GPU's "
            "architecture. Print the GPU's compute capability (nvidia-smi --query-gpu="
            "name,compute_cap) and the build's architectures (torch.cuda.get_arch_list()), "
            "then install a build made with a CUDA release that targets that GPU.",
            Action.FIX_SOFTWARE, Blame.JOB_CONFIG, evidence=ev, references=(DOC_NOTES,))
    built = f" ({' '.join(v.archs)})" if v.archs else ""
    tag = next((t for t in ("cu92", "cu100", "cu102", "cu110", "cu111", "cu118", "cu128",
                            "cu129", "cu130")
                if _ver(cc.cuda_from_tag(t)) >= _ver(first)), None)
    if stack.driver_cuda and _ver(stack.driver_cuda)[:2] >= _ver(first)[:2]:
        driver = f"The node's driver (CUDA {stack.driver_cuda}) already supports CUDA {first}."
    elif stack.driver_cuda:
        driver = (f"The node's driver supports only CUDA {stack.driver_cuda}: upgrade it to "
                  f">= {cc.min_driver(first)} as well.")
    else:
        driver = (f"Check that the node's driver supports CUDA {first} (>= "
                  f"{cc.min_driver(first)}): {ASK_HOST}.")
    return finding(
        "cuda.no-kernel-image", Severity.WARNING,
        f"{stack.gpu or 'the GPU'} is {sm}; the installed build has no kernel for it",
        f"The compiled architectures{built} are the wrong fact: none runs on "
        f"{stack.gpu or 'this GPU'} (compute capability {cap}). CUDA {first} is the first "
        f"release that builds for {sm}: install a build made with CUDA {first} or later"
        f"{f' (e.g. the PyTorch {tag} wheel)' if tag else ''}. {driver}",
        Action.FIX_SOFTWARE, Blame.JOB_CONFIG, evidence=ev, references=(DOC_NOTES,))


# --- libcuda copies ---------------------------------------------------------------------

def _compat_paths(v: JobVersions) -> list[str]:
    return [p for p in v.libcuda if "compat" in p.lower()]


def _forward_compat(log: JobLog, hits: list[Hit], stack: Stack) -> Finding:
    v = log.versions
    ev = _ev(log, hits, stack, "gpu_name", "libcuda", *(f"libcuda:{p}" for p in v.libcuda))
    gpu = stack.gpu or "this GPU"
    supported = cc.forward_compat_supported(stack.gpu)
    compat = _compat_paths(v)
    where = (f"take the compat directory ({compat[0].rsplit('/', 1)[0]}) off LD_LIBRARY_PATH "
             "and the ld.so configuration" if compat else
             "take any cuda-compat directory (/usr/local/cuda-*/compat) off LD_LIBRARY_PATH "
             "and the ld.so configuration")
    if supported is False:
        head = (f"{gpu} is not a data-center GPU: forward compatibility (a newer libcuda from "
                "the cuda-compat package) does not work on it.")
    elif supported:
        head = (f"{gpu} supports forward compatibility, but not with this driver branch or "
                "this mix of driver halves.")
    else:
        head = ("Forward compatibility works only on data-center GPUs; the GPU's model is not "
                "in this output (run `gputriage check` on the node to see it).")
    if compat:  # the job put a compat libcuda on its path: its setting
        return finding(
            "cuda.forward-compat-unsupported", Severity.WARNING,
            f"forward compatibility attempted on {gpu}",
            f"{head} Either {where}; or, if no compat library is in use, the kernel module "
            "and the user-space driver differ after a driver update: reboot (or reload the "
            "driver) so both halves match.",
            Action.FIX_CONFIG, Blame.CONFIG, evidence=ev, references=(DOC_COMPAT,))
    return finding(
        "cuda.forward-compat-unsupported", Severity.WARNING,
        f"forward compatibility attempted on {gpu}: the node's driver does not serve the "
        "program's CUDA",
        f"{head} A container image (NGC, PyTorch) turns its cuda-compat libraries on when "
        "the host's driver is older than its CUDA, so the error says the node's driver is "
        "too old for the image: upgrade the host's driver to one that supports the image's "
        "CUDA (what fixed it in known cases), or run an image built for the driver's CUDA. "
        "If the driver was just updated in place, reboot (or reload it) so the kernel "
        f"module and the user-space driver match; otherwise {where}. Node software: the "
        "GPU is not at fault.", Action.FIX_SOFTWARE, Blame.NODE, evidence=ev,
        references=(DOC_COMPAT,))


def _shadowing(log: JobLog, stack: Stack) -> Finding | None:
    v = log.versions
    compat = _compat_paths(v)
    if len(v.libcuda) < 2 or not compat:
        return None
    others = [p for p in v.libcuda if p not in compat]
    ev = _ev(log, [], stack, *(f"libcuda:{p}" for p in v.libcuda))
    return finding(
        "cuda.compat-lib-shadowing", Severity.WARNING,
        f"a compat libcuda ({compat[0]}) shadows the driver's",
        f"Two libcuda.so.1 are on the library path: {compat[0]} (forward compatibility) and "
        f"{', '.join(others) or 'the driver'}'s. The compat copy wins; it works only on "
        "data-center GPUs with a supported driver branch, and gives errors 803/804 elsewhere. "
        "Remove it from the path unless forward compatibility is intended.",
        Action.FIX_CONFIG, Blame.CONFIG, evidence=ev, references=(DOC_COMPAT,))


@rule("cuda.compatibility",
      produces=("cuda.driver-too-old", "cuda.driver-unseen", "cuda.no-kernel-image",
                "cuda.forward-compat-unsupported", "cuda.compat-lib-shadowing"))
def compatibility(job_log: JobLog, driver_versions: DriverVersions | None = None,
                  visible_gpus: tuple[str, list[GpuSighting]] | None = None
                  ) -> Iterator[Finding]:
    """CUDA compatibility as arithmetic: the job's errors and versions against the
    driver (the host's, else the one the job printed): a driver older than the program's
    CUDA, minor-version compatibility's limits (PTX JIT), a build without code for the
    GPU, forward compatibility on a GPU that has none, a compat libcuda on the path."""
    stack = _stack(job_log.versions, driver_versions, visible_gpus)
    if hits := _of(job_log, TOO_OLD):
        yield _too_old(job_log, hits, stack)
    elif _fit(stack) is cc.Fit.NO and stack.driver_cuda:
        yield _gap(set(), stack, _ev(job_log, [], stack, "torch", "torch_cuda", "runtime_cuda",
                                     "image_cuda", "image", "nvcc", "driver_cuda",
                                     "driver_version"))
    if (f := _no_image(job_log, _of(job_log, NO_IMAGE), stack)) is not None:
        yield f
    compat_hits = _of(job_log, {"cuda.804"})
    if compat_hits:
        yield _forward_compat(job_log, compat_hits, stack)
    elif not _of(job_log, {"cuda.803"}) and (f := _shadowing(job_log, stack)) is not None:
        yield f
