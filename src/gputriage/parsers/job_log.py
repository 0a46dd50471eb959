"""A job's own output read for the GPU stack's failures: the messages of the catalog
(:mod:`gputriage.knowledge.job_messages`: CUDA, NVML, container stack, frameworks)
wherever they sit (tracebacks, framework prefixes, container logs), the versions the
job printed (framework, CUDA runtime, driver, compute capability, compiled
architectures, libcuda copies) and where it ran (:mod:`gputriage.parsers.job_context`).

Everything else in a job log is ignored: a paste needs one recognised line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.ingest.paste import PasteDoc
from gputriage.knowledge.job_messages import Hit, scan_line
from gputriage.parsers.job_context import JobContext, read_context

__all__ = ["JobLog", "JobVersions", "claim_job_log", "is_job_line", "parse_job_log"]


@dataclass
class JobVersions:
    """Versions and capabilities as the job printed them (``None``: not printed).

    CUDA versions are ``"major.minor"`` strings (``"12.8"``); a driver's CUDA version
    printed as an integer (``11040``, PyTorch's ``found version``) is converted."""

    torch: str | None = None  # "2.7.0+cu128"
    torch_cuda: str | None = None  # torch.version.cuda
    cuda_available: bool | None = None  # torch.cuda.is_available()
    tensorflow: str | None = None
    jax: str | None = None
    cudnn: str | None = None
    nvcc: str | None = None  # "Cuda compilation tools, release 12.4"
    runtime_cuda: str | None = None  # the CUDA runtime the program was built with
    driver_cuda: str | None = None  # the newest CUDA the driver supports, as the job saw it
    driver_version: str | None = None  # "535.104.05" as the job printed it
    gpu_name: str | None = None
    capability: str | None = None  # compute capability of the GPU ("8.9"; sm_89)
    archs: tuple[str, ...] = ()  # compiled architectures ("sm_50", "sm_90", "compute_90")
    libcuda: tuple[str, ...] = ()  # libcuda.so paths (ldconfig -p): two = a shadowing copy
    image: str | None = None  # a container image the log names
    lines: dict[str, str] = field(default_factory=dict)  # field name -> the line it came from

    @property
    def app_cuda(self) -> str | None:
        """The CUDA version the program needs: its runtime, else its framework's."""
        return self.runtime_cuda or self.torch_cuda

    def any(self) -> bool:
        return bool(self.lines)


@dataclass
class JobLog:
    """What a job's output says of the GPU stack."""

    hits: list[Hit] = field(default_factory=list)
    versions: JobVersions = field(default_factory=JobVersions)
    context: JobContext = field(default_factory=JobContext)
    lines: list[str] = field(default_factory=list)  # the lines read, for evidence

    def of(self, family: str) -> list[Hit]:
        return [h for h in self.hits if h.message.family == family]

    def ids(self) -> set[str]:
        return {h.message.id for h in self.hits}


# --- versions ------------------------------------------------------------------------
_TORCH = re.compile(r"\btorch(?:\.__version__)?\s*[:=]?\s*(?P<v>\d+\.\d+(?:\.\d+)?"
                    r"(?:\.dev\d+)?(?:\+(?:cu\d+|cpu|rocm[\d.]+))?)\b")


def _read_versions(v: JobVersions, line: str) -> bool:
    """Apply one line to ``v``; False when it prints no version this parser reads."""
    if (m := _TORCH.search(line)) and v.torch is None:
        v.torch = m.group("v")
        v.lines["torch"] = line.strip()
        return True
    return False


def is_job_line(line: str) -> bool:
    """A line of the catalog or one that prints a version this parser reads."""
    return bool(scan_line(line)) or _read_versions(JobVersions(), line)


def parse_job_log(text: str) -> JobLog:
    """Parse a job's output into a :class:`JobLog`.

    Empty text gives an empty log; text with no message of the catalog and no version
    line raises :class:`ParseError`."""
    log = JobLog()
    if not text or not text.strip():
        return log
    raw = text.splitlines()
    for i, line in enumerate(raw):
        hits = scan_line(line, i)
        versions = _read_versions(log.versions, line)
        if hits or versions:
            log.hits.extend(hits)
            log.lines.append(line.strip())
    if not log.lines:
        raise ParseError("no CUDA, NVML, container-runtime or framework message and no "
                         "version line")
    log.context = read_context(raw)
    return log


def claim_job_log(doc: PasteDoc) -> None:
    """The lines of a job's output that carry a message of the catalog or a version."""
    for i, line in enumerate(doc.lines):
        if doc.owner[i] is None and is_job_line(line):
            doc.owner[i] = "job_log"
