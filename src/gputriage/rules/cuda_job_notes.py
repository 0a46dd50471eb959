"""What a job's output says that is not a failure: the GPU the program found (ollama's
"inference compute" line, ggml's "found N CUDA devices") and the platform's harmless
messages printed beside it (Tegra's production-mode fuse in a VM), so that a healthy
start reads as one.
"""

from __future__ import annotations

from collections.abc import Iterator

from gputriage.knowledge.job_messages import catalog
from gputriage.model import Action, Blame, Finding, Severity, evidence
from gputriage.parsers.job_log import JobLog
from gputriage.rules.base import finding, rule

FAMILY = "platform"
NOTE_IDS = tuple(m.id for m in catalog() if m.family == FAMILY)


@rule("cuda.job-notes", produces=("cuda.gpu-found", *NOTE_IDS))
def job_notes(job_log: JobLog) -> Iterator[Finding]:
    """The platform's messages of the catalog (their row's severity, harmless ones
    included), and, when the job printed no error, the GPU it said it found."""
    seen: set[str] = set()
    for hit in job_log.hits:
        msg = hit.message
        if msg.family != FAMILY or msg.id in seen:
            continue
        seen.add(msg.id)
        yield finding(msg.id, msg.severity, msg.meaning.rstrip("."),
                      f"{msg.cause} {msg.next}", msg.action, msg.blame,
                      evidence=[evidence("job_log", [hit.line.strip()])])
    v = job_log.versions
    failed = any(h.message.family != FAMILY for h in job_log.hits)
    if v.cuda_devices and not failed:
        gpu = v.gpu_name or "a GPU"
        cc = f", compute capability {v.capability}" if v.capability else ""
        drv = f", through the driver's CUDA {v.driver_cuda}" if v.driver_cuda else ""
        mem = f", {v.gpu_memory}" if v.gpu_memory else ""
        yield finding(
            "cuda.gpu-found", Severity.OK,
            f"the program found {v.cuda_devices} CUDA device(s): {gpu}{cc}",
            f"It initialised CUDA and found {gpu}{cc}{drv}{mem}, and printed no CUDA, NVML "
            "or framework error.", Action.NONE, Blame.UNKNOWN,
            evidence=[evidence("job_log", v.line("cuda_devices", "gpu_name"))])
